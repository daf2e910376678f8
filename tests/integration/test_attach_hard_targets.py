"""memtrace attach/detach against targets in awkward states: no descriptor
left, the GIL held in C code, an attach that gives up, a child forked while
tracking, an attach killed midway."""

import os
import select
import socket
import subprocess
import time

from conftest import BUILD, control_socket, run
from attach_target import Target, _raw_status, _thread_wchan, _tracer, attach, detach, leak_rows
from attach_target import stacks
from attach_target import target_script, targets  # noqa: F401 (fixtures)


def test_detach_while_the_target_has_no_descriptor_left(memtrace, target_script, targets,
                                                        tmp_path):
    """A program that has used up its file descriptors (the service one
    would be debugging) cannot accept the detach connection for now: the
    control thread waits and tries again, instead of ending and leaving a
    capture nobody can stop."""
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    attach(memtrace, t.pid, cap)
    t.cmd("exhaust")
    deadline = time.monotonic() + 30
    # Each request frees the connection's descriptor, which the program
    # may take before the control thread's next accept(): that accept
    # fails with EMFILE, and the control thread sleeps before trying again.
    def control_sleeps():
        state = _thread_wchan(t.pid, "memtrace-ctl")
        assert state is not None, "the control thread ended"
        return "nanosleep" in state

    while not control_sleeps():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(control_socket(t.pid))
            c.sendall(b"status\n")
            c.setblocking(False)
            while not control_sleeps():  # answered, or waiting to be accepted
                assert time.monotonic() < deadline, _thread_wchan(t.pid, "memtrace-ctl")
                try:
                    assert c.recv(4096).startswith(b"ok active")
                    break
                except BlockingIOError:
                    time.sleep(0.001)
    d = subprocess.Popen([str(memtrace), "detach", str(t.pid)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True)
    try:
        t.cmd("release")
        out, err = d.communicate(timeout=60)
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()
    assert d.returncode == 0 and "capture written to %s" % cap in err, err
    status, _ = t.finish()
    assert status == 3
    run(memtrace, "stats", cap)


GIL_HOG = r"""
import re, sys, time
def took():
    start = time.monotonic()
    re.match(r"(a+)+$", "a" * 20 + "b")
    return time.monotonic() - start
unit = max(min(took() for _ in range(5)), 1e-4)  # the fastest: a busy machine only lengthens the hold
n = 20
while unit * 2 ** (n - 20) < 9:  # backtracking that holds the GIL for ~9 s
    n += 1
print("ready", flush=True)
sys.stdin.readline()
re.match(r"(a+)+$", "a" * n + "b")
print("released", flush=True)
sys.stdin.readline()
"""


def _threads(pid):
    names = []
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            names.append(open("/proc/%d/task/%s/comm" % (pid, task)).read().strip())
        except OSError:
            pass
    return names


def _hog(script):
    prog = script(GIL_HOG, name="hog.py")
    p = subprocess.Popen(["/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)
    assert p.stdout.readline() == "ready\n"
    p.stdin.write("go\n")
    p.stdin.flush()
    return p


def test_attach_while_the_gil_is_held_in_c_code(memtrace, script, tmp_path):
    """The main thread holds the GIL in C code for ~9 s: the C allocators
    are tracked without it, so attach and detach take no longer than
    usual, and the rest of the start (the Python-side registrations) is
    done once the GIL is free, harmlessly after the detach."""
    p = _hog(script)
    cap = tmp_path / "cap.bin"
    try:
        start = time.monotonic()
        attach(memtrace, p.pid, cap)
        assert time.monotonic() - start < 3
        assert _raw_status(p.pid).startswith("ok active")
        d = detach(memtrace, p.pid)
        assert "capture written to %s" % cap in d.stderr, d.stderr
        assert time.monotonic() - start < 5  # the GIL is still held
        assert p.stdout.readline() == "released\n"
        run(memtrace, "stats", cap)
        p.stdin.write("quit\n")
        p.stdin.flush()
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_attach_that_gives_up_leaves_no_tracking(memtrace, script, tmp_path):
    """With --trace-python-allocators the start needs the GIL, which the
    main thread holds in C code past attach's 5 s wait: attach says it
    gave up and undoes the start, and nothing tracks once the GIL is
    free."""
    p = _hog(script)
    cap = tmp_path / "cap.bin"
    try:
        a = attach(memtrace, p.pid, cap, "--trace-python-allocators", check=False)
        assert a.returncode == 1 and "the start is cancelled" in a.stderr, a.stderr
        assert len(a.stderr.splitlines()) == 1, a.stderr
        assert not cap.exists()
        assert p.stdout.readline() == "released\n"
        deadline = time.monotonic() + 30
        while True:
            status = _raw_status(p.pid, timeout=30)
            if status == "ok idle\n" and "memtrace-stop" not in _threads(p.pid):
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.05)
        assert "memtrace-write" not in _threads(p.pid), _threads(p.pid)
        assert not cap.exists()
        p.stdin.write("quit\n")
        p.stdin.flush()
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


FORKER = r"""
import os, sys
pid = os.fork()
if pid == 0:
    keep = []
    print("child %d" % os.getpid(), flush=True)
    for line in sys.stdin:
        if line.startswith("alloc"):
            keep.append(bytearray(int(line.split()[1])))
            print("done", flush=True)
        elif line.startswith("quit"):
            print("bye", flush=True)
            break
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("parent done %d" % status, flush=True)
"""


def test_attach_to_a_child_forked_while_tracking(memtrace, script, tmp_path):
    """A child forked by a program under memtrace run inherits the
    payload with its capture running; the capture is the parent's, so the
    child can be attached to and detached from on its own."""
    prog = script(FORKER, name="forker.py")
    parent_cap, child_cap = tmp_path / "parent.bin", tmp_path / "child.bin"
    p = subprocess.Popen([str(memtrace), "run", "-o", str(parent_cap), "--python",
                          "/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, bufsize=1)
    try:
        word, child = p.stdout.readline().split()
        assert word == "child"
        attach(memtrace, child, child_cap)
        p.stdin.write("alloc 3000007\n")
        p.stdin.flush()
        assert p.stdout.readline() == "done\n"
        d = detach(memtrace, child)
        assert "capture written to %s" % child_cap in d.stderr, d.stderr
        p.stdin.write("quit\n")
        p.stdin.flush()
        assert p.stdout.readline() == "bye\n"
        assert p.stdout.readline() == "parent done 0\n"
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    rows = leak_rows(memtrace, child_cap)
    assert [r["line"] for r in rows if r["function"] == "<module>" and
            r["own_bytes"] >= 3000007] == [9], rows[:5]
    run(memtrace, "stats", parent_cap)






def test_attach_killed_midway_leaves_the_target_well(memtrace, target_script, targets, tmp_path):
    """memtrace attach killed with SIGKILL at any moment, also while a
    thread of the target runs the call into the payload (a fresh target
    each time, so that every attach injects): the target lives on and
    untraced; tracking is either off, or on as after any attach (once the
    injection was over), and then detach ends it."""
    import random
    rng = random.Random(7)
    for i in range(30):  # without the fix about one round in twenty killed the target
        t = Target("/usr/bin/python3", target_script, "sleep")
        targets.append(t)
        cap = tmp_path / ("c%d.bin" % i)
        a = subprocess.Popen([str(memtrace), "attach", "-o", str(cap), str(t.pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.002, 0.04))  # a random moment, not a handshake
        a.kill()
        a.wait()
        deadline = time.monotonic() + 30
        while _tracer(t.pid) != 0 or _raw_status(t.pid).startswith("ok starting"):
            assert t.p.poll() is None, "the target died (status %s) at round %d" % (t.p.poll(), i)
            assert time.monotonic() < deadline, (i, _tracer(t.pid), _raw_status(t.pid))
            time.sleep(0.01)
        assert t.p.poll() is None, "the target died (status %s) at round %d" % (t.p.poll(), i)
        t.cmd("alloc 10")
        if _raw_status(t.pid).startswith("ok active"):
            detach(memtrace, t.pid)
        status, _ = t.finish()
        assert status == 3, (i, status)


DLCLOSE_LOOP = r"""
import ctypes, _ctypes, sys, threading
def unload_forever():
    while True:
        lib = ctypes.CDLL(sys.argv[1])
        handle = lib._handle
        del lib
        _ctypes.dlclose(handle)
threading.Thread(target=unload_forever, daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:
    print("echo " + line.strip(), flush=True)
"""


def test_first_attach_while_a_thread_unloads_libraries(memtrace, script, tmp_path):
    """The payload's first walk of the loaded objects runs inside
    dl_iterate_phdr(), which holds one of the loader's locks: taking the
    other there (dladdr() does) deadlocks with a dlclose() in another
    thread, which holds that one and waits for the first. The first attach
    of a process is the one that walks: three fresh processes, each
    attached at once, detached, and asked to answer."""
    prog = script(DLCLOSE_LOOP, name="dlloop.py")
    lib = os.path.join(BUILD, "tests", "targets", "libmt-unload-one.so")
    for i in range(3):
        p = subprocess.Popen(["/usr/bin/python3", str(prog), lib], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)
        try:
            assert p.stdout.readline() == "ready\n"
            a = attach(memtrace, p.pid, tmp_path / ("c%d.bin" % i), "--native", check=False)
            assert a.returncode == 0, a.stderr + stacks(p.pid)
            detach(memtrace, p.pid)
            p.stdin.write("still there\n")
            p.stdin.flush()
            ready, _, _ = select.select([p.stdout], [], [], 30)
            assert ready, "the program does not answer; its threads:\n" + stacks(p.pid)
            assert p.stdout.readline() == "echo still there\n"
        finally:
            p.kill()
            p.wait()
