#!/usr/bin/env python3
"""memtrace benchmark suite.

Runs every workload in bench/workloads/ bare and under memtrace (default mode and
--trace-python-allocators) and heaptrack, in interleaved rounds, and reports the
overhead of each tracker relative to the bare run of the same round. With
--memray DIR (a memray the user built; never required) memray can be measured
the same way, as the optional trackers memray, memray-pyalloc, memray-native and
memray-native-pyalloc.

This is a benchmark, not a test: it never fails on slow numbers. It exits
non-zero only if it could not run at all (bad options, missing interpreter).

Plain Python 3, standard library only.  Run with:  /usr/bin/python3 bench/run.py
See bench/README.md for the meaning of every column.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from results import BARE, machine_description, print_text_table, summarize, table_rows, tool_version, \
    write_markdown

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
WORKLOAD_DIR = os.path.join(BENCH_DIR, "workloads")

# Display order; any other *.py in workloads/ is appended alphabetically.
WORKLOAD_ORDER = ["empty", "churn", "json_roundtrip", "numpy_churn", "threads", "recursion", "service",
                  "deep_recursion", "middleware"]

MT = "memtrace"
MT_PY = "memtrace-pyalloc"
MT_NAT = "memtrace-native"
MT_NAT_PY = "memtrace-native-pyalloc"
MT_AGG = "memtrace-aggregate"
MT_AGG_PY = "memtrace-aggregate-pyalloc"
MT_ALL = (MT, MT_PY, MT_NAT, MT_NAT_PY, MT_AGG, MT_AGG_PY)
MT_EXTRA = [MT_NAT, MT_NAT_PY, MT_AGG, MT_AGG_PY]
HT = "heaptrack"
TRACKERS = [MT, MT_PY, HT]
# memray (Bloomberg's): optional, only with --memray DIR (or MEMTRACE_BENCH_MEMRAY), a
# directory from which `python -m memray` imports it. Never installed by or for the bench.
MR = "memray"
MR_PY = "memray-pyalloc"
MR_NAT = "memray-native"
MR_NAT_PY = "memray-native-pyalloc"
MR_ALL = (MR, MR_PY, MR_NAT, MR_NAT_PY)

MIB = 1024.0 * 1024.0


# --------------------------------------------------------------------------- running

class RunResult:
    __slots__ = ("ok", "wall", "maxrss_kib", "tree_maxrss_kib", "status", "stdout", "stderr", "capture",
                 "timed_out", "rss_from_hook")

    def __init__(self):
        self.ok = False
        self.wall = None
        self.maxrss_kib = None       # peak RSS of the tracked python itself (VmHWM at exit)
        self.tree_maxrss_kib = None  # largest single process of the tree (ru_maxrss)
        self.status = None
        self.stdout = ""
        self.stderr = ""
        self.capture = None
        self.timed_out = False
        self.rss_from_hook = False


def find_rss_launcher():
    """GNU time, if installed: used only to read the child's peak RSS (see run_measured)."""
    for p in ("/usr/bin/time",):
        if os.access(p, os.X_OK):
            try:
                cp = subprocess.run([p, "-f", "%M", "true"], capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if cp.returncode == 0 and cp.stderr.strip().splitlines()[-1:] and \
                    cp.stderr.strip().splitlines()[-1].isdigit():
                return p
    return None


RSS_LAUNCHER = None  # set in main()
HOOK_DIR = None      # set in main(): a directory with our usercustomize.py, put on PYTHONPATH

# Imported by every python started with HOOK_DIR on PYTHONPATH (site.py imports
# `usercustomize` at start-up). Registered first, so its atexit handler runs last.
# It records the interpreter's own peak RSS (VmHWM, which starts afresh at execve,
# so it excludes whatever launched it) together with pid and script path.
USERCUSTOMIZE = r"""
import atexit as _a, os as _o, sys as _s
def _memtrace_bench_hwm():
    path = _o.environ.get("MEMTRACE_BENCH_HWM_FILE")
    if not path:
        return
    try:
        with open("/proc/self/status") as f:
            hwm = [l.split()[1] for l in f if l.startswith("VmHWM:")][0]
        script = _o.path.realpath(_s.argv[0]) if _s.argv and _s.argv[0] else ""
        fd = _o.open(path, _o.O_WRONLY | _o.O_APPEND | _o.O_CREAT, 0o600)
        _o.write(fd, ("%d\t%s\t%s\n" % (_o.getpid(), hwm, script)).encode())
        _o.close(fd)
    except Exception:
        pass
_a.register(_memtrace_bench_hwm)
"""


def make_hook_dir(parent):
    d = os.path.join(parent, "hook")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "usercustomize.py"), "w") as f:
        f.write(USERCUSTOMIZE)
    return d


def read_hwm(path, script):
    """Peak RSS (KiB) the workload's own interpreter reported, or None."""
    try:
        with open(path) as f:
            entries = [l.rstrip("\n").split("\t", 2) for l in f if l.strip()]
    except OSError:
        return None
    want = os.path.realpath(script) if script else None
    best = None
    for e in entries:
        if len(e) != 3 or not e[1].isdigit():
            continue
        if want is not None and e[2] != want:
            continue  # e.g. a helper python started by the tracker
        best = max(best or 0, int(e[1]))
    return best


def run_measured(argv, timeout, script=None, pythonpath=None):
    """Run argv, return its wall time, the peak RSS of the tracked python and
    the peak RSS of the biggest process in the tree.

    Tracked python: the workload's interpreter reports its own VmHWM from an
    atexit handler installed through usercustomize (see USERCUSTOMIZE). This
    is what "+RSS MiB" uses; it is the only way to separate the profiled
    process from heaptrack's heaptrack_interpret, which is much bigger than
    the python it profiles. If the report is missing (e.g. the tracker starts
    python with -s or -I, or a clean environment) the tree value is used.

    Tree: ru_maxrss of the child as returned by wait4(). On Linux that is
    the largest resident set of the child *or of any descendant it has waited
    for*, and the high-water mark survives execve. So it is the peak of the
    biggest single process in the tree: whether `memtrace run` execs the
    interpreter (same pid) or forks and waits for it, we get the tracked
    python's peak (unless memtrace's own process were bigger). For heaptrack (a
    shell script that runs python under LD_PRELOAD next to heaptrack_interpret
    and a compressor) it is likewise the largest of them.

    Because the high-water mark survives execve, a child forked from this
    harness starts with the harness's own RSS (~10-15 MiB) as a floor, which is
    more than an empty python script uses. To avoid that, the child is started
    through GNU time (a small C program) when it is installed: time forks the
    command from its own small image, wait4()s for it and reports its ru_maxrss
    (same tree semantics as above). Without GNU time we fall back to wait4() on
    our direct child and the floor applies (noted in the report).
    Wall time is measured here, around the whole launch; GNU time adds the same
    ~1 ms to every configuration.

    pythonpath: directories put on PYTHONPATH after the hook's (memray's, for
    `python -m memray`); None for every other configuration.
    """
    res = RunResult()
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    env = None
    hwm_file = None
    if (HOOK_DIR and script) or pythonpath:
        env = dict(os.environ)
        dirs = ([HOOK_DIR] if HOOK_DIR and script else []) + list(pythonpath or [])
        env["PYTHONPATH"] = os.pathsep.join(dirs) + (os.pathsep + env["PYTHONPATH"]
                                                     if env.get("PYTHONPATH") else "")
    if HOOK_DIR and script:
        fd, hwm_file = tempfile.mkstemp(prefix="memtrace-bench-hwm-")
        os.close(fd)
        env["MEMTRACE_BENCH_HWM_FILE"] = hwm_file
    rss_file = None
    if RSS_LAUNCHER:
        fd, rss_file = tempfile.mkstemp(prefix="memtrace-bench-rss-")
        os.close(fd)
        argv = [RSS_LAUNCHER, "-f", "%M", "-o", rss_file, "--"] + list(argv)
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=env, start_new_session=True)
    except OSError as e:
        res.stderr = "cannot start %s: %s" % (argv[0], e)
        for p in (rss_file, hwm_file):
            if p:
                os.unlink(p)
        return res

    def on_timeout():
        res.timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the session we created for this run only
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, on_timeout)
    timer.daemon = True
    timer.start()
    while True:
        try:
            _, status, ru = os.wait4(proc.pid, 0)
            break
        except InterruptedError:
            continue
    t1 = time.perf_counter()
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # tell Popen it has been reaped

    res.wall = t1 - t0
    res.tree_maxrss_kib = ru.ru_maxrss  # KiB on Linux
    if rss_file:
        res.tree_maxrss_kib = None
        try:
            with open(rss_file) as f:
                lines = f.read().strip().splitlines()
            # "Command exited with non-zero status N" / "Command terminated by signal N" may precede
            if lines and lines[-1].strip().isdigit():
                res.tree_maxrss_kib = int(lines[-1].strip())
        except OSError:
            pass
        os.unlink(rss_file)
    if hwm_file:
        res.maxrss_kib = read_hwm(hwm_file, script)
        res.rss_from_hook = res.maxrss_kib is not None
        os.unlink(hwm_file)
    if res.maxrss_kib is None:
        res.maxrss_kib = res.tree_maxrss_kib
    res.status = proc.returncode
    out.seek(0)
    err.seek(0)
    res.stdout = out.read().decode("utf-8", "replace")
    res.stderr = err.read().decode("utf-8", "replace")
    out.close()
    err.close()
    res.ok = (proc.returncode == 0) and not res.timed_out and res.maxrss_kib is not None
    return res


def tail(text, n=6):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return "\n".join("      " + l for l in lines[-n:])


# --------------------------------------------------------------------------- event counting

def count_memtrace_events(memtrace, capture, timeout):
    """(events, dropped) of a memtrace capture; either may be None if unknown.

    events = allocation records + free records. Asks, in order:
      1. `memtrace stats CAPTURE`: the "allocations:" and "frees:" totals (and
         "dropped events:"); fast, it does not print every record;
      2. `memtrace stats --json CAPTURE`, if a JSON form exists;
      3. `memtrace parse CAPTURE`: counts lines starting with "alloc" / "free"
         while streaming (slow on big captures: ~1 s per million records).
    """
    n, dropped = _events_from_stats_text(memtrace, capture, timeout)
    if n is None:
        n = _events_from_stats_json(memtrace, capture, timeout)
    if n is None:
        n = _count_parse_lines(memtrace, capture, timeout)
    return n, dropped


def _events_from_stats_text(memtrace, capture, timeout):
    try:
        cp = subprocess.run([memtrace, "stats", capture], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, errors="replace", timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    if cp.returncode != 0:
        return None, None
    m_alloc = re.search(r"^\s*allocations:\s+(\d+)", cp.stdout, re.M)
    m_free = re.search(r"^\s*frees:\s+(\d+)", cp.stdout, re.M)
    m_drop = re.search(r"^\s*dropped events:\s+(\d+)", cp.stdout, re.M)
    dropped = int(m_drop.group(1)) if m_drop else None
    if not m_alloc:
        return None, dropped
    return int(m_alloc.group(1)) + (int(m_free.group(1)) if m_free else 0), dropped


def _count_parse_lines(memtrace, capture, timeout):
    try:
        proc = subprocess.Popen([memtrace, "parse", capture], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError:
        return None
    timer = threading.Timer(timeout, lambda: _killpg_quiet(proc.pid))
    timer.daemon = True
    timer.start()
    n = 0
    try:
        for line in proc.stdout:
            if line.startswith(b"alloc") or line.startswith(b"free"):
                n += 1
    finally:
        proc.stdout.close()
        rc = proc.wait()
        timer.cancel()
    if rc != 0:
        return None
    return n


def _events_from_stats_json(memtrace, capture, timeout):
    try:
        cp = subprocess.run([memtrace, "stats", "--json", capture], stdin=subprocess.DEVNULL,
                            capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if cp.returncode != 0:
        return None
    try:
        doc = json.loads(cp.stdout)
    except ValueError:
        return None
    found = {}

    def walk(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                key = str(k).lower()
                if isinstance(v, int) and not isinstance(v, bool):
                    if re.fullmatch(r"(n_|num_|total_)?(allocations|allocs)(_count)?", key):
                        found.setdefault("alloc", v)
                    elif re.fullmatch(r"(n_|num_|total_)?(frees|deallocations)(_count)?", key):
                        found.setdefault("free", v)
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    walk(doc)
    if "alloc" not in found:
        return None
    return found["alloc"] + found.get("free", 0)


def memray_env(memray_dir):
    env = dict(os.environ)
    env["PYTHONPATH"] = memray_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def memray_version(python, memray_dir):
    """(version, None) of `python -m memray --version` with memray_dir on PYTHONPATH,
    or (None, why) if that fails."""
    try:
        cp = subprocess.run([python, "-m", "memray", "--version"], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, errors="replace", timeout=60,
                            env=memray_env(memray_dir))
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    out = cp.stdout.strip().splitlines()
    if cp.returncode != 0 or not out:
        err = [l for l in cp.stderr.strip().splitlines() if l.strip()]
        return None, (err[-1].strip() if err else "exit status %d" % cp.returncode)
    return out[-1].strip(), None


def count_memray_events(python, memray_dir, capture, timeout):
    """(events, why) of a memray capture, from memray's own `memray stats --json`.

    events = allocation records + free records, as for memtrace: stats reads every
    allocation record of the capture, frees included, and reports that number as
    metadata.total_allocations (its total_num_allocations leaves the frees out).
    events is None, with a reason, if stats fails or its JSON lacks the number.
    """
    fd, out = tempfile.mkstemp(prefix="memtrace-bench-memray-stats-", suffix=".json")
    os.close(fd)
    try:
        try:
            cp = subprocess.run([python, "-m", "memray", "stats", "--json", "-f", "-o", out, capture],
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                                timeout=timeout, env=memray_env(memray_dir), start_new_session=True)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, "memray stats: %s" % e
        if cp.returncode != 0:
            err = [l for l in cp.stderr.strip().splitlines() if l.strip()]
            return None, "memray stats failed: %s" % (err[-1].strip()[:200] if err else cp.returncode)
        try:
            with open(out) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            return None, "memray stats --json gave no readable JSON (%s)" % e
    finally:
        try:
            os.unlink(out)
        except OSError:
            pass
    records = (doc.get("metadata") or {}).get("total_allocations") if isinstance(doc, dict) else None
    allocs = doc.get("total_num_allocations") if isinstance(doc, dict) else None
    if not isinstance(records, int) or (isinstance(allocs, int) and records < allocs):
        return None, "memray stats --json has no count of allocation and free records"
    return records, None


def count_heaptrack_events(capture, timeout):
    """Allocation ('+') plus free ('-') lines in a heaptrack capture, or None."""
    if capture.endswith(".zst"):
        tool = shutil.which("zstd")
    elif capture.endswith(".gz"):
        tool = shutil.which("gzip")
    else:
        tool = None
    if tool:
        argv = [tool, "-dc", capture]
    elif not (capture.endswith(".zst") or capture.endswith(".gz")):
        argv = ["cat", capture]
    else:
        return None
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    timer = threading.Timer(timeout, lambda: _killpg_quiet(proc.pid))
    timer.daemon = True
    timer.start()
    n = 0
    try:
        for line in proc.stdout:
            c = line[:1]
            if c == b"+" or c == b"-":
                n += 1
    finally:
        proc.stdout.close()
        rc = proc.wait()
        timer.cancel()
    return n if rc == 0 else None


def _killpg_quiet(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------- configurations

def command_for(config, python, script, memtrace, heaptrack, capture_base):
    """argv for one configuration, and the capture path (or glob) it produces.
    memray's argv needs its directory on PYTHONPATH (run_measured's pythonpath)."""
    if config == BARE:
        return [python, script], None
    if config in MR_ALL:
        # The same interpreter as the bare run; the script runs in memray's process.
        # The capture is lz4-compressed when the script ends (memray's default).
        argv = [python, "-m", "memray", "run", "-f", "-q", "-o", capture_base]
        if config in (MR_NAT, MR_NAT_PY):
            argv.append("--native")
        if config in (MR_PY, MR_NAT_PY):
            argv.append("--trace-python-allocators")
        argv.append(script)
        return argv, capture_base
    if config in MT_ALL:
        argv = [memtrace, "run", "-f", "-o", capture_base]
        if config in (MT_NAT, MT_NAT_PY):
            argv.append("--native")
        if config in (MT_PY, MT_NAT_PY, MT_AGG_PY):
            argv.append("--trace-python-allocators")
        if config in (MT_AGG, MT_AGG_PY):
            argv.append("--aggregate")
        # Pin the interpreter: otherwise `memtrace run` would pick whatever
        # python3 is first on PATH, which may not be the one the bare run used.
        argv += ["--python", python, script]
        return argv, capture_base
    if config == HT:
        # heaptrack appends the compressor's suffix (.zst or .gz) to -o.
        return [heaptrack, "-o", capture_base, python, script], capture_base + "*"
    raise ValueError(config)


def find_capture(pattern):
    if pattern is None:
        return None
    if "*" not in pattern:
        return pattern if os.path.exists(pattern) else None
    hits = sorted(glob.glob(pattern))
    return hits[0] if hits else None


def remove_captures(tmpdir):
    for p in glob.glob(os.path.join(tmpdir, "*")):
        try:
            os.unlink(p)
        except OSError:
            pass


# --------------------------------------------------------------------------- main

def discover_workloads():
    names = [os.path.splitext(os.path.basename(p))[0]
             for p in glob.glob(os.path.join(WORKLOAD_DIR, "*.py"))]
    ordered = [n for n in WORKLOAD_ORDER if n in names]
    ordered += sorted(n for n in names if n not in WORKLOAD_ORDER)
    return ordered


def default_memtrace():
    p = os.path.join(REPO_ROOT, "build", "cli", "memtrace")
    if os.path.isfile(p) and os.access(p, os.X_OK):
        return p
    return shutil.which("memtrace")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="memtrace benchmark suite: tracker overhead vs bare python (not a test).")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds per workload (default 7)")
    ap.add_argument("--workloads", default=None,
                    help="comma-separated workload names (default: all in bench/workloads)")
    ap.add_argument("--memtrace", default=None,
                    help="memtrace binary (default: build/cli/memtrace under the repo root, "
                         "else memtrace on PATH)")
    ap.add_argument("--heaptrack", default=None, help="heaptrack binary (default: heaptrack on PATH)")
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter (default /usr/bin/python3)")
    ap.add_argument("--trackers", default=",".join(TRACKERS),
                    help="comma-separated subset of %s, or also %s; with --memray also %s (default: %s)"
                         % (",".join(TRACKERS), ", ".join(MT_EXTRA), ", ".join(MR_ALL), ",".join(TRACKERS)))
    ap.add_argument("--memray", metavar="DIR", default=os.environ.get("MEMTRACE_BENCH_MEMRAY") or None,
                    help="directory put on PYTHONPATH so that `PYTHON -m memray` works (a memray you "
                         "built; default $MEMTRACE_BENCH_MEMRAY); needed for the memray trackers")
    ap.add_argument("--markdown", metavar="FILE", help="write a Markdown results table (bench/RESULTS.md)")
    ap.add_argument("--json", metavar="FILE", help="write raw per-run measurements as JSON")
    ap.add_argument("--note", action="append", default=[],
                    help="a line of text for the Notes section of --markdown (repeatable)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a run is killed")
    ap.add_argument("--no-time-launcher", action="store_true",
                    help="do not start children through GNU time (peak RSS then has a floor of the "
                         "harness's own RSS)")
    ap.add_argument("--no-events", action="store_true",
                    help="skip counting events in captures (saves time on big captures)")
    ap.add_argument("--keep-captures", metavar="DIR",
                    help="keep the last round's captures in DIR instead of a temp dir")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    if not (os.path.isfile(args.python) and os.access(args.python, os.X_OK)):
        print("run.py: python interpreter not found: %s" % args.python, file=sys.stderr)
        return 2

    available = discover_workloads()
    if args.workloads:
        wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in available]
        if unknown:
            print("run.py: unknown workload(s): %s (have: %s)" % (", ".join(unknown), ", ".join(available)),
                  file=sys.stderr)
            return 2
        workloads = wanted
    else:
        workloads = available

    trackers = [t.strip() for t in args.trackers.split(",") if t.strip()]
    bad = [t for t in trackers if t not in TRACKERS + MT_EXTRA + list(MR_ALL)]
    if bad:
        print("run.py: unknown tracker(s): %s" % ", ".join(bad), file=sys.stderr)
        return 2

    memray_dir = None
    memray_ver = None
    wants_memray = [t for t in trackers if t in MR_ALL]
    if wants_memray:
        if not args.memray:
            print("run.py: tracker(s) %s need --memray DIR (or MEMTRACE_BENCH_MEMRAY): a directory from "
                  "which `%s -m memray` imports memray" % (", ".join(wants_memray), args.python),
                  file=sys.stderr)
            return 2
        memray_dir = os.path.abspath(args.memray)
        if not os.path.isdir(memray_dir):
            print("run.py: --memray: not a directory: %s" % memray_dir, file=sys.stderr)
            return 2
        memray_ver, why = memray_version(args.python, memray_dir)
        if memray_ver is None:
            print("run.py: `%s -m memray --version` with PYTHONPATH=%s failed: %s"
                  % (args.python, memray_dir, why), file=sys.stderr)
            return 2

    memtrace = args.memtrace or default_memtrace()
    if memtrace and os.sep not in memtrace:
        memtrace = shutil.which(memtrace) or memtrace
    heaptrack = args.heaptrack or shutil.which("heaptrack")

    unavailable = {}
    notes = list(args.note)
    if any(t in trackers for t in MT_ALL):
        if not memtrace or not os.access(memtrace, os.X_OK):
            why = "memtrace not found" if not memtrace else "not executable: %s" % memtrace
            for t in MT_ALL:
                unavailable[t] = why
            notes.append("memtrace skipped: %s (build it, or pass --memtrace PATH)" % why)
    if HT in trackers and not heaptrack:
        unavailable[HT] = "heaptrack not installed"
        notes.append("heaptrack skipped: not installed")

    global RSS_LAUNCHER
    RSS_LAUNCHER = None if args.no_time_launcher else find_rss_launcher()
    if RSS_LAUNCHER is None:
        notes.append("GNU time not used: peak RSS is wait4() on the direct child and includes the "
                     "harness's own RSS as a floor (see run_measured in run.py)")

    configs = [BARE] + trackers
    runnable = [c for c in configs if c not in unavailable]

    machine = machine_description(args.python)
    tools = {}
    if memtrace and not all(t in unavailable for t in MT_ALL):
        tools["memtrace"] = memtrace
    if heaptrack and HT not in unavailable:
        tools["heaptrack"] = tool_version([heaptrack, "--version"]) or heaptrack
    if memray_dir:
        tools["memray"] = "memray %s (from %s)" % (memray_ver, memray_dir)

    try:
        if os.getloadavg()[0] > 0.5 * (machine["cores"] or 1):
            notes.append("the machine was busy at start (load average %s on %s cores): "
                         "expect noisy ratios" % (machine["load"], machine["cores"]))
    except OSError:
        pass
    print("machine: %s, %s cores, kernel %s, python %s, load average %s" % (
        machine["cpu"], machine["cores"], machine["kernel"], machine["python"], machine["load"]))
    for k, v in tools.items():
        print("%s: %s" % (k, v))
    for n in notes:
        print("note: " + n)
    print("rounds: %d, workloads: %s" % (args.rounds, ", ".join(workloads)))
    print()

    if args.keep_captures:
        os.makedirs(args.keep_captures, exist_ok=True)
        tmpdir = args.keep_captures
        cleanup = False
    else:
        tmpdir = tempfile.mkdtemp(prefix="memtrace-bench-")
        cleanup = True
    global HOOK_DIR
    hook_parent = tempfile.mkdtemp(prefix="memtrace-bench-hook-")
    HOOK_DIR = make_hook_dir(hook_parent)

    results = {}
    raw = {}
    try:
        for wl in workloads:
            script = os.path.join(WORKLOAD_DIR, wl + ".py")
            info = {"unavailable": {t: unavailable[t] for t in trackers if t in unavailable}}
            results[wl] = info

            # Warm-up (page cache, pyc files); also detects workloads that skip themselves.
            warm = run_measured([args.python, script], args.timeout, script)
            if not warm.ok:
                info["skipped"] = "bare run failed (status %s)" % warm.status
                print("%s: bare run failed, skipping\n%s" % (wl, tail(warm.stderr)))
                notes.append("%s: bare run failed (status %s)" % (wl, warm.status))
                continue
            if "SKIP" in warm.stdout:
                msg = warm.stdout.strip().splitlines()[-1]
                info["skipped"] = msg
                print("%s: %s" % (wl, msg))
                notes.append(msg)
                continue

            rounds = []
            reported_failure = set()
            print("%s:" % wl, end="", flush=True)
            for rnd in range(args.rounds):
                # Rotate the order each round so no configuration always runs first/after another.
                order = runnable[rnd % len(runnable):] + runnable[:rnd % len(runnable)]
                this = {}
                for c in order:
                    remove_captures(tmpdir)
                    base = os.path.join(tmpdir, "%s.%s" % (wl, c))
                    argv, cap_pattern = command_for(c, args.python, script, memtrace, heaptrack, base)
                    res = run_measured(argv, args.timeout, script,
                                       pythonpath=[memray_dir] if c in MR_ALL else None)
                    if res.ok and cap_pattern is not None:
                        cap = find_capture(cap_pattern)
                        if cap is None:
                            res.capture = None
                        else:
                            res.capture = {"path": cap, "size": os.path.getsize(cap), "events": None,
                                           "dropped": None}
                            # Count events once per configuration (counts barely vary by round).
                            if not args.no_events and not any(
                                    r.get(c) is not None and r[c].capture and r[c].capture["events"] is not None
                                    for r in rounds):
                                if c == HT:
                                    res.capture["events"] = count_heaptrack_events(cap, args.timeout)
                                elif c in MR_ALL:
                                    ev, why = count_memray_events(args.python, memray_dir, cap, args.timeout)
                                    res.capture["events"] = ev
                                    note = "%s / %s: events and B/event left empty: %s" % (wl, c, why)
                                    if ev is None and note not in notes:
                                        notes.append(note)
                                else:
                                    ev, dropped = count_memtrace_events(memtrace, cap, args.timeout)
                                    res.capture["events"] = ev
                                    res.capture["dropped"] = dropped
                                    if dropped:
                                        notes.append("%s / %s: capture reports %d dropped events"
                                                     % (wl, c, dropped))
                    if not res.ok and c not in reported_failure:
                        reported_failure.add(c)
                        why = "timed out" if res.timed_out else "status %s" % res.status
                        print("\n  %s failed (%s):\n%s" % (c, why, tail(res.stderr)), end="")
                        notes.append("%s / %s: failed (%s): %s" % (
                            wl, c, why, (res.stderr.strip().splitlines() or [""])[-1][:200]))
                    this[c] = res
                rounds.append(this)
                print(" %d" % (rnd + 1), end="", flush=True)
            print()
            for c in runnable:
                if any(r.get(c) is not None and r[c].ok and not r[c].rss_from_hook for r in rounds):
                    notes.append("%s / %s: the interpreter did not report its own peak RSS; "
                                 "+RSS uses the tree peak instead" % (wl, c))
            info["summary"] = summarize(rounds, configs)
            raw[wl] = [{c: {"ok": r.ok, "wall": r.wall, "maxrss_kib": r.maxrss_kib,
                            "tree_maxrss_kib": r.tree_maxrss_kib, "status": r.status,
                            "capture_bytes": r.capture["size"] if r.capture else None,
                            "events": r.capture["events"] if r.capture else None}
                        for c, r in rd.items()} for rd in rounds]
    finally:
        shutil.rmtree(hook_parent, ignore_errors=True)
        if cleanup:
            shutil.rmtree(tmpdir, ignore_errors=True)

    print()
    rows = table_rows(results, configs)
    print_text_table(rows)
    if notes:
        print()
        for n in notes:
            print("note: " + n)

    if args.markdown:
        write_markdown(args.markdown, rows, machine, args, tools, notes)
        print("\nwrote %s" % args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "tools": tools, "rounds": args.rounds,
                       "summary": {w: i.get("summary") for w, i in results.items()},
                       "runs": raw}, f, indent=1)
        print("wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
