"""memtrace: a memory profiler for CPython processes.

The profiler itself is the `memtrace` command; this package grows the
Python-side API (Tracker, FileReader, the pytest plugin).
"""

__version__ = "0.1.0"
