#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generate line table test cases for tests/unit/test_linetable.c.

Run with no argument: every Python 3.8..3.13 found (pyenv and
/usr/bin/python3) is asked to compile the same sample source; for each code
object the raw line table and the line the interpreter itself reports for
every instruction offset (PyCode_Addr2Line through ctypes, the function
behind f_lineno) are written as C arrays between the GENERATED markers of
the test file.  Run with --case, it prints that data for the running
interpreter as JSON (used internally).
"""
import glob
import json
import os
import re
import subprocess
import sys

SAMPLE = '''\
import os

def simple(a, b):
    c = a + b
    return c * 2

def branches(items):
    total = 0
    for i, x in enumerate(items):
        if x % 2:
            total += x
        elif x > 10:
            continue
        else:
            total -= (x +
                      i)
    while total > 100:
        total //= 3
    try:
        os.stat("/nonexistent")
    except OSError as e:
        total += len(str(e))
    finally:
        total += 1
    return [y * 2 for y in range(total % 5)], lambda q: q + total
''' + '\n' * 200 + '''\
def far(a):
    x = a
''' + '\n' * 150 + '''\
    y = x + 1
''' + '\n' * 400 + '''\
    return (x,
            y)

class K:
    def method(self, z):
        with open(os.devnull) as f:
            return f.read(z), [
                z,
                z * 2,
            ]
'''

WANT = ("<module>", "simple", "branches", "far", "method")


def case():
    import ctypes

    addr2line = ctypes.pythonapi.PyCode_Addr2Line
    addr2line.restype = ctypes.c_int
    addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
    top = compile(SAMPLE, "<linetable-case>", "exec")
    out = []

    def visit(code):
        if code.co_name in WANT:
            table = code.co_lnotab if sys.version_info < (3, 10) else code.co_linetable
            # co_code has the length of the adaptive bytecode from 3.11 on
            lines = [addr2line(code, off) for off in range(0, len(code.co_code), 2)]
            out.append({"name": code.co_name, "firstlineno": code.co_firstlineno,
                        "table": list(table), "lines": lines})
        for c in code.co_consts:
            if hasattr(c, "co_code"):
                visit(c)

    visit(top)
    return {"hex": sys.hexversion, "version": "%d.%d.%d" % sys.version_info[:3],
            "cases": out}


def pythons():
    found = {}
    for path in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*"))):
        # python3.X only: not -config, -gdb.py or free-threaded 3.Xt
        if not re.fullmatch(r"python3\.[0-9]+", os.path.basename(path)):
            continue
        found.setdefault(os.path.basename(path), path)
    if os.path.exists("/usr/bin/python3"):
        found["/usr/bin/python3"] = "/usr/bin/python3"
    return sorted(found.values())


def c_array(name, ctype, values, per_line=16):
    rows = [", ".join(str(v) for v in values[i:i + per_line])
            for i in range(0, len(values), per_line)]
    return "static const %s %s[] = {\n\t%s\n};\n" % (ctype, name, ",\n\t".join(rows) or "0")


def generate():
    parts, entries, seen = [], [], set()
    for py in pythons():
        try:
            res = subprocess.run([py, os.path.abspath(__file__), "--case"], check=True,
                                 capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as e:
            print("skipping %s: %s" % (py, e), file=sys.stderr)
            continue
        data = json.loads(res.stdout)
        if not (0x03080000 <= data["hex"] < 0x030e0000) or data["version"] in seen:
            continue
        seen.add(data["version"])
        tag = "v" + data["version"].replace(".", "_")
        for c in data["cases"]:
            n = "%s_%s" % (tag, c["name"].strip("<>"))
            parts.append(c_array(n + "_table", "uint8_t", c["table"]))
            parts.append(c_array(n + "_lines", "int16_t", c["lines"]))
            entries.append('\tMT_LT_CASE("%s %s", 0x%08x, %d, %s),\n'
                           % (data["version"], c["name"], data["hex"], c["firstlineno"], n))
    return ("".join(parts) + "\nstatic const struct mt_lt_case mt_lt_cases[] = {\n"
            + "".join(entries) + "};\n")


def main():
    if sys.argv[1:] == ["--case"]:
        json.dump(case(), sys.stdout)
        return
    test = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "unit",
                        "test_linetable.c")
    with open(test) as f:
        text = f.read()
    begin, end = "/* BEGIN GENERATED */\n", "/* END GENERATED */\n"
    a, b = text.index(begin) + len(begin), text.index(end)
    with open(test, "w") as f:
        f.write(text[:a] + generate() + text[b:])


if __name__ == "__main__":
    main()
