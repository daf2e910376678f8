"""memtrace run --follow-fork and Tracker(follow_fork=True): a child of
fork() (without exec) gets a capture of its own, "<capture>.<pid>", that
starts at the fork."""

import json
import os
import re

import pytest

from conftest import python_params, report_json, run
from test_python_api import run_py

FORKER = """\
import os, sys


def parent_keep():
    return bytearray(5_000_000)


def child_keep():
    return bytearray(7_000_000)


inherited = bytearray(2_000_000)
pid = os.fork()
if pid == 0:
    del inherited
    kept = child_keep()
    print("child", os.getpid(), flush=True)
    %s
os.waitpid(pid, 0)
kept = parent_keep()
print("parent", os.getpid(), flush=True)
"""


def own(rows, function, path):
    return sum(r["own_bytes"] for r in rows if r["function"] == function and r["file"] == str(path))


def pids(stdout):
    words = dict(line.split() for line in stdout.splitlines())
    return int(words["parent"]), int(words["child"])


@pytest.mark.parametrize("exit", ["os._exit(0)", "sys.exit(0)"], ids=["os._exit", "sys.exit"])
@pytest.mark.parametrize("python", python_params())
def test_child_of_a_fork_gets_a_capture_of_its_own(memtrace, script, tmp_path, python, exit):
    prog = script(FORKER % exit)
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", "--follow-fork", "--python", python, "-o", cap, prog, cwd=tmp_path)
    parent, child = pids(p.stdout)
    child_cap = tmp_path / ("c.bin.%d" % child)
    assert sorted(os.listdir(tmp_path)) == sorted(["prog.py", "c.bin", child_cap.name])

    stats = report_json(memtrace, "stats", child_cap)
    assert stats["status"]["complete"], stats["status"]
    h = stats["header"]
    assert (h["pid"], h["forked"], h["follow_fork"], h["attached"]) == (child, True, True, False)
    assert "forked from process %d: tracking starts at the fork" % parent in [
        d["message"] for d in stats["diagnostics"]]
    # the thread that forked, under Python's name for it (threading keeps
    # the parent's kernel id for it before 3.12)
    assert [t["name"] for t in stats["threads"]] == ["MainThread"], stats["threads"]
    leaks = report_json(memtrace, "summary", child_cap, "--leaks")["rows"]
    assert 7_000_000 <= own(leaks, "child_keep", prog) <= 7_000_100, leaks[:5]
    # the inherited block is not the child's, and its free is of an
    # address this capture never saw
    assert own(leaks, "<module>", prog) < 1_000_000
    assert stats["totals"]["unmatched_frees"] >= 1, stats["totals"]
    # what the allocator held as tracking started, when a sample says, is
    # the parent's
    text = run(memtrace, "stats", child_cap).stdout
    assert "as tracking started" not in text or \
        "was in use as tracking started (the parent's, copied at the fork)" in text, text

    pstats = report_json(memtrace, "stats", cap)
    assert pstats["status"]["complete"] and pstats["header"]["pid"] == parent
    assert not pstats["header"]["forked"] and pstats["header"]["follow_fork"]
    pleaks = report_json(memtrace, "summary", cap, "--leaks")["rows"]
    assert 5_000_000 <= own(pleaks, "parent_keep", prog) <= 5_000_100
    assert 2_000_000 <= own(pleaks, "<module>", prog) <= 2_001_000  # still the parent's


def test_without_follow_fork_children_have_no_capture(memtrace, script, tmp_path):
    prog = script(FORKER % "os._exit(0)")
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-o", cap, prog, cwd=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["c.bin", "prog.py"]
    assert not report_json(memtrace, "stats", cap)["header"]["follow_fork"]


def test_python_allocators_and_grandchildren(memtrace, script, tmp_path):
    """A child's capture traces Python allocators as its parent's did, and
    a child of the child gets "<child's capture>.<pid>"."""
    prog = script("""\
import os


def strings(n):
    return [str(i) * 3 for i in range(n)]


pid = os.fork()
if pid == 0:
    grand = os.fork()
    if grand == 0:
        s = strings(3000)
        print("grandchild", os.getpid(), flush=True)
        os._exit(0)
    os.waitpid(grand, 0)
    s = strings(2000)
    print("child", os.getpid(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
""")
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", "--follow-fork", "--trace-python-allocators", "-o", cap, prog,
            cwd=tmp_path)
    words = dict(line.split() for line in p.stdout.splitlines())
    child_cap = tmp_path / ("c.bin.%s" % words["child"])
    grand_cap = tmp_path / ("c.bin.%s.%s" % (words["child"], words["grandchild"]))
    assert sorted(os.listdir(tmp_path)) == sorted(["prog.py", "c.bin", child_cap.name,
                                                   grand_cap.name])
    for c, n in ((child_cap, 2000), (grand_cap, 3000)):
        stats = report_json(memtrace, "stats", c)
        assert stats["status"]["complete"] and stats["header"]["python_allocators"]
        leaks = report_json(memtrace, "summary", c, "--leaks")["rows"]
        rows = [r for r in leaks if r["function"] == "strings" and r["file"] == str(prog)]
        # n strings, and the list (from 3.12 the comprehension is inlined)
        assert rows and n < rows[0]["total_allocations"] < n + 50, rows


def test_multiprocessing_workers(memtrace, script, tmp_path):
    """A fork-context pool: every worker's capture is complete and holds
    the work it did."""
    prog = script("""\
import multiprocessing as mp, os


def work(i):
    keep.append(bytearray(1_000_000))
    return os.getpid()


keep = []
if __name__ == "__main__":
    pool = mp.get_context("fork").Pool(2)
    workers = set(pool.map(work, range(8), chunksize=1))
    pool.close()
    pool.join()
    print(" ".join(map(str, sorted(workers))))
""")
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", "--follow-fork", "--python", "/usr/bin/python3", "-o", cap, prog,
            cwd=tmp_path)
    workers = [int(w) for w in p.stdout.split()]
    assert workers
    total = 0
    for w in workers:
        c = tmp_path / ("c.bin.%d" % w)
        stats = report_json(memtrace, "stats", c)
        assert stats["status"]["complete"], (w, stats["status"])
        leaks = report_json(memtrace, "summary", c, "--leaks")["rows"]
        total += own(leaks, "work", prog)
    assert 8_000_000 <= total <= 8_001_000


@pytest.mark.parametrize("why", ["name-too-long", "file-exists"])
def test_child_whose_capture_cannot_be_made_runs_untracked(memtrace, script, tmp_path, why):
    """The child's capture is a new file: a name of 254 bytes leaves no
    room for ".<pid>", and a file (or a symbolic link) of that name is
    left alone. The child runs on untracked, and nothing is printed into
    its output."""
    prog = script(FORKER % "os._exit(0)")
    cap = tmp_path / ("c" * 250 + ".bin" if why == "name-too-long" else "c.bin")
    if why == "file-exists":
        # the child's pid is not known before the fork: the next ones
        with open("/proc/sys/kernel/ns_last_pid") as f:
            last = int(f.read())
        with open("/proc/sys/kernel/pid_max") as f:
            pid_max = int(f.read())
        taken = {300 + (last + i - 300) % (pid_max - 300) for i in range(1, 3000)}
        victim = tmp_path / "victim"
        victim.write_text("keep")
        d = tmp_path / "taken"
        d.mkdir()
        for pid in taken:
            os.symlink(victim, d / ("c.bin.%d" % pid))
        cap = d / "c.bin"
    p = run(memtrace, "run", "--follow-fork", "--python", "/usr/bin/python3", "-o", cap, prog,
            cwd=tmp_path)
    assert p.stderr == "memtrace: capture written to %s\n" % cap
    parent, child = pids(p.stdout)
    if why == "file-exists":
        if child not in taken:
            pytest.skip("3000 other processes started meanwhile: pid %d was not foreseen" % child)
        assert (tmp_path / "victim").read_text() == "keep"
        assert os.path.islink(cap.parent / ("c.bin.%d" % child))
    else:
        assert sorted(os.listdir(tmp_path)) == sorted(["prog.py", cap.name])
    assert report_json(memtrace, "stats", cap)["status"]["complete"]


@pytest.mark.parametrize("python", python_params())
def test_subprocess_children_get_no_capture(memtrace, script, tmp_path, python):
    """A fork that only leads to exec (subprocess; before 3.10 it forks)
    runs none of Python's after-fork hooks: no capture for it."""
    prog = script("import subprocess, sys\n"
                  "for i in range(3):\n"
                  "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
                  "print('done')\n")
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", "--follow-fork", "--python", python, "-o", cap, prog, cwd=tmp_path)
    assert p.stdout == "done\n"
    assert sorted(os.listdir(tmp_path)) == ["c.bin", "prog.py"]


def test_tracker_follow_fork(tmp_path):
    p = run_py("/usr/bin/python3", """
        import os, memtrace
        with memtrace.Tracker("t.bin", follow_fork=True):
            pid = os.fork()
            if pid == 0:
                data = bytearray(3_000_000)
        if pid == 0:
            # the child's block has ended, and its capture with it
            r = memtrace.FileReader("t.bin.%d" % os.getpid())
            sizes = [a.size for a in r.get_leaked_allocation_records()]
            m = r.metadata
            print("child", any(3_000_000 <= s <= 3_000_100 for s in sizes), m.forked,
                  m.options["follow_fork"], m.finished, flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print("parent", os.path.exists("t.bin.%d" % pid))
        """, tmp_path)
    assert p.stdout.splitlines() == ["child True True True True", "parent True"], (p.stdout, p.stderr)


WALKS_DURING_FORK = r"""
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

/* A fork handler of the program's that keeps the fork waiting longer than
 * a walk of the payload's waits for it, and a thread whose dlopen calls
 * make the payload walk the loaded objects all the time. */
static void slow_prepare(void) { usleep(400000); }

static void *open_close(void *arg)
{
    (void)arg;
    for (;;) {
        void *h = dlopen("libm.so.6", RTLD_NOW);
        if (h)
            dlclose(h);
    }
    return 0;
}

int start(void)
{
    pthread_t t;
    if (pthread_atfork(slow_prepare, 0, 0))
        return -1;
    return pthread_create(&t, 0, open_close, 0);
}
"""


def test_child_forked_during_a_walk_says_so(memtrace, tmp_path, cc):
    """A fork that another thread's walk of the loaded objects may have
    overlapped (the program's own fork handler held the fork past the
    walk's wait) leaves a child that must not walk: its capture ends at
    once, saying why, and neither process hangs."""
    (tmp_path / "walks.c").write_text(WALKS_DURING_FORK)
    run(cc, "-shared", "-fPIC", "-O1", "-o", tmp_path / "libwalks.so", tmp_path / "walks.c",
        "-lpthread", "-ldl")
    p = run_py("/usr/bin/python3", """
        import ctypes, os, time, memtrace
        lib = ctypes.CDLL(os.path.abspath("libwalks.so"))
        # the handler is registered before the Tracker's: it runs inside
        # the payload's guarded window, as an attached program's do
        assert lib.start() == 0
        with memtrace.Tracker("t.bin", follow_fork=True):
            time.sleep(0.05)
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        print(pid)
        """, tmp_path, timeout=60)
    child = int(p.stdout)
    stats = report_json(memtrace, "stats", tmp_path / ("t.bin.%d" % child))
    assert stats["header"]["forked"], stats["header"]
    messages = [d["message"] for d in stats["diagnostics"]]
    assert any("forked while another thread walked the loaded objects" in m
               for m in messages), messages
    assert report_json(memtrace, "stats", tmp_path / "t.bin")["status"]["complete"]


def test_child_that_execs_finishes_its_capture(memtrace, script, tmp_path):
    """A followed child that replaces itself with another program: its
    capture is finished before the exec."""
    prog = script(FORKER % "os.execv(sys.executable, [sys.executable, '-c', 'pass'])")
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", "--follow-fork", "--python", "/usr/bin/python3", "-o", cap, prog,
            cwd=tmp_path)
    parent, child = pids(p.stdout)
    stats = report_json(memtrace, "stats", tmp_path / ("c.bin.%d" % child))
    assert stats["status"]["complete"], stats["status"]
    assert "the program called exec: the capture ends there" in [
        d["message"] for d in stats["diagnostics"]]
    leaks = report_json(memtrace, "summary", tmp_path / ("c.bin.%d" % child), "--leaks")["rows"]
    assert 7_000_000 <= own(leaks, "child_keep", prog) <= 7_000_100


FORK_WARNING = """\
import os, threading, warnings


def alone():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def threaded():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def alone_pty():
    pid, fd = os.forkpty()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(fd)


alone()
alone()
alone_pty()
with warnings.catch_warnings():  # a copy of the filters, put back after
    alone()
print("single-threaded forks pass")
ev = threading.Event()
t = threading.Thread(target=ev.wait)
t.start()
threaded()
ev.set()
t.join()
"""


@pytest.mark.parametrize("follow", [False, True], ids=["plain", "follow-fork"])
@pytest.mark.parametrize("python", python_params())
def test_fork_warns_as_it_would_untracked(memtrace, script, tmp_path, python, follow):
    """From 3.12 os.fork() in the main module warns when the process has
    threads: memtrace's writer thread must not make a single-threaded
    program's forks warn, and a program with threads of its own is warned
    as it would be untracked (once here, from 3.12)."""
    prog = script(FORK_WARNING)
    bare = run(python, prog)
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", *(["--follow-fork"] if follow else []), "--python", python,
            "-o", cap, prog, cwd=tmp_path)
    assert p.stdout == bare.stdout == "single-threaded forks pass\n"
    warned = re.findall(r"prog.py:(\d+): DeprecationWarning: This process", p.stderr)
    assert warned == re.findall(r"prog.py:(\d+): DeprecationWarning: This process",
                                bare.stderr), (p.stderr, bare.stderr)
    assert warned in ([], ["12"])  # threaded(), from 3.12, and no other
