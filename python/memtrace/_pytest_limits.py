"""The pytest plugin's limits (memtrace.pytest_plugin): the markers'
arguments and their sizes, read as pytest-memray reads them; the stacks a
limit_leaks filter_fn is given, under pytest-memray's type names; the
failures as pytest shows them; the end-of-run report's histogram of
sizes; and the baselines of --memtrace-fail-on-increase, kept between
runs. No pytest hooks here.
"""

import collections
import json
import math
import os
import re
import typing

import pytest


#: what a limit_leaks filter_fn receives: the leaking stack, innermost first
StackFrame = collections.namedtuple("StackFrame", "function filename lineno")
Stack = collections.namedtuple("Stack", "frames")


class LeaksFilterFunction(typing.Protocol):
    """The type of a limit_leaks filter_fn, as pytest-memray names it:
    whether the leaks of @stack count against the limit."""

    def __call__(self, stack: Stack) -> bool:
        ...


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_SIZE_RE = re.compile(r"^\s*\+?([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([KMGTP]?)(I?B)?\s*$", re.I)


def parse_size(text, exact=False):
    """"24 MB" -> 25165824 (units are powers of 1024; a "+" before the
    number is allowed, as pytest-memray's pattern allows it). A size is a
    whole number of bytes, 0 or more: a negative, infinite or NaN one is a
    ValueError, as what does not read as a size is. With @exact, a
    fraction of a byte ("0.1 KB": 102.4) is kept, for a limit compared as
    pytest-memray compares it."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise ValueError("memtrace: cannot read the size %r (expected e.g. '24 MB' or "
                             "'512 KB')" % (text,))
        value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if value != value:
        raise ValueError("memtrace: the size %r is not a number (expected e.g. '24 MB')"
                         % (text,))
    if value < 0:
        raise ValueError("memtrace: the size %r is negative (a limit is 0 B or more)" % (text,))
    if value == float("inf"):
        raise ValueError("memtrace: the size %r is too large to be a number of bytes" % (text,))
    return value if exact else int(value)


def format_size(n):
    """The memtrace command's way: "1.50 MiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d B" % n) if unit == "B" else "%.2f %s" % (n, unit)
        n /= 1024.0
    return "%.2f PiB" % n


def _markers(item):
    """The test's limit_memory markers and its limit_leaks markers, each a
    list of (marker, the node that carries it), closest first: a class's
    and its method's are all checked, each with its own options, and the
    test fails if any fails, as pytest-memray checks them."""
    return tuple([(marker, node) for node, marker in item.iter_markers_with_node(name)]
                 for name in ("limit_memory", "limit_leaks"))


def _marker_text(marker, node):
    """limit_memory('1 MB', current_thread_only=True) of test_x.py::TestK:
    which of several markers a message is about."""
    args = [repr(a) for a in marker.args]
    for key, value in marker.kwargs.items():
        args.append("%s=%s" % (key, getattr(value, "__name__", None) if callable(value)
                               else repr(value)))
    return "%s(%s) of %s" % (marker.name, ", ".join(args), node.nodeid)


# the keyword arguments each marker takes: its limit under pytest-memray's
# name too, and the options
_MARKER_KW = {
    "limit_memory": ("limit", "memory_limit", "current_thread_only"),
    "limit_leaks": ("limit", "location_limit", "filter_fn", "current_thread_only"),
}


def _marker_limit(marker):
    args, kw = marker.args, dict(marker.kwargs)
    known = _MARKER_KW[marker.name]
    unknown = sorted(set(kw) - set(known))
    if unknown or len(args) > 1:
        raise pytest.UsageError(
            "memtrace: @pytest.mark.%s takes a limit and %s, not %s" % (
                marker.name, ", ".join(k for k in known[2:]),
                ", ".join(unknown) if unknown else "%d positional arguments" % len(args)))
    limit = args[0] if args else None
    for name in known[:2]:
        if name in kw:
            limit = kw.pop(name)
    if limit is None:
        raise pytest.UsageError("memtrace: @pytest.mark.%s needs a limit, e.g. '1 MB'"
                                % marker.name)
    filter_fn = kw.get("filter_fn")
    if filter_fn is not None and not callable(filter_fn):
        raise pytest.UsageError("memtrace: the filter_fn of @pytest.mark.limit_leaks is called "
                                "with each leaking stack, and %r cannot be" % (filter_fn,))
    try:
        return parse_size(limit, exact=True), kw
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def _sizes(a, b):
    """@a and @b formatted, with their bytes when they read the same."""
    if format_size(a) != format_size(b):
        return format_size(a), format_size(b)
    return "%s (%d B)" % (format_size(a), a), "%s (%d B)" % (format_size(b), b)


#: the histogram's bars, from none to the fullest bin: block elements, or
#: ASCII where the terminal cannot show them
_BARS = " \u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"
_ASCII_BARS = " .:-=+*#@"


def size_histogram(sizes, bins=5, ascii=False):
    """@sizes (bytes, one for each call stack live at the peak) in @bins
    bins of equal width on a log scale (fewer bins for fewer sizes), as
    pytest-memray's report draws them: a bar each, as high as its count
    against the fullest bin's; "" for no sizes. The largest size counts in
    the last bin (pytest-memray's own count leaves it out)."""
    logs = [math.log(s) if s > 1 else 0.0 for s in sizes]
    if not logs:
        return ""
    bars = _ASCII_BARS if ascii else _BARS
    bins = max(1, min(bins, len(logs)))
    low, high = min(logs), max(logs)
    step = (high - low) / bins
    counts = [0] * bins
    for x in logs:
        counts[min(int((x - low) / step), bins - 1) if step else 0] += 1
    top = max(counts)
    return "".join(bars[c * (len(bars) - 1) // top] for c in counts)


class _Baselines:
    """Each limit_memory test's peak at its last passing run under
    --memtrace-fail-on-increase, by node id: {nodeid: bytes}, read once at
    the start. Kept in @path if given (JSON), else in pytest's cache under
    KEY, else (cache plugin disabled) in the file the cache would keep KEY
    in, so both ways share the baselines. Only the tests that passed are
    written back, over the old values; the others keep theirs."""

    KEY = "memtrace/baselines"

    def __init__(self, config, path):
        self.cache = getattr(config, "cache", None) if path is None else None
        self.cache_dir = None  # pytest's, when this plugin may have to make it
        if path is not None:
            self.file = os.path.abspath(path)
        elif self.cache is None:
            try:
                cache_dir = config.getini("cache_dir") or ".pytest_cache"
            except ValueError:  # the cache plugin registers the key
                cache_dir = ".pytest_cache"
            root = str(config.rootpath) if hasattr(config, "rootpath") else str(config.rootdir)
            self.cache_dir = os.path.join(root, os.path.expanduser(cache_dir))
            self.file = os.path.join(self.cache_dir, "v", *self.KEY.split("/"))
        else:
            self.file = None
        self.where = self.file or "pytest's cache (%s)" % self.KEY
        self.old = self._load()
        self.passed = {}  # nodeid -> figure, of this run's passing tests

    def _load(self):
        if self.cache is not None:
            data = self.cache.get(self.KEY, None)  # what does not parse reads as absent
        else:
            try:
                with open(self.file, encoding="utf-8") as f:
                    data = json.load(f)
            except FileNotFoundError:
                data = None
            except OSError as e:
                raise pytest.UsageError("memtrace: cannot read the baselines in %s: %s"
                                        % (self.file, e.strerror or e)) from None
            except ValueError as e:
                raise pytest.UsageError("memtrace: the baselines in %s are not JSON (%s); "
                                        "delete the file to start again" % (self.file, e)) from None
        if data is None:
            return {}
        if not isinstance(data, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in data.values()):
            raise pytest.UsageError("memtrace: the baselines in %s are not {test id: bytes}; "
                                    "delete them to start again" % self.where)
        return data

    def get(self, nodeid):
        return self.old.get(nodeid)

    def save(self):
        if not self.passed:
            return
        data = dict(self.old)
        data.update(self.passed)
        if self.cache is not None:
            self.cache.set(self.KEY, data)
            return
        if self.cache_dir is not None and not os.path.isdir(self.cache_dir):
            os.makedirs(self.cache_dir)  # kept out of git, as pytest's cache does
            with open(os.path.join(self.cache_dir, ".gitignore"), "w") as f:
                f.write("# Created by memtrace's pytest plugin.\n*\n")
        os.makedirs(os.path.dirname(self.file), exist_ok=True)
        tmp = self.file + ".tmp%d" % os.getpid()
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=2, sort_keys=True)
                f.write("\n")
            os.replace(tmp, self.file)
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass


class _Crash:
    __slots__ = ("message",)

    def __init__(self, message):
        self.message = message


class _LimitFailure:
    """A failed limit as pytest shows it: the lines in the failure's
    section, and the short summary's reason (MEMORY PROBLEMS id -
    limit_memory: 15.32 MiB > 1.00 MiB)."""

    def __init__(self, lines, headline):
        self.lines = lines
        self.reprcrash = _Crash(headline)

    def toterminal(self, tw):
        for line in self.lines:
            tw.line(line)

    def __str__(self):
        return "\n".join(self.lines)
