"""How memtrace creates its files: a capture, a report page, run --live's
.log and a Tracker's capture are always new regular files, never opened
through a symbolic link that another user planted (checked as a real
second uid, 65534, against root-run commands), never a FIFO, device,
directory or socket (a one-line error, not a hang); and a script python
would refuse leaves no capture behind."""

import os
import shutil
import socket
import stat
import subprocess
import tempfile

import pytest

from conftest import ROOT, run, skip_unless_other_users_can

NOBODY = 65534
PYTHON_DIR = os.path.join(ROOT, "python")

SLEEPER = """\
import sys
print("ready", flush=True)
keep = []
for line in sys.stdin:
    keep.append(bytearray(100_000))
    print("done", flush=True)
"""


def _setpriv(uid):
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups"]


def one_line_error(p):
    assert p.returncode != 0, p.stderr
    assert p.stderr.startswith("memtrace: ") and p.stderr.count("\n") == 1, p.stderr
    return p.stderr


def bins(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".bin"))


class Sleeper:
    """A Python process that waits on its standard input (as @uid)."""

    def __init__(self, prog, uid=None, cwd=None):
        cmd = (_setpriv(uid) if uid is not None else []) + ["/usr/bin/python3", str(prog)]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  universal_newlines=True, cwd=cwd)
        self.pid = self.p.pid
        assert self.p.stdout.readline().strip() == "ready"

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


@pytest.fixture
def capture(memtrace, script, tmp_path):
    prog = script("keep = bytearray(1_000_000)\n", name="cap.py")
    cap = tmp_path / "source.bin"
    run(memtrace, "run", "-o", cap, prog)
    return cap


# -- a symbolic link planted by another user ---------------------------------

@pytest.fixture
def nobody_dir(memtrace):
    """A directory uid 65534 owns (and the memtrace tree searchable by it),
    with a root-owned victim outside it and a helper to plant links."""
    skip_unless_other_users_can("act as another user", os.path.dirname(memtrace))
    top = tempfile.mkdtemp(prefix="memtrace-hardening-", dir="/tmp")
    os.chmod(top, 0o755)
    victim = os.path.join(top, "victim")
    with open(victim, "w") as f:
        f.write("root's own\n")
    os.chmod(victim, 0o640)
    mine = os.path.join(top, "nobody")
    os.mkdir(mine)
    os.chown(mine, NOBODY, NOBODY)
    os.chmod(mine, 0o755)

    class Dir:
        path = mine
        target = victim

        def plant(self, name):
            link = os.path.join(mine, name)
            run(*(_setpriv(NOBODY) + ["ln", "-s", victim, link]))
            assert os.lstat(link).st_uid == NOBODY
            return link

        def victim_intact(self):
            sb = os.lstat(victim)
            with open(victim) as f:
                assert f.read() == "root's own\n"
            assert stat.S_ISREG(sb.st_mode) and sb.st_uid == 0 and sb.st_gid == 0
            assert stat.S_IMODE(sb.st_mode) == 0o640

    yield Dir()
    shutil.rmtree(top, ignore_errors=True)


def regular_or_error(p, path, owner=0):
    """After -f onto a planted link: a new regular file (of @owner) in the
    link's place, or an error that left the link alone."""
    sb = os.lstat(path)
    if p.returncode == 0:
        assert stat.S_ISREG(sb.st_mode) and sb.st_uid == owner, (sb, p.stderr)
    else:
        one_line_error(p)


def test_run_f_onto_planted_link(memtrace, nobody_dir, script):
    link = nobody_dir.plant("cap.bin")
    p = run(memtrace, "run", "-f", "-o", link, "-c", "x = bytearray(1000)", check=False, timeout=60)
    nobody_dir.victim_intact()
    regular_or_error(p, link)
    assert p.returncode == 0 and stat.S_IMODE(os.lstat(link).st_mode) == 0o600
    run(memtrace, "stats", link)


def test_run_without_f_refuses_planted_link(memtrace, nobody_dir):
    link = nobody_dir.plant("cap.bin")
    p = run(memtrace, "run", "-o", link, "-c", "pass", check=False, timeout=60)
    assert "exists (use -f to overwrite it)" in one_line_error(p)
    nobody_dir.victim_intact()
    assert os.path.islink(link)


def test_run_live_log_onto_planted_link(memtrace, nobody_dir):
    cap = os.path.join(nobody_dir.path, "c.bin")
    log = nobody_dir.plant("c.log")
    p = run(memtrace, "run", "--live", "-f", "-o", cap, "-c", "print('hi')", check=False,
            timeout=60)
    nobody_dir.victim_intact()
    regular_or_error(p, log)
    with open(log) as f:
        assert f.read() == "hi\n"


@pytest.mark.parametrize("cmd", ["flamegraph", "table"])
def test_report_page_onto_planted_link(memtrace, nobody_dir, capture, cmd):
    link = nobody_dir.plant("page.html")
    p = run(memtrace, cmd, "-f", "-o", link, capture, check=False, timeout=60)
    nobody_dir.victim_intact()
    regular_or_error(p, link)
    assert p.returncode == 0 and stat.S_IMODE(os.lstat(link).st_mode) == 0o644
    with open(link) as f:
        assert "<html" in f.read(4096).lower()


def test_attach_f_onto_planted_link(memtrace, nobody_dir):
    """The attack as filed: root attaches to a process of uid 65534 with
    -f onto the link that user planted; the capture must be a new file,
    not the link's target, and stays root's (the payload gets it open)."""
    prog = os.path.join(nobody_dir.path, "target.py")
    with open(prog, "w") as f:
        f.write(SLEEPER)
    os.chmod(prog, 0o644)
    link = nobody_dir.plant("cap.bin")
    t = Sleeper(prog, uid=NOBODY, cwd=nobody_dir.path)
    try:
        p = run(memtrace, "attach", "-f", "-o", link, t.pid, check=False, timeout=60)
        nobody_dir.victim_intact()
        regular_or_error(p, link, owner=0)
        assert p.returncode == 0, p.stderr
        t.p.stdin.write("x\n")
        t.p.stdin.flush()
        assert t.p.stdout.readline().strip() == "done"
        run(memtrace, "detach", t.pid, timeout=60)
        nobody_dir.victim_intact()
        run(memtrace, "stats", link)
    finally:
        t.kill()


def test_attach_without_f_refuses_planted_link(memtrace, nobody_dir):
    """Without -f the planted link is refused, and nothing is chowned."""
    prog = os.path.join(nobody_dir.path, "target.py")
    with open(prog, "w") as f:
        f.write(SLEEPER)
    os.chmod(prog, 0o644)
    link = nobody_dir.plant("cap.bin")
    t = Sleeper(prog, uid=NOBODY, cwd=nobody_dir.path)
    try:
        p = run(memtrace, "attach", "-o", link, t.pid, check=False, timeout=60)
        assert "exists (use -f to overwrite it)" in one_line_error(p)
        nobody_dir.victim_intact()
        assert os.path.islink(link)
    finally:
        t.kill()


def test_tracker_overwrite_onto_planted_link(nobody_dir):
    """FileDestination(overwrite=True) replaces a link, never writes
    through it."""
    link = nobody_dir.plant("cap.bin")
    code = ("import memtrace\n"
            "with memtrace.Tracker(destination=memtrace.FileDestination(%r, overwrite=True)):\n"
            "    x = bytearray(100_000)\n" % link)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    p = run("/usr/bin/python3", "-c", code, env=env, check=False, timeout=60)
    nobody_dir.victim_intact()
    assert p.returncode == 0, p.stderr
    sb = os.lstat(link)
    assert stat.S_ISREG(sb.st_mode) and sb.st_uid == 0 and stat.S_IMODE(sb.st_mode) == 0o600


# -- not a regular file ------------------------------------------------------

@pytest.fixture(params=["fifo", "device", "directory", "socket"])
def odd_path(request, tmp_path):
    """A path that exists and is no regular file."""
    kind = request.param
    if kind == "device":
        # (not /dev/null: run, Tracker and the pages write there, as memray's)
        yield "/dev/zero", "a character device"
        return
    path = tmp_path / ("odd-" + kind)
    sock = None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
    yield str(path), {"fifo": "a FIFO", "directory": "a directory", "socket": "a socket"}[kind]
    if sock:
        sock.close()


def test_run_f_to_non_regular_file(memtrace, odd_path, tmp_path):
    path, kind = odd_path
    p = run(memtrace, "run", "-f", "-o", path, "-c", "print('ran')", check=False, timeout=20,
            cwd=tmp_path)
    assert "'%s' is %s, not a regular file" % (path, kind) in one_line_error(p)
    assert p.stdout == ""  # nothing started
    assert os.path.exists(path) and not os.path.isfile(path)


def test_run_to_a_name_ending_with_a_slash(memtrace, tmp_path):
    """-o NAME/: a directory is said to be one; a file or nothing there is
    not taken for a directory."""
    (tmp_path / "file.bin").write_text("")
    (tmp_path / "dir").mkdir()
    for out, said in (("dir/", "is a directory, not a regular file"),
                      ("file.bin/", "names a directory (it ends with '/'), not a file"),
                      ("none/", "names a directory (it ends with '/'), not a file")):
        p = run(memtrace, "run", "-f", "-o", out, "-c", "print('ran')", check=False,
                timeout=20, cwd=tmp_path)
        assert one_line_error(p) == "memtrace: capture '%s' %s\n" % (out, said)
        assert p.stdout == ""
    assert sorted(os.listdir(tmp_path)) == ["dir", "file.bin"]


def test_attach_f_to_non_regular_file(memtrace, odd_path, script, tmp_path):
    path, kind = odd_path
    t = Sleeper(script(SLEEPER, name="target.py"))
    try:
        p = run(memtrace, "attach", "-f", "-o", path, t.pid, check=False, timeout=20)
        assert "'%s' is %s, not a regular file" % (path, kind) in one_line_error(p)
        assert "none" == _control_status(t.pid)  # nothing was injected
    finally:
        t.kill()
    assert os.path.exists(path) and not os.path.isfile(path)


@pytest.mark.parametrize("cmd", ["flamegraph", "table"])
def test_report_f_to_non_regular_file(memtrace, odd_path, capture, cmd):
    path, kind = odd_path
    p = run(memtrace, cmd, "-f", "-o", path, capture, check=False, timeout=20)
    assert "%s page '%s' is %s, not a regular file" % (cmd, path, kind) in one_line_error(p)
    assert os.path.exists(path) and not os.path.isfile(path)


def test_run_tracker_and_pages_to_dev_null(memtrace, capture, tmp_path):
    """memray's /dev/null: the capture (or page) is written and thrown away;
    the program runs as ever, and a followed child makes no file."""
    prog = tmp_path / "prog.py"
    prog.write_text("import os\nx = [bytearray(100) for _ in range(1000)]\npid = os.fork()\n"
                    "if pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nprint('ran')\n")
    before = sorted(os.listdir("/dev"))
    p = run(memtrace, "run", "--follow-fork", "--native", "-o", "/dev/null", "--python",
            "/usr/bin/python3", prog, cwd=tmp_path)
    assert p.stdout == "ran\n" and "capture written to /dev/null" in p.stderr, p.stderr
    p = run(memtrace, "run", "-q", "-o", "/dev/null", "-c", "import sys; sys.exit(3)",
            check=False, cwd=tmp_path)
    assert p.returncode == 3 and p.stderr == "", p.stderr
    p = run(memtrace, "run", "-o", "/dev/null", "--live", "-c", "pass", check=False,
            cwd=tmp_path)
    assert p.returncode == 2 and "not with -o /dev/null" in one_line_error(p)
    for cmd in ("flamegraph", "table"):
        run(memtrace, cmd, "-o", "/dev/null", capture)
    code = ("import memtrace, os\n"
            "with memtrace.Tracker('/dev/null', follow_fork=True):\n"
            "    pid = os.fork()\n"
            "    if pid == 0:\n"
            "        os._exit(0)\n"
            "    os.waitpid(pid, 0)\n"
            "print('tracked')\n")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    p = run("/usr/bin/python3", "-c", code, env=env, timeout=20, cwd=tmp_path)
    assert p.stdout == "tracked\n", p.stdout + p.stderr
    assert sorted(os.listdir("/dev")) == before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    made = [f for f in os.listdir(tmp_path) if f.startswith(("memtrace-", "null"))]
    assert made == [], made


def test_tracker_to_fifo(tmp_path):
    fifo = tmp_path / "c.fifo"
    os.mkfifo(fifo)
    code = ("import memtrace\n"
            "try:\n"
            "    with memtrace.Tracker(destination=memtrace.FileDestination(%r, overwrite=True)):\n"
            "        pass\n"
            "except OSError as e:\n"
            "    print(type(e).__name__, e.strerror)\n" % str(fifo))
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    p = run("/usr/bin/python3", "-c", code, env=env, timeout=20)
    assert p.stdout == "OSError capture path is not a regular file\n", p.stdout
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def _control_status(pid):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(5)
            c.connect("\0memtrace-%d" % pid)
            c.sendall(b"status\n")
            return c.recv(4096).decode()
    except ConnectionRefusedError:
        return "none"


# -- a script python would refuse --------------------------------------------

@pytest.mark.parametrize("case", ["missing", "elf", "nul-bytes", "dir-without-main"])
def test_bad_script_leaves_no_capture(memtrace, tmp_path, case):
    if case == "missing":
        target, want = "nosuch.py", "run: can't open file 'nosuch.py': No such file or directory"
    elif case == "elf":
        target, want = "/bin/ls", "run: '/bin/ls' is an executable (ELF), not a Python script"
    elif case == "nul-bytes":
        (tmp_path / "data.py").write_bytes(b"print(1)\n\0\0\0")
        target, want = "data.py", "run: 'data.py' is not a Python script (it holds NUL bytes)"
    else:
        (tmp_path / "pkg").mkdir()
        target, want = "pkg", "run: 'pkg' is a directory without a __main__ module"
    p = run(memtrace, "run", target, check=False, cwd=tmp_path, timeout=20)
    assert one_line_error(p) == "memtrace: %s\n" % want
    assert p.returncode == 2
    assert bins(tmp_path) == []
    p = run(memtrace, "run", "-o", tmp_path / "named.bin", target, check=False, cwd=tmp_path,
            timeout=20)
    assert p.returncode == 2 and bins(tmp_path) == []


def test_scripts_python_runs_are_not_refused(memtrace, tmp_path):
    """A zip application, compiled bytecode and a package directory run
    as they would under python."""
    import zipfile
    app = tmp_path / "app.pyz"
    with open(app, "wb") as f:
        f.write(b"#!/usr/bin/env python3\n")
        with zipfile.ZipFile(f, "w") as z:
            z.writestr("__main__.py", "print('zip ran')\n")
    (tmp_path / "src.py").write_text("print('pyc ran')\n")
    python = shutil.which("python3")
    run(python, "-c", "import py_compile; py_compile.compile('src.py', cfile='compiled.pyc')",
        cwd=tmp_path)
    shutil.copy(tmp_path / "compiled.pyc", tmp_path / "compiled_noext")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__main__.py").write_text("print('dir ran')\n")
    for target, out in [("app.pyz", "zip ran"), ("compiled.pyc", "pyc ran"),
                        ("compiled_noext", "pyc ran"), ("pkg", "dir ran")]:
        cap = tmp_path / (target + ".bin")
        p = run(memtrace, "run", "--python", python, "-o", cap, target, cwd=tmp_path, timeout=60)
        assert p.stdout == out + "\n", (target, p.stderr)
        assert "capture written" in p.stderr


# -- what a command reads is never what it writes ------------------------------

def test_run_refuses_to_write_the_capture_over_its_script(memtrace, script):
    prog = script("keep = bytearray(1000)\n", name="prog.py")
    before = prog.read_bytes()
    p = subprocess.run([memtrace, "run", "-f", "-o", str(prog), str(prog)],
                       capture_output=True, text=True, timeout=60)
    assert "capture '%s' is the script to run" % prog in one_line_error(p)
    assert prog.read_bytes() == before


@pytest.mark.parametrize("cmd", [["flamegraph"], ["table"], ["transform", "csv"],
                                 ["stats", "--json"], ["growth", "--html"],
                                 ["diff", "--html", "OTHER"]])
@pytest.mark.parametrize("name", ["same", "hard link"])
def test_report_refuses_to_write_over_the_capture_it_reads(memtrace, capture, tmp_path, cmd,
                                                          name):
    before = capture.read_bytes()
    out = capture
    if name == "hard link":
        out = tmp_path / "link.bin"
        os.link(capture, out)
    args = [str(capture) if a == "OTHER" else a for a in cmd]
    p = subprocess.run([memtrace] + args + ["-f", "-o", str(out), str(capture)],
                       capture_output=True, text=True, timeout=60)
    assert "'%s' is the capture read: give it another name" % out in one_line_error(p)
    assert capture.read_bytes() == before
