"""memtrace: a memory profiler for CPython processes.

The profiler itself is the `memtrace` command. From Python:

    import memtrace
    with memtrace.Tracker("profile.bin"):
        work()
    reader = memtrace.FileReader("profile.bin")
    for rec in reader.get_high_watermark_allocation_records():
        print(rec.size, rec.stack_trace())

and from pytest: `pytest -p memtrace.pytest_plugin --memtrace` with the
markers limit_memory("24 MB") and limit_leaks("1 KB"); in IPython or
Jupyter, `%load_ext memtrace` and a cell that starts with
`%%memtrace_flamegraph`. Names follow
memray's, so that scripts written for it port by changing the import.
"""

__version__ = "0.1.0"

from .reader import (AllocationRecord, AllocatorType, CaptureError, FileReader,  # noqa: E402
                     Interval, MemorySnapshot, Metadata, TemporalAllocationRecord,
                     dump_all_records)
from .socket_reader import SocketReader  # noqa: E402
from .tracker import (Destination, FileDestination, FileFormat, SocketDestination,  # noqa: E402
                      Tracker, set_log_level, start_thread_trace)

__all__ = [
    "AllocationRecord", "AllocatorType", "CaptureError", "Destination", "FileDestination",
    "FileFormat", "FileReader", "Interval", "MemorySnapshot", "Metadata", "SocketDestination",
    "SocketReader", "TemporalAllocationRecord", "Tracker",
    "dump_all_records", "load_ipython_extension", "set_log_level", "start_thread_trace",
]


def load_ipython_extension(ipython):
    """`%load_ext memtrace`: the %%memtrace_flamegraph cell magic."""
    from ._ipython import load_ipython_extension as load
    load(ipython)
