"""CODE records leave out a qualified name equal to the name (docs/format.md
section 3.2: readers use the name then): a module's function has an empty
qualname, a method keeps its own, and the reports name both as they did
with every qualname written (MEMTRACE_TEST_FULL_QUALNAME=1)."""

import re

import pytest

from conftest import python_params, run, switch_captures

PROG = r'''
def f():
    return bytearray(300000)


class C:
    def m(self):
        return bytearray(400000)


keep = [f(), C().m()]
'''


def codes(memtrace_bin, cap):
    """name -> qualname of the program's own CODE records."""
    out = {}
    for line in run(memtrace_bin, "parse", cap).stdout.splitlines():
        m = re.match(r'code id=\d+ firstlineno=\d+ file="([^"]*)" name="([^"]*)" qualname="([^"]*)"',
                     line)
        if m and m.group(1).endswith("prog.py"):
            out[m.group(2)] = m.group(3)
    return out


def top_by_size(memtrace_bin, cap):
    """The program's functions in stats' top locations by size."""
    out = run(memtrace_bin, "stats", cap).stdout
    block = out.split("Top 5 locations by size", 1)[1].split("\n\n", 1)[0]
    return [l.split(None, 1)[1] for l in block.splitlines() if "prog.py:" in l and "<module>" not in l]


@pytest.mark.parametrize("python", python_params()[:1])
def test_qualname_equal_to_name_left_out(memtrace, tmp_path, python):
    short_cap, full_cap = switch_captures(memtrace, tmp_path, "MEMTRACE_TEST_FULL_QUALNAME", "-q",
                                          "--python", python, source=PROG)
    short, full = codes(memtrace, short_cap), codes(memtrace, full_cap)
    assert short["f"] == "" and short["<module>"] == ""
    assert short["m"] == "C.m"
    assert full["f"] == "f" and full["<module>"] == "<module>" and full["m"] == "C.m"
    top = top_by_size(memtrace, short_cap)
    assert [re.sub(r" at .*", "", l).split()[-1] for l in top] == ["C.m", "f"], top
    assert top == top_by_size(memtrace, full_cap)
