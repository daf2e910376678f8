"""The page of memtrace diff in headless Chromium (tests/browser/cdp.py):
it loads from file:// with no error and no request beyond its own file,
draws AFTER's call paths with the path that grew in red and the one that
shrank in blue (in the canvas's pixels too), says the change in labels
and tooltips, and follows the switch to the leaks."""

import os

import pytest

from conftest import ARTIFACTS, run
from test_diff import MB, after_capture, before_capture


@pytest.fixture(scope="module")
def page(memtrace, tmp_path_factory):
    d = tmp_path_factory.mktemp("diffpage")
    before = before_capture().save(d / "before.bin")
    after = after_capture().save(d / "after.bin")
    p = run(memtrace, "diff", "--html", before, after)
    out = d / "memtrace-diff-after.html"
    assert p.stdout.startswith("wrote %s (" % out) and p.stderr == ""
    return str(out)


def drawn(b, name):
    boxes = [x for x in b.eval("memtrace.drawn()") if x["name"] == name]
    assert len(boxes) == 1, (name, boxes)
    return boxes[0]


def canvas_origin(b):
    return b.eval("(function(){var r=document.getElementById('flame').getBoundingClientRect();"
                  "return [r.left, r.top];})()")


def pixel(b, box):
    """The canvas's colour just inside the box's left edge, above its text."""
    return b.eval("(function(){var c=document.getElementById('flame'),d=window.devicePixelRatio||1;"
                  "return Array.prototype.slice.call(c.getContext('2d').getImageData("
                  "Math.round((%f+1)*d),Math.round((%d*18+2)*d),1,1).data);})()"
                  % (box["x"], box["depth"]))


def tooltip(b, box):
    x0, y0 = canvas_origin(b)
    b.move(x0 + box["x"] + box["w"] / 2, y0 + box["depth"] * 18 + 9)
    return b.eval("document.getElementById('tooltip').innerText")


def test_diff_page(browser, page):
    browser.open(page)
    assert browser.problems() == []
    assert browser.requests() == ["file://" + os.path.abspath(page)]
    assert browser.eval("document.title") == \
        "memtrace diff: memory at the peak \u2014 before.bin \u2192 after.bin"
    assert "10.00 MiB \u2192 12.00 MiB, +2.00 MiB (+20.0%)" in browser.eval(
        "document.getElementById('totals').textContent")
    names = sorted(x["name"] for x in browser.eval("memtrace.drawn()") if x["depth"] == 2)
    assert names == ["fresh", "grow", "moved", "shrink"]  # gone is not in AFTER

    grow, shrink, moved = (drawn(browser, n) for n in ("grow", "shrink", "moved"))
    assert (grow["kind"], grow["before"], grow["after"]) == ("growth", 1 * MB, 3 * MB)
    assert (shrink["kind"], shrink["before"], shrink["after"]) == ("shrinkage", 4 * MB, 1 * MB)
    assert moved["kind"] == "unchanged" and moved["change"] == 0
    assert grow["label"] == "grow +2.00 MiB" and shrink["label"] == "shrink -3.00 MiB"
    # what the canvas shows: red for growth, blue for shrinkage, grey for neither
    r, g, b_, _ = pixel(browser, grow)
    assert r > 150 and r > g + 60 and r > b_ + 60, (r, g, b_)
    r, g, b_, _ = pixel(browser, shrink)
    assert b_ > 150 and b_ > r + 60, (r, g, b_)
    r, g, b_, _ = pixel(browser, moved)
    assert abs(r - g) < 8 and abs(g - b_) < 8, (r, g, b_)
    # widths are AFTER's: grow 3 MiB of 12, shrink 1
    assert abs(grow["w"] - 3 * shrink["w"]) < 1.5

    tip = tooltip(browser, grow)
    assert "grow" in tip and "/app/m.py" in tip
    assert "before: 1.00 MiB" in tip and "after: 3.00 MiB" in tip
    assert "change: +2.00 MiB (+200.0%)" in tip
    tip = tooltip(browser, shrink)
    assert "change: -3.00 MiB (-75.0%)" in tip
    # a click zooms into grow: AFTER's width is its own, its siblings go;
    # Escape shows the whole tree again
    x0, y0 = canvas_origin(browser)
    browser.click(x0 + grow["x"] + grow["w"] / 2, y0 + grow["depth"] * 18 + 9)
    zoomed = drawn(browser, "grow")
    assert abs(zoomed["w"] - drawn(browser, "all")["w"]) < 1 and zoomed["x"] == 0
    assert sorted(x["name"] for x in browser.eval("memtrace.drawn()") if x["depth"] == 2) == ["grow"]
    browser.eval("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")
    assert drawn(browser, "grow")["w"] == grow["w"] and drawn(browser, "shrink")["w"] == shrink["w"]
    notes = browser.eval("document.getElementById('notes').textContent")
    assert "Only in BEFORE, so not drawn: 1 call path with 2.00 MiB (gone -2.00 MiB)" in notes
    browser.screenshot(os.path.join(ARTIFACTS, "diff-peak.png"))

    # the leaks: fresh freed everything, so only three paths; the whole shrank
    browser.eval("var s=document.getElementById('view'); s.value='leaks';"
                 "s.dispatchEvent(new Event('change'))")
    names = sorted(x["name"] for x in browser.eval("memtrace.drawn()") if x["depth"] == 2)
    assert names == ["grow", "moved", "shrink"]
    assert drawn(browser, "all")["kind"] == "shrinkage" and drawn(browser, "all")["change"] == -MB
    assert drawn(browser, "grow")["kind"] == "growth"
    assert "live at the end" in browser.eval("document.title")
    assert browser.eval("document.getElementById('notes').textContent") == ""
    # Chromium's advice about this test's own getImageData reads aside
    assert [m for m in browser.problems() if "willReadFrequently" not in m] == []
    browser.screenshot(os.path.join(ARTIFACTS, "diff-leaks.png"))


def test_diff_page_output_and_refusal(memtrace, tmp_path):
    before = before_capture().save(tmp_path / "b.bin")
    after = after_capture().save(tmp_path / "a.bin")
    out = tmp_path / "x.html"
    run(memtrace, "diff", "-o", out, before, after)
    assert b'"kind":"diff"' in out.read_bytes()
    p = run(memtrace, "diff", "-o", out, before, after, check=False)
    assert p.returncode == 1 and "exists" in p.stderr and p.stderr.count("\n") == 1
    run(memtrace, "diff", "-f", "-o", out, before, after)
    p = run(memtrace, "diff", "-o", "-", before, after)
    assert p.stdout.startswith("<!DOCTYPE html>") and '"kind":"diff"' in p.stdout
