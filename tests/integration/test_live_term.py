"""memtrace live and run --live where the view is drawn: a terminal of a
given size, and an output that goes away."""

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

from conftest import run
from test_live import stop

# call paths that all rise: more rows than any terminal here has
MANY = "keep = []\n" + "".join(
    "def f%d():\n    return bytearray(%d)\n" % (i, 100_000 + 1000 * i) for i in range(30)) + \
    "for r in range(5):\n" + "".join("    keep.append(f%d())\n" % i for i in range(30))


def on_terminal(argv, rows=24, cols=80, then=None):
    """Run @argv on a terminal of @rows and @cols, and once it has drawn a
    frame call @then(its pid), if given; its output, and its exit status."""
    pid, master = pty.fork()
    if pid == 0:
        # the size set before the view starts, by the view's own terminal
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.execv(argv[0], argv)
    out = b""
    try:
        while then and b"\x1b[H" not in out:  # the view's first frame
            assert select.select([master], [], [], 30)[0], out[-300:]
            out += os.read(master, 65536)
        if then:
            then(pid)
        while True:
            select.select([master], [], [], 30)
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO once the terminal's last user is gone
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
    _, status = os.waitpid(pid, 0)
    return out, os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("rows,sort", [(12, "steady"), (12, "own"), (5, "own"), (1, "own")])
def test_frame_fits_the_terminal(memtrace, script, tmp_path, rows, sort):
    """A frame drawn in place takes the terminal's rows at most, with no
    line break after its last one: the terminal never scrolls, which would
    push the frame's first lines out of sight."""
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-o", cap, "--python", "/usr/bin/python3", script(MANY))
    out, status = on_terminal([memtrace, "live", "--once", "--sort", sort, str(cap)], rows, 100)
    assert status == 0, out[-500:]
    start = out.index(b"\x1b[H")
    frame = out[start + 3:out.index(b"\x1b[J", start)]
    lines = frame.split(b"\r\n")
    assert len(lines) <= rows and frame.count(b"\n") == len(lines) - 1, frame
    assert lines[0].startswith(b"memtrace live: "), frame
    if rows == 12:
        assert len(lines) >= 11 and b" at " in lines[-1], frame  # the room is used
    # the last frame, left on the terminal once the view ends, is whole
    assert out[out.index(b"\x1b[?1049l"):].count(b"\n") >= 8


LIVE_RUN = """\
import sys

keep = bytearray(10_000_000)
print("hello from the program", flush=True)
with open(sys.argv[1]) as fifo:
    fifo.read()
sys.exit(5)
"""


def test_run_live_output_closed(memtrace, script, tmp_path):
    """run --live whose view goes to a pipe closed early: the view ends,
    not memtrace (no SIGPIPE), which waits for the program and exits with
    its status."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cap = tmp_path / "c.bin"
    p = subprocess.Popen([memtrace, "run", "--live", "--python", "/usr/bin/python3", "-o",
                          str(cap), str(script(LIVE_RUN)), str(fifo)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline().startswith(b"memtrace live: ")
        p.stdout.close()  # the next frame finds no reader
        with open(fifo, "w") as w:  # opened once the program waits there
            w.write("go")
        assert p.wait(60) == 5, p.stderr.read()
        err = p.stderr.read().decode()
    finally:
        stop(p)
    assert "capture written to %s" % cap in err, err
    assert (tmp_path / "c.log").read_text() == "hello from the program\n"
    rows = run(memtrace, "summary", "--json", "--leaks", cap).stdout
    assert "\"own_bytes\": 10000001," in rows  # the program ran to its end, tracked


WAITS = """\
import sys

keep = bytearray(10_000_000)
print("ready", flush=True)
sys.stdin.readline()
"""


def test_keys_that_are_sequences(memtrace, script, tmp_path):
    """Keys that come as sequences starting with Esc (arrows, F2 "Esc O Q")
    do nothing, whatever letters they hold; Esc alone quits, as memray's;
    t and a sort as memray's do."""
    cap = tmp_path / "c.bin"
    target = subprocess.Popen([memtrace, "run", "-o", str(cap), "--python", "/usr/bin/python3",
                               str(script(WAITS))], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    master = None
    try:
        assert target.stdout.readline() == b"ready\n"
        pid, master = pty.fork()
        if pid == 0:
            os.execv(memtrace, [memtrace, "live", "--interval", "0.05", str(cap)])
        out = b""

        def frames(n):
            """Read until @n more frames are drawn: the view is still on."""
            nonlocal out
            want = out.count(b"\x1b[H") + n
            while out.count(b"\x1b[H") < want:
                assert select.select([master], [], [], 30)[0], out[-300:]
                try:
                    out += os.read(master, 65536)
                except OSError:  # EIO: the view ended
                    pytest.fail("the view ended: %r" % out[-300:])

        frames(1)
        # F2, an arrow, Ctrl-Left, F5, Alt-q: none is q
        for seq in (b"\x1bOQ", b"\x1b[A", b"\x1b[1;5D", b"\x1b[15~", b"\x1bq"):
            os.write(master, seq)
            frames(2)
        # memray's keys for sorting by total and by allocations: the
        # column sorted on is marked
        for k, heading in ((b"t", b"Total live*"), (b"a", b"Own blocks*")):
            os.write(master, k)
            deadline = time.monotonic() + 30
            while heading not in out.rsplit(b"\x1b[H", 1)[-1]:
                assert time.monotonic() < deadline, out[-300:]
                frames(1)
        os.write(master, b"\x1b")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.wait(60) == 0
    finally:
        if master is not None:
            os.close(master)
        stop(target)


SORTS = """\
def big():
    return bytearray(1_000_000)


def small():
    return bytearray(1_000)


def outer():
    return [big() for _ in range(3)]


keep = outer()
bits = [small() for _ in range(50)]
"""


def test_sort_by_total_and_blocks(memtrace, script, tmp_path):
    """--sort total puts first the locations with the most live in them and
    in what they called (outer, with no memory of its own), --sort blocks
    those with the most blocks of their own (small's 50)."""
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-o", cap, "--python", "/usr/bin/python3", script(SORTS))

    def rows(sort):
        out = run(memtrace, "live", "--once", "--sort", sort, "-n", "3", cap).stdout
        table = out.split("\n\n", 1)[1].splitlines()
        assert ("Total live*" in table[0]) == (sort == "total"), table[0]
        assert ("Own blocks*" in table[0]) == (sort == "blocks"), table[0]
        return [re.match(r"\s*(\S+ \S+)\s+(\S+ \S+)\s+(\d+)  (\S+)", r).groups()
                for r in table[1:] if r]

    top = rows("total")
    assert [r[3] for r in top[:2]] == ["<module>", "outer"], top
    assert top[1][:3] == ("0 B", "2.86 MiB", "0"), top
    assert rows("blocks")[0] == ("48.88 KiB", "48.88 KiB", "50", "small"), rows("blocks")
    assert rows("own")[0][3] == "big"


LOOPS = """\
import time

keep = bytearray(10_000_000)
while True:
    time.sleep(0.05)
"""


def test_run_live_ended_by_sigterm_does_not_say_the_program_runs_on(memtrace, script, tmp_path):
    """SIGTERM to run --live ends the view and is passed on to the program,
    which it ends: memtrace waits for that end before it would say that the
    program runs on, and so does not say it."""
    cap = tmp_path / "c.bin"
    out, code = on_terminal([memtrace, "run", "--live", "--python", "/usr/bin/python3", "-o",
                             str(cap), str(script(LOOPS))],
                            then=lambda pid: os.kill(pid, signal.SIGTERM))
    assert code == -signal.SIGTERM, out[-500:]
    text = out.decode(errors="replace")
    assert "killed by SIGTERM" in text, text[-500:]
    assert "runs on" not in text, text[-500:]
