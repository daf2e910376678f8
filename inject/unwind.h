/* SPDX-License-Identifier: MIT */
#ifndef MT_INJECT_UNWIND_H
#define MT_INJECT_UNWIND_H
/*
 * Remote unwinding of the target's stopped threads with libunwind, with
 * unwind tables found by us rather than by libunwind-ptrace.
 *
 * libunwind-ptrace opens each module by the path /proc/PID/maps shows it.
 * That path is how the kernel names the file to the reader: for a target
 * in a chroot or in another mount namespace it may not exist at all in our
 * view, or name another file. Here each module is opened through
 * /proc/PID/map_files (mt__elf_open_map: the very file mapped, its inode
 * checked) and its .eh_frame_hdr search table is handed to libunwind as a
 * remote table in the target's memory. Memory and registers are still read
 * with libunwind-ptrace's accessors.
 *
 * Nothing here prints. Single-threaded use only.
 */
#include "inject/internal.h"

#include <libunwind.h> /* unw_addr_space_t, unw_cursor_t */

struct mt_unwind_module; /* a module's unwind table, cached */

struct mt_unwinder {
	unw_addr_space_t as;
	const struct mt_maps *maps;   /* the target's map, owned by the caller */
	struct mt_unwind_module *mods;
	size_t nmods, capmods;
	void *upt;                    /* _UPT_create() of the thread being unwound */
};

/* mt__unwinder_init() - an address space for the target whose map is @m
 * (kept, not copied). Returns 0 or -ENOMEM. */
int mt__unwinder_init(struct mt_unwinder *u, const struct mt_maps *m);
void mt__unwinder_release(struct mt_unwinder *u);

/* mt__unwinder_begin() - start unwinding thread @tid (ptrace-stopped) at
 * its current registers into @c. Returns 0 or a negative error; on
 * success call mt__unwinder_end() when done with @c. */
int mt__unwinder_begin(struct mt_unwinder *u, pid_t tid, unw_cursor_t *c);
void mt__unwinder_end(struct mt_unwinder *u);

#endif /* MT_INJECT_UNWIND_H */
