/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unwind-table builder: walks every FDE of a binary (starts from .eh_frame_hdr's sorted search
 * table, or .debug_frame's entries), asks libdw for the rule of each address range, and keeps
 * what an x86-64 walker needs: how to find the CFA, where rbp was saved, PLT stubs, signal
 * trampolines and the outermost frame.
 */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "agent/procs/elf.h"
#include "agent/unwind/table.h"
#include "common/util.h"

#define REG_RBP 6
#define REG_RSP 7
#define REG_RA  16

/* Rows being built, already in their final 8-byte form (address relative to base). */
struct rows {
	__u64 *r;
	size_t n, cap;
	uint64_t base;		/* the first FDE's page: FDE starts come sorted */
	uint32_t max;
};

static int rows_add(struct rows *rs, uint64_t addr, __u64 row)
{
	uint64_t rel = addr - rs->base;

	if (addr < rs->base || rel > UINT32_MAX)
		return -E2BIG;
	row = (row & ~0xffffffffULL) | rel;
	if (rs->n && UNWIND_ROW_ADDR(rs->r[rs->n - 1]) == rel) {	/* a later rule wins */
		rs->r[rs->n - 1] = row;
		return 0;
	}
	if (rs->n && rs->r[rs->n - 1] >> 32 == row >> 32)
		return 0;	/* same rule as the row before: it just goes on */
	if (rs->max && rs->n >= rs->max)
		return -E2BIG;
	if (rs->n == rs->cap) {
		size_t ncap = rs->cap ? rs->cap + rs->cap / 2 : 4096;
		__u64 *nr = realloc(rs->r, ncap * sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		rs->r = nr;
		rs->cap = ncap;
	}
	rs->r[rs->n++] = row;
	return 0;
}

/* Offset N of an "offset(N)" register rule (saved at CFA + N), or false for any other rule. */
static bool saved_at_cfa(const Dwarf_Op *ops, size_t nops, int64_t *ret)
{
	if (nops == 2 && ops[0].atom == DW_OP_call_frame_cfa && ops[1].atom == DW_OP_plus_uconst) {
		*ret = (int64_t)ops[1].number;
		return true;
	}
	if (nops == 1 && ops[0].atom == DW_OP_call_frame_cfa) {
		*ret = 0;
		return true;
	}
	return false;
}

/* The row for libdw's frame; *unsupported set when we fall back to frame pointers. */
static __u64 frame_row(Dwarf_Frame *f, bool signal, bool *unsupported)
{
	Dwarf_Op mem[3], *ops = NULL;
	size_t nops = 0;
	int64_t ra_off, bp_off = 0, cfa_off;
	int kind;

	*unsupported = false;
	if (signal)
		return UNWIND_ROW(0, UNWIND_ROW_SIGNAL, 0, 0);
	if (dwarf_frame_register(f, REG_RA, mem, &ops, &nops))
		goto fallback;
	if (nops == 0 && ops == mem)	/* return address undefined: outermost frame */
		return UNWIND_ROW(0, UNWIND_ROW_END, 0, 0);
	if (!saved_at_cfa(ops, nops, &ra_off) || ra_off != -8)
		goto fallback;
	ops = NULL;
	if (dwarf_frame_cfa(f, &ops, &nops) || nops == 0)
		goto fallback;
	if (nops == 1 && ops[0].atom == DW_OP_bregx &&
	    (ops[0].number == REG_RSP || ops[0].number == REG_RBP)) {
		kind = ops[0].number == REG_RSP ? UNWIND_ROW_RSP : UNWIND_ROW_RBP;
		cfa_off = (int64_t)ops[0].number2;
	} else if (nops == 9 && ops[0].atom == DW_OP_breg7 && ops[0].number == 8 &&
		   ops[1].atom == DW_OP_breg16 && ops[4].atom >= DW_OP_lit0 &&
		   ops[4].atom <= DW_OP_lit31) {
		/* the PLT rule: rsp + 8, + 8 once (rip & 15) >= litN */
		return UNWIND_ROW(0, UNWIND_ROW_PLT, 0, ops[4].atom - DW_OP_lit0);
	} else {
		goto fallback;
	}
	if (cfa_off < 0 || cfa_off > 0xffff)
		goto fallback;
	ops = NULL;
	if (dwarf_frame_register(f, REG_RBP, mem, &ops, &nops))
		goto fallback;
	if (nops && (!saved_at_cfa(ops, nops, &bp_off) || bp_off % 8 || bp_off < -1024 ||
		     bp_off >= 0))
		goto fallback;
	return UNWIND_ROW(0, kind, bp_off / 8, cfa_off);
fallback:
	*unsupported = true;
	return UNWIND_ROW(0, UNWIND_ROW_FP, 0, 0);
}

/* ---- where FDEs start ------------------------------------------------------------------- */

static bool read_enc(const uint8_t **p, const uint8_t *end, uint8_t enc, uint64_t field_vaddr,
		     uint64_t data_vaddr, uint64_t *ret)
{
	const uint8_t *q = *p;
	uint64_t v;
	size_t n;

	switch (enc & 0x0f) {
	case DW_EH_PE_absptr: n = 8; break;
	case DW_EH_PE_udata2: case DW_EH_PE_sdata2: n = 2; break;
	case DW_EH_PE_udata4: case DW_EH_PE_sdata4: n = 4; break;
	case DW_EH_PE_udata8: case DW_EH_PE_sdata8: n = 8; break;
	default: return false;
	}
	if (q + n > end)
		return false;
	if (n == 2) {
		uint16_t x;

		memcpy(&x, q, 2);
		v = (enc & 0x0f) == DW_EH_PE_sdata2 ? (uint64_t)(int64_t)(int16_t)x : x;
	} else if (n == 4) {
		uint32_t x;

		memcpy(&x, q, 4);
		v = (enc & 0x0f) == DW_EH_PE_sdata4 ? (uint64_t)(int64_t)(int32_t)x : x;
	} else {
		memcpy(&v, q, 8);
	}
	switch (enc & 0x70) {
	case DW_EH_PE_absptr: break;
	case DW_EH_PE_pcrel: v += field_vaddr; break;
	case DW_EH_PE_datarel: v += data_vaddr; break;
	default: return false;
	}
	*p = q + n;
	*ret = v;
	return true;
}

/* FDE starts from .eh_frame_hdr's binary-search table (sorted by the linker). */
static int hdr_starts(Elf_Scn *scn, GElf_Shdr *sh, uint64_t **ret, size_t *ret_n)
{
	Elf_Data *d = elf_getdata(scn, NULL);
	const uint8_t *p, *end;
	uint64_t ptr, count;
	uint8_t enc_ptr, enc_count, enc_table;
	uint64_t *starts;

	if (!d || d->d_size < 4 || !d->d_buf)
		return -ENODATA;
	p = d->d_buf;
	end = p + d->d_size;
	if (p[0] != 1)
		return -ENODATA;
	enc_ptr = p[1];
	enc_count = p[2];
	enc_table = p[3];
	p += 4;
	if (enc_table == DW_EH_PE_omit || enc_count == DW_EH_PE_omit ||
	    !read_enc(&p, end, enc_ptr, sh->sh_addr + 4, sh->sh_addr, &ptr) ||
	    !read_enc(&p, end, enc_count, sh->sh_addr + (p - (const uint8_t *)d->d_buf),
		      sh->sh_addr, &count) ||
	    count > (uint64_t)(end - p) / 8)
		return -ENODATA;
	starts = malloc((count + 1) * sizeof(*starts));
	if (!starts)
		return -ENOMEM;
	for (uint64_t i = 0; i < count; i++) {
		uint64_t fde;

		if (!read_enc(&p, end, enc_table, sh->sh_addr + (p - (const uint8_t *)d->d_buf),
			      sh->sh_addr, &starts[i]) ||
		    !read_enc(&p, end, enc_table, sh->sh_addr + (p - (const uint8_t *)d->d_buf),
			      sh->sh_addr, &fde)) {
			free(starts);
			return -ENODATA;
		}
	}
	qsort(starts, count, sizeof(*starts), cmp_u64);
	*ret = starts;
	*ret_n = count;
	return 0;
}

/* FDE starts from .debug_frame (initial locations are plain 8-byte addresses). */
static int debug_frame_starts(Elf *elf, Elf_Scn *scn, uint64_t **ret, size_t *ret_n)
{
	Elf_Data *d = elf_getdata(scn, NULL);
	Dwarf_Off off = 0, next;
	Dwarf_CFI_Entry e;
	uint64_t *starts = NULL;
	size_t n = 0, cap = 0;
	int r;

	if (!d || !d->d_buf)
		return -ENODATA;
	while ((r = dwarf_next_cfi((const unsigned char *)elf_getident(elf, NULL), d, false, off,
				   &next, &e)) == 0) {
		off = next;
		if (dwarf_cfi_cie_p(&e) || !e.fde.start || e.fde.start + 8 > e.fde.end)
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 1024;
			uint64_t *ns = realloc(starts, (ncap + 1) * sizeof(*ns));

			if (!ns) {
				free(starts);
				return -ENOMEM;
			}
			starts = ns;
			cap = ncap;
		}
		memcpy(&starts[n++], e.fde.start, 8);
	}
	if (!n) {
		free(starts);
		return -ENODATA;
	}
	qsort(starts, n, sizeof(*starts), cmp_u64);
	*ret = starts;
	*ret_n = n;
	return 0;
}

static Elf_Scn *find_section(Elf *elf, const char *name, GElf_Shdr *ret)
{
	size_t shstrndx;
	Elf_Scn *scn = NULL;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return NULL;
	while ((scn = elf_nextscn(elf, scn))) {
		const char *n;

		if (!gelf_getshdr(scn, ret) || ret->sh_type == SHT_NOBITS)
			continue;
		n = elf_strptr(elf, shstrndx, ret->sh_name);
		if (n && !strcmp(n, name))
			return scn;
	}
	return NULL;
}

/* ---- the table -------------------------------------------------------------------------- */

/*
 * Turns the rows into the map's layout in place: the buffer grows by the header and page index
 * and the rows move up (no second copy of a libtorch-size table at the build's peak).
 */
static int finish(struct rows *rs, struct uw_table *t)
{
	size_t nwords, head;
	const __u64 *rows;
	uint64_t last;
	__u64 *w;

	if (!rs->n)
		return -ENODATA;
	last = UNWIND_ROW_ADDR(rs->r[rs->n - 1]);
	t->npages = (uint32_t)(last >> UNWIND_PAGE_SHIFT) + 1;
	head = UNWIND_HDR_WORDS + t->npages + 1;
	nwords = head + rs->n;
	if (nwords > UINT32_MAX)
		return -E2BIG;
	w = realloc(rs->r, nwords * sizeof(*w));
	if (!w)
		return -ENOMEM;
	rs->r = NULL;
	rs->cap = 0;
	memmove(w + head, w, rs->n * sizeof(*w));
	rows = w + head;
	w[0] = t->npages | (__u64)rs->n << 32;
	w[1] = rs->base;
	/* page p: the row in effect at its start (the last row at or before it) */
	for (size_t p = 0, i = 0; p <= t->npages; p++) {
		uint64_t at = (uint64_t)p << UNWIND_PAGE_SHIFT;

		while (i + 1 < rs->n && UNWIND_ROW_ADDR(rows[i + 1]) <= at)
			i++;
		w[UNWIND_HDR_WORDS + p] = i;
	}
	t->words = w;
	t->nwords = nwords;
	t->nrows = rs->n;
	t->base = rs->base;
	return 0;
}

int uw_fde_starts(Elf *elf, uint64_t **ret, size_t *ret_n, const char **ret_source)
{
	GElf_Shdr sh;
	Elf_Scn *scn;

	if (elf_kind(elf) != ELF_K_ELF)
		return -ENOEXEC;
	scn = find_section(elf, ".eh_frame_hdr", &sh);
	if (scn && !hdr_starts(scn, &sh, ret, ret_n)) {
		*ret_source = ".eh_frame";
		return 0;
	}
	scn = find_section(elf, ".debug_frame", &sh);
	if (scn && !debug_frame_starts(elf, scn, ret, ret_n)) {
		*ret_source = ".debug_frame";
		return 0;
	}
	return -ENODATA;
}

/*
 * libdw caches every FDE it parsed for the life of a Dwarf_CFI, and the .eh_frame pages read
 * stay resident: for libtorch_cpu (349 k FDEs) tens of MB at the peak of a build. Every
 * CFI_FRESH_FDES FDEs the CFI is made anew and the file's pages are dropped (clean pages of a
 * read-only mapping, read again from the page cache when needed).
 */
#define CFI_FRESH_FDES 16384

static Dwarf_CFI *cfi_fresh(Elf *elf, Dwarf_CFI *old, bool drop_pages)
{
	size_t len = 0;
	char *raw;

	dwarf_cfi_end(old);
	raw = drop_pages ? elf_rawfile(elf, &len) : NULL;
	if (raw && len)
		elf_drop_file_pages(elf, raw, len);
	return dwarf_getcfi_elf(elf);
}

static int build(Elf *elf, bool drop_pages, uint32_t max_rows, const volatile bool *cancel,
		 struct uw_table *t)
{
	struct rows rs = { .max = max_rows };
	Dwarf_CFI *cfi = NULL;
	Dwarf *dbg = NULL;
	uint64_t *starts = NULL;
	size_t nstarts = 0;
	int err;

	err = uw_fde_starts(elf, &starts, &nstarts, &t->source);
	if (err)
		return err;
	if (!strcmp(t->source, ".eh_frame")) {
		cfi = dwarf_getcfi_elf(elf);
	} else {
		dbg = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
		cfi = dbg ? dwarf_getcfi(dbg) : NULL;
	}
	if (!cfi) {
		err = -ENODATA;
		goto out;
	}
	t->fdes = nstarts;
	rs.base = nstarts ? starts[0] & ~((1ULL << UNWIND_PAGE_SHIFT) - 1) : 0;
	for (size_t i = 0; i < nstarts; i++) {
		uint64_t addr = starts[i], limit = i + 1 < nstarts ? starts[i + 1] : UINT64_MAX;

		if (i && starts[i] == starts[i - 1])
			continue;
		if (cancel && i % 1024 == 0 && *cancel) {	/* the agent stops: ~ms of work */
			err = -ECANCELED;
			goto out;
		}
		if (!dbg && i && i % CFI_FRESH_FDES == 0) {
			cfi = cfi_fresh(elf, cfi, drop_pages);
			if (!cfi) {
				err = -ENODATA;
				goto out;
			}
		}
		while (addr < limit) {
			Dwarf_Addr s, e;
			Dwarf_Frame *f;
			bool signal = false, unsupported;
			__u64 row;

			if (dwarf_cfi_addrframe(cfi, addr, &f))
				break;
			if (dwarf_frame_info(f, &s, &e, &signal) < 0 || e <= addr) {
				free(f);
				break;
			}
			row = frame_row(f, signal, &unsupported);
			free(f);
			t->unsupported += unsupported;
			err = rows_add(&rs, addr, row);
			if (err)
				goto out;
			addr = e;
		}
		/* up to the next FDE: no CFI */
		if (addr < limit && limit != UINT64_MAX) {
			err = rows_add(&rs, addr, UNWIND_ROW(0, UNWIND_ROW_NONE, 0, 0));
			if (err)
				goto out;
		} else if (limit == UINT64_MAX) {
			err = rows_add(&rs, addr, UNWIND_ROW(0, UNWIND_ROW_NONE, 0, 0));
			if (err)
				goto out;
		}
	}
	err = finish(&rs, t);
out:
	if (dbg)
		dwarf_end(dbg);
	else if (cfi)
		dwarf_cfi_end(cfi);
	free(starts);
	free(rs.r);
	return err;
}

int uw_table_build(int fd, const void *buf, size_t len, uint32_t max_rows,
		   const volatile bool *cancel, struct uw_table *ret)
{
	struct uw_table t = { 0 };
	Elf *elf;
	int err;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOTSUP;
	elf = fd >= 0 ? elf_begin(fd, ELF_C_READ_MMAP, NULL) : elf_memory((char *)buf, len);
	if (!elf)
		return -ENOEXEC;
	err = build(elf, fd >= 0, max_rows, cancel, &t);
	elf_end(elf);
	if (err) {
		free(t.words);
		return err;
	}
	*ret = t;
	return 0;
}

void uw_table_done(struct uw_table *t)
{
	free(t->words);
	memset(t, 0, sizeof(*t));
}

__u64 uw_table_lookup(const struct uw_table *t, uint64_t vaddr)
{
	const __u64 *rows;
	uint64_t rel;
	uint32_t lo, hi;

	if (!t->nrows || vaddr < t->base)
		return 0;
	rel = vaddr - t->base;
	if ((rel >> UNWIND_PAGE_SHIFT) >= t->npages)
		return 0;
	lo = t->words[UNWIND_HDR_WORDS + (rel >> UNWIND_PAGE_SHIFT)];
	hi = t->words[UNWIND_HDR_WORDS + (rel >> UNWIND_PAGE_SHIFT) + 1];
	rows = t->words + UNWIND_HDR_WORDS + t->npages + 1;
	if (hi >= t->nrows)
		hi = t->nrows - 1;
	while (lo < hi) {	/* the same search as uwalk_find_row() */
		uint32_t mid = (lo + hi + 1) / 2;

		if (UNWIND_ROW_ADDR(rows[mid]) <= rel)
			lo = mid;
		else
			hi = mid - 1;
	}
	return UNWIND_ROW_ADDR(rows[lo]) <= rel ? rows[lo] : 0;
}
