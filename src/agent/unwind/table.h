/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unwind tables: one binary's call-frame information (.eh_frame, else .debug_frame), read with
 * elfutils' libdw, reduced to sorted 8-byte rows (unwind_maps.h) with a page index, in the
 * exact layout of the BPF inner map. Pure functions: any thread. Tables outlive the agent in
 * the on-disk cache (cache.h): a change to what is built from the same bytes, or to the row
 * layout, bumps CACHE_VERSION in cache.c.
 */
#ifndef GPUSCOPE_UNWIND_TABLE_H
#define GPUSCOPE_UNWIND_TABLE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <libelf.h>
#include <linux/types.h>
#include "agent/unwind/unwind_maps.h"

struct uw_table {
	__u64 *words;		/* malloc'ed: header, page index, rows (unwind_maps.h) */
	uint32_t nwords, nrows, npages;
	uint64_t base;		/* ELF vaddr of row address 0 */
	uint64_t fdes;		/* FDEs read */
	uint64_t unsupported;	/* rows whose rule the walker cannot follow (frame pointers) */
	const char *source;	/* ".eh_frame" or ".debug_frame" */
};

/*
 * Builds the table of the ELF file open as fd (or the image buf/len when fd < 0, e.g. the
 * vDSO). 0; -ENODATA when the binary has no usable CFI (the caller falls back to frame
 * pointers); -ENOEXEC not ELF; -E2BIG text over 4 GiB or more than max_rows rows (0: no limit);
 * -ENOMEM; -ECANCELED once *cancel (when not NULL) is true, looked at every 1024 FDEs. Free
 * with uw_table_done().
 */
int uw_table_build(int fd, const void *buf, size_t len, uint32_t max_rows,
		   const volatile bool *cancel, struct uw_table *ret);
void uw_table_done(struct uw_table *t);

/*
 * Where the binary's FDEs start (ELF vaddrs, sorted, duplicates possible): from .eh_frame_hdr's
 * search table, else .debug_frame. *ret_source: ".eh_frame" or ".debug_frame". 0, -ENODATA (no
 * CFI), -ENOEXEC, -ENOMEM; free(*ret). Also the symbolizer's function bounds in stripped code.
 */
int uw_fde_starts(Elf *elf, uint64_t **ret, size_t *ret_n, const char **ret_source);

/* The row in effect at ELF vaddr in t (what the BPF walker finds), or 0 (UNWIND_ROW_NONE). */
__u64 uw_table_lookup(const struct uw_table *t, uint64_t vaddr);

/* Bytes the table takes in its BPF map (its words). */
static inline uint64_t uw_table_bytes(const struct uw_table *t)
{
	return (uint64_t)t->nwords * 8;
}

#endif
