/* SPDX-License-Identifier: MIT */
/* Which frames the reports hide (reader/frames.h). */
#include "reader/frames.h"

#include <check.h>
#include <stdlib.h> /* EXIT_SUCCESS */

START_TEST(test_import_system)
{
	ck_assert_int_eq(mt_frame_kind("_find_and_load", "<frozen importlib._bootstrap>", 0),
			 MT_FRAME_IMPORT);
	ck_assert_int_eq(mt_frame_kind("exec_module", "<frozen importlib._bootstrap_external>", 0),
			 MT_FRAME_IMPORT);
	ck_assert_int_eq(mt_frame_kind("_find_and_load", "/usr/lib/python3.6/importlib/_bootstrap.py", 0),
			 MT_FRAME_IMPORT);
	ck_assert_int_eq(mt_frame_kind("get_code", "/x/lib/importlib/_bootstrap_external.py", 0),
			 MT_FRAME_IMPORT);
	/* the rest of importlib and other frozen modules are the program's */
	ck_assert_int_eq(mt_frame_kind("import_module", "/usr/lib/python3.11/importlib/__init__.py", 0),
			 MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_kind("_run_module_as_main", "<frozen runpy>", 0), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_kind("f", "/app/my_importlib/_bootstrap.pyc", 0), MT_FRAME_SHOWN);
	/* native: the evaluation loop's import functions and Python/import.c */
	ck_assert_int_eq(mt_frame_kind("import_name", "/src/Python/ceval.c", 1), MT_FRAME_IMPORT);
	ck_assert_int_eq(mt_frame_kind("import_from", "ceval.c", 1), MT_FRAME_IMPORT);
	ck_assert_int_eq(mt_frame_kind("PyImport_ImportModuleLevelObject", "/src/Python/import.c", 1),
			 MT_FRAME_IMPORT);
	ck_assert_int_eq(mt_frame_kind("_PyEval_EvalFrameDefault", "/src/Python/ceval.c", 1),
			 MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_kind("import_name", "/app/mine.c", 1), MT_FRAME_SHOWN);
	/* a Python frame is never taken for a native one, nor the reverse */
	ck_assert_int_eq(mt_frame_kind("import_name", "/src/Python/ceval.c", 0), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_kind("f", "<frozen importlib._bootstrap>", 1), MT_FRAME_SHOWN);
}
END_TEST

START_TEST(test_memtrace_package)
{
	static const char *const ours[] = {
		"/usr/lib/python3/site-packages/memtrace/tracker.py",
		"/home/u/src/memtrace/python/memtrace/pytest_plugin.py",
		"/opt/memtrace/__init__.py",
		"/v/memtrace/reader.py",
		"/v/memtrace/_native.py",
		"/v/memtrace/__main__.py",
		"/v/memtrace/_records.py",
		"/v/memtrace/_pytest_limits.py",
	};
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		ck_assert_int_eq(mt_frame_kind("f", ours[i], 0), MT_FRAME_MEMTRACE);
	ck_assert_int_eq(mt_frame_kind("f", "/app/notmemtrace/tracker.py", 0), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_kind("f", "/app/memtrace/other.py", 0), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_kind("f", "memtrace/tracker.py", 0), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_kind("f", "/app/memtrace/tracker.py", 1), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_kind(NULL, "/v/memtrace/tracker.py", 0), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_kind("f", NULL, 0), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_kind("f", "", 0), MT_FRAME_SHOWN);
}
END_TEST

/* the flame graph page's: runpy's frames too, as memray's flame graph */
START_TEST(test_page_kind)
{
	ck_assert_int_eq(mt_frame_page_kind("_run_module_as_main", "<frozen runpy>", 0), MT_FRAME_RUNPY);
	ck_assert_int_eq(mt_frame_page_kind("_run_code", "/usr/lib/python3.8/runpy.py", 0), MT_FRAME_RUNPY);
	ck_assert_int_eq(mt_frame_page_kind("f", "/app/myrunpy.py", 0), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_page_kind("f", "<frozen runpy>", 1), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_page_kind("f", "<frozen importlib._bootstrap>", 0), MT_FRAME_IMPORT);
	ck_assert_int_eq(mt_frame_page_kind("f", "/v/memtrace/tracker.py", 0), MT_FRAME_MEMTRACE);
	ck_assert_int_eq(mt_frame_page_kind("f", "/app/x.py", 0), MT_FRAME_SHOWN);
	ck_assert_int_eq(mt_frame_page_kind("f", NULL, 0), MT_FRAME_SHOWN);
}
END_TEST

static Suite *frames_suite(void)
{
	Suite *s = suite_create("frames");
	TCase *tc = tcase_create("frames");

	tcase_add_test(tc, test_import_system);
	tcase_add_test(tc, test_memtrace_package);
	tcase_add_test(tc, test_page_kind);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(frames_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
