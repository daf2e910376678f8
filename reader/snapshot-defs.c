/* SPDX-License-Identifier: MIT */
/*
 * The snapshot's definition records: threads and their names, code
 * objects, stacks (Python, native, hybrid), modules, the tracker's
 * diagnostics and the trailer (snapshot-state.h). The allocations and
 * frees are snapshot.c's.
 */
#include "reader/snapshot-state.h"
#include "format/error.h"

#include <errno.h>  /* ENOMEM */
#include <stdio.h>  /* sscanf */
#include <stdlib.h> /* malloc */
#include <string.h> /* memcpy */

static char *copy_str(const struct mt_bytes *b)
{
	char *c = malloc(b->len + 1);
	if (!c)
		return NULL;
	for (uint32_t i = 0; i < b->len; i++)
		c[i] = b->p[i] ? (char)b->p[i] : ' ';
	c[b->len] = '\0';
	return c;
}

int mt__snap_on_thread(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	char *name;

	uint32_t i = mt__snap_believed(st, r->tidx, DEF_THREAD) ? r->tidx : 0;
	/* the program's name for it if it gave one, else the OS name */
	const char *given = mt_tnames_for(&st->names, r->thread.tid, i);
	if (mt__snap_thread_room(st, i) < 0 || !(name = given ? strdup(given) : copy_str(&r->thread.name)))
		return -ENOMEM;
	if (mt_tnames_seen(&st->names, r->thread.tid, i) < 0) {
		free(name);
		return -ENOMEM;
	}
	st->thr_tid[i] = r->thread.tid;
	if (!st->thr_name[i])
		st->n_def[DEF_THREAD]++;
	free(st->thr_name[i]);
	st->thr_name[i] = name;
	return 0;
}

/* The program named a thread: the one of that tid registered last, or if
 * none was yet, the first one registered later (threadnames.h). */
int mt__snap_on_name(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	uint32_t n = r->name.name.len < MT_NAME_MAX ? r->name.name.len : MT_NAME_MAX;

	if (mt_tnames_set(&st->names, r->name.tid, r->name.name.p, n) < 0)
		return -ENOMEM;
	uint32_t t = mt_tnames_thread(&st->names, r->name.tid);
	if (t && t - 1 < st->thr_cap && st->thr_name[t - 1] && st->thr_tid[t - 1] == r->name.tid) {
		char *name = strdup(mt_tnames_get(&st->names, r->name.tid));
		if (!name)
			return -ENOMEM;
		free(st->thr_name[t - 1]);
		st->thr_name[t - 1] = name;
	}
	return 0;
}

int mt__snap_on_code(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;

	if (!mt__snap_believed(st, r->code.id, DEF_CODE))
		return 0;
	int fresh = mt_stacks_define_code(&st->stk, &r->code);
	if (fresh < 0)
		return fresh;
	st->n_def[DEF_CODE] += (uint32_t)fresh;
	return 0;
}

int mt__snap_on_stack(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;
	const struct mt_rec_stack *k = &r->stack;

	if (!mt__snap_believed(st, k->id, DEF_STACK))
		return 0;
	int fresh = mt_stacks_define_stack(&st->stk, k);
	if (fresh == -MT_ECORRUPT)
		snprintf(st->why, sizeof(st->why), "stack %u is defined twice, with other frames",
			 (unsigned)k->id);
	if (fresh < 0)
		return fresh;
	st->n_def[DEF_STACK] += (uint32_t)fresh;
	if (k->id > st->max_stack && mt__snap_stack_room(st, k->id) < 0)
		return -ENOMEM;
	return 0;
}

/* NATIVE and HYBRID ids are stack ids too (an allocation names a HYBRID
 * one): they count as STACK definitions. */
int mt__snap_on_native(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;

	if (!mt__snap_believed(st, r->native.id, DEF_STACK))
		return 0;
	int fresh = mt_native_node(&st->nat, &r->native);
	if (fresh < 0)
		return fresh;
	st->n_def[DEF_STACK] += (uint32_t)fresh;
	return 0;
}

int mt__snap_on_hybrid(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;

	if (!mt__snap_believed(st, r->hybrid.id, DEF_STACK))
		return 0;
	int fresh = mt_native_hybrid(&st->nat, &r->hybrid);
	if (fresh < 0)
		return fresh;
	st->n_def[DEF_STACK] += (uint32_t)fresh;
	if (r->hybrid.id > st->max_stack && mt__snap_stack_room(st, r->hybrid.id) < 0)
		return -ENOMEM;
	return 0;
}

int mt__snap_on_module(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	return mt_native_module(&s->st->nat, &r->module);
}

int mt__snap_on_diag(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;
	struct mt__snapshot_state *st = s->st;

	if (r->diag.code == MT_DIAG_TRACKER_ROOT) { /* where a Tracker's stacks start */
		char text[64];
		unsigned depth;
		unsigned long long hash;
		size_t n = r->diag.msg.len < sizeof(text) - 1 ? r->diag.msg.len : sizeof(text) - 1;
		memcpy(text, r->diag.msg.p, n);
		text[n] = '\0';
		if (sscanf(text, "%u %llx", &depth, &hash) == 2 && depth) {
			st->root_depth = depth;
			st->root_hash = hash;
		}
		return 0;
	}
	if (r->diag.code == MT_DIAG_PYTHON_ALLOCATOR) { /* metadata, not a message */
		size_t n = r->diag.msg.len < sizeof(s->python_allocator) - 1
				   ? r->diag.msg.len
				   : sizeof(s->python_allocator) - 1;
		memcpy(s->python_allocator, r->diag.msg.p, n);
		s->python_allocator[n] = '\0';
		st->mimalloc = strncmp(s->python_allocator, "mimalloc", 8) == 0;
		return 0;
	}
	if (s->n_diags == st->diags_cap) {
		size_t n = st->diags_cap ? st->diags_cap * 2 : 16;
		struct mt_diag *nv = realloc(s->diags, n * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		s->diags = nv;
		st->diags_cap = n;
	}
	char *m = copy_str(&r->diag.msg);
	if (!m)
		return -ENOMEM;
	s->diags[s->n_diags++] = (struct mt_diag){ r->diag.code, m };
	return 0;
}

int mt__snap_on_trailer(void *ctx, const struct mt_record *r)
{
	struct mt_snapshot *s = ctx;

	s->have_trailer = 1;
	s->end_time_us = r->trailer.time_us;
	s->trailer_events = r->trailer.n_events;
	s->n_dropped = r->trailer.n_dropped;
	return 0;
}
