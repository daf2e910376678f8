"""The pytest plugin across runs and processes: --fail-on-increase and its
baselines (in pytest's cache, without it, in a file of one's choosing),
and pytest-xdist's workers reporting to the controller. Debian's
python3-pytest (and python3-pytest-xdist) in a subprocess."""

import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET

import pytest

from conftest import BUILD, ROOT

PYTHON = "/usr/bin/python3"
PYTHON_DIR = os.path.join(ROOT, "python")
MiB = 1024 * 1024


def _imports(module):
    return subprocess.run([PYTHON, "-c", "import " + module], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


pytestmark = pytest.mark.skipif(not _imports("pytest"),
                                reason="%s has no pytest (apt-get install python3-pytest)"
                                % PYTHON)
needs_xdist = pytest.mark.skipif(
    not _imports("xdist"),
    reason="%s has no pytest-xdist (apt-get install python3-pytest-xdist)" % PYTHON)

# GROW and SHRINK say how many MiB test_grows and test_breaks allocate;
# BREAK=1 makes test_breaks fail its own assertion
SUITE = """\
import os
import pytest

GROW = int(os.environ.get("GROW", "4"))


@pytest.mark.limit_memory("100 MB")
def test_grows():
    data = bytearray(GROW * 1024 * 1024)  # GROW-LINE


@pytest.mark.limit_memory("100 MB")
def test_steady():
    data = bytearray(2 * 1024 * 1024)


@pytest.mark.limit_memory("100 MB")
def test_breaks():
    data = bytearray(int(os.environ.get("SHRINK", "1")) * 1024 * 1024)
    assert os.environ.get("BREAK") != "1"


def test_unmarked():
    data = bytearray(GROW * 1024 * 1024)
"""


def run(tmp_path, *args, env=None, suite=SUITE, name="test_runs.py"):
    """pytest on @suite in @tmp_path (its rootdir): (process, {test:
    outcome}, {test: failure message})."""
    (tmp_path / "pytest.ini").exists() or (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / name).write_text(suite)
    junit = tmp_path / "junit.xml"
    if junit.exists():
        junit.unlink()
    e = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
    e.pop("PYTEST_ADDOPTS", None)
    e["COLUMNS"] = "200"  # the short summary uncut
    e.update(env or {})
    # -q, with the failures' allocations listed all the same
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-q", "-rf",
                        "-o", "verbosity_memtrace=0",
                        "--junitxml", str(junit)] + list(args) + [name], cwd=str(tmp_path),
                       env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=300)
    outcomes, messages = {}, {}
    if junit.exists():
        for case in ET.parse(str(junit)).getroot().iter("testcase"):
            bad = case.find("failure")
            if bad is None:
                bad = case.find("error")
            outcomes[case.get("name")] = "passed" if bad is None else bad.tag
            if bad is not None:
                messages[case.get("name")] = (bad.get("message") or "") + "\n" + (bad.text or "")
    return p, outcomes, messages


def cached(tmp_path):
    """The baselines where pytest's cache keeps them."""
    path = tmp_path / ".pytest_cache" / "v" / "memtrace" / "baselines"
    return json.loads(path.read_text()) if path.exists() else None


def mib(n):
    """A baseline's figure in whole MiB, checking that only a little
    (the bytearray object, the tracker's own) comes on top."""
    assert n % MiB < 65536, n
    return n // MiB


def test_fail_on_increase_across_runs(tmp_path):
    # first run: every passing limit_memory test gets a baseline
    p, outcomes, _ = run(tmp_path, "--memtrace", "--fail-on-increase", env={"GROW": "4"})
    assert set(outcomes.values()) == {"passed"} and len(outcomes) == 4, (outcomes, p.stdout)
    base = cached(tmp_path)
    assert {k: mib(v) for k, v in base.items()} == {
        "test_runs.py::test_grows": 4, "test_runs.py::test_steady": 2,
        "test_runs.py::test_breaks": 1}, base

    # more memory: the test fails, saying both figures; its baseline stays
    p, outcomes, messages = run(tmp_path, "--memtrace", "--fail-on-increase", env={"GROW": "8"})
    assert outcomes == {"test_grows": "failure", "test_steady": "passed",
                        "test_breaks": "passed", "test_unmarked": "passed"}, (outcomes, p.stdout)
    msg = messages["test_grows"]
    assert re.search(r"Test's body used 8\.00 MiB at its peak, 4\.00 MiB more than the 4\.00 MiB "
                     r"of its last passing run", msg), msg
    assert "test_grows at test_runs.py:9" in msg, msg
    assert "MEMORY PROBLEMS test_runs.py::test_grows - fail-on-increase: 8.00 MiB > 4.00 MiB (+4.00 MiB)" \
        in p.stdout, p.stdout
    assert cached(tmp_path) == base

    # without the option nothing is compared, and nothing moves
    p, outcomes, _ = run(tmp_path, "--memtrace", env={"GROW": "8"})
    assert outcomes["test_grows"] == "passed", p.stdout
    assert cached(tmp_path) == base

    # less memory passes and lowers the baseline
    p, outcomes, _ = run(tmp_path, "--memtrace", "--fail-on-increase", env={"GROW": "3"})
    assert set(outcomes.values()) == {"passed"}, (outcomes, p.stdout)
    after = cached(tmp_path)
    assert mib(after["test_runs.py::test_grows"]) == 3, after

    # a run with a failure: the failing test keeps its baseline (even
    # though it used less), the passing ones move theirs
    p, outcomes, _ = run(tmp_path, "--memtrace", "--fail-on-increase",
                         env={"GROW": "2", "SHRINK": "0", "BREAK": "1"})
    assert outcomes["test_breaks"] == "failure" and outcomes["test_grows"] == "passed", p.stdout
    last = cached(tmp_path)
    assert mib(last["test_runs.py::test_grows"]) == 2, last
    assert last["test_runs.py::test_breaks"] == base["test_runs.py::test_breaks"], last
    assert last["test_runs.py::test_steady"] == base["test_runs.py::test_steady"], last


def test_fail_on_increase_without_the_cache_plugin(tmp_path):
    """With -p no:cacheprovider the baselines are in the file the cache
    would use, so runs with and without the plugin share them; the
    plugin's directory is made, with a .gitignore, if it was not there."""
    p, outcomes, _ = run(tmp_path, "-p", "no:cacheprovider", "--memtrace", "--fail-on-increase",
                         env={"GROW": "4"})
    assert set(outcomes.values()) == {"passed"}, (outcomes, p.stdout, p.stderr)
    base = cached(tmp_path)
    assert mib(base["test_runs.py::test_grows"]) == 4, base
    assert (tmp_path / ".pytest_cache" / ".gitignore").read_text().endswith("*\n")

    # the cache plugin reads what the file holds ...
    p, outcomes, _ = run(tmp_path, "--memtrace", "--fail-on-increase", env={"GROW": "5"})
    assert outcomes["test_grows"] == "failure", p.stdout
    # ... and the other way round, with the ini keys
    (tmp_path / "pytest.ini").write_text("[pytest]\nmemtrace = true\n"
                                         "memtrace_fail_on_increase = true\n")
    p, outcomes, _ = run(tmp_path, "-p", "no:cacheprovider", env={"GROW": "3"})
    assert set(outcomes.values()) == {"passed"}, (outcomes, p.stdout)
    p, outcomes, messages = run(tmp_path, "-p", "no:cacheprovider", env={"GROW": "6"})
    assert outcomes["test_grows"] == "failure", p.stdout
    assert "6.00 MiB at its peak, 3.00 MiB more than the 3.00 MiB" in messages["test_grows"]


def test_baselines_file_option(tmp_path):
    where = tmp_path / "kept" / "memory.json"
    p, outcomes, _ = run(tmp_path, "--memtrace", "--fail-on-increase", "--memtrace-baselines",
                         str(where), env={"GROW": "4"})
    assert set(outcomes.values()) == {"passed"}, (outcomes, p.stdout, p.stderr)
    assert cached(tmp_path) is None  # not in the cache
    kept = json.loads(where.read_text())
    assert mib(kept["test_runs.py::test_grows"]) == 4, kept
    p, outcomes, _ = run(tmp_path, "--memtrace", "--fail-on-increase", "--memtrace-baselines",
                         str(where), env={"GROW": "5"})
    assert outcomes["test_grows"] == "failure", p.stdout
    # a slightly bigger figure reads the same in MiB: the bytes say it
    kept["test_runs.py::test_grows"] -= 10
    where.write_text(json.dumps(kept))
    p, outcomes, messages = run(tmp_path, "--memtrace", "--fail-on-increase",
                                "--memtrace-baselines", str(where), env={"GROW": "4"})
    assert outcomes["test_grows"] == "failure", p.stdout
    assert re.search(r"used 4\.00 MiB \(\d+ B\) at its peak, 10 B more than the 4\.00 MiB "
                     r"\(\d+ B\) of its last passing run", messages["test_grows"]), messages


@pytest.mark.parametrize("content, error", [
    ("{not json", "the baselines in {file} are not JSON"),
    ('{"test_runs.py::test_grows": "big"}', "the baselines in {file} are not {{test id: bytes}}"),
    ('[1, 2]', "the baselines in {file} are not {{test id: bytes}}"),
])
def test_bad_baselines_are_a_usage_error(tmp_path, content, error):
    bad = tmp_path / "b.json"
    bad.write_text(content)
    p, outcomes, _ = run(tmp_path, "--memtrace", "--fail-on-increase", "--memtrace-baselines",
                         str(bad))
    assert p.returncode == 4 and not outcomes, (p.stdout, p.stderr)
    lines = [line for line in p.stderr.splitlines() if "memtrace:" in line]
    assert len(lines) == 1 and error.format(file=bad) in lines[0], p.stderr
    # a path that cannot be a file
    p, _, _ = run(tmp_path, "--memtrace", "--fail-on-increase", "--memtrace-baselines",
                  str(bad / "x.json"))
    assert p.returncode == 4, p.stderr
    assert "memtrace: cannot read the baselines in %s: Not a directory" % (bad / "x.json") \
        in p.stderr, p.stderr


def test_baselines_that_cannot_be_saved(tmp_path):
    """The baselines' directory is missing at the start (nothing to read
    yet) and a test makes a file of that name: saving them says so in one
    line, and the run fails even though its tests passed."""
    where = tmp_path / "kept" / "b.json"
    suite = ("import pytest\n\n\n@pytest.mark.limit_memory('1 MB')\ndef test_blocks():\n"
             "    open(%r, 'w').close()\n" % str(where.parent))
    p, outcomes, _ = run(tmp_path, "--memtrace", "--fail-on-increase", "--memtrace-baselines",
                         str(where), suite=suite, name="test_block.py")
    assert outcomes == {"test_blocks": "passed"}, (outcomes, p.stdout, p.stderr)
    assert p.returncode == 4, (p.returncode, p.stdout, p.stderr)
    lines = [line for line in p.stderr.splitlines() if "memtrace:" in line]
    assert len(lines) == 1 and lines[0].startswith(
        "memtrace: cannot save the baselines in %s: " % where), p.stderr


# tests with known peaks (bytearrays of whole MiB), one over its limit
XDIST_SUITE = """\
import pytest


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_sizes(n):
    data = bytearray(n * 1024 * 1024)


@pytest.mark.limit_memory("1 MB")
def test_over():
    data = bytearray(7 * 1024 * 1024)


@pytest.mark.limit_memory("100 MB")
def test_under():
    data = bytearray(8 * 1024 * 1024)
"""


def report_rows(out):
    """The end-of-run report: each test's lines, by test."""
    report = out.split("memtrace: tests with the highest peak memory", 1)[1]
    report = report.split("\n", 1)[1].split("\n=", 1)[0]  # to the next ==== line
    rows, current = {}, None
    for line in report.strip("\n").splitlines():
        if not line.startswith(" "):
            current = line
            rows[current] = []
        else:
            rows[current].append(line)
    return rows


@needs_xdist
def test_xdist_workers_report_to_the_controller(tmp_path):
    args = ["--memtrace", "--most-allocations", "0"]
    p, alone, _ = run(tmp_path, *args, suite=XDIST_SUITE, name="test_x.py")
    assert alone["test_over"] == "failure", p.stdout
    p2, spread, messages = run(tmp_path, "-n", "2", *args, suite=XDIST_SUITE, name="test_x.py")
    assert "[gw" in p2.stdout, p2.stdout  # the failure ran in a worker
    assert spread == alone, (spread, p2.stdout)
    rows = report_rows(p.stdout)
    assert len(rows) == 8, p.stdout
    assert report_rows(p2.stdout) == rows, (p.stdout, p2.stdout)
    # limit failures fail in the workers, with the reason in the summary
    assert "limited to 1.00 MiB but its body used 7.00 MiB" in messages["test_over"], messages
    assert "MEMORY PROBLEMS test_x.py::test_over - limit_memory: 7.00 MiB > 1.00 MiB" in p2.stdout, \
        p2.stdout


@needs_xdist
def test_xdist_workers_name_captures_with_the_runs_prefix(tmp_path):
    """The default prefix of kept captures is one per run, workers'
    included, and the report ends by saying where the captures are and how
    they are named, as pytest-memray's does."""
    kept = tmp_path / "kept"
    p, outcomes, _ = run(tmp_path, "-n", "2", "--memtrace", "--memtrace-bin-path", str(kept),
                         "--most-allocations", "1", suite=XDIST_SUITE, name="test_x.py")
    assert len(outcomes) == 8, p.stdout
    names = sorted(os.listdir(str(kept)))
    prefixes = {name.split("-test_x.py-", 1)[0] for name in names}
    assert len(names) == 8 and len(prefixes) == 1, names
    assert "\n8 captures kept in %s, named %s-<test id>.bin\n" % (kept, prefixes.pop()) \
        in p.stdout, p.stdout


@needs_xdist
def test_xdist_saves_the_workers_baselines(tmp_path):
    p, outcomes, _ = run(tmp_path, "-n", "2", "--memtrace", "--fail-on-increase",
                         env={"GROW": "4"})
    assert set(outcomes.values()) == {"passed"}, (outcomes, p.stdout, p.stderr)
    base = cached(tmp_path)
    assert {k: mib(v) for k, v in base.items()} == {
        "test_runs.py::test_grows": 4, "test_runs.py::test_steady": 2,
        "test_runs.py::test_breaks": 1}, base
    p, outcomes, _ = run(tmp_path, "-n", "2", "--memtrace", "--fail-on-increase",
                         env={"GROW": "6", "SHRINK": "0"})
    assert outcomes["test_grows"] == "failure", p.stdout
    assert "MEMORY PROBLEMS test_runs.py::test_grows - fail-on-increase: 6.00 MiB > 4.00 MiB" in p.stdout
    after = cached(tmp_path)
    assert after["test_runs.py::test_grows"] == base["test_runs.py::test_grows"]
    assert after["test_runs.py::test_breaks"] < MiB, after  # passed with less: moved


OUTCOMES_SUITE = """\
import pytest


def test_passes():
    data = bytearray(1 * 1024 * 1024)


@pytest.mark.limit_memory("1 MB")
def test_over_its_limit():
    data = bytearray(2 * 1024 * 1024)


def test_raises():
    data = bytearray(3 * 1024 * 1024)
    raise ValueError("no")


def test_skips_itself():
    data = bytearray(4 * 1024 * 1024)
    pytest.skip("not here")


@pytest.mark.xfail(reason="known")
def test_xfails():
    data = bytearray(5 * 1024 * 1024)
    raise ValueError("no")


def test_allocates_nothing():
    pass
"""


def test_report_leaves_out_bodies_that_raised_or_allocated_nothing(tmp_path):
    """As pytest-memray's, the report lists the tests whose body returned
    (a test over its limit is one), not those that failed, skipped
    themselves or xfailed in their body, whatever their peak, nor those
    with nothing live at their peak."""
    p, outcomes, _ = run(tmp_path, "--memtrace", "--most-allocations", "0",
                         suite=OUTCOMES_SUITE, name="test_o.py")
    assert outcomes["test_over_its_limit"] == "failure", p.stdout
    assert outcomes["test_raises"] == "failure", p.stdout
    assert list(report_rows(p.stdout)) == ["test_o.py::test_over_its_limit",
                                           "test_o.py::test_passes"], p.stdout


def test_allocations_by_stack_counts_as_the_events_do(tmp_path):
    """The plugin's count of another thread's allocations (the reader's
    pass that makes no record per event) agrees with the events, over a
    capture of several chunks and two threads, whichever thread is left
    out."""
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import collections, threading, memtrace\n"
        "with memtrace.Tracker('cap.bin', trace_python_allocators=True):\n"
        "    keep = [bytearray(100) for _ in range(100_000)]\n"
        "    t = threading.Thread(target=lambda: [bytearray(50) for _ in range(3_000)])\n"
        "    t.start(); t.join(); other = t.native_id\n"
        "r = memtrace.FileReader('cap.bin')\n"
        "events = collections.Counter((e.tid, e.stack_id) for e in r.get_allocation_records()\n"
        "                             if not e.allocator.is_deallocator)\n"
        "for skip in (threading.get_native_id(), other, 0):\n"
        "    want = {k: n for k, n in events.items() if k[0] != skip}\n"
        "    got = dict(r._allocations_by_stack(skip))\n"
        "    print(got == want, sum(got.values()), sum(want.values()))\n"
        "print(sum(events.values()) == r.metadata.total_allocations - r.metadata.total_frees)\n")
    p = subprocess.run([PYTHON, str(prog)], cwd=str(tmp_path), universal_newlines=True,
                       env=dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    lines = p.stdout.split("\n")
    assert p.returncode == 0 and len(lines) == 5, (p.stdout, p.stderr)
    for line in lines[:3]:
        same, got, want = line.split()
        assert same == "True" and int(got) > 0, p.stdout
    skip_main, skip_other, skip_none = (int(line.split()[1]) for line in lines[:3])
    assert skip_main >= 3000 and skip_other >= 100_000 and skip_none == skip_main + skip_other
    assert lines[3] == "True", p.stdout


def test_size_histogram():
    """The report's histogram: equal bins on a log scale, a bar each as
    high as its count against the fullest bin's, the largest size in the
    last bin; fewer bins for fewer sizes."""
    import sys
    sys.path.insert(0, PYTHON_DIR)
    try:
        from memtrace._pytest_limits import size_histogram
    finally:
        sys.path.remove(PYTHON_DIR)
    assert size_histogram([]) == ""
    assert size_histogram([100]) == "\u2588"
    assert size_histogram([16, 16, 1 << 20]) == "\u2588 \u2584"
    assert size_histogram([1, 1000]) == "\u2588\u2588"
    assert size_histogram([0, 1, 1 << 30]) == "\u2588 \u2584"
    sizes = [10] * 8 + [1000] * 4 + [10 ** 5] * 2 + [10 ** 7]
    assert size_histogram(sizes) == "\u2588\u2584 \u2582\u2581"
    assert size_histogram(sizes, ascii=True) == "@= :."


HISTOGRAM_SUITE = """\
import pytest


def nest(depth):
    return bytearray(2000) if depth == 0 else nest(depth - 1)


def test_sizes():
    small = [nest(depth) for depth in range(8)]  # a stack each
    big = bytearray(8 * 1024 * 1024)
"""


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_report_draws_the_sizes_at_the_peak(tmp_path, encoding):
    """As pytest-memray's report, a histogram of the sizes of the stacks
    live at the peak, with their range; in ASCII where the terminal's
    encoding has no block elements."""
    p, outcomes, _ = run(tmp_path, "--memtrace", suite=HISTOGRAM_SUITE, name="test_h.py",
                         env={"PYTHONIOENCODING": encoding})
    assert outcomes["test_sizes"] == "passed", p.stdout + p.stderr
    lines = report_rows(p.stdout)["test_h.py::test_sizes"]
    hist = [line for line in lines if "(log scale)" in line]
    assert len(hist) == 1, p.stdout
    m = re.search(r"sizes of the (\d+) stacks live at the peak, (.+) to (.+) \(log scale\): "
                  r"\|(.*)\|$", hist[0])
    assert m, hist[0]
    # the 8 small arrays, the big one, and whatever else pytest keeps live
    assert int(m.group(1)) >= 9 and m.group(3) == "8.00 MiB", hist[0]
    bars = m.group(4)
    assert len(bars) == 5, hist[0]
    if encoding == "ascii":
        assert set(bars) <= set(" .:-=+*#@") and bars[-1] != " ", hist[0]
    else:
        assert set(bars) <= set(" \u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"), hist[0]
        assert bars[-1] != " " and "\u2588" in bars, hist[0]


STATUS_SUITE = """\
import pytest


@pytest.mark.limit_memory("1 MB")
def test_over():
    data = bytearray(2 * 1024 * 1024)


def test_wrong():
    assert False


def test_right():
    pass
"""


@pytest.mark.parametrize("workers", [None, "2"])
def test_limit_failures_read_memory_problems(tmp_path, workers):
    """As with pytest-memray, a test over its limit shows "M" in the
    progress line and MEMORY PROBLEMS with -v, from xdist's workers too;
    other failures stay "F" and FAILED; all count as failed."""
    if workers and not _imports("xdist"):
        pytest.skip("%s has no pytest-xdist (apt-get install python3-pytest-xdist)" % PYTHON)
    more = ["-n", workers] if workers else []
    p, outcomes, _ = run(tmp_path, "-p", "no:randomly", *more, suite=STATUS_SUITE,
                         name="test_s.py")
    assert outcomes == {"test_over": "failure", "test_wrong": "failure",
                        "test_right": "passed"}, p.stdout
    progress = [line for line in p.stdout.splitlines() if re.match(r"^[.FM]+ +\[", line)]
    assert len(progress) == 1 and sorted(progress[0].split()[0]) == [".", "F", "M"], p.stdout
    assert "2 failed, 1 passed" in p.stdout, p.stdout
    assert re.search(r"^MEMORY PROBLEMS test_s.py::test_over - limit_memory: ", p.stdout,
                     re.M), p.stdout
    assert re.search(r"^FAILED test_s.py::test_wrong - ", p.stdout, re.M), p.stdout
    p, _, _ = run(tmp_path, "-vv", *more, suite=STATUS_SUITE, name="test_s.py")  # -q -vv: -v
    if workers:
        over = r"^\[gw\d\] \[ *\d+%\] MEMORY PROBLEMS test_s.py::test_over $"
        wrong = r"^\[gw\d\] \[ *\d+%\] FAILED test_s.py::test_wrong $"
    else:
        over = r"^test_s.py::test_over MEMORY PROBLEMS +\["
        wrong = r"^test_s.py::test_wrong FAILED +\["
    assert re.search(over, p.stdout, re.M) and re.search(wrong, p.stdout, re.M), p.stdout
