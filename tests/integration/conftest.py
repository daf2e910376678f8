"""Shared fixtures for the integration suites: the built memtrace, the
Python interpreters present on this machine, and helpers to run both."""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("MEMTRACE_BUILD_DIR", os.path.join(ROOT, "build"))
MEMTRACE = os.path.join(BUILD, "cli", "memtrace")

# Debian's interpreter first, then every pyenv build 3.8..3.13 present.
SUPPORTED = ["3.8", "3.9", "3.10", "3.11", "3.12", "3.13"]


def _pyenv_python(minor):
    root = os.path.expanduser("~/.pyenv/versions")
    for d in sorted(glob.glob(os.path.join(root, minor + ".*")), reverse=True):
        exe = os.path.join(d, "bin", "python" + minor)
        if os.access(exe, os.X_OK) and "t" not in os.path.basename(d).split(".")[-1]:
            return exe
    return None


def python_params():
    params = [pytest.param("/usr/bin/python3", id="debian-python3",
                           marks=pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK),
                                                    reason="/usr/bin/python3 is absent"))]
    for minor in SUPPORTED:
        exe = _pyenv_python(minor)
        params.append(pytest.param(exe, id="pyenv-" + minor,
                                   marks=pytest.mark.skipif(exe is None,
                                                            reason="no pyenv Python %s on this machine" % minor)))
    return params


@pytest.fixture(scope="session")
def memtrace():
    if not os.access(MEMTRACE, os.X_OK):
        pytest.fail("memtrace is not built at %s (run scripts/test.sh)" % MEMTRACE)
    return MEMTRACE


def skip_unless_other_users_can(what, *dirs):
    """Skip, saying the test needs it to @what, unless we are root with
    setpriv and another user can search every directory up to each of
    @dirs (where memtrace, its package or a script lives)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to %s" % what)
    for d in dirs:
        d = str(d)
        while d != "/":
            if not os.stat(d).st_mode & 0o001:
                pytest.skip("%s is not searchable by other users" % d)
            d = os.path.dirname(d)


def run(*args, check=True, timeout=120, **kw):
    """Run a command, capture its output, fail with the output on error."""
    p = subprocess.run([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s"
                             % (" ".join(map(str, args)), p.returncode, p.stdout, p.stderr))
    return p


def switch_captures(memtrace_bin, tmp_path, switch, *run_args, source=None):
    """Two captures of `memtrace run RUN_ARGS`: without the test switch
    @switch (an environment variable) and with it set to 1, as paths
    (without, with). @source: a program, written as prog.py and run after
    RUN_ARGS."""
    if source is not None:
        prog = tmp_path / "prog.py"
        prog.write_text(source)
        run_args += (prog,)
    caps = []
    for on in (False, True):
        env = dict(os.environ)
        env.pop(switch, None)
        if on:
            env[switch] = "1"
        caps.append(tmp_path / ("%s-%s.bin" % (switch.lower(), "on" if on else "off")))
        run(memtrace_bin, "run", "-o", caps[-1], *run_args, env=env)
    return caps[0], caps[1]


def report_json(memtrace_bin, command, capture, *extra):
    """A report's --json output, parsed."""
    p = run(memtrace_bin, command, "--json", *extra, capture)
    return json.loads(p.stdout)


@pytest.fixture
def script(tmp_path):
    """Write a Python script into the test's directory and return its path."""
    def write(source, name="prog.py"):
        path = tmp_path / name
        path.write_text(source)
        return path
    return write


@pytest.fixture(scope="session")
def cc():
    """The C compiler, for tests that build a library of their own."""
    path = shutil.which("cc") or shutil.which("gcc")
    if not path:
        pytest.skip("no C compiler")
    return path


def control_socket(pid):
    """The abstract name (with its leading NUL) of the control socket the
    payload in @pid listens on, found as memtrace finds it: a listening
    socket named memtrace-<pid>[-...] among the process's own descriptors;
    None if it has none."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    want = "@memtrace-%d" % pid
    with open("/proc/%d/net/unix" % pid) as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) < 8 or int(fields[6]) not in inodes or not int(fields[3], 16) & 0x10000:
                continue
            name = fields[7]
            if name == want or name.startswith(want + "-"):
                return "\0" + name[1:]
    return None


# public, for the test modules (tests/browser/conftest.py re-exports only
# public names when both suites run in one session)
pyenv_python = _pyenv_python


@pytest.fixture
def full_fs(tmp_path):
    """A directory on a 64 KiB tmpfs filled to the brim (root only: a
    skip elsewhere); unmounted afterwards."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt, check=False).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"x" * 4096):
                pass
        except OSError:
            pass
        os.close(fd)
        yield mnt
    finally:
        run("umount", mnt, check=False)
