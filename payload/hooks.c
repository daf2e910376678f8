/* SPDX-License-Identifier: MIT */
/*
 * The allocator hooks that patched GOT slots point at. Each checks the
 * tracking flag and the recursion guard first, calls the real function
 * found by mt_got_resolve() (never the slot's old value, which on a
 * non-PIE executable can be a PLT stub leading back here), records, and
 * preserves errno. Frees are recorded before the real free, allocations
 * after, so no other thread can reuse an address in between.
 */
#include "format/record.h"
#include "payload/hooks.h"
#include "payload/got.h"
#include "payload/track.h"

#include <dlfcn.h>    /* dlopen */
#include <errno.h>    /* errno */
#include <stdarg.h>   /* va_list */
#include <stdint.h>   /* SIZE_MAX */
#include <sys/mman.h> /* MAP_ANONYMOUS */
#include <unistd.h>   /* access, execve, sysconf */

/* X(name, return type, parameters) of every hooked function. */
#define MT_HOOKED(X)                                                     \
	X(malloc, void *, (size_t))                                     \
	X(free, void, (void *))                                         \
	X(calloc, void *, (size_t, size_t))                             \
	X(realloc, void *, (void *, size_t))                            \
	X(reallocarray, void *, (void *, size_t, size_t))               \
	X(posix_memalign, int, (void **, size_t, size_t))               \
	X(aligned_alloc, void *, (size_t, size_t))                      \
	X(memalign, void *, (size_t, size_t))                           \
	X(valloc, void *, (size_t))                                     \
	X(pvalloc, void *, (size_t))                                    \
	X(mmap, void *, (void *, size_t, int, int, int, off_t))         \
	X(mmap64, void *, (void *, size_t, int, int, int, off_t))       \
	X(munmap, int, (void *, size_t))                                \
	X(mremap, void *, (void *, size_t, size_t, int, ...))           \
	X(dlopen, void *, (const char *, int))                          \
	X(dlclose, int, (void *))                                       \
	X(_exit, void, (int))                                           \
	X(execve, int, (const char *, char *const[], char *const[]))    \
	X(execv, int, (const char *, char *const[]))                    \
	X(fexecve, int, (int, char *const[], char *const[]))

static struct {
#define MT_X(name, ret, params) ret(*name) params;
	MT_HOOKED(MT_X)
#undef MT_X
} real;

#define MT_X(name, ret, params) static ret hook_##name params;
MT_HOOKED(MT_X)
#undef MT_X

static const struct mt_got_hook hooks[] = {
#define MT_X(name, ret, params) { #name, (void *)hook_##name, (void **)&real.name },
	MT_HOOKED(MT_X)
#undef MT_X
};
#define N_HOOKS (sizeof(hooks) / sizeof(hooks[0]))

/* Who ends the capture at _exit() and exec (mt_hooks_on_end()). */
static void (*on_end)(enum mt_hooks_end how);

void mt_hooks_on_end(void (*end)(enum mt_hooks_end how))
{
	__atomic_store_n(&on_end, end, __ATOMIC_RELEASE);
}

static void end_capture(enum mt_hooks_end how)
{
	void (*end)(enum mt_hooks_end) = __atomic_load_n(&on_end, __ATOMIC_ACQUIRE);
	if (end)
		end(how);
}

/* Enter: 1 when this call is to be recorded (guard now held). */
static inline int enter(void)
{
	return mt_tracking && mt_guard_enter();
}

static void *record_alloc(unsigned kind, void *p, size_t size)
{
	if (p)
		mt_track_alloc(kind, p, size); /* keeps errno */
	mt_guard_leave();
	return p;
}

static void *hook_malloc(size_t size)
{
	if (!enter())
		return real.malloc(size);
	return record_alloc(MT_ALLOC_MALLOC, real.malloc(size), size);
}

static void *hook_calloc(size_t n, size_t size)
{
	size_t total;
	if (!enter())
		return real.calloc(n, size);
	if (__builtin_mul_overflow(n, size, &total))
		total = SIZE_MAX;
	return record_alloc(MT_ALLOC_CALLOC, real.calloc(n, size), total);
}

static void hook_free(void *p)
{
	if (!p || !enter()) {
		real.free(p);
		return;
	}
	mt_track_free(MT_ALLOC_FREE, p, 0);
	real.free(p);
	mt_guard_leave();
}

/* The allocator's malloc_usable_size(), found with the hooked functions
 * (NULL if it has none), and the page size munmap() wants. */
static size_t (*real_usable_size)(void *);
static uintptr_t page_size;

/* A realloc of @p to @size returned @q: when it failed (NULL for a size
 * that is not 0, errno ENOMEM), @p lives on as it was, which the capture
 * has freed (before the call): it is recorded again at the allocator's
 * usable size, its requested size not being known here, under this
 * call's stack. Returns @q. */
static void *realloc_kept(void *p, size_t size, void *q)
{
	if (!q && p && size && real_usable_size) {
		int e = errno;
		size_t usable = real_usable_size(p);
		errno = e;
		mt_track_alloc(MT_ALLOC_REALLOC, p, usable);
	}
	return q;
}

/* realloc: the old block is recorded freed before the call, because once
 * realloc returns another thread may already own its address. */
static void *hook_realloc(void *p, size_t size)
{
	if (!enter())
		return real.realloc(p, size);
	if (p) {
		mt_track_free(MT_ALLOC_FREE, p, 0);
	}
	return record_alloc(MT_ALLOC_REALLOC, realloc_kept(p, size, real.realloc(p, size)), size);
}

static void *hook_reallocarray(void *p, size_t n, size_t size)
{
	size_t total;
	if (!enter())
		return real.reallocarray(p, n, size);
	if (__builtin_mul_overflow(n, size, &total)) {
		mt_guard_leave();
		return real.reallocarray(p, n, size); /* fails with ENOMEM, p kept */
	}
	if (p) {
		mt_track_free(MT_ALLOC_FREE, p, 0);
	}
	return record_alloc(MT_ALLOC_REALLOC, realloc_kept(p, total, real.reallocarray(p, n, size)),
			    total);
}

static int hook_posix_memalign(void **out, size_t align, size_t size)
{
	if (!enter())
		return real.posix_memalign(out, align, size);
	int r = real.posix_memalign(out, align, size);
	record_alloc(MT_ALLOC_POSIX_MEMALIGN, r == 0 ? *out : NULL, size);
	return r;
}

static void *hook_aligned_alloc(size_t align, size_t size)
{
	if (!enter())
		return real.aligned_alloc(align, size);
	return record_alloc(MT_ALLOC_ALIGNED_ALLOC, real.aligned_alloc(align, size), size);
}

static void *hook_memalign(size_t align, size_t size)
{
	if (!enter())
		return real.memalign(align, size);
	return record_alloc(MT_ALLOC_MEMALIGN, real.memalign(align, size), size);
}

static void *hook_valloc(size_t size)
{
	if (!enter())
		return real.valloc(size);
	return record_alloc(MT_ALLOC_VALLOC, real.valloc(size), size);
}

static void *hook_pvalloc(size_t size)
{
	if (!enter())
		return real.pvalloc(size);
	/* pvalloc rounds the size up to whole pages */
	return record_alloc(MT_ALLOC_PVALLOC, real.pvalloc(size), size);
}

/* Only anonymous mappings are memory the program allocated; file
 * mappings are recorded by neither peer and would drown real use. */
static void *do_mmap(void *(*fn)(void *, size_t, int, int, int, off_t), void *addr,
		     size_t len, int prot, int flags, int fd, off_t off)
{
	if (!(flags & MAP_ANONYMOUS) || !enter())
		return fn(addr, len, prot, flags, fd, off);
	void *p = fn(addr, len, prot, flags, fd, off);
	record_alloc(MT_ALLOC_MMAP, p == MAP_FAILED ? NULL : p, len);
	return p;
}

static void *hook_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return do_mmap(real.mmap, addr, len, prot, flags, fd, off);
}

static void *hook_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return do_mmap(real.mmap64 ? real.mmap64 : real.mmap, addr, len, prot, flags, fd, off);
}

static int hook_munmap(void *addr, size_t len)
{
	if (!enter())
		return real.munmap(addr, len);
	/* a call the kernel refuses (EINVAL: an address not on a page
	 * boundary, a length of 0 or one no address space holds) is no
	 * event: it unmaps nothing */
	if (mt_size_possible(len) && len && !((uintptr_t)addr & (page_size - 1)))
		mt_track_free(MT_ALLOC_MUNMAP, addr, len);
	int r = real.munmap(addr, len);
	mt_guard_leave();
	return r;
}

static void *hook_mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	void *new_addr = NULL;
	if (flags & MREMAP_FIXED) {
		va_list ap;
		va_start(ap, flags);
		new_addr = va_arg(ap, void *);
		va_end(ap);
	}
	if (!mt_size_possible(old_len) || !enter())
		return real.mremap(old, old_len, new_len, flags, new_addr);
	/* unmapped before the call, as munmap: once the range is released
	 * another thread's mmap may get it and record that first */
	mt_track_free(MT_ALLOC_MUNMAP, old, old_len);
	void *p = real.mremap(old, old_len, new_len, flags, new_addr);
	if (p != MAP_FAILED)
		mt_track_alloc(MT_ALLOC_MMAP, p, new_len); /* keeps errno */
	else
		mt_track_alloc(MT_ALLOC_MMAP, old, old_len); /* still mapped */
	mt_guard_leave();
	return p;
}

/* Libraries loaded while tracking get their GOTs patched too. */
static void *hook_dlopen(const char *file, int flags)
{
	void *h = real.dlopen(file, flags);
	if (h && mt_tracking) {
		int e = errno;
		int own = mt_guard_enter();
		mt_got_patch_loaded(hooks, N_HOOKS);
		/* its addresses resolve from its next allocation on */
		mt_track_modules(0);
		if (own)
			mt_guard_leave();
		errno = e;
	}
	return h;
}

/* A library unloaded may leave its addresses to the next one loaded:
 * native stacks met after it are resolved against the map of their
 * time. (Whether dlclose really unloaded it does not matter.) */
static int hook_dlclose(void *h)
{
	int r = real.dlclose(h);
	if (r == 0 && mt_tracking) {
		int e = errno;
		int own = mt_guard_enter();
		mt_track_unloaded();
		if (own)
			mt_guard_leave();
		errno = e;
	}
	return r;
}

/* os._exit() skips atexit handlers: finish the capture first. */
static void hook__exit(int status)
{
	end_capture(MT_HOOKS_END_EXIT);
	real._exit(status);
	__builtin_unreachable();
}

/* exec replaces the program, writer thread and all: the capture ends
 * first, when the exec may succeed (os.execvp tries each directory of
 * PATH in turn, and most tries fail). */
static void finish_before_exec(const char *path)
{
	int e = errno;
	if (!path || access(path, X_OK) == 0)
		end_capture(MT_HOOKS_END_EXEC);
	errno = e;
}

static int hook_execve(const char *path, char *const argv[], char *const envp[])
{
	finish_before_exec(path);
	return real.execve(path, argv, envp);
}

static int hook_execv(const char *path, char *const argv[])
{
	finish_before_exec(path);
	return real.execv(path, argv);
}

static int hook_fexecve(int fd, char *const argv[], char *const envp[])
{
	finish_before_exec(NULL);
	return real.fexecve(fd, argv, envp);
}

/* Once per process: the real functions do not move, and resolving walks
 * every loaded object per name. */
int mt_hooks_resolve(void)
{
	static int resolved;
	if (resolved)
		return 0;
	int rc = mt_got_resolve(hooks, N_HOOKS);
	/* only the realloc's own object's: another's would read a block it
	 * does not know (a program's allocator that defines no
	 * malloc_usable_size, before the C library's) */
	void *usable = mt_got_find_definition("malloc_usable_size");
	Dl_info a, b;
	if (usable && real.realloc && dladdr(usable, &a) && dladdr((void *)real.realloc, &b) &&
	    a.dli_fbase == b.dli_fbase)
		real_usable_size = (size_t(*)(void *))usable;
	page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
	resolved = rc == 0;
	return rc;
}

int mt_hooks_install(void)
{
	return mt_got_patch_all(hooks, N_HOOKS);
}

int mt_hooks_uninstall(void)
{
	return mt_got_restore_all(hooks, N_HOOKS);
}
