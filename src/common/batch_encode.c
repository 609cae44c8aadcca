/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The batch (batch.c) encoded to proto/gpuscope/v1/batch.proto: the message is built over the
 * batch's own arrays, times delta-coded per column.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/batch_int.h"
#include "gpuscope/v1/batch.pb-c.h"

/* Delta-codes absolute times into a new array (first entry absolute). NULL on ENOMEM. */
static int64_t *deltas(const uint64_t *t, size_t n)
{
	int64_t *d = malloc((n ? n : 1) * sizeof(*d));
	uint64_t prev = 0;

	if (!d)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		d[i] = (int64_t)(t[i] - prev);
		prev = t[i];
	}
	return d;
}

/*
 * Builds the protobuf message over the batch's own arrays; only pointer arrays and delta
 * columns are allocated, all recorded in `allocs` for the caller to free.
 */
struct encode_ctx {
	void **allocs;
	size_t nallocs, cap;
};

static void *ctx_alloc(struct encode_ctx *c, size_t size)
{
	void *p;

	if (c->nallocs == c->cap) {
		size_t ncap = c->cap ? c->cap * 2 : 64;
		void **n = realloc(c->allocs, ncap * sizeof(*n));

		if (!n)
			return NULL;
		c->allocs = n;
		c->cap = ncap;
	}
	p = calloc(1, size ? size : 1);
	if (p)
		c->allocs[c->nallocs++] = p;
	return p;
}

static void *ctx_keep(struct encode_ctx *c, void *p)
{
	if (!p)
		return NULL;
	if (c->nallocs == c->cap) {
		size_t ncap = c->cap ? c->cap * 2 : 64;
		void **n = realloc(c->allocs, ncap * sizeof(*n));

		if (!n) {
			free(p);
			return NULL;
		}
		c->allocs = n;
		c->cap = ncap;
	}
	c->allocs[c->nallocs++] = p;
	return p;
}

static int build_message(struct batch *b, struct encode_ctx *c, Gpuscope__V1__Batch *m)
{
	size_t nls = b->ls_off.len ? b->ls_off.len - 1 : 0, ns = nstacks(b);
	Gpuscope__V1__Location *locs;
	Gpuscope__V1__Stack *stacks;
	Gpuscope__V1__LabelSet *lss;
	Gpuscope__V1__SampleGroup *groups;
	Gpuscope__V1__MetricSeries *series;
	Gpuscope__V1__Interval *ivls;

	m->version = BATCH_VERSION;
	m->n_strings = b->strs.len;
	m->strings = b->strs.strs;
	m->node = b->node;
	m->batch_id = b->batch_id;
	m->period_ns = b->period_ns;

	locs = ctx_alloc(c, b->locs.len * sizeof(*locs));
	m->locations = ctx_alloc(c, b->locs.len * sizeof(*m->locations));
	if (!locs || !m->locations)
		return -ENOMEM;
	m->n_locations = b->locs.len;
	for (size_t i = 0; i < b->locs.len; i++) {
		const struct loc_rec *r = &VEC_AT(b->locs, struct loc_rec, i);
		Gpuscope__V1__Location *l = &locs[i];

		gpuscope__v1__location__init(l);
		l->function = r->function;
		l->module = r->module;
		l->build_id = r->build_id;
		l->file = r->file;
		l->line = r->line;
		l->address = r->address;
		l->kernel = !!(r->flags & 1);
		l->inlined = !!(r->flags & 2);
		m->locations[i] = l;
	}

	stacks = ctx_alloc(c, ns * sizeof(*stacks));
	m->stacks = ctx_alloc(c, ns * sizeof(*m->stacks));
	if (!stacks || !m->stacks)
		return -ENOMEM;
	m->n_stacks = ns;
	for (size_t i = 0; i < ns; i++) {
		size_t s = VEC_AT(b->stack_off, size_t, i), e = VEC_AT(b->stack_off, size_t, i + 1);

		gpuscope__v1__stack__init(&stacks[i]);
		stacks[i].n_locations = e - s;
		stacks[i].locations = &VEC_AT(b->stack_data, uint32_t, s);
		m->stacks[i] = &stacks[i];
	}

	lss = ctx_alloc(c, nls * sizeof(*lss));
	m->label_sets = ctx_alloc(c, nls * sizeof(*m->label_sets));
	if (!lss || !m->label_sets)
		return -ENOMEM;
	m->n_label_sets = nls;
	for (size_t i = 0; i < nls; i++) {
		size_t s = VEC_AT(b->ls_off, size_t, i), e = VEC_AT(b->ls_off, size_t, i + 1);

		gpuscope__v1__label_set__init(&lss[i]);
		lss[i].n_pairs = e - s;
		lss[i].pairs = &VEC_AT(b->ls_data, uint32_t, s);
		m->label_sets[i] = &lss[i];
	}

	groups = ctx_alloc(c, b->groups.len * sizeof(*groups));
	m->samples = ctx_alloc(c, b->groups.len * sizeof(*m->samples));
	if (!groups || !m->samples)
		return -ENOMEM;
	for (size_t i = 0; i < b->groups.len; i++) {
		struct sgroup *g = &VEC_AT(b->groups, struct sgroup, i);
		Gpuscope__V1__SampleGroup *pg = &groups[m->n_samples];

		if (!g->time.len)
			continue;
		gpuscope__v1__sample_group__init(pg);
		pg->label_set = g->ls;
		pg->kind = (Gpuscope__V1__SampleKind)g->kind;
		pg->n_time_delta_ns = g->time.len;
		pg->time_delta_ns = ctx_keep(c, deltas(g->time.v, g->time.len));
		if (!pg->time_delta_ns)
			return -ENOMEM;
		pg->n_stack = g->stack.len;
		pg->stack = g->stack.v;
		if (!g->all_one) {
			pg->n_value = g->value.len;
			pg->value = g->value.v;
		}
		m->samples[m->n_samples++] = pg;
	}

	series = ctx_alloc(c, b->series.len * sizeof(*series));
	m->series = ctx_alloc(c, b->series.len * sizeof(*m->series));
	if (!series || !m->series)
		return -ENOMEM;
	m->n_series = b->series.len;
	for (size_t i = 0; i < b->series.len; i++) {
		struct mseries *s = &VEC_AT(b->series, struct mseries, i);
		Gpuscope__V1__MetricSeries *ps = &series[i];

		gpuscope__v1__metric_series__init(ps);
		ps->name = s->name;
		ps->label_set = s->ls;
		ps->n_time_delta_ns = s->time.len;
		ps->time_delta_ns = ctx_keep(c, deltas(s->time.v, s->time.len));
		if (!ps->time_delta_ns)
			return -ENOMEM;
		ps->n_value = s->value.len;
		ps->value = s->value.v;
		m->series[i] = ps;
	}

	ivls = ctx_alloc(c, b->ivls.len * sizeof(*ivls));
	m->intervals = ctx_alloc(c, b->ivls.len * sizeof(*m->intervals));
	if (!ivls || !m->intervals)
		return -ENOMEM;
	m->n_intervals = b->ivls.len;
	for (size_t i = 0; i < b->ivls.len; i++) {
		struct ivl *iv = &VEC_AT(b->ivls, struct ivl, i);
		Gpuscope__V1__Interval *pi = &ivls[i];

		gpuscope__v1__interval__init(pi);
		pi->kind = iv->kind;
		pi->label_set = iv->ls;
		pi->start_ns = iv->start;
		pi->end_ns = iv->end;
		pi->stack = iv->stack;
		pi->n_attrs = 2 * iv->nattrs;
		pi->attrs = iv->nattrs ? &VEC_AT(b->attrs, uint32_t, iv->attr_off) : NULL;
		m->intervals[i] = pi;
	}
	return 0;
}

int batch__encode(struct batch *b, uint8_t **ret, size_t *ret_len)
{
	Gpuscope__V1__Batch m = GPUSCOPE__V1__BATCH__INIT;
	struct encode_ctx c = { 0 };
	uint8_t *buf = NULL;
	size_t len;
	int err;

	pthread_mutex_lock(&b->mu);
	err = build_message(b, &c, &m);
	if (err)
		goto out_free;
	len = gpuscope__v1__batch__get_packed_size(&m);
	buf = malloc(len ? len : 1);
	if (!buf) {
		err = -ENOMEM;
		goto out_free;
	}
	gpuscope__v1__batch__pack(&m, buf);
	*ret = buf;
	*ret_len = len;
out_free:
	pthread_mutex_unlock(&b->mu);
	for (size_t i = 0; i < c.nallocs; i++)
		free(c.allocs[i]);
	free(c.allocs);
	return err;
}
