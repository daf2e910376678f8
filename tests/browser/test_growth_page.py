"""memtrace growth --html in headless Chromium: the page loads from file://
with no console error and no request beyond its own file, ranks the
leaking stack first with its figures, plots each stack's series, and
filters by function or file."""

import os
import sys

from conftest import ARTIFACTS, run

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
from test_growth import hand_made  # noqa: E402


def test_growth_page(browser, memtrace, tmp_path):
    cap = hand_made(tmp_path / "svc.bin")
    page = str(tmp_path / "growth.html")
    run(memtrace, "growth", "-o", page, cap)
    browser.open(page)
    assert browser.problems() == []
    assert browser.eval("memtrace.state.shown") == ["f", "h"]
    cells = browser.eval("Array.from(document.querySelectorAll('#rows tr')[0].querySelectorAll('td'))"
                         ".map(td => td.textContent)")
    # rank, plot (its title), rise, rate, r, steady, at the end, stack
    assert cells[0] == "1" and cells[2] == "+8.79 KiB" and cells[3] == "+976.56 KiB/s"
    assert cells[4] == "1.00" and cells[5] == "100%" and cells[6] == "9.77 KiB"
    assert cells[7] == "f at /app/svc.py:5\u2190 <module> at /app/svc.py:1"
    # the plot: one point per sample, rising left to right to the top
    pts = browser.eval("document.querySelector('#rows tr polyline').getAttribute('points')")
    ys = [float(p.split(",")[1]) for p in pts.split()]
    assert len(ys) == 10 and all(a > b for a, b in zip(ys, ys[1:])), ys
    h = browser.eval("document.querySelectorAll('#rows tr')[1].querySelector('polyline')"
                     ".getAttribute('points')")
    hy = [float(p.split(",")[1]) for p in h.split()]
    assert hy[0] > hy[1] and len(set(hy[1:])) == 1  # a step, then flat
    browser.eval("var f=document.getElementById('filter'); f.value='/app/svc.py:13';"
                 "f.dispatchEvent(new Event('input'))")
    assert browser.eval("memtrace.state.shown") == ["h"]
    assert browser.eval("document.getElementById('shown').textContent") == "1 of 2 stacks"
    browser.screenshot(os.path.join(ARTIFACTS, "growth.png"))
    assert browser.problems() == []
    assert browser.requests() == ["file://" + os.path.abspath(page)]
