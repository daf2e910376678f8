/* SPDX-License-Identifier: MIT */
/* The control protocol (format/ctlproto.h): every request and reply
 * round-trips, the lines are the ones docs/attach.md and older payloads
 * know, malformed lines are rejected; and the peer rule (format/peer.h). */
#include "format/ctlproto.h"
#include "format/peer.h"

#include <check.h>
#include <errno.h>  /* EINVAL, EPROTO */
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* strlen */

/* One request of each kind, and its line. */
static const struct {
	struct mt_ctl_request r;
	const char *line;
} requests[] = {
	{ { MT_CTL_STATUS, 0, 0, NULL, 0 }, "status\n" },
	{ { MT_CTL_START, 4294967295u, 10, "/tmp/a b/memtrace-1.bin", 0 },
	  "start 4294967295 10 /tmp/a b/memtrace-1.bin\n" },
	{ { MT_CTL_STOP, 0, 0, NULL, 0 }, "stop\n" },
	{ { MT_CTL_DETACH, 0, 0, NULL, 0 }, "detach\n" },
	{ { MT_CTL_EXPIRE, 0, 0, NULL, 18446744073709551615ull }, "expire 18446744073709551615\n" },
};

START_TEST(test_ctlproto_request_roundtrip)
{
	char buf[256];
	struct mt_ctl_request out;
	ck_assert_int_eq(sizeof(requests) / sizeof(requests[0]), MT_CTL_REQ__COUNT);
	const struct mt_ctl_request *in = &requests[_i].r;
	int n = mt_ctl_request_encode(buf, sizeof(buf), in);
	ck_assert_int_eq(n, (int)strlen(requests[_i].line));
	ck_assert_str_eq(buf, requests[_i].line);
	buf[n - 1] = '\0';
	ck_assert_int_eq(mt_ctl_request_parse(buf, &out), 0);
	ck_assert_int_eq(out.kind, in->kind);
	ck_assert_uint_eq(out.flags, in->flags);
	ck_assert_uint_eq(out.interval_ms, in->interval_ms);
	ck_assert_uint_eq(out.after_ms, in->after_ms);
	if (in->path)
		ck_assert_str_eq(out.path, in->path);
	else
		ck_assert_ptr_null(out.path);
	/* too small a buffer: -ENOSPC, whatever the size */
	for (size_t cap = 0; cap < (size_t)n + 1; cap++)
		ck_assert_int_eq(mt_ctl_request_encode(buf, cap, in), -ENOSPC);
}
END_TEST

START_TEST(test_ctlproto_request_rejects)
{
	static const char *const unknown[] = {
		"", "Status", "status ", " status", "stop now", "detach 1", "start", "hello",
		"start\t1 2 /p", "Start 1 2 /p", "expire", "expire ", "expire x", "expire -1",
		"expire 1 ", "expire  1", "expire 18446744073709551616",
	};
	static const char *const bad[] = {
		"start ", "start 1", "start 1 2", "start 1 2 ", "start 1 2 rel/path",
		"start -1 2 /p", "start +1 2 /p", "start  1 2 /p", "start 1  2 /p",
		"start 1 2  /p", "start x 2 /p", "start 1 y /p", "start 4294967296 2 /p",
		"start 1 99999999999999999999 /p", "start 1 2 /p\nstop",
	};
	struct mt_ctl_request r = { .kind = MT_CTL_STOP, .path = "untouched" };
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		ck_assert_msg(mt_ctl_request_parse(unknown[i], &r) == -EINVAL, "took '%s'", unknown[i]);
		ck_assert_int_eq(r.kind, MT_CTL_STOP);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(mt_ctl_request_parse(bad[i], &r) == -EPROTO, "took '%s'", bad[i]);
		ck_assert_int_eq(r.kind, MT_CTL_STOP);
		ck_assert_str_eq(r.path, "untouched");
	}
	char buf[64];
	struct mt_ctl_request s = { MT_CTL_START, 1, 2, "relative", 0 };
	ck_assert_int_eq(mt_ctl_request_encode(buf, sizeof(buf), &s), -EINVAL);
	s.path = "/a\nb";
	ck_assert_int_eq(mt_ctl_request_encode(buf, sizeof(buf), &s), -EINVAL);
	s.path = NULL;
	ck_assert_int_eq(mt_ctl_request_encode(buf, sizeof(buf), &s), -EINVAL);
	s.kind = MT_CTL_REQ__COUNT;
	ck_assert_int_eq(mt_ctl_request_encode(buf, sizeof(buf), &s), -EINVAL);
}
END_TEST

START_TEST(test_ctlproto_spec)
{
	struct mt_ctl_request r;
	ck_assert_int_eq(mt_ctl_spec_parse("3 10 /x y", 0, &r), 0);
	ck_assert_int_eq(r.kind, MT_CTL_START);
	ck_assert_uint_eq(r.flags, 3);
	ck_assert_uint_eq(r.interval_ms, 10);
	ck_assert_str_eq(r.path, "/x y");
	/* the debugger's entry: the path may be left out */
	ck_assert_int_eq(mt_ctl_spec_parse("3 10", 1, &r), 0);
	ck_assert_str_eq(r.path, "");
	ck_assert_int_eq(mt_ctl_spec_parse("3 10 ", 1, &r), 0);
	ck_assert_str_eq(r.path, "");
	ck_assert_int_eq(mt_ctl_spec_parse("3 10 /p", 1, &r), 0);
	ck_assert_str_eq(r.path, "/p");
	ck_assert_int_eq(mt_ctl_spec_parse("3 10", 0, &r), -EINVAL);
	ck_assert_int_eq(mt_ctl_spec_parse("3 10 ", 0, &r), -EINVAL);
	ck_assert_int_eq(mt_ctl_spec_parse("3 10  ", 1, &r), -EINVAL);
	ck_assert_int_eq(mt_ctl_spec_parse("3 10 p", 1, &r), -EINVAL);
	ck_assert_int_eq(mt_ctl_spec_parse("3", 1, &r), -EINVAL);
}
END_TEST

/* One reply of each kind, and its line. */
static const struct {
	struct mt_ctl_reply r;
	const char *line;
} replies[] = {
	{ { MT_CTL_OK_IDLE, 0, NULL, NULL }, "ok idle\n" },
	{ { MT_CTL_OK_STARTING, 0, NULL, NULL }, "ok starting\n" },
	{ { MT_CTL_OK_ACTIVE, 0, "/tmp/a b.bin", NULL }, "ok active /tmp/a b.bin\n" },
	{ { MT_CTL_OK_STOPPING, 0, NULL, NULL }, "ok stopping\n" },
	{ { MT_CTL_OK_CANCELLING, 0, NULL, NULL }, "ok cancelling\n" },
	{ { MT_CTL_OK_STOPPED, 0, "/c.bin", NULL }, "ok stopped /c.bin\n" },
	{ { MT_CTL_OK_CANCELLED, 0, NULL, NULL }, "ok cancelled\n" },
	{ { MT_CTL_OK_DETACHED, 18446744073709551615ull, "/c d.bin", NULL },
	  "ok detached 18446744073709551615 /c d.bin\n" },
	{ { MT_CTL_OK_EXPIRING, 0, NULL, NULL }, "ok expiring\n" },
	{ { MT_CTL_ERR_ALREADY_ATTACHED, 0, NULL, "already attached" },
	  "error already attached\n" },
	{ { MT_CTL_ERR_BUSY, 0, NULL, "busy" }, "error busy\n" },
	{ { MT_CTL_ERR_BAD_START, 0, NULL, "bad start request" }, "error bad start request\n" },
	{ { MT_CTL_ERR_NOT_ATTACHED, 0, NULL, "not attached" }, "error not attached\n" },
	{ { MT_CTL_ERR_STOPPING, 0, NULL, "stopping" }, "error stopping\n" },
	{ { MT_CTL_ERR_INCOMPLETE, 0, "No space left on device",
	    "capture incomplete: No space left on device" },
	  "error capture incomplete: No space left on device\n" },
	{ { MT_CTL_ERR_UNKNOWN_REQUEST, 0, NULL, "unknown request" }, "error unknown request\n" },
	{ { MT_CTL_ERROR, 0, "cannot start tracking: Bad address",
	    "cannot start tracking: Bad address" },
	  "error cannot start tracking: Bad address\n" },
};

START_TEST(test_ctlproto_reply_roundtrip)
{
	char buf[256];
	struct mt_ctl_reply out;
	ck_assert_int_eq(sizeof(replies) / sizeof(replies[0]), MT_CTL_REPLY__COUNT);
	const struct mt_ctl_reply *in = &replies[_i].r;
	ck_assert_int_eq(in->kind, _i);
	int n = mt_ctl_reply_encode(buf, sizeof(buf), in);
	ck_assert_int_eq(n, (int)strlen(replies[_i].line));
	ck_assert_str_eq(buf, replies[_i].line);
	buf[n - 1] = '\0';
	ck_assert_int_eq(mt_ctl_reply_parse(buf, &out), 0);
	ck_assert_int_eq(out.kind, in->kind);
	ck_assert_uint_eq(out.dropped, in->dropped);
	if (in->text)
		ck_assert_str_eq(out.text, in->text);
	else
		ck_assert_ptr_null(out.text);
	if (in->message)
		ck_assert_str_eq(out.message, in->message);
	else
		ck_assert_ptr_null(out.message);
	ck_assert_int_eq(mt_ctl_reply_is_ok(out.kind), !strncmp(buf, "ok ", 3));
	for (size_t cap = 0; cap < (size_t)n + 1; cap++)
		ck_assert_int_eq(mt_ctl_reply_encode(buf, cap, in), -ENOSPC);
}
END_TEST

START_TEST(test_ctlproto_reply_edges)
{
	char buf[64];
	struct mt_ctl_reply r;
	/* a path may be empty: the field is still there */
	struct mt_ctl_reply stopped = { MT_CTL_OK_STOPPED, 0, NULL, NULL };
	ck_assert_int_eq(mt_ctl_reply_encode(buf, sizeof(buf), &stopped), 12);
	ck_assert_str_eq(buf, "ok stopped \n");
	ck_assert_int_eq(mt_ctl_reply_parse("ok stopped ", &r), 0);
	ck_assert_int_eq(r.kind, MT_CTL_OK_STOPPED);
	ck_assert_str_eq(r.text, "");
	ck_assert_int_eq(mt_ctl_reply_parse("ok detached 0 ", &r), 0);
	ck_assert_int_eq(r.kind, MT_CTL_OK_DETACHED);
	ck_assert_uint_eq(r.dropped, 0);
	ck_assert_str_eq(r.text, "");
	/* an older payload's start reply had a tail of no meaning */
	ck_assert_int_eq(mt_ctl_reply_parse("ok starting ", &r), 0);
	ck_assert_int_eq(r.kind, MT_CTL_OK_STARTING);
	ck_assert_ptr_null(r.text);
	ck_assert_int_eq(mt_ctl_reply_parse("ok starting cannot start a thread: x", &r), 0);
	ck_assert_int_eq(r.kind, MT_CTL_OK_STARTING);
	/* an error of a known kind with more after it is a message */
	ck_assert_int_eq(mt_ctl_reply_parse("error busy now", &r), 0);
	ck_assert_int_eq(r.kind, MT_CTL_ERROR);
	ck_assert_str_eq(r.message, "busy now");
	ck_assert_int_eq(mt_ctl_reply_parse("error capture incomplete:", &r), 0);
	ck_assert_int_eq(r.kind, MT_CTL_ERROR);
	ck_assert_str_eq(r.text, "capture incomplete:");
	/* an ERROR needs its message; no text may hold a newline */
	struct mt_ctl_reply e = { MT_CTL_ERROR, 0, "", NULL };
	ck_assert_int_eq(mt_ctl_reply_encode(buf, sizeof(buf), &e), -EINVAL);
	e.text = NULL;
	ck_assert_int_eq(mt_ctl_reply_encode(buf, sizeof(buf), &e), -EINVAL);
	e.text = "a\nb";
	ck_assert_int_eq(mt_ctl_reply_encode(buf, sizeof(buf), &e), -EINVAL);
	e.kind = MT_CTL_REPLY__COUNT;
	ck_assert_int_eq(mt_ctl_reply_encode(buf, sizeof(buf), &e), -EINVAL);
}
END_TEST

START_TEST(test_ctlproto_reply_rejects)
{
	static const char *const bad[] = {
		"", "ok", "ok ", "OK idle", "ok idle ", "ok idle now", "ok active", "ok stopped",
		"ok stoppedx", "ok detached", "ok detached ", "ok detached 5", "ok detached x /p",
		"ok detached -1 /p", "ok detached 18446744073709551616 /p", "ok detached 1/p",
		"ok cancelled ", "ok stopping x", "ok startingx", "ok what", "error", "error ",
		"errors", "fine",
	};
	struct mt_ctl_reply r = { .kind = MT_CTL_OK_IDLE, .text = "untouched" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(mt_ctl_reply_parse(bad[i], &r) == -EINVAL, "accepted '%s'", bad[i]);
		ck_assert_int_eq(r.kind, MT_CTL_OK_IDLE);
		ck_assert_str_eq(r.text, "untouched");
	}
}
END_TEST

START_TEST(test_peer_rule)
{
	ck_assert(mt_peer_allowed(1000, 1000));
	ck_assert(mt_peer_allowed(0, 1000)); /* root may look */
	ck_assert(mt_peer_allowed(0, 0));
	ck_assert(!mt_peer_allowed(1001, 1000));
	ck_assert(!mt_peer_allowed(1000, 0));
	ck_assert(!mt_peer_allowed(-1, 1000)); /* cannot be told */
	ck_assert(!mt_peer_allowed(-1, 0));
}
END_TEST

static Suite *ctlproto_suite(void)
{
	Suite *s = suite_create("ctlproto");
	TCase *req = tcase_create("request");
	TCase *rep = tcase_create("reply");
	TCase *peer = tcase_create("peer");

	tcase_add_loop_test(req, test_ctlproto_request_roundtrip, 0, MT_CTL_REQ__COUNT);
	tcase_add_test(req, test_ctlproto_request_rejects);
	tcase_add_test(req, test_ctlproto_spec);
	tcase_add_loop_test(rep, test_ctlproto_reply_roundtrip, 0, MT_CTL_REPLY__COUNT);
	tcase_add_test(rep, test_ctlproto_reply_edges);
	tcase_add_test(rep, test_ctlproto_reply_rejects);
	tcase_add_test(peer, test_peer_rule);
	suite_add_tcase(s, req);
	suite_add_tcase(s, rep);
	suite_add_tcase(s, peer);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ctlproto_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
