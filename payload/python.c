/* SPDX-License-Identifier: MIT */
/*
 * The payload's binding to the CPython 3.8..3.13 interpreter in this
 * process: run-time resolution of the C API, Python stack walks from the
 * interpreter's own frame chain, code object metadata.
 * The walk and describe paths run inside malloc hooks: they must never
 * allocate, lock, call C API that allocates or raises, or touch refcounts.
 */
#include "payload/python.h"
#include "payload/dynsym.h"
#include "payload/python-layout.h"
#include "payload/python-walk.h"
#include "payload/fault.h"
#include "payload/phdr.h"
#include "format/error.h"
#include "format/linetable.h"
#include "format/record.h"

#include <dlfcn.h>  /* dlopen, dlsym, RTLD_NOLOAD */
#include <errno.h>  /* errno */
#include <stdint.h> /* uintptr_t */
#include <stdlib.h> /* getenv */
#include <string.h> /* strcmp, memcmp, memcpy */
#include <sys/types.h> /* ssize_t */
#include <time.h>      /* nanosleep */

/* See python-walk.h. */
struct mt_pyapi mt_api;
static const struct mt_pylayout *mt_lo;
static uint32_t mt_py_hex;
int mt_py_ready;
/* CODE records keep a qualified name equal to the name, as they did
 * before it was left out (MEMTRACE_TEST_FULL_QUALNAME=1, for tests that
 * compare the two) */
static int mt_full_qualname;
/* MEMTRACE_TEST_TSTATE_HOLD_MS: a thread state's making takes this long */
static int mt_tstate_hold_ms;

static mt_python_update_fn mt_updater_for(size_t row);
mt_python_update_fn mt_python_updater;
int mt_py_started; /* Py_IsInitialized() was seen true */

static inline int mt_is_type(const void *obj, const void *type)
{
	return obj != NULL && mt_ld_ptr(obj, mt_lo->ob_type) == type;
}

/* ------------------------------------------------------------------------
 * Finding the interpreter
 * ---------------------------------------------------------------------- */

/* "3.11.2 (main, ...)" or "3.13.0rc1 ..." to PY_VERSION_HEX. */
static uint32_t mt_parse_version(const char *s)
{
	unsigned part[3] = { 0, 0, 0 }, level = 0xf, serial = 0;

	for (int i = 0; i < 3; i++) {
		if (*s < '0' || *s > '9')
			return i >= 2 ? (part[0] << 24 | part[1] << 16 | 0xf0) : 0;
		while (*s >= '0' && *s <= '9')
			part[i] = part[i] * 10 + (unsigned)(*s++ - '0');
		if (i < 2 && *s++ != '.')
			return 0;
	}
	if (s[0] == 'a' || s[0] == 'b' || (s[0] == 'r' && s[1] == 'c')) {
		level = s[0] == 'a' ? 0xa : s[0] == 'b' ? 0xb : 0xc;
		s += s[0] == 'r' ? 2 : 1;
		while (*s >= '0' && *s <= '9')
			serial = serial * 10 + (unsigned)(*s++ - '0');
	}
	if (part[0] > 255 || part[1] > 255 || part[2] > 255)
		return 0;
	return part[0] << 24 | part[1] << 16 | part[2] << 8 | (level & 0xf) << 4 | (serial & 0xf);
}

int mt_python_init(uint32_t *python_hex)
{
	static char path[4096]; /* static: 4 KiB off the control stack */
	const char *(*get_version)(void);
	const unsigned long *py_version;
	const void *type_type;
	struct mt_pyapi api;
	uint32_t hex;
	void *h;

	if (__atomic_load_n(&mt_py_ready, __ATOMIC_ACQUIRE)) {
		*python_hex = mt_py_hex;
		return 0;
	}
	const char *full = getenv("MEMTRACE_TEST_FULL_QUALNAME");
	mt_full_qualname = full && full[0] == '1' && !full[1];
	const char *hold = getenv("MEMTRACE_TEST_TSTATE_HOLD_MS");
	mt_tstate_hold_ms = hold ? atoi(hold) : 0;
	if (!mt_dynsym_find("Py_GetVersion", path, sizeof(path)))
		return -MT_ENOPY;
	h = dlopen(path[0] ? path : NULL, RTLD_NOLOAD | RTLD_LAZY);
	if (h == NULL)
		return -MT_ENOPY;

	get_version = (const char *(*)(void))dlsym(h, "Py_GetVersion");
	if (get_version == NULL)
		return -MT_ENOPY;
	hex = mt_parse_version(get_version());
	/* Py_Version (3.11+) carries the exact release; the string is the
	 * only source before, and the two must agree on major.minor. */
	py_version = dlsym(h, "Py_Version");
	if (py_version != NULL) {
		if ((*py_version & 0xffff0000ul) != (hex & 0xffff0000u))
			return -MT_ENOPY;
		hex = (uint32_t)*py_version;
	}
	mt_lo = NULL;
	for (size_t i = 0; i < MT_PYLAYOUT_COUNT; i++)
		if ((hex >> 24) == 3 && ((hex >> 16) & 0xff) == mt_pylayouts[i].minor)
			mt_lo = &mt_pylayouts[i], mt_python_updater = mt_updater_for(i);
	if (mt_lo == NULL)
		return -MT_ENOPY;

	memset(&api, 0, sizeof(api));
	api.is_initialized = (int (*)(void))dlsym(h, "Py_IsInitialized");
	api.is_finalizing = (int (*)(void))dlsym(h, "Py_IsFinalizing");
	if (api.is_finalizing == NULL)
		api.is_finalizing = (int (*)(void))dlsym(h, "_Py_IsFinalizing");
	api.this_tstate = (void *(*)(void))dlsym(h, "PyGILState_GetThisThreadState");
	api.gil_tstate = (void *(*)(void))dlsym(h, "PyThreadState_GetUnchecked");
	if (api.gil_tstate == NULL)
		api.gil_tstate = (void *(*)(void))dlsym(h, "_PyThreadState_UncheckedGet");
	if (api.gil_tstate == NULL)
		api.gil_tstate = api.this_tstate;
	api.gil_ensure = (mt_gilstate(*)(void))dlsym(h, "PyGILState_Ensure");
	api.gil_release = (void (*)(mt_gilstate))dlsym(h, "PyGILState_Release");
	api.tstate_new = (void *(*)(void *))dlsym(h, "PyThreadState_New");
	api.interp_main = (void *(*)(void))dlsym(h, "PyInterpreterState_Main");
	api.restore = (void (*)(void *))dlsym(h, "PyEval_RestoreThread");
	api.tstate_clear = (void (*)(void *))dlsym(h, "PyThreadState_Clear");
	api.delete_current = (void (*)(void))dlsym(h, "PyThreadState_DeleteCurrent");
	if (!api.tstate_new || !api.interp_main || !api.restore || !api.tstate_clear ||
	    !api.delete_current)
		api.tstate_new = NULL;
	api.mem_get = (void (*)(int, struct mt_pymem_allocator *))dlsym(h, "PyMem_GetAllocator");
	api.mem_set = (void (*)(int, struct mt_pymem_allocator *))dlsym(h, "PyMem_SetAllocator");
	api.allocator_name = (const char *(*)(void))dlsym(h, "_PyMem_GetCurrentAllocatorName");
	api.code_type = dlsym(h, "PyCode_Type");
	api.unicode_type = dlsym(h, "PyUnicode_Type");
	api.bytes_type = dlsym(h, "PyBytes_Type");
	type_type = dlsym(h, "PyType_Type");
	if (!api.is_initialized || !api.is_finalizing || !api.this_tstate || !api.gil_ensure ||
	    !api.gil_release || !api.mem_get || !api.mem_set || !api.code_type ||
	    !api.unicode_type || !api.bytes_type || !type_type)
		return -MT_ENOPY;
	/* The object header must be the default build's: a free-threaded or
	 * Py_TRACE_REFS build moves ob_type, and every offset with it. */
	if (mt_ld_ptr(api.code_type, mt_lo->ob_type) != type_type ||
	    dlsym(h, "_Py_DecRefShared") != NULL)
		return -MT_ENOPY;

	mt_api = api;
	mt_py_hex = hex;
	__atomic_store_n(&mt_py_ready, 1, __ATOMIC_RELEASE);
	*python_hex = hex;
	return 0;
}

/* ------------------------------------------------------------------------
 * Code objects' deaths
 *
 * The stack tables know code objects by address. When one dies, another
 * may be made at its address, and must not be taken for it: PyCode_Type's
 * tp_dealloc is wrapped to tell them, through the function given. The
 * slot follows ob_refcnt, ob_type, ob_size, tp_name, tp_basicsize and
 * tp_itemsize in every supported version (the header was checked to be
 * the default build's).
 * ---------------------------------------------------------------------- */
#define MT_TP_NAME 24
#define MT_TP_DEALLOC 48

typedef void (*mt_destructor)(void *);
static mt_destructor mt_code_dealloc_orig; /* set once, before our wrapper is stored */
static mt_python_code_gone_fn mt_code_gone; /* set before our wrapper is stored */

/* The tables hear of the death once the deallocator is done: it may run
 * Python (weakref callbacks, co_extra freeing), whose allocations could
 * otherwise describe the dying object again under a new id. The address
 * is only a key here; no code object is made at it before we return (the
 * GIL is ours). */
static void mt_code_dealloc(void *code)
{
	mt_code_dealloc_orig(code);
	mt_python_code_gone_fn gone = __atomic_load_n(&mt_code_gone, __ATOMIC_ACQUIRE);
	if (gone != NULL) {
		int saved = errno;
		gone(code);
		errno = saved;
	}
}

int mt_python_code_deaths(int on, mt_python_code_gone_fn gone)
{
	if (!__atomic_load_n(&mt_py_ready, __ATOMIC_ACQUIRE))
		return -MT_ENOPY;
	const char *name = mt_ld_ptr(mt_api.code_type, MT_TP_NAME);
	if (name == NULL || strcmp(name, "code") != 0)
		return -MT_ENOPY;
	void **slot = (void **)((char *)mt_api.code_type + MT_TP_DEALLOC);
	void *cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE), *ours = (void *)mt_code_dealloc;
	if (!on) {
		/* Only our own wrapper comes out. If someone wrapped it since,
		 * it stays in their chain, and only tells the tables. */
		if (cur == ours && mt_store_guarded(slot, (void *)mt_code_dealloc_orig) < 0)
			return -EFAULT;
		return 0;
	}
	if (gone == NULL)
		return -EINVAL;
	if (cur == ours) {
		__atomic_store_n(&mt_code_gone, gone, __ATOMIC_RELEASE);
		return 0;
	}
	if (mt_code_dealloc_orig == NULL) {
		if (cur == NULL)
			return -MT_ENOPY;
		mt_code_dealloc_orig = (mt_destructor)cur;
	} else if (cur != (void *)mt_code_dealloc_orig) {
		/* Someone else's since our last capture: it may call ours. */
		return -EBUSY;
	}
	__atomic_store_n(&mt_code_gone, gone, __ATOMIC_RELEASE);
	return mt_store_guarded(slot, ours) < 0 ? -EFAULT : 0;
}

/* ------------------------------------------------------------------------
 * Hook-safe readers
 * ---------------------------------------------------------------------- */

size_t mt_python_layout_row(void)
{
	return (size_t)(mt_lo - mt_pylayouts);
}

int mt_python_initialized(void)
{
	if (!__atomic_load_n(&mt_py_ready, __ATOMIC_ACQUIRE))
		return 0;
	return mt_api.is_initialized() && !mt_api.is_finalizing();
}

/* What mt_python_gil_take() returns for a thread state it made: the give
 * ends it, as PyGILState_Release() ends one that PyGILState_Ensure() made
 * (PyGILState_STATE is 0 or 1). */
#define MT_GIL_MADE 2

int mt_python_gil_take(void)
{
	if (mt_api.tstate_new && mt_api.this_tstate() == NULL) {
		void *interp = mt_api.interp_main();
		int token = mt_phdr_enter(0);
		void *tstate = interp ? mt_api.tstate_new(interp) : NULL;
		if (mt_tstate_hold_ms > 0) {
			struct timespec t = { mt_tstate_hold_ms / 1000,
					      (mt_tstate_hold_ms % 1000) * 1000000L };
			nanosleep(&t, NULL);
		}
		mt_phdr_leave(token);
		if (tstate) {
			mt_api.restore(tstate);
			return MT_GIL_MADE;
		}
	}
	return mt_api.gil_ensure();
}

void mt_python_gil_give(int state)
{
	if (state != MT_GIL_MADE) {
		mt_api.gil_release(state);
		return;
	}
	mt_api.tstate_clear(mt_api.this_tstate());
	mt_api.delete_current();
}

#define MT_WALKER(row)                                                                 \
	static size_t mt_update_row##row(struct mt_pychain *c)                            \
	{                                                                              \
		return mt_python_walk(&mt_pylayouts[row], 0, c);                          \
	}                                                                              \
	static void mt_describe_row##row(struct mt_pychain *c, size_t i)                  \
	{                                                                              \
		mt_frame_describe(&mt_pylayouts[row], c, i);                              \
	}
MT_WALKER(0)
MT_WALKER(1)
MT_WALKER(2)
MT_WALKER(3)
MT_WALKER(4)
MT_WALKER(5)
#undef MT_WALKER

static const mt_python_update_fn mt_updaters[] = {
	mt_update_row0, mt_update_row1, mt_update_row2,
	mt_update_row3, mt_update_row4, mt_update_row5
};
static void (*const mt_describers[])(struct mt_pychain *, size_t) = {
	mt_describe_row0, mt_describe_row1, mt_describe_row2,
	mt_describe_row3, mt_describe_row4, mt_describe_row5
};
_Static_assert(sizeof(mt_updaters) / sizeof(mt_updaters[0]) == MT_PYLAYOUT_COUNT,
	       "one walker per layout row");

static mt_python_update_fn mt_updater_for(size_t row)
{
	return mt_updaters[row];
}

void mt_python_describe_newest(struct mt_pychain *c)
{
	if (c->lazy && c->n && mt_lo != NULL)
		mt_describers[mt_lo - mt_pylayouts](c, c->n - 1);
	c->lazy = 0;
}

struct mt_pyfeed_state mt_pyfeed_now;

void mt_python_feed(uint32_t gen, const void *profile)
{
	/* the profile function first: a walker that sees the new generation
	 * must compare threads' profile functions with the right one */
	mt_pyfeed_now.profile = profile;
	__atomic_store_n(&mt_pyfeed_now.gen, gen, __ATOMIC_RELEASE);
}

void mt_python_frame_exit(struct mt_pychain *c, const void *frame)
{
	uint32_t top = c->top;
	if (top == 0 || c->frame[top - 1] != frame)
		return;
	/* what was above it exited before it, unreported: out too */
	mt_chain_cut(c, top - 1);
	c->lazy = 0;
}

const void *mt_python_current_frame(void)
{
	if (!__atomic_load_n(&mt_py_ready, __ATOMIC_ACQUIRE))
		return NULL;
	const void *tstate = mt_api.gil_tstate();
	return tstate ? mt_first_frame(mt_lo, tstate) : NULL;
}

int mt_python_complete(const struct mt_pychain *c, size_t i)
{
	const struct mt_pylayout *lo = mt_lo;
	const char *code = c->fr[i].code;
	const char *first = code + lo->co_code_adaptive;
	const char *instr = (const char *)((uintptr_t)c->pos[i] & ~(uintptr_t)1); /* the entry bit */
	return instr >= first + 2 * mt_ld_int(code, lo->co_firsttraceable);
}

void mt_python_code_key(const void *code, struct mt_pycode_key *key)
{
	if (!__atomic_load_n(&mt_py_ready, __ATOMIC_ACQUIRE)) {
		memset(key, 0, sizeof(*key));
		return;
	}
	key->filename = mt_ld_ptr(code, mt_lo->co_filename);
	key->name = mt_ld_ptr(code, mt_lo->co_name);
	key->linetable = mt_ld_ptr(code, mt_lo->co_linetable);
	key->firstlineno = mt_ld_int(code, mt_lo->co_firstlineno);
}

/* UTF-8 encoding of code point @c into @dst (room @room); returns bytes
 * written, 0 if it does not fit. Lone surrogates (possible in file names
 * decoded with surrogateescape) become U+FFFD to keep the output valid. */
static size_t mt_utf8_put(uint8_t *dst, size_t room, uint32_t c)
{
	if (c >= 0xd800 && c <= 0xdfff)
		c = 0xfffd;
	if (c < 0x80) {
		if (room < 1)
			return 0;
		dst[0] = (uint8_t)c;
		return 1;
	}
	if (c < 0x800) {
		if (room < 2)
			return 0;
		dst[0] = (uint8_t)(0xc0 | c >> 6);
		dst[1] = (uint8_t)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		if (room < 3)
			return 0;
		dst[0] = (uint8_t)(0xe0 | c >> 12);
		dst[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
		dst[2] = (uint8_t)(0x80 | (c & 0x3f));
		return 3;
	}
	if (room < 4)
		return 0;
	dst[0] = (uint8_t)(0xf0 | (c >> 18 & 0x07));
	dst[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3f));
	dst[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
	dst[3] = (uint8_t)(0x80 | (c & 0x3f));
	return 4;
}

/* str object @s as UTF-8 into @dst, cut at a character boundary when
 * @room is short. Returns bytes written; 0 for anything but a ready str. */
static size_t mt_copy_str(const void *s, uint8_t *dst, size_t room)
{
	uint32_t state;
	ssize_t len;
	unsigned kind;
	const uint8_t *data;
	size_t n = 0;

	if (!mt_is_type(s, mt_api.unicode_type))
		return 0;
	memcpy(&state, (const char *)s + mt_lo->uni_state, sizeof(state));
	memcpy(&len, (const char *)s + mt_lo->uni_length, sizeof(len));
	kind = (state >> mt_lo->uni_kind_shift) & 7;
	if (len <= 0)
		return 0;
	if (state >> mt_lo->uni_compact_bit & 1) {
		data = (const uint8_t *)s + ((state >> mt_lo->uni_ascii_bit & 1)
						     ? mt_lo->uni_ascii_size
						     : mt_lo->uni_compact_size);
	} else {
		/* legacy string (3.11 and older); not ready ones have kind 0 */
		data = mt_ld_ptr(s, mt_lo->uni_legacy_data);
		if (data == NULL)
			return 0;
	}
	for (ssize_t i = 0; i < len; i++) {
		uint32_t c;
		size_t w;

		if (kind == 1) {
			c = data[i];
		} else if (kind == 2) {
			uint16_t u;

			memcpy(&u, data + 2 * i, 2);
			c = u;
		} else if (kind == 4) {
			memcpy(&c, data + 4 * i, 4);
		} else {
			return 0;
		}
		w = mt_utf8_put(dst + n, room - n, c);
		if (w == 0)
			break;
		n += w;
	}
	return n;
}

/* The bytes of bytes object @b, where they are; 0 if it is not one. */
static size_t mt_bytes_view(const void *b, const uint8_t **data)
{
	ssize_t len;

	if (!mt_is_type(b, mt_api.bytes_type))
		return 0;
	memcpy(&len, (const char *)b + mt_lo->bytes_size, sizeof(len));
	*data = (const uint8_t *)b + mt_lo->bytes_sval;
	return len > 0 ? (size_t)len : 0;
}

int mt_python_code_describe(const void *code, struct mt_rec_code *out, uint8_t *scratch,
			    size_t cap, int with_table)
{
	const void *qualname;
	size_t used = 0, n;

	if (!__atomic_load_n(&mt_py_ready, __ATOMIC_ACQUIRE) ||
	    !mt_is_type(code, mt_api.code_type))
		return -1;
	out->firstlineno = (uint32_t)mt_ld_int(code, mt_lo->co_firstlineno);

	/* Short fields first so a small @cap cuts the file name or the line
	 * table rather than losing the function's name. */
	n = mt_copy_str(mt_ld_ptr(code, mt_lo->co_name), scratch + used, cap - used);
	out->name = (struct mt_bytes){ scratch + used, (uint32_t)n };
	used += n;
	qualname = mt_lo->co_qualname >= 0 ? mt_ld_ptr(code, mt_lo->co_qualname)
					   : mt_ld_ptr(code, mt_lo->co_name);
	n = mt_copy_str(qualname, scratch + used, cap - used);
	/* a qualified name equal to the name (a module's functions, and
	 * every code object before 3.11) is left empty: readers use the name
	 * then (docs/format.md section 3.2) */
	if (!mt_full_qualname && n == out->name.len && memcmp(scratch + used, out->name.p, n) == 0)
		n = 0;
	out->qualname = (struct mt_bytes){ scratch + used, (uint32_t)n };
	used += n;
	n = mt_copy_str(mt_ld_ptr(code, mt_lo->co_filename), scratch + used, cap - used);
	out->filename = (struct mt_bytes){ scratch + used, (uint32_t)n };
	used += n;
	out->linetable = (struct mt_bytes){ NULL, 0 };
	if (!with_table)
		return 0;
	const uint8_t *table = NULL;
	n = mt_bytes_view(mt_ld_ptr(code, mt_lo->co_linetable), &table);
	if (n && mt_linetable_capture_hex(mt_py_hex) != mt_py_hex) {
		/* a location table: kept in 3.10's form, without the columns
		 * (a sixth of the size), as much of it as fits */
		n = mt_linetable_compact(scratch + used, cap - used, table, n);
	} else {
		/* pairs of bytes (lnotab, 3.10's linetable): a cut one is
		 * cut between two */
		if (n > cap - used)
			n = (cap - used) & ~(size_t)1;
		memcpy(scratch + used, table, n);
	}
	out->linetable = (struct mt_bytes){ scratch + used, (uint32_t)n };
	return 0;
}

int mt_python_code_line(const void *code, uint32_t offset, struct mt_linecursor *cur)
{
	if (!__atomic_load_n(&mt_py_ready, __ATOMIC_ACQUIRE) ||
	    !mt_is_type(code, mt_api.code_type))
		return 0;
	const uint8_t *table = NULL;
	size_t n = mt_bytes_view(mt_ld_ptr(code, mt_lo->co_linetable), &table);
	if (mt_linetable_capture_hex(mt_py_hex) != mt_py_hex)
		offset &= ~1u; /* 3.11+: the entry bit */
	int line = mt_linetable_line_from(cur, mt_py_hex, table, n,
					  (int)mt_ld_int(code, mt_lo->co_firstlineno), offset);
	return line > 0 ? line : 0;
}

uint32_t mt_python_code_entry(uint32_t offset)
{
	return mt_linetable_capture_hex(mt_py_hex) != mt_py_hex ? offset & 1 : 1;
}
