/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ingest into ClickHouse, the samples: each label set's samples sorted by time and cut into raw
 * rows (delta-coded times), and their rollups summed here for every level, by day partition.
 * A rollup part starts with its marker row (ingest.c's probe finds a retried batch by it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "common/util.h"
#include "server/store/clickhouse/ing.h"

/* One sample of a group, for sorting by time and cutting into rows. */
struct smp {
	uint64_t t, stack;
	int64_t value;
};

static int cmp_smp(const void *a, const void *b)
{
	const struct smp *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

/* Entries of one rollup bucket being summed: stack -> value. */
struct rent {
	uint64_t stack;
	int64_t value;
};

struct lvacc {
	uint64_t bucket;	/* UINT64_MAX: nothing summed */
	uint64_t n;		/* samples */
	struct u64map idx;	/* stack -> index + 1 in e */
	struct rent *e;
	size_t ne, cap;
};

/* The rollup rows of one (kind, label set) run of time-sorted samples: minute buckets folded
 * into hours, hours into days, as each bucket closes. */
struct rollacc {
	struct cing *in;
	struct parts *ps;
	uint8_t kind;
	uint64_t ls;
	struct lvacc lv[CH_LEVELS];
	bool oom;
};

static int cmp_rent(const void *a, const void *b)
{
	const struct rent *x = a, *y = b;

	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

/* A part of the rollup table starts with its marker row (level 255, the batch id as label
 * set): a retry finds the part by it, and it never sums with another batch's. */
static struct part *rollup_part(struct rollacc *ra, uint64_t day)
{
	struct part *pt = part_of(ra->ps, day);

	if (pt && !pt->rows.len) {
		rb_u8(&pt->rows, 255);
		rb_u8(&pt->rows, 0);
		rb_u64(&pt->rows, ra->in->batch);
		rb_u64(&pt->rows, day * CH_DAY_NS);
		rb_u64(&pt->rows, ra->in->node_id);
		rb_u64(&pt->rows, 1);
		/* one map entry: stack 0, the batch's content hash (set by content_hash()) */
		buf_uvarint(&pt->rows, 1);
		rb_u64(&pt->rows, 0);
		buf_uvarint(&pt->rows, 1);
		rb_u64(&pt->rows, 0);
		buf_printf(&pt->probe, "(%llu, %llu)",
			   (unsigned long long)ra->in->batch,
			   (unsigned long long)(day * CH_DAY_NS));
	}
	return pt;
}

static void roll_add(struct rollacc *ra, int lv, uint64_t bucket, uint64_t stack, int64_t value,
		     uint64_t n);

/* Writes level lv's current bucket as one row and folds it into the level above. */
static void roll_flush(struct rollacc *ra, int lv)
{
	struct lvacc *a = &ra->lv[lv];
	struct part *pt;

	if (a->bucket == UINT64_MAX)
		return;
	qsort(a->e, a->ne, sizeof(*a->e), cmp_rent);
	pt = rollup_part(ra, a->bucket / CH_DAY_NS);
	if (!pt) {
		ra->oom = true;
	} else {
		struct buf *b = &pt->rows;

		rb_u8(b, (uint8_t)lv);
		rb_u8(b, ra->kind);
		rb_u64(b, ra->ls);
		rb_u64(b, a->bucket);
		rb_u64(b, ra->in->node_id);
		rb_u64(b, a->n);
		buf_uvarint(b, a->ne);
		for (size_t i = 0; i < a->ne; i++)
			rb_u64(b, a->e[i].stack);
		buf_uvarint(b, a->ne);
		for (size_t i = 0; i < a->ne; i++)
			rb_u64(b, (uint64_t)a->e[i].value);
	}
	if (lv + 1 < CH_LEVELS) {
		uint64_t up = a->bucket / ch_level_ns[lv + 1] * ch_level_ns[lv + 1];

		for (size_t i = 0; i < a->ne; i++)
			roll_add(ra, lv + 1, up, a->e[i].stack, a->e[i].value, i ? 0 : a->n);
	}
	/* Empty it for the next bucket (the map's slots are reused). */
	if (a->idx.cap)
		memset(a->idx.keys, 0, a->idx.cap * sizeof(*a->idx.keys));
	a->idx.len = 0;
	a->ne = 0;
	a->n = 0;
	a->bucket = UINT64_MAX;
}

static void roll_add(struct rollacc *ra, int lv, uint64_t bucket, uint64_t stack, int64_t value,
		     uint64_t n)
{
	struct lvacc *a = &ra->lv[lv];
	uint64_t *slot;
	int ins;

	if (a->bucket != bucket) {
		roll_flush(ra, lv);
		a->bucket = bucket;
	}
	a->n += n;
	slot = u64map_upsert(&a->idx, stack, 0, &ins);	/* stack ids are never 0 */
	if (!slot) {
		ra->oom = true;
		return;
	}
	if (ins) {
		if (array_reserve(&a->e, &a->cap, a->ne + 1, sizeof(*a->e), 256)) {
			ra->oom = true;
			return;
		}
		a->e[a->ne] = (struct rent){ stack, 0 };
		*slot = ++a->ne;
	}
	a->e[*slot - 1].value += value;
}

static void roll_done(struct rollacc *ra)
{
	for (int lv = 0; lv < CH_LEVELS; lv++) {
		u64map_done(&ra->lv[lv].idx);
		free(ra->lv[lv].e);
	}
}

/*
 * Raw rows of n time-sorted samples of one (kind, label set): one row per day and run whose
 * gaps fit 32 bits, times as t0 plus deltas split into high and low 16 bits (two arrays that
 * zstd packs far better than whole ns times: 18.16 has no Delta codec), values omitted when
 * all are 1 (CPU samples).
 */
static void raw_rows(struct cing *in, struct parts *ps, uint8_t kind, uint64_t ls,
		     const struct smp *v, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint64_t day = v[i].t / CH_DAY_NS;
		size_t j = i + 1;
		bool ones = v[i].value == 1;
		struct part *pt;
		struct buf *b;

		while (j < n && v[j].t / CH_DAY_NS == day && v[j].t - v[j - 1].t <= UINT32_MAX) {
			ones &= v[j].value == 1;
			j++;
		}
		pt = part_of(ps, day);
		if (!pt)
			return;
		b = &pt->rows;
		if (!pt->probe.len) {
			probe_head(in, pt);
			buf_printf(&pt->probe, "%u, %llu, %llu)",
				   (unsigned)kind, (unsigned long long)ls,
				   (unsigned long long)v[i].t);
		}
		fact_head(in, pt);
		rb_u8(b, kind);
		rb_u64(b, ls);
		rb_u64(b, v[i].t);
		rb_u64(b, v[j - 1].t);
		buf_uvarint(b, j - i);
		for (size_t k = i; k < j; k++) {
			uint16_t hi = (uint16_t)((k > i ? v[k].t - v[k - 1].t : 0) >> 16);

			buf_put(b, &hi, 2);
		}
		buf_uvarint(b, j - i);
		for (size_t k = i; k < j; k++) {
			uint16_t lo = (uint16_t)(k > i ? v[k].t - v[k - 1].t : 0);

			buf_put(b, &lo, 2);
		}
		buf_uvarint(b, j - i);
		for (size_t k = i; k < j; k++)
			rb_u64(b, v[k].stack);
		buf_uvarint(b, ones ? 0 : j - i);
		for (size_t k = i; k < j && !ones; k++)
			rb_u64(b, (uint64_t)v[k].value);
		i = j;
	}
}

/* Sample rows (raw, by day) and their rollup rows (minute, hour, day buckets, by day). */
int ch_sample_rows(struct cing *in, struct parts *raw, struct parts *roll, uint64_t *ret_n)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct rollacc ra = { .in = in, .ps = roll };
	struct smp *v = NULL;
	size_t cap = 0;
	int err = 0;

	for (int lv = 0; lv < CH_LEVELS; lv++)
		ra.lv[lv].bucket = UINT64_MAX;
	for (size_t g = 0; g < m->n_samples && !err; g++) {
		const Gpuscope__V1__SampleGroup *sg = m->samples[g];
		uint64_t t = 0, ls = in->ls_id[sg->label_set];
		bool sorted = true;

		if (!sg->n_stack)
			continue;
		if (sg->n_stack > cap) {
			struct smp *nv = realloc(v, sg->n_stack * sizeof(*nv));

			if (!nv) {
				err = -ENOMEM;
				break;
			}
			v = nv;
			cap = sg->n_stack;
		}
		for (size_t i = 0; i < sg->n_stack; i++) {
			t += (uint64_t)sg->time_delta_ns[i];
			v[i] = (struct smp){ t, in->stack_id[sg->stack[i]],
					     sg->n_value ? sg->value[i] : 1 };
			sorted &= !i || v[i - 1].t <= t;
		}
		if (!sorted)
			qsort(v, sg->n_stack, sizeof(*v), cmp_smp);
		touch(in, sg->label_set, v[0].t, v[sg->n_stack - 1].t);
		raw_rows(in, raw, (uint8_t)sg->kind, ls, v, sg->n_stack);
		ra.kind = (uint8_t)sg->kind;
		ra.ls = ls;
		for (size_t i = 0; i < sg->n_stack; i++)
			roll_add(&ra, 0, v[i].t / ch_level_ns[0] * ch_level_ns[0], v[i].stack,
				 v[i].value, 1);
		for (int lv = 0; lv < CH_LEVELS; lv++)
			roll_flush(&ra, lv);
		*ret_n += sg->n_stack;
	}
	if (ra.oom)
		err = -ENOMEM;
	roll_done(&ra);
	free(v);
	return err;
}
