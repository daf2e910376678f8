"""memtrace attach/detach against targets in a chroot of bind mounts in their
own mount namespace, the way containers show a process to the host: the
paths in /proc/PID/maps then name files under the chroot's directory, which
exist only in the target's mount namespace, and the target's /tmp may be a
link that means something else outside its root.

Every mount is made inside `unshare -m` (with / made private first), so it
ends with the target and nothing reaches the host's mount table.

The capture path: attach today hands the payload the capture's path, so it
must name the same file inside the target's root as here. The host's
capture directory is bind-mounted inside the chroot at the path the target
resolves for the same name (through its own /tmp link, if any)."""

import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import pyenv_python, run
from attach_target import TARGET, Target, attach, detach, leak_rows, own_bytes


def _unshare_works(tmp):
    if os.geteuid() != 0:
        return "needs root (chroot, mount)"
    if not shutil.which("unshare") or not shutil.which("chroot"):
        return "unshare or chroot is not installed"
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    os.makedirs(a)
    os.makedirs(b)
    p = subprocess.run(["unshare", "-m", "sh", "-c",
                        "mount --make-rprivate / && mount --bind -o ro %s %s" % (a, b)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if p.returncode != 0:
        return "unshare -m / mount --bind is not permitted here: " + p.stdout.strip()
    return None


def _python_params():
    params = [pytest.param("/usr/bin/python3", id="debian-python3",
                           marks=pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK),
                                                    reason="/usr/bin/python3 is absent"))]
    exe = pyenv_python("3.12")
    params.append(pytest.param(exe, id="pyenv-3.12",
                               marks=pytest.mark.skipif(exe is None, reason="no pyenv Python 3.12")))
    return params


class Chroot:
    """A directory with /usr, /etc (and a pyenv tree) bind-mounted read-only,
    the host's merged-/usr links, the target script, and a /tmp that is a
    directory or, with tmp_link, an absolute link to that path inside it."""

    def __init__(self, base, hostbase, tmp_link=None, tmp_inside=None):
        self.dir = os.path.join(base, "root")
        self.hostbase = hostbase
        self.capdir = os.path.join(hostbase, "cap")  # the host's view
        os.makedirs(self.capdir)
        self.binds = []  # (host source, path under self.dir, read-only)
        os.makedirs(self.dir)
        for d in ("usr", "etc"):
            os.makedirs(os.path.join(self.dir, d))
            self.binds.append(("/" + d, "/" + d, True))
        for d in ("bin", "sbin", "lib", "lib64"):
            host = "/" + d
            if os.path.islink(host):
                os.symlink(os.readlink(host), os.path.join(self.dir, d))
            elif os.path.isdir(host):
                os.makedirs(os.path.join(self.dir, d))
                self.binds.append((host, host, True))
        pyenv = os.path.expanduser("~/.pyenv")
        if os.path.isdir(pyenv):
            os.makedirs(self.dir + pyenv)
            self.binds.append((pyenv, pyenv, True))
        if tmp_link:
            os.symlink(tmp_link, os.path.join(self.dir, "tmp"))
        if tmp_inside is None:  # where the link leads inside; "": nowhere
            tmp_inside = tmp_link or "/tmp"
        if tmp_inside:
            os.makedirs(self.dir + tmp_inside)
            os.chmod(self.dir + tmp_inside, 0o1777)
        # where the target finds the capture directory's path
        inside = self.capdir
        if tmp_link and inside.startswith("/tmp/"):
            inside = tmp_inside + inside[4:]
        os.makedirs(self.dir + inside)
        self.binds.append((self.capdir, inside, False))
        os.makedirs(os.path.join(self.dir, "app"))
        with open(os.path.join(self.dir, "app", "target.py"), "w") as f:
            f.write(TARGET)

    def command(self, python, *args):
        mounts = ["mount --make-rprivate /"]
        for src, dst, ro in self.binds:
            mounts.append("mount --bind %s %s %s" % ("-o ro" if ro else "", src, self.dir + dst))
        shell = " && ".join(mounts) + ' && exec chroot "$0" "$@"'
        return ["unshare", "-m", "sh", "-c", shell, self.dir, python] + list(args)

    def capture(self, name):
        return os.path.join(self.capdir, name)


class ChrootTarget(Target):
    """The attach tests' target (attach_target.py), run inside a Chroot."""

    def __init__(self, chroot, python, scenario):
        self.p = subprocess.Popen(chroot.command(python, "/app/target.py", scenario),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  universal_newlines=True, bufsize=1)
        self.pid = self.p.pid  # unshare and sh exec into the target
        assert self.readline() == "ready"


@pytest.fixture
def chroot(tmp_path):
    """Makes Chroot(tmp_link=...) objects; the host base directory (for the
    capture and for what must stay empty) is under /var/tmp, outside any
    /tmp link. Targets started through it are killed afterwards."""
    why = _unshare_works(str(tmp_path))
    if why:
        pytest.skip(why)
    hostbases, targets = [], []

    def make(tmp_link=None, tmp_inside=None):
        hostbase = tempfile.mkdtemp(prefix="memtrace-test-", dir="/var/tmp")
        hostbases.append(hostbase)
        return Chroot(str(tmp_path / ("c%d" % len(hostbases))), hostbase,
                      tmp_link and tmp_link.replace("HOSTBASE", hostbase),
                      tmp_inside and tmp_inside.replace("HOSTBASE", hostbase))

    def start(c, python, scenario="sleep"):
        t = ChrootTarget(c, python, scenario)
        targets.append(t)
        with open("/proc/%d/maps" % t.pid) as f:
            assert c.dir in f.read(), "the maps do not show the chroot's paths"
        return t

    make.start = start
    yield make
    for t in targets:
        t.kill()
    for b in hostbases:
        shutil.rmtree(b, ignore_errors=True)


def _check_leak(memtrace, cap, lo, hi):
    run(memtrace, "stats", cap)
    rows = leak_rows(memtrace, cap)
    assert lo <= own_bytes(rows, "leak_here") < hi, rows[:5]


@pytest.mark.parametrize("python", _python_params())
def test_chroot_attach_detach_reattach(memtrace, chroot, python):
    c = chroot()
    t = chroot.start(c, python)
    cap1, cap2 = c.capture("one.bin"), c.capture("two.bin")
    p = attach(memtrace, t.pid, cap1, "--method", "ptrace", "-v")
    assert "tracking pid %d" % t.pid in p.stderr, p.stderr
    t.cmd("alloc 3000017")
    detach(memtrace, t.pid)
    t.cmd("alloc 5000011")  # between the two: in neither capture
    attach(memtrace, t.pid, cap2)
    t.cmd("alloc 2000003")
    detach(memtrace, t.pid)
    status, rest = t.finish()
    assert status == 3 and rest.strip() == "bye"
    _check_leak(memtrace, cap1, 2_990_000, 4_000_000)
    _check_leak(memtrace, cap2, 1_990_000, 3_000_000)


def test_chroot_follow_fork_refused(memtrace, chroot, tmp_path):
    """attach --follow-fork to a process in a chroot: its children would
    make their captures at paths of its own view, so it is refused in one
    line, and nothing is touched."""
    c = chroot()
    t = chroot.start(c, "/usr/bin/python3")
    cap = c.capture("ff.bin")
    p = run(memtrace, "attach", "--follow-fork", "-o", cap, t.pid, check=False)
    assert p.returncode == 1 and p.stderr == (
        "memtrace: --follow-fork: pid %d sees other files than we do (another mount namespace "
        "or root), and its children make their captures themselves\n" % t.pid), p.stderr
    assert not os.path.exists(cap)
    status, _ = t.finish()
    assert status == 3


def test_chroot_gdb_method(memtrace, chroot):
    if not shutil.which("gdb"):
        pytest.skip("gdb is not installed")
    c = chroot()
    t = chroot.start(c, "/usr/bin/python3")
    cap = c.capture("gdb.bin")
    attach(memtrace, t.pid, cap, "--method", "gdb")
    t.cmd("alloc 3000017")
    detach(memtrace, t.pid)
    status, _ = t.finish()
    assert status == 3
    _check_leak(memtrace, cap, 2_990_000, 4_000_000)


@pytest.mark.parametrize("link", ["HOSTBASE/outside", "../../../../../../../../..HOSTBASE/outside"],
                         ids=["absolute", "dotdot"])
def test_chroot_tmp_link_resolved_inside_the_root(memtrace, chroot, link):
    # The chroot's /tmp is a link to HOSTBASE/outside, a path that exists on
    # the host too (absolute, or climbing above the chroot's directory with
    # ".."): the copy of the payload must go to the target's
    # HOSTBASE/outside, under the chroot, never to the host's.
    c = chroot(tmp_link=link, tmp_inside="HOSTBASE/outside")
    host_outside = os.path.join(c.hostbase, "outside")
    os.makedirs(host_outside)
    t = chroot.start(c, "/usr/bin/python3")
    cap = c.capture("link.bin")
    p = attach(memtrace, t.pid, cap, "--method", "ptrace", "-v", check=False)
    assert os.listdir(host_outside) == [], "the payload was copied outside the target's root"
    assert p.returncode == 0, p.stderr
    inside = c.dir + host_outside
    copies = [n for n in os.listdir(inside) if n.startswith("memtrace-")]
    assert copies, os.listdir(inside)
    t.cmd("alloc 3000017")
    detach(memtrace, t.pid)
    status, _ = t.finish()
    assert status == 3
    _check_leak(memtrace, cap, 2_990_000, 4_000_000)


def test_chroot_tmp_link_loop_is_a_clear_error(memtrace, chroot):
    # /tmp -> /tmp: inside the target's root a loop, while from the host's
    # root it would lead to the host's /tmp.
    c = chroot(tmp_link="/tmp", tmp_inside="")
    t = chroot.start(c, "/usr/bin/python3")
    p = attach(memtrace, t.pid, c.capture("loop.bin"), check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr
    assert lines[0].startswith("memtrace: cannot open /tmp inside pid %d's root" % t.pid), lines
    assert "symbolic links" in lines[0], lines
    assert not os.path.exists(c.capture("loop.bin"))
    assert t.cmd("alloc 10") == []  # the target lives on
    status, _ = t.finish()
    assert status == 3
