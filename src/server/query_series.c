/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Metric series answers (query.h): the store streams each series' points in time order, and
 * they are bucketed as they come, so memory is bounded by the bucket count, not the range.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "server/query.h"

struct pt {
	uint64_t t;
	double v;
};

struct bucket {
	double mn, mx, sum;
	uint64_t cnt;
};

struct series_out {
	struct buf *out;
	uint64_t from, width;
	size_t nb;			/* buckets */
	size_t total;			/* points seen, all series */
	size_t nseries;			/* series opened */
	bool open, bucketed;		/* a series is being written; it has more than nb points */
	uint64_t id;			/* the series being written */
	struct pt *raw;			/* its first points, at most nb, while not bucketed */
	size_t nraw, capraw;
	struct bucket *bk;		/* nb buckets once bucketed */
};

static void fold(struct series_out *so, uint64_t t, double v)
{
	uint64_t i = (t - so->from) / so->width;
	struct bucket *b;

	if (t < so->from || i >= so->nb)
		return;	/* the store gives [from, to) only */
	b = &so->bk[i];
	if (!b->cnt) {
		*b = (struct bucket){ .mn = v, .mx = v, .sum = v, .cnt = 1 };
		return;
	}
	b->mn = v < b->mn ? v : b->mn;
	b->mx = v > b->mx ? v : b->mx;
	b->sum += v;
	b->cnt++;
}

static void point_json(struct buf *b, uint64_t t, double mn, double avg, double mx)
{
	if (b->len && b->p[b->len - 1] != '[')
		buf_put(b, ",", 1);
	buf_put(b, "[", 1);
	buf_json_ms(b, t);
	buf_put(b, ",", 1);
	buf_json_num(b, mn);
	buf_put(b, ",", 1);
	buf_json_num(b, avg);
	buf_put(b, ",", 1);
	buf_json_num(b, mx);
	buf_put(b, "]", 1);
}

static int cmp_pt(const void *a, const void *b)
{
	const struct pt *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

/* Writes the open series' points (raw if at most nb, else one [t, min, avg, max] per bucket). */
static void series_close(struct series_out *so)
{
	if (!so->open)
		return;
	if (so->bucketed) {
		for (size_t i = 0; i < so->nb; i++) {
			const struct bucket *b = &so->bk[i];

			if (b->cnt)
				point_json(so->out, so->from + i * so->width, b->mn,
					   b->sum / (double)b->cnt, b->mx);
		}
	} else {
		bool sorted = true;

		for (size_t i = 1; i < so->nraw && sorted; i++)
			sorted = so->raw[i - 1].t <= so->raw[i].t;
		if (!sorted)	/* a backend whose chunks overlap in time */
			qsort(so->raw, so->nraw, sizeof(*so->raw), cmp_pt);
		for (size_t i = 0; i < so->nraw; i++)
			point_json(so->out, so->raw[i].t, so->raw[i].v, so->raw[i].v, so->raw[i].v);
	}
	buf_puts(so->out, "]}");
	so->open = false;
}

static int series_open(void *ctx, uint64_t id, const char *const *pairs, size_t n)
{
	struct series_out *so = ctx;

	series_close(so);
	if (so->nseries++)
		buf_put(so->out, ",", 1);
	buf_puts(so->out, "{\"labels\":");
	buf_json_labels(so->out, pairs, n);
	buf_puts(so->out, ",\"points\":[");
	so->open = true;
	so->bucketed = false;
	so->id = id;
	so->nraw = 0;
	return so->out->oom ? -ENOMEM : 0;
}

static int series_point(void *ctx, uint64_t id, uint64_t t, double v)
{
	struct series_out *so = ctx;

	if (!so->open || so->id != id)
		return 0;
	if (++so->total > QUERY_SERIES_MAX_POINTS)
		return -E2BIG;
	if (so->bucketed) {
		fold(so, t, v);
		return 0;
	}
	if (so->nraw < so->nb) {
		if (so->nraw == so->capraw) {
			size_t ncap = so->capraw ? so->capraw * 2 : 256;
			struct pt *np;

			ncap = ncap < so->nb ? ncap : so->nb;
			np = realloc(so->raw, ncap * sizeof(*np));
			if (!np)
				return -ENOMEM;
			so->raw = np;
			so->capraw = ncap;
		}
		so->raw[so->nraw++] = (struct pt){ t, v };
		return 0;
	}
	/* More points than buckets: fold what was kept, and from now on fold as they come. */
	if (!so->bk) {
		so->bk = malloc(so->nb * sizeof(*so->bk));
		if (!so->bk)
			return -ENOMEM;
	}
	memset(so->bk, 0, so->nb * sizeof(*so->bk));
	for (size_t i = 0; i < so->nraw; i++)
		fold(so, so->raw[i].t, so->raw[i].v);
	fold(so, t, v);
	so->bucketed = true;
	return 0;
}

int query_series(struct store *s, const char *name, uint64_t from_ns, uint64_t to_ns,
		 const struct selector *sel, size_t buckets, struct buf *out)
{
	struct series_out so = { .out = out, .from = from_ns, .nb = buckets ? buckets : 1 };
	int err;

	so.width = (to_ns - from_ns + so.nb - 1) / so.nb;
	so.width = so.width ? so.width : 1;
	buf_puts(out, "{\"series\":[");
	if (out->oom)
		return -ENOMEM;
	err = s->ops->series(s, name, from_ns, to_ns, sel, series_open, series_point, &so);
	if (!err) {
		series_close(&so);
		buf_puts(out, "]}");
		err = out->oom ? -ENOMEM : 0;
	}
	free(so.raw);
	free(so.bk);
	return err;
}
