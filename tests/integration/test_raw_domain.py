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
        top = rec.stack_trace(1)
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


TARGET = textwrap.dedent('''\
    import ctypes, sys
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
