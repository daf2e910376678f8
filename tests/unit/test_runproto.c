/* SPDX-License-Identifier: MIT */
/* MEMTRACE_RUN and the status line between memtrace run and the payload:
 * every form round-trips, and malformed strings are rejected. */
#include "format/runproto.h"

#include <check.h>
#include <errno.h>  /* EINVAL, ENOSPC */
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* strcmp */

/* Encode @e, compare with @want, parse it back and compare fields. */
static void env_round_trip(const struct mt_run_env *e, const char *want)
{
	char buf[256];
	struct mt_run_env back;
	int n = mt_run_env_encode(buf, sizeof(buf), e);
	ck_assert_int_eq(n, (int)strlen(want));
	ck_assert_str_eq(buf, want);
	ck_assert_int_eq(mt_run_env_parse(buf, &back), 0);
	ck_assert_uint_eq(back.flags, e->flags);
	ck_assert_uint_eq(back.interval_ms, e->interval_ms);
	ck_assert_int_eq(back.status_fd, e->status_fd);
	ck_assert_int_eq(back.has_fd, e->has_fd);
	ck_assert_int_eq(back.capture_fd, e->has_fd ? e->capture_fd : -1);
	if (e->path)
		ck_assert_str_eq(back.path, e->path);
	else
		ck_assert_ptr_null(back.path);
	/* one byte short of its NUL does not fit */
	ck_assert_int_eq(mt_run_env_encode(buf, (size_t)n, e), -ENOSPC);
}

START_TEST(test_env_round_trips)
{
	struct mt_run_env file = { 5, 10, 3, 4, 1, "/tmp/a:b.bin" };
	env_round_trip(&file, "5:10:3:fd:4:/tmp/a:b.bin");
	struct mt_run_env remote = { 0, 1, 7, 9, 1, NULL };
	env_round_trip(&remote, "0:1:7:fd:9");
	struct mt_run_env none = { 4294967295u, 3600000, -1, -1, 1, "/x" };
	env_round_trip(&none, "4294967295:3600000:-1:fd:-1:/x");
	struct mt_run_env byname = { 2, 0, 2147483647, -1, 0, "/c.bin" };
	env_round_trip(&byname, "2:0:2147483647:/c.bin");
	/* a path alone must be absolute */
	struct mt_run_env rel = { 0, 10, -1, -1, 0, "c.bin" };
	char buf[64];
	ck_assert_int_eq(mt_run_env_encode(buf, sizeof(buf), &rel), -EINVAL);
}
END_TEST

START_TEST(test_env_malformed)
{
	static const char *const bad[] = {
		"",
		"0",
		"0:10",
		"0:10:3",
		"0:10:3:",
		"0:10:3:c.bin",        /* a relative path */
		"x:10:3:fd:4:/p",
		"-0:10:3:fd:4:/p",
		"01:10:3:fd:4:/p",     /* a leading zero */
		"4294967296:10:3:fd:4:/p", /* over 32 bits */
		"0:4294967296:3:fd:4:/p",
		"0:10:-2:fd:4:/p",
		"0:10:-10:fd:4:/p",
		"0:10:2147483648:fd:4:/p",
		"0:10:3:fd:",
		"0:10:3:fd:x:/p",
		"0:10:3:fd:4x",
		"0:10:3:fd:4:",        /* a path that is empty */
		"0:10:3:fd:4/p",
		"0:10: 3:fd:4:/p",
		"+0:10:3:fd:4:/p",
		"0::3:fd:4:/p",
	};
	struct mt_run_env e;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(mt_run_env_parse(bad[i], &e) == -EINVAL, "accepted '%s'", bad[i]);
}
END_TEST

/* Encode @s, compare with @want, parse it back and compare fields. */
static void status_round_trip(const struct mt_run_status *s, const char *want)
{
	char buf[MT_RUN_STATUS_MAX];
	struct mt_run_status back;
	int n = mt_run_status_encode(buf, sizeof(buf), s);
	ck_assert_int_eq(n, (int)strlen(want));
	ck_assert(!memcmp(buf, want, (size_t)n));
	ck_assert_int_eq(mt_run_status_parse(buf, (size_t)n, &back), 0);
	ck_assert_int_eq(back.end, s->end);
	if (s->end == MT_RUN_ERROR) {
		ck_assert_uint_eq(back.reason_len, s->reason_len);
		ck_assert(!memcmp(back.reason, s->reason, s->reason_len));
		ck_assert_ptr_eq(back.reason, buf + 6);
	} else {
		ck_assert_uint_eq(back.dropped, s->dropped);
		ck_assert_int_eq(back.sig, s->end == MT_RUN_SIGNAL ? s->sig : 0);
	}
	/* without its newline, or with more after it, it is not a line */
	ck_assert_int_eq(mt_run_status_parse(buf, (size_t)n - 1, &back), -EINVAL);
	buf[n] = 'x';
	ck_assert_int_eq(mt_run_status_parse(buf, (size_t)n + 1, &back), -EINVAL);
}

START_TEST(test_status_round_trips)
{
	struct mt_run_status ok = { .end = MT_RUN_OK };
	status_round_trip(&ok, "ok\n");
	struct mt_run_status okd = { .end = MT_RUN_OK, .dropped = 12345 };
	status_round_trip(&okd, "ok dropped 12345\n");
	struct mt_run_status okmax = { .end = MT_RUN_OK, .dropped = UINT64_MAX };
	status_round_trip(&okmax, "ok dropped 18446744073709551615\n");
	struct mt_run_status sig = { .end = MT_RUN_SIGNAL, .sig = 15 };
	status_round_trip(&sig, "signal 15\n");
	struct mt_run_status sigd = { .end = MT_RUN_SIGNAL, .sig = 2, .dropped = 7 };
	status_round_trip(&sigd, "signal 2 dropped 7\n");
	const char why[] = "cannot write the capture: No space left on device";
	struct mt_run_status err = { .end = MT_RUN_ERROR, .reason = why,
				     .reason_len = sizeof(why) - 1 };
	status_round_trip(&err, "error cannot write the capture: No space left on device\n");
	/* "error ok" is an error whose reason is "ok" */
	struct mt_run_status eok = { .end = MT_RUN_ERROR, .reason = "ok", .reason_len = 2 };
	status_round_trip(&eok, "error ok\n");
}
END_TEST

START_TEST(test_status_encoder_limits)
{
	char buf[MT_RUN_STATUS_MAX], big[1000];
	memset(big, 'r', sizeof(big));
	struct mt_run_status err = { .end = MT_RUN_ERROR, .reason = big, .reason_len = sizeof(big) };
	struct mt_run_status back;
	/* a long reason is shortened; the line keeps its newline */
	int n = mt_run_status_encode(buf, sizeof(buf), &err);
	ck_assert_int_eq(n, (int)sizeof(buf));
	ck_assert_int_eq(mt_run_status_parse(buf, (size_t)n, &back), 0);
	ck_assert_uint_eq(back.reason_len, sizeof(buf) - 7);
	/* a reason is cut at a newline, and is never empty */
	struct mt_run_status two = { .end = MT_RUN_ERROR, .reason = "a\nb", .reason_len = 3 };
	ck_assert_int_eq(mt_run_status_encode(buf, sizeof(buf), &two), 8);
	ck_assert(!memcmp(buf, "error a\n", 8));
	struct mt_run_status none = { .end = MT_RUN_ERROR, .reason = "\nb", .reason_len = 2 };
	ck_assert_int_eq(mt_run_status_encode(buf, sizeof(buf), &none), -EINVAL);
	struct mt_run_status sig0 = { .end = MT_RUN_SIGNAL, .sig = 0 };
	ck_assert_int_eq(mt_run_status_encode(buf, sizeof(buf), &sig0), -EINVAL);
	struct mt_run_status nothing = { 0 };
	ck_assert_int_eq(mt_run_status_encode(buf, sizeof(buf), &nothing), -EINVAL);
	struct mt_run_status okd = { .end = MT_RUN_OK, .dropped = 100 };
	ck_assert_int_eq(mt_run_status_encode(buf, 14, &okd), -ENOSPC);
	ck_assert_int_eq(mt_run_status_encode(buf, 15, &okd), 15);
}
END_TEST

START_TEST(test_status_malformed)
{
	static const char *const bad[] = {
		"",
		"\n",
		"ok",                 /* no newline */
		"ok \n",
		"ok\n\n",
		"ok\nok\n",
		"okay\n",
		"OK\n",
		"ok dropped\n",
		"ok dropped \n",
		"ok dropped 0\n",     /* "ok" says none */
		"ok dropped 012\n",
		"ok dropped -1\n",
		"ok dropped 12x\n",
		"ok dropped 18446744073709551616\n", /* over 64 bits */
		"ok dropped 1 dropped 2\n",
		"error\n",
		"error \n",
		"signal\n",
		"signal \n",
		"signal 0\n",
		"signal 128\n",
		"signal 09\n",
		"signal x\n",
		"signal 15 \n",
		"signal 15 dropped\n",
		"signal 15 dropped 0\n",
		"signal 15 ok\n",
		" ok\n",
		"ok dropped 1\n\n",
	};
	struct mt_run_status s;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(mt_run_status_parse(bad[i], strlen(bad[i]), &s) == -EINVAL,
			      "accepted '%s'", bad[i]);
	/* a NUL inside the line */
	ck_assert_int_eq(mt_run_status_parse("ok\0\n", 4, &s), -EINVAL);
	ck_assert_int_eq(mt_run_status_parse("error a\0b\n", 10, &s), -EINVAL);
}
END_TEST

static Suite *runproto_suite(void)
{
	Suite *s = suite_create("runproto");
	TCase *tc = tcase_create("runproto");

	tcase_add_test(tc, test_env_round_trips);
	tcase_add_test(tc, test_env_malformed);
	tcase_add_test(tc, test_status_round_trips);
	tcase_add_test(tc, test_status_encoder_limits);
	tcase_add_test(tc, test_status_malformed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(runproto_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
