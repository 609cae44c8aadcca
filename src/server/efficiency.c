/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU efficiency per workload over the store interface (efficiency.h, docs/efficiency.md):
 * busy/idle per (node, GPU) from the best source of each range, who held each GPU, an hourly
 * in-memory rollup, the grouped and priced answer and the CPU causes of idle time.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/batch.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/efficiency.h"
#include "server/query.h"
#include "server/selector.h"

#define HOUR_NS		(3600 * NSEC_PER_SEC)
#define UTIL_CAP_NS	NSEC_PER_SEC		/* a utilization sample speaks for at most 1 s */
#define HOLD_CAP_NS	(10 * NSEC_PER_SEC)	/* a process sample, at most 10 s */
#define MAX_IDS		(1u << 20)		/* GPUs and holders the tables can name */
#define ROLL_MAX_NS	(24 * HOUR_NS)		/* hours rolled up in one pass while catching up */
#define CAUSE_FUNCS	5
#define CAUSE_INTERVALS	2000000			/* thread states read per causes row */

static const char *const src_names[EFF_SRC_MAX] = { "kernels", "gpm", "nvml" };

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

/* Labels a workload may be grouped by without being seen first. */
static const char *const known_by[] = {
	"namespace", "pod", "container", "owner", "owner_kind", "kubeflow_job",
	"kubeflow_replica_type", "ray_cluster", "ray_group", "comm", "pid", "node",
	"systemd_unit",
};

/* CPU-side labels that are not the process's (one per thread or per interval). */
static const char *const thread_labels[] = { "tid", "thread", "ns_pid", "gpu", "gpu_uuid" };

struct gpu_info {
	char *node, *gpu, *uuid, *model;
};

struct holder_info {
	char *node, *pid, *comm;
};

struct hour_ent {
	uint32_t gpu, holder;		/* holder 0: nobody */
	struct eff_tally t;
};

struct hour_roll {
	struct hour_ent *v;
	size_t n;
	bool done, dirty;
};

struct efficiency {
	struct store *st;
	struct eff_cfg cfg;

	pthread_mutex_t tmu;		/* tables (only grow) */
	struct strtab gpu_keys;
	struct u64map holder_ids;	/* hash of "node\x01pid\x01comm" -> holder id */
	size_t nholders;
	struct gpu_info *gpus;		/* index = id */
	struct holder_info *holders;	/* index = id - 1 */
	size_t capg, caph;

	pthread_mutex_t rmu;		/* rollup */
	pthread_cond_t rcond;
	struct hour_roll *hours;	/* index = hour - r_start */
	size_t nhours;
	uint64_t r_start;		/* first hour (Unix ns, hour-aligned); 0: not started */
	uint64_t r_wm;			/* hours before this were rolled up once */
	pthread_t thread;
	bool stopping, started;
};

/* ---- prices ------------------------------------------------------------------------------- */

int eff_cfg_add_price(struct eff_cfg *c, const char *arg, char *err, size_t errlen)
{
	const char *eq = strrchr(arg, '='), *num = eq ? eq + 1 : arg;
	struct eff_price *n;
	char *end;
	double v;

	errno = 0;
	v = strtod(num, &end);
	if (!*num || *end || errno || !isfinite(v) || v < 0) {
		snprintf(err, errlen, "--gpu-hour-price: '%s' is not a price (3.50, or 'MODEL=3.50')",
			 arg);
		return -EINVAL;
	}
	if (eq && eq == arg) {
		snprintf(err, errlen, "--gpu-hour-price: '%s' has an empty model name", arg);
		return -EINVAL;
	}
	n = realloc(c->prices, (c->nprices + 1) * sizeof(*n));
	if (!n) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	c->prices = n;
	n[c->nprices].model = eq ? strndup(arg, (size_t)(eq - arg)) : NULL;
	n[c->nprices].dollars = v;
	if (eq && !n[c->nprices].model) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	c->nprices++;
	return 0;
}

void eff_cfg_done(struct eff_cfg *c)
{
	for (size_t i = 0; i < c->nprices; i++)
		free(c->prices[i].model);
	free(c->prices);
	c->prices = NULL;
	c->nprices = 0;
}

/* Dollars per GPU-hour for a model: its own price, else the default; NAN when neither. */
static double price_of(const struct eff_cfg *c, const char *model)
{
	double dflt = NAN;

	for (size_t i = 0; i < c->nprices; i++) {
		if (!c->prices[i].model)
			dflt = c->prices[i].dollars;
		else if (model && !strcmp(model, c->prices[i].model))
			return c->prices[i].dollars;
	}
	return dflt;
}

/* ---- tables ------------------------------------------------------------------------------- */

/*
 * Grows the zero-filled array *p of *cap elements of size bytes so that index i exists (doubling
 * from 64). 0 or -ENOMEM (the array is unchanged).
 */
static int grow_to(void **p, size_t *cap, size_t i, size_t size)
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

static const char *pair_get(const char *const *pairs, size_t n, const char *name)
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
	if (grow_to((void **)&e->gpus, &e->capg, (size_t)id, sizeof(*e->gpus)))
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
static uint64_t holder_find(struct efficiency *e, const char *node, const char *pid,
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
	if (grow_to((void **)&e->holders, &e->caph, (size_t)id, sizeof(*e->holders)))
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

struct seg {
	uint64_t s, e;
	double v;
};

struct seglist {
	struct seg *v;
	size_t n, cap;
};

static int seg_add(struct seglist *l, uint64_t s, uint64_t e, double v)
{
	if (s >= e)
		return 0;
	if (grow_to((void **)&l->v, &l->cap, l->n, sizeof(*l->v)))
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
static void seg_union(struct seglist *l)
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

struct pt {
	uint64_t t;
	double v;
};

struct sbuf {
	uint32_t gpu, holder;		/* holder 0: a utilization series */
	int src;
	double scale;
	uint64_t cap_ns;
	struct pt *p;
	size_t n, cap;
};

struct hold {
	uint32_t holder;
	struct seglist segs;
};

struct gdat {
	bool seen;
	struct seglist win, busy, util[EFF_SRC_MAX];
	struct hold *holds;
	size_t nholds;
};

/* One elementary piece of a GPU's time, for callers that want more than the tallies. */
struct piece {
	uint32_t gpu;
	uint64_t s, e;
	int src;			/* -1: unknown */
	double busy;			/* fraction 0..1 */
	const uint32_t *holders;
	size_t nholders;
};

typedef int (*piece_cb)(void *ctx, const struct piece *p);

struct acc {
	struct u64map idx;		/* key -> index + 1 */
	struct hour_ent *v;
	uint32_t *hour;			/* per entry: hour index (only by_hour) */
	size_t n, cap;
	bool by_hour;
};

static void acc_done(struct acc *a)
{
	u64map_done(&a->idx);
	free(a->v);
	free(a->hour);
	memset(a, 0, sizeof(*a));
}

static struct eff_tally *acc_get(struct acc *a, uint32_t hour, uint32_t gpu, uint32_t holder)
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

static void tally_add(struct eff_tally *d, const struct eff_tally *s, double k)
{
	d->held += s->held * k;
	d->unknown += s->unknown * k;
	for (int i = 0; i < EFF_SRC_MAX; i++) {
		d->busy[i] += s->busy[i] * k;
		d->idle[i] += s->idle[i] * k;
	}
}

struct collect {
	struct efficiency *e;
	struct sbuf *s;
	size_t n, cap;
	struct u64map sidx;		/* store series id -> index + 1 */
	int src;			/* of the series being read; -1: holder series */
	double scale;
	struct gdat *g;
	size_t ng;
	int64_t only_gpu;		/* >= 0: ignore other GPUs */
	uint64_t from, to;
	int err;
};

static struct gdat *gdat_of(struct collect *c, uint32_t id)
{
	if (grow_to((void **)&c->g, &c->ng, id, sizeof(*c->g)))
		return NULL;
	c->g[id].seen = true;
	return &c->g[id];
}

static int series_begin(void *ctx, uint64_t id, const char *const *pairs, size_t n)
{
	struct collect *c = ctx;
	const char *pid = pair_get(pairs, n, "pid"), *mig = pair_get(pairs, n, "mig_uuid");
	const char *gpu = pair_get(pairs, n, "gpu"), *node = pair_get(pairs, n, "node");
	int64_t gid, hid = 0;
	struct sbuf *s;

	if (!*gpu || (c->src >= 0 && (*pid || *mig)) || (c->src < 0 && !*pid))
		return 0;
	pthread_mutex_lock(&c->e->tmu);
	gid = gpu_id(c->e, node, gpu, pair_get(pairs, n, "gpu_uuid"),
		     pair_get(pairs, n, "gpu_model"));
	if (gid >= 0 && c->src < 0)
		hid = holder_id(c->e, node, pid, pair_get(pairs, n, "comm"));
	pthread_mutex_unlock(&c->e->tmu);
	if (gid < 0 || hid < 0)
		return (int)(gid < 0 ? gid : hid);
	if (c->only_gpu >= 0 && gid != c->only_gpu)
		return 0;
	if (grow_to((void **)&c->s, &c->cap, c->n, sizeof(*c->s)))
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
	if (grow_to((void **)&s->p, &s->cap, s->n, sizeof(*s->p)))
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

			err = seg_add(dst, lo, hi, v < 0 ? 0 : v > 1 ? 1 : v);
		}
	}
	return err;
}

static int interval_in(void *ctx, const char *kind, const char *const *labels, size_t n,
		       uint64_t start, uint64_t end, const char *const *attrs, size_t nattrs)
{
	struct collect *c = ctx;
	const char *gpu = pair_get(labels, n, "gpu");
	struct gdat *g;
	int64_t gid;

	(void)attrs;
	(void)nattrs;
	if (!*gpu)
		return 0;
	if ((!strcmp(kind, "gpu_observed") || !strcmp(kind, "gpu_busy")) &&
	    *pair_get(labels, n, "source") && strcmp(pair_get(labels, n, "source"), "kernels"))
		return 0;	/* metric sources are read from their points */
	pthread_mutex_lock(&c->e->tmu);
	gid = gpu_id(c->e, pair_get(labels, n, "node"), gpu, pair_get(labels, n, "gpu_uuid"),
		     pair_get(labels, n, "gpu_model"));
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
	return seg_add(!strcmp(kind, "gpu_busy") ? &g->busy : &g->win, start, end, 1);
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
			struct eff_tally *t = acc_get(out, out->by_hour ? (uint32_t)(x / HOUR_NS) : 0,
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
static int compute_raw(struct efficiency *e, uint64_t from, uint64_t to, int64_t only_gpu,
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
		seg_union(&g->win);
		seg_union(&g->busy);
		for (int k = 0; k < EFF_SRC_MAX; k++)
			seg_sort(&g->util[k]);
		for (size_t h = 0; h < g->nholds; h++)
			seg_union(&g->holds[h].segs);
		err = sweep(g, (uint32_t)i, from, to, out, cb, ctx);
	}
	collect_done(&c);
	return err;
}

/* ---- rollup ------------------------------------------------------------------------------- */

static uint64_t floor_h(uint64_t t)
{
	return t / HOUR_NS * HOUR_NS;
}

static uint64_t ceil_h(uint64_t t)
{
	return (t + HOUR_NS - 1) / HOUR_NS * HOUR_NS;
}

static int first_data(void *ctx, const char *node, uint64_t first, uint64_t last)
{
	uint64_t *min = ctx;

	(void)node;
	(void)last;
	if (first && first < *min)
		*min = first;
	return 0;
}

/* The hour slot of t (rmu held); NULL outside [r_start, r_wm + 1h) or on ENOMEM. */
static struct hour_roll *hour_slot(struct efficiency *e, uint64_t t)
{
	size_t i;

	if (!e->r_start || t < e->r_start)
		return NULL;
	i = (size_t)((t - e->r_start) / HOUR_NS);
	if (grow_to((void **)&e->hours, &e->nhours, i, sizeof(*e->hours)))
		return NULL;
	return &e->hours[i];
}

/*
 * Rolls up the hours of [h0, h1) from stored records in one pass (one read of the records: the
 * store's interval scan is bounded below only, so hour by hour would reread what follows).
 */
static int roll_range(struct efficiency *e, uint64_t h0, uint64_t h1)
{
	size_t nh = (size_t)((h1 - h0) / HOUR_NS), *cnt = calloc(nh + 1, sizeof(size_t));
	struct hour_ent **per = calloc(nh + 1, sizeof(*per));
	struct acc a = { .by_hour = true };
	int err = cnt && per ? 0 : -ENOMEM;

	if (!err)
		err = compute_raw(e, h0, h1, -1, &a, NULL, NULL);
	for (size_t i = 0; i < a.n && !err; i++)
		cnt[a.hour[i] - h0 / HOUR_NS]++;
	for (size_t k = 0; k < nh && !err; k++) {
		per[k] = malloc((cnt[k] ? cnt[k] : 1) * sizeof(**per));
		if (!per[k])
			err = -ENOMEM;
		cnt[k] = 0;
	}
	for (size_t i = 0; i < a.n && !err; i++) {
		size_t k = a.hour[i] - h0 / HOUR_NS;

		per[k][cnt[k]++] = a.v[i];
	}
	if (!err) {
		pthread_mutex_lock(&e->rmu);
		for (size_t k = 0; k < nh && !err; k++) {
			struct hour_roll *slot = hour_slot(e, h0 + k * HOUR_NS);

			if (!slot) {
				err = -ENOMEM;
				break;
			}
			free(slot->v);
			slot->v = per[k];
			slot->n = cnt[k];
			slot->done = true;
			per[k] = NULL;
		}
		pthread_mutex_unlock(&e->rmu);
	}
	for (size_t k = 0; per && k < nh; k++)
		free(per[k]);
	free(per);
	free(cnt);
	acc_done(&a);
	return err;
}

static void *rollup_main(void *arg)
{
	struct efficiency *e = arg;

	pthread_mutex_lock(&e->rmu);
	while (!e->stopping) {
		uint64_t now = wall_ns(), target = floor_h(now - e->cfg.settle_ns), h = 0, h1 = 0;
		struct timespec ts;
		bool work = false;

		if (!e->r_start) {
			uint64_t min = UINT64_MAX;

			pthread_mutex_unlock(&e->rmu);
			e->st->ops->nodes(e->st, first_data, &min);
			pthread_mutex_lock(&e->rmu);
			if (min != UINT64_MAX && min < now)
				e->r_start = e->r_wm = floor_h(min);
		}
		if (e->r_start) {
			/* Late data first (newest hours matter most), then the next hour. */
			for (size_t i = e->r_wm > e->r_start ? (e->r_wm - e->r_start) / HOUR_NS : 0;
			     i-- > 0 && !work;) {
				if (e->hours[i].dirty) {
					e->hours[i].dirty = false;
					h = e->r_start + i * HOUR_NS;
					h1 = h + HOUR_NS;
					work = true;
				}
			}
			if (!work && e->r_wm < target) {
				/* up to a day at a time while catching up */
				h = e->r_wm;
				h1 = target - h > ROLL_MAX_NS ? h + ROLL_MAX_NS : target;
				work = true;
			}
		}
		if (work) {
			int err;

			pthread_mutex_unlock(&e->rmu);
			err = roll_range(e, h, h1);
			pthread_mutex_lock(&e->rmu);
			if (err) {
				log_warn("efficiency rollup from %llu: %s, retrying",
					 (unsigned long long)(h / NSEC_PER_SEC), strerror(-err));
			} else if (h == e->r_wm) {
				e->r_wm = h1;
				continue;
			} else {
				continue;
			}
		}
		now = wall_ns() + 5 * NSEC_PER_SEC;
		ts.tv_sec = (time_t)(now / NSEC_PER_SEC);
		ts.tv_nsec = (long)(now % NSEC_PER_SEC);
		pthread_cond_timedwait(&e->rcond, &e->rmu, &ts);
	}
	pthread_mutex_unlock(&e->rmu);
	return NULL;
}

static void mark_dirty(struct efficiency *e, uint64_t t0, uint64_t t1)
{
	if (!e->r_start || t1 < e->r_start)
		return;
	t0 = t0 < e->r_start ? e->r_start : t0;
	for (uint64_t h = floor_h(t0); h <= t1 && h < e->r_wm; h += HOUR_NS) {
		struct hour_roll *s = hour_slot(e, h);

		if (s && s->done)
			s->dirty = true;
	}
}

void efficiency_ingested(struct efficiency *e, const struct Gpuscope__V1__Batch *m)
{
	uint64_t lo = UINT64_MAX, hi = 0;

	if (!e)
		return;
	for (size_t i = 0; i < m->n_intervals; i++) {
		const char *k = m->strings[m->intervals[i]->kind];

		if (strcmp(k, "gpu_busy") && strcmp(k, "gpu_observed"))
			continue;
		lo = m->intervals[i]->start_ns < lo ? m->intervals[i]->start_ns : lo;
		hi = m->intervals[i]->end_ns > hi ? m->intervals[i]->end_ns : hi;
	}
	for (size_t i = 0; i < m->n_series; i++) {
		const Gpuscope__V1__MetricSeries *s = m->series[i];
		uint64_t t = 0, a = UINT64_MAX, b = 0;

		if (strncmp(m->strings[s->name], "gpu_", 4))
			continue;
		for (size_t k = 0; k < s->n_time_delta_ns; k++) {
			t += (uint64_t)s->time_delta_ns[k];
			a = t < a ? t : a;
			b = t > b ? t : b;
		}
		if (a == UINT64_MAX)
			continue;
		a = a > HOLD_CAP_NS ? a - HOLD_CAP_NS : 0;
		lo = a < lo ? a : lo;
		hi = b + UTIL_CAP_NS > hi ? b + UTIL_CAP_NS : hi;
	}
	if (lo > hi)
		return;
	pthread_mutex_lock(&e->rmu);
	mark_dirty(e, lo, hi);
	pthread_mutex_unlock(&e->rmu);
}

void efficiency_stats(struct efficiency *e, uint64_t *ret_hours, uint64_t *ret_dirty,
		      uint64_t *ret_lag_hours)
{
	uint64_t n = 0, d = 0, target = floor_h(wall_ns() - e->cfg.settle_ns);

	pthread_mutex_lock(&e->rmu);
	for (size_t i = 0; e->r_wm > e->r_start && i < (e->r_wm - e->r_start) / HOUR_NS; i++) {
		n += e->hours[i].done;
		d += e->hours[i].dirty;
	}
	*ret_lag_hours = e->r_start && target > e->r_wm ? (target - e->r_wm) / HOUR_NS : 0;
	pthread_mutex_unlock(&e->rmu);
	*ret_hours = n;
	*ret_dirty = d;
}

/* Tallies of [from, to): whole rolled-up hours from the rollup, the rest from records. */
static int gather(struct efficiency *e, uint64_t from, uint64_t to, struct acc *out,
		  uint64_t *ret_rolled_ns)
{
	uint64_t h1 = ceil_h(from), h2 = floor_h(to), raw_from = from;
	int err = 0;

	*ret_rolled_ns = 0;
	if (h1 < h2) {
		for (uint64_t h = h1; h < h2 && !err; h += HOUR_NS) {
			struct hour_roll *s;
			bool use;

			pthread_mutex_lock(&e->rmu);
			s = h < e->r_wm ? hour_slot(e, h) : NULL;
			use = s && s->done && !s->dirty;
			for (size_t i = 0; use && i < s->n && !err; i++) {
				struct eff_tally *t = acc_get(out, 0, s->v[i].gpu, s->v[i].holder);

				if (!t)
					err = -ENOMEM;
				else
					tally_add(t, &s->v[i].t, 1);
			}
			pthread_mutex_unlock(&e->rmu);
			if (!use)
				continue;
			*ret_rolled_ns += HOUR_NS;
			if (raw_from < h && !err)
				err = compute_raw(e, raw_from, h, -1, out, NULL, NULL);
			raw_from = h + HOUR_NS;
		}
	}
	if (!err && raw_from < to)
		err = compute_raw(e, raw_from, to, -1, out, NULL, NULL);
	return err;
}

/* ---- holder labels ------------------------------------------------------------------------ */

struct hlabels {
	char ***pairs;			/* per holder id: merged label pairs (malloc'ed block) */
	size_t *n;
	size_t cap;
};

struct resolve {
	struct efficiency *e;
	struct hlabels *hl;
	const uint8_t *want;		/* holder id -> needed */
	size_t nwant;
	size_t *best;			/* holder id -> pairs kept so far */
};

static bool is_thread_label(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(thread_labels); i++)
		if (!strcmp(name, thread_labels[i]))
			return true;
	return false;
}

/* Copies pairs (minus thread labels) into one allocation: pointers, then the strings. */
static char **pack_pairs(const char *const *pairs, size_t n, size_t *ret_n)
{
	size_t bytes = 0, k = 0;
	char **out, *p;

	for (size_t i = 0; i < n; i++)
		if (!is_thread_label(pairs[2 * i]))
			bytes += strlen(pairs[2 * i]) + strlen(pairs[2 * i + 1]) + 2;
	out = malloc(2 * n * sizeof(char *) + bytes + 1);
	if (!out)
		return NULL;
	p = (char *)(out + 2 * n);
	for (size_t i = 0; i < n; i++) {
		if (is_thread_label(pairs[2 * i]))
			continue;
		for (int j = 0; j < 2; j++) {
			size_t l = strlen(pairs[2 * i + j]) + 1;

			memcpy(p, pairs[2 * i + j], l);
			out[2 * k + j] = p;
			p += l;
		}
		k++;
	}
	*ret_n = k;
	return out;
}

static int resolve_set(void *ctx, const char *const *pairs, size_t n)
{
	struct resolve *r = ctx;
	const char *pid = pair_get(pairs, n, "pid"), *node = pair_get(pairs, n, "node");
	uint64_t id;

	if (!*pid || *pair_get(pairs, n, "gpu"))
		return 0;
	pthread_mutex_lock(&r->e->tmu);
	id = holder_find(r->e, node, pid, pair_get(pairs, n, "comm"));
	if (!id)	/* the GPU side could not read the process's comm */
		id = holder_find(r->e, node, pid, "");
	pthread_mutex_unlock(&r->e->tmu);
	if (!id || id >= r->nwant || !r->want[id] || n <= r->best[id])
		return 0;
	free(r->hl->pairs[id]);
	r->hl->pairs[id] = pack_pairs(pairs, n, &r->hl->n[id]);
	if (!r->hl->pairs[id])
		return -ENOMEM;
	r->best[id] = n;
	return 0;
}

/*
 * Labels of every holder in want: the CPU-side label set of the same node, pid and comm with
 * the most labels (pod, namespace, ...), else node/pid/comm alone.
 */
static int resolve_labels(struct efficiency *e, uint64_t from, uint64_t to, const uint8_t *want,
			  size_t nwant, struct hlabels *hl)
{
	struct resolve r = { e, hl, want, nwant, calloc(nwant ? nwant : 1, sizeof(size_t)) };
	int err;

	hl->pairs = calloc(nwant ? nwant : 1, sizeof(*hl->pairs));
	hl->n = calloc(nwant ? nwant : 1, sizeof(*hl->n));
	hl->cap = nwant;
	if (!r.best || !hl->pairs || !hl->n) {
		free(r.best);
		return -ENOMEM;
	}
	/* A wide range: a short window may end before the process's first CPU record. */
	err = e->st->ops->label_sets(e->st, from > HOUR_NS ? from - HOUR_NS : 0, to + HOUR_NS,
				     NULL, resolve_set, &r);
	for (size_t id = 1; id < nwant && !err; id++) {
		const struct holder_info *h;
		const char *p[6];

		if (!want[id] || hl->pairs[id])
			continue;
		pthread_mutex_lock(&e->tmu);
		h = &e->holders[id - 1];
		p[0] = "comm", p[1] = h->comm, p[2] = "node", p[3] = h->node, p[4] = "pid";
		p[5] = h->pid;
		if (*h->comm)
			hl->pairs[id] = pack_pairs(p, 3, &hl->n[id]);
		else
			hl->pairs[id] = pack_pairs(p + 2, 2, &hl->n[id]);
		pthread_mutex_unlock(&e->tmu);
		if (!hl->pairs[id])
			err = -ENOMEM;
	}
	free(r.best);
	return err;
}

static void hlabels_done(struct hlabels *hl)
{
	for (size_t i = 0; i < hl->cap; i++)
		free(hl->pairs[i]);
	free(hl->pairs);
	free(hl->n);
}

/* ---- grouping ----------------------------------------------------------------------------- */

struct row_gpu {
	uint32_t gpu;
	struct eff_tally t;
};

struct row {
	char *key;			/* workload value, "(none)" */
	bool none;
	struct eff_tally t;
	double held_dollars, idle_dollars, unpriced_ns;
	struct row_gpu *g;
	size_t ng;
	uint32_t *holders;
	size_t nholders;
	char **common;			/* labels every holder shares (subset of wanted names) */
	size_t ncommon;
};

static double idle_of(const struct eff_tally *t)
{
	double s = 0;

	for (int i = 0; i < EFF_SRC_MAX; i++)
		s += t->idle[i];
	return s;
}

static double busy_of(const struct eff_tally *t)
{
	double s = 0;

	for (int i = 0; i < EFF_SRC_MAX; i++)
		s += t->busy[i];
	return s;
}

struct eff_ans {
	struct row *rows;
	size_t nrows;
	struct row_gpu *unheld;
	size_t nunheld;
	struct hlabels hl;
	size_t nwant;
};

static void ans_done(struct eff_ans *a)
{
	for (size_t i = 0; i < a->nrows; i++) {
		free(a->rows[i].key);
		free(a->rows[i].g);
		free(a->rows[i].holders);
		free(a->rows[i].common);
	}
	free(a->rows);
	free(a->unheld);
	hlabels_done(&a->hl);
}

static int row_add_gpu(struct row *r, uint32_t gpu, const struct eff_tally *t)
{
	for (size_t i = 0; i < r->ng; i++) {
		if (r->g[i].gpu == gpu) {
			tally_add(&r->g[i].t, t, 1);
			return 0;
		}
	}
	{
		struct row_gpu *n = realloc(r->g, (r->ng + 1) * sizeof(*n));

		if (!n)
			return -ENOMEM;
		r->g = n;
		r->g[r->ng++] = (struct row_gpu){ gpu, *t };
	}
	return 0;
}

static int row_add_holder(struct row *r, uint32_t h)
{
	uint32_t *n;

	for (size_t i = 0; i < r->nholders; i++)
		if (r->holders[i] == h)
			return 0;
	n = realloc(r->holders, (r->nholders + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	r->holders = n;
	r->holders[r->nholders++] = h;
	return 0;
}

/* Label pairs of an entry for the selector: the holder's and the GPU's. */
static size_t entry_pairs(struct efficiency *e, const struct eff_ans *a, uint32_t gpu,
			  uint32_t holder, const char **out, size_t max)
{
	const struct gpu_info *g = &e->gpus[gpu];
	size_t n = 0;

	if (holder && holder < a->nwant && a->hl.pairs[holder]) {
		for (size_t i = 0; i < a->hl.n[holder] && n + 4 < max; i++) {
			out[2 * n] = a->hl.pairs[holder][2 * i];
			out[2 * n + 1] = a->hl.pairs[holder][2 * i + 1];
			n++;
		}
	} else {
		out[2 * n] = "node";
		out[2 * n + 1] = g->node;
		n++;
	}
	out[2 * n] = "gpu", out[2 * n + 1] = g->gpu, n++;
	out[2 * n] = "gpu_uuid", out[2 * n + 1] = g->uuid ? g->uuid : "", n++;
	out[2 * n] = "gpu_model", out[2 * n + 1] = g->model ? g->model : "", n++;
	return n;
}

static int cmp_rows(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	double ix = isnan(x->idle_dollars) ? -1 : x->idle_dollars;
	double iy = isnan(y->idle_dollars) ? -1 : y->idle_dollars;

	if (ix != iy)
		return ix < iy ? 1 : -1;
	if (idle_of(&x->t) != idle_of(&y->t))
		return idle_of(&x->t) < idle_of(&y->t) ? 1 : -1;
	return strcmp(x->key, y->key);
}

static int cmp_unheld(const void *a, const void *b, void *ctx)
{
	const struct row_gpu *x = a, *y = b;
	const struct efficiency *e = ctx;
	int c = strcmp(e->gpus[x->gpu].node, e->gpus[y->gpu].node);

	if (c)
		return c;
	c = (int)(strtol(e->gpus[x->gpu].gpu, NULL, 10) - strtol(e->gpus[y->gpu].gpu, NULL, 10));
	return c ? c : strcmp(e->gpus[x->gpu].gpu, e->gpus[y->gpu].gpu);
}

/* Groups the tallies by the `by` label (holders) and by GPU (unheld); prices them. */
static int group(struct efficiency *e, struct acc *acc, const char *by, const struct selector *sel,
		 uint64_t from, uint64_t to, struct eff_ans *a)
{
	uint8_t *want;
	struct u64map ridx = { 0 };
	struct strtab keys = { 0 };
	int err = 0;

	pthread_mutex_lock(&e->tmu);
	a->nwant = e->nholders + 1;
	pthread_mutex_unlock(&e->tmu);
	want = calloc(a->nwant, 1);
	if (!want)
		return -ENOMEM;
	for (size_t i = 0; i < acc->n; i++)
		if (acc->v[i].holder < a->nwant)
			want[acc->v[i].holder] = 1;
	err = resolve_labels(e, from, to, want, a->nwant, &a->hl);
	free(want);
	pthread_mutex_lock(&e->tmu);
	for (size_t i = 0; i < acc->n && !err; i++) {
		const struct hour_ent *en = &acc->v[i];
		const char *pairs[2 * (BATCH_MAX_LABELS + 8)];
		size_t np = entry_pairs(e, a, en->gpu, en->holder, pairs, BATCH_MAX_LABELS + 8);
		const struct gpu_info *g = &e->gpus[en->gpu];
		double price = price_of(&e->cfg, g->model);
		struct row *r;
		const char *v;
		int64_t k;
		uint64_t *slot;
		int ins;

		if (!selector_match(sel, pairs, np))
			continue;
		if (!en->holder) {
			struct row_gpu *n = realloc(a->unheld, (a->nunheld + 1) * sizeof(*n));

			if (!n) {
				err = -ENOMEM;
				break;
			}
			a->unheld = n;
			a->unheld[a->nunheld++] = (struct row_gpu){ en->gpu, en->t };
			continue;
		}
		v = pair_get(pairs, np, by);
		k = strtab_intern(&keys, *v ? v : "\x01(none)");
		if (k < 0) {
			err = (int)k;
			break;
		}
		slot = u64map_upsert(&ridx, (uint64_t)k + 1, a->nrows, &ins);
		if (!slot) {
			err = -ENOMEM;
			break;
		}
		if (ins) {
			struct row *n = realloc(a->rows, (a->nrows + 1) * sizeof(*n));

			if (!n) {
				err = -ENOMEM;
				break;
			}
			a->rows = n;
			a->rows[a->nrows] = (struct row){ .key = strdup(*v ? v : "(none)"),
							  .none = !*v };
			if (!a->rows[a->nrows].key) {
				err = -ENOMEM;
				break;
			}
			a->nrows++;
		}
		r = &a->rows[*slot];
		tally_add(&r->t, &en->t, 1);
		if (isnan(price)) {
			r->unpriced_ns += en->t.held;
		} else {
			r->held_dollars += en->t.held / HOUR_NS * price;
			r->idle_dollars += idle_of(&en->t) / HOUR_NS * price;
		}
		err = row_add_gpu(r, en->gpu, &en->t);
		if (!err)
			err = row_add_holder(r, en->holder);
	}
	pthread_mutex_unlock(&e->tmu);
	strtab_done(&keys);
	u64map_done(&ridx);
	if (err)
		return err;
	for (size_t i = 0; i < a->nrows; i++)
		if (a->rows[i].unpriced_ns > 0 && a->rows[i].held_dollars == 0)
			a->rows[i].idle_dollars = a->rows[i].held_dollars = NAN;
	qsort(a->rows, a->nrows, sizeof(*a->rows), cmp_rows);
	qsort_r(a->unheld, a->nunheld, sizeof(*a->unheld), cmp_unheld, e);
	return 0;
}

static const char *best_source(const struct eff_tally *t);

/* ---- causes ------------------------------------------------------------------------------- */

struct cause_ctx {
	const uint32_t *holders;
	size_t nholders;
	struct seglist idle;		/* v = idle fraction */
};

static int cause_piece(void *ctx, const struct piece *p)
{
	struct cause_ctx *c = ctx;
	bool ours = false;

	if (p->src < 0 || p->busy >= 1)
		return 0;
	for (size_t i = 0; i < p->nholders && !ours; i++)
		for (size_t k = 0; k < c->nholders && !ours; k++)
			ours = p->holders[i] == c->holders[k];
	return ours ? seg_add(&c->idle, p->s, p->e, 1 - p->busy) : 0;
}

#define REASONS_MAX 16

struct state_ctx {
	const struct seglist *idle;
	struct seglist active;
	char reason[REASONS_MAX][32];
	double blocked_ns[REASONS_MAX];
	size_t nreasons;
};

/* Idle-weighted overlap of [s, e) with the idle pieces. */
static double idle_overlap(const struct seglist *idle, uint64_t s, uint64_t e)
{
	size_t lo = 0, hi = idle->n;
	double sum = 0;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (idle->v[mid].e <= s)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < idle->n && idle->v[i].s < e; i++) {
		uint64_t a = idle->v[i].s > s ? idle->v[i].s : s;
		uint64_t b = idle->v[i].e < e ? idle->v[i].e : e;

		if (a < b)
			sum += (double)(b - a) * idle->v[i].v;
	}
	return sum;
}

static int state_in(void *ctx, const char *kind, const char *const *labels, size_t n,
		    uint64_t start, uint64_t end, const char *const *attrs, size_t na)
{
	struct state_ctx *c = ctx;
	const char *state = pair_get(attrs, na, "state"), *reason = pair_get(attrs, na, "reason");
	bool summary = !strcmp(pair_get(attrs, na, "summary"), "1");
	double w;
	size_t r;

	(void)kind;
	(void)labels;
	(void)n;
	if (summary) {
		double run = strtod(pair_get(attrs, na, "running_ns"), NULL) +
			     strtod(pair_get(attrs, na, "runnable_ns"), NULL);

		if (run > 0)
			return seg_add(&c->active, start, end, 1);
		reason = "other";
		state = "blocked";
	}
	if (strcmp(state, "blocked"))
		return seg_add(&c->active, start, end, 1);
	w = idle_overlap(c->idle, start, end);
	if (w <= 0)
		return 0;
	if (!*reason)
		reason = "other";
	for (r = 0; r < c->nreasons && strcmp(c->reason[r], reason); r++)
		;
	if (r == c->nreasons) {
		if (r == REASONS_MAX)
			r = REASONS_MAX - 1;	/* the last slot collects the rest */
		else
			c->nreasons++;
		snprintf(c->reason[r], sizeof(c->reason[r]), "%s", r == REASONS_MAX - 1 &&
			 c->nreasons == REASONS_MAX ? "other" : reason);
	}
	c->blocked_ns[r] += w;
	return 0;
}

struct fn_self {
	struct strtab names;
	double *self;
	size_t cap;
	const struct u64map *agg;
	double total;
};

static int fn_stack(void *ctx, uint64_t id, const struct frame *f, size_t nf)
{
	struct fn_self *fs = ctx;
	uint64_t *v = u64map_find(fs->agg, id);
	char tmp[256];
	int64_t k;

	if (!v)
		return 0;
	fs->total += (double)*v;
	k = strtab_intern(&fs->names, nf ? frame_name(&f[0], tmp, sizeof(tmp)) : "[unknown]");
	if (k < 0)
		return (int)k;
	if (grow_to((void **)&fs->self, &fs->cap, (size_t)k, sizeof(*fs->self)))
		return -ENOMEM;
	fs->self[k] += (double)*v;
	return 0;
}

static int cmp_desc_idx(const void *a, const void *b, void *ctx)
{
	const double *v = ctx;
	double x = v[*(const size_t *)a], y = v[*(const size_t *)b];

	return x < y ? 1 : x > y ? -1 : 0;
}

/* Builds the selector text of a row: its `by` label, or its processes when it has none. */
static void row_selector(struct efficiency *e, const struct row *r, const char *by,
			 const char *node, struct buf *out)
{
	buf_puts(out, "{");
	if (!r->none) {
		buf_printf(out, "%s=\"", by);
		for (const char *p = r->key; *p; p++) {
			if (*p == '"' || *p == '\\')
				buf_put(out, "\\", 1);
			buf_put(out, p, 1);
		}
		buf_puts(out, "\"");
	} else {
		buf_puts(out, "pid=~\"");
		pthread_mutex_lock(&e->tmu);
		for (size_t i = 0; i < r->nholders; i++)
			buf_printf(out, "%s%s", i ? "|" : "", e->holders[r->holders[i] - 1].pid);
		pthread_mutex_unlock(&e->tmu);
		buf_puts(out, "\"");
	}
	if (node)
		buf_printf(out, ",node=\"%s\"", node);
	buf_put(out, "}", 2);	/* and a NUL, not counted */
	out->len--;
}

static void json_ms(struct buf *b, uint64_t ns)
{
	buf_printf(b, "%llu.%03llu", (unsigned long long)(ns / 1000000),
		   (unsigned long long)(ns % 1000000 / 1000));
}

/*
 * Causes of one row: its GPU with the most idle time; top functions of the row's CPU samples
 * while that GPU was idle (the store's GPU-idle filter, as the flame graph), blocked time by
 * reason and the idle share with no thread of the row running, over the part of the range
 * whose samples still carry their time (raw retention).
 */
static int causes(struct efficiency *e, const struct row *r, const char *by, uint64_t from,
		  uint64_t to, struct buf *out)
{
	const struct row_gpu *best = NULL;
	const struct gpu_info *g;
	struct cause_ctx cc = { r->holders, r->nholders };
	struct state_ctx sc = { 0 };
	struct u64map agg = { 0 };
	struct fn_self fs = { 0 };
	struct selector *sel = NULL;
	struct buf sb = { 0 };
	uint64_t *ids = NULL, raw_from = from;
	size_t nids = 0, *order = NULL;
	double idle_ns = 0, active_idle = 0;
	char node[256], gpu[64], err_s[256];
	bool trunc = false;
	int err = 0;

	for (size_t i = 0; i < r->ng; i++)
		if (!best || idle_of(&r->g[i].t) > idle_of(&best->t))
			best = &r->g[i];
	if (!best)
		return 0;
	pthread_mutex_lock(&e->tmu);
	g = &e->gpus[best->gpu];
	snprintf(node, sizeof(node), "%s", g->node);
	snprintf(gpu, sizeof(gpu), "%s", g->gpu);
	pthread_mutex_unlock(&e->tmu);
	if (e->cfg.raw_retention_ns && wall_ns() - e->cfg.raw_retention_ns > raw_from)
		raw_from = wall_ns() - e->cfg.raw_retention_ns + 60 * NSEC_PER_SEC;
	row_selector(e, r, by, node, &sb);
	if (sb.oom)
		return -ENOMEM;
	sel = selector_parse((char *)sb.p, err_s, sizeof(err_s));
	if (!sel) {
		log_warn("efficiency: causes selector %s: %s", (char *)sb.p, err_s);
		err = -EIO;
		goto out;
	}
	if (raw_from < to) {
		struct store_query q = { raw_from, to, sel, SAMPLE_CPU, (int)strtol(gpu, NULL, 10) };

		err = compute_raw(e, raw_from, to, best->gpu, NULL, cause_piece, &cc);
		if (!err)
			err = e->st->ops->aggregate(e->st, &q, &agg);
		if (!err) {
			fs.agg = &agg;
			ids = malloc((agg.len + 1) * sizeof(*ids));
			if (!ids)
				err = -ENOMEM;
		}
		for (size_t i = 0; !err && i < agg.cap; i++)
			if (agg.keys[i])
				ids[nids++] = agg.keys[i];
		if (!err && agg.has_zero)
			ids[nids++] = 0;
		if (!err)
			err = e->st->ops->stacks(e->st, ids, nids, fn_stack, &fs);
		sc.idle = &cc.idle;
		if (!err)
			err = e->st->ops->intervals(e->st, "thread_state", raw_from, to, sel,
						    CAUSE_INTERVALS, state_in, &sc, &trunc);
	}
	if (err)
		goto out;
	seg_union(&sc.active);
	for (size_t i = 0; i < cc.idle.n; i++) {
		idle_ns += (double)(cc.idle.v[i].e - cc.idle.v[i].s) * cc.idle.v[i].v;
		for (size_t k = 0; k < sc.active.n; k++) {
			const struct seg *a = &sc.active.v[k];
			uint64_t lo = a->s > cc.idle.v[i].s ? a->s : cc.idle.v[i].s;
			uint64_t hi = a->e < cc.idle.v[i].e ? a->e : cc.idle.v[i].e;

			if (a->s >= cc.idle.v[i].e)
				break;
			if (lo < hi)
				active_idle += (double)(hi - lo) * cc.idle.v[i].v;
		}
	}
	order = malloc((fs.names.len + 1) * sizeof(*order));
	if (!order) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < fs.names.len; i++)
		order[i] = i;
	qsort_r(order, fs.names.len, sizeof(*order), cmp_desc_idx, fs.self);
	buf_puts(out, ",\"causes\":{\"node\":");
	buf_json_str(out, node);
	buf_puts(out, ",\"gpu\":");
	buf_json_str(out, gpu);
	/* Which source decided this GPU's idle time (the flame graph's filter sees whole idle
	 * intervals only: fractional NVML/GPM idle time is not all in it). */
	buf_puts(out, ",\"source\":");
	buf_json_str(out, best_source(&best->t));
	buf_puts(out, ",\"selector\":");
	buf_json_str(out, (char *)sb.p);
	buf_puts(out, ",\"from_ms\":");
	json_ms(out, raw_from < to ? raw_from : to);
	buf_puts(out, ",\"to_ms\":");
	json_ms(out, to);
	buf_printf(out, ",\"idle_seconds\":");
	buf_json_num(out, idle_ns / 1e9);
	buf_printf(out, ",\"samples\":%.0f,\"functions\":[", fs.total);
	for (size_t i = 0; i < fs.names.len && i < CAUSE_FUNCS; i++) {
		if (i)
			buf_put(out, ",", 1);
		buf_puts(out, "{\"name\":");
		buf_json_str(out, fs.names.strs[order[i]]);
		buf_printf(out, ",\"samples\":%.0f,\"share\":", fs.self[order[i]]);
		buf_json_num(out, fs.total > 0 ? fs.self[order[i]] / fs.total : 0);
		buf_puts(out, "}");
	}
	buf_puts(out, "],\"blocked\":[");
	free(order);
	order = malloc((sc.nreasons + 1) * sizeof(*order));
	if (!order) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < sc.nreasons; i++)
		order[i] = i;
	qsort_r(order, sc.nreasons, sizeof(*order), cmp_desc_idx, sc.blocked_ns);
	for (size_t i = 0; i < sc.nreasons; i++) {
		if (i)
			buf_put(out, ",", 1);
		buf_puts(out, "{\"reason\":");
		buf_json_str(out, sc.reason[order[i]]);
		buf_puts(out, ",\"thread_seconds\":");
		buf_json_num(out, sc.blocked_ns[order[i]] / 1e9);
		buf_puts(out, "}");
	}
	buf_puts(out, "],\"no_cpu_share\":");
	if (idle_ns > 0)
		buf_json_num(out, (idle_ns - active_idle) / idle_ns);
	else
		buf_puts(out, "null");
	buf_printf(out, ",\"truncated\":%s}", trunc ? "true" : "false");
	if (out->oom)
		err = -ENOMEM;
out:
	free(order);
	free(ids);
	free(fs.self);
	strtab_done(&fs.names);
	u64map_done(&agg);
	free(cc.idle.v);
	free(sc.active.v);
	selector_free(sel);
	buf_done(&sb);
	return err;
}

/* ---- the answer --------------------------------------------------------------------------- */

static void json_hours(struct buf *b, const char *name, double ns)
{
	buf_printf(b, ",\"%s\":", name);
	buf_json_num(b, ns / (double)HOUR_NS);
}

static void json_dollars(struct buf *b, const char *name, double d)
{
	buf_printf(b, ",\"%s\":", name);
	if (isnan(d))
		buf_puts(b, "null");
	else
		buf_json_num(b, round(d * 1e6) / 1e6);
}

static const char *best_source(const struct eff_tally *t)
{
	int best = -1;
	double bv = 0;

	for (int i = 0; i < EFF_SRC_MAX; i++) {
		if (t->busy[i] + t->idle[i] > bv) {
			bv = t->busy[i] + t->idle[i];
			best = i;
		}
	}
	if (best < 0)
		return "unknown";
	return src_names[best];
}

static void json_tally(struct buf *b, const struct eff_tally *t)
{
	double busy = busy_of(t), idle = idle_of(t);

	json_hours(b, "held_gpu_hours", t->held);
	json_hours(b, "busy_gpu_hours", busy);
	json_hours(b, "idle_gpu_hours", idle);
	json_hours(b, "unknown_gpu_hours", t->unknown);
	buf_puts(b, ",\"utilization\":");
	if (busy + idle > 0)
		buf_json_num(b, busy / (busy + idle));
	else
		buf_puts(b, "null");
	buf_puts(b, ",\"sources\":{");
	for (int i = 0; i < EFF_SRC_MAX; i++) {
		buf_printf(b, "%s\"%s\":", i ? "," : "", src_names[i]);
		buf_json_num(b, (t->busy[i] + t->idle[i]) / (double)HOUR_NS);
	}
	buf_puts(b, "}");
}

static bool by_known(const char *by)
{
	for (size_t i = 0; i < ARRAY_SIZE(known_by); i++)
		if (!strcmp(by, known_by[i]))
			return true;
	return false;
}

static bool by_seen(const struct eff_ans *a, const char *by)
{
	for (size_t h = 1; h < a->nwant; h++)
		for (size_t i = 0; a->hl.pairs[h] && i < a->hl.n[h]; i++)
			if (!strcmp(a->hl.pairs[h][2 * i], by))
				return true;
	return false;
}

int efficiency_query(struct efficiency *e, const struct eff_request *rq, struct buf *out,
		     char *err, size_t errlen)
{
	const char *by = rq->by && *rq->by ? rq->by : "namespace";
	struct selector *sel = NULL;
	struct eff_ans a = { 0 };
	struct acc acc = { 0 };
	struct eff_tally tot = { 0 }, unheld = { 0 };
	double idle_d = 0, unheld_d = 0, held_d = 0;
	uint64_t rolled_ns = 0;
	int rc;

	if (strlen(by) > 64 || strspn(by, "abcdefghijklmnopqrstuvwxyz"
				   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != strlen(by)) {
		snprintf(err, errlen, "'by' must be a label name, not '%.64s'", by);
		return -EINVAL;
	}
	if (rq->selector && *rq->selector) {
		sel = selector_parse(rq->selector, err, errlen);
		if (!sel)
			return -EINVAL;
		selector_set_deadline(sel, mono_ns() + 2 * NSEC_PER_SEC);
	}
	rc = gather(e, rq->from_ns, rq->to_ns, &acc, &rolled_ns);
	if (!rc && !acc.n) {
		snprintf(err, errlen, "no GPU data between the range's from and to");
		rc = -ENODATA;
		goto out;
	}
	if (!rc)
		rc = group(e, &acc, by, sel, rq->from_ns, rq->to_ns, &a);
	if (!rc && selector_failed(sel)) {
		/* An answer missing the label sets a regex gave up on is not served. */
		snprintf(err, errlen, "the selector's regex exceeded its matching limits or the 2 s "
			 "budget on some label value: simplify it");
		rc = -EINVAL;
	}
	if (rc)
		goto out;
	if (!by_known(by) && !by_seen(&a, by)) {
		snprintf(err, errlen, "unknown label '%s' for 'by': no process holding a GPU has it"
			 " (namespace, pod, owner, kubeflow_job, ray_cluster, comm, pid, node, ...)",
			 by);
		rc = -EINVAL;
		goto out;
	}
	buf_puts(out, "{\"from_ms\":");
	json_ms(out, rq->from_ns);
	buf_puts(out, ",\"to_ms\":");
	json_ms(out, rq->to_ns);
	buf_puts(out, ",\"by\":");
	buf_json_str(out, by);
	buf_puts(out, ",\"selector\":");
	buf_json_str(out, rq->selector ? rq->selector : "");
	buf_puts(out, ",\"rollup_hours\":");
	buf_json_num(out, (double)(rolled_ns / HOUR_NS));
	buf_puts(out, ",\"prices\":[");
	for (size_t i = 0; i < e->cfg.nprices; i++) {
		buf_printf(out, "%s{\"model\":", i ? "," : "");
		if (e->cfg.prices[i].model)
			buf_json_str(out, e->cfg.prices[i].model);
		else
			buf_puts(out, "null");
		buf_puts(out, ",\"dollars_per_gpu_hour\":");
		buf_json_num(out, e->cfg.prices[i].dollars);
		buf_puts(out, "}");
	}
	buf_puts(out, "],\"workloads\":[");
	for (size_t i = 0; i < a.nrows && !rc; i++) {
		struct row *r = &a.rows[i];
		struct buf sb = { 0 };

		tally_add(&tot, &r->t, 1);
		if (!isnan(r->idle_dollars)) {
			idle_d += r->idle_dollars;
			held_d += r->held_dollars;
		}
		buf_printf(out, "%s{\"workload\":", i ? "," : "");
		buf_json_str(out, r->key);
		row_selector(e, r, by, NULL, &sb);
		buf_puts(out, ",\"selector\":");
		buf_json_str(out, sb.oom ? "" : (char *)sb.p);
		buf_done(&sb);
		buf_printf(out, ",\"processes\":%zu,\"holders\":[", r->nholders);
		pthread_mutex_lock(&e->tmu);
		for (size_t k = 0; k < r->nholders && k < 64; k++) {
			const struct holder_info *hi = &e->holders[r->holders[k] - 1];

			buf_printf(out, "%s{\"node\":", k ? "," : "");
			buf_json_str(out, hi->node);
			buf_puts(out, ",\"pid\":");
			buf_json_str(out, hi->pid);
			buf_puts(out, ",\"comm\":");
			buf_json_str(out, hi->comm);
			buf_puts(out, "}");
		}
		pthread_mutex_unlock(&e->tmu);
		buf_puts(out, "]");
		json_tally(out, &r->t);
		json_dollars(out, "held_dollars", r->held_dollars);
		json_dollars(out, "idle_dollars", r->idle_dollars);
		json_hours(out, "unpriced_gpu_hours", r->unpriced_ns);
		buf_puts(out, ",\"gpus\":[");
		pthread_mutex_lock(&e->tmu);
		for (size_t k = 0; k < r->ng; k++) {
			const struct gpu_info *g = &e->gpus[r->g[k].gpu];

			buf_printf(out, "%s{\"node\":", k ? "," : "");
			buf_json_str(out, g->node);
			buf_puts(out, ",\"gpu\":");
			buf_json_str(out, g->gpu);
			buf_puts(out, ",\"model\":");
			buf_json_str(out, g->model ? g->model : "");
			buf_puts(out, ",\"source\":");
			buf_json_str(out, best_source(&r->g[k].t));
			json_tally(out, &r->g[k].t);
			buf_puts(out, "}");
		}
		pthread_mutex_unlock(&e->tmu);
		buf_puts(out, "]");
		if (i < rq->causes)
			rc = causes(e, r, by, rq->from_ns, rq->to_ns, out);
		buf_puts(out, "}");
	}
	buf_puts(out, "],\"unheld\":[");
	pthread_mutex_lock(&e->tmu);
	for (size_t i = 0; i < a.nunheld; i++) {
		const struct gpu_info *g = &e->gpus[a.unheld[i].gpu];
		double price = price_of(&e->cfg, g->model);

		tally_add(&unheld, &a.unheld[i].t, 1);
		unheld_d += isnan(price) ? 0 : a.unheld[i].t.held / HOUR_NS * price;
		buf_printf(out, "%s{\"node\":", i ? "," : "");
		buf_json_str(out, g->node);
		buf_puts(out, ",\"gpu\":");
		buf_json_str(out, g->gpu);
		buf_puts(out, ",\"model\":");
		buf_json_str(out, g->model ? g->model : "");
		buf_puts(out, ",\"source\":");
		buf_json_str(out, best_source(&a.unheld[i].t));
		json_hours(out, "gpu_hours", a.unheld[i].t.held);
		json_hours(out, "busy_gpu_hours", busy_of(&a.unheld[i].t));
		json_dollars(out, "dollars", isnan(price) ? NAN : a.unheld[i].t.held / HOUR_NS * price);
		buf_puts(out, "}");
	}
	pthread_mutex_unlock(&e->tmu);
	buf_puts(out, "],\"totals\":{\"workloads\":");
	buf_json_num(out, (double)a.nrows);
	json_hours(out, "held_gpu_hours", tot.held);
	json_hours(out, "busy_gpu_hours", busy_of(&tot));
	json_hours(out, "idle_gpu_hours", idle_of(&tot));
	json_hours(out, "unknown_gpu_hours", tot.unknown);
	json_hours(out, "unheld_gpu_hours", unheld.held);
	json_dollars(out, "held_dollars", e->cfg.nprices ? held_d : NAN);
	json_dollars(out, "idle_dollars", e->cfg.nprices ? idle_d : NAN);
	json_dollars(out, "unheld_dollars", e->cfg.nprices ? unheld_d : NAN);
	buf_puts(out, "}}");
	if (out->oom)
		rc = -ENOMEM;
out:
	ans_done(&a);
	acc_done(&acc);
	selector_free(sel);
	return rc;
}

/* ---- windows for the exporter ------------------------------------------------------------- */

int efficiency_window(struct efficiency *e, uint64_t from, uint64_t to,
		      int (*cb)(void *ctx, const struct eff_row *row), void *ctx)
{
	struct acc acc = { 0 };
	struct eff_ans a = { 0 };
	struct strtab keys = { 0 };
	struct eff_row *rows = NULL, unheld = { "", "", true };
	size_t nrows = 0;
	int err;

	err = compute_raw(e, from, to, -1, &acc, NULL, NULL);
	if (!err && acc.n) {
		pthread_mutex_lock(&e->tmu);
		a.nwant = e->nholders + 1;
		pthread_mutex_unlock(&e->tmu);
		{
			uint8_t *want = calloc(a.nwant, 1);

			if (!want) {
				err = -ENOMEM;
				goto out;
			}
			for (size_t i = 0; i < acc.n; i++)
				want[acc.v[i].holder] = 1;
			err = resolve_labels(e, from, to, want, a.nwant, &a.hl);
			free(want);
		}
	}
	for (size_t i = 0; i < acc.n && !err; i++) {
		const struct hour_ent *en = &acc.v[i];
		double price;
		struct eff_row *r = &unheld;

		pthread_mutex_lock(&e->tmu);
		price = price_of(&e->cfg, e->gpus[en->gpu].model);
		pthread_mutex_unlock(&e->tmu);
		if (en->holder) {
			const char *const *p = (const char *const *)a.hl.pairs[en->holder];
			size_t n = a.hl.n[en->holder];
			const char *ns = pair_get(p, n, "namespace"), *pod = pair_get(p, n, "pod");
			char key[1024];
			int64_t k;

			snprintf(key, sizeof(key), "%s\x01%s", ns, pod);
			k = strtab_intern(&keys, key);
			if (k < 0) {
				err = (int)k;
				break;
			}
			if ((size_t)k == nrows) {
				struct eff_row *nr = realloc(rows, (nrows + 1) * sizeof(*nr));

				if (!nr) {
					err = -ENOMEM;
					break;
				}
				rows = nr;
				rows[nrows++] = (struct eff_row){ .namespace_ = ns, .pod = pod };
			}
			r = &rows[k];
			if (!isnan(price))
				r->idle_dollars += idle_of(&en->t) / HOUR_NS * price;
		} else if (!isnan(price)) {
			r->unheld_dollars += en->t.held / HOUR_NS * price;
		}
		tally_add(&r->t, &en->t, 1);
	}
	for (size_t i = 0; i < nrows && !err; i++)
		err = cb(ctx, &rows[i]);
	if (!err && unheld.t.held > 0)
		err = cb(ctx, &unheld);
out:
	free(rows);
	strtab_done(&keys);
	ans_done(&a);
	acc_done(&acc);
	return err;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

struct efficiency *efficiency_new(struct store *st, const struct eff_cfg *cfg)
{
	struct efficiency *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->st = st;
	e->cfg = *cfg;
	pthread_mutex_init(&e->tmu, NULL);
	pthread_mutex_init(&e->rmu, NULL);
	pthread_cond_init(&e->rcond, NULL);
	if (!cfg->no_rollup) {
		if (pthread_create(&e->thread, NULL, rollup_main, e)) {
			efficiency_free(e);
			errno = EAGAIN;
			return NULL;
		}
		e->started = true;
	}
	return e;
}

void efficiency_free(struct efficiency *e)
{
	if (!e)
		return;
	if (e->started) {
		pthread_mutex_lock(&e->rmu);
		e->stopping = true;
		pthread_cond_signal(&e->rcond);
		pthread_mutex_unlock(&e->rmu);
		pthread_join(e->thread, NULL);
	}
	for (size_t i = 0; i < e->capg; i++) {
		free(e->gpus[i].node);
		free(e->gpus[i].gpu);
		free(e->gpus[i].uuid);
		free(e->gpus[i].model);
	}
	for (size_t i = 0; i < e->caph; i++) {
		free(e->holders[i].node);
		free(e->holders[i].pid);
		free(e->holders[i].comm);
	}
	free(e->gpus);
	free(e->holders);
	strtab_done(&e->gpu_keys);
	u64map_done(&e->holder_ids);
	for (size_t i = 0; i < e->nhours; i++)
		free(e->hours[i].v);
	free(e->hours);
	pthread_mutex_destroy(&e->tmu);
	pthread_mutex_destroy(&e->rmu);
	pthread_cond_destroy(&e->rcond);
	free(e);
}
