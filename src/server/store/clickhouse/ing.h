/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What ingest.c and samples.c share: one batch being turned into rows (struct cing), the rows
 * of one fact table by day (struct parts), and the row heads. Only those two include it.
 */
#ifndef GPUSCOPE_STORE_CH_ING_H
#define GPUSCOPE_STORE_CH_ING_H

#include <stdlib.h>
#include <string.h>
#include "gpuscope/v1/batch.pb-c.h"
#include "server/store/clickhouse/ch.h"

struct cing {
	struct ch *c;
	const Gpuscope__V1__Batch *m;
	uint64_t node_id, day, batch;
	uint64_t *ls_id, *loc_id, *stack_id;
	uint64_t *ls_first, *ls_last;
	uint64_t new_stacks;		/* stacks this front-end has not stored before */
};

static inline const char *S(const struct cing *in, uint32_t i)
{
	return in->m->strings[i];
}

static inline uint64_t ch_id(uint64_t h)
{
	h &= CH_IDS_MASK;
	return h ? h : 1;
}

static inline void touch(struct cing *in, uint32_t ls, uint64_t t0, uint64_t t1)
{
	if (t0 < in->ls_first[ls])
		in->ls_first[ls] = t0;
	if (t1 > in->ls_last[ls])
		in->ls_last[ls] = t1;
}

struct part {
	uint64_t day;
	struct buf rows, probe;		/* probe: its first row's key, a tuple (probe_cols) */
	bool stored;			/* found by a retry: an earlier attempt stored it */
};

struct parts {
	struct part *v;
	size_t n;
	bool oom;
};

static inline struct part *part_of(struct parts *p, uint64_t day)
{
	struct part *n;

	for (size_t i = 0; i < p->n; i++)
		if (p->v[i].day == day)
			return &p->v[i];
	n = realloc(p->v, (p->n + 1) * sizeof(*n));
	if (!n) {
		p->oom = true;
		return NULL;
	}
	p->v = n;
	n = &p->v[p->n++];
	memset(n, 0, sizeof(*n));
	n->day = day;
	return n;
}

static inline void probe_head(const struct cing *in, struct part *pt)
{
	buf_printf(&pt->probe, "(%llu, %llu, ", (unsigned long long)pt->day,
		   (unsigned long long)in->batch);
}

static inline void fact_head(const struct cing *in, struct part *pt)
{
	rb_u32(&pt->rows, (uint32_t)pt->day);
	rb_u64(&pt->rows, in->node_id);
	rb_u64(&pt->rows, in->batch);
}

/* Raw sample runs and their rollups (every level) of the batch, by day (samples.c). */
int ch_sample_rows(struct cing *in, struct parts *raw, struct parts *roll, uint64_t *ret_n);

#endif
