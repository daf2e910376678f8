#!/usr/bin/env python3
"""Cost of an event against the depth of its Python stack.

bench/depth_target.py recurses DEPTH frames deep and allocates in a loop
there, timing the loop only. For each depth, bare and tracked runs are
interleaved; the cost per event is the tracked loop's extra time over the
bare one's, divided by the events the loop adds to the capture (the
capture of the same run with an empty loop subtracted). A benchmark, not a
test: it fails only if it cannot run.

With --through-c each frame calls the next through C (a functools.partial),
so that the native stack grows with the Python one (3.11+ evaluates
Python-to-Python calls in one C frame): what --native's unwinder meets in
a real service.

  /usr/bin/python3 bench/depth.py [--rounds N] [--depths 1,10,100,1000]
      [--modes default,pyalloc,native] [--through-c] [--python PATH]
      [--memtrace PATH] [--markdown FILE]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
import run as bench  # noqa: E402  (count_memtrace_events, default_memtrace)

TARGET = os.path.join(BENCH_DIR, "depth_target.py")
MODES = {"default": [], "pyalloc": ["--trace-python-allocators"], "native": ["--native"],
         "native-pyalloc": ["--native", "--trace-python-allocators"]}


def loop_seconds(argv):
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if cp.returncode != 0:
        sys.exit("depth.py: %s failed: %s" % (argv[0], cp.stderr.strip()[-300:]))
    return float(cp.stdout.strip().splitlines()[-1])


def events(memtrace, python, mode, depth, n, capture, via):
    argv = [memtrace, "run", "-f", "-o", capture, *MODES[mode], "--python", python, TARGET,
            str(depth), str(n), via]
    loop_seconds(argv)
    count, _ = bench.count_memtrace_events(memtrace, capture, 600)
    if count is None:
        sys.exit("depth.py: cannot count the events of " + capture)
    return count


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--depths", default="1,10,100,1000")
    ap.add_argument("--loop", type=int, default=1_000_000, help="allocations per run")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--memtrace", default=None)
    ap.add_argument("--modes", default="default,pyalloc")
    ap.add_argument("--through-c", action="store_true",
                    help="each frame calls the next through C")
    ap.add_argument("--markdown", default=None, help="write the table to FILE")
    args = ap.parse_args(argv)
    via = "c" if args.through_c else "py"
    memtrace = args.memtrace or bench.default_memtrace()
    depths = [int(d) for d in args.depths.split(",")]
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            sys.exit("depth.py: unknown mode %r (known: %s)" % (mode, ", ".join(MODES)))
    rows = []
    with tempfile.TemporaryDirectory(prefix="memtrace-depth-") as tmp:
        cap = os.path.join(tmp, "c.bin")
        for mode in modes:
            for depth in depths:
                loop_events = (events(memtrace, args.python, mode, depth, args.loop, cap, via) -
                               events(memtrace, args.python, mode, depth, 0, cap, via))
                extra = []
                for _ in range(args.rounds):
                    bare = loop_seconds([args.python, TARGET, str(depth), str(args.loop), via])
                    tracked = loop_seconds([memtrace, "run", "-f", "-o", cap, *MODES[mode],
                                            "--python", args.python, TARGET, str(depth),
                                            str(args.loop), via])
                    extra.append((tracked - bare) * 1e9 / max(loop_events, 1))
                ns = statistics.median(extra)
                rows.append((mode, depth, loop_events / args.loop, ns))
                print("%-8s depth %5d: %.1f events per allocation loop turn, %.1f ns per event"
                      % (mode, depth, loop_events / args.loop, ns), flush=True)
    lines = ["| mode | depth | events per turn | ns per event | x depth %d |" % depths[0],
             "|---|---:|---:|---:|---:|"]
    for mode, depth, per_turn, ns in rows:
        base = next(r[3] for r in rows if r[0] == mode and r[1] == depths[0])
        lines.append("| %s | %d | %.1f | %.1f | %.2fx |" % (mode, depth, per_turn, ns,
                                                            ns / base if base > 0 else 0))
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as fp:
            fp.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
