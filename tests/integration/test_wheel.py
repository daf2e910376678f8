# SPDX-License-Identifier: MIT
"""memtrace installed as Python users install their tools: pyproject.toml
builds one wheel with meson-python (`pip wheel --no-build-isolation`),
and from a fresh venv it is installed into, with nothing from the source
or build tree, the memtrace command, the payload, the reader library, the
Python package and its pytest plugin all work. The system install
(`meson install`) keeps working beside it.

Building the wheel compiles the project once more (about 30 s of CPU)."""

import glob
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile

import pytest

from conftest import BUILD, ROOT, SUPPORTED, pyenv_python, run

PY = "/usr/bin/python3"

# What would let a command find the source or build tree instead of the venv
# (and the outer pytest's settings, PYTEST_*).
_LEAKY = ("MEMTRACE_BUILD_DIR", "MEMTRACE_PAYLOAD", "MEMTRACE_READER_LIB", "MEMTRACE_BIN",
          "MEMTRACE_SCRIPTS", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in _LEAKY and not k.startswith("PYTEST_")}
    env.update(extra)
    return env


def _skip_without_tools():
    if not os.access(PY, os.X_OK):
        pytest.skip("%s is absent" % PY)
    probes = {"mesonpy": "meson-python is not installed (apt-get install python3-mesonpy)",
              "venv, ensurepip": "venv cannot make environments with pip (apt-get install "
                                 "python3-venv)",
              "pip": "pip is not installed (apt-get install python3-pip)"}
    for mod, why in probes.items():
        if subprocess.run([PY, "-c", "import " + mod], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode != 0:
            pytest.skip(why)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel pip builds from the source tree."""
    _skip_without_tools()
    out = tmp_path_factory.mktemp("wheel")
    start = time.monotonic()
    run(PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir",
        "--no-index", "-q", "-w", out, ROOT, cwd=str(out), env=_clean_env(), timeout=900)
    sys.stderr.write("\nmemtrace wheel built in %.1f s\n" % (time.monotonic() - start))
    found = glob.glob(str(out / "memtrace-*.whl"))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel installed (Debian's packages visible,
    for the pytest plugin's pytest; memtrace is none of them)."""
    d = tmp_path_factory.mktemp("venv") / "env"
    run(PY, "-m", "venv", "--system-site-packages", d, env=_clean_env())
    run(d / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel,
        env=_clean_env(), timeout=300)
    return d


@pytest.fixture
def outside(tmp_path):
    """A working directory away from the source tree."""
    d = tmp_path / "work"
    d.mkdir()
    return d


def _venv_env(venv):
    """The environment of a shell with the venv activated."""
    return _clean_env(PATH="%s:%s" % (venv / "bin", os.environ.get("PATH", "/usr/bin:/bin")),
                      VIRTUAL_ENV=str(venv))


def _site(venv):
    sites = glob.glob(str(venv / "lib" / "python3*" / "site-packages"))
    assert len(sites) == 1, sites
    return sites[0]


def test_wheel_holds_the_command_libraries_and_package(wheel):
    """One wheel for any Python 3 on this platform: nothing in it depends
    on the interpreter's version (the payload reads each CPython's layout
    at run time)."""
    name = os.path.basename(wheel)
    assert name.startswith("memtrace-") and "-py3-none-linux_" in name, name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        ver = name.split("-")[1]
        data = "memtrace-%s.data/" % ver
        cli = z.getinfo(data + "scripts/memtrace")
        assert (cli.external_attr >> 16) & 0o111, oct(cli.external_attr >> 16)
        assert z.read(data + "scripts/memtrace")[:4] == b"\x7fELF"
        for f in ("libmemtrace-payload.so", "libmemtrace-reader.so", "__init__.py",
                  "__main__.py", "_native.py", "_ipython.py", "tracker.py", "reader.py",
                  "socket_reader.py", "pytest_plugin.py", "_pytest_limits.py", "_records.py",
                  "attach-gdb.py", "attach_lldb.py"):
            assert data + "purelib/memtrace/" + f in names, f
        entry = z.read("memtrace-%s.dist-info/entry_points.txt" % ver).decode()
        assert "[pytest11]" in entry and "memtrace.pytest_plugin" in entry, entry
        meta = z.read("memtrace-%s.dist-info/METADATA" % ver).decode()
        assert "Name: memtrace" in meta
    # the version is meson.build's
    with open(os.path.join(ROOT, "meson.build")) as f:
        assert "version: '%s'" % ver in f.read()


SCRIPT = r'''
import sys
held = [bytearray(1_000_000) for _ in range(24)]
with open("/proc/self/maps") as f:
    print("payload:", [l.split()[-1] for l in f if "libmemtrace-payload.so" in l][0])
'''


def test_command_runs_and_reports_from_the_venv(venv, outside):
    """VENV/bin/memtrace finds the payload inside the package in
    site-packages; its reports read the capture."""
    env = _venv_env(venv)
    (outside / "script.py").write_text(SCRIPT)
    p = run(venv / "bin" / "memtrace", "run", "-q", "-o", "cap.bin", "script.py",
            cwd=str(outside), env=env)
    payload = p.stdout.split("payload: ", 1)[1].split()[0]
    assert payload == os.path.join(_site(venv), "memtrace", "libmemtrace-payload.so")
    text = run(venv / "bin" / "memtrace", "stats", "cap.bin", cwd=str(outside), env=env).stdout
    assert "Totals" in text and "peak tracked heap" in text
    stats = json.loads(run(venv / "bin" / "memtrace", "stats", "--json", "cap.bin",
                           cwd=str(outside), env=env).stdout)
    assert 24_000_000 <= stats["totals"]["peak_heap"] < 30_000_000, stats["totals"]
    run(venv / "bin" / "memtrace", "flamegraph", "-o", "fg.html", "cap.bin",
        cwd=str(outside), env=env)
    assert "<html" in (outside / "fg.html").read_text()[:2000].lower()


def test_command_runs_the_venvs_python_unactivated(venv, outside):
    """VENV/bin/memtrace run, the venv not activated: the program runs with
    the venv's interpreter, as memray's does with its own."""
    env = _clean_env()  # python3 on PATH is the system's
    p = run(venv / "bin" / "memtrace", "run", "-q", "-o", "cap.bin", "-c",
            "import sys; print(sys.prefix)", cwd=str(outside), env=env)
    assert p.stdout.strip() == str(venv), p.stdout
    # --python still decides
    p = run(venv / "bin" / "memtrace", "run", "-q", "-f", "-o", "cap.bin", "--python", PY, "-c",
            "import sys; print(sys.prefix)", cwd=str(outside), env=env)
    assert p.stdout.strip() != str(venv), p.stdout


def test_command_without_its_payload_says_where_it_looked(venv, outside):
    """A copy of the command away from any install finds no payload: one
    line that says so, and a failure."""
    shutil.copy(str(venv / "bin" / "memtrace"), str(outside / "memtrace"))
    (outside / "script.py").write_text("pass\n")
    p = run(outside / "memtrace", "run", "-q", "-o", "cap.bin", "script.py", check=False,
            cwd=str(outside), env=_venv_env(venv))
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot find libmemtrace-payload.so" in lines[0], p.stderr
    assert not (outside / "cap.bin").exists()


API = r'''
import os, sys
import memtrace
from memtrace import _native
site = sys.argv[1]
assert memtrace.__file__.startswith(site), memtrace.__file__
with memtrace.Tracker("api.bin"):
    held = [bytearray(500_000) for _ in range(10)]
r = memtrace.FileReader("api.bin")
assert _native.payload().path == os.path.join(site, "memtrace", "libmemtrace-payload.so")
assert _native.reader().path == os.path.join(site, "memtrace", "libmemtrace-reader.so")
peak = sum(rec.size for rec in r.get_high_watermark_allocation_records(merge_threads=True))
print(r.metadata.peak_memory, peak)
'''


def test_python_package_tracks_and_reads_from_the_venv(venv, outside):
    """import memtrace: Tracker loads the payload and FileReader the reader
    library, both from inside the installed package."""
    (outside / "api.py").write_text(API)
    out = run(venv / "bin" / "python", "api.py", _site(venv), cwd=str(outside),
              env=_venv_env(venv)).stdout.split()
    meta_peak, records = int(out[0]), int(out[1])
    assert 5_000_000 <= records <= meta_peak < 6_000_000, out


def test_python_m_memtrace_runs_the_venv_command(venv, outside):
    """python -m memtrace is the command of the same venv, and runs the
    program with that interpreter."""
    env = _venv_env(venv)
    help_ = run(venv / "bin" / "python", "-m", "memtrace", "--help", cwd=str(outside), env=env)
    assert "run" in help_.stdout and "usage: memtrace" in help_.stdout
    (outside / "prog.py").write_text("import sys\nprint('exe:', sys.executable)\n"
                                     "x = bytearray(3_000_000)\n")
    p = run(venv / "bin" / "python", "-m", "memtrace", "run", "-q", "-o", "m.bin", "prog.py",
            cwd=str(outside), env=_clean_env())  # not activated: PATH without the venv
    assert p.stdout.strip() == "exe: %s" % (venv / "bin" / "python"), p.stdout
    summary = run(venv / "bin" / "memtrace", "summary", "m.bin", cwd=str(outside), env=env)
    assert "prog.py" in summary.stdout


PLUGIN_TEST = r'''
import pytest

@pytest.mark.limit_memory("1 MB")
def test_over_budget():
    held = bytearray(4_000_000)

@pytest.mark.limit_memory("8 MB")
def test_within_budget():
    held = bytearray(2_000_000)
'''


def test_pytest_plugin_loads_by_its_entry_point(venv, outside):
    """pytest in the venv loads the plugin from the wheel's metadata: no
    -p, no PYTHONPATH."""
    if subprocess.run([str(venv / "bin" / "python"), "-c", "import pytest"],
                      env=_venv_env(venv)).returncode != 0:
        pytest.skip("pytest is not installed for %s (apt-get install python3-pytest)" % PY)
    (outside / "test_budget.py").write_text(PLUGIN_TEST)
    p = run(venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "--memtrace", "test_budget.py", check=False, cwd=str(outside),
            env=dict(_venv_env(venv), COLUMNS="200"), timeout=300)  # the summary uncut
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 failed, 1 passed" in p.stdout, p.stdout
    failed = [l for l in p.stdout.splitlines() if l.startswith("MEMORY PROBLEMS")]
    assert len(failed) == 1 and "test_over_budget" in failed[0], p.stdout
    assert "limit_memory" in failed[0] and "> 1.00 MiB" in failed[0], failed


ATTACH_TARGET = r'''
import sys, threading
keep, done = [], threading.Event()

def commands():
    for line in sys.stdin:
        keep.append(bytearray(int(line)))
        print("done", flush=True)
    done.set()

threading.Thread(target=commands, daemon=True).start()
print("ready", flush=True)
while not done.is_set():
    sum(range(100))
'''


def test_attach_through_gdb_finds_its_script_in_the_package(venv, outside):
    """--method gdb runs attach-gdb.py, which the wheel keeps beside the
    payload (not in a share/ of the venv)."""
    if not shutil.which("gdb"):
        pytest.skip("gdb is not installed")
    env = _venv_env(venv)
    (outside / "target.py").write_text(ATTACH_TARGET)
    t = subprocess.Popen([PY, "target.py"], cwd=str(outside), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)
    try:
        assert t.stdout.readline().strip() == "ready"
        run(venv / "bin" / "memtrace", "attach", "--method", "gdb", "-o", "att.bin", t.pid,
            cwd=str(outside), env=env, timeout=120)
        t.stdin.write("3000017\n")
        t.stdin.flush()
        assert t.stdout.readline().strip() == "done"
        run(venv / "bin" / "memtrace", "detach", t.pid, cwd=str(outside), env=env, timeout=60)
        t.stdin.close()
        assert t.wait(timeout=60) == 0
    finally:
        if t.poll() is None:
            t.kill()
            t.wait()
    stats = run(venv / "bin" / "memtrace", "stats", "att.bin", cwd=str(outside), env=env).stdout
    assert "Totals" in stats


def test_meson_install_still_serves_a_system_install(tmp_path):
    """meson install of the build tree: the installed command finds its
    payload under <libdir>/memtrace, the package on PYTHONPATH its libraries."""
    if not os.path.isfile(os.path.join(BUILD, "build.ninja")):
        pytest.fail("no build in %s (run scripts/test.sh)" % BUILD)
    dest = tmp_path / "dest"
    run("meson", "install", "-C", BUILD, "--no-rebuild", "--quiet", "--destdir", dest,
        timeout=300)
    exe = glob.glob(str(dest / "**" / "bin" / "memtrace"), recursive=True)
    pkg = glob.glob(str(dest / "**" / "memtrace" / "python" / "memtrace"), recursive=True)
    assert len(exe) == 1 and len(pkg) == 1, (exe, pkg)
    work = tmp_path / "work"
    work.mkdir()
    (work / "script.py").write_text(SCRIPT)
    p = run(exe[0], "run", "-q", "-o", "cap.bin", "script.py", cwd=str(work), env=_clean_env())
    payload = p.stdout.split("payload: ", 1)[1].split()[0]
    libdir = os.path.dirname(os.path.dirname(pkg[0]))
    assert payload == os.path.join(libdir, "libmemtrace-payload.so")
    assert "Totals" in run(exe[0], "stats", "cap.bin", cwd=str(work), env=_clean_env()).stdout
    # the system layout: the libraries one level above the package's directory
    api = API.replace('os.path.join(site, "memtrace", ', "os.path.join(site, ")
    (work / "api.py").write_text(api)
    run(PY, "api.py", os.path.dirname(os.path.dirname(pkg[0])), cwd=str(work),
        env=_clean_env(PYTHONPATH=os.path.dirname(pkg[0])))


def test_one_wheel_serves_another_python(wheel, tmp_path):
    """The wheel is py3-none: installed into a venv of another CPython (a
    plain one, without Debian's packages), its command finds the payload
    under that version's site-packages and its package tracks and reads."""
    here = "%d.%d" % tuple(int(x) for x in subprocess.check_output(
        [PY, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"]).split())
    others = [p for p in (pyenv_python(m) for m in reversed(SUPPORTED) if m != here) if p]
    if not others:
        pytest.skip("no pyenv CPython other than %s on this machine" % here)
    d = tmp_path / "env"
    run(others[0], "-m", "venv", d, env=_clean_env())
    run(d / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel,
        env=_clean_env(), timeout=300)
    work = tmp_path / "work"
    work.mkdir()
    (work / "script.py").write_text(SCRIPT)
    p = run(d / "bin" / "memtrace", "run", "-q", "-o", "cap.bin", "script.py", cwd=str(work),
            env=_venv_env(d))
    assert p.stdout.split("payload: ", 1)[1].split()[0] == os.path.join(
        _site(d), "memtrace", "libmemtrace-payload.so")
    stats = json.loads(run(d / "bin" / "memtrace", "stats", "--json", "cap.bin",
                           cwd=str(work), env=_venv_env(d)).stdout)
    assert stats["header"]["python"].startswith(os.path.basename(others[0])[6:]), stats["header"]
    (work / "api.py").write_text(API)
    run(d / "bin" / "python", "api.py", _site(d), cwd=str(work), env=_venv_env(d))
