"""The IPython extension: `%load_ext memtrace` and the %%memtrace_flamegraph
cell magic (memray's %%memray_flamegraph), run in a real IPython shell in
a process of its own."""

import json
import os
import re
import subprocess
import textwrap

import pytest

from conftest import BUILD, ROOT

PYTHON = "/usr/bin/python3"
DATA_RE = re.compile(r'<script id="mt-data" type="application/json">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def ipython():
    if not os.access(PYTHON, os.X_OK):
        pytest.skip("%s is absent" % PYTHON)
    p = subprocess.run([PYTHON, "-c", "import IPython"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if p.returncode != 0:
        pytest.skip("IPython is not installed for %s (Debian: python3-ipython)" % PYTHON)
    return PYTHON


def shell(tmp_path, *cells, prefix=()):
    """Runs @cells in one InteractiveShell in @tmp_path, after
    `%load_ext memtrace`; returns (stdout, stderr, what each cell left:
    its success and the names the test asked for)."""
    driver = textwrap.dedent("""\
        import json, sys
        from IPython.core.interactiveshell import InteractiveShell
        sh = InteractiveShell.instance()
        sh.run_line_magic("colors", "nocolor")
        sh.run_line_magic("load_ext", "memtrace")
        out = []
        for cell, names in json.load(open(sys.argv[1])):
            r = sh.run_cell(cell)
            out.append({"success": r.success,
                        "names": {n: repr(sh.user_ns.get(n))[:40] for n in names},
                        "tracker_left": "__memtrace_cell_tracker__" in sh.user_ns,
                        "transformers": len(sh.ast_transformers)})
        print("RESULT " + json.dumps(out))
    """)
    (tmp_path / "driver.py").write_text(driver)
    (tmp_path / "cells.json").write_text(json.dumps([list(c) for c in cells]))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD)
    p = subprocess.run(list(prefix) + [PYTHON, "driver.py", "cells.json"], cwd=tmp_path,
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, (p.returncode, p.stdout, p.stderr)
    return p.stdout, p.stderr, json.loads(lines[0][len("RESULT "):])


def pages(tmp_path):
    root = tmp_path / "memtrace-results"
    return sorted(root.glob("*/flamegraph.html")) if root.exists() else []


def graph(page):
    """The page's frames as {path of (function, line): bytes}, paths from
    the root, and the page's data."""
    data = json.loads(DATA_RE.search(page.read_text()).group(1))
    nodes, strings = data["nodes"], data["strings"]
    paths = {}
    for i, parent in enumerate(nodes["parent"]):
        if i == 0:
            continue
        chain, j = [], i
        while j != 0:
            fn = nodes["fn"][j]
            chain.append((strings[fn] if fn >= 0 else "", nodes["line"][j]))
            j = nodes["parent"][j]
        paths[tuple(reversed(chain))] = paths.get(tuple(reversed(chain)), 0) + nodes["bytes"][i]
    return paths, data


def bytes_under(paths, prefix):
    return sum(b for p, b in paths.items() if p[:len(prefix)] == prefix)


def test_leaks_cell(ipython, tmp_path):
    """The graph starts at the cell, with the cell's own line numbers; the
    cell's names stay in the namespace; nothing of the magic is left."""
    cell = ("%%memtrace_flamegraph --leaks\n"
            "def grow():\n"
            "    return [bytearray(100000) for _ in range(50)]\n"
            "\n"
            "kept = grow()\n")
    out, err, res = shell(tmp_path, (cell, ["kept"]))
    assert res[0]["success"], (out, err)
    assert res[0]["names"]["kept"].startswith("[bytearray(b'\\x00")
    assert not res[0]["tracker_left"] and res[0]["transformers"] == 0
    [page] = pages(tmp_path)
    assert "Results saved to memtrace-results/%s/flamegraph.html" % page.parent.name in out
    assert os.listdir(page.parent) == ["flamegraph.html"]  # the capture is removed
    paths, data = graph(page)
    assert data["view"] == "leaks"
    # <module> line 4 (kept = grow()) -> grow line 2, and nothing above the cell
    assert all(p[0] == ("<module>", 4) for p in paths if p), paths
    assert bytes_under(paths, (("<module>", 4), ("grow", 2))) >= 50 * 100000, paths


def test_memrays_name_for_the_magic(ipython, tmp_path):
    """A notebook of memray's switches by its %load_ext line: the cells'
    %%memray_flamegraph is memtrace's magic too."""
    cell = ("%%memray_flamegraph --leaks\n"
            "kept = [bytearray(100000) for _ in range(20)]\n")
    out, err, res = shell(tmp_path, (cell, ["kept"]))
    assert res[0]["success"], (out, err)
    [page] = pages(tmp_path)
    paths, data = graph(page)
    assert data["view"] == "leaks" and bytes_under(paths, (("<module>", 1),)) >= 20 * 100000


def test_temporary_and_peak(ipython, tmp_path):
    """--temporary-allocations graphs what was freed soon after; the
    default graph is the peak."""
    temp = ("%%memtrace_flamegraph --temporary-allocations\n"
            "for _ in range(20):\n"
            "    b = bytes(1 << 20)\n"
            "    del b\n")
    peak = ("%%memtrace_flamegraph\n"
            "x = bytearray(8 << 20)\n"
            "del x\n"
            "y = bytearray(1 << 20)\n")
    out, err, res = shell(tmp_path, (temp, []), (peak, ["y"]))
    assert [r["success"] for r in res] == [True, True], (out, err)
    first, second = sorted(pages(tmp_path), key=lambda p: p.stat().st_mtime_ns)
    paths, data = graph(first)
    assert data["view"].startswith("temporary"), data["view"]
    assert bytes_under(paths, (("<module>", 2),)) >= 20 << 20, paths
    paths, data = graph(second)
    assert data["view"] == "peak"
    assert bytes_under(paths, (("<module>", 1),)) >= 8 << 20, paths


def test_cell_with_magics(ipython, tmp_path):
    """The cell's own line magics run their code as IPython runs it (%time
    transforms it too), under the one tracker."""
    cell = ("%%memtrace_flamegraph --leaks\n"
            "%time timed = bytearray(2 << 20)\n"
            "after = 1\n")
    out, err, res = shell(tmp_path, (cell, ["timed", "after"]))
    assert res[0]["names"]["after"] == "1", (out, err)
    assert "already" not in out + err, (out, err)
    assert "Wall time" in out, out
    [page] = pages(tmp_path)
    paths, _ = graph(page)
    assert sum(paths.values()) >= 2 << 20, paths


def test_cell_that_raises(ipython, tmp_path):
    """The cell's exception is shown as IPython shows it, and the graph of
    what it did until then is made (the magic's own cell succeeds, as
    memray's does)."""
    cell = ("%%memtrace_flamegraph --leaks\n"
            "held = bytearray(3 << 20)\n"
            "raise ValueError('from the cell')\n")
    out, err, res = shell(tmp_path, (cell, ["held"]))
    assert "ValueError: from the cell" in out + err
    [page] = pages(tmp_path)
    paths, _ = graph(page)
    assert bytes_under(paths, (("<module>", 1),)) >= 3 << 20, paths
    assert not res[0]["tracker_left"] and res[0]["transformers"] == 0


def test_bad_options_and_cells(ipython, tmp_path):
    """Options memray refuses are refused in one line, without running the
    cell; a cell that cannot run, or is already tracked, makes no page."""
    cells = [
        ("%%memtrace_flamegraph --leaks --temporary-allocations\nran1 = 1\n", ["ran1"]),
        ("%%memtrace_flamegraph --temporal --temporary-allocations\nran2 = 1\n", ["ran2"]),
        ("%%memtrace_flamegraph --no-such-option\nran3 = 1\n", ["ran3"]),
        ("%%memtrace_flamegraph\nran4 = (\n", ["ran4"]),
    ]
    out, err, res = shell(tmp_path, *cells)
    text = out + err
    for r, name in zip(res, ("ran1", "ran2", "ran3", "ran4")):
        assert r["names"][name] == "None", (name, text)
        assert not r["tracker_left"] and r["transformers"] == 0
    assert "not allowed with argument" in text
    assert "Can't create a temporal flame graph of temporary allocations" in text
    assert "unrecognized arguments: --no-such-option" in text
    assert "SyntaxError" in text
    assert "the cell did not run under the tracker: no flame graph" in text
    assert pages(tmp_path) == []
    left = tmp_path / "memtrace-results"
    assert not left.exists() or os.listdir(left) == []


def test_under_memtrace_run(ipython, tmp_path, memtrace):
    """In a process memtrace already tracks, the cell's Tracker is refused
    as memray refuses a second one, and the magic says there is no page."""
    cell = "%%memtrace_flamegraph\nz = bytearray(1 << 20)\n"
    out, err, res = shell(tmp_path, (cell, ["z"]),
                          prefix=(memtrace, "run", "-q", "-o", str(tmp_path / "outer.bin"),
                                  "--python"))
    assert not res[0]["success"]
    text = out + err
    assert "this process is already being tracked" in text
    assert "the cell did not run under the tracker: no flame graph" in text
    assert pages(tmp_path) == []


def test_native_cell_starts_at_the_cell(ipython, tmp_path):
    """With --native too, IPython's frames (and the C frames between them
    and the cell) are not in the graph: it starts at the cell."""
    cell = ("%%memtrace_flamegraph --native --leaks\n"
            "kept = bytearray(4 << 20)\n")
    out, err, res = shell(tmp_path, (cell, []))
    [page] = pages(tmp_path)
    paths, data = graph(page)
    assert any(data["nodes"]["native"]), "no native frame in the graph"
    assert paths and all(p[0] == ("<module>", 1) for p in paths if p), sorted(paths)[:3]
    assert bytes_under(paths, (("<module>", 1),)) >= 4 << 20, paths
    assert "run_cell" not in page.read_text()
