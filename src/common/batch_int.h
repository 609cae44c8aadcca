/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The batch's own arrays (batch.c builds them, batch_encode.c turns them into the protobuf
 * message): one definition for the two files, no other user.
 */
#ifndef GPUSCOPE_BATCH_INT_H
#define GPUSCOPE_BATCH_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/hmap.h"

struct loc_rec {
	uint32_t function, module, build_id, file, line;
	uint32_t flags;		/* bit 0 kernel, bit 1 inlined */
	uint64_t address;
};

/* A growable array of fixed-size elements; VEC_AT(vec, type, i) is its i-th. */
#define VEC_AT(vec, type, i) (((type *)(vec).v)[i])

struct vec {
	void *v;
	size_t len, cap;
};

struct sgroup {
	uint32_t ls, kind;
	struct vec time;	/* uint64_t */
	struct vec stack;	/* uint32_t */
	struct vec value;	/* int64_t */
	bool all_one;
};

struct mseries {
	uint32_t name, ls;
	struct vec time;	/* uint64_t */
	struct vec value;	/* double */
};

struct ivl {
	uint32_t kind, ls;
	uint32_t stack;		/* 1 + stack index; 0: none */
	uint64_t start, end;
	size_t attr_off;	/* into batch.attrs */
	uint32_t nattrs;	/* pairs */
};

struct batch {
	pthread_mutex_t mu;
	bool any_time;			/* batch__allow_any_time(): no time check (test tools) */
	struct strtab strs;
	uint32_t node;
	uint64_t batch_id, period_ns;
	struct vec locs;		/* struct loc_rec */
	struct u64map loc_idx;		/* content hash (+probe) -> index */
	struct vec stack_data;		/* uint32_t location indexes, all stacks back to back */
	struct vec stack_off;		/* size_t, nstacks + 1 */
	struct u64map stack_idx;
	struct vec ls_data;		/* uint32_t pairs, all label sets back to back */
	struct vec ls_off;		/* size_t, nls + 1 */
	struct u64map ls_idx;
	struct vec groups;		/* struct sgroup */
	struct u64map group_idx;	/* ls << 8 | kind -> index */
	struct vec series;		/* struct mseries */
	struct u64map series_idx;	/* name << 32 | ls -> index */
	struct vec ivls;		/* struct ivl */
	struct vec attrs;		/* uint32_t pairs */
	size_t nsamples, nrecords, est;
	uint64_t str_bytes, npoints;	/* batch__counts(): strings' bytes, metric points */
	uint64_t label_bytes, ls_bytes_max, attr_bytes_max;	/* resolved, as batch_decode() */
};

static inline size_t nstacks(const struct batch *b)
{
	return b->stack_off.len ? b->stack_off.len - 1 : 0;
}

#endif
