/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_GOT_H
#define MT_PAYLOAD_GOT_H
/*
 * GOT patching: point the allocator slots of every loaded object at our
 * hooks, and put the saved originals back on detach.
 *
 * Slots patched: R_*_JUMP_SLOT, R_*_GLOB_DAT and zero-addend R_*_64 whose
 * symbol is one of the hooked names, in DT_JMPREL and DT_RELA of every
 * object but ld.so, the vDSO and the payload itself. RELRO pages are made
 * writable for the store and read-only again afterwards.
 *
 * Not for the hook path: these walk dl_iterate_phdr and may take the
 * loader's locks. Serialised internally by one mutex.
 */
#include <stddef.h> /* size_t */

struct mt_got_hook {
	const char *name;
	void *hook;      /* our function */
	void **real;     /* where the real function's address is stored */
};

/* mt_got_find_definition() - address of @name in the first loaded object
 * (load order) that defines it, resolved through that object's own
 * handle so that IFUNCs are resolved and canonical PLT stubs of a non-PIE
 * executable are never returned. NULL if no object defines it. */
void *mt_got_find_definition(const char *name);

/* mt_got_resolve() - fill every hooks[i].real with the real function.
 * Returns 0, or -ENOENT naming no function (malloc, free, calloc and
 * realloc are required; others may stay NULL and are then not hooked). */
int mt_got_resolve(const struct mt_got_hook *hooks, size_t n);

/* mt_got_patch_all() - patch every loaded object; slots already holding a
 * hook are left alone, so it is safe to call again after a dlopen.
 * Returns the number of slots newly patched, or -errno. */
int mt_got_patch_all(const struct mt_got_hook *hooks, size_t n);

/* mt_got_patch_loaded() - as mt_got_patch_all() for objects loaded since,
 * but only while the GOTs are patched: a dlopen that saw tracking on as
 * mt_got_restore_all() ran must not patch everything again. */
int mt_got_patch_loaded(const struct mt_got_hook *hooks, size_t n);

/* mt_got_after_fork() - in a fork child: the lock may have been held by a
 * thread the child does not have. */
void mt_got_after_fork(void);

/* mt_got_restore_all() - give every slot that still holds one of our
 * hooks its saved original, in objects loaded now (a slot of an object
 * unloaded since is never written). Returns slots restored, or -errno. */
int mt_got_restore_all(const struct mt_got_hook *hooks, size_t n);

#endif /* MT_PAYLOAD_GOT_H */
