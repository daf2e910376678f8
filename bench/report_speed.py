#!/usr/bin/python3
"""How fast `memtrace flamegraph` turns a capture into a page, and how big
the page is. A benchmark, not a test; standard library only.

Two captures:
  churn  bench/workloads/churn.py under `memtrace run
         --trace-python-allocators`, scaled to about --events allocation
         and free events (default 10 million): a real program's capture.
  wide   a synthetic capture written here from docs/format.md with
         --wide-stacks distinct call paths (default 300,000) of 20 frames
         each: what keeps the page small is the node budget, so this shows
         the size bound, not speed.

For each: events, capture size, best-of-N wall and CPU time of
`memtrace flamegraph`, events per second (CPU), and the HTML size.

  /usr/bin/python3 bench/report_speed.py [--memtrace build/cli/memtrace]
      [--events 10000000] [--rounds 3] [--keep DIR] [--markdown FILE]
"""

import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EVENTS_PER_CHURN_ITERATION = 19.5  # measured: 78M events for 4M iterations

# the tests' capture writer, which follows docs/format.md
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from capture_writer import (FORMAT_VERSION, HotCoder, Reuse, blob, chunk as stored_chunk,  # noqa: E402
                            varint, zigzag)


def default_memtrace():
    built = os.path.join(ROOT, "build", "cli", "memtrace")
    return built if os.access(built, os.X_OK) else shutil.which("memtrace") or built


def write_wide(path, n_paths, depth=20):
    """n_paths call paths, each depth frames deep, one allocation each."""
    cmd = b"python3\0wide.py\0"
    out = bytearray(b"MEMTRACE" + struct.pack("<HHIIIQIIQI", FORMAT_VERSION, 52 + len(cmd), 0, 1, 0x030B04F0,
                                              1700000000 * 10**9, 10, 4096, 1, len(cmd)) + cmd)
    chunk = bytearray()

    def rec(rtype, body):
        chunk.extend(bytes([rtype]) + varint(len(body)) + body)

    def flush():
        if chunk:
            out.extend(stored_chunk(chunk))
            chunk.clear()

    sid = 0
    hot = HotCoder(Reuse())
    for p in range(n_paths):
        parent = 0
        for k in range(depth):
            sid += 1
            code = k * 1000 + (p * 7 + k) % 1000 + 1
            rec(5, varint(sid) + varint(zigzag(sid - parent)) + varint(code) + varint(k * 2))
            parent = sid
        addr = 0x100000 + 64 * p
        chunk.extend(hot.alloc(bytes([1]), 1, addr, 48 + p % 64, parent))
        if len(chunk) > 1 << 20:
            flush()
    for code in range(1, depth * 1000 + 1):
        rec(4, varint(code) + varint(code) + blob("/usr/lib/python3/site-packages/pkg%d/mod%d.py"
                                                  % (code % 50, code))
            + blob("Class%d.method_%d" % (code % 97, code)) + blob("Class%d.method_%d" % (code % 97, code))
            + blob(""))
    rec(8, varint(1000) + varint(n_paths) + varint(0))
    flush()
    with open(path, "wb") as f:
        f.write(out)


def timed(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def measure(memtrace, cap, rounds, workdir, name):
    stats = json.loads(subprocess.run([memtrace, "stats", "--json", cap], check=True,
                                      stdout=subprocess.PIPE).stdout)
    events = stats["totals"]["events"]
    out = os.path.join(workdir, name + ".html")
    best = None
    for _ in range(rounds):
        wall, cpu = timed([memtrace, "flamegraph", "-f", "-o", out, cap])
        if best is None or cpu < best[1]:
            best = (wall, cpu)
    return {"capture": name, "events": events, "capture_bytes": os.path.getsize(cap),
            "wall_s": best[0], "cpu_s": best[1], "events_per_s": events / best[1] if best[1] else 0,
            "html_bytes": os.path.getsize(out)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memtrace", default=default_memtrace())
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--wide-stacks", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", help="leave captures and pages in this directory")
    ap.add_argument("--markdown", help="append the results as a Markdown table to this file")
    a = ap.parse_args()

    workdir = a.keep or tempfile.mkdtemp(prefix="mt-report-speed-")
    os.makedirs(workdir, exist_ok=True)
    results = []
    try:
        churn = os.path.join(workdir, "churn.bin")
        n = int(a.events / EVENTS_PER_CHURN_ITERATION) + 1
        print("recording churn.py %d under memtrace run --trace-python-allocators ..." % n, flush=True)
        subprocess.run([a.memtrace, "run", "-f", "--trace-python-allocators", "--python", a.python,
                        "-o", churn, os.path.join(HERE, "workloads", "churn.py"), str(n)],
                       check=True, stdout=subprocess.DEVNULL)
        results.append(measure(a.memtrace, churn, a.rounds, workdir, "churn"))
        if a.wide_stacks:
            wide = os.path.join(workdir, "wide.bin")
            print("writing a capture with %d distinct call paths ..." % a.wide_stacks, flush=True)
            write_wide(wide, a.wide_stacks)
            results.append(measure(a.memtrace, wide, a.rounds, workdir, "wide"))
    finally:
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    lines = ["| capture | events | capture size | flamegraph wall s | CPU s | events/s (CPU) | HTML size |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append("| %s | %s | %.1f MB | %.3f | %.3f | %.1fM | %.2f MB |"
                     % (r["capture"], format(r["events"], ","), r["capture_bytes"] / 1e6, r["wall_s"],
                        r["cpu_s"], r["events_per_s"] / 1e6, r["html_bytes"] / 1e6))
    print("\n".join(lines))
    if a.markdown:
        with open(a.markdown, "a") as f:
            f.write("\n## Report speed (bench/report_speed.py)\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
