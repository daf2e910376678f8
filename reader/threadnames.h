/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_THREADNAMES_H
#define MT_READER_THREADNAMES_H
/*
 * The program's names of its threads (NAME records: Python's
 * threading.Thread.name), by kernel thread id, the latest for each: the
 * snapshot names a thread by it rather than by its THREAD record's OS name,
 * whichever of the two records comes first. With each tid, the snapshot's
 * index of the last thread seen with it, so that a name given later finds
 * it. A hash table (a service may start hundreds of thousands of threads
 * in a capture): every call is O(1). Zero-initialised is empty.
 *
 * The kernel reuses tids: a name given while an earlier thread had the
 * tid is that thread's, not a later one's (mt_tnames_for()); one given
 * before any thread was seen with it (attach names the live threads
 * first) is the first one's.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t, uint64_t */

struct mt_tname {
	uint64_t tid;
	char *name;      /* NULL: none given */
	uint32_t thread; /* index + 1 of the last thread seen with this tid; 0: none */
	uint32_t named;  /* thread when the name was given: whose name it is */
};

struct mt_tnames {
	struct mt_tname *v;
	size_t n;
	uint32_t cap;     /* util/grow.h */
	uint32_t *slots; /* util/slots.h: index + 1 into v, 0 empty */
	size_t nslots;
};

/* mt_tnames_set() - @name (@len bytes, cut at a NUL) is now thread @tid's.
 * Returns 0 or -ENOMEM. */
int mt_tnames_set(struct mt_tnames *m, uint64_t tid, const uint8_t *name, size_t len);

/* mt_tnames_get() - thread @tid's latest name, borrowed; NULL if none. */
const char *mt_tnames_get(const struct mt_tnames *m, uint64_t tid);

/* mt_tnames_seen() - the thread of index @thread has tid @tid (the last
 * one so far). Returns 0 or -ENOMEM. */
int mt_tnames_seen(struct mt_tnames *m, uint64_t tid, uint32_t thread);

/* mt_tnames_for() - the name thread @thread (an index), just seen with
 * @tid, goes by: the latest given for @tid, unless it was given while
 * another thread had the tid; NULL if none. Borrowed. */
const char *mt_tnames_for(const struct mt_tnames *m, uint64_t tid, uint32_t thread);

/* mt_tnames_thread() - index + 1 of the last thread seen with @tid; 0 if
 * none. */
uint32_t mt_tnames_thread(const struct mt_tnames *m, uint64_t tid);

void mt_tnames_release(struct mt_tnames *m);

#endif /* MT_READER_THREADNAMES_H */
