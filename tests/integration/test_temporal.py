"""memtrace flamegraph --temporal on real captures (the page itself is
tested in tests/browser/test_temporal_page.py)."""

import json
import os

import pytest

from conftest import python_params, run

from capture_writer import Capture
from test_flamegraph import flamegraph
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
    return c.trailer(5000).save(path)


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
        "f MALLOC 0  [(0, 3, 1, %d)]" % MB,
        "g MALLOC 0  [(1, None, 1, %d)]" % (2 * MB),
        "h MALLOC 0  [(2, 4, 1, %d)]" % (4 * MB),
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
    intervals live there add up to its heap, and the high-water-mark
    shares to each stretch's mark (and at the end to the leaks);
    aggregated captures refuse."""
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
                    "hrecs, marks = r.get_temporal_high_water_mark_allocation_records()\n"
                    "assert len(marks) == len(heap) + 1\n"
                    "for k, m in enumerate(marks + [None]):\n"
                    "    share = sum(i.n_bytes for x in hrecs for i in x.intervals\n"
                    "                if i.allocated_before_snapshot <= k and\n"
                    "                (i.deallocated_before_snapshot is None or i.deallocated_before_snapshot > k))\n"
                    "    assert share == (m if m is not None else sum(\n"
                    "        x.size for x in r.get_leaked_allocation_records())), (k, share, m)\n"
                    "    assert m is None or m >= (heap[k] if k < len(heap) else 0), (k, m)\n"
                    "with memtrace.Tracker('a.bin', file_format=memtrace.FileFormat.AGGREGATED_ALLOCATIONS):\n"
                    "    x = bytearray(1000)\n"
                    "for f in ('get_temporal_allocation_records',\n"
                    "          'get_temporal_high_water_mark_allocation_records'):\n"
                    "    try:\n"
                    "        getattr(memtrace.FileReader('a.bin'), f)()\n"
                    "    except NotImplementedError as e:\n"
                    "        print(e)\n")
    p = run(python, prog, cwd=tmp_path, env=py_env())
    assert p.stdout.splitlines() == [
        "snapshots True records True"] + [
        "Can't get allocation history using a pre-aggregated capture file."] * 2, p.stdout


READ_HWM = """
import json, sys, memtrace
r = memtrace.FileReader(sys.argv[1], max_memory_records=int(sys.argv[2]))
recs, hwm = r.get_temporal_high_water_mark_allocation_records(merge_threads=sys.argv[3] == "1")
print(json.dumps({"hwm": hwm, "recs": [[rec.stack_id, rec.tid,
    [[i.allocated_before_snapshot, i.deallocated_before_snapshot, i.n_allocations, i.n_bytes]
     for i in rec.intervals]] for rec in recs]}))
"""


def expected_hwm(events, n_samples, stride, merge):
    """memray's definition, by brute force: the stretches between kept
    snapshots, the latest moment of each one's highest heap (its start
    included), each (stack, thread)'s live bytes and blocks there."""
    live, heap, states = {}, 0, []  # states: (heap, {key: (bytes, count)}) after each step
    stretches, current, seen = [], [], 0

    def state():
        per = {}
        for key, size in live.values():
            b, c = per.get(key, (0, 0))
            per[key] = (b + size, c + 1)
        return (heap, per)

    current.append(state())
    for ev in events:
        if ev[0] == "sample":
            seen += 1
            if (seen - 1) % stride == 0:
                stretches.append(current)
                current = [state()]
            continue
        if ev[0] == "alloc":
            _, addr, size, stack, thread = ev
            live[addr] = ((stack, 0 if merge else thread), size)
            heap += size
        else:
            key, size = live.pop(ev[1])
            heap -= size
        current.append(state())
    stretches.append(current)
    marks, shares = [], []
    for st in stretches:
        best = max(range(len(st)), key=lambda i: (st[i][0], i))
        marks.append(st[best][0])
        shares.append(st[best][1])
    shares.append(state()[1])  # the end
    runs = {}
    for k, per in enumerate(shares):
        for key in set(per) | set(runs):
            v = per.get(key, (0, 0))
            r = runs.setdefault(key, [])
            if (r[-1][1] if r else (0, 0)) != v:
                r.append((k, v))
    out = {}
    for key, r in runs.items():
        iv = [[p, r[i + 1][0] if i + 1 < len(r) else None, c, b]
              for i, (p, (b, c)) in enumerate(r) if b or c]
        if iv:
            out[key] = iv
    return marks, out


@pytest.mark.parametrize("seed", list(range(4)) + ["ties"])
def test_temporal_high_water_marks_by_brute_force(memtrace, tmp_path, seed):
    """Random events (every block of one size for "ties": a stretch's mark
    is then the latest of equal heights) against expected_hwm()."""
    import random
    rnd = random.Random(seed)
    c = Capture()
    c.thread(0, 100, "MainThread").thread(1, 101, "worker")
    c.code(1, "/app/t.py", "<module>", 1)
    for s in range(2, 6):
        c.code(s, "/app/t.py", "f%d" % s, s).stack(1, 0, 1).stack(s, 1, s)
    events, live, addr, t = [], [], 0x100000, 0
    for _ in range(400):
        x = rnd.random()
        if x < 0.45 or not live:
            addr += 0x1000
            size = 1000 if seed == "ties" else rnd.randrange(1, 5000)
            ev = ("alloc", addr, size, rnd.randrange(2, 6), rnd.randrange(2))
            c.alloc(addr, ev[2], stack=ev[3], thread=ev[4])
            live.append(addr)
        elif x < 0.85:
            a = live.pop(rnd.randrange(len(live)))
            ev = ("free", a)
            c.free(a)
        else:
            t += 1000
            ev = ("sample",)
            c.flush().sample(t, 1 << 24)
        events.append(ev)
    c.flush()
    cap = c.trailer(t + 1000).save(tmp_path / "r.bin")
    n_samples = sum(1 for e in events if e[0] == "sample")
    prog = tmp_path / "read.py"
    prog.write_text(READ_HWM)
    for max_records, merge in ((10000, True), (10000, False), (max(1, n_samples // 3), True)):
        stride = -(-n_samples // max_records) if n_samples > max_records else 1
        got = json.loads(run("/usr/bin/python3", prog, cap, max_records, int(merge),
                             env=py_env()).stdout)
        marks, want = expected_hwm(events, n_samples, stride, merge)
        assert got["hwm"] == marks
        tid = {0: 100, 1: 101}
        got_runs = {(stack, 0 if merge else [k for k, v in tid.items() if v == t][0]): iv
                    for stack, t, iv in got["recs"]}
        assert got_runs == {k: [list(x) for x in v] for k, v in want.items()}, (max_records, merge)


def test_max_memory_records_below_one_is_refused(tmp_path):
    """memray refuses a negative bound (OverflowError); it used to give no
    snapshots at all here."""
    cap = temporal_capture(tmp_path / "t.bin")
    code = ("import sys, memtrace\n"
            "for bad in (0, -1, 1.5, '3'):\n"
            "    try:\n"
            "        memtrace.FileReader(sys.argv[1], max_memory_records=bad)\n"
            "    except ValueError as e:\n"
            "        print(e)\n"
            "print(len(list(memtrace.FileReader(sys.argv[1], max_memory_records=1)"
            ".get_memory_snapshots())))\n")
    out = run("/usr/bin/python3", "-c", code, cap, env=py_env()).stdout.splitlines()
    assert out == ["max_memory_records must be a whole number from 1, not %s" % v
                   for v in ("0", "-1", "1.5", "'3'")] + ["1"], out


def test_peak_time_between_samples_far_apart(memtrace, script, tmp_path):
    """Events carry no time: the peak is known to the samples around it,
    and where they are far apart (a long memory interval) the reports say
    between which two it was, not the time of the first as if exact."""
    prog = script("import time\n"
                  "time.sleep(1.3)\n"
                  "x = bytearray(30_000_000)\n"
                  "time.sleep(0.4)\n")
    for interval, between in ((1000, True), (10, False)):
        cap = tmp_path / ("c%d.bin" % interval)
        run(memtrace, "run", "-q", "--memory-interval-ms", str(interval), "--python",
            "/usr/bin/python3", "-o", cap, prog)
        totals = json.loads(run(memtrace, "stats", "--json", cap).stdout)["totals"]
        first, until = totals["peak_time_us"], totals["peak_time_until_us"]
        assert first < until, totals
        # the allocation came some 1.3 s in: within the two samples
        assert first <= 1_500_000 and until >= 1_250_000, totals
        assert (until - first > 500_000) == between, totals
        lines = [l for l in run(memtrace, "stats", cap).stdout.splitlines()
                 if "peak tracked heap:" in l]
        assert len(lines) == 1 and ("(between " in lines[0]) == between, lines
        assert ("between " in run(memtrace, "summary", cap).stdout.splitlines()[0]) == between
        d, html = flamegraph(memtrace, cap)  # the page's subtitle says it from these
        assert (d["peak_time_us"], d["peak_until_us"]) == (first, until), d


def test_aggregated_peak_time_between_samples_far_apart(memtrace, script, tmp_path):
    """An aggregated capture's TOTALS give the sample before the peak; the
    sample after it is in the capture as well: its reports say between
    which two the peak was, as those of a capture of events do."""
    prog = script("import time\n"
                  "time.sleep(1.3)\n"
                  "x = bytearray(30_000_000)\n"
                  "time.sleep(0.4)\n")
    cap = tmp_path / "agg.bin"
    run(memtrace, "run", "-q", "--aggregate", "--memory-interval-ms", "1000", "--python",
        "/usr/bin/python3", "-o", cap, prog)
    totals = json.loads(run(memtrace, "stats", "--json", cap).stdout)["totals"]
    first, until = totals["peak_time_us"], totals["peak_time_until_us"]
    assert first <= 1_500_000 and until >= 1_250_000 and until - first > 500_000, totals
    lines = [l for l in run(memtrace, "stats", cap).stdout.splitlines()
             if "peak tracked heap:" in l]
    assert len(lines) == 1 and "(between " in lines[0], lines
    assert "between " in run(memtrace, "summary", cap).stdout.splitlines()[0]
