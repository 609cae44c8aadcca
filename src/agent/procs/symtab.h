/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sorted symbol table (binary search, aliases folded, zero sizes derived from the next
 * symbol), filled by the ELF reader (elf.h) and by the symbolizer's perf-map and kallsyms readers.
 */
#ifndef GPUSCOPE_AGENT_PROCS_SYMTAB_H
#define GPUSCOPE_AGENT_PROCS_SYMTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One symbol of a finished table: 16 bytes, so a table of 1e6 symbols takes 16 MB + names. */
struct symt_ent {
	uint64_t addr;
	uint32_t size;		/* bytes; derived from the next symbol when the source gave 0 */
	uint32_t name;		/* offset into symt.strs */
};

/* Candidate while building; prio decides which alias of one address wins (higher wins). */
struct symt_build {
	uint64_t addr, size;
	uint32_t name, aux;
	int32_t prio;
	uint32_t seq;		/* insertion order: later wins among equal prio (perf maps) */
};

/* A name offset with this bit set is into symt.ext, the file's own string table. */
#define SYMT_EXT 0x80000000u

struct symt {
	struct symt_ent *e;
	size_t n;
	uint32_t *aux;		/* per entry, if any symbol was added with aux != 0; else NULL */
	char *strs;		/* names, NUL-terminated */
	size_t slen, scap;
	/*
	 * The ELF string table the symbols' names are in, mapped read-only from the file (not
	 * copied): a libtorch-size .dynstr costs RSS only for the pages lookups touch, and those
	 * are clean file pages. NULL: every name is in strs.
	 */
	const char *ext;
	size_t ext_len;
	void *ext_map;
	size_t ext_map_len;
	struct symt_build *b;	/* only while building */
	size_t nb, bcap;
};

/* Adds a candidate (name copied). 0 or -ENOMEM. */
int symt_add(struct symt *t, uint64_t addr, uint64_t size, const char *name, size_t name_len,
	     int32_t prio, uint32_t aux);
/* Adds a candidate named by offset ext_off into t->ext (not copied). 0, -ENOMEM, -E2BIG. */
int symt_add_ext(struct symt *t, uint64_t addr, uint64_t size, size_t ext_off, int32_t prio);
/*
 * Sorts, keeps one symbol per address (highest prio, then latest), gives zero-size symbols the
 * distance to the next address capped at max_derived, and frees the build array. 0 or -ENOMEM.
 */
int symt_finish(struct symt *t, uint64_t max_derived);
/* Index of the symbol containing addr, or -1. */
long symt_find(const struct symt *t, uint64_t addr);
static inline const char *symt_name(const struct symt *t, long i)
{
	uint32_t name = t->e[i].name;

	return name & SYMT_EXT ? t->ext + (name & ~SYMT_EXT) : t->strs + name;
}
/* Bytes held by a finished table (its entries and copied names; not the mapped string table). */
size_t symt_bytes(const struct symt *t);
void symt_done(struct symt *t);

#endif
