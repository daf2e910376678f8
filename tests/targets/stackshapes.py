"""Allocations under many shapes of Python stack, each with the stack Python
itself reports for it.

Every tracked allocation is a bytearray of a size used once, made on the
same line as the call to note(), which stores the frames (function, line)
(qualified where the code object has one) as sys._getframe() sees them, innermost first. The shapes are chosen to
change the frame chain between two allocations in every way a stack reader
that reuses its last walk could get wrong: deeper and shallower calls,
another function at the same depth and address, a generator resumed from
different callers, unwinding from an exception, __del__ run by a decref,
Python called back from C, chains of calls through C a call or more deeper
at each allocation, comprehensions and lambdas, functions made at
the address of one that died, generators delegating with yield from and
driven by send, throw and close, coroutines of interleaved asyncio tasks,
the program's own profile and trace functions, recursion deeper than the
tracked limit, and threads doing all of it at once.

Usage: stackshapes.py OUT.json   (writes {size: [[function, line], ...]})
"""
import asyncio
import itertools
import json
import sys
import threading

EXPECTED = {}
LOCK = threading.Lock()
_next = [300_001]


# Sizes for allocations in profile and trace functions, which may run
# while site() holds LOCK: taken without it (next() is atomic).
HOOK_SITES = itertools.count(900_001, 8)


def site():
    with LOCK:
        n = _next[0]
        _next[0] += 8
    return n


def note(n):
    f = sys._getframe(1)
    frames = []
    while f is not None:
        code = f.f_code
        frames.append([getattr(code, "co_qualname", code.co_name), f.f_lineno])
        f = f.f_back
    EXPECTED[n + 1] = frames  # a bytearray of n bytes allocates n + 1


def leaf():
    n = site(); b = bytearray(n); note(n)


def mid():
    leaf()
    n = site(); b = bytearray(n); note(n)
    leaf()


def outer():
    mid()
    leaf()
    mid()


def one():
    leaf()


def two():
    leaf()


def same_depth():
    # one() and two() occupy the same frame slot in turn
    for _ in range(4):
        one()
        two()
        n = site(); b = bytearray(n); note(n)


def recurse(d):
    n = site(); b = bytearray(n); note(n)
    if d:
        recurse(d - 1)
    n = site(); b = bytearray(n); note(n)


def gen():
    while True:
        n = site(); b = bytearray(n); note(n)
        yield


def resume_a(g):
    next(g)


def resume_b(g):
    resume_a(g)
    next(g)


def generators():
    g = gen()
    for _ in range(3):
        resume_a(g)
        resume_b(g)
        next(g)


def throw(d):
    if d == 0:
        raise ValueError("bottom")
    throw(d - 1)


def unwind():
    for _ in range(3):
        try:
            throw(25)
        except ValueError:
            n = site(); b = bytearray(n); note(n)


class Holder:
    def __del__(self):
        n = site(); b = bytearray(n); note(n)


def finalizers():
    for _ in range(3):
        h = Holder()
        del h


def keyed(x):
    n = site(); b = bytearray(n); note(n)
    return x


def callbacks():
    sorted([3, 1, 2], key=keyed)
    list(map(keyed, [1, 2]))


class Layer:
    """A layer of middleware: called through C (slot_tp_call), so each one
    is an entry frame running in a call through C."""

    def __init__(self, inner, allocates):
        self.inner, self.allocates = inner, allocates

    def __call__(self, d):
        if self.allocates:
            # noted first: no call in between runs this frame again
            n = site(); note(n); b = bytearray(n)
        r = self.inner(d + 1) if self.inner is not None else d
        n = site(); b = bytearray(n); note(n)
        return r


def through_c():
    # each allocation on the way down a call or more deeper than the one
    # before (one, two, then six at once: more than the walk compares with
    # the last newest frame alone), each on the way back up shallower,
    # then down again through another chain
    app = None
    for i in range(14):
        app = Layer(app, i not in (3, 7, 8, 9, 10, 11))
    app(0)
    Layer(Layer(app, True), False)(0)


def comprehensions():
    ks = [site() for _ in range(3)]
    out = [(bytearray(k), note(k)) for k in ks]
    f = lambda n: (bytearray(n), note(n))  # noqa: E731
    f(site())
    return out


def made_where_others_died():
    # Each function is compiled, run and dropped: the next one's code object
    # is made where this one's was freed, at other lines under another name.
    for i in range(12):
        src = "def made_%d():\n" % i + "    pass\n" * (i % 5) + (
            "    n = site(); b = bytearray(n); note(n)\n"
            "    for _ in range(2):\n"
            "        n = site(); b = bytearray(n); note(n)\n")
        space = {"site": site, "note": note}
        exec(compile(src, "made_%d.py" % i, "exec"), space)
        space["made_%d" % i]()
        del space


def inner_gen():
    n = site(); b = bytearray(n); note(n)
    x = yield 1
    n = site(); b = bytearray(n); note(n)
    yield x


def outer_gen():
    y = yield from inner_gen()
    n = site(); b = bytearray(n); note(n)
    yield y


def delegating():
    # yield from, send, throw and close, from different callers
    for _ in range(2):
        g = outer_gen()
        next(g)
        g.send(5)
        resume_a(g)
        g = outer_gen()
        next(g)
        try:
            g.throw(KeyError("thrown"))
        except KeyError:
            n = site(); b = bytearray(n); note(n)
        g = gen()
        next(g)
        g.close()
        n = site(); b = bytearray(n); note(n)


async def leaf_coro(d):
    if d:
        return await leaf_coro(d - 1)
    n = site(); b = bytearray(n); note(n)
    await asyncio.sleep(0)
    n = site(); b = bytearray(n); note(n)
    return d


async def task_body(k):
    for _ in range(2):
        await leaf_coro(k)
        n = site(); b = bytearray(n); note(n)


def coroutines():
    # tasks interleave at every await, each resumed from the event loop
    async def main():
        await asyncio.gather(*(task_body(k) for k in (3, 7, 12)))
    asyncio.run(main())


def held_operands():
    # a call through C (sorted calling keyed) while this frame holds
    # operands on its stack: entered under a profile or trace function,
    # 3.11.0 to 3.11.2 leave its stack pointer saved while it runs
    return ("a", "b", sorted([3, 1, 2], key=keyed), "c")


def profiled_body():
    held_operands()
    leaf()
    recurse(5)
    n = site(); b = bytearray(n); note(n)


def own_profiler():
    # the program's own profile and trace functions, which allocate; the
    # frames they run exit unreported to anyone else
    seen = []

    def prof(frame, event, arg):
        seen.append((event, bytearray(64)))
        if event == "return" and len(seen) % 7 == 0:
            n = next(HOOK_SITES); b = bytearray(n); note(n)

    def trace(frame, event, arg):
        seen.append((event, bytearray(64)))
        if event == "line" and len(seen) % 5 == 0:
            n = next(HOOK_SITES); b = bytearray(n); note(n)
        return trace

    sys.setprofile(prof)
    profiled_body()
    sys.setprofile(None)
    profiled_body()
    sys.settrace(trace)
    profiled_body()
    sys.settrace(None)
    profiled_body()


def bottom(d):
    if d:
        return bottom(d - 1)
    n = site(); b = bytearray(n); note(n)


def everything(rounds):
    for _ in range(rounds):
        outer()
        same_depth()
        recurse(40)
        generators()
        unwind()
        finalizers()
        callbacks()
        through_c()
        comprehensions()
        made_where_others_died()
        delegating()
        coroutines()
        own_profiler()
        leaf()


def main():
    sys.setrecursionlimit(25000)
    everything(2)
    bottom(3000)  # three times Python's default limit: kept whole
    if "deep" in sys.argv[2:]:
        # deeper than the walk follows (20488 frames), of which the newest
        # 16384 are kept, on a thread with a stack for it; every event
        # down there reads the whole 20488 (docs/stacks.md), so not with
        # Python allocators, where there are thousands
        threading.stack_size(512 << 20)
        t = threading.Thread(target=bottom, args=(21000,))
        t.start()
        t.join()
        threading.stack_size(0)
    everything(1)
    threads = [threading.Thread(target=everything, args=(3,)) for _ in range(3)]
    for t in threads:
        t.start()
    everything(3)
    for t in threads:
        t.join()
    with open(sys.argv[1], "w") as fp:
        json.dump(EXPECTED, fp)


if __name__ == "__main__":
    main()
