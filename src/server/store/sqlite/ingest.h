/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One batch being stored by the SQLite backend (ingest.c), shared with the mapping of its
 * dictionaries to the store's ids (ingest_map.c). Nothing outside those two files includes it.
 */
#ifndef GPUSCOPE_STORE_SQLITE_INGEST_H
#define GPUSCOPE_STORE_SQLITE_INGEST_H

#include <stdbool.h>
#include <stdint.h>
#include "common/hmap.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/codec.h"
#include "server/store/sqlite/sqlite.h"

struct ls_pending {
	uint64_t id, hash, first, last;
	struct buf blob;
	bool is_new;
	bool refused;		/* new past the node's cardinality limit: its records are dropped */
};

struct ingest {
	struct sq *s;
	const Gpuscope__V1__Batch *m;
	struct ls_pending *ls;		/* per batch label set */
	uint64_t *loc_gid, *stack_gid;
	uint64_t new_ls, new_stacks;	/* rows this batch adds */
	uint64_t dropped_ls, dropped_records;	/* refused by the cardinality limit */
	/* the store's counters when the batch's savepoint began */
	uint64_t loc_seq0, stack_seq0, ivl_seq0, ls_seq0;
	size_t kept_records;		/* records of label sets not refused */
	char *err;
	size_t errlen;
};

/* The batch's string i. */
static inline const char *S(const struct ingest *in, uint32_t i)
{
	return in->m->strings[i];
}

/* Resolves a hash to an id through the cache, then the table (statement get, series); 1
 * found, 0 new, -errno. */
int ingest_dedup_id(struct sq *s, struct u64map *cache, int get, uint64_t hash, uint64_t *ret);
/* Remembers a new row's id in the cache (reset past DEDUP_CACHE_MAX). 0 or -ENOMEM. */
int ingest_cache_new(struct sq *s, struct u64map *cache, uint64_t hash, uint64_t id);
/* The batch's label sets, locations and stacks to the store's ids (new ones written, in the
 * batch's savepoint): in->ls, in->loc_gid, in->stack_gid. 0 or -errno. */
int ingest_map_label_sets(struct ingest *in);
int ingest_map_locations(struct ingest *in);
int ingest_map_stacks(struct ingest *in);
/* Widens batch label set ls's time extent to [t0, t1]. */
void ingest_ls_touch(struct ingest *in, uint32_t ls, uint64_t t0, uint64_t t1);

#endif
