/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_THREADNAMES_H
#define MT_READER_THREADNAMES_H
/*
 * The program's names of its threads (NAME records: Python's
 * threading.Thread.name), by kernel thread id, the latest for each: the
 * snapshot names a thread by it rather than by its THREAD record's OS name,
 * whichever of the two records comes first. A few names a thread start,
 * so a list, searched from its end. Zero-initialised is empty.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

struct mt_tname {
	uint64_t tid;
	char *name;
};

struct mt_tnames {
	struct mt_tname *v;
	size_t n, cap;
};

/* mt_tnames_set() - @name (@len bytes, cut at a NUL) is now thread @tid's.
 * Returns 0 or -ENOMEM. */
int mt_tnames_set(struct mt_tnames *m, uint64_t tid, const uint8_t *name, size_t len);

/* mt_tnames_get() - thread @tid's latest name, borrowed; NULL if none. */
const char *mt_tnames_get(const struct mt_tnames *m, uint64_t tid);

void mt_tnames_release(struct mt_tnames *m);

#endif /* MT_READER_THREADNAMES_H */
