/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU efficiency's idle causes: for one row, what its processes' CPUs did while its GPUs were
 * idle (thread states weighted by idle time, and the functions that ran).
 */
#include "server/efficiency/eff_int.h"
#include "server/query.h"

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
	return ours ? eff_seg_add(&c->idle, p->s, p->e, 1 - p->busy) : 0;
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
	const char *state = eff_pair_get(attrs, na, "state"), *reason = eff_pair_get(attrs, na, "reason");
	bool summary = !strcmp(eff_pair_get(attrs, na, "summary"), "1");
	double w;
	size_t r;

	(void)kind;
	(void)labels;
	(void)n;
	if (summary) {
		double run = strtod(eff_pair_get(attrs, na, "running_ns"), NULL) +
			     strtod(eff_pair_get(attrs, na, "runnable_ns"), NULL);

		if (run > 0)
			return eff_seg_add(&c->active, start, end, 1);
		reason = "other";
		state = "blocked";
	}
	if (strcmp(state, "blocked"))
		return eff_seg_add(&c->active, start, end, 1);
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
	if (eff_grow_to((void **)&fs->self, &fs->cap, (size_t)k, sizeof(*fs->self)))
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
void eff_row_selector(struct efficiency *e, const struct row *r, const char *by,
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

void eff_json_ms(struct buf *b, uint64_t ns)
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
int eff_causes(struct efficiency *e, const struct row *r, const char *by, uint64_t from,
	       uint64_t to, struct buf *out)
{
	const struct row_gpu *best = NULL;
	const struct gpu_info *g;
	struct cause_ctx cc = { r->holders, r->nholders };
	struct state_ctx sc = { 0 };
	struct u64map agg = { 0 };
	struct fn_self fs = { 0 };
	struct idle_tally it = { 0 };
	struct selector *sel = NULL;
	struct buf sb = { 0 };
	uint64_t *ids = NULL, raw_from = from;
	size_t nids = 0, *order = NULL;
	double idle_ns = 0, active_idle = 0;
	char node[256], gpu[64], err_s[256];
	bool trunc = false;
	int err = 0;

	for (size_t i = 0; i < r->ng; i++)
		if (!best || eff_idle_of(&r->g[i].t) > eff_idle_of(&best->t))
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
	eff_row_selector(e, r, by, node, &sb);
	if (sb.oom)
		return -ENOMEM;
	sel = selector_parse((char *)sb.p, err_s, sizeof(err_s));
	if (!sel) {
		log_warn("efficiency: causes selector %s: %s", (char *)sb.p, err_s);
		err = -EIO;
		goto out;
	}
	if (raw_from < to) {
		struct store_query q = { raw_from, to, sel, SAMPLE_CPU, (int)strtol(gpu, NULL, 10),
					 &it };

		err = eff_compute_raw(e, raw_from, to, best->gpu, NULL, cause_piece, &cc);
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
	eff_seg_union(&sc.active);
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
	buf_json_str(out, eff_best_source(&best->t));
	buf_puts(out, ",\"selector\":");
	buf_json_str(out, (char *)sb.p);
	buf_puts(out, ",\"from_ms\":");
	eff_json_ms(out, raw_from < to ? raw_from : to);
	buf_puts(out, ",\"to_ms\":");
	eff_json_ms(out, to);
	buf_printf(out, ",\"idle_seconds\":");
	buf_json_num(out, idle_ns / 1e9);
	buf_printf(out, ",\"samples\":%.0f", fs.total);
	/* the functions' samples are estimated where windows stood for undecided time */
	if (it.set)
		query_estimate_json(out, "idle_estimate", &it, (int)strtol(gpu, NULL, 10));
	buf_puts(out, ",\"functions\":[");
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

int efficiency_idle_segments(struct efficiency *e, const struct eff_workload *w, uint32_t gpu,
			     uint64_t from, uint64_t to, struct eff_idle_seg **ret, size_t *ret_n)
{
	const struct row *r = w->priv;
	struct cause_ctx cc = { r->holders, r->nholders };
	int err;

	_Static_assert(sizeof(struct seg) == sizeof(struct eff_idle_seg), "same layout");
	err = eff_compute_raw(e, from, to, gpu, NULL, cause_piece, &cc);
	if (err) {
		free(cc.idle.v);
		return err;
	}
	*ret = (struct eff_idle_seg *)cc.idle.v;
	*ret_n = cc.idle.n;
	return 0;
}
