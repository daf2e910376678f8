"""Native nodes coded in the node column (docs/format.md section 2.2,
header flag MT_HDR_NATIVE_NODES): a capture read back gives the stacks its
plain form gives. The same program runs twice, once with the payload's
plain form (MEMTRACE_TEST_PLAIN_NODES=1, the records as they are), and
every allocation of a known size reads the same Python, native and hybrid
stacks from both; each of them is also checked against the calls the
program made."""

import os
import re
import sys

import pytest

from conftest import BUILD, ROOT, python_params, run

sys.path.insert(0, os.path.join(ROOT, "python"))
import memtrace  # noqa: E402

TARGET_LIB = os.path.join(BUILD, "tests", "targets", "libmt-native-target.so")
DEPTHS = 30

PROG = r'''
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.mt_native_a.restype = ctypes.c_void_p
lib.mt_native_a.argtypes = [ctypes.c_size_t]
CB = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int)
lib.mt_native_call.restype = ctypes.c_void_p
lib.mt_native_call.argtypes = [CB, ctypes.c_int]
try:
    import numpy  # an import makes thousands of native nodes
except ImportError:
    numpy = None
size = 0


def g(d):
    if d == 0:
        return lib.mt_native_a(size)
    return lib.mt_native_call(cb, d - 1)


cb = CB(g)
keep = []
for depth in range(int(sys.argv[2])):
    size = 900000 + depth
    keep.append(g(depth))
if numpy is not None:
    arrays = [numpy.ones(700000 + k, dtype=numpy.uint8) for k in range(20)]
'''


def header_flags(memtrace_bin, cap):
    line = run(memtrace_bin, "parse", cap).stdout.splitlines()[0]
    return int(re.search(r"flags=0x([0-9a-f]+)", line).group(1), 16)


def stacks_by_size(cap):
    """size -> (Python, native, hybrid stacks) of the allocations of a
    size made once, from 700000 up."""
    seen = {}
    with memtrace.FileReader(str(cap)) as r:
        assert r.metadata.has_native_traces
        for rec in r.get_allocation_records():
            if rec.size >= 700000 and rec.allocator != memtrace.AllocatorType.FREE:
                seen.setdefault(rec.size, []).append(
                    (rec.stack_trace(), rec.native_stack_trace(), rec.hybrid_stack_trace()))
    return {size: v[0] for size, v in seen.items() if len(v) == 1}


@pytest.mark.parametrize("python", python_params()[:1])
def test_coded_native_nodes_read_as_their_plain_form(memtrace, tmp_path, python):
    if not os.path.exists(TARGET_LIB):
        pytest.fail("%s is not built" % TARGET_LIB)
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    caps = {}
    for form in ("plain", "coded"):
        env = dict(os.environ)
        env.pop("MEMTRACE_TEST_PLAIN_NODES", None)
        if form == "plain":
            env["MEMTRACE_TEST_PLAIN_NODES"] = "1"
        caps[form] = tmp_path / (form + ".bin")
        run(memtrace, "run", "--native", "-o", caps[form], "--python", python, prog, TARGET_LIB,
            DEPTHS, env=env)
    NODES = 0x40  # MT_HDR_NATIVE_NODES
    assert not header_flags(memtrace, caps["plain"]) & NODES
    assert header_flags(memtrace, caps["coded"]) & NODES
    # the native nodes are most of the plain capture's bytes
    assert os.path.getsize(caps["coded"]) < os.path.getsize(caps["plain"]) * 0.9

    plain, coded = stacks_by_size(caps["plain"]), stacks_by_size(caps["coded"])
    for depth in range(DEPTHS):
        size = 900000 + depth
        assert size in plain and size in coded, size
        py, native, hybrid = coded[size]
        keep = {"mt_native_a", "mt_native_b", "mt_native_call", "g", "<module>"}
        names = [f[0] for f in hybrid if f[0] in keep]
        assert names == ["mt_native_b", "mt_native_a", "g"] + ["mt_native_call", "g"] * depth + \
            ["<module>"], (depth, names)
        assert [f[0] for f in py] == ["g"] * (depth + 1) + ["<module>"], (depth, py)
        assert any(f[0].startswith("_PyEval_EvalFrameDefault") for f in native)
        assert coded[size] == plain[size], depth
    # numpy's arrays, when it is there: the same stacks in both forms
    arrays = [s for s in range(700000, 700020) if s in plain]
    assert [s for s in range(700000, 700020) if s in coded] == arrays
    for size in arrays:
        assert coded[size] == plain[size], size
        assert any("numpy" in f[1] for f in coded[size][1]), coded[size][1][:8]
