/* SPDX-License-Identifier: MIT */
/*
 * Native stacks unwound as deep as they changed (native-memo.h).
 */
#include "payload/native-memo.h"
#include "payload/python-walk.h"

#include <stdatomic.h> /* atomic_fetch_add */
#include <stdio.h>     /* snprintf */
#include <stdlib.h>    /* getenv */
#include <unistd.h>    /* write */

/* Return addresses unwound past the loop found, each checked to be the
 * last event's at its place: a stack that is not the one proved stops
 * there; a loop miscounted in a stack that repeats itself (a recursion
 * through C) may not, which is why the counts must be right. */
#define MEMO_PAST 4
/* A stack whose loop is this near its outermost end is unwound whole. */
#define MEMO_GAIN 8

static struct {
	uint32_t gen;
	int full;  /* MEMTRACE_TEST_NATIVE_FULL=1: every stack unwound whole */
	int check; /* MEMTRACE_TEST_NATIVE_CHECK=1: and compared (check()) */
	_Atomic uint64_t used, wrong;
} g;

static int env_on(const char *name)
{
	const char *v = getenv(name);
	return v && v[0] == '1' && v[1] == '\0';
}

void mt_memo_start(void)
{
	g.full = env_on("MEMTRACE_TEST_NATIVE_FULL");
	g.check = env_on("MEMTRACE_TEST_NATIVE_CHECK");
	uint32_t gen = __atomic_load_n(&g.gen, __ATOMIC_RELAXED) + 1;
	__atomic_store_n(&g.gen, gen ? gen : 1, __ATOMIC_RELAXED);
}

/* The evaluation loops of chain frames 0..i into pyev[], from @keep up
 * (those below hold from the last event): how many the chain has, or 0
 * when it was not read whole. */
static uint32_t chain_evals(struct mt_native_memo *m, const struct mt_pychain *c, size_t keep)
{
	if (keep == MT_MEMO_NO_WALK || !c->whole || c->n == 0) {
		m->pyn = 0;
		return 0;
	}
	if (keep > m->pyn)
		keep = m->pyn;
	const struct mt_pylayout *lo = &mt_pylayouts[mt_python_layout_row()];
	/* 3.11: a frame matched by place and position only may be another
	 * activation, entered otherwise (inline, or through C): counted again
	 * from the newest frame proved the same */
	if (lo->minor == 11 && keep > c->held)
		keep = c->held;
	uint32_t k = keep ? m->pyev[keep - 1] : 0;
	for (size_t i = keep; i < c->n; i++) {
		k += (uint32_t)mt_frame_starts_eval(lo, c, i);
		m->pyev[i] = k;
	}
	m->pyn = c->n;
	return k;
}

/* For tests: the stack spliced from the last event's @nips[0..@r) and
 * @ips[0..@k) against the whole stack unwound (into the room past @k),
 * counted; what differs said on stderr. */
static __attribute__((noinline)) void check(const uintptr_t *nips, size_t r, uintptr_t *ips,
					    size_t k)
{
	uintptr_t *all = ips + k;
	size_t n = mt_native_unwind(all, MT_NATIVE_MAX - k), i = 0;
	/* the unwinder's own frames differ by one call: set apart by the
	 * innermost address, the first one we kept */
	while (i < n && all[i] != ips[0])
		i++;
	int same = n - i == r + k;
	for (size_t j = 0; same && j < k; j++)
		same = all[i + j] == ips[j];
	for (size_t j = 0; same && j < r; j++)
		same = all[n - 1 - j] == nips[j];
	atomic_fetch_add(&g.used, 1);
	if (!same) {
		atomic_fetch_add(&g.wrong, 1);
		static const char msg[] = "memtrace: a native stack taken from the last "
					  "event's is not the one unwound\n";
		(void)!write(2, msg, sizeof(msg) - 1);
	}
}

void mt_memo_report(void)
{
	if (!g.check)
		return;
	char line[128];
	int k = snprintf(line, sizeof(line),
			 "memtrace: native stacks taken from the last event's: %llu, wrong: %llu\n",
			 (unsigned long long)atomic_load(&g.used),
			 (unsigned long long)atomic_load(&g.wrong));
	if (k > 0)
		(void)!write(2, line, (size_t)k);
}

size_t mt_memo_unwind(struct mt_native_memo *m, const struct mt_pychain *c, size_t keep,
		      const uintptr_t *nips, size_t nn, uintptr_t *ips, size_t *same)
{
	uint32_t gen = __atomic_load_n(&g.gen, __ATOMIC_RELAXED);
	if (m->gen != gen) {
		mt_memo_forget(m);
		m->gen = gen;
	}
	uint32_t evals = chain_evals(m, c, keep);
	m->pyevals = evals;
	*same = 0;
	size_t held = c->held;
	if (!m->ok || !evals || g.full || held == 0 || held > c->n || nn == 0)
		goto whole;
	/* the loop running the held frame: the k-th from the outermost in
	 * both stacks, at r in the last one */
	uint32_t k = m->pyev[held - 1];
	if (k == 0 || nn > m->nn || k > m->nev[nn - 1])
		goto whole;
	size_t r = m->evat[k - 1], need = evals - k + 1;
	if (r <= MEMO_GAIN)
		goto whole; /* little to gain */
	/* down to that loop and MEMO_PAST past it, or the whole stack */
	size_t got = mt_native_unwind_to(ips, MT_NATIVE_MAX, need, MEMO_PAST, &m->local), q = 0;
	for (uint32_t e = 0; q < got; q++)
		if (mt_native_is_eval(ips[q]) && ++e == need)
			break;
	if (q == got || got - q - 1 < MEMO_PAST)
		return got; /* the stack ended before: all of it */
	if (r + q + 1 > MT_NATIVE_MAX)
		goto whole;
	for (size_t j = q + 1; j < got; j++)
		if (j - q > r || ips[j] != nips[r - (j - q)])
			goto whole;
	*same = r;
	if (__builtin_expect(g.check, 0))
		check(nips, r, ips, q + 1);
	return r + q + 1;
whole:
	return mt_native_unwind_to(ips, MT_NATIVE_MAX, 0, 0, &m->local);
}

void mt_memo_done(struct mt_native_memo *m, const uintptr_t *nips, size_t from, size_t n)
{
	if (from > m->nn)
		from = m->nn;
	uint32_t e = from ? m->nev[from - 1] : 0;
	for (size_t k = from; k < n; k++) {
		if (mt_native_is_eval(nips[k]))
			m->evat[e++] = (uint32_t)k;
		m->nev[k] = e;
	}
	m->nn = (uint32_t)n;
	m->ok = m->pyevals && e == m->pyevals && n < MT_NATIVE_MAX;
}
