"""The progress line of the report commands: shown on standard error when it
is a terminal (here a pseudo-terminal) once reading has taken
MEMTRACE_PROGRESS_AFTER seconds (1 by default; 0 here, so that a small
capture shows it), erased before anything else is printed, never with
-q/--quiet, on a pipe, or in the live view; the report itself the same
byte for byte."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading

import pytest

from conftest import run

from capture_writer import Capture

CHUNKS = 8


def capture(path, trailer=True):
    """A chunk of threads, code and stacks, then CHUNKS chunks of
    allocations and frees; returns the path and the file offset where each
    of these starts."""
    c = Capture()
    c.thread(0, 4242, "MainThread")
    c.code(1, "/app/prog.py", "<module>", 1).code(2, "/app/prog.py", "f", 5)
    c.stack(1, 0, 1).stack(2, 1, 2)
    starts = []
    for k in range(CHUNKS):
        c.flush()
        starts.append(len(c.out))
        for i in range(400):
            addr = 0x100000 + 64 * (k * 400 + i)
            c.alloc(addr, 32 + i % 100, stack=2)
            if i % 3:
                c.free(addr)
    if trailer:
        c.trailer(2000)
    return c.save(path), starts


def mt_bytes(n):
    """The reports' way of writing a size (util/strbuf.c)."""
    if n < 1024:
        return "%d B" % n
    v, u = float(n), -1
    while v >= 1024 and u < 5:
        v /= 1024
        u += 1
    return "%.2f %s" % (v, ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"][u])


def env_with(after):
    env = dict(os.environ)
    env.pop("MEMTRACE_PROGRESS_AFTER", None)
    if after is not None:
        env["MEMTRACE_PROGRESS_AFTER"] = after
    return env


def run_pty(args, after="0", cols=200, stdout=subprocess.PIPE):
    """Run with standard error on a pseudo-terminal of @cols columns (0:
    no size set); returns (exit status, stdout bytes, what the terminal
    got)."""
    master, slave = pty.openpty()
    if cols:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    got = bytearray()

    def drain():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the last writer has gone
                return
            if not data:
                return
            got.extend(data)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        p = subprocess.Popen([str(a) for a in args], stdout=stdout, stderr=slave,
                             stdin=subprocess.DEVNULL, env=env_with(after))
        os.close(slave)
        out, _ = p.communicate(timeout=120)
    finally:
        reader.join(timeout=30)
        os.close(master)
    assert not reader.is_alive()
    return p.returncode, out, bytes(got)


def screen(raw):
    """What a terminal shows after @raw: carriage returns go back to the
    start of the line, later text over earlier; trailing blanks dropped."""
    lines, col = [[]], 0
    for ch in raw.decode():
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append([])
            col = 0
        else:
            row = lines[-1]
            if col < len(row):
                row[col] = ch
            else:
                row.append(ch)
            col += 1
    text = ["".join(r).rstrip() for r in lines]
    while text and not text[-1]:
        text.pop()
    return text


PROGRESS = re.compile(r"memtrace: reading (.*): (\S+ \S+) of (\S+ \S+) \((\d+)%\)(, about \d+ (s|min) left)?$")


def progress_lines(raw):
    """Every state of the line the terminal was shown, in order."""
    return [s for s in raw.decode().replace("\n", "\r").split("\r") if s.strip()]


def check_shown(raw, cap, cols=200):
    """@raw drew progress lines for @cap (the reading ones, then the one
    that says the read is done) and erased them."""
    total = mt_bytes(os.path.getsize(cap))
    states = [s.rstrip() for s in progress_lines(raw)]
    done = "memtrace: reading %s: %s, done; making the report" % (cap, total)
    # the last line is drawn again after a note or the page is opened
    assert done in states, states
    reading = [PROGRESS.match(s) for s in states[:states.index(done)]]
    assert reading and all(reading), states
    assert all(s == done for s in states[states.index(done):]), states
    for m in reading:
        assert m.group(1) == str(cap) and m.group(3) == total, states
        assert 0 <= int(m.group(4)) < 100
    assert all(len(s) <= cols - 1 for s in progress_lines(raw))
    assert screen(raw) == [], raw


@pytest.mark.parametrize("command", [["stats"], ["stats", "--json"], ["summary"], ["summary", "--leaks"],
                                     ["tree"], ["flamegraph", "-o", "-"], ["table", "-o", "-"]])
def test_progress_on_a_terminal(memtrace, tmp_path, command):
    cap, _ = capture(tmp_path / "p.bin")
    rc, out, raw = run_pty([memtrace, *command, cap])
    assert rc == 0, raw
    check_shown(raw, cap)
    # the report is the one written without a terminal, which shows nothing
    plain = subprocess.run([memtrace, *command, cap], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=env_with("0"))
    assert plain.returncode == 0 and plain.stderr == b""
    assert out == plain.stdout and len(out) > 100


def test_progress_while_a_page_is_written(memtrace, tmp_path):
    """With a page to write, the line says the report is being made until
    the page is written, then goes before "wrote PAGE"."""
    cap, _ = capture(tmp_path / "p.bin")
    page = tmp_path / "f.html"
    rc, out, raw = run_pty([memtrace, "flamegraph", "-o", page, cap])
    assert rc == 0, raw
    check_shown(raw, cap)
    assert out.decode().startswith("wrote %s (" % page)
    # the page exists now: a second run says so before it reads, alone on
    # its line
    rc, out, raw = run_pty([memtrace, "flamegraph", "-o", page, cap])
    assert rc == 1 and out == b""
    shown = screen(raw)
    assert shown == ["memtrace: flamegraph page '%s' exists (use -f to overwrite it)" % page], shown


@pytest.mark.parametrize("quiet", ["-q", "--quiet"])
@pytest.mark.parametrize("command", [["stats"], ["summary"], ["tree"], ["flamegraph", "-o", "-"],
                                     ["table", "-o", "-"]])
def test_quiet(memtrace, tmp_path, command, quiet):
    cap, _ = capture(tmp_path / "p.bin")
    rc, out, raw = run_pty([memtrace, *command, quiet, cap])
    assert rc == 0 and raw == b"" and len(out) > 100


def test_not_on_a_pipe(memtrace, tmp_path):
    cap, _ = capture(tmp_path / "p.bin")
    for command in (["stats"], ["summary"], ["tree"], ["flamegraph", "-o", "-"]):
        p = subprocess.run([memtrace, *command, cap], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=env_with("0"))
        assert p.returncode == 0 and p.stderr == b"", (command, p.stderr)


def test_not_before_a_second(memtrace, tmp_path):
    """Without MEMTRACE_PROGRESS_AFTER the line waits a second of reading:
    a small capture shows nothing, even on a terminal."""
    cap, _ = capture(tmp_path / "p.bin")
    for command in (["stats"], ["flamegraph", "-o", "-"]):
        rc, out, raw = run_pty([memtrace, *command, cap], after=None)
        assert rc == 0 and raw == b"" and len(out) > 100


def test_truncated_capture_warning(memtrace, tmp_path):
    cap, _ = capture(tmp_path / "cut.bin", trailer=False)
    rc, out, raw = run_pty([memtrace, "stats", cap])
    assert rc == 0 and b"Totals" in out
    assert PROGRESS.match(progress_lines(raw)[0].rstrip()), raw
    assert screen(raw) == ["memtrace: warning: capture is truncated: read %d chunks up to byte %d "
                           "(no end-of-capture record: tracking has not ended, or the process "
                           "ended without ending it)"
                           % (CHUNKS + 1, os.path.getsize(cap))], raw


@pytest.mark.parametrize("command", [["stats"], ["summary"], ["flamegraph", "-o", "-"]])
def test_corrupt_capture_error(memtrace, tmp_path, command):
    """Damage before the end is an error, alone on its line."""
    cap, starts = capture(tmp_path / "p.bin")
    data = bytearray(cap.read_bytes())
    data[starts[5] + 16 + 3] ^= 0x10  # in the data of chunk 6: fails its checksum
    cap.write_bytes(bytes(data))
    rc, out, raw = run_pty([memtrace, *command, cap])
    assert rc == 1 and out == b""
    assert PROGRESS.match(progress_lines(raw)[0].rstrip()), raw
    assert screen(raw) == ["memtrace: cannot read '%s': capture is corrupt: chunk 6 at byte %d: "
                           "checksum mismatch; read 6 chunks before it" % (cap, starts[5])], raw


def test_parse_to_a_file(memtrace, tmp_path):
    """parse shows it when its records go to a file, not between them."""
    cap, _ = capture(tmp_path / "p.bin")
    plain = run(memtrace, "parse", cap).stdout
    with open(tmp_path / "out.txt", "wb") as f:
        rc, _, raw = run_pty([memtrace, "parse", cap], stdout=f)
    assert rc == 0 and (tmp_path / "out.txt").read_text() == plain
    states = [s.rstrip() for s in progress_lines(raw)]
    assert states and all(PROGRESS.match(s) for s in states), states
    assert screen(raw) == []
    with open(tmp_path / "out.txt", "wb") as f:
        rc, _, raw = run_pty([memtrace, "parse", "-q", cap], stdout=f)
    assert rc == 0 and raw == b""
    rc, out, raw = run_pty([memtrace, "parse", cap])  # to a pipe
    assert rc == 0 and raw == b"" and out.decode() == plain


def test_not_in_the_live_view(memtrace, tmp_path):
    cap, _ = capture(tmp_path / "p.bin")
    rc, out, raw = run_pty([memtrace, "live", "--once", cap])
    assert rc == 0 and b"memtrace: reading" not in raw and out


@pytest.mark.parametrize("cols", [0, 100, 60, 30])
def test_cut_to_the_terminal(memtrace, tmp_path, cols):
    """A line never wraps: the start of a long path gives way first
    (a terminal of no known size counts as 80 columns)."""
    d = tmp_path / ("a-rather-long-directory-name-" * 3)
    d.mkdir()
    cap, _ = capture(d / "p.bin")
    rc, out, raw = run_pty([memtrace, "stats", cap], cols=cols)
    width = (cols or 80) - 1
    states = progress_lines(raw)
    assert rc == 0 and states and screen(raw) == []
    assert all(len(s) <= width for s in states), states
    first = states[0].rstrip()
    assert first.startswith("memtrace: reading"), first
    if cols in (0, 100):
        assert first.startswith("memtrace: reading ...") and "/p.bin: " in first, first
        assert PROGRESS.match(first), first
    if cols == 60:
        # no room for the path beside a time left; a state told in the
        # read's first millisecond has none, and room for a shortened path
        if ", about " in first:
            assert first.startswith("memtrace: reading: ") and "KiB (" in first, first
        else:
            assert first.startswith("memtrace: reading ...") and "/p.bin: " in first, first


def test_bad_delay(memtrace, tmp_path):
    cap, _ = capture(tmp_path / "p.bin")
    p = subprocess.run([memtrace, "stats", cap], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env_with("soon"), universal_newlines=True)
    assert p.returncode == 0 and "Totals" in p.stdout
    assert p.stderr == ("memtrace: warning: MEMTRACE_PROGRESS_AFTER wants seconds from 0 to 86400, "
                        "not 'soon'\n")


@pytest.mark.parametrize("command", ["stats", "summary", "flamegraph", "table", "tree", "parse", "growth"])
def test_usage_says_quiet(memtrace, command):
    text = run(memtrace, command, "--help").stdout
    assert "[-q]" in text and "-q, --quiet" in text
