/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU efficiency, the raw computation: busy/idle per (node, GPU) from the best source of each
 * range and who held each GPU, tallied per hour, GPU and holder; the GPU and holder tables.
 */
#include "server/efficiency/eff_int.h"

/* Metric series that say how busy a GPU was, and how to read them (fraction 0..1). */
static const struct {
	const char *name;
	enum eff_src src;
	double scale;
} util_series[] = {
	{ "gpu_sm_active", EFF_GPM, 1.0 },
	{ "gpu_utilization", EFF_NVML, 0.01 },
};
/* Per-process series: a point says the process held that GPU in the period it closes. */
static const char *const hold_series[] = { "gpu_process_memory_bytes", "gpu_process_sm_util" };
/* ---- tables ------------------------------------------------------------------------------- */

/*
 * Grows the zero-filled array *p of *cap elements of size bytes so that index i exists (doubling
 * from 64). 0 or -ENOMEM (the array is unchanged).
 */
int eff_grow_to(void **p, size_t *cap, size_t i, size_t size)
{
	size_t ncap = *cap ? *cap : 64;
	char *n;

	if (i < *cap)
		return 0;
	while (ncap <= i)
		ncap *= 2;
	n = realloc(*p, ncap * size);
	if (!n)
		return -ENOMEM;
	memset(n + *cap * size, 0, (ncap - *cap) * size);
	*p = n;
	*cap = ncap;
	return 0;
}

const char *eff_pair_get(const char *const *pairs, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(pairs[2 * i], name))
			return pairs[2 * i + 1];
	return "";
}

/* GPU id of (node, gpu), added if new; model and uuid filled once known. -errno. (tmu held) */
static int64_t gpu_id(struct efficiency *e, const char *node, const char *gpu, const char *uuid,
		      const char *model)
{
	char key[512];
	int64_t id;
	struct gpu_info *g;

	snprintf(key, sizeof(key), "%s\x01%s", node, gpu);
	id = strtab_intern(&e->gpu_keys, key);
	if (id < 0)
		return id;
	if (id >= MAX_IDS)
		return -E2BIG;
	if (eff_grow_to((void **)&e->gpus, &e->capg, (size_t)id, sizeof(*e->gpus)))
		return -ENOMEM;
	g = &e->gpus[id];
	if (!g->node) {
		g->node = strdup(node);
		g->gpu = strdup(gpu);
		if (!g->node || !g->gpu)
			return -ENOMEM;
	}
	if ((!g->uuid || !*g->uuid) && uuid && *uuid) {
		free(g->uuid);
		g->uuid = strdup(uuid);
	}
	if ((!g->model || !*g->model) && model && *model) {
		free(g->model);
		g->model = strdup(model);
	}
	return id;
}

static uint64_t holder_hash(const char *node, const char *pid, const char *comm)
{
	char key[512];
	int n = snprintf(key, sizeof(key), "%s\x01%s\x01%s", node, pid, comm);

	return hash64(key, n < (int)sizeof(key) ? (size_t)n : sizeof(key) - 1, 21);
}

/* Holder id (>= 1) of a known process, 0 if none. (tmu held) */
uint64_t eff_holder_find(struct efficiency *e, const char *node, const char *pid,
			 const char *comm)
{
	uint64_t *v = u64map_find(&e->holder_ids, holder_hash(node, pid, comm));

	return v ? *v : 0;
}

/* Holder id (>= 1) of a process on a node, added if new. -errno. (tmu held) */
static int64_t holder_id(struct efficiency *e, const char *node, const char *pid, const char *comm)
{
	uint64_t *v;
	int64_t id;
	int ins;

	v = u64map_upsert(&e->holder_ids, holder_hash(node, pid, comm), e->nholders + 1, &ins);
	if (!v)
		return -ENOMEM;
	if (!ins)
		return (int64_t)*v;
	id = (int64_t)e->nholders++;
	if (id + 1 >= MAX_IDS)
		return -E2BIG;
	if (eff_grow_to((void **)&e->holders, &e->caph, (size_t)id, sizeof(*e->holders)))
		return -ENOMEM;
	if (!e->holders[id].node) {
		e->holders[id].node = strdup(node);
		e->holders[id].pid = strdup(pid);
		e->holders[id].comm = strdup(comm);
		if (!e->holders[id].node || !e->holders[id].pid || !e->holders[id].comm)
			return -ENOMEM;
	}
	return id + 1;
}

/* ---- segment lists ------------------------------------------------------------------------ */

int eff_seg_add(struct seglist *l, uint64_t s, uint64_t e, double v)
{
	if (s >= e)
		return 0;
	if (eff_grow_to((void **)&l->v, &l->cap, l->n, sizeof(*l->v)))
		return -ENOMEM;
	l->v[l->n++] = (struct seg){ s, e, v };
	return 0;
}

static int cmp_seg(const void *a, const void *b)
{
	const struct seg *x = a, *y = b;

	return x->s < y->s ? -1 : x->s > y->s;
}

/* Sorts and merges overlapping or touching segments into their union (value 1). */
void eff_seg_union(struct seglist *l)
{
	size_t k = 0;

	if (!l->n)
		return;
	qsort(l->v, l->n, sizeof(*l->v), cmp_seg);
	for (size_t j = 1; j < l->n; j++) {
		if (l->v[j].s <= l->v[k].e) {
			if (l->v[j].e > l->v[k].e)
				l->v[k].e = l->v[j].e;
		} else {
			l->v[++k] = l->v[j];
		}
	}
	l->n = k + 1;
	for (size_t j = 0; j < l->n; j++)
		l->v[j].v = 1;
}

/* Sorts segments that do not overlap (utilization periods). */
static void seg_sort(struct seglist *l)
{
	qsort(l->v, l->n, sizeof(*l->v), cmp_seg);
}

/* ---- raw computation ---------------------------------------------------------------------- */

void eff_acc_done(struct acc *a)
{
	u64map_done(&a->idx);
	free(a->v);
	free(a->hour);
	memset(a, 0, sizeof(*a));
}

struct eff_tally *eff_acc_get(struct acc *a, uint32_t hour, uint32_t gpu, uint32_t holder)
{
	uint64_t key = (uint64_t)hour << 40 | (uint64_t)gpu << 20 | holder, *v;
	int ins;

	v = u64map_upsert(&a->idx, key, a->n, &ins);
	if (!v)
		return NULL;
	if (ins) {
		if (a->n == a->cap) {
			size_t ncap = a->cap ? a->cap * 2 : 64;
			struct hour_ent *n = realloc(a->v, ncap * sizeof(*n));
			uint32_t *h;

			if (!n)
				return NULL;
			a->v = n;
			h = realloc(a->hour, ncap * sizeof(*h));
			if (!h)
				return NULL;
			a->hour = h;
			a->cap = ncap;
		}
		a->v[a->n] = (struct hour_ent){ .gpu = gpu, .holder = holder };
		a->hour[a->n] = hour;
		a->n++;
	}
	return &a->v[*v].t;
}

void eff_tally_add(struct eff_tally *d, const struct eff_tally *s, double k)
{
	d->held += s->held * k;
	d->unknown += s->unknown * k;
	for (int i = 0; i < EFF_SRC_MAX; i++) {
		d->busy[i] += s->busy[i] * k;
		d->idle[i] += s->idle[i] * k;
	}
}

static struct gdat *gdat_of(struct collect *c, uint32_t id)
{
	if (eff_grow_to((void **)&c->g, &c->ng, id, sizeof(*c->g)))
		return NULL;
	c->g[id].seen = true;
	return &c->g[id];
}

static int series_begin(void *ctx, uint64_t id, const char *const *pairs, size_t n)
{
	struct collect *c = ctx;
	const char *pid = eff_pair_get(pairs, n, "pid"), *mig = eff_pair_get(pairs, n, "mig_uuid");
	const char *gpu = eff_pair_get(pairs, n, "gpu"), *node = eff_pair_get(pairs, n, "node");
	int64_t gid, hid = 0;
	struct sbuf *s;

	if (!*gpu || (c->src >= 0 && (*pid || *mig)) || (c->src < 0 && !*pid))
		return 0;
	pthread_mutex_lock(&c->e->tmu);
	gid = gpu_id(c->e, node, gpu, eff_pair_get(pairs, n, "gpu_uuid"),
		     eff_pair_get(pairs, n, "gpu_model"));
	if (gid >= 0 && c->src < 0)
		hid = holder_id(c->e, node, pid, eff_pair_get(pairs, n, "comm"));
	pthread_mutex_unlock(&c->e->tmu);
	if (gid < 0 || hid < 0)
		return (int)(gid < 0 ? gid : hid);
	if (c->only_gpu >= 0 && gid != c->only_gpu)
		return 0;
	if (eff_grow_to((void **)&c->s, &c->cap, c->n, sizeof(*c->s)))
		return -ENOMEM;
	s = &c->s[c->n];
	*s = (struct sbuf){ .gpu = (uint32_t)gid, .holder = (uint32_t)hid, .src = c->src,
			    .scale = c->scale, .cap_ns = c->src < 0 ? HOLD_CAP_NS : UTIL_CAP_NS };
	if (!u64map_upsert(&c->sidx, id, c->n + 1, NULL))
		return -ENOMEM;
	c->n++;
	return gdat_of(c, (uint32_t)gid) ? 0 : -ENOMEM;
}

static int series_point(void *ctx, uint64_t id, uint64_t t, double v)
{
	struct collect *c = ctx;
	uint64_t *k = u64map_find(&c->sidx, id);
	struct sbuf *s;

	if (!k || !*k)
		return 0;
	s = &c->s[*k - 1];
	if (!isfinite(v))
		return 0;
	if (eff_grow_to((void **)&s->p, &s->cap, s->n, sizeof(*s->p)))
		return -ENOMEM;
	s->p[s->n++] = (struct pt){ t, v };
	return 0;
}

static int cmp_pt(const void *a, const void *b)
{
	const struct pt *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

/*
 * A sample closes a period: it covers [t - d, t), d the gap to the previous sample when that is
 * at most cap, else the gap to the next one when that is, else cap.
 */
static int periods(struct collect *c, struct sbuf *s)
{
	struct gdat *g = &c->g[s->gpu];
	struct seglist *dst;
	struct hold *h = NULL;
	int err = 0;

	if (s->src < 0) {
		for (size_t i = 0; i < g->nholds && !h; i++)
			if (g->holds[i].holder == s->holder)
				h = &g->holds[i];
		if (!h) {
			struct hold *n = realloc(g->holds, (g->nholds + 1) * sizeof(*n));

			if (!n)
				return -ENOMEM;
			g->holds = n;
			h = &g->holds[g->nholds++];
			*h = (struct hold){ .holder = s->holder };
		}
		dst = &h->segs;
	} else {
		dst = &g->util[s->src];
	}
	qsort(s->p, s->n, sizeof(*s->p), cmp_pt);
	for (size_t i = 0; i < s->n && !err; i++) {
		uint64_t t = s->p[i].t, d = s->cap_ns, lo, hi;

		if (i && t - s->p[i - 1].t <= s->cap_ns)
			d = t - s->p[i - 1].t;
		else if (i + 1 < s->n && s->p[i + 1].t - t <= s->cap_ns)
			d = s->p[i + 1].t - t;
		lo = t > d ? t - d : 0;
		hi = t;
		lo = lo < c->from ? c->from : lo;
		hi = hi > c->to ? c->to : hi;
		if (lo < hi) {
			double v = s->p[i].v * s->scale;

			err = eff_seg_add(dst, lo, hi, v < 0 ? 0 : v > 1 ? 1 : v);
		}
	}
	return err;
}

static int interval_in(void *ctx, const char *kind, const char *const *labels, size_t n,
		       uint64_t start, uint64_t end, const char *const *attrs, size_t nattrs)
{
	struct collect *c = ctx;
	const char *gpu = eff_pair_get(labels, n, "gpu");
	struct gdat *g;
	int64_t gid;

	(void)attrs;
	(void)nattrs;
	if (!*gpu)
		return 0;
	if ((!strcmp(kind, "gpu_observed") || !strcmp(kind, "gpu_busy")) &&
	    *eff_pair_get(labels, n, "source") && strcmp(eff_pair_get(labels, n, "source"), "kernels"))
		return 0;	/* metric sources are read from their points */
	pthread_mutex_lock(&c->e->tmu);
	gid = gpu_id(c->e, eff_pair_get(labels, n, "node"), gpu, eff_pair_get(labels, n, "gpu_uuid"),
		     eff_pair_get(labels, n, "gpu_model"));
	pthread_mutex_unlock(&c->e->tmu);
	if (gid < 0)
		return (int)gid;
	if (c->only_gpu >= 0 && gid != c->only_gpu)
		return 0;
	g = gdat_of(c, (uint32_t)gid);
	if (!g)
		return -ENOMEM;
	start = start < c->from ? c->from : start;
	end = end > c->to ? c->to : end;
	return eff_seg_add(!strcmp(kind, "gpu_busy") ? &g->busy : &g->win, start, end, 1);
}

static void collect_done(struct collect *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->s[i].p);
	free(c->s);
	u64map_done(&c->sidx);
	for (size_t i = 0; i < c->ng; i++) {
		struct gdat *g = &c->g[i];

		free(g->win.v);
		free(g->busy.v);
		for (int k = 0; k < EFF_SRC_MAX; k++)
			free(g->util[k].v);
		for (size_t h = 0; h < g->nholds; h++)
			free(g->holds[h].segs.v);
		free(g->holds);
	}
	free(c->g);
}

/* Value of list l over [x, ...) given that boundaries are elementary; NAN if not covered. */
static double cover(const struct seglist *l, size_t *cur, uint64_t x)
{
	while (*cur < l->n && l->v[*cur].e <= x)
		(*cur)++;
	if (*cur < l->n && l->v[*cur].s <= x)
		return l->v[*cur].v;
	return NAN;
}

/* Splits one GPU's [from, to) at every boundary and accounts each piece. */
static int sweep(struct gdat *g, uint32_t gid, uint64_t from, uint64_t to, struct acc *out,
		 piece_cb cb, void *ctx)
{
	const struct seglist *lists[3 + EFF_SRC_MAX];
	size_t nl = 0, nb = 0, *cur = NULL, nh = g->nholds;
	uint64_t *b = NULL;
	uint32_t *hs = NULL;
	size_t *hcur = NULL;
	int err = 0;

	lists[nl++] = &g->win;
	lists[nl++] = &g->busy;
	for (int k = 0; k < EFF_SRC_MAX; k++)
		lists[nl++] = &g->util[k];
	{
		size_t total = 2;

		for (size_t i = 0; i < nl; i++)
			total += 2 * lists[i]->n;
		for (size_t h = 0; h < nh; h++)
			total += 2 * g->holds[h].segs.n;
		if (out && out->by_hour)
			total += (to - from) / HOUR_NS + 2;
		b = malloc(total * sizeof(*b));
	}
	cur = calloc(nl, sizeof(*cur));
	hcur = calloc(nh + 1, sizeof(*hcur));
	hs = malloc((nh + 1) * sizeof(*hs));
	if (!b || !cur || !hcur || !hs) {
		err = -ENOMEM;
		goto out;
	}
	b[nb++] = from;
	b[nb++] = to;
	for (size_t i = 0; i < nl; i++)
		for (size_t k = 0; k < lists[i]->n; k++) {
			b[nb++] = lists[i]->v[k].s;
			b[nb++] = lists[i]->v[k].e;
		}
	for (size_t h = 0; h < nh; h++)
		for (size_t k = 0; k < g->holds[h].segs.n; k++) {
			b[nb++] = g->holds[h].segs.v[k].s;
			b[nb++] = g->holds[h].segs.v[k].e;
		}
	if (out && out->by_hour)
		for (uint64_t t = (from / HOUR_NS + 1) * HOUR_NS; t < to; t += HOUR_NS)
			b[nb++] = t;
	qsort(b, nb, sizeof(*b), cmp_u64);
	for (size_t i = 0; i + 1 < nb && !err; i++) {
		uint64_t x = b[i], y = b[i + 1];
		double win, busy, len, share, frac = 0;
		int src = -1;
		size_t n = 0;

		if (x == y || x < from || y > to)
			continue;
		win = cover(&g->win, &cur[0], x);
		busy = cover(&g->busy, &cur[1], x);
		if (!isnan(win)) {
			src = EFF_KERNELS;
			frac = isnan(busy) ? 0 : 1;
		} else {
			for (int k = 0; k < EFF_SRC_MAX && src < 0; k++) {
				double v = cover(&g->util[k], &cur[2 + k], x);

				if (!isnan(v)) {
					src = k;
					frac = v;
				}
			}
			if (src < 0 && !isnan(busy)) {
				src = EFF_KERNELS;	/* a kernel ran: busy, whatever else is known */
				frac = 1;
			}
		}
		/* keep the utilization cursors moving even when a better source decided */
		for (int k = 0; k < EFF_SRC_MAX; k++)
			cover(&g->util[k], &cur[2 + k], x);
		for (size_t h = 0; h < nh; h++)
			if (!isnan(cover(&g->holds[h].segs, &hcur[h], x)))
				hs[n++] = g->holds[h].holder;
		len = (double)(y - x);
		if (cb) {
			struct piece p = { gid, x, y, src, frac, hs, n };

			err = cb(ctx, &p);
			if (err)
				break;
		}
		if (!out)
			continue;
		if (!n && src < 0)
			continue;	/* nobody, nothing known: the GPU was not observed */
		share = n ? len / (double)n : len;
		for (size_t k = 0; k < (n ? n : 1); k++) {
			struct eff_tally *t = eff_acc_get(out, out->by_hour ? (uint32_t)(x / HOUR_NS) : 0,
							  gid, n ? hs[k] : 0);

			if (!t) {
				err = -ENOMEM;
				break;
			}
			t->held += share;
			if (src < 0) {
				t->unknown += share;
			} else {
				t->busy[src] += share * frac;
				t->idle[src] += share * (1 - frac);
			}
		}
	}
out:
	free(b);
	free(cur);
	free(hcur);
	free(hs);
	return err;
}

/*
 * Computes [from, to) from stored records: tallies into out (by hour when out->by_hour), and
 * every piece to cb when given. only_gpu >= 0 restricts to that GPU id.
 */
int eff_compute_raw(struct efficiency *e, uint64_t from, uint64_t to, int64_t only_gpu,
		    struct acc *out, piece_cb cb, void *ctx)
{
	struct collect c = { .e = e, .from = from, .to = to, .only_gpu = only_gpu };
	uint64_t lo = from > 2 * HOLD_CAP_NS ? from - 2 * HOLD_CAP_NS : 0;
	uint64_t hi = to + 2 * HOLD_CAP_NS;
	struct store *st = e->st;
	bool trunc;
	int err = 0;

	if (from >= to)
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(util_series) && !err; i++) {
		c.src = (int)util_series[i].src;
		c.scale = util_series[i].scale;
		err = st->ops->series(st, util_series[i].name, lo, hi, NULL, series_begin,
				      series_point, &c);
	}
	for (size_t i = 0; i < ARRAY_SIZE(hold_series) && !err; i++) {
		c.src = -1;
		c.scale = 1;
		err = st->ops->series(st, hold_series[i], lo, hi, NULL, series_begin, series_point,
				      &c);
	}
	if (!err)
		err = st->ops->intervals(st, "gpu_busy", from, to, NULL, SIZE_MAX, interval_in, &c,
					 &trunc);
	if (!err)
		err = st->ops->intervals(st, "gpu_observed", from, to, NULL, SIZE_MAX, interval_in,
					 &c, &trunc);
	for (size_t i = 0; i < c.n && !err; i++)
		err = periods(&c, &c.s[i]);
	for (size_t i = 0; i < c.ng && !err; i++) {
		struct gdat *g = &c.g[i];

		if (!g->seen)
			continue;
		eff_seg_union(&g->win);
		eff_seg_union(&g->busy);
		for (int k = 0; k < EFF_SRC_MAX; k++)
			seg_sort(&g->util[k]);
		for (size_t h = 0; h < g->nholds; h++)
			eff_seg_union(&g->holds[h].segs);
		err = sweep(g, (uint32_t)i, from, to, out, cb, ctx);
	}
	collect_done(&c);
	return err;
}
