"""Python stacks recorded for allocations match what Python itself reports,
under every shape of frame chain tests/targets/stackshapes.py produces, on
every interpreter present, with and without --trace-python-allocators."""

import json
import os

import pytest

from conftest import ROOT, python_params, run
from test_python_api import py_env

SHAPES = os.path.join(ROOT, "tests", "targets", "stackshapes.py")
MAX_FRAMES = 16384  # Python frames the payload keeps, innermost first

DUMP = r"""
import json, sys
import memtrace
r = memtrace.FileReader(sys.argv[1])
out = {}
for rec in r.get_allocation_records():
    if rec.size < 300000 or rec.allocator.is_deallocator:
        continue  # not one of the script's (sizes from 300001 up)
    # the qualified names the reports show (stack_trace() gives co_name)
    out.setdefault(str(rec.size), []).append([[f, ln] for f, _, ln in rec._qualified_stack()])
json.dump(out, open(sys.argv[2], "w"))
"""


def assert_stacks_match(cap, expected_json, tmp_path, least=500):
    """Every allocation @expected_json names is in capture @cap, once, with
    the stack Python reported for it."""
    got_json = tmp_path / ("got-%s.json" % os.path.basename(str(cap)))
    dump = tmp_path / "dump.py"
    dump.write_text(DUMP)
    run("/usr/bin/python3", dump, cap, got_json, env=py_env(), timeout=300)
    expected = json.loads(expected_json.read_text())
    got = json.loads(got_json.read_text())
    assert len(expected) > least
    wrong = []
    for size, frames in expected.items():
        recs = got.get(size)
        assert recs is not None and len(recs) == 1, "size %s: %r records" % (size, recs)
        stack = recs[0]
        if len(frames) > MAX_FRAMES:
            # the innermost frames are kept, the outermost left out
            frames = frames[:MAX_FRAMES]
        if stack != frames:
            wrong.append((size, frames[:6], stack[:6], len(frames), len(stack)))
    assert not wrong, "%d of %d stacks differ, e.g. %r" % (len(wrong), len(expected), wrong[:3])


@pytest.mark.parametrize("mode", [[], ["--trace-python-allocators"]], ids=["default", "pyalloc"])
@pytest.mark.parametrize("python", python_params())
def test_stacks_match_python(memtrace, tmp_path, python, mode):
    cap, expected_json = tmp_path / "s.bin", tmp_path / "expected.json"
    run(memtrace, "run", "--python", python, *mode, "-o", cap, SHAPES, expected_json,
        *([] if mode else ["deep"]), cwd=tmp_path, timeout=300)
    assert_stacks_match(cap, expected_json, tmp_path)


FEED_TARGET = r'''
import sys, threading, time
sys.path.insert(0, %(targets)r)
import stackshapes as ss


def feed_on():
    if sys.version_info >= (3, 12):
        return "memtrace" in (sys.monitoring.get_tool(4), sys.monitoring.get_tool(3))
    hook = getattr(threading, "_profile_hook", None)
    return getattr(hook, "__name__", "") == "memtrace_thread_profile"


def deep(d):
    if d:
        return deep(d - 1)
    # C allocations deep down, densely: reading stacks costs enough that
    # the exit feed is turned on
    deadline = time.monotonic() + 60
    while not feed_on():
        for _ in range(1000):
            b = bytearray(600)
        if time.monotonic() > deadline:
            sys.exit("the exit feed never came on")


deep(300)
ss.main()
'''


@pytest.mark.parametrize("python", python_params())
def test_stacks_match_python_once_the_feed_is_turned_on(memtrace, script, tmp_path, python):
    """Default mode turns the exit feed on while the program runs, when
    reading deep stacks costs enough (3.11 needs none): frames older than
    the feed, and threads started after it, still get their own stacks."""
    version = run(python, "-c", "import sys; print(sys.version_info[1])").stdout.strip()
    if version == "11":
        pytest.skip("3.11 reads stacks without the exit feed")
    target = script(FEED_TARGET % {"targets": os.path.join(ROOT, "tests", "targets")})
    cap, expected_json = tmp_path / "f.bin", tmp_path / "expected.json"
    run(memtrace, "run", "--python", python, "-o", cap, target, expected_json, cwd=tmp_path,
        timeout=300)
    assert_stacks_match(cap, expected_json, tmp_path)


@pytest.mark.parametrize("python", python_params())
def test_no_monitoring_tool_id_free_is_said_and_stacks_stay_right(memtrace, script, tmp_path,
                                                                   python):
    """A program holding sys.monitoring's tool ids 3 and 4 leaves the exit
    feed none: the capture says so, and stacks are read without it."""
    version = run(python, "-c", "import sys; print(sys.version_info[1])").stdout.strip()
    if int(version) < 12:
        pytest.skip("sys.monitoring is 3.12's")
    target = script(r'''
import sys
sys.path.insert(0, %r)
sys.monitoring.use_tool_id(3, "other")
sys.monitoring.use_tool_id(4, "another")
import memtrace
import stackshapes as ss
with memtrace.Tracker(%r, trace_python_allocators=True):
    ss.everything(1)
import json
json.dump(ss.EXPECTED, open(%r, "w"))
''' % (os.path.join(ROOT, "tests", "targets"), str(tmp_path / "t.bin"),
       str(tmp_path / "expected.json")))
    run(python, target, cwd=tmp_path, env=py_env(), timeout=300)
    stats = run(memtrace, "stats", tmp_path / "t.bin").stdout
    assert "cannot report frame exits (no sys.monitoring tool id free)" in stats, stats
    assert_stacks_match(tmp_path / "t.bin", tmp_path / "expected.json", tmp_path, least=200)
