"""The reader's fuzz targets (tests/fuzz) build, and a short, seeded run of
each over real captures finds nothing: a guard that the targets keep
working and that no simple mutation of a capture crashes the reader. The
open-ended fuzzing is done by hand (tests/fuzz/README.md)."""

import os
import shutil
import subprocess

import pytest

from conftest import ROOT, run

PROG = """
import threading
def f():
    return [bytearray(100 + i) for i in range(200)]
keep = f()
t = threading.Thread(target=f)
t.start(); t.join()
def deep(n):
    return deep(n - 1) if n else {str(i): i for i in range(100)}
deep(50)
"""


def _fuzzer_builds(tmp):
    """Whether clang can link a libFuzzer target here."""
    if not shutil.which("clang"):
        return False
    src = os.path.join(tmp, "probe.c")
    with open(src, "w") as f:
        f.write("#include <stddef.h>\n#include <stdint.h>\n"
                "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n")
    p = subprocess.run(["clang", "-fsanitize=fuzzer", src, "-o", os.path.join(tmp, "probe")],
                       capture_output=True)
    return p.returncode == 0


@pytest.fixture(scope="module")
def fuzzers(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("fuzz"))
    if not _fuzzer_builds(tmp):
        pytest.skip("clang with libFuzzer is not installed (Debian: clang libclang-rt-14-dev)")
    out = os.path.join(tmp, "build")
    run("sh", os.path.join(ROOT, "tests", "fuzz", "build.sh"), out, timeout=600)
    return out


@pytest.mark.parametrize("pyalloc", [False, True], ids=["default", "pyalloc"])
def test_fuzz_targets_short_run(memtrace, fuzzers, tmp_path, pyalloc):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    seeds_a, seeds_b = tmp_path / "a", tmp_path / "b"
    seeds_a.mkdir()
    seeds_b.mkdir()
    cap = seeds_a / "prog.bin"
    run(memtrace, "run", "-f", "-o", str(cap), *(["--trace-python-allocators"] if pyalloc else []),
        "--python", "/usr/bin/python3", str(prog))
    run(os.path.join(fuzzers, "mkseeds"), str(seeds_b), str(cap))
    assert len(os.listdir(seeds_b)) > 0
    for target, seeds, runs in (("fuzz_capture_file", seeds_a, 300), ("fuzz_chunk_data", seeds_b, 3000)):
        p = subprocess.run([os.path.join(fuzzers, target), "-seed=1", "-runs=%d" % runs, "-timeout=10",
                            "-rss_limit_mb=2048", "-max_len=200000",
                            "-artifact_prefix=%s/" % tmp_path, str(seeds)],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, "%s found a problem:\n%s" % (target, p.stderr[-3000:])
        assert "Done %d runs" % runs in p.stderr, p.stderr[-2000:]
