"""Python stacks recorded for allocations match what Python itself reports,
under every shape of frame chain tests/targets/stackshapes.py produces, on
every interpreter present, with and without --trace-python-allocators."""

import json
import os

import pytest

from conftest import ROOT, python_params, run
from test_python_api import py_env

SHAPES = os.path.join(ROOT, "tests", "targets", "stackshapes.py")
MAX_FRAMES = 1024  # Python frames the payload keeps, innermost first

DUMP = r"""
import json, sys
import memtrace
r = memtrace.FileReader(sys.argv[1])
out = {}
for rec in r.get_allocation_records():
    if rec.size < 300000 or rec.allocator.is_deallocator:
        continue  # not one of the script's (sizes from 300001 up)
    out.setdefault(str(rec.size), []).append([[f, ln] for f, _, ln in rec.stack_trace()])
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
    run(memtrace, "run", "--python", python, *mode, "-o", cap, SHAPES, expected_json, cwd=tmp_path,
        timeout=300)
    assert_stacks_match(cap, expected_json, tmp_path)
