"""The attach tests' target and helpers: a Python process driven line by
line on stdin (TARGET, Target), its fixtures (target_script, targets),
attach and detach through the CLI, the leak rows of a capture, and what
/proc says of the target's threads."""

import json
import os
import re
import shutil
import socket
import subprocess

import pytest

from conftest import control_socket, run


# The target: the scenario runs on the main thread (and workers); a command
# thread reads stdin and answers each line with "done" on stdout.
TARGET = r'''
import functools, os, socket, sys, threading, time

SCENARIO = sys.argv[1]
keep = []
held, grabber, grabbing = [], [], threading.Event()
stop = threading.Event()


def leak_here(n):
    keep.append(bytearray(n))


class Service:
    @functools.lru_cache(maxsize=None)
    def lookup(self, key):
        return bytearray(20_000)


def cache_leak(n):
    s = Service()
    keep.append(s)
    for i in range(n):
        s.lookup(i)


def numpy_here():
    import numpy
    keep.append(numpy.ones(1_000_000))


def commands():
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "alloc":
            leak_here(int(words[1]))
        elif words[0] == "cache":
            cache_leak(int(words[1]))
        elif words[0] == "numpy":
            numpy_here()
        elif words[0] == "faulthandler":
            import faulthandler
            faulthandler.enable()
        elif words[0] == "exhaust":  # take every file descriptor, and any freed later
            import resource
            held.append(resource.getrlimit(resource.RLIMIT_NOFILE))
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, held[0][1]))
            grabbing.set()

            def grab():
                while grabbing.is_set():
                    try:
                        held.append(os.open("/dev/null", os.O_RDONLY))
                    except OSError:
                        pass
            grabber.append(threading.Thread(target=grab))
            grabber[0].start()
        elif words[0] == "release":
            import resource
            grabbing.clear()
            grabber.pop().join()
            for fd in held[1:]:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, held[0])
            del held[:]
        elif words[0] == "segv":
            import ctypes
            ctypes.string_at(1)
        elif words[0] == "codeslot":  # run a function compiled here, say the code type's tp_dealloc
            import ctypes
            exec(compile("def f():\n    return bytearray(%d)\nkeep.append(f())" % int(words[1]),
                         "gen.py", "exec"), {"keep": keep})
            # after ob_refcnt, ob_type, ob_size, tp_name, tp_basicsize and tp_itemsize
            print(ctypes.c_void_p.from_address(id(type(leak_here.__code__)) + 48).value)
        elif words[0] == "quit":
            stop.set()
            if SCENARIO == "accept":
                socket.create_connection(("127.0.0.1", port)).close()
            print("done", flush=True)
            return
        print("done", flush=True)


def churn():
    while not stop.is_set():
        junk = [bytearray(1000) for _ in range(100)]
        del junk


port = 0
if SCENARIO == "accept":
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
workers = [threading.Thread(target=commands)]
if SCENARIO == "threads":
    workers += [threading.Thread(target=churn) for _ in range(8)]
for w in workers:
    w.start()
print("ready", flush=True)

if SCENARIO == "usr1":
    import signal
    signal.signal(signal.SIGUSR1, lambda *args: None)
if SCENARIO in ("sleep", "usr1"):
    while not stop.is_set():
        time.sleep(0.5)
elif SCENARIO == "accept":
    conn, _ = srv.accept()
    conn.close()
elif SCENARIO == "cpu":
    x = 0
    while not stop.is_set():
        x += 1
elif SCENARIO == "calloc":
    while not stop.is_set():
        b = bytes(100_000)
        s = "x" * 5000
for w in workers:
    w.join()
print("bye", flush=True)
sys.exit(3)
'''

SCENARIOS = ["sleep", "accept", "cpu", "calloc", "threads"]


class Target:
    """A Python process running TARGET, driven line by line."""

    def __init__(self, python, script, scenario, **kw):
        self.p = subprocess.Popen([str(python), str(script), scenario], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, universal_newlines=True, bufsize=1, **kw)
        self.pid = self.p.pid
        assert self.readline() == "ready"

    def readline(self):
        line = self.p.stdout.readline()
        return line.strip()

    def cmd(self, line):
        """Send @line; returns what the target printed before "done"."""
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = []
        while True:
            reply = self.readline()
            assert reply, line  # the target ended
            if reply == "done":
                return out
            out.append(reply)

    def finish(self):
        self.cmd("quit")
        rest = self.p.stdout.read()
        self.p.stdin.close()
        return self.p.wait(timeout=60), rest

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.fixture
def target_script(script):
    return script(TARGET, name="target.py")


@pytest.fixture
def targets():
    started = []
    yield started
    for t in started:
        t.kill()


def attach(memtrace, pid, cap, *extra, check=True):
    return run(memtrace, "attach", "-o", cap, *extra, pid, check=check, timeout=60)


def detach(memtrace, pid, check=True):
    try:
        return run(memtrace, "detach", pid, check=check, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("detach did not answer; the target's threads:\n" + stacks(pid))


def stacks(pid):
    """Every thread's backtrace in pid, from gdb when there is one: what a
    hang waits for."""
    if not shutil.which("gdb"):
        return "(no gdb)"
    p = subprocess.run(["gdb", "-q", "-batch", "-p", str(pid), "-ex", "thread apply all bt"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=120)
    return p.stdout


_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def _size(num, unit):
    return int(float(num) * _UNITS[unit])


def leak_rows(memtrace, cap, leaks=True):
    """Rows of `summary --leaks` (or at the peak), from --json when the CLI
    has it, else from the text table."""
    mode = ["--leaks"] if leaks else []
    p = run(memtrace, "summary", "--json", "-n", "0", *mode, cap, check=False)
    if p.returncode == 0:
        return json.loads(p.stdout)["rows"]
    p = run(memtrace, "summary", "-n", "0", *mode, cap)
    rows = []
    pat = re.compile(r"^\s*([\d.]+) (B|KiB|MiB|GiB)\s+[\d.]+%\s+([\d.]+) (B|KiB|MiB|GiB)\s+[\d.]+%"
                     r"\s+(\d+)\s+(.*) at (.*):(\d+)$")
    for line in p.stdout.splitlines():
        m = pat.match(line)
        if m:
            rows.append({"total_bytes": _size(m.group(1), m.group(2)),
                         "own_bytes": _size(m.group(3), m.group(4)),
                         "own_allocations": int(m.group(5)), "function": m.group(6),
                         "file": m.group(7), "line": int(m.group(8))})
    return rows


def name_is(row, function):
    # 3.11+ reports qualified names ("Service.lookup")
    return row["function"].split(".")[-1] == function


def own_bytes(rows, function, key="own_bytes"):
    return sum(r[key] for r in rows if name_is(r, function))


def _thread_wchan(pid, name):
    """wchan of @pid's thread called @name, or None if it has none."""
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, task)) as f:
                if f.read().strip() != name:
                    continue
            with open("/proc/%d/task/%s/wchan" % (pid, task)) as f:
                return f.read()
        except OSError:
            continue
    return None


def _tracer(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return 0


def _raw_status(pid, timeout=10):
    """The payload's answer to "status" on its control socket."""
    name = control_socket(pid)
    if name is None:
        return "none"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(timeout)
            c.connect(name)
            c.sendall(b"status\n")
            return c.recv(4096).decode()
    except ConnectionRefusedError:
        return "none"


def _cpu_seconds(pid):
    """User + system CPU time of every thread of @pid."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_line_error(p):
    assert p.returncode == 1, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memtrace: "), p.stderr
    return lines[0]


def _setpriv(uid):
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups"]
