/* SPDX-License-Identifier: MIT */
#ifndef MT_UTIL_JSON_H
#define MT_UTIL_JSON_H
/*
 * JSON writer over a strbuf. Every string is escaped; '<', '>' and '&'
 * are written as \u escapes so the output can sit inside an HTML
 * <script> element, and invalid UTF-8 becomes U+FFFD.
 *
 * USAGE
 *	struct mt_strbuf sb = MT_STRBUF_INIT;
 *	struct mt_json j;
 *	mt_json_init(&j, &sb, 1);
 *	mt_json_begin_object(&j, NULL);
 *	mt_json_str(&j, "file", name);
 *	mt_json_begin_array(&j, "sizes");
 *	mt_json_u64(&j, NULL, 42);
 *	mt_json_end(&j);
 *	mt_json_end(&j);
 * @key names the member inside an object and must be NULL inside an
 * array or at the top level. Errors are the strbuf's (sticky).
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint64_t */

#include "util/strbuf.h"

#define MT_JSON_MAX_DEPTH 64

struct mt_json {
	struct mt_strbuf *out;
	int pretty;
	int depth;
	unsigned char has_items[MT_JSON_MAX_DEPTH];
	unsigned char kind[MT_JSON_MAX_DEPTH]; /* '{' or '[' */
};

void mt_json_init(struct mt_json *j, struct mt_strbuf *out, int pretty);
void mt_json_begin_object(struct mt_json *j, const char *key);
void mt_json_begin_array(struct mt_json *j, const char *key);
/* mt_json_end() - close the innermost object or array. */
void mt_json_end(struct mt_json *j);

void mt_json_str(struct mt_json *j, const char *key, const char *val);
void mt_json_strn(struct mt_json *j, const char *key, const char *val, size_t len);
void mt_json_u64(struct mt_json *j, const char *key, uint64_t v);
void mt_json_i64(struct mt_json *j, const char *key, int64_t v);
void mt_json_double(struct mt_json *j, const char *key, double v);
void mt_json_bool(struct mt_json *j, const char *key, int v);
void mt_json_null(struct mt_json *j, const char *key);

/* mt_json_escape() - append @s as a quoted JSON string. */
void mt_json_escape(struct mt_strbuf *sb, const char *s, size_t len);
/* mt_utf8_len() - the length of the valid UTF-8 sequence of two bytes or
 * more at @s (of at most @n bytes), or 0 (ASCII is not one). */
size_t mt_utf8_len(const unsigned char *s, size_t n);

#endif /* MT_UTIL_JSON_H */
