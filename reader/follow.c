/* SPDX-License-Identifier: MIT */
/*
 * Following a capture while it is written (follow.h): the capture stays
 * open between refreshes, its snapshot fed what each one finds.
 */
#include "reader/follow.h"
#include "format/error.h"
#include "reader/report.h" /* mt_report_describe_open_error */

#include <errno.h>    /* ENOMEM */
#include <stdio.h>    /* snprintf */
#include <stdlib.h>   /* calloc */
#include <string.h>   /* strdup */
#include <sys/stat.h> /* stat */

struct mt_follow {
	char *path;
	struct mt_snapshot_opts opts;
	struct mt_capture *cap; /* open, or NULL: the next refresh starts afresh */
	dev_t dev;              /* the file it is */
	ino_t ino;
	struct mt_snapshot s;   /* fed from cap, while cap is open */
	int viewed;             /* s holds the figures of a view */
	struct mt_follow_read last;
};

struct mt_follow *mt_follow_new(const char *path, const struct mt_snapshot_opts *o)
{
	struct mt_follow *f = calloc(1, sizeof(*f));

	if (!f || !(f->path = strdup(path))) {
		free(f);
		return NULL;
	}
	f->opts = *o;
	return f;
}

/* Forget what was read: the next refresh reads the capture from its start. */
static void drop(struct mt_follow *f)
{
	if (f->cap) {
		mt_snapshot_release(&f->s);
		mt_capture_close(f->cap);
		f->cap = NULL;
	}
	f->viewed = 0;
}

/* Open the capture and begin its snapshot. 0 or -errno, with @msg. */
static int start(struct mt_follow *f, char *msg, size_t len)
{
	struct stat sb;
	int err = mt_capture_open(f->path, &f->cap);

	if (err < 0) {
		f->cap = NULL;
		mt_report_describe_open_error(msg, len, f->path, err);
		return err;
	}
	/* the file opened, or one put in its place just after: either way a
	 * later change of file is seen by the next refresh */
	if (stat(f->path, &sb) == 0) {
		f->dev = sb.st_dev;
		f->ino = sb.st_ino;
	}
	if ((err = mt_snapshot_begin(&f->s, f->cap, &f->opts)) < 0) {
		mt_capture_close(f->cap);
		f->cap = NULL;
		snprintf(msg, len, "cannot read '%s': %s", f->path, mt_strerror(err));
		return err;
	}
	f->last.from_start = 1;
	return 0;
}

/* Is the capture open still the one to read? 2 if it grew, 1 if not, 0
 * if it is to be read again from its start, or -errno (@msg). */
static int still_there(struct mt_follow *f, char *msg, size_t len)
{
	struct stat sb;

	if (stat(f->path, &sb) == 0 && (sb.st_dev != f->dev || sb.st_ino != f->ino))
		return 0;
	int grew = mt_capture_follow(f->cap);
	if (grew == -MT_EREPLACED)
		return 0;
	if (grew < 0) {
		snprintf(msg, len, "cannot read '%s': %s", f->path, mt_strerror(grew));
		return grew;
	}
	return grew ? 2 : 1;
}

int mt_follow_refresh(struct mt_follow *f, char *msg, size_t len)
{
	uint64_t chunks = 0, events = 0;
	int err, grew = 2;

	f->last = (struct mt_follow_read){ 0 };
	if (f->cap) {
		grew = still_there(f, msg, len);
		if (grew < 0) {
			drop(f);
			return grew;
		}
		if (grew == 0)
			drop(f);
	}
	if (f->cap) {
		chunks = f->s.status.n_chunks;
		events = f->s.n_events;
	} else if ((err = start(f, msg, len)) < 0) {
		return err;
	} else {
		grew = 2;
	}
	/* the file as it was: the last view's figures stand (a feed would
	 * take a view's hybrid stacks out of the trie: snapshot.h) */
	if (grew == 1 && f->viewed)
		return 0;
	err = mt_snapshot_feed(&f->s, f->cap);
	if (err < 0) {
		snprintf(msg, len, "cannot read '%s': %s", f->path, mt_capture_error(f->cap, err));
		drop(f);
		return err;
	}
	if (mt_capture_damage(f->cap)) {
		snprintf(msg, len, "cannot read '%s': %s", f->path, mt_capture_damage(f->cap));
		drop(f);
		return -MT_ECORRUPT;
	}
	f->last.chunks = f->s.status.n_chunks - chunks;
	f->last.events = f->s.n_events - events;
	/* fed, if only a part of a chunk: viewed again (the same figures) */
	err = mt_snapshot_view(&f->s);
	if (err < 0) {
		snprintf(msg, len, "cannot read '%s': %s", f->path, mt_strerror(err));
		drop(f);
		return err;
	}
	f->viewed = 1;
	return 0;
}

void mt_follow_set_opts(struct mt_follow *f, const struct mt_snapshot_opts *o)
{
	f->opts = *o;
	drop(f);
}

const struct mt_snapshot *mt_follow_snapshot(const struct mt_follow *f)
{
	return f->viewed ? &f->s : NULL;
}

struct mt_follow_read mt_follow_last(const struct mt_follow *f)
{
	return f->last;
}

void mt_follow_free(struct mt_follow *f)
{
	if (!f)
		return;
	drop(f);
	free(f->path);
	free(f);
}
