"""Native stacks unwound only as deep as they changed (payload/native-memo.h):
in real programs under `memtrace run --native`, every stack taken in part
from the last event's is the one unwound whole
(MEMTRACE_TEST_NATIVE_CHECK=1 compares them in the process), and a run
with every stack unwound whole (MEMTRACE_TEST_NATIVE_FULL=1) gives the
same hybrid stacks, allocation for allocation. The programs call Python through C at
every level (a class with __call__, functools.partial, map and sorted with a
Python key, ctypes callbacks), resume generators and coroutines from other
callers than the ones that started them, raise through layers, run threads
(one after another: the runs must allocate alike), with and without
Python's own allocators traced."""

import collections
import os
import re
import sys

import pytest

from conftest import BUILD, ROOT, python_params, run

sys.path.insert(0, os.path.join(ROOT, "python"))
import memtrace  # noqa: E402

TARGET_LIB = os.path.join(BUILD, "tests", "targets", "libmt-native-target.so")

PROG = r'''
import ctypes, functools, sys, threading

lib = ctypes.CDLL(sys.argv[1])
lib.mt_native_a.restype = ctypes.c_void_p
lib.mt_native_a.argtypes = [ctypes.c_size_t]
lib.mt_native_free.argtypes = [ctypes.c_void_p]
CB = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int)
lib.mt_native_call.restype = ctypes.c_void_p
lib.mt_native_call.argtypes = [CB, ctypes.c_int]
keep = []


def big(n):
    return bytearray(600 + n)  # past pymalloc's blocks: the C library's


class Layer:
    def __init__(self, inner, level):
        self.inner, self.level = inner, level

    def __call__(self, req):
        keep.append(big(self.level))
        if self.level % 3 == 0:
            out = functools.partial(self.inner)(req)
        elif self.level % 3 == 1:
            out = list(map(self.inner, [req]))[0]
        else:
            out = sorted([req], key=self.inner)[0] and self.inner(req)
        keep.append(big(self.level + 1))
        return out


class Boom(Exception):
    pass


def handler(req):
    keep.append(big(req % 7))
    if req % 5 == 0:
        raise Boom(str(req) * 200)
    return req


def catcher(inner):
    def call(req):
        try:
            return inner(req)
        except Boom as e:
            keep.append(big(len(e.args[0]) % 50))
            return -1
    return call


app = handler
for level in range(24):
    app = Layer(app, level)
    if level % 8 == 4:
        app = catcher(app)


def gen(n):
    for i in range(n):
        keep.append(big(i))
        yield i
        keep.append(big(i + 100))


def coro():
    total = 0
    while True:
        x = yield total
        keep.append(big(x))
        total += x


def drive_a(g, c):
    keep.append(big(1))
    return next(g), c.send(3)


def drive_b(g, c):
    return Layer(lambda r: (next(g), c.send(r)), 99)(5)


def through_c(d, g, c):
    def cb(k):
        if k == 0:
            drive_b(g, c) if d % 2 else drive_a(g, c)
            keep.append(lib.mt_native_a(777 + d))
            return 0
        keep.append(big(k))
        return lib.mt_native_call(CB(cb), k - 1)
    return lib.mt_native_call(CB(cb), d)


def work(rounds):
    g = gen(10 ** 6)
    c = coro()
    next(c)
    for i in range(rounds):
        app(i)
        drive_a(g, c) if i % 2 else drive_b(g, c)
        through_c(i % 4, g, c)
        keep.clear()


work(int(sys.argv[2]))
for _ in range(3):  # one after another, so that each run allocates the same
    t = threading.Thread(target=work, args=(int(sys.argv[2]) // 2,))
    t.start()
    t.join()
'''


def stacks(capture):
    """Each allocation's size and hybrid stack (function, file, line), as a
    multiset, and the main thread's in order; but pymalloc's arenas (256 KiB
    and 1 MiB), whose moment depends on where objects landed in the ones
    before, which moves with the addresses of a run."""
    every, first = collections.Counter(), []
    with memtrace.FileReader(str(capture)) as r:
        main = None
        for x in r.get_allocation_records():
            if x.allocator.is_deallocator or x.size >= 256 << 10:
                continue
            key = (x.size, tuple(x.hybrid_stack_trace()))
            every[key] += 1
            main = x.tid if main is None else main
            if x.tid == main:
                first.append(key)
    return every, first


def run_prog(memtrace, tmp_path, python, env, pyalloc=False, name="n.bin"):
    if not os.path.exists(TARGET_LIB):
        pytest.fail("%s is not built" % TARGET_LIB)
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    cap = tmp_path / name
    args = ["run", "--native", "-q", "-o", cap, "--python", python]
    if pyalloc:
        args.append("--trace-python-allocators")
    cp = run(memtrace, *args, prog, TARGET_LIB, 12, env=dict(os.environ, PYTHONHASHSEED="0", **env),
             timeout=300)
    return cap, cp.stderr


def python_minor(python):
    out = run(python, "-c", "import sys; print(sys.version_info[1])").stdout
    return int(out)


@pytest.mark.parametrize("python", python_params())
@pytest.mark.parametrize("pyalloc", [False, True], ids=["malloc", "python-allocators"])
def test_every_stack_taken_in_part_is_the_one_unwound(memtrace, tmp_path, python, pyalloc):
    """The walk proves frames unchanged with tokens on 3.11 and with the
    exit feed (on while Python's allocators are traced) elsewhere: there
    stacks are taken in part from the last event's, each one unwound whole
    too and compared."""
    from test_native import unwound_as_libunwind
    cap, err = run_prog(memtrace, tmp_path, python, {"MEMTRACE_TEST_NATIVE_CHECK": "1",
                                                     "MEMTRACE_TEST_UNWIND_CHECK": "1"}, pyalloc)
    m = re.search(r"native stacks taken from the last event's: (\d+), wrong: (\d+)", err)
    assert m, err
    used, wrong = int(m.group(1)), int(m.group(2))
    assert wrong == 0 and "is not the one unwound" not in err, err[:2000]
    # and every stack the payload unwound itself, as libunwind unwinds it
    checked, fell_back = unwound_as_libunwind(err)
    assert checked > 1000 and fell_back == 0, (checked, fell_back)
    if pyalloc or python_minor(python) == 11:
        assert used > 100, err
    deep = [k for k in stacks(cap)[0] if sum(f[0] == "mt_native_call" for f in k[1]) >= 3]
    assert deep


@pytest.mark.parametrize("python", python_params())
def test_stacks_as_unwound_whole(memtrace, tmp_path, python):
    """Without Python's allocators traced, the program allocates alike in
    every run: on 3.11 (tokens, no exit feed) the hybrid stacks are those of
    a run with MEMTRACE_TEST_NATIVE_FULL=1 (which takes no stack in part),
    in the main thread in order, in all as a multiset; and those of a run
    that unwinds with libunwind alone (MEMTRACE_TEST_LIBUNWIND=1)."""
    if python_minor(python) != 11:
        pytest.skip("the exit feed, which changes the interpreter's C stack, may come on in "
                    "one run and not in the other: test_every_stack_taken_in_part_is_the_one_"
                    "unwound compares within one run")
    got, used = {}, {}
    for full, lib in (("1", "0"), ("0", "0"), ("1", "1")):
        cap, err = run_prog(memtrace, tmp_path, python, {"MEMTRACE_TEST_NATIVE_FULL": full,
                                                         "MEMTRACE_TEST_NATIVE_CHECK": "1",
                                                         "MEMTRACE_TEST_LIBUNWIND": lib},
                            name="full%s-%s.bin" % (full, lib))
        m = re.search(r"native stacks taken from the last event's: (\d+), wrong: 0\n", err)
        assert m, err[:2000]
        got[full + lib], used[full + lib] = stacks(cap), int(m.group(1))
    # the switch unwinds every stack whole
    assert used["10"] == 0 and used["00"] > 0 and used["11"] == 0, used
    whole, memo, libunwind = got["10"], got["00"], got["11"]
    # the payload's unwinder and libunwind's give the same stacks
    assert libunwind == whole
    assert len(whole[0]) > 100, len(whole[0])
    assert len(memo[1]) == len(whole[1])
    assert memo[1] == whole[1], next(
        (i, a, b) for i, (a, b) in enumerate(zip(memo[1], whole[1])) if a != b)
    assert memo[0] == whole[0], (memo[0] - whole[0], whole[0] - memo[0])


ERRORS = r'''
import sys

keep = []
sys.setrecursionlimit(300)


def unbound():
    try:
        keep.append(x)
        x = 1
    except UnboundLocalError as e:
        keep.append(e)


def star():
    try:
        keep.append(max(*1))
    except TypeError as e:
        keep.append(e)


def dstar():
    try:
        keep.append(dict(**1))
    except TypeError as e:
        keep.append(e)


def with_int():
    try:
        with 1:
            pass
    except (TypeError, AttributeError) as e:
        keep.append(e)


def raise_int():
    try:
        raise 1
    except TypeError as e:
        keep.append(e)


def overflow(n=0):
    keep.append([n])
    overflow(n + 1)


def recursion_error():
    try:
        overflow()
    except RecursionError as e:
        keep.append(e)


def layer(d):
    if d == 0:
        for i in range(100):
            for f in (unbound, star, dstar, with_int, raise_int):
                f()
        recursion_error()
        keep.clear()
        return
    sorted([d], key=lambda k: layer(k - 1))


for r in range(10):
    layer(10)
'''


@pytest.mark.parametrize("python", python_params())
def test_errors_made_in_the_loops_out_of_line_code(memtrace, tmp_path, python):
    """The messages of errors the evaluation loop raises itself are made in
    calls from its out-of-line part (Debian's python3 moves some 13 KiB of
    it there): each is counted as the loop it is, or the stacks taken in
    part would end one loop too far out. A RecursionError is raised (before
    3.11) by a loop whose frame the chain does not have yet."""
    prog = tmp_path / "errors.py"
    prog.write_text(ERRORS)
    cp = run(memtrace, "run", "--native", "--trace-python-allocators", "-q", "-o",
             tmp_path / "e.bin", "--python", python, prog,
             env=dict(os.environ, MEMTRACE_TEST_NATIVE_CHECK="1"))
    m = re.search(r"native stacks taken from the last event's: (\d+), wrong: (\d+)", cp.stderr)
    assert m and int(m.group(1)) > 1000 and int(m.group(2)) == 0, cp.stderr[:2000]


SIGNALS = r'''
import signal

keep = []
hits = [0]


def handler(signum, frame):
    hits[0] += 1
    keep.append(bytearray(3000))
    keep.append([hits[0]] * 10)


def g(n):
    if n:
        return g(n - 1)
    for i in range(2000):
        keep.append(bytearray(1000 + i % 5))
        keep.append([i, i])
        if len(keep) > 100:
            del keep[:50]


signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
rounds = 0
while hits[0] < 200 or rounds < 20:
    g(20)
    rounds += 1
signal.setitimer(signal.ITIMER_REAL, 0)
print("signals", hits[0])
'''


@pytest.mark.parametrize("python", python_params())
def test_signal_handlers_run_between_events(memtrace, tmp_path, python):
    """A Python signal handler runs from whichever loop the signal finds,
    on top of its frame: at least 200 of them, allocating, between the
    events of a recursion; every stack taken in part is the one unwound."""
    prog = tmp_path / "signals.py"
    prog.write_text(SIGNALS)
    cp = run(memtrace, "run", "--native", "--trace-python-allocators", "-o",
             tmp_path / "s.bin", "--python", python, prog,
             env=dict(os.environ, MEMTRACE_TEST_NATIVE_CHECK="1"))
    assert re.search(r"^signals \d{3,}$", cp.stdout, re.M), cp.stdout
    m = re.search(r"native stacks taken from the last event's: (\d+), wrong: (\d+)", cp.stderr)
    assert m and int(m.group(2)) == 0, cp.stderr[:2000]


FEED_PROG = r"""
import ctypes
import sys
import threading
import time

lib = ctypes.CDLL(sys.argv[1])
CB = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int)
lib.mt_native_call.restype = ctypes.c_void_p
lib.mt_native_call.argtypes = [CB, ctypes.c_int]


def feed_on():
    if sys.version_info >= (3, 12):
        return "memtrace" in (sys.monitoring.get_tool(4), sys.monitoring.get_tool(3))
    hook = getattr(threading, "_profile_hook", None)
    return getattr(hook, "__name__", "") == "memtrace_thread_profile"


def bottom():
    # few Python frames over a deep native stack: reading the Python
    # stack costs little, unwinding the native one much
    deadline = time.monotonic() + 60
    while not feed_on():
        for _ in range(200):
            b = bytearray(600)
        if time.monotonic() > deadline:
            sys.exit("the exit feed never came on")
    for _ in range(2000):
        b = bytearray(600)
    return 0


def cb(k):
    if k == 0:
        return bottom()
    return lib.mt_native_call(CB(cb), k - 1)


lib.mt_native_call(CB(cb), 20)
"""


@pytest.mark.parametrize("python", python_params())
def test_the_exit_feed_comes_on_for_what_unwinding_costs(memtrace, tmp_path, python):
    """Default mode weighs the cost of unwinding native stacks with that of
    reading Python ones: a program whose native stack is deep under few
    Python frames gets the exit feed, whose proofs then let native stacks
    be taken in part (each one unwound whole too and compared)."""
    if python_minor(python) == 11:
        pytest.skip("3.11 proves frames unchanged with tokens, without the exit feed")
    prog = tmp_path / "feed.py"
    prog.write_text(FEED_PROG)
    cp = run(memtrace, "run", "--native", "-q", "-o", tmp_path / "f.bin", "--python", python,
             prog, TARGET_LIB, env=dict(os.environ, MEMTRACE_TEST_NATIVE_CHECK="1"), timeout=300)
    m = re.search(r"native stacks taken from the last event's: (\d+), wrong: (\d+)", cp.stderr)
    assert m and int(m.group(1)) >= 1000 and int(m.group(2)) == 0, cp.stderr[:2000]
