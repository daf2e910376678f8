/* SPDX-License-Identifier: MIT */
/*
 * Thread names by kernel thread id (threadnames.h).
 */
#include "reader/threadnames.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* malloc, realloc, free */
#include <string.h> /* memcpy, memchr */

static struct mt_tname *find(const struct mt_tnames *m, uint64_t tid)
{
	for (size_t i = m->n; i-- > 0;)
		if (m->v[i].tid == tid)
			return &m->v[i];
	return NULL;
}

int mt_tnames_set(struct mt_tnames *m, uint64_t tid, const uint8_t *name, size_t len)
{
	const uint8_t *nul = memchr(name, 0, len);
	if (nul)
		len = (size_t)(nul - name);
	char *copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, name, len);
	copy[len] = '\0';
	struct mt_tname *e = find(m, tid);
	if (!e) {
		if (m->n == m->cap) {
			size_t cap = m->cap ? m->cap * 2 : 16;
			struct mt_tname *v = realloc(m->v, cap * sizeof(*v));
			if (!v) {
				free(copy);
				return -ENOMEM;
			}
			m->v = v;
			m->cap = cap;
		}
		e = &m->v[m->n++];
		*e = (struct mt_tname){ tid, NULL };
	}
	free(e->name);
	e->name = copy;
	return 0;
}

const char *mt_tnames_get(const struct mt_tnames *m, uint64_t tid)
{
	const struct mt_tname *e = find(m, tid);
	return e ? e->name : NULL;
}

void mt_tnames_release(struct mt_tnames *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->v[i].name);
	free(m->v);
	*m = (struct mt_tnames){ 0 };
}
