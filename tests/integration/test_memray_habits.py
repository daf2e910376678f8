"""What memray's users type, carried over: `python3 -m memtrace` for
`python3 -m memray` (run with the interpreter that ran it), `run -q`."""

import json
import os
import re
import textwrap

import pytest

from conftest import BUILD, ROOT, python_params, run
from test_python_api import alloc_lib  # noqa: F401 (a fixture)

PROG = "keep = [bytearray(1000) for _ in range(100)]\nprint('ran')\n"


def module_env():
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), MEMTRACE_BUILD_DIR=BUILD)
    env.pop("MEMTRACE_BIN", None)
    return env


@pytest.mark.parametrize("python", python_params())
def test_python_m_memtrace_runs_with_its_interpreter(memtrace, script, tmp_path, python):
    prog = script(PROG)
    cap = tmp_path / "m.bin"
    p = run(python, "-m", "memtrace", "run", "-o", cap, prog, env=module_env())
    assert p.stdout == "ran\n" and "capture written to" in p.stderr
    st = run(memtrace, "stats", cap).stdout
    assert "command line:       %s %s" % (python, prog) in st
    # the other commands, unchanged
    p = run(python, "-m", "memtrace", "summary", "-r", "1", cap, env=module_env())
    assert "Peak tracked heap" in p.stdout
    p = run(python, "-m", "memtrace", "nosuch", env=module_env(), check=False)
    assert p.returncode == 2 and "unknown command 'nosuch'" in p.stderr


def test_python_m_memtrace_without_the_command(script, tmp_path):
    env = module_env()
    env["MEMTRACE_BIN"] = str(tmp_path / "missing")
    p = run("/usr/bin/python3", "-m", "memtrace", "stats", "x.bin", env=env, check=False)
    assert p.returncode == 2 and p.stderr == "memtrace: cannot run %s: No such file or directory\n" \
        % env["MEMTRACE_BIN"]


def test_run_quiet(memtrace, script, tmp_path):
    prog = script(PROG)
    p = run(memtrace, "run", "-q", "-o", tmp_path / "q.bin", prog)
    assert p.stdout == "ran\n" and p.stderr == ""
    assert "Peak tracked heap" in run(memtrace, "summary", tmp_path / "q.bin").stdout
    # errors are still said
    p = run(memtrace, "run", "--quiet", "-o", tmp_path / "q.bin", prog, check=False)
    assert p.returncode == 1 and "exists" in p.stderr
    # and so is a killed program's fate, in its exit status
    bad = script("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", name="k.py")
    p = run(memtrace, "run", "-q", "-o", tmp_path / "k.bin", bad, check=False)
    assert p.returncode == -15 and p.stderr == ""


def test_memray_options_taken(memtrace, script, tmp_path):
    """memray's --compress-on-exit and --no-compress (run, attach) and
    --buffered-file-io (run) change nothing here; its stats --num-largest
    is -n."""
    prog = script(PROG)
    for flag in ("--no-compress", "--compress-on-exit", "--buffered-file-io"):
        p = run(memtrace, "run", flag, "-q", "-f", "-o", tmp_path / "c.bin", prog)
        assert p.stdout == "ran\n" and p.stderr == ""
        if flag == "--buffered-file-io":  # memray 1.20's, run's alone
            continue
        p = run(memtrace, "attach", flag, "999999999", check=False)
        assert p.returncode == 1 and "999999999" in p.stderr and "option" not in p.stderr, p.stderr
    rows = lambda out: [l for l in out.split("Top ")[1].splitlines()[1:] if l.strip()]
    top = run(memtrace, "stats", "--num-largest", "1", tmp_path / "c.bin").stdout
    assert "Top 1 location by size" in top and len(rows(top)) == 1, top
    assert top == run(memtrace, "stats", "-n", "1", tmp_path / "c.bin").stdout


def test_memray_page_options_taken(memtrace, script, tmp_path):
    """memray's flamegraph and table --no-web: the pages need no network,
    so it makes the very page made without it."""
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-q", "-o", cap, script(PROG))
    for cmd, flags in (("flamegraph", ("--no-web",)),
                       ("table", ("--no-web",))):
        plain = run(memtrace, cmd, "-o", "-", cap).stdout
        for flag in flags:
            p = run(memtrace, cmd, flag, "-o", "-", cap)
            assert p.stdout == plain and "option" not in p.stderr, (cmd, flag, p.stderr)


SORT_PROG = """\
def many():
    return [bytearray(1000) for _ in range(3000)]


def big():
    return bytearray(5_000_000)


def outer():
    return [many(), big()]


keep = outer()
"""


def test_summary_sort_column(memtrace, script, tmp_path):
    """summary -s/--sort-column N sorts on memray's column N (1, 2 total;
    3, 4 own; 5 allocations, callees' included), marks it in the header,
    and refuses a column memray does not have."""
    cap = tmp_path / "s.bin"
    run(memtrace, "run", "-q", "-o", cap, script(SORT_PROG))
    totals = {(r["function"], r["line"]): r
              for r in json.loads(run(memtrace, "summary", "--json", cap).stdout)["rows"]}

    def rows(*args):
        out = run(memtrace, "summary", "-n", "0", *args, cap).stdout.splitlines()
        head = next(i for i, l in enumerate(out) if l.strip().endswith("Location"))
        body = [l for l in out[head + 1:] if l.startswith(" ")]
        row = re.compile(r"^ *\S+ \S+ +\S+% +\S+ \S+ +\S+% +(\d+)  (.*?)(?: at .*:(\d+))?$")
        parsed = [(m.group(2), int(m.group(3) or 0), int(m.group(1))) for m in map(row.match, body)]
        return out[head], parsed

    for args, mark, key in ((("-s", "1"), "<Total>", "total_bytes"),
                            (("--sort-column", "2"), "<Total%>", "total_bytes"),
                            (("-s", "3"), "<Own>", "own_bytes"),
                            (("-s", "4"), "<Own%>", "own_bytes"),
                            (("-s", "5"), "<Allocs>", "total_allocations")):
        head, body = rows(*args)
        assert head.split().count(mark) == 1 and head.count("<") == 1, head
        values = [totals[(func, line)][key] for func, line, _ in body]
        assert values == sorted(values, reverse=True) and len(body) == len(totals), (args, body)
        # the fifth column is the count with the callees' allocations
        assert all(n == totals[(func, line)]["total_allocations"] for func, line, n in body)
    first = lambda *args: rows(*args)[1][0][0]
    assert first("-s", "3") == "big" and first("-s", "1") != "big"
    order = [func for func, _, _ in rows("-s", "5")[1]]
    assert order.index("many") < order.index("big")
    assert rows()[1] == rows("-s", "1")[1]
    for bad in ("0", "6", "x", "-1", ""):
        p = run(memtrace, "summary", "-s", bad, cap, check=False)
        assert p.returncode == 2 and p.stdout == "" and p.stderr == \
            "memtrace: summary: --sort-column wants a number from 1 to 5, not '%s'\n" % bad


def test_flamegraph_max_memory_records(memtrace, script, tmp_path):
    """flamegraph --max-memory-records N keeps the memory plot to N points
    at most, the highest heap of each stretch kept."""
    cap = tmp_path / "p.bin"
    run(memtrace, "run", "-q", "-o", cap, script(
        "import time\nkeep = []\nt = time.monotonic()\n"
        "while time.monotonic() - t < 0.6:\n    keep.append(bytearray(10000))\n"
        "    time.sleep(0.002)\n"))
    whole, _ = page_data_of(memtrace, cap, tmp_path / "a.html")
    few, _ = page_data_of(memtrace, cap, tmp_path / "b.html", "--max-memory-records", "5")
    n = len(whole["memory"]["time_us"])
    assert n > 10, whole["memory"]
    for k in ("time_us", "rss", "heap"):
        assert 1 <= len(few["memory"][k]) <= 5 and len(whole["memory"][k]) == n
    assert max(few["memory"]["heap"]) == max(whole["memory"]["heap"])
    assert few["memory"]["time_us"] == sorted(few["memory"]["time_us"])
    for bad in ("0", "x", "-3"):
        p = run(memtrace, "flamegraph", "--max-memory-records", bad, "-o", tmp_path / "c.html",
                cap, check=False)
        assert p.returncode == 2 and p.stderr == "memtrace: flamegraph: --max-memory-records " \
            "wants a number from 1 to 4294967295, not '%s'\n" % bad
        assert not (tmp_path / "c.html").exists()


def page_data_of(memtrace, cap, out, *args):
    from test_flamegraph import page_data
    run(memtrace, "flamegraph", "-q", "-o", out, *args, cap)
    return page_data(out)


@pytest.mark.parametrize("python", python_params())
def test_python_allocator_recorded(script, tmp_path, python):
    """Metadata.python_allocator as memray names it, PYTHONMALLOC honoured."""
    prog = script(textwrap.dedent("""\
        import memtrace, sys
        with memtrace.Tracker(sys.argv[1]):
            x = [bytearray(10) for _ in range(10)]
        print(memtrace.FileReader(sys.argv[1]).metadata.python_allocator)
        """))
    got = {}
    for env_value in (None, "malloc", "pymalloc_debug", "malloc_debug"):
        env = module_env()
        env.pop("PYTHONMALLOC", None)
        if env_value:
            env["PYTHONMALLOC"] = env_value
        cap = tmp_path / ("%s.bin" % env_value)
        got[env_value] = run(python, prog, cap, env=env).stdout.strip()
    assert got == {None: "pymalloc", "malloc": "malloc", "pymalloc_debug": "pymalloc debug",
                   "malloc_debug": "malloc"}


LEAKY = "keep = [str(i) * 3 for i in range(20000)]\n"


def test_leaks_say_small_objects_may_hide(memtrace, script, tmp_path):
    """--leaks on a capture made with pymalloc and without its domains
    traced says, on the terminal and in the page, what would show them."""
    prog = script(LEAKY)
    env = dict(os.environ)
    env.pop("PYTHONMALLOC", None)
    caps = {}
    for name, extra, pymalloc in (("pym", [], None), ("malloc", [], "malloc"),
                                  ("traced", ["--trace-python-allocators"], None)):
        e = dict(env)
        if pymalloc:
            e["PYTHONMALLOC"] = pymalloc
        caps[name] = tmp_path / (name + ".bin")
        run(memtrace, "run", *extra, "-o", caps[name], prog, env=e)
    p = run(memtrace, "summary", "--leaks", caps["pym"])
    assert p.stderr.count("\n") == 1 and "memtrace: note: pymalloc was Python's allocator" in p.stderr
    assert "PYTHONMALLOC=malloc or --trace-python-allocators" in p.stderr
    run(memtrace, "flamegraph", "--leaks", "-o", tmp_path / "f.html", caps["pym"])
    assert "PYTHONMALLOC=malloc or --trace-python-allocators" in (tmp_path / "f.html").read_text()
    # not at the peak, nor where each small object is seen
    assert run(memtrace, "summary", caps["pym"]).stderr == ""
    for name in ("malloc", "traced"):
        assert run(memtrace, "summary", "--leaks", caps[name]).stderr == "", name
    assert "python allocator:   pymalloc" in run(memtrace, "stats", caps["pym"]).stdout
    assert "python allocator:   malloc" in run(memtrace, "stats", caps["malloc"]).stdout


ROOTED = """\
import sys, threading, memtrace
keep = []

class K:
    def meth(self):
        keep.append(bytearray(100_000))

def one():
    keep.append(bytearray(50_000))

def body():
    with memtrace.Tracker(sys.argv[1]):
        K().meth()
        one()
        one()
        t = threading.Thread(target=lambda: keep.append(bytearray(300_000)))
        t.start()
        t.join()

def outer():
    body()

outer()
r = memtrace.FileReader(sys.argv[1])
for rec in r.get_leaked_allocation_records(merge_threads=False):
    if rec.size >= 50_000:
        print(rec.size, rec.n_allocations, rec.stack_trace())
"""


@pytest.mark.parametrize("python", python_params())
def test_tracker_stacks_start_where_it_was_entered(script, tmp_path, python):
    """As memray's: the Tracker's thread's stacks end at the frame that
    entered it (outer() and the module are not what is profiled); other
    threads keep theirs whole; function names are co_name."""
    prog = script(ROOTED)
    out = run(python, prog, tmp_path / "r.bin", env=module_env()).stdout.splitlines()
    recs = []
    for line in out:
        size, count, frames = line.split(" ", 2)
        recs.append((int(size), int(count), [tuple(f) for f in eval(frames)]))
    meth = [[f[0] for f in fr] for _, _, fr in recs if fr[0][0] == "meth"]
    assert meth == [["meth", "body"]], out
    # one() called from two lines of the root frame: two stacks, not one
    ones = [fr for _, count, fr in recs if fr[0][0] == "one"]
    assert len(ones) == 2 and ones[0][1][2] != ones[1][1][2], out
    assert all(count == 1 for _, count, fr in recs if fr[0][0] == "one"), out
    thread = [fr for _, _, fr in recs if fr[0][0] == "<lambda>"]
    assert len(thread) == 1 and thread[0][-1][0] == "_bootstrap", out
    assert "body" not in [f[0] for f in thread[0]] and "outer" not in str(recs), out


ROOTED_NATIVE = """\
import json, sys, memtrace
def outer():
    # entered from code that exec() runs: C frames between outer and it
    exec(compile("with memtrace.Tracker(sys.argv[1], native_traces=True):\\n"
                 "    held = bytearray(3 << 20)\\n", "<cell>", "exec"))
outer()
r = memtrace.FileReader(sys.argv[1])
for rec in r.get_leaked_allocation_records(merge_threads=False):
    if rec.size >= 3 << 20:
        print(json.dumps([[f[0] for f in rec.stack_trace()],
                          [f[0] for f in rec.hybrid_stack_trace()]]))
"""


@pytest.mark.parametrize("python", python_params())
def test_native_tracker_stacks_start_where_it_was_entered(memtrace, script, tmp_path, python):
    """With native stacks too, the Tracker's thread's stacks start at the
    frame that entered it, though C frames stand between it and its
    callers: neither they nor the callers are shown (memray drops every
    frame above it)."""
    prog = script(ROOTED_NATIVE)
    cap = tmp_path / "r.bin"
    out = run(python, prog, cap, env=module_env()).stdout.splitlines()
    assert len(out) == 1, out
    python_frames, hybrid = json.loads(out[0])
    assert python_frames == ["<module>"], out
    # the cell's <module> only: not the script's, nor outer, nor exec's C frames
    assert hybrid[-1] == "<module>" and hybrid.count("<module>") == 1, out
    assert "outer" not in hybrid and "builtin_exec" not in hybrid, out
    tree = run(memtrace, "tree", cap).stdout
    assert "<module> at <cell>:2" in tree and "outer" not in tree, tree
    page = tmp_path / "r.html"
    run(memtrace, "flamegraph", "-q", "-o", page, cap)
    assert '"outer"' not in page.read_text()


NAMED = """\
import ctypes, sys, threading
keep = []

def work():
    keep.append(bytearray(100_000))

a = threading.Thread(target=work, name="loader")
a.start(); a.join()
gate = threading.Event()
b = threading.Thread(target=lambda: (gate.wait(), keep.append(bytearray(200_000))))
b.name = "renamed-before"
b.start()
b.name = "renamed-after"
gate.set(); b.join()

# a thread of C code that names itself: its OS name
lib = ctypes.CDLL(sys.argv[1])
lib.mt_target_named_thread.restype = ctypes.c_void_p
assert lib.mt_target_named_thread(b"os-named", 300_001)
keep.append(bytearray(400_000))
"""

DUMP_NAMES = """\
import sys, memtrace
r = memtrace.FileReader(sys.argv[1])
for x in r.get_leaked_allocation_records(merge_threads=False):
    if x.size in (100_001, 200_001, 300_001, 400_001):
        print(x.size, x.thread_name)
"""


@pytest.mark.parametrize("python", python_params())
def test_thread_names(memtrace, script, tmp_path, python, alloc_lib):
    """Python's thread names, renames before and after the start included;
    the OS name of a thread Python did not name."""
    prog = script(NAMED)
    dump = script(DUMP_NAMES, name="dump.py")
    cap = tmp_path / "n.bin"
    run(memtrace, "run", "--python", python, "-o", cap, prog, alloc_lib)
    got = dict(l.split(" ", 1) for l in run(python, dump, cap, env=module_env()).stdout.splitlines())
    assert got == {"100001": "loader", "200001": "renamed-after", "300001": "os-named",
                   "400001": "MainThread"}, got
    # the reports show them too
    run(memtrace, "table", "--split-threads", "-o", tmp_path / "t.html", cap)
    page = (tmp_path / "t.html").read_text()
    assert '"name":"loader"' in page and '"name":"renamed-after"' in page
    assert "name tid=" in run(memtrace, "parse", cap).stdout


def test_thread_names_after_attach(memtrace, tmp_path):
    """Threads that exist when memtrace attaches are named too, and again
    after a detach and a new attach."""
    from attach_target import TARGET, Target, attach, detach
    prog = tmp_path / "target.py"
    prog.write_text(TARGET)
    dump = tmp_path / "dump.py"
    dump.write_text("import sys, memtrace\n"
                    "r = memtrace.FileReader(sys.argv[1])\n"
                    "print(sorted({x.thread_name for x in r.get_leaked_allocation_records("
                    "merge_threads=False) if x.size >= 1_000_000}))\n")
    t = Target("/usr/bin/python3", prog, "sleep")
    try:
        for i in range(2):
            cap = tmp_path / ("a%d.bin" % i)
            attach(memtrace, t.pid, cap)
            t.cmd("alloc 2000000")
            detach(memtrace, t.pid)
            out = run("/usr/bin/python3", dump, cap, env=module_env()).stdout.strip()
            # the commands run on a thread of threading's default name
            assert out.startswith("['Thread-") and "python3" not in out, (i, out)
            # the threads stats counts are the program's: not the one
            # memtrace started tracking on
            threads = json.loads(run(memtrace, "stats", "--json", cap).stdout)["threads"]
            assert all(x["tid"] and not x["name"].startswith("memtrace-") for x in threads), \
                threads
        status, _ = t.finish()
        assert status == 3
    finally:
        t.p.kill()
        t.p.wait()


def test_memray_command_lines_taken(memtrace, script, tmp_path):
    """memray's -V and a -v before the command, detach's --method and -v;
    a memray capture named as one."""
    version = run(memtrace, "--version").stdout
    assert version.startswith("memtrace ") and run(memtrace, "-V").stdout == version
    assert run(memtrace, "-v", "-V").stdout == version
    assert run(memtrace, "-v", "--help").stdout.startswith("usage: memtrace <command>")
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "-q", "-o", cap, script(PROG))
    assert run(memtrace, "-v", "stats", cap).stdout == run(memtrace, "stats", cap).stdout
    # -v before detach is detach's own -v: it says what it does
    for argv in (["-v", "detach", "999999999"], ["detach", "--method", "gdb", "-v", "999999999"],
                 ["--verbose", "detach", "--verbose", "999999999"]):
        p = run(memtrace, *argv, check=False)
        assert p.returncode == 1 and p.stderr == "memtrace: no process with pid 999999999\n", p
    p = run(memtrace, "detach", "--method", "dtrace", "1", check=False)
    assert p.returncode == 2 and p.stderr == \
        "memtrace: invalid --method 'dtrace' (auto, ptrace, gdb or lldb)\n"
    # memray's captures, as written and as compressed on exit
    for name, head, what in (("plain.bin", b"memray\x00\x01" + bytes(64), "a memray capture"),
                             ("lz4.bin", b"\x04\x22\x4d\x18" + bytes(64), "an LZ4 frame")):
        (tmp_path / name).write_bytes(head)
        for cmd in ("stats", "summary", "flamegraph"):
            p = run(memtrace, cmd, tmp_path / name, check=False)
            assert p.returncode == 1 and p.stderr == "memtrace: cannot read '%s': %s" % (
                tmp_path / name, what) + p.stderr.split(what, 1)[1], p.stderr
            assert "memtrace reads the captures it makes" in p.stderr and \
                len(p.stderr.splitlines()) == 1
