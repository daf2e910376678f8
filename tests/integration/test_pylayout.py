# SPDX-License-Identifier: MIT
"""The payload's CPython layout table against the real headers.

The payload is built without Python headers, so its per-version structure
offsets (payload/python-layout.h) are hand-written. For every CPython
3.8..3.13 installed here, compile a probe against that version's own
headers that prints offsetof() of each field the table holds, and compare
with the table as compiled (tests/targets/pylayout-dump).
"""
import glob
import os
import shutil
import subprocess

import pytest

BUILD_DIR = os.environ.get("MEMTRACE_BUILD_DIR", "/work/main/build")
DUMP = os.path.join(BUILD_DIR, "tests", "targets", "pylayout-dump")

PROBE = r"""
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if PY_VERSION_HEX >= 0x030b0000
#include <internal/pycore_frame.h>
#endif

#define F(name, val) printf("%d.%d %s %ld\n", PY_MAJOR_VERSION, PY_MINOR_VERSION, name, (long)(val))

/* bit index of the one set bit: where a state bitfield lives */
static int bit_of(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n * 8; i++)
		if (b[i / 8] & (1u << (i % 8)))
			return (int)i;
	return -1;
}

int main(void)
{
	PyASCIIObject a;

	F("object.ob_type", offsetof(PyObject, ob_type));
	F("tstate.tracing", offsetof(PyThreadState, tracing));
	F("tstate.c_profilefunc", offsetof(PyThreadState, c_profilefunc));
	F("tstate.c_profileobj", offsetof(PyThreadState, c_profileobj));
	F("tstate.c_tracefunc", offsetof(PyThreadState, c_tracefunc));
#if PY_VERSION_HEX < 0x030a0000
	F("tstate.use_tracing", offsetof(PyThreadState, use_tracing));
#endif
#if PY_VERSION_HEX < 0x030b0000
	F("tstate.frame", offsetof(PyThreadState, frame));
	F("frame.back", offsetof(PyFrameObject, f_back));
	F("frame.code", offsetof(PyFrameObject, f_code));
	F("frame.instr", offsetof(PyFrameObject, f_lasti));
#elif PY_VERSION_HEX < 0x030d0000
	F("tstate.cframe", offsetof(PyThreadState, cframe));
	F("cframe.current_frame", offsetof(_PyCFrame, current_frame));
	F("frame.back", offsetof(_PyInterpreterFrame, previous));
	F("frame.code", offsetof(_PyInterpreterFrame, f_code));
	F("frame.instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
	F("tstate.frame", offsetof(PyThreadState, current_frame));
	F("frame.back", offsetof(_PyInterpreterFrame, previous));
	F("frame.code", offsetof(_PyInterpreterFrame, f_executable));
	F("frame.instr", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
#if PY_VERSION_HEX >= 0x030b0000
	F("frame.owner", offsetof(_PyInterpreterFrame, owner));
	F("frame.stacktop", offsetof(_PyInterpreterFrame, stacktop));
	F("frame.localsplus", offsetof(_PyInterpreterFrame, localsplus));
	F("frame.owned_by_generator", FRAME_OWNED_BY_GENERATOR);
	F("code.co_qualname", offsetof(PyCodeObject, co_qualname));
	F("code.co_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
	F("code._co_firsttraceable", offsetof(PyCodeObject, _co_firsttraceable));
#endif
#if PY_VERSION_HEX >= 0x030b0000 && PY_VERSION_HEX < 0x030c0000
	F("frame.is_entry", offsetof(_PyInterpreterFrame, is_entry));
#endif
#if PY_VERSION_HEX >= 0x030c0000
	F("frame.owned_by_cstack", FRAME_OWNED_BY_CSTACK);
#endif
	F("code.co_filename", offsetof(PyCodeObject, co_filename));
	F("code.co_name", offsetof(PyCodeObject, co_name));
	F("code.co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
#if PY_VERSION_HEX < 0x030a0000
	F("code.co_linetable", offsetof(PyCodeObject, co_lnotab));
#else
	F("code.co_linetable", offsetof(PyCodeObject, co_linetable));
#endif
	F("unicode.length", offsetof(PyASCIIObject, length));
	F("unicode.state", offsetof(PyASCIIObject, state));
	F("unicode.ascii_size", sizeof(PyASCIIObject));
	F("unicode.compact_size", sizeof(PyCompactUnicodeObject));
	F("unicode.legacy_data", offsetof(PyUnicodeObject, data));
	memset(&a, 0, sizeof(a));
	a.state.kind = 1;
	F("unicode.kind_shift", bit_of(&a.state, sizeof(a.state)));
	memset(&a, 0, sizeof(a));
	a.state.compact = 1;
	F("unicode.compact_bit", bit_of(&a.state, sizeof(a.state)));
	memset(&a, 0, sizeof(a));
	a.state.ascii = 1;
	F("unicode.ascii_bit", bit_of(&a.state, sizeof(a.state)));
	F("bytes.ob_size", offsetof(PyVarObject, ob_size));
	F("bytes.ob_sval", offsetof(PyBytesObject, ob_sval));
	F("pymem.domain_raw", PYMEM_DOMAIN_RAW);
	F("pymem.domain_mem", PYMEM_DOMAIN_MEM);
	F("pymem.domain_obj", PYMEM_DOMAIN_OBJ);
	F("pymem.allocator_size", sizeof(PyMemAllocatorEx));
	F("pymem.ctx", offsetof(PyMemAllocatorEx, ctx));
	F("pymem.malloc", offsetof(PyMemAllocatorEx, malloc));
	F("pymem.calloc", offsetof(PyMemAllocatorEx, calloc));
	F("pymem.realloc", offsetof(PyMemAllocatorEx, realloc));
	F("pymem.free", offsetof(PyMemAllocatorEx, free));
	return 0;
}
"""


def interpreters():
    """(id, path) for each 3.8..3.13 candidate, found or not."""
    out = []
    for minor in range(8, 14):
        found = sorted(glob.glob(os.path.expanduser(
            "~/.pyenv/versions/3.%d*/bin/python3.%d" % (minor, minor))))
        # free-threaded 3.13t has its own layout and is refused by the payload
        found = [p for p in found
                 if not p.split("/versions/")[1].split("/")[0].endswith("t")]
        out.append(("pyenv-3.%d" % minor, found[0] if found else None))
    out.append(("usr-bin-python3", "/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                else None))
    return out


def parse(text):
    table = {}
    for line in text.splitlines():
        ver, field, value = line.split()
        table[(ver, field)] = int(value)
    return table


@pytest.fixture(scope="module")
def dumped():
    if not os.path.exists(DUMP):
        pytest.fail("%s not built (set MEMTRACE_BUILD_DIR)" % DUMP)
    return parse(subprocess.run([DUMP], check=True, capture_output=True, text=True).stdout)


@pytest.mark.parametrize("name,python", interpreters(), ids=[n for n, _ in interpreters()])
def test_layout_matches_headers(name, python, dumped, tmp_path):
    if python is None:
        pytest.skip("%s is not installed" % name)
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip("no C compiler (%s)" % cc)
    info = subprocess.run(
        [python, "-c", "import sys, sysconfig; print(sysconfig.get_paths()['include']); "
         "print('%d.%d' % sys.version_info[:2]); "
         "print(sysconfig.get_config_var('Py_GIL_DISABLED') or 0)"],
        check=True, capture_output=True, text=True).stdout.split("\n")
    include, version, gil_disabled = info[0], info[1], info[2]
    if not (8 <= int(version.split(".")[1]) <= 13):
        pytest.skip("%s is Python %s" % (python, version))
    if gil_disabled not in ("0", "None", ""):
        pytest.skip("%s is a free-threaded build (unsupported)" % python)
    if not os.path.exists(os.path.join(include, "Python.h")):
        pytest.skip("no headers for %s in %s" % (python, include))

    src = tmp_path / "probe.c"
    exe = tmp_path / "probe"
    src.write_text(PROBE)
    flags = ["-DPy_BUILD_CORE"] if int(version.split(".")[1]) >= 11 else []
    subprocess.run([cc, "-std=gnu11", *flags, "-I", include, str(src), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    real = parse(subprocess.run([str(exe)], check=True, capture_output=True,
                                text=True).stdout)

    ours = {k: v for k, v in dumped.items() if k[0] == version}
    assert ours, "the payload has no layout for %s" % version
    mismatched = {k[1]: (ours.get(k), v) for k, v in real.items() if ours.get(k) != v}
    assert not mismatched, "payload vs %s headers (ours, real): %s" % (python, mismatched)
    extra = sorted(k[1] for k in ours if k not in real)
    assert not extra, "fields in the payload table the probe did not check: %s" % extra
