"""Greenlets (gevent's coroutines) swap a thread's Python frames and C stack
at every switch. Two greenlets that allocate and switch to each other 3,000
times each, at different depths: every allocation's Python stack is its own
greenlet's, whole, in every mode; with native stacks its hybrid stack too,
and every native stack taken in part from the thread's last event
(native-memo.h) is the one a whole unwind gives (MEMTRACE_TEST_NATIVE_CHECK=1
counts those that are not)."""

import collections
import os
import re
import subprocess
import sys

import pytest

from test_native import unwound_as_libunwind
from conftest import ROOT, run

sys.path.insert(0, os.path.join(ROOT, "python"))
import memtrace as memtrace_api  # noqa: E402

PYTHON = "/usr/bin/python3"

PROG = r'''
import greenlet

keep = []
N = 3000


def deep(n, size, other):
    if n:
        return deep(n - 1, size, other)
    for i in range(N):
        keep.append(bytearray(size))
        if len(keep) > 50:
            del keep[:25]
        other.switch()


def worker_a():
    deep(30, 100001, gb)


def worker_b():
    deep(5, 100003, ga)


ga = greenlet.greenlet(worker_a)
gb = greenlet.greenlet(worker_b)
ga.switch()
'''


def greenlet_missing():
    try:
        return subprocess.run([PYTHON, "-c", "import greenlet"],
                              stderr=subprocess.DEVNULL).returncode != 0
    except OSError:
        return True


pytestmark = pytest.mark.skipif(greenlet_missing(),
                                reason="no greenlet for /usr/bin/python3 (python3-greenlet)")

# bytearray(n) allocates n + 1 bytes: size -> (deep frames, its worker)
EXPECTED = {100002: (31, "worker_a"), 100004: (6, "worker_b")}


def shapes(frames_of, records):
    """(size, deep frames, workers, innermost function) -> count."""
    out = collections.Counter()
    for rec in records:
        if rec.size in EXPECTED:
            names = [f[0] for f in frames_of(rec)]
            out[(rec.size, names.count("deep"),
                 tuple(n for n in names if n.startswith("worker")), names[0])] += 1
    return out


@pytest.mark.parametrize("mode", [[], ["--trace-python-allocators"], ["--native"],
                                  ["--native", "--trace-python-allocators"]],
                         ids=["default", "pyalloc", "native", "native-pyalloc"])
def test_each_greenlet_allocates_under_its_own_stack(memtrace, tmp_path, mode):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    cap = tmp_path / "c.bin"
    env = dict(os.environ, MEMTRACE_TEST_NATIVE_CHECK="1", MEMTRACE_TEST_UNWIND_CHECK="1")
    p = run(memtrace, "run", "-o", cap, *mode, "--python", PYTHON, prog, env=env)
    want = collections.Counter({(size, deep, (worker,), "deep"): 3000
                                for size, (deep, worker) in EXPECTED.items()})
    reader = memtrace_api.FileReader(str(cap))
    records = list(reader.get_allocation_records())
    assert shapes(lambda r: r.stack_trace(), records) == want
    if "--native" in mode:
        assert reader.metadata.has_native_traces
        assert shapes(lambda r: [f for f in r.hybrid_stack_trace() if f[0] in ("deep",)
                                 or f[0].startswith("worker")], records) == want
        m = re.search(r"native stacks taken from the last event's: (\d+), wrong: (\d+)",
                      p.stderr)
        assert m and m.group(2) == "0", p.stderr
        # switched stacks unwound by the payload as libunwind unwinds them
        checked, fell_back = unwound_as_libunwind(p.stderr)
        assert checked >= 6000 and fell_back == 0, (checked, fell_back)  # 2 x 3000 at least
