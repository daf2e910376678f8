"""The flamegraph, table and tree reports and the peak/leaks/temporary views:
exact numbers from hand-made captures (golden), the data embedded in the
HTML, escaping of hostile names, output file handling, and real programs
run under memtrace. The pages' behaviour in a browser is tested in
tests/browser."""

import json
import os
import re
import subprocess

import pytest

from conftest import run
from test_reports import MB, Capture, program
from test_run import FG  # the f/g script of issue 2

DATA_RE = re.compile(r'<script id="mt-data" type="application/json">(.*?)</script>', re.S)


def page_data(path):
    html = path.read_text()
    m = DATA_RE.search(html)
    assert m, "no data element in %s" % path
    return json.loads(m.group(1)), html


def flamegraph(memtrace, cap, *args, out=None):
    out = out or cap.with_suffix(".html")
    run(memtrace, "flamegraph", "-f", "-o", out, *args, cap)
    return page_data(out)


def test_flamegraph_peak_golden(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    d, html = flamegraph(memtrace, cap)
    assert d["kind"] == "flamegraph" and d["view"] == "peak"
    assert d["view_label"] == "memory at the peak"
    assert d["capture"] == str(cap) and d["command"] == "python3 prog.py"
    assert d["total_bytes"] == 13 * MB and d["total_count"] == 2
    assert d["strings"] == ["<module>", "/app/prog.py", "f", "g"]
    assert d["nodes"] == {"parent": [0, 0, 1, 1], "fn": [-1, 0, 2, 3], "file": [-1, 1, 1, 1],
                          "line": [0, 1, 5, 9], "thread": [0, 0, 0, 0],
                          "bytes": [0, 0, 10 * MB, 3 * MB], "count": [0, 0, 1, 1],
                          "native": [0, 0, 0, 0], "hidden": [0, 0, 0, 0],
                          "src": [-1, -1, -1, -1], "merged": []}
    assert d["merge"] == {"nodes": 0, "below_bytes": 0}
    assert d["memory"] == {"time_us": [1000], "rss": [40 * MB], "heap": [13 * MB],
                           "peak": {"time_us": 0, "heap": 13 * MB}}
    # the threads that hold something at the peak: not the worker
    assert d["threads"] == [{"index": 0, "tid": 4242, "name": "MainThread"}]
    assert d["truncated"] is False and d["inverted"] is False and d["split_threads"] is False
    # self-contained: nothing is fetched from anywhere
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html)
    assert "http://" not in html and "https://" not in html


def test_flamegraph_leaks_golden(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    d, _ = flamegraph(memtrace, cap, "--leaks", "--split-threads", "--inverted")
    assert d["view"] == "leaks" and d["inverted"] is True and d["split_threads"] is True
    assert d["total_bytes"] == 4 * MB + 15 * 4096 and d["total_count"] == 3
    s = d["strings"]
    n = d["nodes"]
    named = {(s[n["fn"][i]] if n["fn"][i] >= 0 else None, n["thread"][i]): (n["bytes"][i], n["count"][i])
             for i in range(len(n["fn"]))}
    assert named == {(None, 0): (0, 0), ("<module>", 0): (0, 0), ("g", 0): (3 * MB + 15 * 4096, 2),
                     ("<no Python frames>", 1): (MB, 1)}
    # split: the threads of the graph's nodes, the worker's leak included
    assert [t["name"] for t in d["threads"]] == ["MainThread", "worker"]


def test_temporary_threshold_golden(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    # f's 10 MB is freed after one more allocation of its thread (g's):
    # temporary at threshold 1 (memray's default, at most one in between), not at 0
    d, _ = flamegraph(memtrace, cap, "--temporary-allocations")
    assert d["total_bytes"] == 10 * MB and d["total_count"] == 1 and d["temp_threshold"] == 1
    d, _ = flamegraph(memtrace, cap, "--temporary-allocations", "--temporary-allocation-threshold", "0")
    assert d["view"] == "temporary" and d["total_bytes"] == 0 and d["temp_threshold"] == 0
    s = json.loads(run(memtrace, "summary", "--json", "--temporary-allocations", cap).stdout)
    assert s["view"] == "temporary" and s["total_bytes"] == 10 * MB
    assert s["rows"][1] == {"function": "f", "file": "/app/prog.py", "line": 5, "total_bytes": 10 * MB,
                            "total_allocations": 1, "own_bytes": 10 * MB, "own_allocations": 1}
    t = json.loads(run(memtrace, "stats", "--json", cap).stdout)["totals"]
    assert (t["temporary_bytes"], t["temporary_allocations"], t["temporary_allocation_threshold"]) == \
        (10 * MB, 1, 1)
    t = json.loads(run(memtrace, "stats", "--json", "--temporary-allocation-threshold", "0",
                       cap).stdout)["totals"]
    assert (t["temporary_bytes"], t["temporary_allocations"]) == (0, 0)


def test_temporary_same_thread_only(memtrace, tmp_path):
    c = Capture()
    c.code(1, "/app/t.py", "make", 3).stack(1, 0, 1)
    c.alloc(0x1000, 100, stack=1).free(0x1000)                      # temporary
    c.alloc(0x2000, 200, stack=1, thread=1).free(0x2000)            # freed by another thread
    c.alloc(0x3000, 300, stack=1).alloc(0x4000, 1).free(0x3000)     # one allocation between
    cap = c.trailer(10).save(tmp_path / "t.bin")
    for n, want in ((0, (100, 1)), (1, (400, 2)), (100, (400, 2))):
        s = json.loads(run(memtrace, "summary", "--json", "--temporary-allocations",
                           "--temporary-allocation-threshold", str(n), cap).stdout)
        assert (s["total_bytes"], s["total_allocations"]) == want, n


GOLDEN_TREE = """\
Memory at the peak: 13.00 MiB in 2 allocations at 0.000 s
All 2 biggest of 2 allocating call paths

13.00 MiB 100.00%  all
\u2514\u2500 13.00 MiB 100.00%  <module> at /app/prog.py:1
   \u251c\u2500 10.00 MiB  76.92%  f at /app/prog.py:5
   \u2514\u2500 3.00 MiB  23.08%  g at /app/prog.py:9
"""

GOLDEN_TREE_LEAKS = """\
Leaks (live at the end): 4.06 MiB in 3 allocations
The 1 biggest of 2 allocating call paths (-n 0 shows all)

4.06 MiB 100.00%  all
\u2514\u2500 3.06 MiB  75.36%  <module> at /app/prog.py:1
   \u2514\u2500 3.06 MiB  75.36%  g at /app/prog.py:9
"""


def test_tree_golden(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    p = run(memtrace, "tree", cap)
    assert p.stdout == GOLDEN_TREE and p.stderr == ""
    assert run(memtrace, "tree", "--leaks", "-n", "1", cap).stdout == GOLDEN_TREE_LEAKS
    p = run(memtrace, "tree", "--temporary-allocations", "--temporary-allocation-threshold", "0", cap)
    assert "0 B in 0 allocations" in p.stdout and "(nothing)" in p.stdout


def test_tree_of_a_deep_recursion_stays_small(memtrace, tmp_path):
    """A 5000-deep chain: lines are indented 64 levels at most, and say
    their depth past that, so the report grows with the depth, not with
    its square."""
    depth = 5000
    c = Capture()
    c.code(1, "/app/deep.py", "down", 1)
    for i in range(1, depth + 1):
        c.stack(i, i - 1, 1, offset=i)
    c.alloc(0x1000, 4096, stack=depth)
    cap = c.trailer(10).save(tmp_path / "deep.bin")
    out = run(memtrace, "tree", cap).stdout.splitlines()
    rows = out[out.index("") + 1:]
    assert len(rows) == depth + 1  # "all" and every frame
    assert max(len(r) for r in rows) < 64 * 3 + 80
    assert "[depth" not in rows[64] and rows[65].lstrip().startswith("\u2514\u2500 [depth 65] 4.00 KiB")
    assert rows[-1].endswith("[depth %d] 4.00 KiB 100.00%%  down at /app/deep.py:1" % depth)
    assert rows[65].index("[depth") == rows[-1].index("[depth")


def test_stats_and_summary_golden(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    t = json.loads(run(memtrace, "stats", "--json", cap).stdout)["totals"]
    assert t == {"events": 7, "allocations": 4, "frees": 3, "unmatched_frees": 1,
                 "bytes_allocated": 14 * MB + 16 * 4096, "bytes_freed": 10 * MB + 4096,
                 "peak_heap": 13 * MB, "peak_event": 2, "peak_time_us": 0,
                 "peak_time_until_us": 1000, "peak_rss": 40 * MB, "peak_rss_time_us": 1000, "live_bytes_at_end": 4 * MB + 15 * 4096,
                 "live_allocations_at_end": 3, "temporary_bytes": 10 * MB, "temporary_allocations": 1,
                 "temporary_allocation_threshold": 1, "dropped": 4,
                 "aggregated": False}
    s = json.loads(run(memtrace, "summary", "--json", cap).stdout)
    assert [(r["function"], r["total_bytes"], r["own_bytes"]) for r in s["rows"]] == [
        ("<module>", 13 * MB, 0), ("f", 10 * MB, 10 * MB), ("g", 3 * MB, 3 * MB)]
    s = json.loads(run(memtrace, "summary", "--json", "--leaks", cap).stdout)
    assert [(r["function"], r["total_bytes"]) for r in s["rows"]] == [
        ("<module>", 3 * MB + 15 * 4096), ("g", 3 * MB + 15 * 4096), ("<no Python frames>", MB)]


def test_table_golden(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    out = tmp_path / "t.html"
    run(memtrace, "table", "--leaks", "--split-threads", "-o", out, cap)
    d, _ = page_data(out)
    assert d["kind"] == "table" and d["view"] == "leaks" and d["split_threads"] is True
    s, r = d["strings"], d["rows"]
    rows = [(s[r["fn"][i]], s[r["file"][i]], r["line"][i], r["thread"][i], s[r["allocator"][i]],
             r["bytes"][i], r["count"][i]) for i in range(len(r["bytes"]))]
    assert rows == [("g", "/app/prog.py", 9, 0, "malloc", 3 * MB, 1),
                    ("<no Python frames>", "", 0, 1, "calloc", MB, 1),
                    ("g", "/app/prog.py", 9, 0, "mmap", 15 * 4096, 1)]
    assert d["rows_dropped"] == 0


def test_table_keeps_every_row(memtrace, tmp_path):
    """memray's table has a row for each location: 25,000 of them are all
    in the page (which shows them 100 at a time), none left out."""
    cap = Capture().locations(25000, 0x1000, 100).trailer(1000).save(tmp_path / "rows.bin")
    out = tmp_path / "t.html"
    run(memtrace, "table", "-o", out, cap)
    d, _ = page_data(out)
    assert len(d["rows"]["bytes"]) == 25000 and d["rows_dropped"] == 0
    assert d["strings"][d["rows"]["fn"][-1]] == "f1"


def test_table_merges_threads_unless_split(memtrace, tmp_path):
    """As memray's table: a location's allocations in two threads are one
    row, with no thread named, unless --split-threads."""
    c = Capture()
    c.thread(0, 100, "MainThread").thread(1, 101, "worker")
    c.code(1, "/app/main.py", "work", 5).stack(1, 0, 1)
    c.alloc(0x100000, 3 * MB, stack=1).alloc(0x1000000, 2 * MB, stack=1, thread=1)
    cap = c.trailer(1000).save(tmp_path / "two.bin")
    for flags, want, threads in (([], [(5 * MB, 2)], []),
                                 (["--split-threads"], [(3 * MB, 1), (2 * MB, 1)], ["MainThread", "worker"])):
        out = tmp_path / "t.html"
        run(memtrace, "table", "-f", *flags, "-o", out, cap)
        d, _ = page_data(out)
        assert list(zip(d["rows"]["bytes"], d["rows"]["count"])) == want, flags
        assert [t["name"] for t in d["threads"]] == threads and d["split_threads"] is bool(flags)


def hostile_capture(tmp_path):
    evil = "</script><b id=x>\u2028&amp;\"'</b><!--"
    c = Capture()
    c.thread(0, 1, "</script><i>t</i>")
    c.code(1, "/app/<evil>.py", evil, 1).stack(1, 0, 1)
    c.alloc(0x1000, 1000, stack=1)
    return evil, c.trailer(10).save(tmp_path / "evil.bin")


@pytest.mark.parametrize("command", ["flamegraph", "table"])
def test_hostile_names_are_inert(memtrace, tmp_path, command):
    evil, cap = hostile_capture(tmp_path)
    out = tmp_path / "evil.html"
    run(memtrace, command, "--split-threads", "-o", out, cap)
    html = out.read_text()
    template = (tmp_path / "clean.html")
    run(memtrace, command, "--split-threads", "-o", template, program().save(tmp_path / "p.bin"))
    # no new elements, comments or script ends: the names only exist escaped
    for token in ("</script", "<b", "<i", "<!--", "\u2028"):
        assert html.count(token) == template.read_text().count(token), token
    d, _ = page_data(out)
    assert evil in d["strings"] and "/app/<evil>.py" in d["strings"]
    assert d["threads"][0]["name"] == "</script><i>t</i>"


@pytest.mark.parametrize("command", [["summary"], ["summary", "--leaks"], ["tree"], ["stats"]])
def test_text_reports_show_control_characters_escaped(memtrace, tmp_path, command):
    """Names come from the program: a newline must not forge a row, nor
    an escape sequence reach the terminal."""
    c = Capture()
    c.thread(0, 1, "MainThread")
    c.code(1, "/app/x.py\n 99.99 MiB 100.00%  fake row", "f\x1b[31m", 3).stack(1, 0, 1)
    c.alloc(0x1000, 1000, stack=1)
    c.diag(0, "hello\x1b]0;title\x07")
    cap = c.trailer(10).save(tmp_path / "esc.bin")
    out = run(memtrace, *command, cap).stdout
    assert "\x1b" not in out and "\x07" not in out and "fake row" in out
    assert not any(line.startswith(" 99.99 MiB") for line in out.splitlines()), out
    assert "f\\x1b[31m at /app/x.py\\x0a 99.99 MiB 100.00%  fake row:3" in out, out
    if command == ["stats"]:
        assert "hello\\x1b]0;title\\x07" in out, out


@pytest.mark.parametrize("command", [["summary"], ["tree"], ["stats"]])
def test_text_reports_show_c1_controls_and_stray_bytes_escaped(memtrace, tmp_path, command):
    """A name's C1 controls (U+0080 to U+009F: U+009B is CSI to some
    terminals) read as \\u00NN and its bytes that are not UTF-8 as \\xNN,
    as Python shows them; other characters as they are."""
    c = Capture()
    c.thread(0, 1, "MainThread")
    name = b"g\xc2\x9b31m\xff\xe2\x82\xac\xc3\xa9\xe2\x82ok\x9b2J"
    c.code(1, b"/app/x\xc2\x85y.py", name, 3).stack(1, 0, 1)
    c.alloc(0x1000, 1000, stack=1)
    c.diag(0, b"bad \xc2\x9d]0;title\xc2\x9c")
    cap = c.trailer(10).save(tmp_path / "c1.bin")
    p = subprocess.run([str(memtrace), *command, str(cap)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode("utf-8")  # all of it UTF-8
    assert not re.search("[\x80-\x9f]", out), out
    assert ("g\\u009b31m\\xff\u20ac\u00e9\\xe2\\x82ok\\x9b2J at /app/x\\u0085y.py:3"
            in out), out
    if command == ["stats"]:
        assert "bad \\u009d]0;title\\u009c" in out, out


@pytest.mark.parametrize("command", [["flamegraph"], ["table"], ["growth"], ["transform", "csv"],
                                     ["stats", "--json"], ["diff", "--html"]])
def test_existing_output_refused_before_the_read(memtrace, tmp_path, command):
    """An output that exists (without -f) is refused before the capture is
    read: a capture that would not read says nothing, and a good one is
    not read for nothing first."""
    good = program().save(tmp_path / "p.bin")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(good.read_bytes()[:40])
    out = tmp_path / "out.page"
    out.write_text("mine")
    caps = [bad, bad] if command[0] == "diff" else [bad]
    p = run(memtrace, *command, "-o", out, *caps, check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert "'%s' exists (use -f to overwrite it)" % out in p.stderr, p.stderr
    assert out.read_text() == "mine"
    # a capture that is not there is said first, as memray does
    gone = [tmp_path / "gone.bin"] * len(caps)
    p = run(memtrace, *command, "-o", out, *gone, check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "gone.bin" in p.stderr, p.stderr
    # with -f the capture is read, and what is wrong with it said
    p = run(memtrace, *command, "-f", "-o", out, *caps, check=False)
    assert p.returncode == 1 and "exists" not in p.stderr and "bad.bin" in p.stderr, p.stderr
    assert out.read_text() == "mine"
    d = tmp_path / "dir.page"
    d.mkdir()
    p = run(memtrace, *command, "-f", "-o", d, *caps, check=False)
    assert p.returncode == 1 and "is a directory, not a regular file" in p.stderr, p.stderr


def test_page_names_the_threads_holding_the_most(memtrace, tmp_path):
    """Without split threads the page names at most 256 threads, those that
    hold the most in the view, and says how many held something: a thread
    per request makes a million in a night."""
    c = Capture()
    c.code(1, "/app/svc.py", "handle", 1).stack(1, 0, 1)
    n = 300
    for i in range(n):
        c.thread(i, 5000 + i, "req-%d" % i)
        c.alloc(0x100000 + 0x10000 * i, 1000 + (i * 7919) % n, stack=1, thread=i)
    cap = c.trailer(10).save(tmp_path / "t.bin")
    d, _ = flamegraph(memtrace, cap, "--leaks")
    assert d["threads_holding"] == n
    held = sorted(range(n), key=lambda i: (-(1000 + (i * 7919) % n), i))[:256]
    assert sorted(t["index"] for t in d["threads"]) == sorted(held)
    assert all(t["name"] == "req-%d" % t["index"] for t in d["threads"])
    d, _ = flamegraph(memtrace, cap, "--leaks", "--split-threads")
    assert len(d["threads"]) == n and "threads_holding" not in d


def test_output_files(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    p = run(memtrace, "flamegraph", cap, cwd=tmp_path)
    out = tmp_path / "memtrace-flamegraph-p.html"
    assert out.exists() and p.stdout.startswith("wrote %s (" % out)
    p = run(memtrace, "flamegraph", cap, check=False)
    assert p.returncode == 1 and "exists (use -f to overwrite it)" in p.stderr
    assert p.stderr.count("\n") == 1
    run(memtrace, "flamegraph", "-f", cap)
    run(memtrace, "table", cap)
    assert (tmp_path / "memtrace-table-p.html").exists()
    # run's default capture name keeps one "memtrace-" in the page's
    cap2 = program().save(tmp_path / "memtrace-known.25752.bin")
    run(memtrace, "flamegraph", cap2)
    assert (tmp_path / "memtrace-flamegraph-known.25752.html").exists()
    cap3 = program().save(tmp_path / "memtrace-.bin")
    run(memtrace, "table", cap3)
    assert (tmp_path / "memtrace-table-memtrace-.html").exists()
    p = run(memtrace, "flamegraph", "-o", "-", cap)
    assert p.stdout.startswith("<!DOCTYPE html>") and p.stdout.rstrip().endswith("</html>")
    for args in (["--leaks", "--temporary-allocations"], ["--leaks", "--temporary-allocation-threshold", "2"],
                 ["--temporary-allocations", "--temporary-allocation-threshold", "-1"], []):
        p = run(memtrace, "flamegraph", "-o", "-", *args, *([cap] if args else []), check=False)
        assert p.returncode == 2, (args, p.stderr)
    # the threshold alone asks for the temporary view, as memray's does
    p = run(memtrace, "flamegraph", "-o", "-", "--temporary-allocation-threshold", "0", cap)
    q = run(memtrace, "flamegraph", "-o", "-", "--temporary-allocations",
            "--temporary-allocation-threshold", "0", cap)
    assert p.stdout == q.stdout
    p = run(memtrace, "flamegraph", "-o", tmp_path / "x.html", tmp_path / "missing.bin", check=False)
    assert p.returncode == 1 and "No such file" in p.stderr and not (tmp_path / "x.html").exists()


def test_pruning_keeps_the_page_small(memtrace, tmp_path):
    """100k distinct call paths: the page keeps a bounded number of nodes,
    says how many were merged, and the merged bytes are not lost."""
    c = Capture()
    c.code(1, "/app/m.py", "<module>", 1).stack(1, 0, 1)
    n = 100000
    for i in range(n):
        c.code(2 + i, "/app/m%d.py" % (i % 100), "function_with_a_long_name_%d" % i, i + 1)
        c.stack(2 + i, 1, 2 + i)
        c.alloc(0x10000 + 16 * i, 100 + i % 7, stack=2 + i)
        if i % 5000 == 4999:
            c.flush()
    c.alloc(0x7000000, 50 * MB, stack=2)
    cap = c.trailer(10).save(tmp_path / "wide.bin")
    d, html = flamegraph(memtrace, cap)
    total = 50 * MB + sum(100 + i % 7 for i in range(n))
    assert d["total_bytes"] == total
    assert sum(d["nodes"]["bytes"]) == total
    assert d["merge"]["nodes"] > 50000 and len(d["nodes"]["parent"]) <= 40000
    assert len(html) < 5 * 1000 * 1000



def test_pruning_keeps_the_biggest_paths_whatever_their_age(memtrace, tmp_path):
    """More nodes than the page keeps, made before the biggest allocation:
    pruning goes by size, not by age, and every merged path is smaller
    than every path kept."""
    c = Capture()
    c.code(1, "/app/m.py", "<module>", 1).stack(1, 0, 1)
    sid, depth, chains = 2, 150, 150
    for k in range(chains):
        c.code(2 + k, "/app/m.py", "rec%d" % k, 10 + k)
        parent = 1
        for _ in range(depth):
            c.stack(sid, parent, 2 + k)
            parent, sid = sid, sid + 1
        c.alloc(0x1000000 + 0x100000 * k, 100_000 + k, stack=parent)
        c.flush()
    c.code(1000, "/app/m.py", "biggest", 500).stack(sid, 1, 1000)
    c.alloc(0x70000000, 20 * MB, stack=sid)
    cap = c.trailer(10).save(tmp_path / "old.bin")
    d, _ = flamegraph(memtrace, cap)
    s, n = d["strings"], d["nodes"]
    assert len(n["parent"]) <= 40000 and d["merge"]["nodes"] > 0
    big = [i for i in range(1, len(n["parent"])) if n["fn"][i] >= 0 and s[n["fn"][i]] == "biggest"]
    assert len(big) == 1 and n["bytes"][big[0]] == 20 * MB
    assert sum(n["bytes"]) == 20 * MB + sum(100_000 + k for k in range(chains))
    # totals from own bytes, leaves up (parents come before their children)
    total = list(n["bytes"])
    for i in range(len(total) - 1, 0, -1):
        total[n["parent"][i]] += total[i]
    merged = dict(n["merged"])  # node -> how many paths it stands for
    kept = [total[i] for i in range(1, len(total)) if i not in merged]
    below = d["merge"]["below_bytes"]
    assert min(kept) >= below - 1, (min(kept), below)
    assert all(0 < total[i] < below * k for i, k in merged.items())


LOOP = """\
def work():
    total = 0
    for i in range(3000):
        total += sum([j for j in range(300)])
    return total


work()
"""


def top_frames(d):
    """(function, line) of the biggest node under the root's biggest child
    chain, innermost last, for pages of real programs."""
    s, n = d["strings"], d["nodes"]
    names = {}
    for i in range(1, len(n["parent"])):
        if n["fn"][i] >= 0:
            key = (s[n["fn"][i]], n["line"][i])
            names[key] = names.get(key, 0) + n["bytes"][i]
    return sorted(names.items(), key=lambda kv: -kv[1])


def test_real_program_peak_and_leaks(memtrace, script, tmp_path):
    prog = script(FG, "fg.py")
    cap = tmp_path / "cap.bin"
    run(memtrace, "run", "-o", cap, prog, cwd=tmp_path)
    d, _ = flamegraph(memtrace, cap)
    assert top_frames(d)[0][0] == ("f", 2)
    d, _ = flamegraph(memtrace, cap, "--leaks")
    assert top_frames(d)[0][0] == ("g", 7)
    assert "f at %s:2" % prog in run(memtrace, "tree", cap).stdout
    assert "g at %s:7" % prog in run(memtrace, "tree", "--leaks", cap).stdout


def test_real_program_temporary_list(memtrace, script, tmp_path):
    prog = script(LOOP, "loop.py")
    cap = tmp_path / "cap.bin"
    run(memtrace, "run", "-o", cap, prog, cwd=tmp_path)
    d, _ = flamegraph(memtrace, cap, "--temporary-allocations")
    assert d["total_count"] >= 3000
    # the loop line; before 3.12 the comprehension is a function of its own
    function, line = top_frames(d)[0][0]
    assert line == 4 and function in ("work", "work.<locals>.<listcomp>"), top_frames(d)[:3]


def test_report_to_a_device_is_refused_and_a_failed_page_removed(memtrace, script, tmp_path,
                                                                  full_fs):
    # A page is a new regular file: a device is refused (even with -f)
    # and kept. A page that cannot be written is an error, and the file
    # memtrace made is removed.
    prog = script("x = bytearray(100_000)\n")
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-o", cap, prog)
    for cmd in ("flamegraph", "table"):
        p = run(memtrace, cmd, "-f", "-o", "/dev/full", cap, check=False, timeout=30)
        assert p.returncode == 1 and p.stderr == (
            "memtrace: %s page '/dev/full' is a character device, not a regular file\n" % cmd)
        assert os.path.exists("/dev/full") and not os.path.isfile("/dev/full")
    # small outputs too (they fit in the stream's buffer until it is
    # closed), each saying why in one line
    for cmd in (["flamegraph"], ["table"], ["growth", "--html"], ["stats", "--json"],
                ["transform", "csv"], ["transform", "gprof2dot"], ["diff", "--html", cap]):
        page = full_fs / "out"
        p = run(memtrace, *cmd, "-o", page, cap, check=False)
        assert p.returncode == 1, (cmd, p.stderr)
        assert p.stderr.endswith("cannot write '%s': No space left on device\n" % page), p.stderr
        assert p.stderr.count("\n") == 1 + p.stderr.count("memtrace: note: "), p.stderr
        assert not page.exists()


def test_a_thread_per_request_service(memtrace, script, tmp_path):
    """Thousands of short threads (a server that starts one per request),
    a few of them renamed after they started: each is named as Python
    names it, and the page names only the threads that hold something."""
    prog = script(
        "import threading\n"
        "kept = []\n"
        "def request(i):\n"
        "    threading.current_thread().name = 'req-%d' % i\n"
        "    data = bytearray(1000)\n"
        "    if i % 1000 == 0:\n"
        "        kept.append(bytearray(100_000))\n"
        "for i in range(0, 3000, 6):\n"
        "    ts = [threading.Thread(target=request, args=(i + k,)) for k in range(6)]\n"
        "    for t in ts: t.start()\n"
        "    for t in ts: t.join()\n", "svc.py")
    cap = tmp_path / "svc.bin"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap, prog)
    d, _ = flamegraph(memtrace, cap, "--leaks", "--split-threads")
    names = sorted(t["name"] for t in d["threads"])
    assert names == ["req-0", "req-1000", "req-2000"] or \
        names == sorted(["MainThread", "req-0", "req-1000", "req-2000"]), names
    d, _ = flamegraph(memtrace, cap, "--leaks")
    assert len(d["threads"]) <= 4, len(d["threads"])
    # stats still lists them all, each under its own name
    threads = json.loads(run(memtrace, "stats", "--json", cap).stdout)["threads"]
    assert len(threads) == 3001, len(threads)
    assert sorted(t["name"] for t in threads if t["name"].startswith("req-")) == \
        sorted("req-%d" % i for i in range(3000))
