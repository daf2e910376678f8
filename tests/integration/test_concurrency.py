"""Threads allocating at the same moment, outside the GIL: the payload's
per-thread buffers are merged into one event order (a new epoch almost
every event), and every thread's counts must come out exact."""

import json
import os

import pytest

from conftest import BUILD, python_params, run
from test_python_api import py_env

ALLOC_LIB = os.path.join(BUILD, "tests", "targets", "libmt-alloc-target.so")
THREADS, ROUNDS, KEEP = 6, 40_000, 1000
BASE = 70_001  # thread t allocates BASE + 16 * t bytes each time

PROG = r"""
import ctypes, sys, threading
lib = ctypes.CDLL(sys.argv[1])
lib.mt_target_churn.restype = ctypes.c_size_t
lib.mt_target_churn.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t,
                                ctypes.POINTER(ctypes.c_void_p)]
THREADS, ROUNDS, KEEP, BASE = %d, %d, %d, %d
kept = [(ctypes.c_void_p * (ROUNDS // KEEP))() for _ in range(THREADS)]
start = threading.Barrier(THREADS)
def work(t):
    start.wait()
    assert lib.mt_target_churn(ROUNDS, BASE + 16 * t, KEEP, kept[t]) == ROUNDS // KEEP
threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("done")
""" % (THREADS, ROUNDS, KEEP, BASE)

COUNT = r"""
import collections, json, sys
import memtrace
r = memtrace.FileReader(sys.argv[1])
lo, hi = int(sys.argv[3]), int(sys.argv[4])
allocs, frees, sizes = collections.Counter(), collections.Counter(), {}
for rec in r.get_allocation_records():
    if rec.allocator.is_deallocator:
        if rec.address in sizes:
            frees[sizes.pop(rec.address)] += 1
    elif lo < rec.size < hi:
        allocs[rec.size] += 1
        sizes[rec.address] = rec.size
leaked = collections.Counter(sizes.values())  # never freed
# memray's records: one per call path and thread, whatever the allocator,
# so a thread's record may hold small Python objects made on its line too
grouped = sorted(rec.size for rec in r.get_leaked_allocation_records(merge_threads=False)
                 if rec.size > lo)
json.dump({"allocs": allocs, "frees": frees, "leaked": leaked, "grouped": grouped},
          open(sys.argv[2], "w"))
"""


def count(tmp_path, cap, lo, hi):
    """Allocations, frees and leaks of the sizes in (lo, hi), by size."""
    from test_python_api import py_env
    script, out = tmp_path / "count.py", tmp_path / "counts.json"
    script.write_text(COUNT)
    run("/usr/bin/python3", script, cap, out, lo, hi, env=py_env(), timeout=300)
    return json.loads(out.read_text())


@pytest.mark.parametrize("mode", [[], ["--trace-python-allocators"]], ids=["default", "pyalloc"])
@pytest.mark.parametrize("python", python_params())
def test_concurrent_native_threads_exact(memtrace, tmp_path, python, mode):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", "--python", python, *mode, "-o", cap, prog, ALLOC_LIB, cwd=tmp_path,
            timeout=300)
    assert p.stdout.strip() == "done"
    stats = json.loads(run(memtrace, "stats", "--json", cap).stdout)
    assert stats["status"]["complete"] and stats["totals"]["dropped"] == 0
    # the trailer's count, kept by the writer, is every event written
    lines = run(memtrace, "parse", cap).stdout.splitlines()
    kinds = [line.split(" ", 1)[0] for line in lines]
    assert lines[-1].split()[2] == "events=%d" % (kinds.count("alloc") + kinds.count("free"))
    got = count(tmp_path, cap, 70_000, 80_000)
    for t in range(THREADS):
        size = str(BASE + 16 * t)
        assert got["allocs"].get(size) == ROUNDS, (size, got)
        assert got["frees"].get(size) == ROUNDS - ROUNDS // KEEP, (size, got)
        assert got["leaked"].get(size) == ROUNDS // KEEP, (size, got)
    # each thread's leaks in a record of its own
    grouped = [g for g in got["grouped"] if g >= BASE * (ROUNDS // KEEP)]
    assert len(grouped) == THREADS, got["grouped"]
    for t, total in enumerate(grouped):
        blocks = (BASE + 16 * t) * (ROUNDS // KEEP)
        assert blocks <= total < blocks + 16 * (ROUNDS // KEEP), (t, grouped)


HANDOFF = r"""
import ctypes, queue, sys, threading
lib = ctypes.CDLL(sys.argv[1])
lib.mt_target_alloc.restype = ctypes.c_void_p
lib.mt_target_alloc.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
lib.mt_target_free.argtypes = [ctypes.c_void_p]
N, PAIRS = %d, %d
def make(q, size):
    for _ in range(N):
        q.put(lib.mt_target_alloc(b"malloc", size))
    q.put(None)
def take(q):
    while True:
        p = q.get()
        if p is None:
            return
        lib.mt_target_free(p)
threads = []
for i in range(PAIRS):
    q = queue.Queue(maxsize=64)
    threads += [threading.Thread(target=make, args=(q, 90_001 + 16 * i)),
                threading.Thread(target=take, args=(q,))]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("done")
"""


@pytest.mark.parametrize("python", python_params())
def test_free_on_another_thread_is_ordered_after_its_allocation(memtrace, tmp_path, python):
    """Blocks allocated on one thread and freed on another, the addresses
    then reused: the merged order must put each free after its allocation,
    or the block would show as leaked."""
    n, pairs = 5000, 3
    prog = tmp_path / "prog.py"
    prog.write_text(HANDOFF % (n, pairs))
    cap = tmp_path / "h.bin"
    p = run(memtrace, "run", "--python", python, "-o", cap, prog, ALLOC_LIB, cwd=tmp_path,
            timeout=300)
    assert p.stdout.strip() == "done"
    stats = json.loads(run(memtrace, "stats", "--json", cap).stdout)
    assert stats["status"]["complete"] and stats["totals"]["dropped"] == 0
    got = count(tmp_path, cap, 90_000, 100_000)
    for i in range(pairs):
        size = str(90_001 + 16 * i)
        assert got["allocs"].get(size) == n and got["frees"].get(size) == n, (size, got)
    assert not got["leaked"], got


def test_threads_exiting_as_tracking_stops_lose_nothing(memtrace, tmp_path):
    """Threads that exit while the capture ends, with the writer behind
    (every hand-off is a new epoch): an exiting thread frees its TLS under
    the C library's stack cache lock, which joining the writer takes too.
    It must not wait for the writer then; it used to, for a second, with
    its events counted as dropped (about one run in eight)."""
    prog = tmp_path / "prog.py"
    prog.write_text(HANDOFF % (5000, 3))
    cap = tmp_path / "h.bin"
    for i in range(25):
        p = run(memtrace, "run", "--python", "/usr/bin/python3", "-f", "-o", cap, prog, ALLOC_LIB,
                cwd=tmp_path, timeout=300)
        assert p.stdout.strip() == "done"
        stats = json.loads(run(memtrace, "stats", "--json", cap).stdout)
        assert stats["status"]["complete"], (i, stats["status"])
        assert stats["totals"]["dropped"] == 0, "run %d dropped %d" % (i, stats["totals"]["dropped"])


ORDERED = r"""
import ctypes, sys, threading
lib = ctypes.CDLL(sys.argv[1])
lib.mt_target_ordered.argtypes = [ctypes.c_size_t]
threads = [threading.Thread(target=lib.mt_target_ordered, args=(%d,)) for _ in range(%d)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("done")
"""


def test_events_ordered_by_a_lock_stay_in_order(memtrace, tmp_path):
    """Threads allocate under one lock, so those allocations have a real
    order, which their sizes spell out; the capture must keep it. Taking
    the turn to record was two steps: a thread could store itself as the
    last to record and take its epoch between another thread's two steps,
    and that thread's later events then stayed in an earlier epoch.
    MEMTRACE_TEST_TURN_DELAY widens that window (without the fix, dozens
    of inversions in a run)."""
    rounds, nthreads, base, span = 100_000, 2, 50_000, 40_000
    prog = tmp_path / "prog.py"
    prog.write_text(ORDERED % (rounds, nthreads))
    cap = tmp_path / "o.bin"
    env = dict(os.environ, MEMTRACE_TEST_TURN_DELAY="1")
    for attempt in range(3):
        p = run(memtrace, "run", "--python", "/usr/bin/python3", "-f", "-o", cap, prog, ALLOC_LIB,
                cwd=tmp_path, timeout=300, env=env)
        assert p.stdout.strip() == "done"
        sizes = []
        for line in run(memtrace, "parse", cap).stdout.splitlines():
            if line.startswith("alloc ") and " thread=0 " not in line:  # the workers'
                size = int(line.split(" size=", 1)[1].split()[0])
                if base <= size < base + span:
                    sizes.append(size - base)
        assert len(sizes) == rounds * nthreads
        bad = [i for i in range(1, len(sizes)) if sizes[i] != (sizes[i - 1] + 1) % span]
        assert not bad, "run %d: %d allocations out of order, first at %d: %s" % (
            attempt, len(bad), bad[0], sizes[max(0, bad[0] - 3):bad[0] + 3])


def test_short_threads_say_when_their_index_ends(memtrace, script, tmp_path):
    """A thread-per-request service: each new thread takes over the buffer
    of one that ended, and its THREAD record says which thread index ended,
    so that a reader can drop that index's coding state. No event of an
    index follows the record that ended it, and the reports read whole."""
    prog = script(
        "import threading\n"
        "kept = []\n"
        "def request(i):\n"
        "    data = bytearray(1000 + i)\n"
        "    if i % 500 == 0:\n"
        "        kept.append(bytearray(50_000))\n"
        "for i in range(0, 2000, 4):\n"
        "    ts = [threading.Thread(target=request, args=(i + k,)) for k in range(4)]\n"
        "    for t in ts: t.start()\n"
        "    for t in ts: t.join()\n", "svc.py")
    cap = tmp_path / "svc.bin"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap, prog)
    seen, ended, late, allocating = set(), set(), set(), set()
    for line in run(memtrace, "parse", "-q", cap).stdout.splitlines():
        kind, _, rest = line.partition(" ")
        fields = dict(f.split("=", 1) for f in rest.split() if "=" in f)
        if kind == "thread":
            index = int(fields["index"])
            assert index not in seen and index not in ended, line
            seen.add(index)
            if fields["tid"] == "0":  # the state the ending threads share
                late.add(index)
            if "ended" in fields:
                gone = int(fields["ended"])
                assert gone in seen and gone not in ended and gone < index, line
                ended.add(gone)
        elif kind in ("alloc", "free"):
            assert int(fields["thread"]) not in ended, line
            if kind == "alloc":
                allocating.add(int(fields["thread"]))
    assert len(seen) >= 2001, len(seen)
    # every request thread's index but the last few ends
    assert len(ended) >= len(seen) - 16, (len(ended), len(seen))
    stats = json.loads(run(memtrace, "stats", "--json", cap).stdout)
    # the shared state is listed only if it holds allocations
    assert len(stats["threads"]) == len(seen - late) + len(late & allocating)
    assert stats["totals"]["live_bytes_at_end"] >= 4 * 50_000, stats["totals"]


BURSTS = r"""
import threading
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) * 1024
def burst():
    go = threading.Barrier(201)
    def work():
        keep = [bytearray(200) for _ in range(50)]
        go.wait()
    ts = [threading.Thread(target=work) for _ in range(200)]
    for t in ts: t.start()
    go.wait()
    for t in ts: t.join()
burst()
first = rss()
for _ in range(4):
    burst()
print(first, rss())
"""


IDLE = r"""
import ctypes, os, sys, time
lib = ctypes.CDLL(sys.argv[1])
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) * 1024
def tasks():
    return len(os.listdir("/proc/self/task"))
base = tasks()
def burst():
    assert lib.mt_target_idle_threads(200) == 200
    # detached threads: only the kernel knows when they have ended
    deadline = time.monotonic() + 60
    while tasks() > base:
        assert time.monotonic() < deadline, "idle threads still running"
        time.sleep(0.002)
burst()
first = rss()
for _ in range(9):
    burst()
print(first, rss())
"""


def test_idle_threads_freeing_as_they_end_take_no_state(memtrace, script, tmp_path):
    """Threads started from C that never allocate free, as they end, the
    TLS of threads that ended before them (glibc's stack cache overflows):
    those frees are recorded without the thread taking a state that no key
    destructor would give back (some 90 KB of the program's memory each)."""
    if not os.path.exists(ALLOC_LIB):
        pytest.fail("%s is not built" % ALLOC_LIB)
    cap = tmp_path / "i.bin"
    p = run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap,
            script(IDLE, "idle.py"), ALLOC_LIB)
    first, last = map(int, p.stdout.split())
    assert last - first < 8 << 20, (first, last)  # 1,800 states lost: some 150 MB
    # their frees are in the capture all the same, under the one thread
    # index the ending threads share (besides the main thread's)
    kinds = [line.split()[0] for line in run(memtrace, "parse", "-q", cap).stdout.splitlines()]
    assert kinds.count("free") >= 1800, kinds.count("free")
    assert kinds.count("thread") <= 3, kinds.count("thread")  # 1,934 before


def test_bursts_of_threads_give_their_state_back(memtrace, script, tmp_path):
    """Threads that end together overflow glibc's stack cache, and the last
    to end frees the others' TLS after its own key destructors ran: those
    frees are recorded without the ending thread taking a thread state it
    would never give back (each one lost kept some 90 KB of the program's
    memory), and the states of a burst go back to the system but a few."""
    cap = tmp_path / "b.bin"
    p = run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap,
            script(BURSTS, "bursts.py"))
    first, last = map(int, p.stdout.split())
    assert last - first < 8 << 20, (first, last)  # 800 threads' states: some 70 MB
    # and what a burst leaves is not much more than it leaves untracked
    bare_first, _ = map(int, run("/usr/bin/python3", tmp_path / "bursts.py").stdout.split())
    assert first - bare_first < 12 << 20, (first, bare_first)  # 200 kept: some 17 MB more
    tids = {}
    for line in run(memtrace, "parse", "-q", cap).stdout.splitlines():
        if line.startswith("thread "):
            tid = line.split()[2]
            tids[tid] = tids.get(tid, 0) + 1
    # the kernel may give a tid out again; a thread registers once, and the
    # ending threads' late events share one state of their own
    assert sum(n - 1 for n in tids.values()) <= 2 + len(tids) // 50, sorted(
        n for n in tids.values() if n > 1)


WORKERS = r"""
import threading
def work():
    x = [bytearray(1000) for _ in range(100)]
ts = [threading.Thread(target=work, name="w%d" % i) for i in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
"""


def test_threads_listed_once_though_their_first_frees_go_late(memtrace, script, tmp_path):
    """A thread's frees before its first allocation go through the state
    the ending threads share: that state is no thread of the program, and
    the reports list each thread once (the one that first used it was
    listed twice, once with no allocations, and stats counted one more)."""
    cap = tmp_path / "w.bin"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap,
        script(WORKERS, "workers.py"))
    threads = json.loads(run(memtrace, "stats", "--json", cap).stdout)["threads"]
    assert sorted(t["name"] for t in threads) == ["MainThread", "w0", "w1", "w2", "w3"], threads
    assert len({t["tid"] for t in threads}) == 5, threads
    assert "  threads:            5\n" in run(memtrace, "stats", cap).stdout
    # C threads that never allocate: their frees are recorded, no thread
    # of theirs listed
    if not os.path.exists(ALLOC_LIB):
        pytest.fail("%s is not built" % ALLOC_LIB)
    cap = tmp_path / "i.bin"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap,
        script(IDLE, "idle.py"), ALLOC_LIB)
    threads = json.loads(run(memtrace, "stats", "--json", cap).stdout)["threads"]
    assert [t["name"] for t in threads] == ["MainThread"], threads


PING_PONG = r"""
import queue, sys, threading, time
q1, q2, keep = queue.Queue(), queue.Queue(), []
def ping():
    for i in range(20_000):
        q1.put(bytearray(1000))
        q2.get()
def pong():
    for i in range(20_000):
        keep.append(q1.get())
        q2.put(None)
threads = [threading.Thread(target=ping), threading.Thread(target=pong)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(sys.argv[1], "w") as f:
    f.write(repr(time.time()))
time.sleep(0.5)
"""

SAMPLES_AFTER = r"""
import sys, memtrace
done_ms = float(open(sys.argv[2]).read()) * 1000
heaps = [s.heap for s in memtrace.FileReader(sys.argv[1]).get_memory_snapshots()
         if s.time > done_ms + 150]
print(min(heaps), max(heaps), len(heaps))
"""


def test_samples_follow_threads_that_take_turns(memtrace, tmp_path):
    """Two threads that hand blocks to each other take a new epoch almost
    every event. The writer merged four epochs per wake-up (about 400 a
    second): the threads' buffers filled with epochs it had not taken, the
    threads then waited for it, and the memory samples, which the writer
    adds where its merge has come to, were placed seconds before events
    that happened before them (a thread pool's heap at a sample was half
    what it held). Every epoch taken before a wake-up is now merged in it:
    a sample taken once the threads are done sees all they kept."""
    prog = tmp_path / "prog.py"
    prog.write_text(PING_PONG)
    reader = tmp_path / "read.py"
    reader.write_text(SAMPLES_AFTER)
    cap, done = tmp_path / "p.bin", tmp_path / "done"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-f", "-o", cap, prog, done,
        cwd=tmp_path, timeout=120)
    lo, hi, n = map(int, run("/usr/bin/python3", reader, cap, done, env=py_env()).stdout.split())
    assert n >= 10
    kept = 20_000 * 1000
    assert kept <= lo and hi - lo < 64 << 10, (lo, hi, kept)
