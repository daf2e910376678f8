"""Signals and memtrace: a program a catchable signal kills leaves a
capture complete up to the signal, and says so (issue 17, item 10); the
signals memtrace run passes on are only those the program did not get
already (item 15: ^C on a terminal)."""

import os
import pty
import re
import select
import signal
import subprocess
import time

import pytest

from conftest import python_params, report_json, run
from attach_target import Target, attach, detach
from test_python_api import py_env

# The signals whose default disposition ends the process and that
# memtrace catches while it is the default (payload/fatal.c).
TERMINATING = {signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGABRT, signal.SIGUSR1,
               signal.SIGUSR2, signal.SIGPIPE, signal.SIGALRM, signal.SIGTERM, signal.SIGSTKFLT,
               signal.SIGXCPU, signal.SIGXFSZ, signal.SIGVTALRM, signal.SIGPROF, signal.SIGIO,
               signal.SIGPWR}

KILLED = """\
import os, signal, sys, time


def keep():
    return bytearray(10**7)


print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
x = keep()
time.sleep(.05)
%s
print("still here")
"""


def own(rows, function, path):
    return sum(r["own_bytes"] for r in rows if r["function"] == function and r["file"] == str(path))


def check_ended_by(memtrace, cap, prog, name):
    """@cap is complete, holds keep()'s 10 MB and says @name ended it."""
    stats = report_json(memtrace, "stats", cap)
    assert stats["status"]["complete"], stats["status"]
    assert [d["message"] for d in stats["diagnostics"]] == [
        "ended by signal %s: the capture is complete up to it" % name]
    leaks = report_json(memtrace, "summary", cap, "--leaks")["rows"]
    assert 10**7 <= own(leaks, "keep", prog) <= 10**7 + 100


def said_killed(name, cap):
    return ("memtrace: the program was killed by %s; capture written to %s, complete up to the "
            "signal\n" % (name, cap))


@pytest.mark.parametrize("python", python_params())
def test_sigterm_leaves_a_complete_capture(memtrace, script, tmp_path, python):
    """The issue's program: it allocates 10 MB and sends itself SIGTERM
    50 ms later. Python still sees SIGTERM's disposition as the default."""
    prog = script(KILLED % "os.kill(os.getpid(), signal.SIGTERM)")
    cap = tmp_path / "t.bin"
    p = run(memtrace, "run", "--python", python, "-o", cap, prog, check=False)
    assert p.returncode == -signal.SIGTERM, p.stderr
    assert p.stdout == "True\n"
    assert p.stderr == said_killed("SIGTERM", cap)
    check_ended_by(memtrace, cap, prog, "SIGTERM")
    s = run(memtrace, "stats", cap)
    assert "ended by signal SIGTERM" in s.stdout and "truncated" not in s.stderr


@pytest.mark.parametrize("how,sig", [
    ("os.kill(os.getpid(), signal.SIGHUP)", signal.SIGHUP),
    ("os.kill(os.getpid(), signal.SIGQUIT)", signal.SIGQUIT),
    ("os.abort()", signal.SIGABRT),
    ("signal.alarm(1); time.sleep(5)", signal.SIGALRM),
    ("os.kill(os.getpid(), signal.SIGUSR1)", signal.SIGUSR1),
], ids=["SIGHUP", "SIGQUIT", "SIGABRT", "SIGALRM", "SIGUSR1"])
def test_other_terminating_signals(memtrace, script, tmp_path, how, sig):
    prog = script(KILLED % how)
    cap = tmp_path / "t.bin"
    # as a terminal starts it: a job started in the background of a script
    # has SIGQUIT (and SIGINT) ignored, which memtrace rightly keeps
    p = run(memtrace, "run", "-o", cap, prog, check=False,
            preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    assert p.returncode == -sig, p.stderr
    assert p.stderr == said_killed(signal.Signals(sig).name, cap)
    check_ended_by(memtrace, cap, prog, signal.Signals(sig).name)


@pytest.mark.parametrize("python", python_params())
def test_program_handler_wins(memtrace, script, tmp_path, python):
    """A handler the program installs runs, and the program ends as it
    chooses; memtrace's capture ends normally."""
    prog = script(KILLED % """\
def handler(sig, frame):
    print("handled", sig == signal.SIGTERM, flush=True)
    sys.exit(3)
old = signal.signal(signal.SIGTERM, handler)
print(old is signal.SIG_DFL, signal.getsignal(signal.SIGTERM) is handler, flush=True)
os.kill(os.getpid(), signal.SIGTERM)""")
    cap = tmp_path / "t.bin"
    p = run(memtrace, "run", "--python", python, "-o", cap, prog, check=False)
    assert p.returncode == 3, p.stderr
    assert p.stdout == "True\nTrue True\nhandled True\n"
    assert p.stderr == "memtrace: capture written to %s\n" % cap
    stats = report_json(memtrace, "stats", cap)
    assert stats["status"]["complete"] and stats["diagnostics"] == []


def test_kill_of_memtrace_reaches_the_program(memtrace, script, tmp_path):
    """`kill -TERM <memtrace run's pid>` from elsewhere is passed on: the
    program dies of it, its capture complete."""
    prog = script(KILLED % "print('ready', flush=True); time.sleep(60)")
    cap = tmp_path / "t.bin"
    proc = subprocess.Popen([memtrace, "run", "-o", str(cap), str(prog)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    assert proc.stdout.readline() == "True\n"
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    assert err == said_killed("SIGTERM", cap)
    check_ended_by(memtrace, cap, prog, "SIGTERM")


USR = """\
import signal, threading

got = []
done = threading.Event()


def handler(sig, frame):
    got.append(signal.Signals(sig).name)
    print("got", got[-1], flush=True)
    if len(got) == 3:
        done.set()


for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
    signal.signal(sig, handler)
print("ready", flush=True)
assert done.wait(60)
"""


def test_user_signals_to_memtrace_reach_the_program(memtrace, script, tmp_path):
    """`kill -USR1 <memtrace run's pid>` (SIGUSR2, SIGALRM) is the
    program's, as under memray: memtrace does not die of it, leaving the
    program to run on unwaited for."""
    prog = script(USR)
    cap = tmp_path / "t.bin"
    proc = subprocess.Popen([memtrace, "run", "-q", "-o", str(cap), str(prog)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True)
    assert proc.stdout.readline() == "ready\n"
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
        proc.send_signal(sig)
        assert proc.stdout.readline() == "got %s\n" % sig.name
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and (out, err) == ("", "")
    assert report_json(memtrace, "stats", cap)["status"]["complete"]


def test_sigkill_is_said(memtrace, script, tmp_path):
    """SIGKILL cannot be caught: the capture holds what was written (up to
    the last flush), and run says so rather than "capture written"."""
    prog = script(KILLED % "print('ready', flush=True); time.sleep(60)")
    cap = tmp_path / "t.bin"
    proc = subprocess.Popen([memtrace, "run", "-o", str(cap), str(prog)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    assert proc.stdout.readline() == "True\n"
    assert proc.stdout.readline() == "ready\n"
    kids = open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)).read().split()
    os.kill(int(kids[0]), signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert err == ("memtrace: the program was killed by SIGKILL before memtrace could finish the "
                   "capture: %s holds what was written up to 250 ms before\n" % cap)


def test_the_core_dumped_is_the_programs(memtrace, tmp_path):
    """A program that dumps core leaves its core: memtrace run dies of the
    same signal without a core of its own, which the kernel would write
    over the program's where core_pattern names both alike ("core")."""
    pattern = open("/proc/sys/kernel/core_pattern").read().strip()
    if pattern.startswith("|"):
        pytest.skip("cores go to %s, not to files" % pattern.split()[0])
    resource = pytest.importorskip("resource")

    def unlimited_cores():
        hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
        signal.signal(signal.SIGABRT, signal.SIG_DFL)

    proc = subprocess.Popen([memtrace, "run", "-q", "-o", str(tmp_path / "t.bin"), "-c",
                             "import os; os.abort()"], cwd=str(tmp_path),
                            preexec_fn=unlimited_cores)
    pid, status = os.waitpid(proc.pid, 0)
    proc.returncode = 0  # reaped here
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGABRT, status
    assert not os.WCOREDUMP(status)
    if pattern == "core":
        assert (tmp_path / "core").exists()  # the program's


POOL = """\
import multiprocessing as mp, os


def work(i):
    keep.append(bytearray(1_000_000))
    return os.getpid()


keep = []
if __name__ == "__main__":
    with mp.get_context("fork").Pool(2) as pool:
        workers = set(pool.map(work, range(8), chunksize=1))
    print(" ".join(map(str, sorted(workers))))
"""


def test_pool_as_context_manager(memtrace, script, tmp_path):
    """Pool.__exit__ terminates its workers with SIGTERM (a worker may be
    ending on its own by then, told there is no more work): each worker's
    capture is complete and holds the work it did."""
    prog = script(POOL)
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", "--follow-fork", "-o", cap, prog, cwd=tmp_path)
    workers = [int(w) for w in p.stdout.split()]
    assert workers
    total = 0
    for w in workers:
        c = tmp_path / ("c.bin.%d" % w)
        stats = report_json(memtrace, "stats", c)
        assert stats["status"]["complete"], (w, stats["status"])
        total += own(report_json(memtrace, "summary", c, "--leaks")["rows"], "work", prog)
    assert 8_000_000 <= total <= 8_001_000


def test_tracker_killed_by_sigterm(memtrace, tmp_path):
    """A Tracker's capture, too, ends whole when SIGTERM kills the process;
    when the Tracker stops, SIGTERM's disposition is the default again."""
    prog = tmp_path / "prog.py"
    prog.write_text("""\
import os, signal, sys
import memtrace


def keep():
    return bytearray(10**7)


def caught():
    for line in open("/proc/self/status"):
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1


with memtrace.Tracker(sys.argv[1]):
    print(caught(), flush=True)
print(caught(), flush=True)
with memtrace.Tracker(sys.argv[2]):
    x = keep()
    os.kill(os.getpid(), signal.SIGTERM)
""")
    cap, first = tmp_path / "t.bin", tmp_path / "first.bin"
    p = run("/usr/bin/python3", prog, first, cap, env=py_env(), check=False)
    assert p.returncode == -signal.SIGTERM, p.stderr
    assert p.stdout == "1\n0\n"
    check_ended_by(memtrace, cap, prog, "SIGTERM")


def dispositions(pid):
    """The signals @pid catches and those it ignores, from /proc."""
    sets = {}
    for line in open("/proc/%d/status" % pid):
        key, _, value = line.partition(":")
        if key in ("SigCgt", "SigIgn"):
            mask = int(value, 16)
            sets[key] = {sig for sig in range(1, 65) if mask >> (sig - 1) & 1}
    return sets["SigCgt"], sets["SigIgn"]


@pytest.mark.parametrize("python", python_params())
def test_attached_target_killed_and_detached_target_restored(memtrace, script, tmp_path,
                                                            python):
    """Attached, memtrace catches the terminating signals whose
    disposition was the default, and no other; detached, the target's
    dispositions are back exactly. A target SIGTERM kills while attached
    leaves a complete capture."""
    from attach_target import TARGET
    prog = script(TARGET, name="target.py")
    t = Target(python, prog, "sleep")
    try:
        caught, ignored = dispositions(t.pid)
        attach(memtrace, t.pid, tmp_path / "a.bin")
        t.cmd("alloc 1000")
        now, _ = dispositions(t.pid)
        assert now == caught | {signal.SIGSEGV, signal.SIGBUS} | (TERMINATING - caught - ignored)
        detach(memtrace, t.pid)
        assert dispositions(t.pid) == (caught, ignored)
        cap = tmp_path / "b.bin"
        attach(memtrace, t.pid, cap)
        t.cmd("alloc 1000")
        t.p.send_signal(signal.SIGTERM)
        assert t.p.wait(timeout=60) == -signal.SIGTERM
    finally:
        t.kill()
    stats = report_json(memtrace, "stats", cap)
    assert stats["status"]["complete"], stats["status"]
    assert [d["message"] for d in stats["diagnostics"]][-1:] == [
        "ended by signal SIGTERM: the capture is complete up to it"]
    leaks = report_json(memtrace, "summary", cap, "--leaks")["rows"]
    assert any(r["function"] == "leak_here" for r in leaks), leaks


# ---------------------------------------------------------------------------
# ^C on a terminal (item 15)

SLEEPER = """\
import time
print("ready", flush=True)
time.sleep(30)
"""


def python_pid(pid, under_memtrace):
    if not under_memtrace:
        return pid
    kids = open("/proc/%d/task/%d/children" % (pid, pid)).read().split()
    return int(kids[0]) if kids else None


def sleeping(pid):
    """The main thread of @pid is asleep (in time.sleep: nothing else in
    the program blocks)."""
    try:
        stat = open("/proc/%d/stat" % pid).read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] == "S"


def on_pty(argv, cwd, under_memtrace, ready=lambda out: b"ready\r\n" in out):
    """Run @argv as the foreground process group of a new terminal, type
    ^C once it is @ready and sleeps, and return what the terminal showed
    and how it ended. Ready means its whole line was read: the ^C makes
    the terminal drop the output not read yet (a line end, say)."""
    pid, master = pty.fork()
    if pid == 0:
        try:
            os.chdir(str(cwd))
            os.execv(argv[0], [str(a) for a in argv])
        finally:
            os._exit(127)
    out = b""
    deadline = time.monotonic() + 60
    sent = False
    while time.monotonic() < deadline:
        if not sent and ready(out):
            py = python_pid(pid, under_memtrace)
            if py and sleeping(py):
                os.write(master, b"\x03")
                sent = True
        r, _, _ = select.select([master], [], [], 0.01)
        if r:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the last process holding the terminal ended
                break
            if not data:
                break
            out += data
    _, status = os.waitpid(pid, 0)
    os.close(master)
    assert sent, out
    return out.decode().replace("\r\n", "\n"), status


@pytest.mark.parametrize("python", python_params())
def test_ctrl_c_on_a_terminal(memtrace, script, tmp_path, python):
    """^C goes to the terminal's whole foreground group, memtrace run and
    the program alike: the program gets it once, and shows what it shows
    without memtrace (its KeyboardInterrupt traceback), nothing more."""
    prog = script(SLEEPER)
    bare, bare_status = on_pty([python, prog], tmp_path, False)
    cap = tmp_path / "c.bin"
    traced, status = on_pty([memtrace, "run", "--python", python, "-o", cap, prog], tmp_path,
                            True)
    ours = [l for l in traced.splitlines(True) if l.startswith("memtrace: ")]
    program = "".join(l for l in traced.splitlines(True) if not l.startswith("memtrace: "))
    assert "KeyboardInterrupt" in bare
    assert program == bare
    assert "lost sys.stderr" not in traced and "Exception ignored" not in traced
    assert status == bare_status
    assert ours == ["memtrace: the program was killed by SIGINT after tracking ended; capture "
                    "written to %s\n" % cap], traced
    assert report_json(memtrace, "stats", cap)["status"]["complete"]


def test_ctrl_c_ends_live_view_and_program_once(memtrace, script, tmp_path):
    """With --live the view has the terminal and the program's output goes
    to FILE.log: ^C ends both, and the program gets it once, as it does
    without memtrace."""
    prog = script(SLEEPER)
    with open(str(tmp_path / "bare.log"), "w") as out:
        bare = subprocess.Popen(["/usr/bin/python3", str(prog)], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out)
        deadline = time.monotonic() + 60
        while not ((tmp_path / "bare.log").read_text() and sleeping(bare.pid)):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        bare.send_signal(signal.SIGINT)
        bare_status = bare.wait(timeout=60)
    cap, log = tmp_path / "c.bin", tmp_path / "c.log"
    _, status = on_pty([memtrace, "run", "--live", "--python", "/usr/bin/python3", "-o", cap,
                        prog], tmp_path, True,
                       ready=lambda out: log.exists() and "ready" in log.read_text())
    assert bare_status == -signal.SIGINT
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGINT
    assert "KeyboardInterrupt" in log.read_text()
    assert log.read_text() == (tmp_path / "bare.log").read_text()
