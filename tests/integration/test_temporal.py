"""memtrace flamegraph --temporal on real captures (the page itself is
tested in tests/browser/test_temporal_page.py)."""

import json

from conftest import run

from test_growth import SERVICE


def test_temporal_data_of_a_real_program(memtrace, script, tmp_path):
    """flamegraph --temporal on a real capture: the blocks live at each
    boundary add up to the tracked heap there, and those never freed to
    what is live at the end."""
    prog = script(SERVICE, "service.py")
    cap = tmp_path / "service.bin"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap, prog)
    out = tmp_path / "t.html"
    run(memtrace, "flamegraph", "--temporal", "-o", out, cap)
    html = out.read_text()
    T = json.loads(html.split('<script id="mt-data" type="application/json">')[1]
                   .split("</script>")[0])["temporal"]
    iv = T["intervals"]
    n = len(T["time_us"])
    assert n > 30 and T["samples_per_boundary"] == 1
    for j in range(n):
        live = sum(b for a, f, b in zip(iv["a"], iv["f"], iv["bytes"]) if a <= j and (f == -1 or f > j))
        assert live == T["heap"][j], j
    stats = json.loads(run(memtrace, "stats", "--json", cap).stdout)
    assert sum(b for f, b in zip(iv["f"], iv["bytes"]) if f == -1) == stats["totals"]["live_bytes_at_end"]


def test_more_samples_than_boundaries(memtrace, script, tmp_path):
    """Over 2,048 samples the boundaries are every 2^k samples: still
    exact at each of them."""
    prog = script("import time\n"
                  "keep, t0 = [], time.monotonic()\n"
                  "while time.monotonic() - t0 < 3.0:\n"
                  "    keep.append(bytearray(10_000))\n"
                  "    if len(keep) > 300:\n"
                  "        del keep[:150]\n"
                  "    time.sleep(0.0005)\n", "long.py")
    cap = tmp_path / "long.bin"
    run(memtrace, "run", "-q", "--memory-interval-ms", "1", "--python", "/usr/bin/python3",
        "-o", cap, prog)
    out = tmp_path / "t.html"
    run(memtrace, "flamegraph", "--temporal", "-o", out, cap)
    T = json.loads(out.read_text().split('<script id="mt-data" type="application/json">')[1]
                   .split("</script>")[0])["temporal"]
    iv = T["intervals"]
    assert T["samples_per_boundary"] >= 2 and len(T["time_us"]) <= 2049
    for j in range(len(T["time_us"])):
        live = sum(b for a, f, b in zip(iv["a"], iv["f"], iv["bytes"]) if a <= j and (f == -1 or f > j))
        assert live == T["heap"][j], j
