/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_SRCLINES_H
#define MT_READER_SRCLINES_H
/*
 * The text of source lines, for the HTML reports: asked for line by line
 * (mt_srclines_add()), then read together (mt_srclines_read()), each
 * file once, when the report is made. A line has text only if its file
 * is readable then: an absolute path of a regular file of at most
 * MT_SRCLINES_MAX_FILE bytes, and, as memray guesses which files may
 * hold secrets, one named *.py or *.pyw, or executable, or readable by
 * all; and if the line is valid UTF-8 and not blank. The text is the
 * line stripped of white space at both ends and cut to
 * MT_SRCLINES_MAX_CHARS characters (then ending in "..." as one
 * character). A missing, unreadable or changed file gives no text, never
 * an error: the file read is the one there now, which may differ from
 * the one that ran. Zero-initialised is empty. The guess is memray's
 * --confidential-files=default; @confidential says otherwise (set before
 * mt_srclines_read()).
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t */

/* memray's --confidential-files: which files' lines stay out of a page */
enum mt_confidential {
	MT_CONFIDENTIAL_DEFAULT, /* all but *.py, *.pyw, executables, files readable by all */
	MT_CONFIDENTIAL_NONE,    /* none: any file's lines */
	MT_CONFIDENTIAL_ALL,     /* all: no line at all */
};

#define MT_SRCLINES_MAX_CHARS 120
#define MT_SRCLINES_MAX_FILE (32u << 20)
#define MT_SRCLINES_MAX_TOTAL (256u << 20) /* bytes read in all */

struct mt_srcreq {
	const char *file;
	int line;
	uint32_t id;  /* the request's index */
};

struct mt_srclines {
	struct mt_srcreq *v; /* sorted by file and line once read */
	size_t n, cap;
	const char **text;   /* by id: NULL = none; equal lines share one */
	char **owned;        /* the texts, each once */
	size_t n_owned;
	size_t files_read;   /* files opened and read whole */
	enum mt_confidential confidential; /* which files keep their lines */
};

/* mt_srclines_add() - ask for line @line (from 1) of @file, which must
 * stay valid until mt_srclines_read() returns. Returns the request's id
 * (from 0, in order), or -ENOMEM. */
long mt_srclines_add(struct mt_srclines *c, const char *file, int line);

/* mt_srclines_read() - read every line asked for. Returns 0 or -ENOMEM. */
int mt_srclines_read(struct mt_srclines *c);

/* mt_srclines_text() - request @id's text (borrowed, valid until
 * mt_srclines_release()), or NULL if it has none. */
const char *mt_srclines_text(const struct mt_srclines *c, long id);

void mt_srclines_release(struct mt_srclines *c);

#endif /* MT_READER_SRCLINES_H */
