#!/usr/bin/env python3
"""memtrace attach/detach benchmark.

Measures, against live Python processes started by bench/attach_target.py:

1. latency: how long `memtrace attach PID` takes to return with tracking active,
   and `memtrace detach PID`, for idle targets (time.sleep, blocked in a pipe read)
   and busy ones (a CPU-bound pure Python loop, 8 threads allocating, and 32 threads that
   never leave Python code, on every interpreter 3.8 to 3.13 present); first attach
   (payload injected) and re-attach (payload already loaded) on the same process;
2. speed: throughput of a target while attached, relative to the same process
   before attach, and after detach (default mode, then --trace-python-allocators);
3. for comparison: `memtrace attach --method gdb`, and `heaptrack -p`.

A benchmark, not a test: it never fails on slow numbers. Plain Python 3, standard
library only.  Run with:  /usr/bin/python3 bench/attach.py
See bench/README.md ("Attach benchmark") for what the numbers mean.
"""

import argparse
import glob
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
import results as bench_results  # noqa: E402  (machine_description, median, tool_version)
import run as bench_run  # noqa: E402  (default_memtrace)

TARGET = os.path.join(BENCH_DIR, "attach_target.py")
LATENCY_TARGETS = ["sleep", "pipe", "busy", "threads"]
TARGET_LABEL = {
    "sleep": "idle: time.sleep",
    "pipe": "idle: os.read on a pipe",
    "busy": "busy: pure Python loop",
    "threads": "busy: 8 threads allocating",
    "threads32": "busy: 32 threads in Python code",
}
# run on every pyenv interpreter present too, besides the two main ones (the GIL
# changes hands differently from 3.12): attach must not wait for it on any
BUSY_TARGETS = ["threads32"]
BUSY_PYTHONS = ["3.8", "3.9", "3.10", "3.11", "3.12", "3.13"]
KINDS = ["churn", "json"]
SECTION = "## Attach"
median = bench_results.median


# --------------------------------------------------------------------------- processes

class Target:
    """A running attach_target.py, its stdin/stdout pipes, in its own process group."""

    def __init__(self, python, mode, timeout=30.0):
        self.mode = mode
        self.proc = subprocess.Popen([python, TARGET, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.pid = self.proc.pid
        self._buf = b""
        line = self.readline(timeout)
        if line is None or not line.startswith("ready"):
            err = self.kill()
            raise RuntimeError("target %s did not start: %r %s" % (mode, line, err.strip()[-300:]))

    def readline(self, timeout):
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def request(self, line, timeout):
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()
        reply = self.readline(timeout)
        if reply is None:
            raise RuntimeError("target %d gave no answer to %r (alive: %s)" % (self.pid, line, self.alive()))
        return reply

    def alive(self):
        return self.proc.poll() is None

    def status(self):
        rc = self.proc.poll()
        if rc is None:
            return "running"
        if rc < 0:
            return "killed by %s" % signal.Signals(-rc).name
        return "exited with status %d" % rc

    def kill(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            _, err = self.proc.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            err = b""
        return (err or b"").decode(errors="replace")


def timed(argv, timeout):
    """Runs argv; returns (seconds, returncode or None on timeout/failure to start, output)."""
    for attempt in range(50):
        t0 = time.perf_counter()
        try:
            cp = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            return time.perf_counter() - t0, None, err + "\n(timed out after %g s)" % timeout
        except OSError as e:
            # EACCES/ETXTBSY/ENOENT while the binary is being rebuilt: wait for it, up to 5 s.
            if attempt == 49:
                return 0.0, None, "cannot run %s: %s" % (argv[0], e)
            time.sleep(0.1)
            continue
        return time.perf_counter() - t0, cp.returncode, cp.stderr + cp.stdout


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    line = lines[-1] if lines else ""
    return (line[len("memtrace: "):] if line.startswith("memtrace: ") else line)[:160]


class Memtrace:
    def __init__(self, path, tmpdir, timeout):
        self.path, self.tmpdir, self.timeout = path, tmpdir, timeout
        self.n = 0

    def attach(self, pid, extra=()):
        self.n += 1
        cap = os.path.join(self.tmpdir, "attach-%d-%d.bin" % (pid, self.n))
        dt, rc, err = timed([self.path, "attach", "-f", "-o", cap] + list(extra) + [str(pid)], self.timeout)
        ok = rc == 0 and "tracking pid" in err
        return dt, ok, err, cap

    def detach(self, pid):
        dt, rc, err = timed([self.path, "detach", str(pid)], self.timeout)
        return dt, rc == 0, err


# --------------------------------------------------------------------------- 1. latency

def bench_latency(mt, python, targets, runs, method, log, stop_on_failure=False):
    """For each target kind: `runs` fresh processes, each attached, detached, attached again
    (payload already loaded) and detached again. Kinds interleave run by run."""
    extra = [] if method == "auto" else ["--method", method]
    res = {k: {"attach": [], "detach": [], "reattach": [], "redetach": [], "failures": [], "runs": 0}
           for k in targets}
    active = list(targets)
    for i in range(runs):
        for kind in list(active):
            r = res[kind]
            r["runs"] += 1
            try:
                t = Target(python, kind)
            except RuntimeError as e:
                r["failures"].append(str(e))
                continue
            try:
                # The handshake says the target is in its loop; give a busy one a moment to be in it.
                if kind in ("busy", "threads", "threads32"):
                    time.sleep(0.05)
                dt, ok, err, cap = mt.attach(t.pid, extra)
                if not ok:
                    r["failures"].append("attach: %s (%.2f s)" % (last_line(err), dt))
                    if stop_on_failure:
                        active.remove(kind)
                    continue
                if not t.alive():
                    r["failures"].append("target %s after attach" % t.status())
                    continue
                if method == "auto" and "trying gdb" in err:
                    r["failures"].append("ptrace found no safe point; gdb was used (%.2f s)" % dt)
                r["attach"].append(dt)
                dt, ok, err = mt.detach(t.pid)
                if not ok:
                    r["failures"].append("detach: %s" % last_line(err))
                    continue
                r["detach"].append(dt)
                if not os.path.exists(cap) or os.path.getsize(cap) == 0:
                    r["failures"].append("empty capture after detach")
                if method == "auto":
                    dt, ok, err, cap = mt.attach(t.pid)
                    if ok:
                        r["reattach"].append(dt)
                        dt, ok, err = mt.detach(t.pid)
                        if ok:
                            r["redetach"].append(dt)
                    if not ok:
                        r["failures"].append("re-attach/detach: %s" % last_line(err))
                if not t.alive():
                    r["failures"].append("target %s after detach" % t.status())
            finally:
                t.kill()
                for p in glob.glob(os.path.join(mt.tmpdir, "attach-%d-*" % t.pid)):
                    os.unlink(p)
        log(" %d" % (i + 1))
    return res


HT_SETTLE = 3.0  # seconds a target must survive heaptrack's injection to count


def heaptrack_attach(heaptrack, python, kind, tmpdir, timeout, settle=HT_SETTLE):
    """`heaptrack -p` on a fresh target: seconds until it prints "injection finished",
    and whether the target is still alive `settle` seconds later. Returns a dict."""
    t = Target(python, kind)
    out = {"kind": kind}
    if kind in ("busy", "threads"):
        time.sleep(0.05)
    ht = None
    try:
        t0 = time.perf_counter()
        ht = subprocess.Popen([heaptrack, "-o", os.path.join(tmpdir, "ht-%d" % t.pid), "-p", str(t.pid)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)
        fd = ht.stdout.fileno()
        text = b""
        deadline = t0 + timeout
        while b"injection finished" not in text:
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            r, _, _ = select.select([fd], [], [], left)
            chunk = os.read(fd, 4096) if r else b""
            if not chunk:
                break
            text += chunk
        dt = time.perf_counter() - t0
        if b"injection finished" in text:
            out["attach"] = dt
        else:
            out["error"] = "no \"injection finished\" within %g s: %s" % (
                timeout, last_line(text.decode(errors="replace")))
        time.sleep(settle)
        out["target"] = t.status()
        return out, t, ht
    except BaseException:
        if ht is not None:
            _killpg(ht.pid)
        t.kill()
        raise


def _killpg(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def bench_heaptrack_latency(heaptrack, python, targets, runs, tmpdir, timeout, log):
    res = {k: {"attach": [], "failures": [], "runs": 0} for k in targets}
    for i in range(runs):
        for kind in targets:
            r = res[kind]
            r["runs"] += 1
            try:
                out, t, ht = heaptrack_attach(heaptrack, python, kind, tmpdir, timeout)
            except RuntimeError as e:
                r["failures"].append(str(e))
                continue
            t.kill()
            _killpg(ht.pid)
            ht.wait()
            if out.get("error"):
                r["failures"].append(out["error"])
            elif out["target"] != "running":
                r["failures"].append("target %s %.1f s after the injection" % (out["target"], HT_SETTLE))
            else:
                r["attach"].append(out["attach"])
        log(" %d" % (i + 1))
    for p in glob.glob(os.path.join(tmpdir, "ht-*")):
        os.unlink(p)
    return res


# --------------------------------------------------------------------------- 2. speed

def window(t, kind, n, timeout):
    """One timed window of n iterations of `kind`: (iterations per wall second,
    iterations per CPU second of the whole target process)."""
    reply = t.request("run %s %d" % (kind, n), timeout).split()
    if reply[0] != "ok":
        raise RuntimeError("target: %s" % " ".join(reply))
    return n / max(float(reply[1]), 1e-9), n / max(float(reply[2]), 1e-9)


def measure_phase(t, sizes, nwin, timeout):
    """Median wall and CPU iterations/s per kind over nwin windows, kinds alternating
    window by window. Returns ({kind: wall}, {kind: cpu}, raw)."""
    per = {k: [] for k in sizes}
    for _ in range(nwin):
        for k in sizes:
            per[k].append(window(t, k, sizes[k], timeout))
    wall = {k: median([w for w, _ in v]) for k, v in per.items()}
    cpu = {k: median([c for _, c in v]) for k, v in per.items()}
    return wall, cpu, per


def bench_speed(mt, python, cycles, nwin, window_s, timeout, log):
    """Per cycle, one fresh target: untracked, attached (default), after detach,
    attached with --trace-python-allocators, after detach. Returns per-cycle phase medians."""
    sizes = None
    out = []
    for c in range(cycles):
        t = Target(python, "speed")
        try:
            if sizes is None:
                # Same amount of work in every window of every cycle.
                sizes = {}
                for k in KINDS:
                    sizes[k] = max(10, int(t.request("calibrate %s %g" % (k, window_s), timeout + 60).split()[1]))
            cyc = {"phases": {}, "cpu": {}, "raw": {}, "errors": []}

            def phase(name):
                cyc["phases"][name], cyc["cpu"][name], cyc["raw"][name] = measure_phase(
                    t, sizes, nwin, timeout + 60)

            window(t, KINDS[0], sizes[KINDS[0]], timeout + 60)  # warm-up, discarded
            phase("untracked")
            for mode, extra in (("attached", []), ("pyalloc", ["--trace-python-allocators"])):
                dt, ok, err, cap = mt.attach(t.pid, extra)
                if not ok:
                    cyc["errors"].append("attach (%s): %s" % (mode, last_line(err)))
                    break
                phase(mode)
                dt, ok, err = mt.detach(t.pid)
                if not ok:
                    cyc["errors"].append("detach (%s): %s" % (mode, last_line(err)))
                    break
                phase("after " + mode)
            if t.request("ping", 30) != "pong":
                cyc["errors"].append("target did not answer after the cycle")
            out.append(cyc)
        except RuntimeError as e:
            out.append({"phases": {}, "cpu": {}, "raw": {}, "errors": [str(e)[:200]]})
        finally:
            t.kill()
            for p in glob.glob(os.path.join(mt.tmpdir, "attach-%d-*" % t.pid)):
                os.unlink(p)
        log(" %d" % (c + 1))
    return {"sizes": sizes, "cycles": out}


def bench_heaptrack_speed(heaptrack, python, cycles, nwin, window_s, tmpdir, timeout, log):
    """heaptrack -p on the speed target: untracked, then attached (heaptrack cannot detach)."""
    sizes = None
    out = []
    for c in range(cycles):
        t = Target(python, "speed")
        ht = None
        try:
            if sizes is None:
                sizes = {k: max(10, int(t.request("calibrate %s %g" % (k, window_s), timeout + 60).split()[1]))
                         for k in KINDS}
            cyc = {"phases": {}, "cpu": {}, "errors": []}
            window(t, KINDS[0], sizes[KINDS[0]], timeout + 60)
            cyc["phases"]["untracked"], cyc["cpu"]["untracked"], _ = measure_phase(t, sizes, nwin, timeout + 60)
            # heaptrack_attach makes its own target; do the injection by hand here.
            t0 = time.perf_counter()
            ht = subprocess.Popen([heaptrack, "-o", os.path.join(tmpdir, "hts-%d" % t.pid), "-p", str(t.pid)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True)
            text = b""
            while b"injection finished" not in text and time.perf_counter() - t0 < timeout:
                r, _, _ = select.select([ht.stdout.fileno()], [], [], 1.0)
                chunk = os.read(ht.stdout.fileno(), 4096) if r else None
                if chunk == b"":
                    break
                text += chunk or b""
            if b"injection finished" not in text:
                cyc["errors"].append("heaptrack -p: %s" % last_line(text.decode(errors="replace")))
            else:
                cyc["phases"]["attached"], cyc["cpu"]["attached"], _ = measure_phase(t, sizes, nwin, timeout + 60)
            out.append(cyc)
        except RuntimeError as e:
            out.append({"phases": {}, "cpu": {}, "errors": [str(e)[:200]]})
        finally:
            t.kill()
            if ht is not None:
                _killpg(ht.pid)
                ht.wait()
            for p in glob.glob(os.path.join(tmpdir, "hts-*")):
                os.unlink(p)
        log(" %d" % (c + 1))
    return {"sizes": sizes, "cycles": out}


def speed_ratios(speed, phase, base="untracked", metric="phases"):
    """Per kind: list over cycles of phase/base (same process, same cycle); metric is
    "phases" (wall-clock iterations/s) or "cpu" (iterations per CPU second)."""
    out = {k: [] for k in KINDS}
    for cyc in speed["cycles"]:
        p = cyc[metric]
        if phase in p and base in p:
            for k in KINDS:
                if p[base].get(k) and p[phase].get(k):
                    out[k].append(p[phase][k] / p[base][k])
    return out


# --------------------------------------------------------------------------- reports

def ms(x):
    return "n/a" if x is None else "%.0f" % (x * 1000) if x >= 0.1 else "%.1f" % (x * 1000)


def stat3(xs):
    if not xs:
        return "n/a", "n/a"
    return ms(median(xs)), "%s-%s" % (ms(min(xs)), ms(max(xs)))


def pct(xs):
    if not xs:
        return "n/a", "n/a"
    return "%.0f %%" % (100 * median(xs)), "%.0f-%.0f" % (100 * min(xs), 100 * max(xs))


def latency_rows(results):
    """results: list of (python label, method label, {kind: res})."""
    rows = []
    for py, method, res in results:
        for kind, r in res.items():
            a, ar = stat3(r["attach"])
            d, dr = stat3(r.get("detach", []))
            ra, _ = stat3(r.get("reattach", []))
            rd, _ = stat3(r.get("redetach", []))
            ok = len(r["attach"])
            fails = r["failures"]
            rows.append({
                "python": py, "method": method, "target": TARGET_LABEL[kind],
                "n": "%d/%d" % (ok, r["runs"]),
                "attach": a, "attach_range": ar, "detach": d, "detach_range": dr,
                "reattach": ra, "redetach": rd,
                "note": fails[0] if fails else "",
            })
    return rows


LAT_COLS = [("python", "python"), ("method", "method"), ("target", "target"), ("n", "ok/runs"),
            ("attach", "attach ms"), ("attach_range", "min-max"), ("detach", "detach ms"),
            ("detach_range", "min-max"), ("reattach", "re-attach ms"), ("redetach", "re-detach ms"),
            ("note", "first failure")]


def speed_rows(label, speed, phases):
    rows = []
    for phase, what in phases:
        r = speed_ratios(speed, phase)
        rc = speed_ratios(speed, phase, metric="cpu")
        for k in KINDS:
            m, rng = pct(r[k])
            mc, rngc = pct(rc[k])
            base = [c["phases"]["untracked"][k] for c in speed["cycles"]
                    if "untracked" in c["phases"] and c["phases"]["untracked"].get(k)]
            rows.append({"config": label, "phase": what, "kind": k,
                         "untracked": "%.0f" % median(base) if base else "n/a",
                         "ratio": m, "range": rng, "cpu": mc, "cpu_range": rngc,
                         "cycles": str(len(r[k]))})
    return rows


SPEED_COLS = [("config", "tracker"), ("phase", "phase"), ("kind", "work"), ("untracked", "untracked it/s"),
              ("ratio", "wall speed / untracked"), ("range", "min-max %"),
              ("cpu", "CPU speed / untracked"), ("cpu_range", "min-max %"), ("cycles", "cycles")]


def text_table(rows, cols):
    if not rows:
        return ""
    widths = {k: max(len(h), *(len(r[k]) for r in rows)) for k, h in cols}
    lines = ["  ".join(h.ljust(widths[k]) for k, h in cols), "  ".join("-" * widths[k] for k, _ in cols)]
    lines += ["  ".join(r[k].ljust(widths[k]) for k, _ in cols) for r in rows]
    return "\n".join(lines)


def md_table(rows, cols, left=("python", "method", "target", "config", "phase", "kind", "note")):
    lines = ["| " + " | ".join(h for _, h in cols) + " |",
             "|" + "|".join("---" if k in left else "---:" for k, _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(r[k].replace("|", "\\|") for k, _ in cols) + " |")
    return lines


def markdown_section(machine, tools, args, lat_rows, spd_rows, notes):
    L = [SECTION, ""]
    L.append("Produced by `bench/attach.py` (a benchmark, not a test; see `bench/README.md`, "
             "\"Attach benchmark\"). Targets are `bench/attach_target.py` processes. Times are "
             "wall-clock of the `memtrace attach` / `detach` commands, which return once the payload "
             "reports tracking active / the capture closed.")
    L.append("")
    L.append("| | |")
    L.append("|---|---|")
    for k in ("cpu", "cores", "kernel", "date", "load"):
        L.append("| %s | %s |" % ("load average at start" if k == "load" else k, machine[k]))
    for name, ver in tools.items():
        L.append("| %s | %s |" % (name, ver or "n/a"))
    L.append("| runs | %d per target (gdb: %d, heaptrack: %d); speed: %d cycles x %d windows of ~%g s |" % (
        args.runs, args.gdb_runs, args.heaptrack_runs, args.cycles, args.windows, args.window))
    L.append("")
    L.append("### Latency")
    L.append("")
    L.append("Median of fresh processes (first attach injects the payload with ptrace); "
             "re-attach is the same process again with the payload already loaded.")
    L.append("")
    L += md_table(lat_rows, LAT_COLS)
    L.append("")
    L.append("### Target speed while attached")
    L.append("")
    L.append("Iterations per second of the target, divided by the same process's untracked "
             "speed in the same cycle (median over cycles; each cycle's value is the median of its "
             "windows). Wall: per second of wall-clock time; CPU: per second of the target's CPU "
             "time (all its threads, the payload's included; less sensitive to other load on the "
             "machine; heaptrack's separate heaptrack_interpret process is not in it). Target: at "
             "least 90 % attached (default mode), about 100 % after detach.")
    L.append("")
    L += md_table(spd_rows, SPEED_COLS)
    L.append("")
    if notes:
        L.append("### Notes")
        L.append("")
        L += ["- " + n for n in notes]
        L.append("")
    return "\n".join(L)


def write_section(path, section):
    """Replaces the "## Attach" section of `path` (up to the next "## " heading), or appends it."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.strip() == SECTION), None)
    if start is None:
        keep = lines
        while keep and not keep[-1].strip():
            keep.pop()
        new = keep + ([""] if keep else []) + section.splitlines()
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        new = lines[:start] + section.splitlines() + ([""] + lines[end:] if end < len(lines) else [])
    with open(path, "w") as f:
        f.write("\n".join(new).rstrip("\n") + "\n")


# --------------------------------------------------------------------------- main

def find_pyenv_python(version_prefix="3.11"):
    roots = [os.environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv")]
    for root in filter(None, roots):
        for d in sorted(glob.glob(os.path.join(root, "versions", version_prefix + "*")), reverse=True):
            p = os.path.join(d, "bin", "python3")
            if os.access(p, os.X_OK):
                return p
    return None


def python_label(python):
    try:
        v = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                           capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        v = "?"
    short = python if python.startswith("/usr/") else "pyenv " + v
    return "%s (%s)" % (short, v) if python.startswith("/usr/") else short


def parse_args(argv):
    ap = argparse.ArgumentParser(description="memtrace attach/detach benchmark (not a test).")
    ap.add_argument("--memtrace", help="memtrace binary (default: build/cli/memtrace under the repo root, "
                                       "else memtrace on PATH)")
    ap.add_argument("--python", default="/usr/bin/python3", help="target interpreter (default /usr/bin/python3)")
    ap.add_argument("--python2", default=None,
                    help="second interpreter, also used for heaptrack -p (default: newest pyenv 3.11; "
                         "'none' to skip)")
    ap.add_argument("--heaptrack", default=None, help="heaptrack binary (default: heaptrack on PATH; "
                                                      "'none' to skip)")
    ap.add_argument("--runs", type=int, default=10, help="fresh targets per target kind (default 10)")
    ap.add_argument("--gdb-runs", type=int, default=5, help="runs of --method gdb per kind (default 5; 0 skips)")
    ap.add_argument("--heaptrack-runs", type=int, default=3, help="heaptrack -p runs per kind (default 3; 0 skips)")
    ap.add_argument("--cycles", type=int, default=5, help="speed cycles, one fresh target each (default 5)")
    ap.add_argument("--windows", type=int, default=4, help="timed windows per phase and kind (default 4)")
    ap.add_argument("--window", type=float, default=0.4, help="seconds of work per window (default 0.4)")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: latency,speed,gdb,heaptrack")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds before one attach/detach is killed")
    ap.add_argument("--markdown", metavar="FILE",
                    help="write (or replace) the \"## Attach\" section of FILE, e.g. bench/RESULTS.md")
    ap.add_argument("--json", metavar="FILE", help="write every measurement as JSON")
    args = ap.parse_args(argv)
    for k in ("runs", "cycles", "windows"):
        if getattr(args, k) < 1:
            ap.error("--%s must be >= 1" % k)
    return args


def main(argv=None):
    args = parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    memtrace = args.memtrace or bench_run.default_memtrace()
    if memtrace and os.sep not in memtrace:
        memtrace = shutil.which(memtrace) or memtrace
    memtrace = os.path.abspath(memtrace) if memtrace else memtrace
    if not memtrace or not os.access(memtrace, os.X_OK):
        print("attach.py: memtrace not found (build it, or pass --memtrace PATH)", file=sys.stderr)
        return 2
    cp = subprocess.run([memtrace, "attach", "--help"], capture_output=True, text=True)
    if cp.returncode != 0:
        print("attach.py: %s has no attach command" % memtrace, file=sys.stderr)
        return 2
    if not os.access(args.python, os.X_OK):
        print("attach.py: python not found: %s" % args.python, file=sys.stderr)
        return 2
    python2 = None if args.python2 == "none" else (args.python2 or find_pyenv_python())
    heaptrack = None if args.heaptrack == "none" else (args.heaptrack or shutil.which("heaptrack"))
    if "heaptrack" in skip or args.heaptrack_runs == 0:
        heaptrack = None
    pythons = [args.python] + ([python2] if python2 and python2 != args.python else [])

    machine = bench_results.machine_description(args.python)
    tools = {"memtrace": memtrace}
    if shutil.which("gdb"):
        tools["gdb"] = bench_results.tool_version(["gdb", "--version"])
    if heaptrack:
        tools["heaptrack"] = bench_results.tool_version([heaptrack, "--version"]) or heaptrack
    labels = {p: python_label(p) for p in pythons}
    notes = []
    try:
        if os.getloadavg()[0] > 0.5 * (machine["cores"] or 1):
            notes.append("the machine was busy at start (load average %s on %s cores): expect noise"
                         % (machine["load"], machine["cores"]))
    except OSError:
        pass
    print("machine: %s, %s cores, kernel %s, load average %s" % (
        machine["cpu"], machine["cores"], machine["kernel"], machine["load"]))
    for k, v in tools.items():
        print("%s: %s" % (k, v))
    print("pythons: %s" % ", ".join(labels.values()))

    def log(s):
        print(s, end="", flush=True)

    tmpdir = tempfile.mkdtemp(prefix="memtrace-attach-bench-")
    mt = Memtrace(memtrace, tmpdir, args.timeout)
    lat = []
    raw = {"latency": [], "speed": None, "heaptrack_speed": None}
    speed = hspeed = None
    try:
        if "latency" not in skip:
            for py in pythons:
                log("\nlatency, %s, runs:" % labels[py])
                res = bench_latency(mt, py, LATENCY_TARGETS + BUSY_TARGETS, args.runs, "auto", log)
                lat.append((labels[py], "ptrace", res))
            for v in BUSY_PYTHONS:
                py = find_pyenv_python(v)
                if not py or py in pythons:
                    continue
                labels[py] = python_label(py)
                log("\nlatency, %s, runs:" % labels[py])
                res = bench_latency(mt, py, BUSY_TARGETS, args.runs, "auto", log)
                lat.append((labels[py], "ptrace", res))
            if "gdb" not in skip and args.gdb_runs > 0 and shutil.which("gdb"):
                log("\nlatency, --method gdb, %s, runs:" % labels[args.python])
                res = bench_latency(mt, args.python, LATENCY_TARGETS, args.gdb_runs, "gdb", log,
                                    stop_on_failure=True)
                lat.append((labels[args.python], "gdb", res))
            if heaptrack:
                # heaptrack -p on Debian's python: expected to crash the target; one try, bounded.
                log("\nheaptrack -p, %s:" % labels[args.python])
                res = bench_heaptrack_latency(heaptrack, args.python, ["threads"], 1, tmpdir,
                                              min(args.timeout, 30), log)
                lat.append((labels[args.python], "heaptrack -p", res))
                if python2:
                    log("\nheaptrack -p, %s, runs:" % labels[python2])
                    res = bench_heaptrack_latency(heaptrack, python2, LATENCY_TARGETS, args.heaptrack_runs,
                                                  tmpdir, min(args.timeout, 60), log)
                    lat.append((labels[python2], "heaptrack -p", res))
            raw["latency"] = [{"python": p, "method": m, "results": r} for p, m, r in lat]
        if "speed" not in skip:
            speed = {}
            for py in pythons:
                log("\nspeed, %s, cycles:" % labels[py])
                speed[py] = bench_speed(mt, py, args.cycles, args.windows, args.window, args.timeout, log)
                for i, c in enumerate(speed[py]["cycles"]):
                    for e in c["errors"]:
                        notes.append("speed, %s, cycle %d: %s" % (labels[py], i + 1, e))
            raw["speed"] = speed
            if heaptrack and python2:
                log("\nspeed, heaptrack -p, %s, cycles:" % labels[python2])
                hspeed = bench_heaptrack_speed(heaptrack, python2, max(1, min(args.cycles, 3)), args.windows,
                                               args.window, tmpdir, min(args.timeout, 60), log)
                raw["heaptrack_speed"] = hspeed
                for i, c in enumerate(hspeed["cycles"]):
                    for e in c["errors"]:
                        notes.append("heaptrack speed cycle %d: %s" % (i + 1, e))
        print()
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)

    lat_rows = latency_rows(lat)
    spd_rows = []
    for py, sp in (speed or {}).items():
        spd_rows += speed_rows("memtrace, %s" % labels[py], sp,
                               [("attached", "attached"), ("after attached", "after detach"),
                                ("pyalloc", "attached, --trace-python-allocators"),
                                ("after pyalloc", "after detach")])
    if hspeed:
        spd_rows += speed_rows("heaptrack -p, %s" % labels[python2], hspeed, [("attached", "attached")])
    for py, method, res in lat:
        for kind, r in res.items():
            if len(r["failures"]) > 1:
                notes.append("%s / %s / %s: %d failures, first: %s" % (
                    py, method, kind, len(r["failures"]), r["failures"][0]))
    for py, sp in (speed or {}).items():
        if sp["sizes"]:
            notes.append("speed windows on %s: %s iterations (churn: 200 small dicts/lists/tuples/strings "
                         "each; json: dumps+loads of a 50-record document)" %
                         (labels[py], ", ".join("%s %d" % kv for kv in sp["sizes"].items())))

    print()
    print(text_table(lat_rows, LAT_COLS))
    print()
    print(text_table(spd_rows, SPEED_COLS))
    for n in notes:
        print("note: " + n)
    if args.markdown:
        write_section(args.markdown, markdown_section(machine, tools, args, lat_rows, spd_rows, notes))
        print("\nwrote the Attach section of %s" % args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "tools": tools, "pythons": labels, "raw": raw}, f, indent=1)
        print("wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
