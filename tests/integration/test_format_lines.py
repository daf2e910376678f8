"""From format version 8, STACK records carry each frame's source line,
worked out by the payload from the live code object when the node is new,
and CODE records no line tables (docs/format.md section 3.2, MT_HDR_LINES).
The reports of a capture so written name the same lines as those of a
capture with line tables (MEMTRACE_TEST_LINETABLES=1), on every
interpreter, whose line tables come in four layouts."""

import csv
import io
import re

import pytest

from capture_writer import HDR_LINES, Capture
from conftest import python_params, run, switch_captures

PROG = r'''
keep = []


def make(n):
    return bytearray(n)  # MAKE


def spread(n):
    return bytearray(
        n
    )


def outer():
    keep.append(make(100001))  # OUTER
    keep.extend(
        [make(100002 + i) for i in range(3)]
    )
    keep.extend(spread(100010 + i) for i in range(2))
    try:
        raise KeyError(1)
    except KeyError:
        keep.append(bytearray(100020))  # EXCEPT


class K:
    data = bytearray(100030)  # CLASS


outer()
keep.append((lambda: bytearray(100040))())  # LAMBDA
'''


def marker_lines():
    """marker -> line number of the program's line that carries it."""
    out = {}
    for i, text in enumerate(PROG.split("\n"), start=1):
        m = re.search(r"# ([A-Z]+)$", text)
        if m:
            out[m.group(1)] = i
    return out


def leak_rows(memtrace_bin, cap):
    """(size, the stack's prog.py frames) of every leaked stack of the
    program's own, sorted."""
    out = run(memtrace_bin, "transform", "-q", "--leaks", "-o", "-", "csv", cap).stdout
    rows = []
    for r in csv.DictReader(io.StringIO(out)):
        frames = [f for f in r["stack_trace"].split("|") if "prog.py" in f]
        if frames:
            rows.append((int(r["size"]), tuple(frames)))
    return sorted(rows)


def parse_lines(memtrace_bin, cap):
    return run(memtrace_bin, "parse", cap).stdout.splitlines()


@pytest.mark.parametrize("python", python_params())
def test_lines_name_what_line_tables_name(memtrace, tmp_path, python):
    lines_cap, tables_cap = switch_captures(memtrace, tmp_path, "MEMTRACE_TEST_LINETABLES", "-q",
                                            "--python", python, source=PROG)
    with_lines, with_tables = parse_lines(memtrace, lines_cap), parse_lines(memtrace, tables_cap)
    assert re.match(r"header version=8 flags=0x[0-9a-f]+\S*,lines ", with_lines[0]), with_lines[0]
    assert ",lines" not in with_tables[0].split()[2], with_tables[0]
    # no line tables with lines; the program's own code has one without
    assert all(l.endswith(" linetable=0") for l in with_lines if l.startswith("code "))
    assert any(re.search(r'file="[^"]*prog\.py" .* linetable=[1-9]', l) for l in with_tables)
    assert any(re.match(r"stack id=\d+ parent=\d+ code=\d+ line=\d+ entry=[01]$", l)
               for l in with_lines)

    rows = leak_rows(memtrace, lines_cap)
    assert rows == leak_rows(memtrace, tables_cap)
    where = marker_lines()

    def at(frame, func, marker):
        return frame.startswith(func + ";") and frame.endswith("prog.py;%d" % where[marker])
    leaves = [st for _, st in rows]
    assert any(len(st) > 1 and at(st[0], "make", "MAKE") and at(st[1], "outer", "OUTER")
               for st in leaves), rows
    for func, marker in (("outer", "EXCEPT"), ("K", "CLASS"), ("<lambda>", "LAMBDA")):
        assert any(at(st[0], func, marker) for st in leaves), (func, rows)
    # the call spread over three lines, from a generator expression
    assert any(st[0].startswith("spread;") and "<genexpr>" in st[1] for st in leaves), rows

def test_lines_keep_entry_frames_with_native_stacks(memtrace, tmp_path):
    """3.11+ runs several Python frames in one evaluation loop: the low bit
    of a STACK record's line tells the frames that began one, which hybrid
    stacks need; they come out as with line tables."""
    lines_cap, tables_cap = switch_captures(memtrace, tmp_path, "MEMTRACE_TEST_LINETABLES", "-q",
                                            "--native", "--python", "/usr/bin/python3",
                                            source=PROG)
    with_lines = parse_lines(memtrace, lines_cap)
    entries = {l.rsplit("=", 1)[1] for l in with_lines if l.startswith("stack ")}
    assert entries == {"0", "1"}, entries

    def python_frames(cap):
        return sorted((size, tuple(f for f in st if "prog.py" in f))
                      for size, st in leak_rows(memtrace, cap))
    assert python_frames(lines_cap) == python_frames(tables_cap)


def hand_built(flags, version=8):
    """<module> (line 3) -> load (line 12 of a function defined at line 10)
    allocating 1 MB, kept; the STACK records carry lines, CODE records no
    tables, whatever the header says."""
    c = Capture(flags=flags, version=version)
    c.thread(0, 100, "MainThread")
    c.code(1, "/app/m.py", "<module>", 1).code(2, "/app/m.py", "load", 10)
    c.stack_line(1, 0, 1, 3).stack_line(2, 1, 2, 12, entry=0)
    c.alloc(0x100000, 1 << 20, stack=2)
    return c.trailer(1000)


def test_hand_built_capture_with_lines(memtrace, tmp_path):
    """A capture coded from docs/format.md alone: with MT_HDR_LINES the
    reader takes a STACK record's line from its offset field; without the
    flag, or with it in a version 7 header (where bit 7 means nothing),
    the field is a bytecode offset, and a CODE record without a table gives
    the function's first line."""
    def leaf(cap):
        out = run(memtrace, "transform", "-q", "--leaks", "-o", "-", "csv", cap).stdout
        rows = [r for r in csv.DictReader(io.StringIO(out)) if r["size"] == str(1 << 20)]
        assert len(rows) == 1, out
        return rows[0]["stack_trace"].split("|")

    lines = hand_built(HDR_LINES).save(tmp_path / "lines.bin")
    assert leaf(lines) == ["load;/app/m.py;12", "<module>;/app/m.py;3"]
    assert ",lines" in parse_lines(memtrace, lines)[0]
    assert "stack id=2 parent=1 code=2 line=12 entry=0" in parse_lines(memtrace, lines)
    for name, cap in (("offsets.bin", hand_built(0)), ("v7.bin", hand_built(HDR_LINES, 7))):
        assert leaf(cap.save(tmp_path / name)) == ["load;/app/m.py;10", "<module>;/app/m.py;1"]
