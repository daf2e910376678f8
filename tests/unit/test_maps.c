/* SPDX-License-Identifier: MIT */
/* The injector's reader of /proc/PID/maps, on the test's own process:
 * libc's code, mappings the test makes (anonymous, a file whose name has a
 * space, a file deleted once mapped) and a hole between mappings. */
#include "inject/internal.h"
#include "util/procstat.h"

#include <check.h>
#include <dlfcn.h>    /* dladdr, dlsym */
#include <errno.h>    /* ENOENT */
#include <fcntl.h>    /* open */
#include <limits.h>   /* PATH_MAX, INT_MAX */
#include <stdio.h>    /* snprintf */
#include <stdlib.h>   /* mkdtemp, realpath */
#include <string.h>   /* strstr */
#include <sys/mman.h> /* mmap */
#include <sys/stat.h> /* fstat */
#include <sys/wait.h> /* waitid, waitpid */
#include <unistd.h>   /* getpid, sysconf, fork */

static size_t page(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

static void read_own(struct mt_maps *m)
{
	ck_assert_int_eq(mt__maps_read(getpid(), m), 0);
	ck_assert_uint_gt(m->n, 0);
	ck_assert_int_eq(m->pid, getpid());
}

/* A directory of the test's own, by its real path (as the kernel names
 * the files in it). */
static void temp_dir(char *dir)
{
	char tmpl[] = "/tmp/mt-maps-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(tmpl));
	ck_assert_ptr_nonnull(realpath(tmpl, dir));
}

/* A file of @pages pages at @path, mapped whole (read-only). */
static uint8_t *map_file(const char *path, size_t pages, struct stat *st)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)(pages * page())), 0);
	ck_assert_int_eq(fstat(fd, st), 0);
	uint8_t *p = mmap(NULL, pages * page(), PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	close(fd);
	return p;
}

START_TEST(test_maps_libc)
{
	void *fn = dlsym(RTLD_DEFAULT, "printf");
	ck_assert_ptr_nonnull(fn);
	Dl_info info;
	ck_assert_int_ne(dladdr(fn, &info), 0);

	struct mt_maps m;
	read_own(&m);
	const struct mt_map *map = mt__maps_at(&m, (uint64_t)(uintptr_t)fn);
	ck_assert_ptr_nonnull(map);
	ck_assert_uint_le(map->start, (uintptr_t)fn);
	ck_assert_uint_gt(map->end, (uintptr_t)fn);
	ck_assert_int_eq(map->perms[2], 'x');
	ck_assert_int_eq(map->path[0], '/');
	ck_assert_ptr_nonnull(strstr(mt__basename(map->path), "libc"));
	ck_assert_uint_ne(map->ino, 0);

	/* The module's first mapping: offset 0, the same file, where the
	 * dynamic loader says the module starts. */
	const struct mt_map *base = mt__maps_base(&m, map);
	ck_assert_ptr_nonnull(base);
	ck_assert_uint_eq(base->offset, 0);
	ck_assert_uint_le(base->start, map->start);
	ck_assert_str_eq(base->path, map->path);
	ck_assert_uint_eq(base->ino, map->ino);
	ck_assert_uint_eq(base->start, (uintptr_t)info.dli_fbase);
	for (size_t i = 0; i < m.n; i++)
		if (m.v[i].ino == map->ino && !strcmp(m.v[i].path, map->path))
			ck_assert_uint_ge(m.v[i].start, base->start);

	/* Found by name as well, and not by a prefix of another name. */
	const char *const libc[] = { "libc", NULL };
	const struct mt_map *found = mt__maps_find(&m, libc);
	ck_assert_ptr_nonnull(found);
	ck_assert_str_eq(found->path, map->path);
	const char *const none[] = { "libc.so.6x", "libno-such-thing", NULL };
	ck_assert_ptr_null(mt__maps_find(&m, none));

	mt__maps_release(&m);
	ck_assert_ptr_null(m.v);
	ck_assert_uint_eq(m.n, 0);
	mt__maps_release(&m); /* twice is harmless */
}
END_TEST

/* Three anonymous pages with the middle one unmapped: the outer two are
 * found with an empty path, the hole and page 0 in none. The ends of a
 * mapping are [start, end). */
START_TEST(test_maps_anon_and_hole)
{
	size_t pg = page();
	uint8_t *p = mmap(NULL, 3 * pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	ck_assert_int_eq(munmap(p + pg, pg), 0);
	uintptr_t a = (uintptr_t)p;

	struct mt_maps m;
	read_own(&m);
	const struct mt_map *first = mt__maps_at(&m, a);
	ck_assert_ptr_nonnull(first);
	ck_assert_str_eq(first->path, "");
	ck_assert_uint_eq(first->ino, 0);
	ck_assert_uint_eq(first->offset, 0);
	ck_assert_str_eq(first->perms, "r--p");
	ck_assert_uint_le(first->start, a);
	ck_assert_uint_eq(first->end, a + pg);
	ck_assert_ptr_eq(mt__maps_at(&m, a + pg - 1), first);
	ck_assert_ptr_null(mt__maps_at(&m, a + pg));
	ck_assert_ptr_null(mt__maps_at(&m, a + 2 * pg - 1));
	const struct mt_map *third = mt__maps_at(&m, a + 2 * pg);
	ck_assert_ptr_nonnull(third);
	ck_assert_ptr_ne(third, first);
	ck_assert_uint_eq(third->start, a + 2 * pg);
	ck_assert_str_eq(third->path, "");
	ck_assert_ptr_null(mt__maps_at(&m, 0));
	ck_assert_ptr_null(mt__maps_at(&m, 8));
	mt__maps_release(&m);
	munmap(p, pg);
	munmap(p + 2 * pg, pg);
}
END_TEST

/* A path with spaces in it is read whole; a later part of the file mapped
 * on its own has its offset, and its base is the mapping at offset 0. */
START_TEST(test_maps_space_in_name)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	struct stat st;
	temp_dir(dir);
	snprintf(path, sizeof(path), "%s/a b.bin", dir);
	uint8_t *p = map_file(path, 2, &st);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	uint8_t *q = mmap(NULL, page(), PROT_READ, MAP_PRIVATE, fd, (off_t)page());
	ck_assert_ptr_ne(q, MAP_FAILED);
	close(fd);

	struct mt_maps m;
	read_own(&m);
	const struct mt_map *map = mt__maps_at(&m, (uintptr_t)p);
	ck_assert_ptr_nonnull(map);
	ck_assert_str_eq(map->path, path);
	ck_assert_uint_eq(map->ino, st.st_ino);
	ck_assert_uint_eq(map->offset, 0);
	ck_assert_str_eq(map->perms, "r--s");
	const struct mt_map *later = mt__maps_at(&m, (uintptr_t)q);
	ck_assert_ptr_nonnull(later);
	ck_assert_ptr_ne(later, map);
	ck_assert_str_eq(later->path, path);
	ck_assert_uint_eq(later->offset, page());
	ck_assert_str_eq(later->perms, "r--p");
	ck_assert_ptr_eq(mt__maps_base(&m, later), map);
	/* "a b.bin" is not a library name */
	const char *const a[] = { "a", NULL };
	ck_assert_ptr_null(mt__maps_find(&m, a));
	mt__maps_release(&m);

	munmap(p, 2 * page());
	munmap(q, page());
	unlink(path);
	rmdir(dir);
}
END_TEST

/* A file deleted once mapped: the kernel appends " (deleted)" to its
 * path, and maps.c keeps the path as the kernel gives it (a caller that
 * opens it fails, as it should: the file is gone). The mapping is still
 * the file's, its base still found. */
START_TEST(test_maps_deleted)
{
	char dir[PATH_MAX], path[PATH_MAX + 16], want[PATH_MAX + 32];
	struct stat st;
	temp_dir(dir);
	snprintf(path, sizeof(path), "%s/gone.bin", dir);
	uint8_t *p = map_file(path, 1, &st);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(rmdir(dir), 0);

	struct mt_maps m;
	read_own(&m);
	const struct mt_map *map = mt__maps_at(&m, (uintptr_t)p);
	ck_assert_ptr_nonnull(map);
	snprintf(want, sizeof(want), "%s (deleted)", path);
	ck_assert_str_eq(map->path, want);
	ck_assert_uint_eq(map->ino, st.st_ino);
	ck_assert_ptr_eq(mt__maps_base(&m, map), map);
	mt__maps_release(&m);
	munmap(p, page());
}
END_TEST

START_TEST(test_maps_no_process)
{
	struct mt_maps m;
	ck_assert_int_eq(mt__maps_read(INT_MAX, &m), -ENOENT);
	ck_assert_ptr_null(m.v);
	ck_assert_uint_eq(m.n, 0);
	mt__maps_release(&m);
}
END_TEST

/* The stat of a running process, a zombie, a reaped one, and one that
 * started at another time than the one asked about. */
START_TEST(test_procstat_running)
{
	struct mt_procstat ps;
	ck_assert_int_eq(mt_procstat_read(0, &ps), 0);
	ck_assert_int_eq(ps.state, 'R');
	ck_assert_int_ge(ps.threads, 1);
	ck_assert_int_eq(mt_procstat_running(getpid(), 0), 1);
	ck_assert_int_eq(mt_procstat_running(getpid(), ps.start), 1);
	ck_assert_int_eq(mt_procstat_running(getpid(), ps.start + 1), 0);

	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0)
		_exit(0);
	siginfo_t si;
	/* exited, left a zombie until reaped */
	ck_assert_int_eq(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT), 0);
	ck_assert_int_eq(mt_procstat_read(child, &ps), 0);
	ck_assert_int_eq(ps.state, 'Z');
	ck_assert_int_eq(mt_procstat_running(child, 0), 0);
	ck_assert_int_eq(waitpid(child, NULL, 0), child);
	ck_assert_int_eq(mt_procstat_running(child, 0), 0);
	ck_assert_int_eq(mt_procstat_running(INT_MAX, 0), 0);
}
END_TEST

static Suite *maps_suite(void)
{
	Suite *s = suite_create("maps");
	TCase *tc = tcase_create("maps");

	tcase_add_test(tc, test_maps_libc);
	tcase_add_test(tc, test_maps_anon_and_hole);
	tcase_add_test(tc, test_maps_space_in_name);
	tcase_add_test(tc, test_maps_deleted);
	tcase_add_test(tc, test_maps_no_process);
	tcase_add_test(tc, test_procstat_running);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(maps_suite());
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
