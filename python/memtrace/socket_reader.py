"""memtrace.SocketReader: what a process tracked with `memtrace run
--live-remote` or a Tracker's SocketDestination holds now, read from its
port while it runs, as memray's SocketReader reads it.

    with memtrace.SocketReader(port=12345) as reader:
        while reader.is_active:
            for rec in reader.get_current_snapshot(merge_threads=True):
                print(rec.size, rec.stack_trace())

A thread of the reader's takes the stream as it comes into an unlinked
temporary file, which the reader library follows (reader/follow.h): each
get_current_snapshot() reads what came since the last one, so that it
costs the new events, not the whole history.
"""

import ctypes
import errno
import os
import socket
import threading
import time
import weakref

from . import _native
from .reader import CaptureError, FileReader, _Capture, _decode, _err_buf

__all__ = ["SocketReader"]

# How long __enter__ tries a port where nothing listens yet (the sender
# may be about to), and then waits for the capture's header.
CONNECT_WAIT_S = 10.0
HEADER_WAIT_S = 30.0

_EFORMAT, _ETRUNC = 4097, 4099  # format/error.h: no header yet
_HEADER_MAX = 52 + 4096  # format/record.h: MT_HDR_FIXED + MT_CMDLINE_MAX


class _LockedLib:
    """The reader library's functions, each call under one lock: the
    stream is read and viewed in calls that must not overlap the record
    queries of other threads (ctypes lets the GIL go during a call). The
    strings a call returns are the snapshot's, valid until the next
    refresh: they are copied under the same lock (_View)."""

    def __init__(self, lib, lock):
        self.raw, self.lock = lib, lock

    def __getattr__(self, name):
        fn = getattr(self.raw, name)
        lock = self.lock

        def call(*args):
            with lock:
                return fn(*args)
        setattr(self, name, call)
        return call


class _View(FileReader):
    """The stream as the last refresh read it, for the records it gives:
    they resolve their stacks and thread names through it (ids keep
    their meaning from one snapshot to the next). Made under the lock."""

    def __init__(self, owner):  # pylint: disable=super-init-not-called
        self._lib = owner._lib
        self._keep = owner._keep
        self._capture = weakref.ref(self._keep)
        self.path = owner._where
        self._max_memory_records = 10000
        self._snapshots = None
        self._stacks, self._natives, self._hybrids = {}, {}, {}
        self._path_keys, self._pyframes, self._threads = {}, {}, {}
        self._owner = weakref.ref(owner)
        self._metadata = self._read_metadata()

    def _records_handle(self):
        owner = self._owner()
        if owner is not None and owner._broken:
            raise ValueError("memtrace.SocketReader: %s sent a corrupt capture: what was read "
                             "of it is gone" % self.path)
        return FileReader._records_handle(self)

    def _frames_of(self, fn, stack_id, room, *out):
        # the frames' strings copied before a refresh can free them
        with self._lib.lock:
            return [_Frame(f.function, f.file, f.line, f.native)
                    for f in FileReader._frames_of(self, fn, stack_id, room, *out)]

    def _thread_name(self, index):
        with self._lib.lock:
            return FileReader._thread_name(self, index)


class _Frame:
    __slots__ = ("function", "file", "line", "native")

    def __init__(self, function, file, line, native):
        self.function, self.file, self.line, self.native = function, file, line, native


class SocketReader:
    """Reads a capture sent to 127.0.0.1:@port while the tracked process
    runs. Entering connects (trying again for up to 10 s while nothing
    listens) and waits for the capture's header; leaving disconnects."""

    def __init__(self, port):
        if isinstance(port, bool) or not isinstance(port, int):
            raise TypeError("an integer is required (port), not %s" % type(port).__name__)
        if not 1 <= port <= 65535:
            raise ValueError("memtrace.SocketReader: port must be in 1..65535, not %d" % port)
        self._port = port
        self._where = "127.0.0.1:%d" % port
        self._sock = None
        self._file = None
        self._thread = None
        self._eof = threading.Event()
        self._error = None   # what stopped the stream's thread, if not the end
        self._received = 0
        self._lib = None
        self._keep = None    # the _Capture: records keep it too
        self._view = None    # the last refresh's, while entered
        self._meta = None    # its metadata, kept after leaving
        self._broken = False

    # -- connection -----------------------------------------------------
    def _connect(self):
        give_up = time.monotonic() + CONNECT_WAIT_S
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
                s.connect(("127.0.0.1", self._port))
                return s
            except ConnectionRefusedError:
                s.close()
                if time.monotonic() >= give_up:
                    raise ConnectionRefusedError(
                        errno.ECONNREFUSED, "memtrace.SocketReader: nothing listens on %s "
                        "(tried for %g s)" % (self._where, CONNECT_WAIT_S)) from None
                time.sleep(0.1)
            except BaseException:
                s.close()
                raise

    def _pump(self):
        """The stream's thread: what comes goes to the file, until the
        sender closes or the reader leaves."""
        buf = bytearray(1 << 16)
        view = memoryview(buf)
        try:
            while True:
                n = self._sock.recv_into(buf)
                if n <= 0:
                    break
                off = 0
                while off < n:
                    off += os.write(self._file.fileno(), view[off:n])
                self._received += n
        except OSError as e:
            if not self._eof.is_set():
                self._error = e
        finally:
            self._eof.set()

    def _check_stream(self):
        """What stopped the stream's thread other than the end (the
        temporary file full, say), raised."""
        e = self._error
        if e is not None:
            raise OSError(e.errno, "memtrace.SocketReader: cannot keep what %s sends: %s"
                          % (self._where, e.strerror or e))

    def _refresh(self):
        """Read what came since the last refresh and view it: (0, "") or
        (error code, its sentence)."""
        err = _err_buf()
        with self._lib.lock:
            rc = self._lib.raw.mt_py_refresh(self._keep.handle, err, len(err))
            if rc < 0:
                msg = _decode(err.value).replace("cannot read '%s': " % self._path, "")
                return -rc, msg.replace(self._path, self._where)
            self._broken = False
            self._view = _View(self)
            self._meta = self._view.metadata
            return 0, ""

    def _wait_for_header(self):
        give_up = time.monotonic() + HEADER_WAIT_S
        while True:
            done = self._eof.is_set()
            had = self._received  # in the file before the refresh read it
            code, msg = self._refresh()
            if code == 0:
                return
            self._check_stream()
            # a header is at most 52 + 4096 bytes; its first 8 say whether
            # it is a capture's at all
            waiting = ((code == _ETRUNC and had < _HEADER_MAX)
                       or (code == _EFORMAT and had < 8))
            if not waiting or done:
                if self._received == 0:
                    raise ConnectionError("memtrace.SocketReader: %s closed the connection "
                                          "before sending a capture" % self._where)
                raise CaptureError(errno.EINVAL, "memtrace.SocketReader: %s does not send a "
                                   "memtrace capture: %s" % (self._where, msg))
            if time.monotonic() >= give_up:
                raise TimeoutError("memtrace.SocketReader: no capture header from %s in %g s"
                                   % (self._where, HEADER_WAIT_S))
            self._eof.wait(0.05)

    def __enter__(self):
        if self._sock is not None:
            raise ValueError("Can not enter the context of a SocketReader object more than "
                             "once, at the same time.")  # memray's words
        self._eof.clear()
        self._error, self._received, self._view, self._meta = None, 0, None, None
        self._broken = False
        self._sock = self._connect()
        try:
            import tempfile
            self._file = tempfile.TemporaryFile(prefix="memtrace-socket-")
            lib = _native.reader()
            self._lib = _LockedLib(lib, threading.RLock())
            handle = ctypes.c_void_p()
            self._path = "/proc/self/fd/%d" % self._file.fileno()
            rc = lib.mt_py_follow(self._path.encode(), ctypes.byref(handle))
            if rc < 0:
                raise MemoryError("memtrace.SocketReader: out of memory")
            self._keep = _Capture(lib, handle)
            self._thread = threading.Thread(target=self._pump, name="memtrace-socket-reader",
                                            daemon=True)
            self._thread.start()
            self._wait_for_header()
        except BaseException:
            self._disconnect()
            self._keep = None
            raise
        return self

    def _disconnect(self):
        if self._sock is not None:
            self._eof.set()
            try:
                self._sock.shutdown(socket.SHUT_RDWR)  # the thread's recv returns
            except OSError:
                pass
            if self._thread is not None:
                self._thread.join()
            self._sock.close()
        if self._file is not None:
            self._file.close()
        self._sock = self._file = self._thread = None

    def __exit__(self, exc_type, exc, tb):
        self._disconnect()
        # the stream's file and snapshot go now, unless records given
        # still hold them; the metadata stays
        self._keep = self._view = None
        return False

    # -- what memray's SocketReader tells -------------------------------
    @property
    def is_active(self):
        """True while connected and the sender has not closed."""
        return self._sock is not None and not self._eof.is_set()

    @property
    def command_line(self):
        return self._meta.command_line if self._meta is not None else None

    @property
    def pid(self):
        return self._meta.pid if self._meta is not None else None

    @property
    def has_native_traces(self):
        return self._meta.has_native_traces if self._meta is not None else False

    @property
    def metadata(self):
        """The capture's Metadata as of the last snapshot (memtrace's)."""
        return self._meta

    def get_current_snapshot(self, *, merge_threads):
        """The allocations live now, grouped by call path (and thread,
        unless @merge_threads) as the leaks view groups them; nothing when
        the reader is not entered. Raises CaptureError if the stream turns
        out corrupt."""
        if self._sock is None or self._keep is None:
            return
        self._check_stream()
        code, msg = self._refresh()
        if code != 0:
            self._broken = True
            raise CaptureError(errno.EINVAL, "memtrace.SocketReader: %s: %s"
                               % (self._where, msg))
        view = self._view
        yield from view._records(view._lib.mt_py_view, 1, int(bool(merge_threads)), 0)

    def __repr__(self):
        return "<memtrace.SocketReader %s%s>" % (self._where,
                                                 " active" if self.is_active else "")
