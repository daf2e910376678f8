"""memtrace flamegraph --temporal on real captures (the page itself is
tested in tests/browser/test_temporal_page.py)."""

import json
import os

import pytest

from conftest import python_params, run

from capture_writer import Capture
from test_growth import SERVICE
from test_python_api import py_env

MB = 1 << 20


def temporal_capture(path):
    """Samples at 1, 2, 3 and 4 ms, the end at 5 ms. f: 1 MB before the
    first sample, freed after the third; g: 2 MB after the first, kept; h:
    4 MB after the second, freed after the fourth; k: 8 MB after the third,
    freed before the fourth (never live at a sample)."""
    c = Capture()
    c.thread(0, 100, "MainThread")
    c.code(1, "/app/t.py", "<module>", 1)
    for i, name in enumerate("fghk"):
        c.code(2 + i, "/app/t.py", name, 10 * (i + 1))
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 1, 3).stack(4, 1, 4).stack(5, 1, 5)
    c.alloc(0x100000, 1 * MB, stack=2).flush().sample(1000, 50 * MB)
    c.alloc(0x1000000, 2 * MB, stack=3).flush().sample(2000, 50 * MB)
    c.alloc(0x2000000, 4 * MB, stack=4).flush().sample(3000, 50 * MB)
    c.free(0x100000).alloc(0x4000000, 8 * MB, stack=5).free(0x4000000).flush().sample(4000, 50 * MB)
    c.free(0x2000000).flush()
    return c.trailer(5000, 9, 0).save(path)


READ = """
import sys, memtrace
r = memtrace.FileReader(sys.argv[1], max_memory_records=int(sys.argv[2]))
for rec in r.get_temporal_allocation_records(merge_threads=sys.argv[3] == "1"):
    print(rec.stack_trace()[0][0], rec.allocator.name, rec.tid, rec.thread_name,
          [(i.allocated_before_snapshot, i.deallocated_before_snapshot, i.n_allocations,
            i.n_bytes) for i in rec.intervals])
print("heap", [s.heap for s in r.get_memory_snapshots()])
"""


def read_temporal(tmp_path, cap, max_records=10000, merge=True):
    prog = tmp_path / "read.py"
    prog.write_text(READ)
    return run("/usr/bin/python3", prog, cap, max_records, int(merge), env=py_env()).stdout


def test_temporal_records_of_a_hand_made_capture(memtrace, tmp_path):
    cap = temporal_capture(tmp_path / "t.bin")
    out = read_temporal(tmp_path, cap)
    assert out.splitlines() == [
        "f MALLOC 0 (merged threads) [(0, 3, 1, %d)]" % MB,
        "g MALLOC 0 (merged threads) [(1, None, 1, %d)]" % (2 * MB),
        "h MALLOC 0 (merged threads) [(2, 4, 1, %d)]" % (4 * MB),
        "heap [%d, %d, %d, %d]" % (MB, 3 * MB, 7 * MB, 6 * MB)], out
    # one snapshot in two kept: the indexes are the kept snapshots'
    out = read_temporal(tmp_path, cap, max_records=2, merge=False)
    assert out.splitlines() == [
        "f MALLOC 100 MainThread [(0, 2, 1, %d)]" % MB,
        "g MALLOC 100 MainThread [(1, None, 1, %d)]" % (2 * MB),
        "h MALLOC 100 MainThread [(1, 2, 1, %d)]" % (4 * MB),
        "heap [%d, %d]" % (MB, 7 * MB)], out


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


@pytest.mark.parametrize("python", python_params())
def test_temporal_records_add_up_to_the_snapshots(memtrace, tmp_path, python):
    """A Tracker's capture on every interpreter: at each snapshot, the
    intervals live there add up to its heap; aggregated captures refuse."""
    prog = tmp_path / "prog.py"
    prog.write_text("import time, memtrace\n"
                    "keep = []\n"
                    "with memtrace.Tracker('t.bin'):\n"
                    "    for i in range(40):\n"
                    "        keep.append(bytearray(100_000))\n"
                    "        if i % 3 == 0:\n"
                    "            keep.pop(0)\n"
                    "        time.sleep(0.004)\n"
                    "r = memtrace.FileReader('t.bin')\n"
                    "heap = [s.heap for s in r.get_memory_snapshots()]\n"
                    "recs = list(r.get_temporal_allocation_records())\n"
                    "for j, h in enumerate(heap):\n"
                    "    live = sum(i.n_bytes for x in recs for i in x.intervals\n"
                    "               if i.allocated_before_snapshot <= j and\n"
                    "               (i.deallocated_before_snapshot is None or i.deallocated_before_snapshot > j))\n"
                    "    assert live == h, (j, live, h)\n"
                    "print('snapshots', len(heap) > 10, 'records', len(recs) > 0)\n"
                    "with memtrace.Tracker('a.bin', file_format=memtrace.FileFormat.AGGREGATED_ALLOCATIONS):\n"
                    "    x = bytearray(1000)\n"
                    "try:\n"
                    "    memtrace.FileReader('a.bin').get_temporal_allocation_records()\n"
                    "except NotImplementedError as e:\n"
                    "    print(e)\n")
    p = run(python, prog, cwd=tmp_path, env=py_env())
    assert p.stdout.splitlines() == [
        "snapshots True records True",
        "Can't get allocation history using a pre-aggregated capture file."], p.stdout
