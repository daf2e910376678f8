"""Captures written in Python straight from docs/format.md: the integration
tests use it to make captures with known contents (chunks stored as
columns, not compressed), which also checks the specification against the
reader, and bench/report_speed.py to make large synthetic ones."""

import collections
import heapq
import struct

HOT_ALLOC, HOT_FREE, THREAD, CODE, STACK, SAMPLE, DIAG, TRAILER = range(1, 9)
NATIVE, HYBRID = 9, 11
SITE, TOTALS = 12, 13
HDR_AGGREGATED = 1 << 5
HDR_NATIVE, HDR_NATIVE_NODES, HDR_LINES = 1 << 2, 1 << 6, 1 << 7
MALLOC, FREE, CALLOC, MMAP, MUNMAP = 1, 2, 3, 10, 11


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


# address mode of a hot record: an explicit delta (docs/format.md)
ALIGNED, EXPLICIT = 14, 15
# km's address mode of a raw kind (16..19): km holds the pymalloc kind of
# the same call (kind - 4), and a byte xm = 0x10 | address mode follows
EXT = 13
FORMAT_VERSION = 8
FORMAT_VERSION_MIN = 5  # the oldest version a reader reads (no raw kinds)
FORMAT_VERSION_COLUMNS = 7  # the first with eight columns (with native stacks)


def _km(kind, mode):
    """km, and xm for a raw kind (docs/format.md 3.1)."""
    if kind >= 16:
        return bytes([(kind - 4) | EXT << 4, 0x10 | mode])
    return bytes([kind | mode << 4])


def zigzag(v):
    """The zigzag of v taken as a signed 64-bit value (mod 2^64)."""
    v = ((v + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)
    return ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF


def size_class(size):
    """docs/format.md 3.1: 16-byte steps up to 512, then powers of two."""
    if size <= 512:
        return (size + 15) >> 4
    return min(size.bit_length() + 23, 63)


def slot(addr):
    """The slot of the shared table of recent blocks (docs/format.md 3.1)."""
    return (addr >> 4) % 4096


class Reuse:
    """The coding state the threads of a capture share (docs/format.md 3.1):
    the small blocks freed last by size class, and a table of the size
    classes of recently allocated blocks."""

    def __init__(self):
        self.reused = [[0] * 8 for _ in range(33)]
        self.top = [0] * 33
        self.count = [0] * 33
        self.block = [0] * 4096
        self.block_class = [0] * 4096

    def freed_last(self, c):
        return self.reused[c][self.top[c]] if c <= 32 and self.count[c] else None

    def alloc(self, c, addr):
        if self.freed_last(c) == addr:
            self.count[c] -= 1
            self.top[c] = (self.top[c] + 7) % 8
        self.block[slot(addr)], self.block_class[slot(addr)] = addr, c

    def free(self, addr):
        s = slot(addr)
        if addr == 0 or self.block[s] != addr:
            return
        c, self.block[s] = self.block_class[s], 0
        if c <= 32:
            self.top[c] = (self.top[c] + 1) % 8
            self.reused[c][self.top[c]] = addr
            self.count[c] = min(self.count[c] + 1, 8)


class Ring:
    """A ring of recent addresses, entries named by age (0 = written last)."""

    def __init__(self, n):
        self.n, self.entries, self.pos = n, [0] * n, 0

    def at(self, age):
        return self.entries[(self.pos - 1 - age) % self.n]

    def take(self, addr):
        """The age of addr, taken out of the ring (the younger entries move
        one slot on, the newest slot is emptied and written next), or None."""
        ages = [a for a in range(self.n) if addr and self.at(a) == addr]
        if not ages:
            return None
        for i in range(ages[0], 0, -1):
            self.entries[(self.pos - 1 - i) % self.n] = self.entries[(self.pos - i) % self.n]
        self.pos = (self.pos - 1) % self.n
        self.entries[self.pos] = 0
        return ages[0]

    def push(self, addr):
        self.entries[self.pos] = addr
        self.pos = (self.pos + 1) % self.n


class HotCoder:
    """ALLOC and FREE records of one thread, coded as docs/format.md 3.1 says,
    every address mode included; with plain=True every address is an
    explicit delta instead (a writer may leave the rest out)."""

    def __init__(self, reuse, plain=False):
        self.reuse, self.plain = reuse, plain
        self.last = [0] * 64  # last ALLOC address per size class
        self.free_addr = {}  # last FREE address coded as a delta, per kind
        self.free_slot = 0
        self.stack = 0
        self.freed, self.live = Ring(8), Ring(12)
        self.modes = collections.Counter()  # ("alloc" or "free", address mode) -> records

    def _delta(self, d):
        """Mode 14 (a delta of 16-byte units) or 15, and the delta."""
        d = ((d + (1 << 63)) & _M64) - (1 << 63)
        if d % 16 == 0 and not self.plain:
            return ALIGNED, varint(zigzag(d // 16))
        return EXPLICIT, varint(zigzag(d))

    def alloc(self, head, kind, addr, size, stack):
        c = size_class(size)
        if not self.plain and c <= 32 and addr and self.reuse.freed_last(c) == addr:
            mode, tail = 8, b""
        elif not self.plain and c <= 32 and addr and (self.last[c] + 16 * c) & _M64 == addr:
            mode, tail = 9, b""
        else:
            age = None if self.plain else self.freed.take(addr)
            if age is not None:
                mode, tail = age, b""
            else:
                mode, tail = self._delta(addr - self.last[c])
        self.modes["alloc", mode] += 1
        out = head + _km(kind, mode) + tail + varint(size) + varint(zigzag(stack - self.stack))
        self.last[c], self.stack = addr, stack
        self.live.push(addr)
        self.reuse.alloc(c, addr)
        return out

    def free(self, head, kind, addr, size=0):
        age = None if self.plain else self.live.take(addr)
        s = slot(addr)
        if age is not None:
            mode, tail = age, b""
        elif not self.plain and addr and self.reuse.block[s] == addr:
            d = (s - self.free_slot) % 4096
            mode, tail = 12, varint(zigzag(d - 4096 if d >= 2048 else d))
            self.free_slot = s
        else:
            base = FREE if kind == 19 else kind  # raw blocks share malloc's base
            mode, tail = self._delta(addr - self.free_addr.get(base, 0))
            self.free_addr[base] = addr
        self.modes["free", mode] += 1
        out = head + _km(kind, mode) + tail
        if kind == MUNMAP:
            out += varint(size)
        self.freed.push(addr)
        self.reuse.free(addr)
        return out


_M64 = (1 << 64) - 1
_K1, _K2, _K3 = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9


def _round(h, w):
    h = ((h ^ w) * _K2) & _M64
    return ((h << 31) | (h >> 33)) & _M64


def mt32(data):
    """The chunk checksum, transcribed from docs/format.md section 2."""
    n = len(data)
    lanes = [_K1, _K2, _K3, _K1 ^ _K2]
    h = (n * _K1) & _M64
    i = 0
    while i + 32 <= n:
        words = struct.unpack_from("<4Q", data, i)
        lanes = [_round(v, w) for v, w in zip(lanes, words)]
        i += 32
    for v in lanes:
        h = _round(h, v)
    while i + 8 <= n:
        h = _round(h, struct.unpack_from("<Q", data, i)[0])
        i += 8
    for b in data[i:]:
        h = ((h ^ b) * _K1) & _M64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    h ^= h >> 33
    return (h ^ (h >> 32)) & 0xFFFFFFFF


def _varint_len(data, i):
    n = 1
    while data[i + n - 1] & 0x80:
        n += 1
    return n


def _varint_at(data, i):
    """(value, next index) of the varint at data[i]."""
    v, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, i


def _unzigzag(z):
    return (z >> 1) ^ -(z & 1)


# node column flags (docs/format.md 2.2)
SIBLING, CHILD, FAR, VERBATIM, NEXT_ID, SAME_CODE = 0, 1, 2, 3, 4, 8


def _node(segment, prev, base=None):
    """The node-column segment of a STACK record whose body segment (length
    and body) is `segment`, coded against `prev` = [id, parent, code,
    offset], its id against `base` (the last node record's id, version 7
    with native stacks) or else the previous STACK's; None when it is to
    be stored verbatim."""
    if base is None:
        base = prev[0]
    try:
        length, i = _varint_at(segment, 0)
        start = i
        sid, i = _varint_at(segment, i)
        dist, i = _varint_at(segment, i)
        code, i = _varint_at(segment, i)
        offset, i = _varint_at(segment, i)
    except IndexError:
        return None
    parent = sid - _unzigzag(dist)
    fields = (sid, parent, code, offset)
    if i != len(segment) or length != len(segment) - start or not 0 <= parent < 2**32 \
            or max(sid, code, offset) >= 2**32:
        return None
    body = varint(sid) + varint(zigzag(sid - parent)) + varint(code) + varint(offset)
    if varint(len(body)) + body != bytes(segment):
        return None
    flag, out = 0, bytearray()
    if sid == base + 1:
        flag |= NEXT_ID
    else:
        out += varint(zigzag(sid - base - 1))
    if parent == prev[1]:
        flag |= SIBLING
    elif parent == prev[0]:
        flag |= CHILD
    else:
        flag |= FAR
        out += varint(zigzag(sid - parent))
    if code == prev[2]:
        flag |= SAME_CODE
        out += varint(zigzag(offset - prev[3]))
    else:
        out += varint(zigzag(code - prev[2])) + varint(offset)
    if 1 + len(out) > len(segment) + 1:
        return None
    prev[:] = fields
    return bytes([flag]) + out


# native node coding (docs/format.md 2.2, "Native nodes")
IP_SUCC, IP_RECENT, IP_DELTA = 0, 1, 2
REF_LAST, REF_PREV, REF_FAR = 0, 1, 2
HYBRID_CHAIN = 1 << 5


class NativeNodes:
    """The state of section 2.2's native nodes, for one chunk."""

    def __init__(self):
        self.last = 0
        self.nid, self.nparent, self.nip, self.npip = 0, 0, 0, None  # npip None: not known
        self.hpython, self.hnative = 0, 0
        self.recent = []
        self.succ = {}  # slot -> (key, ip)
        self.chains = []  # the HYBRID records' native chains, latest first

    def parent_ip(self, parent):
        if parent == 0:
            return 0
        if parent == self.nid:
            return self.nip
        if parent == self.nparent:
            return self.npip
        return None

    @staticmethod
    def slot(a):
        return ((a * 0x9E3779B97F4A7C15) % 2**64) >> 54

    def successor(self, a):
        key, ip = self.succ.get(self.slot(a), (0, 0))
        return ip if key == a and ip else None

    def put_id(self, nid):
        if nid == self.last + 1:
            return NEXT_ID, b""
        return 0, varint(zigzag(nid - self.last - 1))

    def native(self, segment):
        try:
            length, i = _varint_at(segment, 0)
            start = i
            nid, i = _varint_at(segment, i)
            dist, i = _varint_at(segment, i)
            ip, i = _varint_at(segment, i)
        except IndexError:
            return None
        parent = nid - _unzigzag(dist)
        body = varint(nid) + varint(zigzag(nid - parent)) + varint(ip)
        if i != len(segment) or length != len(segment) - start or varint(len(body)) + body \
                != bytes(segment) or not 0 <= parent < 2**32 or nid >= 2**32 or ip >= 2**64:
            return None
        flag, out = self.put_id(nid)
        if parent == self.nparent:
            flag |= SIBLING
        elif parent == self.nid:
            flag |= CHILD
        else:
            flag |= FAR
            out += varint(zigzag(nid - parent))
        pip = self.parent_ip(parent)
        if pip is not None and self.successor(pip) == ip:
            flag |= IP_SUCC << 3
        elif ip in self.recent:
            flag |= IP_RECENT << 3
            out += varint(self.recent.index(ip))
        else:
            flag |= IP_DELTA << 3
            out += varint(zigzag((ip - self.nip + 2**63) % 2**64 - 2**63))
        if 1 + len(out) > len(segment) + 1:
            return None
        if pip is not None:
            self.succ[self.slot(pip)] = (pip, ip)
        if ip in self.recent:
            self.recent.remove(ip)
        self.recent = [ip] + self.recent[:15]
        self.nid, self.nparent, self.nip, self.npip = nid, parent, ip, pip
        self.last = nid
        return bytes([flag]) + out

    def hybrid(self, segment, last_stack):
        try:
            length, i = _varint_at(segment, 0)
            start = i
            hid, i = _varint_at(segment, i)
            dpy, i = _varint_at(segment, i)
            dnat, i = _varint_at(segment, i)
        except IndexError:
            return None
        python, native = hid - _unzigzag(dpy), hid - _unzigzag(dnat)
        body = varint(hid) + varint(zigzag(hid - python)) + varint(zigzag(hid - native))
        if i != len(segment) or length != len(segment) - start or varint(len(body)) + body \
                != bytes(segment) or not 0 <= python < 2**32 or not 0 <= native < 2**32 \
                or hid >= 2**32:
            return None
        flag, out = self.put_id(hid)
        refs = [(3, python, last_stack, self.hpython)]
        if native not in (self.nid, self.hnative) and native in self.chains:
            flag |= HYBRID_CHAIN
            out += varint(self.chains.index(native))
        else:
            refs.insert(0, (0, native, self.nid, self.hnative))
        for shift, v, last, prev in refs:
            if v == last:
                flag |= REF_LAST << shift
            elif v == prev:
                flag |= REF_PREV << shift
            else:
                flag |= REF_FAR << shift
                out += varint(zigzag(hid - v))
        if 1 + len(out) > len(segment) + 1:
            return None
        self.hpython, self.hnative = python, native
        if native in self.chains:
            self.chains.remove(native)
        self.chains = [native] + self.chains[:1023]
        self.last = hid
        return bytes([flag]) + out


FREE_KINDS = (FREE, MUNMAP, 15)


def _control(records, i, n, km, now):
    """The control segment (docs/format.md 2.1) of the record whose head is
    records[i:i + n], with km for a hot record (else None); now[0] is the
    thread index of the chunk's last hot record."""
    head = records[i]
    rtype, thread, shortest = head & 0x0F, head >> 4, True
    if thread == 15:
        thread, _ = _varint_at(records, i + 1)
        shortest = thread >= 15 and n == 1 + len(varint(thread))
    if km is None:
        return bytes([rtype << 4]) if thread == 0 and shortest else b"\0" + records[i:i + n]
    fits = km & 0x0F != 0 and (km & 0x0F in FREE_KINDS) == (rtype == HOT_FREE)
    if shortest and fits and thread == now[0]:
        seg = b""
    elif shortest and thread == 0:
        seg = bytes([rtype << 4])
    else:
        seg = b"\0" + records[i:i + n]
    now[0] = thread
    return seg + bytes([km])


def columns(records, native_nodes=False, eight=False):
    """The chunk data of whole records (docs/format.md 2.1): the lengths of
    all columns but the last as varints, then the control, address, size,
    stack, node and body columns, each record's segments appended to their
    columns; with native_nodes (the header's MT_HDR_NATIVE_NODES), NATIVE
    and HYBRID records are node records too; with @eight (version 7 with
    native stacks), their node segments go to columns 6 and 7, and a STACK
    record's id is coded against the last node record's."""
    cols = [bytearray() for _ in range(8 if eight else 6)]
    prev = [0, 0, 0, 0]
    nat = NativeNodes()
    now = [0]
    i = 0
    while i < len(records):
        head = records[i]
        rtype = head & 0x0F
        n = 1 + (_varint_len(records, i + 1) if head >> 4 == 15 else 0)
        if rtype in (HOT_ALLOC, HOT_FREE):
            km = records[i + n]
            cols[0] += _control(records, i, n, km, now)
            i += n + 1
            mode = km >> 4
            if mode == EXT:  # xm follows km in the control column
                cols[0].append(records[i])
                mode = records[i] & 0x0F
                i += 1
            present = (mode >= 12, rtype == HOT_ALLOC or km & 0x0F == MUNMAP, rtype == HOT_ALLOC)
            for col, there in enumerate(present, 1):
                if there:
                    k = _varint_len(records, i)
                    cols[col] += records[i:i + k]
                    i += k
        else:
            cols[0] += _control(records, i, n, None, now)
            i += n
            length, j = _varint_at(records, i)
            segment = records[i:j + length]
            i = j + length
            if head == STACK or (native_nodes and head in (NATIVE, HYBRID)):
                if head == STACK:
                    node = _node(segment, prev, nat.last if eight else None)
                    if node is not None:
                        nat.last = prev[0]
                elif head == NATIVE:
                    node = nat.native(segment)
                else:
                    node = nat.hybrid(segment, prev[0])
                col = {NATIVE: 6, HYBRID: 7}.get(head, 4) if eight else 4
                if node is not None:
                    cols[col] += node
                    continue
                cols[col].append(VERBATIM)
            cols[5] += segment
    return b"".join(varint(len(c)) for c in cols[:-1]) + b"".join(bytes(c) for c in cols)


def chunk(records, packer=None, native_nodes=False, eight=False):
    """A chunk of whole records: stored, or coded by @packer if that is
    shorter (the packer's histories take the columns either way)."""
    data = columns(records, native_nodes, eight)
    stored = packer.pack(data) if packer else data
    if len(stored) >= len(data):
        stored = data
    return b"MTCK" + struct.pack("<III", len(data), len(stored), mt32(stored)) + stored


# ---------------------------------------------------------------------------
# The coded form of chunk data (docs/format.md 2.3 and 2.4). LZ4 itself comes
# from liblz4 (a build dependency); the rest is written from the text.

HISTORY = 64 << 10
MAX_BITS = 11


def code_lengths(counts):
    """Huffman code lengths of at most MAX_BITS bits for {value: count}."""
    if len(counts) == 1:
        return {v: 1 for v in counts}
    weights = dict(counts)
    while True:
        heap = [(w, i, (v,)) for i, (v, w) in enumerate(sorted(weights.items()))]
        heapq.heapify(heap)
        depth = collections.Counter()
        order = len(heap)
        while len(heap) > 1:
            w1, _, a = heapq.heappop(heap)
            w2, _, b = heapq.heappop(heap)
            for v in a + b:
                depth[v] += 1
            order += 1
            heapq.heappush(heap, (w1 + w2, order, a + b))
        if max(depth.values()) <= MAX_BITS:
            return dict(depth)
        weights = {v: (w + 1) // 2 for v, w in weights.items()}


def canonical_codes(lengths):
    """{value: code} of the canonical code of {value: length}."""
    count = collections.Counter(lengths.values())
    code, first = 0, {}
    for n in range(1, MAX_BITS + 1):
        code = (code + count[n - 1]) << 1
        first[n] = code
    codes = {}
    for v in sorted(lengths):
        codes[v] = first[lengths[v]]
        first[lengths[v]] += 1
    return codes


def stream(data, huffman=True):
    """The stream form of @data: Huffman coded if that is shorter."""
    data = bytes(data)
    if not data:
        return varint(0)
    plain = varint(len(data)) + b"\0" + data
    if not huffman:
        return plain
    lengths = code_lengths(collections.Counter(data))
    codes = canonical_codes(lengths)
    bitmap = bytearray(32)
    for v in lengths:
        bitmap[v >> 3] |= 1 << (v & 7)
    nibbles = [lengths[v] for v in sorted(lengths)]
    if len(nibbles) % 2:
        nibbles.append(0)
    table = bytes(nibbles[i] | nibbles[i + 1] << 4 for i in range(0, len(nibbles), 2))
    acc = nbits = 0
    for v in data:  # each code most significant bit first, from each byte's low bit up
        for i in range(lengths[v] - 1, -1, -1):
            acc |= ((codes[v] >> i) & 1) << nbits
            nbits += 1
    bits = acc.to_bytes((nbits + 7) // 8, "little")
    coded = varint(len(data)) + b"\1" + bytes(bitmap) + table + varint(len(bits)) + bits
    return coded if len(coded) < len(plain) else plain


def lz4_streams(block):
    """The literals, sequences, offset lows and offset highs of an LZ4 block."""
    lit, seq, lo, hi = bytearray(), bytearray(), bytearray(), bytearray()
    i = 0
    while i < len(block):
        token = block[i]
        seq.append(token)
        i += 1
        n = token >> 4
        if n == 15:
            while True:
                seq.append(block[i])
                n += block[i]
                i += 1
                if seq[-1] != 255:
                    break
        lit += block[i:i + n]
        i += n
        if i >= len(block):
            break
        lo.append(block[i])
        hi.append(block[i + 1])
        i += 2
        if token & 15 == 15:
            while True:
                seq.append(block[i])
                i += 1
                if seq[-1] != 255:
                    break
    return lit, seq, lo, hi


class Packer:
    """Codes chunk data as docs/format.md 2.3 says, each column an LZ4 block
    made against its history (liblz4's fast compressor with the history as
    its dictionary), its streams Huffman coded unless @huffman is False."""

    def __init__(self, huffman=True, history=True, store_every=0):
        import ctypes
        self.ct = ctypes
        self.lz4 = ctypes.CDLL("liblz4.so.1")
        self.lz4.LZ4_createStream.restype = ctypes.c_void_p
        self.lz4.LZ4_freeStream.argtypes = [ctypes.c_void_p]
        self.lz4.LZ4_loadDict.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        self.lz4.LZ4_compress_fast_continue.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
            ctypes.c_int]
        self.huffman, self.use_history = huffman, history
        self.history = [b""] * 8
        self.ncols = 6  # 8 for version 7 with native stacks: Capture sets it
        self.store_every, self.chunks, self.chunks_stored = store_every, 0, 0
        self.methods = collections.Counter()  # method -> columns
        self.forms = collections.Counter()  # stream form -> streams

    def _block(self, col, history):
        ct = self.ct
        cap = len(col) + len(col) // 255 + 16
        out = ct.create_string_buffer(cap)
        state = self.lz4.LZ4_createStream()
        hist = ct.create_string_buffer(history, len(history))  # alive while compressing
        if history and self.use_history:
            self.lz4.LZ4_loadDict(state, hist, len(history))
        n = self.lz4.LZ4_compress_fast_continue(state, col, out, len(col), cap, 1)
        self.lz4.LZ4_freeStream(state)
        assert n > 0
        return out.raw[:n]

    def pack(self, data):
        """The coded form of @data, or @data itself when this chunk is to be
        stored as it is; the histories take its columns either way."""
        self.chunks += 1
        store = self.store_every and self.chunks % self.store_every == 0
        self.chunks_stored += bool(store)
        lens, i = [], 0
        for _ in range(self.ncols - 1):
            v, i = _varint_at(data, i)
            lens.append(v)
        out = bytearray(data[:i])
        lens.append(len(data) - i - sum(lens))
        for k, n in enumerate(lens):
            col = bytes(data[i:i + n])
            i += n
            if not n:
                continue
            streams = [stream(s, self.huffman)
                       for s in lz4_streams(self._block(col, self.history[k]))]
            coded = b"\1" + b"".join(streams)
            method = 1 if len(coded) < 1 + n else 0
            self.history[k] = (self.history[k] + col)[-HISTORY:]
            if store:
                continue
            self.methods[method] += 1
            for s in streams:
                n, j = _varint_at(s, 0)
                if n:
                    self.forms[s[j]] += 1
            out += coded if method else b"\0" + col
        return bytes(data) if store else bytes(out)


def blob(s):
    s = s.encode() if isinstance(s, str) else s
    return varint(len(s)) + s


class Capture:
    def __init__(self, flags=0, version=FORMAT_VERSION, plain=False, packer=None):
        cmd = b"python3\0prog.py\0"
        self.out = bytearray(b"MEMTRACE" + struct.pack("<HHIIIQIIQI", version, 52 + len(cmd), flags,
                                                       4242, 0x030B04F0, 1700000000 * 10**9, 10,
                                                       4096, 4242, len(cmd)) + cmd)
        self.chunk = bytearray()
        self.coders = {}  # thread index -> HotCoder
        self.events = 0  # ALLOC and FREE records written
        self.reuse = Reuse()
        self.plain = plain
        self.packer = packer  # a Packer: chunks coded (docs/format.md 2.3), else stored
        self.native_nodes = bool(flags & HDR_NATIVE_NODES)
        self.eight = version >= FORMAT_VERSION_COLUMNS and bool(flags & HDR_NATIVE)
        if packer:
            packer.ncols = 8 if self.eight else 6

    def _head(self, rtype, thread=0):
        if thread < 15:
            return bytes([rtype | thread << 4])
        return bytes([rtype | 0xF0]) + varint(thread)

    def _long(self, rtype, body, thread=0):
        self.chunk += self._head(rtype, thread) + varint(len(body)) + body
        return self

    def alloc(self, addr, size, stack=0, kind=MALLOC, thread=0):
        self.events += 1
        coder = self.coders.setdefault(thread, HotCoder(self.reuse, self.plain))
        self.chunk += coder.alloc(self._head(HOT_ALLOC, thread), kind, addr, size, stack)
        return self

    def free(self, addr, size=0, kind=FREE, thread=0):
        self.events += 1
        coder = self.coders.setdefault(thread, HotCoder(self.reuse, self.plain))
        self.chunk += coder.free(self._head(HOT_FREE, thread), kind, addr, size)
        return self

    def thread(self, index, tid, name):
        return self._long(THREAD, varint(tid) + blob(name), thread=index)

    def code(self, cid, file, name, firstlineno, linetable=b""):
        return self._long(CODE, varint(cid) + varint(firstlineno) + blob(file) + blob(name)
                          + blob(name) + blob(linetable))

    def stack(self, sid, parent, code, offset=0):
        return self._long(STACK, varint(sid) + varint(zigzag(sid - parent)) + varint(code)
                          + varint(offset))

    def stack_line(self, sid, parent, code, line, entry=1):
        """A STACK record of a capture with HDR_LINES (version 8): the
        frame's line and entry bit where the offset goes."""
        return self.stack(sid, parent, code, line << 1 | entry)

    def native(self, nid, parent, ip, extra=b""):
        return self._long(NATIVE, varint(nid) + varint(zigzag(nid - parent)) + varint(ip) + extra)

    def hybrid(self, hid, python, native):
        return self._long(HYBRID, varint(hid) + varint(zigzag(hid - python))
                          + varint(zigzag(hid - native)))

    def sample(self, time_us, rss, heap=None, in_use=None):
        """A SAMPLE: heap (aggregated captures) and in_use (the allocator's
        own count of bytes in use) are trailing fields, each written plus 1;
        heap is written as 0 (not given) when only in_use is."""
        body = varint(time_us) + varint(rss)
        if heap is not None or in_use is not None:
            body += varint(0 if heap is None else heap + 1)
        if in_use is not None:
            body += varint(in_use + 1)
        return self._long(SAMPLE, body)

    def diag(self, code, msg):
        return self._long(DIAG, varint(code) + blob(msg))

    def site(self, stack, thread, kind, peak=(0, 0), leak=(0, 0), alloc=(0, 0), first_addr=0):
        """A SITE (aggregated captures): its figures as (bytes, count)."""
        body = b"".join(varint(v) for v in (stack, thread, kind) + peak + leak + alloc)
        return self._long(SITE, body + varint(first_addr))

    def totals(self, heap, peak_heap, peak_time_us=0, allocs=0, frees=0, allocated=0, freed=0,
               live_count=0):
        """A TOTALS (aggregated captures), with no kinds and no sizes."""
        body = b"".join(varint(v) for v in (allocs, frees, 0, allocated, freed, heap, peak_heap,
                                            peak_time_us, live_count))
        return self._long(TOTALS, body + varint(0) + varint(0))

    def locations(self, n, step, size):
        """@n locations of a thread 0 (made here, tid 100), each a function
        f<i> of /app/gen.py with one block live: <size> + i bytes at
        0x100000 + i * <step>."""
        self.thread(0, 100, "MainThread")
        for i in range(1, n + 1):
            self.code(i, "/app/gen.py", "f%d" % i, i).stack(i, 0, i)
            self.alloc(0x100000 + i * step, size + i, stack=i)
        return self

    def trailer(self, time_us, events=None, dropped=0):
        """@events: the ALLOC and FREE records written (None: those written
        here), which a reader checks against those it read."""
        if events is None:
            events = self.events
        return self._long(TRAILER, varint(time_us) + varint(events) + varint(dropped))

    def flush(self):
        if self.chunk:
            self.out += chunk(self.chunk, self.packer, self.native_nodes, self.eight)
            self.chunk = bytearray()
        return self

    def save(self, path):
        self.flush()
        path.write_bytes(bytes(self.out))
        return path
