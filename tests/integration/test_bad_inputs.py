"""Bad input, command group by command group: each gets one line on stderr
naming what is wrong and a non-zero exit (the Python API: an exception
saying so), and changes nothing. Pids that name no process memtrace can
attach to (a thread of one, a kernel thread), standard output on a full
disk, an output that cannot be made, an empty capture path."""

import os
import subprocess

import pytest

from conftest import BUILD, ROOT, run

THREADED = """\
import sys, threading, time
threading.Thread(target=time.sleep, args=(300,), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def one_line(p, rc=1):
    assert p.returncode == rc and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith("memtrace: ") and p.stderr.count("\n") == 1, p.stderr
    return p.stderr.rstrip("\n")


def _kernel_thread():
    """A kernel thread's pid and name (kthreadd, pid 2, where this pid
    namespace shows it), or None."""
    try:
        with open("/proc/2/status") as f:
            status = f.read()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if fields.get("Name", "").strip() != "kthreadd":
        return None
    return 2, "kthreadd"


@pytest.fixture
def threaded(tmp_path):
    """A Python process with a second thread: (its pid, the thread's id)."""
    prog = tmp_path / "threaded.py"
    prog.write_text(THREADED)
    p = subprocess.Popen(["/usr/bin/python3", str(prog)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, universal_newlines=True)
    try:
        assert p.stdout.readline() == "ready\n"
        tids = [int(t) for t in os.listdir("/proc/%d/task" % p.pid) if int(t) != p.pid]
        assert tids, "no second thread"
        yield p.pid, tids[0]
    finally:
        p.kill()
        p.wait()


def _mapped(pid, what):
    with open("/proc/%d/maps" % pid) as f:
        return what in f.read()


@pytest.mark.parametrize("cmd", ["attach", "detach"])
@pytest.mark.parametrize("kind", ["thread of a process", "kernel thread"])
def test_pids_that_are_no_process(memtrace, tmp_path, threaded, cmd, kind):
    """/proc answers for a thread's id as for a process: attach used to
    load its payload into the thread's process, then fail to reach it
    ("Connection refused") and leave it there; detach said "not
    attached" of a process it had attached. A kernel thread was "the
    kernel refused (not dumpable...)"."""
    cap = tmp_path / "c.bin"
    argv = [memtrace, cmd] + (["-o", cap] if cmd == "attach" else [])
    if kind == "kernel thread":
        k = _kernel_thread()
        if k is None:
            pytest.skip("no kernel thread in this pid namespace")
        msg = one_line(run(*argv, k[0], check=False, timeout=30))
        assert msg == "memtrace: pid %d (%s) is a kernel thread, not a Python process" % k, msg
    else:
        pid, tid = threaded
        msg = one_line(run(*argv, tid, check=False, timeout=30))
        assert msg == "memtrace: pid %d is a thread of pid %d (python3): give the process's " \
            "pid, %d" % (tid, pid, pid), msg
        assert not _mapped(pid, "memtrace"), "the payload was loaded"
    assert not cap.exists()


# -- standard output on a full disk ------------------------------------------

PROG = """\
keep = [bytearray(10_000 * (i % 7 + 1)) for i in range(200)]
"""


@pytest.fixture(scope="module")
def capture(memtrace, tmp_path_factory):
    d = tmp_path_factory.mktemp("capture")
    (d / "prog.py").write_text(PROG)
    run(memtrace, "run", "-q", "-o", d / "c.bin", d / "prog.py")
    return d / "c.bin"


@pytest.mark.parametrize("args", [
    ["--help"], ["--version"], ["help"], ["stats", "--help"],
    ["stats", "CAP"], ["stats", "--json", "CAP"], ["stats", "-o", "-", "CAP"],
    ["summary", "CAP"], ["tree", "CAP"], ["parse", "CAP"],
    ["transform", "-o", "-", "csv", "CAP"], ["flamegraph", "-o", "-", "CAP"],
    ["table", "-o", "-", "CAP"], ["growth", "--json", "CAP"], ["growth", "-o", "-", "CAP"],
    ["diff", "CAP", "CAP"], ["diff", "-o", "-", "CAP", "CAP"], ["live", "--once", "CAP"],
], ids=" ".join)
def test_standard_output_on_a_full_disk(memtrace, capture, args):
    """Said once, with the reason: --help and --version exited 0 having
    written nothing; a page, JSON or records that did not fit said
    "cannot write the report" (the records: "Input/output error") and
    then "write failure on standard output" again."""
    argv = [memtrace] + [str(capture) if a == "CAP" else a for a in args]
    with open("/dev/full", "w") as full:
        p = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, universal_newlines=True,
                           timeout=60)
    said = [l for l in p.stderr.splitlines() if not l.startswith("memtrace: note: ")]
    assert p.returncode == 1 and said == \
        ["memtrace: write failure on standard output: No space left on device"], p.stderr


# -- an output that cannot be made -------------------------------------------

OUTPUTS = [(["flamegraph", "--leaks"], "flamegraph page"), (["table", "--leaks"], "table page"),
           (["growth", "--html"], "growth page"), (["transform", "csv"], "csv file"),
           (["stats"], "stats file"), (["diff", "CAP"], "diff page")]


@pytest.mark.parametrize("args,what", OUTPUTS, ids=[" ".join(a) for a, _ in OUTPUTS])
@pytest.mark.parametrize("where,why", [
    ("no/such/dir/out", "No such file or directory"),
    ("c.bin/out", "Not a directory"),
    ("x" * 300, "File name too long"),
], ids=["no directory", "a file for a directory", "name too long"])
def test_output_that_cannot_be_made_is_said_before_the_read(memtrace, capture, tmp_path,
                                                           args, what, where, why):
    """Said before the capture is read, in one line: it used to be found
    only when the page was written, after the read and after the note a
    leaks view gives (growth, flamegraph --leaks, table --leaks: two
    lines)."""
    cap = tmp_path / "c.bin"
    cap.write_bytes(capture.read_bytes())
    out = str(tmp_path / where)
    operands = [cap if a == "CAP" else a for a in args[1:]] + [cap]
    msg = one_line(run(memtrace, args[0], "-o", out, *operands, check=False, timeout=60))
    assert msg == "memtrace: cannot create %s '%s': %s" % (what, out, why), msg
    assert sorted(os.listdir(tmp_path)) == ["c.bin"]


# -- /dev/stdout and its kind ------------------------------------------------

@pytest.mark.parametrize("args", [["stats"], ["flamegraph"], ["table"], ["transform", "csv"],
                                  ["growth"], ["diff", "CAP"]], ids=" ".join)
@pytest.mark.parametrize("force", [[], ["-f"]], ids=["", "-f"])
def test_output_linked_to_standard_output(memtrace, capture, tmp_path, args, force):
    """A link to our standard output (as /dev/stdout is; made here, never
    the system's) is written through, as memray writes -o /dev/stdout: it
    was said to exist, and with -f replaced by a regular file, which as
    root destroyed /dev/stdout itself."""
    link = tmp_path / "stdout"
    os.symlink("/proc/self/fd/1", link)
    operands = [capture if a == "CAP" else a for a in args[1:]] + [capture]
    p = run(memtrace, args[0], *force, "-o", link, *operands, timeout=60)
    assert os.readlink(link) == "/proc/self/fd/1"
    assert p.stdout.startswith(("<!DOCTYPE html>", "{", "allocator,")), p.stdout[:200]
    assert "wrote" not in p.stdout


STREAMS = [(["stats"], 2), (["flamegraph"], 2), (["run", "-c", "pass"], 1),
           (["run", "-c", "pass"], 2), (["attach", "PID"], 1), (["attach", "PID"], 2)]


@pytest.mark.parametrize("args,fd", STREAMS,
                         ids=["%s %s" % (a[0], ("stdout", "stderr")[fd - 1]) for a, fd in STREAMS])
def test_no_file_made_for_a_standard_stream(memtrace, capture, tmp_path, threaded, args, fd):
    """A capture is never written to a standard stream, nor a report to
    standard error: said in one line, with -f too, the link left alone."""
    link = tmp_path / "stream"
    os.symlink("/proc/self/fd/%d" % fd, link)
    operands = [threaded[0] if a == "PID" else a for a in args[1:]]
    if args[0] not in ("run", "attach"):
        operands.append(capture)
    what = {"stats": "stats file", "flamegraph": "flamegraph page"}.get(args[0], "capture")
    p = run(memtrace, args[0], "-f", "-o", link, *operands, check=False, timeout=60)
    name = ("output", "error")[fd - 1]
    assert one_line(p) == "memtrace: %s '%s' is standard %s, not a file" % (what, link, name)
    assert os.readlink(link) == "/proc/self/fd/%d" % fd


# -- numbers that are not digits ---------------------------------------------

NUMBERS = [("run", "--memory-interval-ms", "1..3600000", [" 3", "+3"]),
           ("run", "--live-port", "0..65535", [" 3", "+3"]),
           ("attach", "--memory-interval-ms", "1..3600000", [" 3", "+3"]),
           ("attach", "--duration", "seconds", [" 3", "+3", "0x10", "1e3"])]


@pytest.mark.parametrize("cmd,name,said,value", [
    (c, n, s, v) for c, n, s, vs in NUMBERS for v in vs
], ids=lambda v: repr(v) if v.strip() != v or v.startswith("+") else v)
def test_numbers_are_digits(memtrace, tmp_path, cmd, name, said, value):
    """A sign, a space in front, hex or an exponent is refused as the
    counts refuse them: strtol() and strtod() took them, --duration 0x10
    as 16 seconds, and run --live-remote -p ' 3' listened on port 3."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    argv = ([name, value, "--live-remote", "-c", "pass"] if name == "--live-port" else
            [name, value, "-c", "pass"] if cmd == "run" else [name, value, gone.pid])
    p = run(memtrace, cmd, *argv, check=False, cwd=tmp_path, timeout=20)
    assert one_line(p, rc=2) == "memtrace: invalid %s '%s' (%s)" % (name, value, said)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value", [" 3", "+3", "0x10", "1e3", "3.", ".5.5", ""])
def test_live_interval_is_digits(memtrace, capture, value):
    """live's --interval as --duration: digits with one '.' at most, or
    the error (strtod() took " 3", "0x10" as 16 s and "1e3" as 1000 s)."""
    p = run(memtrace, "live", "--interval", value, "--once", capture, check=False, timeout=20)
    if value == "3.":
        assert p.returncode == 0 and p.stderr == "", p.stderr
        return
    assert one_line(p, rc=2) == ("memtrace: live: --interval wants seconds from 0.05 to 3600, "
                                 "not '%s'" % value)


# -- names with control characters -------------------------------------------

@pytest.mark.parametrize("args,said", [
    (["stats", "no\nsuch.bin"], "cannot read 'no\\nsuch.bin': No such file or directory"),
    (["flamegraph", "-o", "x\ny/p.html", "CAP"],
     "cannot create flamegraph page 'x\\ny/p.html': No such file or directory"),
    (["attach", "12\n"], "invalid pid '12\\n'"),
    (["run", "-o", "no\x1b[31m/c.bin", "-c", "pass"],
     "cannot create capture 'no\\x1b[31m/c.bin': No such file or directory"),
], ids=["stats", "flamegraph -o", "attach", "run -o"])
def test_control_characters_in_a_name_are_escaped(memtrace, capture, tmp_path, args, said):
    """A name quoted in an error keeps it one line, and no escape
    sequence reaches the terminal: a newline in a file name made two
    lines of one message."""
    argv = [capture if a == "CAP" else a for a in args]
    p = run(memtrace, *argv, check=False, cwd=tmp_path, timeout=60)
    assert p.stdout == "" and p.stderr == "memtrace: %s\n" % said, p.stderr
    assert p.returncode in (1, 2)


# -- a long path -------------------------------------------------------------

@pytest.mark.parametrize("how", ["stats", "parse", "flamegraph", "diff", "live", "FileReader"])
def test_a_long_path_keeps_the_reason(memtrace, capture, tmp_path, how):
    """The message quotes the whole path and still says why: a path of a
    few thousand characters (15 directories of 200) was cut with the
    message at 512 or 600 bytes (FileReader's at 1024), reason and all."""
    path = str(tmp_path / "/".join(["d" * 200] * 15) / "c.bin")
    if how == "FileReader":
        code = ("import sys, memtrace\n"
                "try:\n"
                "    memtrace.FileReader(sys.argv[1])\n"
                "except OSError as e:\n"
                "    sys.exit('memtrace: ' + e.strerror)\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD)
        p = run("/usr/bin/python3", "-c", code, path, env=env, check=False)
    elif how == "live":
        p = run(memtrace, how, "--once", path, check=False)
    else:
        p = run(memtrace, how, *([capture] if how == "diff" else []), path, check=False)
    lead = "memtrace: %s: " % how if how in ("diff", "live") else "memtrace: "
    assert one_line(p) == "%scannot read '%s': No such file or directory" % (lead, path), \
        p.stderr[-200:]


# -- an empty value ----------------------------------------------------------

def test_run_of_an_empty_module_name(memtrace, tmp_path):
    """-m '' is said to be empty, as -o '' is: python said "No module
    named", then memtrace that a capture (memtrace-.PID.bin) was written."""
    p = run(memtrace, "run", "-m", "", check=False, cwd=tmp_path, timeout=60)
    assert one_line(p, rc=2) == "memtrace: run: the module name is empty (-m '')"
    assert os.listdir(tmp_path) == []


# -- the Python API ----------------------------------------------------------

def test_tracker_of_an_empty_path(tmp_path):
    """An empty path is said to be empty when the Tracker is made, as the
    commands' -o '' is: it was taken for the current directory, and
    entering the Tracker said "capture path is a directory: ''"."""
    code = ("import memtrace\n"
            "for make in (lambda: memtrace.Tracker(''),\n"
            "             lambda: memtrace.Tracker(destination=memtrace.FileDestination(b''))):\n"
            "    try:\n"
            "        with make():\n"
            "            pass\n"
            "    except OSError as e:\n"
            "        print(type(e).__name__, e)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD)
    p = run("/usr/bin/python3", "-c", code, env=env, cwd=tmp_path)
    assert p.stdout == "FileNotFoundError [Errno 2] capture path is empty: ''\n" \
        "FileNotFoundError [Errno 2] capture path is empty: b''\n", p.stdout
    assert os.listdir(tmp_path) == []


# -- MEMTRACE_PAYLOAD naming another file ------------------------------------

@pytest.mark.parametrize("cmd", ["run", "attach"])
@pytest.mark.parametrize("kind,why", [
    ("text", "not a 64-bit ELF file"),
    ("another library", "it exports no memtrace_attach_entry"),
], ids=["text", "another library"])
def test_payload_that_is_not_memtraces(memtrace, tmp_path, threaded, cmd, kind, why):
    """run preloaded it in vain: ld.so's error from each process of the
    interpreter (35 lines through pyenv's shim), then "no Python
    interpreter started under memtrace"; attach loaded the library into
    the process before finding it had no entry."""
    if kind == "text":
        payload = tmp_path / "payload.so"
        payload.write_text("not a library\n")
    else:
        payload = os.path.join(BUILD, "reader", "libmemtrace-reader.so")
    env = dict(os.environ, MEMTRACE_PAYLOAD=str(payload))
    cap = tmp_path / "c.bin"
    target = ["-c", "pass"] if cmd == "run" else [threaded[0]]
    msg = one_line(run(memtrace, cmd, "-o", cap, *target, env=env, check=False, timeout=60))
    assert msg == "memtrace: payload '%s' (MEMTRACE_PAYLOAD) is not memtrace's: %s" \
        % (payload, why), msg
    assert not cap.exists()
    if cmd == "attach":
        assert not _mapped(threaded[0], str(payload))


@pytest.mark.parametrize("fd", [1, 2], ids=["stdout", "stderr"])
def test_tracker_never_replaces_a_standard_stream(tmp_path, fd):
    """FileDestination(path, overwrite=True) replaced a link to a standard
    stream by a new file, as it does any link: as root, /dev/stdout."""
    link = tmp_path / "stream"
    os.symlink("/proc/self/fd/%d" % fd, link)
    code = ("import sys, memtrace\n"
            "try:\n"
            "    with memtrace.Tracker(destination=memtrace.FileDestination(sys.argv[1],\n"
            "                                                             overwrite=True)):\n"
            "        pass\n"
            "except OSError as e:\n"
            "    sys.stdout.write('%s %s\\n' % (type(e).__name__, e))\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD)
    p = run("/usr/bin/python3", "-c", code, link, env=env)
    name = ("output", "error")[fd - 1]
    assert p.stdout == "OSError [Errno 22] capture path is standard %s, not a file: '%s'\n" \
        % (name, link), p.stdout
    assert os.readlink(link) == "/proc/self/fd/%d" % fd
