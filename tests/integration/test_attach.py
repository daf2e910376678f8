"""memtrace attach/detach against real running Python processes: blocked,
busy and multi-threaded targets on every interpreter present, repeated
cycles, libraries imported after attach, and the error paths."""

import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

import pytest

from conftest import control_socket, python_params, report_json, run

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


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("python", python_params())
def test_attach_records_allocations_after_attach(memtrace, target_script, targets, tmp_path,
                                                 python, scenario):
    t = Target(python, target_script, scenario)
    targets.append(t)
    cap = tmp_path / "cap.bin"
    p = attach(memtrace, t.pid, cap)
    assert "tracking pid %d into %s" % (t.pid, cap) in p.stderr
    t.cmd("alloc 3000017")
    p = detach(memtrace, t.pid)
    assert str(cap) in p.stderr
    t.cmd("alloc 5000011")  # after detach: not recorded
    status, rest = t.finish()
    assert status == 3 and rest.strip() == "bye"
    rows = leak_rows(memtrace, cap)
    assert 2_990_000 <= own_bytes(rows, "leak_here") < 4_000_000, rows[:5]


@pytest.mark.parametrize("python", python_params())
def test_output_and_status_unchanged(memtrace, target_script, targets, tmp_path, python):
    def session(attached):
        t = Target(python, target_script, "sleep")
        targets.append(t)
        if attached:
            attach(memtrace, t.pid, tmp_path / "cap.bin", "-f")
        t.cmd("alloc 1000")
        if attached:
            detach(memtrace, t.pid)
        t.cmd("alloc 1000")
        return t.finish()
    assert session(True) == session(False)


SLEEPER = """\
import sys, time
print("ready", flush=True)
t = time.monotonic()
time.sleep(float(sys.argv[1]))
print("%.3f" % (time.monotonic() - t), flush=True)
"""


@pytest.mark.parametrize("python", python_params())
def test_sleep_keeps_its_length(memtrace, script, tmp_path, python):
    """The interrupted clock_nanosleep restarts: the sleep lasts as long."""
    prog = script(SLEEPER)
    p = subprocess.Popen([python, prog, "3"], stdout=subprocess.PIPE, universal_newlines=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        attach(memtrace, p.pid, tmp_path / "cap.bin")
        detach(memtrace, p.pid)
        slept = float(p.stdout.readline())
        assert 2.99 <= slept < 3.3, slept
        assert p.wait(timeout=30) == 0
    finally:
        p.kill()


def test_twenty_cycles(memtrace, target_script, targets, tmp_path):
    t = Target("/usr/bin/python3", target_script, "threads")
    targets.append(t)
    for i in range(20):
        cap = tmp_path / ("cap%d.bin" % i)
        attach(memtrace, t.pid, cap)
        t.cmd("alloc %d" % (1_000_000 + i))
        detach(memtrace, t.pid)
        assert 990_000 <= own_bytes(leak_rows(memtrace, cap), "leak_here") < 1_100_000, i
    status, _ = t.finish()
    assert status == 3


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


def test_numpy_imported_after_attach(memtrace, target_script, targets, tmp_path):
    if subprocess.run(["/usr/bin/python3", "-c", "import numpy"]).returncode != 0:
        pytest.skip("numpy is not installed for /usr/bin/python3")
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    attach(memtrace, t.pid, cap)
    t.cmd("numpy")
    detach(memtrace, t.pid)
    t.finish()
    rows = leak_rows(memtrace, cap)
    # own bytes belong to numpy's Python-level ones(); the C allocation
    # happens in numpy's extension module, loaded after attach
    assert own_bytes(rows, "numpy_here", "total_bytes") >= 7_950_000, rows[:5]


@pytest.mark.parametrize("python", python_params())
def test_cached_method_leak_on_top(memtrace, target_script, targets, tmp_path, python):
    t = Target(python, target_script, "sleep")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    attach(memtrace, t.pid, cap)
    t.cmd("cache 200")
    detach(memtrace, t.pid)
    t.finish()
    rows = leak_rows(memtrace, cap)
    top = max(rows, key=lambda r: r["own_bytes"])
    assert name_is(top, "lookup"), rows[:5]
    assert top["own_bytes"] >= 0.99 * 200 * 20_000
    # and in the flamegraph of the leaks: the widest block with nothing
    # above it is the cached method
    from test_flamegraph import flamegraph
    d, _ = flamegraph(memtrace, cap, "--leaks")
    s, n = d["strings"], d["nodes"]
    parents = set(n["parent"][1:])
    leaves = [i for i in range(1, len(n["parent"])) if i not in parents and n["fn"][i] >= 0]
    widest = max(leaves, key=lambda i: n["bytes"][i])
    assert s[n["fn"][widest]].endswith("lookup"), [(s[n["fn"][i]], n["bytes"][i]) for i in leaves]
    assert n["bytes"][widest] >= 0.99 * 200 * 20_000


def test_target_exits_while_attached(memtrace, target_script, targets, tmp_path):
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    attach(memtrace, t.pid, cap)
    t.cmd("alloc 2000003")
    status, _ = t.finish()
    assert status == 3
    p = detach(memtrace, t.pid, check=False)
    assert p.returncode == 1 and "no process" in p.stderr
    # finalization freed it: look at the peak, not at the leaks
    assert 1_990_000 <= own_bytes(leak_rows(memtrace, cap, leaks=False), "leak_here") < 2_100_000


def test_duration_detaches(memtrace, target_script, targets, tmp_path):
    t = Target("/usr/bin/python3", target_script, "cpu")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    start = time.monotonic()
    p = attach(memtrace, t.pid, cap, "--duration", "1")
    assert 1.0 <= time.monotonic() - start < 5
    assert "detached" in p.stderr
    p = detach(memtrace, t.pid, check=False)
    assert p.returncode == 1 and "not attached" in p.stderr
    t.finish()
    run(memtrace, "stats", cap)


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




def test_detach_while_the_target_has_no_descriptor_left(memtrace, target_script, targets,
                                                        tmp_path):
    """A program that has used up its file descriptors (the service one
    would be debugging) cannot accept the detach connection for now: the
    control thread waits and tries again, instead of ending and leaving a
    capture nobody can stop."""
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    attach(memtrace, t.pid, cap)
    t.cmd("exhaust")
    deadline = time.monotonic() + 30
    # Each request frees the connection's descriptor, which the program
    # may take before the control thread's next accept(): that accept
    # fails with EMFILE, and the control thread sleeps before trying again.
    def control_sleeps():
        state = _thread_wchan(t.pid, "memtrace-ctl")
        assert state is not None, "the control thread ended"
        return "nanosleep" in state

    while not control_sleeps():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(control_socket(t.pid))
            c.sendall(b"status\n")
            c.setblocking(False)
            while not control_sleeps():  # answered, or waiting to be accepted
                assert time.monotonic() < deadline, _thread_wchan(t.pid, "memtrace-ctl")
                try:
                    assert c.recv(4096).startswith(b"ok active")
                    break
                except BlockingIOError:
                    time.sleep(0.001)
    d = subprocess.Popen([str(memtrace), "detach", str(t.pid)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True)
    try:
        t.cmd("release")
        out, err = d.communicate(timeout=60)
    finally:
        if d.poll() is None:
            d.kill()
            d.wait()
    assert d.returncode == 0 and "capture written to %s" % cap in err, err
    status, _ = t.finish()
    assert status == 3
    run(memtrace, "stats", cap)


GIL_HOG = r"""
import re, sys, time
def took():
    start = time.monotonic()
    re.match(r"(a+)+$", "a" * 20 + "b")
    return time.monotonic() - start
unit = max(min(took() for _ in range(5)), 1e-4)  # the fastest: a busy machine only lengthens the hold
n = 20
while unit * 2 ** (n - 20) < 9:  # backtracking that holds the GIL for ~9 s
    n += 1
print("ready", flush=True)
sys.stdin.readline()
re.match(r"(a+)+$", "a" * n + "b")
print("released", flush=True)
sys.stdin.readline()
"""


def _threads(pid):
    names = []
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            names.append(open("/proc/%d/task/%s/comm" % (pid, task)).read().strip())
        except OSError:
            pass
    return names


def _hog(script):
    prog = script(GIL_HOG, name="hog.py")
    p = subprocess.Popen(["/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)
    assert p.stdout.readline() == "ready\n"
    p.stdin.write("go\n")
    p.stdin.flush()
    return p


def test_attach_while_the_gil_is_held_in_c_code(memtrace, script, tmp_path):
    """The main thread holds the GIL in C code for ~9 s: the C allocators
    are tracked without it, so attach and detach take no longer than
    usual, and the rest of the start (the Python-side registrations) is
    done once the GIL is free, harmlessly after the detach."""
    p = _hog(script)
    cap = tmp_path / "cap.bin"
    try:
        start = time.monotonic()
        attach(memtrace, p.pid, cap)
        assert time.monotonic() - start < 3
        assert _raw_status(p.pid).startswith("ok active")
        d = detach(memtrace, p.pid)
        assert "capture written to %s" % cap in d.stderr, d.stderr
        assert time.monotonic() - start < 5  # the GIL is still held
        assert p.stdout.readline() == "released\n"
        run(memtrace, "stats", cap)
        p.stdin.write("quit\n")
        p.stdin.flush()
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_attach_that_gives_up_leaves_no_tracking(memtrace, script, tmp_path):
    """With --trace-python-allocators the start needs the GIL, which the
    main thread holds in C code past attach's 5 s wait: attach says it
    gave up and undoes the start, and nothing tracks once the GIL is
    free."""
    p = _hog(script)
    cap = tmp_path / "cap.bin"
    try:
        a = attach(memtrace, p.pid, cap, "--trace-python-allocators", check=False)
        assert a.returncode == 1 and "the start is cancelled" in a.stderr, a.stderr
        assert len(a.stderr.splitlines()) == 1, a.stderr
        assert not cap.exists()
        assert p.stdout.readline() == "released\n"
        deadline = time.monotonic() + 30
        while True:
            status = _raw_status(p.pid, timeout=30)
            if status == "ok idle\n" and "memtrace-stop" not in _threads(p.pid):
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.05)
        assert "memtrace-write" not in _threads(p.pid), _threads(p.pid)
        assert not cap.exists()
        p.stdin.write("quit\n")
        p.stdin.flush()
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


FORKER = r"""
import os, sys
pid = os.fork()
if pid == 0:
    keep = []
    print("child %d" % os.getpid(), flush=True)
    for line in sys.stdin:
        if line.startswith("alloc"):
            keep.append(bytearray(int(line.split()[1])))
            print("done", flush=True)
        elif line.startswith("quit"):
            print("bye", flush=True)
            break
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("parent done %d" % status, flush=True)
"""


def test_attach_to_a_child_forked_while_tracking(memtrace, script, tmp_path):
    """A child forked by a program under memtrace run inherits the
    payload with its capture running; the capture is the parent's, so the
    child can be attached to and detached from on its own."""
    prog = script(FORKER, name="forker.py")
    parent_cap, child_cap = tmp_path / "parent.bin", tmp_path / "child.bin"
    p = subprocess.Popen([str(memtrace), "run", "-o", str(parent_cap), "--python",
                          "/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, bufsize=1)
    try:
        word, child = p.stdout.readline().split()
        assert word == "child"
        attach(memtrace, child, child_cap)
        p.stdin.write("alloc 3000007\n")
        p.stdin.flush()
        assert p.stdout.readline() == "done\n"
        d = detach(memtrace, child)
        assert "capture written to %s" % child_cap in d.stderr, d.stderr
        p.stdin.write("quit\n")
        p.stdin.flush()
        assert p.stdout.readline() == "bye\n"
        assert p.stdout.readline() == "parent done 0\n"
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    rows = leak_rows(memtrace, child_cap)
    assert [r["line"] for r in rows if r["function"] == "<module>" and
            r["own_bytes"] >= 3000007] == [9], rows[:5]
    run(memtrace, "stats", parent_cap)






def test_attach_killed_midway_leaves_the_target_well(memtrace, target_script, targets, tmp_path):
    """memtrace attach killed with SIGKILL at any moment, also while a
    thread of the target runs the call into the payload (a fresh target
    each time, so that every attach injects): the target lives on and
    untraced; tracking is either off, or on as after any attach (once the
    injection was over), and then detach ends it."""
    import random
    rng = random.Random(7)
    for i in range(30):  # without the fix about one round in twenty killed the target
        t = Target("/usr/bin/python3", target_script, "sleep")
        targets.append(t)
        cap = tmp_path / ("c%d.bin" % i)
        a = subprocess.Popen([str(memtrace), "attach", "-o", str(cap), str(t.pid)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.002, 0.04))  # a random moment, not a handshake
        a.kill()
        a.wait()
        deadline = time.monotonic() + 30
        while _tracer(t.pid) != 0 or _raw_status(t.pid).startswith("ok starting"):
            assert t.p.poll() is None, "the target died (status %s) at round %d" % (t.p.poll(), i)
            assert time.monotonic() < deadline, (i, _tracer(t.pid), _raw_status(t.pid))
            time.sleep(0.01)
        assert t.p.poll() is None, "the target died (status %s) at round %d" % (t.p.poll(), i)
        t.cmd("alloc 10")
        if _raw_status(t.pid).startswith("ok active"):
            detach(memtrace, t.pid)
        status, _ = t.finish()
        assert status == 3, (i, status)




def test_detach_says_how_many_events_were_dropped(memtrace, target_script, targets, tmp_path):
    """The capture is a FIFO nobody reads: the writer gets stuck, and after
    a second in which it took nothing the churning threads' events are
    dropped. detach says how many, and the capture's trailer agrees.
    memtrace attach makes regular files only: tracking into the FIFO is
    started with the control socket's start request, once an attach and
    detach left the payload loaded."""
    import threading
    fifo = tmp_path / "cap.fifo"
    os.mkfifo(fifo)
    rd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    t = Target("/usr/bin/python3", target_script, "threads")
    targets.append(t)
    attach(memtrace, t.pid, tmp_path / "first.bin")
    detach(memtrace, t.pid)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(10)
        c.connect(control_socket(t.pid))
        c.sendall(b"start 1 10 %s\n" % os.fsencode(fifo))  # 1: MT_HDR_ATTACHED
        assert c.recv(4096).startswith(b"ok"), "the payload refused to start"
    deadline = time.monotonic() + 30
    while not _raw_status(t.pid).startswith("ok active"):
        assert time.monotonic() < deadline, _raw_status(t.pid)
        time.sleep(0.01)
    cap = tmp_path / "cap.bin"
    drained = threading.Event()

    def drain():
        os.set_blocking(rd, True)
        with open(cap, "wb") as out:
            while True:
                chunk = os.read(rd, 1 << 16)
                if not chunk:
                    break
                out.write(chunk)
        drained.set()

    try:
        while "pipe_write" not in (_thread_wchan(t.pid, "memtrace-write") or ""):  # pipe full
            assert time.monotonic() < deadline, "the writer never filled the capture's pipe"
            time.sleep(0.01)
        # The threads hold the GIL while they wait for the writer, so the
        # process only burns CPU again once events are being dropped.
        base = _cpu_seconds(t.pid)
        while _cpu_seconds(t.pid) - base < 0.5:
            assert time.monotonic() < deadline, "the program stalled on its unwritable capture"
            time.sleep(0.01)
        reader = threading.Thread(target=drain)
        reader.start()
        p = detach(memtrace, t.pid)
        assert drained.wait(60)
        reader.join()
    finally:
        os.close(rd)
    stats = report_json(memtrace, "stats", cap)
    dropped = stats["totals"]["dropped"]
    assert stats["status"]["complete"] and dropped > 0, stats["status"]
    assert p.stderr == ("memtrace: detached from pid %d, capture written to %s; %d events were "
                        "dropped, as it could not be written fast enough\n"
                        % (t.pid, fifo, dropped)), p.stderr
    assert any("events were dropped" in d["message"] for d in stats["diagnostics"])
    status, _ = t.finish()
    assert status == 3


# A process that answers on the control socket like a payload from before
# the "detach" request: only "stop" stops it.
OLD_PAYLOAD = r"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0memtrace-%d" % os.getpid())
s.listen(4)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    req = c.makefile().readline()
    print(req.strip(), flush=True)
    if req == "stop\n":
        c.sendall(b"ok stopped /old/capture.bin\n")
        c.close()
        break
    c.sendall(b"error unknown request\n")
    c.close()
"""


def test_detach_from_an_older_payload(memtrace, script, targets):
    path = script(OLD_PAYLOAD, name="old.py")
    p = subprocess.Popen(["/usr/bin/python3", str(path)], stdout=subprocess.PIPE,
                         universal_newlines=True)
    try:
        assert p.stdout.readline() == "ready\n"
        d = detach(memtrace, p.pid)
        assert d.stderr == ("memtrace: detached from pid %d, capture written to "
                            "/old/capture.bin\n" % p.pid)
        assert p.stdout.read().split() == ["detach", "stop"]
        assert p.wait(timeout=10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def one_line_error(p):
    assert p.returncode == 1, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memtrace: "), p.stderr
    return lines[0]


def test_error_no_such_pid(memtrace, tmp_path):
    p = subprocess.Popen(["true"])
    p.wait()
    msg = one_line_error(attach(memtrace, p.pid, tmp_path / "c.bin", check=False))
    assert "no process with pid %d" % p.pid in msg
    assert not (tmp_path / "c.bin").exists()
    assert "no process" in one_line_error(detach(memtrace, p.pid, check=False))


def test_error_not_python(memtrace, tmp_path):
    p = subprocess.Popen(["sleep", "100"])
    try:
        time.sleep(0.2)
        msg = one_line_error(attach(memtrace, p.pid, tmp_path / "c.bin", check=False))
        assert "not a CPython process" in msg
        assert p.poll() is None
        assert "state:\tS" in open("/proc/%d/status" % p.pid).read().replace("State:", "state:")
    finally:
        p.kill()
        p.wait()


def test_error_attach_twice_and_detach_twice(memtrace, target_script, targets, tmp_path):
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    attach(memtrace, t.pid, tmp_path / "a.bin")
    msg = one_line_error(attach(memtrace, t.pid, tmp_path / "b.bin", check=False))
    assert "already attached" in msg and not (tmp_path / "b.bin").exists()
    detach(memtrace, t.pid)
    assert "not attached" in one_line_error(detach(memtrace, t.pid, check=False))
    t.cmd("alloc 10")
    t.finish()


def test_error_never_attached(memtrace, target_script, targets):
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    msg = one_line_error(detach(memtrace, t.pid, check=False))
    assert msg == "memtrace: pid %d is not attached" % t.pid
    t.finish()


def test_error_capture_exists(memtrace, target_script, targets, tmp_path):
    t = Target("/usr/bin/python3", target_script, "sleep")
    targets.append(t)
    cap = tmp_path / "c.bin"
    cap.write_text("precious")
    assert "exists" in one_line_error(attach(memtrace, t.pid, cap, check=False))
    assert cap.read_text() == "precious"
    t.finish()


def _setpriv(uid):
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups"]


def test_error_other_user(memtrace, target_script, tmp_path):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a target as another user")
    # Both users need to reach the target script and memtrace.
    shared = "/tmp/memtrace-attach-test-%d" % os.getpid()
    os.makedirs(shared, exist_ok=True)
    os.chmod(shared, 0o777)
    prog = os.path.join(shared, "target.py")
    shutil.copy(str(target_script), prog)
    os.chmod(prog, 0o644)
    d = os.path.dirname(memtrace)
    while d != "/":
        if not os.stat(d).st_mode & 0o001:
            pytest.skip("%s is not searchable by other users" % d)
        d = os.path.dirname(d)
    p = subprocess.Popen(_setpriv(65534) + ["/usr/bin/python3", prog, "sleep"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        q = run(*(_setpriv(65533) + [memtrace, "attach", "-o", shared + "/c.bin", p.pid]),
                check=False, cwd=shared)
        msg = one_line_error(q)
        assert "uid 65534" in msg and "CAP_SYS_PTRACE" in msg, msg
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(shared, ignore_errors=True)


SIGNAL_TARGET = r"""
import ctypes, signal, sys, time
libc = ctypes.CDLL(None)
HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)


def handler(sig):
    print("in handler", flush=True)
    time.sleep(4)


h = HANDLER(handler)
libc.signal(signal.SIGUSR1, h)
print("ready", flush=True)
getattr(libc, "raise")(signal.SIGUSR1)
print("out", flush=True)
"""


def test_signal_handler_rejected(memtrace, script, tmp_path):
    """A thread inside a C signal handler is never used; with --method ptrace
    the attach fails cleanly and the target carries on."""
    prog = script(SIGNAL_TARGET, name="sig.py")
    p = subprocess.Popen(["/usr/bin/python3", prog], stdout=subprocess.PIPE,
                         universal_newlines=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        assert p.stdout.readline().strip() == "in handler"
        q = attach(memtrace, p.pid, tmp_path / "c.bin", "--method", "ptrace", check=False)
        assert "safe point" in one_line_error(q)
        assert p.stdout.readline().strip() == "out"
        assert p.wait(timeout=30) == 0
    finally:
        p.kill()
        p.wait()


def test_gdb_method(memtrace, target_script, targets, tmp_path):
    if not shutil.which("gdb"):
        pytest.skip("gdb is not installed")
    t = Target("/usr/bin/python3", target_script, "cpu")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    attach(memtrace, t.pid, cap, "--method", "gdb")
    t.cmd("alloc 3000017")
    detach(memtrace, t.pid)
    t.finish()
    assert 2_990_000 <= own_bytes(leak_rows(memtrace, cap), "leak_here") < 4_000_000


# lldb 14 is not in it: its own expression set-up (an mmap it calls in the
# target) fails under this many signals, whatever they are set to.
@pytest.mark.parametrize("debugger", ["gdb"])
def test_debugger_methods_pass_signals_on(memtrace, target_script, targets, tmp_path, debugger):
    """Signals for the target stop it under a debugger wherever it is,
    perhaps in libc with a lock held, and abandon a call made from the
    debugger: they must go on to the target, and the payload be loaded only
    at the safe point."""
    if not shutil.which(debugger):
        pytest.skip("%s is not installed" % debugger)
    import threading
    t = Target("/usr/bin/python3", target_script, "usr1")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    done = threading.Event()

    def storm():
        while not done.wait(0.005):
            os.kill(t.pid, signal.SIGUSR1)

    sender = threading.Thread(target=storm)
    sender.start()
    try:
        p = attach(memtrace, t.pid, cap, "--method", debugger, "-v")
    finally:
        done.set()
        sender.join()
    points = re.findall(r"memtrace-%s: safe point: (\w+)" % debugger, p.stderr)
    assert points and points[0] in ("PyCallable_Check", "PyErr_CheckSignals"), p.stderr
    t.cmd("alloc 3000017")
    detach(memtrace, t.pid)
    t.finish()
    assert 2_990_000 <= own_bytes(leak_rows(memtrace, cap), "leak_here") < 4_000_000


def test_lldb_method(memtrace, target_script, targets, tmp_path):
    if not shutil.which("lldb"):
        pytest.skip("lldb is not installed")
    t = Target("/usr/bin/python3", target_script, "cpu")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    attach(memtrace, t.pid, cap, "--method", "lldb")
    t.cmd("alloc 3000017")
    detach(memtrace, t.pid)
    t.finish()
    assert 2_990_000 <= own_bytes(leak_rows(memtrace, cap), "leak_here") < 4_000_000


def test_lldb_method_with_another_python_first_on_path(memtrace, target_script, targets,
                                                        tmp_path):
    """lldb's Python is the system's: another python3.X first on PATH (a
    pyenv build, a venv) must not become its home."""
    if not shutil.which("lldb"):
        pytest.skip("lldb is not installed")
    others = [p.values[0] for p in python_params()[1:] if p.values[0]]
    if not others:
        pytest.skip("no python3 other than /usr/bin/python3 on this machine to put first on PATH")
    # the same minor version as the system's first: the case that broke
    system = "python%d.%d" % sys.version_info[:2] if sys.executable == "/usr/bin/python3" else ""
    other = next((o for o in others if os.path.basename(o) == system), others[0])
    t = Target("/usr/bin/python3", target_script, "cpu")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    env = dict(os.environ, PATH=os.path.dirname(other) + os.pathsep + os.environ["PATH"])
    env.pop("PYTHONHOME", None)
    run(memtrace, "attach", "-o", cap, "--method", "lldb", t.pid, timeout=60, env=env)
    t.cmd("alloc 3000017")
    detach(memtrace, t.pid)
    t.finish()
    assert 2_990_000 <= own_bytes(leak_rows(memtrace, cap), "leak_here") < 4_000_000


def test_latency(memtrace, target_script, targets, tmp_path):
    """Median attach and detach times over 10 cycles (printed with -s)."""
    t = Target("/usr/bin/python3", target_script, "threads")
    targets.append(t)
    a, d = [], []
    for i in range(10):
        s = time.monotonic()
        attach(memtrace, t.pid, tmp_path / ("c%d.bin" % i))
        a.append(time.monotonic() - s)
        t.cmd("alloc 100")
        s = time.monotonic()
        detach(memtrace, t.pid)
        d.append(time.monotonic() - s)
    t.finish()
    print("\nattach median %.1f ms, detach median %.1f ms"
          % (statistics.median(a) * 1000, statistics.median(d) * 1000))
    assert statistics.median(a) < 2.0 and statistics.median(d) < 2.0
