"""The memtrace Python package (python/memtrace): Tracker and FileReader in
every supported interpreter, checked against the memtrace command's
reports for the same capture."""

import json
import os
import re
import shutil
import textwrap

import pytest

from conftest import BUILD, ROOT, python_params, report_json, run

PYTHON_DIR = os.path.join(ROOT, "python")
ALLOC_LIB = os.path.join(BUILD, "tests", "targets", "libmt-alloc-target.so")
ALLOC_SRC = os.path.join(ROOT, "tests", "targets", "alloc-target.c")
ALLOCATORS = ["malloc", "calloc", "realloc", "valloc", "pvalloc", "memalign",
              "posix_memalign", "aligned_alloc"]


def py_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["MEMTRACE_BUILD_DIR"] = BUILD
    for k in ("MEMTRACE_PAYLOAD", "MEMTRACE_READER_LIB", "MEMTRACE_RUN"):
        env.pop(k, None)
    env.update(extra)
    return env


def run_py(python, code, cwd, check=True, **kw):
    """Run @code (dedented) with @python and the package on its path."""
    prog = os.path.join(str(cwd), "prog.py")
    with open(prog, "w") as f:
        f.write(textwrap.dedent(code))
    return run(python, prog, cwd=cwd, env=py_env(), check=check, **kw)


@pytest.fixture(scope="session")
def alloc_lib(tmp_path_factory):
    """The allocator library: built by meson, or compiled here."""
    if os.path.exists(ALLOC_LIB):
        return ALLOC_LIB
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler and %s is not built" % ALLOC_LIB)
    out = str(tmp_path_factory.mktemp("alloc") / "libmt-alloc-target.so")
    run(cc, "-shared", "-fPIC", "-O1", "-o", out, ALLOC_SRC)
    return out


@pytest.mark.parametrize("python", python_params())
def test_design_examples_run_as_written(memtrace, tmp_path, python):
    # the Tracker lines of DESIGN.md, "What users type"
    p = run_py(python, """
        import logging
        import memtrace
        path = "fd.bin"

        def work():
            keep = bytearray(3_000_000)
            tmp = bytearray(5_000_000)
            del tmp
            return keep

        with memtrace.Tracker("profile.bin", native_traces=False, memory_interval_ms=10, follow_fork=False,
                              trace_python_allocators=False, file_format=memtrace.FileFormat.ALL_ALLOCATIONS):
            kept = work()
        with memtrace.Tracker(destination=memtrace.FileDestination(path, overwrite=True, compress_on_exit=True)):
            kept2 = work()
        # a `memtrace live PORT` client to stream to (it waits for the port to listen)
        import os, subprocess
        import socket
        with socket.socket() as s:  # a free port, for 12345 may be taken
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        client = subprocess.Popen([os.path.join(os.environ["MEMTRACE_BUILD_DIR"], "cli", "memtrace"), "live", str(port)],
                                  stdout=subprocess.PIPE)
        with memtrace.Tracker(destination=memtrace.SocketDestination(server_port=port, address="127.0.0.1")):
            kept3 = work()
        print("socket:", "tracking ended" in client.communicate()[0].decode(), client.returncode)
        memtrace.dump_all_records("profile.bin"); memtrace.set_log_level(logging.DEBUG); memtrace.start_thread_trace
        reader = memtrace.FileReader("profile.bin")
        for rec in reader.get_high_watermark_allocation_records(merge_threads=True): rec.size, rec.stack_trace()
        print("peak", sum(r.size for r in reader.get_high_watermark_allocation_records()))
        """, tmp_path)
    assert "socket: True 0" in p.stdout, (p.stdout[-2000:], p.stderr)
    # dump_all_records printed the records, the way `memtrace parse` does
    parse = run(memtrace, "parse", tmp_path / "profile.bin").stdout
    assert re.search(r"^alloc .*size=500000[01] ", p.stdout, re.M), p.stdout[:2000]
    assert parse in p.stdout
    peak = int(re.search(r"^peak (\d+)$", p.stdout, re.M).group(1))
    assert 8_000_000 <= peak <= 8_100_000, peak
    for cap in ("profile.bin", "fd.bin"):
        stats = report_json(memtrace, "stats", tmp_path / cap)
        assert stats["status"]["complete"], stats["status"]
        assert 8_000_000 <= stats["totals"]["peak_heap"] <= 8_100_000
        assert stats["top_by_size"][0]["function"] == "work"
        summary = run(memtrace, "summary", tmp_path / cap).stdout
        assert "work at" in summary and "prog.py" in summary
        leaks = report_json(memtrace, "summary", tmp_path / cap, "--leaks")
        assert any(r["function"] == "work" and 3_000_000 <= r["own_bytes"] <= 3_000_100
                   for r in leaks["rows"]), leaks["rows"][:5]


@pytest.mark.parametrize("python", python_params())
def test_each_allocator_is_one_record_and_one_free(tmp_path, python, alloc_lib):
    p = run_py(python, """
        import ctypes, json, memtrace, sys
        lib = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else %r)
        lib.mt_target_alloc.restype = ctypes.c_void_p
        lib.mt_target_alloc.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.mt_target_free.argtypes = [ctypes.c_void_p]
        kinds = %r
        names = [k.encode() for k in kinds]
        sizes = [64 * (1001 + i) for i in range(len(kinds))]
        addrs = [0] * len(kinds)
        with memtrace.Tracker("al.bin"):
            for i in range(len(kinds)):
                addrs[i] = lib.mt_target_alloc(names[i], sizes[i])
                lib.mt_target_free(addrs[i])
        reader = memtrace.FileReader("al.bin")
        out = []
        for r in reader.get_allocation_records():
            try:
                stack = r.stack_trace()[:1]
            except NotImplementedError as e:  # memray's, for a free
                stack = str(e)
            out.append([r.allocator.name, r.size, r.address, r.n_allocations, stack, r.tid])
        print(json.dumps({"records": out, "addrs": addrs, "sizes": sizes}))
        """ % (alloc_lib, ALLOCATORS), tmp_path)
    res = json.loads(p.stdout)
    recs = res["records"]
    for kind, size, addr in zip(ALLOCATORS, res["sizes"], res["addrs"]):
        assert addr, kind
        mine = [r for r in recs if r[0] == kind.upper()]
        assert len(mine) == 1, (kind, mine)
        assert mine[0][1] == size and mine[0][2] == addr and mine[0][3] == 1, (kind, mine)
        assert mine[0][4] and mine[0][4][0][1].endswith("prog.py"), mine
        assert mine[0][5] > 0
        # its free follows it
        at = recs.index(mine[0])
        assert any(r[0] == "FREE" and r[2] == addr for r in recs[at + 1:]), (kind, recs)
    assert all(r[4] == "Stack traces for deallocations aren't captured."
               for r in recs if r[0] == "FREE"), recs


@pytest.mark.parametrize("python", python_params())
def test_empty_tracker_has_no_records(tmp_path, python):
    p = run_py(python, """
        import memtrace
        for i in range(3):
            with memtrace.Tracker("empty%d.bin" % i):
                pass
            r = memtrace.FileReader("empty%d.bin" % i)
            print(i, len(list(r.get_allocation_records())),
                  len(list(r.get_high_watermark_allocation_records())),
                  len(list(r.get_leaked_allocation_records())),
                  r.metadata.total_allocations, r.metadata.peak_memory)
        """, tmp_path)
    assert p.stdout.splitlines() == ["%d 0 0 0 0 0" % i for i in range(3)], p.stdout


def test_reader_outlives_its_file_being_rewritten(tmp_path):
    """The notebook pattern: a FileReader is kept while its capture is
    tracked into again (truncated, rewritten). The reader keeps the
    capture it opened; it used to map the file and die of SIGBUS."""
    p = run_py("/usr/bin/python3", """
        import memtrace
        keep = []
        with memtrace.Tracker("cap.bin"):
            keep.append(bytearray(3_000_000))
        r = memtrace.FileReader("cap.bin")
        before = sorted(x.size for x in r.get_allocation_records() if x.size >= 1_000_000)
        with memtrace.Tracker(destination=memtrace.FileDestination("cap.bin", overwrite=True)):
            pass
        after = sorted(x.size for x in r.get_allocation_records() if x.size >= 1_000_000)
        temp = list(r.get_temporary_allocation_records(threshold=5))
        print(before == after, before)
        """, tmp_path, check=False)
    assert (p.returncode, p.stdout.split()[0]) == (0, "True"), (p.returncode, p.stdout, p.stderr)


def test_records_outlive_their_reader(memtrace, tmp_path):
    """memray's records keep their stacks after the reader is closed (a
    with block ended, say); the reader's own methods fail then. A reader
    that gave no records lets go of the capture at once."""
    cap = tmp_path / "o.bin"
    run(memtrace, "run", "-q", "-o", cap, "--python", "/usr/bin/python3", "-c",
        "def keep():\n    return bytearray(765432)\nk = keep()\n", cwd=tmp_path)
    p = run_py("/usr/bin/python3", """
        import gc, sys
        import memtrace
        with memtrace.FileReader(sys.argv[1]) as r:
            peak = [x for x in r.get_high_watermark_allocation_records()
                    if 765432 <= x.size < 765440]
            events = [x for x in r.get_allocation_records() if 765432 <= x.size < 765440]
        # their stacks are first asked for now (a reader keeps those it made)
        after = (peak[0].stack_trace(), events[0].stack_trace())
        with memtrace.FileReader(sys.argv[1]) as again:
            want = [x for x in again.get_allocation_records() if x.size == events[0].size]
            want = want[0].stack_trace()
        print(r.closed, after == (want, want), after[0][0][:1])
        try:
            r.get_leaked_allocation_records()
        except ValueError as e:
            print(e)
        # a thread name first asked for after close()
        with memtrace.FileReader(sys.argv[1]) as r3:
            it = r3.get_leaked_allocation_records(merge_threads=False)
        names = {x.thread_name for x in it}
        # the capture goes with the reader's last holder: at close() when
        # its records are gone, else with the last of them
        r2 = memtrace.FileReader(sys.argv[1])
        recs = list(r2.get_leaked_allocation_records())
        alive = r2._capture
        del recs
        r2.close()
        print(r2.closed, alive() is None, names)
        r4 = memtrace.FileReader(sys.argv[1])
        recs = list(r4.get_leaked_allocation_records())
        r4.close()
        print(r4._capture() is not None, bool(recs[0].stack_trace() or True))
        del recs
        print(r4._capture() is None)
        """.replace("sys.argv[1]", repr(str(cap))), tmp_path)
    assert p.stdout.splitlines() == ["True True ('keep',)", "Operation on a closed FileReader",
                                     "True True {'MainThread'}", "True True", "True"], p.stdout


def test_allocation_records_are_read_as_they_are_iterated(memtrace, tmp_path):
    """get_allocation_records() on a capture of 3M events keeps little in
    memory: it reads a chunk at a time. It used to build every record at
    once, about 100 bytes per event (here 300 MB) before the first came
    out. Two passes over one reader run side by side, and closing the
    reader stops a pass that is under way (at its next chunk)."""
    cap = tmp_path / "big.bin"
    run(memtrace, "run", "-o", cap, "--trace-python-allocators", "--python", "/usr/bin/python3",
        "-c", "for i in range(750_000): x = [str(i), (i, i)]", cwd=tmp_path, timeout=300)
    p = run_py("/usr/bin/python3", """
        import resource, sys
        import memtrace
        r = memtrace.FileReader(sys.argv[1])
        total = r.metadata.total_allocations  # memray's: frees too
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        a, b = r.get_allocation_records(), r.get_allocation_records()
        n = same = 0
        for x, y in zip(a, b):
            n += 1
            same += x == y
        n += sum(1 for _ in a)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
        partial = r.get_allocation_records()
        next(partial)
        r.close()
        try:
            for _ in partial:
                pass
            closed = "no error"
        except ValueError as e:
            closed = str(e)
        print(total, n, same, grown // 1024, closed)
        """.replace("sys.argv[1]", repr(str(cap))), tmp_path, timeout=300)
    total, n, same, grown_mib, closed = p.stdout.split(None, 4)
    assert int(total) > 3_000_000 and int(n) == int(total) == int(same), p.stdout
    assert int(grown_mib) < 64, p.stdout
    assert closed.strip() == "Operation on a closed FileReader", p.stdout


def test_program_that_closes_the_capture_descriptor_keeps_its_files(tmp_path):
    """A program that closes every descriptor it did not open (as daemons
    do) and opens its own: one of them may get the capture's number. The
    capture must never be written into the program's file nor that file
    closed; the Tracker says what happened, on standard error, without
    raising into the program."""
    p = run_py("/usr/bin/python3", """
        import os, memtrace
        try:
            with memtrace.Tracker("cl.bin"):
                x = bytearray(1000)
                os.closerange(3, 256)
                fd = os.open("mine.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.write(fd, b"hello\\n")
                y = [bytearray(1000 + i) for i in range(5000)]
            print("no error")
        except Exception as e:
            print("error:", e)
        os.write(fd, b"still mine\\n")
        os.close(fd)
        print(open("mine.txt", "rb").read())
        """, tmp_path, check=False)
    lines = p.stdout.splitlines()
    assert p.returncode == 0, p.stderr
    assert lines == ["no error", "b'hello\\nstill mine\\n'"], lines
    assert "the capture was not written completely: " in p.stderr, p.stderr
    assert "closed the capture's file descriptor" in p.stderr, p.stderr


@pytest.mark.parametrize("python", python_params())
def test_views_match_the_reports(memtrace, tmp_path, python):
    run_py(python, """
        import threading, memtrace
        keep = []

        def peak_then_free():
            big = [bytearray(1_000_000 + i) for i in range(6)]
            del big

        def leak(n):
            keep.append(bytearray(n))

        def worker():
            leak(700_000)
            peak_then_free()

        with memtrace.Tracker("v.bin"):
            leak(300_000)
            t = threading.Thread(target=worker, name="worker")
            t.start(); t.join()
            peak_then_free()
            leak(200_000)
        """, tmp_path)
    cap = tmp_path / "v.bin"
    p = run_py(python, """
        import json, memtrace
        r = memtrace.FileReader("v.bin")
        def dump(recs):
            return [[x.size, x.n_allocations, x.tid, x.thread_name, x.stack_trace()[:1]] for x in recs]
        print(json.dumps({
            "peak": dump(r.get_high_watermark_allocation_records()),
            "peak_threads": dump(r.get_high_watermark_allocation_records(merge_threads=False)),
            "leaks": dump(r.get_leaked_allocation_records()),
            "leaks_threads": dump(r.get_leaked_allocation_records(merge_threads=False)),
            "temporary": dump(r.get_temporary_allocation_records(threshold=10)),
            "meta": [r.metadata.peak_memory, r.metadata.total_allocations, r.metadata.pid,
                     r.metadata.python_version, r.metadata.attached,
                     r.metadata.trace_python_allocators, r.metadata.command_line],
            "snapshots": len(list(r.get_memory_snapshots())),
        }))
        """, tmp_path)
    got = json.loads(p.stdout)
    stats = report_json(memtrace, "stats", cap)
    tot = stats["totals"]
    assert got["meta"][0] == tot["peak_heap"] == sum(x[0] for x in got["peak"])
    assert got["meta"][1] == tot["allocations"] + tot["frees"]  # memray counts frees too
    assert got["meta"][2] == stats["header"]["pid"]
    assert got["meta"][3] == stats["header"]["python"]
    assert got["meta"][4] is False and got["meta"][5] is False
    # memray's command line: " ".join(sys.argv), no interpreter
    assert got["meta"][6] == os.path.join(str(tmp_path), "prog.py")
    assert sum(x[0] for x in got["leaks"]) == tot["live_bytes_at_end"]
    assert sum(x[1] for x in got["leaks"]) == tot["live_allocations_at_end"]
    assert sum(x[0] for x in got["peak_threads"]) == tot["peak_heap"]
    assert sum(x[0] for x in got["leaks_threads"]) == tot["live_bytes_at_end"]
    assert got["snapshots"] >= 1

    def by_location(recs):
        out = {}
        for size, count, _tid, _name, frames in recs:
            key = tuple(frames[0]) if frames else ("<no Python frames>", "", 0)
            b, c = out.get(key, (0, 0))
            out[key] = (b + size, c + count)
        return out

    for view, extra in (("peak", ()), ("leaks", ("--leaks",))):
        # FileReader gives every frame, as memray's: so must the report
        rows = report_json(memtrace, "summary", cap, "--show-hidden-frames", *extra)["rows"]
        # the reports' qualified names; stack_trace() gives memray's co_name
        want = {(r["function"].rpartition(".")[2], r["file"], r["line"]):
                (r["own_bytes"], r["own_allocations"])
                for r in rows if r["own_bytes"] or r["own_allocations"]}
        assert by_location(got[view]) == want, view

    # per thread, the worker's leak is on its own thread (threads carry
    # their kernel tid and OS-level name); merged records have no thread
    pid = got["meta"][2]
    worker = [x for x in got["leaks_threads"] if x[2] not in (0, pid)]
    assert any(700_000 <= x[0] <= 700_100 for x in worker), got["leaks_threads"]
    main = [x for x in got["leaks_threads"] if x[2] == pid]
    assert sum(x[0] for x in main) >= 500_000 and all(x[3] for x in main), main
    assert all(x[2] == 0 and x[3] == "" for x in got["leaks"])
    # the six 1 MB blocks freed at once are temporary with threshold 10
    assert any(x[0] >= 6_000_000 and x[1] >= 6 for x in got["temporary"]), got["temporary"]


@pytest.mark.parametrize("python", python_params())
def test_temporary_allocations_threshold(tmp_path, python, alloc_lib):
    p = run_py(python, """
        import ctypes, memtrace
        lib = ctypes.CDLL(%r)
        lib.mt_target_alloc.restype = ctypes.c_void_p
        lib.mt_target_alloc.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.mt_target_free.argtypes = [ctypes.c_void_p]
        m = b"malloc"
        with memtrace.Tracker("t.bin"):
            a = lib.mt_target_alloc(m, 100_001); lib.mt_target_free(a)      # freed at once
            b = lib.mt_target_alloc(m, 200_002); c = lib.mt_target_alloc(m, 300_003)
            d = lib.mt_target_alloc(m, 400_004)
            lib.mt_target_free(b)                                         # 2 allocations later
            lib.mt_target_free(c); lib.mt_target_free(d)
        r = memtrace.FileReader("t.bin")
        for th in (0, 1, 2):
            sizes = sorted(x.size for x in r.get_temporary_allocation_records(threshold=th,
                                                                              merge_threads=False))
            print(th, sizes)
        """ % alloc_lib, tmp_path)
    lines = p.stdout.splitlines()
    # grouped per stack: every allocation above is on one line of prog.py, except
    # each statement is its own line; compare the totals per threshold instead
    totals = {int(l.split()[0]): sum(json.loads(l.split(None, 1)[1])) for l in lines}
    assert totals[0] == 100_001 + 400_004, lines          # c..d and a freed at once
    assert totals[1] == 100_001 + 300_003 + 400_004, lines
    assert totals[2] == 100_001 + 200_002 + 300_003 + 400_004, lines


@pytest.mark.parametrize("python", python_params())
def test_user_errors(memtrace, tmp_path, python):
    p = run_py(python, """
        import memtrace
        open("exists.bin", "w").close()

        def expect(exc, fn):
            try:
                fn()
            except exc as e:
                print(exc.__name__, e)
            else:
                print("no", exc.__name__)

        def enter(t):
            with t:
                pass

        # at construction, as memray's
        expect(FileExistsError, lambda: memtrace.Tracker("exists.bin"))
        once = memtrace.Tracker(destination=memtrace.FileDestination("exists.bin", overwrite=True))
        enter(once)
        expect(RuntimeError, lambda: enter(once))  # a Tracker tracks once, as memray's
        expect(TypeError, lambda: memtrace.Tracker())
        expect(RuntimeError, lambda: memtrace.Tracker(
            destination=memtrace.SocketDestination(12345), follow_fork=True))
        expect(RuntimeError, lambda: memtrace.Tracker(
            destination=memtrace.SocketDestination(12345),
            file_format=memtrace.FileFormat.AGGREGATED_ALLOCATIONS))
        expect(TypeError, lambda: memtrace.Tracker("a.bin", destination=memtrace.FileDestination("b")))
        with memtrace.Tracker("one.bin"):
            expect(RuntimeError, lambda: enter(memtrace.Tracker("two.bin")))
        import os
        print("two exists", os.path.exists("two.bin"))
        r = memtrace.FileReader("one.bin")
        rec = next(iter(r.get_allocation_records()), None)
        expect(FileNotFoundError, lambda: memtrace.FileReader("missing.bin"))
        expect(ValueError, lambda: memtrace.FileReader("prog.py"))
        # memray raises OSError there: it is both
        expect(OSError, lambda: memtrace.FileReader("prog.py"))
        expect(OSError, lambda: memtrace.dump_all_records("prog.py"))
        """, tmp_path)
    out = p.stdout
    assert "FileExistsError" in out and "exists.bin" in out
    assert "TypeError" in out
    # memray's exception types and messages
    assert out.count("TypeError Exactly one of 'file_name' or 'destination' argument must be "
                     "specified") == 2, out
    assert "RuntimeError follow_fork requires an output file" in out
    assert "RuntimeError AGGREGATED_ALLOCATIONS requires an output file" in out
    assert "RuntimeError No more than one Tracker instance can be active at the same time" in out
    assert "RuntimeError Attempting to use stale output handle" in out
    assert "two exists False" in out
    assert "FileNotFoundError" in out and "ValueError" in out and "not a memtrace capture" in out
    assert out.count("OSError [Errno 22] cannot read 'prog.py': not a memtrace capture") == 2, out
    assert not [l for l in out.splitlines() if l.startswith("no ")], out


@pytest.mark.parametrize("python", python_params())
def test_path_with_a_null_byte_is_refused(tmp_path, python):
    """A C string ends at a NUL: "one.bin\\0/etc/passwd" would read
    one.bin. As open() and the Tracker, the readers refuse it."""
    p = run_py(python, """
        import memtrace
        with memtrace.Tracker("one.bin"):
            pass
        for what, fn in [
                ("FileReader", lambda: memtrace.FileReader("one.bin\\0/etc/passwd")),
                ("FileReader bytes", lambda: memtrace.FileReader(b"one.bin\\0x")),
                ("dump_all_records", lambda: memtrace.dump_all_records("one.bin\\0x")),
                ("Tracker", lambda: memtrace.Tracker("two.bin\\0x").__enter__()),
                ("open", lambda: open("one.bin\\0x", "rb"))]:
            try:
                fn()
            except ValueError as e:
                print(what, "ValueError", e)
            else:
                print(what, "read it")
        """, tmp_path)
    lines = p.stdout.splitlines()
    assert lines[:3] + lines[4:] == [
        "FileReader ValueError embedded null byte",
        "FileReader bytes ValueError embedded null byte",
        "dump_all_records ValueError embedded null byte",
        "open ValueError embedded null byte",
    ], p.stdout
    # os.open()'s words, which 3.13 changed ("embedded null character in path")
    assert lines[3].startswith("Tracker ValueError ") and "embedded null" in lines[3], p.stdout
    assert sorted(os.listdir(str(tmp_path))) == ["one.bin", "prog.py"]


@pytest.mark.parametrize("python", python_params())
def test_tracker_under_memtrace_run_raises(memtrace, tmp_path, python):
    prog = tmp_path / "inner.py"
    prog.write_text(textwrap.dedent("""
        import memtrace
        try:
            with memtrace.Tracker("inner.bin"):
                pass
        except RuntimeError as e:
            print("RuntimeError:", e)
        data = bytearray(2_000_000)
        """))
    p = run(memtrace, "run", "--python", python, "-o", tmp_path / "outer.bin", prog,
            cwd=tmp_path, env=py_env())
    assert ("RuntimeError: No more than one Tracker instance can be active at the same time: "
            "this process is already being tracked") in p.stdout
    assert not (tmp_path / "inner.bin").exists()
    stats = report_json(memtrace, "stats", tmp_path / "outer.bin")
    assert stats["totals"]["peak_heap"] >= 2_000_000


@pytest.mark.parametrize("python", python_params())
def test_trace_python_allocators_flag(tmp_path, python):
    p = run_py(python, """
        import memtrace
        with memtrace.Tracker("py.bin", trace_python_allocators=True):
            objs = [object() for _ in range(1000)]
        r = memtrace.FileReader("py.bin")
        kinds = {x.allocator.name for x in r.get_allocation_records()}
        print(r.metadata.trace_python_allocators, "PYMALLOC_MALLOC" in kinds)
        """, tmp_path)
    assert p.stdout.split() == ["True", "True"], p.stdout


def readme_examples():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    m = re.search(r"^## From Python\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        return []
    return re.findall(r"```python\n(.*?)```", m.group(1), re.S)


def test_readme_from_python_examples_run(tmp_path):
    examples = readme_examples()
    assert examples, "README.md has no ```python examples under '## From Python'"
    for i, code in enumerate(examples):
        d = tmp_path / ("ex%d" % i)
        d.mkdir()
        run_py("/usr/bin/python3", code, d)


def test_allocator_enum_matches_the_format():
    with open(os.path.join(ROOT, "format", "record.h")) as f:
        table = dict((name, int(val)) for name, val in
                     re.findall(r"^\s*X\((\w+), (\d+), \"\w+\", [01]\)", f.read(), re.M))
    import sys
    sys.path.insert(0, PYTHON_DIR)
    try:
        from memtrace.reader import _FROM_FORMAT, AllocatorType
    finally:
        sys.path.remove(PYTHON_DIR)
    # every allocator of the format, by its name, and nothing else
    assert table and {a.name: code for code, a in _FROM_FORMAT.items()} == table
    assert {a.name for a in AllocatorType} == set(table)


# memray's AllocatorType (src/memray/_memray.pyx), which scripts may
# compare the records' allocator with as a number
MEMRAY_ALLOCATORS = {
    "PYMALLOC_FREE": 1, "PYMALLOC_MALLOC": 2, "PYMALLOC_CALLOC": 3, "PYMALLOC_REALLOC": 4,
    "FREE": 5, "MALLOC": 6, "REALLOC": 7, "CALLOC": 8, "POSIX_MEMALIGN": 9, "ALIGNED_ALLOC": 10,
    "MEMALIGN": 11, "VALLOC": 12, "PVALLOC": 13, "MMAP": 14, "MUNMAP": 15}


def test_allocator_numbers_are_memrays(tmp_path):
    p = run_py("/usr/bin/python3", """
        import json, memtrace
        with memtrace.Tracker("c.bin"):
            data = bytearray(300_000)
            del data
        with memtrace.Tracker("py.bin", trace_python_allocators=True):
            objs = [object() for _ in range(100)]
            del objs
        seen = {}
        for path in ("c.bin", "py.bin"):
            for rec in memtrace.FileReader(path).get_allocation_records():
                seen[rec.allocator.name] = int(rec.allocator)
        print(json.dumps([{a.name: a.value for a in memtrace.AllocatorType}, seen]))
        """, tmp_path)
    numbers, seen = json.loads(p.stdout)
    assert {k: v for k, v in numbers.items() if k in MEMRAY_ALLOCATORS} == MEMRAY_ALLOCATORS
    assert {k: v for k, v in numbers.items() if k not in MEMRAY_ALLOCATORS} == {
        "PYMALLOC_RAW_MALLOC": 16, "PYMALLOC_RAW_CALLOC": 17, "PYMALLOC_RAW_REALLOC": 18,
        "PYMALLOC_RAW_FREE": 19}
    # the records' allocators are memray's numbers too
    assert {"MALLOC", "FREE", "PYMALLOC_MALLOC", "PYMALLOC_FREE"} <= set(seen), seen
    assert all(MEMRAY_ALLOCATORS[k] == v for k, v in seen.items() if k in MEMRAY_ALLOCATORS), seen


def test_error_messages_match_the_format():
    with open(os.path.join(ROOT, "format", "error.h")) as f:
        table = re.findall(r'^\s*X\(E\w+, "([^"]+)"\)', f.read(), re.M)
    import sys
    sys.path.insert(0, PYTHON_DIR)
    try:
        from memtrace.tracker import _MT_ERRORS
    finally:
        sys.path.remove(PYTHON_DIR)
    assert table and tuple(table) == _MT_ERRORS


def test_fork_child_capture_without_python_allocators(tmp_path):
    """A parent traces Python allocators and forks; the child's own
    capture without them must not record pymalloc blocks (the inherited
    wrappers stayed active)."""
    p = run_py("/usr/bin/python3", """
        import os, memtrace
        with memtrace.Tracker("parent.bin", trace_python_allocators=True):
            pid = os.fork()
            if pid == 0:
                with memtrace.Tracker("child.bin"):
                    junk = [str(i) * 3 for i in range(20000)]
                r = memtrace.FileReader("child.bin")
                kinds = {a.allocator.name for a in r.get_allocation_records()}
                print(r.metadata.trace_python_allocators, sorted(k for k in kinds if "PYMALLOC" in k))
                os._exit(0)
            os.waitpid(pid, 0)
        """, tmp_path, check=False)
    assert (p.returncode, p.stdout.strip()) == (0, "False []"), (p.stdout, p.stderr)


@pytest.mark.parametrize("python", python_params())
def test_destinations_are_memrays_frozen_dataclasses(tmp_path, python):
    p = run_py(python, """
        import dataclasses, pathlib, memtrace
        f = memtrace.FileDestination(pathlib.Path("x.bin"), overwrite=True)
        assert f == memtrace.FileDestination(pathlib.Path("x.bin"), overwrite=True)
        assert f.path == pathlib.Path("x.bin") and f.compress_on_exit and not f.buffered
        assert [x.name for x in dataclasses.fields(f)] == ["path", "overwrite", "compress_on_exit",
                                                           "buffered"]
        s = memtrace.SocketDestination(1234)
        assert s == memtrace.SocketDestination(server_port=1234, address="127.0.0.1")
        for d, field in ((f, "path"), (s, "server_port")):
            try:
                setattr(d, field, None)
            except dataclasses.FrozenInstanceError:
                pass
            else:
                raise AssertionError("not frozen")
        # memray 1.20's buffered=True: written as ever
        with memtrace.Tracker(destination=dataclasses.replace(f, path=pathlib.Path("y.bin"),
                                                              buffered=True)):
            data = bytearray(100_000)
        print(sum(r.size for r in memtrace.FileReader("y.bin").get_allocation_records()) >= 100_000)
        """, tmp_path)
    assert p.stdout == "True\n", p.stdout + p.stderr


def test_tracker_capture_says_where_it_started(memtrace, tmp_path):
    """A Tracker starts partway through the program: its capture says so,
    and the memory in use before it is the program's, not start-up's."""
    run_py("/usr/bin/python3", """
        import memtrace
        before = [bytearray(2_000_000)]
        with memtrace.Tracker("t.bin"):
            during = bytearray(3_000_000)
        """, tmp_path)
    cap = tmp_path / "t.bin"
    stats = report_json(memtrace, "stats", cap)
    h = stats["header"]
    assert (h["tracker"], h["attached"], h["forked"]) == (True, False, False), h
    text = run(memtrace, "stats", cap).stdout
    assert "tracking:           from where the program started a Tracker" in text, text
    assert "interpreter's own start-up" not in text, text
    assert ",tracker" in run(memtrace, "parse", "-q", cap).stdout.splitlines()[0]
    # memtrace run's captures say otherwise
    prog = tmp_path / "p.py"
    prog.write_text("x = bytearray(1000)\n")
    run(memtrace, "run", "-q", "--python", "/usr/bin/python3", "-o", tmp_path / "r.bin", prog)
    assert not report_json(memtrace, "stats", tmp_path / "r.bin")["header"]["tracker"]


def test_tracker_entered_again_in_its_block_says_what_memray_says(tmp_path):
    """memray's words for a Tracker entered inside its own block: there is
    one active already. In a fork child, whose tracking is gone, the same
    Tracker is a used one."""
    p = run_py("/usr/bin/python3", """
        import os, memtrace
        t = memtrace.Tracker("t.bin")
        with t:
            try:
                t.__enter__()
            except RuntimeError as e:
                print(e)
            pid = os.fork()
            if pid == 0:
                try:
                    t.__enter__()
                except RuntimeError as e:
                    print("child:", e, flush=True)
                os._exit(0)
            os.waitpid(pid, 0)
        """, tmp_path)
    assert p.stdout.splitlines() == [
        "No more than one Tracker instance can be active at the same time",
        "child: Attempting to use stale output handle"], p.stdout + p.stderr


def test_memory_snapshots_and_metadata_outlive_the_reader(tmp_path):
    """memray's FileReader reads the memory snapshots when it opens: they,
    as the metadata, are there after close()."""
    p = run_py("/usr/bin/python3", """
        import memtrace
        with memtrace.Tracker("t.bin", memory_interval_ms=1):
            data = bytearray(3_000_000)
        with memtrace.FileReader("t.bin") as r:
            before = list(r.get_memory_snapshots())
        print(r.closed, len(before) >= 2, list(r.get_memory_snapshots()) == before,
              r.metadata.peak_memory >= 3_000_000)
        r = memtrace.FileReader("t.bin")
        first = list(r.get_memory_snapshots())
        r.close()
        print(list(r.get_memory_snapshots()) == first == before)
        """, tmp_path)
    assert p.stdout.split() == ["True"] * 5, p.stdout + p.stderr


# A program's start, for a Tracker with a SocketDestination: a free port,
# and connect(), which tries it until the Tracker listens there.
CONNECTS = textwrap.dedent("""\
    import socket, threading, time, memtrace
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]


    def connect():
        while True:
            try:
                return socket.create_connection(("127.0.0.1", port))
            except ConnectionRefusedError:
                time.sleep(0.01)  # the Tracker does not listen yet
    """)


def test_socket_destination_tracker_is_made_once_a_client_connects(tmp_path):
    """memray's Tracker with a SocketDestination listens and waits for its
    client when it is made, not when it is entered. Made by the main
    thread, the Tracker has its client when the constructor returns:
    the client thread, which tries until something listens, connects
    before the `with` statement."""
    p = run_py("/usr/bin/python3", CONNECTS + textwrap.dedent("""
        connected = threading.Event()
        got = []

        def client():
            c = connect()
            connected.set()
            with c:
                got.append(len(c.makefile("rb").read()))

        t = threading.Thread(target=client)
        t.start()
        tracker = memtrace.Tracker(destination=memtrace.SocketDestination(port))
        # a guard against waiting for ever: the client connects at once
        print("connected before entering:", connected.wait(10))
        with tracker:
            data = bytearray(100_000)
        t.join()
        print("capture sent:", got[0] > 0)
        """), tmp_path)
    assert p.stdout.splitlines() == ["connected before entering: True",
                                     "capture sent: True"], p.stdout + p.stderr


def test_a_client_that_goes_away_does_not_stop_the_program(tmp_path):
    """A live client that goes away before the block ends: as memray's,
    leaving the block says so on standard error (the memtrace logger) and
    the program goes on; nothing is raised into it."""
    p = run_py("/usr/bin/python3", CONNECTS + textwrap.dedent("""
        def client():
            connect().close()  # gone before anything is read

        t = threading.Thread(target=client)
        t.start()
        tracker = memtrace.Tracker(destination=memtrace.SocketDestination(port))
        t.join()
        with tracker:
            keep = [bytearray(1000 + i) for i in range(20_000)]
        print("after the block", len(keep))
        """), tmp_path)
    assert p.returncode == 0 and p.stdout == "after the block 20000\n", p.stdout + p.stderr
    assert "memtrace.Tracker: the capture was not written completely: " in p.stderr, p.stderr


def test_max_stacks_is_a_count_of_frames(tmp_path):
    """max_stacks keeps the innermost frames, none for 0; memray takes it
    as a size_t: a negative one is its OverflowError, not a count of
    frames to leave out at the end (its hybrid_stack_trace() slices)."""
    p = run_py("/usr/bin/python3", """
        import memtrace
        def inner():
            return bytearray(200_000)
        def outer():
            return inner()
        with memtrace.Tracker("t.bin"):
            data = outer()
        rec = next(r for r in memtrace.FileReader("t.bin").get_allocation_records()
                   if r.size > 200_000)
        whole = rec.stack_trace()
        print([f[0] for f in whole])
        print(rec.stack_trace(max_stacks=0), rec.stack_trace(max_stacks=2) == whole[:2],
              rec.stack_trace(max_stacks=99) == whole, rec.hybrid_stack_trace(max_stacks=-1) == whole[:-1])
        for method in (rec.stack_trace, rec.native_stack_trace):
            try:
                method(max_stacks=-1)
            except OverflowError as e:
                print("OverflowError", e)
        """, tmp_path)
    assert p.stdout.splitlines() == [
        "['inner', 'outer', '<module>']", "[] True True True",
        "OverflowError can't convert negative value to size_t",
        "OverflowError can't convert negative value to size_t"], p.stdout + p.stderr


def test_object_lifetime_api_says_what_memray_says_without_them(tmp_path):
    """memtrace does not track object lifetimes. memray's API for them
    answers as memray's does where there are none: track_object_lifetimes
    is accepted (True is memray's RuntimeError on an interpreter it cannot
    track them in), get_surviving_objects() and a FileReader's
    get_object_lifetime_events() raise memray's RuntimeError."""
    p = run_py("/usr/bin/python3", """
        import memtrace
        t = memtrace.Tracker("t.bin", track_object_lifetimes=False)
        with t:
            data = bytearray(1000)
        for call in (lambda: memtrace.Tracker("u.bin", track_object_lifetimes=True),
                     t.get_surviving_objects):
            try:
                call()
            except RuntimeError as e:
                print("RuntimeError")
        events = memtrace.FileReader("t.bin").get_object_lifetime_events()
        try:
            next(events)
        except RuntimeError as e:
            print(e)
        """, tmp_path)
    assert p.stdout.splitlines() == [
        "RuntimeError", "RuntimeError",
        "Object lifetime events are not available in this capture file. The file was not "
        "generated with track_object_lifetimes=True."], p.stdout + p.stderr


def test_tracker_records_memrays_command_line(tmp_path, memtrace):
    """memray's capture of a Tracker has " ".join(sys.argv) as its command
    line, as sys.argv is when the Tracker is made; a followed fork child's
    capture has its parent's. The reports show it too."""
    p = run_py("/usr/bin/python3", """
        import os, sys, memtrace
        sys.argv = ["python", "-m", "pytest", "two words"]
        tracker = memtrace.Tracker("t.bin", follow_fork=True)
        sys.argv = ["changed"]
        with tracker:
            pid = os.fork()
            if pid == 0:
                data = bytearray(1000)
                os._exit(0)
            os.waitpid(pid, 0)
        print(memtrace.FileReader("t.bin").metadata.command_line)
        print(memtrace.FileReader("t.bin.%d" % pid).metadata.command_line)
        """, tmp_path)
    assert p.stdout.splitlines() == ["python -m pytest two words"] * 2, p.stdout + p.stderr
    stats = report_json(memtrace, "stats", tmp_path / "t.bin")
    assert stats["header"]["cmdline"] == ["python", "-m", "pytest", "two words"]
