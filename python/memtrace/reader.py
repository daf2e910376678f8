"""memtrace.FileReader: read a capture from Python.

A thin layer over libmemtrace-reader.so, the parser the memtrace command
uses: every number here is computed in C, so scripts see exactly what the
reports show. Names follow memray's FileReader so that scripts written for
it port by changing the import.
"""

import collections
import ctypes
import datetime
import errno
import os
import sys
import warnings
import weakref

from . import _native
from ._records import (_FROM_FORMAT, _HDR_AGGREGATED, _HDR_ATTACHED, _HDR_FOLLOW_FORK,
                       _HDR_FORKED, _HDR_NATIVE, _HDR_PYALLOC, MERGED_THREAD_NAME,
                       AllocationRecord, AllocatorType, CaptureError, Interval, MemorySnapshot,
                       Metadata, TemporalAllocationRecord, _name)

__all__ = ["AllocatorType", "AllocationRecord", "CaptureError", "FileReader", "Interval",
           "MemorySnapshot", "Metadata", "TemporalAllocationRecord", "dump_all_records"]


def _err_buf():
    # a message quotes the capture's path, which may be as long as PATH_MAX
    return ctypes.create_string_buffer(4096 + 1024)


def _decode(b):
    return b.decode("utf-8", "replace") if b is not None else ""


class _Capture:
    """The capture as the reader library holds it, closed when the last
    of its holders goes: the FileReader until close(), and every record
    it gave (their stacks are read from it)."""

    __slots__ = ("lib", "handle", "__weakref__")

    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle

    def __del__(self):
        try:
            self.lib.mt_py_close(self.handle)
        except Exception:
            pass


def _c_path(path):
    """@path as the C reader takes it, a C string: bytes that end at a NUL.
    A path holding one is refused, as open() refuses it, rather than read
    cut short."""
    encoded = os.fsencode(path)
    if b"\0" in encoded:
        raise ValueError("embedded null byte")
    return encoded


class FileReader:
    """An open capture.

    reader = memtrace.FileReader("profile.bin")
    for rec in reader.get_high_watermark_allocation_records():
        print(rec.size, rec.stack_trace())

    Records stay usable while the reader is open (they resolve their
    stacks through it); close() or the `with` statement releases it.
    max_memory_records bounds get_memory_snapshots() (evenly thinned);
    report_progress is accepted for compatibility and shows nothing.
    """

    def __init__(self, file_name, *, report_progress=False, max_memory_records=10000):
        if not isinstance(max_memory_records, int) or max_memory_records < 1:
            raise ValueError("max_memory_records must be a whole number from 1, not %r"
                             % (max_memory_records,))
        self._lib = _native.reader()
        self._keep = None     # the _Capture, until close(): None once closed
        self._snapshots = None  # get_memory_snapshots()'s, once read
        self._capture = None  # a weak reference to it: records may keep it
        self.path = os.fspath(file_name)
        self._max_memory_records = max_memory_records
        handle = ctypes.c_void_p()
        err = _err_buf()
        rc = self._lib.mt_py_open(_c_path(self.path), ctypes.byref(handle), err, len(err))
        if rc < 0:
            msg = _decode(err.value)
            if -rc == 2:
                raise FileNotFoundError(2, msg, self.path)
            if 0 < -rc < 4096:
                raise OSError(-rc, msg, self.path)
            raise CaptureError(errno.EINVAL, msg, self.path)
        self._keep = _Capture(self._lib, handle)
        self._capture = weakref.ref(self._keep)
        self._stacks = {}
        self._natives = {}
        self._hybrids = {}
        self._path_keys = {}
        self._pyframes = {}
        self._threads = {}
        for line in _decode(self._lib.mt_py_warnings(handle)).splitlines():
            warnings.warn("memtrace: %s: %s" % (self.path, line), RuntimeWarning, stacklevel=2)
        self._metadata = self._read_metadata()

    # -- lifetime -------------------------------------------------------
    def close(self):
        """Close the reader: its methods fail from now on. The records it
        gave keep their stacks, as memray's do: the capture's tables go
        with the last of them (at once if none is left). The metadata and
        get_memory_snapshots() stay, as memray's."""
        if self._keep is not None and self._snapshots is None:
            self._snapshots = self._read_snapshots()
        self._keep = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def closed(self):
        return self._keep is None

    def _records_handle(self):
        """The capture's handle for what records ask (their stacks, thread
        names): there after close() while records keep the capture."""
        capture = self._capture() if self._capture is not None else None
        if capture is None:
            raise ValueError("Operation on a closed FileReader")  # memray's words
        return capture.handle

    def _h(self):
        if self._keep is None:
            raise ValueError("Operation on a closed FileReader")  # memray's words
        return self._keep.handle

    # -- metadata -------------------------------------------------------
    def _read_metadata(self):
        m = _native.Meta()
        self._lib.mt_py_meta(self._h(), ctypes.byref(m))
        cmd = ctypes.string_at(m.cmdline, m.cmdline_len) if m.cmdline_len else b""
        hexv = m.python_hex
        pyver = ("%d.%d.%d" % (hexv >> 24, (hexv >> 16) & 0xff, (hexv >> 8) & 0xff)) if hexv else ""
        try:
            start = datetime.datetime.fromtimestamp(m.start_ns / 1e9).astimezone()
            end = start + datetime.timedelta(microseconds=m.end_time_us)
        except (OverflowError, OSError, ValueError):
            raise CaptureError(errno.EINVAL, "capture is corrupt: its times are out of range",
                               self.path) from None
        diags = []
        for i in range(m.n_diags):
            code = ctypes.c_uint32()
            msg = self._lib.mt_py_diag(self._h(), i, ctypes.byref(code))
            diags.append((code.value, _decode(msg)))
        from .tracker import FileFormat
        return Metadata(
            pid=m.pid,
            command_line=" ".join(_decode(a) for a in cmd.split(b"\0")) if cmd else "",
            start_time=start,
            end_time=end,
            peak_memory=m.peak_heap,
            total_allocations=m.n_events,  # memray's: frees too
            total_frames=m.n_frames,
            total_frees=m.n_frees,
            python_version=pyver,
            main_thread_id=m.main_tid,
            trace_python_allocators=bool(m.flags & _HDR_PYALLOC),
            has_native_traces=bool(m.flags & _HDR_NATIVE),
            attached=bool(m.flags & _HDR_ATTACHED),
            follow_fork=bool(m.flags & _HDR_FOLLOW_FORK),
            forked=bool(m.flags & _HDR_FORKED),
            file_format=(FileFormat.AGGREGATED_ALLOCATIONS if m.flags & _HDR_AGGREGATED
                         else FileFormat.ALL_ALLOCATIONS),
            memory_interval_ms=m.interval_ms,
            dropped_events=m.n_dropped,
            truncated=bool(m.truncated),
            finished=bool(m.have_trailer),
            diagnostics=diags,
            peak_rss=m.peak_rss,
            python_allocator=_decode(self._lib.mt_py_python_allocator(self._h())),
        )

    @property
    def metadata(self):
        return self._metadata

    # -- helpers --------------------------------------------------------
    def _frames_of(self, fn, stack_id, room, *out):
        """The frames that @fn (mt_py_stack() or one of its kind) gives of
        @stack_id: into @room of them, then as many as it said if more."""
        h = self._records_handle()
        buf = (_native.Frame * room)()
        depth = fn(h, stack_id, buf, room, *out)
        if depth > room:
            buf = (_native.Frame * depth)()
            depth = fn(h, stack_id, buf, depth, *out)
        return buf[:depth]

    def _stack(self, stack_id):
        frames = self._stacks.get(stack_id)
        if frames is not None:
            return frames
        frames = tuple((_decode(f.function), _decode(f.file), int(f.line), bool(f.native))
                       for f in self._frames_of(self._lib.mt_py_stack, stack_id, 128))
        self._stacks[stack_id] = frames
        return frames

    def _native_stack(self, stack_id):
        got = self._natives.get(stack_id)
        if got is not None:
            return got
        leaf, gen = ctypes.c_uint32(), ctypes.c_uint32()
        frames = tuple((_decode(f.function), _decode(f.file), int(f.line))
                       for f in self._frames_of(self._lib.mt_py_native_stack, stack_id, 256,
                                                ctypes.byref(leaf), ctypes.byref(gen)))
        got = (frames, int(leaf.value), int(gen.value))
        self._natives[stack_id] = got
        return got

    def _python_stack(self, stack_id):
        """stack_trace()'s frames of stack @stack_id, made once: the
        records of a stack share them."""
        got = self._pyframes.get(stack_id)
        if got is None:
            got = tuple((_name(f[0]),) + f[1:3] for f in self._stack(stack_id) if not f[3])
            self._pyframes[stack_id] = got
        return got

    def _path_key(self, stack_id):
        """The key of @stack_id's call path as it prints (and native
        chain), as memray's records are grouped; made once per stack."""
        got = self._path_keys.get(stack_id)
        if got is None:
            got = self._path_keys[stack_id] = self._lib.mt_py_path_key(self._h(), stack_id)
        return got

    def _hybrid_stack(self, stack_id):
        """hybrid_stack_trace()'s frames of stack @stack_id, made once,
        and how many of them end at the outermost Python frame (0: none)."""
        got = self._hybrids.get(stack_id)
        if got is not None:
            return got
        frames, outermost = [], 0
        for f in self._frames_of(self._lib.mt_py_hybrid_stack, stack_id, 256):
            if f.native:
                frames.append((_decode(f.function), _decode(f.file), int(f.line)))
            else:
                frames.append((_name(_decode(f.function)), _decode(f.file), int(f.line)))
                outermost = len(frames)
        got = self._hybrids[stack_id] = (tuple(frames), outermost)
        return got

    def _thread_name(self, index):
        name = self._threads.get(index)
        if name is None:
            if index == 0xffffffff:
                name = MERGED_THREAD_NAME
            else:
                tid = ctypes.c_uint64()
                cname = ctypes.c_char_p()
                rc = self._lib.mt_py_thread(self._records_handle(), index, ctypes.byref(tid),
                                            ctypes.byref(cname))
                name = _decode(cname.value) if rc == 0 else ""
            self._threads[index] = name
        return name

    def _checked(self, n):
        """@n from a C call that returns a count, or MemoryError."""
        if n < 0:
            raise MemoryError("memtrace.FileReader: cannot read '%s' (error %d)" % (self.path, n))
        return n

    @staticmethod
    def _copy(out, n):
        """The @n C records at @out, copied: the C array can go at once."""
        return (_native.Record * n).from_buffer_copy(
            ctypes.cast(out, ctypes.POINTER(_native.Record * n)).contents) if n else []

    def _records(self, fn, *args):
        out = ctypes.POINTER(_native.Record)()
        n = self._checked(fn(self._h(), *(args + (ctypes.byref(out),))))
        try:
            recs = self._copy(out, n)
        finally:
            self._lib.mt_py_free(out)
        return self._each(recs, self._keep)

    def _each(self, recs, capture):
        """The records of @recs as they are asked for; the generator keeps
        @capture, so that it goes on after close(), as memray's does."""
        names = self._thread_name
        for r in recs:
            yield AllocationRecord(self, r, names(r.thread), capture)

    # -- queries --------------------------------------------------------
    def get_allocation_records(self):
        """Every allocation and free, in the order they happened. Read as
        the iteration goes, a chunk of the capture at a time: memory stays
        small however many events the capture holds."""
        self._h()  # a closed reader fails here, not at the first next()
        if self._aggregated():
            raise NotImplementedError("Can't get all allocations from a pre-aggregated capture file.")
        return self._events()

    def _aggregated(self):
        from .tracker import FileFormat
        return self._metadata.file_format == FileFormat.AGGREGATED_ALLOCATIONS

    def _events(self):
        lib = self._lib
        cursor = ctypes.c_void_p()
        self._checked(lib.mt_py_events_open(self._h(), ctypes.byref(cursor)))
        try:
            out = ctypes.POINTER(_native.Record)()
            names = self._thread_name
            while True:
                # _h() raises if the reader was closed meanwhile: the pass
                # reads the reader's copy of the file
                n = self._checked(lib.mt_py_events_next(self._h(), cursor, ctypes.byref(out)))
                if n == 0:
                    return
                for r in self._copy(out, n):
                    yield AllocationRecord(self, r, names(r.thread))
        finally:
            lib.mt_py_events_close(cursor)

    def _allocations_by_stack(self, skip_tid):
        """{(tid, stack id): allocations} of every thread but @skip_tid's,
        over the whole capture: a pass over the events that makes no object
        per event, for the pytest plugin's accounting under pytest-xdist."""
        lib, rec = self._lib, _native.Record
        size = ctypes.sizeof(rec)
        tid_at, step64 = rec.tid.offset // 8, size // 8
        alloc_at, stack_at, step32 = rec.allocator.offset // 4, rec.stack.offset // 4, size // 4
        frees = {code for code, a in _FROM_FORMAT.items() if a.is_deallocator}
        counts = collections.Counter()
        cursor = ctypes.c_void_p()
        self._checked(lib.mt_py_events_open(self._h(), ctypes.byref(cursor)))
        try:
            out = ctypes.POINTER(rec)()
            while True:
                n = self._checked(lib.mt_py_events_next(self._h(), cursor, ctypes.byref(out)))
                if n == 0:
                    return counts
                raw = memoryview(ctypes.string_at(out, n * size))
                tids = raw.cast("Q")[tid_at::step64].tolist()
                if tids.count(skip_tid) == n:
                    continue
                words = raw.cast("I")
                allocators = words[alloc_at::step32].tolist()
                stacks = words[stack_at::step32].tolist()
                for tid, allocator, stack in zip(tids, allocators, stacks):
                    if tid != skip_tid and allocator not in frees:
                        counts[(tid, stack)] += 1
        finally:
            lib.mt_py_events_close(cursor)

    def get_high_watermark_allocation_records(self, merge_threads=True):
        """What was allocated at the moment the tracked heap was highest,
        one record per call path as it prints (with native stacks, and its
        native chain) and thread, unless merge_threads, whatever the
        allocator, as memray's: the record has its first allocation's
        allocator and address."""
        return self._records(self._lib.mt_py_view, 0, int(bool(merge_threads)), 0)

    def get_leaked_allocation_records(self, merge_threads=True):
        """What was still allocated when tracking ended, grouped as
        get_high_watermark_allocation_records() groups."""
        return self._records(self._lib.mt_py_view, 1, int(bool(merge_threads)), 0)

    def get_temporary_allocation_records(self, merge_threads=True, threshold=1):
        """Allocations freed by their own thread with at most `threshold`
        other allocations of that thread in between, grouped as
        get_high_watermark_allocation_records() groups."""
        if threshold < 0:
            raise ValueError("threshold must be >= 0")
        self._h()
        if self._aggregated():
            raise NotImplementedError(
                "Can't find temporary allocations using a pre-aggregated capture file.")
        return self._records(self._lib.mt_py_view, 2, int(bool(merge_threads)), threshold)

    def _snapshot_step(self, count):
        """Every how many memory samples one snapshot is kept: all of them
        up to max_memory_records, then evenly spaced ones."""
        if self._max_memory_records and count > self._max_memory_records:
            return -(-count // self._max_memory_records)
        return 1

    def get_temporal_allocation_records(self, merge_threads=True):
        """Per call path as it prints and allocator (and thread, unless
        merge_threads), the intervals of snapshots (get_memory_snapshots()'s
        indexes) during which its blocks were live, as memray's."""
        self._h()
        if self._aggregated():
            raise NotImplementedError(
                "Can't get allocation history using a pre-aggregated capture file.")
        lib = self._lib
        out = ctypes.POINTER(_native.Interval)()
        n = self._checked(lib.mt_py_temporal(self._h(), ctypes.byref(out)))
        try:
            ivs = (_native.Interval * n).from_buffer_copy(
                ctypes.cast(out, ctypes.POINTER(_native.Interval * n)).contents) if n else []
        finally:
            lib.mt_py_free(out)
        count = ctypes.c_size_t()
        lib.mt_py_samples(self._h(), ctypes.byref(count))
        step = self._snapshot_step(count.value)
        groups = {}
        never = (1 << 64) - 1
        path = self._path_key
        for iv in ivs:
            r = iv.rec
            key = (path(r.stack), r.allocator) + (() if merge_threads else (r.thread,))
            a = -(-iv.a // step)
            f = None if iv.f == never else -(-iv.f // step)
            if f is not None and f <= a:
                continue  # live at no snapshot kept
            g = groups.get(key)
            if g is None:
                g = groups[key] = [r, {}]
            runs = g[1]
            c, b = runs.get((a, f), (0, 0))
            runs[(a, f)] = (c + r.n_allocations, b + r.size)
        names = self._thread_name
        out = []
        for key, (r, runs) in sorted(groups.items(), key=lambda kv: kv[0]):  # by path
            rec = _native.Record(0 if merge_threads else r.tid, r.address,
                                 sum(b for _, b in runs.values()),
                                 sum(c for c, _ in runs.values()), r.allocator, r.stack,
                                 0xFFFFFFFF if merge_threads else r.thread, 0)
            intervals = [Interval(a, f, c, b) for (a, f), (c, b) in
                         sorted(runs.items(), key=lambda x: (x[0][0], x[0][1] is None, x[0][1] or 0))]
            out.append(TemporalAllocationRecord(self, rec, names(rec.thread), intervals))
        return iter(out)

    def get_temporal_high_water_mark_allocation_records(self, merge_threads=True):
        """memray's: per call path and allocator (and thread, unless merge_threads),
        Interval runs of its share (bytes and blocks) of the high-water mark
        of each stretch between two snapshots, and the list of those marks:
        one per snapshot and one for the stretch after the last. An interval
        from the stretch after that (one past the last mark) on is what was
        still live at the end."""
        self._h()
        if self._aggregated():
            raise NotImplementedError(
                "Can't get allocation history using a pre-aggregated capture file.")
        lib = self._lib
        count = ctypes.c_size_t()
        lib.mt_py_samples(self._h(), ctypes.byref(count))
        out = ctypes.POINTER(_native.HwmRun)()
        marks = ctypes.POINTER(ctypes.c_uint64)()
        n_marks = ctypes.c_size_t()
        n = self._checked(lib.mt_py_temporal_hwm(self._h(), self._snapshot_step(count.value),
                                                 ctypes.byref(out), ctypes.byref(marks),
                                                 ctypes.byref(n_marks)))
        try:
            runs = (_native.HwmRun * n).from_buffer_copy(
                ctypes.cast(out, ctypes.POINTER(_native.HwmRun * n)).contents) if n else []
            hwm = [marks[i] for i in range(n_marks.value)]
        finally:
            lib.mt_py_free(out)
            lib.mt_py_free(marks)
        # the runs of each site (stack, allocator, thread), grouped by call
        # path and allocator (and thread), as memray's
        groups = {}
        path = self._path_key
        for run in runs:
            r = run.rec
            key = (path(r.stack), r.allocator) + (() if merge_threads else (r.thread,))
            g = groups.setdefault(key, [r, {}])
            g[1].setdefault((r.stack, r.thread), []).append((run.as_of, r.size, r.n_allocations))
        names = self._thread_name
        records = []
        for key, (r, members) in sorted(groups.items(), key=lambda kv: kv[0]):
            # the group's share at each point where one of its sites' changes
            points = sorted({p for m in members.values() for p, _, _ in m})
            merged, last = [], (0, 0)
            at = {t: 0 for t in members}
            for p in points:
                for t, m in members.items():
                    while at[t] < len(m) and m[at[t]][0] <= p:
                        at[t] += 1
                value = (0, 0)
                for t, m in members.items():
                    if at[t]:
                        value = (value[0] + m[at[t] - 1][1], value[1] + m[at[t] - 1][2])
                if value != last:
                    merged.append((p, value))
                    last = value
            intervals = []
            for i, (p, (b, c)) in enumerate(merged):
                if b or c:
                    end = merged[i + 1][0] if i + 1 < len(merged) else None
                    intervals.append(Interval(p, end, c, b))
            if not intervals:
                continue
            rec = _native.Record(0 if merge_threads else r.tid, r.address,
                                 max(i.n_bytes for i in intervals),
                                 max(i.n_allocations for i in intervals), r.allocator, r.stack,
                                 0xFFFFFFFF if merge_threads else r.thread, 0)
            records.append(TemporalAllocationRecord(self, rec, names(rec.thread), intervals))
        return records, hwm

    def get_object_lifetime_events(self, included_objects=None):
        """memray's object creations and destructions, from a capture made
        with track_object_lifetimes=True: memtrace makes none, so this is
        memray's error for a capture without them, at the first next()."""
        self._h()
        raise RuntimeError("Object lifetime events are not available in this capture file. "
                           "The file was not generated with track_object_lifetimes=True.")
        yield  # a generator, as memray's

    def get_memory_snapshots(self):
        """RSS and tracked heap over time, as MemorySnapshot tuples; after
        close() too, as memray's, which reads them when it opens."""
        if self._snapshots is None:
            self._snapshots = self._read_snapshots()
        return iter(self._snapshots)

    def _read_snapshots(self):
        n = ctypes.c_size_t()
        p = self._lib.mt_py_samples(self._h(), ctypes.byref(n))
        start_ms = self._metadata.start_time.timestamp() * 1000.0
        count = n.value
        step = self._snapshot_step(count)
        out = []
        for i in range(0, count, step):
            s = p[i]
            out.append(MemorySnapshot(int(start_ms + s.time_us / 1000.0), s.rss, s.heap))
        return tuple(out)

    def __repr__(self):
        return "<memtrace.FileReader %r%s>" % (self.path, " closed" if self.closed else "")


def dump_all_records(file_name):
    """Print every record of a capture, one per line (`memtrace parse`)."""
    lib = _native.reader()
    out = sys.stdout
    failure = []

    def write(ctx, buf, length):
        try:
            out.write(ctypes.string_at(buf, length).decode("utf-8", "replace"))
        except Exception as e:  # noqa: BLE001 - reported after the C call returns
            failure.append(e)
            return -1
        return length

    err = _err_buf()
    rc = lib.mt_py_dump(_c_path(os.fspath(file_name)), _native.WRITE_FN(write), None, err,
                        len(err))
    if failure:
        raise failure[0]
    if rc < 0:
        msg = _decode(err.value)
        if -rc == 2:
            raise FileNotFoundError(2, msg, os.fspath(file_name))
        if 0 < -rc < 4096:
            raise OSError(-rc, msg, os.fspath(file_name))
        raise CaptureError(errno.EINVAL, msg, os.fspath(file_name))
    out.flush()
