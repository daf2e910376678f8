"""The records and figures memtrace.FileReader gives (reader.py), with
memray's names: AllocationRecord and its stacks, TemporalAllocationRecord
and its Intervals, Metadata, MemorySnapshot, AllocatorType with memray's
numbers, and CaptureError. They hold what the reader computed, and ask it
for stacks; nothing here reads a capture.
"""

import collections
import dataclasses
import datetime
import enum


class CaptureError(OSError, ValueError):
    """A file that is not a capture memtrace reads (not one, a version it
    does not know, a damaged header): an OSError, as memray raises, and a
    ValueError, as memtrace raised before."""


class AllocatorType(enum.IntEnum):
    """Which function made or released a block: memray's names and numbers,
    then the PyMem RAW domain's, which memray has not. A capture numbers
    them otherwise (format/record.h, MT_ALLOCATORS): see _FROM_FORMAT."""
    PYMALLOC_FREE = 1
    PYMALLOC_MALLOC = 2
    PYMALLOC_CALLOC = 3
    PYMALLOC_REALLOC = 4
    FREE = 5
    MALLOC = 6
    REALLOC = 7
    CALLOC = 8
    POSIX_MEMALIGN = 9
    ALIGNED_ALLOC = 10
    MEMALIGN = 11
    VALLOC = 12
    PVALLOC = 13
    MMAP = 14
    MUNMAP = 15
    # The PyMem RAW domain (PyMem_RawMalloc & co): memray has no such kinds
    # and records these calls as the PYMALLOC_* ones.
    PYMALLOC_RAW_MALLOC = 16
    PYMALLOC_RAW_CALLOC = 17
    PYMALLOC_RAW_REALLOC = 18
    PYMALLOC_RAW_FREE = 19

    @property
    def is_deallocator(self):
        return self in _FREES


# the AllocatorType of each of the capture's allocator numbers: the
# names of format/record.h's MT_ALLOCATORS, in its order, from 1
_FROM_FORMAT = {i: AllocatorType[name] for i, name in enumerate((
    "MALLOC", "FREE", "CALLOC", "REALLOC", "POSIX_MEMALIGN", "ALIGNED_ALLOC", "MEMALIGN",
    "VALLOC", "PVALLOC", "MMAP", "MUNMAP", "PYMALLOC_MALLOC", "PYMALLOC_CALLOC",
    "PYMALLOC_REALLOC", "PYMALLOC_FREE", "PYMALLOC_RAW_MALLOC", "PYMALLOC_RAW_CALLOC",
    "PYMALLOC_RAW_REALLOC", "PYMALLOC_RAW_FREE"), 1)}


#: one RSS sample: time in ms since the epoch, rss and tracked heap in bytes
MemorySnapshot = collections.namedtuple("MemorySnapshot", "time rss heap")

#: a merged record's thread_name: memray's record of threads merged has tid 0,
#: whose name is ""
MERGED_THREAD_NAME = ""

_HDR_ATTACHED = 1 << 0
_HDR_PYALLOC = 1 << 1
_HDR_NATIVE = 1 << 2
_HDR_FOLLOW_FORK = 1 << 3
_HDR_FORKED = 1 << 4
_HDR_AGGREGATED = 1 << 5


@dataclasses.dataclass
class Metadata:
    """What a capture says about the process and the tracking session: a
    dataclass, memray's fields first, with memray's meanings (its times
    aware of the local time zone; total_allocations counting every
    allocation and free record; total_frames the capture's stack nodes),
    then memtrace's own."""

    start_time: datetime.datetime = None
    end_time: datetime.datetime = None
    total_allocations: int = 0
    total_frames: int = 0
    peak_memory: int = 0
    command_line: str = ""
    pid: int = 0
    main_thread_id: int = 0
    python_allocator: str = ""
    has_native_traces: bool = False
    trace_python_allocators: bool = False
    file_format: int = 0
    # memtrace's own
    total_frees: int = 0  # free records, also counted in total_allocations
    python_version: str = ""
    attached: bool = False
    follow_fork: bool = False
    forked: bool = False
    memory_interval_ms: int = 0
    dropped_events: int = 0
    truncated: bool = False
    finished: bool = False
    diagnostics: list = dataclasses.field(default_factory=list)
    peak_rss: int = 0

    @property
    def options(self):
        """The tracking options, as a dict."""
        return {"trace_python_allocators": self.trace_python_allocators,
                "native_traces": self.has_native_traces,
                "follow_fork": self.follow_fork,
                "memory_interval_ms": self.memory_interval_ms,
                "file_format": self.file_format}


_FREES = (AllocatorType.FREE, AllocatorType.MUNMAP, AllocatorType.PYMALLOC_FREE,
          AllocatorType.PYMALLOC_RAW_FREE)
# the records whose stacks memray says are not captured (its pymalloc frees
# have empty ones)
_NO_STACKS = (AllocatorType.FREE, AllocatorType.MUNMAP)


def _name(qualname):
    """co_name from co_qualname: its last part ("K.meth" -> "meth",
    "f.<locals>.<lambda>" -> "<lambda>"), as the compiler makes one from
    the other."""
    return qualname.rpartition(".")[2] if qualname else qualname


def _first(frames, max_stacks):
    """The first @max_stacks of @frames (all of them for None), a list. A
    negative count is refused with memray's OverflowError (its count is a
    size_t), not taken as one to leave out at the end."""
    if max_stacks is None:
        return list(frames)
    if max_stacks < 0:
        raise OverflowError("can't convert negative value to size_t")
    return list(frames[:max_stacks])


class AllocationRecord:
    """One allocation or free (get_allocation_records), or the allocations of
    one call path (and thread) taken together, whatever their allocators, as
    memray groups them (the snapshot views; the temporal ones keep the
    allocators apart, as memray's do)."""

    __slots__ = ("tid", "address", "size", "allocator", "n_allocations", "stack_id",
                 "thread_name", "_reader", "_capture")

    def __init__(self, reader, rec, thread_name, capture=None):
        self._reader = reader
        # the capture lives while the record does
        self._capture = capture if capture is not None else reader._keep
        self.tid = rec.tid
        self.address = rec.address
        self.size = rec.size
        self.n_allocations = rec.n_allocations
        self.allocator = _FROM_FORMAT.get(rec.allocator, rec.allocator)
        self.stack_id = rec.stack
        self.thread_name = thread_name

    def stack_trace(self, max_stacks=None):
        """Python frames as (function, file, line) tuples, innermost first,
        function being the code object's name (co_name), as memray gives
        it; the reports show qualified names (co_qualname, from 3.11).
        A free or munmap has none: NotImplementedError, as in memray."""
        self._not_dealloc()
        frames = self._reader._python_stack(self.stack_id)
        return _first(frames, max_stacks)

    def _qualified_stack(self, native=False):
        """stack_trace() (hybrid_stack_trace() with @native) with the
        qualified names the reports show."""
        return [f[:3] for f in self._reader._stack(self.stack_id) if native or not f[3]]

    def native_stack_trace(self, max_stacks=None):
        """The native (C) frames alone, interpreter's included, as
        (function, file, line) tuples, innermost first; [] where none were
        recorded (a capture made without native stacks, a pymalloc free).
        A free or munmap: NotImplementedError, as in memray."""
        self._not_dealloc()
        frames = self._native()[0]
        return _first(frames, max_stacks)

    @property
    def native_stack_id(self):
        """The native stack's id in the capture (0 for none)."""
        return self._native()[1]

    @property
    def native_segment_generation(self):
        """The module map the native stack resolves in (0 for none)."""
        return self._native()[2]

    def _native(self):
        if not self._reader.metadata.has_native_traces or self.allocator in _FREES:
            return ((), 0, 0)
        return self._reader._native_stack(self.stack_id)

    def _not_dealloc(self):
        if self.allocator in _NO_STACKS:
            raise NotImplementedError("Stack traces for deallocations aren't captured.")

    def hybrid_stack_trace(self, max_stacks=None):
        """The native frames with each evaluation loop replaced by the
        Python frames it ran, as memray merges them: (function, file, line)
        tuples, innermost first (the reports also hide the interpreter's
        own frames between two Python ones). On the main thread the stack
        ends at its outermost Python frame, as memray's does under its run
        command; other threads keep the frames that started them. The
        Python stack alone where no native chain was recorded or its loops
        could not be found. A free or munmap: NotImplementedError, as in
        memray."""
        self._not_dealloc()
        frames, outermost = None, 0
        if self._reader.metadata.has_native_traces and self.allocator not in _FREES:
            frames, outermost = self._reader._hybrid_stack(self.stack_id)
        if not frames:
            frames = self._reader._python_stack(self.stack_id)
        if outermost and self.tid == self._reader.metadata.main_thread_id:
            frames = frames[:outermost]
        return list(frames if max_stacks is None else frames[:max_stacks])

    def __eq__(self, other):
        if not isinstance(other, AllocationRecord):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def _key(self):
        return (self.tid, self.address, self.size, int(self.allocator), self.n_allocations,
                self.stack_id)

    def __repr__(self):
        alloc = self.allocator.name if isinstance(self.allocator, AllocatorType) else self.allocator
        return ("AllocationRecord(tid=%#x, address=%#x, size=%d, allocator=%s, n_allocations=%d)"
                % (self.tid, self.address, self.size, alloc, self.n_allocations))


class Interval:
    """A run of memory samples during which blocks of one stack were live,
    as memray's: allocated after `allocated_before_snapshot` snapshots (the
    index of the first snapshot that saw them), freed after
    `deallocated_before_snapshot` (None: never freed). Blocks freed before
    the next snapshot are in no interval."""

    __slots__ = ("allocated_before_snapshot", "deallocated_before_snapshot", "n_allocations",
                 "n_bytes")

    def __init__(self, allocated_before_snapshot, deallocated_before_snapshot, n_allocations,
                 n_bytes):
        self.allocated_before_snapshot = allocated_before_snapshot
        self.deallocated_before_snapshot = deallocated_before_snapshot
        self.n_allocations = n_allocations
        self.n_bytes = n_bytes

    def _key(self):
        return (self.allocated_before_snapshot, self.deallocated_before_snapshot,
                self.n_allocations, self.n_bytes)

    def __eq__(self, other):
        if type(other) is not Interval:
            return NotImplemented
        return self._key() == other._key()

    __hash__ = None

    def __repr__(self):
        return ("Interval(allocated_before_snapshot=%d, deallocated_before_snapshot=%r, "
                "n_allocations=%d, n_bytes=%d)" % self._key())


class TemporalAllocationRecord(AllocationRecord):
    """The blocks of one stack and allocator (and thread, unless threads are
    merged) with the intervals of snapshots during which they were live
    (get_temporal_allocation_records); size and n_allocations are the sums
    over the intervals."""

    __slots__ = ("intervals",)

    def __init__(self, reader, rec, thread_name, intervals):
        super().__init__(reader, rec, thread_name)
        self.intervals = intervals

    def __eq__(self, other):
        if type(other) is not TemporalAllocationRecord:
            return NotImplemented
        return self._key() == other._key() and self.intervals == other.intervals

    def __hash__(self):
        return hash(self._key())
