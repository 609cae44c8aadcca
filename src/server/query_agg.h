/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The grouped aggregation the answers of query.c and query_pprof.c build from the store's
 * samples: per stack, its (group, value, value2) entries. Only those files include it.
 */
#ifndef GPUSCOPE_SERVER_QUERY_AGG_H
#define GPUSCOPE_SERVER_QUERY_AGG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/hmap.h"

struct gent {
	uint32_t group, next;		/* next: index + 1 of the stack's next entry, 0 ends */
	uint64_t v, v2;
};

struct gagg {
	bool grouped;			/* group_by: the root's children are the groups */
	struct gent *e;
	size_t n, cap;
	struct u64map head;		/* stack id -> index + 1 of its first entry */
	uint64_t *ids;			/* distinct stack ids, for stacks() */
	size_t nids, capids;
};

/* store_query.emit of the first and the second (diff) query: v into (group, stack)'s entry. */
int gagg_emit(void *ctx, uint32_t group, uint64_t stack, uint64_t v);
int gagg_emit2(void *ctx, uint32_t group, uint64_t stack, uint64_t v);
void gagg_done(struct gagg *g);

#endif
