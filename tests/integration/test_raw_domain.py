"""The PyMem RAW domain (PyMem_RawMalloc & co) with Python allocators
traced: its calls are the raw kinds, one event per call, in every
supported interpreter; without --trace-python-allocators they are malloc's;
attach and detach leave the domain as it was."""

import json
import os
import re
import subprocess
import textwrap

import pytest

from conftest import BUILD, ROOT, python_params, run

PYTHON_DIR = os.path.join(ROOT, "python")

RAW_SIZE, REALLOC_SIZE, CALLOC_N, CALLOC_SIZE = 777_777, 888_883, 3, 333_331
NOGIL_SIZE, PYMEM_SIZE = 555_557, 100_000

# The calls, each on a line of its own that the test finds by its marker.
SCRIPT = textwrap.dedent('''\
    import ctypes
    api = ctypes.pythonapi
    nogil = ctypes.CDLL(None)  # the same functions, called without the GIL
    for lib in (api, nogil):
        lib.PyMem_RawMalloc.restype = ctypes.c_void_p
        lib.PyMem_RawMalloc.argtypes = [ctypes.c_size_t]
        lib.PyMem_RawFree.restype = None
        lib.PyMem_RawFree.argtypes = [ctypes.c_void_p]
    api.PyMem_RawCalloc.restype = ctypes.c_void_p
    api.PyMem_RawCalloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    api.PyMem_RawRealloc.restype = ctypes.c_void_p
    api.PyMem_RawRealloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    api.PyMem_Malloc.restype = ctypes.c_void_p
    api.PyMem_Malloc.argtypes = [ctypes.c_size_t]
    api.PyMem_Free.restype = None
    api.PyMem_Free.argtypes = [ctypes.c_void_p]

    def main():
        p = api.PyMem_RawMalloc(%(raw)d)  # raw-malloc
        q = api.PyMem_RawRealloc(p, %(realloc)d)  # raw-realloc
        c = api.PyMem_RawCalloc(%(n)d, %(csize)d)  # raw-calloc
        api.PyMem_RawFree(c)  # raw-free-calloc
        api.PyMem_RawFree(q)  # raw-free
        g = nogil.PyMem_RawMalloc(%(nogil)d)  # raw-nogil
        nogil.PyMem_RawFree(g)
        m = api.PyMem_Malloc(%(pymem)d)  # pymem-malloc
        api.PyMem_Free(m)

    main()
    ''') % {"raw": RAW_SIZE, "realloc": REALLOC_SIZE, "n": CALLOC_N, "csize": CALLOC_SIZE,
            "nogil": NOGIL_SIZE, "pymem": PYMEM_SIZE}

# Read back with the Python API: every event as (kind, size, address,
# innermost frame's line).
READ = textwrap.dedent('''\
    import json, sys
    import memtrace
    r = memtrace.FileReader(sys.argv[1])
    out = []
    for rec in r.get_allocation_records():
        top = [] if rec.allocator.name in ("FREE", "MUNMAP") else rec.stack_trace(1)
        out.append([rec.allocator.name, rec.size, rec.address, top[0][2] if top else 0])
    print(json.dumps({"pyalloc": r.metadata.trace_python_allocators, "events": out}))
    ''')


def py_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR
    env["MEMTRACE_BUILD_DIR"] = BUILD
    for k in ("MEMTRACE_PAYLOAD", "MEMTRACE_READER_LIB", "MEMTRACE_RUN"):
        env.pop(k, None)
    return env


def line_of(marker):
    for i, line in enumerate(SCRIPT.splitlines(), 1):
        if line.rstrip().endswith("# " + marker):
            return i
    raise AssertionError(marker)


def events(tmp_path, cap):
    reader = tmp_path / "read.py"
    reader.write_text(READ)
    p = run("/usr/bin/python3", reader, cap, env=py_env())
    return json.loads(p.stdout)


def record(memtrace, tmp_path, python, *opts):
    prog = tmp_path / "raw.py"
    prog.write_text(SCRIPT)
    cap = tmp_path / "cap.bin"
    run(memtrace, "run", "-q", "-f", *opts, "--python", python, "-o", cap, prog, cwd=tmp_path)
    return cap


@pytest.mark.parametrize("python", python_params())
def test_raw_calls_are_raw_kinds(memtrace, tmp_path, python):
    cap = record(memtrace, tmp_path, python, "--trace-python-allocators")
    got = events(tmp_path, cap)
    assert got["pyalloc"]
    ev = got["events"]

    def of(size):
        return [e for e in ev if e[1] == size]

    raw = of(RAW_SIZE)
    assert [e[0] for e in raw] == ["PYMALLOC_RAW_MALLOC"], raw
    assert raw[0][3] == line_of("raw-malloc"), raw
    # realloc: the old block freed as a raw free, the new one a raw realloc
    re_ = of(REALLOC_SIZE)
    assert [(e[0], e[3]) for e in re_] == [("PYMALLOC_RAW_REALLOC", line_of("raw-realloc"))], re_
    i = ev.index(re_[0])
    assert ev[i - 1][0] == "PYMALLOC_RAW_FREE" and ev[i - 1][2] == raw[0][2], ev[i - 1]
    ca = of(CALLOC_N * CALLOC_SIZE)
    assert [(e[0], e[3]) for e in ca] == [("PYMALLOC_RAW_CALLOC", line_of("raw-calloc"))], ca
    frees = {e[2]: e[0] for e in ev if e[0].endswith("FREE")}
    assert frees.get(ca[0][2]) == "PYMALLOC_RAW_FREE"
    assert frees.get(re_[0][2]) == "PYMALLOC_RAW_FREE"
    # called without the GIL: one raw event too
    assert [e[0] for e in of(NOGIL_SIZE)] == ["PYMALLOC_RAW_MALLOC"], of(NOGIL_SIZE)
    # PyMem_Malloc hands a block this big to PyMem_RawMalloc, which calls
    # malloc: one event, the outermost call's
    pm = of(PYMEM_SIZE)
    assert [(e[0], e[3]) for e in pm] == [("PYMALLOC_MALLOC", line_of("pymem-malloc"))], pm
    # the reports name the kinds
    stats = run(memtrace, "stats", cap).stdout
    assert re.search(r"^\s+pymalloc_raw_malloc\s+\d+", stats, re.M), stats
    assert re.search(r"^\s+pymalloc_raw_calloc\s+1\s", stats, re.M), stats
    assert re.search(r"^\s+pymalloc_raw_realloc\s+1\s", stats, re.M), stats
    parse = run(memtrace, "parse", cap).stdout
    assert len(re.findall(r"^alloc .*kind=pymalloc_raw_malloc .*size=%d " % RAW_SIZE, parse,
                          re.M)) == 1
    # memray's JSON has no raw kinds: they count as the pymalloc ones
    js = tmp_path / "stats.json"
    run(memtrace, "stats", "-f", "-o", js, cap)
    dist = json.loads(js.read_text())["allocator_type_distribution"]
    assert not [k for k in dist if "RAW" in k], dist
    by_kind = {}
    for e in ev:
        by_kind[e[0]] = by_kind.get(e[0], 0) + 1
    assert dist["PYMALLOC_MALLOC"] == by_kind["PYMALLOC_MALLOC"] + by_kind["PYMALLOC_RAW_MALLOC"]
    assert dist["PYMALLOC_CALLOC"] == (by_kind.get("PYMALLOC_CALLOC", 0)
                                       + by_kind["PYMALLOC_RAW_CALLOC"])


@pytest.mark.parametrize("python", python_params())
def test_raw_calls_are_malloc_without_python_allocators(memtrace, tmp_path, python):
    cap = record(memtrace, tmp_path, python)
    got = events(tmp_path, cap)
    assert not got["pyalloc"]
    ev = got["events"]
    assert not [e for e in ev if "PYMALLOC" in e[0]], [e for e in ev if "PYMALLOC" in e[0]][:5]
    raw = [e for e in ev if e[1] == RAW_SIZE]
    assert [(e[0], e[3]) for e in raw] == [("MALLOC", line_of("raw-malloc"))], raw
    assert [e[0] for e in ev if e[1] == PYMEM_SIZE] == ["MALLOC"]


# The raw domain's functions, and its allocator as PyMem_GetAllocator says.
RAW_API = textwrap.dedent('''\
    api = ctypes.pythonapi
    api.PyMem_RawMalloc.restype = ctypes.c_void_p
    api.PyMem_RawMalloc.argtypes = [ctypes.c_size_t]
    api.PyMem_RawFree.restype = None
    api.PyMem_RawFree.argtypes = [ctypes.c_void_p]

    class Allocator(ctypes.Structure):  # PyMemAllocatorEx
        _fields_ = [(f, ctypes.c_void_p) for f in ("ctx", "malloc", "calloc", "realloc", "free")]

    def raw_domain():
        a = Allocator()
        api.PyMem_GetAllocator(0, ctypes.byref(a))  # PYMEM_DOMAIN_RAW
        return [getattr(a, f) for f, _ in Allocator._fields_]
''')

TARGET = textwrap.dedent('''\
    import ctypes, sys
''') + RAW_API + textwrap.dedent('''\
    before = raw_domain()
    kept = []
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "raw":
            p = api.PyMem_RawMalloc(int(cmd[1]))
            assert p
            kept.append(p)
        elif cmd[0] == "domain":
            print("same" if raw_domain() == before else "changed", flush=True)
        elif cmd[0] == "quit":
            for p in kept:
                api.PyMem_RawFree(p)
            print("done", flush=True)
            break
        print("done", flush=True)
    ''')


@pytest.mark.parametrize("python", python_params())
def test_attach_detach_restores_the_raw_domain(memtrace, tmp_path, python):
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    p = subprocess.Popen([python, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         universal_newlines=True, bufsize=1)

    def cmd(line):
        p.stdin.write(line + "\n")
        p.stdin.flush()
        out = []
        while True:
            reply = p.stdout.readline().strip()
            assert reply, line  # the target ended
            if reply == "done":
                return out
            out.append(reply)

    try:
        assert p.stdout.readline().strip() == "ready"
        cap = tmp_path / "cap.bin"
        run(memtrace, "attach", "--trace-python-allocators", "-o", cap, p.pid, timeout=60)
        assert cmd("domain") == ["changed"]  # our wrapper is in place
        cmd("raw %d" % RAW_SIZE)
        run(memtrace, "detach", p.pid, timeout=60)
        assert cmd("domain") == ["same"]
        cmd("raw %d" % NOGIL_SIZE)  # after detach: works, not recorded
        # attached again, and detached again: the same
        cap2 = tmp_path / "cap2.bin"
        run(memtrace, "attach", "--trace-python-allocators", "-o", cap2, p.pid, timeout=60)
        cmd("raw %d" % REALLOC_SIZE)
        run(memtrace, "detach", p.pid, timeout=60)
        assert cmd("domain") == ["same"]
        cmd("quit")
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    ev = events(tmp_path, cap)["events"]
    assert [e[0] for e in ev if e[1] == RAW_SIZE] == ["PYMALLOC_RAW_MALLOC"]
    assert not [e for e in ev if e[1] in (NOGIL_SIZE, REALLOC_SIZE)]
    ev2 = events(tmp_path, cap2)["events"]
    assert [e[0] for e in ev2 if e[1] == REALLOC_SIZE] == ["PYMALLOC_RAW_MALLOC"]
    assert not [e for e in ev2 if e[1] in (NOGIL_SIZE, RAW_SIZE)]


RAW_MALLOC, RAW_CALLOC, RAW_REALLOC, RAW_FREE = 16, 17, 18, 19
PYMALLOC_MALLOC, PYMALLOC_FREE = 12, 15


def built(version, raw):
    """A hand-made capture (capture_writer): a 1 MiB block freed, a 3 MiB
    block grown to 4 MiB and kept, a 2 MiB calloc freed, each by the raw
    domain (raw) or by pymalloc's kinds, a 5 MiB malloc kept throughout."""
    import capture_writer as cw
    k = (lambda r, p: r) if raw else (lambda r, p: p)
    c = cw.Capture(flags=2, version=version)
    c.thread(0, 4242, "MainThread")
    c.alloc(0x9000000, 5 << 20, stack=1, kind=cw.MALLOC)
    c.alloc(0x100000, 1 << 20, stack=1, kind=k(RAW_MALLOC, PYMALLOC_MALLOC))
    c.free(0x100000, kind=k(RAW_FREE, PYMALLOC_FREE))
    c.alloc(0x200000, 3 << 20, stack=2, kind=k(RAW_MALLOC, PYMALLOC_MALLOC))
    c.free(0x200000, kind=k(RAW_FREE, PYMALLOC_FREE))
    c.alloc(0x600000, 4 << 20, stack=2, kind=k(RAW_REALLOC, 14))
    c.alloc(0x1000000, 2 << 20, stack=1, kind=k(RAW_CALLOC, 13)).flush()
    c.free(0x1000000, kind=k(RAW_FREE, PYMALLOC_FREE))
    c.stack(1, 0, 1).stack(2, 0, 2)
    c.code(1, "/app/prog.py", "f", 5).code(2, "/app/prog.py", "g", 9)
    c.trailer(2000)
    return c


def test_raw_kinds_in_reports(memtrace, tmp_path):
    """Exact figures of a capture with raw kinds: named in stats, frees of
    the raw kind matched (leaks, peak), and a version 5 capture of the same
    events with pymalloc's kinds gives the same figures."""
    sums = {}
    for version, raw in ((6, True), (6, False), (5, False)):
        cap = built(version, raw).save(tmp_path / ("v%d%s.bin" % (version, raw)))
        s = json.loads(run(memtrace, "stats", "--json", cap).stdout)
        t = s["totals"]
        alloc = s["allocators"]
        if raw:
            assert alloc["pymalloc_raw_malloc"] == {"count": 2, "bytes": 4 << 20}, alloc
            assert alloc["pymalloc_raw_realloc"] == {"count": 1, "bytes": 4 << 20}, alloc
            assert alloc["pymalloc_raw_calloc"] == {"count": 1, "bytes": 2 << 20}, alloc
            assert not [k for k in alloc if k.startswith("pymalloc_") and "raw" not in k], alloc
            parse = run(memtrace, "parse", cap).stdout
            assert parse.count("kind=pymalloc_raw_free") == 3, parse
            # memray's JSON: the raw calls under the pymalloc names
            js = tmp_path / "m.json"
            run(memtrace, "stats", "-f", "-o", js, cap)
            dist = json.loads(js.read_text())["allocator_type_distribution"]
            assert dist == {"PYMALLOC_MALLOC": 2, "PYMALLOC_REALLOC": 1, "PYMALLOC_CALLOC": 1,
                            "MALLOC": 1}, dist
        else:
            assert "pymalloc_malloc" in alloc and not [k for k in alloc if "raw" in k], alloc
        leaks = json.loads(run(memtrace, "summary", "--json", "--leaks", "-n", "0", cap).stdout)
        sums[version, raw] = (t["allocations"], t["frees"], t["unmatched_frees"], t["peak_heap"],
                              t["live_bytes_at_end"],
                              sorted((r["function"], r["own_bytes"]) for r in leaks["rows"]))
    assert sums[6, True] == sums[6, False] == sums[5, False], sums
    assert sums[6, True][:5] == (5, 3, 0, 11 << 20, 9 << 20), sums


TRACKER = textwrap.dedent('''\
    import ctypes, json, sys
    import memtrace
''') + RAW_API + textwrap.dedent('''\
    before = raw_domain()
    with memtrace.Tracker("t.bin", trace_python_allocators=True):
        inside = raw_domain()
        p = api.PyMem_RawMalloc(%d)
        api.PyMem_RawFree(p)
    after = raw_domain()
    q = api.PyMem_RawMalloc(%d)  # after the Tracker: works, not recorded
    api.PyMem_RawFree(q)
    print(json.dumps([inside != before, after == before]))
    ''') % (RAW_SIZE, NOGIL_SIZE)


@pytest.mark.parametrize("python", python_params())
def test_tracker_wraps_and_restores_the_raw_domain(tmp_path, python):
    prog = tmp_path / "t.py"
    prog.write_text(TRACKER)
    p = run(python, prog, cwd=tmp_path, env=py_env())
    assert json.loads(p.stdout.splitlines()[-1]) == [True, True], p.stdout
    ev = events(tmp_path, tmp_path / "t.bin")["events"]
    assert [e[0] for e in ev if e[1] == RAW_SIZE] == ["PYMALLOC_RAW_MALLOC"], ev[-5:]
    addr = [e[2] for e in ev if e[1] == RAW_SIZE][0]
    assert [e[0] for e in ev if e[2] == addr and e[1] != RAW_SIZE] == ["PYMALLOC_RAW_FREE"]
    assert not [e for e in ev if e[1] == NOGIL_SIZE]
