"""memtrace attach/detach errors: no such process, not Python, twice, never
attached, an existing capture, another user, a signal handler in the way;
each one line on stderr and a non-zero exit."""

import os
import shutil
import subprocess
import time

import pytest

from conftest import run, skip_unless_other_users_can
from attach_target import Target, _setpriv, attach, detach, one_line_error
from attach_target import target_script, targets  # noqa: F401 (fixtures)


def test_error_no_such_pid(memtrace, tmp_path):
    p = subprocess.Popen(["true"])
    p.wait()
    msg = one_line_error(attach(memtrace, p.pid, tmp_path / "c.bin", check=False))
    assert "no process with pid %d" % p.pid in msg
    assert not (tmp_path / "c.bin").exists()
    assert "no process" in one_line_error(detach(memtrace, p.pid, check=False))


def test_error_not_python(memtrace, tmp_path):
    p = subprocess.Popen(["sleep", "100"])
    try:
        time.sleep(0.2)
        msg = one_line_error(attach(memtrace, p.pid, tmp_path / "c.bin", check=False))
        assert "not a CPython process" in msg
        assert p.poll() is None
        assert "state:\tS" in open("/proc/%d/status" % p.pid).read().replace("State:", "state:")
    finally:
        p.kill()
        p.wait()


def test_error_attach_twice_and_detach_twice(memtrace, target_script, targets, tmp_path):
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    attach(memtrace, t.pid, tmp_path / "a.bin")
    msg = one_line_error(attach(memtrace, t.pid, tmp_path / "b.bin", check=False))
    assert "already attached" in msg and not (tmp_path / "b.bin").exists()
    detach(memtrace, t.pid)
    assert "not attached" in one_line_error(detach(memtrace, t.pid, check=False))
    t.cmd("alloc 10")
    t.finish()


def test_error_never_attached(memtrace, target_script, targets):
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    msg = one_line_error(detach(memtrace, t.pid, check=False))
    assert msg == "memtrace: pid %d is not attached" % t.pid
    t.finish()


def test_error_capture_exists(memtrace, target_script, targets, tmp_path):
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    cap = tmp_path / "c.bin"
    cap.write_text("precious")
    assert "exists" in one_line_error(attach(memtrace, t.pid, cap, check=False))
    assert cap.read_text() == "precious"
    t.finish()


def test_error_other_user(memtrace, target_script, tmp_path):
    skip_unless_other_users_can("run a target as another user", os.path.dirname(memtrace))
    # Both users need to reach the target script and memtrace.
    shared = "/tmp/memtrace-attach-test-%d" % os.getpid()
    os.makedirs(shared, exist_ok=True)
    os.chmod(shared, 0o777)
    prog = os.path.join(shared, "target.py")
    shutil.copy(str(target_script), prog)
    os.chmod(prog, 0o644)
    p = subprocess.Popen(_setpriv(65534) + ["/usr/bin/python3", prog, "sleep"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        q = run(*(_setpriv(65533) + [memtrace, "attach", "-o", shared + "/c.bin", p.pid]),
                check=False, cwd=shared)
        msg = one_line_error(q)
        assert "uid 65534" in msg and "CAP_SYS_PTRACE" in msg, msg
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(shared, ignore_errors=True)


def test_error_detach_as_another_user(memtrace, target_script, targets, tmp_path):
    """A process attached as root, detached by another user: one line that
    names the two users, and the capture goes on until root detaches."""
    skip_unless_other_users_can("detach as another user", os.path.dirname(memtrace))
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    cap = tmp_path / "c.bin"
    attach(memtrace, t.pid, cap)
    q = run(*(_setpriv(65534) + [memtrace, "detach", t.pid]), check=False, cwd="/")
    assert one_line_error(q) == (
        "memtrace: cannot reach the control socket of pid %d: it runs as uid 0 and we as "
        "uid 65534 (run memtrace as that user or as root)" % t.pid), q.stderr
    detach(memtrace, t.pid)
    t.finish()


SIGNAL_TARGET = r"""
import ctypes, signal, sys, time
libc = ctypes.CDLL(None)
HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)


def handler(sig):
    print("in handler", flush=True)
    time.sleep(4)


h = HANDLER(handler)
libc.signal(signal.SIGUSR1, h)
print("ready", flush=True)
getattr(libc, "raise")(signal.SIGUSR1)
print("out", flush=True)
"""


def test_signal_handler_rejected(memtrace, script, tmp_path):
    """A thread inside a C signal handler is never used; with --method ptrace
    the attach fails cleanly and the target carries on."""
    prog = script(SIGNAL_TARGET, name="sig.py")
    p = subprocess.Popen(["/usr/bin/python3", prog], stdout=subprocess.PIPE,
                         universal_newlines=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        assert p.stdout.readline().strip() == "in handler"
        q = attach(memtrace, p.pid, tmp_path / "c.bin", "--method", "ptrace", check=False)
        assert "safe point" in one_line_error(q)
        assert p.stdout.readline().strip() == "out"
        assert p.wait(timeout=30) == 0
    finally:
        p.kill()
        p.wait()


TRACKED = r"""
import os, sys
if sys.argv[1:2] == ["tracker"]:
    import memtrace
    tracker = memtrace.Tracker(sys.argv[2])
    tracker.__enter__()
print(os.getpid(), flush=True)
sys.stdin.readline()
x = bytearray(1234567)
"""


def payload_copy(tmp_path):
    """The build's payload copied to another path: another memtrace's, as
    far as the loader can tell (a Tracker of an installed package, say)."""
    from conftest import BUILD
    other = tmp_path / "other"
    other.mkdir()
    lib = other / "libmemtrace-payload.so"
    shutil.copy(os.path.join(BUILD, "payload", "libmemtrace-payload.so"), lib)
    return str(lib)


@pytest.mark.parametrize("how", ["run", "tracker", "tracker-other-payload"])
def test_error_tracked_already(memtrace, script, tmp_path, how):
    """A process that memtrace run or a Tracker tracks: one line saying so,
    and the capture under way goes on unharmed; also when the Tracker's
    payload is another copy than the one attach loads."""
    from test_python_api import py_env
    prog = script(TRACKED, name="tracked.py")
    cap = tmp_path / "own.bin"
    cmd = ([memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", str(cap), str(prog)]
           if how == "run" else ["/usr/bin/python3", str(prog), "tracker", str(cap)])
    env = py_env(MEMTRACE_PAYLOAD=payload_copy(tmp_path)) if how.endswith("other-payload") \
        else py_env()
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=env)
    try:
        pid = int(p.stdout.readline())
        msg = one_line_error(attach(memtrace, pid, tmp_path / "b.bin", check=False))
        assert msg == ("memtrace: pid %d could not start tracking: it is tracked already, by "
                       "memtrace run or a memtrace.Tracker (one capture at a time)" % pid), msg
        assert not (tmp_path / "b.bin").exists()
        p.stdin.write("go\n")
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    finally:
        p.kill()
        p.wait()
    sizes = run(memtrace, "stats", "--json", cap).stdout
    assert '"allocations": ' in sizes and run(memtrace, "parse", cap).stdout.count(
        "size=1234568") == 1


TRACKER_AFTER_ATTACH = r"""
import os, sys
import memtrace
with memtrace.Tracker(sys.argv[1]):
    x = bytearray(111111)
print(os.getpid(), flush=True)
sys.stdin.readline()
try:
    with memtrace.Tracker(sys.argv[2]):
        y = bytearray(222222)
    print("ran", flush=True)
except RuntimeError as e:
    print("refused:", e, flush=True)
sys.stdin.readline()
z = bytearray(333333)
"""


def test_tracker_refused_while_another_payload_tracks(memtrace, script, tmp_path):
    """A Tracker's payload (one copy) has ended its capture; an attach
    loads another copy and tracks: a second Tracker is refused, as it
    would be by the one payload, and the attach's capture goes on."""
    from test_python_api import py_env
    prog = script(TRACKER_AFTER_ATTACH, name="late.py")
    p = subprocess.Popen(["/usr/bin/python3", str(prog), str(tmp_path / "t1.bin"),
                          str(tmp_path / "t2.bin")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True,
                         env=py_env(MEMTRACE_PAYLOAD=payload_copy(tmp_path)))
    try:
        pid = int(p.stdout.readline())
        cap = tmp_path / "a.bin"
        attach(memtrace, pid, cap)
        maps = open("/proc/%d/maps" % pid).read()
        assert maps.count("libmemtrace-payload.so") >= 2 and "/other/" in maps
        p.stdin.write("go\n")
        p.stdin.flush()
        line = p.stdout.readline()
        assert line.startswith("refused: No more than one Tracker instance"), line
        p.stdin.write("go\n")
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    finally:
        p.kill()
        p.wait()
    assert not (tmp_path / "t2.bin").exists()
    out = run(memtrace, "parse", cap).stdout
    assert out.count("size=333334") == 1 and "size=222223" not in out
    assert run(memtrace, "parse", tmp_path / "t1.bin").stdout.count("size=111112") == 1


EXITING_PAYLOAD = r"""
#include <unistd.h>
int memtrace_attach_entry(const void *cfg) { (void)cfg; _exit(3); }
int memtrace_attach_entry_str(const char *s) { (void)s; _exit(3); }
int memtrace_payload_start(const void *cfg) { (void)cfg; return -1; }
int memtrace_payload_stop(void) { return -1; }
"""


def test_error_target_exits_while_attaching(memtrace, target_script, targets, tmp_path):
    """A process that exits in the middle of the attach (here: as the
    payload's entry is called) is said to have exited, once, whatever
    failed for want of it."""
    src = tmp_path / "exiting.c"
    src.write_text(EXITING_PAYLOAD)
    lib = tmp_path / "exiting.so"
    run("cc", "-shared", "-fPIC", "-o", lib, src)
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    p = run(memtrace, "attach", "-o", tmp_path / "a.bin", t.pid, check=False, timeout=60,
            env=dict(os.environ, MEMTRACE_PAYLOAD=str(lib)))
    assert one_line_error(p) == "memtrace: pid %d exited while attaching" % t.pid
    assert t.p.wait(timeout=60) == 3
    assert not (tmp_path / "a.bin").exists()
