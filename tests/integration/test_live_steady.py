"""memtrace live --sort steady: the call paths whose live bytes rose most
steadily across the capture so far, ranked as `memtrace growth` ranks
them, while a real Python program still runs (from a file and from a
PORT), and on a finished capture."""

import json
import os
import pty
import re
import select
import subprocess
import time

from conftest import run
from test_live import Frames, start_remote, stop

STEPS = 40  # the sawtooth is at its highest after the last one

# leak() keeps 50 kB a step; cache() takes 400 kB a step and lets all go
# every 8 steps (3.2 MB at its highest, more than leak() holds after 40
# steps); jump() takes 1.5 MB once at the start. Each step is asked for
# on standard input and said done on standard output.
PROG = r"""
import sys

kept = []
cache_blocks = []


def leak():
    kept.append(bytearray(50_000))


def cache(i):
    if i % 8 == 0:
        cache_blocks.clear()
    cache_blocks.append(bytearray(400_000))


def jump():
    return bytearray(1_500_000)


big = jump()
print("ready", flush=True)
i = 0
for line in sys.stdin:
    if line.strip() == "end":
        break
    leak()
    cache(i)
    i += 1
    print("done", i, flush=True)
"""

# a row of the steady table: live, rise, per hour, steady, r, location
ROW = re.compile(r"^\s*(\d\S* \S+)\s+([-+]\S+ \S+)\s+([-+]\S+ \S+)\s+(\d+)%\s+(-?\d\.\d\d)"
                 r"  (\S+) at ", re.M)


def rows(frame):
    """(function, live, rise, per hour, steady %, r) of the steady table."""
    return [(m.group(6), m.group(1), m.group(2), m.group(3), int(m.group(4)),
             float(m.group(5))) for m in ROW.finditer(frame)]


def table(frame):
    """The functions of the frame's rows, in order (any sort)."""
    return re.findall(r"^.*\d  (\S+) at ", frame.split("\n\n", 1)[1], re.M)


def size(text):
    n, unit = text.split()
    return float(n.lstrip("+")) * {"B": 1, "KiB": 1024, "MiB": 2**20, "GiB": 2**30}[unit]


def step(target, frames, n):
    """@n steps of the program, each after a frame of the view (at least
    one refresh interval apart, so that memory samples come between)."""
    for i in range(n):
        frames.next()
        target.stdin.write(b"step\n")
        target.stdin.flush()
        assert target.stdout.readline() == b"done %d\n" % (i + 1)


def all_steps_read(frame):
    """The frame holds every step: leak()'s row keeps 40 x 50 kB."""
    r = [x for x in rows(frame) if x[0] == "leak"]
    return r and size(r[0][1]) >= STEPS * 50_000


def check_steady(frame):
    got = rows(frame)
    assert got and got[0][0] == "leak", frame
    _, live, rise, per_hour, steady, r = got[0]
    assert steady == 100 and r > 0.9, frame
    assert 0.5 * STEPS * 50_000 < size(rise) < 1.5 * STEPS * 50_000, frame
    assert size(per_hour) > 0, frame
    assert "Steady*" in frame and "rise fitted over" in frame, frame


def test_steady_leak_first_while_it_runs(memtrace, script, tmp_path):
    prog = script(PROG)
    cap = tmp_path / "c.bin"
    target = subprocess.Popen([memtrace, "run", "-o", str(cap), "--python", "/usr/bin/python3",
                               str(prog)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    live = None
    try:
        assert target.stdout.readline() == b"ready\n"
        live = subprocess.Popen([memtrace, "live", "--interval", "0.1", "--sort", "steady",
                                 str(cap)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        frames = Frames(live)
        step(target, frames, STEPS)
        f = frames.until(all_steps_read)
        assert "tracking" in f and "tracking ended" not in f, f
        check_steady(f)
        # own live memory puts the sawtooth first now, then the leak
        own = run(memtrace, "live", "--once", cap).stdout
        assert table(own)[:3] == ["cache", "leak", "jump"], own
        once = run(memtrace, "live", "--once", "--sort", "steady", cap).stdout
        if all_steps_read(once):
            check_steady(once)
        target.stdin.write(b"end\n")
        target.stdin.flush()
        assert target.wait(60) == 0
        f = frames.until(lambda f: "tracking ended" in f)
        check_steady(f)
        assert live.wait(30) == 0 and live.stderr.read() == b""
    finally:
        stop(target, live)


def test_steady_over_a_port(memtrace, script, tmp_path):
    prog = script(PROG)
    target, port = start_remote(memtrace, prog)
    live = None
    try:
        live = subprocess.Popen([memtrace, "live", "--interval", "0.1", "--sort", "steady",
                                 port], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert target.stdout.readline() == b"ready\n"
        frames = Frames(live)
        step(target, frames, STEPS)
        f = frames.until(all_steps_read)
        assert "memtrace live: 127.0.0.1:%s " % port in f and "tracking ended" not in f, f
        check_steady(f)
        target.stdin.write(b"end\n")
        target.stdin.flush()
        assert target.wait(60) == 0
        frames.until(lambda f: "tracking ended" in f)
        assert live.wait(30) == 0 and live.stderr.read() == b""
    finally:
        stop(target, live)


def test_once_ranks_as_growth_does(memtrace, script, tmp_path):
    """On a finished capture the ranking is `memtrace growth`'s."""
    prog = script(PROG)
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-q", "-o", cap, "--python", "/usr/bin/python3", prog,
        input="step\n" * 30 + "end\n")
    g = json.loads(run(memtrace, "growth", "--json", cap).stdout)
    once = run(memtrace, "live", "--once", "--sort", "steady", "-n", "100", cap).stdout
    got = rows(once)
    want = [r for r in g["rows"] if r["stack"]]
    assert [x[0] for x in got] == [r["stack"][0]["function"] for r in want], (once, want)
    assert "rise fitted over %d points" % g["points"] in once, once
    first = want[0]
    assert abs(size(got[0][2]) - first["rise_bytes"]) <= 0.01 * abs(first["rise_bytes"]) + 1
    assert got[0][4] == round(first["steady"] * 100), once


def test_bad_sort(memtrace, tmp_path):
    p = run(memtrace, "live", "--sort", "steadily", tmp_path / "x.bin", check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == ("memtrace: live: --sort wants own, total, blocks, growth or steady, not "
                        "'steadily'\n"), p.stderr


def test_key_s_on_a_terminal(memtrace, script, tmp_path):
    """On a terminal s sorts by steady rise (reading the capture again from
    its start, to follow each path's series), o by own memory again."""
    prog = script(PROG)
    cap = tmp_path / "c.bin"
    target = subprocess.Popen([memtrace, "run", "-o", str(cap), "--python", "/usr/bin/python3",
                               str(prog)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    pid = master = None
    out = b""

    def read_until(what):
        nonlocal out
        start = len(out)
        deadline = time.monotonic() + 30
        while what not in out[start:] and time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 1)
            if r:
                out += os.read(master, 65536)
        assert what in out[start:], out[-500:]

    try:
        assert target.stdout.readline() == b"ready\n"
        pid, master = pty.fork()
        if pid == 0:
            os.execv(memtrace, [memtrace, "live", "--interval", "0.1", str(cap)])
        read_until(b"jump at")
        assert b"o/t/a/g/s sort" in out and b"Steady*" not in out
        os.write(master, b"s")  # the capture read again, with each path's series
        mark = len(out)
        read_until(b"Steady*")
        assert b"events from the start" in out[mark:], out[mark:]
        read_until(b"jump at")
        os.write(master, b"o")
        read_until(b"Own blocks")
        os.write(master, b"q")
        _, status = os.waitpid(pid, 0)
        pid = None
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        if master is not None:
            os.close(master)
        target.stdin.write(b"end\n")
        target.stdin.flush()
        target.wait(60)
        stop(target)


# two call paths that end in the same line, one rising twice as fast
TWO_PATHS = r"""
import sys

kept = []


def keep(n):
    kept.append(bytearray(n))


def fast():
    keep(40_000)


def slow():
    keep(20_000)


for line in sys.stdin:
    fast()
    slow()
"""


def test_paths_that_end_alike_show_their_callers(memtrace, script, tmp_path):
    """Rows are call paths: two that end in the same line are told apart
    by the caller where they part, and a row alone keeps one frame."""
    prog = script(TWO_PATHS)
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-q", "-o", cap, "--python", "/usr/bin/python3", prog,
        input="step\n" * 30)
    once = run(memtrace, "live", "--once", "--sort", "steady", "-n", "100", cap).stdout
    got = [r for r in rows(once) if r[0] == "keep"]
    assert len(got) == 2, once
    lines = [ln for ln in once.splitlines() if re.search(r"  keep at ", ln)]
    assert len(lines) == 2, once
    assert " <- fast at " in lines[0] and " <- slow at " in lines[1], once
    assert size(got[0][2]) > 1.5 * size(got[1][2]), once
    # the ranking's own rows with other leaves show no callers
    assert all(" <- " not in ln for ln in once.splitlines() if ROW.match(ln)
               and "  keep at " not in ln), once
