/* SPDX-License-Identifier: MIT */
/*
 * Symbol lookup in the target's own ELF files with libelf: the file is
 * opened as the target sees it (never assume the target's libc is ours),
 * and addresses are link addresses plus the module's load bias.
 */
#include "inject/inject.h"
#include "inject/internal.h"

#include <errno.h>    /* errno */
#include <fcntl.h>    /* open */
#include <gelf.h>     /* GElf_Sym */
#include <libelf.h>   /* elf_begin */
#include <stdio.h>    /* snprintf */
#include <string.h>   /* strcmp */
#include <sys/stat.h> /* fstat */
#include <unistd.h>   /* close */

static int elf_setup(struct mt_elf *e, int fd)
{
	GElf_Ehdr eh;
	size_t nph;

	e->fd = fd;
	e->elf = NULL;
	e->bias = 0;
	e->vaddr0 = 0;
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOSYS;
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh) ||
	    gelf_getclass(elf) != ELFCLASS64 || elf_getphdrnum(elf, &nph) != 0) {
		if (elf)
			elf_end(elf);
		return -ENOEXEC;
	}
	e->elf = elf;
	e->entry = eh.e_entry;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD) {
			if (ph.p_offset < 4096) {
				e->vaddr0 = (ph.p_vaddr - ph.p_offset) & ~(uint64_t)4095;
				break;
			}
		}
	}
	return 0;
}

int mt__elf_open_path(struct mt_elf *e, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = elf_setup(e, fd);
	if (rc < 0)
		close(fd);
	return rc;
}

/* @path as /proc/@pid/maps shows it, made relative to the target's root
 * when it starts with that root as the kernel names it to us (readlink of
 * /proc/PID/root: a chroot's directory, in whatever namespace it lives).
 * Returns @path itself otherwise. */
static const char *in_target_root(pid_t pid, const char *path, char *buf, size_t cap)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/%d/root", (int)pid);
	ssize_t n = readlink(link, buf, cap - 1);
	if (n <= 1 || buf[0] != '/')
		return path; /* "/" (our own root) or unknown */
	buf[n] = '\0';
	size_t len = (size_t)n;
	if (strncmp(path, buf, len) != 0 || path[len] != '/')
		return path;
	return path + len;
}

int mt__elf_open_map(struct mt_elf *e, const struct mt_maps *m, const struct mt_map *map)
{
	const struct mt_map *base = mt__maps_base(m, map);
	char cand[4][4200], root[4096];
	int fd = -1, err = -ENOENT;

	if (!base)
		return -ENOENT;
	/* map_files (needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), then
	 * the path under the target's root, with the chroot's own prefix
	 * taken off if the kernel put it there, then the path as it is */
	snprintf(cand[0], sizeof(cand[0]), "/proc/%d/map_files/%lx-%lx", (int)m->pid,
		 (unsigned long)base->start, (unsigned long)base->end);
	snprintf(cand[1], sizeof(cand[1]), "/proc/%d/root%s", (int)m->pid,
		 in_target_root(m->pid, base->path, root, sizeof(root)));
	snprintf(cand[2], sizeof(cand[2]), "/proc/%d/root%s", (int)m->pid, base->path);
	snprintf(cand[3], sizeof(cand[3]), "%s", base->path);
	for (int i = 0; i < 4 && fd < 0; i++) {
		struct stat sb;
		if (i > 0 && !strcmp(cand[i], cand[i - 1]))
			continue;
		fd = open(cand[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_ino != base->ino) {
			close(fd);
			fd = -1;
			err = -ESTALE;
		}
	}
	if (fd < 0)
		return err;
	int rc = elf_setup(e, fd);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	e->bias = base->start - e->vaddr0;
	return 0;
}

void mt__elf_close(struct mt_elf *e)
{
	if (e->elf)
		elf_end(e->elf);
	if (e->fd >= 0)
		close(e->fd);
	e->elf = NULL;
	e->fd = -1;
}

/* Calls @fn for each defined dynamic symbol called @name; @hidden tells
 * whether it is a non-default version. Stops when @fn returns non-zero. */
static int each_symbol(struct mt_elf *e, const char *name,
		       int (*fn)(void *ctx, uint64_t value, int hidden), void *ctx)
{
	Elf_Scn *scn = NULL, *dynsym = NULL, *versym = NULL;
	GElf_Shdr sh, dsh;

	while ((scn = elf_nextscn(e->elf, scn))) {
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_DYNSYM)
			dynsym = scn;
		else if (sh.sh_type == SHT_GNU_versym)
			versym = scn;
	}
	if (!dynsym || !gelf_getshdr(dynsym, &dsh) || !dsh.sh_entsize)
		return 0;
	Elf_Data *data = elf_getdata(dynsym, NULL);
	Elf_Data *vdata = versym ? elf_getdata(versym, NULL) : NULL;
	size_t count = dsh.sh_size / dsh.sh_entsize;
	for (size_t i = 0; data && i < count; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF || !sym.st_value)
			continue;
		const char *n = elf_strptr(e->elf, dsh.sh_link, sym.st_name);
		if (!n || strcmp(n, name) != 0)
			continue;
		GElf_Versym vs = 0;
		if (vdata)
			gelf_getversym(vdata, (int)i, &vs);
		int rc = fn(ctx, sym.st_value, (vs & 0x8000) != 0);
		if (rc)
			return rc;
	}
	return 0;
}

struct pick {
	uint64_t value;
	int found, hidden;
};

static int pick_default(void *ctx, uint64_t value, int hidden)
{
	struct pick *p = ctx;
	if (!p->found || (p->hidden && !hidden)) {
		p->value = value;
		p->hidden = hidden;
		p->found = 1;
	}
	return 0;
}

int mt__elf_symbol(struct mt_elf *e, const char *name, uint64_t *value)
{
	struct pick p = { 0 };
	each_symbol(e, name, pick_default, &p);
	if (!p.found)
		return -ENOENT;
	*value = p.value;
	return 0;
}

struct collect {
	uint64_t *out;
	size_t n, cap;
};

static int collect_all(void *ctx, uint64_t value, int hidden)
{
	struct collect *c = ctx;
	if (c->n < c->cap)
		c->out[c->n++] = value;
	return 0;
}

size_t mt__elf_symbols(struct mt_elf *e, const char *name, uint64_t *out, size_t cap)
{
	struct collect c = { out, 0, cap };
	each_symbol(e, name, collect_all, &c);
	return c.n;
}

/* The version literal CPython builds Py_GetVersion() from ("3.9.18",
 * "3.10.0rc1+") sits in .rodata as its own string. */
int mt__elf_rodata_version(struct mt_elf *e)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	size_t shstrndx;

	if (elf_getshdrstrndx(e->elf, &shstrndx) != 0)
		return -1;
	while ((scn = elf_nextscn(e->elf, scn))) {
		if (!gelf_getshdr(scn, &sh))
			continue;
		const char *n = elf_strptr(e->elf, shstrndx, sh.sh_name);
		if (!n || strcmp(n, ".rodata") != 0)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		if (!d || !d->d_buf)
			return -1;
		const char *p = d->d_buf, *end = p + d->d_size;
		for (const char *s = p; s < end; s++) {
			if (s[0] != '3' || s[1] != '.' || (s > p && s[-1] != '\0'))
				continue;
			const char *q = s + 2;
			int minor = 0, digits = 0;
			while (q < end && *q >= '0' && *q <= '9' && digits < 3)
				minor = minor * 10 + (*q++ - '0'), digits++;
			if (!digits || q >= end || *q != '.' || q + 1 >= end || q[1] < '0' || q[1] > '9')
				continue;
			q++;
			while (q < end && ((*q >= '0' && *q <= '9') || *q == 'a' || *q == 'b' ||
					   *q == 'r' || *q == 'c' || *q == '+'))
				q++;
			if (q < end && *q == '\0')
				return minor;
		}
	}
	return -1;
}

int mt_inject_payload_check(const char *path)
{
	struct mt_elf e;
	uint64_t v;
	int rc = mt__elf_open_path(&e, path);
	if (rc < 0)
		return rc;
	rc = mt__elf_symbol(&e, "memtrace_attach_entry", &v);
	mt__elf_close(&e);
	return rc < 0 ? -ENOENT : 0;
}
