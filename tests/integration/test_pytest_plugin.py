"""The pytest plugin (memtrace.pytest_plugin) on a real test suite, run by
Debian's python3-pytest in a subprocess."""

import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import xml.etree.ElementTree as ET

import pytest

from conftest import BUILD, ROOT, report_json, skip_unless_other_users_can

PYTHON = "/usr/bin/python3"
PYTHON_DIR = os.path.join(ROOT, "python")

pytestmark = pytest.mark.skipif(
    subprocess.run([PYTHON, "-c", "import pytest"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL).returncode != 0,
    reason="%s has no pytest (apt-get install python3-pytest)" % PYTHON)

SUITE = """\
import pytest

KEEP = []


@pytest.mark.limit_memory("1 MB")
def test_big_under_small_limit():
    data = bytearray(10 * 1024 * 1024)  # ALLOC-LINE
    assert len(data) > 0


@pytest.mark.limit_memory("100 MB")
def test_big_under_large_limit():
    data = bytearray(10 * 1024 * 1024)
    assert len(data) > 0


@pytest.mark.limit_leaks("1 KB")
def test_appends_to_module_list():
    for _ in range(100):
        KEEP.append(bytearray(1000))  # LEAK-LINE


@pytest.mark.limit_leaks("1 KB")
def test_frees_everything():
    data = [bytearray(1000) for _ in range(100)]
    data.append({"k": list(range(100))})
    del data


@pytest.mark.limit_leaks("1 KB", filter_fn=lambda stack: all(
    f.function != "keep_forever" for f in stack.frames))
def test_filtered_leak():
    keep_forever()


def keep_forever():
    KEEP.append(bytearray(50_000))


def test_unmarked():
    data = [0] * 1000  # a few KiB, to be in the report
    assert sum(range(10)) == 45
"""


def line_of(marker):
    for i, line in enumerate(SUITE.splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(marker)


def run_pytest(tmp_path, *args):
    suite = tmp_path / "test_suite.py"
    suite.write_text(SUITE)
    junit = tmp_path / "junit.xml"
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR
    env["MEMTRACE_BUILD_DIR"] = BUILD
    env.pop("PYTEST_ADDOPTS", None)
    # -q, with the failures' allocations listed all the same
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "-q", "-o", "verbosity_memtrace=0",
                        "--junitxml", str(junit)] + list(args)
                       + [str(suite)], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    if not junit.exists():
        raise AssertionError("pytest did not run:\n%s\n%s" % (p.stdout, p.stderr))
    outcomes, messages = {}, {}
    for case in ET.parse(str(junit)).getroot().iter("testcase"):
        name = case.get("name")
        failure = case.find("failure")
        error = case.find("error")
        if failure is not None:
            outcomes[name] = "failed"
            messages[name] = (failure.get("message") or "") + (failure.text or "")
        elif error is not None:
            outcomes[name] = "error"
            messages[name] = error.text or ""
        else:
            outcomes[name] = "passed"
    return p, outcomes, messages


def run_pytest_plain(tmp_path, *args):
    """run_pytest() for a run that may stop before any test runs."""
    suite = tmp_path / "test_suite.py"
    suite.write_text(SUITE)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
    env.pop("PYTEST_ADDOPTS", None)
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "-q"] + list(args) + [str(suite)],
                       cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    return p


def test_limits_fail_and_pass_with_memtrace(tmp_path):
    p, outcomes, messages = run_pytest(tmp_path, "--memtrace")
    assert outcomes == {
        "test_big_under_small_limit": "failed",
        "test_big_under_large_limit": "passed",
        "test_appends_to_module_list": "failed",
        "test_frees_everything": "passed",
        "test_filtered_leak": "passed",
        "test_unmarked": "passed",
    }, (outcomes, p.stdout)

    big = messages["test_big_under_small_limit"]
    assert "limited to 1.00 MiB" in big and "10.00 MiB" in big, big
    assert "test_big_under_small_limit at test_suite.py:%d" % line_of("ALLOC-LINE") in big, big

    leak = messages["test_appends_to_module_list"]
    assert "leak 1.00 KiB per call stack" in leak, leak
    assert "test_appends_to_module_list at test_suite.py:%d" % line_of("LEAK-LINE") in leak, leak
    assert "KiB in " in leak and " allocations from:" in leak, leak

    # the end-of-run report, biggest peak first
    assert "memtrace: tests with the highest peak memory" in p.stdout
    report = p.stdout.split("memtrace: tests with the highest peak memory", 1)[1]
    assert report.index("test_big_under") < report.index("test_unmarked") \
        if "test_unmarked" in report else True


def test_markers_checked_without_memtrace(tmp_path):
    """Without --memtrace the tests with a marker are still tracked and
    checked, as pytest-memray does; the others are not tracked at all, and
    there is no report at the end (pytest-memray prints its own only with
    --memray or its ini key)."""
    keep = tmp_path / "captures"
    p, outcomes, _ = run_pytest(tmp_path, "--memtrace-bin-path", str(keep),
                                "--most-allocations", "0")
    assert outcomes["test_big_under_small_limit"] == "failed", p.stdout
    assert outcomes["test_appends_to_module_list"] == "failed", p.stdout
    assert outcomes["test_big_under_large_limit"] == "passed", p.stdout
    assert outcomes["test_unmarked"] == "passed", p.stdout
    kept = sorted(os.listdir(str(keep)))
    assert len(kept) == 5 and not any("test_unmarked" in k for k in kept), kept
    assert "memtrace: tests with the highest peak memory" not in p.stdout, p.stdout
    # the ini key turns the report on, as --memtrace does
    (tmp_path / "pytest.ini").write_text("[pytest]\nmemtrace = true\n")
    p, outcomes, _ = run_pytest(tmp_path, "--most-allocations", "0")
    assert outcomes["test_big_under_small_limit"] == "failed", p.stdout
    report = p.stdout.split("memtrace: tests with the highest peak memory", 1)[1]
    assert "test_big_under_large_limit" in report and "test_unmarked" in report, report


def test_markers_of_class_and_function(tmp_path):
    """Of several markers of a kind (the class's and the function's) the
    lowest limit fails the test, as pytest-memray checks them all."""
    suite = tmp_path / "test_bounds.py"
    suite.write_text(textwrap.dedent("""\
        import pytest


        @pytest.mark.limit_memory("1 MB")
        class TestBoth:
            @pytest.mark.limit_memory("100 MB")
            def test_over_the_class_limit(self):
                data = bytearray(3 * 1024 * 1024)
                assert data is not None


        KEEP = []


        @pytest.mark.limit_leaks("1 MB")
        class TestLeaks:
            @pytest.mark.limit_leaks("16 KB")
            def test_leaks_over_the_function_limit(self):
                KEEP.append(bytearray(64 * 1024))

            def test_leaks_under_the_class_limit(self):
                KEEP.append(bytearray(64 * 1024))
        """))
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
    env.pop("PYTEST_ADDOPTS", None)
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "-rA", str(suite)], cwd=str(tmp_path), env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=300)
    out = p.stdout
    assert "MEMORY PROBLEMS test_bounds.py::TestBoth::test_over_the_class_limit" in out, out
    assert "MEMORY PROBLEMS test_bounds.py::TestLeaks::test_leaks_over_the_function_limit" in out, out
    assert "PASSED test_bounds.py::TestLeaks::test_leaks_under_the_class_limit" in out, out


SEVERAL = """\
import threading
import pytest

from memtrace.pytest_plugin import LeaksFilterFunction, Stack, StackFrame

HELD = []
KEEP = []


def in_a_thread(n):
    t = threading.Thread(target=lambda: HELD.append(bytearray(n)))
    t.start()
    t.join()


def keep_forever():
    KEEP.append(bytearray(50_000))


def not_keep_forever(stack: Stack) -> bool:  # pytest-memray's names for the types
    assert isinstance(stack, Stack) and all(isinstance(f, StackFrame) for f in stack.frames)
    return all(f.function != "keep_forever" for f in stack.frames)


_typed: LeaksFilterFunction = not_keep_forever


@pytest.mark.limit_memory("1 MB")
class TestThreads:
    @pytest.mark.limit_memory("512 KB", current_thread_only=True)
    def test_other_thread_over_the_class_limit(self):
        in_a_thread(20 * 1024 * 1024)
        HELD.clear()

    @pytest.mark.limit_memory("2 MB")
    def test_over_both(self):
        data = bytearray(10 * 1024 * 1024)


@pytest.mark.limit_leaks("16 KB")
class TestFilters:
    @pytest.mark.limit_leaks("1 KB", filter_fn=not_keep_forever)
    def test_filtered_by_the_method_only(self):
        keep_forever()


@pytest.mark.limit_leaks("1 MB")
class TestFiltersPass:
    @pytest.mark.limit_leaks("1 KB", filter_fn=not_keep_forever)
    def test_under_both(self):
        keep_forever()
"""


def junit_results(junit):
    """Each test case of a JUnit XML report: name -> (passed, failure or
    error; its message attribute; its text)."""
    results = {}
    for case in ET.parse(str(junit)).getroot().iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        results[case.get("name")] = ("passed", "", "") if bad is None else (
            bad.tag, bad.get("message") or "", bad.text or "")
    return results


def test_every_marker_checked_with_its_own_options(tmp_path):
    """Each of a test's markers of a kind is checked on its own, with its
    own current_thread_only and filter_fn, as pytest-memray checks every
    marker: the test fails if any does, and the message names those that
    failed."""
    suite = tmp_path / "test_several.py"
    suite.write_text(SEVERAL)
    junit = tmp_path / "j.xml"
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD, COLUMNS="200")
    env.pop("PYTEST_ADDOPTS", None)
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "-q", "-rf", "--junitxml", str(junit), str(suite)],
                       cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    outcomes, messages = {}, {}
    for name, (outcome, _, text) in junit_results(junit).items():
        outcomes[name], messages[name] = outcome, text
    assert outcomes == {
        "test_other_thread_over_the_class_limit": "failure",
        "test_over_both": "failure",
        "test_filtered_by_the_method_only": "failure",
        "test_under_both": "passed",
    }, p.stdout

    # the class's marker failed, the method's (its own thread) did not
    thread = messages["test_other_thread_over_the_class_limit"]
    assert "limit_memory('1 MB') of test_several.py::TestThreads" in thread, thread
    assert "limited to 1.00 MiB but its body used 20." in thread, thread
    assert "512" not in thread, thread
    assert re.search(r"MEMORY PROBLEMS test_several.py::TestThreads::test_other_thread_over_the_class_limit"
                     r" - limit_memory of TestThreads: 20\.\d\d MiB > 1\.00 MiB\n", p.stdout), \
        p.stdout

    both = messages["test_over_both"]
    assert "limited to 1.00 MiB" in both and "limited to 2.00 MiB" in both, both
    assert "limit_memory('2 MB') of test_several.py::TestThreads::test_over_both" in both, both
    assert ("limit_memory of test_over_both: 10.00 MiB > 2.00 MiB; "
            "limit_memory of TestThreads: 10.00 MiB > 1.00 MiB" in p.stdout), p.stdout

    leak = messages["test_filtered_by_the_method_only"]
    assert "limit_leaks('16 KB') of test_several.py::TestFilters" in leak, leak
    assert "leak 16.00 KiB per call stack" in leak and "keep_forever at" in leak, leak
    assert "1.00 KiB" not in leak, leak


def test_bin_path_keeps_readable_captures(memtrace, tmp_path):
    keep = tmp_path / "captures"
    p, outcomes, _ = run_pytest(tmp_path, "--memtrace", "--memtrace-bin-path", str(keep),
                                "--most-allocations", "1")
    assert outcomes["test_big_under_large_limit"] == "passed", p.stdout
    caps = sorted(os.listdir(str(keep)))
    assert len(caps) == 6, caps
    cap = [c for c in caps if "test_big_under_large_limit" in c]
    assert len(cap) == 1, caps
    stats = report_json(memtrace, "stats", keep / cap[0])
    assert 10 * 1024 * 1024 <= stats["totals"]["peak_heap"] <= 10 * 1024 * 1024 + 65536
    # --most-allocations 1: one test in the report
    report = p.stdout.split("memtrace: tests with the highest peak memory", 1)[1]
    assert sum(1 for line in report.splitlines() if line.startswith("test_suite.py::")) == 1, report


def usage_error(p):
    """The one line of a pytest run that stopped at the start on a usage
    error, before any test ran."""
    assert p.returncode == 4, (p.stdout, p.stderr)
    assert "Traceback" not in p.stdout + p.stderr, p.stderr
    assert " passed" not in p.stdout and " failed" not in p.stdout, p.stdout
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: memtrace: "), p.stderr
    return lines[0][len("ERROR: "):]


def test_unusable_bin_path_is_a_usage_error(tmp_path):
    """A --memtrace-bin-path that cannot hold the captures stops pytest at
    the start with one line naming it and why, rather than failing every
    test (those without a marker too) with a traceback."""
    (tmp_path / "a_file").write_text("")
    for path in ("/dev/null", str(tmp_path / "a_file"), str(tmp_path / "a_file" / "sub")):
        for option in ("--memtrace-bin-path", "--memray-bin-path"):
            p = run_pytest_plain(tmp_path, "--memtrace", option, path)
            assert usage_error(p) == ("memtrace: cannot keep the captures in %s "
                                      "(--memtrace-bin-path): Not a directory" % path), p.stderr
    # a directory that is not there yet is made, with its parents
    p, outcomes, _ = run_pytest(tmp_path, "--memtrace-bin-path", str(tmp_path / "new" / "dir"))
    assert outcomes["test_big_under_large_limit"] == "passed", p.stdout
    assert len(os.listdir(str(tmp_path / "new" / "dir"))) == 5


def test_bin_prefix_with_a_separator_is_a_usage_error(tmp_path):
    """The prefix starts the captures' file names: one with a "/" would put
    them outside the bin path (or in a directory that is not there)."""
    keep = tmp_path / "kept"
    for prefix in ("../escaped", "sub/name", "/abs"):
        for option in ("--memtrace-bin-prefix", "--memray-bin-prefix"):
            p = run_pytest_plain(tmp_path, "--memtrace", "--memtrace-bin-path", str(keep), option,
                                 prefix)
            assert usage_error(p) == ("memtrace: --memtrace-bin-prefix %r cannot contain '/': "
                                      "it starts file names in the bin path" % prefix), p.stderr
    assert os.listdir(str(tmp_path)) == ["test_suite.py"]  # nothing made, nothing escaped
    # dots alone stay in the name (given with "=": pytest takes a lone ".."
    # for a path, to find its rootdir by)
    p, outcomes, _ = run_pytest(tmp_path, "--memtrace-bin-path", str(keep),
                                "--memtrace-bin-prefix=..")
    assert outcomes["test_big_under_large_limit"] == "passed", p.stdout
    assert "..-test_suite.py-test_big_under_large_limit.bin" in os.listdir(str(keep))


def test_unwritable_bin_path_is_a_usage_error(tmp_path):
    skip_unless_other_users_can("run pytest as another user", PYTHON_DIR, BUILD)
    shared = tempfile.mkdtemp(prefix="memtrace-plugin-test-")
    try:
        os.chmod(shared, 0o755)
        with open(os.path.join(shared, "test_suite.py"), "w") as f:
            f.write(SUITE)
        os.mkdir(os.path.join(shared, "ro"), 0o555)
        os.chmod(os.path.join(shared, "ro"), 0o555)
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
        env.pop("PYTEST_ADDOPTS", None)
        for path, reason in ((os.path.join(shared, "ro"), "Permission denied"),
                             (os.path.join(shared, "ro", "sub"), "Permission denied")):
            p = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                                "no:cacheprovider", "-q", "--memtrace", "--memtrace-bin-path",
                                path, "test_suite.py"], cwd=shared, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=120)
            assert usage_error(p) == ("memtrace: cannot keep the captures in %s "
                                      "(--memtrace-bin-path): %s" % (path, reason)), p.stderr
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_under_memtrace_run_is_one_error(memtrace, tmp_path):
    """Under `memtrace run` no Tracker can start: --memtrace stops pytest
    at the start with one line; without it, each marked test fails with
    one line (the others run, untracked), and the run's capture is kept."""
    suite = tmp_path / "test_suite.py"
    suite.write_text(SUITE)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
    env.pop("PYTEST_ADDOPTS", None)

    def under_run(*args):
        return subprocess.run([memtrace, "run", "-q", "-f", "-o", str(tmp_path / "outer.bin"),
                               "--python", PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin",
                               "-p", "no:cacheprovider", "-q"] + list(args) + [str(suite)],
                              cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=300)

    p = under_run("--memtrace")
    assert usage_error(p) == ("memtrace: --memtrace cannot track each test: this process is "
                              "already being tracked (by `memtrace run`, `memtrace attach` or a "
                              "Tracker)")
    junit = tmp_path / "j.xml"
    p = under_run("--junitxml", str(junit))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stdout and "RuntimeError" not in p.stdout, p.stdout
    results = junit_results(junit)
    for name, (outcome, message, text) in results.items():
        if name != "test_unmarked":  # the marked tests
            assert outcome == "failure", (name, p.stdout)
            assert text.strip() == (
                "memtrace: cannot track test_suite.py::%s: No more than one Tracker instance "
                "can be active at the same time: this process is already being tracked (by "
                "`memtrace run`, `memtrace attach` or another Tracker)" % name), (name, text)
        else:
            assert outcome == "passed", (name, p.stdout)
    assert report_json(memtrace, "stats", tmp_path / "outer.bin")["totals"]["peak_heap"] > 0


def test_capture_that_cannot_be_made_fails_its_test_in_one_line(tmp_path):
    """A test whose capture cannot be made (here a directory is in its
    place) fails with one line naming it; the other tests go on."""
    keep = tmp_path / "kept"
    (keep / "P-test_suite.py-test_unmarked.bin").mkdir(parents=True)
    p, outcomes, messages = run_pytest(tmp_path, "--memtrace", "--memtrace-bin-path", str(keep),
                                       "--memtrace-bin-prefix", "P")
    assert outcomes["test_unmarked"] == "failed", p.stdout
    line = ("memtrace: cannot track test_suite.py::test_unmarked: %s: capture path is a "
            "directory" % (keep / "P-test_suite.py-test_unmarked.bin"))
    assert line in messages["test_unmarked"], messages
    assert "\n" not in messages["test_unmarked"].strip(), messages
    assert "Traceback" not in p.stdout and "IsADirectoryError" not in p.stdout, p.stdout
    assert outcomes["test_big_under_large_limit"] == "passed", p.stdout
    assert outcomes["test_big_under_small_limit"] == "failed", p.stdout


def test_payload_that_cannot_be_found_said_once_with_a_reason(tmp_path, monkeypatch):
    """Tracking that cannot start: each test fails with one line that says
    "memtrace:" once, and the short summary gives it as the reason."""
    monkeypatch.setenv("MEMTRACE_PAYLOAD", str(tmp_path / "none" / "libmemtrace-payload.so"))
    monkeypatch.setenv("COLUMNS", "400")
    p = run_pytest_plain(tmp_path, "--memtrace")
    why = ("memtrace: cannot track test_suite.py::test_unmarked: cannot find "
           "libmemtrace-payload.so (looked at: %s)" % (tmp_path / "none" / "libmemtrace-payload.so"))
    lines = p.stdout.splitlines()
    assert any(l.startswith(why) for l in lines), p.stdout
    assert any(l.startswith("FAILED test_suite.py::test_unmarked - " + why) for l in lines), \
        p.stdout
    assert "memtrace: memtrace:" not in p.stdout and "Traceback" not in p.stdout, p.stdout


def test_bad_limit_is_a_usage_error(tmp_path):
    suite = tmp_path / "test_bad.py"
    suite.write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.limit_memory("lots")
        def test_x():
            pass
        """))
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "-q", "--memtrace", str(suite)], cwd=str(tmp_path),
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=120)
    assert p.returncode != 0
    assert "cannot read the size 'lots'" in p.stdout, p.stdout


ROUGH = """\
import pytest

KEEP = []


@pytest.mark.limit_memory("1 MXB")
def test_bad_limit():
    pass


def fails(stack):
    raise RuntimeError("filter broke")


@pytest.mark.limit_leaks("1 KB", filter_fn=fails)
def test_filter_raises():
    KEEP.append(bytearray(50_000))


@pytest.mark.parametrize("size", [1, 5], ids=["a b", "a-b"])
def test_p(size):
    data = bytearray(size * 1024 * 1024)
    assert data


def test_after():
    pass
"""


def test_one_bad_marker_or_filter_fails_only_its_test(memtrace, tmp_path):
    """A limit that does not parse errors its own test before it runs, a
    filter_fn that raises fails its own test, and the session goes on;
    test ids that differ only in characters a file name cannot keep get
    captures of their own."""
    suite = tmp_path / "test_rough.py"
    suite.write_text(ROUGH)
    keep = tmp_path / "captures"
    junit = tmp_path / "junit.xml"
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
    env.pop("PYTEST_ADDOPTS", None)
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "-q", "--memtrace", "--memtrace-bin-path", str(keep),
                        "--junitxml", str(junit), str(suite)], cwd=str(tmp_path), env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       timeout=300)
    assert "INTERNALERROR" not in p.stdout, p.stdout
    cases = {c.get("name"): c for c in ET.parse(str(junit)).getroot().iter("testcase")}
    assert set(cases) == {"test_bad_limit", "test_filter_raises", "test_p[a b]", "test_p[a-b]",
                          "test_after"}, p.stdout
    bad = cases["test_bad_limit"].find("error")
    assert bad is not None and "cannot read the size '1 MXB'" in bad.get("message"), p.stdout
    broke = cases["test_filter_raises"].find("failure")
    assert broke is not None and "RuntimeError: filter broke" in (broke.text or ""), p.stdout
    for name in ("test_p[a b]", "test_p[a-b]", "test_after"):
        assert len(cases[name]) == 0, (name, p.stdout)
    peaks = sorted(report_json(memtrace, "stats", keep / c)["totals"]["peak_heap"] >> 20
                   for c in os.listdir(str(keep)) if "test_p" in c)
    assert peaks == [1, 5], peaks


UNREADABLE_LIMITS = """\
import pytest


@pytest.mark.limit_memory("garbage")
def test_garbage():
    pass


@pytest.mark.limit_memory(True)
def test_bool():
    pass


@pytest.mark.limit_leaks([1])
def test_list():
    pass


# nothing leaks: the filter would never be called
@pytest.mark.limit_leaks("1 MB", filter_fn="not_kept")
def test_filter_not_callable():
    pass


@pytest.mark.limit_leaked_objects()
def test_pytest_memray_objects_marker():
    pass
"""

OUT_OF_RANGE_LIMITS = """\
import pytest


@pytest.mark.limit_memory("1e400 MB")
def test_overflows():
    pass


@pytest.mark.limit_memory(float("inf"))
def test_infinite():
    pass


@pytest.mark.limit_memory(float("nan"))
def test_nan():
    pass


@pytest.mark.limit_memory(-5)
def test_negative():
    pass


@pytest.mark.limit_leaks(-5)
def test_negative_leaks():
    pass


@pytest.mark.limit_leaks(location_limit="-1 KB")
def test_negative_text():
    pass


@pytest.mark.limit_memory(0)
def test_zero_is_a_limit():
    pass
"""


def run_suite_memtrace(tmp_path, name, suite_text):
    """pytest --memtrace over @suite_text as tmp_path/@name, with a JUnit
    report: the process and the report's path."""
    suite = tmp_path / name
    suite.write_text(suite_text)
    junit = tmp_path / "j.xml"
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
    env.pop("PYTEST_ADDOPTS", None)
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "-q", "--memtrace", "--junitxml", str(junit),
                        str(suite)], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    return p, junit


def check_limit_errors(tmp_path, suite_text, expected):
    """Run @suite_text with --memtrace: each test named in @expected errors
    before it runs with one line starting as given there, no traceback and
    the message once, not chained to itself. The other tests' results."""
    p, junit = run_suite_memtrace(tmp_path, "test_limits.py", suite_text)
    assert p.returncode == 1, p.stdout
    for word in ("Traceback", "During handling", "Error:", "INTERNALERROR"):
        assert word not in p.stdout, p.stdout
    results = junit_results(junit)
    for name, line in expected.items():
        outcome, message, text = results.pop(name)
        assert outcome == "error", (name, p.stdout)
        assert line in message, (name, message)
        assert text.strip().startswith(line) and "\n" not in text.strip(), (name, text)
        # the error's section is its one line
        section = p.stdout.split(" ERROR at setup of %s _" % name, 1)[1].split("\n", 2)[1]
        assert section.startswith(line), (name, p.stdout)
    return results


def test_unreadable_limit_or_marker_is_said_once(tmp_path):
    """A limit that does not read, a filter_fn that cannot be called and
    pytest-memray's limit_leaked_objects, which memtrace does not have,
    each error their test with one line."""
    check_limit_errors(tmp_path, UNREADABLE_LIMITS, {
        "test_garbage": "memtrace: cannot read the size 'garbage' (expected e.g. '24 MB'",
        "test_bool": "memtrace: cannot read the size True",
        "test_list": "memtrace: cannot read the size [1]",
        "test_filter_not_callable": "memtrace: the filter_fn of @pytest.mark.limit_leaks is "
                                    "called with each leaking stack, and 'not_kept' cannot be",
        "test_pytest_memray_objects_marker": "memtrace: @pytest.mark.limit_leaked_objects "
                                             "(pytest-memray's, for the objects a test leaves "
                                             "alive) is not one of memtrace's markers",
    })


def test_limit_is_a_finite_size_of_0_or_more(tmp_path):
    """An infinite, NaN or negative limit is refused as one that does not
    read (pytest-memray's pattern refuses a minus sign), for both markers; 0 B is
    a limit that any test reaches."""
    others = check_limit_errors(tmp_path, OUT_OF_RANGE_LIMITS, {
        "test_overflows": "memtrace: the size '1e400 MB' is too large to be a number of bytes",
        "test_infinite": "memtrace: the size inf is too large to be a number of bytes",
        "test_nan": "memtrace: the size nan is not a number",
        "test_negative": "memtrace: the size -5 is negative (a limit is 0 B or more)",
        "test_negative_leaks": "memtrace: the size -5 is negative (a limit is 0 B or more)",
        "test_negative_text": "memtrace: cannot read the size '-1 KB'",
    })
    assert list(others) == ["test_zero_is_a_limit"], others
    outcome, _, text = others["test_zero_is_a_limit"]
    assert outcome == "failure" and "Test was limited to 0 B" in text, others


PYTEST_MEMRAY_SIZES = """\
import pytest

KEEP = [None]


@pytest.mark.limit_memory("+100 MB")
def test_plus_sign():
    pass


# 0.1 KB is 102.4 bytes: 102 bytes are under it, 103 are not
@pytest.mark.limit_leaks("0.1 KB")
def test_102_bytes_under_a_tenth_of_a_kb():
    KEEP[0] = bytes(102 - bytes.__basicsize__)


@pytest.mark.limit_leaks("0.1 KB")
def test_103_bytes_over_a_tenth_of_a_kb():
    KEEP[0] = bytes(103 - bytes.__basicsize__)
"""


def test_sizes_read_as_pytest_memray_reads_them(tmp_path):
    """pytest-memray reads "+100 MB" (its pattern allows a plus sign) and
    compares a test with the limit's exact value, fraction of a byte and
    all: "0.1 KB" lets a test reach 102 bytes, not 103."""
    p, junit = run_suite_memtrace(tmp_path, "test_sizes.py", PYTEST_MEMRAY_SIZES)
    results = junit_results(junit)
    assert {name: r[0] for name, r in results.items()} == {
        "test_plus_sign": "passed",
        "test_102_bytes_under_a_tenth_of_a_kb": "passed",
        "test_103_bytes_over_a_tenth_of_a_kb": "failure",
    }, p.stdout
    assert "103 B in 1 allocation" in results["test_103_bytes_over_a_tenth_of_a_kb"][2], p.stdout


TWELVE_STACKS = """\
import pytest

KEEP = []
MAKERS = []
for i in range(12):
    exec("def make%d():\\n    return bytearray(%d * 1024)\\n" % (i, 100 * (i + 1)))
    MAKERS.append(globals()["make%d" % i])


@pytest.mark.limit_memory("1 KB")
def test_peak():
    data = [make() for make in MAKERS]


@pytest.mark.limit_leaks("1 KB")
def test_leaks():
    KEEP.extend(make() for make in MAKERS)
"""


@pytest.mark.parametrize("args,listed", [
    ([], 10), (["-v"], 10), (["-q"], 0), (["-vv"], 12),
    (["-q", "-o", "verbosity_memtrace=2"], 12), (["-vv", "-o", "verbosity_memtrace=-1"], 0),
])
def test_stacks_listed_by_verbosity(tmp_path, args, listed):
    """A limit_memory failure lists its allocating stacks as pytest-memray
    lists them: the 10 largest and how many more, all from -vv, none with
    -q; the ini key verbosity_memtrace (pytest-memray's verbosity_memray)
    overrides -v and -q. A limit_leaks failure lists all its stacks over
    the limit, whatever the verbosity."""
    (tmp_path / "test_twelve.py").write_text(TWELVE_STACKS)
    junit = tmp_path / "j.xml"
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
    env.pop("PYTEST_ADDOPTS", None)
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "--memtrace", "--junitxml", str(junit)] + args
                       + ["test_twelve.py"], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=300)
    results = junit_results(junit)
    peak, leaks = results["test_peak"], results["test_leaks"]
    assert peak[0] == "failure" and leaks[0] == "failure", p.stdout
    assert peak[2].startswith("Test was limited to 1.00 KiB"), peak
    assert peak[2].count(" from:") == listed, peak
    assert ("...and 2 more" in peak[2]) == (listed == 10), peak
    assert leaks[2].count(" from:") == 12, leaks


HYBRID_LEAKS = """\
import pytest

KEEP = []


def innermost_is_native(stack):
    # as a filter for a C extension's leaks reads them: by the binary that
    # allocated, the innermost frame
    return not stack.frames[0].filename.endswith(".py")


@pytest.mark.limit_leaks("1 KB", filter_fn=innermost_is_native)
def test_filter_sees_native_frames():
    KEEP.append(bytearray(64 * 1024))  # NATIVE-LEAK


# about 98 KiB of buffers and 5 KiB of bytearray objects: 103 KiB from the
# line, but neither of its two native stacks reaches 100 KiB
@pytest.mark.limit_leaks("100 KB")
def test_each_native_stack_under_the_limit():
    for _ in range(100):
        KEEP.append(bytearray(1000))
"""


def test_leaks_are_per_hybrid_stack(tmp_path):
    """As pytest-memray's, a limit_leaks test is tracked with native stacks:
    its filter_fn sees them (native frames first, then the Python lines),
    the limit is per native and Python stack, and the message shows them."""
    p, junit = run_suite_memtrace(tmp_path, "test_hybrid.py", HYBRID_LEAKS)
    results = junit_results(junit)
    assert {name: r[0] for name, r in results.items()} == {
        "test_filter_sees_native_frames": "failure",
        "test_each_native_stack_under_the_limit": "passed",
    }, p.stdout
    lines = [line.strip() for line in results["test_filter_sees_native_frames"][2].splitlines()]
    where = "test_filter_sees_native_frames at test_hybrid.py:%d" % (
        HYBRID_LEAKS.splitlines().index("    KEEP.append(bytearray(64 * 1024))  # NATIVE-LEAK")
        + 1)
    assert where in lines, lines
    first = lines.index(where) - 1
    assert " at " in lines[first] and not lines[first].endswith(".py"), lines


def test_native_stacks_in_failure_messages(tmp_path):
    # bytearray's buffer comes from the interpreter's C code: with
    # --memtrace-native the message names the C frames under the test's line
    p, outcomes, messages = run_pytest(tmp_path, "--memtrace", "--memtrace-native",
                                       "--memtrace-stacks", "12")
    assert outcomes["test_big_under_small_limit"] == "failed", (outcomes, p.stdout, p.stderr)
    big = messages["test_big_under_small_limit"]
    lines = [line.strip() for line in big.splitlines()]
    where = "test_big_under_small_limit at test_suite.py:%d" % line_of("ALLOC-LINE")
    assert where in lines, big
    # native frames come first (innermost), then the test's line
    assert lines.index(where) > lines.index("PyByteArray_Resize at /usr/bin/python3.11"), big
    assert outcomes["test_unmarked"] == "passed"


def test_pytest_memray_option_names(tmp_path):
    """A CI file written for pytest-memray works: its option names, and the
    short summary says why a test failed."""
    keep = tmp_path / "kept"
    p, outcomes, _ = run_pytest(tmp_path, "--memray", "--stacks", "2", "--hide-memray-summary",
                                "--memray-bin-path", str(keep), "--memray-bin-prefix", "ci",
                                "-rf")
    assert outcomes["test_big_under_small_limit"] == "failed", p.stdout
    assert outcomes["test_big_under_large_limit"] == "passed", p.stdout
    assert "memtrace: tests with the highest peak memory" not in p.stdout
    # pytest-memray's names: PREFIX-<node id, "::" made "-">.bin
    caps = sorted(os.listdir(str(keep)))
    assert caps == sorted("ci-test_suite.py-%s.bin" % t for t in (
        "test_big_under_small_limit", "test_big_under_large_limit", "test_appends_to_module_list",
        "test_frees_everything", "test_filtered_leak", "test_unmarked")), caps
    # (the line is cut to the terminal's width)
    assert ("MEMORY PROBLEMS test_suite.py::test_big_under_small_limit - limit_memory: 1"
            in p.stdout), p.stdout
    assert ("MEMORY PROBLEMS test_suite.py::test_appends_to_module_list - limit_leaks: ") in p.stdout


def test_long_capture_names_fit_as_pytest_memray_cuts_them(tmp_path):
    """A kept capture's name over 250 bytes (255, less room for the
    ".metadata" file pytest-memray writes beside it) is cut to 250: its
    head, then "-", 16 hex digits of the whole name's SHA-256, ".bin"."""
    import hashlib
    suite = tmp_path / "test_long.py"
    suite.write_text(textwrap.dedent("""\
        import pytest

        @pytest.mark.parametrize("v", ["x" * 300, "y" * 194, "z" * 192])
        def test_a(v):
            pass
        """))
    keep = tmp_path / "kept"
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD)
    env.pop("PYTEST_ADDOPTS", None)
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "-q", "--memtrace", "--memtrace-bin-path", str(keep),
                        "--memtrace-bin-prefix", "P" * 32, str(suite)], cwd=str(tmp_path),
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=120)
    assert p.returncode == 0, p.stdout
    expected = []
    for v in ("x" * 300, "y" * 194):  # 342 and 252 bytes
        whole = "%s-test_long.py-test_a[%s].bin" % ("P" * 32, v)
        tail = "-%s.bin" % hashlib.sha256(whole.encode()).hexdigest()[:16]
        expected.append(whole[:250 - len(tail)] + tail)
    expected.append("%s-test_long.py-test_a[%s].bin" % ("P" * 32, "z" * 192))  # 250: as it is
    assert all(len(name) == 250 for name in expected)
    assert sorted(os.listdir(str(keep))) == sorted(expected), p.stdout


def test_ini_keys(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmemtrace = true\nhide_memtrace_summary = true\n"
                                         "memtrace_stacks = 3\n")
    p, outcomes, _ = run_pytest(tmp_path)
    assert outcomes["test_big_under_small_limit"] == "failed", p.stdout
    assert "memtrace: tests with the highest peak memory" not in p.stdout
    # the command line wins over the ini file
    (tmp_path / "pytest.ini").write_text("[pytest]\nmemtrace_stacks = lots\n")
    p, _, _ = run_pytest(tmp_path, "--memtrace")
    assert "the ini key memtrace_stacks: 'lots' is not a whole number of 1 or more" in \
        p.stdout + p.stderr
    (tmp_path / "pytest.ini").write_text("[pytest]\nmemtrace_stacks = 0\n")
    p, _, _ = run_pytest(tmp_path, "--memtrace")
    assert "the ini key memtrace_stacks: '0' is not a whole number of 1 or more" in \
        p.stdout + p.stderr
    (tmp_path / "pytest.ini").write_text("[pytest]\n")


@pytest.mark.parametrize("args,said", [
    (["--stacks", "0"], "argument --memtrace-stacks/--stacks: '0' is not a whole number of 1"),
    (["--memtrace-stacks", "x"], "argument --memtrace-stacks/--stacks: 'x' is not a whole number"),
    (["--most-allocations", "-1"],
     "argument --most-allocations: '-1' is not a whole number of 0 or more")])
def test_bad_counts_are_usage_errors(tmp_path, args, said):
    """--stacks is a count of frames, 1 or more (pytest-memray's
    positive_int), --most-allocations a count of tests, 0 for all: other
    values are pytest's usage error, before any test runs."""
    p = run_pytest_plain(tmp_path, "--memtrace", *args)
    assert p.returncode == 4 and said in p.stderr, p.stdout + p.stderr


def test_pytest_memray_ini_keys(tmp_path):
    """An ini file renamed from pytest-memray's keeps the keys without
    "memray" in their names as they are: stacks, native, ..."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmemtrace = true\nstacks = 3\n"
                                         "trace_python_allocators = true\nnative = false\n"
                                         "fail-on-increase = false\n")
    p, outcomes, messages = run_pytest(tmp_path, "--strict-config", "-W", "error")
    assert outcomes["test_big_under_small_limit"] == "failed", p.stdout + p.stderr
    assert "Unknown config option" not in p.stdout + p.stderr
    assert "test_big_under_small_limit at test_suite.py" in messages[
        "test_big_under_small_limit"]


THREADS = """\
import threading
import pytest

HELD = []


def other_thread(n):
    t = threading.Thread(target=lambda: HELD.append(bytearray(n)))
    t.start()
    t.join()


@pytest.mark.limit_memory("1 MB", current_thread_only=True)
def test_other_thread_not_counted():
    other_thread(10 * 1024 * 1024)
    HELD.clear()


@pytest.mark.limit_memory("1 MB")
def test_other_thread_counted():
    other_thread(10 * 1024 * 1024)
    HELD.clear()


@pytest.mark.limit_memory("1 MB", current_thread_only=True)
def test_own_thread_counted():
    x = bytearray(10 * 1024 * 1024)


@pytest.mark.limit_leaks("1 KB", current_thread_only=True)
def test_other_thread_leak_not_counted():
    other_thread(100 * 1024)


@pytest.mark.limit_memory(memory_limit="1 MB")
def test_memray_keyword():
    x = bytearray(10 * 1024 * 1024)


@pytest.mark.limit_memory("1 MB", per_thread=True)
def test_unknown_keyword():
    pass
"""


def test_current_thread_only_and_marker_arguments(tmp_path):
    p, junit = run_suite_memtrace(tmp_path, "test_threads.py", THREADS)
    outcomes, messages = {}, {}
    for name, (outcome, message, text) in junit_results(junit).items():
        outcomes[name], messages[name] = outcome, message + text
    assert outcomes == {
        "test_other_thread_not_counted": "passed",
        "test_other_thread_counted": "failure",
        "test_own_thread_counted": "failure",
        "test_other_thread_leak_not_counted": "passed",
        "test_memray_keyword": "failure",
        "test_unknown_keyword": "error",  # a usage error, before the test runs
    }, p.stdout
    assert "takes a limit and current_thread_only, not per_thread" in \
        messages["test_unknown_keyword"], messages


HIDDEN_SUITE = """\
import pytest


@pytest.mark.limit_leaks("1 KB")
def test_imports():
    import leaky_mod


def test_nothing():
    pass
"""


def test_messages_hide_import_system_and_memtrace_frames(tmp_path):
    """As the reports: a leak made while importing names the module's line,
    then the test's, with no importlib frame between; memtrace's own
    Tracker.__exit__ is never named, its allocations being "<hidden
    frames>"."""
    (tmp_path / "leaky_mod.py").write_text("KEPT = bytearray(50_000)  # LEAK\n")
    suite = tmp_path / "test_hidden.py"
    suite.write_text(HIDDEN_SUITE)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, MEMTRACE_BUILD_DIR=BUILD, PYTHONMALLOC="malloc")
    env.pop("PYTEST_ADDOPTS", None)
    p = subprocess.run([PYTHON, "-m", "pytest", "-p", "memtrace.pytest_plugin", "-p",
                        "no:cacheprovider", "-q", "--memtrace", "--memtrace-stacks", "5",
                        "--most-allocations", "0", str(suite)],
                       cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=120)
    assert p.returncode == 1, p.stdout
    out = p.stdout
    # (under the native frames of the interpreter that allocated)
    assert ("\n        <module> at leaky_mod.py:1\n        test_imports at test_hidden.py:6\n"
            in out), out
    assert "frozen" not in out and "_bootstrap" not in out, out
    assert "tracker.py" not in out and "__exit__" not in out, out
    report = out.split("memtrace: tests with the highest peak memory", 1)[1]
    nothing = report.split("test_hidden.py::test_nothing", 1)[1]
    # what the empty test allocated is memtrace's own, leaving the block
    assert "<hidden frames>" in nothing.split("test_hidden.py::", 1)[0], report
