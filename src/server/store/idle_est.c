/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU-idle estimator (idle_est.h): per node, time decided exactly (the driver's counters at
 * 0 or 1, triggered trace windows), time inside representative trace windows (budget,
 * continuous), and undecided time, which the nearest representative window stands for.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "common/util.h"
#include "server/store/idle_est.h"

enum idle_src idle_est_class(const char *kind, const char *const *pairs, size_t n)
{
	const char *source = NULL, *reason = NULL;

	if (!strcmp(kind, "gpu_busy"))
		return IDLE_SRC_BUSY;
	if (strcmp(kind, "gpu_observed"))
		return IDLE_SRC_NONE;
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(pairs[2 * i], "source"))
			source = pairs[2 * i + 1];
		else if (!strcmp(pairs[2 * i], "reason"))
			reason = pairs[2 * i + 1];
	}
	if (!source || strcmp(source, "kernels"))
		return IDLE_SRC_EXACT;
	/* a window without a reason (agents before the estimator) may have been triggered by
	 * the GPU's state: it decides its own time only, as it did then */
	if (reason && (!strcmp(reason, "budget") || !strcmp(reason, "continuous")))
		return IDLE_SRC_SAMPLE;
	return IDLE_SRC_EXACT;
}

void idle_est_load_span(uint64_t from, uint64_t to, uint64_t *ret_from, uint64_t *ret_to)
{
	*ret_from = from > IDLE_EST_REACH_NS ? from - IDLE_EST_REACH_NS : 0;
	*ret_to = to < UINT64_MAX - IDLE_EST_REACH_NS ? to + IDLE_EST_REACH_NS : UINT64_MAX;
}

int idle_est_add(struct idle_est *e, enum idle_src c, const char *node, uint64_t start,
		 uint64_t end)
{
	if (c < IDLE_SRC_BUSY || c > IDLE_SRC_SAMPLE || end <= start)
		return 0;
	return busy_add(&e->sets[c], node, start, end);
}

static uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* Index of the first interval of v (sorted, merged) that ends after t. */
static size_t first_after(const struct busy *v, size_t n, uint64_t t)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (v[mid].end <= t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Length of [a, b) covered by v (sorted, merged). */
static uint64_t covered(const struct busy *v, size_t n, uint64_t a, uint64_t b)
{
	uint64_t sum = 0;

	for (size_t i = first_after(v, n, a); i < n && v[i].start < b; i++) {
		uint64_t lo = max64(v[i].start, a), hi = min64(v[i].end, b);

		if (hi > lo)
			sum += hi - lo;
	}
	return sum;
}

/* The merged list of node in set (NULL, 0 if none). */
static const struct busy *list_of(const struct busy_set *bs, const char *node, size_t *ret_n)
{
	const struct node_busy *nb = busy_find(bs, node);

	*ret_n = nb ? nb->n : 0;
	return nb ? nb->v : NULL;
}

/* Undecided time (neither exact nor in a window) in [a, b) of ne. */
static uint64_t undecided(const struct node_est *ne, uint64_t a, uint64_t b)
{
	uint64_t t = a, sum = 0;

	if (b <= a)
		return 0;
	/* walk [a, b) past the pieces of both lists */
	while (t < b) {
		size_t i = first_after(ne->exact, ne->nexact, t);
		size_t j = first_after(ne->rep, ne->nrep, t);
		uint64_t next = b;

		if (i < ne->nexact && ne->exact[i].start <= t) {
			t = ne->exact[i].end;
			continue;
		}
		if (j < ne->nrep && ne->rep[j].start <= t) {
			t = ne->rep[j].end;
			continue;
		}
		if (i < ne->nexact)
			next = min64(next, ne->exact[i].start);
		if (j < ne->nrep)
			next = min64(next, ne->rep[j].start);
		sum += next - t;
		t = next;
	}
	return sum;
}

/* Places ne's windows: each stands for the undecided time of the range nearer to it than to
 * any other window, within the reach; sums the node's coverage into c. */
static int place_windows(struct node_est *ne, uint64_t from, uint64_t to,
			 struct idle_est_cover *c)
{
	uint64_t stood = 0, und = undecided(ne, from, to);

	ne->w = calloc(ne->nrep ? ne->nrep : 1, sizeof(*ne->w));
	if (!ne->w)
		return -ENOMEM;
	/* the windows that stand for time: those with enough undecided time of their own */
	struct { size_t j; uint64_t own; } *use = calloc(ne->nrep ? ne->nrep : 1, sizeof(*use));
	size_t nuse = 0;

	if (!use)
		return -ENOMEM;
	for (size_t j = 0; j < ne->nrep; j++) {
		const struct busy *r = &ne->rep[j];
		uint64_t own = r->end - r->start - covered(ne->exact, ne->nexact, r->start, r->end);

		if (own >= IDLE_EST_MIN_OWN_NS) {
			use[nuse].j = j;
			use[nuse++].own = own;
		}
	}
	for (size_t j = 0; j < ne->nrep; j++) {
		const struct busy *r = &ne->rep[j];

		if (r->end > from && r->start < to)
			c->traced_ns += min64(r->end, to) - max64(r->start, from) -
					covered(ne->exact, ne->nexact, max64(r->start, from),
						min64(r->end, to));
	}
	for (size_t k = 0; k < nuse; k++) {
		const struct busy *r = &ne->rep[use[k].j];
		uint64_t lo = r->start > IDLE_EST_REACH_NS ? r->start - IDLE_EST_REACH_NS : 0;
		uint64_t hi = r->end + IDLE_EST_REACH_NS;
		uint64_t u;
		double extra;

		/* the cell: halfway to the neighbouring windows that stand for time */
		if (k > 0) {
			const struct busy *p = &ne->rep[use[k - 1].j];

			lo = max64(lo, p->end + (r->start - p->end) / 2);
		}
		if (k + 1 < nuse) {
			const struct busy *n = &ne->rep[use[k + 1].j];

			hi = min64(hi, r->end + (n->start - r->end) / 2);
		}
		lo = max64(lo, from);
		hi = min64(hi, to);
		u = hi > lo ? undecided(ne, lo, hi) : 0;
		if (!u)
			continue;
		extra = (double)u / (double)use[k].own;	/* own >= IDLE_EST_MIN_OWN_NS */
		ne->w[ne->nw++] = (struct est_window){ r->start, r->end, extra };
		stood += u;
		c->windows++;
		if (1.0 + extra > c->max_weight)
			c->max_weight = 1.0 + extra;
	}
	free(use);
	c->extrapolated_ns += stood;
	c->unknown_ns += und > stood ? und - stood : 0;
	c->exact_ns += covered(ne->exact, ne->nexact, from, to);
	return 0;
}

int idle_est_build(struct idle_est *e, uint64_t from, uint64_t to)
{
	struct busy_set *all = &e->sets[IDLE_SRC_BUSY];
	int err = 0;

	e->from = from;
	e->to = to;
	for (int i = 0; i < 3; i++)
		busy_merge(&e->sets[i]);
	/* every node named by any set; the busy set's node list grows to hold them all */
	for (int i = IDLE_SRC_EXACT; i <= IDLE_SRC_SAMPLE; i++)
		for (size_t k = 0; k < e->sets[i].n; k++)
			if (!busy_node(all, e->sets[i].nodes[k].node))
				return -ENOMEM;
	e->nodes = calloc(all->n ? all->n : 1, sizeof(*e->nodes));
	if (!e->nodes)
		return -ENOMEM;
	for (size_t k = 0; !err && k < all->n; k++) {
		struct node_est *ne = &e->nodes[e->n++];

		ne->node = all->nodes[k].node;
		ne->busy = all->nodes[k].v;
		ne->nbusy = all->nodes[k].n;
		ne->exact = list_of(&e->sets[IDLE_SRC_EXACT], ne->node, &ne->nexact);
		ne->rep = list_of(&e->sets[IDLE_SRC_SAMPLE], ne->node, &ne->nrep);
		err = place_windows(ne, from, to, &e->cover);
		e->cover.nodes++;
		e->cover.range_ns += to - from;
	}
	return err;
}

const struct node_est *idle_est_node(const struct idle_est *e, const char *node)
{
	for (size_t i = 0; i < e->n; i++)
		if (!strcmp(e->nodes[i].node, node))
			return &e->nodes[i];
	return NULL;
}

void idle_est_scan_span(const struct idle_est *e, uint64_t *ret_from, uint64_t *ret_to)
{
	uint64_t a = e->from, b = e->to;

	for (size_t i = 0; i < e->n; i++) {
		const struct node_est *ne = &e->nodes[i];

		if (ne->nw) {
			a = min64(a, ne->w[0].s);
			b = max64(b, ne->w[ne->nw - 1].e);
		}
	}
	*ret_from = a;
	*ret_to = b;
}

void idle_est_weight(const struct idle_est *e, const struct node_est *ne, uint64_t t,
		     double *ret_own, double *ret_extra)
{
	bool in_range = t >= e->from && t < e->to;
	size_t lo = 0, hi;

	*ret_own = *ret_extra = 0;
	if (!ne || busy_in_list(ne->busy, ne->nbusy, t))
		return;
	if (busy_in_list(ne->exact, ne->nexact, t)) {
		*ret_own = in_range;
		return;
	}
	/* the window holding t, if any */
	hi = ne->nw;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (ne->w[mid].e <= t)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < ne->nw && ne->w[lo].s <= t) {
		*ret_own = in_range;
		*ret_extra = ne->w[lo].extra;
		return;
	}
	/* a window that stands for nothing still decides its own time */
	if (in_range && busy_in_list(ne->rep, ne->nrep, t))
		*ret_own = 1;
}

void idle_est_done(struct idle_est *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->nodes[i].w);
	free(e->nodes);
	for (int i = 0; i < 3; i++)
		busy_done(&e->sets[i]);
	memset(e, 0, sizeof(*e));
}

/* value x (own + extra) as a whole number, the fraction carried to the next sample; tallied. */
static uint64_t idle_dither(struct idle_dither *d, uint64_t value, double own, double extra)
{
	double v = (double)value * (own + extra) + d->carry;
	uint64_t out;

	if (v <= 0)
		return 0;
	out = (uint64_t)v;
	d->carry = v - (double)out;
	if (d->tally) {
		d->tally->exact_value += (double)value * own;
		d->tally->estimated_value += (double)value * extra;
	}
	return out;
}

uint64_t idle_est_count(const struct idle_est *e, const struct node_est *ne,
			struct idle_dither *d, uint64_t *t, uint64_t value)
{
	double own, extra;

	idle_est_weight(e, ne, *t, &own, &extra);
	if (own + extra <= 0)
		return 0;	/* busy, or unknown: not counted as idle */
	/* a window's sample just outside the range counts at its edge */
	if (*t < e->from)
		*t = e->from;
	else if (*t >= e->to)
		*t = e->to - 1;
	return idle_dither(d, value, own, extra);
}
