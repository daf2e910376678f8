/* SPDX-License-Identifier: MIT */
/*
 * Native stacks in the target (native.h): libunwind's unw_backtrace,
 * loaded on first use, and the module map from dl_iterate_phdr.
 */
#include "payload/native.h"
#include "payload/phdr.h"
#include "payload/unwind.h"
#include "util/fd.h"

#include <dlfcn.h>   /* dlopen, dlsym */
#include <elf.h>     /* NT_GNU_BUILD_ID */
#include <errno.h>   /* ENOENT */
#include <link.h>    /* dl_iterate_phdr */
#include <pthread.h> /* pthread_mutex_t */
#include <stdio.h>   /* snprintf */
#include <stdlib.h>  /* getenv */
#include <string.h>  /* memcpy, strlen */
#include <sys/mman.h> /* mmap */
#include <unistd.h>  /* readlink */

struct mt_native_evals mt_native_evals;

static struct {
	int (*backtrace)(void **, int);
	int fast;                 /* unwind.h first, libunwind for what it cannot */
	int check;                /* MEMTRACE_TEST_UNWIND_CHECK=1: check(), every stack */
	unsigned long fell_back, checked, wrong; /* __atomic */
	unsigned long skipped;    /* __atomic: stacks a fork kept from being unwound */
	uintptr_t own_lo, own_hi; /* this library's code: frames left out */
	char error[160];
	pthread_mutex_t lock;     /* mt_native_modules(): its tables */
	uint32_t gen;
} n = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The executable segments of the object holding @addr. */
struct own_range {
	uintptr_t addr, lo, hi;
};

static int find_own(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct own_range *r = arg;
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
		if (r->addr >= lo && r->addr < hi) {
			r->lo = lo;
			r->hi = hi;
			return 1;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * The evaluation loop's code: _PyEval_EvalFrameDefault, by its dynamic
 * symbol, and the part of it the compiler moved out of line (".cold",
 * a symbol of its own in .symtab, which stripped builds do not have):
 * found as the one other unwinding region most of its jumps that leave it
 * go to. A return address there is the loop's as much as one in its body.
 * ---------------------------------------------------------------------- */
#define EVAL_REGIONS 64
#define EVAL_COLD_JUMPS 4 /* jumps into a region that make it the loop's */

/* unw_proc_info_t begins with start_ip and end_ip; the rest is room */
struct proc_info {
	uintptr_t start_ip, end_ip;
	uint64_t rest[30];
};

typedef int (*proc_info_fn)(void *as, uintptr_t ip, struct proc_info *pi, void *arg);

/* Returns 0 if the code could not be looked at (then the loop is not
 * known well enough to count: native-memo.h is not used). */
static int find_eval_cold(void *h, uintptr_t lo, uintptr_t hi)
{
#if defined(__x86_64__)
	proc_info_fn info = (proc_info_fn)dlsym(h, "_ULx86_64_get_proc_info_by_ip");
	void **as = dlsym(h, "_ULx86_64_local_addr_space");
	struct own_range seg = { lo, 0, 0 };
	if (!info || !as || !dl_iterate_phdr(find_own, &seg))
		return 0;
	struct {
		uintptr_t lo, hi;
		unsigned jumps;
	} reg[EVAL_REGIONS];
	size_t nreg = 0;
	const uint8_t *p = (const uint8_t *)lo;
	for (uintptr_t a = lo; a + 6 <= hi; a++, p++) {
		/* jmp rel32 (e9) and jcc rel32 (0f 80..8f), read at every
		 * byte: what is no such instruction lands anywhere, seldom
		 * twice in one region */
		size_t len = p[0] == 0xe9 ? 5 : p[0] == 0x0f && (p[1] & 0xf0) == 0x80 ? 6 : 0;
		if (!len)
			continue;
		int32_t rel;
		memcpy(&rel, p + len - 4, sizeof(rel));
		uintptr_t to = a + len + (intptr_t)rel;
		if ((to >= lo && to < hi) || to < seg.lo || to >= seg.hi)
			continue;
		size_t r = 0;
		while (r < nreg && !(to >= reg[r].lo && to < reg[r].hi))
			r++;
		if (r == nreg) {
			struct proc_info pi;
			memset(&pi, 0, sizeof(pi));
			if (nreg == EVAL_REGIONS || info(*as, to, &pi, NULL) < 0 ||
			    pi.start_ip > to || pi.end_ip <= to || (pi.start_ip < hi && pi.end_ip > lo))
				continue;
			reg[nreg++] = (typeof(reg[0])){ pi.start_ip, pi.end_ip, 0 };
		}
		reg[r].jumps++;
	}
	size_t best = nreg;
	for (size_t r = 0; r < nreg; r++)
		if (reg[r].jumps >= EVAL_COLD_JUMPS && (best == nreg || reg[r].jumps > reg[best].jumps))
			best = r;
	if (best < nreg) {
		mt_native_evals.cold_lo = reg[best].lo;
		mt_native_evals.cold_hi = reg[best].hi;
	}
	return 1;
#else
	(void)h, (void)lo, (void)hi; /* the scan reads x86-64 jumps only */
	return 0;
#endif
}

static void find_eval(void *h)
{
	Dl_info di;
	const ElfW(Sym) *sym = NULL;
	void *f = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
	if (!f || !dladdr1(f, &di, (void **)&sym, RTLD_DL_SYMENT) || !sym || !sym->st_size)
		return;
	uintptr_t lo = (uintptr_t)f, hi = lo + sym->st_size;
	if (!find_eval_cold(h, lo, hi))
		return;
	mt_native_evals.lo = lo;
	mt_native_evals.hi = hi;
}

/* mt_native_start()'s, out of a fork's way: loading libunwind, its walks
 * and its first unwind, the scan of the evaluation loop (which asks
 * libunwind for procedures) */
static int start_unwinding(void)
{
	/* RTLD_LOCAL: its _Unwind_* stay out of the global scope */
	void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(n.error, sizeof(n.error), "libunwind could not be loaded: %s",
			 e ? e : "unknown error");
		return -ENOENT;
	}
	int (*bt)(void **, int) = (int (*)(void **, int))dlsym(h, "unw_backtrace");
	if (!bt) {
		snprintf(n.error, sizeof(n.error), "libunwind has no unw_backtrace");
		dlclose(h);
		return -ENOENT;
	}
	const char *lib = getenv("MEMTRACE_TEST_LIBUNWIND"), *chk = getenv("MEMTRACE_TEST_UNWIND_CHECK");
	n.fast = !(lib && strcmp(lib, "1") == 0) && mt_unwind_init() == 0;
	n.check = n.fast && chk && strcmp(chk, "1") == 0;
	struct own_range r = { (uintptr_t)&mt_native_unwind, 0, 0 };
	dl_iterate_phdr(find_own, &r);
	n.own_lo = r.lo;
	n.own_hi = r.hi;
	/* the first unwind of a process reads and caches the unwind tables
	 * of the objects it crosses: here rather than in a hook */
	void *warm[64];
	bt(warm, 64);
	find_eval(h);
	__atomic_store_n(&n.backtrace, bt, __ATOMIC_RELEASE);
	return 0;
}

int mt_native_start(void)
{
	if (__atomic_load_n(&n.backtrace, __ATOMIC_ACQUIRE))
		return 0;
	int token = mt_phdr_enter(0);
	/* libunwind keeps a pipe from its first unwind on: not on the
	 * standard descriptors of a program that closed them */
	unsigned held = mt_fd_hold();
	int rc = start_unwinding();
	mt_fd_release(held);
	mt_phdr_leave(token);
	return rc;
}

const char *mt_native_error(void)
{
	return n.error;
}

/* Our own frames come first: the hook and what it called. Leaves the
 * rest at the start of @ips, at most @max of them; returns how many. */
static size_t drop_own(uintptr_t *ips, size_t total, size_t max)
{
	size_t i = 0;
	while (i < total && ips[i] >= n.own_lo && ips[i] < n.own_hi)
		i++;
	size_t k = total - i < max ? total - i : max;
	if (i)
		memmove(ips, ips + i, k * sizeof(*ips));
	return k;
}

static size_t by_libunwind(int (*bt)(void **, int), uintptr_t *ips, size_t max)
{
	int token = mt_phdr_enter(1); /* libunwind walks the objects on a miss */
	if (token < 0) {
		/* a fork kept it waiting: an empty stack, not a hung child */
		__atomic_fetch_add(&n.skipped, 1, __ATOMIC_RELAXED);
		return 0;
	}
	int got = bt((void **)ips, (int)(max + MT_NATIVE_SLACK));
	mt_phdr_leave(token);
	return drop_own(ips, got > 0 ? (size_t)got : 0, max);
}

/* For tests: the stack unwound here against libunwind's, counted (a
 * stack stopped early against as much of libunwind's); what differs said
 * on stderr. The room for libunwind's is the thread's own, mapped at its
 * first check. */
static __attribute__((noinline)) void check(int (*bt)(void **, int), const uintptr_t *ips,
					    size_t k, size_t max, int early)
{
	static __thread __attribute__((tls_model("initial-exec"))) uintptr_t *room;
	if (!room) {
		void *a = mmap(NULL, (MT_NATIVE_MAX + MT_NATIVE_SLACK) * sizeof(*room),
			       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (a == MAP_FAILED)
			return;
		room = a;
	}
	size_t m = by_libunwind(bt, room, max);
	__atomic_fetch_add(&n.checked, 1, __ATOMIC_RELAXED);
	if ((m == k || (early && m > k)) && memcmp(room, ips, k * sizeof(*ips)) == 0)
		return;
	__atomic_fetch_add(&n.wrong, 1, __ATOMIC_RELAXED);
	static const char msg[] = "memtrace: a native stack unwound differs from libunwind's\n";
	(void)!write(2, msg, sizeof(msg) - 1);
}

size_t mt_native_unwind_to(uintptr_t *ips, size_t max, size_t need, size_t past,
			   struct mt_unwind_local *local)
{
	int (*bt)(void **, int) = __atomic_load_n(&n.backtrace, __ATOMIC_ACQUIRE);
	if (!bt || max == 0)
		return 0;
	if (max > MT_NATIVE_MAX)
		max = MT_NATIVE_MAX;
	const struct mt_native_evals *e = &mt_native_evals;
	struct mt_unwind_stop stop = { { e->lo, e->cold_lo }, { e->hi, e->cold_hi }, need, past };
	long got = n.fast ? mt_unwind(ips, max + MT_NATIVE_SLACK, need ? &stop : NULL, local) : -1;
	if (got == -2) {
		__atomic_fetch_add(&n.skipped, 1, __ATOMIC_RELAXED);
		return 0;
	}
	if (got < 0) {
		if (n.fast)
			__atomic_fetch_add(&n.fell_back, 1, __ATOMIC_RELAXED);
		return by_libunwind(bt, ips, max);
	}
	size_t k = drop_own(ips, (size_t)got, max);
	if (__builtin_expect(n.check, 0))
		check(bt, ips, k, max, need != 0);
	return k;
}

size_t mt_native_unwind(uintptr_t *ips, size_t max)
{
	return mt_native_unwind_to(ips, max, 0, 0, NULL);
}

void mt_native_report(void)
{
	if (!n.check)
		return;
	char line[192];
	int k = snprintf(line, sizeof(line),
			 "memtrace: native stacks checked against libunwind: %lu, wrong: %lu, "
			 "unwound by libunwind: %lu, return addresses learned: %lu\n",
			 __atomic_load_n(&n.checked, __ATOMIC_RELAXED),
			 __atomic_load_n(&n.wrong, __ATOMIC_RELAXED),
			 __atomic_load_n(&n.fell_back, __ATOMIC_RELAXED), mt_unwind_learned());
	if (k > 0)
		(void)!write(2, line, (size_t)k);
}

unsigned long mt_native_skipped_take(void)
{
	return __atomic_exchange_n(&n.skipped, 0, __ATOMIC_RELAXED);
}

void mt_native_unloaded(void)
{
	mt_unwind_forget();
}

/* ------------------------------------------------------------------------
 * The module map. Collected under the loader's lock into our tables, then
 * handed out after it: @fn pushes records, which may wait for the writer.
 * ---------------------------------------------------------------------- */
#define MODS_MAX 2048
#define PATHS_BYTES (512u << 10)
#define BUILD_ID_MAX 64

struct mod {
	struct mt_rec_module rec;
	uint64_t key; /* mod_key() */
	uint32_t path_off, path_len, id_len;
	uint8_t build_id[BUILD_ID_MAX];
};

static struct {
	struct mod *mods; /* MODS_MAX, mapped once */
	char *paths;      /* PATHS_BYTES */
	size_t nmods, paths_used;
	uint64_t *told;   /* MODS_MAX: keys of the loaded modules the capture has */
	size_t ntold;
} t;

/* A module as loaded: its path, place and build-id. */
static uint64_t mod_key(const struct mod *m, const char *path)
{
	uint64_t h = 1469598103934665603ull ^ m->rec.bias;
	for (uint32_t i = 0; i < m->path_len; i++)
		h = (h ^ (uint8_t)path[i]) * 1099511628211ull;
	for (uint32_t i = 0; i < m->id_len; i++)
		h = (h ^ m->build_id[i]) * 1099511628211ull;
	return h;
}

/* The GNU build-id note in the loaded image, if any. */
static uint32_t build_id_of(const struct dl_phdr_info *info, uint8_t *out)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
		const uint8_t *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			ElfW(Nhdr) nh;
			memcpy(&nh, p, sizeof(nh));
			const uint8_t *name = p + sizeof(nh);
			const uint8_t *desc = name + ((nh.n_namesz + 3) & ~3u);
			const uint8_t *next = desc + ((nh.n_descsz + 3) & ~3u);
			if (next > end || next <= p)
				break;
			if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
			    memcmp(name, "GNU", 4) == 0 && nh.n_descsz <= BUILD_ID_MAX) {
				memcpy(out, desc, nh.n_descsz);
				return nh.n_descsz;
			}
			p = next;
		}
	}
	return 0;
}

static int collect(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	const char *name = info->dlpi_name;
	char exe[4096];
	if (t.nmods >= MODS_MAX)
		return 1;
	if (!name || !name[0]) {
		/* the main program (the first object listed) */
		ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (k <= 0)
			return 0;
		exe[k] = '\0';
		name = exe;
	} else if (strncmp(name, "linux-vdso", 10) == 0 || strncmp(name, "linux-gate", 10) == 0) {
		return 0;
	}
	size_t len = strlen(name);
	if (t.paths_used + len > PATHS_BYTES)
		return 1;
	struct mod *m = &t.mods[t.nmods];
	memset(&m->rec, 0, sizeof(m->rec));
	m->rec.bias = info->dlpi_addr;
	for (int i = 0; i < info->dlpi_phnum && m->rec.nsegs < MT_MODULE_SEGS_MAX; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		m->rec.seg_vaddr[m->rec.nsegs] = ph->p_vaddr;
		m->rec.seg_memsz[m->rec.nsegs] = ph->p_memsz;
		m->rec.nsegs++;
	}
	if (m->rec.nsegs == 0)
		return 0;
	m->id_len = build_id_of(info, m->build_id);
	memcpy(t.paths + t.paths_used, name, len);
	m->path_off = (uint32_t)t.paths_used;
	m->path_len = (uint32_t)len;
	t.paths_used += len;
	t.nmods++;
	return 0;
}

int mt_native_modules(int all, mt_native_module_fn fn, void *ctx)
{
	pthread_mutex_lock(&n.lock);
	if (!t.mods) {
		void *a = mmap(NULL, MODS_MAX * (sizeof(struct mod) + sizeof(uint64_t)) + PATHS_BYTES,
			       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (a == MAP_FAILED) {
			pthread_mutex_unlock(&n.lock);
			return -ENOMEM;
		}
		t.mods = a;
		t.told = (uint64_t *)(t.mods + MODS_MAX);
		t.paths = (char *)(t.told + MODS_MAX);
	}
	if (all)
		t.ntold = 0;
	t.nmods = t.paths_used = 0;
	mt_phdr_walk(collect, NULL);
	uint32_t gen = ++n.gen;
	for (size_t i = 0; i < t.nmods; i++)
		t.mods[i].key = mod_key(&t.mods[i], t.paths + t.mods[i].path_off);
	/* what was unloaded since leaves: loaded again where another object
	 * was in the meantime, it is told again, to take that one's place */
	size_t kept = 0;
	for (size_t k = 0; k < t.ntold; k++) {
		size_t i = 0;
		while (i < t.nmods && t.mods[i].key != t.told[k])
			i++;
		if (i < t.nmods)
			t.told[kept++] = t.told[k];
	}
	t.ntold = kept;
	for (size_t i = 0; i < t.nmods; i++) {
		struct mod *m = &t.mods[i];
		size_t k = 0;
		while (k < t.ntold && t.told[k] != m->key)
			k++;
		if (k < t.ntold)
			continue; /* in the capture's map already */
		if (t.ntold < MODS_MAX)
			t.told[t.ntold++] = m->key;
		m->rec.gen = gen;
		m->rec.path = (struct mt_bytes){ (const uint8_t *)t.paths + m->path_off, m->path_len };
		m->rec.build_id = (struct mt_bytes){ m->build_id, m->id_len };
		fn(ctx, &m->rec);
	}
	pthread_mutex_unlock(&n.lock);
	return (int)gen;
}

void mt_native_after_fork(void)
{
	pthread_mutex_init(&n.lock, NULL);
	__atomic_store_n(&n.skipped, 0, __ATOMIC_RELAXED);
}
