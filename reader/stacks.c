/* SPDX-License-Identifier: MIT */
/* The snapshot's stack trie and code-object table (reader/stacks.h). */
#include "reader/stacks.h"
#include "format/linetable.h"
#include "util/grow.h"

#include <errno.h>  /* ENOMEM */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcpy */

static const char *intern(struct mt_stacks *k, const uint8_t *p, uint32_t len)
{
	uint64_t h = 1469598103934665603ull;

	if (k->strs_n * 2 >= k->strs_cap) {
		size_t n = k->strs_cap ? k->strs_cap * 2 : 256;
		char **nv = calloc(n, sizeof(*nv));
		if (!nv)
			return NULL;
		for (size_t i = 0; i < k->strs_cap; i++) {
			if (!k->strs[i])
				continue;
			uint64_t g = 1469598103934665603ull;
			for (const char *c = k->strs[i]; *c; c++)
				g = (g ^ (uint8_t)*c) * 1099511628211ull;
			size_t j = g & (n - 1);
			while (nv[j])
				j = (j + 1) & (n - 1);
			nv[j] = k->strs[i];
		}
		free(k->strs);
		k->strs = nv;
		k->strs_cap = n;
	}
	/* strings stop at the first NUL: they are printed as C strings */
	const uint8_t *nul = memchr(p, 0, len);
	if (nul)
		len = (uint32_t)(nul - p);
	for (uint32_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	size_t j = h & (k->strs_cap - 1);
	while (k->strs[j]) {
		if (strncmp(k->strs[j], (const char *)p, len) == 0 && k->strs[j][len] == '\0')
			return k->strs[j];
		j = (j + 1) & (k->strs_cap - 1);
	}
	char *c = malloc(len + 1);
	if (!c)
		return NULL;
	if (len)
		memcpy(c, p, len);
	c[len] = '\0';
	k->strs[j] = c;
	k->strs_n++;
	return c;
}

int mt_stacks_define_code(struct mt_stacks *k, const struct mt_rec_code *c)
{
	if (c->id >= k->codes_cap &&
	    mt_grow((void **)&k->codes, &k->codes_cap, c->id, sizeof(struct mt_code_def)) < 0)
		return -ENOMEM;
	struct mt_code_def *d = &k->codes[c->id];
	int fresh = !d->defined;
	const struct mt_bytes *fn = c->qualname.len ? &c->qualname : &c->name;
	d->file = intern(k, c->filename.p, c->filename.len);
	d->function = intern(k, fn->p, fn->len);
	if (!d->file || !d->function)
		return -ENOMEM;
	free(d->linetable);
	d->linetable = NULL;
	d->lt_len = 0;
	if (c->linetable.len) {
		d->linetable = malloc(c->linetable.len);
		if (!d->linetable)
			return -ENOMEM;
		memcpy(d->linetable, c->linetable.p, c->linetable.len);
		d->lt_len = c->linetable.len;
	}
	d->firstlineno = c->firstlineno > INT32_MAX ? 0 : (int)c->firstlineno;
	d->defined = 1;
	return fresh;
}

int mt_stacks_define_stack(struct mt_stacks *k, const struct mt_rec_stack *r)
{
	if (r->id >= k->nodes_cap &&
	    mt_grow((void **)&k->nodes, &k->nodes_cap, r->id, sizeof(struct mt_stack_node)) < 0)
		return -ENOMEM;
	int fresh = !k->nodes[r->id].defined;
	k->nodes[r->id] = (struct mt_stack_node){ r->parent, r->code, r->offset, 1 };
	return fresh;
}

static const char unknown[] = "<unknown>";

void mt_stacks_frame(const struct mt_stacks *k, uint32_t id, struct mt_frame *f)
{
	f->function = unknown;
	f->file = unknown;
	f->line = 0;
	if (id >= k->nodes_cap || !k->nodes[id].defined)
		return;
	const struct mt_stack_node *n = &k->nodes[id];
	if (n->code >= k->codes_cap || !k->codes[n->code].defined)
		return;
	const struct mt_code_def *c = &k->codes[n->code];
	f->function = c->function;
	f->file = c->file;
	int line = mt_linetable_line(mt_linetable_capture_hex(k->python_hex), c->linetable,
				     c->lt_len, c->firstlineno, n->offset);
	f->line = line > 0 ? line : 0;
}

size_t mt_stacks_walk(const struct mt_stacks *k, uint32_t id, struct mt_frame *out, size_t max)
{
	size_t depth = 0;

	/* a corrupt trie may loop: no stack is deeper than the trie */
	while (id && depth <= k->nodes_cap) {
		if (depth < max)
			mt_stacks_frame(k, id, &out[depth]);
		depth++;
		id = mt_stacks_parent(k, id);
	}
	return depth;
}

void mt_stacks_release(struct mt_stacks *k)
{
	free(k->nodes);
	for (uint32_t i = 0; i < k->codes_cap; i++)
		free(k->codes[i].linetable);
	free(k->codes);
	for (size_t i = 0; i < k->strs_cap; i++)
		free(k->strs[i]);
	free(k->strs);
	k->nodes = NULL;
	k->codes = NULL;
	k->strs = NULL;
	k->nodes_cap = k->codes_cap = 0;
	k->strs_cap = k->strs_n = 0;
}
