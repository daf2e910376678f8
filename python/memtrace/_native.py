"""Finding and loading memtrace's two shared libraries with ctypes.

libmemtrace-payload.so is the tracker that `memtrace run` preloads and
`memtrace attach` injects; Tracker loads the same library into this
process. libmemtrace-reader.so is the C capture reader that the memtrace
command uses; FileReader calls it. Both are looked for, in order:

1. an environment variable (MEMTRACE_PAYLOAD, MEMTRACE_READER_LIB);
2. for the payload, a copy already mapped into this process (under
   `memtrace run` or after an attach), so that one process never holds
   two payloads;
3. a wheel's layout (pip install): lib*.so inside this package's directory;
4. the installed layout: <libdir>/memtrace/lib*.so, with this package at
   <libdir>/memtrace/python/memtrace/;
5. a build directory: MEMTRACE_BUILD_DIR, a directory next to a payload
   named by MEMTRACE_PAYLOAD, or build/ at the top of a source tree.
"""

import ctypes
import os
import shutil
import threading

PAYLOAD_NAME = "libmemtrace-payload.so"
READER_NAME = "libmemtrace-reader.so"

_HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_payload = None
_reader = None


def _mapped_payload():
    """Path of a payload already mapped into this process, or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.rstrip("\n").split(None, 5)
                path = parts[5] if len(parts) == 6 else ""
                if path.endswith("/" + PAYLOAD_NAME) and os.path.exists(path):
                    return path
    except OSError:
        pass
    return None


def _candidates(name, subdir, env):
    out = []
    if os.environ.get(env):
        return [os.environ[env]]
    # a wheel: site-packages/memtrace/ holds the libraries
    out.append(os.path.join(_HERE, name))
    # installed: <libdir>/memtrace/python/memtrace/ -> <libdir>/memtrace/
    out.append(os.path.join(_HERE, os.pardir, os.pardir, name))
    build = os.environ.get("MEMTRACE_BUILD_DIR")
    if build:
        out.append(os.path.join(build, subdir, name))
    payload = os.environ.get("MEMTRACE_PAYLOAD")
    if payload:
        out.append(os.path.join(os.path.dirname(payload), os.pardir, subdir, name))
    # a source tree: python/memtrace/ -> build/
    out.append(os.path.join(_HERE, os.pardir, os.pardir, "build", subdir, name))
    return out


def _find(name, subdir, env):
    tried = _candidates(name, subdir, env)
    for path in tried:
        if os.path.isfile(path):
            return os.path.realpath(path)
    hint = ("set %s to its path" % env) if not os.environ.get(env) else "check %s" % env
    raise ImportError("memtrace: cannot find %s (looked at: %s); %s"
                      % (name, ", ".join(os.path.normpath(p) for p in tried), hint))


class _Config(ctypes.Structure):
    """struct memtrace_config of payload/memtrace-payload.h."""
    PATH_MAX = 4096
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("interval_ms", ctypes.c_uint32),
        ("fd", ctypes.c_int32),
        ("path", ctypes.c_char * PATH_MAX),
        ("root", ctypes.c_char * 64),
        ("cmdline", ctypes.c_char_p),
        ("cmdline_len", ctypes.c_uint64),
    ]


def payload():
    """The loaded payload, with memtrace_payload_start/stop declared."""
    global _payload
    with _lock:
        if _payload is None:
            path = _mapped_payload() or _find(PAYLOAD_NAME, "payload", "MEMTRACE_PAYLOAD")
            # PyDLL keeps the GIL across the calls: nothing else in this
            # process runs Python code while tracking starts or stops.
            lib = ctypes.PyDLL(path)
            lib.memtrace_payload_start.argtypes = [ctypes.POINTER(_Config)]
            lib.memtrace_payload_start.restype = ctypes.c_int
            lib.memtrace_payload_stop.argtypes = []
            lib.memtrace_payload_stop.restype = ctypes.c_int
            lib.path = path
            _payload = lib
        return _payload


# ---------------------------------------------------------------------------
# The reader's ctypes interface (reader/pyapi.h).
# ---------------------------------------------------------------------------
ABI = 7
_u64 = ctypes.c_uint64


class Meta(ctypes.Structure):
    _fields_ = [(n, _u64) for n in (
        "abi", "pid", "python_hex", "flags", "start_ns", "end_time_us", "interval_ms",
        "main_tid", "peak_heap", "peak_event", "n_events", "n_allocs", "n_frees",
        "heap_end", "leak_count", "n_dropped", "have_trailer", "truncated", "peak_rss",
        "n_samples", "n_threads", "n_diags", "cmdline_len")] + [
        ("cmdline", ctypes.POINTER(ctypes.c_char)), ("n_frames", _u64)]


class Record(ctypes.Structure):
    _fields_ = [
        ("tid", _u64),
        ("address", _u64),
        ("size", _u64),
        ("n_allocations", _u64),
        ("allocator", ctypes.c_uint32),
        ("stack", ctypes.c_uint32),
        ("thread", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class Interval(ctypes.Structure):
    _fields_ = [("rec", Record), ("a", _u64), ("f", _u64)]


class HwmRun(ctypes.Structure):
    _fields_ = [("rec", Record), ("as_of", _u64)]


class Frame(ctypes.Structure):
    _fields_ = [
        ("function", ctypes.c_char_p),
        ("file", ctypes.c_char_p),
        ("line", ctypes.c_int64),
        ("native", ctypes.c_int64),
    ]


class Sample(ctypes.Structure):
    _fields_ = [("time_us", _u64), ("rss", _u64), ("heap", _u64), ("in_use", _u64),
                ("malloc_bytes", _u64), ("malloc_chunks", _u64)]


WRITE_FN = ctypes.CFUNCTYPE(ctypes.c_ssize_t, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char),
                            ctypes.c_size_t)


def reader():
    """The loaded reader library, with its functions declared."""
    global _reader
    with _lock:
        if _reader is not None:
            return _reader
        path = _find(READER_NAME, "reader", "MEMTRACE_READER_LIB")
        lib = ctypes.CDLL(path)
        vp, sz, ssz = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ssize_t
        decl = {
            "mt_py_abi": ([], ctypes.c_int),
            "mt_py_open": ([ctypes.c_char_p, ctypes.POINTER(vp), ctypes.c_char_p, sz], ctypes.c_int),
            "mt_py_close": ([vp], None),
            "mt_py_follow": ([ctypes.c_char_p, ctypes.POINTER(vp)], ctypes.c_int),
            "mt_py_refresh": ([vp, ctypes.c_char_p, sz], ctypes.c_int),
            "mt_py_meta": ([vp, ctypes.POINTER(Meta)], None),
            "mt_py_warnings": ([vp], ctypes.c_char_p),
            "mt_py_diag": ([vp, sz, ctypes.POINTER(ctypes.c_uint32)], ctypes.c_char_p),
            "mt_py_python_allocator": ([vp], ctypes.c_char_p),
            "mt_py_events_open": ([vp, ctypes.POINTER(vp)], ctypes.c_int),
            "mt_py_events_next": ([vp, vp, ctypes.POINTER(ctypes.POINTER(Record))], ssz),
            "mt_py_events_close": ([vp], None),
            "mt_py_view": ([vp, ctypes.c_int, ctypes.c_int, _u64,
                            ctypes.POINTER(ctypes.POINTER(Record))], ssz),
            "mt_py_temporal": ([vp, ctypes.POINTER(ctypes.POINTER(Interval))], ssz),
            "mt_py_temporal_hwm": ([vp, _u64, ctypes.POINTER(ctypes.POINTER(HwmRun)),
                                    ctypes.POINTER(ctypes.POINTER(_u64)), ctypes.POINTER(sz)], ssz),
            "mt_py_free": ([vp], None),
            "mt_py_stack": ([vp, ctypes.c_uint32, ctypes.POINTER(Frame), sz], sz),
            "mt_py_native_stack": ([vp, ctypes.c_uint32, ctypes.POINTER(Frame), sz,
                                    ctypes.POINTER(ctypes.c_uint32),
                                    ctypes.POINTER(ctypes.c_uint32)], sz),
            "mt_py_hybrid_stack": ([vp, ctypes.c_uint32, ctypes.POINTER(Frame), sz], sz),
            "mt_py_path_key": ([vp, ctypes.c_uint32], ctypes.c_uint64),
            "mt_py_thread": ([vp, ctypes.c_uint32, ctypes.POINTER(_u64),
                              ctypes.POINTER(ctypes.c_char_p)], ctypes.c_int),
            "mt_py_samples": ([vp, ctypes.POINTER(sz)], ctypes.POINTER(Sample)),
            "mt_py_dump": ([ctypes.c_char_p, WRITE_FN, vp, ctypes.c_char_p, sz], ctypes.c_int),
        }
        lib.mt_py_abi.argtypes, lib.mt_py_abi.restype = [], ctypes.c_int
        if lib.mt_py_abi() != ABI:
            raise ImportError("memtrace: %s has interface version %d, this package needs %d"
                              % (path, lib.mt_py_abi(), ABI))
        for name, (args, res) in decl.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = res
        lib.path = path
        _reader = lib
        return _reader


def command():
    """The memtrace executable: MEMTRACE_BIN, a build tree's, the one
    installed with this package (<prefix>/bin beside <prefix>/lib...), or
    the one on PATH."""
    if os.environ.get("MEMTRACE_BIN"):
        return os.environ["MEMTRACE_BIN"]
    here = _HERE
    tried = []
    build = os.environ.get("MEMTRACE_BUILD_DIR")
    if build:
        tried.append(os.path.join(build, "cli", "memtrace"))
    tried.append(os.path.join(here, os.pardir, os.pardir, "build", "cli", "memtrace"))
    up = here
    for _ in range(6):
        up = os.path.dirname(up)
        tried.append(os.path.join(up, "bin", "memtrace"))
    for path in tried:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.normpath(path)
    return shutil.which("memtrace")
