"""The capture reader against hostile inputs: files that are not regular
(a device, a FIFO, a directory, a socket), big files that are not captures,
a capture cut short while a report reads it; and counts of one in the
reports' wording."""

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import BUILD, ROOT, run

from capture_writer import MALLOC, Capture

PYTHON_DIR = os.path.join(ROOT, "python")
LIMIT = 768 << 20  # address space of a reader under test: a runaway read fails fast


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def read_with(memtrace, how, path, tmp_path, timeout=10):
    """Read @path the way @how says; (exit status, stdout, stderr). A reader
    that hangs is killed at @timeout and fails the test."""
    out = str(tmp_path / "out.html")
    if how == "FileReader":
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
        code = ("import sys, memtrace\n"
                "try:\n"
                "    memtrace.FileReader(sys.argv[1])\n"
                "except Exception as e:\n"
                "    sys.exit('memtrace: ' + (e.strerror if isinstance(e, OSError) else str(e)))\n")
        argv = ["/usr/bin/python3", "-c", code, path]
    else:
        argv = [memtrace] + how.split() + (["-f", "-o", out] if how in ("flamegraph", "table") else [])
        argv.append(path)
        env = None
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                           universal_newlines=True, preexec_fn=_limited, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail("%s on %s did not end in %d s" % (how, path, timeout))
    return p.returncode, p.stdout, p.stderr


READERS = ["stats", "summary", "tree", "table", "flamegraph", "parse", "live --once", "live",
           "FileReader"]


@pytest.fixture
def not_regular(tmp_path):
    """Makes a file of a kind; whatever it started is stopped at the end."""
    procs, socks = [], []

    def make(kind):
        if kind == "/dev/zero":
            return "/dev/zero"
        path = str(tmp_path / kind)
        if kind == "directory":
            os.mkdir(path)
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(path)
            socks.append(s)
        elif kind == "fifo":  # nobody writes it: opening it to read would wait
            os.mkfifo(path)
        elif kind == "fifo of zeros":  # a writer that never stops
            os.mkfifo(path)
            procs.append(subprocess.Popen(
                [sys.executable, "-c", "import sys\nf = open(sys.argv[1], 'wb')\n"
                 "while True: f.write(bytes(1 << 16))", path], stderr=subprocess.DEVNULL))
        return path

    yield make
    for p in procs:
        p.kill()
        p.wait()
    for s in socks:
        s.close()


@pytest.mark.parametrize("how", READERS)
@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "fifo of zeros", "directory", "socket"])
def test_a_file_that_is_not_regular_is_one_error(memtrace, tmp_path, not_regular, kind, how):
    """It used to be read whole before its header was looked at: `stats
    /dev/zero` never ended, and a FIFO of zeros grew the reader by
    gigabytes; opening a FIFO nobody writes waited for ever."""
    path = not_regular(kind)
    began = time.monotonic()
    rc, out, err = read_with(memtrace, how, path, tmp_path)
    assert time.monotonic() - began < 5, (how, kind)
    want = "Is a directory" if kind == "directory" else "not a regular file"
    lines = err.splitlines()
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("memtrace: "), (rc, out, err)
    assert ("'%s': %s" % (path, want)) in lines[0], err
    assert out == ""


@pytest.mark.parametrize("how", ["stats", "parse", "live --once", "FileReader"])
def test_a_big_file_that_is_no_capture_is_not_read(memtrace, tmp_path, how):
    """The header is checked before the rest is read: a reader that copies
    the file (live, FileReader) used to read a gigabyte first, and fail
    for want of memory under a limit."""
    path = tmp_path / "big.img"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # sparse: costs no disk
    began = time.monotonic()
    rc, out, err = read_with(memtrace, how, str(path), tmp_path)
    assert time.monotonic() - began < 5
    assert (rc, err) == (1, "memtrace: %scannot read '%s': not a memtrace capture\n"
                         % ("live: " if how.startswith("live") else "", path)), (out, err)


# ---------------------------------------------------------------------------
# A capture cut short while a report reads it
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def slow_capture(tmp_path_factory, memtrace):
    """A real capture that takes a report a second or so to read: tens of
    millions of events, about a megabyte."""
    d = tmp_path_factory.mktemp("slow")
    cap = d / "churn.bin"
    run(memtrace, "run", "-f", "--trace-python-allocators", "--python", "/usr/bin/python3",
        "-o", cap, os.path.join(ROOT, "bench", "workloads", "churn.py"), "3000000", timeout=300)
    return cap


def _has_open(pid, path):
    fds = "/proc/%d/fd" % pid
    for fd in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, fd)) == path:
                return True
        except OSError:
            pass
    return False


def _has_mapped(pid, path):
    with open("/proc/%d/maps" % pid) as f:
        return any(line.rstrip("\n").endswith(" " + path) for line in f)


def _state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _rchar(pid):
    """Bytes @pid has read so far, by any read call."""
    with open("/proc/%d/io" % pid) as f:
        return int(next(l for l in f if l.startswith("rchar:")).split()[1])


def _stop_while_reading(p, path, size):
    """Stop @p once it reads @path, and before it has read half of it.
    It reads once it has the file open and has read some bytes since (so
    it has taken the file's size), or has it mapped (as it once did).
    True if caught so; False if it got further first. @p is stopped
    unless it has ended."""
    try:
        r0 = None
        while True:
            if p.poll() is not None:
                return False
            if r0 is None and _has_open(p.pid, path):
                r0 = _rchar(p.pid)
            elif r0 is not None and _rchar(p.pid) > r0:
                break
            if _has_mapped(p.pid, path):
                r0 = _rchar(p.pid) if r0 is None else r0
                break
            time.sleep(0.001)
        os.kill(p.pid, signal.SIGSTOP)
        while _state(p.pid) not in "Tt":
            time.sleep(0.001)
        return ((_has_open(p.pid, path) or _has_mapped(p.pid, path))
                and _rchar(p.pid) - r0 < size // 2)
    except OSError:  # it ended meanwhile
        return False


@pytest.mark.parametrize("command", ["stats", "flamegraph"])
def test_capture_cut_short_while_a_report_reads_it(memtrace, tmp_path, slow_capture, command):
    """`run -f` over a capture a report is reading used to kill the report
    with SIGBUS: it mapped the file. Now the report ends with one error
    line and exit 1. The report is stopped once it has the file open and
    has not read all of it, the file is cut, and it goes on."""
    work = str(tmp_path / "cap.bin")
    size = os.path.getsize(slow_capture)
    argv = [memtrace, command] + (["-f", "-o", str(tmp_path / "out.html")] if command == "flamegraph" else [])
    for attempt in range(5):
        shutil.copyfile(slow_capture, work)
        p = subprocess.Popen(argv + [work], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        try:
            caught = _stop_while_reading(p, work, size)
            if caught:
                os.truncate(work, size // 4)
            if p.returncode is None:
                os.kill(p.pid, signal.SIGCONT)
            out, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if caught:
            break
    else:
        pytest.fail("the report read all of the capture before it could be stopped, 5 times")
    assert p.returncode == 1, (p.returncode, err)  # not -SIGBUS
    assert err.count("\n") == 1 and err.startswith("memtrace: cannot read '%s': " % work), err
    assert ("capture was cut short while it was read: the file shrank from %d to %d bytes"
            % (size, size // 4)) in err, err


def test_a_capture_cut_short_before_it_is_read_is_still_a_warning(memtrace, tmp_path, slow_capture):
    """A capture truncated before the report starts (a killed program) is
    read up to the cut, as before: a warning and exit 0."""
    work = tmp_path / "cap.bin"
    work.write_bytes(slow_capture.read_bytes()[:os.path.getsize(slow_capture) // 2])
    p = run(memtrace, "stats", work)
    assert "capture is truncated: read " in p.stderr and p.stderr.count("\n") == 1, p.stderr


# ---------------------------------------------------------------------------
# Counts of one
# ---------------------------------------------------------------------------
def one_of_each(trailer=False):
    """One chunk; main -> f leaks one block, main -> g allocates one that
    is freed at once; one free of a block never seen."""
    c = Capture()
    c.thread(0, 4242, "MainThread")
    c.code(1, "/app/prog.py", "<module>", 1).code(2, "/app/prog.py", "f", 5)
    c.code(3, "/app/prog.py", "g", 9)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 1, 3)
    c.alloc(0x100000, 4096, stack=2, kind=MALLOC)
    c.alloc(0x200000, 100, stack=3, kind=MALLOC)
    c.free(0x200000)
    c.free(0xDEAD0)
    if trailer:
        c.trailer(2000)
    return c


def test_counts_of_one_are_singular(memtrace, tmp_path):
    cap = one_of_each().save(tmp_path / "one.bin")
    p = run(memtrace, "stats", "-n", "1", cap)
    # the capture is one chunk without a trailer
    assert p.stderr.startswith("memtrace: warning: capture is truncated: read 1 chunk up to byte "), p.stderr
    assert "frees:              2 (1 of a block not allocated while tracking: ignored)\n" in p.stdout
    assert "live at end:        4.00 KiB in 1 allocation\n" in p.stdout
    assert "temporary:          100 B in 1 allocation (freed" in p.stdout
    assert "\nTop 1 location by size\n" in p.stdout and "\nTop 1 location by count\n" in p.stdout
    assert " 1 alloc   " in p.stdout and "allocs" not in p.stdout, p.stdout

    p = run(memtrace, "summary", "--leaks", cap)
    assert "Live at the end of the capture (leaks): 4.00 KiB in 1 allocation\n" in p.stdout
    p = run(memtrace, "summary", "-n", "2", cap)  # of <module>, f and g
    assert "(1 more location; -n 0 shows all)" in p.stdout, p.stdout
    p = run(memtrace, "summary", "--temporary-allocations", cap)
    assert "allocations in between): 100 B in 1 allocation\n" in p.stdout, p.stdout
    p = run(memtrace, "tree", "--leaks", cap)
    assert "4.00 KiB in 1 allocation\nAll 1 biggest of 1 allocating call path\n" in p.stdout, p.stdout


def test_counts_of_two_stay_plural(memtrace, tmp_path):
    c = one_of_each()
    c.flush()
    c.alloc(0x300000, 4096, stack=2).free(0xBEEF0).flush()
    cap = c.save(tmp_path / "two.bin")
    p = run(memtrace, "stats", cap)
    assert "read 2 chunks up to byte" in p.stderr
    assert "(2 of blocks not allocated while tracking: ignored)" in p.stdout
    assert "8.00 KiB in 2 allocations\n" in p.stdout and " 2 allocs  " in p.stdout


def test_corruption_counts_one_chunk(memtrace, tmp_path):
    """The damage messages count chunks right too."""
    c = one_of_each()
    c.flush()
    c.alloc(0x300000, 4096, stack=2).flush()
    c.alloc(0x400000, 4096, stack=2).trailer(2000).flush()
    data = bytearray(c.save(tmp_path / "x.bin").read_bytes())
    # the second chunk's checksum broken, a third after it: corruption
    hdr = 52 + len(b"python3\0prog.py\0")
    second = hdr + 16 + int.from_bytes(data[hdr + 8:hdr + 12], "little")
    data[second + 12] ^= 0xFF
    (tmp_path / "bad.bin").write_bytes(bytes(data))
    p = run(memtrace, "stats", tmp_path / "bad.bin", check=False)
    assert p.returncode == 1 and p.stderr.endswith("checksum mismatch; read 1 chunk before it\n"), p.stderr


def _chunks(data):
    """The chunks' offsets in a capture: [start, end) of each."""
    off = int.from_bytes(data[10:12], "little")
    spans = []
    while off + 16 <= len(data):
        end = off + 16 + int.from_bytes(data[off + 8:off + 12], "little")
        spans.append((off, end))
        off = end
    return spans


@pytest.mark.parametrize("how", READERS)
@pytest.mark.parametrize("damage", ["chunk cut out", "length past the end"])
def test_damage_that_looked_whole_is_one_error(memtrace, tmp_path, damage, how):
    """A chunk cut out of the middle read as a whole capture with wrong
    figures; a middle chunk's length damaged past the end of the file read
    as a torn last write, the chunks after it left out with exit 0."""
    c = one_of_each()
    c.flush()
    c.alloc(0x300000, 4096, stack=2).flush()
    c.alloc(0x400000, 8192, stack=2).trailer(3000).flush()  # another size class
    data = bytearray(c.save(tmp_path / "whole.bin").read_bytes())
    spans = _chunks(data)
    assert len(spans) == 3 and spans[-1][1] == len(data), spans
    (a, b) = spans[1]
    if damage == "chunk cut out":
        data[a:b] = b""
        want = "counts 6 allocations and frees where the chunks up to it hold 5: chunks are " \
               "missing or out of place"
    else:
        data[a + 4:a + 12] = (48 << 20).to_bytes(4, "little") * 2  # raw and stored lengths
        want = "its length runs past the end of the file, but a whole chunk follows at " \
               "byte %d" % b
    path = tmp_path / "bad.bin"
    path.write_bytes(bytes(data))
    rc, out, err = read_with(memtrace, how, str(path), tmp_path)
    lines = err.splitlines()
    if how == "FileReader":  # the records before the damage, with a warning
        assert rc == 0 and "RuntimeWarning: memtrace: " in lines[0], (rc, out, err)
    else:
        assert rc == 1 and len(lines) == 1 and lines[0].startswith("memtrace: "), (rc, out, err)
    assert want in lines[0] and "capture is corrupt" in lines[0], err
    # the whole capture reads
    assert read_with(memtrace, how if how != "live" else "live --once", str(tmp_path / "whole.bin"),
                     tmp_path)[0] == 0


def _hostile(kind):
    """A capture whose records decode but cannot be a capture's."""
    c = one_of_each()
    if kind == "stack of code 2^32-1":  # the readers' own mark for other frames
        c.stack(4, 1, 0xFFFFFFFF).alloc(0x500000, 64, stack=4)
    elif kind == "allocation of 2^63 bytes":  # no address space holds it
        c.alloc(0x500000, 1 << 63, stack=2)
    elif kind == "stack id defined twice":  # ids are never reused
        c.stack(2, 1, 3)
    elif kind == "records after the trailer":  # another capture's chunks appended
        c.trailer(2000).flush()
        c.alloc(0x600000, 64, stack=2).trailer(3000)
    return c


@pytest.mark.parametrize("how", READERS)
@pytest.mark.parametrize("kind", ["stack of code 2^32-1", "allocation of 2^63 bytes",
                                  "stack id defined twice", "records after the trailer"])
def test_records_no_capture_has_are_corruption(memtrace, tmp_path, kind, how):
    """Each of these crashed a reader (a frame taken for the readers' own
    kind), overflowed its sums, or read as a whole capture with another's
    figures: each is one line saying the capture is corrupt."""
    if how == "parse" and kind == "stack id defined twice":
        pytest.skip("parse shows the records as they are, ids unresolved")
    path = _hostile(kind).save(tmp_path / "bad.bin")
    rc, out, err = read_with(memtrace, how, str(path), tmp_path)
    lines = err.splitlines()
    assert lines and "capture is corrupt" in lines[0], (rc, out, err)
    if how == "FileReader":
        assert rc in (0, 1), (rc, err)  # what reads before the damage may be kept
    else:
        assert rc == 1 and len(lines) == 1 and lines[0].startswith("memtrace: "), (rc, out, err)
    if kind == "records after the trailer":
        assert "records after the end-of-capture record" in lines[0], err
    if kind == "stack id defined twice":  # where, and why, as for any damage
        assert "chunk 0 at byte 68: stack 2 is defined twice, with other frames" in lines[0], err


def test_times_out_of_range_are_a_capture_error(tmp_path):
    """A TRAILER whose time no date holds: FileReader's CaptureError, not
    Python's OverflowError."""
    path = one_of_each().trailer((1 << 64) - 1).save(tmp_path / "t.bin")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
    p = subprocess.run(["/usr/bin/python3", "-c",
                        "import sys, memtrace\n"
                        "try:\n"
                        "    memtrace.FileReader(sys.argv[1]).metadata\n"
                        "except memtrace.CaptureError as e:\n"
                        "    print(e.strerror)\n", str(path)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       env=env)
    assert p.stdout == "capture is corrupt: its times are out of range\n", (p.stdout, p.stderr)
