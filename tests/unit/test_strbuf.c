/* SPDX-License-Identifier: MIT */
/* strbuf growth and formatting; the JSON writer's structure and escaping. */
#include "util/json.h"
#include "util/strbuf.h"

#include <check.h>
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* memset */

START_TEST(test_strbuf_basics)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;

	ck_assert_str_eq(sb.buf, "");
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(mt_strbuf_addf(&sb, "%d,", i), 0);
	ck_assert_uint_eq(sb.len, strlen(sb.buf));
	ck_assert(strncmp(sb.buf, "0,1,2,", 6) == 0);
	mt_strbuf_reset(&sb);
	ck_assert_str_eq(sb.buf, "");
	char big[5000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	mt_strbuf_addf(&sb, "<%s>", big);
	ck_assert_uint_eq(sb.len, sizeof(big) + 1);
	mt_strbuf_addch(&sb, '!');
	mt_strbuf_add(&sb, "ab\0c", 4);
	ck_assert_uint_eq(sb.len, sizeof(big) + 6);
	size_t len;
	char *s = mt_strbuf_detach(&sb, &len);
	ck_assert_uint_eq(len, sizeof(big) + 6);
	ck_assert_str_eq(sb.buf, "");
	free(s);
	s = mt_strbuf_detach(&sb, NULL); /* empty: still a string */
	ck_assert_str_eq(s, "");
	free(s);
	mt_strbuf_release(&sb);
}
END_TEST

START_TEST(test_strbuf_bytes)
{
	static const struct {
		unsigned long long n;
		const char *s;
	} cases[] = { { 0, "0 B" }, { 1023, "1023 B" }, { 1024, "1.00 KiB" },
		      { 3 * 1024 * 1024, "3.00 MiB" }, { 1536ull << 30, "1.50 TiB" } };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mt_strbuf sb = MT_STRBUF_INIT;
		mt_strbuf_addbytes(&sb, cases[i].n);
		ck_assert_str_eq(sb.buf, cases[i].s);
		mt_strbuf_release(&sb);
	}
}
END_TEST

START_TEST(test_json_structure)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	struct mt_json j;

	mt_json_init(&j, &sb, 0);
	mt_json_begin_object(&j, NULL);
	mt_json_str(&j, "a", "x");
	mt_json_begin_array(&j, "b");
	mt_json_u64(&j, NULL, 1);
	mt_json_i64(&j, NULL, -2);
	mt_json_begin_object(&j, NULL);
	mt_json_end(&j);
	mt_json_begin_array(&j, NULL);
	mt_json_end(&j);
	mt_json_end(&j);
	mt_json_bool(&j, "c", 1);
	mt_json_null(&j, "d");
	mt_json_double(&j, "e", 0.5);
	mt_json_str(&j, "f", NULL);
	mt_json_end(&j);
	ck_assert_str_eq(sb.buf, "{\"a\":\"x\",\"b\":[1,-2,{},[]],\"c\":true,\"d\":null,\"e\":0.5,\"f\":null}");
	mt_strbuf_release(&sb);
}
END_TEST

START_TEST(test_json_escaping)
{
	struct mt_strbuf sb = MT_STRBUF_INIT;
	const char in[] = "q\" b\\ n\n t\t c\x01 </script> &amp; \xc3\xa9 \xe2\x80\xa8 bad\xff\xc3";

	mt_json_escape(&sb, in, sizeof(in) - 1);
	ck_assert_str_eq(sb.buf, "\"q\\\" b\\\\ n\\n t\\t c\\u0001 \\u003c/script\\u003e \\u0026amp; "
				 "\xc3\xa9 \\u2028 bad\\ufffd\\ufffd\"");
	mt_strbuf_release(&sb);
}
END_TEST

static Suite *strbuf_suite(void)
{
	Suite *s = suite_create("strbuf");
	TCase *tc = tcase_create("strbuf");

	tcase_add_test(tc, test_strbuf_basics);
	tcase_add_test(tc, test_strbuf_bytes);
	tcase_add_test(tc, test_json_structure);
	tcase_add_test(tc, test_json_escaping);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(strbuf_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
