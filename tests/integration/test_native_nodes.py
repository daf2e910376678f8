"""Native nodes coded in the node column (docs/format.md section 2.2,
header flag MT_HDR_NATIVE_NODES): a capture read back gives the stacks its
plain form gives. The same program runs twice, once with the payload's
plain form (MEMTRACE_TEST_PLAIN_NODES=1, the records as they are), and
every allocation of a known size reads the same Python, native and hybrid
stacks from both; each of them is also checked against the calls the
program made."""

import os
import re
import struct
import sys

import pytest

from capture_writer import (FORMAT_VERSION, FORMAT_VERSION_COLUMNS, HDR_NATIVE, HDR_NATIVE_NODES,
                            Capture, mt32)
from conftest import BUILD, ROOT, python_params, run, switch_captures

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
    coded_cap, plain_cap = switch_captures(memtrace, tmp_path, "MEMTRACE_TEST_PLAIN_NODES",
                                           "--native", "--python", python, prog, TARGET_LIB,
                                           DEPTHS)
    caps = {"plain": plain_cap, "coded": coded_cap}
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


def hand_built(tmp_path, flags, version=FORMAT_VERSION):
    """NATIVE and HYBRID records in every coding of section 2.2 over two
    chunks (the state starts afresh in the second), written by the
    independent encoder of docs/format.md with and without the flag, in
    the chunk layout of @version (their node segments in columns of their
    own from version 7)."""
    A, B, C, D = 0x7F0000401234, 0x7F0000402345, 0x555500001000, 0x7F0000409876
    c = Capture(flags=flags, version=version)
    c.code(1, "f.py", "f", 1)
    c.stack(1, 0, 1, 2)
    c.native(2, 0, A)            # child of 0, a new address
    c.native(3, 2, B)            # child, a new address
    c.native(4, 3, A)            # child, a recent address
    c.native(5, 4, B)            # child, the address that followed A
    c.hybrid(6, 1, 5)            # the last stack and chain
    c.stack(7, 1, 1, 6)
    c.native(8, 3, C)            # far
    c.native(9, 8, 2**64 - 16)   # child, a delta past 2^63
    c.hybrid(10, 7, 5)           # the last stack, the previous hybrid's chain
    c.hybrid(12, 1, 3)           # an id further on, both far
    c.native(13, 8, B, extra=b"\x2a")  # a trailing field: stored as it is
    c.native(14, 8, D)           # sibling
    c.native(15, 14, 0)          # address 0
    c.hybrid(18, 7, 9)           # the chain of an earlier HYBRID: none has 9
    c.hybrid(19, 1, 5)           # ... 5 has: an index in their list
    c.alloc(0x10000, 100, stack=12)
    c.flush()
    c.native(16, 5, A)           # the second chunk: all afresh
    c.hybrid(17, 7, 16)
    c.alloc(0x10100, 200, stack=17)
    c.trailer(1000)
    return c.save(tmp_path / ("hand-%x-v%d.bin" % (flags, version)))


@pytest.mark.parametrize("version", [FORMAT_VERSION_COLUMNS - 1, FORMAT_VERSION])
def test_hand_built_native_nodes_read_as_written(memtrace, tmp_path, version):
    recs = {}
    for flags in (HDR_NATIVE, HDR_NATIVE | HDR_NATIVE_NODES):
        out = run(memtrace, "parse", hand_built(tmp_path, flags, version)).stdout.splitlines()
        assert out[0].startswith("header version=%d " % version)
        recs[flags] = [l for l in out[1:] if not l.startswith("chunk ")]
    plain, coded = recs[HDR_NATIVE], recs[HDR_NATIVE | HDR_NATIVE_NODES]
    assert coded == plain
    natives = [l for l in coded if l.startswith(("native ", "hybrid "))]
    assert natives == [
        "native id=2 parent=0 ip=0x7f0000401234", "native id=3 parent=2 ip=0x7f0000402345",
        "native id=4 parent=3 ip=0x7f0000401234", "native id=5 parent=4 ip=0x7f0000402345",
        "hybrid id=6 python=1 native=5", "native id=8 parent=3 ip=0x555500001000",
        "native id=9 parent=8 ip=0xfffffffffffffff0", "hybrid id=10 python=7 native=5",
        "hybrid id=12 python=1 native=3", "native id=13 parent=8 ip=0x7f0000402345",
        "native id=14 parent=8 ip=0x7f0000409876", "native id=15 parent=14 ip=0x0",
        "hybrid id=18 python=7 native=9", "hybrid id=19 python=1 native=5",
        "native id=16 parent=5 ip=0x7f0000401234", "hybrid id=17 python=7 native=16"], natives
    assert os.path.getsize(tmp_path / ("hand-%x-v%d.bin" % (HDR_NATIVE | HDR_NATIVE_NODES, version))) < \
        os.path.getsize(tmp_path / ("hand-%x-v%d.bin" % (HDR_NATIVE, version)))


@pytest.mark.parametrize("version", [FORMAT_VERSION_COLUMNS - 1, FORMAT_VERSION])
def test_node_segment_that_does_not_decode_is_corrupt(memtrace, tmp_path, version):
    """A NATIVE record's segment of address mode 3: one error line, exit 1."""
    path = hand_built(tmp_path, HDR_NATIVE | HDR_NATIVE_NODES, version)
    data = bytearray(path.read_bytes())
    # the first chunk is stored raw (no packer): up to version 6 its node
    # column's first byte is the STACK's, the second the first NATIVE's
    # flag; from version 7 the NATIVE column (6) starts with that flag
    eight = version >= FORMAT_VERSION_COLUMNS
    hsize = int.from_bytes(data[10:12], "little")
    body = hsize + 16
    i, lens = body, []
    for _ in range(7 if eight else 5):
        v, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        lens.append(v)
    node = i + sum(lens[:4])
    # the STACK's segment: its flag (next id, sibling), the code's delta
    # and the offset, one byte each
    assert data[node] == 0x04, hex(data[node])
    seg = i + sum(lens[:6]) if eight else node + 3
    if eight:
        # the two STACK records' segments alone, the second's id one past
        # the HYBRID record's before it: its flag and the offset's delta
        assert lens[4] == 3 + 2
    assert data[seg] & 0x18 == 0x10, hex(data[seg])  # the first NATIVE: a delta
    data[seg] |= 0x18
    # the chunk's checksum over its data again
    raw_len, stored_len = struct.unpack_from("<II", data, hsize + 4)
    struct.pack_into("<I", data, hsize + 12, mt32(bytes(data[body:body + stored_len])))
    path.write_bytes(bytes(data))
    cp = run(memtrace, "parse", path, check=False)
    assert cp.returncode == 1
    err = cp.stderr.strip().splitlines()
    assert len(err) == 1 and "capture is corrupt: chunk 0" in err[0], cp.stderr
