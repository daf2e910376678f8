"""memtrace attach/detach and the target's own handlers: fault handlers and
code deallocation watched only while attached, the payload threads' own
faults, a fork after the program reused the payload's descriptors."""

import os
import signal
import subprocess

import pytest

from conftest import python_params
from attach_target import Target, attach, detach
from attach_target import target_script, targets  # noqa: F401 (fixtures)


def caught_signals(pid):
    """The signals @pid has handlers for, from /proc/PID/status."""
    for line in open("/proc/%d/status" % pid):
        if line.startswith("SigCgt:"):
            mask = int(line.split()[1], 16)
            return {sig for sig in range(1, 65) if mask >> (sig - 1) & 1}
    raise AssertionError("no SigCgt for %d" % pid)


@pytest.mark.parametrize("python", python_params())
def test_fault_handlers_only_while_attached(memtrace, target_script, targets, tmp_path, python):
    """Attached, memtrace catches SIGSEGV and SIGBUS (faults of its writer
    thread must not kill the target), and the terminating signals still
    at their default (a capture a signal ends is finished first,
    test_hardening_signals.py); detached, the target's own dispositions
    are back, and its other signals were never touched."""
    from test_hardening_signals import TERMINATING, dispositions
    t = Target(python, target_script, "sleep")
    targets.append(t)
    before = caught_signals(t.pid)
    assert not before & {signal.SIGSEGV, signal.SIGBUS}
    default = TERMINATING - before - dispositions(t.pid)[1]
    attach(memtrace, t.pid, tmp_path / "cap.bin")
    t.cmd("alloc 1000")
    assert caught_signals(t.pid) == before | {signal.SIGSEGV, signal.SIGBUS} | default
    detach(memtrace, t.pid)
    assert caught_signals(t.pid) == before
    status, _ = t.finish()
    assert status == 3


@pytest.mark.parametrize("python", python_params())
def test_code_deallocation_watched_only_while_attached(memtrace, target_script, targets, tmp_path,
                                                       python):
    """Attached, memtrace wraps the code type's deallocator, so that a code
    object made where another died is not taken for it; detached, the
    interpreter's own deallocator is back."""
    t = Target(python, target_script, "sleep")
    targets.append(t)
    before = t.cmd("codeslot 50")
    attach(memtrace, t.pid, tmp_path / "cap.bin")
    during = t.cmd("codeslot 100")
    detach(memtrace, t.pid)
    after = t.cmd("codeslot 200")
    status, _ = t.finish()
    assert status == 3
    assert before and during != before and after == before, (before, during, after)


def test_payload_threads_take_their_own_faults(memtrace, target_script, targets, tmp_path):
    """The payload's threads block the program's signals but not SIGSEGV
    and SIGBUS: the control thread patches GOTs at attach and detach, and
    a store the loader made read-only under it is caught and retried. A
    blocked fault would kill the target instead."""
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    attach(memtrace, t.pid, tmp_path / "cap.bin")
    t.cmd("alloc 1000")
    seen = {}
    for task in os.listdir("/proc/%d/task" % t.pid):
        try:  # a thread may end meanwhile (the start's, done with the GIL)
            with open("/proc/%d/task/%s/status" % (t.pid, task)) as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except (FileNotFoundError, ProcessLookupError):
            continue
        seen[status["Name"].strip()] = int(status["SigBlk"], 16)
    faults = (1 << (signal.SIGSEGV - 1)) | (1 << (signal.SIGBUS - 1))
    for name in ("memtrace-ctl", "memtrace-write"):
        assert name in seen and seen[name] & faults == 0, (name, hex(seen.get(name, 0)))
    detach(memtrace, t.pid)
    t.finish()


CLOSE_AND_FORK = r"""
import os, sys
sys.stdin.readline()
os.closerange(3, 256)  # as daemons do: the payload's descriptors too
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
pid = os.fork()
if pid == 0:
    try:
        os.write(fd, b"child\n")
        os._exit(0)
    except OSError:
        os._exit(1)
_, status = os.waitpid(pid, 0)
os.write(fd, b"parent\n")
print(status, flush=True)
"""


def test_fork_after_the_program_reused_the_payload_descriptors(memtrace, script, tmp_path):
    """After attach the program closes every descriptor it did not open
    and opens a file, which gets one of the payload's numbers; then it
    forks. The child must keep that file: it used to close it, taking it
    for the parent's control socket."""
    prog = script(CLOSE_AND_FORK, name="cf.py")
    log = tmp_path / "log.txt"
    p = subprocess.Popen(["/usr/bin/python3", str(prog), str(log)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, universal_newlines=True)
    try:
        attach(memtrace, p.pid, tmp_path / "cap.bin")
        out, _ = p.communicate("go\n", timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert out.strip() == "0" and log.read_text() == "child\nparent\n", (out, log.read_text())


def test_fault_after_cycles_with_faulthandler_kills_the_target(memtrace, target_script, targets,
                                                               tmp_path):
    """The target enables faulthandler while attached (its handler then
    calls ours), is detached and attached again: a fault of its own still
    kills it, once, with faulthandler's report (our handler must not call
    faulthandler's back, or each would call the other forever)."""
    t = Target("/usr/bin/python3", target_script, "sleep", stderr=subprocess.PIPE)
    targets.append(t)
    attach(memtrace, t.pid, tmp_path / "a.bin")
    t.cmd("faulthandler")
    detach(memtrace, t.pid)
    attach(memtrace, t.pid, tmp_path / "b.bin")
    t.p.stdin.write("segv\n")
    t.p.stdin.flush()
    assert t.p.wait(timeout=60) == -signal.SIGSEGV
    err = t.p.stderr.read()
    assert err.count("Fatal Python error: Segmentation fault") == 1, err[:2000]
