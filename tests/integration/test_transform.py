"""memtrace transform csv|gprof2dot|speedscope, memray's transform: exact
rows of hand-made captures, CSV read back with Python's csv module (names
with commas, quotes and newlines), the JSON gprof2dot reads, speedscope's
profiles, a real program against FileReader, default file names, and every
bad input; and stats -o, memray's stats --json layout."""

import collections
import csv
import io
import json
import math
import os

import pytest

from conftest import BUILD, ROOT, run

from capture_writer import CALLOC, MMAP, MUNMAP, Capture

MB = 1 << 20
HEADER = ["allocator", "num_allocations", "size", "tid", "thread_name", "stack_trace"]


def program():
    """test_reports.py's: main -> f allocates 10 MB and frees it (the
    peak); main -> g keeps 3 MB; a worker thread keeps 1 MB outside
    Python; an mmap of 16 pages loses one."""
    c = Capture()
    c.thread(0, 4242, "MainThread").thread(1, 4243, "worker")
    c.alloc(0x100000, 10 * MB, stack=2)
    c.alloc(0x2000000, 3 * MB, stack=3).flush()
    c.sample(1000, 40 * MB)
    c.free(0x100000)
    c.free(0xDEAD0)
    c.alloc(0x3000000, 1 * MB, stack=0, kind=CALLOC, thread=1).flush()
    c.alloc(0x7F0000000000, 16 * 4096, stack=3, kind=MMAP)
    c.free(0x7F0000001000, 4096, kind=MUNMAP)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 1, 3)
    c.code(1, "/app/prog.py", "<module>", 1).code(2, "/app/prog.py", "f", 5)
    c.code(3, "/app/prog.py", "g", 9)
    c.trailer(2000, dropped=4)
    return c


def rows_of(path):
    """The CSV as memray's readers see it: header, then the rows."""
    with open(path, newline="") as f:
        data = f.read()
    # Python's csv.writer ends every row with CR LF
    assert data.endswith("\r\n")
    table = list(csv.reader(io.StringIO(data, newline="")))
    assert table[0] == HEADER
    return table[1:]


MAIN = "0x1092 (MainThread)"
F_STACK = "f;/app/prog.py;5|<module>;/app/prog.py;1"
G_STACK = "g;/app/prog.py;9|<module>;/app/prog.py;1"


def test_csv_peak_rows(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    p = run(memtrace, "transform", "csv", cap)
    out = tmp_path / "memtrace-csv-p.csv"
    assert p.stdout == "wrote %s (%d B)\n" % (out, out.stat().st_size) and p.stderr == ""
    assert rows_of(out) == [
        ["MALLOC", "1", str(10 * MB), "4242", MAIN, F_STACK],
        ["MALLOC", "1", str(3 * MB), "4242", MAIN, G_STACK],
    ]


def test_csv_leaks_and_temporary(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    out = tmp_path / "l.csv"
    run(memtrace, "transform", "csv", "--leaks", "-o", out, cap)
    leaks = rows_of(out)
    stats = json.loads(run(memtrace, "stats", "--json", cap).stdout)["totals"]
    # memray's rows: one per call path and thread, whatever the allocator,
    # so the mapping made on g's line is in the row of its malloc
    assert [r[:1] + r[3:] for r in leaks] == [
        ["MALLOC", "4242", MAIN, G_STACK],
        ["CALLOC", "4243", "0x1093 (worker)", ""],
    ]
    assert [int(r[2]) for r in leaks] == [3 * MB + 15 * 4096, MB]
    assert int(leaks[0][1]) >= 2 and leaks[1][1] == "1"
    assert sum(int(r[1]) for r in leaks) == stats["live_allocations_at_end"]
    run(memtrace, "transform", "csv", "--temporary-allocations", "-f", "-o", out, cap)
    assert rows_of(out) == [["MALLOC", "1", str(10 * MB), "4242", MAIN, F_STACK]]
    # with nothing in between, the 10 MB (3 MB was allocated first) is not temporary
    run(memtrace, "transform", "csv", "--temporary-allocation-threshold", "0", "-f", "-o", out,
        cap)
    assert rows_of(out) == []


AWKWARD_FN = 'we,ird "fn"\nline2'
AWKWARD_FILE = '/app/a,b "c".py'


def awkward(end=True):
    """A function and a file with commas, quotes and a newline in their
    names, a thread name with a comma, and a method (qualified name
    K.meth, which memray gives as meth); @end: with its TRAILER."""
    c = Capture()
    c.thread(0, 77, 'main, "the" one')
    c.alloc(0x1000, 100, stack=2).alloc(0x2000, 50, stack=3).alloc(0x3000, 7, stack=3)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 2, 3)
    c.code(1, AWKWARD_FILE, "<module>", 1).code(2, AWKWARD_FILE, AWKWARD_FN, 3)
    c.code(3, "/app/k.py", "K.meth", 12)
    return c.trailer(10) if end else c


def test_csv_awkward_names_read_back(memtrace, tmp_path):
    cap = awkward().save(tmp_path / "a.bin")
    out = tmp_path / "a.csv"
    run(memtrace, "transform", "csv", "-o", out, cap)
    raw = out.read_bytes().decode()
    # quoted as Python's csv module quotes: the doubled quotes are there
    assert '""fn""' in raw
    assert rows_of(out) == [
        ["MALLOC", "1", "100", "77", '0x4d (main, "the" one)',
         "%s;%s;3|<module>;%s;1" % (AWKWARD_FN, AWKWARD_FILE, AWKWARD_FILE)],
        ["MALLOC", "2", "57", "77", '0x4d (main, "the" one)',
         "meth;/app/k.py;12|%s;%s;3|<module>;%s;1" % (AWKWARD_FN, AWKWARD_FILE, AWKWARD_FILE)],
    ]
    # and as memray writes it, byte for byte: csv.writer's own output
    want = io.StringIO(newline="")
    w = csv.writer(want)
    w.writerow(HEADER)
    for r in rows_of(out):
        w.writerow(r)
    assert raw == want.getvalue()


def gprof2dot_of(path):
    """The JSON, checked against the layout memray writes and gprof2dot's
    JSON parser reads: version 0, one cost, functions and events."""
    with open(path) as f:
        g = json.load(f)
    assert list(g) == ["version", "costs", "events", "functions"]
    assert g["version"] == 0
    assert g["costs"] == [{"description": "Memory", "unit": "bytes"}]
    for fn in g["functions"]:
        assert sorted(fn) == ["module", "name"]
        assert isinstance(fn["name"], str) and isinstance(fn["module"], str)
    for ev in g["events"]:
        assert sorted(ev) == ["callchain", "cost"]
        assert ev["callchain"] and all(isinstance(i, int) and 0 <= i < len(g["functions"])
                                       for i in ev["callchain"])
        assert len(ev["cost"]) == 1 and isinstance(ev["cost"][0], int)
    return g


# the one frame of a call chain without frames (memray's writer leaves
# such rows out; memtrace keeps their bytes, as its other reports do)
NO_FRAMES = "<no Python frames>;;0"


def expected_gprof2dot(rows):
    """What memray's writer makes of the CSV's rows: functions by
    (name, file) in order of first use, an event per row, a row without
    frames under NO_FRAMES."""
    index, functions, events = {}, [], []
    for r in rows:
        chain = []
        for frame in (r[5] or NO_FRAMES).split("|"):
            name, module, _ = frame.rsplit(";", 2)
            if (name, module) not in index:
                index[(name, module)] = len(functions)
                functions.append({"name": name, "module": module})
            chain.append(index[(name, module)])
        events.append({"callchain": chain, "cost": [int(r[2])]})
    return functions, events


def test_gprof2dot_layout(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    p = run(memtrace, "transform", "gprof2dot", cap)
    out = tmp_path / "memtrace-gprof2dot-p.json"
    assert p.stdout.splitlines()[0] == "wrote %s (%d B)" % (out, out.stat().st_size)
    assert "gprof2dot -f json '%s'" % out in p.stdout
    g = gprof2dot_of(out)
    assert g["functions"] == [{"name": "f", "module": "/app/prog.py"},
                              {"name": "<module>", "module": "/app/prog.py"},
                              {"name": "g", "module": "/app/prog.py"}]
    assert g["events"] == [{"callchain": [0, 1], "cost": [10 * MB]},
                           {"callchain": [2, 1], "cost": [3 * MB]}]
    # the leaks: the worker's block has no Python frames, and is under a
    # frame that says so; g's malloc and mapping are one record, as memray's
    run(memtrace, "transform", "gprof2dot", "--leaks", "-f", "-o", out, cap)
    g = gprof2dot_of(out)
    assert g["events"] == [{"callchain": [0, 1], "cost": [3 * MB + 15 * 4096]},
                           {"callchain": [2], "cost": [1 * MB]}]
    assert [f["name"] for f in g["functions"]] == ["g", "<module>", "<no Python frames>"]


def test_gprof2dot_awkward_names(memtrace, tmp_path):
    cap = awkward().save(tmp_path / "a.bin")
    run(memtrace, "transform", "csv", "-o", tmp_path / "a.csv", cap)
    run(memtrace, "transform", "gprof2dot", "-o", tmp_path / "a.json", cap)
    g = gprof2dot_of(tmp_path / "a.json")
    functions, events = expected_gprof2dot(rows_of(tmp_path / "a.csv"))
    assert (g["functions"], g["events"]) == (functions, events)
    assert g["functions"][0]["name"] == AWKWARD_FN


def expected_speedscope(rows, command_line):
    """What memray's speedscope writer makes of the CSV's rows: frames by
    (name, file, line) in order of first use, root first; rows whose
    frames read the same are one sample; samples of weight 0 left out of
    a profile; a row without frames under NO_FRAMES."""
    index, frames, weights = {}, [], {}
    for r in rows:
        sample = []
        for frame in reversed((r[5] or NO_FRAMES).split("|")):
            name, file, line = frame.rsplit(";", 2)
            key = (name, file, int(line))
            if key not in index:
                index[key] = len(frames)
                f = {"name": name}
                if file:
                    f["file"] = file
                if int(line) > 0:
                    f["line"] = int(line)
                frames.append(f)
            sample.append(index[key])
        w = weights.setdefault(tuple(sample), [0, 0])
        w[0] += int(r[2])
        w[1] += int(r[1])

    def profile(name, unit, k):
        kept = [(list(smp), w[k]) for smp, w in weights.items() if w[k] > 0]
        return {"type": "sampled", "name": name, "unit": unit, "startValue": 0,
                "endValue": sum(w for _, w in kept), "samples": [smp for smp, _ in kept],
                "weights": [w for _, w in kept]}
    return {"$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": frames},
            "profiles": [profile("Memory", "bytes", 0), profile("Allocations", "none", 1)],
            "name": command_line, "activeProfileIndex": 0}


def test_speedscope(memtrace, tmp_path):
    c = awkward(end=False)
    # a second stack whose frames read the same as stack 3's (another
    # bytecode offset on the same line), and a block of 0 bytes elsewhere
    c.alloc(0x4000, 5, stack=4).alloc(0x5000, 0, stack=5)
    c.stack(4, 2, 3, 2).stack(5, 1, 4).code(4, "/app/z.py", "zero", 2).trailer(10)
    cap = c.save(tmp_path / "a.bin")
    run(memtrace, "transform", "csv", cap)
    rows = rows_of(tmp_path / "memtrace-csv-a.csv")
    # memray's rows: stacks 3 and 4 print alike and are one
    assert [r[1:3] for r in rows] == [["1", "100"], ["3", "62"], ["1", "0"]], rows
    p = run(memtrace, "transform", "speedscope", cap)
    out = tmp_path / "memtrace-speedscope-a.speedscope.json"
    assert p.stdout.startswith("wrote %s (" % out)
    got = json.loads(out.read_text())
    assert got.pop("exporter").startswith("memtrace@")
    assert got == expected_speedscope(rows, "python3 prog.py")
    assert got["profiles"][0]["weights"] == [100, 62]      # 50 + 7 + 5 bytes merged
    assert got["profiles"][1]["weights"] == [1, 3, 1]      # ... and the block of 0 bytes counted
    assert len(got["shared"]["frames"]) == 4


def test_output_to_stdout(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    p = run(memtrace, "transform", "gprof2dot", "-o", "-", cap)
    assert json.loads(p.stdout)["version"] == 0
    assert not list(tmp_path.glob("memtrace-*"))


@pytest.mark.parametrize("fmt, capture, name", [
    ("CSV", "p.bin", "memtrace-csv-p.csv"),  # the format's case does not matter, as in memray
    ("csv", "memtrace-prog.py.123.bin", "memtrace-csv-prog.py.123.csv"),  # run's default name
    ("csv", "noext", "memtrace-csv-noext.csv"),
    ("gprof2dot", "p.bin", "memtrace-gprof2dot-p.json"),
    ("speedscope", "p.bin", "memtrace-speedscope-p.speedscope.json"),
])
def test_default_names(memtrace, tmp_path, fmt, capture, name):
    sub = tmp_path / "d"
    sub.mkdir()
    cap = program().save(sub / capture)
    run(memtrace, "transform", fmt, cap)
    assert sorted(os.listdir(sub)) == sorted([capture, name])


def test_real_program_against_filereader(memtrace, tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import threading\n"
        "def hold():\n"
        "    return bytearray(8_000_000)\n"
        "def side():\n"
        "    side.kept = bytearray(3_000_000)\n"
        "keep = hold()\n"
        "t = threading.Thread(target=side, name='side,thread')\n"
        "t.start(); t.join()\n")
    cap = tmp_path / "cap.bin"
    run(memtrace, "run", "-q", "-o", cap, script, cwd=tmp_path)
    run(memtrace, "transform", "csv", cap)
    rows = rows_of(tmp_path / "memtrace-csv-cap.csv")
    hold = [r for r in rows if r[5].startswith("hold;%s;3|<module>;%s;6" % (script, script))]
    assert len(hold) == 1 and int(hold[0][2]) >= 8_000_000 and hold[0][0] == "MALLOC"
    side = [r for r in rows if r[5].startswith("side;%s;5|" % script)]
    assert len(side) == 1 and side[0][4].endswith(" (side,thread)")
    assert side[0][4] == "%#x (side,thread)" % int(side[0][3])
    peak = json.loads(run(memtrace, "stats", "--json", cap).stdout)["totals"]["peak_heap"]
    assert sum(int(r[2]) for r in rows) == peak
    # the same records FileReader gives, per thread, joined as memray joins them
    code = (
        "import csv, sys, memtrace\n"
        "r = memtrace.FileReader(sys.argv[1])\n"
        "w = csv.writer(sys.stdout)\n"
        "for rec in r.get_high_watermark_allocation_records(merge_threads=False):\n"
        "    w.writerow([rec.allocator.name, rec.n_allocations, rec.size, rec.tid,\n"
        "                '|'.join('%s;%s;%d' % f for f in rec.stack_trace())])\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD)
    ref = run("/usr/bin/python3", "-c", code, cap, env=env).stdout
    want = sorted(list(csv.reader(io.StringIO(ref, newline=""))))
    assert sorted(r[:4] + r[5:] for r in rows) == want
    run(memtrace, "transform", "gprof2dot", cap)
    g = gprof2dot_of(tmp_path / "memtrace-gprof2dot-cap.json")
    assert (g["functions"], g["events"]) == expected_gprof2dot(rows)
    run(memtrace, "transform", "speedscope", cap)
    got = json.loads((tmp_path / "memtrace-speedscope-cap.speedscope.json").read_text())
    got.pop("exporter")
    assert got == expected_speedscope(rows, got["name"])
    assert got["name"].endswith(" %s" % script)


C_THREAD = r"""
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
void *volatile kept;
static void *body(void *arg) { kept = malloc(10000000); memset(kept, 1, 10000000); return arg; }
void spawn(void) { pthread_t t; pthread_create(&t, NULL, body, NULL); pthread_join(t, NULL); }
"""


def test_blocks_without_frames_counted(memtrace, tmp_path, cc):
    """A thread started from C keeps 10 MB: no Python frame allocated it,
    yet gprof2dot's events and speedscope's profiles have its bytes, under
    one frame that says so, as the CSV and stats have them."""
    src = tmp_path / "cthread.c"
    src.write_text(C_THREAD)
    lib = tmp_path / "libcthread.so"
    run(cc, "-shared", "-fPIC", "-O1", "-o", lib, src, "-lpthread")
    script = tmp_path / "prog.py"
    script.write_text("import ctypes\n"
                      "keep = bytearray(2_000_000)\n"
                      "ctypes.CDLL(%r).spawn()\n" % str(lib))
    cap = tmp_path / "cap.bin"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap, script, cwd=tmp_path)
    totals = json.loads(run(memtrace, "stats", "--json", cap).stdout)["totals"]
    for view, total in (([], totals["peak_heap"]), (["--leaks"], totals["live_bytes_at_end"])):
        run(memtrace, "transform", "csv", "-f", *view, cap, cwd=tmp_path)
        rows = rows_of(tmp_path / "memtrace-csv-cap.csv")
        bare = [r for r in rows if not r[5]]
        assert sum(int(r[2]) for r in bare) >= 10_000_000, rows
        assert sum(int(r[2]) for r in rows) == total
        run(memtrace, "transform", "gprof2dot", "-f", *view, cap, cwd=tmp_path)
        g = gprof2dot_of(tmp_path / "memtrace-gprof2dot-cap.json")
        assert sum(e["cost"][0] for e in g["events"]) == total
        assert (g["functions"], g["events"]) == expected_gprof2dot(rows)
        assert {"name": "<no Python frames>", "module": ""} in g["functions"]
        run(memtrace, "transform", "speedscope", "-f", *view, cap, cwd=tmp_path)
        got = json.loads((tmp_path / "memtrace-speedscope-cap.speedscope.json").read_text())
        got.pop("exporter")
        assert got == expected_speedscope(rows, got["name"])
        assert got["profiles"][0]["endValue"] == total
        assert got["profiles"][1]["endValue"] == sum(int(r[1]) for r in rows)


def fails(memtrace, *args, status=None):
    p = run(memtrace, "transform", *args, check=False)
    assert p.returncode != 0 and (status is None or p.returncode == status)
    assert p.stdout == ""
    return p.stderr


def test_bad_input(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    err = fails(memtrace, "csv", tmp_path / "missing.bin", status=1)
    assert err.count("\n") == 1 and "missing.bin" in err and "No such file" in err
    junk = tmp_path / "junk.bin"
    junk.write_text("hello\n")
    err = fails(memtrace, "csv", junk, status=1)
    assert err == "memtrace: cannot read '%s': not a memtrace capture\n" % junk
    err = fails(memtrace, "xml", cap, status=2)
    assert err == "memtrace: transform: unknown format 'xml' (csv, gprof2dot or speedscope)\n"
    out = tmp_path / "memtrace-csv-p.csv"
    out.write_text("mine\n")
    err = fails(memtrace, "csv", cap, status=1)
    assert err == "memtrace: csv file '%s' exists (use -f to overwrite it)\n" % out
    assert out.read_text() == "mine\n"
    run(memtrace, "transform", "csv", "-f", cap)
    assert rows_of(out)
    # usage errors: one operand, options memray's transform has not
    for args in (["csv"], ["csv", cap, cap], ["--python-only", "csv", cap],
                 ["--leaks", "--temporary-allocations", "csv", cap]):
        assert fails(memtrace, *args, status=2)
    assert not list(tmp_path.glob("*.json"))


def test_aggregated_capture(memtrace, tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("keep = bytearray(5_000_000)\n")
    cap = tmp_path / "agg.bin"
    run(memtrace, "run", "-q", "--aggregate", "-o", cap, script, cwd=tmp_path)
    # the peak and the leaks are kept per site: those work
    run(memtrace, "transform", "csv", "--leaks", cap)
    rows = rows_of(tmp_path / "memtrace-csv-agg.csv")
    assert any(r[5].startswith("<module>;%s;1" % script) and int(r[2]) >= 5_000_000
               for r in rows)
    # single allocations are not: temporary ones cannot be found
    err = fails(memtrace, "csv", "--temporary-allocations", "-f", cap, status=1)
    assert err.count("\n") == 1 and "aggregated capture" in err


# ---------------------------------------------------------------------------
# stats -o: memray's stats --json layout
# ---------------------------------------------------------------------------
def memray_histogram(sizes):
    """The size histogram memray's stats --json writes, from allocations
    counted by exact size: ten bins evenly spaced in log(size) between the
    smallest nonzero size and the largest (the low end halved when they are
    equal), bounds truncated to integers, the last one inclusive."""
    low = math.log(min(s for s in sizes if s))
    high = math.log(max(sizes))
    if low == high:
        low /= 2
    step = (high - low) / 10
    bounds = [int(math.exp(low + step * (i + 1))) for i in range(10)]
    counts = [0] * 10
    for size, n in sizes.items():
        counts[min(int((math.log(size) - low) // step), 9) if size else 0] += n
    out, start = [], 0
    for i in range(10):
        out.append({"min_bytes": start, "max_bytes": bounds[i] - (1 if i < 9 else 0),
                    "count": counts[i]})
        start = bounds[i]
    return out


MEMRAY_KEYS = ["total_num_allocations", "total_bytes_allocated", "allocation_size_histogram",
               "allocator_type_distribution", "top_allocations_by_size",
               "top_allocations_by_count", "top_modules_by_allocation_size",
               "top_modules_by_allocation_count", "metadata"]
METADATA_KEYS = ["start_time", "end_time", "total_allocations", "total_frames", "peak_memory",
                 "command_line", "pid", "main_thread_id", "python_allocator",
                 "has_native_traces", "trace_python_allocators", "file_format"]


def test_stats_output_memray_layout(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    out = tmp_path / "s.json"
    env = dict(os.environ, TZ="IST-5:30")
    p = run(memtrace, "stats", "-o", out, cap, env=env)
    assert p.stdout.startswith("wrote %s (" % out) and p.stderr == ""
    s = json.loads(out.read_text())
    assert list(s) == MEMRAY_KEYS and list(s["metadata"]) == METADATA_KEYS
    assert s["total_num_allocations"] == 4
    assert s["total_bytes_allocated"] == 14 * MB + 16 * 4096
    assert s["allocation_size_histogram"] == memray_histogram(
        {10 * MB: 1, 3 * MB: 1, MB: 1, 16 * 4096: 1})
    assert list(s["allocator_type_distribution"].items()) == [("MALLOC", 2), ("CALLOC", 1),
                                                               ("MMAP", 1)]
    assert s["top_allocations_by_size"] == [
        {"location": "f:/app/prog.py:5", "size": 10 * MB},
        {"location": "g:/app/prog.py:9", "size": 3 * MB + 16 * 4096},
        {"location": "<stack trace unavailable>", "size": MB}]
    assert s["top_allocations_by_count"] == [
        {"location": "g:/app/prog.py:9", "count": 2},
        {"location": "<stack trace unavailable>", "count": 1},
        {"location": "f:/app/prog.py:5", "count": 1}]
    assert s["top_modules_by_allocation_size"] == s["top_modules_by_allocation_count"] == []
    assert s["metadata"] == {
        # 1700000000 s is 2023-11-14 22:13:20 UTC; the trailer is 2 ms later
        "start_time": "2023-11-15 03:43:20+05:30", "end_time": "2023-11-15 03:43:20.002000+05:30",
        "total_allocations": 7,  # memray counts every record, frees too
        "total_frames": 3, "peak_memory": 13 * MB, "command_line": "python3 prog.py",
        "pid": 4242, "main_thread_id": 4242, "python_allocator": "unknown",
        "has_native_traces": False, "trace_python_allocators": False, "file_format": 0}
    # -n: the rows of the top lists; --json with -o is memray's spelling
    run(memtrace, "stats", "--json", "-n", "1", "-f", "-o", out, cap)
    s = json.loads(out.read_text())
    assert len(s["top_allocations_by_size"]) == len(s["top_allocations_by_count"]) == 1
    # -o -: to standard output
    assert json.loads(run(memtrace, "stats", "-o", "-", cap).stdout)["total_num_allocations"] == 4
    # --json alone is memtrace's own layout, on standard output, as before
    assert "totals" in json.loads(run(memtrace, "stats", "--json", cap).stdout)


def sized(sizes):
    c = Capture()
    c.thread(0, 1, "MainThread")
    for i, size in enumerate(sizes):
        c.alloc(0x1000 * (i + 1), size, stack=1)
    c.stack(1, 0, 1).code(1, "/app/x.py", "x", 1)
    c.trailer(10)
    return c


@pytest.mark.parametrize("sizes", [
    [100] * 5,                            # one size: the low end is halved
    [0, 0, 7, 7, 8, 1000, 999, 1001, 4096, 1 << 30],  # size 0 in the first bin
    [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597],
    list(range(1, 2000, 7)),
    # 3^7's log lands on a bin's edge: Python's float // puts it in the
    # bin below, where floor(a / b) would not
    [3 ** k for k in range(15)],
])
def test_stats_output_histogram(memtrace, tmp_path, sizes):
    cap = sized(sizes).save(tmp_path / "h.bin")
    s = json.loads(run(memtrace, "stats", "-o", "-", cap).stdout)
    want = collections.Counter(sizes)
    assert s["allocation_size_histogram"] == memray_histogram(want)
    assert sum(b["count"] for b in s["allocation_size_histogram"]) == len(sizes)


def test_stats_output_histogram_edges(memtrace, tmp_path):
    # memray fails on these; memtrace writes what can be said
    s = json.loads(run(memtrace, "stats", "-o", "-", sized([]).save(tmp_path / "e.bin")).stdout)
    assert s["allocation_size_histogram"] == [] and s["total_num_allocations"] == 0
    s = json.loads(run(memtrace, "stats", "-o", "-", sized([0, 1, 1]).save(tmp_path / "o.bin"))
                   .stdout)
    assert [b["count"] for b in s["allocation_size_histogram"]] == [3] + [0] * 9


def test_stats_output_real_program(memtrace, tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import random\n"
        "random.seed(5)\n"
        "def work():\n"
        "    return [bytearray(random.randrange(1, 300_000)) for _ in range(300)]\n"
        "keep = work()\n")
    cap = tmp_path / "cap.bin"
    run(memtrace, "run", "-q", "-o", cap, script, cwd=tmp_path)
    run(memtrace, "stats", "-o", tmp_path / "s.json", cap)
    s = json.loads((tmp_path / "s.json").read_text())
    # the exact sizes, from every record FileReader gives
    code = (
        "import json, sys, memtrace\n"
        "r = memtrace.FileReader(sys.argv[1])\n"
        "out = []\n"
        "for rec in r.get_allocation_records():\n"
        "    if not rec.allocator.is_deallocator:\n"
        "        top = rec.stack_trace()[:1]\n"
        "        out.append([rec.size, rec.allocator.name, '%s:%s:%d' % top[0] if top else None])\n"
        "json.dump(out, sys.stdout)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD)
    recs = json.loads(run("/usr/bin/python3", "-c", code, cap, env=env).stdout)
    assert s["total_num_allocations"] == len(recs)
    assert s["total_bytes_allocated"] == sum(r[0] for r in recs)
    assert s["allocation_size_histogram"] == memray_histogram(
        collections.Counter(r[0] for r in recs))
    assert s["allocator_type_distribution"] == dict(collections.Counter(r[1] for r in recs))
    by_place = collections.Counter()
    for size, _, place in recs:
        by_place[place or "<stack trace unavailable>"] += size
    top = s["top_allocations_by_size"][0]
    assert top["location"] == "%s:%s:4" % ("<listcomp>" if "<listcomp>" in top["location"]
                                          else "work", script)
    assert top["size"] == by_place[top["location"]] >= 300 * 1
    assert [t["size"] for t in s["top_allocations_by_size"]] == sorted(by_place.values(),
                                                                       reverse=True)[:5]


def test_stats_output_bad_input(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    out = tmp_path / "s.json"
    out.write_text("mine\n")
    p = run(memtrace, "stats", "-o", out, cap, check=False)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr == "memtrace: stats file '%s' exists (use -f to overwrite it)\n" % out
    assert out.read_text() == "mine\n"
    p = run(memtrace, "stats", "-o", out, tmp_path / "missing.bin", check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "missing.bin" in p.stderr
    script = tmp_path / "prog.py"
    script.write_text("keep = bytearray(5_000_000)\n")
    agg = tmp_path / "agg.bin"
    run(memtrace, "run", "-q", "--aggregate", "-o", agg, script, cwd=tmp_path)
    p = run(memtrace, "stats", "-f", "-o", out, agg, check=False)
    assert p.returncode == 1 and p.stdout == "" and p.stderr.count("\n") == 1
    assert "aggregated capture" in p.stderr and out.read_text() == "mine\n"
    # memtrace's own stats still read it
    assert run(memtrace, "stats", agg).returncode == 0
