/* SPDX-License-Identifier: MIT */
/*
 * Thread names by kernel thread id (threadnames.h).
 */
#include "reader/threadnames.h"

#include "util/grow.h"
#include "util/slots.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* malloc, free */
#include <string.h> /* memcpy, memchr */

static uint64_t tid_hash(uint64_t tid)
{
	uint64_t h = tid * 0x9E3779B97F4A7C15ull;
	return h ^ (h >> 29);
}

static uint64_t entry_hash(const void *ctx, size_t i)
{
	const struct mt_tnames *m = ctx;
	return tid_hash(m->v[i].tid);
}

static struct mt_tname *find(const struct mt_tnames *m, uint64_t tid)
{
	if (!m->nslots)
		return NULL;
	for (size_t j = tid_hash(tid) & (m->nslots - 1); m->slots[j]; j = (j + 1) & (m->nslots - 1))
		if (m->v[m->slots[j] - 1].tid == tid)
			return &m->v[m->slots[j] - 1];
	return NULL;
}

/* @tid's entry, made if it has none; NULL if out of memory. */
static struct mt_tname *entry(struct mt_tnames *m, uint64_t tid)
{
	struct mt_tname *e = find(m, tid);
	if (e)
		return e;
	if (m->n >= UINT32_MAX - 1 ||
	    (m->n >= m->cap && mt_grow((void **)&m->v, &m->cap, (uint32_t)m->n, sizeof(*m->v)) < 0))
		return NULL;
	if ((m->n + 1) * 2 > m->nslots &&
	    mt_slots_grow(&m->slots, &m->nslots, 64, 0, m->n, entry_hash, m) < 0)
		return NULL;
	size_t j = tid_hash(tid) & (m->nslots - 1);
	while (m->slots[j])
		j = (j + 1) & (m->nslots - 1);
	m->slots[j] = (uint32_t)m->n + 1;
	e = &m->v[m->n++];
	*e = (struct mt_tname){ tid, NULL, 0, 0 };
	return e;
}

int mt_tnames_set(struct mt_tnames *m, uint64_t tid, const uint8_t *name, size_t len)
{
	const uint8_t *nul = memchr(name, 0, len);
	if (nul)
		len = (size_t)(nul - name);
	char *copy = malloc(len + 1);
	struct mt_tname *e = copy ? entry(m, tid) : NULL;
	if (!e) {
		free(copy);
		return -ENOMEM;
	}
	memcpy(copy, name, len);
	copy[len] = '\0';
	free(e->name);
	e->name = copy;
	e->named = e->thread;
	return 0;
}

const char *mt_tnames_for(const struct mt_tnames *m, uint64_t tid, uint32_t thread)
{
	const struct mt_tname *e = find(m, tid);
	if (!e || !e->name || (e->named && e->named != thread + 1))
		return NULL;
	return e->name;
}

const char *mt_tnames_get(const struct mt_tnames *m, uint64_t tid)
{
	const struct mt_tname *e = find(m, tid);
	return e ? e->name : NULL;
}

int mt_tnames_seen(struct mt_tnames *m, uint64_t tid, uint32_t thread)
{
	struct mt_tname *e = entry(m, tid);
	if (!e)
		return -ENOMEM;
	e->thread = thread + 1;
	if (e->name && !e->named) /* given before any thread had the tid: this one's */
		e->named = e->thread;
	return 0;
}

uint32_t mt_tnames_thread(const struct mt_tnames *m, uint64_t tid)
{
	const struct mt_tname *e = find(m, tid);
	return e ? e->thread : 0;
}

void mt_tnames_release(struct mt_tnames *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->v[i].name);
	mt_grow_free(m->v);
	free(m->slots);
	*m = (struct mt_tnames){ 0 };
}
