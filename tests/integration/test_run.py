"""memtrace run against real Python processes: attribution, threads,
numpy, exit codes, crashes and bad input."""

import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import BUILD, python_params, report_json, run

FG = """\
def f():
    x = bytearray(10_000_000)
    del x


def g():
    return bytearray(3_000_000)


f()
keep = g()
"""


def row_for(rows, function, path):
    for r in rows:
        if r["function"] == function and r["file"] == str(path):
            return r
    raise AssertionError("no row for %s in %s: %s" % (function, path, rows[:10]))


@pytest.mark.parametrize("python", python_params())
def test_peak_and_leaks_attributed_to_lines(memtrace, script, tmp_path, python):
    prog = script(FG)
    cap = tmp_path / "fg.bin"
    run(memtrace, "run", "--python", python, "-o", cap, prog, cwd=tmp_path)

    stats = report_json(memtrace, "stats", cap)
    peak = stats["totals"]["peak_heap"]
    assert 10_000_000 <= peak <= 11_000_000, peak
    top = stats["top_by_size"][0]
    assert (top["function"], top["file"], top["line"]) == ("f", str(prog), 2), top

    leaks = report_json(memtrace, "summary", cap, "--leaks")
    g = row_for(leaks["rows"], "g", prog)
    assert g["line"] == 7
    assert 3_000_000 <= g["own_bytes"] <= 3_000_100, g
    assert all(r["function"] != "f" for r in leaks["rows"]), leaks["rows"][:5]

    peak_rows = report_json(memtrace, "summary", cap)["rows"]
    f = row_for(peak_rows, "f", prog)
    assert f["line"] == 2 and 10_000_000 <= f["own_bytes"] <= 10_000_100, f


THREADS = """\
import threading

N = 200
kept = {}


def worker_%(i)s():
    mine = []
    for _ in range(N):
        block = bytearray(%(size)d)
        mine.append(block)
    kept[%(i)d] = mine

"""


@pytest.mark.parametrize("python", python_params())
def test_threads_attributed_to_their_own_stacks(memtrace, script, tmp_path, python):
    sizes = {0: 100_003, 1: 200_009, 2: 300_007, 3: 400_009}
    src = "".join(THREADS % {"i": i, "size": s} for i, s in sizes.items())
    src += ("threads = [threading.Thread(target=f) for f in (%s)]\n"
            "for t in threads: t.start()\n"
            "for t in threads: t.join()\n" % ", ".join("worker_%d" % i for i in sizes))
    prog = script(src)
    cap = tmp_path / "t.bin"
    run(memtrace, "run", "--python", python, "-o", cap, prog, cwd=tmp_path)
    leaks = report_json(memtrace, "summary", cap, "--leaks")["rows"]
    per_worker = THREADS.count("\n")
    bytearray_line = THREADS.splitlines().index("        block = bytearray(%(size)d)") + 1
    for i, size in sizes.items():
        r = [r for r in leaks if r["function"] == "worker_%d" % i
             and r["line"] == bytearray_line + i * per_worker]
        assert len(r) == 1, (i, [x for x in leaks if x["function"] == "worker_%d" % i])
        r = r[0]
        # bytearray(n) asks for n + 1 bytes; exact, per thread, but for an
        # arena pymalloc may have mapped there for the objects' headers
        # (256 KiB before 3.10, 1 MiB from), and from 3.10 the nodes of its
        # radix tree of arenas that the new arena's addresses needed
        # (arena_map_get(): calloc'ed on the same path, 2 KiB on 3.10, 128
        # KiB from 3.11, one per 16 GiB of addresses: seldom, and at most
        # two for one arena)
        extra = r["own_bytes"] - 200 * (size + 1)
        allowed = {(0, 0), (256 << 10, 1)}
        allowed |= {((1 << 20) + k * node, 1 + k) for node in (2 << 10, 128 << 10) for k in range(3)}
        assert (extra, r["own_allocations"] - 200) in allowed, r
    stats = report_json(memtrace, "stats", cap)
    assert stats["totals"]["dropped"] == 0


def test_numpy_array_attributed(memtrace, script, tmp_path):
    python = "/usr/bin/python3"
    if run(python, "-c", "import numpy", check=False).returncode != 0:
        pytest.skip("numpy is not installed for %s" % python)
    prog = script("import numpy as np\n\n\ndef make():\n    return np.zeros((1000, 1000))\n\n\nA = make()\n")
    cap = tmp_path / "np.bin"
    run(memtrace, "run", "--python", python, "-o", cap, prog, cwd=tmp_path)
    r = row_for(report_json(memtrace, "summary", cap, "--leaks")["rows"], "make", prog)
    assert r["line"] == 5
    assert 8_000_000 <= r["own_bytes"] <= 8_001_000, r


MREMAP = """\
import mmap


def grow():
    m = mmap.mmap(-1, 1 << 20)
    m.resize(3 << 20)
    return m


def fail():
    m = mmap.mmap(-1, 2 << 20)
    try:
        m.resize(1 << 60)
    except (OSError, ValueError, OverflowError):
        pass
    return m


keep = grow(), fail()
"""


def test_mremap_moves_and_keeps_mappings(memtrace, script, tmp_path):
    """mmap.resize() is mremap: the grown mapping is what stays live, and
    one that could not be resized stays live at its old size."""
    prog = script(MREMAP)
    cap = tmp_path / "mr.bin"
    run(memtrace, "run", "--python", "/usr/bin/python3", "-o", cap, prog, cwd=tmp_path)
    rows = report_json(memtrace, "summary", cap, "--leaks", "-n", "0")["rows"]
    grow = row_for(rows, "grow", prog)
    assert (grow["line"], grow["own_bytes"], grow["own_allocations"]) == (6, 3 << 20, 1), grow
    assert sum(r["own_bytes"] for r in rows if r["function"] == "fail") == 2 << 20, rows[:5]


RACE = r"""
import ctypes, sys, time
loader = ctypes.CDLL(sys.argv[1])
loader.finish.restype = ctypes.c_long
path = sys.argv[2].encode()  # kept: the loader thread reads it
loader.start(path)
n, end = 0, time.monotonic() + 6
while time.monotonic() < end:
    ctypes.CDLL("libm.so.6")  # each dlopen makes memtrace patch every object
    n += 1
print("done", n, loader.finish() > 0)
"""

RACE_LOADER = r"""
#include <dlfcn.h>
#include <pthread.h>
static volatile int stop;
static const char *path;
static void *loop(void *arg)
{
    long n = 0;
    (void)arg;
    while (!stop) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            break;
        ((void (*)(void))dlsym(h, "big_init"))();
        dlclose(h);
        n++;
    }
    return (void *)n;
}
static pthread_t t;
int start(const char *p) { path = p; return pthread_create(&t, 0, loop, 0); }
long finish(void) { void *r; stop = 1; pthread_join(t, &r); return (long)r; }
"""


def test_patching_while_another_thread_loads_a_library(memtrace, script, tmp_path, cc):
    """A thread loads and unloads a library with a large RELRO GOT while
    the main thread's dlopens make memtrace patch every loaded object: the
    loader lists the new object before relocating it, so its GOT pages are
    still being written; patching made them read-only under the loader,
    which then crashed."""
    n = 3000
    (tmp_path / "dep.c").write_text("".join("int f%d(int x){return x+%d;}\n" % (i, i)
                                            for i in range(n)))
    (tmp_path / "big.c").write_text(
        "#include <stdlib.h>\n" + "".join("int f%d(int);\n" % i for i in range(n)) +
        "int big_init(void){int s=0;\n" + "".join("s+=f%d(%d);\n" % (i, i) for i in range(n)) +
        "free(malloc(100));return s;}\n")
    (tmp_path / "loader.c").write_text(RACE_LOADER)
    run(cc, "-shared", "-fPIC", "-O0", "-o", tmp_path / "libdep.so", tmp_path / "dep.c")
    run(cc, "-shared", "-fPIC", "-O0", "-Wl,-z,now", "-Wl,-z,relro", "-o", tmp_path / "libbig.so",
        tmp_path / "big.c", "-L", tmp_path, "-ldep", "-Wl,-rpath," + str(tmp_path))
    run(cc, "-shared", "-fPIC", "-o", tmp_path / "libloader.so", tmp_path / "loader.c",
        "-lpthread")
    prog = script(RACE)
    p = run(memtrace, "run", "--python", "/usr/bin/python3", "-o", tmp_path / "r.bin", prog,
            tmp_path / "libloader.so", tmp_path / "libbig.so", check=False, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr)
    words = p.stdout.split()
    assert words[0] == "done" and words[-1] == "True", p.stdout


def test_command_line_recorded_whole(memtrace, script, tmp_path):
    prog = script("import sys\n")
    cap = tmp_path / "c.bin"
    run(memtrace, "run", "--python", "/usr/bin/python3", "-o", cap, prog, "one", "", "two words",
        cwd=tmp_path)
    header = report_json(memtrace, "stats", cap)["header"]
    assert header["cmdline"] == ["/usr/bin/python3", str(prog), "one", "", "two words"], header
    assert "command line:       /usr/bin/python3 %s one  two words\n" % prog in \
        run(memtrace, "stats", cap).stdout


OWN_ALLOCATOR = r"""
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
/* a library with an allocator of its own under the standard names */
static char *arena;
static size_t used;
static void *bump(size_t n)
{
    if (!arena)
        arena = mmap(0, 1 << 24, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *p = arena + used;
    used += (n + 31) & ~(size_t)15;
    memcpy(p, "MINE", 4);
    return p + 16;
}
void *malloc(size_t n) { return bump(n); }
void *calloc(size_t a, size_t b) { return bump(a * b); }
void *realloc(void *p, size_t n) { void *q = bump(n); if (p) memcpy(q, p, n); return q; }
void free(void *p) { if (p && memcmp((char *)p - 16, "MINE", 4)) __builtin_trap(); }
static char *early;
__attribute__((constructor)) static void init(void) { early = malloc(100); }
int work(void) { char *p = malloc(64); strcpy(p, "x"); free(p); free(early); return 7; }
"""


def test_library_with_its_own_allocator_keeps_it(memtrace, script, tmp_path, cc):
    """A library loaded with RTLD_DEEPBIND that defines malloc and free is
    bound to them: its slots must not be switched to the process's malloc,
    which would then free (or be freed by) the other allocator's blocks."""
    (tmp_path / "mine.c").write_text(OWN_ALLOCATOR)
    run(cc, "-shared", "-fPIC", "-O1", "-o", tmp_path / "libmine.so", tmp_path / "mine.c")
    prog = script("import ctypes, os, sys\n"
                  "lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL | os.RTLD_DEEPBIND)\n"
                  "print(lib.work())\n")
    p = run(memtrace, "run", "--python", "/usr/bin/python3", "-o", tmp_path / "m.bin", prog,
            tmp_path / "libmine.so", check=False)
    assert (p.returncode, p.stdout) == (0, "7\n"), p.stderr


def test_exit_status_and_output_preserved(memtrace, script, tmp_path):
    prog = script("import sys\nprint('hello', sys.argv[1:])\nsys.stdout.flush()\nsys.exit(3)\n")
    bare = run("/usr/bin/python3", prog, "a", "b", check=False)
    p = run(memtrace, "run", "--python", "/usr/bin/python3", "-o", tmp_path / "x.bin", prog,
            "a", "b", check=False, cwd=tmp_path)
    assert p.returncode == bare.returncode == 3
    assert p.stdout == bare.stdout == "hello ['a', 'b']\n"
    assert "capture written to" in p.stderr


def test_writer_thread_never_preempts_the_program(memtrace, script, tmp_path):
    """The payload's writer runs as a batch thread (no wake-up preemption)
    and the program's own threads keep their policy."""
    prog = script(
        "import os\n"
        "for tid in sorted(os.listdir('/proc/self/task')):\n"
        "    name = open('/proc/self/task/%s/comm' % tid).read().strip()\n"
        "    stat = open('/proc/self/task/%s/stat' % tid).read()\n"
        "    print(name, stat.rsplit(')', 1)[1].split()[38])\n")
    p = run(memtrace, "run", "--python", "/usr/bin/python3", "-o", tmp_path / "x.bin", prog,
            cwd=tmp_path)
    policies = dict(line.split() for line in p.stdout.splitlines())
    assert policies.pop("memtrace-write") == "3", p.stdout  # SCHED_BATCH
    assert policies and set(policies.values()) == {"0"}, p.stdout  # SCHED_OTHER


def test_stdin_passes_through(memtrace, script, tmp_path):
    prog = script("import sys\nprint(sys.stdin.read().upper(), end='')\n")
    p = subprocess.run([memtrace, "run", "-o", str(tmp_path / "x.bin"), str(prog)],
                       input="piped text", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, cwd=str(tmp_path))
    assert p.returncode == 0 and p.stdout == "PIPED TEXT"


def test_module_and_command_forms(memtrace, tmp_path):
    p = run(memtrace, "run", "-o", tmp_path / "c.bin", "-c", "print(6 * 7)", cwd=tmp_path)
    assert p.stdout == "42\n"
    p = run(memtrace, "run", "-o", tmp_path / "m.bin", "-m", "json.tool", "--help", cwd=tmp_path)
    assert "usage" in p.stdout
    for cap in ("c.bin", "m.bin"):
        run(memtrace, "stats", tmp_path / cap)


def test_default_output_name(memtrace, script, tmp_path):
    """memray's names: memtrace-prog.py.PID.bin beside the script; for -m
    and -c, memtrace-MODULE.PID.bin and memtrace-string.PID.bin here."""
    prog = script("x = 1\n", name="named.py")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    p = run(memtrace, "run", prog, cwd=elsewhere)
    made = [n for n in os.listdir(tmp_path) if re.fullmatch(r"memtrace-named\.py\.\d+\.bin", n)]
    assert len(made) == 1 and not os.listdir(elsewhere), os.listdir(tmp_path)
    assert p.stderr == "memtrace: capture written to %s\n" % (tmp_path / made[0])
    assert oct(os.stat(tmp_path / made[0]).st_mode & 0o777) == "0o600"
    run(memtrace, "run", "-q", "-c", "x = 1", cwd=elsewhere)
    run(memtrace, "run", "-q", "-m", "json.tool", "--help", cwd=elsewhere)
    names = sorted(re.sub(r"\.\d+\.bin$", ".PID.bin", n) for n in os.listdir(elsewhere))
    assert names == ["memtrace-json.tool.PID.bin", "memtrace-string.PID.bin"], names
    for n in os.listdir(elsewhere):
        assert run(memtrace, "stats", elsewhere / n).returncode == 0
    # a script so deep that the name beside it would not fit in a path
    deep = str(tmp_path)
    while len(deep) + 201 < 4075:
        deep = os.path.join(deep, "d" * 200)
    deep = os.path.join(deep, "e" * (4088 - len(deep) - 6))
    os.makedirs(deep)
    prog = os.path.join(deep, "p.py")
    with open(prog, "w") as f:
        f.write("x = 1\n")
    p = run(memtrace, "run", prog, cwd=elsewhere, check=False)
    assert p.returncode == 1 and p.stderr == "memtrace: the capture's default name beside " \
        "'%s' is too long: name it with -o\n" % prog, p.stderr
    assert os.listdir(deep) == ["p.py"]


def test_refuses_to_overwrite_without_force(memtrace, script, tmp_path):
    prog = script("print('ran')\n")
    cap = tmp_path / "exists.bin"
    cap.write_bytes(b"keep me")
    p = run(memtrace, "run", "-o", cap, prog, check=False)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.strip().count("\n") == 0 and "exists" in p.stderr and "-f" in p.stderr
    assert cap.read_bytes() == b"keep me"
    run(memtrace, "run", "-f", "-o", cap, prog)
    run(memtrace, "stats", cap)


def test_uncaught_exception(memtrace, script, tmp_path):
    prog = script("def boom():\n    raise ValueError('x')\n\nkeep = bytearray(1_000_000)\nboom()\n")
    cap = tmp_path / "e.bin"
    p = run(memtrace, "run", "-o", cap, prog, check=False)
    assert p.returncode == 1 and "ValueError" in p.stderr
    s = run(memtrace, "stats", cap)
    assert "truncated" not in s.stderr


def test_os_exit_keeps_capture(memtrace, script, tmp_path):
    prog = script("import os\ndef h():\n    return bytearray(5_000_000)\nk = h()\nos._exit(7)\n")
    cap = tmp_path / "o.bin"
    p = run(memtrace, "run", "-o", cap, prog, check=False)
    assert p.returncode == 7
    r = row_for(report_json(memtrace, "summary", cap, "--leaks")["rows"], "h", prog)
    assert r["own_bytes"] >= 5_000_000


def test_sigkill_leaves_readable_capture(memtrace, script, tmp_path):
    # The program tells us (through a pipe) when its data is allocated and
    # a flush period has passed; then it is killed outright.
    prog = script("import os, sys, time\n"
                  "def big():\n    return [bytearray(1_000_000) for _ in range(20)]\n"
                  "k = big()\n"
                  "deadline = time.monotonic() + 0.6\n"
                  "while time.monotonic() < deadline: [0] * 10\n"
                  "os.write(int(sys.argv[1]), b'x')\n"
                  "time.sleep(60)\n")
    rfd, wfd = os.pipe()
    cap = tmp_path / "k.bin"
    proc = subprocess.Popen([memtrace, "run", "-o", str(cap), str(prog), str(wfd)],
                            pass_fds=(wfd,), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(wfd)
    assert os.read(rfd, 1) == b"x"
    os.close(rfd)
    # kill the Python process (the child of memtrace run), not memtrace
    kids = open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)).read().split()
    os.kill(int(kids[0]), signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGKILL or proc.returncode == -signal.SIGKILL
    s = run(memtrace, "summary", "--json", "--leaks", cap)
    assert "truncated" in s.stderr
    import json
    r = row_for(json.loads(s.stdout)["rows"], "big", prog)
    assert r["total_bytes"] >= 20_000_000


@pytest.mark.parametrize("args,message", [
    (["run"], "no program given"),
    (["run", "--memory-interval-ms", "0", "x.py"], "invalid --memory-interval-ms"),
    (["run", "--python", "/nonexistent/python", "x.py"], "cannot run interpreter"),
    (["run", "--python", "no-such-python-here", "x.py"], "cannot find interpreter"),
    (["nosuchcommand"], "unknown command"),
])
def test_run_usage_errors(memtrace, tmp_path, args, message):
    p = run(memtrace, *args, check=False, cwd=tmp_path)
    assert p.returncode in (1, 2)
    assert message in p.stderr
    assert not any(n.endswith(".bin") for n in os.listdir(tmp_path))


def test_empty_paths(memtrace, tmp_path):
    """An empty -o or --python is said to be empty, not taken for the
    current directory (or searched for on PATH)."""
    (tmp_path / "x.py").write_text("pass\n")
    for args, said in ((["run", "-o", "", "x.py"], "run: the output path is empty (-o '')"),
                       (["run", "--output=", "x.py"], "run: the output path is empty (-o '')"),
                       (["run", "--python", "", "x.py"],
                        "run: the interpreter path is empty (--python '')"),
                       (["attach", "-o", "", "1"], "attach: the output path is empty (-o '')")):
        p = run(memtrace, *args, check=False, cwd=tmp_path)
        assert p.returncode == 2 and p.stderr == "memtrace: %s\n" % said, (args, p.stderr)
    assert sorted(os.listdir(tmp_path)) == ["x.py"]


@pytest.mark.parametrize("out", ["n.bin", "/dev/null"])
def test_not_python_interpreter(memtrace, tmp_path, out):
    """/bin/true exits 0, and still nothing was profiled: an error."""
    (tmp_path / "x.py").write_text("pass\n")
    p = run(memtrace, "run", "--python", "/bin/true", "-o", out, "x.py",
            check=False, cwd=tmp_path)
    assert p.returncode == 1
    assert p.stderr.startswith("memtrace: no Python interpreter started under memtrace")
    assert p.stderr.count("\n") == 1, p.stderr
    assert not (tmp_path / "n.bin").exists()


def test_unwritable_output_directory(memtrace, script, tmp_path):
    prog = script("pass\n")
    p = run(memtrace, "run", "-o", "/nonexistent-dir/x.bin", prog, check=False)
    assert p.returncode == 1 and "cannot create capture" in p.stderr
    assert p.stderr.count("\n") == 1


def test_capture_on_full_disk_at_start(memtrace, script, full_fs):
    # A full file system refuses the capture's first write: tracking
    # cannot start, the program runs on untouched, and memtrace says why
    # and exits non-zero.
    prog = script("print('still ran')\n")
    cap = full_fs / "c.bin"
    p = run(memtrace, "run", "-o", cap, prog, check=False)
    assert p.stdout == "still ran\n"
    assert p.returncode == 1
    assert "No space left on device" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert "capture '%s' is incomplete" % cap in p.stderr or "no capture written" in p.stderr


def test_disk_fills_during_capture(memtrace, tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt, check=False).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        prog = tmp_path / "big.py"
        prog.write_text("import json\n"
                        "doc = [{'k%d' % i: [i, str(i)]} for i in range(20000)]\n"
                        "for _ in range(20):\n    doc = json.loads(json.dumps(doc))\n"
                        "print('finished')\n")
        cap = mnt / "c.bin"
        p = run(memtrace, "run", "--trace-python-allocators", "-o", cap, prog, check=False)
        assert p.stdout == "finished\n"
        assert p.returncode == 1
        assert "incomplete" in p.stderr and "No space left on device" in p.stderr
        assert p.stderr.count("\n") == 1
        s = run(memtrace, "stats", cap, check=False)
        assert s.returncode == 0 and "truncated" in s.stderr
    finally:
        run("umount", mnt, check=False)


STALL = """\
import sys


def base(n):
    return bytearray(n)


def keep():
    return bytearray(10_000_000)


def churn(n):
    for i in range(n):
        x = bytearray(600 + i * 7919 %% 50000)


# functions of their own code objects, each described when first called
fns = [type(base)(base.__code__.replace(co_firstlineno=1000 + i), globals()) for i in range(%d)]
churn(%d)  # the capture is stuck now, or soon
for i, f in enumerate(fns):
    f(600 + i)
churn(%d)
print("churned", flush=True)
sys.stdin.readline()
k = keep()
kept = [f(600 + i) for i, f in enumerate(fns)]
print("done", flush=True)
"""


def test_capture_that_cannot_be_written_does_not_stall_the_program(memtrace, tmp_path):
    """A capture whose writes block (a pipe nobody reads, as on a hung file
    system): the program runs on at its pace after about a second, its
    events dropped and counted, and the capture says why. Once the capture
    is read again, recording resumes with correct stacks, also for the code
    whose records were lost as the writer got stuck. A hook that waited
    for the writer at every event would take hours here. memtrace run
    gives the payload regular files only: the payload is preloaded here as
    run does it, with the pipe as the capture's descriptor, and says how
    many events were dropped on the status descriptor run reads."""
    import select
    import threading
    import time
    rd, wr = os.pipe()
    srd, swr = os.pipe()
    prog = tmp_path / "p.py"
    k, m, n = 8000, 60_000, 1_000_000  # megabytes of capture
    prog.write_text(STALL % (k, m, n))
    cap = tmp_path / "c.bin"
    env = dict(os.environ, LD_PRELOAD=os.path.join(BUILD, "payload", "libmemtrace-payload.so"),
               MEMTRACE_RUN="0:10:%d:fd:%d:%s" % (swr, wr, cap))
    p = subprocess.Popen([shutil.which("python3"), str(prog)], pass_fds=(wr, swr), env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(wr)
    os.close(swr)

    def line():
        ready, _, _ = select.select([p.stdout], [], [], 60)
        assert ready, "the program stalled on its unwritable capture"
        return p.stdout.readline()

    more = threading.Condition()
    got = [0]

    def drain():
        with open(cap, "wb") as out:
            while True:
                chunk = os.read(rd, 1 << 16)
                out.write(chunk)
                out.flush()
                with more:
                    got[0] += len(chunk)
                    more.notify()
                if not chunk:
                    return

    reader = threading.Thread(target=drain)
    try:
        start = time.monotonic()
        assert line() == b"churned\n"  # while nothing of the capture was read
        assert time.monotonic() - start < 30
        reader.start()
        # The writer moved again once its diagnostic reaches the capture.
        seen = 0
        while "events were dropped" not in run(memtrace, "parse", cap, check=False).stdout:
            with more:
                assert more.wait_for(lambda: got[0] > seen, timeout=60), "the capture stays stuck"
                seen = got[0]
        p.stdin.write(b"go\n")
        p.stdin.flush()
        assert line() == b"done\n"
        assert p.wait(timeout=60) == 0, p.stderr.read()
        err = p.stderr.read().decode()
        reader.join(timeout=60)
        assert not reader.is_alive()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        reader.join(timeout=10)
        os.close(rd)
        status = os.read(srd, 512).decode()
        os.close(srd)
    stats = report_json(memtrace, "stats", cap)
    assert stats["status"]["complete"]
    assert n // 2 < stats["totals"]["dropped"] < 3 * (m + n)
    assert err == "", err  # nothing into the program's output
    assert status == "ok dropped %d\n" % stats["totals"]["dropped"], status
    assert any("events were dropped" in d["message"] for d in stats["diagnostics"]), stats["diagnostics"]
    rows = report_json(memtrace, "summary", cap, "--leaks", "-n", "0")["rows"]
    r = row_for(rows, "keep", prog)
    assert r["line"] == 9 and 10_000_000 <= r["own_bytes"] <= 10_000_100, r
    # Every function again, with its stack (and bytearray's NUL): those
    # whose CODE or STACK record was lost when the writer got stuck are
    # described again.
    base = {r["line"]: r["own_bytes"] for r in rows if r["function"] == "base"}
    assert set(base) == set(range(1001, 1001 + k)), sorted(set(range(1001, 1001 + k)) - set(base))
    # beyond its own bytearray, a call may rightly hold a pymalloc arena it
    # made pymalloc map (anonymous mmap: 256 KiB, or 1 MiB from 3.10)
    extra = {line: b - (601 + line - 1001) for line, b in base.items()}
    assert all(e >= 0 and e % (256 << 10) == 0 for e in extra.values()), \
        {line: e for line, e in extra.items() if e}


@pytest.mark.parametrize("when", ["1", "2"], ids=["before-coding", "after-coding"])
@pytest.mark.parametrize("n", [100_000, 0], ids=["while-running", "at-the-end"])
def test_writer_crash_stops_tracking_not_the_program(memtrace, script, tmp_path, n, when):
    """A fault in memtrace's writer code (forced here at its first chunk:
    on the writer thread while the program runs, or on the program's
    thread as the capture is finished; before the chunk is coded, or after
    it is coded and before it is written, when the columns' histories hold
    what the file never will) turns tracking off; the program runs to its
    end, and the capture says why."""
    prog = script("x = [bytearray(1000) for i in range(%d)]\nprint('done')\n" % n)
    cap = tmp_path / "c.bin"
    env = dict(os.environ, MEMTRACE_TEST_WRITER_CRASH=when)
    p = run(memtrace, "run", "-o", cap, prog, check=False, env=env)
    assert p.stdout == "done\n"
    assert p.returncode == 1
    assert p.stderr == ("memtrace: capture '%s' is incomplete: tracking stopped: memtrace's writer "
                        "thread crashed\n" % cap), p.stderr
    stats = report_json(memtrace, "stats", cap)
    assert stats["status"]["complete"]
    assert [d["message"] for d in stats["diagnostics"]] == [
        "memtrace's writer thread crashed (signal 11, SIGSEGV): tracking stopped"]


@pytest.mark.parametrize("faulthandler", [False, True], ids=["plain", "faulthandler"])
def test_program_fault_is_the_programs(memtrace, script, tmp_path, faulthandler):
    """memtrace catches faults of its own threads only: a program that
    reads a bad address dies of SIGSEGV as it would untracked, through
    Python's faulthandler when that was enabled after tracking began."""
    prog = script("import ctypes, faulthandler\n"
                  "%s\n"
                  "x = [bytearray(1000) for i in range(1000)]\n"
                  "print('before', flush=True)\n"
                  "ctypes.string_at(1)\n"
                  "print('after')\n" % ("faulthandler.enable()" if faulthandler else ""))
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", "-o", cap, prog, check=False)
    assert p.returncode == -signal.SIGSEGV
    assert p.stdout == "before\n"
    assert ("Fatal Python error: Segmentation fault" in p.stderr) == faulthandler
    s = run(memtrace, "stats", cap, check=False)
    assert s.returncode == 0 and "truncated" in s.stderr


@pytest.mark.parametrize("python", python_params())
def test_line_of_a_huge_module(memtrace, tmp_path, python):
    """A 40,000-line module (generated code): its line table, 200 kB in
    3.11's form, is recorded whole, so its last line is found."""
    prog = tmp_path / "huge.py"
    n = 40_000
    prog.write_text("".join("x%d = %d\n" % (i, i) for i in range(n)) + "keep = bytearray(10_000_000)\n")
    cap = tmp_path / "huge.bin"
    run(memtrace, "run", "--python", python, "-o", cap, prog, cwd=tmp_path)
    r = row_for(report_json(memtrace, "summary", cap, "--leaks")["rows"], "<module>", prog)
    assert r["line"] == n + 1 and r["own_bytes"] >= 10_000_000, r


@pytest.mark.parametrize("minor", ["3.7", "3.6"])
def test_unsupported_python_runs_untracked(memtrace, script, tmp_path, minor):
    import glob
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/%s.*/bin/python%s" % (minor, minor))))
    if not found:
        pytest.skip("no pyenv Python %s on this machine" % minor)
    prog = script("print('ran anyway')\n")
    cap = tmp_path / "old.bin"
    p = run(memtrace, "run", "--python", found[-1], "-o", cap, prog, check=False)
    assert p.stdout == "ran anyway\n"
    assert p.returncode == 1
    assert "cannot track Python %s" % minor in p.stderr and "supported: 3.8 to 3.13" in p.stderr
    assert p.stderr.count("\n") == 1
    assert not cap.exists()


SAME_CALLEE = """\
def g():
    return bytearray(100_000)


def main():
    x = g()
    y = g()
    z = [g() for _ in range(3)]
    return x, y, z


keep = main()
"""


@pytest.mark.parametrize("python", python_params())
@pytest.mark.parametrize("mode", [[], ["--trace-python-allocators"]], ids=["default", "pyalloc"])
def test_same_callee_from_different_lines(memtrace, script, tmp_path, python, mode):
    # g's frame sits at the same address with the same position each time;
    # only the caller's line differs: each call site must get its own bytes.
    prog = script(SAME_CALLEE)
    cap = tmp_path / "s.bin"
    run(memtrace, "run", "--python", python, *mode, "-o", cap, prog, cwd=tmp_path)
    rows = report_json(memtrace, "summary", cap, "--leaks")["rows"]
    main_rows = {r["line"]: r for r in rows if r["function"] == "main"}
    for line, calls in ((6, 1), (7, 1)):
        assert line in main_rows, rows[:8]
        assert 100_000 * calls <= main_rows[line]["total_bytes"] <= 100_000 * calls + 2000
    # the comprehension: line 8, three calls (its own frame from 3.12 inlined)
    assert 300_000 <= sum(r["total_bytes"] for r in rows
                          if r["line"] == 8 and r["file"] == str(prog)
                          and r["function"] in ("main", "<listcomp>", "main.<locals>.<listcomp>")) 


EXEC = """\
import os, sys


def keep():
    return bytearray(5_000_000)


k = keep()
print("before", flush=True)
try:
    %s
except OSError as e:
    print("exec failed:", e.strerror, flush=True)
k2 = keep()
"""
EXEC_PY = "os.execv(sys.executable, [sys.executable, '-c', 'print(\"after\"); raise SystemExit(7)'])"


def exec_report(memtrace, cap, prog):
    stats = report_json(memtrace, "stats", cap)
    notes = [d["message"] for d in stats["diagnostics"]]
    rows = report_json(memtrace, "summary", "--leaks", cap)["rows"]
    kept = sum(r["own_bytes"] for r in rows if r["function"] == "keep" and r["file"] == str(prog))
    return stats["status"]["complete"], notes, kept


@pytest.mark.parametrize("python", python_params())
def test_exec_ends_the_capture(memtrace, script, tmp_path, python):
    """A program that replaces itself with exec: its capture is finished
    first (it used to end cut short), and the new program is not tracked."""
    prog = script(EXEC % EXEC_PY)
    cap = tmp_path / "c.bin"
    p = run(memtrace, "run", "--python", python, "-o", cap, prog, check=False)
    assert (p.returncode, p.stdout) == (7, "before\nafter\n"), p.stderr
    complete, notes, kept = exec_report(memtrace, cap, prog)
    assert complete and "the program called exec: the capture ends there" in notes
    assert 5_000_000 <= kept <= 5_000_100


def test_execvp_through_path(memtrace, script, tmp_path):
    """os.execvp tries each directory of PATH: the tries that fail leave
    the capture running; the one that succeeds ends it."""
    prog = script(EXEC % "os.execvp('python3', ['python3', '-c', 'print(\"after\")'])")
    cap = tmp_path / "c.bin"
    env = dict(os.environ, PATH="%s:/nonexistent:%s" % (tmp_path, os.path.dirname(sys.executable)))
    (tmp_path / "python3").write_text("not executable")
    p = run(memtrace, "run", "--python", "/usr/bin/python3", "-o", cap, prog, env=env)
    assert p.stdout == "before\nafter\n"
    complete, notes, kept = exec_report(memtrace, cap, prog)
    assert complete and "the program called exec: the capture ends there" in notes


def test_exec_of_a_file_that_cannot_run(memtrace, script, tmp_path):
    """An exec refused before the program could be replaced (the file is
    not executable) leaves tracking on; one refused by the kernel after
    the check (an executable file of no known format) has ended the
    capture, and the program runs on untracked, unharmed."""
    plain, garbage = tmp_path / "plain", tmp_path / "garbage"
    plain.write_text("data")
    garbage.write_bytes(b"\x00\x01not a program")
    garbage.chmod(0o755)
    for target, still in ((plain, True), (garbage, False)):
        prog = script(EXEC % ("os.execv(%r, [%r])" % (str(target), str(target))))
        cap = tmp_path / ("%s.bin" % target.name)
        p = run(memtrace, "run", "--python", "/usr/bin/python3", "-o", cap, prog)
        assert p.stdout.startswith("before\nexec failed:"), p.stdout
        complete, notes, kept = exec_report(memtrace, cap, prog)
        assert complete
        assert ("the program called exec: the capture ends there" in notes) != still
        assert kept == (10_000_002 if still else 5_000_001), (target, kept)
