/* SPDX-License-Identifier: MIT */
/*
 * Dynamic symbol tables of loaded objects, bounds-checked (see dynsym.h).
 */
#include "payload/dynsym.h"
#include "payload/phdr.h"

#include <elf.h>      /* DT_*, SHN_UNDEF, STT_* */
#include <string.h>   /* memchr, strcmp */
#include <sys/auxv.h> /* getauxval */

uintptr_t mt_dynsym_addr(uintptr_t base, ElfW(Addr) ptr)
{
	return ptr < base ? base + ptr : ptr;
}

/* The end of the PT_LOAD segment that holds [@a, @a + @n), or 0. */
static uintptr_t segment_end(uintptr_t base, const ElfW(Phdr) *phdr, size_t phnum, uintptr_t a,
			     size_t n)
{
	for (size_t i = 0; i < phnum; i++) {
		if (phdr[i].p_type != PT_LOAD)
			continue;
		uintptr_t s = base + phdr[i].p_vaddr, e = s + phdr[i].p_memsz;
		if (a >= s && a < e && n <= e - a)
			return e;
	}
	return 0;
}

static uint32_t gnu_hash_of(const char *s)
{
	uint32_t h = 5381;
	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

static uint32_t sysv_hash_of(const char *s)
{
	uint32_t h = 0, g;
	for (; *s; s++) {
		h = (h << 4) + (unsigned char)*s;
		g = h & 0xf0000000u;
		if (g)
			h ^= g >> 24;
		h &= ~g;
	}
	return h;
}

/* GNU hash: header, bloom words and buckets must lie in one segment; the
 * chain runs on to its end. */
static void open_gnu(struct mt_dynsym *t, const ElfW(Phdr) *phdr, size_t phnum)
{
	const uint32_t *h = t->gnu_hash;
	uintptr_t end = segment_end(t->base, phdr, phnum, (uintptr_t)h, 4 * sizeof(uint32_t));
	t->gnu_hash = NULL;
	if (!end)
		return;
	size_t words = (end - (uintptr_t)h) / sizeof(uint32_t);
	size_t need = 4 + (size_t)h[2] * (sizeof(ElfW(Addr)) / 4) + (size_t)h[0];
	if (h[0] == 0 || need > words)
		return;
	t->gnu_hash = h;
	t->gnu_end = h + words;
}

/* SysV hash: nbucket buckets and nchain chain entries in one segment;
 * nchain is the symbol count. */
static void open_sysv(struct mt_dynsym *t, const ElfW(Phdr) *phdr, size_t phnum)
{
	const uint32_t *h = t->sysv_hash;
	uintptr_t end = segment_end(t->base, phdr, phnum, (uintptr_t)h, 2 * sizeof(uint32_t));
	t->sysv_hash = NULL;
	if (!end)
		return;
	size_t words = (end - (uintptr_t)h) / sizeof(uint32_t);
	if (h[0] == 0 || 2 + (size_t)h[0] + (size_t)h[1] > words)
		return;
	t->sysv_hash = h;
	if (h[1] < t->nsyms)
		t->nsyms = h[1];
}

int mt_dynsym_open(struct mt_dynsym *t, uintptr_t base, const ElfW(Phdr) *phdr, size_t phnum)
{
	size_t syment = sizeof(ElfW(Sym));

	memset(t, 0, sizeof(*t));
	t->base = base;
	for (size_t i = 0; i < phnum; i++)
		if (phdr[i].p_type == PT_DYNAMIC)
			t->dyn = (const ElfW(Dyn) *)(base + phdr[i].p_vaddr);
	if (!t->dyn)
		return -1;
	for (const ElfW(Dyn) *d = t->dyn; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB:
			t->symtab = (const ElfW(Sym) *)mt_dynsym_addr(base, d->d_un.d_ptr);
			break;
		case DT_STRTAB:
			t->strtab = (const char *)mt_dynsym_addr(base, d->d_un.d_ptr);
			break;
		case DT_STRSZ:
			t->strsz = d->d_un.d_val;
			break;
		case DT_SYMENT:
			syment = d->d_un.d_val;
			break;
		case DT_GNU_HASH:
			t->gnu_hash = (const uint32_t *)mt_dynsym_addr(base, d->d_un.d_ptr);
			break;
		case DT_HASH:
			t->sysv_hash = (const uint32_t *)mt_dynsym_addr(base, d->d_un.d_ptr);
			break;
		}
	}
	if (!t->symtab || !t->strtab || syment != sizeof(ElfW(Sym)))
		return -1;
	uintptr_t symend = segment_end(base, phdr, phnum, (uintptr_t)t->symtab, syment);
	if (!symend || !segment_end(base, phdr, phnum, (uintptr_t)t->strtab, t->strsz))
		return -1;
	t->nsyms = (symend - (uintptr_t)t->symtab) / syment;
	if (t->sysv_hash)
		open_sysv(t, phdr, phnum);
	if (t->gnu_hash)
		open_gnu(t, phdr, phnum);
	return 0;
}

const char *mt_dynsym_name(const struct mt_dynsym *t, size_t index)
{
	if (index >= t->nsyms)
		return "";
	size_t off = t->symtab[index].st_name;
	if (off >= t->strsz || !memchr(t->strtab + off, '\0', t->strsz - off))
		return "";
	return t->strtab + off;
}

static const ElfW(Sym) *lookup_gnu(const struct mt_dynsym *t, const char *name)
{
	const uint32_t *h = t->gnu_hash;
	uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
	const uint32_t *buckets = h + 4 + (size_t)bloom_size * (sizeof(ElfW(Addr)) / 4);
	const uint32_t *chain = buckets + nbuckets;
	uint32_t hv = gnu_hash_of(name);
	uint32_t i = buckets[hv % nbuckets];

	if (i == 0 || i < symoffset)
		return NULL;
	for (; i < t->nsyms; i++) {
		if ((size_t)(i - symoffset) >= (size_t)(t->gnu_end - chain))
			return NULL;
		uint32_t ch = chain[i - symoffset];
		if ((ch | 1) == (hv | 1) && strcmp(mt_dynsym_name(t, i), name) == 0)
			return &t->symtab[i];
		if (ch & 1)
			return NULL;
	}
	return NULL;
}

static const ElfW(Sym) *lookup_sysv(const struct mt_dynsym *t, const char *name)
{
	const uint32_t *h = t->sysv_hash;
	uint32_t nbucket = h[0], nchain = h[1];
	const uint32_t *bucket = h + 2, *chain = bucket + nbucket;
	uint32_t i = bucket[sysv_hash_of(name) % nbucket];

	/* at most nchain steps: a corrupt chain may loop */
	for (uint32_t steps = 0; i != STN_UNDEF && steps < nchain; i = chain[i], steps++) {
		if (i >= t->nsyms)
			return NULL;
		if (strcmp(mt_dynsym_name(t, i), name) == 0)
			return &t->symtab[i];
	}
	return NULL;
}

const ElfW(Sym) *mt_dynsym_lookup(const struct mt_dynsym *t, const char *name)
{
	if (name[0] == '\0')
		return NULL; /* "" is what a refused name reads as */
	if (t->gnu_hash)
		return lookup_gnu(t, name);
	if (t->sysv_hash)
		return lookup_sysv(t, name);
	return NULL;
}

int mt_dynsym_defined(const ElfW(Sym) *s)
{
	int type = ELF64_ST_TYPE(s->st_info);
	return s->st_shndx != SHN_UNDEF && s->st_value != 0 &&
	       (type == STT_FUNC || type == STT_GNU_IFUNC || type == STT_OBJECT);
}

int mt_dynsym_skip(const struct dl_phdr_info *info)
{
	const char *n = info->dlpi_name ? info->dlpi_name : "";
	if (strstr(n, "linux-vdso") || strstr(n, "/ld-linux") || strstr(n, "/ld-musl") ||
	    strstr(n, "ld-linux-"))
		return 1;
	if (info->dlpi_addr && info->dlpi_addr == getauxval(AT_SYSINFO_EHDR))
		return 1;
	/* ourselves: the object whose segments hold this function. Not by
	 * dladdr(): our callers run inside dl_iterate_phdr(), and dladdr()
	 * would take the loader's other lock, which a dlclose() in another
	 * thread holds while it waits for theirs. */
	uintptr_t self = (uintptr_t)&mt_dynsym_skip;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && self - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
			return 1;
	}
	return 0;
}

/* The loaded objects, skipped ones aside, that define a symbol: @fn for
 * each, with the definition, until it returns nonzero. */
struct defs_ctx {
	const char *name;
	int (*fn)(const struct dl_phdr_info *info, const ElfW(Sym) *s, void *ctx);
	void *ctx;
	int ret;
};

static int defs_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct defs_ctx *c = arg;
	struct mt_dynsym t;
	(void)size;
	if (mt_dynsym_skip(info) || mt_dynsym_open(&t, info->dlpi_addr, info->dlpi_phdr,
						   info->dlpi_phnum) < 0)
		return 0;
	const ElfW(Sym) *s = mt_dynsym_lookup(&t, c->name);
	if (!s || !mt_dynsym_defined(s))
		return 0;
	return c->ret = c->fn(info, s, c->ctx);
}

static int each_definition(const char *name,
			   int (*fn)(const struct dl_phdr_info *info, const ElfW(Sym) *s, void *ctx),
			   void *ctx)
{
	struct defs_ctx c = { name, fn, ctx, 0 };
	mt_phdr_walk(defs_cb, &c);
	return c.ret;
}

struct path_room {
	char *path;
	size_t room;
};

static int path_of(const struct dl_phdr_info *info, const ElfW(Sym) *s, void *ctx)
{
	struct path_room *p = ctx;
	const char *n = info->dlpi_name ? info->dlpi_name : "";
	size_t len = strlen(n);
	(void)s;
	if (len >= p->room)
		return 0;
	memcpy(p->path, n, len + 1);
	return 1;
}

int mt_dynsym_find(const char *name, char *path, size_t room)
{
	struct path_room p = { path, room };
	return each_definition(name, path_of, &p);
}

struct call_ctx {
	int (*fn)(uintptr_t addr, void *ctx);
	void *ctx;
};

static int call_function(const struct dl_phdr_info *info, const ElfW(Sym) *s, void *ctx)
{
	struct call_ctx *c = ctx;
	if (ELF64_ST_TYPE(s->st_info) != STT_FUNC)
		return 0;
	return c->fn(info->dlpi_addr + s->st_value, c->ctx);
}

int mt_dynsym_each(const char *name, int (*fn)(uintptr_t addr, void *ctx), void *ctx)
{
	struct call_ctx c = { fn, ctx };
	return each_definition(name, call_function, &c);
}
