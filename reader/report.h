/* SPDX-License-Identifier: MIT */
#ifndef MT_READER_REPORT_H
#define MT_READER_REPORT_H
/*
 * Text reports. Each consumes a snapshot (parse consumes the record
 * stream) and writes to a stdio stream; none prints anywhere else or
 * exits. Returns 0, or -errno when writing or allocation failed.
 */
#include <stddef.h> /* size_t */
#include <stdio.h>  /* FILE */

#include "reader/capture.h"
#include "reader/snapshot.h"

struct mt_report_opts {
	unsigned top_n;     /* rows per table; 0 = all */
	enum mt_view view;  /* summary: MT_VIEW_PEAK or MT_VIEW_LEAKS */
	const char *path;   /* capture name to show */
	int json;           /* one JSON object instead of text */
};

/* mt_report_load() - open @path and build @s from it (read once), with
 * capture damage described through @warn. Returns 0 or the error of
 * mt_capture_open()/mt_snapshot_build(). */
int mt_report_load(struct mt_snapshot *s, const char *path,
		   void (*warn)(void *ctx, const char *msg), void *ctx);

/* mt_report_describe_open_error() - one line (no prefix, no newline)
 * saying why @path could not be opened, for an error from
 * mt_capture_open(). Returns @buf. */
char *mt_report_describe_open_error(char *buf, size_t len, const char *path, int err);

int mt_report_stats(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
int mt_report_summary(FILE *out, const struct mt_snapshot *s, const struct mt_report_opts *o);
/* mt_report_parse() - the header, then every record as one line. */
int mt_report_parse(FILE *out, struct mt_capture *c);

/* Helpers shared by the report files (reader/report-stats.c). */
struct mt_strbuf;
/* "1.50 MiB"; returns @buf (>= 32 bytes) */
char *mt__report_bytes(char *buf, unsigned long long n);
/* "function at file:line", or the function alone without a file */
void mt__report_location(struct mt_strbuf *sb, const char *function, const char *file, int line);
/* "12.345 s" */
char *mt__report_seconds(char *buf, size_t len, unsigned long long us);

#endif /* MT_READER_REPORT_H */
