/* SPDX-License-Identifier: MIT */
/* JSON writer: structure, commas and indentation, escaping. */
#include "util/json.h"

#include <inttypes.h> /* PRIu64 */
#include <math.h>     /* isfinite */
#include <string.h>   /* strlen */

void mt_json_init(struct mt_json *j, struct mt_strbuf *out, int pretty)
{
	j->out = out;
	j->pretty = pretty;
	j->depth = 0;
	j->has_items[0] = 0;
}

size_t mt_utf8_len(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t cp;

	if (s[0] < 0xc2 || s[0] > 0xf4)
		return 0;
	len = s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : 4;
	if (len > n)
		return 0;
	cp = s[0] & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

void mt_json_escape(struct mt_strbuf *sb, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	mt_strbuf_addch(sb, '"');
	while (i < n) {
		unsigned char c = s[i];
		if (c >= 0x80) {
			size_t l = mt_utf8_len(s + i, n - i);
			if (!l) {
				mt_strbuf_addstr(sb, "\\ufffd");
				i++;
				continue;
			}
			/* U+2028/2029 end a line in JavaScript source */
			if (l == 3 && c == 0xe2 && s[i + 1] == 0x80 && (s[i + 2] & 0xfe) == 0xa8)
				mt_strbuf_addf(sb, "\\u%04x", 0x2028 + (s[i + 2] & 1));
			else
				mt_strbuf_add(sb, s + i, l);
			i += l;
			continue;
		}
		switch (c) {
		case '"':
			mt_strbuf_addstr(sb, "\\\"");
			break;
		case '\\':
			mt_strbuf_addstr(sb, "\\\\");
			break;
		case '\n':
			mt_strbuf_addstr(sb, "\\n");
			break;
		case '\t':
			mt_strbuf_addstr(sb, "\\t");
			break;
		case '\r':
			mt_strbuf_addstr(sb, "\\r");
			break;
		case '<':
		case '>':
		case '&':
			mt_strbuf_addf(sb, "\\u%04x", c);
			break;
		default:
			if (c < 0x20 || c == 0x7f)
				mt_strbuf_addf(sb, "\\u%04x", c);
			else
				mt_strbuf_addch(sb, c);
		}
		i++;
	}
	mt_strbuf_addch(sb, '"');
}

static void newline(struct mt_json *j)
{
	if (!j->pretty)
		return;
	mt_strbuf_addch(j->out, '\n');
	for (int i = 0; i < j->depth; i++)
		mt_strbuf_addstr(j->out, "  ");
}

static void item(struct mt_json *j, const char *key)
{
	if (j->depth > 0) {
		if (j->has_items[j->depth])
			mt_strbuf_addch(j->out, ',');
		j->has_items[j->depth] = 1;
		newline(j);
	}
	if (key) {
		mt_json_escape(j->out, key, strlen(key));
		mt_strbuf_addstr(j->out, j->pretty ? ": " : ":");
	}
}

static void begin(struct mt_json *j, const char *key, char c)
{
	item(j, key);
	mt_strbuf_addch(j->out, c);
	/* deeper nesting than the writer tracks is a caller bug; the
	 * output stays well-formed only up to the limit */
	if (j->depth + 1 < MT_JSON_MAX_DEPTH)
		j->depth++;
	j->has_items[j->depth] = 0;
	j->kind[j->depth] = (unsigned char)c;
}

void mt_json_begin_object(struct mt_json *j, const char *key)
{
	begin(j, key, '{');
}

void mt_json_begin_array(struct mt_json *j, const char *key)
{
	begin(j, key, '[');
}

void mt_json_end(struct mt_json *j)
{
	if (j->depth == 0)
		return;
	int had = j->has_items[j->depth];
	char close = j->kind[j->depth] == '{' ? '}' : ']';
	j->depth--;
	if (had)
		newline(j);
	mt_strbuf_addch(j->out, close);
}

void mt_json_strn(struct mt_json *j, const char *key, const char *val, size_t len)
{
	item(j, key);
	mt_json_escape(j->out, val, len);
}

void mt_json_str(struct mt_json *j, const char *key, const char *val)
{
	if (!val) {
		mt_json_null(j, key);
		return;
	}
	mt_json_strn(j, key, val, strlen(val));
}

void mt_json_u64(struct mt_json *j, const char *key, uint64_t v)
{
	item(j, key);
	mt_strbuf_addf(j->out, "%" PRIu64, v);
}

void mt_json_i64(struct mt_json *j, const char *key, int64_t v)
{
	item(j, key);
	mt_strbuf_addf(j->out, "%" PRId64, v);
}

void mt_json_double(struct mt_json *j, const char *key, double v)
{
	item(j, key);
	if (isfinite(v))
		mt_strbuf_addf(j->out, "%.17g", v);
	else
		mt_strbuf_addstr(j->out, "null");
}

void mt_json_bool(struct mt_json *j, const char *key, int v)
{
	item(j, key);
	mt_strbuf_addstr(j->out, v ? "true" : "false");
}

void mt_json_null(struct mt_json *j, const char *key)
{
	item(j, key);
	mt_strbuf_addstr(j->out, "null");
}
