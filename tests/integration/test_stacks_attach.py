"""Stacks recorded after `memtrace attach` match what Python reports, for
threads whose frames are older than the capture (parked deep in a call
before the attach) as for new ones, and again after a detach and a second
attach, on every interpreter present, with and without
--trace-python-allocators. The shapes are tests/targets/stackshapes.py's."""

import os

import pytest

from conftest import ROOT, python_params
from attach_target import Target, attach, detach
from test_stacks import assert_stacks_match

TARGET = r'''
import json, sys, threading
sys.path.insert(0, %(targets)r)
sys.setrecursionlimit(5000)
import stackshapes as ss

PARKED = 3
go = [threading.Event() for _ in range(PARKED)]
done = [threading.Event() for _ in range(PARKED)]
leaving = threading.Event()


def work():
    n = ss.site(); b = bytearray(n); ss.note(n)  # at the bottom of an old stack
    ss.recurse(12)
    ss.everything(1)
    n = ss.site(); b = bytearray(n); ss.note(n)


def parked(k, d):
    if d:
        r = parked(k, d - 1)
        n = ss.site(); b = bytearray(n); ss.note(n)  # on the way up, at the end
        return r
    while True:
        go[k].wait()
        go[k].clear()
        if leaving.is_set():
            return 0
        work()
        done[k].set()


def serve(d):
    if d:
        return serve(d - 1)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "round":
            for e in go:
                e.set()
            work()
            for e in done:
                e.wait()
                e.clear()
        elif words[0] == "dump":
            with ss.LOCK:
                data = dict(ss.EXPECTED)
                ss.EXPECTED.clear()
            with open(words[1], "w") as fp:
                json.dump(data, fp)
        elif words[0] == "quit":
            leaving.set()
            for e in go:
                e.set()
            for t in threads:
                t.join()
            print("done", flush=True)
            return
        print("done", flush=True)


threads = [threading.Thread(target=parked, args=(k, 30 + 20 * k)) for k in range(PARKED)]
for t in threads:
    t.start()
print("ready", flush=True)
serve(40)
'''


@pytest.fixture
def stack_target(script):
    return script(TARGET % {"targets": os.path.join(ROOT, "tests", "targets")},
                  name="stack_target.py")


@pytest.mark.parametrize("mode", [[], ["--trace-python-allocators"]], ids=["default", "pyalloc"])
@pytest.mark.parametrize("python", python_params())
def test_stacks_after_attach_and_reattach(memtrace, stack_target, tmp_path, python, mode):
    t = Target(python, stack_target, "-")
    try:
        for i in (1, 2):
            cap, expected = tmp_path / ("a%d.bin" % i), tmp_path / ("expected%d.json" % i)
            attach(memtrace, t.pid, cap, *mode)
            t.cmd("round")
            t.cmd("dump %s" % expected)
            detach(memtrace, t.pid)
            t.cmd("round")  # untracked, between the two captures
            t.cmd("dump %s" % (tmp_path / "between.json"))
            assert_stacks_match(cap, expected, tmp_path, least=500)
        assert t.finish()[0] == 0
    finally:
        t.kill()
