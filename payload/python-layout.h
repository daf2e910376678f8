/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYTHON_LAYOUT_H
#define MT_PAYLOAD_PYTHON_LAYOUT_H
/*
 * Byte offsets of the CPython structure fields the payload reads, one
 * table row per minor version 3.8..3.13 (x86_64 and other LP64 targets,
 * default build: no Py_TRACE_REFS, not free-threaded). Written by hand
 * because the payload is built without Python headers; every value is
 * checked against the real headers by tests/integration/test_pylayout.py
 * through tests/targets/pylayout-dump.c. -1 marks a field a version lacks.
 * Private to payload/python.c and that dump program.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* int16_t */

/* X(member, "name printed by the dump and the header probe") */
#define MT_PYLAYOUT_FIELDS(X)                                                  \
	X(ob_type, "object.ob_type")                                           \
	X(ts_frame, "tstate.frame")          /* frame (<3.11), current_frame (3.13) */ \
	X(ts_cframe, "tstate.cframe")        /* 3.11, 3.12 */                  \
	X(cframe_current, "cframe.current_frame")                              \
	X(ts_tracing, "tstate.tracing")                                        \
	X(ts_profilefunc, "tstate.c_profilefunc")                              \
	X(ts_profileobj, "tstate.c_profileobj")                                \
	X(ts_tracefunc, "tstate.c_tracefunc")                                  \
	X(ts_use_tracing, "tstate.use_tracing") /* 3.8, 3.9 */                 \
	X(fr_back, "frame.back")             /* f_back, previous */            \
	X(fr_code, "frame.code")             /* f_code, f_executable (3.13) */ \
	X(fr_instr, "frame.instr")           /* f_lasti, prev_instr, instr_ptr */ \
	X(fr_owner, "frame.owner")                                             \
	X(fr_stacktop, "frame.stacktop")                                       \
	X(fr_entry, "frame.is_entry")        /* 3.11 */                        \
	X(fr_localsplus, "frame.localsplus")                                   \
	X(owned_by_generator, "frame.owned_by_generator")                      \
	X(owned_by_cstack, "frame.owned_by_cstack")                            \
	X(co_filename, "code.co_filename")                                     \
	X(co_name, "code.co_name")                                             \
	X(co_qualname, "code.co_qualname")                                     \
	X(co_firstlineno, "code.co_firstlineno")                               \
	X(co_linetable, "code.co_linetable") /* co_lnotab before 3.10 */       \
	X(co_code_adaptive, "code.co_code_adaptive")                           \
	X(co_firsttraceable, "code._co_firsttraceable")                        \
	X(uni_length, "unicode.length")                                        \
	X(uni_state, "unicode.state")                                          \
	X(uni_ascii_size, "unicode.ascii_size")     /* sizeof(PyASCIIObject) */ \
	X(uni_compact_size, "unicode.compact_size") /* sizeof(PyCompactUnicodeObject) */ \
	X(uni_legacy_data, "unicode.legacy_data")                              \
	X(uni_kind_shift, "unicode.kind_shift")                                \
	X(uni_compact_bit, "unicode.compact_bit")                              \
	X(uni_ascii_bit, "unicode.ascii_bit")                                  \
	X(bytes_size, "bytes.ob_size")                                         \
	X(bytes_sval, "bytes.ob_sval")

struct mt_pylayout {
	unsigned minor; /* 3.minor */
#define MT_X(member, name) int16_t member;
	MT_PYLAYOUT_FIELDS(MT_X)
#undef MT_X
};

/* Fields every version shares, factored out of the rows below. */
#define MT_PYLAYOUT_COMMON                                                     \
	.ob_type = 8, .uni_length = 16, .uni_state = 32, .uni_kind_shift = 2,  \
	.uni_compact_bit = 5, .uni_ascii_bit = 6, .bytes_size = 16,            \
	.bytes_sval = 32

/* 3.8 to 3.10: PyFrameObject chain from tstate->frame. */
#define MT_PYLAYOUT_FRAMEOBJECT(lasti, use_tracing)                            \
	.ts_tracing = 44, .ts_profilefunc = 56, .ts_profileobj = 72,           \
	.ts_tracefunc = 64, .ts_use_tracing = (use_tracing), .ts_frame = 24, .ts_cframe = -1,      \
	.cframe_current = -1, .fr_back = 24,                                   \
	.fr_code = 32, .fr_instr = (lasti), .fr_owner = -1,                    \
	.fr_stacktop = -1, .fr_entry = -1, .fr_localsplus = -1,                \
	.owned_by_generator = -1, .owned_by_cstack = -1, .co_filename = 104,   \
	.co_name = 112, .co_qualname = -1, .co_firstlineno = 40,               \
	.co_linetable = 120, .co_code_adaptive = -1, .co_firsttraceable = -1,  \
	.uni_ascii_size = 48, .uni_compact_size = 72, .uni_legacy_data = 72

static const struct mt_pylayout mt_pylayouts[] = {
	{ .minor = 8, MT_PYLAYOUT_COMMON, MT_PYLAYOUT_FRAMEOBJECT(104, 48) },
	{ .minor = 9, MT_PYLAYOUT_COMMON, MT_PYLAYOUT_FRAMEOBJECT(104, 48) },
	{ .minor = 10, MT_PYLAYOUT_COMMON, MT_PYLAYOUT_FRAMEOBJECT(96, -1) },
	{
		/* _PyInterpreterFrame chain from tstate->cframe->current_frame */
		.minor = 11, MT_PYLAYOUT_COMMON,
		.ts_tracing = 44, .ts_profilefunc = 64, .ts_profileobj = 80,
		.ts_tracefunc = 72, .ts_use_tracing = -1,
		.ts_frame = -1, .ts_cframe = 56, .cframe_current = 8,
		.fr_back = 48, .fr_code = 32, .fr_instr = 56, .fr_owner = 69,
		.fr_stacktop = 64, .fr_entry = 68, .fr_localsplus = 72,
		.owned_by_generator = 1, .owned_by_cstack = -1,
		.co_filename = 112, .co_name = 120, .co_qualname = 128,
		.co_firstlineno = 72, .co_linetable = 136, .co_code_adaptive = 184,
		.co_firsttraceable = 168,
		.uni_ascii_size = 48, .uni_compact_size = 72, .uni_legacy_data = 72,
	},
	{
		/* PyASCIIObject lost wstr: strings start 8 bytes earlier */
		.minor = 12, MT_PYLAYOUT_COMMON,
		.ts_tracing = 44, .ts_profilefunc = 64, .ts_profileobj = 80,
		.ts_tracefunc = 72, .ts_use_tracing = -1,
		.ts_frame = -1, .ts_cframe = 56, .cframe_current = 0,
		.fr_back = 8, .fr_code = 0, .fr_instr = 56, .fr_owner = 70,
		.fr_stacktop = 64, .fr_entry = -1, .fr_localsplus = 72,
		.owned_by_generator = 1, .owned_by_cstack = 3,
		.co_filename = 112, .co_name = 120, .co_qualname = 128,
		.co_firstlineno = 68, .co_linetable = 136, .co_code_adaptive = 192,
		.co_firsttraceable = 176,
		.uni_ascii_size = 40, .uni_compact_size = 56, .uni_legacy_data = 56,
	},
	{
		/* no more _PyCFrame; instr_ptr is the current instruction */
		.minor = 13, MT_PYLAYOUT_COMMON,
		.ts_tracing = 60, .ts_profilefunc = 80, .ts_profileobj = 96,
		.ts_tracefunc = 88, .ts_use_tracing = -1,
		.ts_frame = 72, .ts_cframe = -1, .cframe_current = -1,
		.fr_back = 8, .fr_code = 0, .fr_instr = 56, .fr_owner = 70,
		.fr_stacktop = 64, .fr_entry = -1, .fr_localsplus = 72,
		.owned_by_generator = 1, .owned_by_cstack = 3,
		.co_filename = 112, .co_name = 120, .co_qualname = 128,
		.co_firstlineno = 68, .co_linetable = 136, .co_code_adaptive = 200,
		.co_firsttraceable = 184,
		.uni_ascii_size = 40, .uni_compact_size = 56, .uni_legacy_data = 56,
	},
};

#define MT_PYLAYOUT_COUNT (sizeof(mt_pylayouts) / sizeof(mt_pylayouts[0]))

/* PyMemAllocatorEx, identical in 3.8..3.13. */
struct mt_pymem_allocator {
	void *ctx;
	void *(*malloc)(void *ctx, size_t size);
	void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
	void *(*realloc)(void *ctx, void *ptr, size_t new_size);
	void (*free)(void *ctx, void *ptr);
};

/* PyMemAllocatorDomain values */
#define MT_PYMEM_DOMAIN_RAW 0
#define MT_PYMEM_DOMAIN_MEM 1
#define MT_PYMEM_DOMAIN_OBJ 2

#endif /* MT_PAYLOAD_PYTHON_LAYOUT_H */
