/* SPDX-License-Identifier: MIT */
#ifndef MT_PAYLOAD_DYNSYM_H
#define MT_PAYLOAD_DYNSYM_H
/*
 * The dynamic symbol table of a loaded object, read in memory (never from
 * the file on disk, which may be missing or different inside a container),
 * and the one way to find which loaded object defines a symbol.
 *
 * Every read is bounded: a table is refused (mt_dynsym_open() fails) or a
 * lookup misses, never reads outside the object's loaded segments, when
 * - DT_SYMTAB, DT_STRTAB or the hash table lies outside every PT_LOAD
 *   segment, or the string table (DT_STRSZ bytes) runs past its segment;
 * - DT_SYMENT is present and is not sizeof(ElfW(Sym));
 * - a hash table's header or bucket count (DT_GNU_HASH nbuckets and bloom
 *   size, DT_HASH nbucket) runs past its segment;
 * - a symbol index from a bucket or chain is at or past the table's symbol
 *   count (DT_HASH nchain when there is one, else as many entries as fit in
 *   the symbol table's segment), or a chain runs past its segment;
 * - a symbol's st_name is at or past DT_STRSZ, or its name has no NUL
 *   before DT_STRSZ (such a symbol has the name "").
 * A chain longer than the symbol count ends the lookup (no loops).
 *
 * GNU hash is used when present, else SysV hash; an object with neither
 * has no symbol found by name. Undefined entries are returned by lookups:
 * mt_dynsym_defined() tells a definition.
 *
 * Allocates nothing and takes no lock (mt_dynsym_find() takes the loader's
 * through dl_iterate_phdr): usable in the dlopen hook and on the control
 * thread, not inside an allocation hook.
 */
#include <link.h>   /* ElfW, struct dl_phdr_info */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uintptr_t */

struct mt_dynsym {
	uintptr_t base;              /* load bias */
	const ElfW(Dyn) *dyn;        /* the dynamic section */
	const ElfW(Sym) *symtab;
	size_t nsyms;                /* indices below this are readable */
	const char *strtab;
	size_t strsz;
	const uint32_t *gnu_hash;    /* NULL if absent or refused */
	const uint32_t *sysv_hash;   /* NULL if absent or refused */
	const uint32_t *gnu_end;     /* end of the GNU hash table's segment */
};

/* mt_dynsym_addr() - the address a dynamic entry's d_ptr means: glibc
 * relocates d_ptr in place for most objects, but not for all (the vDSO, a
 * read-only .dynamic), where a value below the load bias is an offset. */
uintptr_t mt_dynsym_addr(uintptr_t base, ElfW(Addr) ptr);

/* mt_dynsym_open() - read the dynamic symbol table of the object loaded at
 * @base with program headers @phdr[0..@phnum) (as dl_iterate_phdr gives
 * them). Returns 0, or -1 if the object has no PT_DYNAMIC, no DT_SYMTAB or
 * DT_STRTAB, or a table that fails the checks above. A hash table that
 * fails them is dropped (lookups miss) without failing the open. */
int mt_dynsym_open(struct mt_dynsym *t, uintptr_t base, const ElfW(Phdr) *phdr, size_t phnum);

/* mt_dynsym_lookup() - the entry named @name, defined or not, or NULL. */
const ElfW(Sym) *mt_dynsym_lookup(const struct mt_dynsym *t, const char *name);

/* mt_dynsym_name() - the name of entry @index, "" if @index is at or past
 * the symbol count or the name fails the checks above. */
const char *mt_dynsym_name(const struct mt_dynsym *t, size_t index);

/* mt_dynsym_defined() - @s is a definition: not SHN_UNDEF, a nonzero value
 * (an undefined function of a non-PIE executable has its PLT address), and
 * a function, IFUNC or object. */
int mt_dynsym_defined(const ElfW(Sym) *s);

/* mt_dynsym_skip() - objects never searched nor patched: the dynamic
 * loader, the vDSO and the object this module is linked into. */
int mt_dynsym_skip(const struct dl_phdr_info *info);

/* mt_dynsym_find() - the first loaded object (load order), skipped ones
 * aside, that defines @name and whose path fits in @path (room @room): the
 * path copied there, "" for the main program. Returns 1 if found, else 0.
 * Takes the loader's lock: never call under dl_iterate_phdr. */
int mt_dynsym_find(const char *name, char *path, size_t room);

/* mt_dynsym_each() - @fn(address, @ctx) for each function named @name
 * that a loaded object defines (load order, skipped ones aside: another
 * build of this module, say), until @fn returns nonzero. Returns that, or
 * 0. Takes the loader's lock, as mt_dynsym_find(). */
int mt_dynsym_each(const char *name, int (*fn)(uintptr_t addr, void *ctx), void *ctx);

#endif /* MT_PAYLOAD_DYNSYM_H */
