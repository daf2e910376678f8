"""memtrace.Tracker: track this process's allocations into a capture.

The Tracker loads the same payload that `memtrace run` preloads and
`memtrace attach` injects, and calls its exported start and stop
functions. Tracking covers every thread of the process from the moment
the `with` block is entered until it is left.
"""

import ctypes
import dataclasses
import enum
import errno
import logging
import os
import stat
import sys
import threading

from . import _native

__all__ = ["Destination", "FileDestination", "SocketDestination", "FileFormat", "Tracker",
           "set_log_level", "start_thread_trace"]

logger = logging.getLogger("memtrace")

# memtrace's own error codes, 4097 on, in the order of format/error.h's MT_ERRORS
_MT_ERRORS = (
    "not a memtrace capture",
    "unsupported capture format version",
    "capture is truncated",
    "capture is corrupt",
    "target is not a supported CPython process",
    "ptrace is not permitted",
    "payload failed",
    "memtrace's writer thread crashed",
    "the program closed the capture's file descriptor",
    "not a regular file",
    "capture file was replaced while it was followed",
)


def _strerror(code):
    """Message for errno or memtrace error @code (sign ignored)."""
    code = abs(code)
    if 4096 < code <= 4096 + len(_MT_ERRORS):
        return _MT_ERRORS[code - 4097]
    return os.strerror(code) if code < 4096 else "error %d" % code

# format/record.h: MT_HDR_*
_HDR_PYALLOC = 1 << 1
_HDR_NATIVE = 1 << 2
_HDR_FOLLOW_FORK = 1 << 3
_HDR_AGGREGATED = 1 << 5
_HDR_TRACKER = 1 << 8


class FileFormat(enum.IntEnum):
    """How allocations are written to the capture."""
    #: every allocation and free, with its stack (memray's numbers)
    ALL_ALLOCATIONS = 0
    #: per-stack totals kept in the process, written at the end
    AGGREGATED_ALLOCATIONS = 1


class Destination:
    """Where a Tracker sends its records."""


@dataclasses.dataclass(frozen=True)
class FileDestination(Destination):
    """A capture file.

    overwrite: replace the file if it exists (otherwise FileExistsError).
    The capture is always a new file, never opened through a symbolic
    link: an existing file (or link) is replaced by a new file renamed over
    it, and a path that is anything else (a FIFO, a device but /dev/null,
    a directory) is an error.
    compress_on_exit: accepted for compatibility. memtrace compresses each
    chunk of records as it writes it, so there is no separate compression
    step at exit to turn on or off.
    buffered: accepted for compatibility (memray 1.20's choice between a
    mapped file and write(2)): memtrace always writes with write(2).
    """
    path: "str | os.PathLike[str]"
    overwrite: bool = False
    compress_on_exit: bool = True
    buffered: bool = False


@dataclasses.dataclass(frozen=True)
class SocketDestination(Destination):
    """Stream the records to one `memtrace live PORT` client: making the
    Tracker listens on (address, server_port) and waits for it to connect,
    as memray's does.
    """
    server_port: int
    address: str = "127.0.0.1"


def _is_null_device(path):
    """@path is /dev/null, or another name of that device."""
    try:
        st = os.stat(path)
        return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.stat("/dev/null").st_rdev
    except (OSError, ValueError):
        return False


def _std_stream(path):
    """1 or 2 if @path is a symbolic link to this process's standard output
    or error (/dev/stdout, /dev/fd/2), else 0; as the commands'
    mt_cli_std_stream()."""
    try:
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            return 0
        st = os.stat(path)
    except (OSError, ValueError):
        return 0
    for fd in (1, 2):
        try:
            other = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino):
            return fd
    return 0


def _refuse_existing(path, overwrite, name):
    """What is at @path (which exists) if a capture may not replace it:
    the error, raised. A link to a standard stream is never replaced: as
    root that would have been the system's /dev/stdout."""
    fd = _std_stream(path)
    if fd:
        raise OSError(errno.EINVAL, "capture path is standard %s, not a file"
                      % ("output", "error")[fd - 1], name)
    mode = os.lstat(path).st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "capture path is a directory", name)
    if not stat.S_ISREG(mode) and not stat.S_ISLNK(mode):
        raise OSError(errno.EINVAL, "capture path is not a regular file", name)
    if not overwrite:
        raise FileExistsError(errno.EEXIST, "capture file exists (use "
                              "FileDestination(path, overwrite=True) to replace it)", name)


def _create_capture(path, overwrite, name):
    """A new regular file at @path, open for writing: made O_EXCL and
    O_NOFOLLOW, so never through a symbolic link. An existing file or link
    is replaced (with @overwrite) by a new file made under a temporary name
    in the same directory and renamed over it; anything else there is an
    error, and never opened. @name: the path as given, for errors."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o600)
    except FileExistsError:
        pass
    _refuse_existing(path, overwrite, name)
    for _ in range(64):
        tmp = os.path.join(os.path.dirname(path), ".memtrace-%s.tmp" % os.urandom(8).hex())
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileExistsError:
            continue
        try:
            os.rename(tmp, path)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        return fd
    raise FileExistsError(errno.EEXIST, "no temporary name free beside the capture", name)


def _peer_uid(conn):
    """The uid of the process at the other end of a connection on this
    machine (/proc/net/tcp, where its socket has our ends swapped), or -1."""
    import socket
    def key(addr):
        return "%08X:%04X" % (int.from_bytes(socket.inet_aton(addr[0]), "little"), addr[1])
    want = (key(conn.getpeername()), key(conn.getsockname()))
    try:
        with open("/proc/net/tcp") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 7 and (fields[1], fields[2]) == want:
                    return int(fields[7])
    except OSError:
        pass
    return -1


def _peer_allowed(uid):
    """Whether a peer of this uid may talk to us: the same user, or root; a uid
    that cannot be told (-1) may not. The rule of format/peer.h
    (mt_peer_allowed(), used by the payload's control socket and by
    `memtrace run --live-remote`), which this plain-Python copy must
    follow."""
    return uid >= 0 and (uid == os.getuid() or uid == 0)


_MASK64 = (1 << 64) - 1


def _root_mark(frame):
    """The frames below @frame (the one that entered the Tracker), as the
    reader recognises them: "<depth> <hash>" of their (file, line) pairs,
    outermost first (reader/stacks.c, mt_stacks_cut()); "" if it is the
    outermost frame. The reader then shows this thread's stacks from
    @frame on, as memray does: what called the Tracker is not profiled."""
    try:
        from zlib import crc32
    except ImportError:
        return ""
    chain = []
    f = frame.f_back
    while f is not None:
        chain.append((f.f_code.co_filename, f.f_lineno or 0))
        f = f.f_back
    h = 0
    for filename, line in reversed(chain):
        crc = crc32(filename.encode("utf-8", "surrogateescape"))
        h = ((h * 1000003) ^ crc ^ (line * 0x9E3779B1)) & _MASK64
    return "%d %016x" % (len(chain), h) if chain else ""


_active_lock = threading.Lock()
_active = None  # the Tracker currently tracking, if any


class Tracker:
    """Context manager that records every allocation made in its block.

    with memtrace.Tracker("profile.bin"):
        work()

    Exactly one of file_name and destination is given. Only one Tracker can
    be active in a process at a time, and none while the process runs under
    `memtrace run` or has been attached to: entering raises RuntimeError.
    """

    def __init__(self, file_name=None, *, destination=None, native_traces=False,
                 memory_interval_ms=10, follow_fork=False, trace_python_allocators=False,
                 track_object_lifetimes=False, file_format=FileFormat.ALL_ALLOCATIONS):
        # memray's exception types and messages, which its users' code may match
        if (file_name is None) == (destination is None):
            raise TypeError("Exactly one of 'file_name' or 'destination' argument must be specified")
        if track_object_lifetimes:
            # memray's exception where it cannot track them (before 3.13.3)
            raise RuntimeError("memtrace does not track Python object lifetimes "
                               "(track_object_lifetimes=True)")
        if destination is None:
            destination = FileDestination(file_name)
        if not isinstance(destination, Destination):
            raise TypeError("memtrace.Tracker: destination must be a FileDestination or "
                            "SocketDestination, not %s" % type(destination).__name__)
        if not isinstance(destination, (FileDestination, SocketDestination)):
            raise TypeError("memtrace.Tracker: unsupported destination %r" % (destination,))
        file_format = FileFormat(file_format)
        if not isinstance(destination, FileDestination):
            if follow_fork:  # a child's capture goes to a file beside its parent's
                raise RuntimeError("follow_fork requires an output file")
            if file_format != FileFormat.ALL_ALLOCATIONS:
                raise RuntimeError("AGGREGATED_ALLOCATIONS requires an output file")
        if isinstance(memory_interval_ms, bool) or not isinstance(memory_interval_ms, int):
            raise TypeError("memtrace.Tracker: memory_interval_ms must be an int")
        if not 1 <= memory_interval_ms <= 3600000:
            raise ValueError("memtrace.Tracker: memory_interval_ms must be in 1..3600000, not %d"
                             % memory_interval_ms)
        if isinstance(destination, FileDestination):
            # memray's Tracker makes its file when it is made: what would
            # stop it is said now too (the file itself is made on entry)
            given = os.fspath(destination.path)
            if not given:  # abspath() would make it the current directory
                raise FileNotFoundError(errno.ENOENT, "capture path is empty", given)
            if not _is_null_device(given) and os.path.lexists(given):
                _refuse_existing(given, destination.overwrite, given)
        self.destination = destination
        self.native_traces = bool(native_traces)
        self.memory_interval_ms = memory_interval_ms
        self.follow_fork = bool(follow_fork)
        self.trace_python_allocators = bool(trace_python_allocators)
        self.file_format = file_format
        self._pid = None
        self._used = False  # a Tracker tracks once, as memray's
        self._created = False
        self._cfg = None
        # memray's command line, " ".join(sys.argv) as the Tracker is made:
        # here the arguments with a NUL between them, as /proc/self/cmdline
        # has them
        self._argv = b"\0".join(os.fsencode(a) for a in getattr(sys, "argv", None) or ())
        self._client = None
        if isinstance(destination, SocketDestination):
            # as memray's, the Tracker is made once a client has connected
            self._client = self._accept_client()

    def __del__(self):
        client = getattr(self, "_client", None)
        if client is not None:  # made, never entered
            self._client = None
            os.close(client)

    def __repr__(self):
        return "<memtrace.Tracker %r%s>" % (self.destination, " active" if self._pid else "")

    def get_surviving_objects(self):
        """memray's objects still alive when a Tracker made with
        track_object_lifetimes=True ended: memtrace does not track them, so
        this is memray's error for a Tracker made without."""
        raise RuntimeError("track_object_lifetimes=True was not provided at Tracker construction")

    def _claim(self):
        global _active
        with _active_lock:
            # memray's checks, in its order, with its words: this Tracker
            # entered again in its own block is a second one at a time
            if _active is not None and _active._pid == os.getpid():
                raise RuntimeError("No more than one Tracker instance can be active at the "
                                   "same time")
            if self._used or _active is self:
                raise RuntimeError("Attempting to use stale output handle")
            _active = self

    def _release(self):
        global _active
        with _active_lock:
            if _active is self:
                _active = None

    def _prepare_file(self):
        """Create the capture (see _create_capture): its absolute path and
        its descriptor, which the payload owns from then on."""
        dest = self.destination
        given = os.fspath(dest.path)
        if _is_null_device(given):
            # thrown away as it is written, as memray's null sink; no
            # name for a followed child's capture (it runs untracked)
            return b"", os.open(given, os.O_WRONLY | os.O_CLOEXEC)
        path = os.path.abspath(given)
        encoded = os.fsencode(path)
        if len(encoded) >= _native._Config.PATH_MAX:
            raise OSError(errno.ENAMETOOLONG, "capture path too long", given)
        fd = _create_capture(path, dest.overwrite, given)
        self._created = True
        return encoded, fd

    def _where(self):
        dest = self.destination
        if isinstance(dest, SocketDestination):
            return "%s:%d" % (dest.address, dest.server_port)
        return os.fspath(dest.path)

    def _accept_client(self):
        """Listen on the destination's port and wait for one client: the
        connection's descriptor, which the payload owns from then on."""
        import socket
        dest = self.destination
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind((dest.address, dest.server_port))
            srv.settimeout(None)  # whatever socket.setdefaulttimeout() says
            srv.listen(1)
            while True:
                conn, peer = srv.accept()
                # a client on this machine must be of our user (or root)
                uid = _peer_uid(conn) if peer[0].startswith("127.") else None
                if uid is None or _peer_allowed(uid):
                    break
                logger.warning("memtrace: turned away a live client of another user (uid %s)",
                               uid)
                conn.close()
        conn.setblocking(True)
        return conn.detach()

    def __enter__(self):
        self._claim()
        remote = isinstance(self.destination, SocketDestination)
        try:
            lib = _native.payload()
            if remote:  # the client the constructor waited for
                if self._client is None:  # given to a start that failed
                    raise RuntimeError("Attempting to use stale output handle")
                path, fd = b"", self._client
                self._client = None
            else:
                path, fd = self._prepare_file()
        except BaseException:
            self._release()
            raise
        cfg = _native._Config()
        cfg.size = ctypes.sizeof(cfg)
        cfg.flags = (_HDR_TRACKER | (_HDR_PYALLOC if self.trace_python_allocators else 0)
                     | (_HDR_NATIVE if self.native_traces else 0)
                     | (_HDR_FOLLOW_FORK if self.follow_fork else 0)
                     | (_HDR_AGGREGATED if self.file_format == FileFormat.AGGREGATED_ALLOCATIONS
                        else 0))
        cfg.interval_ms = self.memory_interval_ms
        cfg.fd = fd
        cfg.path = path
        cfg.root = _root_mark(sys._getframe(1)).encode("ascii")
        # the cfg keeps the bytes while tracking
        cfg.cmdline, cfg.cmdline_len = self._argv, len(self._argv)
        ref = ctypes.byref(cfg)
        # The config's buffer is malloc'ed: it must not be freed while
        # tracking, or its free would be the capture's first event.
        self._cfg = (cfg, ref)
        start = lib.memtrace_payload_start
        self._stop = lib.memtrace_payload_stop
        self._pid = os.getpid()
        # Tracking starts inside this call: nothing of ours comes after it.
        rc = start(ref)
        if rc == 0:
            self._used = True
            return self
        self._pid = None
        self._release()
        if self._created:
            try:
                os.unlink(path)
            except OSError:
                pass
        if rc == -errno.EBUSY:
            # memray's words, then which tracking it is
            raise RuntimeError("No more than one Tracker instance can be active at the same "
                               "time: this process is already being tracked (by `memtrace "
                               "run`, `memtrace attach` or another Tracker)")
        raise OSError(-rc, "memtrace.Tracker: cannot start tracking: %s"
                      % _strerror(rc), self._where())

    def __exit__(self, exc_type, exc, tb):
        # A fork child leaves the block too: with follow_fork its own
        # capture (<path>.<pid>) ends here; without, it has none.
        child = self._pid is not None and self._pid != os.getpid()
        rc = self._stop() if self._pid == os.getpid() or (child and self.follow_fork) else 0
        pid, self._pid = self._pid, None
        self._cfg = None
        self._release()
        if pid is None or rc == 0 or (child and rc == -errno.EINVAL):
            return False
        if rc == -errno.EINVAL:
            logger.warning("memtrace: tracking had already been stopped (memtrace detach?)")
            return False
        path = self._where()
        if child:  # the child's own capture
            path = "%s.%d" % (path, os.getpid())
        # As memray's: said, and the program goes on (a live client that
        # went away, a full disk); tracking stopped where the writing failed.
        logger.error("memtrace.Tracker: the capture was not written completely: %s: %s",
                     _strerror(rc), path)
        return False


def set_log_level(level):
    """Set the level of memtrace's Python logger ("memtrace"), by which the
    package reports problems with a capture or with tracking. The payload
    itself never prints into the tracked process."""
    logger.setLevel(level)


def start_thread_trace(frame, event, arg):
    """Compatibility function for threading.setprofile().

    memtrace reads Python stacks by walking the interpreter's own frames, so
    threads need no per-thread trace function. This one removes itself on
    its first call so that it costs nothing afterwards."""
    sys.setprofile(None)
    return None
