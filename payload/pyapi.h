/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_PYAPI_H
#define MT_PAYLOAD_PYAPI_H
/*
 * The CPython C API that the payload's Python-side code calls (pyhooks.c,
 * pyfeed.c), found once with mt_pyapi_bind() in the parent with the GIL
 * held: a lookup walks the loaded objects under a loader lock that a fork
 * child may never get (another thread of the parent held it at the fork).
 * The payload never links libpython, so the types here are opaque. Every
 * call needs the GIL.
 */
#include <stddef.h> /* size_t */

struct mt_pyapi_def { /* PyMethodDef */
	const char *name;
	void *(*meth)(void *, void *);
	int flags;
	const char *doc;
};
#define MT_PY_METH_VARARGS 0x0001
#define MT_PY_METH_NOARGS 0x0004
#define MT_PY_METH_FASTCALL 0x0080

struct mt_pyapi_fns {
	int bound;
	void *none;         /* Py_None */
	void **deprecation; /* &PyExc_DeprecationWarning */
	void (*incref)(void *), (*decref)(void *), (*clear)(void);
	void *(*import)(const char *);
	void *(*getattr)(void *, const char *);
	void *(*newcf)(void *, void *, void *);
	void *(*call)(void *, void *, void *);
	void *(*callf)(void *, const char *, ...);
	void *(*callm)(void *, const char *, const char *, ...);
	void *(*item)(void *, long);
	void *(*dict_new)(void);
	int (*dict_set)(void *, const char *, void *);
	void *(*tuple_new)(long);
	long (*as_long)(void *);
	const char *(*as_utf8)(void *, long *); /* PyUnicode_AsUTF8AndSize */
	void *(*interp_head)(void);
	void *(*interp_next)(void *);
	void *(*thread_head)(void *);
	void *(*thread_next)(void *);
	void (*set_profile)(void *, void *);           /* this thread's */
	int (*set_profile_of)(void *, void *, void *); /* a thread's; 3.9+, else NULL */
	void *(*save_thread)(void);       /* PyEval_SaveThread: the GIL let go */
	void (*restore_thread)(void *);   /* PyEval_RestoreThread: taken again */
	void *(*modules)(void);           /* PyImport_GetModuleDict (borrowed) */
	void *(*dict_get)(void *, const char *); /* PyDict_GetItemString (borrowed) */
	int (*pending)(int (*)(void *), void *); /* Py_AddPendingCall (no GIL) */
};
extern struct mt_pyapi_fns mt_pyapi;

/* mt_pyapi_bind() - find the functions, once. 0, or -1 if one is missing
 * (but set_profile_of, which 3.8 lacks). */
int mt_pyapi_bind(void);

/* mt_pyapi_none() - a new reference to None, what a hook returns. */
void *mt_pyapi_none(void);

/* mt_pyapi_release() - the references in @refs[0..n) that are set,
 * released. */
void mt_pyapi_release(void *const *refs, size_t n);

/* mt_pyapi_loaded() - @name's module if the interpreter has it, whole or
 * being imported, as a borrowed reference; NULL if not. Never imports. */
void *mt_pyapi_loaded(const char *name);

/* mt_pyapi_main_thread() - whether the caller is the process's main
 * thread, which is Python's. threading must be imported there first: the
 * thread that first imports it is the one it takes for the main thread
 * (threading.main_thread(), and current_thread() on the real one). */
int mt_pyapi_main_thread(void);

/* mt_pyapi_register() - call @module.@func(**{@keys[i]: a function of
 * @defs[i]}) for i < @n, or without @keys @module.@func(a function of
 * @defs[0]): how atexit and os.register_at_fork hooks are registered.
 * 0, or -1 with the error cleared. */
int mt_pyapi_register(const char *module, const char *func, const char *const *keys,
		      struct mt_pyapi_def *const *defs, int n);

#endif /* MT_PAYLOAD_PYAPI_H */
