"""The flamegraph page's memory plot draws the C allocator's own count (a
third series, with its legend entry) when the capture's samples have it,
through the samples that do; a capture without it draws two series and
hides the entry. A large share of the count not in the capture is a note
on the page."""

import os

from conftest import ARTIFACTS, run
from test_reports import MB, Capture


def capture(path, in_use):
    c = Capture()
    c.thread(0, 100, "MainThread")
    c.code(1, "/app/main.py", "<module>", 1).stack(1, 0, 1)
    c.sample(0, 10 * MB, in_use=MB if in_use else None)
    c.alloc(0x100000, 6 * MB, stack=1).sample(1000, 20 * MB)
    c.alloc(0x1000000, 2 * MB, stack=1).sample(2000, 22 * MB, in_use=9 * MB if in_use else None)
    c.sample(3000, 30 * MB, in_use=40 * MB if in_use else None)
    return c.trailer(4000).save(path)


def test_plot_with_the_allocator_count(browser, memtrace, tmp_path):
    cap = capture(tmp_path / "in-use.bin", True)
    page = str(tmp_path / "in-use.html")
    run(memtrace, "flamegraph", "-f", "-o", page, cap)
    browser.open(page)
    assert browser.problems() == []
    assert browser.eval("memtrace.data.memory.in_use") == [MB, None, 9 * MB, 40 * MB]
    plot = browser.eval("memtrace.state.plot")
    assert plot["points"] == 4 and plot["in_use_points"] == 3
    assert browser.eval("document.getElementById('lg-inuse').hidden") is False
    # 40 MiB held at the end, 8 MiB of it tracked (and a page of
    # chunk header and rounding each): the page says so
    notes = browser.eval("memtrace.data.diagnostics")
    assert any(n.startswith("glibc's malloc holds 40.00 MiB in use at the end; the capture "
                            "accounts for 8.01 MiB of it (20.0%)") for n in notes), notes
    assert "allocated before tracking started" in browser.eval("document.body.innerText")
    browser.screenshot(os.path.join(ARTIFACTS, "flamegraph-allocator.png"))


def test_plot_without_it(browser, memtrace, tmp_path):
    cap = capture(tmp_path / "plain.bin", False)
    page = str(tmp_path / "plain.html")
    run(memtrace, "flamegraph", "-f", "-o", page, cap)
    browser.open(page)
    assert browser.problems() == []
    assert browser.eval("'in_use' in memtrace.data.memory") is False
    plot = browser.eval("memtrace.state.plot")
    assert plot["points"] == 4 and plot["in_use_points"] == 0
    assert browser.eval("document.getElementById('lg-inuse').hidden") is True
    assert browser.eval("memtrace.data.diagnostics") == []
