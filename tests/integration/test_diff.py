"""memtrace diff: two captures compared by location (function and file,
never the line), at the peak and at the end. Hand-made captures give
exact numbers; a real program run twice, once leaking in cache_rows and
once not, gives the change it should; --fail-over sets the exit status;
every bad input gets one line and a non-zero exit."""

import json
import os

import pytest

from conftest import run

from capture_writer import Capture

MB = 1 << 20


def before_capture():
    """<module> -> grow 1 MB, shrink 4 MB, moved 3 MB (line 40), all kept;
    gone 2 MB, freed: peak 10 MB, leaks 8 MB."""
    c = Capture()
    c.thread(0, 100, "MainThread")
    c.code(1, "/app/m.py", "<module>", 1).code(2, "/app/m.py", "grow", 10)
    c.code(3, "/app/m.py", "shrink", 20).code(4, "/app/m.py", "gone", 30)
    c.code(5, "/app/m.py", "moved", 40)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 1, 3).stack(4, 1, 4).stack(5, 1, 5)
    c.alloc(0x100000, 1 * MB, stack=2)
    c.alloc(0x1000000, 4 * MB, stack=3)
    c.alloc(0x2000000, 3 * MB, stack=5)
    c.alloc(0x3000000, 2 * MB, stack=4)
    c.free(0x3000000)
    return c.trailer(1000)


def after_capture():
    """<module> -> grow 3 MB, shrink 1 MB, moved 1 MB at line 45 and 2 MB at
    line 47, all kept; fresh 5 MB, freed: peak 12 MB, leaks 7 MB."""
    c = Capture()
    c.thread(0, 200, "MainThread")
    c.code(1, "/app/m.py", "<module>", 1).code(2, "/app/m.py", "grow", 11)
    c.code(3, "/app/m.py", "shrink", 22).code(4, "/app/m.py", "fresh", 50)
    c.code(5, "/app/m.py", "moved", 45).code(6, "/app/m.py", "moved", 47)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 1, 3).stack(4, 1, 4).stack(5, 1, 5).stack(6, 1, 6)
    c.alloc(0x100000, 3 * MB, stack=2)
    c.alloc(0x1000000, 1 * MB, stack=3)
    c.alloc(0x2000000, 1 * MB, stack=5)
    c.alloc(0x2800000, 2 * MB, stack=6)
    c.alloc(0x3000000, 5 * MB, stack=4)
    c.free(0x3000000)
    return c.trailer(1000)


@pytest.fixture
def pair(tmp_path):
    return (before_capture().save(tmp_path / "before.bin"),
            after_capture().save(tmp_path / "after.bin"))


def fig(before, after, nb, na):
    return {"before": before, "after": after, "change": after - before,
            "before_allocations": nb, "after_allocations": na}


def test_json_numbers(memtrace, pair):
    before, after = pair
    d = json.loads(run(memtrace, "diff", "--json", before, after).stdout)
    assert d["before"] == str(before) and d["after"] == str(after)
    assert d["peak"] == fig(10 * MB, 12 * MB, 4, 5)
    assert d["leaks"] == fig(8 * MB, 7 * MB, 3, 4)
    assert d["locations_count"] == 5
    rows = [(r["function"], r["file"], r["peak"], r["leaks"]) for r in d["locations"]]
    # biggest change at the peak first; grow and gone tie there, grow's leaks changed
    assert rows == [
        ("fresh", "/app/m.py", fig(0, 5 * MB, 0, 1), fig(0, 0, 0, 0)),
        ("shrink", "/app/m.py", fig(4 * MB, 1 * MB, 1, 1), fig(4 * MB, 1 * MB, 1, 1)),
        ("grow", "/app/m.py", fig(1 * MB, 3 * MB, 1, 1), fig(1 * MB, 3 * MB, 1, 1)),
        ("gone", "/app/m.py", fig(2 * MB, 0, 1, 0), fig(0, 0, 0, 0)),
        # one function at other lines is one location, unchanged
        ("moved", "/app/m.py", fig(3 * MB, 3 * MB, 1, 2), fig(3 * MB, 3 * MB, 1, 2)),
    ]
    assert all("native" not in r and "line" not in r for r in d["locations"])
    # -n cuts the JSON too; the count stays
    d = json.loads(run(memtrace, "diff", "--json", "-n", "2", before, after).stdout)
    assert [r["function"] for r in d["locations"]] == ["fresh", "shrink"]
    assert d["locations_count"] == 5


def test_text_table(memtrace, pair):
    before, after = pair
    p = run(memtrace, "diff", before, after)
    assert p.stderr == ""
    lines = p.stdout.splitlines()
    assert lines[0] == "Before: %s" % before and lines[1] == "After:  %s" % after
    assert "Peak tracked heap:        10.00 MiB -> 12.00 MiB (+2.00 MiB)" in lines
    assert "Leaks (live at the end):  8.00 MiB -> 7.00 MiB (-1.00 MiB)" in lines
    head = [i for i, l in enumerate(lines) if "Peak before" in l][0]
    assert lines[head].split() == ["Peak", "before", "Peak", "after", "Peak", "change", "Leaks",
                                   "before", "Leaks", "after", "Leaks", "change", "Location"]
    rows = lines[head + 1:]
    assert [r.split("  ")[-1] for r in rows] == [
        "fresh at /app/m.py", "shrink at /app/m.py", "grow at /app/m.py", "gone at /app/m.py",
        "moved at /app/m.py"]
    assert rows[0].split()[:6] == ["0", "B", "5.00", "MiB", "+5.00", "MiB"]
    assert rows[1].split()[:12] == ["4.00", "MiB", "1.00", "MiB", "-3.00", "MiB",
                                    "4.00", "MiB", "1.00", "MiB", "-3.00", "MiB"]
    assert rows[4].split()[:6] == ["3.00", "MiB", "3.00", "MiB", "0", "B"]
    # -n: the biggest rows, and what is left out
    rows = run(memtrace, "diff", "-n", "2", before, after).stdout.splitlines()
    assert rows[-3].endswith("fresh at /app/m.py") and rows[-2].endswith("shrink at /app/m.py")
    assert rows[-1] == "(3 more locations; -n 0 shows all)"
    assert len(run(memtrace, "diff", "--top", "0", before, after).stdout.splitlines()) == len(lines)


def test_same_capture_twice(memtrace, pair):
    before, _ = pair
    d = json.loads(run(memtrace, "diff", "--json", "--fail-over", "0", before, before).stdout)
    assert d["peak"]["change"] == 0 and d["leaks"]["change"] == 0
    assert all(r["peak"]["change"] == 0 and r["leaks"]["change"] == 0 for r in d["locations"])
    assert len(d["locations"]) == 4


@pytest.mark.parametrize("size,status", [
    ("1 MB", 1), ("1.5MiB", 1), ("2097151", 1), ("2 MB", 0), ("2MiB", 0), ("2097152", 0),
    ("0.001 GB", 1), (" 1 gib ", 0), ("2048 KB", 0), ("2047k", 1), ("+2 MB", 0), ("+1 MB", 1),
])
def test_fail_over(memtrace, pair, size, status):
    """The peak grew by exactly 2 MiB: more than SIZE fails, equal passes."""
    before, after = pair
    p = run(memtrace, "diff", "--json", "--fail-over", size, before, after, check=False)
    assert p.returncode == status, p.stderr
    assert json.loads(p.stdout)["peak"]["change"] == 2 * MB
    if status:
        assert p.stderr.count("\n") == 1
        assert "the peak grew by +2.00 MiB (2097152 bytes), more than --fail-over %s" % size \
            in p.stderr
    else:
        assert p.stderr == ""
    # the other way round the peak shrank: never a failure
    p = run(memtrace, "diff", "--fail-over", size, after, before, check=False)
    assert p.returncode == 0 and p.stderr == ""


LEAKY = """\
ROWS = []


def cache_rows():
    for i in range(50):
        ROWS.append(bytearray(100 * 1024))


def work():
    tmp = bytearray(3 * 1024 * 1024)
    return len(tmp)


cache_rows()
work()
"""

FIXED = LEAKY.replace("ROWS.append", "rows.append").replace(
    "    for i", "    rows = []\n    for i")


@pytest.fixture(scope="module")
def real_pair(memtrace, tmp_path_factory):
    """One script, cache_rows keeping 5,120,000 bytes in a module list
    (leaky) or not (fixed); work() then takes 3 MiB for a moment, on top of
    the kept rows in the leaky run only."""
    d = tmp_path_factory.mktemp("real")
    prog = d / "prog.py"
    caps = {}
    for name, text in (("leaky", LEAKY), ("fixed", FIXED)):
        prog.write_text(text)
        caps[name] = d / (name + ".bin")
        run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", caps[name], prog, cwd=d)
    return caps, str(prog)


def test_real_leak_fixed(memtrace, real_pair):
    caps, prog = real_pair
    kept = 50 * 100 * 1024
    d = json.loads(run(memtrace, "diff", "--json", caps["leaky"], caps["fixed"]).stdout)
    rows = {(r["function"], r["file"]): r for r in d["locations"]}
    cache = rows[("cache_rows", prog)]
    assert abs(cache["leaks"]["change"] + kept) < kept * 0.02, cache
    assert cache["leaks"]["before"] >= kept and cache["leaks"]["after"] < kept * 0.02
    assert abs(cache["peak"]["change"]) < kept * 0.02  # kept in both while it ran
    assert abs(d["leaks"]["change"] + kept) < kept * 0.05, d["leaks"]
    # the fixed run's peak is the rows alone, not the rows and work()'s 3 MiB
    assert -(3 * MB) * 1.05 < d["peak"]["change"] < -(3 * MB) * 0.95
    text = run(memtrace, "diff", caps["leaky"], caps["fixed"]).stdout
    assert "cache_rows at %s" % prog in text


def test_real_fail_over(memtrace, real_pair):
    caps, _ = real_pair
    p = run(memtrace, "diff", "--fail-over", "1 MB", caps["fixed"], caps["leaky"], check=False)
    assert p.returncode == 1
    assert p.stderr.startswith("memtrace: diff: the peak grew by +") and p.stderr.count("\n") == 1
    assert "cache_rows" in p.stdout  # the report is still written
    p = run(memtrace, "diff", "--fail-over", "1 MB", caps["leaky"], caps["fixed"], check=False)
    assert p.returncode == 0 and p.stderr == ""
    p = run(memtrace, "diff", "--fail-over", "10 MB", caps["fixed"], caps["leaky"], check=False)
    assert p.returncode == 0 and p.stderr == ""


def one_line_error(p, status, *words):
    assert p.returncode == status, (p.returncode, p.stderr)
    first = p.stderr.splitlines()[0]
    assert first.startswith("memtrace: diff: "), p.stderr
    for w in words:
        assert w in first, (w, p.stderr)


def test_bad_inputs(memtrace, pair, tmp_path):
    before, after = pair
    missing = tmp_path / "missing.bin"
    p = run(memtrace, "diff", before, missing, check=False)
    one_line_error(p, 1, "missing.bin")
    assert p.stderr.count("\n") == 1 and p.stdout == ""
    text = tmp_path / "notes.txt"
    text.write_text("not a capture\n" * 10)
    p = run(memtrace, "diff", text, after, check=False)
    one_line_error(p, 1, "notes.txt", "not a memtrace capture")
    assert p.stderr.count("\n") == 1 and p.stdout == ""
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    one_line_error(run(memtrace, "diff", before, empty, check=False), 1, "empty")
    cut = tmp_path / "cut.bin"
    cut.write_bytes(after.read_bytes()[:-7])
    # a capture cut short is compared as far as it goes, with one warning
    p = run(memtrace, "diff", before, cut, check=False)
    assert p.returncode == 0 and p.stdout, p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("memtrace: warning: diff: '%s': " % cut)
    assert "truncated" in p.stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    one_line_error(run(memtrace, "diff", before, fifo, check=False, timeout=20), 1, "fifo",
                   "not a regular file")
    one_line_error(run(memtrace, "diff", tmp_path, after, check=False), 1, str(tmp_path))
    notrailer = tmp_path / "killed.bin"
    c = Capture()  # no trailer: killed while tracking
    c.alloc(0x100000, 1 * MB).flush()
    c.save(notrailer)
    p = run(memtrace, "diff", "--json", notrailer, after, check=False)
    assert p.returncode == 0 and json.loads(p.stdout)["peak"]["before"] == 1 * MB, p.stdout
    assert p.stderr.count("\n") == 1 and "killed.bin" in p.stderr and "truncated" in p.stderr


@pytest.mark.parametrize("args,words", [
    ([], ["two captures", "0 given"]),
    (["A"], ["two captures", "1 given"]),
    (["A", "B", "C"], ["two captures", "3 given"]),
    (["--fail-over", "ten MB", "A", "B"], ["--fail-over", "ten MB"]),
    (["--fail-over", "-1 MB", "A", "B"], ["--fail-over", "-1 MB"]),
    (["--fail-over", "10 XB", "A", "B"], ["--fail-over", "10 XB"]),
    (["--fail-over", "", "A", "B"], ["--fail-over"]),
    (["--fail-over", "1e400", "A", "B"], ["--fail-over", "1e400"]),
    (["-n", "x", "A", "B"], ["-n", "'x'"]),
    (["-n", "-3", "A", "B"], ["-n", "'-3'"]),
    (["--json", "--html", "A", "B"], ["--json", "exclude"]),
    (["--json", "-o", "x.html", "A", "B"], ["--json", "exclude"]),
    (["-f", "A", "B"], ["-f"]),
])
def test_usage_errors(memtrace, args, words):
    p = run(memtrace, "diff", *args, check=False)
    one_line_error(p, 2, *words)
    assert p.stdout == "" and p.stderr.count("\n") == 1


def test_unknown_option_and_help(memtrace):
    p = run(memtrace, "diff", "--frobnicate", "A", "B", check=False)
    assert p.returncode == 2 and p.stdout == "" and p.stderr == \
        "memtrace: diff: unrecognized option '--frobnicate' (see memtrace diff --help)\n"
    p = run(memtrace, "diff", "--help")
    assert p.stdout.startswith("usage: memtrace diff") and "--fail-over SIZE" in p.stdout
    assert "diff" in run(memtrace, "--help").stdout


def test_quiet(memtrace, real_pair):
    """-q/--quiet, as every report takes it: the same report, and no
    progress line on a terminal, where one is shown for each capture read
    without it."""
    from test_progress import run_pty

    caps, _ = real_pair
    plain = run(memtrace, "diff", caps["leaky"], caps["fixed"])
    for q in ("-q", "--quiet"):
        p = run(memtrace, "diff", q, caps["leaky"], caps["fixed"])
        assert p.stdout == plain.stdout and p.stderr == ""
    rc, out, raw = run_pty([memtrace, "diff", caps["leaky"], caps["fixed"]])
    assert rc == 0 and out.decode() == plain.stdout
    for cap in (caps["leaky"], caps["fixed"]):
        assert ("memtrace: reading %s: " % cap).encode() in raw, raw
    rc, out, raw = run_pty([memtrace, "diff", "-q", caps["leaky"], caps["fixed"]])
    assert rc == 0 and out.decode() == plain.stdout and raw == b"", raw
