/* SPDX-License-Identifier: MIT */
/*
 * The target's memory map and memory access from outside. Reads /proc and
 * uses process_vm_readv/writev (ptrace peek/poke where pages are not
 * writable); never stops the target.
 */
#include "inject/internal.h"

#include <errno.h>    /* errno */
#include <inttypes.h> /* SCNx64 */
#include <stdio.h>    /* fopen, getline */
#include <stdlib.h>   /* realloc */
#include <string.h>   /* strlen */
#include <sys/ptrace.h> /* PTRACE_PEEKDATA */
#include <sys/uio.h>  /* process_vm_readv */

static void free_paths(struct mt_maps *m)
{
	for (size_t i = 0; i < m->n; i++)
		free((char *)m->v[i].path);
}

int mt__maps_read(pid_t pid, struct mt_maps *m)
{
	char name[64], *line = NULL;
	size_t linecap = 0, cap = 0;
	FILE *f;
	int err = 0;

	m->pid = pid;
	m->v = NULL;
	m->n = 0;
	snprintf(name, sizeof(name), "/proc/%d/maps", (int)pid);
	f = fopen(name, "re");
	if (!f)
		return -errno;
	while (getline(&line, &linecap, f) > 0) {
		struct mt_map map = { 0 };
		int pos = 0;
		line[strcspn(line, "\n")] = '\0';
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 " %n",
			   &map.start, &map.end, map.perms, &map.offset, &map.dev_major,
			   &map.dev_minor, &map.ino, &pos) < 7)
			continue;
		map.path = strdup(pos ? line + pos : "");
		if (!map.path) {
			err = -ENOMEM;
			break;
		}
		if (m->n == cap) {
			size_t ncap = cap ? cap * 2 : 256;
			struct mt_map *v = realloc(m->v, ncap * sizeof(*v));
			if (!v) {
				free((char *)map.path);
				err = -ENOMEM;
				break;
			}
			m->v = v;
			cap = ncap;
		}
		m->v[m->n++] = map;
	}
	/* A maps file we may not read opens fine and then fails to read. */
	if (!err && ferror(f))
		err = -errno;
	if (!err && m->n == 0)
		err = -EACCES;
	free(line);
	fclose(f);
	if (err) {
		mt__maps_release(m);
		return err;
	}
	return 0;
}

void mt__maps_release(struct mt_maps *m)
{
	if (m->v)
		free_paths(m);
	free(m->v);
	m->v = NULL;
	m->n = 0;
}

const struct mt_map *mt__maps_at(const struct mt_maps *m, uint64_t addr)
{
	for (size_t i = 0; i < m->n; i++)
		if (addr >= m->v[i].start && addr < m->v[i].end)
			return &m->v[i];
	return NULL;
}

const struct mt_map *mt__maps_base(const struct mt_maps *m, const struct mt_map *map)
{
	const struct mt_map *best = NULL;
	for (size_t i = 0; i < m->n; i++) {
		const struct mt_map *x = &m->v[i];
		if (x->ino != map->ino || x->dev_major != map->dev_major ||
		    x->dev_minor != map->dev_minor || x->offset != 0 || strcmp(x->path, map->path))
			continue;
		if (!best || x->start < best->start)
			best = x;
	}
	return best;
}

const char *mt__basename(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

const struct mt_map *mt__maps_find(const struct mt_maps *m, const char *const *prefixes)
{
	for (size_t i = 0; i < m->n; i++) {
		const char *base = mt__basename(m->v[i].path);
		if (m->v[i].path[0] != '/')
			continue;
		for (const char *const *p = prefixes; *p; p++) {
			size_t len = strlen(*p);
			if (strncmp(base, *p, len) == 0 &&
			    (strncmp(base + len, ".so", 3) == 0 || base[len] == '-'))
				return &m->v[i];
		}
	}
	return NULL;
}

int mt__mem_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };
	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
	if (n == (ssize_t)len)
		return 0;
	return n < 0 ? -errno : -EIO;
}

int mt__mem_write(pid_t pid, pid_t tid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec local = { (void *)buf, len }, remote = { (void *)(uintptr_t)addr, len };
	ssize_t n = process_vm_writev(pid, &local, 1, &remote, 1, 0);
	if (n == (ssize_t)len)
		return 0;
	if (!tid)
		return n < 0 ? -errno : -EIO;
	/* Read-only pages (code): ptrace writes through them, word by word,
	 * keeping the bytes around the range. */
	const uint8_t *src = buf;
	uint64_t a = addr & ~(uint64_t)7;
	while (a < addr + len) {
		errno = 0;
		long word = ptrace(PTRACE_PEEKDATA, tid, (void *)(uintptr_t)a, NULL);
		if (errno)
			return -errno;
		uint8_t *w = (uint8_t *)&word;
		for (int i = 0; i < 8; i++)
			if (a + i >= addr && a + i < addr + len)
				w[i] = src[a + i - addr];
		if (ptrace(PTRACE_POKEDATA, tid, (void *)(uintptr_t)a, (void *)word) != 0)
			return -errno;
		a += 8;
	}
	return 0;
}
