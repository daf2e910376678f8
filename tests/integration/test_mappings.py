"""Mappings (mmap and munmap) of a real program run under memtrace: a
mapping is temporary as memray counts one, when the thread that made it
unmaps its address and length with at most the threshold of its
allocations in between, in every report that shows temporary allocations
(stats, flamegraph, transform, FileReader)."""

import csv
import json
import os

import pytest

from conftest import BUILD, ROOT, run

from test_flamegraph import page_data

MB = 1 << 20

LIB = r"""
#include <stdlib.h>
#include <sys/mman.h>
static void *map(size_t n) { return mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); }
void *volatile kept[4];
/* unmapped at once */
void at_once(size_t n) { void *p = map(n); munmap(p, n); }
/* two mallocs between the mmap and its munmap */
void after_two(size_t n) { void *p = map(n); kept[0] = malloc(100); kept[1] = malloc(200); munmap(p, n); free(kept[0]); free(kept[1]); }
/* unmapped at once, in two halves: no munmap is the mmap's */
void halves(size_t n) { char *p = map(n); munmap(p, n / 2); munmap(p + n / 2, n / 2); }
"""

PROG = """\
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.at_once(ctypes.c_size_t(3 * 1048576))      # line 3
lib.after_two(ctypes.c_size_t(5 * 1048576))    # line 4
lib.halves(ctypes.c_size_t(6 * 1048576))       # line 5
"""

# the bytes temporary by line of PROG at each threshold: line 4's two
# mallocs are, at 1 already (each has at most one allocation before its
# free), its mapping only at 2
TEMPORARY = {1: {3: 3 * MB, 4: 300}, 2: {3: 3 * MB, 4: 5 * MB + 300}}


@pytest.fixture(scope="module")
def capture(memtrace, tmp_path_factory, cc):
    d = tmp_path_factory.mktemp("mappings")
    (d / "maps.c").write_text(LIB)
    lib = d / "libmaps.so"
    run(cc, "-shared", "-fPIC", "-O1", "-o", lib, d / "maps.c")
    prog = d / "prog.py"
    prog.write_text(PROG)
    cap = d / "cap.bin"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap, prog, lib, cwd=d)
    return cap, str(prog)


def by_line(pairs, prog):
    """{line of PROG: bytes} of (allocator, stack, bytes): what PROG's
    lines allocated themselves (the calls into the library)."""
    got = {}
    for _, stack, size in pairs:
        if len(stack) == 1 and stack[0][:2] == ("<module>", prog):
            got[stack[-1][2]] = got.get(stack[-1][2], 0) + size
    return got


@pytest.mark.parametrize("threshold", [1, 2])
def test_transform_csv(memtrace, capture, threshold):
    cap, prog = capture
    out = cap.parent / ("t%d.csv" % threshold)
    run(memtrace, "transform", "csv", "--temporary-allocations", "--temporary-allocation-threshold",
        threshold, "-f", "-o", out, cap)
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    pairs = [(r["allocator"], [tuple(fr.rsplit(";", 2)[:2]) + (int(fr.rsplit(";", 2)[2]),)
                               for fr in r["stack_trace"].split("|")] if r["stack_trace"] else [],
              int(r["size"])) for r in rows]
    assert by_line(pairs, prog) == TEMPORARY[threshold], rows


@pytest.mark.parametrize("threshold", [1, 2])
def test_filereader(capture, threshold):
    cap, prog = capture
    code = (
        "import json, sys, memtrace\n"
        "r = memtrace.FileReader(sys.argv[1])\n"
        "print(json.dumps([(x.allocator.name, x.stack_trace(), x.size) for x in\n"
        "                  r.get_temporary_allocation_records(threshold=%d)]))\n" % threshold)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD)
    got = json.loads(run("/usr/bin/python3", "-c", code, cap, env=env).stdout)
    pairs = [(a, [tuple(f) for f in st], size) for a, st, size in got]
    assert by_line(pairs, prog) == TEMPORARY[threshold], got


@pytest.mark.parametrize("threshold", [1, 2])
def test_stats_and_flamegraph_totals(memtrace, capture, threshold):
    """The totals have the temporary mappings beside the interpreter's own
    small temporary blocks (well under 1 MiB)."""
    cap, _ = capture
    want = sum(TEMPORARY[threshold].values())
    t = json.loads(run(memtrace, "stats", "--json", "--temporary-allocation-threshold", threshold,
                       cap).stdout)["totals"]
    assert want <= t["temporary_bytes"] < want + MB, t
    out = cap.parent / ("t%d.html" % threshold)
    run(memtrace, "flamegraph", "-q", "-f", "-o", out, "--temporary-allocations",
        "--temporary-allocation-threshold", threshold, cap)
    d, _ = page_data(out)
    assert d["view"] == "temporary" and d["total_bytes"] == t["temporary_bytes"]


REFUSED = r"""
#include <sys/mman.h>
void *volatile kept;
/* a munmap the kernel refuses (a length past any address space), then one it takes */
int refused(void)
{
    char *p = mmap(0, 2 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int r = munmap(p, (size_t)1 << 60);
    munmap(p, 1 << 20);
    kept = p + (1 << 20);
    return r;
}
"""


def test_a_munmap_the_kernel_refuses_is_no_event(memtrace, tmp_path, cc):
    """munmap(p, 2^60) fails with EINVAL and unmaps nothing: the capture
    reads whole, and the mapping's second half is still live at the end."""
    (tmp_path / "refused.c").write_text(REFUSED)
    lib = tmp_path / "librefused.so"
    run(cc, "-shared", "-fPIC", "-O1", "-o", lib, tmp_path / "refused.c")
    prog = tmp_path / "prog.py"
    prog.write_text("import ctypes, sys\n"
                    "assert ctypes.CDLL(sys.argv[1]).refused() == -1\n"
                    "x = [bytearray(10000) for _ in range(10)]\n")
    cap = tmp_path / "cap.bin"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap, prog, lib)
    p = run(memtrace, "stats", cap, check=False)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    rows = json.loads(run(memtrace, "summary", "--leaks", "--json", cap).stdout)["rows"]
    line2 = [r for r in rows if r["file"] == str(prog) and r["line"] == 2]
    assert line2 and line2[0]["own_bytes"] == 1 << 20, rows[:5]


FAILS = r"""
#include <malloc.h>
#include <stdlib.h>
#include <sys/mman.h>
void *kept_block(size_t n) { return malloc(n); }
/* fails (ENOMEM): the block lives on as it was */
void *grow(void *p, size_t n) { return realloc(p, n); }
void *grow_array(void *p, size_t n) { return reallocarray(p, n, 1); }
size_t usable(void *p) { return malloc_usable_size(p); }
void *map(size_t n) { void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); return p == MAP_FAILED ? NULL : p; }
/* fails (EINVAL: not on a page boundary, or no length): unmaps nothing */
int unmap(void *p, size_t n) { return munmap(p, n); }
"""

FAILS_PROG = """\
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
for f, res, args in (("kept_block", ctypes.c_void_p, [ctypes.c_size_t]),
                     ("grow", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]),
                     ("grow_array", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]),
                     ("usable", ctypes.c_size_t, [ctypes.c_void_p]),
                     ("map", ctypes.c_void_p, [ctypes.c_size_t]),
                     ("unmap", ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t])):
    getattr(lib, f).restype, getattr(lib, f).argtypes = res, args
q = lib.kept_block(3000007)                 # line 10
assert not lib.grow(q, 1 << 62)             # line 11
small = lib.kept_block(1000)                # line 12
assert not lib.grow_array(small, 1 << 62)   # line 13
m = lib.map(1 << 20)                        # line 14
assert lib.unmap(m + 1, 1 << 18) == -1      # line 15
assert lib.unmap(m, 0) == -1                # line 16
print(lib.usable(q), lib.usable(small))
"""


def test_failed_realloc_and_munmap_keep_their_blocks(memtrace, tmp_path, cc):
    """A realloc that fails leaves its block, and a munmap the kernel
    refuses unmaps nothing: the leaks hold both blocks and the mapping, the
    blocks at the allocator's usable size (the size asked for is not known
    where the failure is seen), under the failed call's line."""
    (tmp_path / "fails.c").write_text(FAILS)
    lib = tmp_path / "libfails.so"
    run(cc, "-shared", "-fPIC", "-O1", "-o", lib, tmp_path / "fails.c")
    prog = tmp_path / "prog.py"
    prog.write_text(FAILS_PROG)
    cap = tmp_path / "cap.bin"
    out = run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap, prog, lib,
              cwd=tmp_path).stdout
    usable_q, usable_small = map(int, out.split()[-2:])
    assert usable_q >= 3000007 and usable_small >= 1000
    leaks = json.loads(run(memtrace, "summary", "--leaks", "--json", cap).stdout)
    own = {}
    for row in leaks["rows"]:
        if row["file"] == str(prog):
            own[row["line"]] = own.get(row["line"], 0) + row["own_bytes"]
    assert own.get(11) == usable_q and own.get(13) == usable_small, own
    assert own.get(14) == MB, own
    assert 10 not in own and 12 not in own, own
