/* SPDX-License-Identifier: MIT */
/*
 * The native symbolizer (reader/symbols.h): one lazily opened libdwfl
 * session per module, a sorted function-symbol index per module, DWARF
 * inline chains, and a (module, offset) -> frames cache over interned
 * strings. Reader only; it never runs in the target.
 */
#include "reader/symbols.h"
#include "reader/demangle.h"
#include "reader/dwarf-scopes.h"
#include "util/slots.h"

#include <dwarf.h>             /* DW_TAG_*, DW_AT_* */
#include <elfutils/libdw.h>    /* dwarf_diename, dwarf_tag */
#include <elfutils/libdwfl.h>  /* Dwfl, dwfl_report_elf */
#include <errno.h>             /* EINVAL, ENOMEM */
#include <inttypes.h>          /* PRIx64 */
#include <limits.h>            /* INT_MAX, PATH_MAX, NAME_MAX */
#include <stdio.h>             /* snprintf */
#include <stdlib.h>            /* malloc, qsort */
#include <string.h>            /* memcmp, strlen */
#include <sys/stat.h>          /* stat, S_ISREG */

/* A function symbol of a module: it covers [addr, end). */
struct msym {
	uint64_t addr, end;
	const char *name; /* in the module's ELF string table */
	unsigned rank;    /* among symbols at one address, lower is kept */
};

struct module {
	char *path;
	const char *base; /* basename of path, for "<base>+0x<offset>" */
	uint8_t *build_id;
	size_t build_id_len;
	uint64_t load_bias; /* as recorded; offsets come already relative */
	Dwfl *dwfl;         /* NULL until opened, and for a missing module */
	Dwfl_Module *mod;
	Dwarf_Addr bias;    /* libdwfl address = offset + bias (0 as reported) */
	Dwarf_Addr lo, hi;  /* the module's libdwfl address range */
	struct mt_dwarf_scopes *scopes; /* NULL: no memory for it */
	struct msym *syms;  /* sorted by addr, one per address */
	size_t nsyms;
	uint8_t opened, missing;
};

/* A cached resolve: frames[first .. first + n) of the frame pool. */
struct centry {
	uint64_t offset;
	int module;
	uint32_t first, n;
};

struct mt_symbols {
	Dwfl_Callbacks cb;    /* shared by every session: keep its address */
	char *debuginfo_path; /* cb.debuginfo_path: ":.debug:" + roots */
	char *roots;
	struct module *mods;
	size_t nmods, capmods;
	int any_open;

	struct centry *ents; /* the cache */
	size_t nents, capents;
	uint32_t *slots; /* index + 1, 0 = empty (util/slots.h) */
	size_t nslots;

	struct mt_symframe *frames; /* the frame pool */
	size_t nframes, capframes;

	char **strs; /* the intern set */
	size_t nstrs, capstrs;
	uint32_t *str_slots;
	size_t nstr_slots;

	uint64_t unresolved;
	uint32_t missing;
	const char *comp_dir; /* the compilation unit resolved now: relative
			       * source names are under it */
};

/* Scopes nested in one function, past which inner ones are dropped. */
#define MAX_SCOPES 64

static const char default_roots[] = "/usr/lib/debug";
static const char unknown[] = "<unknown>";

/* ------------------------------------------------------------------ */
/* Interned strings and the frame pool */

static uint64_t str_hash(const char *p)
{
	uint64_t h = 1469598103934665603ull;
	for (; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	return h;
}

static uint64_t strs_rehash(const void *ctx, size_t i)
{
	return str_hash(((const struct mt_symbols *)ctx)->strs[i]);
}

/* The set's copy of @p, or NULL on ENOMEM. */
static const char *intern(struct mt_symbols *s, const char *p)
{
	if (s->nstrs * 2 >= s->nstr_slots &&
	    mt_slots_grow(&s->str_slots, &s->nstr_slots, 1024, 0, s->nstrs, strs_rehash, s) < 0)
		return NULL;
	size_t j = str_hash(p) & (s->nstr_slots - 1);
	while (s->str_slots[j]) {
		const char *c = s->strs[s->str_slots[j] - 1];
		if (strcmp(c, p) == 0)
			return c;
		j = (j + 1) & (s->nstr_slots - 1);
	}
	if (s->nstrs == s->capstrs) {
		size_t n = s->capstrs ? s->capstrs * 2 : 256;
		char **nv = n < UINT32_MAX ? realloc(s->strs, n * sizeof(*nv)) : NULL;
		if (!nv)
			return NULL;
		s->strs = nv;
		s->capstrs = n;
	}
	char *c = strdup(p);
	if (!c)
		return NULL;
	s->strs[s->nstrs] = c;
	s->str_slots[j] = (uint32_t)++s->nstrs;
	return c;
}

/* @p with its "." and "dir/.." components taken out, in place. */
static char *mt_path_tidy(char *p)
{
	char *out = p, *seg = p;
	/* p is absolute: out always keeps its leading '/' */
	while (*seg) {
		while (*seg == '/')
			seg++;
		char *end = seg;
		while (*end && *end != '/')
			end++;
		size_t len = (size_t)(end - seg);
		if (len == 0)
			break;
		if (len == 1 && seg[0] == '.') {
			/* nothing */
		} else if (len == 2 && seg[0] == '.' && seg[1] == '.') {
			while (out > p && *--out != '/')
				;
		} else {
			*out++ = '/';
			memmove(out, seg, len);
			out += len;
		}
		seg = end;
	}
	if (out == p)
		*out++ = '/';
	*out = '\0';
	return p;
}

/* Appends a frame to the pool, its strings interned. Returns 0 or -ENOMEM. */
static int push(struct mt_symbols *s, const char *fn, const char *file, uint32_t line,
		uint8_t inlined)
{
	if (s->nframes == s->capframes) {
		size_t n = s->capframes ? s->capframes * 2 : 1024;
		struct mt_symframe *nv = n <= UINT32_MAX ? realloc(s->frames, n * sizeof(*nv)) : NULL;
		if (!nv)
			return -ENOMEM;
		s->frames = nv;
		s->capframes = n;
	}
	struct mt_symframe *f = &s->frames[s->nframes];
	char joined[4096];
	if (file && file[0] != '/' && s->comp_dir && s->comp_dir[0] == '/' &&
	    (size_t)snprintf(joined, sizeof(joined), "%s/%s", s->comp_dir, file) < sizeof(joined))
		file = mt_path_tidy(joined);
	char *plain = mt_demangle(fn);
	f->function = intern(s, plain ? plain : fn);
	free(plain);
	f->file = file ? intern(s, file) : NULL;
	if (!f->function || (file && !f->file))
		return -ENOMEM;
	f->line = line;
	f->inlined = inlined;
	s->nframes++;
	return 0;
}

/* Appends "<base>+0x<offset>" (no file, no line). Returns 0 or -ENOMEM. */
static int push_offset(struct mt_symbols *s, const char *base, uint64_t offset, uint8_t inlined)
{
	char small[320], *buf = small;
	size_t need = strlen(base) + sizeof("+0x") + 16;

	if (need > sizeof(small) && !(buf = malloc(need)))
		return -ENOMEM;
	snprintf(buf, need, "%s+0x%" PRIx64, base, offset);
	int ret = push(s, buf, NULL, 0, inlined);
	if (buf != small)
		free(buf);
	return ret;
}

/* ------------------------------------------------------------------ */
/* Opening a module */

static int msym_cmp(const void *a, const void *b)
{
	const struct msym *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* The module's function symbols, sorted, one per address: at a shared
 * address a sized symbol wins over a sizeless one and a global over a
 * weak over a local. A sizeless symbol reaches the next one (or the
 * module's end). Without memory the module just has no symbols. */
static void index_symbols(struct module *m)
{
	int n = dwfl_module_getsymtab(m->mod);
	if (n <= 1)
		return;
	struct msym *v = malloc((size_t)n * sizeof(*v));
	if (!v)
		return;
	size_t k = 0;
	for (int i = 1; i < n; i++) {
		GElf_Sym sym;
		GElf_Addr addr;
		GElf_Word shndx;
		const char *name = dwfl_module_getsym_info(m->mod, i, &sym, &addr, &shndx, NULL, NULL);
		int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);
		if (!name || !*name || shndx == SHN_UNDEF ||
		    (type != STT_FUNC && type != STT_GNU_IFUNC))
			continue;
		unsigned rank = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2;
		v[k++] = (struct msym){ addr, addr + sym.st_size, name, rank + (sym.st_size ? 0 : 4) };
	}
	qsort(v, k, sizeof(*v), msym_cmp);
	size_t u = 0;
	for (size_t i = 0; i < k; i++)
		if (!u || v[u - 1].addr != v[i].addr)
			v[u++] = v[i];
	for (size_t i = 0; i < u; i++)
		if (v[i].end <= v[i].addr)
			v[i].end = i + 1 < u ? v[i + 1].addr : m->hi;
	m->syms = v;
	m->nsyms = u;
}

/* Whether [@dir/][@sub/]@name is a regular file other than @self. */
static int copy_exists(const struct stat *self, const char *dir, const char *sub, const char *name)
{
	char p[PATH_MAX];
	struct stat st;
	int n = snprintf(p, sizeof(p), "%s%s%s%s%s", dir ? dir : "", dir ? "/" : "",
			 sub ? sub : "", sub ? "/" : "", name);

	return n > 0 && (size_t)n < sizeof(p) && stat(p, &st) == 0 && S_ISREG(st.st_mode) &&
	       (st.st_ino != self->st_ino || st.st_dev != self->st_dev);
}

/* Whether a debug file may be found by name for @file: @debuglink (or
 * "<basename>.debug", or an alternate file's name) in @file's directory,
 * its .debug/ and .dwz/, or under a debug root, below the root as @file's
 * directory is below / (or below its tail parts, as libdwfl tries them). */
static int named_copy_exists(const char *roots, const struct stat *self, const char *file,
			     const char *debuglink)
{
	const char *slash = strrchr(file, '/'), *base = slash ? slash + 1 : file;
	char name[NAME_MAX + sizeof(".debug")], dir[PATH_MAX], root[PATH_MAX];

	if (!debuglink) {
		if (snprintf(name, sizeof(name), "%s.debug", base) >= (int)sizeof(name))
			return 0;
		debuglink = name;
	}
	const char *lbase = strrchr(debuglink, '/') ? strrchr(debuglink, '/') + 1 : debuglink;
	if (debuglink[0] == '/' && copy_exists(self, NULL, NULL, debuglink))
		return 1;
	if (!slash || (size_t)(slash - file) >= sizeof(dir))
		return 0;
	memcpy(dir, file, (size_t)(slash - file));
	dir[slash - file] = '\0';
	if (copy_exists(self, dir, NULL, debuglink) || copy_exists(self, dir, ".debug", debuglink) ||
	    copy_exists(self, dir, ".dwz", lbase))
		return 1;
	for (const char *r = roots; *r; r += *r == ':') {
		size_t rl = strcspn(r, ":");
		if (rl && rl < sizeof(root)) {
			memcpy(root, r, rl);
			root[rl] = '\0';
			if (copy_exists(self, root, NULL, lbase) || copy_exists(self, root, ".dwz", lbase))
				return 1;
			for (const char *sub = dir; (sub = strchr(sub, '/')) && *++sub;)
				if (copy_exists(self, root, sub, debuglink) ||
				    (debuglink == name && copy_exists(self, root, sub, base)))
					return 1;
		}
		r += rl;
	}
	return 0;
}

/* libdwfl's find_debuginfo callback: dwfl_standard_find_debuginfo(). But
 * when that finds nothing, it ends in debuginfod, loading libdebuginfod
 * and libcurl (about 20 ms, once per process) to be told there are no
 * URLs. So without DEBUGINFOD_URLS it runs only when the build-id lookup
 * failed and a file its search by name may accept exists. */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
			  Dwarf_Addr base, const char *file, const char *debuglink, GElf_Word crc,
			  char **debugfile)
{
	const struct mt_symbols *s = *userdata;
	const char *urls = getenv("DEBUGINFOD_URLS");

	if (!urls || !*urls) {
		int fd = dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file, debuglink,
						      crc, debugfile);
		struct stat self = { 0 };
		if (fd >= 0 || !file)
			return fd;
		(void)stat(file, &self); /* best effort: only to skip the file itself */
		char *real = realpath(file, NULL);
		const char *roots = s && s->roots ? s->roots : default_roots;
		int maybe = named_copy_exists(roots, &self, file, debuglink) ||
			    (real && strcmp(real, file) != 0 &&
			     named_copy_exists(roots, &self, real, debuglink));
		free(real);
		if (!maybe) {
			errno = 0; /* found nothing, as libdwfl says it */
			return -1;
		}
	}
	return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file, debuglink, crc,
					    debugfile);
}

/* A session on @file for @m if it is a regular ELF file whose build-id is
 * the recorded one (any, when none was recorded). Returns 0 or -1. */
static int try_file(struct mt_symbols *s, struct module *m, const char *file)
{
	struct stat st;

	/* A FIFO or device at a recorded path would block or read forever. */
	if (stat(file, &st) != 0 || !S_ISREG(st.st_mode))
		return -1;
	Dwfl *d = dwfl_begin(&s->cb);
	if (!d)
		return -1;
	dwfl_report_begin(d);
	Dwfl_Module *mod = dwfl_report_elf(d, m->base, file, -1, 0, true);
	if (dwfl_report_end(d, NULL, NULL) != 0 || !mod)
		goto fail;
	if (m->build_id_len) {
		const unsigned char *bits;
		GElf_Addr vaddr;
		int len = dwfl_module_build_id(mod, &bits, &vaddr);
		if (len <= 0 || (size_t)len != m->build_id_len ||
		    memcmp(bits, m->build_id, m->build_id_len) != 0)
			goto fail;
	}
	if (!dwfl_module_getelf(mod, &m->bias))
		goto fail;
	void **userdata;
	dwfl_module_info(mod, &userdata, &m->lo, &m->hi, NULL, NULL, NULL, NULL);
	*userdata = s; /* for find_debuginfo() */
	m->dwfl = d;
	m->mod = mod;
	return 0;
fail:
	dwfl_end(d);
	return -1;
}

/* <root>/.build-id/xx/rest<suffix> for each debug root. Returns 0 or -1. */
static int try_build_id(struct mt_symbols *s, struct module *m, const char *suffix)
{
	const char *r = s->roots ? s->roots : default_roots;
	size_t hexlen = 2 * m->build_id_len + 1;

	while (*r) {
		size_t rl = strcspn(r, ":");
		char *p = rl ? malloc(rl + sizeof("/.build-id/") + hexlen + strlen(suffix)) : NULL;
		if (p) {
			char *q = p + rl;
			memcpy(p, r, rl);
			q += sprintf(q, "/.build-id/%02x/", m->build_id[0]);
			for (size_t i = 1; i < m->build_id_len; i++)
				q += sprintf(q, "%02x", m->build_id[i]);
			strcpy(q, suffix);
			int ok = try_file(s, m, p) == 0;
			free(p);
			if (ok)
				return 0;
		}
		r += rl;
		if (*r == ':')
			r++;
	}
	return -1;
}

/* What libdwfl's own build-id search finds for @m (its local lookups,
 * then debuginfod): a malloc'ed path, or NULL. */
static char *dwfl_find_by_build_id(struct mt_symbols *s, struct module *m)
{
	char *found = NULL;
	Dwarf_Addr bias;
	Dwfl *d = dwfl_begin(&s->cb);

	if (!d)
		return NULL;
	dwfl_report_begin(d);
	Dwfl_Module *mod = dwfl_report_module(d, m->base, 0, 1);
	if (dwfl_report_end(d, NULL, NULL) == 0 && mod &&
	    dwfl_module_report_build_id(mod, m->build_id, m->build_id_len, 0) == 0 &&
	    dwfl_module_getelf(mod, &bias)) {
		const char *file = NULL;
		dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, &file, NULL);
		if (file)
			found = strdup(file);
	}
	dwfl_end(d);
	return found;
}

static void module_open(struct mt_symbols *s, struct module *m)
{
	m->opened = 1;
	s->any_open = 1;
	if (try_file(s, m, m->path) == 0)
		goto found;
	if (m->build_id_len >= 2) {
		if (try_build_id(s, m, ".debug") == 0 || try_build_id(s, m, "") == 0)
			goto found;
		/* Only then may libdwfl reach debuginfod (see find_debuginfo()). */
		const char *urls = getenv("DEBUGINFOD_URLS");
		if (urls && *urls) {
			char *file = dwfl_find_by_build_id(s, m);
			int ok = file && try_file(s, m, file) == 0;
			free(file);
			if (ok)
				goto found;
		}
	}
	m->missing = 1;
	s->missing++;
	return;
found:
	index_symbols(m);
	m->scopes = mt_dwarf_scopes_new(m->mod);
}

/* ------------------------------------------------------------------ */
/* Resolving */

/* The symbol covering libdwfl address @pc, or NULL. */
static const char *symbol_at(const struct module *m, Dwarf_Addr pc)
{
	size_t lo = 0, hi = m->nsyms;

	while (lo < hi) { /* first symbol above pc */
		size_t mid = lo + (hi - lo) / 2;
		if (m->syms[mid].addr <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || pc >= m->syms[lo - 1].end)
		return NULL;
	return m->syms[lo - 1].name;
}

/* The name of function DIE @d: its linkage name where it has one (a C++
 * function's, mangled: qualified and with its parameters once
 * demangled), else DW_AT_name, through abstract origins. */
static const char *die_name(Dwarf_Die *d)
{
	Dwarf_Attribute attr;
	const char *name = NULL;
	if (dwarf_attr_integrate(d, DW_AT_linkage_name, &attr) ||
	    dwarf_attr_integrate(d, DW_AT_MIPS_linkage_name, &attr))
		name = dwarf_formstring(&attr);
	return name ? name : dwarf_diename(d);
}

/* Frames from the concrete DIE nesting at @pc: each inlined instance,
 * innermost first, then the DW_TAG_subprogram holding them, named from
 * DWARF (through abstract origins) or else by @sym. *@file and *@line
 * come in as the line table's; each outer frame's are the call site of
 * the instance inside it. Returns 0, or -ENOMEM. Without DWARF for @pc,
 * the one frame is @sym's. */
static int push_scopes(struct mt_symbols *s, struct module *m, uint64_t offset, Dwarf_Addr pc,
		       const char *sym, const char *file, uint32_t line)
{
	Dwarf_Die sc[MAX_SCOPES];
	size_t n = m->scopes ? mt_dwarf_scopes_at(m->scopes, pc, sc, MAX_SCOPES) : 0;
	size_t phys = 0; /* sc[phys] is the physical function */

	for (size_t i = n; i-- > 1;) {
		int tag = dwarf_tag(&sc[i]);
		if (tag == DW_TAG_subprogram) { /* a GNU C nested function */
			phys = i;
			break;
		}
		if (tag != DW_TAG_inlined_subroutine)
			continue; /* lexical blocks and the like */
		const char *name = die_name(&sc[i]);
		if (name ? push(s, name, file, line, 1) < 0 : push_offset(s, m->base, offset, 1) < 0)
			return -ENOMEM;
		mt_dwarf_call_site(&sc[i], &file, &line);
	}
	/* the symbol's name where it is a C++ one: static functions have no
	 * linkage name in DWARF, and their symbol says their parameters */
	const char *name = sym && sym[0] == '_' && sym[1] == 'Z' ? sym : n ? die_name(&sc[phys]) : NULL;
	if (!name)
		name = sym;
	if (name)
		return push(s, name, file, line, 0);
	s->unresolved++;
	return push_offset(s, m->base, offset, 0);
}

/* Pushes the frames of @offset in module @m. Returns 0 or -ENOMEM. */
static int resolve_module(struct mt_symbols *s, struct module *m, uint64_t offset)
{
	if (!m->opened)
		module_open(s, m);
	if (!m->dwfl) {
		s->unresolved++;
		return push_offset(s, m->base, offset, 0);
	}

	Dwarf_Addr pc = offset + m->bias;
	const char *file = NULL;
	int line = 0;
	Dwarf_Addr cubias;
	Dwarf_Attribute attr;
	Dwarf_Die *cu = dwfl_module_addrdie(m->mod, pc, &cubias);
	s->comp_dir = cu ? dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &attr)) : NULL;
	Dwfl_Line *row = dwfl_module_getsrc(m->mod, pc);
	if (row)
		file = mt_dwarf_known_file(dwfl_lineinfo(row, NULL, &line, NULL, NULL, NULL));
	return push_scopes(s, m, offset, pc, symbol_at(m, pc), file, line > 0 ? (uint32_t)line : 0);
}

static uint64_t key_hash(int module, uint64_t offset)
{
	uint64_t h = offset * 0x9E3779B97F4A7C15ull;
	h ^= (uint64_t)(uint32_t)module * 0xC2B2AE3D27D4EB4Full;
	return h ^ (h >> 29);
}

static uint64_t ents_rehash(const void *ctx, size_t i)
{
	const struct centry *e = &((const struct mt_symbols *)ctx)->ents[i];
	return key_hash(e->module, e->offset);
}

static struct centry *cache_find(const struct mt_symbols *s, int module, uint64_t offset)
{
	if (!s->nslots)
		return NULL;
	size_t j = key_hash(module, offset) & (s->nslots - 1);
	for (; s->slots[j]; j = (j + 1) & (s->nslots - 1)) {
		struct centry *e = &s->ents[s->slots[j] - 1];
		if (e->offset == offset && e->module == module)
			return e;
	}
	return NULL;
}

/* Caches frames[first, nframes) as (@module, @offset). Returns the entry
 * or NULL on ENOMEM. */
static struct centry *cache_add(struct mt_symbols *s, int module, uint64_t offset, size_t first)
{
	if (s->nents * 2 >= s->nslots &&
	    mt_slots_grow(&s->slots, &s->nslots, 1024, 0, s->nents, ents_rehash, s) < 0)
		return NULL;
	if (s->nents == s->capents) {
		size_t n = s->capents ? s->capents * 2 : 1024;
		struct centry *nv = n < UINT32_MAX ? realloc(s->ents, n * sizeof(*nv)) : NULL;
		if (!nv)
			return NULL;
		s->ents = nv;
		s->capents = n;
	}
	size_t j = key_hash(module, offset) & (s->nslots - 1);
	while (s->slots[j])
		j = (j + 1) & (s->nslots - 1);
	struct centry *e = &s->ents[s->nents];
	*e = (struct centry){ offset, module, (uint32_t)first, (uint32_t)(s->nframes - first) };
	s->slots[j] = (uint32_t)++s->nents;
	return e;
}

size_t mt_symbols_resolve(struct mt_symbols *s, int module, uint64_t offset,
			  struct mt_symframe *out, size_t max)
{
	if (!out || !max)
		return 0;
	out[0] = (struct mt_symframe){ unknown, NULL, 0, 0 };
	if (!s)
		return 1;
	if (module < 0 || (size_t)module >= s->nmods) {
		/* Not cached: the module may be added later. */
		size_t first = s->nframes;
		if (push_offset(s, unknown, offset, 0) == 0)
			out[0] = s->frames[first];
		s->nframes = first;
		return 1;
	}
	struct centry *e = cache_find(s, module, offset);
	if (!e) {
		size_t first = s->nframes;
		uint64_t unresolved = s->unresolved;
		if (resolve_module(s, &s->mods[module], offset) == 0)
			e = cache_add(s, module, offset, first);
		if (!e) {
			s->nframes = first;
			s->unresolved = unresolved;
			return 1;
		}
	}
	size_t n = e->n < max ? e->n : max;
	memcpy(out, &s->frames[e->first], n * sizeof(*out));
	return n;
}

/* ------------------------------------------------------------------ */
/* Lifetime */

struct mt_symbols *mt_symbols_new(void)
{
	struct mt_symbols *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (mt_symbols_set_debug_roots(s, default_roots) < 0) {
		free(s);
		return NULL;
	}
	s->cb.find_elf = dwfl_build_id_find_elf;
	s->cb.find_debuginfo = find_debuginfo;
	s->cb.section_address = dwfl_offline_section_address;
	s->cb.debuginfo_path = &s->debuginfo_path;
	return s;
}

int mt_symbols_set_debug_roots(struct mt_symbols *s, const char *roots)
{
	static const char prefix[] = ":.debug:";

	if (!s || !roots || s->any_open)
		return -EINVAL;
	size_t n = strlen(roots);
	char *r = strdup(roots);
	char *p = malloc(sizeof(prefix) + n);
	if (!r || !p) {
		free(r);
		free(p);
		return -ENOMEM;
	}
	memcpy(p, prefix, sizeof(prefix) - 1);
	memcpy(p + sizeof(prefix) - 1, roots, n + 1);
	free(s->roots);
	free(s->debuginfo_path);
	s->roots = r;
	s->debuginfo_path = p;
	return 0;
}

int mt_symbols_add_module(struct mt_symbols *s, const char *path, const uint8_t *build_id,
			  size_t build_id_len, uint64_t load_bias)
{
	if (!s || s->nmods >= INT_MAX)
		return -1;
	if (s->nmods == s->capmods) {
		size_t n = s->capmods ? s->capmods * 2 : 16;
		struct module *nv = realloc(s->mods, n * sizeof(*nv));
		if (!nv)
			return -1;
		s->mods = nv;
		s->capmods = n;
	}
	if (!build_id)
		build_id_len = 0;
	struct module m = { .load_bias = load_bias, .build_id_len = build_id_len };
	m.path = strdup(path ? path : "");
	m.build_id = build_id_len ? malloc(build_id_len) : NULL;
	if (!m.path || (build_id_len && !m.build_id)) {
		free(m.path);
		free(m.build_id);
		return -1;
	}
	if (build_id_len)
		memcpy(m.build_id, build_id, build_id_len);
	const char *slash = strrchr(m.path, '/');
	m.base = slash ? slash + 1 : m.path;
	if (!*m.base)
		m.base = unknown;
	s->mods[s->nmods] = m;
	return (int)s->nmods++;
}

void mt_symbols_stats(const struct mt_symbols *s, struct mt_symbols_stats *st)
{
	*st = (struct mt_symbols_stats){ 0 };
	if (!s)
		return;
	st->addresses = s->nents;
	st->unresolved = s->unresolved;
	st->modules = (uint32_t)s->nmods;
	st->modules_missing = s->missing;
}

void mt_symbols_free(struct mt_symbols *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nmods; i++) {
		struct module *m = &s->mods[i];
		mt_dwarf_scopes_free(m->scopes);
		if (m->dwfl)
			dwfl_end(m->dwfl);
		free(m->syms);
		free(m->path);
		free(m->build_id);
	}
	for (size_t i = 0; i < s->nstrs; i++)
		free(s->strs[i]);
	free(s->mods);
	free(s->ents);
	free(s->slots);
	free(s->frames);
	free(s->strs);
	free(s->str_slots);
	free(s->roots);
	free(s->debuginfo_path);
	free(s);
}
