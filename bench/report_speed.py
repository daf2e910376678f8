#!/usr/bin/python3
"""How fast `memtrace flamegraph` and `stats` turn a capture into a page,
with how big the page is and the reader's peak RSS, and how long a
refresh of `memtrace live` takes on a long capture. A benchmark, not a
test; standard library only.

Three captures:
  churn  bench/workloads/churn.py under `memtrace run
         --trace-python-allocators`, scaled to about --events allocation
         and free events (default 10 million): a real program's capture.
  hoard  a program that keeps --hoard-objects small objects (default 5
         million: 10 million blocks, a tuple and a str each) live to its
         end, under `memtrace run --trace-python-allocators`: the reader
         follows every live block, which is the size of its live map and
         a miss to memory for every event (the "8 GB overnight" case).
  pandas with --pandas-rows N (default 400,000; 0: none), a pandas job
         under `memtrace run --native --trace-python-allocators`: a
         CSV of N rows of text read with object columns three times
         over, grouped and joined, and its first 30% once more (about
         10 million events for 400,000 rows, half of them live at the
         end; the issue's "10-million-event --native capture", symbols
         included). Skipped, with a note, where pandas does not import.
  wide   a synthetic capture written here from docs/format.md with
         --wide-stacks distinct call paths (default 300,000) of 20 frames
         each: what keeps the page small is the node budget, so this shows
         the size bound, not speed.

For each: events, capture size, best-of-N wall and CPU time of
`memtrace flamegraph` and of `memtrace stats`, events per second (CPU),
the HTML size, and the peak RSS of each (/usr/bin/time's %M).

With --live-chunks N, the churn capture is also followed by `memtrace
live` as if it were still written: all but its last N chunks first (the
first refresh reads them from the start), then --idle-frames refreshes
that find nothing new (each frame's own read time, and the process's CPU
time per refresh, drawing included), then the last N chunks appended (the
time of the refresh that reads them); and the peak RSS of the view.

  /usr/bin/python3 bench/report_speed.py [--memtrace build/cli/memtrace]
      [--events 10000000] [--hoard-objects 5000000] [--pandas-rows 400000] [--rounds 3]
      [--keep DIR] [--markdown FILE]
      [--churn-capture FILE] [--live-chunks N] [--idle-frames 20]
"""

import argparse
import json
import os
import re
import resource
import select
import shutil
import statistics
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


HOARD = """\
import sys
keep = []
for i in range(int(sys.argv[1])):
    keep.append((i, str(i)))
print(len(keep))
"""


PANDAS_JOB = """\
import sys
import pandas as pd
path, rows = sys.argv[1], int(sys.argv[2])
totals = {}
for nrows in (None, None, None, rows * 3 // 10):
    df = pd.read_csv(path, dtype=object, nrows=nrows)
    counts = df.groupby("city").size()
    df["key"] = df["name"].str.cat(df["code"], sep="-")
    for city, n in counts.items():
        totals[city] = totals.get(city, 0) + n
print(len(totals))
"""


def write_rows(path, n):
    """A CSV of @n rows of text, the same every time."""
    import csv
    import random
    rnd = random.Random(1)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "city", "code", "n"])
        for i in range(n):
            w.writerow(["name%d" % rnd.randrange(10**6), "city%d" % rnd.randrange(5000),
                        "c%x" % rnd.randrange(1 << 30), i])


def timed(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def timed_rss(cmd, workdir):
    """(wall s, CPU s, peak RSS bytes) of @cmd, from /usr/bin/time."""
    out = os.path.join(workdir, "time.txt")
    subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", "-o", out] + cmd, check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        wall, user, sys_, rss = f.read().split()[-4:]
    return float(wall), float(user) + float(sys_), int(rss) * 1024


def measure(memtrace, cap, rounds, workdir, name):
    stats = json.loads(subprocess.run([memtrace, "stats", "--json", cap], check=True,
                                      stdout=subprocess.PIPE).stdout)
    events = stats["totals"]["events"]
    out = os.path.join(workdir, name + ".html")
    r = {"capture": name, "events": events, "capture_bytes": os.path.getsize(cap)}
    for report, cmd in (("flamegraph", [memtrace, "flamegraph", "-q", "-f", "-o", out, cap]),
                        ("stats", [memtrace, "stats", "-q", cap])):
        best = None
        for _ in range(rounds):
            t = timed_rss(cmd, workdir)
            if best is None or t[1] < best[1]:
                best = t
        r[report] = {"wall_s": best[0], "cpu_s": best[1],
                     "events_per_s": events / best[1] if best[1] else 0, "peak_rss": best[2]}
    r["html_bytes"] = os.path.getsize(out)
    return r


def chunk_offsets(data):
    """Where each chunk of a capture starts, and its end (docs/format.md)."""
    off = struct.unpack_from("<H", data, 10)[0]
    offs = []
    while off + 16 <= len(data) and data[off:off + 4] == b"MTCK":
        offs.append(off)
        off += 16 + struct.unpack_from("<I", data, off + 8)[0]
    return offs + [off]


class LiveFrames:
    """Frames of `memtrace live` on a pipe, and their read lines."""

    READ = re.compile(r"^read (\d+) chunks?, (\d+) events? (.*) \(([\d.]+) ms\)$", re.M)

    def __init__(self, proc):
        self.proc, self.buf = proc, b""

    def next(self, timeout=600):
        deadline = time.monotonic() + timeout
        while self.buf.count(b"\n\n") < 2:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and not select.select(
                    [self.proc.stdout], [], [], 0)[0]:
                raise RuntimeError("no frame from memtrace live: %r" % self.buf[-300:])
            if select.select([self.proc.stdout], [], [], left)[0]:
                self.buf += os.read(self.proc.stdout.fileno(), 1 << 16)
        parts = self.buf.split(b"\n\n")
        frame = (parts[0] + b"\n\n" + parts[1]).decode()
        self.buf = b"\n\n".join(parts[2:])
        m = self.READ.search(frame)
        return frame, (int(m.group(1)), int(m.group(2)), m.group(3), float(m.group(4)))


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def measure_live(memtrace, cap, workdir, n_new, idle_frames):
    """`memtrace live` following @cap as if written: see the module's doc."""
    data = bytearray(open(cap, "rb").read())
    offs = chunk_offsets(data)
    n_new = min(n_new, len(offs) - 2)
    cut = offs[-1 - n_new]
    # a writer that is running (this process), started now: live waits for more
    data[16:20] = struct.pack("<I", os.getpid())
    data[24:32] = struct.pack("<Q", time.time_ns())
    follow = os.path.join(workdir, "follow.bin")
    with open(follow, "wb") as f:
        f.write(data[:cut])
    rss_out = os.path.join(workdir, "live-time.txt")
    proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", rss_out, memtrace, "live",
                             "--interval", "0.05", "-n", "20", follow], stdout=subprocess.PIPE)
    try:
        frames = LiveFrames(proc)
        _, first = frames.next()
        with open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)) as f:
            live_pid = int(f.read().split()[0])
        t0, c0 = time.monotonic(), cpu_ticks(live_pid)
        idle = [frames.next()[1] for _ in range(idle_frames)]
        t1, c1 = time.monotonic(), cpu_ticks(live_pid)
        assert all(r[0] == 0 for r in idle), idle
        with open(follow, "ab") as f:
            f.write(data[cut:])
        new_chunks, new_events, new_ms = 0, 0, 0.0
        while True:
            frame, r = frames.next()
            new_chunks, new_events, new_ms = new_chunks + r[0], new_events + r[1], new_ms + r[3]
            if "tracking ended" in frame:
                break
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with open(rss_out) as f:
        rss = int(f.read().split()[-1]) * 1024
    hz = os.sysconf("SC_CLK_TCK")
    return {"chunks": len(offs) - 1, "first_chunks": first[0], "first_events": first[1],
            "first_ms": first[3], "idle_read_ms": statistics.median(r[3] for r in idle),
            "idle_cpu_ms": (c1 - c0) * 1000 / hz / idle_frames,
            "idle_wall_ms": (t1 - t0) * 1000 / idle_frames, "new_chunks": new_chunks,
            "new_events": new_events, "new_ms": new_ms, "peak_rss": rss}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--memtrace", default=default_memtrace())
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--wide-stacks", type=int, default=300_000)
    ap.add_argument("--hoard-objects", type=int, default=5_000_000)
    ap.add_argument("--pandas-rows", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", help="leave captures and pages in this directory")
    ap.add_argument("--markdown", help="append the results as a Markdown table to this file")
    ap.add_argument("--churn-capture", help="measure this capture rather than record churn.py")
    ap.add_argument("--live-chunks", type=int, default=0,
                    help="follow churn with memtrace live, then append its last N chunks")
    ap.add_argument("--idle-frames", type=int, default=20)
    a = ap.parse_args()

    workdir = a.keep or tempfile.mkdtemp(prefix="mt-report-speed-")
    os.makedirs(workdir, exist_ok=True)
    results, live = [], []
    try:
        churn = a.churn_capture or os.path.join(workdir, "churn.bin")
        if not a.churn_capture:
            n = int(a.events / EVENTS_PER_CHURN_ITERATION) + 1
            print("recording churn.py %d under memtrace run --trace-python-allocators ..." % n,
                  flush=True)
            subprocess.run([a.memtrace, "run", "-q", "-f", "--trace-python-allocators", "--python",
                            a.python, "-o", churn, os.path.join(HERE, "workloads", "churn.py"),
                            str(n)], check=True, stdout=subprocess.DEVNULL)
        results.append(measure(a.memtrace, churn, a.rounds, workdir, "churn"))
        if a.live_chunks:
            print("following churn with memtrace live ...", flush=True)
            live.append(("churn", measure_live(a.memtrace, churn, workdir, a.live_chunks,
                                               a.idle_frames)))
        if a.hoard_objects:
            prog, hoard = os.path.join(workdir, "hoard.py"), os.path.join(workdir, "hoard.bin")
            with open(prog, "w") as f:
                f.write(HOARD)
            print("recording a program that keeps %d objects live ..." % a.hoard_objects,
                  flush=True)
            subprocess.run([a.memtrace, "run", "-q", "-f", "--trace-python-allocators", "--python",
                            a.python, "-o", hoard, prog, str(a.hoard_objects)], check=True,
                           stdout=subprocess.DEVNULL)
            results.append(measure(a.memtrace, hoard, a.rounds, workdir, "hoard"))
        if a.pandas_rows and subprocess.run([a.python, "-c", "import pandas"],
                                            stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL).returncode != 0:
            print("pandas: skipped, pandas does not import in %s" % a.python, flush=True)
        elif a.pandas_rows:
            prog, rows = os.path.join(workdir, "pandas_job.py"), os.path.join(workdir, "rows.csv")
            cap = os.path.join(workdir, "pandas.bin")
            with open(prog, "w") as f:
                f.write(PANDAS_JOB)
            write_rows(rows, a.pandas_rows)
            print("recording a pandas job over %d rows under --native ..." % a.pandas_rows,
                  flush=True)
            subprocess.run([a.memtrace, "run", "-q", "-f", "--native", "--trace-python-allocators",
                            "--python", a.python, "-o", cap, prog, rows, str(a.pandas_rows)],
                           check=True, stdout=subprocess.DEVNULL)
            results.append(measure(a.memtrace, cap, a.rounds, workdir, "pandas-native"))
        if a.wide_stacks:
            wide = os.path.join(workdir, "wide.bin")
            print("writing a capture with %d distinct call paths ..." % a.wide_stacks, flush=True)
            write_wide(wide, a.wide_stacks)
            results.append(measure(a.memtrace, wide, a.rounds, workdir, "wide"))
            if a.live_chunks:
                print("following wide with memtrace live ...", flush=True)
                live.append(("wide", measure_live(a.memtrace, wide, workdir, a.live_chunks,
                                                  a.idle_frames)))
    finally:
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    lines = ["| capture | events | capture size | report | wall s | CPU s | events/s (CPU) "
             "| peak RSS | HTML size |", "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in results:
        for report in ("flamegraph", "stats"):
            m = r[report]
            lines.append("| %s | %s | %.1f MB | %s | %.3f | %.3f | %.1fM | %.1f MiB | %s |"
                         % (r["capture"], format(r["events"], ","), r["capture_bytes"] / 1e6,
                            report, m["wall_s"], m["cpu_s"], m["events_per_s"] / 1e6,
                            m["peak_rss"] / 2**20,
                            "%.2f MB" % (r["html_bytes"] / 1e6) if report == "flamegraph" else "-"))
    if live:
        rows = (("chunks in the capture", lambda m: "%d" % m["chunks"]),
                ("first refresh: chunks, events read from the start",
                 lambda m: "%d, %s" % (m["first_chunks"], format(m["first_events"], ","))),
                ("first refresh: read and figures", lambda m: "%.1f ms" % m["first_ms"]),
                ("refresh with nothing new: read and figures (median)",
                 lambda m: "%.2f ms" % m["idle_read_ms"]),
                ("refresh with nothing new: CPU of the view per refresh, drawing included",
                 lambda m: "%.2f ms" % m["idle_cpu_ms"]),
                ("refresh of the last chunks: chunks, events",
                 lambda m: "%d, %s" % (m["new_chunks"], format(m["new_events"], ","))),
                ("refresh of the last chunks: read and figures", lambda m: "%.1f ms" % m["new_ms"]),
                ("peak RSS of the view", lambda m: "%.1f MiB" % (m["peak_rss"] / 2**20)))
        lines += ["", "| memtrace live | " + " | ".join(name for name, _ in live) + " |",
                  "|---|" + "---:|" * len(live)]
        for label, fmt in rows:
            lines.append("| %s | %s |" % (label, " | ".join(fmt(m) for _, m in live)))
    print("\n".join(lines))
    if a.markdown:
        with open(a.markdown, "a") as f:
            f.write("\n## Report speed (bench/report_speed.py)\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
