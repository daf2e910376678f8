/* SPDX-License-Identifier: MIT */
/*
 * GOT patching and real-symbol lookup. Runs on the payload's control
 * thread or in the dlopen hook, never inside an allocation hook. Reads
 * only the in-memory dynamic sections (never the files on disk, which may
 * be missing or different inside a container).
 */
#include "payload/got.h"
#include "payload/phdr.h"
#include "payload/dynsym.h"
#include "payload/fault.h"
#include "util/fd.h"

#include <dlfcn.h>    /* dlopen, dlsym */
#include <elf.h>      /* Elf64_Dyn, R_X86_64_* */
#include <errno.h>    /* ENOENT */
#include <fcntl.h>    /* open */
#include <link.h>     /* dl_iterate_phdr */
#include <pthread.h>  /* pthread_mutex_t */
#include <stdint.h>   /* uintptr_t */
#include <stdlib.h>   /* strtoul */
#include <string.h>   /* strcmp */
#include <sys/mman.h> /* mprotect, mmap */
#include <unistd.h>   /* sysconf */

#if defined(__x86_64__)
#define MT_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define MT_R_GLOB_DAT R_X86_64_GLOB_DAT
#define MT_R_ABS64 R_X86_64_64
#elif defined(__aarch64__)
#define MT_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define MT_R_GLOB_DAT R_AARCH64_GLOB_DAT
#define MT_R_ABS64 R_AARCH64_ABS64
#else
#error "memtrace: GOT patching supports x86_64 and aarch64"
#endif

/* ------------------------------------------------------------------------
 * Saved slots: open addressing keyed by slot address, in mmap'ed memory
 * (never malloc: the table is written while hooks are live).
 * ---------------------------------------------------------------------- */
struct saved_slot {
	void **slot;
	void *original;
};

static struct {
	pthread_mutex_t lock;
	struct saved_slot *tab;
	size_t cap, used;
	int patched; /* between mt_got_patch_all() and mt_got_restore_all() */
} saved = { PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0 };

static size_t slot_hash(void **slot, size_t cap)
{
	uintptr_t v = (uintptr_t)slot >> 3;
	v *= 0x9e3779b97f4a7c15ull;
	return (size_t)(v >> 20) & (cap - 1);
}

static struct saved_slot *saved_find(void **slot, int insert)
{
	if (insert && (saved.used + 1) * 2 > saved.cap) {
		size_t ncap = saved.cap ? saved.cap * 2 : 1024;
		struct saved_slot *nt = mmap(NULL, ncap * sizeof(*nt), PROT_READ | PROT_WRITE,
					     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (nt == MAP_FAILED)
			return NULL;
		for (size_t i = 0; i < saved.cap; i++) {
			if (!saved.tab[i].slot)
				continue;
			size_t j = slot_hash(saved.tab[i].slot, ncap);
			while (nt[j].slot)
				j = (j + 1) & (ncap - 1);
			nt[j] = saved.tab[i];
		}
		if (saved.tab)
			munmap(saved.tab, saved.cap * sizeof(*saved.tab));
		saved.tab = nt;
		saved.cap = ncap;
	}
	if (!saved.cap)
		return NULL;
	size_t j = slot_hash(slot, saved.cap);
	while (saved.tab[j].slot) {
		if (saved.tab[j].slot == slot)
			return &saved.tab[j];
		j = (j + 1) & (saved.cap - 1);
	}
	if (!insert)
		return NULL;
	saved.tab[j].slot = slot;
	saved.used++;
	return &saved.tab[j];
}

/* ------------------------------------------------------------------------
 * Relocations of one loaded object.
 * ---------------------------------------------------------------------- */
struct dynobj {
	struct mt_dynsym syms;
	const ElfW(Rela) *jmprel, *rela;
	size_t jmprelsz, relasz;
	uintptr_t relro_start, relro_end; /* page-aligned, 0 if none */
};

static int dynobj_load(struct dl_phdr_info *info, struct dynobj *o)
{
	long pagesz = sysconf(_SC_PAGESIZE);
	uintptr_t base = info->dlpi_addr;

	memset(o, 0, sizeof(*o));
	if (mt_dynsym_open(&o->syms, base, info->dlpi_phdr, info->dlpi_phnum) < 0)
		return -1;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_GNU_RELRO) {
			/* the same rounding as the loader's own protect call */
			uintptr_t s = base + ph->p_vaddr;
			uintptr_t e = s + ph->p_memsz;
			o->relro_start = s & ~(uintptr_t)(pagesz - 1);
			o->relro_end = e & ~(uintptr_t)(pagesz - 1);
		}
	}
	for (const ElfW(Dyn) *dyn = o->syms.dyn; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_JMPREL:
			o->jmprel = (const ElfW(Rela) *)mt_dynsym_addr(base, dyn->d_un.d_ptr);
			break;
		case DT_PLTRELSZ:
			o->jmprelsz = dyn->d_un.d_val;
			break;
		case DT_RELA:
			o->rela = (const ElfW(Rela) *)mt_dynsym_addr(base, dyn->d_un.d_ptr);
			break;
		case DT_RELASZ:
			o->relasz = dyn->d_un.d_val;
			break;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * Symbol definitions.
 * ---------------------------------------------------------------------- */
void *mt_got_find_definition(const char *name)
{
	char path[4096];
	void *h, *addr;

	if (!mt_dynsym_find(name, path, sizeof(path)))
		return NULL;
	/* Outside the iteration: dlopen must not run under the loader's
	 * write lock that dl_iterate_phdr holds. */
	h = dlopen(path[0] ? path : NULL, RTLD_NOLOAD | RTLD_LAZY);
	if (!h)
		return NULL;
	addr = dlsym(h, name);
	dlclose(h);
	return addr;
}

int mt_got_resolve(const struct mt_got_hook *hooks, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		*hooks[i].real = mt_got_find_definition(hooks[i].name);
		if (!*hooks[i].real && (!strcmp(hooks[i].name, "malloc") ||
					!strcmp(hooks[i].name, "free") ||
					!strcmp(hooks[i].name, "calloc") ||
					!strcmp(hooks[i].name, "realloc")))
			return -ENOENT;
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * Patching.
 * ---------------------------------------------------------------------- */
struct patch_ctx {
	const struct mt_got_hook *hooks;
	size_t n;
	int restore;
	int count;
	int err;
	void *open_page; /* a RELRO page made writable, closed per object */
	int open_prot;   /* its protection before */
};

static int match_hook(const struct patch_ctx *c, const char *name)
{
	for (size_t i = 0; i < c->n; i++)
		if (*c->hooks[i].real && name[0] == c->hooks[i].name[0] &&
		    strcmp(name, c->hooks[i].name) == 0)
			return (int)i;
	return -1;
}

static int is_our_hook(const struct patch_ctx *c, void *v)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->hooks[i].hook == v)
			return 1;
	return 0;
}

/* The protection of @page now, from /proc/self/maps (read with a buffer
 * on the stack: no allocation here), or -1 if it cannot be told. */
static int page_prot(uintptr_t page)
{
	char buf[4096];
	size_t have = 0;
	int fd = mt_fd_high(open("/proc/self/maps", O_RDONLY | O_CLOEXEC)), prot = -1;
	if (fd < 0)
		return -1;
	for (;;) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		have += (size_t)r;
		buf[have] = '\0';
		char *line = buf, *nl;
		while ((nl = strchr(line, '\n')) != NULL) {
			/* "start-end rwxp ..." */
			char *end;
			uintptr_t lo = strtoul(line, &end, 16), hi = 0;
			if (*end == '-')
				hi = strtoul(end + 1, &end, 16);
			if (lo <= page && page < hi && *end == ' ') {
				prot = (end[1] == 'r' ? PROT_READ : 0) |
				       (end[2] == 'w' ? PROT_WRITE : 0) | (end[3] == 'x' ? PROT_EXEC : 0);
				close(fd);
				return prot;
			}
			line = nl + 1;
		}
		have -= (size_t)(line - buf);
		memmove(buf, line, have);
		if (have == sizeof(buf) - 1)
			have = 0; /* no line is this long */
	}
	close(fd);
	return prot;
}

/* RELRO pages were made read-only by the loader: open one for writing
 * and keep it open while the following slots are on it (a GOT is a few
 * pages), so that patching costs two mprotect calls per page, not per
 * slot; close_page() puts the protection back as it was. That may still
 * be read-write: an object another thread is loading is listed before
 * the loader has relocated it and made its RELRO pages read-only, and the
 * loader still writes there (making the page read-only under it made the
 * loader fault). */
static int close_page(struct patch_ctx *c)
{
	long pagesz = sysconf(_SC_PAGESIZE);
	void *page = c->open_page;
	c->open_page = NULL;
	if (page && c->open_prot != (PROT_READ | PROT_WRITE) &&
	    mprotect(page, (size_t)pagesz, c->open_prot) != 0)
		return -errno;
	return 0;
}

static int write_slot(struct patch_ctx *c, const struct dynobj *o, void **slot, void *value)
{
	uintptr_t a = (uintptr_t)slot;
	int relro = a >= o->relro_start && a < o->relro_end;
	long pagesz = sysconf(_SC_PAGESIZE);
	void *page = (void *)(a & ~(uintptr_t)(pagesz - 1));

	if (relro && page != c->open_page) {
		int e = close_page(c);
		if (e < 0)
			return e;
		int prot = page_prot((uintptr_t)page);
		c->open_prot = prot < 0 ? PROT_READ : prot;
		if (c->open_prot != (PROT_READ | PROT_WRITE) &&
		    mprotect(page, (size_t)pagesz, PROT_READ | PROT_WRITE) != 0)
			return -errno;
		c->open_page = page;
	}
	if (mt_store_guarded(slot, value) == 0)
		return 0;
	/* The loader finished the object between our look and the store, and
	 * made the page read-only for good: open it like any other. */
	if (!relro || mprotect(page, (size_t)pagesz, PROT_READ | PROT_WRITE) != 0)
		return -EFAULT;
	c->open_prot = PROT_READ;
	__atomic_store_n(slot, value, __ATOMIC_RELEASE);
	return 0;
}

static void patch_table(struct patch_ctx *c, const struct dynobj *o, const ElfW(Rela) *r,
			size_t bytes)
{
	for (size_t k = 0; k < bytes / sizeof(*r); k++) {
		unsigned type = ELF64_R_TYPE(r[k].r_info);
		unsigned symi = ELF64_R_SYM(r[k].r_info);
		if (symi == 0)
			continue;
		if (type != MT_R_JUMP_SLOT && type != MT_R_GLOB_DAT &&
		    !(type == MT_R_ABS64 && r[k].r_addend == 0))
			continue;
		int h = match_hook(c, mt_dynsym_name(&o->syms, symi));
		if (h < 0)
			continue;
		void **slot = (void **)(o->syms.base + r[k].r_offset);
		void *cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
		if (c->restore) {
			struct saved_slot *s;
			if (cur != c->hooks[h].hook || !(s = saved_find(slot, 0)))
				continue;
			int e = write_slot(c, o, slot, s->original);
			if (e < 0)
				c->err = e;
			else
				c->count++;
			continue;
		}
		if (is_our_hook(c, cur))
			continue;
		/* A slot bound to the object's own definition (its own allocator,
		 * loaded with RTLD_DEEPBIND, say) keeps it: the hooks call the
		 * process's first definition, which does not know its blocks. */
		if (cur != *c->hooks[h].real) {
			const ElfW(Sym) *own = mt_dynsym_lookup(&o->syms, c->hooks[h].name);
			if (own && mt_dynsym_defined(own) &&
			    (uintptr_t)cur == o->syms.base + own->st_value)
				continue;
		}
		struct saved_slot *s = saved_find(slot, 1);
		if (!s) {
			c->err = -ENOMEM;
			continue;
		}
		s->original = cur;
		int e = write_slot(c, o, slot, c->hooks[h].hook);
		if (e < 0)
			c->err = e;
		else
			c->count++;
	}
}

static int patch_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct patch_ctx *c = arg;
	struct dynobj o;
	(void)size;
	if (mt_dynsym_skip(info) || dynobj_load(info, &o) < 0)
		return 0;
	if (o.jmprel)
		patch_table(c, &o, o.jmprel, o.jmprelsz);
	if (o.rela)
		patch_table(c, &o, o.rela, o.relasz);
	int e = close_page(c);
	if (e < 0)
		c->err = e;
	return 0;
}

/* @mode: 0 patch, 1 restore, 2 patch only if patched (a library loaded
 * meanwhile: never after a restore that a dlopen raced with). */
static int walk(const struct mt_got_hook *hooks, size_t n, int mode)
{
	struct patch_ctx c = { hooks, n, mode == 1, 0, 0, NULL, 0 };
	pthread_mutex_lock(&saved.lock);
	if (mode != 2 || saved.patched) {
		mt_phdr_walk(patch_cb, &c);
		saved.patched = mode != 1;
	}
	pthread_mutex_unlock(&saved.lock);
	return c.err && !c.count ? c.err : c.count;
}

int mt_got_patch_all(const struct mt_got_hook *hooks, size_t n)
{
	return walk(hooks, n, 0);
}

int mt_got_patch_loaded(const struct mt_got_hook *hooks, size_t n)
{
	return walk(hooks, n, 2);
}

int mt_got_restore_all(const struct mt_got_hook *hooks, size_t n)
{
	return walk(hooks, n, 1);
}

void mt_got_after_fork(void)
{
	pthread_mutex_init(&saved.lock, NULL);
}
