/* SPDX-License-Identifier: MIT */
#ifndef MT_INJECT_INTERNAL_H
#define MT_INJECT_INTERNAL_H
/*
 * Helpers shared by the injector's files: the target's memory map, symbol
 * lookup in the target's own ELF files (libelf), memory access. Nothing
 * here prints unless its comment says so.
 */
#include <stddef.h>    /* size_t */
#include <stdint.h>    /* uint64_t */
#include <sys/types.h> /* pid_t */

struct mt_map {
	uint64_t start, end, offset;
	uint64_t ino;
	unsigned dev_major, dev_minor;
	char perms[5];
	const char *path; /* "" for anonymous mappings; owned by the mt_maps */
};

struct mt_maps {
	pid_t pid;
	struct mt_map *v;
	size_t n;
};

/* mt__maps_read() - snapshot /proc/@pid/maps. Returns 0 or -errno. */
int mt__maps_read(pid_t pid, struct mt_maps *m);
void mt__maps_release(struct mt_maps *m);
/* mt__maps_at() - the mapping containing @addr, or NULL. */
const struct mt_map *mt__maps_at(const struct mt_maps *m, uint64_t addr);
/* mt__maps_base() - lowest mapping of the file of @map (same dev:ino)
 * with file offset 0, i.e. the module's ELF header; NULL if none. */
const struct mt_map *mt__maps_base(const struct mt_maps *m, const struct mt_map *map);
/* mt__maps_find() - first file mapping whose basename starts with one of
 * the NULL-terminated @prefixes and continues with ".so" or "-"; NULL if
 * none. */
const struct mt_map *mt__maps_find(const struct mt_maps *m, const char *const *prefixes);
/* mt__basename() - the part of @path after its last '/'. */
const char *mt__basename(const char *path);

/* A module's ELF file, opened the way the target sees it. */
struct mt_elf {
	int fd;
	void *elf;          /* Elf * */
	uint64_t vaddr0;    /* page-aligned p_vaddr of the PT_LOAD at offset 0 */
	uint64_t entry;     /* e_entry */
	uint64_t bias;      /* load address - link address, if opened with a map */
};

/* mt__elf_open_map() - open the file behind @map of process @pid
 * (/proc/PID/map_files, then /proc/PID/root/PATH with PATH taken relative
 * to the target's root if the kernel named it from ours, then
 * /proc/PID/root/PATH, then PATH; the inode must match) and compute its
 * load bias from the module's base mapping. Returns 0 or -errno. */
int mt__elf_open_map(struct mt_elf *e, const struct mt_maps *m, const struct mt_map *map);
/* mt__elf_open_path() - open a file of ours; bias stays 0. */
int mt__elf_open_path(struct mt_elf *e, const char *path);
void mt__elf_close(struct mt_elf *e);
/* mt__elf_symbol() - st_value (link address) of the defined dynamic
 * symbol @name; prefers a default-version definition. Returns 0 or
 * -ENOENT. */
int mt__elf_symbol(struct mt_elf *e, const char *name, uint64_t *value);
/* mt__elf_symbols() - every defined st_value of @name (all versions),
 * appended to @out up to @cap. Returns the number stored. */
size_t mt__elf_symbols(struct mt_elf *e, const char *name, uint64_t *out, size_t cap);
/* mt__elf_rodata_version() - scan read-only data for a NUL-delimited
 * "3.N.M..." string and return N, or -1. */
int mt__elf_rodata_version(struct mt_elf *e);

/* mt__mem_read() / mt__mem_write() - target memory via process_vm_*v, or
 * ptrace peek/poke for a traced, stopped @tid (@tid may be 0 if not
 * traced; write falls back to poke only then). Return 0 or -errno. */
int mt__mem_read(pid_t pid, uint64_t addr, void *buf, size_t len);
int mt__mem_write(pid_t pid, pid_t tid, uint64_t addr, const void *buf, size_t len);

/* mt__tracer_error() - says who traces thread @tid of @pid (another
 * memtrace attaching, or a debugger) and returns -MT_EPTRACE. */
int mt__tracer_error(pid_t pid, pid_t tid);

#endif /* MT_INJECT_INTERNAL_H */
