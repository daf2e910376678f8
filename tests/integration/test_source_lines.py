"""The text of each frame's source line in the flamegraph and table pages,
read when the report is made: stripped and cut to 120 characters, and
none (never an error) for a file that is missing, not a regular file,
relative, not UTF-8 at that line, shorter now, or not a *.py file and
readable by its owner alone (memray's guess at files with secrets)."""

import json
import os
import re

import pytest

from conftest import run
from test_reports import MB, Capture

DATA_RE = re.compile(r'<script id="mt-data" type="application/json">(.*?)</script>', re.S)

LONG = "x = [" + ", ".join(str(i) for i in range(60)) + "]"  # over 120 characters
SOURCE = ("def f():\n"
          "    \t  keep = bytearray(10)   # ünïcode  \n"
          "\n"
          + LONG + "\n"
          "bad = 1  # \xff\n")


@pytest.fixture
def files(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    py = src / "a.py"
    py.write_bytes(SOURCE.encode("utf-8").replace("\xff".encode("utf-8"), b"\xff"))
    secret = src / "secret.conf"
    secret.write_text("token = hunter2\n")
    os.chmod(secret, 0o600)
    shared = src / "shared.conf"
    shared.write_text("  shared = 1\n")
    os.chmod(shared, 0o644)
    fifo = src / "fifo.py"
    os.mkfifo(fifo)
    return {"py": str(py), "secret": str(secret), "shared": str(shared), "fifo": str(fifo),
            "dir": str(src), "missing": str(src / "gone.py")}


def capture(tmp_path, frames):
    """One stack of one frame per (file, line), each allocating 1 MB + i."""
    c = Capture()
    c.thread(0, 100, "MainThread")
    for i, (file, name, line) in enumerate(frames, 1):
        c.code(i, file, name, line).stack(i, 0, i)
        c.alloc(0x100000 * i, MB + i, stack=i)
    return c.trailer(1000).save(tmp_path / "s.bin")


def page(memtrace, cap, command):
    out = cap.with_name(command + ".html")
    p = run(memtrace, command, "-f", "-o", out, cap, timeout=60)
    assert p.stderr == ""
    return json.loads(DATA_RE.search(out.read_text()).group(1))


def texts(d, table):
    s = d["strings"]
    cols = d["rows"] if table else d["nodes"]
    return {(s[cols["fn"][i]], cols["line"][i]): (s[cols["src"][i]] if cols["src"][i] >= 0 else None)
            for i in range(len(cols["fn"])) if cols["fn"][i] >= 0}


def test_source_lines_in_both_pages(memtrace, tmp_path, files):
    cap = capture(tmp_path, [
        (files["py"], "f", 1), (files["py"], "keep", 2), (files["py"], "blank", 3),
        (files["py"], "long", 4), (files["py"], "latin", 5), (files["py"], "past_end", 40),
        (files["secret"], "secret", 1), (files["shared"], "shared", 1),
        (files["fifo"], "fifo", 1), (files["dir"], "dir", 1), (files["missing"], "missing", 1),
        ("a.py", "relative", 1), ("<string>", "string", 1),
    ])
    want = {
        ("f", 1): "def f():",
        ("keep", 2): "keep = bytearray(10)   # \u00fcn\u00efcode",
        ("blank", 3): None,
        ("long", 4): LONG[:119] + "\u2026",
        ("latin", 5): None,
        ("past_end", 40): None,
        ("secret", 1): None,
        ("shared", 1): "shared = 1",
        ("fifo", 1): None,
        ("dir", 1): None,
        ("missing", 1): None,
        ("relative", 1): None,
        ("string", 1): None,
    }
    assert len(want[("long", 4)]) == 120
    for command in ("flamegraph", "table"):
        d = page(memtrace, cap, command)
        assert texts(d, command == "table") == want, command
    # a file changed since the capture gives its line as it is now
    with open(files["py"], "w") as f:
        f.write("def g():\n")
    assert texts(page(memtrace, cap, "flamegraph"), False)[("f", 1)] == "def g():"


def test_confidential_files(memtrace, tmp_path, files):
    """memray's --confidential-files: all (no line), none (any file's
    line, the secret one's too) and default (the guess above)."""
    cap = capture(tmp_path, [(files["py"], "f", 1), (files["secret"], "secret", 1),
                             (files["shared"], "shared", 1)])
    want = {
        "default": {("f", 1): "def f():", ("secret", 1): None, ("shared", 1): "shared = 1"},
        "none": {("f", 1): "def f():", ("secret", 1): "token = hunter2",
                 ("shared", 1): "shared = 1"},
        "all": {("f", 1): None, ("secret", 1): None, ("shared", 1): None},
    }
    for command in ("flamegraph", "table"):
        for which, lines in want.items():
            out = tmp_path / ("%s-%s.html" % (command, which))
            p = run(memtrace, command, "--confidential-files", which, "-o", out, cap)
            assert p.stderr == ""
            d = json.loads(DATA_RE.search(out.read_text()).group(1))
            assert texts(d, command == "table") == lines, (command, which)
            if which == "all":
                assert "hunter2" not in out.read_text() and "def f():" not in out.read_text()
        p = run(memtrace, command, "--confidential-files=some", "-o", "-", cap, check=False)
        assert p.returncode == 2 and p.stderr == "memtrace: %s: invalid --confidential-files " \
            "'some' (all, none or default)\n" % command


def test_the_same_line_is_read_once_for_many_frames(memtrace, tmp_path, files):
    cap = capture(tmp_path, [(files["py"], "f", 1), (files["py"], "f.<locals>.g", 1)])
    d = page(memtrace, cap, "flamegraph")
    n = d["nodes"]
    srcs = [n["src"][i] for i in range(1, len(n["fn"]))]
    # one string for both frames
    assert len(set(srcs)) == 1 and d["strings"][srcs[0]] == "def f():"
