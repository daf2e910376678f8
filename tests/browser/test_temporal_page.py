"""memtrace flamegraph --temporal in headless Chromium: a drag on the memory
plot selects a range of time and the graph shows what was live at the
heap's highest point in it (as memray's, whenever it was allocated), or
what was allocated in it and still live at its end, or never freed;
numbers checked exactly against a hand-made capture."""

import json
import os

import pytest

from conftest import ARTIFACTS, run
from test_reports import MB
from test_temporal import temporal_capture


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    return temporal_capture(tmp_path_factory.mktemp("temporal") / "t.bin")


def page_data(path):
    html = open(path).read()
    return json.loads(html.split('<script id="mt-data" type="application/json">')[1]
                      .split("</script>")[0])


def leaves(b):
    """the frames drawn under <module>, by name: their bytes"""
    return {x["name"]: x["bytes"] for x in b.eval("memtrace.drawn()") if x["depth"] == 2}


def test_data(memtrace, capture, tmp_path):
    out = tmp_path / "t.html"
    run(memtrace, "flamegraph", "--temporal", "-o", out, capture)
    T = page_data(out)["temporal"]
    assert T["time_us"] == [1000, 2000, 3000, 4000, 5000]
    assert T["heap"] == [1 * MB, 3 * MB, 7 * MB, 6 * MB, 2 * MB]
    iv = T["intervals"]
    got = sorted(zip(iv["a"], iv["f"], iv["bytes"], iv["count"]))
    # k's block is never live at a boundary: not there
    assert got == [(0, 3, 1 * MB, 1), (1, -1, 2 * MB, 1), (2, 4, 4 * MB, 1)]


def test_drag_selects_a_range(browser, memtrace, capture, tmp_path):
    out = str(tmp_path / "t.html")
    run(memtrace, "flamegraph", "--temporal", "-o", out, capture)
    browser.open(out)
    assert browser.problems() == []
    assert browser.requests() == ["file://" + os.path.abspath(out)]
    # as memray's, the page opens on the heap's highest point in the whole
    # run, exactly as the flame graph of the peak shows it: the peak (14
    # MB, between the samples of 3 and 4 ms) holds g, h and k, whose block
    # is live at no sample
    assert browser.eval("document.querySelector('input[value=hwm]').checked") is True
    assert leaves(browser) == {"g": 2 * MB, "h": 4 * MB, "k": 8 * MB}
    assert browser.eval("document.getElementById('range').textContent") == \
        "live at the heap\u2019s peak (14.00 MiB) at 0.003 s, the highest point from 0.000 s to 0.005 s"
    subtitle = lambda: browser.eval("document.getElementById('subtitle').textContent")
    assert " 14.00 MiB in 3 allocations in the range\u2019s view \u2014 capture " in subtitle()
    # what is still live at the end of the whole run
    browser.eval("document.querySelector('input[value=live]').click()")
    assert leaves(browser) == {"g": 2 * MB}
    assert " 2.00 MiB in 1 allocation in the range\u2019s view \u2014 capture " in subtitle()
    assert browser.eval("document.getElementById('range').textContent") == \
        "allocated from 0.000 s to 0.005 s, live at 0.005 s"
    # a drag over the plot from 1.5 ms to 3.5 ms: boundaries 2 and 3 ms
    # (allocated after 1 ms, up to 3 ms, live at 3 ms: g and h)
    P = browser.eval("(function () { var r = document.getElementById('memplot').getBoundingClientRect();"
                     " var p = memtrace.state.plot; return {left: r.left, top: r.top, L: p.L, R: p.R, W: p.W,"
                     " tmax: p.tmax}; })()")
    x = lambda t: P["left"] + P["L"] + (P["W"] - P["L"] - P["R"]) * t / P["tmax"]
    y = P["top"] + 60
    browser.drag(x(1500), y, x(3500), y)
    assert browser.eval("memtrace.state.range") == [1, 2]
    assert leaves(browser) == {"g": 2 * MB, "h": 4 * MB}
    browser.screenshot(os.path.join(ARTIFACTS, "temporal-range.png"))
    # the heap's highest point in that range (7 MB at 3 ms) holds f's block
    # too, allocated before the range: memray's high-water-mark view
    browser.eval("document.querySelector('input[value=hwm]').click()")
    assert leaves(browser) == {"f": 1 * MB, "g": 2 * MB, "h": 4 * MB}
    # from 3.5 ms on: the range holds the peak, between 3 and 4 ms
    browser.eval("memtrace.select(3500, 5000)")
    assert leaves(browser) == {"g": 2 * MB, "h": 4 * MB, "k": 8 * MB}
    # from 4.5 ms on, the highest point is the end's sample (2 MB): g
    browser.eval("memtrace.select(4500, 5000)")
    assert leaves(browser) == {"g": 2 * MB}
    assert "live at 0.005 s (heap 2.00 MiB)" in browser.eval("document.getElementById('range').textContent")
    # never freed, of what was allocated up to 2 ms
    browser.eval("document.querySelector('input[value=leaks]').click()")
    browser.eval("memtrace.select(0, 2000)")
    assert leaves(browser) == {"g": 2 * MB}
    browser.eval("memtrace.select(2500, 3200)")
    assert leaves(browser) == {}
    browser.eval("document.getElementById('wholerun').click()")
    assert browser.eval("memtrace.state.range") == [0, 4]
    assert browser.problems() == []


def test_leaks_opens_on_what_the_range_left_live(browser, memtrace, capture, tmp_path):
    """--leaks --temporal, as memray's: what was allocated in the range and
    not freed by its end; over the whole run, what was never freed."""
    out = str(tmp_path / "l.html")
    run(memtrace, "flamegraph", "--temporal", "--leaks", "-o", out, capture)
    browser.open(out)
    assert browser.eval("document.querySelector('input[value=live]').checked") is True
    assert leaves(browser) == {"g": 2 * MB}
    # up to 2 ms: f's block (freed at 4 ms) and g's were live at its end
    browser.eval("memtrace.select(0, 2000)")
    assert leaves(browser) == {"f": 1 * MB, "g": 2 * MB}
    assert browser.problems() == []


def test_sliders_choose_a_range_from_the_keyboard(browser, memtrace, capture, tmp_path):
    """memray's page has two sliders for the range: here too, moved with
    the arrow keys a boundary at a time, and a drag moves them."""
    out = str(tmp_path / "k.html")
    run(memtrace, "flamegraph", "--temporal", "-o", out, capture)
    browser.open(out)
    value = lambda i: browser.eval("+document.getElementById('%s').value" % i)
    assert (value("from"), value("to")) == (0, 4)

    def keys(key, n):
        for _ in range(n):
            for kind in ("keyDown", "keyUp"):
                browser.call("Input.dispatchKeyEvent", type=kind, key=key, code=key,
                             windowsVirtualKeyCode=39 if key == "ArrowRight" else 37)
    browser.eval("document.getElementById('to').focus()")
    keys("ArrowLeft", 2)
    browser.eval("document.getElementById('from').focus()")
    keys("ArrowRight", 1)
    assert browser.eval("memtrace.state.range") == [1, 2]
    # the heap's highest point up to 3 ms: 7 MB, f, g and h
    assert leaves(browser) == {"f": 1 * MB, "g": 2 * MB, "h": 4 * MB}
    # the start never passes the end
    keys("ArrowRight", 2)
    assert browser.eval("memtrace.state.range") == [3, 3] and value("to") == 3
    browser.eval("memtrace.select(1500, 2500)")
    assert (value("from"), value("to")) == (1, 1)
    assert browser.problems() == []


def test_refusals(memtrace, capture, script, tmp_path):
    for args, word in ((["--temporary-allocations"], "--temporary-allocations"),
                       (["--split-threads"], "--split-threads")):
        p = run(memtrace, "flamegraph", "--temporal", *args, "-o", tmp_path / "x.html", capture,
                check=False)
        assert p.returncode == 2 and p.stderr == "memtrace: flamegraph: --temporal does not go with %s\n" % word
    agg = tmp_path / "agg.bin"
    run(memtrace, "run", "-q", "--aggregate", "-o", agg, script("x = [bytes(1000) for _ in range(10)]\n"))
    p = run(memtrace, "flamegraph", "--temporal", "-o", tmp_path / "y.html", agg, check=False)
    assert p.returncode == 1 and "cannot show the temporal flame graph of" in p.stderr
    assert p.stderr.count("\n") == 1 and not (tmp_path / "y.html").exists()
