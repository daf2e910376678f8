/* SPDX-License-Identifier: MIT */
/*
 * The concrete DWARF scopes around an address (reader/dwarf-scopes.h):
 * per-DIE indexes of the child scopes' address ranges, made as the DIEs
 * are first walked through, then binary searches down the nesting.
 */
#include "reader/dwarf-scopes.h"
#include "util/slots.h"

#include <dwarf.h>          /* DW_TAG_*, DW_AT_* */
#include <elfutils/libdw.h> /* dwarf_child, dwarf_ranges */
#include <stdlib.h>         /* malloc, qsort */
#include <string.h>         /* strcmp */

/* One address range of a child scope. */
struct range {
	Dwarf_Addr lo, hi;
	Dwarf_Die die;
};

/* A DIE's child scopes: ranges[first, first + n), sorted by lo. */
struct scope {
	const void *die; /* Dwarf_Die.addr: unique across the module's files */
	size_t first, n;
};

struct mt_dwarf_scopes {
	Dwfl_Module *mod;
	struct range *ranges;
	size_t nranges, capranges;
	struct scope *scopes;
	size_t nscopes, capscopes;
	uint32_t *slots; /* scopes by die: index + 1, 0 = empty */
	size_t nslots;
};

/* Namespaces within namespaces, past which functions are not looked for;
 * also bounds the recursion on damaged DWARF. */
#define MAX_NEST 16
/* Earlier ranges looked at for one that holds an address, when the range
 * just before it does not (ranges of one DIE's children rarely nest). */
#define LOOK_BACK 8

struct mt_dwarf_scopes *mt_dwarf_scopes_new(Dwfl_Module *mod)
{
	struct mt_dwarf_scopes *d = calloc(1, sizeof(*d));
	if (d)
		d->mod = mod;
	return d;
}

void mt_dwarf_scopes_free(struct mt_dwarf_scopes *d)
{
	if (!d)
		return;
	free(d->ranges);
	free(d->scopes);
	free(d->slots);
	free(d);
}

static uint64_t die_hash(const void *die)
{
	uint64_t h = (uint64_t)(uintptr_t)die * 0x9E3779B97F4A7C15ull;
	return h ^ (h >> 29);
}

static uint64_t scopes_rehash(const void *ctx, size_t i)
{
	return die_hash(((const struct mt_dwarf_scopes *)ctx)->scopes[i].die);
}

static int range_cmp(const void *a, const void *b)
{
	const struct range *x = a, *y = b;

	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	return x->hi < y->hi ? -1 : x->hi > y->hi;
}

/* Appends the ranges of @parent's child scopes; into namespaces too,
 * where a unit's functions may be. Returns 0 or -1 (ENOMEM). */
static int collect(struct mt_dwarf_scopes *d, Dwarf_Die *parent, int nest)
{
	Dwarf_Die child;

	if (nest > MAX_NEST || dwarf_child(parent, &child) != 0)
		return 0;
	do {
		switch (dwarf_tag(&child)) {
		case DW_TAG_namespace:
		case DW_TAG_module:
			if (collect(d, &child, nest + 1) < 0)
				return -1;
			continue;
		case DW_TAG_subprogram: /* also a GNU C nested function */
		case DW_TAG_inlined_subroutine:
		case DW_TAG_lexical_block:
		case DW_TAG_try_block:
		case DW_TAG_catch_block:
			break;
		default:
			continue;
		}
		Dwarf_Addr base, lo, hi;
		ptrdiff_t off = 0;
		while ((off = dwarf_ranges(&child, off, &base, &lo, &hi)) > 0) {
			if (hi <= lo)
				continue;
			if (d->nranges == d->capranges) {
				size_t n = d->capranges ? d->capranges * 2 : 256;
				struct range *nv = realloc(d->ranges, n * sizeof(*nv));
				if (!nv)
					return -1;
				d->ranges = nv;
				d->capranges = n;
			}
			d->ranges[d->nranges++] = (struct range){ lo, hi, child };
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	return 0;
}

/* The index of @die's child scopes, made at its first use; NULL on
 * ENOMEM (nothing is kept then). */
static const struct scope *scope_of(struct mt_dwarf_scopes *d, Dwarf_Die *die)
{
	if (d->nscopes * 2 >= d->nslots &&
	    mt_slots_grow(&d->slots, &d->nslots, 256, 0, d->nscopes, scopes_rehash, d) < 0)
		return NULL;
	size_t j = die_hash(die->addr) & (d->nslots - 1);
	for (; d->slots[j]; j = (j + 1) & (d->nslots - 1))
		if (d->scopes[d->slots[j] - 1].die == die->addr)
			return &d->scopes[d->slots[j] - 1];
	if (d->nscopes == d->capscopes) {
		size_t n = d->capscopes ? d->capscopes * 2 : 256;
		struct scope *nv = n < UINT32_MAX ? realloc(d->scopes, n * sizeof(*nv)) : NULL;
		if (!nv)
			return NULL;
		d->scopes = nv;
		d->capscopes = n;
	}
	size_t first = d->nranges;
	if (collect(d, die, 0) < 0) {
		d->nranges = first;
		return NULL;
	}
	if (d->nranges > first)
		qsort(d->ranges + first, d->nranges - first, sizeof(*d->ranges), range_cmp);
	struct scope *s = &d->scopes[d->nscopes];
	*s = (struct scope){ die->addr, first, d->nranges - first };
	d->slots[j] = (uint32_t)++d->nscopes;
	return s;
}

/* The child scope of @die whose range holds @pc, if any. */
static int child_at(struct mt_dwarf_scopes *d, Dwarf_Die *die, Dwarf_Addr pc, Dwarf_Die *out)
{
	const struct scope *s = scope_of(d, die);
	if (!s)
		return 0;
	const struct range *v = d->ranges + s->first;
	size_t lo = 0, hi = s->n;

	while (lo < hi) { /* first range starting above pc */
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid].lo <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i > 0 && lo - i < LOOK_BACK; i--) {
		if (pc < v[i - 1].hi) {
			*out = v[i - 1].die;
			return 1;
		}
	}
	return 0;
}

size_t mt_dwarf_scopes_at(struct mt_dwarf_scopes *d, Dwarf_Addr pc, Dwarf_Die *out, size_t max)
{
	Dwarf_Addr bias;
	Dwarf_Die *cu = dwfl_module_addrdie(d->mod, pc, &bias);
	size_t n = 0;

	if (!cu || !max)
		return 0;
	pc -= bias;
	/* The unit's child holding pc must be a function: anything else
	 * there (a stray lexical block of damaged DWARF) is not a frame. */
	if (!child_at(d, cu, pc, &out[0]) || dwarf_tag(&out[0]) != DW_TAG_subprogram)
		return 0;
	for (n = 1; n < max && child_at(d, &out[n - 1], pc, &out[n]); n++)
		;
	return n;
}

const char *mt_dwarf_known_file(const char *f)
{
	return f && *f && strcmp(f, "???") != 0 ? f : NULL;
}

void mt_dwarf_call_site(Dwarf_Die *die, const char **file, uint32_t *line)
{
	Dwarf_Attribute attr;
	Dwarf_Word idx, l;
	Dwarf_Die cu;
	Dwarf_Files *files;
	size_t nfiles;

	*file = NULL;
	*line = 0;
	/* The file index is into the line table of the unit the instance is
	 * in, which with LTO is not that of its abstract origin. */
	if (dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &attr), &idx) == 0 &&
	    dwarf_diecu(die, &cu, NULL, NULL) && dwarf_getsrcfiles(&cu, &files, &nfiles) == 0 &&
	    idx < nfiles)
		*file = mt_dwarf_known_file(dwarf_filesrc(files, idx, NULL, NULL));
	if (dwarf_formudata(dwarf_attr(die, DW_AT_call_line, &attr), &l) == 0 && l <= UINT32_MAX)
		*line = (uint32_t)l;
}
