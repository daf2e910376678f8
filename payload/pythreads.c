/* SPDX-License-Identifier: MIT */
/*
 * Python's thread names (pythreads.h).
 */
#include "payload/pythreads.h"
#include "payload/pyapi.h"
#include "payload/track.h"

static struct {
	void *code; /* the installer, compiled once (kept) */
	void *cb;   /* _memtrace_thread_name (kept) */
	void *self; /* the current thread's naming, compiled once (kept) */
} pt;

/* _memtrace_thread_name(native_id, name), with the GIL. */
static void *name_cb(void *self, void *args)
{
	(void)self;
	void *id = mt_pyapi.item(args, 0), *name = mt_pyapi.item(args, 1);
	long len = 0;
	const char *utf8 = id && name ? mt_pyapi.as_utf8(name, &len) : NULL;
	long tid = id ? mt_pyapi.as_long(id) : -1;
	if (utf8 && tid > 0)
		mt_track_thread_name((uint64_t)tid, utf8, (size_t)len);
	else
		mt_pyapi.clear();
	void *refs[] = { id, name };
	mt_pyapi_release(refs, 2);
	return mt_pyapi_none();
}

static struct mt_pyapi_def name_def = { "_memtrace_thread_name", name_cb, MT_PY_METH_VARARGS,
					NULL };

/* Run in a namespace of its own, with _cb the function above. A class
 * attribute of threading.Thread's own of either name (a version that had
 * one) leaves it alone. */
static const char installer[] =
	"import threading as _t\n"
	"if True:\n"
	"    class _MemtraceThreadName:\n"
	"        \"\"\"memtrace: tells the profiler a thread's name; the value is the\n"
	"        instance's, as without it.\"\"\"\n"
	"        __slots__ = ('attr',)\n"
	"        def __init__(self, attr):\n"
	"            self.attr = attr\n"
	"        def __get__(self, obj, cls=None):\n"
	"            if obj is None:\n"
	"                return self\n"
	"            try:\n"
	"                return obj.__dict__[self.attr]\n"
	"            except KeyError:\n"
	"                raise AttributeError(self.attr) from None\n"
	"        def __set__(self, obj, value):\n"
	"            d = obj.__dict__\n"
	"            d[self.attr] = value\n"
	"            nid = d.get('_native_id')\n"
	"            if nid is not None and '_name' in d:\n"
	"                try:\n"
	"                    _cb(nid, str(d['_name']))\n"
	"                except Exception:\n"
	"                    pass\n"
	"        def __delete__(self, obj):\n"
	"            try:\n"
	"                del obj.__dict__[self.attr]\n"
	"            except KeyError:\n"
	"                raise AttributeError(self.attr) from None\n"
	"    _mine = all(type(_t.Thread.__dict__.get(a)).__name__ == '_MemtraceThreadName'\n"
	"                for a in ('_name', '_native_id'))\n"
	"    if not _mine and all(a not in _t.Thread.__dict__ for a in ('_name', '_native_id')):\n"
	"        for a in ('_name', '_native_id'):\n"
	"            setattr(_t.Thread, a, _MemtraceThreadName(a))\n"
	"        _mine = True\n"
	"    if _mine:\n"
	"        for _th in list(_t._active.values()):\n"
	"            _nid = _th.__dict__.get('_native_id')\n"
	"            if _nid is not None:\n"
	"                _cb(_nid, str(_th.__dict__.get('_name', '')))\n";

/* Run @src (compiled once into *@code, kept) in a namespace of its own
 * whose _cb is the function above, made the first time. 0, or -1 if it
 * could not be. With the GIL. */
static int run_with_cb(void **code, const char *src)
{
	int own = mt_guard_enter(); /* what is made here is memtrace's */
	void *builtins = NULL, *exec = NULL, *compile = NULL, *ns = NULL, *res = NULL;
	int ok = (builtins = mt_pyapi.import("builtins")) &&
		 (exec = mt_pyapi.getattr(builtins, "exec"));
	if (ok && !*code)
		ok = (compile = mt_pyapi.getattr(builtins, "compile")) &&
		     (*code = mt_pyapi.callf(compile, "sss", src, "<memtrace>", "exec"));
	if (ok && !pt.cb)
		ok = (pt.cb = mt_pyapi.newcf(&name_def, NULL, NULL)) != NULL;
	ok = ok && (ns = mt_pyapi.dict_new()) && mt_pyapi.dict_set(ns, "_cb", pt.cb) == 0 &&
	     (res = mt_pyapi.callf(exec, "OO", *code, ns));
	if (!ok)
		mt_pyapi.clear();
	void *refs[] = { res, ns, compile, exec, builtins };
	mt_pyapi_release(refs, 5);
	if (own)
		mt_guard_leave();
	return ok ? 0 : -1;
}

int mt_pythreads_install(void)
{
	if (mt_pyapi_bind() < 0)
		return -1;
	if (!mt_pyapi_main_thread() && !mt_pyapi_loaded("threading"))
		return 1;
	/* every capture: the descriptor put in the first time, and the
	 * threads there are now told */
	return run_with_cb(&pt.code, installer);
}

/* The thread that forked is the child's main thread, but threading keeps
 * the parent's kernel id in it (3.11 and before): told here with its own. */
static const char name_self[] =
	"import threading as _t\n"
	"_cb(_t.get_native_id(), _t.current_thread().name)\n";

int mt_pythreads_name_self(void)
{
	if (!pt.cb || !mt_pyapi_loaded("threading"))
		return 0;
	return run_with_cb(&pt.self, name_self);
}
