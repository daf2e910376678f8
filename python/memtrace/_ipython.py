"""The IPython extension: `%load_ext memtrace`, then a cell that starts with

    %%memtrace_flamegraph [--leaks | --temporary-allocations] [--native] ...

runs under a Tracker and shows the flame graph of what it allocated, as
memray's `%%memray_flamegraph` does, with the same options. The page is
written to memtrace-results/<new directory>/flamegraph.html under the
current directory; the capture is removed once the page is made.

The cell's code is not copied into a template: an AST transformer wraps
the cell's statements, where they are, in `with <tracker>:`, so that the
graph starts at the cell and names the cell's own line numbers. IPython is
imported only when the extension is loaded.
"""

import argparse
import ast
import os
import shlex
import shutil
import subprocess
import tempfile

from . import _native
from .tracker import FileFormat, Tracker

_TRACKER_NAME = "__memtrace_cell_tracker__"


def argument_parser():
    """The magic's options: memray's, with memtrace's --python-only."""
    p = argparse.ArgumentParser(prog="%%memtrace_flamegraph",
                                description="Profile the memory of the cell and show "
                                "its flame graph.")
    p.add_argument("--native", action="store_true",
                   help="record native (C/C++) stacks too")
    p.add_argument("--follow-fork", action="store_true",
                   help="record allocations in children forked by the cell")
    p.add_argument("--trace-python-allocators", action="store_true",
                   help="record every allocation of Python's own allocator")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--leaks", action="store_true", dest="show_memory_leaks",
                      help="memory still live at the end, not at the peak")
    kind.add_argument("--temporary-allocation-threshold", metavar="N", type=int, default=-1,
                      dest="temporary_allocation_threshold",
                      help="temporary allocations: freed with at most N other "
                      "allocations of their thread in between")
    kind.add_argument("--temporary-allocations", action="store_const", const=1,
                      dest="temporary_allocation_threshold",
                      help="the same as --temporary-allocation-threshold=1")
    p.add_argument("--temporal", action="store_true",
                   help="choose a range of time on the page's memory plot")
    p.add_argument("--split-threads", action="store_true",
                   help="a thread filter in the page")
    p.add_argument("--inverted", action="store_true",
                   help="start with callers below the allocating functions")
    p.add_argument("--python-only", action="store_true",
                   help="with --native: the Python frames alone")
    p.add_argument("--max-memory-records", metavar="N", type=int, default=None,
                   help="at most N points on the memory plot")
    return p


class _WrapInTracker(ast.NodeTransformer):
    """Puts a module's statements, after its __future__ imports, in a
    `with` block on the tracker named _TRACKER_NAME. The statements keep
    their line numbers. Once only: the cell's own magics (%time, say)
    transform the code they run too."""

    def __init__(self):
        self.used = False

    def visit_Module(self, node):
        if self.used:
            return node
        self.used = True
        body = list(node.body)
        head = 0
        while (head < len(body) and isinstance(body[head], ast.ImportFrom)
               and body[head].module == "__future__"):
            head += 1
        inner = body[head:] or [ast.Pass()]
        first = inner[0]
        line = getattr(first, "lineno", 1)
        block = ast.With(items=[ast.withitem(context_expr=ast.Name(id=_TRACKER_NAME,
                                                                    ctx=ast.Load()))],
                         body=inner)
        block.lineno, block.col_offset = line, 0
        block.end_lineno = getattr(inner[-1], "end_lineno", line)
        block.end_col_offset = getattr(inner[-1], "end_col_offset", 0)
        node.body = body[:head] + [block]
        return ast.fix_missing_locations(node)


def _report_argv(options, capture, page):
    argv = [_native.command(), "flamegraph", "-q", "-f", "-o", page]
    if options.show_memory_leaks:
        argv.append("--leaks")
    if options.temporary_allocation_threshold >= 0:
        argv += ["--temporary-allocations", "--temporary-allocation-threshold",
                 str(options.temporary_allocation_threshold)]
    for flag in ("temporal", "split_threads", "inverted", "python_only"):
        if getattr(options, flag):
            argv.append("--" + flag.replace("_", "-"))
    if options.max_memory_records is not None:
        argv += ["--max-memory-records", str(options.max_memory_records)]
    argv.append(capture)
    return argv


def flamegraph_magic(shell, line, cell):
    """Profiles @cell in @shell and shows its flame graph; None."""
    from IPython.core.error import UsageError
    from IPython.display import IFrame, display

    try:
        options = argument_parser().parse_args(shlex.split(line))
    except SystemExit:
        return  # argparse said what was wrong
    if options.temporal and options.temporary_allocation_threshold >= 0:
        raise UsageError("Can't create a temporal flame graph of temporary allocations")
    if options.max_memory_records is not None and options.max_memory_records < 1:
        raise UsageError("--max-memory-records must be at least 1")
    if not _native.command():
        raise UsageError("memtrace: cannot find the memtrace command (set MEMTRACE_BIN "
                         "to its path)")
    if options.temporal or options.temporary_allocation_threshold >= 0:
        file_format = FileFormat.ALL_ALLOCATIONS
    else:
        file_format = FileFormat.AGGREGATED_ALLOCATIONS

    os.makedirs("memtrace-results", exist_ok=True)
    outdir = tempfile.mkdtemp(dir="memtrace-results")
    capture = os.path.join(outdir, "memtrace.bin")
    tracker = Tracker(capture, native_traces=options.native,
                      trace_python_allocators=options.trace_python_allocators,
                      follow_fork=options.follow_fork, file_format=file_format)
    wrap = _WrapInTracker()
    shell.user_ns[_TRACKER_NAME] = tracker
    shell.ast_transformers.append(wrap)
    try:
        shell.run_cell(cell)
    finally:
        if wrap in shell.ast_transformers:
            shell.ast_transformers.remove(wrap)
        shell.user_ns.pop(_TRACKER_NAME, None)
    if not tracker._used or not os.path.exists(capture):
        shutil.rmtree(outdir, ignore_errors=True)
        raise UsageError("memtrace: the cell did not run under the tracker: no flame graph")

    page = os.path.join(outdir, "flamegraph.html")
    p = subprocess.run(_report_argv(options, capture, page), stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, errors="replace")
    if p.returncode != 0:
        said = [ln for ln in p.stderr.splitlines() if ln.strip()]
        raise UsageError(said[-1] if said else
                         "memtrace flamegraph failed (exit %d)" % p.returncode)
    for ln in p.stderr.splitlines():  # warnings, such as frames without symbols
        if ln.strip():
            print(ln)
    os.unlink(capture)
    print("Results saved to %s" % page)
    display(IFrame(page, width="100%", height="600"))


def load_ipython_extension(ipython):
    """`%load_ext memtrace`: registers the %%memtrace_flamegraph cell magic,
    and memray's name for it, %%memray_flamegraph, unless memray's own
    extension has it."""
    def memtrace_flamegraph(line, cell):
        return flamegraph_magic(ipython, line, cell)
    memtrace_flamegraph.__doc__ = ("Profile the memory of the cell and show its flame graph.\n\n"
                                   + argument_parser().format_help())
    ipython.register_magic_function(memtrace_flamegraph, magic_kind="cell",
                                    magic_name="memtrace_flamegraph")
    # memray's name too, so that a notebook switches by its %load_ext line
    # alone; not over memray's own magic if its extension is loaded
    if "memray_flamegraph" not in ipython.magics_manager.magics["cell"]:
        ipython.register_magic_function(memtrace_flamegraph, magic_kind="cell",
                                        magic_name="memray_flamegraph")
