"""The report commands (stats, summary, parse) on hand-made captures: exact
numbers, truncated and damaged files, and bad input. Captures are written
here in Python straight from docs/format.md (chunks stored, not
compressed), which also checks the specification against the reader."""

import collections
import json
import os
import random
import resource
import struct
import subprocess

import pytest

from conftest import run

import capture_writer as cw
from capture_writer import CALLOC, FORMAT_VERSION, FORMAT_VERSION_MIN, MMAP, MUNMAP, Capture, mt32


def test_mt32_reference_values():
    assert mt32(b"") == 0x3192C8A9
    assert mt32(b"a") == 0xB21C73AC
    assert mt32(b"memtrace") == 0xC3CDD704
    assert mt32(bytes(range(100))) == 0x1087B49D


MB = 1 << 20


def program(trailer=True):
    """main -> f allocates 10 MB and frees it (the peak); main -> g keeps
    3 MB; a worker thread keeps 1 MB outside Python; one free is of memory
    never seen."""
    c = Capture()
    c.thread(0, 4242, "MainThread").thread(1, 4243, "worker")
    c.alloc(0x100000, 10 * MB, stack=2)
    c.alloc(0x2000000, 3 * MB, stack=3).flush()
    c.sample(1000, 40 * MB)
    c.free(0x100000)
    c.free(0xDEAD0)
    c.alloc(0x3000000, 1 * MB, stack=0, kind=CALLOC, thread=1).flush()
    c.alloc(0x7F0000000000, 16 * 4096, stack=3, kind=MMAP)
    c.free(0x7F0000001000, 4096, kind=MUNMAP)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 1, 3)
    c.code(1, "/app/prog.py", "<module>", 1).code(2, "/app/prog.py", "f", 5)
    c.code(3, "/app/prog.py", "g", 9)
    c.diag(0, "hello from the tracker")
    if trailer:
        c.trailer(2000, dropped=4)
    return c


def test_stats_numbers(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    s = json.loads(run(memtrace, "stats", "--json", cap).stdout)
    t = s["totals"]
    assert t["allocations"] == 4 and t["frees"] == 3 and t["unmatched_frees"] == 1
    assert t["peak_heap"] == 13 * MB
    assert t["live_bytes_at_end"] == 4 * MB + 15 * 4096
    assert t["dropped"] == 4 and t["peak_rss"] == 40 * MB
    assert s["top_by_size"][0] == {"function": "f", "file": "/app/prog.py", "line": 5,
                                   "bytes": 10 * MB, "allocations": 1}
    assert s["allocators"]["calloc"] == {"count": 1, "bytes": MB}
    assert s["header"]["cmdline"] == ["python3", "prog.py"]
    assert s["diagnostics"][0]["message"] == "hello from the tracker"
    assert [th["name"] for th in s["threads"]] == ["MainThread", "worker"]
    text = run(memtrace, "stats", cap)
    assert "f at /app/prog.py:5" in text.stdout and text.stderr == ""
    assert "<no Python frames>" in text.stdout


def test_summary_peak_and_leaks(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    peak = json.loads(run(memtrace, "summary", "--json", cap).stdout)["rows"]
    by = {r["function"]: r for r in peak}
    assert by["<module>"]["total_bytes"] == 13 * MB and by["<module>"]["own_bytes"] == 0
    assert by["f"]["own_bytes"] == 10 * MB and by["g"]["own_bytes"] == 3 * MB
    assert peak[0]["function"] == "<module>"
    # the count at the peak, as the other views give theirs, of every row
    # (the count of the tree, table and flamegraph at the peak)
    for extra in ((), ("-n", "1")):
        top = json.loads(run(memtrace, "summary", "--json", *extra, cap).stdout)
        assert top["total_bytes"] == 13 * MB and top["total_allocations"] == 2, top
    assert "Memory at the peak: 13.00 MiB in 2 allocations" in run(memtrace, "tree", cap).stdout
    leaks = json.loads(run(memtrace, "summary", "--json", "--leaks", cap).stdout)["rows"]
    by = {r["function"]: r for r in leaks}
    assert "f" not in by
    assert by["g"]["own_bytes"] == 3 * MB + 15 * 4096 and by["g"]["own_allocations"] == 2
    assert by["<no Python frames>"]["own_bytes"] == MB
    text = run(memtrace, "summary", "--leaks", cap).stdout
    assert "g at /app/prog.py:9" in text


def test_memray_names_for_the_row_count(memtrace, tmp_path):
    """summary's -r/--max-rows and tree's -b/--biggest-allocs, as memray
    names them, are -n; the one command's name is no option of the other."""
    cap = program().save(tmp_path / "p.bin")
    for cmd, names in (("summary", ("-r", "--max-rows")), ("tree", ("-b", "--biggest-allocs"))):
        one = run(memtrace, cmd, "-n", "1", cap).stdout
        assert one != run(memtrace, cmd, "-n", "3", cap).stdout
        for name in names:
            assert run(memtrace, cmd, name, "1", cap).stdout == one, (cmd, name)
    for cmd, name in (("summary", "-b"), ("tree", "-r"), ("table", "-r")):
        p = run(memtrace, cmd, name, "1", cap, check=False)
        assert p.returncode == 2 and "invalid option" in p.stderr, (cmd, name, p.stderr)


def test_counts_are_digits_in_range(memtrace, tmp_path):
    """-n (and memray's names for it) and the threshold are digits from 0
    and no more than 2^32 - 1: nothing wraps to a few rows, and a sign
    or a space in front is refused as any other word; the error names the
    option as it was typed (memray's -r, not -n)."""
    cap = program().save(tmp_path / "p.bin")
    for cmd, name in (("tree", "-n"), ("tree", "-b"), ("tree", "--biggest-allocs"),
                      ("summary", "-n"), ("summary", "-r"), ("summary", "--max-rows"),
                      ("summary", "--top"), ("stats", "-n"), ("stats", "--num-largest"),
                      ("growth", "-n"), ("live", "-n"), ("diff", "-n")):
        operands = [cap, cap] if cmd == "diff" else [cap]
        for bad in ("4294967297", "4294967296", "99999999999999999999999", "-5", "-1", " 3",
                    "+5", "", "3x", "0x10"):
            p = run(memtrace, cmd, name, bad, *operands, check=False)
            assert p.returncode == 2 and p.stdout == "" and p.stderr == \
                "memtrace: %s: %s wants a number from 0 to 4294967295, not '%s'\n" \
                % (cmd, name, bad), (cmd, name, bad, p.stderr)
    # the largest count is all rows, as 0 is
    for cmd in ("tree", "summary", "stats"):
        assert run(memtrace, cmd, "-n", "4294967295", cap).stdout == \
            run(memtrace, cmd, "-n", "0", cap).stdout
    assert run(memtrace, "tree", "-n", "1", cap).stdout != run(memtrace, "tree", cap).stdout
    for bad in (" 1", "+1", "-1", "2147483648"):
        p = run(memtrace, "tree", "--temporary-allocation-threshold", bad, cap, check=False)
        assert p.returncode == 2 and p.stderr == \
            "memtrace: tree: --temporary-allocation-threshold wants a number from 0 to " \
            "2147483647, not '%s'\n" % bad, p.stderr


def test_empty_output_path(memtrace, tmp_path):
    """-o '' is said to be empty, before the capture is read, not taken
    for the current directory."""
    cap = program().save(tmp_path / "p.bin")
    for args in (["flamegraph"], ["table"], ["stats"], ["growth"], ["transform", "csv"],
                 ["diff", cap]):
        p = run(memtrace, args[0], "-o", "", *args[1:], cap, check=False, cwd=tmp_path)
        assert p.returncode == 2 and p.stdout == "" and p.stderr == \
            "memtrace: %s: the output path is empty (-o '')\n" % args[0], (args, p.stderr)
    assert os.listdir(tmp_path) == ["p.bin"]


def test_parse_lines(memtrace, tmp_path):
    cap = program().save(tmp_path / "p.bin")
    lines = run(memtrace, "parse", cap).stdout.splitlines()
    assert lines[0].startswith("header version=%d " % FORMAT_VERSION)
    assert "alloc thread=0 kind=malloc addr=0x100000 size=10485760 stack=2" in lines
    assert "free thread=1 kind=munmap addr=0x7f0000001000 size=4096" not in lines
    assert "free thread=0 kind=munmap addr=0x7f0000001000 size=4096" in lines
    assert lines[-1] == "trailer time_us=2000 events=7 dropped=4"
    kinds = [l.split()[0] for l in lines[1:]]
    assert kinds.count("alloc") == 4 and kinds.count("chunk") == 3


PYMALLOC, PYFREE = 12, 15
KIND_NAMES = {cw.MALLOC: "malloc", cw.FREE: "free", MMAP: "mmap", MUNMAP: "munmap",
              PYMALLOC: "pymalloc_malloc", PYFREE: "pymalloc_free"}


def _pymalloc_like(c, rnd, n):
    """n events of four threads (one with an index past 14) as pymalloc and malloc make them: small
    blocks carved from a pool per size class and handed out again the last
    freed first, big ones from malloc, mappings, failed allocations; freed
    mostly soon, sometimes late. Returns the records parse should print."""
    want, live, pools, freed = [], [], {}, collections.defaultdict(list)
    for _ in range(n):
        t = rnd.choice((0, 0, 0, 1, 2, 20))
        if live and rnd.random() < 0.45:
            age = min(int(rnd.expovariate(0.3)), len(live) - 1) if rnd.random() < 0.85 else \
                rnd.randrange(len(live))
            addr, size, kind = live.pop(len(live) - 1 - age)
            if kind == MMAP:
                c.free(addr, size, kind=MUNMAP, thread=t)
                want.append("free thread=%d kind=munmap addr=0x%x size=%d" % (t, addr, size))
                continue
            fkind = PYFREE if kind == PYMALLOC else cw.FREE
            c.free(addr, kind=fkind, thread=t)
            want.append("free thread=%d kind=%s addr=0x%x" % (t, KIND_NAMES[fkind], addr))
            if kind == PYMALLOC:
                freed[cw.size_class(size)].append(addr)
            continue
        r = rnd.random()
        if r < 0.8:
            size, kind = rnd.choice((8, 16, 24, 30, 32, 48, 56, 64, 100, 200, 511)), PYMALLOC
            cls = cw.size_class(size)
            if freed[cls]:
                addr = freed[cls].pop()
            else:
                addr = pools.get(cls, 0x7F0000000000 + cls * 0x1000000)
                pools[cls] = addr + 16 * cls
        elif r < 0.95:
            size, kind = rnd.randrange(513, 1 << 20), cw.MALLOC
            addr = 0x550000000000 + (rnd.randrange(1 << 32) & ~7) if rnd.random() < 0.97 else 0
        else:
            size, kind = 4096 * rnd.randrange(1, 64), MMAP
            addr = 0x7E0000000000 + 4096 * rnd.randrange(1 << 20)
        stack = rnd.choice((0, 1, 2, 3, 1000, 70000))
        c.alloc(addr, size, stack=stack, kind=kind, thread=t)
        want.append("alloc thread=%d kind=%s addr=0x%x size=%d stack=%d" % (t, KIND_NAMES[kind], addr,
                                                                          size, stack))
        if addr:
            live.append((addr, size, kind))
        if rnd.random() < 0.001:
            c.flush()
    return want


@pytest.mark.parametrize("plain", [False, True])
def test_address_modes_follow_the_specification(memtrace, tmp_path, plain):
    """Hot records coded by the tests' own writer, which implements
    docs/format.md 3.1 apart from the C code, read back exactly: every
    address mode is used (rings, the block of a class freed last, one block
    on, table slots, deltas), and a writer that uses deltas only is read
    the same."""
    c = Capture(plain=plain)
    want = _pymalloc_like(c, random.Random(7), 30000)
    c.trailer(1)
    lines = run(memtrace, "parse", c.save(tmp_path / "m.bin")).stdout.splitlines()
    assert [l for l in lines if l.startswith(("alloc ", "free "))] == want
    modes = collections.Counter()
    for coder in c.coders.values():
        modes.update(coder.modes)
    used = {m for m, n in modes.items() if n}
    if plain:
        assert used == {("alloc", cw.EXPLICIT), ("free", cw.EXPLICIT)}
    else:
        assert {("alloc", 0), ("alloc", 8), ("alloc", 9), ("alloc", cw.ALIGNED), ("alloc", cw.EXPLICIT),
                ("free", 0), ("free", 11), ("free", 12), ("free", cw.ALIGNED),
                ("free", cw.EXPLICIT)} <= used, modes


@pytest.mark.parametrize("huffman,history", [(True, True), (False, True), (True, False)])
def test_coded_chunks_follow_the_specification(memtrace, tmp_path, huffman, history):
    """Chunks coded by the tests' own writer, which implements docs/format.md
    2.3 and 2.4 apart from the C code (LZ4 blocks that refer back into the
    columns' histories, split into streams, Huffman coded), read back
    exactly; every third chunk is stored as it is, and its columns join the
    histories all the same."""
    packer = cw.Packer(huffman=huffman, history=history, store_every=3)
    c = Capture(packer=packer)
    want = _pymalloc_like(c, random.Random(11), 12000)
    c.trailer(1)
    lines = run(memtrace, "parse", c.save(tmp_path / "m.bin")).stdout.splitlines()
    assert [l for l in lines if l.startswith(("alloc ", "free "))] == want
    assert packer.methods[1] > 10 and packer.chunks_stored >= 2, (packer.methods, packer.chunks_stored)
    assert packer.forms[1] > 10 if huffman else packer.forms[1] == 0, packer.forms
    # and the histories make the chunks smaller
    plain = Capture(packer=cw.Packer(huffman=huffman, history=not history, store_every=3))
    _pymalloc_like(plain, random.Random(11), 12000)
    plain.trailer(1)
    plain.flush()
    assert (len(c.out) < len(plain.out)) == history, (len(c.out), len(plain.out))


def test_truncated_capture_is_read(memtrace, tmp_path):
    full = program().save(tmp_path / "full.bin").read_bytes()
    cut = tmp_path / "cut.bin"
    cut.write_bytes(full[:-7])  # inside the last chunk
    p = run(memtrace, "summary", "--json", "--leaks", cut)
    assert "capture is truncated: read 2 chunks" in p.stderr
    assert p.stderr.count("\n") == 1
    rows = json.loads(p.stdout)["rows"]
    assert any(r["function"] == "<no Python frames>" for r in rows)
    # no trailer at all (killed between chunks)
    cap = program(trailer=False).save(tmp_path / "k.bin")
    p = run(memtrace, "stats", cap)
    assert "truncated" in p.stderr and "dropped events:     unknown" in p.stdout


def test_every_truncation_length(memtrace, tmp_path):
    full = program().save(tmp_path / "full.bin").read_bytes()
    cut = tmp_path / "cut.bin"
    for n in range(0, len(full), 7):
        cut.write_bytes(full[:n])
        p = run(memtrace, "stats", cut, check=False)
        assert p.returncode in (0, 1), (n, p.stderr)
        assert p.stderr.startswith("memtrace: "), (n, p.stderr)
        if p.returncode == 1:
            assert n < 68 and p.stderr.count("\n") == 1, (n, p.stderr)


@pytest.mark.parametrize("command", [["stats"], ["stats", "--json"], ["summary"], ["summary", "--leaks"],
                                     ["parse"]])
def test_corrupt_chunk_mid_file(memtrace, tmp_path, command):
    """Damage with more data after it is an error (exit 1, one line), not a
    truncation warning: the delta state makes the rest unreadable."""
    data = bytearray(program().save(tmp_path / "p.bin").read_bytes())
    first = 68 + 16  # header (52 + 16 bytes of command line), first chunk header
    data[first + 3] ^= 0x10
    cap = tmp_path / "bad.bin"
    cap.write_bytes(bytes(data))
    p = run(memtrace, *command, cap, check=False)
    assert p.returncode == 1, p.stderr
    assert p.stderr == ("memtrace: cannot read '%s': capture is corrupt: chunk 0 at byte 68: "
                        "checksum mismatch; read 0 chunks before it\n" % cap), p.stderr
    if command != ["parse"]:
        assert p.stdout == ""
    else:  # the records before the damage (here only the header) are shown
        assert p.stdout.startswith("header ")


def test_corrupt_chunk_header_mid_file(memtrace, tmp_path):
    data = bytearray(program().save(tmp_path / "p.bin").read_bytes())
    data[68] = ord("X")
    cap = tmp_path / "bad.bin"
    cap.write_bytes(bytes(data))
    p = run(memtrace, "summary", cap, check=False)
    assert p.returncode == 1 and p.stdout == ""
    assert "capture is corrupt: bad chunk header at byte 68" in p.stderr
    assert p.stderr.count("\n") == 1


def test_damaged_last_chunk_is_truncation(memtrace, tmp_path):
    data = bytearray(program().save(tmp_path / "p.bin").read_bytes())
    data[-3] ^= 0x01  # inside the last chunk's data: fails its checksum
    cap = tmp_path / "cut.bin"
    cap.write_bytes(bytes(data))
    p = run(memtrace, "stats", "--json", cap)
    assert "capture is truncated: read 2 chunks" in p.stderr and p.stderr.count("\n") == 1
    assert json.loads(p.stdout)["status"]["truncated"] is True


@pytest.mark.parametrize("content,message", [
    (None, "No such file or directory"),
    (b"", "file is empty"),
    (os.urandom(4096), "not a memtrace capture"),
    (b"MEMTRACX" + bytes(100), "not a memtrace capture"),
    (b"MEMTRACE" + struct.pack("<H", FORMAT_VERSION_MIN - 1) + bytes(100),
     "capture format version %d is not supported" % (FORMAT_VERSION_MIN - 1)),
    (b"MEMTRACE" + struct.pack("<H", FORMAT_VERSION + 1) + bytes(100),
     "capture format version %d is not supported" % (FORMAT_VERSION + 1)),
    (b"MEMTRACE" + struct.pack("<HH", FORMAT_VERSION, 52) + bytes(10), "file ends inside the capture header"),
    (b"MEMTRACE" + struct.pack("<HH", FORMAT_VERSION, 8) + bytes(100), "capture header is corrupt"),
])
@pytest.mark.parametrize("command", [["stats"], ["summary"], ["summary", "--leaks"], ["parse"],
                                     ["stats", "--json"]])
def test_bad_files(memtrace, tmp_path, content, message, command):
    path = tmp_path / "in.bin"
    if content is not None:
        path.write_bytes(content)
    p = run(memtrace, *command, path, check=False)
    assert p.returncode == 1
    assert p.stdout == ""
    assert p.stderr.startswith("memtrace: ") and p.stderr.count("\n") == 1, p.stderr
    assert message in p.stderr


def test_directory_and_usage(memtrace, tmp_path):
    p = run(memtrace, "stats", tmp_path, check=False)
    assert p.returncode == 1 and "Is a directory" in p.stderr
    for args, said in ((["stats"], "wants one capture (0 given"),
                       (["summary", "-n", "x", "c.bin"], "-n wants a number"),
                       (["parse", "a", "b"], "wants one capture (2 given")):
        p = run(memtrace, *args, check=False)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.count("\n") == 1 and said in p.stderr, p.stderr


def commands(memtrace):
    """The commands `memtrace --help` lists."""
    text = run(memtrace, "--help").stdout
    listed = text.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in listed.splitlines()]


def usage_error(p, cmd, *words):
    """@p said what is wrong in one line naming @cmd and its --help, and
    exited 2 without the usage."""
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and "usage" not in p.stderr, p.stderr
    assert p.stderr.startswith("memtrace: %s: " % cmd), p.stderr
    assert p.stderr.endswith("see memtrace %s --help)\n" % cmd), p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)


def test_usage_errors_are_one_line(memtrace, tmp_path):
    """Every command says in one line what is wrong with its arguments
    (and points at its --help); --help alone prints the usage."""
    cmds = commands(memtrace)
    assert len(cmds) >= 13 and "run" in cmds and "live" in cmds, cmds
    wants = {"run": "no program given", "attach": "no pid given", "detach": "no pid given",
             "diff": "two captures", "live": "one capture or PORT",
             "transform": "a FORMAT and a capture"}
    for cmd in cmds:
        p = run(memtrace, cmd, check=False, cwd=tmp_path)
        usage_error(p, cmd, wants.get(cmd, "wants one capture (0 given"))
        for bad, said in (("--bogus", "unrecognized option '--bogus'"),
                          ("-Z", "invalid option '-Z'")):
            usage_error(run(memtrace, cmd, bad, "x", check=False, cwd=tmp_path), cmd, said)
        p = run(memtrace, cmd, "--help")
        assert p.stdout.startswith("usage: memtrace %s" % cmd) and p.stderr == "", cmd
    cap = program().save(tmp_path / "p.bin")
    for args, said in (
            (["tree", cap, cap], "wants one capture (2 given"),
            (["stats", cap, cap], "wants one capture (2 given"),
            (["transform", "csv"], "wants a FORMAT and a capture (1 given"),
            (["detach", "1", "2"], "one pid only"),
            (["attach", "1", "2"], "one pid only"),
            (["live", cap, cap], "one capture or PORT (2 given"),
            (["tree", "-n"], "option '-n' wants a value"),
            (["summary", cap, "--max-rows"], "option '--max-rows' wants a value"),
            (["summary", "-r"], "option '-r' wants a value"),
            (["tree", "--leaks=1", cap], "option '--leaks' takes no value"),
            (["flamegraph", "--inverted=yes", cap], "option '--inverted' takes no value"),
            (["tree", "--leaks", "-qZ", cap], "invalid option '-Z'"),
            (["table", "-r", "1", cap], "invalid option '-r'"),
            (["tree", "--t", "3", cap],
             "option '--t' is ambiguous: --top, --temporary-allocations, "
             "--temporary-allocation-threshold"),
            (["run", "--bogus", "x.py"], "unrecognized option '--bogus'"),
            (["run", "-q", "--live-port"], "option '--live-port' wants a value")):
        usage_error(run(memtrace, *args, check=False, cwd=tmp_path), args[0], said)
    # no command at all
    p = run(memtrace, check=False)
    assert p.returncode == 2 and p.stderr == "memtrace: no command given (see memtrace --help)\n"
    assert not any(n.endswith((".bin", ".html", ".csv")) and n != "p.bin"
                   for n in os.listdir(tmp_path))


def _coded_chunk(data):
    """A chunk of the chunk data @data in its coded form (docs/format.md 2.3)."""
    coded = cw.Packer().pack(data)
    assert len(coded) < len(data)
    return b"MTCK" + struct.pack("<III", len(data), len(coded), mt32(coded)) + coded


def _hostile(kind):
    c = cw.Capture()
    c.thread(0, 4242, "MainThread")
    if kind == "deep-threads":  # a 40,000-deep chain, two threads allocating at every depth
        c.code(1, "/app/a.py", "f", 1)
        for i in range(1, 40001):
            c.stack(i, i - 1, 1)
        for i in range(1, 40001):
            c.alloc(0x100000 + 32 * i, 16, stack=i).alloc(0x100010 + 32 * i, 16, stack=i, thread=1)
            if i % 5000 == 0:
                c.flush()
    if kind == "inflated-ids":  # 24M empty records of an unknown type in 100 KB, then huge ids
        n = 24 << 20
        c.flush()
        c.out += _coded_chunk(cw.varint(n) + cw.varint(0) * 4 + bytes([15 << 4]) * n + bytes(n))
        kind = "huge-ids"
    if kind == "stack-cycle":  # 1 -> 2 -> 1: a parent made after its child
        c.code(1, "/app/a.py", "f", 1).stack(1, 2, 1).stack(2, 1, 1).alloc(0x1000, 100, stack=1)
    elif kind == "line-overflow":  # firstlineno 2^31 - 1 and a table adding to it
        c.code(1, "/app/a.py", "f", 2**31 - 1, bytes([0xE8, 0x02])).stack(1, 0, 1)
        c.alloc(0x1000, 16, stack=1)
    elif kind == "huge-sizes":  # sizes of 2^63 and more, heap and mappings: no allocation is that big
        c.alloc(0x1000, 2**63).free(0x1000).alloc(0x2000, 2**64 - 1)
        c.alloc(0x10000, 2**63, kind=cw.MMAP).free(0x10000, 2**63, kind=cw.MUNMAP)
    elif kind == "huge-heap":  # blocks each below the bound, together more than any address space
        for i in range(200):
            c.alloc(0x1000 + 16 * i, 2**57 - 1)
    elif kind == "far-address":  # a 16-byte delta past 2^64
        c.alloc(2**64 - 16, 32).alloc(2**64 - 16 + 2**63, 32)
    elif kind == "huge-ids":  # ids no capture this small could reach
        c.code(2**24 - 1, "/app/a.py", "f", 1).stack(2**24 - 1, 0, 2**24 - 1)
        c.alloc(0x1000, 100, stack=2**24 - 1)
    elif kind == "far-thread":  # an event of a thread index no THREAD record came near
        c.alloc(0x1000, 100).alloc(0x2000, 100, thread=2**20 - 1)
    elif kind == "stack-twice":  # one stack id, two definitions
        c.code(1, "/app/a.py", "f", 1).stack(1, 0, 1).alloc(0x1000, 100, stack=1)
        c.stack(1, 0, 5).alloc(0x2000, 100, stack=1)
    return c.trailer(1).flush()


@pytest.mark.parametrize("kind,corrupt", [("stack-cycle", True), ("line-overflow", False),
                                          ("huge-sizes", True), ("huge-heap", "sums"),
                                          ("stack-twice", "sums"),
                                          ("far-address", False),
                                          ("huge-ids", False), ("far-thread", True),
                                          ("inflated-ids", False),
                                          ("deep-threads", False)])
@pytest.mark.parametrize("command", [["stats"], ["summary"], ["tree"], ["parse"],
                                     ["flamegraph", "-f", "-o", "out.html"],
                                     ["flamegraph", "--split-threads", "-f", "-o", "out.html"],
                                     ["table", "-f", "-o", "out.html"]])
def test_hostile_captures(memtrace, tmp_path, kind, corrupt, command):
    """Captures found by fuzzing the reader: each gives a report or one error
    line, promptly and in little memory (a cycle among stacks used to hang tree
    and flamegraph; one record with a huge id took gigabytes)."""
    path = tmp_path / "h.bin"
    _hostile(kind).save(path)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    p = subprocess.run([memtrace] + command + [str(path)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=30, preexec_fn=limit)
    if corrupt == "sums":  # corrupt where memory is summed; parse shows the records as they are
        corrupt = command != ["parse"]
    if corrupt:
        assert p.returncode == 1 and "capture is corrupt: chunk 0 at byte " in p.stderr, p.stderr
        assert p.stderr.count("\n") == 1, p.stderr
        why = {"stack-twice": "stack 1 is defined twice", "huge-heap": "add up to more than"}
        assert why.get(kind, "") in p.stderr, p.stderr
    else:
        assert p.returncode == 0 and p.stderr == "", p.stderr
