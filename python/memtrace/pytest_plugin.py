"""pytest plugin: memory budgets for tests, measured by memtrace.

    pytest -p memtrace.pytest_plugin --memtrace

(or `-p memtrace.pytest_plugin` in the ini file's addopts, or
`pytest_plugins = ["memtrace.pytest_plugin"]` in a conftest.py). With
--memtrace (or the ini option `memtrace = true`) the body of every test
runs under a memtrace.Tracker (fixtures are not tracked), and two markers
become checks:

    @pytest.mark.limit_memory("24 MB")   # peak of the test body
    @pytest.mark.limit_leaks("1 KB", filter_fn=None)  # still live at its end, per stack

(a limit_leaks stack is native and Python frames, as pytest-memray's: its
tests are tracked with native stacks and Python allocators).

Both take current_thread_only=True, and pytest-memray's memory_limit= and
location_limit= for the limit. Sizes are a number ("+" allowed) and a
unit, B, KB, MB, GB, TB or PB, counted in powers of 1024 (KiB, MiB...
are accepted too).
Without --memtrace only the tests with a marker are tracked, and checked,
as pytest-memray does, and there is no report at the end.
Peak and leaks are computed by the C reader (memtrace.FileReader) from
each test's capture. pytest-memray's option names are aliases (--memray,
--stacks, --fail-on-increase, ...), and every option has an ini key.

With --memtrace-fail-on-increase (--fail-on-increase) a limit_memory test
also fails when its peak is higher, by any number of bytes, than at its
last passing run under that option; each test that passes moves its own
baseline (up or down), a failing one keeps it. The baselines live in
pytest's cache (key memtrace/baselines), or with the cache plugin disabled
in the file the cache would use, or in --memtrace-baselines FILE. Under
pytest-xdist each worker sends its results and baselines to the controller,
which prints the one report and saves the baselines.
"""

import argparse
import errno
import functools
import hashlib
import inspect
import os
import re
import shutil
import sys
import tempfile
import threading
import uuid

import pytest

from ._pytest_limits import (LeaksFilterFunction, Stack, StackFrame, _Baselines,
                             _LimitFailure, _marker_limit, _marker_text, _markers, _sizes,
                             format_size, parse_size, size_histogram)
from .reader import FileReader
from .tracker import Tracker

#: the names a suite may take from here: filter_fn's types as pytest-memray
#: names them, and the sizes as the markers read them
__all__ = ["LeaksFilterFunction", "Stack", "StackFrame", "format_size", "parse_size"]

_THIS_FILE = __file__
_PACKAGE_DIR = os.path.dirname(__file__) + os.sep
_IMPORT_FILES = (os.sep + os.path.join("importlib", "_bootstrap.py"),
                 os.sep + os.path.join("importlib", "_bootstrap_external.py"))
#: what stands for a stack whose frames are all hidden (as the reports say)
_HIDDEN = ("<hidden frames>", "", 0)


def _test_frames(frames):
    """The frames of a stack that belong to the test: everything inside
    the wrapper that ran it (pytest's own frames are below it)."""
    for i, f in enumerate(frames):
        if f[1] == _THIS_FILE:
            return frames[:i]
    return frames


def _shown(frames):
    """@frames as the messages show them: without the import system's
    frames and memtrace's own (the Tracker's __exit__), as the reports hide
    them; a stack of such frames alone is one "<hidden frames>" frame. The
    checks count the stacks whole."""
    shown = [f for f in frames
             if not (f[1].startswith("<frozen importlib.") or f[1].endswith(_IMPORT_FILES)
                     or f[1].startswith(_PACKAGE_DIR))]
    return shown if shown or not frames else [_HIDDEN]


def _per_stack(records, native=False):
    """(size, count, frames) per call stack of the test, as a user reads
    it: (function, file, line) frames, with native ones under the Python
    line that called them when @native. The reader's records are finer
    (per allocator, and per bytecode offset within a line)."""
    groups = {}
    for r in records:
        frames = tuple(_test_frames(r._qualified_stack(native)))
        size, count = groups.get(frames, (0, 0))
        groups[frames] = (size + r.size, count + r.n_allocations)
    return [(size, count, list(frames)) for frames, (size, count) in groups.items()]


def _where(frame, rootdir):
    function, filename, line = frame
    if not filename:
        return function
    try:
        rel = os.path.relpath(filename, rootdir)
        if not rel.startswith(os.pardir):
            filename = rel
    except ValueError:
        pass
    return "%s at %s:%d" % (function, filename, line) if line else "%s at %s" % (function, filename)


# (option, pytest-memray's name for it, argparse keywords); each has an ini
# key of the option's name without its dashes (memtrace-stacks ->
# memtrace_stacks), which the command line overrides.
_OPTIONS = [
    ("--memtrace", "--memray", dict(
        action="store_true", default=None,
        help="track the memory of each test body; enables limit_memory and limit_leaks")),
    ("--memtrace-bin-path", "--memray-bin-path", dict(
        metavar="DIR", default=None,
        help="keep each test's capture in DIR (default: a temporary directory, removed at "
             "the end)")),
    ("--memtrace-bin-prefix", "--memray-bin-prefix", dict(
        metavar="PREFIX", default=None,
        help="start the kept captures' names with PREFIX (with --memtrace-bin-path)")),
    ("--most-allocations", None, dict(
        metavar="N", type=lambda v: _count(v, 0), default=None,
        help="report the N tests with the highest peak and where they allocated (default 5; "
             "0 = all)")),
    ("--memtrace-stacks", "--stacks", dict(
        metavar="N", type=lambda v: _count(v, 1), default=None,
        help="frames shown per allocating stack (default 1)")),
    ("--hide-memtrace-summary", "--hide-memray-summary", dict(
        action="store_true", default=None, help="do not print the memtrace report at the end")),
    ("--memtrace-native", "--native", dict(
        action="store_true", default=None,
        help="record native (C) stacks too, and show them under the Python lines in failure "
             "messages (limit_leaks tests always do)")),
    ("--memtrace-trace-python-allocators", "--trace-python-allocators", dict(
        action="store_true", default=None,
        help="record every Python object allocation, not only pymalloc's arenas (limit_leaks "
             "tests always do)")),
    ("--memtrace-fail-on-increase", "--fail-on-increase", dict(
        action="store_true", default=None,
        help="fail a limit_memory test whose peak is higher than at its last passing run "
             "with this option (the baselines are kept in pytest's cache)")),
    ("--memtrace-baselines", None, dict(
        metavar="FILE", default=None,
        help="keep the --memtrace-fail-on-increase baselines in FILE (JSON) instead of "
             "pytest's cache")),
]
_DEFAULTS = {"most_allocations": 5, "memtrace_stacks": 1}


def _count(value, least):
    """A count of at least @least from @value (an option's or ini key's
    text), or the usage error pytest shows for a bad option value."""
    try:
        n = int(value)
    except ValueError:
        n = None
    if n is None or n < least:
        raise argparse.ArgumentTypeError("%r is not a whole number of %d or more"
                                          % (value, least))
    return n


# pytest-memray's budget for a kept capture's name: a path component's
# 255 bytes, less what its ".metadata" file beside the capture adds to the
# name, so that both are cut at the same length
_NAME_LIMIT = 255 - (len(".metadata") - len(".bin"))


def _fit_name(name, limit=_NAME_LIMIT):
    """@name as one path component: over @limit bytes, its tail becomes a
    digest of the whole, so that names cut alike stay apart."""
    encoded = name.encode("utf-8", "surrogateescape")
    if len(encoded) <= limit:
        return name
    tail = "-%s.bin" % hashlib.sha256(encoded).hexdigest()[:16]
    return encoded[:limit - len(tail)].decode("utf-8", "ignore") + tail


def _dest(option):
    return option.lstrip("-").replace("-", "_")


# pytest-memray's ini keys that a renamed ini file keeps as they are (its
# others have "memray" in their names, which becomes "memtrace")
_INI_ALIASES = {
    "memtrace_stacks": "stacks",
    "memtrace_native": "native",
    "memtrace_trace_python_allocators": "trace_python_allocators",
    "memtrace_fail_on_increase": "fail-on-increase",
}


def pytest_addoption(parser):
    group = parser.getgroup("memtrace", "memory budgets with memtrace")
    # pytest-memray's names too, unless pytest-memray itself is here
    aliases = not _has_pytest_memray()
    for name, alias, kw in _OPTIONS:
        names = [name]
        if alias and aliases:
            names.append(alias)
        group.addoption(*names, dest=_dest(name), **kw)
        ini_type = "bool" if kw.get("action") == "store_true" else None
        parser.addini(_dest(name), type=ini_type, default=None,
                      help="as %s%s" % (name, " (%s)" % alias if alias else ""))
        if aliases and _dest(name) in _INI_ALIASES:
            parser.addini(_INI_ALIASES[_dest(name)], type=ini_type, default=None,
                          help="as %s (pytest-memray's ini key)" % _dest(name))
    parser.addini("verbosity_memtrace", default="auto",
                  help="how many of its allocating stacks a limit_memory failure lists: none "
                       "below 0, the 10 largest at 0 and 1, all from 2; 'auto' (the default) "
                       "follows -v and -q (pytest-memray's verbosity_memray)")


def _has_pytest_memray():
    try:
        import importlib.util
        return importlib.util.find_spec("pytest_memray") is not None
    except (ImportError, ValueError):
        return False


def _option(config, name):
    """A command-line option, else its ini key, else its default."""
    dest = _dest(name)
    value = config.getoption(dest)
    if value is None:
        value = config.getini(dest)
        if value in (None, "", []) and dest in _INI_ALIASES:
            try:
                value = config.getini(_INI_ALIASES[dest])
            except ValueError:  # pytest-memray's own plugin has the key
                value = None
        if value in (None, "", []):
            value = None
        elif isinstance(value, str) and name in ("--most-allocations", "--memtrace-stacks"):
            try:
                value = _count(value, 1 if name == "--memtrace-stacks" else 0)
            except argparse.ArgumentTypeError as e:
                raise pytest.UsageError("memtrace: the ini key %s: %s" % (dest, e)) from None
    return _DEFAULTS.get(dest) if value is None else value


def _verbosity(config):
    """The verbosity_memtrace ini key as a number: "auto" is pytest's own
    verbosity (-v, -q), as pytest-memray reads its verbosity_memray."""
    value = config.getini("verbosity_memtrace")
    if value in (None, "", "auto"):
        return config.getoption("verbose")
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError("memtrace: the ini key verbosity_memtrace wants a number or "
                                "'auto', not %r" % (value,)) from None


# pytest-memray's marker for the objects a test leaves alive (Python
# 3.13.3 and later): a test that has it is not checked as it expects
_NO_SUCH_MARKER = "limit_leaked_objects"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "limit_memory(limit, current_thread_only=False): fail if the test body's "
                   "memory at its peak reaches limit (e.g. '24 MB')")
    config.addinivalue_line(
        "markers", "limit_leaks(limit, filter_fn=None, current_thread_only=False): fail if "
                   "memory allocated by one call stack in the test body and still live at its "
                   "end reaches limit; filter_fn(stack) -> bool selects the stacks checked")
    config.addinivalue_line(
        "markers", "%s: pytest-memray's, which memtrace does not have: errors the test"
        % _NO_SUCH_MARKER)
    config.pluginmanager.register(_Manager(config), "memtrace-manager")


class _Result:
    """A test's line in the end-of-run report: its peak, its allocations,
    its largest stacks at the peak and the sizes of all of them."""
    __slots__ = ("nodeid", "peak", "allocations", "top", "sizes", "path")

    def __init__(self, nodeid, peak, allocations, top, sizes, path):
        self.nodeid = nodeid
        self.peak = peak
        self.allocations = allocations
        self.top = top
        self.sizes = sizes
        self.path = path

    def to_wire(self):
        """What execnet carries from an xdist worker: plain values."""
        return (self.nodeid, int(self.peak), int(self.allocations),
                [(int(size), int(count), [(str(f[0]), str(f[1]), int(f[2])) for f in frames])
                 for size, count, frames in self.top], [int(s) for s in self.sizes], self.path)

    @classmethod
    def from_wire(cls, data):
        nodeid, peak, allocations, top, sizes, path = data
        return cls(nodeid, peak, allocations,
                   [(size, count, [tuple(f) for f in frames]) for size, count, frames in top],
                   sizes, path)


def _bin_dir(path):
    """The absolute path of the --memtrace-bin-path directory, made (with
    its parents) if it is not there; a UsageError, naming it and why, if
    captures cannot be written in it."""
    where = os.path.abspath(path)
    try:
        if os.path.exists(where) and not os.path.isdir(where):
            reason = os.strerror(errno.ENOTDIR)
        else:
            os.makedirs(where, exist_ok=True)
            reason = None if os.access(where, os.W_OK | os.X_OK) else os.strerror(errno.EACCES)
    except OSError as e:
        reason = e.strerror or str(e)
    except ValueError as e:  # an embedded null byte
        reason = str(e)
    if reason:
        raise pytest.UsageError("memtrace: cannot keep the captures in %s (--memtrace-bin-path): "
                                "%s" % (where, reason))
    return where


def _tracked_already():
    """Whether this process is tracked already (by `memtrace run` or
    `memtrace attach`), so that no Tracker can start in it. Only a process
    with the payload in it can be: a Tracker started and stopped at once,
    its capture thrown away, tells."""
    from . import _native
    from .tracker import FileDestination
    if _native._mapped_payload() is None:
        return False
    try:
        with Tracker(destination=FileDestination(os.devnull)):
            pass
    except RuntimeError:
        return True
    except (OSError, ImportError):  # each tracked test says it
        pass
    return False


def _cannot_track(nodeid, e):
    """One line: why the test's body could not be tracked."""
    if isinstance(e, OSError) and e.strerror and e.filename:
        why = "%s: %s" % (e.filename, e.strerror)
    else:
        why = str(e) or type(e).__name__
    if why.startswith("memtrace: "):  # the Tracker's own words: said once
        why = why[len("memtrace: "):]
    return "memtrace: cannot track %s: %s" % (nodeid, why)


class _Manager:
    def __init__(self, config):
        self.config = config
        self.rootdir = str(config.rootpath) if hasattr(config, "rootpath") else str(config.rootdir)
        # every test body, or (without --memtrace) those with a marker
        self.everything = bool(_option(config, "--memtrace"))
        if self.everything and _tracked_already():
            raise pytest.UsageError("memtrace: --memtrace cannot track each test: this process is "
                                    "already being tracked (by `memtrace run`, `memtrace attach` or "
                                    "a Tracker)")
        self.keep = _option(config, "--memtrace-bin-path")
        # pytest-memray's default prefix: a random one per run, which an
        # xdist worker has from the controller
        self.prefix = (_option(config, "--memtrace-bin-prefix")
                       or getattr(config, "workerinput", {}).get("memtrace_bin_prefix")
                       or uuid.uuid4().hex)
        for sep in (os.sep, os.altsep):
            # the start of a file name in the bin path: not a way out of it
            if sep and sep in self.prefix:
                raise pytest.UsageError("memtrace: --memtrace-bin-prefix %r cannot contain %r: it "
                                        "starts file names in the bin path" % (self.prefix, sep))
        self._dir = None
        if self.keep:  # checked now, rather than failing each test
            self._dir = _bin_dir(self.keep)
        self.stacks = _option(config, "--memtrace-stacks")
        self.verbosity = _verbosity(config)
        self.pyalloc = _option(config, "--memtrace-trace-python-allocators")
        self.native = _option(config, "--memtrace-native")
        self.captures = {}  # nodeid -> capture path of the current run
        self.made = 0  # captures made, by this process and (on xdist's controller) its workers
        self.test_tid = {}  # nodeid -> the thread that ran its body
        self.results = []
        self.worker = hasattr(config, "workerinput")  # a pytest-xdist worker
        self.baselines = None
        if _option(config, "--memtrace-fail-on-increase"):
            self.baselines = _Baselines(config, _option(config, "--memtrace-baselines"))
        self.measured = {}  # nodeid -> its limit_memory figure, until its report is out

    @property
    def dir(self):
        """Where the captures go: the --memtrace-bin-path directory, made
        at the start, or a temporary one made at the first test tracked."""
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="memtrace-pytest-")
        return self._dir

    # -- naming ---------------------------------------------------------
    def _capture_path(self, nodeid):
        if self.keep:
            # pytest-memray's names, so that what finds its captures
            # finds these: PREFIX-<node id, "::" and "/" made "-">.bin
            of_id = nodeid.replace("::", "-").replace(os.sep, "-")
            return os.path.join(self.dir, _fit_name("%s-%s.bin" % (self.prefix, of_id)))
        # readable, and unique: ids that differ only in characters left
        # out of a file name ("a b" and "a-b") get different digests
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", nodeid.replace("::", "--")).strip("-")[:180]
        digest = hashlib.sha256(nodeid.encode("utf-8", "replace")).hexdigest()[:12]
        return os.path.join(self.dir, name + "-" + digest + ".bin")

    # -- checking the markers before the test runs ----------------------
    def pytest_runtest_setup(self, item):
        if item.get_closest_marker(_NO_SUCH_MARKER) is not None:
            pytest.fail("memtrace: @pytest.mark.%s (pytest-memray's, for the objects a test "
                        "leaves alive) is not one of memtrace's markers: the test cannot be "
                        "checked as it asks" % _NO_SUCH_MARKER, pytrace=False)
        for name in ("limit_memory", "limit_leaks"):
            for marker in item.iter_markers(name):
                try:
                    _marker_limit(marker)
                    continue
                except pytest.UsageError as e:
                    problem = str(e)
                # outside the except clause: the message once, not chained to itself
                pytest.fail(problem, pytrace=False)

    # -- tracking -------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        func = pyfuncitem.obj
        memory, leaks = _markers(pyfuncitem)
        if not self.everything and not memory and not leaks:
            yield
            return
        path = self._capture_path(pyfuncitem.nodeid)
        # a leak is per native and Python stack, as pytest-memray's
        tracker_kw = {"trace_python_allocators": bool(self.pyalloc or leaks),
                      "native_traces": bool(self.native or leaks)}

        def tracker():
            return Tracker(destination=_file_destination(path), **tracker_kw)

        nodeid, tids = pyfuncitem.nodeid, self.test_tid

        # A Tracker that cannot start fails the test with one line (said
        # outside the except clause, so not chained to the error); what the
        # body raises, once tracking started, is the test's own.
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def wrapper(*args, **kwargs):
                tids[nodeid] = threading.get_native_id()
                started = False
                try:
                    with tracker():
                        started = True
                        return await func(*args, **kwargs)
                except (OSError, RuntimeError, ImportError) as e:
                    if started:
                        raise
                    problem = _cannot_track(nodeid, e)
                pytest.fail(problem, pytrace=False)
        else:
            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                tids[nodeid] = threading.get_native_id()
                started = False
                try:
                    with tracker():
                        started = True
                        return func(*args, **kwargs)
                except (OSError, RuntimeError, ImportError) as e:
                    if started:
                        raise
                    problem = _cannot_track(nodeid, e)
                pytest.fail(problem, pytrace=False)

        self.captures.pop(pyfuncitem.nodeid, None)
        try:  # a capture of an earlier session must not pass for this one's
            os.unlink(path)
        except OSError:
            pass
        pyfuncitem.obj = wrapper
        try:
            yield
        finally:
            # another plugin may call the test again (reruns): start clean
            pyfuncitem.obj = func
        if os.path.exists(path):
            self.captures[pyfuncitem.nodeid] = path
            self.made += 1

    # -- checking -------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if call.when != "call":
            return
        if report.failed and str(report.longrepr).startswith("memtrace: cannot track "):
            # the short summary's reason: why (pytest.fail without a trace
            # gives none)
            why = str(report.longrepr)
            report.longrepr = _LimitFailure([why], why)
            if self.worker:  # xdist sends the longrepr as text
                report.memtrace_headline = why
        path = self.captures.pop(item.nodeid, None)
        if path is None:
            return
        try:
            # a body that raised (failed, skipped itself, xfailed) has no
            # limits to check, and stays out of the report, as pytest-memray
            # leaves it out
            problem = self._analyse(item, path) if call.excinfo is None else None
        except Exception as e:  # a filter_fn that raises, an unreadable capture
            problem = "memtrace: cannot check the limits of %s: %s: %s" % (
                item.nodeid, type(e).__name__, e)
        finally:
            if not self.keep:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        if problem and report.passed:
            report.outcome = "failed"
            report.longrepr = problem
            # over a limit: pytest shows "M", MEMORY PROBLEMS, as with
            # pytest-memray (an xdist worker's report carries it too)
            report.memtrace_limit = isinstance(problem, _LimitFailure)
            if self.worker and isinstance(problem, _LimitFailure):
                # xdist sends the longrepr as text: the headline goes too
                report.memtrace_headline = problem.reprcrash.message

    def _top(self, records, n=None, native=None):
        """The @n largest stacks of @records (all without @n), largest first."""
        native = self.native if native is None else native
        groups = sorted(_per_stack(records, native), key=lambda g: g[0], reverse=True)
        return [(size, count, _shown(frames)[:self.stacks]) for size, count, frames in groups[:n]]

    def _describe(self, top):
        lines = []
        for size, count, frames in top:
            lines.append("    %s in %d allocation%s from:" % (format_size(size), count,
                                                            "" if count == 1 else "s"))
            if not frames:
                lines.append("        (no Python frames: native code)")
            for f in frames:
                lines.append("        " + _where(f, self.rootdir))
        return lines

    def _xdist_records(self, reader, tid):
        """On an xdist worker, whether a record is execnet's: its thread
        receives the controller's messages while tests run, and what it
        allocates is not the test's (another thread, through execnet's
        code); and how many of the capture's allocations are. Elsewhere,
        no record is, and none."""
        execnet = sys.modules.get("execnet") if self.worker else None
        if execnet is None or tid is None:
            return _nothing, 0
        where = os.path.dirname(execnet.__file__) + os.sep
        seen = {}

        def theirs(thread, stack_id):
            if thread == tid:
                return False
            if stack_id not in seen:
                seen[stack_id] = any(f[1].startswith(where) for f in reader._stack(stack_id))
            return seen[stack_id]

        count = sum(n for (thread, stack_id), n in reader._allocations_by_stack(tid).items()
                    if theirs(thread, stack_id))
        return (lambda r: theirs(r.tid, r.stack_id)), count

    def _analyse(self, item, path):
        memory, leaks = _markers(item)
        tid = self.test_tid.pop(item.nodeid, None)

        def mine(records, kw):
            """The records of the test's own thread, with current_thread_only."""
            if not kw.get("current_thread_only"):
                return records
            return [r for r in records if r.tid == tid]

        problems, headlines = [], []

        def failed(lines, heads, marker, node, several):
            """One marker's failure: with several of its kind, named."""
            if problems:
                problems.append("")
            if several:
                problems.append(_marker_text(marker, node) + ":")
                heads = [h.replace(marker.name + ":", "%s of %s:" % (marker.name, node.name), 1)
                         for h in heads]
            problems.extend(lines)
            headlines.extend(heads)

        with FileReader(path) as reader:
            xdist, not_mine = self._xdist_records(reader, tid)
            peak_records = [r for r in reader.get_high_watermark_allocation_records(
                merge_threads=False) if not xdist(r)]
            peak = sum(r.size for r in peak_records)
            # the end-of-run report names Python lines, as pytest-memray's,
            # and draws the sizes of all the stacks live at the peak
            by_stack = _per_stack(peak_records, False)
            top = self._top(peak_records, 5, native=False)
            self.results.append(_Result(item.nodeid, peak,
                                        reader.metadata.total_allocations -
                                        reader.metadata.total_frees - not_mine, top,
                                        sorted(g[0] for g in by_stack),
                                        path if self.keep else None))
            for i, (marker, node) in enumerate(memory):
                limit, kw = _marker_limit(marker)
                records = mine(peak_records, kw)
                used = sum(r.size for r in records)
                own = " (its own thread)" if kw.get("current_thread_only") else ""
                lines, heads = [], []
                if used >= limit:
                    lines.append("Test was limited to %s but its body%s used %s at its peak"
                                 % (format_size(limit), own, format_size(used)))
                    heads.append("limit_memory: %s %s %s" % (format_size(used),
                                                             ">" if used > limit else "=",
                                                             format_size(limit)))
                # a test has one baseline: the figure of its closest marker
                before = None
                if self.baselines is not None and i == 0:
                    self.measured[item.nodeid] = used
                    before = self.baselines.get(item.nodeid)
                if before is not None and used > before:
                    now, then = _sizes(used, before)
                    lines.append("Test's body%s used %s at its peak, %s more than the %s of "
                                 "its last passing run" % (own, now, format_size(used - before),
                                                           then))
                    heads.append("fail-on-increase: %s > %s (+%s)" % (
                        format_size(used), format_size(before), format_size(used - before)))
                if lines and self.verbosity >= 0:
                    # as pytest-memray lists them: the 10 largest, all at -vv
                    top = self._top(records)
                    shown = top if self.verbosity >= 2 else top[:10]
                    lines.append("Largest allocations live at the peak:")
                    lines.extend(self._describe(shown))
                    if len(top) > len(shown):
                        lines.append("    ...and %d more" % (len(top) - len(shown)))
                if lines:
                    failed(lines, heads, marker, node, len(memory) > 1)
            leaked = None
            for marker, node in leaks:
                limit, kw = _marker_limit(marker)
                filter_fn = kw.get("filter_fn")
                if leaked is None:
                    leaked = [r for r in reader.get_leaked_allocation_records(
                        merge_threads=False) if not xdist(r)]
                bad = []
                for size, count, frames in _per_stack(mine(leaked, kw), native=True):
                    if size < limit:
                        continue
                    if filter_fn is not None and not filter_fn(
                            Stack(tuple(StackFrame(*f) for f in frames))):
                        continue
                    bad.append((size, count, _shown(frames)[:max(self.stacks, 5)]))
                if bad:
                    bad.sort(key=lambda b: b[0], reverse=True)
                    lines = ["Test was allowed to leak %s per call stack but %d stack%s "
                             "leaked that much or more:" % (format_size(limit), len(bad),
                                                            "" if len(bad) == 1 else "s")]
                    lines.extend(self._describe(bad))
                    failed(lines, ["limit_leaks: %s %s %s from one call stack" % (
                        format_size(bad[0][0]), ">" if bad[0][0] > limit else "=",
                        format_size(limit))], marker, node, len(leaks) > 1)
        if problems and self.keep:
            problems.append("capture: %s" % path)
        return _LimitFailure(problems, "; ".join(headlines)) if problems else None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report):
        """A limit_memory test's figure becomes its baseline if the test
        passed, checks and all. On an xdist controller, a worker's limit
        failure gets its short summary reason back."""
        if report.when != "call":
            return
        headline = getattr(report, "memtrace_headline", None)
        if headline and isinstance(report.longrepr, str):
            report.longrepr = _LimitFailure(report.longrepr.splitlines(), headline)
        used = self.measured.pop(report.nodeid, None)
        if used is not None and report.passed:
            self.baselines.passed[report.nodeid] = used

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report, config):
        """A test over its limits, as pytest-memray shows it: "M" in the
        progress line, MEMORY PROBLEMS with -v."""
        if report.when == "call" and report.failed and getattr(report, "memtrace_limit", False):
            return "failed", "M", "MEMORY PROBLEMS"
        return None

    # -- pytest-xdist: the workers' results go to the controller ---------
    def pytest_sessionfinish(self, session):
        if self.worker:
            self.config.workeroutput["memtrace"] = {
                "results": [r.to_wire() for r in self.results],
                "made": self.made,
                "baselines": dict(self.baselines.passed) if self.baselines else {},
            }
        elif self.baselines is not None:
            try:
                self.baselines.save()
            except OSError as e:
                sys.stderr.write("memtrace: cannot save the baselines in %s: %s\n"
                                 % (self.baselines.where, e.strerror or e))
                if session.exitstatus == 0:
                    session.exitstatus = pytest.ExitCode.USAGE_ERROR

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        node.workerinput["memtrace_bin_prefix"] = self.prefix

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        sent = getattr(node, "workeroutput", {}).get("memtrace")
        if not sent:  # a worker that crashed sends nothing
            return
        self.results.extend(_Result.from_wire(r) for r in sent["results"])
        self.made += sent["made"]
        if self.baselines is not None:
            self.baselines.passed.update(sent["baselines"])

    # -- reporting ------------------------------------------------------
    def pytest_terminal_summary(self, terminalreporter):
        # only with --memtrace (or its ini key), as pytest-memray: a plain
        # run checks its marked tests and says nothing more
        if (not self.everything or _option(self.config, "--hide-memtrace-summary")
                or not self.results):
            return
        n = _option(self.config, "--most-allocations")
        # a test with nothing live at its peak has nothing to show, and
        # pytest-memray leaves it out
        results = sorted((r for r in self.results if r.top), key=lambda r: r.peak, reverse=True)
        if n > 0:
            results = results[:n]
        tr = terminalreporter
        ascii = not _shows_blocks(tr)
        tr.write_sep("=", "memtrace: tests with the highest peak memory")
        for r in results:
            tr.write_line("%s" % r.nodeid)
            tr.write_line("    peak memory %s; %d allocation%s in all" % (
                format_size(r.peak), r.allocations, "" if r.allocations == 1 else "s"))
            tr.write_line("    sizes of the %d stack%s live at the peak, %s to %s (log scale): "
                          "|%s|" % (len(r.sizes), "" if len(r.sizes) == 1 else "s",
                                    format_size(r.sizes[0]), format_size(r.sizes[-1]),
                                    size_histogram(r.sizes, ascii=ascii)))
            for size, count, frames in r.top:
                where = _where(frames[0], self.rootdir) if frames else "(no Python frames)"
                tr.write_line("    %12s  %s" % (format_size(size), where))
            if r.path:
                tr.write_line("    capture: %s" % r.path)
        if self.keep:
            # as pytest-memray's report ends: where every test's capture is
            tr.write_line("%d capture%s kept in %s, named %s-<test id>.bin" % (
                self.made, "" if self.made == 1 else "s", self.dir, self.prefix))

    def pytest_unconfigure(self, config):
        if not self.keep and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


def _shows_blocks(tr):
    """Whether the terminal's encoding has the histogram's block elements."""
    stream = getattr(getattr(tr, "_tw", None), "_file", None)
    try:
        "\u2588".encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeError, LookupError):
        return False
    return True


def _nothing(record):
    return False


def _file_destination(path):
    from .tracker import FileDestination
    return FileDestination(path, overwrite=True)
