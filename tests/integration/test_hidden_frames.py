"""Frames of the import system and of memtrace's own package are hidden by
the reports unless --show-hidden-frames: what they called joins their
caller and their own memory goes to it, or to a "<hidden frames>" entry
when nothing shown called them; the totals stay the same. Exact numbers
from a hand-made capture, and a real program that imports a module of its
own under a memtrace.Tracker."""

import json
import os
import re

import pytest

from conftest import ROOT, run
from test_reports import MB, Capture

DATA_RE = re.compile(r'<script id="mt-data" type="application/json">(.*?)</script>', re.S)
KB = 1 << 10
FROZEN = "<frozen importlib._bootstrap>"
FROZEN_EXT = "<frozen importlib._bootstrap_external>"
OLD_BOOTSTRAP = "/usr/lib/python3.8/importlib/_bootstrap.py"
TRACKER = "/opt/venv/lib/python3.11/site-packages/memtrace/tracker.py"


@pytest.fixture
def capture(tmp_path):
    """main.py:1 imports mod (frozen importlib, 4 MB in mod.py:1, 1 MB in
    importlib's own exec_module) and, through an older interpreter's
    importlib/_bootstrap.py, mod again (2 MB); main.py:1 -> Tracker.__exit__
    512 KB; Tracker.__exit__ called by nothing shown 256 KB; main.py:1 ->
    work 128 KB."""
    c = Capture()
    c.thread(0, 100, "MainThread")
    c.code(1, "/app/main.py", "<module>", 1).code(2, FROZEN, "_find_and_load", 1000)
    c.code(3, FROZEN_EXT, "_LoaderBasics.exec_module", 900).code(4, "/app/mod.py", "<module>", 1)
    c.code(5, TRACKER, "Tracker.__exit__", 340).code(6, "/app/main.py", "work", 10)
    c.code(7, OLD_BOOTSTRAP, "_find_and_load", 970)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 2, 3).stack(4, 3, 4)
    c.stack(5, 1, 5).stack(6, 0, 5).stack(7, 1, 6).stack(8, 1, 7).stack(9, 8, 4)
    c.alloc(0x1000000, 4 * MB, stack=4)
    c.alloc(0x2000000, 1 * MB, stack=3)
    c.alloc(0x3000000, 2 * MB, stack=9)
    c.alloc(0x4000000, 512 * KB, stack=5)
    c.alloc(0x5000000, 256 * KB, stack=6)
    c.alloc(0x6000000, 128 * KB, stack=7)
    return c.trailer(1000).save(tmp_path / "h.bin")


TOTAL = 7 * MB + 896 * KB


def summary(memtrace, cap, *extra):
    d = json.loads(run(memtrace, "summary", "--json", *extra, cap).stdout)
    return d, {(r["function"], r["file"], r["line"]): (r["total_bytes"], r["own_bytes"])
               for r in d["rows"]}


def test_summary_hides_import_system_and_memtrace_frames(memtrace, capture):
    d, rows = summary(memtrace, capture)
    assert d["total_bytes"] == TOTAL and d["frames_hidden"] is True
    assert rows == {
        ("<module>", "/app/main.py", 1): (TOTAL - 256 * KB, 1 * MB + 512 * KB),
        ("<module>", "/app/mod.py", 1): (6 * MB, 6 * MB),
        ("work", "/app/main.py", 10): (128 * KB, 128 * KB),
        ("<hidden frames>", "", 0): (256 * KB, 256 * KB),
    }
    # every byte is somebody's own
    assert sum(own for _, own in rows.values()) == TOTAL
    text = run(memtrace, "summary", capture).stdout
    assert "frozen" not in text and "tracker.py" not in text and "_bootstrap" not in text
    assert "(import-system and memtrace frames hidden; --show-hidden-frames shows them)" in text


def test_summary_shows_them_when_asked(memtrace, capture):
    d, rows = summary(memtrace, capture, "--show-hidden-frames")
    assert d["total_bytes"] == TOTAL and d["frames_hidden"] is False
    assert rows[("<module>", "/app/main.py", 1)] == (TOTAL - 256 * KB, 0)
    assert rows[("_LoaderBasics.exec_module", FROZEN_EXT, 900)] == (5 * MB, 1 * MB)
    assert rows[("_find_and_load", FROZEN, 1000)] == (5 * MB, 0)
    assert rows[("_find_and_load", OLD_BOOTSTRAP, 970)] == (2 * MB, 0)
    assert rows[("Tracker.__exit__", TRACKER, 340)] == (768 * KB, 768 * KB)
    assert ("<hidden frames>", "", 0) not in rows
    assert sum(own for _, own in rows.values()) == TOTAL
    assert "hidden" not in run(memtrace, "summary", "--show-hidden-frames", capture).stdout


GOLDEN_TREE = """\
Memory at the peak: 7.88 MiB in 6 allocations
All 4 biggest of 4 allocating call paths; import-system and memtrace frames hidden (--show-hidden-frames)

7.88 MiB 100.00%  all
\u251c\u2500 7.62 MiB  96.83%  <module> at /app/main.py:1
\u2502  \u251c\u2500 6.00 MiB  76.19%  <module> at /app/mod.py:1
\u2502  \u2514\u2500 128.00 KiB   1.59%  work at /app/main.py:10
\u2514\u2500 256.00 KiB   3.17%  <hidden frames>
"""


def test_tree_hides_them(memtrace, capture):
    assert run(memtrace, "tree", capture).stdout == GOLDEN_TREE
    shown = run(memtrace, "tree", "--show-hidden-frames", "-n", "0", capture).stdout
    assert shown.splitlines()[1] == "All 6 biggest of 6 allocating call paths"
    for frame in ("_find_and_load at " + FROZEN + ":1000",
                  "_LoaderBasics.exec_module at " + FROZEN_EXT + ":900",
                  "_find_and_load at " + OLD_BOOTSTRAP + ":970",
                  "Tracker.__exit__ at " + TRACKER + ":340"):
        assert frame in shown and frame not in GOLDEN_TREE
    assert shown.splitlines()[3] == "7.88 MiB 100.00%  all"


def page(memtrace, cap, command, *extra):
    out = cap.with_name("%s%s.html" % (command, "".join(extra)))
    run(memtrace, command, "-f", "-o", out, *extra, cap)
    return json.loads(DATA_RE.search(out.read_text()).group(1))


def test_flamegraph_marks_them_for_the_page(memtrace, capture):
    d = page(memtrace, capture, "flamegraph")
    s, n = d["strings"], d["nodes"]
    kinds = {(s[n["fn"][i]], s[n["file"][i]]): n["hidden"][i] for i in range(1, len(n["fn"]))}
    assert kinds == {("<module>", "/app/main.py"): 0, ("<module>", "/app/mod.py"): 0,
                     ("work", "/app/main.py"): 0, ("_find_and_load", FROZEN): 1,
                     ("_LoaderBasics.exec_module", FROZEN_EXT): 1,
                     ("_find_and_load", OLD_BOOTSTRAP): 1, ("Tracker.__exit__", TRACKER): 2}
    # the page has the whole tree: it leaves them out itself
    assert d["show_hidden"] is False and sum(n["bytes"]) == TOTAL == d["total_bytes"]
    assert page(memtrace, capture, "flamegraph", "--show-hidden-frames")["show_hidden"] is True


def test_table_hides_them(memtrace, capture):
    def rows(d):
        s, r = d["strings"], d["rows"]
        return {(s[r["fn"][i]], s[r["file"][i]], r["line"][i]): r["bytes"][i]
                for i in range(len(r["fn"]))}
    d = page(memtrace, capture, "table")
    assert d["frames_hidden"] is True and d["total_bytes"] == TOTAL
    assert rows(d) == {("<module>", "/app/mod.py", 1): 6 * MB,
                       ("<module>", "/app/main.py", 1): 1 * MB + 512 * KB,
                       ("<hidden frames>", "", 0): 256 * KB, ("work", "/app/main.py", 10): 128 * KB}
    d = page(memtrace, capture, "table", "--show-hidden-frames")
    assert d["frames_hidden"] is False and d["total_bytes"] == TOTAL
    assert rows(d) == {("<module>", "/app/mod.py", 1): 6 * MB,
                       ("_LoaderBasics.exec_module", FROZEN_EXT, 900): 1 * MB,
                       ("Tracker.__exit__", TRACKER, 340): 768 * KB, ("work", "/app/main.py", 10): 128 * KB}


def test_stats_takes_no_such_option(memtrace, capture):
    p = run(memtrace, "stats", "--show-hidden-frames", capture, check=False)
    assert p.returncode == 2 and "show-hidden-frames" in p.stderr.splitlines()[0]


REAL = """\
import memtrace
with memtrace.Tracker("real.bin"):
    import real_mod
    mine = bytearray(2 * 1024 * 1024)
"""

REAL_MOD = """\
BLOCK = bytearray(3 * 1024 * 1024)
"""


def test_real_program_under_a_tracker(memtrace, tmp_path):
    (tmp_path / "prog.py").write_text(REAL)
    (tmp_path / "real_mod.py").write_text(REAL_MOD)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), PYTHONMALLOC="malloc")
    env["MEMTRACE_BUILD_DIR"] = os.path.dirname(os.path.dirname(memtrace))
    run("/usr/bin/python3", "prog.py", cwd=tmp_path, env=env)
    cap = tmp_path / "real.bin"
    for view in ((), ("--leaks",), ("--temporary-allocations",)):
        hidden, rows = summary(memtrace, cap, "-n", "0", *view)
        shown, all_rows = summary(memtrace, cap, "-n", "0", "--show-hidden-frames", *view)
        files = {f for _, f, _ in rows}
        assert not any(f.startswith("<frozen") or f.endswith("/memtrace/tracker.py") for f in files)
        assert sum(own for _, own in rows.values()) == sum(own for _, own in all_rows.values())
        assert hidden["total_bytes"] == shown["total_bytes"]
    # the import's 3 MB: the module's line is under the line that imported it
    tree = run(memtrace, "tree", cap).stdout
    assert re.search(r"<module> at %s:3\n.*3\.\d\d MiB .*<module> at %s:1\n"
                     % (re.escape(str(tmp_path / "prog.py")), re.escape(str(tmp_path / "real_mod.py"))),
                     tree), tree
    assert "frozen" not in tree
    full = run(memtrace, "tree", "--show-hidden-frames", "-n", "0", cap).stdout
    assert "_find_and_load at <frozen importlib._bootstrap>" in full
    temp = run(memtrace, "summary", "--temporary-allocations", "--show-hidden-frames", "-n", "0",
               cap).stdout
    assert "Tracker.__exit__ at " in temp and "/memtrace/tracker.py" in temp
