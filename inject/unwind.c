/* SPDX-License-Identifier: MIT */
/*
 * Remote unwinding with the target's unwind tables found through
 * /proc/PID/map_files (see unwind.h for why not libunwind-ptrace's own
 * lookup by path).
 */
#include "inject/unwind.h"

#include <errno.h>            /* ENOMEM */
#include <gelf.h>             /* GElf_Phdr */
#include <libunwind-ptrace.h> /* _UPT_access_mem */
#include <stdlib.h>           /* realloc */
#include <string.h>           /* memset */
#include <unistd.h>           /* pread */

/* Searches a .eh_frame_hdr table for @ip, reading the table and the FDEs
 * through the address space's accessors. Exported by libunwind, declared
 * by none of its headers (Linux perf declares it the same way). */
extern int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t as, unw_word_t ip,
					      unw_dyn_info_t *di, unw_proc_info_t *pi,
					      int need_unwind_info, void *arg);

struct mt_unwind_module {
	uint64_t base; /* start of the module's offset-0 mapping */
	int ok;        /* di holds a table */
	unw_dyn_info_t di;
};

/* DW_EH_PE_* value formats in .eh_frame_hdr: size of the encoded value
 * starting at @p (at most @left bytes), its value in *v (unsigned forms
 * only matter: the FDE count). Returns the size, or -1. */
static int encoded(uint8_t enc, const uint8_t *p, size_t left, uint64_t *v)
{
	size_t n;
	*v = 0;
	if (enc == 0xff) /* DW_EH_PE_omit */
		return 0;
	switch (enc & 0x0f) {
	case 0x00: case 0x04: case 0x0c: n = 8; break; /* absptr, udata8, sdata8 */
	case 0x03: case 0x0b: n = 4; break;            /* udata4, sdata4 */
	case 0x02: case 0x0a: n = 2; break;            /* udata2, sdata2 */
	case 0x01: case 0x09: {                        /* uleb128, sleb128 */
		unsigned shift = 0;
		for (n = 0; n < left && n < 10; n++) {
			*v |= (uint64_t)(p[n] & 0x7f) << shift;
			shift += 7;
			if (!(p[n] & 0x80))
				return (int)n + 1;
		}
		return -1;
	}
	default:
		return -1;
	}
	if (n > left)
		return -1;
	for (size_t i = 0; i < n; i++)
		*v |= (uint64_t)p[i] << (8 * i);
	return (int)n;
}

/* Fills @mod->di from the module's PT_GNU_EH_FRAME, read from the file the
 * target mapped. Returns 0, or -1 if it has no usable table. */
static int load_table(const struct mt_maps *maps, const struct mt_map *map,
		      struct mt_unwind_module *mod)
{
	struct mt_elf e;
	GElf_Phdr eh = { 0 };
	uint64_t lo = UINT64_MAX, hi = 0;
	size_t nph;
	int found = 0;

	if (mt__elf_open_map(&e, maps, map) < 0)
		return -1;
	if (elf_getphdrnum(e.elf, &nph) != 0)
		nph = 0;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(e.elf, (int)i, &ph))
			continue;
		if (ph.p_type == PT_LOAD) {
			if (ph.p_vaddr < lo)
				lo = ph.p_vaddr;
			if (ph.p_vaddr + ph.p_memsz > hi)
				hi = ph.p_vaddr + ph.p_memsz;
		} else if (ph.p_type == PT_GNU_EH_FRAME) {
			eh = ph;
			found = 1;
		}
	}
	/* version, eh_frame_ptr_enc, fde_count_enc, table_enc, then two
	 * encoded values: at most 4 + 10 + 10 bytes */
	uint8_t h[24];
	ssize_t got = found ? pread(e.fd, h, sizeof(h), (off_t)eh.p_offset) : -1;
	uint64_t bias = e.bias;
	mt__elf_close(&e);
	if (got < 4 || h[0] != 1 || h[3] != 0x3b) /* DW_EH_PE_datarel | sdata4 */
		return -1;
	uint64_t ignored, count;
	int a = encoded(h[1], h + 4, (size_t)got - 4, &ignored);
	if (a < 0)
		return -1;
	int b = encoded(h[2], h + 4 + a, (size_t)got - 4 - (size_t)a, &count);
	if (b <= 0 || lo >= hi)
		return -1;
	memset(&mod->di, 0, sizeof(mod->di));
	mod->di.start_ip = bias + lo;
	mod->di.end_ip = bias + hi;
	mod->di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
	/* table entries are pairs of 32-bit offsets from the header */
	mod->di.u.rti.segbase = bias + eh.p_vaddr;
	mod->di.u.rti.table_data = bias + eh.p_vaddr + 4 + (uint64_t)a + (uint64_t)b;
	mod->di.u.rti.table_len = count * 8 / sizeof(unw_word_t);
	return 0;
}

static struct mt_unwind_module *module_at(struct mt_unwinder *u, uint64_t ip)
{
	const struct mt_map *map = mt__maps_at(u->maps, ip);
	if (!map || map->path[0] != '/' || !strchr(map->perms, 'x'))
		return NULL;
	const struct mt_map *base = mt__maps_base(u->maps, map);
	if (!base)
		return NULL;
	for (size_t i = 0; i < u->nmods; i++)
		if (u->mods[i].base == base->start)
			return u->mods[i].ok ? &u->mods[i] : NULL;
	if (u->nmods == u->capmods) {
		size_t ncap = u->capmods ? u->capmods * 2 : 32;
		struct mt_unwind_module *v = realloc(u->mods, ncap * sizeof(*v));
		if (!v)
			return NULL;
		u->mods = v;
		u->capmods = ncap;
	}
	struct mt_unwind_module *mod = &u->mods[u->nmods++];
	mod->base = base->start;
	mod->ok = load_table(u->maps, map, mod) == 0;
	return mod->ok ? mod : NULL;
}

/* The accessors: ours find the tables; memory and registers go through
 * libunwind-ptrace with the current thread's handle. */
static int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
			  int need_unwind_info, void *arg)
{
	struct mt_unwind_module *mod = module_at(arg, ip);
	if (!mod || ip < mod->di.start_ip || ip >= mod->di.end_ip)
		return -UNW_ENOINFO;
	return UNW_OBJ(dwarf_search_unwind_table)(as, ip, &mod->di, pi, need_unwind_info, arg);
}

static void put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
	_UPT_put_unwind_info(as, pi, ((struct mt_unwinder *)arg)->upt);
}

static int get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *addr, void *arg)
{
	return _UPT_get_dyn_info_list_addr(as, addr, ((struct mt_unwinder *)arg)->upt);
}

static int access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write, void *arg)
{
	return _UPT_access_mem(as, addr, val, write, ((struct mt_unwinder *)arg)->upt);
}

static int access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write,
		      void *arg)
{
	return _UPT_access_reg(as, reg, val, write, ((struct mt_unwinder *)arg)->upt);
}

static int access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
			void *arg)
{
	return _UPT_access_fpreg(as, reg, val, write, ((struct mt_unwinder *)arg)->upt);
}

static int resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
	(void)as;
	(void)c;
	(void)arg;
	return -UNW_EINVAL; /* we only look */
}

/* Names would be looked up by path again: not offered. */
static int get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
			 unw_word_t *off, void *arg)
{
	(void)as;
	(void)addr;
	(void)buf;
	(void)len;
	(void)off;
	(void)arg;
	return -UNW_ENOINFO;
}

static unw_accessors_t accessors = {
	.find_proc_info = find_proc_info,
	.put_unwind_info = put_unwind_info,
	.get_dyn_info_list_addr = get_dyn_info_list_addr,
	.access_mem = access_mem,
	.access_reg = access_reg,
	.access_fpreg = access_fpreg,
	.resume = resume,
	.get_proc_name = get_proc_name,
};

int mt__unwinder_init(struct mt_unwinder *u, const struct mt_maps *m)
{
	memset(u, 0, sizeof(*u));
	u->maps = m;
	u->as = unw_create_addr_space(&accessors, 0);
	if (!u->as)
		return -ENOMEM;
	unw_set_caching_policy(u->as, UNW_CACHE_GLOBAL);
	return 0;
}

void mt__unwinder_release(struct mt_unwinder *u)
{
	mt__unwinder_end(u);
	if (u->as)
		unw_destroy_addr_space(u->as);
	free(u->mods);
	memset(u, 0, sizeof(*u));
}

int mt__unwinder_begin(struct mt_unwinder *u, pid_t tid, unw_cursor_t *c)
{
	mt__unwinder_end(u);
	u->upt = _UPT_create(tid);
	if (!u->upt)
		return -ENOMEM;
	if (unw_init_remote(c, u->as, u) < 0) {
		mt__unwinder_end(u);
		return -EINVAL;
	}
	return 0;
}

void mt__unwinder_end(struct mt_unwinder *u)
{
	if (u->upt)
		_UPT_destroy(u->upt);
	u->upt = NULL;
}
