"""memtrace attach and the program's forks and imports: attaching imports
what the program may not have yet, and must leave neither a lock that a
forked child waits for forever nor a threading module that takes
memtrace's thread for the main one; attach --follow-fork gives children
their own captures."""

import os
import select
import subprocess
import sys
import time

import pytest

from conftest import python_params, report_json, run
from test_memray_habits import module_env

# The program has not imported atexit, which attaching registers a hook
# with. A finder holds atexit's import (and its module lock) on any thread
# but the main one, while the main thread forks: from 3.11, where a fork
# child keeps the lock, the child's own import of atexit waits forever for
# a thread it does not have, unless the fork waited for the import (3.8 to
# 3.10 free the lock with the other threads' states).
# With --follow-fork, on any version, the child has a capture only if the
# fork waited for the after-fork hook to be registered.
HELD_IMPORT = """\
import _thread, os, sys, time
if "atexit" in sys.modules:
    print("preloaded", flush=True)
    sys.exit(0)
MAIN = _thread.get_ident()
r, w = os.pipe()


class HoldAtexit:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "atexit" and _thread.get_ident() != MAIN:
            os.write(w, b"x")
            time.sleep(0.5)  # the import holds its lock this long
        return None


sys.meta_path.insert(0, HoldAtexit)
print("ready", flush=True)
os.read(r, 1)
pid = os.fork()
if pid == 0:
    kept = bytearray(3_000_007)
    import atexit
    print("child", os.getpid(), flush=True)
    sys.exit(0)
_, status = os.waitpid(pid, 0)
print("status", status, flush=True)
sys.stdin.readline()
"""

# The program imports threading only after the attach, once memtrace has:
# it runs Python code until then (the pending call's chance), as a program
# would, and gives up after 60 s.
LATE_THREADING = """\
import _thread, sys, time
if "threading" in sys.modules:
    print("preloaded", flush=True)
    sys.exit(0)
print("ready", flush=True)
sys.stdin.readline()
deadline = time.monotonic() + 60
while "threading" not in sys.modules and time.monotonic() < deadline:
    time.sleep(0.01)
print("imported", "threading" in sys.modules, flush=True)
import threading
print("main", threading.current_thread() is threading.main_thread(),
      threading.main_thread().ident == _thread.get_ident(), threading.current_thread().name,
      flush=True)
keep = []
t = threading.Thread(target=lambda: keep.append(bytearray(2_000_003)), name="late-worker")
t.start()
t.join()
print("done", flush=True)
sys.stdin.readline()
"""


class Program:
    def __init__(self, python, prog, *args, env=None):
        self.p = subprocess.Popen([python, "-W", "ignore::DeprecationWarning", str(prog)] +
                                  list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, universal_newlines=True, bufsize=1,
                                  env=env)

    def line(self, timeout=30):
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        assert ready, "no line from the program in %s s" % timeout
        return self.p.stdout.readline()

    def say(self, text):
        self.p.stdin.write(text + "\n")
        self.p.stdin.flush()

    def kill(self):
        if self.p.poll() is None:
            for child in _children(self.p.pid):
                os.kill(child, 9)
            self.p.kill()
        self.p.wait()


def _children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


@pytest.mark.parametrize("follow", [False, True], ids=["plain", "follow-fork"])
@pytest.mark.parametrize("python", python_params())
def test_a_fork_while_attaching_leaves_no_import_lock_held(memtrace, script, tmp_path, python,
                                                           follow):
    prog = script(HELD_IMPORT)
    t = Program(python, prog)
    try:
        first = t.line()
        if first == "preloaded\n":
            pytest.skip("%s imports atexit at its start: attaching imports nothing" % python)
        assert first == "ready\n"
        cap = tmp_path / "c.bin"
        run(memtrace, "attach", "-o", cap, *(["--follow-fork"] if follow else []), t.p.pid)
        word, child = t.line().split()
        assert word == "child"
        # without the wait, the child hangs in its import of atexit
        assert t.line(timeout=60) == "status 0\n"
        d = run(memtrace, "detach", t.p.pid)
        assert "capture written to %s" % cap in d.stderr, d.stderr
        t.say("end")
        assert t.p.wait(timeout=60) == 0
        assert t.p.stderr.read() == ""
    finally:
        t.kill()
    child_cap = tmp_path / ("c.bin.%s" % child)
    assert sorted(os.listdir(tmp_path)) == sorted(["prog.py", "c.bin"] +
                                                  ([child_cap.name] if follow else []))
    if follow:
        stats = report_json(memtrace, "stats", child_cap)
        assert stats["status"]["complete"], stats["status"]
        h = stats["header"]
        assert (h["pid"], h["forked"], h["follow_fork"]) == (int(child), True, True), h
        leaks = report_json(memtrace, "summary", child_cap, "--leaks")["rows"]
        assert [r["line"] for r in leaks if r["function"] == "<module>" and
                3_000_007 <= r["own_bytes"] < 3_100_000] == [23], leaks[:5]


@pytest.mark.parametrize("python", python_params())
def test_threading_imported_after_attach_knows_its_main_thread(memtrace, script, tmp_path,
                                                               python):
    """threading is imported for thread names on the main thread, once it
    runs Python again, never on memtrace's: the thread that first imports
    threading is the one it takes for the main one. Threads started after
    that are named in the capture."""
    prog = script(LATE_THREADING)
    t = Program(python, prog)
    cap = tmp_path / "c.bin"
    try:
        first = t.line()
        if first == "preloaded\n":
            pytest.skip("%s imports threading at its start" % python)
        assert first == "ready\n"
        run(memtrace, "attach", "-o", cap, t.p.pid)
        t.say("go")
        assert t.line(timeout=90) == "imported True\n"  # by memtrace, on the main thread
        assert t.line() == "main True True MainThread\n"
        assert t.line() == "done\n"
        run(memtrace, "detach", t.p.pid)
        t.say("end")
        assert t.p.wait(timeout=60) == 0
        # 3.8 printed an AssertionError from threading._shutdown here
        assert t.p.stderr.read() == ""
    finally:
        t.kill()
    dump = script("import sys, memtrace\n"
                  "r = memtrace.FileReader(sys.argv[1])\n"
                  "print(sorted({x.thread_name for x in r.get_leaked_allocation_records("
                  "merge_threads=False) if x.size >= 2_000_003}))\n", name="dump.py")
    assert run(sys.executable, dump, cap, env=module_env()).stdout == "['late-worker']\n"


def test_attach_follow_fork_children_of_children(memtrace, script, tmp_path):
    """attach --follow-fork: a child forked after the attach gets
    "<capture>.<pid>", and its own child "<child's capture>.<pid>"."""
    prog = script("""\
import os, sys
print("ready", flush=True)
sys.stdin.readline()
pid = os.fork()
if pid == 0:
    grand = os.fork()
    if grand == 0:
        g = bytearray(4_000_037)
        print("grandchild", os.getpid(), flush=True)
        os._exit(0)
    os.waitpid(grand, 0)
    c = bytearray(5_000_011)
    print("child", os.getpid(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", flush=True)
sys.stdin.readline()
""")
    t = Program("/usr/bin/python3", prog)
    cap = tmp_path / "c.bin"
    try:
        assert t.line() == "ready\n"
        run(memtrace, "attach", "--follow-fork", "-o", cap, t.p.pid)
        t.say("go")
        got = dict(t.line().split() for _ in range(2))
        assert t.line() == "parent\n"
        run(memtrace, "detach", t.p.pid)
        t.say("end")
        assert t.p.wait(timeout=60) == 0
    finally:
        t.kill()
    child_cap = tmp_path / ("c.bin.%s" % got["child"])
    grand_cap = tmp_path / ("c.bin.%s.%s" % (got["child"], got["grandchild"]))
    assert sorted(os.listdir(tmp_path)) == sorted(["prog.py", "c.bin", child_cap.name,
                                                   grand_cap.name])
    for path, size in ((child_cap, 5_000_011), (grand_cap, 4_000_037)):
        stats = report_json(memtrace, "stats", path)
        assert stats["status"]["complete"] and stats["header"]["forked"], stats
        leaks = report_json(memtrace, "summary", path, "--leaks")["rows"]
        assert any(size <= r["own_bytes"] < size + 100_000 for r in leaks), (path, leaks[:5])



def test_attach_to_a_followed_child_says_so(memtrace, script, tmp_path):
    """A child of a process attached with --follow-fork writes a capture of
    its own until it ends: an attach to it says so, not that memtrace run
    or a Tracker tracks it."""
    prog = script("""\
import os, sys
print("ready", flush=True)
sys.stdin.readline()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    print("child", os.getpid(), flush=True)
    os.read(r, 1)
    os._exit(0)
sys.stdin.readline()
os.write(w, b"x")
os.waitpid(pid, 0)
print("parent", flush=True)
sys.stdin.readline()  # ends once detached: a detach of an exiting process is racy
""")
    t = Program("/usr/bin/python3", prog)
    try:
        assert t.line() == "ready\n"
        run(memtrace, "attach", "--follow-fork", "-o", tmp_path / "c.bin", t.p.pid)
        t.say("go")
        child = int(t.line().split()[1])
        p = run(memtrace, "attach", "-o", tmp_path / "other.bin", child, check=False)
        assert p.returncode == 1, p.stderr
        assert p.stderr == ("memtrace: pid %d could not start tracking: it is tracked already, "
                            "as a child of a process tracked with --follow-fork (its capture "
                            "ends when it does)\n" % child), p.stderr
        t.say("end")
        assert t.line() == "parent\n"
        run(memtrace, "detach", t.p.pid)
        t.say("bye")
        assert t.p.wait(timeout=60) == 0
    finally:
        t.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a target of another user)")
def test_attach_follow_fork_warns_where_children_cannot_write(memtrace, tmp_path):
    """A target of another user that could not create its children's
    captures beside the parent's (a directory only root may write to): the
    attach goes on, with a warning that says so."""
    import shutil
    if not shutil.which("setpriv"):
        pytest.skip("setpriv is not installed")
    from attach_target import _setpriv
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    t = subprocess.Popen(_setpriv(65534) + [
        "/usr/bin/python3", "-c", "import sys\nprint('ready', flush=True)\nsys.stdin.readline()\n"],
        cwd="/",
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         universal_newlines=True)
    try:
        assert t.stdout.readline() == "ready\n"
        cap = private / "c.bin"
        p = run(memtrace, "attach", "--follow-fork", "-o", cap, t.pid)
        assert p.stderr.splitlines()[0] == (
            "memtrace: warning: --follow-fork: pid %d runs as uid 65534, which may not create "
            "its children's captures beside %s" % (t.pid, cap)), p.stderr
        run(memtrace, "detach", t.pid)
        # a directory it may write in, under directories it may search: no warning
        import tempfile
        open_dir = tempfile.mkdtemp(prefix="memtrace-ff-")
        try:
            os.chmod(open_dir, 0o777)
            cap = os.path.join(open_dir, "c.bin")
            p = run(memtrace, "attach", "--follow-fork", "-o", cap, t.pid)
            assert p.stderr == "memtrace: tracking pid %d into %s\n" % (t.pid, cap), p.stderr
            run(memtrace, "detach", t.pid)
        finally:
            shutil.rmtree(open_dir)
        t.stdin.write("end\n")
        t.stdin.flush()
        assert t.wait(timeout=60) == 0
    finally:
        if t.poll() is None:
            t.kill()
            t.wait()


FORKS_ALL_THE_TIME = """\
import os, select, sys
print("ready", flush=True)
forks = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    pid = os.fork()
    if pid == 0:
        kept = bytearray(10_000)
        os._exit(0)
    os.waitpid(pid, 0)  # a child that never ends stops the program here
    forks += 1
print("forks", forks, flush=True)
"""


def test_forks_while_attaching_and_detaching(memtrace, script, tmp_path):
    """attach and detach walk the loaded objects (dl_iterate_phdr), which
    holds the loader's write lock: glibc before 2.38 neither takes nor
    resets it around fork(), and a fork while memtrace's thread walked gave
    a child that waited forever at its first walk or dlopen (a
    --follow-fork child's capture walks at once). Against a program that
    forks all the time, attach and detach many times: every child ends."""
    prog = script(FORKS_ALL_THE_TIME)
    t = Program("/usr/bin/python3", prog)
    try:
        assert t.line() == "ready\n"
        for i in range(20):
            flags = ["--follow-fork"] + (["--native"] if i % 2 else [])
            run(memtrace, "attach", *flags, "-f", "-o", tmp_path / "c.bin", t.p.pid)
            run(memtrace, "detach", t.p.pid)
        t.say("end")
        said = t.line()
        assert said.startswith("forks "), said
        assert t.p.wait(timeout=60) == 0
    finally:
        t.kill()
    assert int(said.split()[1]) > 20
    children = [n for n in os.listdir(tmp_path) if n.startswith("c.bin.")]
    assert children, "no child was followed"


def test_followed_children_are_tracked_from_the_fork(memtrace, script, tmp_path):
    """The program forks while the attach starts: a child forked before
    the GOTs were patched (with --native, the walk of the module map comes
    first, and a fork held off by it comes right after) had a capture of
    its own, but no hooks: nothing recorded, and its _exit() left the
    capture without its end. Such a child now runs untracked, as one
    forked before the attach; every child's capture is whole and holds the
    child's allocation."""
    prog = script(FORKS_ALL_THE_TIME)
    t = Program("/usr/bin/python3", prog)
    try:
        assert t.line() == "ready\n"
        for i in range(20):
            run(memtrace, "attach", "--follow-fork", "--native", "-f", "-o",
                tmp_path / "c.bin", t.p.pid)
            run(memtrace, "detach", t.p.pid)
        t.say("end")
        assert t.line().startswith("forks ")
        assert t.p.wait(timeout=60) == 0
    finally:
        t.kill()
    children = [n for n in os.listdir(tmp_path) if n.startswith("c.bin.")]
    assert children, "no child was followed"
    for name in children:
        stats = report_json(memtrace, "stats", tmp_path / name)
        assert stats["status"]["complete"], (name, stats["status"], stats["totals"])
        assert stats["totals"]["live_bytes_at_end"] >= 10_000, (name, stats["totals"])


FORKS_FROM_A_THREAD = """\
import os, select, sys, threading, time
longest, forks, stop, attaching = 0.0, 0, threading.Event(), threading.Event()
def forker():
    global longest, forks
    while not stop.is_set():
        after = attaching.is_set()  # forks begun before the attach are not counted
        began = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        took = time.monotonic() - began
        if after and took >= 0.6 and longest < 0.6:
            print("waited %.3f" % took, flush=True)
        if after:
            longest = max(longest, took)
        os.waitpid(pid, 0)  # a child that never ends stops the program here
        forks += 1
t = threading.Thread(target=forker)
t.start()
print("ready", flush=True)
sys.stdin.readline()
attaching.set()
sys.stdin.readline()
stop.set()
t.join()
print("forks", forks, "longest %.3f" % longest, flush=True)
"""


@pytest.mark.parametrize("python", python_params())
def test_a_fork_waits_while_memtrace_makes_its_thread_state(memtrace, script, tmp_path, python):
    """memtrace's thread makes itself a Python thread state to take the
    GIL, and making one holds the runtime's HEAD lock without the GIL: a
    program's thread that forked meanwhile left, on 3.8 to 3.11, a child
    that waited forever for that lock in PyOS_AfterFork_Child(). So a fork
    waits until the making is done: with the making held for 800 ms
    (MEMTRACE_TEST_TSTATE_HOLD_MS), a fork of the program's begun after
    the attach began returns only after it, and every child ends. The
    making comes on memtrace's start thread, maybe after the attach has
    returned: the program says when a fork has waited, and only then is
    it detached (a detach first could leave the making to after the last
    fork)."""
    prog = script(FORKS_FROM_A_THREAD)
    env = dict(os.environ, MEMTRACE_TEST_TSTATE_HOLD_MS="800")
    t = Program(python, prog, env=env)
    try:
        assert t.line() == "ready\n"
        t.say("attaching")
        run(memtrace, "attach", "-f", "-o", tmp_path / "c.bin", t.p.pid)
        waited = t.line(timeout=60)
        assert waited.startswith("waited "), \
            "no fork waited for the thread state's making: %r" % waited
        run(memtrace, "detach", t.p.pid)
        t.say("end")
        said = t.line().split()
        assert t.p.wait(timeout=60) == 0
    finally:
        t.kill()
    assert said[0] == "forks" and int(said[1]) > 0, said
    assert float(said[3]) >= 0.6, "no fork waited for the thread state's making: %s" % said
