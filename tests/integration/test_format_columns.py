"""Version 7's chunk layout, which version 8 keeps (docs/format.md section
2.1): with native stacks the node segments of NATIVE and HYBRID records
have a column each. A real numpy program's capture (with line tables,
which version 6 needs: MEMTRACE_TEST_LINETABLES=1), written again in
version 6's layout of six columns (tests/targets/mt-recode), reads as the
same records and gives the same reports, and one with lines cannot be
written as version 6 or 7; the payload still writes version 6 when a test asks
(MEMTRACE_TEST_FORMAT6=1); a node segment of the new columns that does not
decode, and damage in the middle of a capture, give one error line and exit
1; a capture cut short is read up to its last whole chunk."""

import os
import re
import subprocess

import pytest

from conftest import BUILD, run

RECODE = os.path.join(BUILD, "tests", "targets", "mt-recode")
PYTHON = "/usr/bin/python3"

PROG = r'''
import numpy as np

keep = []
for i in range(300):
    a = np.zeros(100 + i)
    b = (a + 1.0) * 2.0
    keep.append(b.sum())
    if i % 10 == 0:
        keep.append(np.ones((32, 32)) @ np.ones((32, 32)))
'''


def numpy_missing():
    try:
        return subprocess.run([PYTHON, "-c", "import numpy"], stderr=subprocess.DEVNULL).returncode != 0
    except OSError:
        return True


needs_numpy = pytest.mark.skipif(numpy_missing(), reason="no numpy for /usr/bin/python3")


def version_of(memtrace_bin, cap):
    head = run(memtrace_bin, "parse", cap).stdout.splitlines()[0]
    return int(re.match(r"header version=(\d+) ", head).group(1))


def records(memtrace_bin, cap):
    """Every record's line but the header's and the chunks'."""
    out = run(memtrace_bin, "parse", cap).stdout.splitlines()
    return [l for l in out[1:] if not l.startswith("chunk ")]


def reports(memtrace_bin, cap):
    """stats, tree and summary as text; table and flame graph pages; run
    in the capture's own directory on its file name, which the reports
    show (the same in each)."""
    d = cap.parent
    out = {r: run(memtrace_bin, r, cap.name, cwd=d).stdout for r in ("stats", "tree", "summary")}
    for r in ("table", "flamegraph"):
        page = d / (r + ".html")
        run(memtrace_bin, r, "-f", "-o", page.name, cap.name, cwd=d)
        out[r] = page.read_bytes()
    return out


def capture(memtrace_bin, tmp_path, name, env_extra=None):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    d = tmp_path / name
    d.mkdir()
    cap = d / "c.bin"
    env = dict(os.environ)
    env.pop("MEMTRACE_TEST_FORMAT6", None)
    env.update(env_extra or {})
    run(memtrace_bin, "run", "-q", "--native", "-o", cap, "--python", PYTHON, prog, env=env,
        timeout=300)
    return cap


def recode(src, dst, version):
    dst.parent.mkdir(exist_ok=True)
    run(RECODE, src, dst, version)
    return dst


@needs_numpy
def test_numpy_capture_reads_the_same_in_both_layouts(memtrace, tmp_path):
    if not os.access(RECODE, os.X_OK):
        pytest.fail("%s is not built" % RECODE)
    v8 = capture(memtrace, tmp_path, "v8", {"MEMTRACE_TEST_LINETABLES": "1"})
    assert version_of(memtrace, v8) == 8
    v6 = recode(v8, tmp_path / "v6" / "c.bin", 6)
    assert version_of(memtrace, v6) == 6
    recs = records(memtrace, v8)
    assert sum(l.startswith("native ") for l in recs) > 1000
    assert sum(l.startswith("hybrid ") for l in recs) > 100
    assert records(memtrace, v6) == recs
    assert reports(memtrace, v6) == reports(memtrace, v8)
    # numpy's import makes thousands of native nodes: apart, they take less
    assert os.path.getsize(v8) < os.path.getsize(v6)
    # and back: the same records again
    again = recode(v6, tmp_path / "again" / "c.bin", 7)
    assert records(memtrace, again) == recs

    # a capture whose STACK records carry lines has no older version
    lines = capture(memtrace, tmp_path, "lines")
    for version in ("6", "7"):
        p = run(RECODE, lines, tmp_path / ("lines-v%s.bin" % version), version, check=False)
        assert p.returncode == 1 and p.stderr.strip() == \
            "mt-recode: a capture with lines has no older version", p.stderr
    same = recode(lines, tmp_path / "lines-v8" / "c.bin", 8)
    assert records(memtrace, same) == records(memtrace, lines)


@needs_numpy
def test_payload_writes_version_6_when_asked(memtrace, tmp_path):
    v6 = capture(memtrace, tmp_path, "v6", {"MEMTRACE_TEST_FORMAT6": "1"})
    assert version_of(memtrace, v6) == 6
    v7 = recode(v6, tmp_path / "v7" / "c.bin", 7)
    assert version_of(memtrace, v7) == 7
    assert records(memtrace, v7) == records(memtrace, v6)
    assert reports(memtrace, v7) == reports(memtrace, v6)


def chunks(data):
    """(offset, raw_len, stored_len) of each chunk."""
    off = int.from_bytes(data[10:12], "little")
    out = []
    while off + 16 <= len(data):
        raw, stored = int.from_bytes(data[off + 4:off + 8], "little"), \
            int.from_bytes(data[off + 8:off + 12], "little")
        out.append((off, raw, stored))
        off += 16 + stored
    return out


@needs_numpy
def test_damaged_and_cut_version_7_capture(memtrace, tmp_path):
    v7 = capture(memtrace, tmp_path, "v7")
    data = v7.read_bytes()
    cs = chunks(data)
    assert len(cs) >= 2
    # a byte of the first chunk's data flipped, with more chunks after it
    bad = bytearray(data)
    bad[cs[0][0] + 16 + cs[0][2] // 2] ^= 0x40
    path = tmp_path / "bad.bin"
    path.write_bytes(bytes(bad))
    for cmd in ("stats", "parse"):
        cp = run(memtrace, cmd, path, check=False)
        assert cp.returncode == 1, cmd
        err = cp.stderr.strip().splitlines()
        assert len(err) == 1 and "capture is corrupt: chunk 0" in err[0], cp.stderr
    # cut inside the second chunk: the first is read, with one warning
    cut = tmp_path / "cut.bin"
    cut.write_bytes(data[:cs[1][0] + 16 + cs[1][2] // 2])
    cp = run(memtrace, "stats", cut, check=False)
    assert cp.returncode == 0, cp.stderr
    warn = [l for l in cp.stderr.splitlines() if l.strip()]
    assert len(warn) == 1 and "capture is truncated: read 1 chunk" in warn[0], cp.stderr
    assert "allocations:" in cp.stdout
