"""memtrace live and run --live where the view is drawn: a terminal of a
given size, and an output that goes away."""

import contextlib
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

from capture_writer import HDR_AGGREGATED, MALLOC, Capture
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
        while then and b"live blocks" not in out:  # the view's first frame of a capture
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


class Term:
    """`memtrace live` on a terminal of @rows and @cols, driven by keys:
    its frames as text, the newest last."""

    def __init__(self, argv, rows=24, cols=100):
        self.pid, self.master = pty.fork()
        if self.pid == 0:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            os.execv(argv[0], argv)
        self.out = b""

    def read(self):
        """What the view wrote next; it must still be on."""
        assert select.select([self.master], [], [], 30)[0], self.out[-300:]
        try:
            self.out += os.read(self.master, 65536)
        except OSError:  # EIO: the view ended
            pytest.fail("the view ended: %r" % self.out[-300:])

    def frames(self, n=1):
        """Read until @n more frames are drawn."""
        want = self.out.count(b"\x1b[H") + n
        while self.out.count(b"\x1b[H") < want:
            self.read()

    def frame(self):
        """The newest whole frame, its lines."""
        while b"\x1b[H" not in self.out or b"\x1b[J" not in self.out.rsplit(b"\x1b[H", 1)[-1]:
            self.read()
        last = self.out.rsplit(b"\x1b[H", 1)[-1]
        text = last.split(b"\x1b[J", 1)[0].replace(b"\x1b[K", b"").decode()
        return re.split(r"\r*\n", text)

    def until(self, test, keys=b""):
        """Press @keys, then read frames until @test(a frame's lines) is
        true; that frame."""
        if keys:
            os.write(self.master, keys)
        deadline = time.monotonic() + 30
        while not test(self.frame()):
            assert time.monotonic() < deadline, self.frame()
            self.frames(1)
        return self.frame()

    def quit(self):
        """q, and the view's exit status."""
        os.write(self.master, b"q")
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        return os.waitstatus_to_exitcode(status)

    def kill(self):
        """The view killed if it still runs, its terminal closed."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
        os.close(self.master)


@contextlib.contextmanager
def live_on(memtrace, prog, cap, **size):
    """`memtrace run` of @prog, which says "ready" and then waits for a
    line on its standard input, and `memtrace live` of its capture @cap on
    a terminal (Term, of @size): (the program, the view). At the end of
    the block the program gets its line, and must end well."""
    target = subprocess.Popen([memtrace, "run", "-o", str(cap), "--python", "/usr/bin/python3",
                               str(prog)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    view = None
    try:
        assert target.stdout.readline() == b"ready\n"
        view = Term([memtrace, "live", "--interval", "0.05", str(cap)], **size)
        yield target, view
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.wait(60) == 0
    finally:
        if view:
            view.kill()
        stop(target)


WAITS = """\
import sys

keep = bytearray(10_000_000)
print("ready", flush=True)
sys.stdin.readline()
"""


def test_keys_that_are_sequences(memtrace, script, tmp_path):
    """Keys that come as sequences starting with Esc (arrows, F2 "Esc O Q")
    never quit, whatever letters they hold; Esc alone quits, as memray's;
    t and a sort as memray's do."""
    cap = tmp_path / "c.bin"
    with live_on(memtrace, script(WAITS), cap) as (target, view):
        view.frames(1)
        # F2, an arrow, Ctrl-Left, F5, Alt-q: none is q
        for seq in (b"\x1bOQ", b"\x1b[A", b"\x1b[1;5D", b"\x1b[15~", b"\x1bq"):
            os.write(view.master, seq)
            view.frames(2)
        # memray's keys for sorting by total and by allocations: the
        # column sorted on is marked
        for k, heading in ((b"t", "Total live*"), (b"a", "Own blocks*")):
            view.until(lambda f: any(heading in l for l in f), k)
        os.write(view.master, b"\x1b")
        _, status = os.waitpid(view.pid, 0)
        view.pid = None
        assert os.waitstatus_to_exitcode(status) == 0


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


THREADS = """\
import sys
import threading


def worker_alloc():
    return bytearray(3_000_000)


def main_alloc():
    return bytearray(5_000_000)


keep = [main_alloc()]
t = threading.Thread(target=lambda: keep.append(worker_alloc()), name="worker")
t.start()
t.join()
print("ready", flush=True)
sys.stdin.readline()
"""


def threads_line(frame):
    """The line of a frame that says which threads are shown."""
    return next(l for l in frame if l.startswith(("all threads", "thread ")))


def rows_of(frame):
    """The functions of a frame's table rows."""
    table = frame[frame.index("") + 2:]
    return [r.split("  ")[-1].split(" at ")[0] for r in table if r.strip()]


def test_threads_one_at_a_time(memtrace, script, tmp_path):
    """memray's keys for threads: m shows one thread's memory at a time,
    < and > (and the left and right arrows) go from one to the next, round,
    m shows them all again, and m once more the first thread again."""
    cap = tmp_path / "c.bin"
    with live_on(memtrace, script(THREADS), cap) as (target, view):
        both = view.until(lambda f: threads_line(f).startswith("all threads (2)"))
        assert {"main_alloc", "worker_alloc"} <= set(rows_of(both)), both
        # merged: nothing to switch
        view.until(lambda f: threads_line(f).startswith("all threads"), b">")

        def thread(k):
            return lambda f: threads_line(f).startswith("thread %d of 2: tid " % k)

        main = view.until(thread(1), b"m")
        assert "main_alloc" in rows_of(main) and "worker_alloc" not in rows_of(main), main
        assert '"MainThread", 4.' in threads_line(main), main  # 4.77 MiB and a few small blocks
        # the blocks the thread freed as it ended may come a refresh later
        worker = view.until(lambda f: thread(2)(f) and " 1 block" in threads_line(f), b">")
        line = threads_line(worker)
        assert '"worker"' in line and "2.86 MiB live in 1 block" in line, worker
        assert rows_of(worker)[0] == "worker_alloc", worker
        assert "main_alloc" not in rows_of(worker), worker
        view.until(thread(1), b"\x1b[C")  # right, round to the first
        view.until(thread(2), b"<")
        view.until(thread(1), b"\x1b[D")  # left
        view.until(lambda f: threads_line(f).startswith("all threads (2)"), b"m")
        # split again, from the worker's: the first thread, as at first
        view.until(thread(2), b"m>")
        view.until(lambda f: threads_line(f).startswith("all threads (2)"), b"m")
        view.until(thread(1), b"m")
        assert view.quit() == 0


def test_scroll_and_pause(memtrace, script, tmp_path):
    """The arrows, Page Up and Down, Home and End scroll the rows, and
    space pauses the view as memray's does: what the program does
    meanwhile is not read until space again."""
    cap = tmp_path / "c.bin"
    prog = MANY.replace("for r in range(5)", "for r in range(1)") + \
        "import sys\nprint('ready', flush=True)\nsys.stdin.readline()\n" \
        "more = bytearray(40_000_000)\nprint('more', flush=True)\nsys.stdin.readline()\n"
    # 20 rows: 10 of the table
    with live_on(memtrace, script(prog), cap, rows=20) as (target, view):
        def rows_in(f):  # how many rows there are to scroll, at the top
            m = re.search(r"rows 1-10 of (\d+)", threads_line(f))
            return int(m.group(1)) if m else 0

        # f0 to f29, <module>, and the rest (the last may come a refresh later)
        first = view.until(lambda f: rows_in(f) >= 31)
        total = rows_in(first)
        top = rows_of(first)
        assert len(top) == 10 and top.index("f29") < top.index("f28") < 3, first
        down = view.until(lambda f: "rows 3-12 of" in threads_line(f), b"\x1b[B\x1b[B")
        assert rows_of(down)[:8] == top[2:], down
        view.until(lambda f: "rows 2-11 of" in threads_line(f), b"\x1b[A")
        view.until(lambda f: "rows 12-21 of" in threads_line(f), b"\x1b[6~")
        last = "rows %d-%d of" % (total - 9, total)
        end = view.until(lambda f: last in threads_line(f), b"\x1b[F")
        view.until(lambda f: last in threads_line(f), b"\x1b[B")  # no further
        view.until(lambda f: "rows 1-10 of" in threads_line(f), b"\x1b[H")
        assert rows_of(end)[-1] != top[-1]
        # one thread's rows, and all threads' again, from the top
        view.until(lambda f: "rows 3-12 of" in threads_line(f), b"\x1b[B\x1b[B")
        view.until(lambda f: threads_line(f).startswith("thread 1 of 1: ")
                   and "rows 1-10 of" in threads_line(f), b"m")
        view.until(lambda f: "rows 3-12 of" in threads_line(f), b"\x1b[B\x1b[B")
        view.until(lambda f: threads_line(f).startswith("all threads (1)")
                   and "rows 1-10 of" in threads_line(f), b"m")

        paused = view.until(lambda f: f[1].startswith("paused"), b" ")
        events = next(l for l in paused if l.startswith("live blocks"))
        target.stdin.write(b"\n")
        target.stdin.flush()
        assert target.stdout.readline() == b"more\n"
        # the 40 MB are in the capture: the paused view does not show them
        deadline = time.monotonic() + 30
        while True:
            view.frames(5)
            assert events in view.frame(), view.frame()
            out = run(memtrace, "live", "--once", cap).stdout
            if "38.15 MiB" in out or time.monotonic() > deadline:
                break
        assert "38.15 MiB" in out, out
        view.until(lambda f: f[1].startswith("paused"))
        view.until(lambda f: "38.15 MiB" in "\n".join(f), b" \x1b[H")
        assert view.quit() == 0


def test_control_characters_are_no_keys(memtrace, script, tmp_path):
    """Ctrl and a letter (Ctrl-A to Ctrl-F, bytes 1 to 6, the values the
    keys that come as sequences are given as) is no key of the view's: the
    rows stay where they are, as for any other key it has no use for."""
    cap = tmp_path / "c.bin"
    prog = MANY.replace("for r in range(5)", "for r in range(1)") + \
        "import sys\nprint('ready', flush=True)\nsys.stdin.readline()\n"
    with live_on(memtrace, script(prog), cap, rows=20) as (target, view):
        view.until(lambda f: "rows 1-10 of " in threads_line(f))
        view.until(lambda f: "rows 2-11 of " in threads_line(f), b"\x1b[B")
        # Ctrl-A, B, D, E, F (Ctrl-C is the terminal's: it ends the view)
        os.write(view.master, b"\x01\x02\x04\x05\x06")
        view.frames(3)
        assert "rows 2-11 of " in threads_line(view.frame()), view.frame()
        assert view.quit() == 0


def test_keys_held_down(memtrace, script, tmp_path):
    """A key held down sends its sequence many times before the view reads
    them: however many there are, and wherever one is cut by what a read
    takes, they scroll, and none is taken for Esc alone (which quits)."""
    cap = tmp_path / "c.bin"
    prog = MANY.replace("for r in range(5)", "for r in range(1)") + \
        "import sys\nprint('ready', flush=True)\nsys.stdin.readline()\n"
    with live_on(memtrace, script(prog), cap, rows=20) as (target, view):
        def at_end(f):  # the last rows (more may come in while it runs)
            m = re.search(r"rows (\d+)-(\d+) of (\d+)", threads_line(f))
            return m is not None and int(m.group(1)) > 20 and m.group(2) == m.group(3)

        view.until(lambda f: "rows 1-10 of " in threads_line(f))
        for seq in (b"\x1b[B", b"\x1bOB", b"\x1b[1;2B"):
            view.until(lambda f: "rows 1-10 of " in threads_line(f), b"\x1b[H")
            os.write(view.master, seq * 40)
            view.until(at_end)
        assert view.quit() == 0


def test_a_frame_while_the_header_is_awaited(memtrace, script, tmp_path):
    """A capture with no header yet (attach creates the file before the
    payload writes it): the terminal is not left blank, a frame says what
    the view waits for, until the capture comes."""
    done = tmp_path / "done.bin"
    run(memtrace, "run", "-o", done, "--python", "/usr/bin/python3", script(SORTS))
    cap = tmp_path / "c.bin"
    cap.write_bytes(b"")
    view = Term([memtrace, "live", "--interval", "0.05", str(cap)])
    try:
        waiting = view.until(lambda f: len(f) > 1 and "waiting" in f[1])
        assert waiting[0] == "memtrace live: %s" % cap, waiting
        assert re.match(r"waiting for the capture's header: \d+ s of 30  \(q quits\)$",
                        waiting[1]), waiting
        with open(cap, "r+b") as f:  # the same file, as a writer fills it
            f.write(done.read_bytes())
        view.until(lambda f: f[1] == "tracking ended")
        _, status = os.waitpid(view.pid, 0)
        view.pid = None
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        view.kill()


RISES = """\
import time


def step():
    t = time.monotonic()
    while time.monotonic() - t < 0.03:  # time for samples between the steps
        pass


keep = []
for _ in range(10):
    keep.append(bytearray(5_000_000))
    step()
for _ in range(10):
    keep.pop()
    step()
"""


@pytest.mark.parametrize("lang,glyphs", [
    ("C.UTF-8", "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"), ("C", "._-=+*#@")])
def test_heap_plot(memtrace, script, tmp_path, lang, glyphs):
    """The tracked heap over time, as memray's view plots it: a column for
    each stretch, as high as the heap's most in it (block elements where
    the locale is UTF-8, ASCII otherwise), the line no wider than the
    terminal."""
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-o", cap, "--python", "/usr/bin/python3", script(RISES))
    out, status = on_terminal(["/usr/bin/env", "LANG=" + lang, "LC_ALL=", "LC_CTYPE=", memtrace,
                               "live", "--once", str(cap)], 24, 70)
    assert status == 0, out[-500:]
    frame = out[out.index(b"\x1b[H"):].decode()
    line = next(l for l in re.split(r"\r*\n", frame) if "heap over" in l)
    line = line.replace("\x1b[K", "").replace("\x1b[H", "")
    assert re.match(r"heap over \S+ s, up to 47.7\d MiB: ", line), line
    plot = line.split(": ", 1)[1]
    assert len(line) <= 70 and len(plot) >= 20 and set(plot) <= set(glyphs), line
    level = [glyphs.index(c) for c in plot]
    top = level.index(7)
    # up from the start to the top, then down to the end
    assert level[0] <= 1 and level[-1] <= 1 and 0 < top < len(level) - 1, plot
    assert level[:top + 1] == sorted(level[:top + 1]), plot
    assert level[top:] == sorted(level[top:], reverse=True), plot


@pytest.mark.parametrize("lang,glyphs", [
    ("C.UTF-8", "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"), ("C", "._-=+*#@")])
def test_heap_plot_of_figures_that_disagree(memtrace, tmp_path, lang, glyphs):
    """An aggregated capture whose last TOTALS says the heap holds more than
    its peak (damage: the payload never writes that) is plotted up to the
    most of its figures, the end's: its column is the highest glyph, not
    one read past the glyphs' end."""
    c = Capture(flags=HDR_AGGREGATED)
    c.thread(0, 4242, "main").code(1, "/x.py", "f", 3).stack(1, 0, 1)
    c.sample(1000, 1 << 20, heap=100).sample(2000, 1 << 20, heap=100)
    c.site(1, 0, MALLOC, peak=(100, 1), leak=(5_000_000, 1), alloc=(5_000_100, 2))
    c.totals(heap=5_000_000, peak_heap=100, allocs=2, allocated=5_000_100, live_count=1)
    cap = c.save(tmp_path / "c.bin")
    env = dict(os.environ, LANG=lang, LC_ALL="", LC_CTYPE="")
    out = run(memtrace, "live", "--once", cap, env=env).stdout
    line = next(l for l in out.splitlines() if l.startswith("heap over"))
    assert re.match(r"heap over \S+ s, up to 4.77 MiB: ", line), line
    plot = line.split(": ", 1)[1]
    assert plot and set(plot) <= set(glyphs) and plot[-1] == glyphs[7], line


def test_the_command_in_the_title(memtrace, script, tmp_path):
    """The first line names the command that was tracked, as memray's view
    does, with its control characters shown as escapes, not sent to the
    terminal."""
    cap = tmp_path / "c.bin"
    prog = script("import sys\nkeep = bytearray(1_000_000)\n")
    run(memtrace, "run", "-o", cap, "--python", "/usr/bin/python3", prog, "--flag", "a\x1b[2Jb")
    title = run(memtrace, "live", "--once", cap).stdout.splitlines()[0]
    assert title.endswith("  command /usr/bin/python3 %s --flag a\\x1b[2Jb" % prog), title
