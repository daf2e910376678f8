"""Overhead of the pytest plugin (--memtrace) on a suite of small tests.

A benchmark, not a test: writes a suite of N small tests (each a JSON round
trip of a few hundred dicts) into a temporary directory and runs it with
Debian's pytest, bare and with `-p memtrace.pytest_plugin --memtrace`,
interleaved, reporting the medians and the cost per test.

    /usr/bin/python3 bench/pytest_overhead.py [--tests 200] [--rounds 5]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SUITE = '''\
import json
import pytest

@pytest.mark.parametrize("n", range({tests}))
def test_round_trip(n):
    doc = [{{"id": i, "name": "item-%d" % i, "tags": ["a", "b"]}} for i in range(50 + n % 200)]
    assert json.loads(json.dumps(doc)) == doc
'''


def run(cmd, env):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    elapsed = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stdout[-2000:]))
    return elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--build", default=os.environ.get("MEMTRACE_BUILD_DIR",
                                                      os.path.join(ROOT, "build")))
    args = ap.parse_args()

    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"),
               MEMTRACE_BUILD_DIR=args.build, PYTHONDONTWRITEBYTECODE="1")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "test_suite.py")
        with open(path, "w") as f:
            f.write(SUITE.format(tests=args.tests))
        base = ["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", path]
        plugin = base[:4] + ["-p", "memtrace.pytest_plugin", "--memtrace"] + base[4:]
        bare, traced = [], []
        for r in range(args.rounds):
            order = [(bare, base), (traced, plugin)]
            if r % 2:
                order.reverse()
            for bucket, cmd in order:
                bucket.append(run(cmd, env))
    b, t = statistics.median(bare), statistics.median(traced)
    print("tests: %d, rounds: %d" % (args.tests, args.rounds))
    print("bare:       median %.3f s  (%s)" % (b, " ".join("%.2f" % x for x in bare)))
    print("--memtrace: median %.3f s  (%s)" % (t, " ".join("%.2f" % x for x in traced)))
    print("overhead:   %.2fx, %.1f ms per test" % (t / b, (t - b) / args.tests * 1000))


if __name__ == "__main__":
    main()
