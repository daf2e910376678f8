#!/usr/bin/env python3
"""memtrace benchmark suite: the results.

The medians of the rounds (summarize()), the machine they ran on
(machine_description(), tool_version()), and the tables bench/run.py prints
and writes to bench/RESULTS.md (table_rows(), print_text_table(),
write_markdown()); bench/attach.py uses the machine and the medians too.

Plain Python 3, standard library only.
"""

import datetime
import os
import platform
import statistics
import subprocess

# The configuration every tracker's run is compared against, in its round.
BARE = "bare"


# --------------------------------------------------------------------------- statistics

def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec, unit=""):
    if x is None:
        return "n/a"
    return format(x, spec) + unit


def fmt_size(n):
    if n is None:
        return "n/a"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return "%.1f %s" % (n / div, unit)
    return "%d B" % n


def fmt_count(n):
    if n is None:
        return "n/a"
    if n >= 1_000_000:
        return "%.2fM" % (n / 1e6)
    if n >= 10_000:
        return "%.1fk" % (n / 1e3)
    return str(n)


def summarize(rounds, configs):
    """rounds: list of {config: RunResult}. Returns {config: summary dict}."""
    out = {}
    bare_ok = [r[BARE] for r in rounds if BARE in r and r[BARE].ok]
    out[BARE] = {
        "runs": len(bare_ok),
        "wall": median([r.wall for r in bare_ok]),
        "rss_mib": median([r.maxrss_kib / 1024.0 for r in bare_ok]),
        "tree_rss_mib": median([r.tree_maxrss_kib / 1024.0 for r in bare_ok if r.tree_maxrss_kib]),
    }
    for c in configs:
        if c == BARE:
            continue
        ratios, extra, rss_growth, tree_rss, sizes = [], [], [], [], []
        failures = 0
        for r in rounds:
            if c not in r:
                continue
            res = r[c]
            if not res.ok:
                failures += 1
                continue
            b = r.get(BARE)
            if b is None or not b.ok:
                continue
            ratios.append(res.wall / b.wall)
            extra.append(res.wall - b.wall)
            rss_growth.append((res.maxrss_kib - b.maxrss_kib) / 1024.0)
            if res.tree_maxrss_kib:
                tree_rss.append(res.tree_maxrss_kib / 1024.0)
            if res.capture is not None:
                sizes.append(res.capture["size"])
        # bytes per event of every round (the writer picks its compressor
        # by how busy it is, so sizes vary a little from run to run), over
        # the events counted in one round (the counts barely vary)
        events = None
        for r in rounds:
            res = r.get(c)
            if res is not None and res.ok and res.capture and res.capture.get("events"):
                events = res.capture["events"]
        per_event = [size / events for size in sizes] if events else []
        out[c] = {
            "runs": len(ratios),
            "failures": failures,
            "ratio": median(ratios),
            "ratio_min": min(ratios) if ratios else None,
            "ratio_max": max(ratios) if ratios else None,
            "extra_s": median(extra),
            "rss_growth_mib": median(rss_growth),
            "tree_rss_mib": median(tree_rss),
            "capture_bytes": median(sizes),
            "events": events,
            "bytes_per_event": median(per_event),
            "bytes_per_event_max": max(per_event) if per_event else None,
        }
    return out


# --------------------------------------------------------------------------- machine description

def machine_description(python):
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    try:
        pyver = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pyver = "unknown"
    try:
        with open("/proc/meminfo") as f:
            mem_kib = int(f.readline().split()[1])
        mem = "%.1f GiB" % (mem_kib / 1024.0 / 1024.0)
    except (OSError, ValueError, IndexError):
        mem = "unknown"
    try:
        load = "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = "unknown"
    return {
        "load": load,
        "cpu": cpu,
        "cores": cores,
        "memory": mem,
        "kernel": platform.release(),
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "python": "%s (%s)" % (python, pyver),
    }


def tool_version(argv):
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        text = (cp.stdout or cp.stderr).strip().splitlines()
        return text[0] if text else None
    except (OSError, subprocess.TimeoutExpired):
        return None


# --------------------------------------------------------------------------- reports

COLUMNS = [
    ("workload", "workload"),
    ("bare_s", "bare s"),
    ("bare_rss", "bare RSS MiB"),
    ("tool", "tracker"),
    ("ratio", "time x bare"),
    ("range", "min-max"),
    ("extra", "extra s"),
    ("rss", "+RSS MiB"),
    ("tree", "tree peak MiB"),
    ("cap", "capture"),
    ("events", "events"),
    ("bpe", "B/event median/max"),
]


def table_rows(results, configs):
    rows = []
    for wl, info in results.items():
        if info.get("skipped"):
            rows.append({"workload": wl, "bare_s": "skipped", "bare_rss": "", "tool": "(see notes)",
                         "ratio": "", "range": "", "extra": "", "rss": "", "tree": "", "cap": "", "events": "",
                         "bpe": ""})
            continue
        s = info["summary"]
        first = True
        for c in configs:
            if c == BARE:
                continue
            cs = s.get(c)
            row = {
                "workload": wl if first else "",
                "bare_s": fmt(s[BARE]["wall"], ".3f") if first else "",
                "bare_rss": fmt(s[BARE]["rss_mib"], ".1f") if first else "",
                "tool": c,
            }
            first = False
            if c in info.get("unavailable", {}):
                row.update({"ratio": "skipped", "range": "", "extra": "", "rss": "", "tree": "", "cap": "",
                            "events": "", "bpe": ""})
            elif cs is None or cs["runs"] == 0:
                row.update({"ratio": "failed", "range": "", "extra": "", "rss": "", "tree": "", "cap": "",
                            "events": "", "bpe": ""})
            else:
                row.update({
                    "ratio": fmt(cs["ratio"], ".2f", "x"),
                    "range": "%s-%s" % (fmt(cs["ratio_min"], ".2f"), fmt(cs["ratio_max"], ".2f")),
                    "extra": fmt(cs["extra_s"], "+.3f"),
                    "rss": fmt(cs["rss_growth_mib"], "+.1f"),
                    "tree": fmt(cs["tree_rss_mib"], ".1f"),
                    "cap": fmt_size(cs["capture_bytes"]),
                    "events": fmt_count(cs["events"]),
                    "bpe": ("%s/%s" % (fmt(cs["bytes_per_event"], ".2f"),
                                       fmt(cs["bytes_per_event_max"], ".2f"))
                            if cs["bytes_per_event"] is not None else ""),
                })
                if cs["failures"]:
                    row["ratio"] += " (%d failed)" % cs["failures"]
            rows.append(row)
    return rows


def print_text_table(rows):
    widths = {k: max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, h in COLUMNS}
    print("  ".join(h.ljust(widths[k]) for k, h in COLUMNS))
    print("  ".join("-" * widths[k] for k, _ in COLUMNS))
    for r in rows:
        print("  ".join(r[k].ljust(widths[k]) for k, _ in COLUMNS))


def write_markdown(path, rows, machine, args, tools, notes):
    lines = []
    lines.append("# memtrace benchmark results")
    lines.append("")
    lines.append("Produced by `bench/run.py` (a benchmark, not a test). See `bench/README.md` for what the "
                 "columns mean. Overhead ratios are medians of per-round ratios to the bare run of the "
                 "same round.")
    lines.append("")
    lines.append("## Machine")
    lines.append("")
    lines.append("| | |")
    lines.append("|---|---|")
    for k in ("cpu", "cores", "memory", "kernel", "python", "date", "load"):
        lines.append("| %s | %s |" % ("load average at start" if k == "load" else k, machine[k]))
    for name, ver in tools.items():
        lines.append("| %s | %s |" % (name, ver or "n/a"))
    lines.append("| rounds | %d |" % args.rounds)
    lines.append("")
    lines.append("## Results")
    lines.append("")
    lines.append("| " + " | ".join(h for _, h in COLUMNS) + " |")
    lines.append("|" + "|".join("---" if k in ("workload", "tool") else "---:" for k, _ in COLUMNS) + "|")
    for r in rows:
        lines.append("| " + " | ".join(r[k] for k, _ in COLUMNS) + " |")
    lines.append("")
    if notes:
        lines.append("## Notes")
        lines.append("")
        for n in notes:
            lines.append("- " + n)
        lines.append("")
    lines += preserved_sections(path)
    with open(path, "w") as f:
        f.write("\n".join(lines))


def preserved_sections(path, headings=("## Attach", "## Reports", "## pytest plugin")):
    """Sections of an existing results file written by other scripts (bench/attach.py writes
    "## Attach"): kept, from their heading to the next "## " heading, when the table is rewritten."""
    try:
        with open(path) as f:
            old = f.read().splitlines()
    except OSError:
        return []
    out = []
    for i, line in enumerate(old):
        if line.strip() in headings:
            end = next((j for j in range(i + 1, len(old)) if old[j].startswith("## ")), len(old))
            section = old[i:end]
            while section and not section[-1].strip():
                section.pop()
            out += section + [""]
    return out
