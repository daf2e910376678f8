"""What memray's users type, carried over: `python3 -m memtrace` for
`python3 -m memray` (run with the interpreter that ran it), `run -q`."""

import os

import pytest

from conftest import BUILD, ROOT, python_params, run

PROG = "keep = [bytearray(1000) for _ in range(100)]\nprint('ran')\n"


def module_env():
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD)
    env.pop("MEMTRACE_BIN", None)
    return env


@pytest.mark.parametrize("python", python_params())
def test_python_m_memtrace_runs_with_its_interpreter(memtrace, script, tmp_path, python):
    prog = script(PROG)
    cap = tmp_path / "m.bin"
    p = run(python, "-m", "memtrace", "run", "-o", cap, prog, env=module_env())
    assert p.stdout == "ran\n" and "capture written to" in p.stderr
    st = run(memtrace, "stats", cap).stdout
    assert "command line:       %s %s" % (python, prog) in st
    # the other commands, unchanged
    p = run(python, "-m", "memtrace", "summary", "-r", "1", cap, env=module_env())
    assert "Peak tracked heap" in p.stdout
    p = run(python, "-m", "memtrace", "nosuch", env=module_env(), check=False)
    assert p.returncode == 2 and "unknown command 'nosuch'" in p.stderr


def test_python_m_memtrace_without_the_command(script, tmp_path):
    env = module_env()
    env["MEMTRACE_BIN"] = str(tmp_path / "missing")
    p = run("/usr/bin/python3", "-m", "memtrace", "stats", "x.bin", env=env, check=False)
    assert p.returncode == 2 and p.stderr == "memtrace: cannot run %s: No such file or directory\n" \
        % env["MEMTRACE_BIN"]


def test_run_quiet(memtrace, script, tmp_path):
    prog = script(PROG)
    p = run(memtrace, "run", "-q", "-o", tmp_path / "q.bin", prog)
    assert p.stdout == "ran\n" and p.stderr == ""
    assert "Peak tracked heap" in run(memtrace, "summary", tmp_path / "q.bin").stdout
    # errors are still said
    p = run(memtrace, "run", "--quiet", "-o", tmp_path / "q.bin", prog, check=False)
    assert p.returncode == 1 and "exists" in p.stderr
    # and so is a killed program's fate, in its exit status
    bad = script("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", name="k.py")
    p = run(memtrace, "run", "-q", "-o", tmp_path / "k.bin", bad, check=False)
    assert p.returncode == -15 and p.stderr == ""
