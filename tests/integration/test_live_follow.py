"""memtrace live reads at each refresh only the chunks the capture gained
since the last one (the frame says what it read): hand-made captures
written in parts while the view follows them."""

import os
import re
import struct
import subprocess
import time

import pytest

from capture_writer import Capture
from conftest import python_params, run
from test_native import TARGET_LIB
from test_live import Frames, row, stop

MB = 1 << 20


def writing(pid=None, start_ns=None):
    """A capture whose header names a running process (this one), started
    now, so that live waits for more rather than taking it for cut short."""
    c = Capture()
    c.out[16:20] = struct.pack("<I", pid or os.getpid())
    c.out[24:32] = struct.pack("<Q", start_ns or time.time_ns())
    c.thread(0, os.getpid(), "MainThread")
    c.code(1, "/app/prog.py", "<module>", 1).code(2, "/app/prog.py", "f", 5)
    c.code(3, "/app/prog.py", "g", 9).code(4, "/app/prog.py", "h", 13)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 1, 3).stack(4, 1, 4)
    return c


def held(path):
    """@path held open as a capture's writer holds it until its trailer:
    live takes the process its header names (this one) for gone, and the
    capture for cut short, when it does not."""
    return open(path, "ab")


def chunks(c):
    """Flush @c and take the bytes written since the last call."""
    c.flush()
    got, c.out = bytes(c.out), bytearray()
    return got


def append(path, data):
    with open(path, "ab") as f:
        f.write(data)


def read_line(frame):
    """(chunks, events, 'from the start' or 'since the last refresh') of
    the line 'read C chunks, E events from the start (T ms), every I s'."""
    for line in frame.splitlines():
        m = re.match(r"read (\d+) chunks?, (\d+) events? (.*) \(\d+\.\d ms\)(, every \S+ s)?$",
                     line)
        if m:
            return int(m.group(1)), int(m.group(2)), m.group(3)
    raise AssertionError("no read line in %r" % frame)


def head(frame):
    """The lines of the frame's head that say what the capture holds."""
    return [line for line in frame.split("\n\n", 1)[0].splitlines()
            if line.startswith(("time ", "live blocks "))]


def rows(frame):
    """(own live, total live, own blocks, location) of the frame's rows,
    without the Growth column of a view that has one."""
    table = frame.split("\n\n", 1)[1].strip().splitlines()[1:]
    return [re.match(r"\s*(\S+ \S+)\s+(\S+ \S+)(?:\s+[-+]?\S+ \S+)?\s+(\d+)  (.*)$",
                     line).groups() for line in table]


def test_refresh_reads_only_new_chunks(memtrace, tmp_path):
    cap = tmp_path / "c.bin"
    c = writing()
    c.alloc(0x100000, 10 * MB, stack=2)
    first = chunks(c)
    c.alloc(0x2000000, 3 * MB, stack=3).sample(1000, 40 * MB)
    first += chunks(c)
    cap.write_bytes(first)
    writer = held(cap)
    live = subprocess.Popen([memtrace, "live", "--interval", "0.05", "-n", "9", cap],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        frames = Frames(live)
        f = frames.next()
        assert read_line(f) == (2, 2, "from the start"), f
        assert row(f, "f")[0] == "10.00 MiB" and row(f, "g")[0] == "3.00 MiB", f
        # nothing new: nothing read
        f = frames.next()
        assert read_line(f) == (0, 0, "since the last refresh"), f

        # one whole chunk (a free and an allocation) and half of the next
        c.free(0x100000).alloc(0x3000000, 5 * MB, stack=4)
        second = chunks(c)
        c.alloc(0x4000000, 7 * MB, stack=2).trailer(2000)
        third = chunks(c)
        append(cap, second + third[:len(third) // 2])
        f = frames.until(lambda f: row(f, "h"))
        assert read_line(f) == (1, 2, "since the last refresh"), f
        assert row(f, "f") is None and row(f, "g")[0] == "3.00 MiB", f
        assert row(f, "h")[0] == "5.00 MiB", f
        # the chunk not yet whole is waited for, not taken for damage; the
        # frames that read nothing show the same rows
        shown = rows(f)
        for _ in range(3):
            f = frames.next()
            assert "tracking" in f and read_line(f) == (0, 0, "since the last refresh"), f
            assert rows(f) == shown, f
        assert live.poll() is None

        append(cap, third[len(third) // 2:])
        f = frames.until(lambda f: "tracking ended" in f)
        assert read_line(f) == (1, 1, "since the last refresh"), f
        assert row(f, "f")[0] == "7.00 MiB", f
        assert live.wait(timeout=30) == 0
    finally:
        stop(live)
        writer.close()
    assert live.stderr.read() == b""


def test_capture_written_over(memtrace, tmp_path):
    """Another capture written over the file is read from its start."""
    cap = tmp_path / "c.bin"
    c = writing()
    c.alloc(0x100000, 10 * MB, stack=2)
    cap.write_bytes(chunks(c))
    writer = held(cap)
    live = subprocess.Popen([memtrace, "live", "--interval", "0.05", cap],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        frames = Frames(live)
        f = frames.next()
        assert read_line(f) == (1, 1, "from the start") and row(f, "f"), f
        d = writing(start_ns=time.time_ns() + 1)
        d.alloc(0x200000, 2 * MB, stack=3).alloc(0x300000, MB, stack=3)
        data = chunks(d)
        d.trailer(3000)
        data += chunks(d)
        tmp = tmp_path / "new.bin"
        tmp.write_bytes(data)
        os.replace(tmp, cap)
        f = frames.until(lambda f: "tracking ended" in f)
        assert read_line(f) == (2, 2, "from the start"), f
        g = row(f, "g")
        assert row(f, "f") is None and g[0] == "3.00 MiB" and g[2] == 2, f
        assert live.wait(timeout=30) == 0
    finally:
        stop(live)
        writer.close()


def test_once_reads_from_the_start(memtrace, tmp_path):
    c = writing(pid=1)
    c.alloc(0x100000, MB, stack=2)
    data = chunks(c)
    c.alloc(0x200000, MB, stack=3).trailer(2000)
    data += chunks(c)
    cap = tmp_path / "c.bin"
    cap.write_bytes(data)
    p = run(memtrace, "live", "--once", cap)
    assert read_line(p.stdout) == (2, 2, "from the start"), p.stdout


def test_corruption_after_a_refresh(memtrace, tmp_path):
    """A chunk that can never become whole (damage with more data after
    it) stops the view with one line, as it does at the first refresh."""
    cap = tmp_path / "c.bin"
    c = writing()
    c.alloc(0x100000, 10 * MB, stack=2)
    cap.write_bytes(chunks(c))
    writer = held(cap)
    live = subprocess.Popen([memtrace, "live", "--interval", "0.05", cap],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        frames = Frames(live)
        frames.next()
        c.alloc(0x200000, MB, stack=3)
        bad = bytearray(chunks(c))
        bad[-1] ^= 0xFF  # its checksum fails
        c.alloc(0x300000, MB, stack=3)
        append(cap, bytes(bad) + chunks(c))
        assert live.wait(timeout=30) == 1
        err = live.stderr.read().decode()
        assert err.count("\n") == 1 and "corrupt" in err and "checksum" in err, err
    finally:
        stop(live)
        writer.close()


# Python -> C -> Python ... -> C's malloc, deeper as the program goes on:
# hybrid stacks (with C frames between runs of Python frames) that later
# chunks define, and bytearrays that make the chunks
NATIVE_PROG = r'''
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.mt_native_a.restype = ctypes.c_void_p
lib.mt_native_a.argtypes = [ctypes.c_size_t]
CB = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int)
lib.mt_native_call.restype = ctypes.c_void_p
lib.mt_native_call.argtypes = [CB, ctypes.c_int]
size = [0]


def g(d):
    if d == 0:
        return lib.mt_native_a(size[0])
    return lib.mt_native_call(cb, d - 1)


cb = CB(g)
keep, x = [], []
for i in range(100000):
    x.append(bytearray(100 + i % 50))
    if i % 500 == 0:
        size[0] = 20000 * (1 + i // 20000)
        keep.append(g(i // 20000))
'''


def chunk_ends(data):
    """The offset after each whole chunk of capture bytes @data."""
    at, ends = struct.unpack_from("<H", data, 10)[0], []
    while data[at:at + 4] == b"MTCK":
        at += 16 + struct.unpack_from("<I", data, at + 8)[0]
        ends.append(at)
    return ends


@pytest.mark.parametrize("python", python_params()[:1])
def test_native_capture_followed_a_chunk_at_a_time(memtrace, tmp_path, python):
    """A capture with native stacks is followed as any other: a refresh
    reads the chunks it gained (hybrid stacks defined in them too), and
    ends with the frames of the whole capture read at once."""
    if not os.path.exists(TARGET_LIB):
        pytest.fail("%s is not built" % TARGET_LIB)
    prog = tmp_path / "prog.py"
    prog.write_text(NATIVE_PROG)
    whole = tmp_path / "whole.bin"
    run(memtrace, "run", "-q", "--native", "--trace-python-allocators", "-o", whole,
        "--python", python, prog, TARGET_LIB)
    once = run(memtrace, "live", "--once", "-n", "6", whole).stdout
    data = bytearray(whole.read_bytes())
    data[16:20] = struct.pack("<I", os.getpid())
    data[24:32] = struct.pack("<Q", time.time_ns())
    ends = chunk_ends(data)
    assert len(ends) >= 6 and ends[-1] == len(data), len(ends)
    # the first part ends inside the chunk after the first whole one
    cut = ends[0] + 7
    cap = tmp_path / "c.bin"
    cap.write_bytes(data[:cut])
    writer = held(cap)
    live = subprocess.Popen([memtrace, "live", "--interval", "0.05", "-n", "6", cap],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        frames = Frames(live)
        f = frames.next()
        assert read_line(f)[::2] == (1, "from the start"), f
        f = frames.next()
        assert read_line(f) == (0, 0, "since the last refresh"), f
        # then a few chunks at a time, each read once: never from the start
        done, at = 1, cut
        for upto in (3, len(ends) // 2, len(ends)):
            append(cap, data[at:ends[upto - 1]])
            at = ends[upto - 1]
            while done < upto:
                f = frames.until(lambda f: read_line(f)[0] > 0)
                chunks, _, how = read_line(f)
                assert how == "since the last refresh", f
                done += chunks
            assert done == upto, f
        assert "tracking ended" in f and read_line(once)[0] == len(ends), (f, once)
        # as read at once: the same rows, C frames named by the C functions
        assert rows(f) == rows(once), (f, once)
        assert head(f) == head(once), (f, once)
        assert "[C] mt_native_b at " in f and "[C] mt_native_a at " not in f, f
        assert live.wait(timeout=30) == 0
    finally:
        stop(live)
        writer.close()
    assert live.stderr.read() == b""
