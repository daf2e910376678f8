"""A program started with its standard descriptors closed (a daemon):
memtrace's files must not take their numbers, or the program's next
write to "stderr" goes into the capture, or a read of "stdin" into a
pipe of libunwind's."""
import contextlib
import json
import os
import socket
import subprocess

import pytest

from conftest import run
from attach_target import attach, detach

DAEMON = r"""
import os, socket, sys
ctl = socket.socket(fileno=int(sys.argv[1]))
f = ctl.makefile("rw", buffering=1)
keep = []
def probe():
    seen = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            seen.append(os.readlink("/proc/self/fd/%d" % fd))
        except OSError:
            seen.append("closed")
    return " ".join(seen)
f.write(probe() + "\n")
for line in f:
    if line.strip() == "quit":
        break
    keep.extend(bytearray(4096) for _ in range(100))
    try:
        os.write(2, b"complaint\n")  # a C library's perror(), say
        said = "written"
    except OSError as e:
        said = os.strerror(e.errno)
    f.write(probe() + " " + said + "\n")
"""


def _closed_stdio():
    for fd in (0, 1, 2):
        os.close(fd)


@contextlib.contextmanager
def _daemon(cmd, tmp_path):
    """@cmd with fds 0-2 closed and a control socket as fd argv[-1]: the
    process and the socket's file, once it found 0-2 closed at its start."""
    ours, theirs = socket.socketpair()
    p = subprocess.Popen(cmd + [str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                         preexec_fn=_closed_stdio, cwd=tmp_path)
    theirs.close()
    try:
        f = ours.makefile("rw", buffering=1)
        assert f.readline() == "closed closed closed\n"
        yield p, f
    finally:
        p.kill()
        p.wait()


def _say(f, line):
    f.write(line + "\n")
    f.flush()


def _still_closed(f):
    """The program allocates, writes to stderr, and finds 0-2 closed."""
    _say(f, "go")
    assert f.readline() == "closed closed closed Bad file descriptor\n"


def _ends(p, f):
    _say(f, "quit")
    assert p.wait(timeout=60) == 0


def _allocations(memtrace, cap):
    return json.loads(run(memtrace, "stats", "--json", cap).stdout)["totals"]["allocations"]


@pytest.mark.parametrize("mode", [[], ["--native"], ["--trace-python-allocators"]],
                         ids=["default", "native", "pyalloc"])
def test_run_keeps_the_standard_descriptors_closed(memtrace, script, tmp_path, mode):
    prog = script(DAEMON, name="daemon.py")
    cap = tmp_path / "r.bin"
    with _daemon([memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", str(cap)]
                 + mode + [str(prog)], tmp_path) as (p, f):
        _still_closed(f)
        _ends(p, f)
    assert _allocations(memtrace, cap) >= 100


@pytest.mark.parametrize("mode", [[], ["--native"]], ids=["default", "native"])
def test_attach_to_a_daemon_without_standard_descriptors(memtrace, script, tmp_path, mode):
    prog = script(DAEMON, name="daemon.py")
    cap = tmp_path / "a.bin"
    with _daemon(["/usr/bin/python3", str(prog)], tmp_path) as (p, f):
        attach(memtrace, p.pid, cap, *mode)
        _still_closed(f)
        detach(memtrace, p.pid)
        _still_closed(f)
        _ends(p, f)
    assert _allocations(memtrace, cap) >= 100


def test_report_with_stdout_closed(memtrace, script, tmp_path):
    """The page goes to its file, not to the file that took stdout's number."""
    prog = script("x = [bytearray(1000) for _ in range(100)]\n", name="p.py")
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap, prog)
    page = tmp_path / "page.html"
    p = subprocess.run([memtrace, "flamegraph", "-o", str(page), str(cap)],
                       preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=60)
    assert p.returncode == 0, p.stderr
    text = page.read_text()
    assert text.lstrip().startswith("<!DOCTYPE html>") and "wrote" not in text[-200:]


HEAD = r"""
import os, select, sys
print("first line", flush=True)
p = select.poll()
p.register(1, 0)
p.poll()  # POLLERR: the reader has gone
sys.exit(3)
"""


def test_run_piped_into_head_keeps_the_exit_status(memtrace, script, tmp_path):
    """`memtrace run prog.py 2>&1 | head -1`: the reader is gone when the
    program ends, so memtrace's "capture written" meets a closed pipe; it
    is lost, and the exit status stays the program's, not SIGPIPE's."""
    prog = script(HEAD, name="head.py")
    r, w = os.pipe()
    p = subprocess.Popen([memtrace, "run", "-o", str(tmp_path / "h.bin"), str(prog)],
                         stdout=w, stderr=w, cwd=tmp_path)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        assert f.readline() == b"first line\n"
    assert p.wait(timeout=60) == 3
    assert _allocations(memtrace, tmp_path / "h.bin") > 0


def test_descriptors_closed_with_the_capture_thrown_away(memtrace, tmp_path):
    """-o /dev/null and a program that closes every descriptor it did not
    open: Python did start, so run does not say that none did."""
    p = run(memtrace, "run", "-o", "/dev/null", "-c", "import os; os.closerange(3, 4096)",
            check=False, cwd=tmp_path)
    assert p.returncode == 1
    assert p.stderr == ("memtrace: no Python interpreter started under memtrace (or the program "
                        "closed memtrace's descriptors): nothing was captured\n")
