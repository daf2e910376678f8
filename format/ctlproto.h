/* SPDX-License-Identifier: MIT */
#ifndef MT_FORMAT_CTLPROTO_H
#define MT_FORMAT_CTLPROTO_H
/*
 * The control protocol of attach and detach: the lines the CLI sends to
 * the payload's control socket and the lines the payload answers. Both
 * sides encode and parse them here and nowhere else (payload/control.c
 * serves them, inject/control.c carries them, cli/cmd-attach.c and
 * cli/cmd-detach.c read the replies). Pure functions over caller buffers:
 * no I/O, no malloc, so the payload can use them; parsed text fields
 * point into the line given (borrowed, valid as long as it is).
 *
 * One request line, one reply line, each ended by '\n'. The encoders
 * write the '\n' (and a NUL after it); the parsers take a line without
 * its '\n'.
 *   status                      -> ok idle | ok starting | ok active PATH
 *                                  | ok stopping | ok cancelling
 *                                  | error MESSAGE
 *   start FLAGS INTERVAL PATH   -> ok starting | error already attached
 *                                  | error busy | error bad start request
 *                                  | error MESSAGE
 *     FLAGS and INTERVAL decimal, PATH absolute (the rest of the line);
 *     with the capture's descriptor as SCM_RIGHTS (PATH is then only its
 *     name for messages); without one, PATH is opened in the target.
 *   stop                        -> ok stopped PATH | ok cancelled
 *                                  | error not attached | error stopping
 *                                  | error capture incomplete: REASON
 *   detach                      -> ok detached DROPPED PATH | ok cancelled
 *                                  | error not attached | error stopping
 *                                  | error capture incomplete: REASON
 *   expire MS                   -> ok expiring | error not attached
 *                                  | error stopping
 *     the capture starting or running stops by itself (as a detach
 *     would) MS milliseconds from now, unless it has stopped before
 *   anything else               -> error unknown request
 * An older payload answers "ok stopped PATH" to stop and "error unknown
 * request" to detach (the CLI then asks "stop"), and may follow
 * "ok starting" with a space and text of no meaning.
 */
#include <stddef.h> /* size_t */
#include <stdint.h> /* uint32_t, uint64_t */

enum mt_ctl_req {
	MT_CTL_STATUS,
	MT_CTL_START, /* flags, interval_ms, path */
	MT_CTL_STOP,
	MT_CTL_DETACH,
	MT_CTL_EXPIRE, /* after_ms */
	MT_CTL_REQ__COUNT
};

struct mt_ctl_request {
	enum mt_ctl_req kind;
	uint32_t flags;       /* start: the capture's MT_HDR_* flags */
	uint32_t interval_ms; /* start: RSS sampling interval */
	const char *path;     /* start: the capture's absolute path */
	uint64_t after_ms;    /* expire: from now */
};

/* X(kind, words, field): the reply kinds, their fixed words, and whether
 * a text field (and for DETACHED a count before it) follows them. The
 * generic ERROR comes last: any other "error MESSAGE" is one. */
#define MT_CTL_REPLIES(X)                                                      \
	X(OK_IDLE, "ok idle", 0)                                               \
	X(OK_STARTING, "ok starting", 0)                                       \
	X(OK_ACTIVE, "ok active", 1)              /* PATH */                   \
	X(OK_STOPPING, "ok stopping", 0)                                       \
	X(OK_CANCELLING, "ok cancelling", 0)                                   \
	X(OK_STOPPED, "ok stopped", 1)            /* PATH */                   \
	X(OK_CANCELLED, "ok cancelled", 0)                                     \
	X(OK_DETACHED, "ok detached", 2)          /* DROPPED PATH */           \
	X(OK_EXPIRING, "ok expiring", 0)                                       \
	X(ERR_ALREADY_ATTACHED, "error already attached", 0)                   \
	X(ERR_BUSY, "error busy", 0)                                           \
	X(ERR_BAD_START, "error bad start request", 0)                         \
	X(ERR_NOT_ATTACHED, "error not attached", 0)                           \
	X(ERR_STOPPING, "error stopping", 0)                                   \
	X(ERR_INCOMPLETE, "error capture incomplete:", 1) /* REASON */         \
	X(ERR_UNKNOWN_REQUEST, "error unknown request", 0)                     \
	X(ERROR, "error", 1)                      /* MESSAGE */

enum mt_ctl_reply_kind {
#define X(kind, words, field) MT_CTL_##kind,
	MT_CTL_REPLIES(X)
#undef X
	MT_CTL_REPLY__COUNT
};

struct mt_ctl_reply {
	enum mt_ctl_reply_kind kind;
	uint64_t dropped; /* OK_DETACHED: events the capture lost */
	/* OK_ACTIVE, OK_STOPPED, OK_DETACHED: the capture's path (may be
	 * empty); ERR_INCOMPLETE: the reason; ERROR: the message; else NULL */
	const char *text;
	/* any error: what follows "error " ("not attached", "capture
	 * incomplete: REASON", ...), for a message; else NULL */
	const char *message;
};

/* mt_ctl_request_encode() - the line of @r, '\n' and a NUL, in @buf.
 * Returns its length (without the NUL), -EINVAL if @r is not a request
 * (a start's path not absolute or holding a '\n'), -ENOSPC if @cap is too
 * small. */
int mt_ctl_request_encode(char *buf, size_t cap, const struct mt_ctl_request *r);

/* mt_ctl_request_parse() - @line (without its '\n') into *@r; r->path
 * points into @line. Returns 0; -EPROTO for "start " followed by what are
 * no start's arguments; -EINVAL for any other line (no request this module
 * knows). On error *@r is untouched. */
int mt_ctl_request_parse(const char *line, struct mt_ctl_request *r);

/* mt_ctl_spec_parse() - "FLAGS INTERVAL PATH", a start's arguments (and
 * the debugger's memtrace_attach_entry_str() argument), into *@r with
 * kind MT_CTL_START. Where @path_optional, "FLAGS INTERVAL" and
 * "FLAGS INTERVAL " are allowed too, with r->path "". Returns 0 or
 * -EINVAL (*@r untouched). */
int mt_ctl_spec_parse(const char *spec, int path_optional, struct mt_ctl_request *r);

/* mt_ctl_reply_encode() - the line of @r, '\n' and a NUL, in @buf. A kind
 * with a field needs r->text (NULL is written as ""); ERROR needs a
 * non-empty one. Returns its length (without the NUL), -EINVAL if @r is
 * not a reply (a text holding a '\n'), -ENOSPC if @cap is too small. */
int mt_ctl_reply_encode(char *buf, size_t cap, const struct mt_ctl_reply *r);

/* mt_ctl_reply_parse() - @line (without its '\n') into *@r; r->text and
 * r->message point into @line. Returns 0, or -EINVAL if it is no reply
 * this module knows or is malformed (*@r is then untouched). */
int mt_ctl_reply_parse(const char *line, struct mt_ctl_reply *r);

/* mt_ctl_reply_is_ok() - whether @kind is an "ok ..." reply. */
int mt_ctl_reply_is_ok(enum mt_ctl_reply_kind kind);

#endif /* MT_FORMAT_CTLPROTO_H */
