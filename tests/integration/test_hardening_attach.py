"""attach and detach as a hostile user and a careless one would try them: a
control socket name taken first, 32 busy threads, a descriptor the program
reused after detach, stopped and dead targets, two attaches at once, and
targets in a network namespace or a mount namespace of their own."""

import os
import shutil
import socket
import subprocess
import time

import pytest

from conftest import ROOT, control_socket, pyenv_python, run
from attach_target import TARGET, Target, _raw_status, _setpriv, attach, detach, leak_rows, \
    one_line_error, target_script, targets  # noqa: F401 (fixtures)


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("needs root")


SQUATTER = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0memtrace-" + sys.argv[1])
s.listen(4)
print("ready", flush=True)
sys.stdin.readline()
"""


def test_control_socket_name_taken_first(memtrace, target_script, targets, tmp_path):
    """Another user binds the name the payload would have listened on:
    attach finds the payload's own socket among the target's descriptors
    all the same, and detach too."""
    needs_root()
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    sq = subprocess.Popen(_setpriv(65534) + ["/usr/bin/python3", "-c", SQUATTER, str(t.pid)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          universal_newlines=True)
    try:
        assert sq.stdout.readline() == "ready\n"
        cap = tmp_path / "cap.bin"
        attach(memtrace, t.pid, cap)
        t.cmd("alloc 3000007")
        d = detach(memtrace, t.pid)
        assert "capture written to %s" % cap in d.stderr, d.stderr
        assert any(r["own_bytes"] >= 3000007 for r in leak_rows(memtrace, cap))
        # and again, now that the payload is loaded
        attach(memtrace, t.pid, tmp_path / "again.bin")
        detach(memtrace, t.pid)
    finally:
        sq.kill()
        sq.wait()


# bench/attach_target.py's threads32: 32 threads that never leave Python
# code, all running before it says "ready PID"
BUSY_TARGET = os.path.join(ROOT, "bench", "attach_target.py")


@pytest.mark.parametrize("minor", ["3.12", "3.13"])
def test_attach_with_32_busy_threads(memtrace, tmp_path, minor):
    """32 threads that never stop running Python code: every attach
    answers within a second and says the truth, 20 times over."""
    python = pyenv_python(minor)
    if python is None:
        pytest.skip("no pyenv Python %s on this machine" % minor)
    p = subprocess.Popen([python, BUSY_TARGET, "threads32"], stdout=subprocess.PIPE,
                         universal_newlines=True)
    times = []
    try:
        assert p.stdout.readline() == "ready %d\n" % p.pid
        for i in range(20):
            cap = tmp_path / ("c%d.bin" % i)
            start = time.monotonic()
            a = run(memtrace, "attach", "-o", cap, p.pid, check=False, timeout=60)
            times.append(time.monotonic() - start)
            assert a.returncode == 0, (i, a.stderr)
            status = _raw_status(p.pid)
            assert status == "ok active %s\n" % cap, (i, status)
            d = detach(memtrace, p.pid)
            assert "capture written to %s" % cap in d.stderr, (i, d.stderr)
            assert _raw_status(p.pid) == "ok idle\n"
        assert max(times) < 1.0, times
        run(memtrace, "stats", tmp_path / "c19.bin")
    finally:
        p.kill()
        p.wait()


REUSER = r"""
import os, socket, sys, threading
print("ready", flush=True)
sys.stdin.readline()  # detached: now the program cleans up like a daemon
os.closerange(3, 1024)
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0))
srv.listen(256)
def serve():
    while True:
        c, _ = srv.accept()
        c.sendall(b"hello\n")
        c.close()
threading.Thread(target=serve, daemon=True).start()
print(srv.fileno(), srv.getsockname()[1], flush=True)
for line in sys.stdin:
    print("done", flush=True)
"""


def test_descriptor_reused_after_detach(memtrace, script, tmp_path):
    """After detach the program closes every descriptor but 0-2 and
    listens on the lowest number, the control socket's: all its clients
    are its own, and a later attach works."""
    prog = script(REUSER, name="reuser.py")
    p = subprocess.Popen(["/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)
    try:
        assert p.stdout.readline() == "ready\n"
        attach(memtrace, p.pid, tmp_path / "a.bin")
        detach(memtrace, p.pid)
        ctl = control_socket(p.pid)
        assert ctl is not None
        p.stdin.write("go\n")
        fd, port = map(int, p.stdout.readline().split())
        assert fd == 3
        for i in range(200):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                assert c.makefile().readline() == "hello\n", i
        cap = tmp_path / "b.bin"
        attach(memtrace, p.pid, cap)
        p.stdin.write("x\n")
        assert p.stdout.readline() == "done\n"
        d = detach(memtrace, p.pid)
        assert "capture written to %s" % cap in d.stderr, d.stderr
        assert control_socket(p.pid) not in (None, ctl)  # a new one, under a new name
    finally:
        p.kill()
        p.wait()


SOCKET_CLOSER = r"""
import os, sys
keep = []
print("ready", flush=True)
for line in sys.stdin:
    if line.startswith("close"):  # every socket it holds, memtrace's among them
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink("/proc/self/fd/" + fd).startswith("socket:"):
                    os.close(int(fd))
            except OSError:
                pass
    else:
        keep.append(bytearray(3000007))
    print("done", flush=True)
"""


def test_control_socket_closed_while_attached(memtrace, script, targets, tmp_path):
    """While attached, the program closes the control socket (a daemon
    closing its descriptors): the payload makes a new one within a second.
    An attach or a detach meanwhile waits for it, instead of taking the
    target for one not attached (detach: "not attached", the capture left
    running; attach: injected again, then "being attached by another
    memtrace")."""
    prog = script(SOCKET_CLOSER, name="closer.py")
    p = subprocess.Popen(["/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)

    def cmd(line):
        p.stdin.write(line + "\n")
        assert p.stdout.readline() == "done\n"
    try:
        assert p.stdout.readline() == "ready\n"
        cap = tmp_path / "cap.bin"
        attach(memtrace, p.pid, cap)
        cmd("alloc")
        cmd("close")
        a = attach(memtrace, p.pid, tmp_path / "other.bin", check=False)
        assert "is already attached (capture %s)" % cap in one_line_error(a)
        cmd("close")
        d = detach(memtrace, p.pid)
        assert "capture written to %s" % cap in d.stderr, d.stderr
        assert any(r["own_bytes"] >= 3000007 for r in leak_rows(memtrace, cap))
        cmd("alloc")
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()


def _state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _wait_state(pid, states, timeout=30):
    """Waits until /proc says pid is in one of states: a signal is
    delivered when the target runs next, not when kill() returns."""
    end = time.monotonic() + timeout
    while _state(pid) not in states:
        assert time.monotonic() < end, "pid %d never came to state %s" % (pid, states)
        time.sleep(0.01)


def test_detach_of_a_stopped_process(memtrace, target_script, targets, tmp_path):
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    attach(memtrace, t.pid, cap)
    os.kill(t.pid, 19)  # SIGSTOP
    _wait_state(t.pid, "T")
    try:
        start = time.monotonic()
        msg = one_line_error(run(memtrace, "detach", t.pid, check=False, timeout=60))
        assert time.monotonic() - start < 2
        assert "pid %d is stopped" % t.pid in msg and "kill -CONT" in msg, msg
    finally:
        os.kill(t.pid, 18)  # SIGCONT
    assert _raw_status(t.pid).startswith("ok active")
    detach(memtrace, t.pid)
    run(memtrace, "stats", cap)


GIL_HOLDER = r"""
import ctypes, sys
py = ctypes.pythonapi


class Allocator(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", ctypes.c_void_p),
                ("calloc", ctypes.c_void_p), ("realloc", ctypes.c_void_p),
                ("free", ctypes.c_void_p)]


def obj_malloc():
    a = Allocator()
    py.PyMem_GetAllocator(2, ctypes.byref(a))  # PYMEM_DOMAIN_OBJ
    return a.malloc


before = obj_malloc()
print("ready", flush=True)
sys.stdin.readline()
while obj_malloc() == before:  # memtrace's wrappers come on its start thread
    print("not yet", flush=True)
    sys.stdin.readline()
print("holding", flush=True)
byte = ctypes.create_string_buffer(1)
ctypes.PyDLL(None).read(0, byte, 1)  # a C call that keeps the GIL
print("released", flush=True)
sys.stdin.readline()
"""


def _detach_while_the_gil_is_held(memtrace, p, cap):
    """Attaches to GIL_HOLDER's process p with Python allocators (the stop
    then needs the GIL), has it hold the GIL, and starts a detach: returned
    once the payload's stop thread has taken it."""
    assert p.stdout.readline() == "ready\n"
    attach(memtrace, p.pid, cap, "--trace-python-allocators")
    p.stdin.write("go\n")
    while True:
        line = p.stdout.readline()
        if line == "holding\n":
            break
        assert line == "not yet\n", line
        time.sleep(0.01)
        p.stdin.write("again\n")
    d = subprocess.Popen([memtrace, "detach", str(p.pid)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True)
    end = time.monotonic() + 30
    while not any(n.startswith("memtrace-stop") for n in _thread_names(p.pid)):
        assert time.monotonic() < end and d.poll() is None, "the stop never began"
        time.sleep(0.01)
    return d


def test_detach_of_a_process_stopped_while_it_detaches(memtrace, script, tmp_path):
    """The process is stopped after the payload took the detach (its stop
    waits for the GIL, to put the PyMem domains back, and a C call of the
    program's keeps it): detach says so within a second instead of waiting
    60 s for an answer, and the payload finishes the capture once the
    process is resumed and the GIL is free."""
    prog = script(GIL_HOLDER, name="holder.py")
    p = subprocess.Popen(["/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)
    d = None
    try:
        cap = tmp_path / "cap.bin"
        d = _detach_while_the_gil_is_held(memtrace, p, cap)
        os.kill(p.pid, 19)  # SIGSTOP
        start = time.monotonic()
        out, err = d.communicate(timeout=60)
        took = time.monotonic() - start
        assert d.returncode == 1 and took < 5, (d.returncode, took, err)
        assert err.strip() == ("memtrace: pid %d was stopped before it answered; it detaches, "
                               "and finishes its capture, once resumed (kill -CONT %d)"
                               % (p.pid, p.pid)), err
        os.kill(p.pid, 18)  # SIGCONT
        p.stdin.write("x")  # the C call returns, and the GIL with it
        p.stdin.flush()
        assert p.stdout.readline() == "released\n"
        end = time.monotonic() + 30
        while not _raw_status(p.pid).startswith("ok idle"):  # the capture finished
            assert time.monotonic() < end, _raw_status(p.pid)
            time.sleep(0.05)
        run(memtrace, "stats", cap)
        p.stdin.write("end\n")
        p.stdin.flush()
        assert p.wait(timeout=30) == 0
    finally:
        if d is not None and d.poll() is None:
            d.kill()
        try:
            os.kill(p.pid, 18)
        except ProcessLookupError:
            pass
        p.kill()
        p.wait()


def test_detach_of_a_process_that_exits_meanwhile(memtrace, script, tmp_path):
    """The process dies while its payload's stop waits for the GIL: detach
    says that it exited, not that the connection was reset."""
    prog = script(GIL_HOLDER, name="holder.py")
    p = subprocess.Popen(["/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)
    d = None
    try:
        d = _detach_while_the_gil_is_held(memtrace, p, tmp_path / "cap.bin")
        p.kill()  # a zombie until waited for below
        out, err = d.communicate(timeout=60)
        assert d.returncode == 1, err
        assert err == "memtrace: pid %d exited while it was being detached\n" % p.pid, err
    finally:
        if d is not None and d.poll() is None:
            d.kill()
        p.kill()
        p.wait()


def _thread_names(pid):
    names = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return names


def test_detach_of_a_process_that_exited(memtrace):
    p = subprocess.Popen(["/usr/bin/python3", "-c", "pass"])
    while True:  # a zombie until waited for
        with open("/proc/%d/stat" % p.pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    try:
        msg = one_line_error(run(memtrace, "detach", p.pid, check=False))
        assert msg == "memtrace: pid %d has exited" % p.pid, msg
    finally:
        p.wait()


def test_an_attach_under_way_holds_off_another(memtrace, target_script, targets, tmp_path):
    """While an attach runs it holds a lock named after the process (an
    abstract socket, memtrace-attach.PID.STARTTIME, listening): another
    attach says so in one line and leaves the process and the file system
    alone. A name held by another user counts for nothing: anyone may bind
    one."""
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    with open("/proc/%d/stat" % t.pid) as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    name = "\0memtrace-attach.%d.%s" % (t.pid, start)
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        held.bind(name)
        held.listen(1)
        p = run(memtrace, "attach", "-o", tmp_path / "c.bin", t.pid, check=False)
        assert p.returncode == 1 and p.stderr == \
            "memtrace: pid %d is being attached by another memtrace\n" % t.pid, p.stderr
        assert not (tmp_path / "c.bin").exists()
        assert _raw_status(t.pid) == "none"  # no payload was loaded
    finally:
        held.close()
    if os.geteuid() == 0 and shutil.which("setpriv"):
        squat = subprocess.Popen(_setpriv(65534) + [
            "/usr/bin/python3", "-c",
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            "s.bind(%r)\ns.listen(0)\n"
            # its queue full, never accepted: a probe that waited would wait for ever
            "c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\nc.connect(%r)\n"
            "print('bound', flush=True)\nsys.stdin.read()\n" % (name, name)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True)
        try:
            assert squat.stdout.readline() == "bound\n"
            attach(memtrace, t.pid, tmp_path / "c.bin")  # nobody's name: not a lock
        finally:
            squat.kill()
            squat.wait()
    else:
        attach(memtrace, t.pid, tmp_path / "c.bin")  # the lock went with its holder
    detach(memtrace, t.pid)
    t.finish()


def test_two_attaches_at_once(memtrace, target_script, targets, tmp_path):
    """Two attaches to the same process at the same moment: one wins, the
    other says in one line that another memtrace is attaching (or has)."""
    for i in range(8):
        t = Target("/usr/bin/python3", target_script, "sleep")
        targets.append(t)
        caps = [tmp_path / ("%d-%d.bin" % (i, k)) for k in range(2)]
        procs = [subprocess.Popen([str(memtrace), "attach", "-o", str(c), str(t.pid)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  universal_newlines=True) for c in caps]
        results = [(q.wait(timeout=60), q.stderr.read()) for q in procs]
        won = [r for r in results if r[0] == 0]
        lost = [r for r in results if r[0] != 0]
        assert len(won) == 1, results
        assert len(lost) == 1 and lost[0][0] == 1, results
        lines = lost[0][1].strip().splitlines()
        assert len(lines) == 1, results
        assert ("another memtrace" in lines[0] or "is already attached" in lines[0]), results
        assert [c.exists() for c in caps].count(True) == 1, results
        detach(memtrace, t.pid)
        t.finish()


def _probe(cmd):
    """Skips the test unless @cmd (unshare...) is permitted here."""
    probe = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
    if probe.returncode != 0:
        pytest.skip("%s is not permitted here: %s" % (" ".join(cmd), probe.stderr.strip()))


def _ns_target(prefix, scenario="sleep"):
    """A Target running TARGET from -c (its script may not be visible in
    the namespace) under @prefix; its pid is python's (exec)."""
    t = Target.__new__(Target)
    t.p = subprocess.Popen(prefix + ["/usr/bin/python3", "-c", TARGET, scenario],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           universal_newlines=True, bufsize=1)
    t.pid = t.p.pid
    assert t.readline() == "ready"
    return t


def _cycle(memtrace, t, tmp_path):
    """attach, allocate, detach, and again: both captures read here."""
    for name in ("first.bin", "second.bin"):
        cap = tmp_path / name
        a = attach(memtrace, t.pid, cap)
        assert "tracking pid %d into %s" % (t.pid, cap) in a.stderr, a.stderr
        t.cmd("alloc 3000007")
        d = detach(memtrace, t.pid)
        assert "capture written to %s" % cap in d.stderr, d.stderr
        assert any(r["own_bytes"] >= 3000007 for r in leak_rows(memtrace, cap)), name


def test_target_in_its_own_network_namespace(memtrace, targets, tmp_path):
    """unshare -n, as in every container: the abstract control socket
    lives in the target's network namespace, which memtrace enters for
    the connection."""
    needs_root()
    _probe(["unshare", "-n", "true"])
    t = _ns_target(["unshare", "-n"])
    targets.append(t)
    _cycle(memtrace, t, tmp_path)
    assert t.finish()[0] == 3


def test_target_with_a_private_tmp(memtrace, targets, tmp_path):
    """unshare -m with a tmpfs over /tmp: the capture's path (under this
    test's /tmp) does not exist for the target; memtrace creates the
    capture here and hands it over open, and nothing is written inside."""
    needs_root()
    prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c",
              "mount -t tmpfs memtrace-test /tmp && exec \"$@\"", "sh"]
    _probe(prefix[:-1] + ["true"])
    t = _ns_target(prefix)
    targets.append(t)
    _cycle(memtrace, t, tmp_path)
    inside = os.listdir("/proc/%d/root/tmp" % t.pid)
    assert all(name.startswith("memtrace-") for name in inside), inside  # the payload's copy only
    assert t.finish()[0] == 3


def test_no_safe_point_said_in_one_line(memtrace, tmp_path):
    """input() reading a terminal: no thread can be used by ptrace and the
    main thread runs no bytecode for gdb. One line says so, and why; the
    target carries on."""
    import pty
    pid, fd = pty.fork()
    if pid == 0:
        os.execv("/usr/bin/python3", ["python3", "-c", "print('ready', flush=True); "
                                      "print('got', input(), flush=True)"])
    try:
        buf = b""
        while b"ready" not in buf:
            buf += os.read(fd, 100)
        cap = tmp_path / "cap.bin"
        msg = one_line_error(run(memtrace, "attach", "-o", cap, pid, check=False, timeout=120))
        assert "no thread of pid %d reached a safe point" % pid in msg, msg
        assert "input()" in msg, msg
        assert not cap.exists()
        os.write(fd, b"hello\n")
        while b"got hello" not in buf:
            buf += os.read(fd, 100)
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


DAEMONISH = r"""
import os, sys
out = sys.argv[1]
keep = bytearray(1000)
os.closerange(3, 1024)  # every descriptor it did not open, memtrace's among them
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
for n in range(3, 1024):  # and every number given to a file of its own
    if n != fd:
        os.dup2(fd, n)
os.write(fd, b"mine\n")
"""


def test_run_status_pipe_number_reused(memtrace, script, tmp_path):
    """Under memtrace run the program closes every descriptor and gives
    the numbers to a file of its own: the payload's last word for run
    (its status pipe) must not land in the program's file."""
    prog = script(DAEMONISH, name="daemonish.py")
    mine = tmp_path / "mine.txt"
    p = run(memtrace, "run", "-o", tmp_path / "cap.bin", "--python", "/usr/bin/python3", prog,
            mine, check=False)
    assert mine.read_bytes() == b"mine\n", (mine.read_bytes(), p.stderr)
    # its capture descriptor went too: memtrace says the capture is incomplete
    assert p.returncode == 1 and "incomplete" in p.stderr, p.stderr
