/* SPDX-License-Identifier: MIT */
/*
 * A DWARF CFI unwinder with a cache of frame rules (unwind.h).
 *
 * A rule is what the frame whose return address is r (whose code is at
 * r - 1, the call) needs to give its caller's registers:
 *
 *   bits 0-1   kind: RSP (CFA = rsp + off), RBP (CFA = rbp + off),
 *              STOP (the return address is undefined: the outermost frame)
 *   bits 2-5   rbp: 0 kept, k: saved at CFA - 8k (with STOP: bit 2 is
 *              FALLBACK, a frame not handled here)
 *   bits 6-18  off, in units of 8 bytes (rules with other offsets are
 *              FALLBACK)
 *
 * The return address is always at CFA - 8 (rules that say otherwise are
 * FALLBACK). A cache word is (r >> SET_BITS) << RULE_BITS | rule, in the
 * set that r's low bits and that key pick: the word names its r exactly.
 * Return addresses at or above 2^47 are never cached (x86-64 user space
 * is below it).
 *
 * A thread's own cache (struct mt_unwind_local) holds words of the same
 * form, (r >> MT_UNWIND_LOCAL_BITS) << RULE_BITS | rule, at r's low bits.
 */
#include "payload/unwind.h"
#include "payload/phdr.h"

#include <errno.h>  /* ENOMEM, ENOSYS */
#include <link.h>   /* dl_iterate_phdr, PT_GNU_EH_FRAME */
#include <stddef.h> /* offsetof */
#include <string.h> /* memcpy */
#include <sys/mman.h> /* mmap */

#define RULE_BITS 19
#define RULE_MASK ((1ull << RULE_BITS) - 1)
#define K_RSP 1u
#define K_RBP 2u
#define K_STOP 3u
#define FALLBACK (K_STOP | 4u)
#define OFF_MAX (((1u << (RULE_BITS - 6)) - 1) * 8)
#define SET_BITS 14
#define SETS (1u << SET_BITS)
#define WAYS 4
#define ADDR_LIMIT (1ull << 47)
#define LOCAL (1u << MT_UNWIND_LOCAL_BITS)

static uint64_t *cache; /* SETS * WAYS words */
static unsigned long learned;
static unsigned long forgets; /* mt_unwind_forget() calls: threads' own caches empty */
static unsigned long long subs_seen; /* dlpi_subs at the last lookup */

int mt_unwind_init(void)
{
#if defined(__x86_64__)
	if (__atomic_load_n(&cache, __ATOMIC_ACQUIRE))
		return 0;
	void *a = mmap(NULL, SETS * WAYS * sizeof(uint64_t), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a == MAP_FAILED)
		return -ENOMEM;
	uint64_t *none = NULL;
	if (!__atomic_compare_exchange_n(&cache, &none, a, 0, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
		munmap(a, SETS * WAYS * sizeof(uint64_t));
	return 0;
#else
	return -ENOSYS;
#endif
}

void mt_unwind_forget(void)
{
	uint64_t *c = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
	if (!c)
		return;
	for (size_t i = 0; i < SETS * WAYS; i++)
		__atomic_store_n(&c[i], 0, __ATOMIC_RELAXED);
	__atomic_fetch_add(&forgets, 1, __ATOMIC_RELEASE);
}

unsigned long mt_unwind_learned(void)
{
	return __atomic_load_n(&learned, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------
 * Reading .eh_frame_hdr and .eh_frame (the LSB's forms of DWARF's call
 * frame information). Every reader returns -1 on what it does not know.
 * ---------------------------------------------------------------------- */
enum {
	PE_ABS = 0x00, PE_ULEB = 0x01, PE_U2 = 0x02, PE_U4 = 0x03, PE_U8 = 0x04,
	PE_SLEB = 0x09, PE_S2 = 0x0a, PE_S4 = 0x0b, PE_S8 = 0x0c,
	PE_PCREL = 0x10, PE_DATAREL = 0x30, PE_INDIRECT = 0x80, PE_OMIT = 0xff,
};

struct cur {
	const uint8_t *p, *end;
};

static int uleb(struct cur *c, uint64_t *v)
{
	uint64_t r = 0;
	for (unsigned s = 0; c->p < c->end && s < 64; s += 7) {
		uint8_t b = *c->p++;
		r |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80)) {
			*v = r;
			return 0;
		}
	}
	return -1;
}

static int sleb(struct cur *c, int64_t *v)
{
	uint64_t r = 0;
	unsigned s = 0;
	uint8_t b;
	do {
		if (c->p >= c->end || s >= 64)
			return -1;
		b = *c->p++;
		r |= (uint64_t)(b & 0x7f) << s;
		s += 7;
	} while (b & 0x80);
	if (s < 64 && (b & 0x40))
		r |= ~0ull << s;
	*v = (int64_t)r;
	return 0;
}

static int fixed(struct cur *c, void *out, size_t n)
{
	if ((size_t)(c->end - c->p) < n)
		return -1;
	memcpy(out, c->p, n);
	c->p += n;
	return 0;
}

/* A pointer in encoding @enc; @data: the base of PE_DATAREL; @deref:
 * follow PE_INDIRECT (else only step over it). */
static int encoded(struct cur *c, uint8_t enc, uintptr_t data, int deref, uintptr_t *v)
{
	if (enc == PE_OMIT)
		return -1;
	uintptr_t at = (uintptr_t)c->p, x;
	union {
		uint16_t u2; uint32_t u4; uint64_t u8; int16_t s2; int32_t s4; int64_t s8;
	} u;
	switch (enc & 0x0f) {
	case PE_ABS: case PE_U8: case PE_S8:
		if (fixed(c, &u.u8, 8) < 0) return -1;
		x = (uintptr_t)u.u8;
		break;
	case PE_U2: if (fixed(c, &u.u2, 2) < 0) return -1; x = u.u2; break;
	case PE_U4: if (fixed(c, &u.u4, 4) < 0) return -1; x = u.u4; break;
	case PE_S2: if (fixed(c, &u.s2, 2) < 0) return -1; x = (uintptr_t)(intptr_t)u.s2; break;
	case PE_S4: if (fixed(c, &u.s4, 4) < 0) return -1; x = (uintptr_t)(intptr_t)u.s4; break;
	case PE_ULEB: if (uleb(c, &u.u8) < 0) return -1; x = (uintptr_t)u.u8; break;
	case PE_SLEB: if (sleb(c, &u.s8) < 0) return -1; x = (uintptr_t)u.s8; break;
	default: return -1;
	}
	switch (enc & 0x70) {
	case 0: break;
	case PE_PCREL: x += at; break;
	case PE_DATAREL: if (!data) return -1; x += data; break;
	default: return -1;
	}
	if (enc & PE_INDIRECT) {
		if (!deref)
			return 0;
		memcpy(&x, (const void *)x, sizeof(x));
	}
	*v = x;
	return 0;
}

/* The record (CIE or FDE) at @p: its contents after the length, in @c. */
static int record(const uint8_t *p, struct cur *c)
{
	uint32_t len;
	memcpy(&len, p, 4);
	p += 4;
	uint64_t n = len;
	if (len == 0xffffffffu) {
		memcpy(&n, p, 8);
		p += 8;
	}
	if (n == 0 || n > (1u << 30))
		return -1;
	c->p = p;
	c->end = p + n;
	return 0;
}

struct cie {
	uint64_t code_align;
	int64_t data_align;
	uint8_t fde_enc, has_z, signal;
	struct cur insns;
};

static int parse_cie(const uint8_t *at, struct cie *ci)
{
	struct cur c;
	uint32_t id;
	uint8_t version;
	if (record(at, &c) < 0 || fixed(&c, &id, 4) < 0 || id != 0 || fixed(&c, &version, 1) < 0 ||
	    (version != 1 && version != 3))
		return -1;
	const char *aug = (const char *)c.p;
	size_t alen = strnlen(aug, (size_t)(c.end - c.p));
	if (aug + alen >= (const char *)c.end)
		return -1;
	c.p += alen + 1;
	uint64_t ra;
	if (uleb(&c, &ci->code_align) < 0 || sleb(&c, &ci->data_align) < 0)
		return -1;
	if (version == 1) {
		uint8_t b;
		if (fixed(&c, &b, 1) < 0)
			return -1;
		ra = b;
	} else if (uleb(&c, &ra) < 0) {
		return -1;
	}
	if (ra != 16)
		return -1; /* x86-64's return address column */
	ci->fde_enc = PE_ABS;
	ci->has_z = ci->signal = 0;
	struct cur z = c;
	if (aug[0] == 'z') {
		uint64_t zlen;
		if (uleb(&c, &zlen) < 0 || zlen > (uint64_t)(c.end - c.p))
			return -1;
		z.p = c.p;
		z.end = c.p + zlen;
		c.p += zlen;
		ci->has_z = 1;
	} else if (alen) {
		return -1;
	}
	for (size_t i = 1; i < alen; i++) {
		uint8_t enc;
		uintptr_t skip;
		switch (aug[i]) {
		case 'R':
			if (fixed(&z, &ci->fde_enc, 1) < 0)
				return -1;
			break;
		case 'L':
			if (fixed(&z, &enc, 1) < 0)
				return -1;
			break;
		case 'P':
			if (fixed(&z, &enc, 1) < 0 || encoded(&z, enc, 0, 0, &skip) < 0)
				return -1;
			break;
		case 'S':
			ci->signal = 1;
			break;
		default:
			return -1;
		}
	}
	ci->insns = c;
	return 0;
}

/* The registers the rule needs, as a CFA program leaves them. */
enum { R_SAME, R_OFFSET, R_UNDEF, R_OTHER, R_UNSET };
struct row {
	uint64_t cfa_reg;
	int64_t cfa_off;
	int cfa_expr;
	int rsp_ruled;      /* rsp given a rule of its own: not the CFA */
	int rbp, ra;        /* R_* */
	int64_t rbp_off, ra_off;
};

#define DW_RBP 6
#define DW_RSP 7
#define DW_RA 16
#define REMEMBER_MAX 8

static void set_reg(struct row *r, uint64_t reg, int how, int64_t off)
{
	if (reg == DW_RBP) {
		r->rbp = how;
		r->rbp_off = off;
	} else if (reg == DW_RA) {
		r->ra = how;
		r->ra_off = off;
	} else if (reg == DW_RSP) {
		r->rsp_ruled = 1;
	}
}

/* Runs @c up to the row for @pc (@loc: the address the program starts
 * at; ~0 for a CIE's, which runs whole); @init: the CIE's row, for
 * DW_CFA_restore. */
static int run(struct cur c, const struct cie *ci, uintptr_t loc, uintptr_t pc, struct row *r,
	       const struct row *init)
{
	struct row saved[REMEMBER_MAX];
	int depth = 0;
	while (c.p < c.end) {
		uint8_t op = *c.p++;
		uint64_t reg, u, delta = 0;
		int64_t s;
		uint8_t u1;
		uint16_t u2;
		uint32_t u4;
		switch (op >> 6) {
		case 1:
			delta = op & 0x3f;
			goto advance;
		case 2:
			if (uleb(&c, &u) < 0)
				return -1;
			set_reg(r, op & 0x3f, R_OFFSET, (int64_t)u * ci->data_align);
			continue;
		case 3:
			reg = op & 0x3f;
			goto restore;
		}
		switch (op) {
		case 0x00: /* nop */
			continue;
		case 0x01: { /* set_loc */
			uintptr_t to;
			if (encoded(&c, ci->fde_enc, 0, 1, &to) < 0)
				return -1;
			if (to > pc)
				return 0;
			loc = to;
			continue;
		}
		case 0x02: if (fixed(&c, &u1, 1) < 0) return -1; delta = u1; goto advance;
		case 0x03: if (fixed(&c, &u2, 2) < 0) return -1; delta = u2; goto advance;
		case 0x04: if (fixed(&c, &u4, 4) < 0) return -1; delta = u4; goto advance;
		case 0x05: /* offset_extended */
			if (uleb(&c, &reg) < 0 || uleb(&c, &u) < 0)
				return -1;
			set_reg(r, reg, R_OFFSET, (int64_t)u * ci->data_align);
			continue;
		case 0x06: /* restore_extended */
			if (uleb(&c, &reg) < 0)
				return -1;
			goto restore;
		case 0x07: /* undefined */
		case 0x08: /* same_value */
			if (uleb(&c, &reg) < 0)
				return -1;
			set_reg(r, reg, op == 0x07 ? R_UNDEF : R_SAME, 0);
			continue;
		case 0x09: /* register */
		case 0x0a: /* remember_state */
			if (depth == REMEMBER_MAX)
				return -1;
			saved[depth++] = *r;
			continue;
		case 0x0b: /* restore_state: the CFA too, as GCC means it */
			if (depth == 0)
				return -1;
			*r = saved[--depth];
			continue;
		case 0x0c: /* def_cfa */
			if (uleb(&c, &r->cfa_reg) < 0 || uleb(&c, &u) < 0)
				return -1;
			r->cfa_off = (int64_t)u;
			r->cfa_expr = 0;
			continue;
		case 0x0d: /* def_cfa_register */
			if (uleb(&c, &r->cfa_reg) < 0)
				return -1;
			continue;
		case 0x0e: /* def_cfa_offset */
			if (uleb(&c, &u) < 0)
				return -1;
			r->cfa_off = (int64_t)u;
			continue;
		case 0x0f: /* def_cfa_expression */
			if (uleb(&c, &u) < 0 || u > (uint64_t)(c.end - c.p))
				return -1;
			c.p += u;
			r->cfa_expr = 1;
			continue;
		case 0x10: /* expression */
		case 0x16: /* val_expression */
			if (uleb(&c, &reg) < 0 || uleb(&c, &u) < 0 || u > (uint64_t)(c.end - c.p))
				return -1;
			c.p += u;
			set_reg(r, reg, R_OTHER, 0);
			continue;
		case 0x11: /* offset_extended_sf */
			if (uleb(&c, &reg) < 0 || sleb(&c, &s) < 0)
				return -1;
			set_reg(r, reg, R_OFFSET, s * ci->data_align);
			continue;
		case 0x12: /* def_cfa_sf */
			if (uleb(&c, &r->cfa_reg) < 0 || sleb(&c, &s) < 0)
				return -1;
			r->cfa_off = s * ci->data_align;
			r->cfa_expr = 0;
			continue;
		case 0x13: /* def_cfa_offset_sf */
			if (sleb(&c, &s) < 0)
				return -1;
			r->cfa_off = s * ci->data_align;
			continue;
		case 0x15: /* val_offset_sf */
			if (uleb(&c, &reg) < 0 || sleb(&c, &s) < 0)
				return -1;
			set_reg(r, reg, R_OTHER, 0);
			continue;
		case 0x2e: /* GNU_args_size */
			if (uleb(&c, &u) < 0)
				return -1;
			continue;
		case 0x2f: /* GNU_negative_offset_extended */
			if (uleb(&c, &reg) < 0 || uleb(&c, &u) < 0)
				return -1;
			set_reg(r, reg, R_OFFSET, -(int64_t)u * ci->data_align);
			continue;
		default:
			return -1;
		}
advance:
		if (loc == ~(uintptr_t)0)
			return -1; /* a CIE's program does not advance */
		loc += delta * ci->code_align;
		if (loc > pc)
			return 0;
		continue;
restore:
		if (!init)
			return -1;
		if (reg == DW_RBP)
			set_reg(r, reg, init->rbp, init->rbp_off);
		else if (reg == DW_RA)
			set_reg(r, reg, init->ra, init->ra_off);
		continue;
	}
	return 0;
}

/* The rule of the code at @pc, in the FDE that @hdr's table gives. */
static uint32_t rule_in(const uint8_t *hdr, uintptr_t pc)
{
	struct cur c = { hdr + 4, hdr + 4 + 32 };
	uint8_t version = hdr[0], ptr_enc = hdr[1], count_enc = hdr[2], table_enc = hdr[3];
	uintptr_t eh_frame, count;
	if (version != 1 || encoded(&c, ptr_enc, (uintptr_t)hdr, 1, &eh_frame) < 0 ||
	    encoded(&c, count_enc, (uintptr_t)hdr, 1, &count) < 0 || count == 0)
		return FALLBACK;
	if (table_enc != (PE_DATAREL | PE_S4))
		return FALLBACK; /* what every linker writes */
	const uint8_t *table = c.p;
	size_t lo = 0, hi = count;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		int32_t start;
		memcpy(&start, table + mid * 8, 4);
		if ((uintptr_t)hdr + (intptr_t)start <= pc)
			lo = mid;
		else
			hi = mid;
	}
	int32_t fde_rel;
	memcpy(&fde_rel, table + lo * 8 + 4, 4);
	const uint8_t *fde = hdr + fde_rel;
	struct cur f;
	uint32_t cie_ptr;
	if (record(fde, &f) < 0 || fixed(&f, &cie_ptr, 4) < 0 || cie_ptr == 0)
		return FALLBACK;
	struct cie ci;
	uintptr_t begin, range;
	if (parse_cie(f.p - 4 - cie_ptr, &ci) < 0 || ci.signal ||
	    encoded(&f, ci.fde_enc, 0, 1, &begin) < 0 ||
	    encoded(&f, ci.fde_enc & 0x0f, 0, 1, &range) < 0 || pc < begin || pc - begin >= range)
		return FALLBACK;
	if (ci.has_z) {
		uint64_t zlen;
		if (uleb(&f, &zlen) < 0 || zlen > (uint64_t)(f.end - f.p))
			return FALLBACK;
		f.p += zlen;
	}
	/* a return address the CIE gives no rule is not the outermost frame's
	 * (DW_CFA_undefined says that): left to libunwind */
	struct row init = { .cfa_reg = DW_RSP, .rbp = R_SAME, .ra = R_UNSET }, r;
	if (run(ci.insns, &ci, ~(uintptr_t)0, pc, &init, NULL) < 0)
		return FALLBACK;
	r = init;
	if (run(f, &ci, begin, pc, &r, &init) < 0)
		return FALLBACK;
	if (r.ra == R_UNDEF)
		return K_STOP;
	if (r.cfa_expr || r.rsp_ruled || (r.cfa_reg != DW_RSP && r.cfa_reg != DW_RBP) || r.cfa_off < 8 ||
	    r.cfa_off > OFF_MAX || r.cfa_off % 8 || r.ra != R_OFFSET || r.ra_off != -8)
		return FALLBACK;
	uint32_t slot = 0;
	if (r.rbp == R_OFFSET) {
		if (r.rbp_off > -16 || r.rbp_off < -8 * 15 || r.rbp_off % 8)
			return FALLBACK;
		slot = (uint32_t)(-r.rbp_off / 8);
	} else if (r.rbp != R_SAME) {
		return FALLBACK;
	}
	return (r.cfa_reg == DW_RSP ? K_RSP : K_RBP) | slot << 2 | (uint32_t)(r.cfa_off / 8) << 6;
}

struct lookup {
	uintptr_t pc;
	uint32_t rule;
	int first;
	unsigned long long subs; /* the loader's count of objects unloaded */
};

/* Under the loader's lock: the object holding pc, and its table. */
static int lookup_in(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct lookup *l = arg;
	const ElfW(Phdr) *hdr = NULL;
	int in = 0;
	if (l->first) {
		l->first = 0;
		if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
			l->subs = info->dlpi_subs;
	}
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && l->pc - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
			in = 1;
		else if (ph->p_type == PT_GNU_EH_FRAME)
			hdr = ph;
	}
	if (!in)
		return 0;
	l->rule = hdr ? rule_in((const uint8_t *)(info->dlpi_addr + hdr->p_vaddr), l->pc) : FALLBACK;
	return 1;
}

static __attribute__((noinline)) uint64_t learn(uint64_t *set, uintptr_t r)
{
	struct lookup l = { r - 1, FALLBACK, 1, 0 };
	if (mt_phdr_walk_if(lookup_in, &l) < 0)
		return 0; /* a fork kept it waiting: learnt at the next miss */
	__atomic_fetch_add(&learned, 1, __ATOMIC_RELAXED);
	/* an object unloaded where no dlclose of the program's was seen (the
	 * C library's own, of iconv modules): forgotten at the next miss */
	unsigned long long was = __atomic_exchange_n(&subs_seen, l.subs, __ATOMIC_RELAXED);
	if (was != l.subs)
		mt_unwind_forget();
	if ((uint64_t)r < ADDR_LIMIT) {
		uint64_t word = (uint64_t)(r >> SET_BITS) << RULE_BITS | l.rule;
		size_t w = 0;
		while (w < WAYS && __atomic_load_n(&set[w], __ATOMIC_RELAXED))
			w++;
		__atomic_store_n(&set[w < WAYS ? w : (r >> 4) % WAYS], word, __ATOMIC_RELAXED);
	}
	return l.rule;
}

long mt_unwind(uintptr_t *ips, size_t max, const struct mt_unwind_stop *stop,
	       struct mt_unwind_local *local)
{
#if defined(__x86_64__)
	uint64_t *c = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
	uintptr_t ip, sp, bp;
	if (!c)
		return -1;
	/* the registers at one place in this function, whose own rule (for
	 * the code at ip) is cached as that of the return address ip + 1 */
	__asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
			 : "=r"(ip), "=r"(sp), "=r"(bp));
	if (local) {
		unsigned long f = __atomic_load_n(&forgets, __ATOMIC_ACQUIRE);
		if (local->forgets != f) {
			memset(local->word, 0, sizeof(local->word));
			local->forgets = f;
		}
	}
	size_t n = 0, seen = 0, need = stop ? stop->need : 0, left = (size_t)-1;
	for (uintptr_t r = ip + 1; n < max;) {
		uint64_t rule = 0, *mine = NULL;
		if (local && (uint64_t)r < ADDR_LIMIT) {
			mine = &local->word[r & (LOCAL - 1)];
			if (*mine >> RULE_BITS == (uint64_t)r >> MT_UNWIND_LOCAL_BITS)
				rule = *mine & RULE_MASK;
		}
		if (!rule) {
			uint64_t key = (uint64_t)r >> SET_BITS;
			uint64_t *set = &c[((r ^ key) & (SETS - 1)) * WAYS];
			for (size_t w = 0; w < WAYS; w++) {
				uint64_t e = __atomic_load_n(&set[w], __ATOMIC_RELAXED);
				if (e >> RULE_BITS == key) {
					rule = e & RULE_MASK;
					break;
				}
			}
			if (!rule && !(rule = learn(set, r)))
				return -2; /* nothing cached, not even here */
			if (mine)
				*mine = (uint64_t)r >> MT_UNWIND_LOCAL_BITS << RULE_BITS | rule;
		}
		if ((rule & 3) == K_STOP)
			return rule == K_STOP ? (long)n : -1;
		uintptr_t cfa = ((rule & 3) == K_RSP ? sp : bp) + (rule >> 6) * 8;
		if (cfa <= sp)
			return -1;
		uintptr_t ra;
		memcpy(&ra, (const void *)(cfa - 8), sizeof(ra));
		unsigned slot = (rule >> 2) & 15;
		if (slot)
			memcpy(&bp, (const void *)(cfa - 8 * slot), sizeof(bp));
		sp = cfa;
		if (ra == 0)
			break;
		ips[n++] = ra;
		r = ra;
		if (left != (size_t)-1) {
			if (--left == 0)
				break;
		} else if (need && (ra - 1 - stop->lo[0] < stop->hi[0] - stop->lo[0] ||
				    ra - 1 - stop->lo[1] < stop->hi[1] - stop->lo[1]) &&
			   ++seen == need) {
			if (stop->past == 0)
				break;
			left = stop->past;
		}
	}
	return (long)n;
#else
	(void)ips, (void)max, (void)stop, (void)local;
	return -1;
#endif
}
