"""Native stacks (--native): the C frames under the Python line that called
into C, with inlined functions as frames of their own and source lines
from debug information, symbolized by the reader; threads started from C
with native frames only; every report reads such a capture."""

import os
import re
import sys

import pytest

from conftest import BUILD, ROOT, python_params, report_json, run

sys.path.insert(0, os.path.join(ROOT, "python"))
import memtrace  # noqa: E402

TARGET_SRC = os.path.join(ROOT, "tests", "targets", "native-target.c")
TARGET_LIB = os.path.join(BUILD, "tests", "targets", "libmt-native-target.so")

PROG = r'''
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])  # loaded after tracking started
lib.mt_native_a.restype = ctypes.c_void_p
lib.mt_native_a.argtypes = [ctypes.c_size_t]
lib.mt_native_free.argtypes = [ctypes.c_void_p]


def f():
    return lib.mt_native_a(777777)  # the Python line


p = f()  # kept: a leak at the end
n = lib.mt_native_threads(int(sys.argv[2]), int(sys.argv[3]), 4242)
assert n == int(sys.argv[2]), n
'''


def marker_line(text):
    with open(TARGET_SRC) as fp:
        for i, line in enumerate(fp, 1):
            if "native-target: " + text in line:
                return i
    raise AssertionError("no marker %r in %s" % (text, TARGET_SRC))


def reader(capture):
    return memtrace.FileReader(str(capture))


@pytest.fixture
def native_capture(memtrace, tmp_path):
    def make(python, threads=4, each=5, env=None):
        if not os.path.exists(TARGET_LIB):
            pytest.fail("%s is not built" % TARGET_LIB)
        prog = tmp_path / "prog.py"
        prog.write_text(PROG)
        cap = tmp_path / "n.bin"
        cp = run(memtrace, "run", "--native", "-o", cap, "--python", python, prog, TARGET_LIB,
                 threads, each, env=dict(os.environ, **(env or {})))
        make.stderr = cp.stderr
        return prog, cap
    return make


def is_loop(frame):
    return frame[0].startswith("_PyEval_EvalFrameDefault")


def assert_merged(hybrid, py, native, main=True):
    """memray's merge of a hybrid stack: the native chain, each evaluation
    loop's frame replaced by the Python frames it ran; the Python frames in
    their order, once each. On the main thread it ends at the outermost
    Python frame; on another thread the frames that started it stay."""
    on_py = set(py)
    assert [f for f in hybrid if f in on_py] == py, hybrid
    outermost_loop = max(i for i, f in enumerate(native) if is_loop(f))
    kept = native[:outermost_loop] if main else native
    assert [f for f in hybrid if f not in on_py] == [f for f in kept if not is_loop(f)], \
        (hybrid, native)
    assert not any(is_loop(f) for f in hybrid), hybrid
    if main:
        assert hybrid[-1] == py[-1], hybrid[-3:]


def unwound_as_libunwind(stderr):
    """MEMTRACE_TEST_UNWIND_CHECK=1's count: how many stacks the payload's
    unwinder gave, each compared with libunwind's, and how many it left to
    libunwind; none may differ."""
    m = re.search(r"native stacks checked against libunwind: (\d+), wrong: (\d+), "
                  r"unwound by libunwind: (\d+)", stderr)
    assert m, stderr[-2000:]
    checked, wrong, fell_back = map(int, m.groups())
    assert wrong == 0 and "differs from libunwind's" not in stderr, stderr[-2000:]
    return checked, fell_back


@pytest.mark.parametrize("python", python_params())
def test_inlined_c_frames_under_the_python_line(native_capture, python):
    prog, cap = native_capture(python)
    malloc_line, b_line = marker_line("malloc call"), marker_line("b call")
    with reader(cap) as r:
        assert r.metadata.has_native_traces
        recs = [x for x in r.get_allocation_records() if x.size == 777777]
        assert len(recs) == 1, recs
        rec = recs[0]
        hybrid = rec.hybrid_stack_trace()
        # innermost first: b (inlined into a), a, then what ctypes ran, then
        # the Python line that called it and its callers
        assert hybrid[0][0] == "mt_native_b" and hybrid[0][1].endswith("native-target.c") \
            and hybrid[0][2] == malloc_line, hybrid[:3]
        assert hybrid[1][0] == "mt_native_a" and hybrid[1][1].endswith("native-target.c") \
            and hybrid[1][2] == b_line, hybrid[:3]
        py = rec.stack_trace()
        assert py[0] == ("f", str(prog), 10), py
        assert py[1][0] == "<module>", py
        # the native chain alone: the same C frames first, then the
        # interpreter's own (its evaluation loop among them), no Python
        native = rec.native_stack_trace()
        i = hybrid.index(py[0])
        assert native[:i] == hybrid[:i], native
        assert any(is_loop(fr) for fr in native), native
        assert not any(fr in py for fr in native)
        # merged as memray merges them: the loops replaced by the Python
        # frames, and on the main thread nothing outside the outermost one
        assert rec.tid == r.metadata.main_thread_id
        assert_merged(hybrid, py, native)
        assert native[-1][0] == "_start" and hybrid[-1][0] == "<module>", hybrid[-3:]
        assert rec.hybrid_stack_trace(max_stacks=i + 1) == hybrid[:i + 1]
        assert rec.native_stack_id > 0 and rec.native_segment_generation >= 1
        assert rec.native_stack_trace(max_stacks=2) == native[:2]
        # a free has no stacks: memray raises, but its ids are 0
        free = next(x for x in r.get_allocation_records()
                    if x.allocator == memtrace.AllocatorType.FREE)
        for how in (free.stack_trace, free.native_stack_trace, free.hybrid_stack_trace):
            with pytest.raises(NotImplementedError, match="deallocations"):
                how()
        assert (free.native_stack_id, free.native_segment_generation) == (0, 0)


@pytest.mark.parametrize("python", python_params())
def test_hybrid_stacks_end_as_memray_ends_them(memtrace, script, tmp_path, python):
    """hybrid_stack_trace() on the main thread ends at its outermost Python
    frame (memray leaves out Py_RunMain ... _start); a thread started by
    threading keeps the frames that started it, as memray's do."""
    prog = script("""\
import threading


def grow(n):
    return bytearray(n)


keep = [grow(1_234_567)]
t = threading.Thread(target=lambda: keep.append(grow(2_345_678)))
t.start()
t.join()
""")
    cap = tmp_path / "t.bin"
    run(memtrace, "run", "--native", "-q", "-o", cap, "--python", python, prog)
    with reader(cap) as r:
        main = r.metadata.main_thread_id
        # bytearray(n) asks for n + 1 bytes
        got = {x.size - 1: x for x in r.get_allocation_records()
               if x.size - 1 in (1_234_567, 2_345_678)}
        assert sorted(got) == [1_234_567, 2_345_678], got
        for size, on_main in ((1_234_567, True), (2_345_678, False)):
            rec = got[size]
            assert (rec.tid == main) == on_main
            hybrid, py, native = rec.hybrid_stack_trace(), rec.stack_trace(), \
                rec.native_stack_trace()
            assert py[0][0] == "grow" and hybrid[0] not in py, hybrid[:3]
            assert_merged(hybrid, py, native, main=on_main)
            if on_main:
                assert hybrid[-1][0] == "<module>" and native[-1][0] == "_start", hybrid[-3:]
            else:
                assert py[-1][0].endswith("_bootstrap") and hybrid[-1] == native[-1], hybrid[-3:]
                assert any(f[0] == "start_thread" for f in hybrid[hybrid.index(py[-1]):]), hybrid


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_two_calls_on_one_line_are_one_record(memtrace, script, tmp_path, native):
    """memray's records are one per call path as it prints (and native
    chain): two allocations made by two calls on one line are one record,
    with and without native stacks."""
    prog = script("""\
keep = []


def f():
    keep.append((bytearray(1_000_001), bytearray(1_000_001)))


f()
""")
    cap = tmp_path / "two.bin"
    run(memtrace, "run", "-q", "-o", cap, *(["--native"] if native else []), "--python",
        "/usr/bin/python3", prog)
    with reader(cap) as r:
        recs = [x for x in r.get_leaked_allocation_records() if x.size >= 1_000_000]
        assert [(x.size, x.n_allocations, x.stack_trace()[0]) for x in recs] == \
            [(2_000_004, 2, ("f", str(prog), 5))], recs
        if native:
            assert recs[0].native_stack_id and recs[0].hybrid_stack_trace()[0] not in \
                recs[0].stack_trace()
        # the temporal records too (per allocator as well, as memray's)
        temporal = [x for x in r.get_temporal_allocation_records()
                    if x.stack_trace() and x.stack_trace()[0] == ("f", str(prog), 5) and
                    x.allocator.name == "MALLOC"]
        assert len(temporal) == 1 and sum(i.n_bytes for i in temporal[0].intervals
                                          if i.deallocated_before_snapshot is None) \
            == 2_000_004, temporal


@pytest.mark.parametrize("python", python_params()[:1])
def test_threads_started_from_c_have_native_frames_only(native_capture, python):
    worker_line = marker_line("posix_memalign call")
    prog, cap = native_capture(python, threads=100, each=100,
                               env={"MEMTRACE_TEST_UNWIND_CHECK": "1"})
    # each thread's stack ends where the thread began, as libunwind has it
    checked, fell_back = unwound_as_libunwind(native_capture.stderr)
    assert checked >= 10000 and fell_back == 0, (checked, fell_back)
    with reader(cap) as r:
        allocs = frees = 0
        for rec in r.get_allocation_records():
            if rec.allocator == memtrace.AllocatorType.POSIX_MEMALIGN and rec.size == 4242:
                allocs += 1
                assert rec.stack_trace() == []
                hybrid = rec.hybrid_stack_trace()
                assert hybrid[0] == (hybrid[0][0], hybrid[0][1], worker_line), hybrid
                assert hybrid[0][0] == "mt_native_worker", hybrid
                assert any(fr[0] == "start_thread" for fr in hybrid[1:]), hybrid
            elif rec.allocator == memtrace.AllocatorType.FREE:
                frees += 1
        assert allocs == 10000
        assert frees >= 10000


def test_every_report_reads_a_native_capture(native_capture, memtrace, tmp_path):
    prog, cap = native_capture("/usr/bin/python3")
    out = run(memtrace, "stats", cap).stdout
    assert "native stacks on" in out
    # stats rank locations by their innermost Python frame, as memray's do:
    # the C functions' memory is the Python line's that called them, and
    # the threads started from C have none
    top = out.split("Top 5 locations by size\n")[1].split("\n\n")[0].splitlines()
    assert re.search(r"777777 B|759\.55 KiB", top[0]) and top[0].endswith(" f at %s:10" % prog), out
    assert "<no Python frames>" in top[1] and not any("mt_native" in l for l in top), out
    js = report_json(memtrace, "stats", cap, "-n", "0")
    for key in ("top_by_size", "top_by_count"):
        rows = {(r["function"], r["line"]): r for r in js[key]}
        assert rows[("f", 10)]["bytes"] == 777777 and rows[("f", 10)]["allocations"] == 1
        assert rows[("<no Python frames>", 0)]["allocations"] >= 20 * 1
        assert not any(fn.startswith("mt_native") for fn, _ in rows), rows
    tree = run(memtrace, "tree", "-n", "0", cap).stdout
    assert "[C] mt_native_a at " in tree and "[C] mt_native_b at " in tree
    py_only = run(memtrace, "tree", "-n", "0", "--python-only", cap).stdout
    assert "mt_native_a" not in py_only and "f at %s:10" % prog in py_only, py_only
    # the threads started from C have no Python frame, as without --native
    assert "<no Python frames>" in py_only and "<no frames>" not in py_only, py_only
    for cmd in ("summary", "parse"):
        run(memtrace, cmd, cap)
    # a Python line's total holds the C allocations under it
    rows = {(r["function"], r["line"]): r
            for r in report_json(memtrace, "summary", cap, "--leaks", "-n", "0")["rows"]}
    assert rows[("f", 10)]["total_bytes"] >= 777777, rows[("f", 10)]
    b = rows[("mt_native_b", marker_line("malloc call"))]
    assert b["own_bytes"] >= 777777 and b["native"] is True and "native" not in rows[("f", 10)]
    # the text views mark native frames
    assert "[C] mt_native_b at " in run(memtrace, "summary", "--leaks", cap).stdout
    assert "[C] mt_native_b at " in run(memtrace, "live", "--once", cap).stdout
    # the flamegraph has every frame, the table the innermost location
    for cmd, name in (("flamegraph", "mt_native_a"), ("table", "mt_native_b")):
        html = tmp_path / (cmd + ".html")
        run(memtrace, cmd, "--leaks", "-o", html, cap)
        assert name in html.read_text()
        run(memtrace, cmd, "-o", html, "-f", cap)


def module_env(python, module):
    """The environment in which @python imports @module, or None: its own,
    or Debian's build (for Debian's Python, 3.11) on a pyenv build of the
    same minor version (there is no PyPI here for the others)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if run(python, "-c", "import " + module, check=False, env=env).returncode == 0:
        return env
    env["PYTHONPATH"] = "/usr/lib/python3/dist-packages"
    if run(python, "-c", "import " + module, check=False, env=env).returncode == 0:
        return env
    return None


@pytest.mark.parametrize("python", python_params())
def test_numpy_buffer_under_the_python_line(memtrace, tmp_path, python):
    env = module_env(python, "numpy")
    if env is None:
        pytest.skip("numpy is not installed for %s, and Debian's numpy is built for "
                    "another Python version" % python)
    prog = tmp_path / "np_prog.py"
    prog.write_text("import numpy as np\n\ndef load():\n    return np.ones(10**7)\n\nx = load()\n")
    cap = tmp_path / "np.bin"
    run(memtrace, "run", "--native", "-o", cap, "--python", python, prog, env=env)
    with reader(cap) as r:
        recs = [x for x in r.get_high_watermark_allocation_records() if x.size >= 80_000_000]
        assert recs, "no 80 MB record"
        hybrid = recs[0].hybrid_stack_trace()
        py = recs[0].stack_trace()
        assert py[0][0] == "ones" and py[1][:2] == ("load", str(prog)), py
        i = hybrid.index(py[0])
        native = hybrid[:i]
        assert native and any(re.search(r"_multiarray_umath", fr[0] + fr[1]) for fr in native), \
            native


PANDAS_PROG = r"""
import sys

import pandas as pd


def write_csv(path, rows):
    with open(path, "w") as fp:
        fp.write("id,name,city,score\n")
        for i in range(rows):
            fp.write("%d,name-%d,city-%d,%d.5\n" % (i, i, i % 977, i % 101))


def load_rows(path):
    return pd.read_csv(path)  # the Python line


write_csv(sys.argv[1], int(sys.argv[2]))
frame = load_rows(sys.argv[1])
assert str(frame["name"].dtype) == "object", frame.dtypes
"""


@pytest.mark.parametrize("python", python_params())
def test_pandas_object_columns_under_the_read_csv_line(memtrace, tmp_path, python):
    """read_csv of object-dtype (string) columns: the widest allocation at
    the peak is made in pandas' or numpy's C code, and the hybrid stack
    has that code under the line that called read_csv."""
    env = module_env(python, "pandas")
    if env is None:
        pytest.skip("pandas is not installed for %s (Debian: python3-pandas, built for "
                    "Debian's Python version)" % python)
    prog = tmp_path / "pd_prog.py"
    prog.write_text(PANDAS_PROG)
    line = [i for i, t in enumerate(PANDAS_PROG.splitlines(), 1) if "the Python line" in t][0]
    cap = tmp_path / "pd.bin"
    run(memtrace, "run", "--native", "-o", cap, "--python", python, prog, tmp_path / "rows.csv",
        200_000, timeout=300, env=env)
    with reader(cap) as r:
        widest = max(r.get_high_watermark_allocation_records(), key=lambda x: x.size)
        hybrid = widest.hybrid_stack_trace()
        at = [i for i, f in enumerate(hybrid) if f[0] == "load_rows"]
        assert at and hybrid[at[0]][1:] == (str(prog), line), hybrid
        below = hybrid[:at[0]]
        assert any(re.search(r"/(pandas|numpy)/", f[1]) for f in below), below
        assert ("load_rows", str(prog), line) in widest.stack_trace()
    tree = run(memtrace, "tree", cap).stdout
    assert re.search(r"load_rows at .*pd_prog\.py:%d" % line, tree), tree
    assert "[C] parsers" in tree, tree


UNLOAD_PROG = r"""
import ctypes, _ctypes, sys

# @size bytes from function @name of library @path, loaded then unloaded;
# where the function was
def alloc_in(path, name, size):
    lib = ctypes.CDLL(path)
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    fn(size)
    where = ctypes.cast(fn, ctypes.c_void_p).value
    _ctypes.dlclose(lib._handle)
    return where

# one, two, one again, in rounds until a library has been loaded where the
# other one was (the loader takes the highest hole: the interpreter's own
# mappings move that from round to round); sizes tell the rounds apart
last = {}  # where -> the library loaded there last
confused = False
for r in range(10):
    for path, name, size in ((sys.argv[1], "mt_unload_one", 555555 + 16 * r),
                             (sys.argv[2], "mt_unload_two", 666666 + 16 * r),
                             (sys.argv[1], "mt_unload_one", 777776 + 16 * r)):
        where = alloc_in(path, name, size)
        confused |= last.get(where, name) != name
        last[where] = name
    if confused:
        break
print("same place" if confused else "elsewhere", "rounds", r + 1)
"""


@pytest.mark.parametrize("python", python_params())
def test_library_unloaded_and_another_loaded_where_it_was(memtrace, tmp_path, python):
    """dlclose of a library, then another of the same layout loaded at
    its addresses, then the first again: each allocation names the
    function of the library loaded when it was made, not the first one
    met at that address, nor the last."""
    libs = [os.path.join(BUILD, "tests", "targets", "libmt-unload-%s.so" % w) for w in ("one", "two")]
    prog = tmp_path / "unload.py"
    prog.write_text(UNLOAD_PROG)
    cap = tmp_path / "u.bin"
    out = run(memtrace, "run", "--native", "-o", cap, "--python", python, prog, *libs).stdout
    rounds = int(re.search(r"rounds (\d+)", out).group(1))
    want = {}
    for k in range(rounds):
        want.update({555555 + 16 * k: "mt_unload_one", 666666 + 16 * k: "mt_unload_two",
                     777776 + 16 * k: "mt_unload_one"})
    with reader(cap) as r:
        leaf = {x.size: x.hybrid_stack_trace()[0][0] for x in r.get_allocation_records()
                if x.size in want}
    assert leaf == want, leaf
    if "same place" not in out:
        pytest.skip("the loader put the second library elsewhere under %s: nothing to confuse"
                    % python)


def test_without_libunwind_the_capture_says_why(memtrace, tmp_path):
    """Native stacks asked for where libunwind cannot be loaded (an empty
    file found first as libunwind.so.8): tracking goes on without them,
    the capture says so and why, and the program is unharmed."""
    from test_python_api import py_env
    bogus = tmp_path / "lib"
    bogus.mkdir()
    (bogus / "libunwind.so.8").write_bytes(b"")
    cap = tmp_path / "nolu.bin"
    prog = tmp_path / "nolu.py"
    prog.write_text("import sys, memtrace\n"
                    "with memtrace.Tracker(sys.argv[1], native_traces=True):\n"
                    "    x = bytearray(1234567)\n"
                    "print('still here')\n")
    cp = run("/usr/bin/python3", prog, cap, env=py_env(LD_LIBRARY_PATH=str(bogus)))
    assert cp.stdout == "still here\n" and cp.stderr == "", (cp.stdout, cp.stderr)
    with reader(cap) as r:
        assert not r.metadata.has_native_traces
        rec = [x for x in r.get_allocation_records() if x.size == 1234567 + 1][0]
        assert rec.stack_trace()[0][0] == "<module>"
        # as memray: no native frames, and the hybrid stack is the Python one
        assert rec.native_stack_trace() == [] and rec.hybrid_stack_trace() == rec.stack_trace()
        assert (rec.native_stack_id, rec.native_segment_generation) == (0, 0)
    stats = run(memtrace, "stats", cap).stdout
    assert "native stacks off" in stats, stats
    assert re.search(r"libunwind could not be loaded: .*libunwind\.so\.8: file too short", stats), \
        stats


ATTACH_TARGET = r'''
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.mt_native_a.restype = ctypes.c_void_p
lib.mt_native_a.argtypes = [ctypes.c_size_t]
lib.mt_native_free.argtypes = [ctypes.c_void_p]


def f(n):
    p = lib.mt_native_a(n)  # the Python line
    lib.mt_native_free(p)


print("ready", flush=True)
for line in sys.stdin:
    words = line.split()
    if words[0] == "alloc":
        f(int(words[1]))
    print("done", flush=True)
    if words[0] == "quit":
        break
'''


@pytest.mark.parametrize("python", python_params())
def test_attach_detach_reattach_native(memtrace, script, tmp_path, python):
    from attach_target import Target, attach, detach
    prog = script(ATTACH_TARGET, name="attach_target.py")
    malloc_line, b_line = marker_line("malloc call"), marker_line("b call")
    t = Target(python, prog, TARGET_LIB)  # the library as its argument
    try:
        for i, size in ((1, 555555), (2, 666666)):
            cap = tmp_path / ("a%d.bin" % i)
            attach(memtrace, t.pid, cap, "--native")
            t.cmd("alloc %d" % size)
            detach(memtrace, t.pid)
            t.cmd("alloc 444444")  # untracked, between the two captures
            with reader(cap) as r:
                assert r.metadata.has_native_traces
                recs = [x for x in r.get_allocation_records() if x.size == size]
                assert len(recs) == 1, (i, recs)
                hybrid = recs[0].hybrid_stack_trace()
                assert hybrid[0][0] == "mt_native_b" and hybrid[0][2] == malloc_line, hybrid
                assert hybrid[1][0] == "mt_native_a" and hybrid[1][2] == b_line, hybrid
                py = recs[0].stack_trace()
                assert py[0] == ("f", str(prog), 10), py
                assert_merged(hybrid, py, recs[0].native_stack_trace())
                assert not [x for x in r.get_allocation_records() if x.size == 444444]
        assert t.finish()[0] == 0
    finally:
        t.kill()


def test_capture_read_where_a_library_is_gone(memtrace, tmp_path):
    """A library the capture names that is not on this machine (any more):
    its frames read as module+offset, and stats says how many."""
    import shutil
    lib = tmp_path / "libgone.so"
    shutil.copy(TARGET_LIB, lib)
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    cap = tmp_path / "gone.bin"
    run(memtrace, "run", "--native", "-o", cap, "--python", "/usr/bin/python3", prog, lib, 1, 1)
    with reader(cap) as r:
        rec = [x for x in r.get_allocation_records() if x.size == 777777][0]
        assert rec.hybrid_stack_trace()[0][0] == "mt_native_b"
    lib.unlink()
    with reader(cap) as r:
        rec = [x for x in r.get_allocation_records() if x.size == 777777][0]
        hybrid = rec.hybrid_stack_trace()
        assert re.match(r"libgone\.so\+0x[0-9a-f]+$", hybrid[0][0]), hybrid
        assert rec.stack_trace()[0][0] == "f"
    out = run(memtrace, "stats", cap).stdout
    m = re.search(r"native frames: +(\d+) return addresses, (\d+) without a symbol; "
                  r"(\d+) modules? not found here", out)
    assert m and int(m.group(2)) >= 2 and int(m.group(3)) == 1, out


def test_stacks_unpaired_when_the_interpreter_is_gone(memtrace, tmp_path):
    """Read where the interpreter's file is not (a copy run, then removed),
    the evaluation loops of Python -> C -> Python stacks are not found:
    such stacks lose the C frames between their Python calls, and stats
    says how many."""
    import shutil
    exe = tmp_path / "bin" / "python3.11"
    exe.parent.mkdir()
    shutil.copy(os.path.realpath("/usr/bin/python3"), exe)
    prog = tmp_path / "recurse.py"
    prog.write_text(RECURSE)
    cap = tmp_path / "r.bin"
    run(memtrace, "run", "--native", "-o", cap, "--python", exe, prog, TARGET_LIB, 2)

    def native_stats():
        return report_json(memtrace, "stats", cap)["header"]["native_frames"]
    assert native_stats()["unpaired_stacks"] == 0
    assert "C frames between" not in run(memtrace, "stats", cap).stdout
    exe.unlink()
    st = native_stats()
    assert st["modules_missing"] == 1 and st["unpaired_stacks"] >= 1, st
    out = run(memtrace, "stats", cap).stdout
    m = re.search(r"^ +(\d+) stacks? shown without the C frames between (its|their) Python "
                  r"calls \((its|their) evaluation loops were not found\)$", out, re.M)
    assert m and int(m.group(1)) == st["unpaired_stacks"], out
    with reader(cap) as r:
        rec = [x for x in r.get_allocation_records() if x.size == 888888][0]
        assert [f[0] for f in rec.stack_trace()][:4] == ["g", "g", "g", "<module>"]


RECURSE = r'''
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.mt_native_a.restype = ctypes.c_void_p
lib.mt_native_a.argtypes = [ctypes.c_size_t]
CB = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int)
lib.mt_native_call.restype = ctypes.c_void_p
lib.mt_native_call.argtypes = [CB, ctypes.c_int]


def g(d):
    if d == 0:
        return lib.mt_native_a(888888)  # the bottom
    return lib.mt_native_call(cb, d - 1)  # into C, which calls g again


cb = CB(g)
keep = g(int(sys.argv[2]))
'''


@pytest.mark.parametrize("python", python_params())
def test_python_called_from_c_called_from_python(memtrace, tmp_path, python):
    """Python -> C -> Python -> C ... -> malloc: every run of Python frames
    between the C frames that called it, in order, once each."""
    prog = tmp_path / "recurse.py"
    prog.write_text(RECURSE)
    cap = tmp_path / "r.bin"
    run(memtrace, "run", "--native", "-o", cap, "--python", python, prog, TARGET_LIB, 3)
    call_line = marker_line("callback call")
    with reader(cap) as r:
        rec = [x for x in r.get_allocation_records() if x.size == 888888][0]
        hybrid = rec.hybrid_stack_trace()
        keep = {"mt_native_a", "mt_native_b", "mt_native_call", "g", "<module>"}
        names = [f[0] for f in hybrid if f[0] in keep]
        assert names == ["mt_native_b", "mt_native_a", "g", "mt_native_call", "g",
                         "mt_native_call", "g", "mt_native_call", "g", "<module>"], hybrid
        calls = [f for f in hybrid if f[0] == "mt_native_call"]
        assert all(f[2] == call_line for f in calls), calls
        gs = [f for f in hybrid if f[0] == "g"]
        assert [f[2] for f in gs] == [13, 14, 14, 14], gs
        # the Python stack alone is unchanged
        assert [f[0] for f in rec.stack_trace()] == ["g", "g", "g", "g", "<module>"]


GEN_UNDER_CALLBACK = r'''
import ctypes
libc = ctypes.CDLL(None)
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
keep = []


def gen(n):
    for i in range(n):
        keep.append(bytearray(1_000_000 + i))  # the allocation
        yield i


def burst():
    for _ in gen(2):  # through C until FOR_ITER is specialized, then inline
        pass


def cmp(a, b):
    burst()
    return 0


def outer():
    arr = (ctypes.c_int * 2)(2, 1)
    libc.qsort(arr, 2, 4, CMP(cmp))  # into C, which calls cmp


for _ in range(5):
    outer()
'''


def tree_paths(text):
    """`memtrace tree`'s nodes as paths from the root, outermost first."""
    paths, stack = [], []
    for line in text.splitlines():
        m = re.match(r"^([│ ]*)[├└]─ \S+ \S+ +\S+%  (.*)$", line)
        if not m:
            continue
        depth = len(m.group(1)) // 3
        del stack[depth:]
        stack.append(m.group(2))
        paths.append(list(stack))
    return paths


@pytest.mark.parametrize("traced", [True, False], ids=["pymem", "malloc"])
@pytest.mark.parametrize("python", python_params())
def test_generator_resumed_inline_under_a_callback(memtrace, tmp_path, python, traced):
    """A generator run first through C (FOR_ITER calls its next() until it
    is specialized: the generator's frame is the first its evaluation loop
    runs) and then resumed inline, at the same address and instructions,
    in Python called from C: every allocation of it keeps the C frames
    between the callback and the Python that called into C."""
    prog = tmp_path / "gen.py"
    prog.write_text(GEN_UNDER_CALLBACK)
    cap = tmp_path / "g.bin"
    run(memtrace, "run", "--native", "-q", "-o", cap, "--python", python,
        *(["--trace-python-allocators"] if traced else []), prog)
    with reader(cap) as r:
        # bytearray(n) asks for n + 1 bytes
        recs = [x for x in r.get_allocation_records() if x.size in (1_000_001, 1_000_002)]
        assert len(recs) == 10, recs
        for rec in recs:
            hybrid = rec.hybrid_stack_trace()
            names = [f[0] for f in hybrid]
            assert "gen" in names and "cmp" in names and "outer" in names, hybrid
            between = names[names.index("cmp") + 1:names.index("outer")]
            assert any("qsort" in n for n in between), (rec.size, names)
            assert [f[0] for f in rec.stack_trace()][:5] == \
                ["gen", "burst", "cmp", "outer", "<module>"]
    # the reports: the callback under the C that called it, never under outer
    out = run(memtrace, "tree", "-q", "-n", "0", cap).stdout
    cmps = [p for p in tree_paths(out) if p[-1].startswith("cmp at ")]
    assert cmps, out
    for p in cmps:
        assert not p[-2].startswith("outer at ") and \
            any("qsort" in f for f in p[:-1]), "\n".join(p)


ONE_CALL_TWO_WAYS = r'''
import functools


def h(n):
    a = [n]
    b = {"n": a}
    return bytearray(2_000_000 + n)  # the allocation


def caller():
    out = []
    for i, fn in enumerate((h, functools.partial(h)) * 4):
        out.append(fn(i))  # inline, then through C, from the same instruction
    return out


keep = [caller() for _ in range(3)]
'''


@pytest.mark.parametrize("traced", [True, False], ids=["pymem", "malloc"])
@pytest.mark.parametrize("python", python_params())
def test_one_call_inline_and_through_c(memtrace, tmp_path, python, traced):
    """One call instruction that runs a function inline, then through C
    (functools.partial), at the same address and instructions: the
    allocations of the calls through C have partial's C frames between the
    two Python frames, which the inline ones have not (they have none from
    3.11; Debian's interpreter names no static function)."""
    prog = tmp_path / "calls.py"
    prog.write_text(ONE_CALL_TWO_WAYS)
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "--native", "-q", "-o", cap, "--python", python,
        *(["--trace-python-allocators"] if traced else []), prog)
    with reader(cap) as r:
        recs = [x for x in r.get_allocation_records() if 2_000_001 <= x.size <= 2_000_008]
        assert len(recs) == 24, recs
        between = {False: [], True: []}  # by: through C
        for rec in recs:
            names = [f[0] for f in rec.hybrid_stack_trace()]
            between[(rec.size - 2_000_001) % 2 == 1].append(
                (rec.size, names[names.index("h") + 1:names.index("caller")]))
    inline = set(n for _, b in between[False] for n in b)
    for size, b in between[True]:
        assert set(b) - inline, (size, b, inline)


DEEP = RECURSE.replace("keep = g(int(sys.argv[2]))", r'''
import threading
out = []


def main():
    out.append(g(int(sys.argv[2])))


sys.setrecursionlimit(100000)
threading.stack_size(512 << 20)  # some kilobytes of C stack a level
t = threading.Thread(target=main)
t.start()
t.join()
if not isinstance(out[0], int):  # the callback failed: RecursionError
    sys.exit(3)
''')


@pytest.mark.parametrize("python", python_params())
def test_recursion_2000_deep_through_c(memtrace, tmp_path, python):
    """Python -> C -> Python 2,000 times (some 30,000 native frames): the
    hybrid stack is complete and in order, and so is the Python stack."""
    prog = tmp_path / "deep.py"
    prog.write_text(DEEP)
    cap = tmp_path / "d.bin"
    cp = run(memtrace, "run", "--native", "-o", cap, "--python", python, prog, TARGET_LIB, 2000,
             check=False, timeout=300)
    if cp.returncode == 3:
        pytest.skip("%s refuses a recursion 2000 deep through C (its C recursion limit)"
                    % python)
    assert cp.returncode == 0, cp.stderr
    with reader(cap) as r:
        rec = [x for x in r.get_allocation_records() if x.size == 888888][0]
        hybrid = rec.hybrid_stack_trace()
        keep = {"mt_native_a", "mt_native_b", "mt_native_call", "g", "main"}
        names = [f[0] for f in hybrid if f[0] in keep and (f[0] != "main" or f[1] == str(prog))]
        assert names == ["mt_native_b", "mt_native_a", "g"] + ["mt_native_call", "g"] * 2000 + \
            ["main"], (len(names), names[:8], names[-8:])
        assert len(rec.native_stack_trace()) > 20000
        py = [f[0] for f in rec.stack_trace()]
        assert py[:2002] == ["g"] * 2001 + ["main"], py[:4]


@pytest.mark.parametrize("python", python_params()[:1] + python_params()[-1:])
def test_native_with_python_allocators_and_forks(memtrace, tmp_path, python):
    """--native with --trace-python-allocators (pymalloc's events get
    native frames too) and --follow-fork (the child's capture has its own
    module map and native stacks)."""
    prog = tmp_path / "fork_prog.py"
    prog.write_text(PROG.replace("n = lib.mt_native_threads", "import os\n"
                                 "pid = os.fork()\nif pid == 0:\n    f()\n    os._exit(0)\n"
                                 "os.waitpid(pid, 0)\nx = [bytearray(3333) for _ in range(3)]\n"
                                 "n = lib.mt_native_threads"))
    cap = tmp_path / "pf.bin"
    run(memtrace, "run", "--native", "--trace-python-allocators", "--follow-fork", "-o", cap,
        "--python", python, prog, TARGET_LIB, 1, 1)
    children = [p for p in os.listdir(tmp_path) if p.startswith("pf.bin.")]
    assert len(children) == 1, os.listdir(tmp_path)
    with reader(cap) as r:
        recs = [x for x in r.get_allocation_records()
                if x.allocator == memtrace_alloc("PYMALLOC_REALLOC") and x.size == 3334]
        # bytearray(3333) grows its buffer to 3334 bytes with PyObject_Realloc
        assert recs, "no pymalloc record of 3334 bytes"
        hybrid, py = recs[0].hybrid_stack_trace(), recs[0].stack_trace()
        # C frames (PyObject_Realloc's callers) under the Python line
        assert py[0][0] == "<listcomp>" or py[0][0] == "<module>", py
        assert hybrid[0] not in py
        assert_merged(hybrid, py, recs[0].native_stack_trace())
    with reader(tmp_path / children[0]) as r:
        assert r.metadata.has_native_traces
        rec = [x for x in r.get_allocation_records() if x.size == 777777][0]
        assert [f[0] for f in rec.hybrid_stack_trace()[:2]] == ["mt_native_b", "mt_native_a"]


def memtrace_alloc(name):
    return getattr(memtrace.AllocatorType, name)


CPP_SRC = r'''
#include <cstdlib>
namespace ns {
template <typename T> struct Pool {
	__attribute__((noinline)) static void *grow(std::size_t n) { return std::malloc(n * sizeof(T)); }
};
}
__attribute__((noinline)) static void *make(std::size_t n) { return ns::Pool<int>::grow(n); }
extern "C" void *cpp_alloc(std::size_t n) { return make(n); }
'''

CPP_PROG = r'''
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.cpp_alloc.restype = ctypes.c_void_p
lib.cpp_alloc.argtypes = [ctypes.c_size_t]
keep = lib.cpp_alloc(123457)
'''


@pytest.mark.parametrize("debug", [True, False], ids=["dwarf", "symtab"])
def test_cpp_frames_are_demangled(memtrace, tmp_path, debug):
    """C++ frames read as a debugger shows them, qualified and with their
    parameters, from debug information (its linkage names) or from the
    symbol table alone."""
    import shutil
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("no C++ compiler")
    src = tmp_path / "pool.cpp"
    src.write_text(CPP_SRC)
    lib = tmp_path / "libpool.so"
    run(cxx, "-shared", "-fPIC", "-O1", *(["-g"] if debug else []), "-o", lib, src)
    prog = tmp_path / "prog.py"
    prog.write_text(CPP_PROG)
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-q", "--native", "-o", cap, "--python", "/usr/bin/python3", prog, lib)
    with reader(cap) as r:
        recs = [x for x in r.get_allocation_records() if x.size == 123457 * 4]
        assert len(recs) == 1, recs
        names = [f[0] for f in recs[0].hybrid_stack_trace()]
    assert "ns::Pool<int>::grow(unsigned long)" in names, names[:6]
    assert "make(unsigned long)" in names and "cpp_alloc" in names, names[:6]
    assert not any(n.startswith("_Z") for n in names), names
    tree = run(memtrace, "tree", "--leaks", cap).stdout
    assert "ns::Pool<int>::grow(unsigned long)" in tree, tree


def test_tracker_entered_on_another_thread(tmp_path):
    """memray's main thread of a Tracker's capture is the thread that
    entered it, whose hybrid stacks end at its outermost Python frame
    (below it: the threading module's C calls that started the thread)."""
    from test_python_api import py_env
    cap = tmp_path / "thr.bin"
    prog = tmp_path / "thr.py"
    prog.write_text("import sys, threading, memtrace\n"
                    "def work():\n"
                    "    return bytearray(1234567)\n"
                    "def in_thread():\n"
                    "    print(threading.get_native_id())\n"
                    "    with memtrace.Tracker(sys.argv[1], native_traces=True):\n"
                    "        x = work()\n"
                    "t = threading.Thread(target=in_thread)\n"
                    "t.start()\n"
                    "t.join()\n")
    tid = int(run("/usr/bin/python3", prog, cap, env=py_env()).stdout)
    with reader(cap) as r:
        assert r.metadata.main_thread_id == tid
        rec = [x for x in r.get_allocation_records() if x.size == 1234567 + 1][0]
        assert rec.tid == tid
        hybrid = [fr[0] for fr in rec.hybrid_stack_trace()]
        assert "work" in hybrid and hybrid[-1] == "in_thread", hybrid


CTOR_SRC = r'''
#include <stdlib.h>
#include <string.h>
char *mt_ctor_kept;
__attribute__((constructor)) static void mt_ctor_init(void)
{
	static char big[123457];
	memset(big, 'x', sizeof(big) - 1);
	mt_ctor_kept = strdup(big); /* libc's malloc, through libc's own GOT */
}
'''


def test_frames_of_a_library_whose_constructor_runs(memtrace, tmp_path):
    """A library's constructor runs inside dlopen(), before the module map
    that holds the library is written: its frames are still named."""
    src = tmp_path / "ctor.c"
    src.write_text(CTOR_SRC)
    lib = tmp_path / "libctor.so"
    run("cc", "-shared", "-fPIC", "-g", "-o", lib, src)
    prog = tmp_path / "prog.py"
    prog.write_text("import ctypes, sys\nlib = ctypes.CDLL(sys.argv[1])\n")
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-q", "--native", "-o", cap, "--python", "/usr/bin/python3", prog, lib)
    with reader(cap) as r:
        recs = [x for x in r.get_allocation_records() if x.size == 123457]
        assert len(recs) == 1, recs
        frames = recs[0].hybrid_stack_trace()
    ctor = [f for f in frames if f[0] == "mt_ctor_init"]
    assert ctor and ctor[0][1] == str(src) and ctor[0][2] == 9, frames[:4]
    assert not any(f[1] == "<native>" for f in frames), frames
