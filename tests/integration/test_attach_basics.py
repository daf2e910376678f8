"""memtrace attach/detach against real running Python processes: blocked,
busy and multi-threaded targets on every interpreter present, repeated
cycles, libraries imported after attach, the target ending while attached,
dropped events, an older payload, and the latency of a cycle."""

import os
import socket
import statistics
import subprocess
import time

import pytest

from conftest import control_socket, python_params, report_json, run
from attach_target import SCENARIOS, Target, _cpu_seconds, _raw_status, _thread_wchan, attach, \
    detach, leak_rows, name_is, own_bytes
from attach_target import target_script, targets  # noqa: F401 (fixtures)


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
    """attach --duration returns at once, as memray's (before the time is
    up: an attach itself took 4.8 s once, on a machine running two test
    suites); the process ends the capture by itself when the time is up,
    and runs on untracked."""
    t = Target("/usr/bin/python3", target_script, "cpu")
    targets.append(t)
    cap = tmp_path / "cap.bin"
    start = time.monotonic()
    p = attach(memtrace, t.pid, cap, "--duration", "5")
    assert time.monotonic() - start < 5
    assert "tracking stops in 5 s" in p.stderr, p.stderr
    # not ended yet: the capture has no trailer
    assert not report_json(memtrace, "stats", cap)["status"]["complete"]
    deadline = time.monotonic() + 20
    while not report_json(memtrace, "stats", cap)["status"]["complete"]:
        assert time.monotonic() < deadline, "the capture never ended"
        time.sleep(0.1)
    assert time.monotonic() - start >= 5
    p = detach(memtrace, t.pid, check=False)
    assert p.returncode == 1 and "not attached" in p.stderr
    # attached again, the time is the new capture's alone
    cap2 = tmp_path / "cap2.bin"
    attach(memtrace, t.pid, cap2)
    detach(memtrace, t.pid)
    assert report_json(memtrace, "stats", cap2)["status"]["complete"]
    t.finish()


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


CHURNERS = r"""
import sys, threading, time
def churn():
    while True:
        junk = [bytearray(1000) for _ in range(100)]
        del junk
for _ in range(40):
    threading.Thread(target=churn, daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


def _rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


def test_detach_gives_back_the_threads_buffers(memtrace, script, tmp_path):
    """Each thread that records while others do gets an event buffer of
    512 KiB, kept for a later attach. Detach left their pages in: 40 busy
    threads held 20 MB more after a detach than before the attach. Now
    their pages go back as the capture ends."""
    p = subprocess.Popen(["/usr/bin/python3", script(CHURNERS)], stdout=subprocess.PIPE,
                         universal_newlines=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(1)
        before = _rss_kb(p.pid)
        attach(memtrace, p.pid, tmp_path / "cap.bin")
        time.sleep(2)
        detach(memtrace, p.pid)
        time.sleep(0.5)
        after = _rss_kb(p.pid)
        assert after - before < 10 << 10, (before, after)
    finally:
        p.kill()
        p.wait()
