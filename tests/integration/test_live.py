"""memtrace live: following a capture while a real Python process writes
it, on a pipe and on a terminal, and its errors."""

import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import time

import pytest

from conftest import run

STEPS = """\
import os, sys


def first():
    return bytearray(30_000_000)


def second():
    return bytearray(50_000_000)


a = first()
print("first", os.getpid(), flush=True)
sys.stdin.readline()
del a
b = second()
print("second", flush=True)
sys.stdin.readline()
"""


def stop(*procs):
    """Kill the processes of @procs (None for one not started) still running."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()


class Frames:
    """Frames of `memtrace live` on a pipe: blocks of lines ended by an
    empty line."""

    def __init__(self, proc):
        self.proc = proc
        self.buf = b""

    def next(self, timeout=30):
        deadline = time.monotonic() + timeout
        # a frame is its head, an empty line, its table, and an empty
        # line after it: wait for the second
        while self.buf.count(b"\n\n") < 2:
            left = deadline - time.monotonic()
            assert left > 0, "no frame within %ss: %r" % (timeout, self.buf[-500:])
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                assert chunk, "live ended mid-frame: %r" % self.buf
                self.buf += chunk
        # a frame has one empty line of its own (before the table)
        parts = self.buf.split(b"\n\n")
        frame = parts[0] + b"\n\n" + parts[1]
        self.buf = b"\n\n".join(parts[2:])
        return frame.decode()

    def until(self, pred, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            f = self.next(max(0.1, deadline - time.monotonic()))
            if pred(f):
                return f


def row(frame, function):
    """(own live bytes, growth or None, blocks) of @function's row, as
    text, or None."""
    for line in frame.splitlines():
        m = re.match(r"\s*(\S+ \S+)\s+\S+ \S+(?:\s+([-+]?\S+ \S+))?\s+(\d+)\s+%s at "
                     % re.escape(function), line)
        if m:
            return m.group(1), m.group(2), int(m.group(3))
    return None


def table(frame):
    """The functions of the frame's rows, in order."""
    return re.findall(r"^.*\d  (\S+) at ", frame.split("\n\n", 1)[1], re.M)


def mib(text):
    n, unit = text.split()
    return float(n) * {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]


def test_follows_a_running_program(memtrace, script, tmp_path):
    prog = script(STEPS)
    cap = tmp_path / "c.bin"
    target = subprocess.Popen([memtrace, "run", "-o", str(cap), "--python", "/usr/bin/python3",
                               str(prog)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    live = None
    try:
        word, pypid = target.stdout.readline().split()
        assert word == b"first"
        live = subprocess.Popen([memtrace, "live", "--interval", "0.1", str(cap)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        frames = Frames(live)
        f = frames.until(lambda f: row(f, "first"))
        assert "tracking" in f and "pid %d " % int(pypid) in f, f
        own, growth, blocks = row(f, "first")
        assert 28.5 < mib(own) < 29 and blocks == 1, f
        assert row(f, "second") is None

        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.stdout.readline() == b"second\n"
        f = frames.until(lambda f: row(f, "second"))
        own, growth, blocks = row(f, "second")
        assert 47.6 < mib(own) < 47.8, f
        assert growth == "+" + own, f  # allocated after the view started
        assert row(f, "first") is None, f  # freed: no longer live

        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.wait(60) == 0
        f = frames.until(lambda f: "tracking ended" in f)
        assert live.wait(30) == 0
        assert live.stderr.read() == b""
    finally:
        stop(target, live)


def test_sorted_by_growth(memtrace, script, tmp_path):
    """--sort growth: the locations that grew most since the view started
    come first, and those that did not grow are left out."""
    prog = script(STEPS)
    cap = tmp_path / "c.bin"
    target = subprocess.Popen([memtrace, "run", "-o", str(cap), str(prog)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    live = None
    try:
        assert target.stdout.readline().split()[0] == b"first"
        # the first block in the capture before the view starts: no growth
        deadline = time.monotonic() + 30
        while not row(run(memtrace, "live", "--once", cap).stdout, "first"):
            assert time.monotonic() < deadline
        live = subprocess.Popen([memtrace, "live", "--interval", "0.1", "--sort", "growth",
                                 str(cap)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        frames = Frames(live)
        f = frames.next()
        assert "(nothing grew)" in f and "Growth*" in f, f
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.stdout.readline() == b"second\n"
        f = frames.until(lambda f: row(f, "second"))
        own, growth, _ = row(f, "second")
        assert growth == "+" + own and table(f)[0] == "second", f
        assert "first" not in table(f), f  # it shrank
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.wait(60) == 0
        frames.until(lambda f: "tracking ended" in f)
        assert live.wait(30) == 0
    finally:
        stop(target, live)


def test_once_on_a_finished_capture(memtrace, script, tmp_path):
    prog = script(STEPS)
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-o", cap, prog, input="\n\n")
    p = run(memtrace, "live", "--once", "-n", "1", cap)
    assert "tracking ended" in p.stdout
    assert 47.6 < mib(row(p.stdout, "second")[0]) < 47.8, p.stdout
    table = p.stdout.split("\n\n", 1)[1].strip().splitlines()
    assert len(table) == 2, table  # the heading and one row
    # without --once a finished capture shows its frame and ends as well
    q = run(memtrace, "live", cap)
    assert "tracking ended" in q.stdout and row(q.stdout, "second")


def test_process_killed_midway(memtrace, script, tmp_path):
    """A process killed with SIGKILL leaves no trailer: live shows what
    the capture holds and ends, saying so."""
    prog = script(STEPS)
    cap = tmp_path / "c.bin"
    target = subprocess.Popen([memtrace, "run", "-o", str(cap), str(prog)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        word, pypid = target.stdout.readline().split()
        assert word == b"first"
        # the writer flushes a chunk within 250 ms: wait for it to hold the block
        deadline = time.monotonic() + 30
        while True:
            p = run(memtrace, "live", "--once", cap)
            if row(p.stdout, "first") or time.monotonic() > deadline:
                break
        assert "tracking" in p.stdout and row(p.stdout, "first"), p.stdout
        os.kill(int(pypid), signal.SIGKILL)
        target.wait(30)
    finally:
        stop(target)
    p = run(memtrace, "live", "--interval", "0.1", cap, timeout=30)
    assert "the process is gone: the capture ends here, cut short" in p.stdout
    assert row(p.stdout, "first"), p.stdout


CUT_SHORT = """\
import time


def first():
    return bytearray(30_000_000)


a = first()
time.sleep(0.6)  # a chunk written before the last one
"""


def test_cut_short_capture_named_for_another_process(memtrace, script, tmp_path):
    """A capture cut short whose header names a pid that another process
    has here (pid 1, for a capture of a container or another host; or an
    older process that is not its writer) is not waited for: that process
    does not hold the capture open, as its writer would."""
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-q", "-o", cap, script(CUT_SHORT))
    data = cap.read_bytes()
    at, ends = struct.unpack_from("<H", data, 10)[0], []
    while data[at:at + 4] == b"MTCK":
        at += 16 + struct.unpack_from("<I", data, at + 8)[0]
        ends.append(at)
    assert len(ends) >= 2 and ends[-1] == len(data), ends
    cut = bytearray(data[:ends[-2]])  # the trailer's chunk left out

    def follow(pid, *setpriv, where=tmp_path):
        cut[16:20] = struct.pack("<I", pid)
        path = os.path.join(str(where), "cut-%d.bin" % pid)
        with open(path, "wb") as f:
            f.write(cut)
        if setpriv:
            os.chown(path, 65534, 65534)
        p = run(*setpriv, memtrace, "live", "--interval", "0.1", path, timeout=30)
        assert "the process is gone: the capture ends here, cut short" in p.stdout, p.stdout
        assert row(p.stdout, "first") and p.stderr == "", (p.stdout, p.stderr)

    follow(1)
    follow(os.getpid())  # started before the capture, and ours to signal
    # a user who may not look at pid 1's descriptors
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return
    d = os.path.dirname(memtrace)
    while d != "/":
        if not os.stat(d).st_mode & 0o001:
            return
        d = os.path.dirname(d)
    shared = tempfile.mkdtemp(prefix="memtrace-live-", dir="/tmp")
    try:
        os.chmod(shared, 0o755)
        follow(1, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", where=shared)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_on_a_terminal(memtrace, script, tmp_path):
    """On a terminal the view is drawn in place on the alternate screen, q
    quits, and the terminal is given back with the last frame on it."""
    prog = script(STEPS)
    cap = tmp_path / "c.bin"
    target = subprocess.Popen([memtrace, "run", "-o", str(cap), str(prog)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    master = None
    try:
        assert target.stdout.readline().split()[0] == b"first"
        pid, master = pty.fork()
        if pid == 0:
            os.execv(memtrace, [memtrace, "live", "--interval", "0.1", str(cap)])
        out = b""
        deadline = time.monotonic() + 30
        while b"first at" not in out and time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 1)
            if r:
                out += os.read(master, 65536)
        assert b"\x1b[?1049h" in out and b"first at" in out, out
        assert b"q quits" in out and b"Growth*" not in out
        os.write(master, b"g")  # sorted by growth: marked in the heading
        while b"Growth*" not in out and time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 1)
            if r:
                out += os.read(master, 65536)
        assert b"Growth*" in out
        # Ctrl-Z gives the terminal back before stopping (this process
        # group has no parent in its session, so the stop itself is
        # discarded) and takes it again after
        entered = out.count(b"\x1b[?1049h")
        os.write(master, b"\x1a")
        while out.count(b"\x1b[?1049h") == entered and time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 1)
            if r:
                out += os.read(master, 65536)
        assert out.count(b"\x1b[?1049h") == entered + 1, out[-300:]
        last = out.rfind(b"\x1b[?1049h")
        left = out.find(b"\x1b[?1049l", out.rfind(b"\x1b[?1049h", 0, last))
        assert 0 <= left < last, out[-300:]
        os.write(master, b"q")
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        try:
            while True:
                chunk = os.read(master, 65536)
                if not chunk:
                    break
                out += chunk
        except OSError:  # EIO once the terminal's last user is gone
            pass
        left = out.rfind(b"\x1b[?1049l")
        assert left > out.rfind(b"\x1b[?1049h"), out[-300:]
        # the last frame (sorted by growth) stays on the terminal
        assert b"memtrace live: " in out[left:] and b"Growth*" in out[left:], out[left:]
        target.stdin.write(b"\n\n")
        target.stdin.flush()
        assert target.wait(60) == 0
    finally:
        if master is not None:
            os.close(master)
        stop(target)


@pytest.mark.parametrize("case", ["missing", "not-a-capture", "bad-interval", "bad-top",
                                  "bad-sort", "bad-once", "no-header", "bad-port"])
def test_bad_input(memtrace, tmp_path, case):
    path = tmp_path / "x.bin"
    args = ["live", "--once", path]
    if case == "bad-port":
        args = ["live", "70000"]
    if case == "not-a-capture":
        path.write_bytes(b"hello, not a capture at all\n" * 10)
    elif case == "bad-interval":
        args = ["live", "--interval", "0", path]
    elif case == "bad-top":
        args = ["live", "-n", "x", path]
    elif case == "bad-sort":
        args = ["live", "--sort", "size", path]
    elif case == "bad-once":
        args = ["live", "--once", "--sort", "growth", path]
    elif case == "no-header":
        path.write_bytes(b"")
    p = run(memtrace, *args, check=False, timeout=30)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("memtrace: "), p.stderr
    assert p.returncode == (2 if case.startswith("bad") else 1), p.stderr
    assert p.stdout == ""
    expect = {"missing": "x.bin", "not-a-capture": "not a memtrace capture",
              "bad-interval": "--interval", "bad-top": "-n wants a number", "bad-sort": "--sort wants own, total, blocks, growth or steady, not 'size'",
              "bad-once": "not with --once",
              "no-header": "has no capture header", "bad-port": "invalid port 70000"}[case]
    assert expect in p.stderr


def test_live_view_of_an_attached_process(memtrace, tmp_path):
    """The story live is for: a running service keeps growing; attach to
    it, watch which line grows, detach, and it runs on."""
    from attach_target import TARGET, Target, attach, detach
    target_script = tmp_path / "target.py"
    target_script.write_text(TARGET)
    t = Target("/usr/bin/python3", target_script, "sleep")
    cap = tmp_path / "cap.bin"
    try:
        attach(memtrace, t.pid, cap)
        t.cmd("alloc 20000000")
        live = subprocess.Popen([memtrace, "live", "--interval", "0.1", "--sort", "growth",
                                 str(cap)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        frames = Frames(live)
        f = frames.next()
        assert "pid %d " % t.pid in f
        t.cmd("cache 300")  # 300 x 20 kB kept by an lru_cache

        def grown(f):
            r = row(f, "Service.lookup") or row(f, "lookup")
            return r and mib(r[1].lstrip("+")) > 5.5
        f = frames.until(grown)  # all of it, once the chunks holding it are written
        r = row(f, "Service.lookup") or row(f, "lookup")
        assert mib(r[1].lstrip("+")) < 6 and r[2] >= 300, f  # grown since the view started
        detach(memtrace, t.pid)
        frames.until(lambda f: "tracking ended" in f)
        assert live.wait(30) == 0
        status, rest = t.finish()
        assert status == 3 and rest.strip() == "bye"
    finally:
        t.kill()
        if "live" in locals() and live.poll() is None:
            live.kill()
            live.wait()


def test_attach_live(memtrace, tmp_path):
    """memtrace attach --live (memray's attach without -o): the live view of
    the process from the attach on; quitting it (here Ctrl-C) detaches, and
    the process runs on. A second attach --live to a process that exits
    meanwhile says so when the view ends."""
    from attach_target import TARGET, Target, _raw_status, leak_rows
    target_script = tmp_path / "target.py"
    target_script.write_text(TARGET)
    for exits in (False, True):
        t = Target("/usr/bin/python3", target_script, "sleep")
        cap = tmp_path / ("cap%d.bin" % exits)
        live = subprocess.Popen([memtrace, "attach", "--live", "-o", str(cap), str(t.pid)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            frames = Frames(live)
            assert "pid %d " % t.pid in frames.next()
            t.cmd("cache 300")  # 300 x 20 kB kept by an lru_cache
            frames.until(lambda f: (row(f, "Service.lookup") or row(f, "lookup") or
                                    (None, None, 0))[2] >= 300)
            if exits:
                status, _ = t.finish()
                assert status == 3
                frames.until(lambda f: "tracking ended" in f)
            else:
                live.send_signal(signal.SIGINT)
            assert live.wait(60) == 0
            err = live.stderr.read().decode()
            assert err.splitlines()[-1] == ("memtrace: pid %d exited, capture written to %s"
                                            if exits else
                                            "memtrace: detached from pid %d, capture written "
                                            "to %s") % (t.pid, cap), err
            if not exits:
                status, rest = t.finish()  # it ran on, untracked
                assert status == 3 and rest.strip() == "bye"
            rows = leak_rows(memtrace, cap)
            assert sum(r["own_bytes"] for r in rows if r["function"].endswith("lookup")) \
                >= 300 * 20_000, rows[:5]
        finally:
            t.kill()
            stop(live)
    for end in ("closed pipe", "SIGTERM", "killed"):
        t = Target("/usr/bin/python3", target_script, "sleep")
        cap = tmp_path / "end.bin"
        live = subprocess.Popen([memtrace, "attach", "--live", "-f", "-o", str(cap), str(t.pid)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            Frames(live).next()
            if end == "closed pipe":  # `memtrace attach --live PID | head`
                live.stdout.close()
                t.cmd("cache 30")  # frames to write on
                # a view cut short by a closed pipe is a failure, as any report's
                want = (1, "memtrace: detached from pid %d, capture written to %s" % (t.pid, cap))
            elif end == "SIGTERM":
                live.send_signal(signal.SIGTERM)
                want = (128 + signal.SIGTERM,
                        "memtrace: detached from pid %d, capture written to %s" % (t.pid, cap))
            else:
                t.p.kill()
                t.p.wait()
                want = (1, "memtrace: pid %d ended without finishing the capture (killed?): "
                           "%s is cut short" % (t.pid, cap))
            assert live.wait(60) == want[0], live.stderr.read()
            err = live.stderr.read().decode()
            assert err.splitlines()[-1] == want[1], err
            if end != "killed":
                assert _raw_status(t.pid).startswith("ok idle"), _raw_status(t.pid)
                status, _ = t.finish()
                assert status == 3
        finally:
            t.kill()
            stop(live)
    for extra, why in ((["--duration", "5"], "--duration"),
                       (["--aggregate"], "--aggregate (figures, not events)")):
        p = run(memtrace, "attach", "--live", *extra, "1", check=False)
        assert p.returncode == 2 and p.stderr == \
            "memtrace: --live shows the capture until it is quit: not with %s\n" % why, p.stderr


LIVE_RUN = """\
import sys


def f():
    return bytearray(10_000_000)


a = f()
print("hello from the program", flush=True)
with open(sys.argv[1]) as fifo:
    fifo.read()
sys.exit(5)
"""


@pytest.mark.parametrize("quit_early", [False, True], ids=["to-the-end", "q-first"])
def test_run_live(memtrace, script, tmp_path, quit_early):
    """memtrace run --live: the view holds the terminal while the program
    runs, its output goes to the capture's .log, and its exit status is
    kept; q leaves the view and memtrace waits for the program."""
    prog = script(LIVE_RUN)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cap = tmp_path / "c.bin"
    pid, master = pty.fork()
    if pid == 0:
        os.execv(memtrace, [memtrace, "run", "--live", "--python", "/usr/bin/python3",
                            "-o", str(cap), str(prog), str(fifo)])
    out = b""

    def read_until(pred, timeout=30):
        nonlocal out
        deadline = time.monotonic() + timeout
        while not pred(out) and time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 1)
            if r:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
        return pred(out)

    try:
        assert read_until(lambda o: b"f at " in o), out[-500:]
        assert b"\x1b[?1049h" in out
        if quit_early:
            os.write(master, b"q")
            assert read_until(lambda o: b"runs on: waiting for it to end" in o), out[-500:]
        with open(fifo, "w") as w:
            w.write("go")
        read_until(lambda o: b"the program's output is in" in o)
        _, status = os.waitpid(pid, 0)
        read_until(lambda o: False, timeout=0.5)
    finally:
        os.close(master)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 5, status
    log = tmp_path / "c.log"
    assert log.read_text() == "hello from the program\n"
    text = out.decode(errors="replace")
    assert "capture written to %s" % cap in text
    assert "the program's output is in %s" % log in text
    assert "hello from the program" not in text
    if not quit_early:
        assert "tracking ended" in text
    assert text.rfind("\x1b[?1049l") > text.rfind("\x1b[?1049h")
    rows = run(memtrace, "summary", "--json", "--leaks", cap).stdout
    assert '"function": "f"' in rows


def test_run_live_log_exists(memtrace, script, tmp_path):
    """The program's output file is new, as the capture is, unless -f."""
    prog = script("print('hi')\n")
    (tmp_path / "c.log").write_text("older output\n")
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", "--live", "-o", cap, prog, check=False)
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1
    assert "'%s' exists (use -f to overwrite it)" % (tmp_path / "c.log") in p.stderr
    assert (tmp_path / "c.log").read_text() == "older output\n" and not cap.exists()
    p = run(memtrace, "run", "--live", "-f", "-o", cap, prog)
    assert (tmp_path / "c.log").read_text() == "hi\n"


def start_remote(memtrace, prog, *extra):
    """memtrace run --live-remote: the process, and the port it waits on."""
    target = subprocess.Popen([memtrace, "run", "--live-remote", "--live-port", "0", *extra,
                               "--python", "/usr/bin/python3", str(prog)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    line = target.stderr.readline().decode()
    m = re.match(r"memtrace: waiting for a live client on 127\.0\.0\.1:(\d+): "
                 r"run `memtrace live (\d+)`\n$", line)
    assert m and m.group(1) == m.group(2), line
    return target, m.group(1)


def test_live_remote(memtrace, script, tmp_path):
    """--live-remote: no file; the program starts once a client connects,
    and the client's view follows it as a file's would."""
    prog = script(STEPS)
    target, port = start_remote(memtrace, prog)
    live = None
    try:
        live = subprocess.Popen([memtrace, "live", "--interval", "0.1", port],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        word, pypid = target.stdout.readline().split()
        assert word == b"first"
        frames = Frames(live)
        f = frames.until(lambda f: row(f, "first"))
        assert "memtrace live: 127.0.0.1:%s  pid %d " % (port, int(pypid)) in f, f
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.stdout.readline() == b"second\n"
        f = frames.until(lambda f: row(f, "second"))
        assert 47.6 < mib(row(f, "second")[0]) < 47.8 and row(f, "first") is None, f
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.wait(60) == 0
        frames.until(lambda f: "tracking ended" in f)
        assert live.wait(30) == 0 and live.stderr.read() == b""
        assert target.stderr.read().decode() == (
            "memtrace: capture sent to the live client on 127.0.0.1:%s\n" % port)
        assert os.listdir(tmp_path) == ["prog.py"]
    finally:
        stop(target, live)


def test_live_remote_client_goes_away(memtrace, script, tmp_path):
    """A client that goes away stops tracking, not the program: no
    SIGPIPE, its exit status kept, and memtrace says the capture is cut."""
    prog = script(STEPS + "sys.exit(4)\n")
    target, port = start_remote(memtrace, prog)
    try:
        live = subprocess.Popen([memtrace, "live", "--interval", "0.1", port],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert target.stdout.readline().split()[0] == b"first"
        Frames(live).until(lambda f: row(f, "first"))
        live.kill()
        live.wait()
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.stdout.readline() == b"second\n"
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.wait(60) == 4
        err = target.stderr.read().decode()
        assert err.startswith("memtrace: capture to the live client on 127.0.0.1:%s is "
                              "incomplete: " % port) and err.count("\n") == 1, err
    finally:
        stop(target)


@pytest.mark.parametrize("case", ["nothing-listening", "once-on-a-port", "port-taken",
                                  "with-output", "with-live", "with-follow-fork",
                                  "port-without-remote", "port-out-of-range",
                                  "short-port-out-of-range"])
def test_live_remote_bad_input(memtrace, script, tmp_path, case):
    prog = script("print('never')\n")
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        free = closed.getsockname()[1]  # bound, not listening: refuses connections
        args = {
            "nothing-listening": ["live", "--interval", "0.1", str(free)],
            "once-on-a-port": ["live", "--once", str(free)],
            "port-taken": ["run", "--live-remote", "--live-port", str(taken), prog],
            "with-output": ["run", "--live-remote", "-o", tmp_path / "c.bin", prog],
            "with-live": ["run", "--live-remote", "--live", prog],
            "with-follow-fork": ["run", "--live-remote", "--follow-fork", prog],
            "port-without-remote": ["run", "--live-port", "5000", prog],
            "port-out-of-range": ["run", "--live-remote", "--live-port", "70000", prog],
            "short-port-out-of-range": ["run", "--live-remote", "-p", "70000", prog],  # memray's
        }[case]
        p = run(memtrace, *args, check=False, timeout=30)
        closed.close()
    expect = {"nothing-listening": ("cannot connect to 127.0.0.1:%d" % free, 1),
              "once-on-a-port": ("--once reads a capture file", 2),
              "port-taken": ("cannot listen on 127.0.0.1:%d" % taken, 1),
              "with-output": ("not with -o", 2),
              "with-live": ("not with --live", 2),
              "with-follow-fork": ("not with --follow-fork", 2),
              "port-without-remote": ("--live-port goes with --live-remote", 2),
              "port-out-of-range": ("invalid --live-port '70000'", 2),
              "short-port-out-of-range": ("invalid --live-port '70000'", 2)}[case]
    assert p.returncode == expect[1] and expect[0] in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and p.stdout == ""


def readline(stream, timeout):
    """A line of @stream (unbuffered reads), failing after @timeout s."""
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0, "no line within %ss: %r" % (timeout, line)
        if select.select([stream], [], [], left)[0]:
            c = os.read(stream.fileno(), 1)
            if not c:
                break
            line += c
    return line


def test_tracker_socket_destination(memtrace, tmp_path):
    """Tracker(destination=SocketDestination(port)): making it waits for a
    `memtrace live PORT` client, which then follows the block."""
    import socket
    from test_python_api import py_env
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prog = tmp_path / "prog.py"
    prog.write_text("import sys, memtrace\n"
                    "def keep():\n"
                    "    return bytearray(8_000_000)\n"
                    "with memtrace.Tracker(destination=memtrace.SocketDestination(%d)):\n"
                    "    k = keep()\n"
                    "    print('in', flush=True)\n"
                    "    sys.stdin.readline()\n"
                    "print('out', flush=True)\n" % port)
    target = subprocess.Popen(["/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=py_env(),
                              cwd=tmp_path)
    live = None
    try:
        # started second or first, the client finds the Tracker listening
        live = subprocess.Popen([memtrace, "live", "--interval", "0.1", str(port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert readline(target.stdout, 60) == b"in\n"
        frames = Frames(live)
        f = frames.until(lambda f: row(f, "keep"))
        assert 7.6 < mib(row(f, "keep")[0]) < 7.7, f
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert readline(target.stdout, 60) == b"out\n"
        frames.until(lambda f: "tracking ended" in f)
        assert live.wait(30) == 0 and target.wait(30) == 0
        assert target.stderr.read() == b"" and os.listdir(tmp_path) == ["prog.py"]
    finally:
        stop(target, live)


def test_live_remote_client_stops_reading(memtrace, script, tmp_path):
    """A client that stops reading (suspended) cannot stall the program:
    once the connection's buffers are full, events are dropped (a send
    that waits 5 s ends the capture), the program runs to its end while
    the client stays stopped, and memtrace says what was lost."""
    prog = script("""\
import random, sys
print("ready", flush=True)
sys.stdin.readline()
keep = []
for i in range(1_000_000):  # addresses and sizes that do not compress well
    keep.append(bytearray(random.randrange(1, 5000)))
    if len(keep) > 1000:
        del keep[random.randrange(len(keep))]
print("done", flush=True)
""")
    target, port = start_remote(memtrace, prog, "--trace-python-allocators")
    live = subprocess.Popen([memtrace, "live", "--interval", "0.1", port],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert readline(target.stdout, 60) == b"ready\n"
        Frames(live).next()
        os.kill(live.pid, signal.SIGSTOP)
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert readline(target.stdout, 120) == b"done\n"
        rc = target.wait(60)  # the client is still stopped
        err = target.stderr.read().decode()
        if "events were dropped, as it did not take them fast enough" in err:
            assert rc == 0, err
        else:  # a loaded machine: the program ran on past a send that waited 5 s
            assert "is incomplete" in err and "timed out" in err and rc == 1, (rc, err)
    finally:
        stop(target, live)


NOBODY_CLIENT = """\
import os, socket, sys
os.setgid(65534)
os.setuid(65534)
s = socket.socket()
s.connect(("127.0.0.1", int(sys.argv[1])))
print(len(s.recv(100)))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
@pytest.mark.parametrize("sender", ["run", "tracker"])
def test_live_client_of_another_user_turned_away(memtrace, script, tmp_path, sender):
    """The capture is the user's own (a file is 0600): a client of another
    user is turned away, and the sender waits on for one of its own."""
    from test_python_api import py_env
    nobody = script(NOBODY_CLIENT, name="nobody.py")
    if sender == "run":
        prog = script(STEPS)
        target, port = start_remote(memtrace, prog)
    else:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        prog = script("import logging, sys, memtrace\n"
                      "logging.basicConfig()\n"
                      "def first():\n"
                      "    return bytearray(30_000_000)\n"
                      "with memtrace.Tracker(destination=memtrace.SocketDestination(%s)):\n"
                      "    a = first()\n"
                      "    print('first', 0, flush=True)\n"
                      "    sys.stdin.readline()\n" % port)
        target = subprocess.Popen(["/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=py_env())
    live = None
    try:
        deadline = time.monotonic() + 30
        while True:  # the Tracker may not listen yet
            p = run("/usr/bin/python3", nobody, port, check=False)
            if p.returncode == 0 or time.monotonic() > deadline:
                break
        assert p.stdout == "0\n", p.stderr  # connected, and closed at once
        live = subprocess.Popen([memtrace, "live", "--interval", "0.1", port],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert readline(target.stdout, 60).split()[0] == b"first"
        Frames(live).until(lambda f: row(f, "first"))
        target.stdin.write(b"\n\n")
        target.stdin.flush()
        target.wait(60)
        assert "turned away a live client of another user (uid 65534)" in \
            target.stderr.read().decode()
    finally:
        stop(target, live)
