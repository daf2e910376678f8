/* SPDX-License-Identifier: MIT */
/*
 * The CPython C API of the Python-side code, found once (pyapi.h).
 */
#include "payload/pyapi.h"
#include "payload/got.h"

#include <sys/syscall.h> /* SYS_gettid */
#include <unistd.h>      /* syscall, getpid */

struct mt_pyapi_fns mt_pyapi;

#define FIND(name) mt_got_find_definition(name)

int mt_pyapi_bind(void)
{
	struct mt_pyapi_fns *p = &mt_pyapi;
	if (p->bound)
		return 0;
	p->none = FIND("_Py_NoneStruct");
	p->deprecation = (void **)FIND("PyExc_DeprecationWarning");
	p->incref = (void (*)(void *))FIND("Py_IncRef");
	p->decref = (void (*)(void *))FIND("Py_DecRef");
	p->clear = (void (*)(void))FIND("PyErr_Clear");
	p->import = (void *(*)(const char *))FIND("PyImport_ImportModule");
	p->getattr = (void *(*)(void *, const char *))FIND("PyObject_GetAttrString");
	p->newcf = (void *(*)(void *, void *, void *))FIND("PyCFunction_NewEx");
	p->call = (void *(*)(void *, void *, void *))FIND("PyObject_Call");
	p->callf = (void *(*)(void *, const char *, ...))FIND("PyObject_CallFunction");
	p->callm = (void *(*)(void *, const char *, const char *, ...))FIND("PyObject_CallMethod");
	p->item = (void *(*)(void *, long))FIND("PySequence_GetItem");
	p->dict_new = (void *(*)(void))FIND("PyDict_New");
	p->dict_set = (int (*)(void *, const char *, void *))FIND("PyDict_SetItemString");
	p->tuple_new = (void *(*)(long))FIND("PyTuple_New");
	p->as_long = (long (*)(void *))FIND("PyLong_AsLong");
	p->as_utf8 = (const char *(*)(void *, long *))FIND("PyUnicode_AsUTF8AndSize");
	p->interp_head = (void *(*)(void))FIND("PyInterpreterState_Head");
	p->interp_next = (void *(*)(void *))FIND("PyInterpreterState_Next");
	p->thread_head = (void *(*)(void *))FIND("PyInterpreterState_ThreadHead");
	p->thread_next = (void *(*)(void *))FIND("PyThreadState_Next");
	p->set_profile = (void (*)(void *, void *))FIND("PyEval_SetProfile");
	p->set_profile_of = (int (*)(void *, void *, void *))FIND("_PyEval_SetProfile");
	p->save_thread = (void *(*)(void))FIND("PyEval_SaveThread");
	p->restore_thread = (void (*)(void *))FIND("PyEval_RestoreThread");
	p->modules = (void *(*)(void))FIND("PyImport_GetModuleDict");
	p->dict_get = (void *(*)(void *, const char *))FIND("PyDict_GetItemString");
	p->pending = (int (*)(int (*)(void *), void *))FIND("Py_AddPendingCall");
	p->bound = p->none && p->deprecation && p->incref && p->decref && p->clear && p->import &&
		   p->getattr && p->newcf && p->call && p->callf && p->callm && p->item &&
		   p->dict_new && p->dict_set && p->tuple_new && p->as_long && p->as_utf8 &&
		   p->interp_head && p->interp_next && p->thread_head && p->thread_next &&
		   p->set_profile && p->save_thread && p->restore_thread && p->modules &&
		   p->dict_get && p->pending;
	return p->bound ? 0 : -1;
}

void *mt_pyapi_none(void)
{
	mt_pyapi.incref(mt_pyapi.none);
	return mt_pyapi.none;
}

void *mt_pyapi_loaded(const char *name)
{
	void *modules = mt_pyapi.modules();
	return modules ? mt_pyapi.dict_get(modules, name) : NULL;
}

int mt_pyapi_main_thread(void)
{
	return (pid_t)syscall(SYS_gettid) == getpid();
}

void mt_pyapi_release(void *const *refs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (refs[i])
			mt_pyapi.decref(refs[i]);
}

/* @module.@func(**{@keys[i]: @defs[i]}), or without @keys,
 * @module.@func(@defs[0]). Needs the GIL and mt_pyapi_bind(). 0 or -1. */
int mt_pyapi_register(const char *module, const char *func, const char *const *keys,
		      struct mt_pyapi_def *const *defs, int n)
{
	void *mod = NULL, *reg = NULL, *fn = NULL, *kw = NULL, *args = NULL, *res = NULL;
	int ok = (mod = mt_pyapi.import(module)) && (reg = mt_pyapi.getattr(mod, func));

	if (!keys) {
		ok = ok && (fn = mt_pyapi.newcf(defs[0], NULL, NULL)) &&
		     (res = mt_pyapi.callf(reg, "(O)", fn));
	} else {
		ok = ok && (args = mt_pyapi.tuple_new(0)) && (kw = mt_pyapi.dict_new());
		for (int i = 0; ok && i < n; i++) {
			void *f = mt_pyapi.newcf(defs[i], NULL, NULL);
			ok = f && mt_pyapi.dict_set(kw, keys[i], f) == 0;
			if (f)
				mt_pyapi.decref(f);
		}
		ok = ok && (res = mt_pyapi.call(reg, args, kw));
	}
	if (!ok)
		mt_pyapi.clear();
	void *refs[] = { res, args, kw, fn, reg, mod };
	mt_pyapi_release(refs, sizeof(refs) / sizeof(refs[0]));
	return ok ? 0 : -1;
}
