"""memtrace growth: the stacks whose live bytes rose across a capture, on
hand-made captures (figures checked against a fit made here) and on a
service that leaks among stacks that grow and shrink."""

import json
import os

import pytest

from conftest import run

from capture_writer import Capture


def fit(series, secs):
    """rise, bytes per second, r and steady of a series, fitted here."""
    k = len(series)
    xs = range(k)
    mx, my = sum(xs) / k, sum(series) / k
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, series))
    syy = sum((y - my) ** 2 for y in series)
    slope = sxy / sxx
    r = sxy / (sxx * syy) ** 0.5 if syy else 0.0
    up = down = 0
    prev = 0
    for y in series:
        up += max(y - prev, 0)
        down += max(prev - y, 0)
        prev = y
    steady = (up - down) / (up + down) if up + down else 0.0
    return slope * (k - 1), slope * (k - 1) / secs, r, steady


def hand_made(path):
    """Ten samples 1 ms apart: f leaks 1000 bytes before each; g holds
    5000 bytes at even samples and none at odd ones; h takes 20000 bytes
    before the second sample and keeps them."""
    c = Capture()
    c.thread(0, 4242, "MainThread")
    c.code(1, "/app/svc.py", "<module>", 1).code(2, "/app/svc.py", "f", 5)
    c.code(3, "/app/svc.py", "g", 9).code(4, "/app/svc.py", "h", 13)
    c.stack(1, 0, 1).stack(2, 1, 2).stack(3, 1, 3).stack(4, 1, 4)
    for i in range(10):
        c.alloc(0x100000 + i * 0x1000, 1000, stack=2)
        if i % 2 == 0:
            c.alloc(0x900000, 5000, stack=3)
        else:
            c.free(0x900000)
        if i == 1:
            c.alloc(0xA00000, 20000, stack=4)
        c.flush()
        c.sample(1000 + 1000 * i, 1 << 24)
    c.trailer(10000)
    return c.save(path)


def test_figures_of_a_hand_made_capture(memtrace, tmp_path):
    cap = hand_made(tmp_path / "svc.bin")
    g = json.loads(run(memtrace, "growth", "--json", cap).stdout)
    assert g["points"] == 10 and g["first_time_us"] == 1000 and g["last_time_us"] == 10000
    assert g["rising_stacks"] == 2  # g ends lower than it starts
    f, h = g["rows"]
    assert [fr["function"] for fr in f["stack"]] == ["f", "<module>"]
    assert [fr["function"] for fr in h["stack"]] == ["h", "<module>"]
    assert f["stack"][0] == {"function": "f", "file": "/app/svc.py", "line": 5}
    series = {"f": [1000 * (i + 1) for i in range(10)], "h": [0] + [20000] * 9}
    for row, name in ((f, "f"), (h, "h")):
        rise, rate, r, steady = fit(series[name], 0.009)
        assert row["rise_bytes"] == round(rise)
        assert row["bytes_per_second"] == pytest.approx(rate, rel=1e-6)
        assert row["r"] == pytest.approx(r, rel=1e-6)
        assert row["steady"] == pytest.approx(steady, rel=1e-6)
        assert row["end_bytes"] == series[name][-1] and row["max_bytes"] == max(series[name])
        assert row["plot"] == series[name]
    assert f["rise_bytes"] == 9000 and f["r"] == pytest.approx(1.0)
    assert f["rank"] == 1 and h["rank"] == 2 and f["score"] > h["score"]

    text = run(memtrace, "growth", cap).stdout
    assert "10 points over 0.009 s (one every 1.0 ms)" in text and "2 stacks rose" in text
    first = text.split("\n#1 ")[1].split("\n#2 ")[0]
    assert "+8.79 KiB over the run" in first and "r 1.00, steady 100%" in first
    assert "f at /app/svc.py:5\n      <- <module> at /app/svc.py:1" in first
    # -n cuts the rows, not the count
    one = json.loads(run(memtrace, "growth", "--json", "-n", "1", cap).stdout)
    assert len(one["rows"]) == 1 and one["rising_stacks"] == 2


def test_a_capture_that_ends_after_its_last_sample(memtrace, tmp_path):
    c = Capture()
    c.code(1, "/app/a.py", "a", 1).stack(1, 0, 1)
    c.sample(1000, 0)
    c.alloc(0x1000, 100, stack=1).flush()
    c.sample(2000, 0)
    c.alloc(0x2000, 100, stack=1).flush()
    c.trailer(5000)  # the end is a point of its own
    g = json.loads(run(memtrace, "growth", "--json", c.save(tmp_path / "a.bin")).stdout)
    assert g["points"] == 3 and g["last_time_us"] == 5000
    assert g["rows"][0]["plot"] == [0, 100, 200]


def test_nothing_rose(memtrace, tmp_path):
    c = Capture()
    c.code(1, "/app/a.py", "a", 1).stack(1, 0, 1)
    for i in range(5):
        c.alloc(0x1000, 100, stack=1).flush()
        c.sample(1000 * (i + 1), 0)
        c.free(0x1000)
    c.trailer(5000)
    cap = c.save(tmp_path / "flat.bin")
    p = run(memtrace, "growth", cap)
    assert "No stack's live bytes rose across the capture." in p.stdout
    assert json.loads(run(memtrace, "growth", "--json", cap).stdout)["rows"] == []


SERVICE = r'''
import random
import time

random.seed(7)
sessions = []            # the leak: 50 kB a request, never let go
caches = [[] for _ in range(10)]
windows = [[] for _ in range(10)]


def remember(request):
    sessions.append(bytearray(50_000))


def cache_0(i, c): c.append(bytearray(30_000)); c[:] = c[-20:] if len(c) > 40 else c
def cache_1(i, c): c.append(bytearray(80_000)); c.clear() if i % 37 == 36 else None
def cache_2(i, c): c.append(bytearray(random.randrange(1000, 200_000))); c.pop(0) if len(c) > 15 else None
def cache_3(i, c): c.extend(bytearray(10_000) for _ in range(random.randrange(0, 10))); del c[:random.randrange(0, len(c) + 1)]
def cache_4(i, c): c.append(bytearray(120_000)); c.clear() if i % 60 == 59 else None
def cache_5(i, c): c.append(bytearray(60_000)); c.pop(random.randrange(len(c))) if len(c) > 25 else None
def cache_6(i, c): c.append(bytearray(5_000)); c.clear() if random.random() < 0.05 else None
def cache_7(i, c): c.append(bytearray(250_000)); c.clear() if i % 23 == 22 else None
def cache_8(i, c): c[:] = [bytearray(40_000) for _ in range(random.randrange(0, 30))]
def cache_9(i, c): c.append(bytearray(100_000)); c.clear() if i % 45 == 44 else None

WORK = [cache_0, cache_1, cache_2, cache_3, cache_4, cache_5, cache_6, cache_7, cache_8, cache_9]


def handle(i):
    remember(i)
    for k, w in enumerate(WORK):
        w(i, caches[k])
    scratch = bytearray(500_000)  # a request's temporary buffer
    time.sleep(0.002)
    return len(scratch)


for i in range(300):
    handle(i)
'''


def test_the_leak_of_a_service_ranks_first(memtrace, script, tmp_path):
    prog = script(SERVICE, "service.py")
    cap = tmp_path / "service.bin"
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", cap, prog)
    g = json.loads(run(memtrace, "growth", "--json", cap).stdout)
    assert g["points"] >= 30, g["points"]
    first = g["rows"][0]
    assert first["stack"][0]["function"] == "remember", [r["stack"][0] for r in g["rows"][:5]]
    # 300 requests of 50 kB: what stayed, and what the fit says it grew by
    assert 299 * 50_000 <= first["end_bytes"] <= 301 * 50_000 + 4096
    # (the fit starts at 0 during start-up, before the first request)
    assert 0.8 * 300 * 50_000 <= first["rise_bytes"] <= 1.3 * 300 * 50_000
    assert first["r"] > 0.95 and first["steady"] > 0.95
    caches = [r for r in g["rows"] if r["stack"] and r["stack"][0]["function"].startswith("cache_")]
    assert all(r["score"] < first["score"] / 2 for r in caches), caches[:3]
    text = run(memtrace, "growth", cap).stdout
    assert text.split("\n#1 ")[1].split("\n#2 ")[0].count("remember at ") == 1


def test_the_page(memtrace, tmp_path):
    cap = hand_made(tmp_path / "memtrace-svc.bin")
    p = run(memtrace, "growth", "--html", cap)
    page = tmp_path / "memtrace-growth-svc.html"
    assert p.stdout == "wrote %s (%s)\n" % (page, p.stdout.split("(")[1][:-2]), p.stdout
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "{{MT_DATA}}" not in html
    data = json.loads(html.split('<script id="mt-data" type="application/json">')[1].split("</script>")[0])
    assert [r["stack"][0]["function"] for r in data["rows"]] == ["f", "h"]
    assert data["rows"][0]["plot"] == [1000 * (i + 1) for i in range(10)]
    assert data["threads"] == []  # its rows are every thread's: a million, for some
    # -o implies the page; an existing page is not overwritten without -f
    out = tmp_path / "g.html"
    run(memtrace, "growth", "-o", out, cap)
    assert out.read_text() == html
    p = run(memtrace, "growth", "-o", out, cap, check=False)
    assert p.returncode == 1 and "exists (use -f to overwrite it)" in p.stderr
    assert run(memtrace, "growth", "-o", "-", cap).stdout == html


@pytest.mark.parametrize("args, message", [
    (["--json", "--html"], "growth: --json and --html (or -o) exclude each other"),
    (["--json", "-o", "x.html"], "growth: --json and --html (or -o) exclude each other"),
    (["-n", "-1"], "growth: -n wants a number from 0 to 4294967295, not '-1'"),
    (["-n", "4294967297"], "growth: -n wants a number from 0 to 4294967295, not '4294967297'"),
])
def test_usage_errors(memtrace, tmp_path, args, message):
    cap = hand_made(tmp_path / "svc.bin")
    p = run(memtrace, "growth", *args, cap, check=False, cwd=tmp_path)
    assert p.returncode == 2 and p.stderr == "memtrace: %s\n" % message, p.stderr
    p = run(memtrace, "growth", check=False)
    assert p.returncode == 2 and p.stderr == \
        "memtrace: growth: wants one capture (0 given; see memtrace growth --help)\n"


def test_bad_captures(memtrace, script, tmp_path):
    p = run(memtrace, "growth", tmp_path / "missing.bin", check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "missing.bin" in p.stderr
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a capture at all")
    p = run(memtrace, "growth", junk, check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "not a memtrace capture" in p.stderr
    agg = tmp_path / "agg.bin"
    run(memtrace, "run", "-q", "--aggregate", "-o", agg, script("x = [bytes(1000) for _ in range(100)]\n"))
    p = run(memtrace, "growth", agg, check=False)
    assert p.returncode == 1 and p.stderr == (
        "memtrace: cannot follow growth in '%s': it is an aggregated capture, which keeps no "
        "history of the allocations (capture without --aggregate)\n" % agg)


def test_stacks_that_print_alike_are_one_row(memtrace, tmp_path):
    """Two offsets of one line (the object and the list it is appended to)
    are two stacks in the capture and one call path in the report."""
    c = Capture()
    c.code(1, "/app/a.py", "<module>", 1).code(2, "/app/a.py", "keep", 5)
    c.stack(1, 0, 1).stack(2, 1, 2, offset=0).stack(3, 1, 2, offset=8)
    for i in range(6):
        c.alloc(0x100000 + i * 0x1000, 1000, stack=2 + i % 2).flush()
        c.sample(1000 * (i + 1), 0)
    c.trailer(6000)
    g = json.loads(run(memtrace, "growth", "--json", c.save(tmp_path / "a.bin")).stdout)
    assert [r["stack"][0]["function"] for r in g["rows"]] == ["keep"]
    assert g["rows"][0]["plot"] == [1000 * (i + 1) for i in range(6)]
    assert g["rows"][0]["steady"] == 1.0 and g["rows"][0]["r"] == pytest.approx(1.0)

