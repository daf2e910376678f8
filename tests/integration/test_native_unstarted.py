"""Hybrid stacks whose innermost evaluation loop runs a frame that has not
started: from CPython 3.11 a generator's function called from C (map()
calling it) enters a loop of its own, which makes the generator
(RETURN_GENERATOR) before the function's first line. No Python stack shows
that frame (CPython's walks skip it too), so the chain has one loop more
than the stack has runs of Python frames; the stack still reads with the C
frames between its Python calls."""

import os
import sys

import pytest

from conftest import ROOT, python_params, report_json, run

sys.path.insert(0, os.path.join(ROOT, "python"))
from memtrace import FileReader  # noqa: E402

PROG = r'''
def gen(i):
    yield i


def per_item(_):
    # called from C (sorted's key); sum() runs the generator expression from
    # C, and map() calls gen from C: each generator is made in a loop of its own
    return sum(1 for g in map(gen, range(3000)))


print(sorted([1, 2], key=per_item))
made_here = list(map(gen, range(3000)))  # one run of Python frames
'''


MAP_LINE = PROG.split("\n").index("made_here = list(map(gen, range(3000)))  # one run of "
                                   "Python frames") + 1


def is_python(frame):
    return frame[1].endswith(".py")


@pytest.mark.parametrize("python", python_params())
def test_a_generator_made_from_c_keeps_the_c_frames_between_its_callers(memtrace, tmp_path,
                                                                       python):
    prog = tmp_path / "gens.py"
    prog.write_text(PROG)
    cap = tmp_path / "g.bin"
    run(memtrace, "run", "-q", "--native", "--trace-python-allocators", "-o", cap,
        "--python", python, prog)
    assert report_json(memtrace, "stats", cap)["header"]["native_frames"][
        "unpaired_stacks"] == 0
    made = at_module = 0
    with FileReader(str(cap)) as r:
        for rec in r.get_allocation_records():
            if rec.allocator.is_deallocator:
                continue
            py = [f[0] for f in rec.stack_trace()]
            if py == ["<module>"] and rec.stack_trace()[0][2] == MAP_LINE:
                # map()'s call of gen below the line, not only the loop's frame
                hybrid = rec.hybrid_stack_trace()
                assert [f[0] for f in hybrid if is_python(f)] == py, hybrid
                # list(), map() and the call of gen, then the allocation (before:
                # the allocation alone, from 3.11)
                at_module += len([f for f in hybrid if not is_python(f)]) >= 4
                continue
            if py[:3] != ["<genexpr>", "per_item", "<module>"]:
                continue
            hybrid = rec.hybrid_stack_trace()
            names = [f[0] for f in hybrid if is_python(f)]
            assert names == py, hybrid
            # C frames between the generator expression and per_item (sum's),
            # and between per_item and the module (sorted's)
            at = [i for i, f in enumerate(hybrid) if is_python(f)]
            assert at[1] - at[0] > 1 and at[2] - at[1] > 1, hybrid
            made += 1
    # at least the generators map() made (3000 a call, 2 calls), whatever
    # else the interpreter allocated there
    assert made >= 6000, made
    assert at_module >= 3000, at_module
