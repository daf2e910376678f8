/* SPDX-License-Identifier: MIT */
/* The stack trie and code-object table alone (reader/stacks.h), and the
 * growth of dense arrays under it (util/grow.h). */
#include "reader/stacks.h"
#include "format/error.h"
#include "util/grow.h"

#include <check.h>
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* EXIT_SUCCESS */
#include <string.h> /* strlen */

static struct mt_bytes bytes(const char *s, uint32_t len)
{
	return (struct mt_bytes){ (const uint8_t *)s, len };
}

static int code(struct mt_stacks *k, uint32_t id, const char *file, const char *name,
		const char *qualname)
{
	struct mt_rec_code c = { .id = id, .firstlineno = 1 };
	c.filename = bytes(file, (uint32_t)strlen(file));
	c.name = bytes(name, (uint32_t)strlen(name));
	c.qualname = bytes(qualname, (uint32_t)strlen(qualname));
	return mt_stacks_define_code(k, &c);
}

static int stack(struct mt_stacks *k, uint32_t id, uint32_t parent, uint32_t code_id)
{
	struct mt_rec_stack r = { id, parent, code_id, 0 };
	return mt_stacks_define_stack(k, &r);
}

START_TEST(test_stacks_define_and_walk)
{
	struct mt_stacks k = { .python_hex = 0x030c0000 };
	struct mt_frame f[4];

	ck_assert_int_eq(code(&k, 1, "x.py", "main", ""), 1);
	ck_assert_int_eq(code(&k, 2, "x.py", "f", "C.f"), 1);
	ck_assert_int_eq(stack(&k, 1, 0, 1), 1);
	ck_assert_int_eq(stack(&k, 2, 1, 2), 1);
	ck_assert_int_eq(stack(&k, 3, 2, 7), 1); /* code 7 never defined */
	ck_assert_uint_eq(mt_stacks_walk(&k, 3, f, 4), 3);
	ck_assert_str_eq(f[0].function, "<unknown>");
	ck_assert_str_eq(f[1].function, "C.f"); /* the qualified name first */
	ck_assert_str_eq(f[2].function, "main");
	ck_assert_str_eq(f[2].file, "x.py");
	ck_assert_ptr_eq(f[1].file, f[2].file); /* interned */
	ck_assert_uint_eq(mt_stacks_parent(&k, 2), 1);
	ck_assert_uint_eq(mt_stacks_parent(&k, 1), 0);
	ck_assert_uint_eq(mt_stacks_parent(&k, 1000000), 0);
	ck_assert_uint_eq(mt_stacks_walk(&k, 0, f, 4), 0);
	ck_assert_uint_eq(mt_stacks_walk(&k, 500, f, 4), 1);
	ck_assert_str_eq(f[0].file, "<unknown>");

	/* a later definition of a code object replaces an earlier one and is
	 * not new; a stack node is defined once (the same record read again
	 * is no news, another is corruption) */
	ck_assert_int_eq(code(&k, 2, "y.py", "g", ""), 0);
	ck_assert_int_eq(stack(&k, 2, 1, 2), 0);
	ck_assert_int_eq(stack(&k, 3, 1, 2), -MT_ECORRUPT);
	ck_assert_int_eq(stack(&k, 2, 1, 1), -MT_ECORRUPT);
	ck_assert_uint_eq(mt_stacks_walk(&k, 2, f, 4), 2);
	ck_assert_str_eq(f[0].function, "g");
	ck_assert_str_eq(f[0].file, "y.py");

	/* names stop at their first NUL */
	struct mt_rec_code c = { .id = 3 };
	c.filename = bytes("z.py\0junk", 9);
	c.name = bytes("h\0", 2);
	ck_assert_int_eq(mt_stacks_define_code(&k, &c), 1);
	ck_assert_int_eq(stack(&k, 4, 0, 3), 1);
	mt_stacks_frame(&k, 4, f);
	ck_assert_str_eq(f[0].file, "z.py");
	ck_assert_str_eq(f[0].function, "h");

	/* a trie that loops stops at nodes_cap + 1 frames */
	ck_assert_int_eq(stack(&k, 5, 6, 1), 1);
	ck_assert_int_eq(stack(&k, 6, 5, 2), 1);
	ck_assert_uint_eq(mt_stacks_walk(&k, 5, f, 4), (size_t)k.nodes_cap + 1);
	mt_stacks_release(&k);
}
END_TEST

START_TEST(test_stacks_intern_many)
{
	struct mt_stacks k = { 0 };
	char name[32];
	struct mt_frame f;

	/* enough names for the intern set to rehash several times */
	for (uint32_t i = 1; i <= 3000; i++) {
		snprintf(name, sizeof(name), "fn%u", i);
		ck_assert_int_eq(code(&k, i, i % 2 ? "a.py" : "b.py", name, ""), 1);
		ck_assert_int_eq(stack(&k, i, 0, i), 1);
	}
	ck_assert_uint_eq(k.strs_n, 3002);
	for (uint32_t i = 1; i <= 3000; i++) {
		snprintf(name, sizeof(name), "fn%u", i);
		mt_stacks_frame(&k, i, &f);
		ck_assert_str_eq(f.function, name);
		ck_assert_str_eq(f.file, i % 2 ? "a.py" : "b.py");
	}
	mt_stacks_release(&k);
	ck_assert_ptr_null(k.strs);
}
END_TEST

START_TEST(test_grow)
{
	uint32_t *v = NULL, cap = 0;

	ck_assert_int_eq(mt_grow((void **)&v, &cap, 0, sizeof(*v)), 0);
	ck_assert_uint_eq(cap, 64);
	v[63] = 7;
	ck_assert_int_eq(mt_grow((void **)&v, &cap, 64, sizeof(*v)), 0);
	ck_assert_uint_eq(cap, 128);
	ck_assert_uint_eq(v[63], 7);
	ck_assert_int_eq(mt_grow((void **)&v, &cap, 1000, sizeof(*v)), 0);
	ck_assert_uint_eq(cap, 1024);
	for (uint32_t i = 64; i < cap; i++)
		ck_assert_uint_eq(v[i], 0); /* new elements are zero */
	/* big enough for huge pages, moved by mremap: kept, and zero after */
	for (uint32_t i = 0; i < cap; i++)
		v[i] = i + 1;
	ck_assert_int_eq(mt_grow((void **)&v, &cap, 3u << 20, sizeof(*v)), 0);
	ck_assert_uint_eq(cap, 4u << 20);
	ck_assert_uint_eq((uintptr_t)v % 64, 0); /* element 0 starts a line of the cache */
	uint32_t wrong = 0;
	for (uint32_t i = 0; i < cap; i++)
		wrong += v[i] != (i < 1024 ? i + 1 : 0);
	ck_assert_uint_eq(wrong, 0);
	/* a capacity told smaller than the array's (a grow beside it
	 * failed): grown again, nothing lost */
	uint32_t told = 1024;
	ck_assert_int_eq(mt_grow((void **)&v, &told, 2000, sizeof(*v)), 0);
	ck_assert_uint_eq(told, 2048);
	ck_assert_uint_eq(v[1023], 1024);
	ck_assert_uint_eq(v[1024], 0);
	mt_grow_free(v);
	mt_grow_free(NULL);
}
END_TEST

static Suite *stacks_suite(void)
{
	Suite *s = suite_create("stacks");
	TCase *tc = tcase_create("stacks");

	tcase_add_test(tc, test_stacks_define_and_walk);
	tcase_add_test(tc, test_stacks_intern_many);
	tcase_add_test(tc, test_grow);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(stacks_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
