/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_PLURAL_H
#define MT_UTIL_PLURAL_H
/*
 * English count nouns for messages and reports: "1 chunk", "2 chunks",
 * "0 chunks". mt_plural() picks the word; the caller prints the number:
 *
 *	printf("read %llu %s", n, mt_plural(n, "chunk", "chunks"));
 *
 * Both words are given in full, so that irregular plurals ("1 of them")
 * and grep for a message both work.
 */

/* mt_plural() - @one if @n is 1, else @many. */
static inline const char *mt_plural(unsigned long long n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

#endif /* MT_UTIL_PLURAL_H */
