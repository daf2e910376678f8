"""The HTML reports in headless Chromium, driven over the DevTools protocol
(tests/browser/cdp.py): every page loads from file:// with no console
error and no request beyond its own file, shows the expected frames, and
zoom, search, the thread filter and inversion change what is drawn.
Screenshots go to tests/artifacts/."""

import os

import pytest

from conftest import ARTIFACTS
from test_reports import MB, Capture

from conftest import run

EVIL = "</script><b>boom</b>"


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """main thread: <module> -> load -> parse 6 MB, <module> -> load 2 MB,
    <module> -> EVIL 1 MB; worker thread: work 5 MB freed right away (a
    temporary allocation, and the peak: 14 MB), then work 4 MB kept."""
    d = tmp_path_factory.mktemp("pages")
    c = Capture()
    c.thread(0, 100, "MainThread").thread(1, 101, "worker")
    c.code(1, "/app/main.py", "<module>", 1).code(2, "/app/main.py", "load", 10)
    c.code(3, "/app/main.py", "parse", 20).code(4, "/app/evil.py", EVIL, 1)
    c.code(5, "/app/worker.py", "work", 5)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 2, 3).stack(4, 1, 4).stack(5, 0, 5)
    c.sample(0, 10 * MB)
    c.alloc(0x100000, 6 * MB, stack=3).sample(1000, 20 * MB)
    c.alloc(0x1000000, 2 * MB, stack=2).sample(2000, 22 * MB)
    c.alloc(0x2000000, 1 * MB, stack=4)
    c.alloc(0x3000000, 5 * MB, stack=5, thread=1).free(0x3000000, thread=1)
    c.alloc(0x3000000, 4 * MB, stack=5, thread=1).sample(3000, 30 * MB)
    return c.trailer(4000).save(d / "pages.bin")


def test_flamegraph_peak_between_samples(browser, memtrace, tmp_path):
    """Samples a second apart: the plot's peak, as the subtitle, is between
    the sample before it and the one after, not at the first."""
    c = Capture()
    c.thread(0, 100, "MainThread").code(1, "/app/main.py", "<module>", 1).stack(1, 0, 1)
    c.sample(0, 10 * MB).alloc(0x100000, 6 * MB, stack=1).sample(1_000_000, 20 * MB)
    c.free(0x100000).sample(2_000_000, 12 * MB)
    cap = c.trailer(2_500_000).save(tmp_path / "far.bin")
    page = render(memtrace, cap, "flamegraph", name="far")
    browser.open(page)
    check_clean(browser, page)
    label = browser.eval("memtrace.state.plot")["peak"]["label"]
    assert label.startswith("heap peak 6.00 MiB between ") and " and " in label, label


def render(memtrace, capture, *args, name):
    out = os.path.join(os.path.dirname(str(capture)), name + ".html")
    run(memtrace, args[0], "-f", "-o", out, *args[1:], capture)
    return out


def drawn(b, depth=None):
    boxes = b.eval("memtrace.drawn()")
    return [x for x in boxes if depth is None or x["depth"] == depth]


def names(b, depth):
    return sorted(x["name"] for x in drawn(b, depth) if x["w"] >= 0.5)


def shot(b, name):
    b.screenshot(os.path.join(ARTIFACTS, name + ".png"))


def check_clean(b, page):
    assert b.problems() == []
    assert b.requests() == ["file://" + os.path.abspath(page)]
    assert b.eval("document.querySelectorAll('b, i').length") == 0


def centre(b, name):
    box = [x for x in drawn(b) if x["name"] == name][0]
    r = b.eval("(function(){var r=document.getElementById('flame').getBoundingClientRect();"
               "return [r.left, r.top];})()")
    return r[0] + box["x"] + box["w"] / 2, r[1] + box["depth"] * 18 + 9


def test_flamegraph_peak(browser, memtrace, capture):
    page = render(memtrace, capture, "flamegraph", name="peak")
    browser.open(page)
    check_clean(browser, page)
    assert browser.eval("document.title") == "memtrace flamegraph: memory at the peak \u2014 pages.bin"
    assert browser.eval("document.getElementById('framekinds').hidden") is True  # no native frame
    assert names(browser, 1) == ["<module>", "work"]
    assert names(browser, 2) == [EVIL, "load"]
    assert names(browser, 3) == ["parse"]
    plot = browser.eval("memtrace.state.plot")
    assert plot["points"] == 4 and plot["peak"]["heap"] == 14 * MB
    assert plot["peak"]["label"].startswith("heap peak 14.00 MiB at "), plot["peak"]
    # the tooltip
    x, y = centre(browser, "parse")
    browser.move(x, y)
    tip = browser.eval("document.getElementById('tooltip').innerText")
    assert "parse" in tip and "/app/main.py:20" in tip and "6.00 MiB" in tip
    assert "1 allocation" in tip and "42.86% of the total" in tip
    shot(browser, "flamegraph-peak")

    # zoom into load: its caller stays, the rest goes; then back
    x, y = centre(browser, "load")
    browser.click(x, y)
    load = [b for b in drawn(browser) if b["name"] == "load"][0]
    width = [b for b in drawn(browser) if b["name"] == "all"][0]["w"]
    assert abs(load["w"] - width) < 1
    assert "work" not in names(browser, 1) and names(browser, 3) == ["parse"]
    shot(browser, "flamegraph-zoomed")
    browser.eval("document.getElementById('reset').click()")
    assert names(browser, 1) == ["<module>", "work"]

    # search highlights the matches and sums them
    browser.eval("var s=document.getElementById('search'); s.value='pars';"
                 "s.dispatchEvent(new Event('input'))")
    matched = sorted(b["name"] for b in drawn(browser) if b["match"])
    assert matched == ["parse"]
    assert "matched 6.00 MiB (42.86% of the total)" in browser.eval(
        "document.getElementById('match').textContent")
    shot(browser, "flamegraph-search")
    browser.eval("var s=document.getElementById('search'); s.value='';"
                 "s.dispatchEvent(new Event('input'))")

    # inversion: the allocating functions come first
    browser.eval("document.getElementById('invert').click()")
    assert names(browser, 1) == [EVIL, "load", "parse", "work"]
    assert names(browser, 2) == ["<module>", "<module>", "load"]
    assert "inverted" in browser.eval("document.title")
    shot(browser, "flamegraph-inverted")
    check_clean(browser, page)


def test_flamegraph_threads(browser, memtrace, capture):
    page = render(memtrace, capture, "flamegraph", "--split-threads", name="threads")
    browser.open(page)
    check_clean(browser, page)
    assert browser.eval("document.getElementById('threadbox').hidden") is False
    opts = browser.eval("Array.from(document.querySelectorAll('#thread option')).map(o => o.textContent)")
    assert opts == ["All threads", "MainThread (tid 100)", "worker (tid 101)"]
    assert names(browser, 1) == ["<module>", "work"]
    browser.eval("var t=document.getElementById('thread'); t.value='1'; t.dispatchEvent(new Event('change'))")
    assert names(browser, 1) == ["work"]
    assert [b["bytes"] for b in drawn(browser, 0)] == [5 * MB]
    shot(browser, "flamegraph-thread-worker")
    browser.eval("var t=document.getElementById('thread'); t.value='0'; t.dispatchEvent(new Event('change'))")
    assert names(browser, 1) == ["<module>"]
    browser.eval("var t=document.getElementById('thread'); t.value='-1'; t.dispatchEvent(new Event('change'))")
    assert names(browser, 1) == ["<module>", "work"]
    check_clean(browser, page)


def test_flames_put_the_root_at_the_bottom(browser, memtrace, capture):
    """memray's icicle/flame switch: icicles (the default) hang from the
    root at the top; flames draw the same boxes mirrored, the root in the
    bottom row, and the pointer finds the box where it is drawn."""
    page = render(memtrace, capture, "flamegraph", name="flames")
    browser.open(page)
    assert browser.eval("document.getElementById('flames').checked") is False
    assert {b["name"]: b["row"] for b in drawn(browser)}["all"] == 0
    browser.eval("document.getElementById('flames').click()")
    rows = {b["name"]: b["row"] for b in drawn(browser)}
    assert rows["all"] == 3 and rows["<module>"] == 2 and rows["load"] == 1 and rows["parse"] == 0
    assert browser.eval("parseFloat(document.getElementById('flame').style.height)") == 4 * 18
    box = [b for b in drawn(browser) if b["name"] == "parse"][0]
    r = browser.eval("(function(){var r=document.getElementById('flame').getBoundingClientRect();"
                     "return [r.left, r.top];})()")
    x, y = r[0] + box["x"] + box["w"] / 2, r[1] + 9
    browser.move(x, y)
    assert "/app/main.py:20" in browser.eval("document.getElementById('tooltip').innerText")
    browser.click(x, y)  # zooms into parse, still the top row
    assert browser.eval("memtrace.state.focus.name") == "parse"
    assert [b["row"] for b in drawn(browser) if b["name"] == "parse"] == [0]
    shot(browser, "flamegraph-flames")
    browser.eval("document.getElementById('flames').click()")
    assert {b["name"]: b["row"] for b in drawn(browser)}["parse"] == 3
    check_clean(browser, page)


DRAWN_AT = """(function (d) {
  var c = document.getElementById('flame'), k = c.getContext('2d').getTransform().a;
  var b = memtrace.drawn().filter(function (e) { return e.depth === d; })[0];
  var x = Math.floor((b.x + b.w / 2) * k), y = Math.floor((b.row * 18 + 9) * k);
  return c.getContext('2d').getImageData(x, y, 1, 1).data[3];
})"""


def test_a_deep_graph_is_drawn_on_a_hidpi_screen(browser, memtrace, tmp_path):
    """2,000 frames deep, 36,000 pixels of graph: at two device pixels to
    the pixel, more than a canvas may have, and the page was blank; it is
    drawn with fewer pixels instead, from the root to the deepest box."""
    c = Capture()
    c.thread(0, 100, "MainThread").code(1, "/app/deep.py", "deep", 2)
    for i in range(1, 2001):
        c.stack(i, i - 1, 1)
    c.alloc(0x100000, MB, stack=2000)
    cap = c.trailer(1000).save(tmp_path / "deep.bin")
    page = render(memtrace, cap, "flamegraph", name="deep")
    browser.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=2,
                 mobile=False)
    try:
        browser.open(page)
        check_clean(browser, page)
        assert browser.eval("memtrace.state.maxDepth") == 2000
        for depth in (0, 1, 1000, 2000):
            assert browser.eval(DRAWN_AT + "(%d)" % depth) == 255, depth
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")


def test_split_threads_keep_a_location_of_two_threads_apart(browser, memtrace, tmp_path):
    """memray's --split-threads: one line run by two threads is a box per
    thread (merged only without the option), and the tooltip names the
    box's thread."""
    c = Capture()
    c.thread(0, 100, "MainThread").thread(1, 101, "worker")
    c.code(1, "/app/main.py", "work", 5).stack(1, 0, 1)
    c.alloc(0x100000, 3 * MB, stack=1).alloc(0x1000000, 2 * MB, stack=1, thread=1)
    cap = c.trailer(1000).save(tmp_path / "two.bin")
    page = render(memtrace, cap, "flamegraph", name="two")
    browser.open(page)
    assert [b["bytes"] for b in drawn(browser, 1)] == [5 * MB]
    assert "Thread" not in tooltip_of(browser, "work", "/app/main.py", 5)
    page = render(memtrace, cap, "flamegraph", "--split-threads", name="two-split")
    browser.open(page)
    check_clean(browser, page)
    assert [(b["name"], b["bytes"]) for b in drawn(browser, 1)] == [("work", 3 * MB), ("work", 2 * MB)]
    box = drawn(browser, 1)[1]
    r = browser.eval("(function(){var r=document.getElementById('flame').getBoundingClientRect();"
                     "return [r.left, r.top];})()")
    browser.move(r[0] + box["x"] + box["w"] / 2, r[1] + 18 + 9)
    tip = browser.eval("document.getElementById('tooltip').innerText")
    assert "2.00 MiB" in tip and "Thread: worker (tid 101)" in tip, tip
    browser.eval("document.getElementById('invert').click()")
    assert [b["bytes"] for b in drawn(browser, 1)] == [3 * MB, 2 * MB]
    check_clean(browser, page)


@pytest.mark.parametrize("view,top,title", [
    ("--leaks", ["<module>", "work"], "leaks (live at the end)"),
    ("--temporary-allocations", ["work"], "temporary allocations (threshold 1)"),
])
def test_flamegraph_views(browser, memtrace, capture, view, top, title):
    page = render(memtrace, capture, "flamegraph", view, "--inverted", name=view.strip("-"))
    browser.open(page)
    check_clean(browser, page)
    assert title + ", inverted" in browser.eval("document.title")
    assert browser.eval("document.getElementById('invert').checked") is True
    browser.eval("document.getElementById('invert').click()")
    assert names(browser, 1) == top
    shot(browser, "flamegraph-" + view.strip("-"))


def test_table(browser, memtrace, capture):
    page = render(memtrace, capture, "table", "--split-threads", name="table")
    browser.open(page)
    check_clean(browser, page)
    assert browser.eval("memtrace.state.shown") == ["parse", "work", "load", EVIL]
    assert browser.eval("document.querySelectorAll('#rows tr').length") == 4
    browser.eval("document.querySelector('th[data-col=fn]').click()")  # A to Z first
    assert browser.eval("memtrace.state.shown") == [EVIL, "load", "parse", "work"]
    browser.eval("document.querySelector('th[data-col=fn]').click()")
    assert browser.eval("memtrace.state.shown") == ["work", "parse", "load", EVIL]
    browser.eval("document.querySelector('th[data-col=count]').click()")
    assert browser.eval("document.querySelector('th[data-col=count]').getAttribute('aria-sort')") == "descending"
    browser.eval("var f=document.getElementById('filter'); f.value='worker';"
                 "f.dispatchEvent(new Event('input'))")
    assert browser.eval("memtrace.state.shown") == ["work"]
    cells = browser.eval("Array.from(document.querySelectorAll('#rows td')).map(td => td.textContent)")
    # no source text: /app/worker.py is not on this machine
    assert cells == ["work", "/app/worker.py:5", "", "5.00 MiB", "35.71%", "1", "malloc", "worker (tid 101)"]
    shot(browser, "table")
    check_clean(browser, page)


def test_table_pages_and_sorts_from_the_keyboard(browser, memtrace, tmp_path):
    """2,100 rows, as memray's table: 100 a page, every row reachable by
    Previous and Next (the smallest on the last page); a header sorts
    with Enter once focused."""
    cap = Capture().locations(2100, 0x10000, 1000).trailer(1000).save(tmp_path / "rows.bin")
    page = render(memtrace, cap, "table", name="rows")
    browser.open(page)
    check_clean(browser, page)
    shown = lambda: browser.eval("memtrace.state.shown")
    text = lambda: browser.eval("document.getElementById('shown').textContent")
    assert browser.eval("document.querySelectorAll('#rows tr').length") == 100
    assert shown()[0] == "f2100" and text() == "showing 1 to 100 of 2,100 rows"
    # threads merged, as memray's table without --split-threads: no Thread column
    assert browser.eval("document.getElementById('threadcol').hidden") is True
    assert browser.eval("document.querySelector('#rows tr').children.length") == 7
    assert browser.eval("document.getElementById('prev').disabled") is True
    browser.eval("document.getElementById('next').click()")
    assert shown()[0] == "f2000" and text() == "showing 101 to 200 of 2,100 rows"
    for _ in range(25):
        browser.eval("document.getElementById('next').click()")
    assert shown()[-1] == "f1" and text() == "showing 2,001 to 2,100 of 2,100 rows"
    assert browser.eval("document.getElementById('next').disabled") is True
    # the filter starts again at the first page
    browser.eval("var f=document.getElementById('filter'); f.value='f210';"
                 "f.dispatchEvent(new Event('input'))")
    assert shown() == ["f2100", "f210"] and text() == "2 of 2,100 rows"
    assert browser.eval("document.getElementById('pager').hidden") is True
    assert browser.eval("document.getElementById('none').hidden") is True
    browser.eval("var f=document.getElementById('filter'); f.value='nothing like it';"
                 "f.dispatchEvent(new Event('input'))")
    assert browser.eval("document.getElementById('none').textContent") == "No row matches the filter."
    assert browser.eval("document.getElementById('none').hidden") is False
    browser.eval("var f=document.getElementById('filter'); f.value='';"
                 "f.dispatchEvent(new Event('input'))")
    # Tab order reaches the headers; Enter on Function sorts by it
    browser.eval("document.querySelector('th[data-col=fn]').focus()")
    assert browser.eval("document.activeElement.tabIndex") == 0
    for kind in ("keyDown", "keyUp"):
        browser.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                     windowsVirtualKeyCode=13)
    assert browser.eval("document.querySelector('th[data-col=fn]').getAttribute('aria-sort')") == "ascending"
    assert shown()[0] == "f1"
    check_clean(browser, page)


def test_names_of_pages_stay_on_the_screen(browser, memtrace, tmp_path):
    """A function, a file and a thread named by thousands of characters:
    the tooltip keeps a few lines of each and its figures on the screen,
    and the table wraps them rather than growing 40,000 pixels wide."""
    c = Capture()
    c.thread(0, 100, "T" * 5000).code(1, "/app/" + "d/" * 2000 + "x.py", "f_" + "ab<&>" * 3000, 2)
    c.stack(1, 0, 1).alloc(0x1000, MB, stack=1)
    cap = c.trailer(1000).save(tmp_path / "long.bin")
    page = render(memtrace, cap, "flamegraph", "--split-threads", name="long")
    browser.open(page)
    check_clean(browser, page)
    box = drawn(browser, 1)[0]
    r = browser.eval("(function(){var r=document.getElementById('flame').getBoundingClientRect();"
                     "return [r.left, r.top];})()")
    browser.move(r[0] + box["x"] + box["w"] / 2, r[1] + 18 + 9)
    tip = browser.eval("(function () { var t = document.getElementById('tooltip'),"
                       " r = t.getBoundingClientRect();"
                       " return {bottom: r.bottom, height: innerHeight, text: t.innerText}; })()")
    assert tip["bottom"] <= tip["height"] and "1.00 MiB" in tip["text"], tip["bottom"]
    page = render(memtrace, cap, "table", "--split-threads", name="long-table")
    browser.open(page)
    check_clean(browser, page)
    assert browser.eval("document.documentElement.scrollWidth <= innerWidth")


@pytest.mark.parametrize("command", ["flamegraph", "table"])
def test_an_empty_view_says_so(browser, memtrace, tmp_path, command):
    """A capture with no allocation: each page says there is nothing to
    show, as memray's table says it has no data."""
    c = Capture()
    c.thread(0, 100, "MainThread").code(1, "/app/x.py", "f", 2).stack(1, 0, 1)
    cap = c.sample(0, MB).sample(1000, MB).trailer(2000).save(tmp_path / "none.bin")
    page = render(memtrace, cap, command, name="none-" + command)
    browser.open(page)
    check_clean(browser, page)
    said = browser.eval("(function () { var e = document.getElementById('%s');"
                        " return e.offsetParent !== null ? e.textContent : null; })()"
                        % ("empty" if command == "flamegraph" else "none"))
    assert said == "Nothing to show: no memory in this view."


@pytest.mark.parametrize("command", ["flamegraph", "table"])
def test_dropped_events_and_diagnostics_are_shown(browser, memtrace, tmp_path, command):
    """A capture that lost events and says why: both pages say so, the
    tracker's words shown as text whatever they hold."""
    c = Capture()
    c.code(1, "/app/main.py", "<module>", 1).stack(1, 0, 1)
    c.diag(0, "the capture could not be written for a second " + EVIL)
    c.alloc(0x1000, MB, stack=1)
    cap = c.trailer(1000, dropped=1234).save(tmp_path / "lossy.bin")
    page = render(memtrace, cap, command, name="lossy-" + command)
    browser.open(page)
    check_clean(browser, page)
    notes = browser.eval("Array.from(document.querySelectorAll('#notes .note')).map(e => e.textContent)")
    assert ("1,234 events were dropped, as the capture could not be written fast enough: the figures "
            "here leave them out.") in notes, notes
    assert "memtrace: the capture could not be written for a second " + EVIL in notes, notes


@pytest.mark.parametrize("command", ["flamegraph", "table"])
def test_counts_of_one_are_singular(browser, memtrace, tmp_path, command):
    """One allocation, one dropped event: said in the singular."""
    c = Capture()
    c.code(1, "/app/main.py", "<module>", 1).stack(1, 0, 1)
    c.alloc(0x1000, MB, stack=1)
    cap = c.trailer(1000, dropped=1).save(tmp_path / "one.bin")
    page = render(memtrace, cap, command, "--leaks", name="one-" + command)
    browser.open(page)
    check_clean(browser, page)
    subtitle = browser.eval("document.getElementById('subtitle').textContent")
    assert " in 1 allocation \u2014 capture " in subtitle, subtitle
    notes = browser.eval("Array.from(document.querySelectorAll('#notes .note')).map(e => e.textContent)")
    assert ("1 event was dropped, as the capture could not be written fast enough: the figures "
            "here leave them out.") in notes, notes


def test_native_frames_are_blue(browser, memtrace, tmp_path):
    """A --native capture of a program calling into a C library: the C
    frames are drawn in blues, the Python ones in warm colours."""
    from conftest import BUILD
    lib = os.path.join(BUILD, "tests", "targets", "libmt-native-target.so")
    prog = tmp_path / "native_prog.py"
    prog.write_text("import ctypes, sys\nlib = ctypes.CDLL(sys.argv[1])\n"
                    "lib.mt_native_a.restype = ctypes.c_void_p\n"
                    "def f():\n    return lib.mt_native_a(5000000)\nkeep = f()\n")
    cap = tmp_path / "native.bin"
    run(memtrace, "run", "--native", "-o", cap, "--python", "/usr/bin/python3", prog, lib)
    page = render(memtrace, cap, "flamegraph", "--leaks", name="native")
    browser.open(page)
    check_clean(browser, page)
    boxes = {b["name"]: b for b in drawn(browser)}
    for name, native in (("mt_native_a", True), ("mt_native_b", True), ("f", False)):
        assert name in boxes, sorted(boxes)
        b = boxes[name]
        hue = int(b["colour"].split("(")[1].split(",")[0])
        assert b["native"] is native and (190 <= hue < 235 if native else hue < 55), b
    x, y = centre(browser, "mt_native_a")
    browser.move(x, y)
    tip = browser.eval("document.getElementById('tooltip').innerText")
    assert "[C] mt_native_a" in tip
    # and a key to the colours says which is which
    assert browser.eval("document.getElementById('framekinds').hidden") is False
    assert browser.eval("document.getElementById('framekinds').textContent") == \
        "Python frames native (C) frames"
    # a C frame's line too, its source being readable here
    assert "void *p = mt_native_b(n); /* native-target: b call */" in tip, tip
    shot(browser, "flamegraph-native")


REAL_MOD = "BLOCK = bytearray(3 * 1024 * 1024)  # held by the module\n"
REAL_PROG = """\
import memtrace
with memtrace.Tracker("real.bin"):
    import real_mod
    mine = bytearray(2 * 1024 * 1024)  # the script's own block
"""


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A real capture: a script that, under a memtrace.Tracker, imports a
    module of its own that allocates 3 MB at import time (the import
    system's frames are on its stacks), and allocates 2 MB itself; every
    object through malloc, so that the Tracker's own small allocations in
    __exit__ are seen."""
    from conftest import BUILD, ROOT
    d = tmp_path_factory.mktemp("real")
    (d / "real_mod.py").write_text(REAL_MOD)
    (d / "prog.py").write_text(REAL_PROG)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD,
               PYTHONMALLOC="malloc")
    run("/usr/bin/python3", "prog.py", cwd=d, env=env)
    return d / "real.bin"


# every node of the tree the page built: [name, file, line, depth, total]
TREE_NODES = """(function () {
  var out = [], stack = [memtrace.state.tree];
  while (stack.length) {
    var n = stack.pop();
    out.push([n.name, n.file, n.line, n.depth, n.total]);
    Array.prototype.push.apply(stack, n.children);
  }
  return out;
})()"""


def hidden_kinds(nodes):
    return sorted({f for _, f, _, _, _ in nodes
                   if f.startswith("<frozen importlib") or f.endswith("/memtrace/tracker.py")})


def toggle_hidden(b):
    b.eval("document.getElementById('showhidden').click()")


def tooltip_of(b, name, file, line):
    box = [x for x in drawn(b) if (x["name"], x["file"], x["line"]) == (name, file, line)][0]
    r = b.eval("(function(){var r=document.getElementById('flame').getBoundingClientRect();"
               "return [r.left, r.top];})()")
    b.move(r[0] + box["x"] + box["w"] / 2, r[1] + box["depth"] * 18 + 9)
    return b.eval("document.getElementById('tooltip').innerText")


def test_import_system_frames_hidden_and_source_lines(browser, memtrace, real):
    page = render(memtrace, real, "flamegraph", name="real-peak")
    prog, mod = str(real.with_name("prog.py")), str(real.with_name("real_mod.py"))
    browser.open(page)
    check_clean(browser, page)
    total = browser.eval("memtrace.data.total_bytes")
    assert browser.eval("document.getElementById('showhidden').checked") is False
    nodes = browser.eval(TREE_NODES)
    assert hidden_kinds(nodes) == [] and nodes[0][4] == total
    # the module's line right under the line that imported it
    byloc = {(n[0], n[1], n[2]): n for n in nodes}
    assert byloc[("<module>", prog, 3)][3] == 1 and byloc[("<module>", mod, 1)][3] == 2
    assert byloc[("<module>", mod, 1)][4] >= 3 * 1024 * 1024
    # the tooltips show the lines' text, as the files have it
    tip = tooltip_of(browser, "<module>", mod, 1)
    assert REAL_MOD.strip() in tip and mod + ":1" in tip
    assert "import real_mod" in tooltip_of(browser, "<module>", prog, 3)
    tip = tooltip_of(browser, "<module>", prog, 4)
    assert "mine = bytearray(2 * 1024 * 1024)  # the script's own block" in tip
    shot(browser, "flamegraph-real-hidden")

    # the checkbox brings the import system back, with the same totals
    toggle_hidden(browser)
    nodes = browser.eval(TREE_NODES)
    assert any(f.startswith("<frozen importlib._bootstrap") for f in hidden_kinds(nodes)), nodes
    assert nodes[0][4] == total
    byloc = {(n[0], n[1], n[2]): n for n in nodes}
    assert byloc[("<module>", mod, 1)][3] > 2
    assert "_find_and_load" in [n[0] for n in nodes]
    shot(browser, "flamegraph-real-shown")
    # inverted, hidden again: still none, same total
    browser.eval("document.getElementById('invert').click()")
    toggle_hidden(browser)
    nodes = browser.eval(TREE_NODES)
    assert hidden_kinds(nodes) == [] and nodes[0][4] == total
    check_clean(browser, page)


def test_runpy_frames_hidden_in_the_flame_graph(browser, memtrace, tmp_path):
    """A program run with python -m: as memray's flame graph, the page
    starts at its <module>, runpy's frames above it hidden with the
    import system's; the text reports keep them, as memray's."""
    c = Capture()
    c.thread(0, 100, "MainThread")
    c.code(1, "<frozen runpy>", "_run_module_as_main", 198).code(2, "<frozen runpy>", "_run_code", 88)
    c.code(3, "/app/modx.py", "<module>", 1)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 2, 3)
    c.alloc(0x100000, 3 * MB, stack=3)
    cap = c.trailer(1000).save(tmp_path / "m.bin")
    page = render(memtrace, cap, "flamegraph", name="runpy")
    browser.open(page)
    check_clean(browser, page)
    assert names(browser, 1) == ["<module>"] and names(browser, 2) == []
    toggle_hidden(browser)
    assert names(browser, 1) == ["_run_module_as_main"] and names(browser, 3) == ["<module>"]
    assert "_run_code at <frozen runpy>:88" in run(memtrace, "summary", cap).stdout


def test_memtrace_frames_hidden(browser, memtrace, real):
    # the Tracker's __exit__ allocates a little, freed at once: temporary
    page = render(memtrace, real, "flamegraph", "--temporary-allocations", name="real-temp")
    browser.open(page)
    check_clean(browser, page)
    total = browser.eval("memtrace.data.total_bytes")
    nodes = browser.eval(TREE_NODES)
    assert hidden_kinds(nodes) == [] and nodes[0][4] == total
    toggle_hidden(browser)
    shown = browser.eval(TREE_NODES)
    assert shown[0][4] == total
    exits = [n for n in shown if n[1].endswith("/memtrace/tracker.py")]
    assert exits and all(n[0] == "Tracker.__exit__" for n in exits), shown
    # shown, its text is memtrace's own source line
    assert "Tracker.__exit__" in [b["name"] for b in drawn(browser)]
    toggle_hidden(browser)
    assert hidden_kinds(browser.eval(TREE_NODES)) == []
    # started with them shown
    page = render(memtrace, real, "flamegraph", "--temporary-allocations", "--show-hidden-frames",
                  name="real-temp-shown")
    browser.open(page)
    assert browser.eval("document.getElementById('showhidden').checked") is True
    assert [n for n in browser.eval(TREE_NODES) if n[1].endswith("/memtrace/tracker.py")]
    check_clean(browser, page)


def test_table_source_column_and_hidden_frames(browser, memtrace, real):
    page = render(memtrace, real, "table", name="real-table")
    browser.open(page)
    check_clean(browser, page)
    rows = browser.eval("Array.from(document.querySelectorAll('#rows tr')).map("
                        "tr => Array.from(tr.children).map(td => td.textContent))")
    srcs = {r[1]: r[2] for r in rows}
    mod = str(real.with_name("real_mod.py"))
    assert srcs[mod + ":1"] == REAL_MOD.strip()
    assert not any(loc.startswith("<frozen") or "/memtrace/" in loc for loc in srcs), srcs
    notes = browser.eval("Array.from(document.querySelectorAll('#notes .note')).map(e => e.textContent)")
    assert any("import system and of memtrace are hidden" in n for n in notes), notes
    # the filter finds a row by its source text
    browser.eval("var f=document.getElementById('filter'); f.value='held by the module';"
                 "f.dispatchEvent(new Event('input'))")
    locs = browser.eval("Array.from(document.querySelectorAll('#rows tr')).map("
                        "tr => tr.children[1].textContent)")
    assert locs and set(locs) == {mod + ":1"}, locs  # one row per allocator
    shot(browser, "table-real")
