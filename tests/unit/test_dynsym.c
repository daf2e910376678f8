/* SPDX-License-Identifier: MIT */
/* The payload's dynamic-symbol reader: real tables (this process's libc, a
 * pyenv libpython3.11.so when there is one) and hand-made ones that are
 * truncated or corrupt, which it must refuse without reading outside them
 * (run under valgrind or ASan to check the "without"). */
#include "payload/dynsym.h"

#include <check.h>
#include <dlfcn.h>  /* dlopen, dlsym, dlinfo */
#include <elf.h>    /* DT_*, PT_*, STT_* */
#include <glob.h>   /* glob */
#include <link.h>   /* dl_iterate_phdr, struct link_map */
#include <stdio.h>  /* printf */
#include <stdlib.h> /* EXIT_SUCCESS, getenv */
#include <string.h> /* strstr */

/* ------------------------------------------------------------------------
 * Real objects
 * ---------------------------------------------------------------------- */
struct by_name {
	const char *part; /* of the object's path */
	struct mt_dynsym t;
	int opened;
	char path[4096];
};

static int by_name_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct by_name *b = arg;
	(void)size;
	if (!info->dlpi_name || !strstr(info->dlpi_name, b->part))
		return 0;
	b->opened = mt_dynsym_open(&b->t, info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum) == 0;
	snprintf(b->path, sizeof(b->path), "%s", info->dlpi_name);
	return 1;
}

/* @name is defined in @b's table at the address dlsym gives in @h. */
static void check_defined(const struct by_name *b, void *h, const char *name)
{
	const ElfW(Sym) *s = mt_dynsym_lookup(&b->t, name);
	ck_assert_msg(s != NULL, "%s not found in %s", name, b->path);
	ck_assert(mt_dynsym_defined(s));
	ck_assert_ptr_eq((void *)(b->t.base + s->st_value), dlsym(h, name));
	ck_assert_str_eq(mt_dynsym_name(&b->t, (size_t)(s - b->t.symtab)), name);
}

START_TEST(test_dynsym_libc)
{
	struct by_name b = { .part = "libc.so" };
	dl_iterate_phdr(by_name_cb, &b);
	ck_assert(b.opened);
	void *h = dlopen(b.path, RTLD_NOLOAD | RTLD_LAZY);
	ck_assert_ptr_nonnull(h);
	check_defined(&b, h, "printf");
	check_defined(&b, h, "dl_iterate_phdr");
	check_defined(&b, h, "environ");
	ck_assert_ptr_null(mt_dynsym_lookup(&b.t, "mt_no_such_symbol"));
	ck_assert_ptr_null(mt_dynsym_lookup(&b.t, ""));
	ck_assert_str_eq(mt_dynsym_name(&b.t, b.t.nsyms), "");
	ck_assert_str_eq(mt_dynsym_name(&b.t, (size_t)-1), "");
	dlclose(h);

	/* the finder: the first object that defines it, ourselves aside */
	char path[4096];
	ck_assert_int_eq(mt_dynsym_find("printf", path, sizeof(path)), 1);
	ck_assert_str_eq(path, b.path);
	ck_assert_int_eq(mt_dynsym_find("printf", path, 4), 0); /* does not fit */
	ck_assert_int_eq(mt_dynsym_find("mt_no_such_symbol", path, sizeof(path)), 0);
}
END_TEST

START_TEST(test_dynsym_libpython)
{
	const char *home = getenv("HOME");
	char pattern[4096];
	glob_t g;

	snprintf(pattern, sizeof(pattern), "%s/.pyenv/versions/3.11.*/lib/libpython3.11.so",
		 home ? home : "/root");
	if (glob(pattern, 0, NULL, &g) != 0) {
		printf("test_dynsym_libpython: skipped, no %s\n", pattern);
		return;
	}
	void *h = dlopen(g.gl_pathv[0], RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h != NULL, "%s", dlerror());
	struct link_map *lm;
	ck_assert_int_eq(dlinfo(h, RTLD_DI_LINKMAP, &lm), 0);
	struct by_name b = { .part = lm->l_name };
	dl_iterate_phdr(by_name_cb, &b);
	ck_assert(b.opened);
	ck_assert(b.t.gnu_hash != NULL);
	check_defined(&b, h, "Py_GetVersion");
	check_defined(&b, h, "Py_Version");
	check_defined(&b, h, "PyGILState_Ensure");
	check_defined(&b, h, "PyGILState_Release");
	check_defined(&b, h, "PyMem_SetAllocator");
	check_defined(&b, h, "PyCode_Type");
	/* an import: not in the GNU hash, or not a definition */
	const ElfW(Sym) *m = mt_dynsym_lookup(&b.t, "malloc");
	ck_assert(m == NULL || !mt_dynsym_defined(m));
	ck_assert_ptr_null(mt_dynsym_lookup(&b.t, "Py_NoSuchFunction"));

	char path[4096];
	ck_assert_int_eq(mt_dynsym_find("Py_GetVersion", path, sizeof(path)), 1);
	ck_assert_str_eq(path, lm->l_name);
	globfree(&g);
}
END_TEST

/* ------------------------------------------------------------------------
 * Hand-made tables: one heap block holding the dynamic section, symbols,
 * strings and the hash table last, one PT_LOAD covering exactly the block,
 * so that any read past a table is a read past the block.
 * ---------------------------------------------------------------------- */
#define OFF_SYM 256
#define OFF_STR 448
#define OFF_HASH 512
#define FAKE_SIZE 576 /* 16 hash words */
#define NSYM 3        /* "", "alpha", "beta" */

struct fake {
	unsigned char *mem;
	ElfW(Phdr) ph[2];
	ElfW(Dyn) *dyn;
	ElfW(Sym) *sym;
	char *str;
	uint32_t *hash;
	size_t nhash; /* words of room for the hash table */
};

static uint32_t gnu_hash(const char *s)
{
	uint32_t h = 5381;
	while (*s)
		h = h * 33 + (unsigned char)*s++;
	return h;
}

static void fake_dyn(struct fake *f, int i, ElfW(Sxword) tag, ElfW(Xword) val)
{
	f->dyn[i].d_tag = tag;
	f->dyn[i].d_un.d_val = val;
}

/* A good table with a SysV (@gnu 0) or GNU hash, one bucket. */
static void fake_make(struct fake *f, int gnu)
{
	f->mem = calloc(1, FAKE_SIZE);
	ck_assert_ptr_nonnull(f->mem);
	uintptr_t a = (uintptr_t)f->mem;
	f->dyn = (ElfW(Dyn) *)f->mem;
	f->sym = (ElfW(Sym) *)(f->mem + OFF_SYM);
	f->str = (char *)f->mem + OFF_STR;
	f->hash = (uint32_t *)(f->mem + OFF_HASH);
	f->nhash = (FAKE_SIZE - OFF_HASH) / 4;
	memcpy(f->str, "\0alpha\0beta", 12);
	for (int i = 1; i < NSYM; i++) {
		f->sym[i].st_name = i == 1 ? 1 : 7;
		f->sym[i].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
		f->sym[i].st_shndx = 1;
		f->sym[i].st_value = 0x1000u * (unsigned)i;
	}
	fake_dyn(f, 0, DT_SYMTAB, a + OFF_SYM);
	fake_dyn(f, 1, DT_STRTAB, a + OFF_STR);
	fake_dyn(f, 2, DT_STRSZ, 12);
	fake_dyn(f, 3, DT_SYMENT, sizeof(ElfW(Sym)));
	fake_dyn(f, 4, gnu ? DT_GNU_HASH : DT_HASH, a + OFF_HASH);
	fake_dyn(f, 5, DT_NULL, 0);
	if (gnu) {
		/* nbuckets 1, symoffset 1, one bloom word (all ones), shift 0 */
		uint32_t *h = f->hash;
		h[0] = 1, h[1] = 1, h[2] = 1, h[3] = 0;
		h[4] = h[5] = 0xffffffffu;
		h[6] = 1;                              /* bucket 0: symbol 1 */
		h[7] = gnu_hash("alpha") & ~1u;        /* chain: symbol 1 */
		h[8] = gnu_hash("beta") | 1u;          /* symbol 2, the end */
	} else {
		uint32_t *h = f->hash;
		h[0] = 1, h[1] = NSYM; /* nbucket, nchain */
		h[2] = 2;              /* bucket 0: symbol 2 */
		h[3] = 0, h[4] = 0, h[5] = 1; /* chain: 2 -> 1 -> end */
	}
	f->ph[0] = (ElfW(Phdr)){ .p_type = PT_LOAD, .p_vaddr = a, .p_memsz = FAKE_SIZE };
	f->ph[1] = (ElfW(Phdr)){ .p_type = PT_DYNAMIC, .p_vaddr = a };
}

static int fake_open(struct fake *f, struct mt_dynsym *t)
{
	return mt_dynsym_open(t, 0, f->ph, 2);
}

static void fake_check_good(struct fake *f)
{
	struct mt_dynsym t;
	ck_assert_int_eq(fake_open(f, &t), 0);
	ck_assert_ptr_eq(mt_dynsym_lookup(&t, "alpha"), &f->sym[1]);
	ck_assert_ptr_eq(mt_dynsym_lookup(&t, "beta"), &f->sym[2]);
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "gamma"));
}

START_TEST(test_dynsym_fake_good)
{
	struct fake f;
	for (int gnu = 0; gnu < 2; gnu++) {
		fake_make(&f, gnu);
		fake_check_good(&f);
		ck_assert(mt_dynsym_defined(&f.sym[1]));
		f.sym[2].st_shndx = SHN_UNDEF; /* an import: found, not defined */
		fake_check_good(&f);
		ck_assert(!mt_dynsym_defined(&f.sym[2]));
		free(f.mem);
	}
}
END_TEST

START_TEST(test_dynsym_fake_names)
{
	struct fake f;
	struct mt_dynsym t;
	for (int gnu = 0; gnu < 2; gnu++) {
		/* st_name past DT_STRSZ */
		fake_make(&f, gnu);
		f.sym[2].st_name = 12 + 50;
		ck_assert_int_eq(fake_open(&f, &t), 0);
		ck_assert_str_eq(mt_dynsym_name(&t, 2), "");
		ck_assert_ptr_null(mt_dynsym_lookup(&t, "beta"));
		ck_assert_ptr_eq(mt_dynsym_lookup(&t, "alpha"), &f.sym[1]);
		f.sym[2].st_name = 0xffffffffu;
		ck_assert_int_eq(fake_open(&f, &t), 0);
		ck_assert_ptr_null(mt_dynsym_lookup(&t, "beta"));
		free(f.mem);

		/* DT_STRSZ ends inside "beta": no NUL before it */
		fake_make(&f, gnu);
		fake_dyn(&f, 2, DT_STRSZ, 9);
		ck_assert_int_eq(fake_open(&f, &t), 0);
		ck_assert_str_eq(mt_dynsym_name(&t, 2), "");
		ck_assert_ptr_null(mt_dynsym_lookup(&t, "beta"));
		free(f.mem);
	}
}
END_TEST

START_TEST(test_dynsym_fake_refused)
{
	struct fake f;
	struct mt_dynsym t;

	fake_make(&f, 0);
	fake_dyn(&f, 3, DT_SYMENT, 16); /* not an ElfW(Sym) */
	ck_assert_int_eq(fake_open(&f, &t), -1);
	fake_dyn(&f, 3, DT_SYMENT, sizeof(ElfW(Sym)));
	fake_dyn(&f, 2, DT_STRSZ, FAKE_SIZE); /* strings past the segment */
	ck_assert_int_eq(fake_open(&f, &t), -1);
	fake_dyn(&f, 2, DT_STRSZ, 12);
	fake_dyn(&f, 0, DT_SYMTAB, (uintptr_t)f.mem + FAKE_SIZE); /* outside */
	ck_assert_int_eq(fake_open(&f, &t), -1);
	fake_dyn(&f, 0, DT_STRTAB, 0); /* and no symbols at all */
	fake_dyn(&f, 1, DT_NULL, 0);
	ck_assert_int_eq(fake_open(&f, &t), -1);
	f.ph[1].p_type = PT_NULL; /* no dynamic section */
	ck_assert_int_eq(fake_open(&f, &t), -1);
	free(f.mem);
}
END_TEST

START_TEST(test_dynsym_fake_sysv)
{
	struct fake f;
	struct mt_dynsym t;

	/* counts past the table: the hash is dropped, nothing is found */
	fake_make(&f, 0);
	f.hash[1] = 1000; /* nchain */
	ck_assert_int_eq(fake_open(&f, &t), 0);
	ck_assert_ptr_null(t.sysv_hash);
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "alpha"));
	f.hash[1] = NSYM;
	f.hash[0] = 0x7fffffffu; /* nbucket */
	ck_assert_int_eq(fake_open(&f, &t), 0);
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "beta"));
	f.hash[0] = 0;
	ck_assert_int_eq(fake_open(&f, &t), 0);
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "beta"));
	free(f.mem);

	/* a bucket and a chain entry past nchain, a chain that loops */
	fake_make(&f, 0);
	f.hash[2] = 7;
	ck_assert_int_eq(fake_open(&f, &t), 0);
	ck_assert_uint_eq(t.nsyms, NSYM);
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "alpha"));
	ck_assert_str_eq(mt_dynsym_name(&t, NSYM), "");
	f.hash[2] = 2, f.hash[3 + 2] = 0xffffu;
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "alpha"));
	f.hash[3 + 2] = 1, f.hash[3 + 1] = 2; /* 2 -> 1 -> 2 -> ... */
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "gamma"));
	ck_assert_ptr_eq(mt_dynsym_lookup(&t, "alpha"), &f.sym[1]);
	free(f.mem);
}
END_TEST

START_TEST(test_dynsym_fake_gnu)
{
	struct fake f;
	struct mt_dynsym t;

	/* counts past the table: the hash is dropped */
	fake_make(&f, 1);
	f.hash[0] = 1000; /* nbuckets */
	ck_assert_int_eq(fake_open(&f, &t), 0);
	ck_assert_ptr_null(t.gnu_hash);
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "alpha"));
	f.hash[0] = 1;
	f.hash[2] = 0x40000000u; /* bloom words */
	ck_assert_int_eq(fake_open(&f, &t), 0);
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "alpha"));
	free(f.mem);

	/* a bucket past the symbols; below symoffset */
	fake_make(&f, 1);
	f.hash[6] = 0x7ffffff0u;
	ck_assert_int_eq(fake_open(&f, &t), 0);
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "alpha"));
	f.hash[1] = 2; /* symoffset above the bucket's symbol 1 */
	f.hash[6] = 1;
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "alpha"));
	free(f.mem);

	/* a chain with no end: stops at the end of the block */
	fake_make(&f, 1);
	for (size_t i = 7; i < f.nhash; i++)
		f.hash[i] = 0x12345678u & ~1u;
	ck_assert_int_eq(fake_open(&f, &t), 0);
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "alpha"));
	ck_assert_ptr_null(mt_dynsym_lookup(&t, "gamma"));
	free(f.mem);
}
END_TEST

static Suite *dynsym_suite(void)
{
	Suite *s = suite_create("dynsym");
	TCase *tc = tcase_create("dynsym");

	tcase_add_test(tc, test_dynsym_libc);
	tcase_add_test(tc, test_dynsym_libpython);
	tcase_add_test(tc, test_dynsym_fake_good);
	tcase_add_test(tc, test_dynsym_fake_names);
	tcase_add_test(tc, test_dynsym_fake_refused);
	tcase_add_test(tc, test_dynsym_fake_sysv);
	tcase_add_test(tc, test_dynsym_fake_gnu);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(dynsym_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
