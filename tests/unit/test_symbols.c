/* SPDX-License-Identifier: MIT */
/* The native symbolizer (reader/symbols.h) on a fixture library built
 * -g -O2 (tests/targets/symfixture.c) and on copies of it: stripped,
 * moved under a .build-id tree, truncated, replaced by text; and on
 * /usr/bin/python3.11's .dynsym when it is there. */
#include "reader/symbols.h"

#include <check.h>
#include <dlfcn.h>    /* dlopen, dladdr1 */
#include <errno.h>    /* EINVAL */
#include <fcntl.h>    /* open */
#include <ftw.h>      /* nftw */
#include <gelf.h>     /* gelf_getnote, gelf_getsym */
#include <link.h>     /* struct link_map */
#include <stdio.h>    /* snprintf */
#include <stdlib.h>   /* mkdtemp */
#include <string.h>   /* strcmp */
#include <sys/stat.h> /* mkdir */
#include <unistd.h>   /* close */

#ifndef SYMFIXTURE
#error "SYMFIXTURE: the fixture library's path, from tests/meson.build"
#endif

static char tmpdir[64];

static void tmp_setup(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/mt-symbols-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void tmp_teardown(void)
{
	nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The GNU build-id note of the ELF file @path, read with libelf alone.
 * Returns its length (0: none) into @id[0..cap). */
static size_t file_build_id(const char *path, uint8_t *id, size_t cap)
{
	size_t len = 0;
	int fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	elf_version(EV_CURRENT);
	Elf *e = elf_begin(fd, ELF_C_READ, NULL);
	ck_assert_ptr_nonnull(e);
	for (Elf_Scn *scn = NULL; !len && (scn = elf_nextscn(e, scn));) {
		GElf_Shdr sh;
		Elf_Data *d;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE || !(d = elf_getdata(scn, NULL)))
			continue;
		GElf_Nhdr nh;
		size_t off = 0, name_off, desc_off, next;
		while ((next = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
			if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
			    memcmp((char *)d->d_buf + name_off, "GNU", 4) == 0 && nh.n_descsz <= cap) {
				memcpy(id, (char *)d->d_buf + desc_off, nh.n_descsz);
				len = nh.n_descsz;
				break;
			}
			off = next;
		}
	}
	elf_end(e);
	close(fd);
	return len;
}

/* Calls a() of the fixture at @path: its return address inside a(), and
 * the library's load bias. Lines of the b() and leaf() calls if asked. */
static void call_fixture(const char *path, uintptr_t *ra, uintptr_t *bias, unsigned *b_line,
			 unsigned *leaf_line)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h != NULL, "dlopen %s: %s", path, dlerror());
	void *(*a)(void) = (void *(*)(void))dlsym(h, "a");
	ck_assert_ptr_nonnull(a);
	*ra = (uintptr_t)a();
	Dl_info info;
	struct link_map *lm = NULL;
	ck_assert_int_ne(dladdr1((void *)*ra, &info, (void **)&lm, RTLD_DL_LINKMAP), 0);
	ck_assert_ptr_nonnull(lm);
	*bias = lm->l_addr;
	if (b_line) {
		*b_line = *(unsigned *)dlsym(h, "symfixture_b_line");
		*leaf_line = *(unsigned *)dlsym(h, "symfixture_leaf_line");
		ck_assert_uint_gt(*b_line, 0);
		ck_assert_uint_gt(*leaf_line, 0);
		ck_assert_uint_ne(*leaf_line, *b_line);
	}
}

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n >= m && strcmp(s + n - m, tail) == 0;
}

/* Copies the first @limit bytes of @src (all if larger) to @dst. */
static void copy_file(const char *src, const char *dst, size_t limit)
{
	FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
	char buf[4096];
	size_t n;

	ck_assert_ptr_nonnull(in);
	ck_assert_ptr_nonnull(out);
	while (limit && (n = fread(buf, 1, limit < sizeof(buf) ? limit : sizeof(buf), in)) > 0) {
		ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
		limit -= n;
	}
	fclose(in);
	ck_assert_int_eq(fclose(out), 0);
}

/* The fixture's a() -> inlined b() -> leaf(), resolved at leaf's return
 * address with the recorded build-id and the module at @path. */
static void check_inlined(struct mt_symbols *s, int mod)
{
	uintptr_t ra, bias;
	unsigned b_line, leaf_line;
	struct mt_symframe f[8], g[8];

	call_fixture(SYMFIXTURE, &ra, &bias, &b_line, &leaf_line);
	size_t n = mt_symbols_resolve(s, mod, ra - 1 - bias, f, 8);
	ck_assert_uint_eq(n, 2);
	ck_assert_str_eq(f[0].function, "b");
	ck_assert_uint_eq(f[0].inlined, 1);
	ck_assert_ptr_nonnull(f[0].file);
	ck_assert_msg(ends_with(f[0].file, "/symfixture.c"), "file %s", f[0].file);
	ck_assert_uint_eq(f[0].line, leaf_line);
	ck_assert_str_eq(f[1].function, "a");
	ck_assert_uint_eq(f[1].inlined, 0);
	ck_assert_ptr_eq(f[1].file, f[0].file); /* interned */
	ck_assert_uint_eq(f[1].line, b_line);

	/* cached: the same strings, not copies */
	ck_assert_uint_eq(mt_symbols_resolve(s, mod, ra - 1 - bias, g, 8), 2);
	for (int i = 0; i < 2; i++) {
		ck_assert_ptr_eq(g[i].function, f[i].function);
		ck_assert_ptr_eq(g[i].file, f[i].file);
		ck_assert_uint_eq(g[i].line, f[i].line);
		ck_assert_uint_eq(g[i].inlined, f[i].inlined);
	}
	/* a short buffer takes the innermost frames */
	ck_assert_uint_eq(mt_symbols_resolve(s, mod, ra - 1 - bias, g, 1), 1);
	ck_assert_ptr_eq(g[0].function, f[0].function);
}

START_TEST(test_symbols_inlined_frames)
{
	uint8_t id[64];
	size_t idlen = file_build_id(SYMFIXTURE, id, sizeof(id));
	struct mt_symbols *s = mt_symbols_new();
	struct mt_symbols_stats st;
	uintptr_t ra, bias;

	ck_assert_uint_gt(idlen, 0);
	call_fixture(SYMFIXTURE, &ra, &bias, NULL, NULL);
	int mod = mt_symbols_add_module(s, SYMFIXTURE, id, idlen, bias);
	ck_assert_int_eq(mod, 0);
	check_inlined(s, mod);
	mt_symbols_stats(s, &st);
	ck_assert_uint_eq(st.addresses, 1);
	ck_assert_uint_eq(st.unresolved, 0);
	ck_assert_uint_eq(st.modules, 1);
	ck_assert_uint_eq(st.modules_missing, 0);

	/* without a recorded build-id the file is taken as it is */
	ck_assert_int_eq(mt_symbols_add_module(s, SYMFIXTURE, NULL, 0, bias), 1);
	check_inlined(s, 1);
	mt_symbols_free(s);
}
END_TEST

START_TEST(test_symbols_stripped_dynsym)
{
	uint8_t id[64];
	size_t idlen = file_build_id(SYMFIXTURE_STRIPPED, id, sizeof(id));
	struct mt_symbols *s = mt_symbols_new();
	struct mt_symframe f[4];
	uintptr_t ra, bias;

	call_fixture(SYMFIXTURE_STRIPPED, &ra, &bias, NULL, NULL);
	int mod = mt_symbols_add_module(s, SYMFIXTURE_STRIPPED, id, idlen, bias);
	ck_assert_uint_eq(mt_symbols_resolve(s, mod, ra - 1 - bias, f, 4), 1);
	ck_assert_str_eq(f[0].function, "a"); /* exported, so in .dynsym */
	ck_assert_ptr_null(f[0].file);
	ck_assert_uint_eq(f[0].line, 0);
	ck_assert_uint_eq(f[0].inlined, 0);
	mt_symbols_free(s);
}
END_TEST

START_TEST(test_symbols_missing_module)
{
	static const uint8_t id[20] = { 0xde, 0xad, 0xbe, 0xef };
	struct mt_symbols *s = mt_symbols_new();
	struct mt_symbols_stats st;
	struct mt_symframe f[4];

	ck_assert_int_eq(mt_symbols_set_debug_roots(s, tmpdir), 0);
	int mod = mt_symbols_add_module(s, "/nonexistent/dir/libgone.so.1", id, sizeof(id), 0x7f00);
	ck_assert_uint_eq(mt_symbols_resolve(s, mod, 0x1234, f, 4), 1);
	ck_assert_str_eq(f[0].function, "libgone.so.1+0x1234");
	ck_assert_ptr_null(f[0].file);
	ck_assert_uint_eq(f[0].line, 0);
	ck_assert_uint_eq(f[0].inlined, 0);
	ck_assert_uint_eq(mt_symbols_resolve(s, mod, 0xabc, f, 4), 1);
	ck_assert_str_eq(f[0].function, "libgone.so.1+0xabc");
	ck_assert_int_eq(mt_symbols_set_debug_roots(s, "/x"), -EINVAL); /* too late */
	mt_symbols_stats(s, &st);
	ck_assert_uint_eq(st.addresses, 2);
	ck_assert_uint_eq(st.unresolved, 2);
	ck_assert_uint_eq(st.modules, 1);
	ck_assert_uint_eq(st.modules_missing, 1); /* a module counts once */
	mt_symbols_free(s);
}
END_TEST

START_TEST(test_symbols_build_id_mismatch)
{
	uint8_t id[64];
	size_t idlen = file_build_id(SYMFIXTURE, id, sizeof(id));
	struct mt_symbols *s = mt_symbols_new();
	struct mt_symbols_stats st;
	struct mt_symframe f[4];
	uintptr_t ra, bias;

	call_fixture(SYMFIXTURE, &ra, &bias, NULL, NULL);
	ck_assert_int_eq(mt_symbols_set_debug_roots(s, tmpdir), 0);
	id[0] ^= 0xff;
	int mod = mt_symbols_add_module(s, SYMFIXTURE, id, idlen, bias);
	char want[128];
	snprintf(want, sizeof(want), "libmt-symfixture.so+0x%lx", (unsigned long)(ra - 1 - bias));
	ck_assert_uint_eq(mt_symbols_resolve(s, mod, ra - 1 - bias, f, 4), 1);
	ck_assert_str_eq(f[0].function, want);
	ck_assert_ptr_null(f[0].file);
	mt_symbols_stats(s, &st);
	ck_assert_uint_eq(st.modules_missing, 1);
	mt_symbols_free(s);
}
END_TEST

/* A module whose file is gone but whose build-id names a copy under a
 * debug root: <root>/.build-id/xx/rest.debug, then .../rest. */
START_TEST(test_symbols_found_by_build_id)
{
	uint8_t id[64];
	size_t idlen = file_build_id(SYMFIXTURE, id, sizeof(id));
	char dir[256], path[512], hex[130];
	uintptr_t ra, bias;

	ck_assert_uint_ge(idlen, 2);
	for (size_t i = 0; i < idlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", id[i]);
	snprintf(dir, sizeof(dir), "%s/.build-id", tmpdir);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(dir, sizeof(dir), "%s/.build-id/%.2s", tmpdir, hex);
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	call_fixture(SYMFIXTURE, &ra, &bias, NULL, NULL);

	for (int debug = 1; debug >= 0; debug--) {
		struct mt_symbols *s = mt_symbols_new();
		struct mt_symbols_stats st;
		snprintf(path, sizeof(path), "%s/%s%s", dir, hex + 2, debug ? ".debug" : "");
		copy_file(SYMFIXTURE, path, SIZE_MAX);
		ck_assert_int_eq(mt_symbols_set_debug_roots(s, tmpdir), 0);
		int mod = mt_symbols_add_module(s, "/nonexistent/libmt-symfixture.so", id, idlen, bias);
		check_inlined(s, mod);
		mt_symbols_stats(s, &st);
		ck_assert_uint_eq(st.modules_missing, 0);
		mt_symbols_free(s);
		ck_assert_int_eq(unlink(path), 0);
	}
}
END_TEST

/* Runs @cmd through the shell; 0 if it exited 0. */
static int run(const char *cmd)
{
	int st = system(cmd);
	return st == 0 ? 0 : -1;
}

/* The fixture stripped of its DWARF, which is in a separate file found by
 * build-id under a debug root, or else by .gnu_debuglink beside it. */
START_TEST(test_symbols_separate_debuginfo)
{
	uint8_t id[64];
	size_t idlen = file_build_id(SYMFIXTURE, id, sizeof(id));
	char cmd[4096], lib[256], dbg[512], hex[130];
	uintptr_t ra, bias;

	if (run("objcopy --version >/dev/null 2>&1") != 0) {
		fprintf(stderr, "test_symbols_separate_debuginfo: skipped, no objcopy\n");
		return;
	}
	for (size_t i = 0; i < idlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", id[i]);
	call_fixture(SYMFIXTURE, &ra, &bias, NULL, NULL);

	/* by build-id: <root>/.build-id/xx/rest.debug */
	snprintf(lib, sizeof(lib), "%s/libmt-symfixture.so", tmpdir);
	snprintf(dbg, sizeof(dbg), "%s/root/.build-id/%.2s", tmpdir, hex);
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p %s && objcopy --only-keep-debug %s %s/%s.debug && "
		 "objcopy --strip-debug %s %s", dbg, SYMFIXTURE, dbg, hex + 2, SYMFIXTURE, lib);
	ck_assert_int_eq(run(cmd), 0);
	snprintf(dbg, sizeof(dbg), "%s/root", tmpdir);
	struct mt_symbols *s = mt_symbols_new();
	ck_assert_int_eq(mt_symbols_set_debug_roots(s, dbg), 0);
	check_inlined(s, mt_symbols_add_module(s, lib, id, idlen, bias));
	mt_symbols_free(s);

	/* by debuglink, beside the file */
	snprintf(cmd, sizeof(cmd),
		 "rm -r %s/root && objcopy --only-keep-debug %s %s/fixture.dbg && "
		 "objcopy --strip-debug --add-gnu-debuglink=%s/fixture.dbg %s %s",
		 tmpdir, SYMFIXTURE, tmpdir, tmpdir, SYMFIXTURE, lib);
	ck_assert_int_eq(run(cmd), 0);
	s = mt_symbols_new();
	ck_assert_int_eq(mt_symbols_set_debug_roots(s, dbg), 0);
	check_inlined(s, mt_symbols_add_module(s, lib, id, idlen, bias));
	mt_symbols_free(s);

	/* and with neither, the symbol table alone */
	snprintf(cmd, sizeof(cmd), "rm %s/fixture.dbg", tmpdir);
	ck_assert_int_eq(run(cmd), 0);
	s = mt_symbols_new();
	struct mt_symframe f[4];
	ck_assert_int_eq(mt_symbols_set_debug_roots(s, dbg), 0);
	int mod = mt_symbols_add_module(s, lib, id, idlen, bias);
	ck_assert_uint_eq(mt_symbols_resolve(s, mod, ra - 1 - bias, f, 4), 1);
	ck_assert_str_eq(f[0].function, "a");
	ck_assert_ptr_null(f[0].file);
	mt_symbols_free(s);
}
END_TEST

/* Files that are not what they claim: text, truncated ELF, a directory.
 * Each resolves without a crash, to at least one named frame. */
START_TEST(test_symbols_garbage_files)
{
	uint8_t id[64];
	size_t idlen = file_build_id(SYMFIXTURE, id, sizeof(id));
	struct stat st;
	char path[256];
	struct mt_symframe f[16];
	struct mt_symbols *s = mt_symbols_new();
	uintptr_t ra, bias;
	const size_t cuts[] = { 0, 16, 64, 700, 4096, 8192, 12000 };

	ck_assert_int_eq(stat(SYMFIXTURE, &st), 0);
	call_fixture(SYMFIXTURE, &ra, &bias, NULL, NULL);
	ck_assert_int_eq(mt_symbols_set_debug_roots(s, tmpdir), 0);

	snprintf(path, sizeof(path), "%s/notes.txt", tmpdir);
	FILE *t = fopen(path, "w");
	ck_assert_ptr_nonnull(t);
	fputs("not an ELF file\n", t);
	fclose(t);
	int mod = mt_symbols_add_module(s, path, NULL, 0, 0);
	ck_assert_uint_eq(mt_symbols_resolve(s, mod, 0x10, f, 16), 1);
	ck_assert_str_eq(f[0].function, "notes.txt+0x10");
	mod = mt_symbols_add_module(s, tmpdir, NULL, 0, 0);
	ck_assert_uint_eq(mt_symbols_resolve(s, mod, 0x10, f, 16), 1);

	for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]) + 1; c++) {
		size_t cut = c < sizeof(cuts) / sizeof(cuts[0]) ? cuts[c] : (size_t)st.st_size / 2;
		snprintf(path, sizeof(path), "%s/cut-%zu.so", tmpdir, cut);
		copy_file(SYMFIXTURE, path, cut);
		for (int with_id = 0; with_id < 2; with_id++) {
			mod = mt_symbols_add_module(s, path, with_id ? id : NULL, with_id ? idlen : 0, 0);
			ck_assert_int_ge(mod, 0);
			const uint64_t offs[] = { 0, 1, ra - 1 - bias, 0x10000000, UINT64_MAX };
			for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
				size_t n = mt_symbols_resolve(s, mod, offs[i], f, 16);
				ck_assert_uint_ge(n, 1);
				for (size_t k = 0; k < n; k++)
					ck_assert_ptr_nonnull(f[k].function);
			}
		}
	}
	mt_symbols_free(s);
}
END_TEST

START_TEST(test_symbols_bad_input)
{
	uint8_t id[64];
	size_t idlen = file_build_id(SYMFIXTURE, id, sizeof(id));
	struct mt_symbols *s = mt_symbols_new();
	struct mt_symbols_stats st;
	struct mt_symframe f[4];
	char want[64];

	ck_assert_uint_eq(mt_symbols_resolve(s, 0, 0x10, f, 4), 1); /* no module yet */
	ck_assert_str_eq(f[0].function, "<unknown>+0x10");
	ck_assert_ptr_null(f[0].file);
	ck_assert_uint_eq(mt_symbols_resolve(s, -1, 0x10, f, 4), 1);
	ck_assert_str_eq(f[0].function, "<unknown>+0x10");
	ck_assert_uint_eq(mt_symbols_resolve(s, 7, 0x10, f, 0), 0);
	int mod = mt_symbols_add_module(s, SYMFIXTURE, id, idlen, 0);
	ck_assert_uint_eq(mt_symbols_resolve(s, mod + 1, 0x20, f, 4), 1);
	ck_assert_str_eq(f[0].function, "<unknown>+0x20");

	/* past the end of the module, and at its ELF header */
	const uint64_t offs[] = { UINT64_MAX, 0x7fffffff, 0 };
	for (size_t i = 0; i < 3; i++) {
		ck_assert_uint_eq(mt_symbols_resolve(s, mod, offs[i], f, 4), 1);
		snprintf(want, sizeof(want), "libmt-symfixture.so+0x%llx", (unsigned long long)offs[i]);
		ck_assert_str_eq(f[0].function, want);
	}
	mt_symbols_stats(s, &st);
	ck_assert_uint_eq(st.modules_missing, 0);
	ck_assert_uint_eq(st.unresolved, 3); /* bad modules are not counted */
	ck_assert_uint_eq(st.addresses, 3);

	/* module 0 now exists: nothing was cached for it */
	ck_assert_uint_eq(mt_symbols_resolve(s, 0, 0x10, f, 4), 1);
	ck_assert_str_eq(f[0].function, "libmt-symfixture.so+0x10");
	mt_symbols_free(s);
	mt_symbols_free(NULL);
}
END_TEST

/* Enough distinct addresses and names for the cache and the string set
 * to grow several times; each comes back the same from the cache. */
START_TEST(test_symbols_cache_grows)
{
	struct mt_symbols *s = mt_symbols_new();
	struct mt_symbols_stats st;
	struct mt_symframe f, g;
	const char *first = NULL;

	ck_assert_int_eq(mt_symbols_set_debug_roots(s, tmpdir), 0);
	int mod = mt_symbols_add_module(s, "/nonexistent/libx.so", NULL, 0, 0);
	for (uint64_t off = 0; off < 5000; off++) {
		ck_assert_uint_eq(mt_symbols_resolve(s, mod, off * 4, &f, 1), 1);
		if (!off)
			first = f.function;
	}
	for (uint64_t off = 0; off < 5000; off++) {
		char want[64];
		snprintf(want, sizeof(want), "libx.so+0x%llx", (unsigned long long)(off * 4));
		ck_assert_uint_eq(mt_symbols_resolve(s, mod, off * 4, &g, 1), 1);
		ck_assert_str_eq(g.function, want);
	}
	ck_assert_uint_eq(mt_symbols_resolve(s, mod, 0, &g, 1), 1);
	ck_assert_ptr_eq(g.function, first);
	mt_symbols_stats(s, &st);
	ck_assert_uint_eq(st.addresses, 5000);
	ck_assert_uint_eq(st.modules_missing, 1);
	mt_symbols_free(s);
}
END_TEST

/* The offset of @name in @path's .dynsym (0: not found). */
static uint64_t dynsym_value(const char *path, const char *name)
{
	uint64_t value = 0;
	int fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	elf_version(EV_CURRENT);
	Elf *e = elf_begin(fd, ELF_C_READ, NULL);
	ck_assert_ptr_nonnull(e);
	for (Elf_Scn *scn = NULL; !value && (scn = elf_nextscn(e, scn));) {
		GElf_Shdr sh;
		Elf_Data *d;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *n;
			if (gelf_getsym(d, (int)i, &sym) && sym.st_value &&
			    (n = elf_strptr(e, sh.sh_link, sym.st_name)) && strcmp(n, name) == 0) {
				value = sym.st_value;
				break;
			}
		}
	}
	elf_end(e);
	close(fd);
	return value;
}

START_TEST(test_symbols_python)
{
	static const char py[] = "/usr/bin/python3.11";
	uint8_t id[64];

	if (access(py, R_OK) != 0) {
		fprintf(stderr, "test_symbols_python: skipped, no %s\n", py);
		return;
	}
	size_t idlen = file_build_id(py, id, sizeof(id));
	uint64_t at = dynsym_value(py, "Py_GetVersion");
	ck_assert_uint_ne(at, 0);
	struct mt_symbols *s = mt_symbols_new();
	struct mt_symframe f[8];
	int mod = mt_symbols_add_module(s, py, id, idlen, 0); /* ET_EXEC: no bias */
	size_t n = mt_symbols_resolve(s, mod, at + 1, f, 8);
	ck_assert_uint_ge(n, 1);
	ck_assert_str_eq(f[n - 1].function, "Py_GetVersion");
	ck_assert_uint_eq(f[n - 1].inlined, 0);
	mt_symbols_free(s);
}
END_TEST

static Suite *symbols_suite(void)
{
	Suite *s = suite_create("symbols");
	TCase *tc = tcase_create("symbols");

	tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_symbols_inlined_frames);
	tcase_add_test(tc, test_symbols_stripped_dynsym);
	tcase_add_test(tc, test_symbols_missing_module);
	tcase_add_test(tc, test_symbols_build_id_mismatch);
	tcase_add_test(tc, test_symbols_found_by_build_id);
	tcase_add_test(tc, test_symbols_separate_debuginfo);
	tcase_add_test(tc, test_symbols_garbage_files);
	tcase_add_test(tc, test_symbols_bad_input);
	tcase_add_test(tc, test_symbols_cache_grows);
	tcase_add_test(tc, test_symbols_python);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* never the network from a unit test */
	unsetenv("DEBUGINFOD_URLS");
	SRunner *sr = srunner_create(symbols_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
