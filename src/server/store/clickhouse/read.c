/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reads of the ClickHouse store. Selectors are evaluated here over the label sets (the same
 * POSIX matcher as the SQLite store, so both answer alike); ClickHouse then aggregates by stack
 * over the matching label-set ids: whole days, hours and minutes from the rollup tables, the
 * partial minutes at both ends from raw samples -- the SQLite plan, without a watermark since
 * the materialized views are written with each insert. Answers come back as RowBinary.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/log.h"
#include "common/util.h"
#include "server/selector.h"
#include "server/store/clickhouse/ch.h"
#include "server/store/idle_est.h"

/* Label-set id lists can be long (thousands of threads): lift the parser's bounds. */
#define READ_SETTINGS \
	"max_query_size=268435456&max_ast_elements=100000000&max_expanded_ast_elements=100000000"

/* Runs a SELECT (sql NUL-terminated in q) and returns its RowBinary answer in ans. */
static int select_rb(struct ch *c, struct buf *q, struct buf *ans)
{
	buf_puts(q, " FORMAT RowBinary");
	buf_put(q, "", 1);
	if (q->oom)
		return -ENOMEM;
	return ch_exec(c, -1, (char *)q->p, NULL, 0, READ_SETTINGS, ans);
}

static uint64_t day_of(uint64_t t)
{
	return t / CH_DAY_NS;
}


/* ---- label sets ----------------------------------------------------------------------------- */

void ch_lsets_done(struct ch_lsets *l)
{
	free(l->v);
	free(l->ptrs);
	buf_done(&l->strs);
	memset(l, 0, sizeof(*l));
}

void ch_lsets_ids(const struct ch_lsets *l, struct buf *b)
{
	if (!l->n)
		buf_puts(b, "0");
	for (size_t i = 0; i < l->n; i++)
		buf_printf(b, "%s%llu", i ? "," : "", (unsigned long long)l->v[i].id);
}

static int cmp_lset(const void *a, const void *b)
{
	const struct ch_lset *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

int ch_lsets_load(struct ch *c, uint64_t from, uint64_t to, const struct selector *sel,
		  struct ch_lsets *ret)
{
	struct buf q = { 0 }, ans = { 0 };
	struct ch_lsets l = { 0 };
	size_t cap = 0, nptr = 0, capptr = 0;
	size_t *offs = NULL;	/* string offsets (strs may move while reading) */
	struct rbr r;
	int err;

	buf_printf(&q, "SELECT id, any(node), any(names), any(values), minMerge(first_ns) AS f,"
		   " maxMerge(last_ns) AS l FROM %s.labelsets GROUP BY id HAVING l >= %llu AND"
		   " f < %llu", c->db, (unsigned long long)from, (unsigned long long)to);
	err = select_rb(c, &q, &ans);
	if (err)
		goto out;
	r = (struct rbr){ ans.p, ans.p + ans.len, false };
	while (rbr_more(&r) && !err) {
		struct ch_lset *ls;
		size_t nn, nv;

		if (array_reserve(&l.v, &cap, l.n + 1, sizeof(*l.v), 256)) {
			err = -ENOMEM;
			break;
		}
		ls = &l.v[l.n];
		memset(ls, 0, sizeof(*ls));
		ls->id = rbr_u64(&r);
		ls->node = (const char *)(uintptr_t)rbr_str_to(&r, &l.strs);	/* offset for now */
		nn = (size_t)rbr_uvarint_count(&r);
		if (nptr + 2 * nn + 2 > capptr) {
			size_t ncap = (capptr ? capptr * 2 : 1024) + 2 * nn + 2;
			size_t *no = realloc(offs, ncap * sizeof(*no));

			if (!no) {
				err = -ENOMEM;
				break;
			}
			offs = no;
			capptr = ncap;
		}
		ls->pairs = (const char **)(uintptr_t)nptr;	/* index into offs for now */
		for (size_t k = 0; k < nn && !r.bad; k++)
			offs[nptr + 2 * k] = rbr_str_to(&r, &l.strs);
		nv = (size_t)rbr_uvarint_count(&r);
		if (nv != nn)
			r.bad = true;
		for (size_t k = 0; k < nv && !r.bad; k++)
			offs[nptr + 2 * k + 1] = rbr_str_to(&r, &l.strs);
		ls->n = nn;
		nptr += 2 * nn;
		ls->first_ns = rbr_u64(&r);
		ls->last_ns = rbr_u64(&r);
		if (r.bad)
			break;
		l.n++;
	}
	if (!err && (r.bad || l.strs.oom))
		err = r.bad ? -EIO : -ENOMEM;
	if (err) {
		if (err == -EIO)
			store_set_error("clickhouse: malformed label sets answer");
		goto out;
	}
	l.ptrs = malloc((nptr ? nptr : 1) * sizeof(*l.ptrs));
	if (!l.ptrs) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < nptr; i++)
		l.ptrs[i] = (const char *)l.strs.p + offs[i];
	/* Resolve offsets, keep the matching ones, in id order (deterministic across shards). */
	{
		size_t k = 0;

		for (size_t i = 0; i < l.n; i++) {
			struct ch_lset *ls = &l.v[i];

			ls->pairs = l.ptrs + (size_t)(uintptr_t)ls->pairs;
			ls->node = (const char *)l.strs.p + (size_t)(uintptr_t)ls->node;
			ls->gpu = -1;
			for (size_t j = 0; j < ls->n; j++)
				if (!strcmp(ls->pairs[2 * j], "gpu"))
					ls->gpu = strtoll(ls->pairs[2 * j + 1], NULL, 10);
			if (selector_match(sel, ls->pairs, ls->n))
				l.v[k++] = *ls;
		}
		l.n = k;
	}
	qsort(l.v, l.n, sizeof(*l.v), cmp_lset);
	*ret = l;
	memset(&l, 0, sizeof(l));
out:
	ch_lsets_done(&l);
	free(offs);
	buf_done(&q);
	buf_done(&ans);
	return err;
}

static const struct ch_lset *lset_find(const struct ch_lsets *l, uint64_t id)
{
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (l->v[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < l->n && l->v[lo].id == id ? &l->v[lo] : NULL;
}

int ch_label_sets(struct store *st, uint64_t from, uint64_t to, const struct selector *sel,
		  store_labels_cb cb, void *ctx)
{
	struct ch_lsets l = { 0 };
	int err = ch_lsets_load((struct ch *)st, from, to, sel, &l);

	for (size_t i = 0; i < l.n && !err; i++)
		err = cb(ctx, l.v[i].pairs, l.v[i].n);
	ch_lsets_done(&l);
	return err;
}

/* ---- aggregation ---------------------------------------------------------------------------- */

static uint64_t floor_to(uint64_t t, uint64_t unit)
{
	return t / unit * unit;
}

static uint64_t ceil_to(uint64_t t, uint64_t unit)
{
	return (t + unit - 1) / unit * unit;
}

/* Ranges per source: [0] raw samples, [1 + lv] rollup level lv. */
struct plan {
	struct buf cond[1 + CH_LEVELS];
	uint64_t lo[1 + CH_LEVELS], hi[1 + CH_LEVELS];
};

static void plan_add(struct plan *p, int src, uint64_t from, uint64_t to)
{
	const char *col = src ? "bucket" : "t";

	if (from >= to)
		return;
	buf_printf(&p->cond[src], "%s(%s >= %llu AND %s < %llu)", p->cond[src].len ? " OR " : "",
		   col, (unsigned long long)from, col, (unsigned long long)to);
	p->lo[src] = from < p->lo[src] ? from : p->lo[src];
	p->hi[src] = to > p->hi[src] ? to : p->hi[src];
}

/* [from, to) aligned to level lv: the coarsest whole buckets from the level above. */
static void plan_levels(struct plan *p, int lv, uint64_t from, uint64_t to)
{
	uint64_t a, b;

	if (from >= to)
		return;
	if (lv + 1 == CH_LEVELS) {
		plan_add(p, 1 + lv, from, to);
		return;
	}
	a = ceil_to(from, ch_level_ns[lv + 1]);
	b = floor_to(to, ch_level_ns[lv + 1]);
	if (a >= b) {
		plan_add(p, 1 + lv, from, to);
		return;
	}
	plan_levels(p, lv + 1, a, b);
	plan_add(p, 1 + lv, from, a);
	plan_add(p, 1 + lv, b, to);
}

/*
 * Appends "SELECT labelset, t, stack, value FROM ..." over the plan's sources: raw runs
 * unrolled by ARRAY JOIN (times from t0 and the deltas' running sum) and rollup maps (t is the
 * bucket's start), restricted to kind and the label sets in ids. 0 if the plan is empty.
 */
static int plan_rows(struct ch *c, const struct plan *p, int kind, const struct buf *ids,
		     struct buf *sql)
{
	int nsrc = 0, nroll = 0;

	if (p->cond[0].len) {
		buf_printf(sql, "SELECT labelset, t0 + d AS t, stack, value FROM (SELECT labelset, t0,"
			   " arrayCumSum(arrayMap((h, l) -> bitShiftLeft(toUInt64(h), 16) + l, dt_hi,"
			   " dt_lo)) AS ds, stacks, if(empty(vals), arrayMap(x -> toInt64(1), stacks),"
			   " vals) AS vs FROM %s.samples_raw WHERE kind = %d AND day >= %llu AND"
			   " day <= %llu AND t1 >= %llu AND t0 < %llu AND labelset IN (", c->db, kind,
			   (unsigned long long)day_of(p->lo[0]),
			   (unsigned long long)day_of(p->hi[0] - 1), (unsigned long long)p->lo[0],
			   (unsigned long long)p->hi[0]);
		buf_put(sql, ids->p, ids->len);
		buf_puts(sql, ")) ARRAY JOIN ds AS d, stacks AS stack, vs AS value WHERE ");
		buf_put(sql, p->cond[0].p, p->cond[0].len);
		nsrc++;
	}
	for (int lv = 0; lv < CH_LEVELS; lv++) {
		if (!p->cond[1 + lv].len)
			continue;
		if (nroll++ == 0) {
			buf_printf(sql, "%sSELECT labelset, bucket AS t, stack, value FROM"
				   " %s.samples_rollup ARRAY JOIN sMap.stack AS stack, sMap.value AS"
				   " value WHERE kind = %d AND labelset IN (", nsrc ? " UNION ALL " : "",
				   c->db, kind);
			buf_put(sql, ids->p, ids->len);
			buf_puts(sql, ") AND (");
		} else {
			buf_puts(sql, " OR ");
		}
		buf_printf(sql, "(level = %d AND (", lv);
		buf_put(sql, p->cond[1 + lv].p, p->cond[1 + lv].len);
		buf_puts(sql, "))");
	}
	if (nroll)
		buf_puts(sql, ")");
	return nsrc + nroll;
}

/* store_query.emit: each matching set's group index + 1 (0 without group_by), by position
 * in match. 0 or -errno. */
static int emit_groups(const struct store_query *q, const struct ch_lsets *match, uint32_t **ret)
{
	uint32_t *g = calloc(match->n ? match->n : 1, sizeof(*g));
	struct buf tmp = { 0 };
	int err = 0;

	if (!g)
		return -ENOMEM;
	for (size_t i = 0; q->group_by && q->groups && !err && i < match->n; i++)
		err = store_group_index(q->groups, match->v[i].pairs, match->v[i].n, q->group_by,
					&tmp, &g[i]);
	buf_done(&tmp);
	if (err) {
		free(g);
		return err;
	}
	*ret = g;
	return 0;
}

/* The emit key of a sample at t (bucket with step_ns) or its stack. */
static uint64_t emit_key(const struct store_query *q, uint64_t t, uint64_t stack)
{
	if (!q->step_ns)
		return stack;
	return t > q->from_ns ? (t - q->from_ns) / q->step_ns : 0;
}

/* gpu_idle: raw samples of the matching sets, weighted by the estimator (idle_est.h) from their
 * node's gpu_busy and gpu_observed intervals of that GPU (the SQLite store's rule). */
static int aggregate_idle(struct ch *c, const struct store_query *q, const struct ch_lsets *all,
			  const struct ch_lsets *match, struct u64map *agg)
{
	struct buf sql = { 0 }, ans = { 0 };
	struct idle_est est = { 0 };
	struct idle_dither dither = { .tally = q->idle };
	struct u64map nodes = { 0 };	/* hashes of the nodes of the matching sets */
	uint32_t *groups = NULL;
	uint64_t lo, hi;
	struct rbr r;
	int err;

	if (q->emit && (err = emit_groups(q, match, &groups)))
		return err;
	for (size_t i = 0; i < match->n; i++)
		if (!u64map_upsert(&nodes, hash64(match->v[i].node, strlen(match->v[i].node), 17), 0,
				   NULL)) {
			free(groups);
			return -ENOMEM;
		}

	idle_est_load_span(q->from_ns, q->to_ns, &lo, &hi);
	buf_printf(&sql, "SELECT labelset, start_ns, end_ns, toUInt64(kind = 'gpu_observed') FROM %s."
		   "intervals WHERE kind IN ('gpu_busy', 'gpu_observed') AND end_ns > %llu AND start_ns < %llu AND day <= %llu", c->db,
		   (unsigned long long)lo, (unsigned long long)hi,
		   (unsigned long long)day_of(hi));
	err = select_rb(c, &sql, &ans);
	r = (struct rbr){ ans.p, ans.p + ans.len, false };
	while (!err && rbr_more(&r)) {
		const struct ch_lset *ls = lset_find(all, rbr_u64(&r));
		uint64_t start = rbr_u64(&r), end = rbr_u64(&r), observed = rbr_u64(&r);

		if (ls && ls->gpu == q->gpu_idle &&
		    u64map_find(&nodes, hash64(ls->node, strlen(ls->node), 17)))
			err = idle_est_add(&est,
					   idle_est_class(observed ? "gpu_observed" : "gpu_busy",
							  ls->pairs, ls->n),
					   ls->node, start, end);
	}
	if (!err)
		err = idle_est_build(&est, q->from_ns, q->to_ns);
	if (err)
		goto out;
	idle_est_scan_span(&est, &lo, &hi);
	sql.len = 0;
	ans.len = 0;
	{
		struct plan p = { 0 };
		struct buf ids = { 0 };

		p.lo[0] = UINT64_MAX;
		plan_add(&p, 0, lo, hi);
		ch_lsets_ids(match, &ids);
		plan_rows(c, &p, q->kind, &ids, &sql);
		buf_done(&p.cond[0]);
		buf_done(&ids);
	}
	err = select_rb(c, &sql, &ans);
	r = (struct rbr){ ans.p, ans.p + ans.len, false };
	while (!err && rbr_more(&r)) {
		const struct ch_lset *ls = lset_find(match, rbr_u64(&r));
		uint64_t t = rbr_u64(&r), stack = rbr_u64(&r), v = rbr_u64(&r), *a;

		v = idle_est_count(&est, ls ? idle_est_node(&est, ls->node) : NULL, &dither, &t, v);
		if (!v)
			continue;
		if (q->emit) {
			uint32_t g = ls && groups ? groups[ls - match->v] : 0;

			err = q->emit(q->emit_ctx, g, emit_key(q, t, stack), v);
			continue;
		}
		a = u64map_upsert(agg, stack, 0, NULL);
		if (!a)
			err = -ENOMEM;
		else
			*a += v;
	}
	if (!err && r.bad) {
		store_set_error("clickhouse: malformed samples answer");
		err = -EIO;
	}
	if (!err && q->idle) {
		q->idle->cover = est.cover;
		q->idle->set = true;
	}
out:
	idle_est_done(&est);
	u64map_done(&nodes);
	free(groups);
	buf_done(&sql);
	buf_done(&ans);
	return err;
}

/*
 * The plan of [from, to): whole minutes (and the hours and days within) from rollups, the
 * partial minutes at both ends raw; edges older than the raw retention (raw_cut) widened to
 * whole minutes, as their raw rows are gone.
 */
static void plan_range(struct plan *p, uint64_t from, uint64_t to, uint64_t raw_cut)
{
	uint64_t m1, m2;

	if (from < raw_cut)
		from = floor_to(from, ch_level_ns[0]);
	if (to < raw_cut)
		to = ceil_to(to, ch_level_ns[0]);
	m1 = ceil_to(from, ch_level_ns[0]);
	m2 = floor_to(to, ch_level_ns[0]);
	if (m1 >= m2) {
		plan_add(p, 0, from, to);
		return;
	}
	plan_levels(p, 0, m1, m2);
	plan_add(p, 0, from, m1);
	plan_add(p, 0, m2, to);
}

/*
 * store_query.emit: sums per (label set, stack or time bucket), raw samples where kept and
 * minute rollups before (a rolled-up sample counts at its minute's start), then each row
 * to emit with its label set's group.
 */
static int aggregate_emit(struct ch *c, const struct store_query *q, const struct ch_lsets *match,
			  uint64_t raw_cut)
{
	uint64_t from = q->from_ns, to = q->to_ns, b = floor_to(raw_cut, ch_level_ns[0]);
	struct buf sql = { 0 }, ans = { 0 }, ids = { 0 };
	uint32_t *groups = NULL;
	struct plan p = { 0 };
	struct rbr r;
	int err, nsrc = 0;

	err = emit_groups(q, match, &groups);
	if (err)
		return err;
	for (int i = 0; i <= CH_LEVELS; i++)
		p.lo[i] = UINT64_MAX;
	if (q->step_ns) {
		if (from < b)
			plan_add(&p, 1, floor_to(from, ch_level_ns[0]),
				 to < b ? ceil_to(to, ch_level_ns[0]) : b);
		plan_add(&p, 0, from > b ? from : b, to);
	} else {
		plan_range(&p, from, to, raw_cut);
	}
	ch_lsets_ids(match, &ids);
	buf_puts(&sql, "SELECT labelset, ");
	if (q->step_ns)
		buf_printf(&sql, "if(t > %llu, intDiv(t - %llu, %llu), 0)",
			   (unsigned long long)q->from_ns, (unsigned long long)q->from_ns,
			   (unsigned long long)q->step_ns);
	else
		buf_puts(&sql, "stack");
	buf_puts(&sql, " AS k, sum(value) FROM (");
	nsrc = plan_rows(c, &p, q->kind, &ids, &sql);
	buf_puts(&sql, ") GROUP BY labelset, k");
	if (nsrc)
		err = select_rb(c, &sql, &ans);
	r = (struct rbr){ ans.p, ans.p + ans.len, false };
	while (!err && nsrc && rbr_more(&r)) {
		const struct ch_lset *ls = lset_find(match, rbr_u64(&r));
		uint64_t k = rbr_u64(&r), v = rbr_u64(&r);

		if (ls)
			err = q->emit(q->emit_ctx, groups[ls - match->v], k, v);
	}
	if (!err && r.bad) {
		store_set_error("clickhouse: malformed aggregation answer");
		err = -EIO;
	}
	for (int i = 0; i <= CH_LEVELS; i++)
		buf_done(&p.cond[i]);
	free(groups);
	buf_done(&sql);
	buf_done(&ans);
	buf_done(&ids);
	return err;
}

int ch_aggregate(struct store *st, const struct store_query *q, struct u64map *agg)
{
	struct ch *c = (struct ch *)st;
	uint64_t raw = c->o.raw_retention_ns < c->o.retention_ns ? c->o.raw_retention_ns :
								    c->o.retention_ns;
	uint64_t raw_cut = wall_ns() - raw, from = q->from_ns, to = q->to_ns;
	struct ch_lsets all = { 0 }, match = { 0 };
	struct buf sql = { 0 }, ans = { 0 }, ids = { 0 };
	struct plan p = { 0 };
	struct rbr r;
	int err, nsrc = 0;

	err = ch_lsets_load(c, from, to, q->gpu_idle >= 0 ? NULL : q->sel,
			    q->gpu_idle >= 0 ? &all : &match);
	if (!err && q->gpu_idle >= 0) {
		/* Busy intervals may come from sets outside the selector: keep all, match a copy. */
		err = ch_lsets_load(c, from, to, q->sel, &match);
	}
	if (err || !match.n)
		goto out;
	if (q->gpu_idle >= 0) {
		err = aggregate_idle(c, q, &all, &match, agg);
		goto out;
	}
	for (int i = 0; i <= CH_LEVELS; i++)
		p.lo[i] = UINT64_MAX;
	if (q->emit) {
		err = aggregate_emit(c, q, &match, raw_cut);
		goto out;
	}
	plan_range(&p, from, to, raw_cut);
	ch_lsets_ids(&match, &ids);
	buf_puts(&sql, "SELECT stack, sum(value) FROM (");
	nsrc = plan_rows(c, &p, q->kind, &ids, &sql);
	buf_puts(&sql, ") GROUP BY stack");
	if (nsrc)
		err = select_rb(c, &sql, &ans);
	r = (struct rbr){ ans.p, ans.p + ans.len, false };
	while (!err && nsrc && rbr_more(&r)) {
		uint64_t stack = rbr_u64(&r), v = rbr_u64(&r), *a;

		a = u64map_upsert(agg, stack, 0, NULL);
		if (!a)
			err = -ENOMEM;
		else
			*a += v;
	}
	if (!err && r.bad) {
		store_set_error("clickhouse: malformed aggregation answer");
		err = -EIO;
	}
out:
	for (int i = 0; i <= CH_LEVELS; i++)
		buf_done(&p.cond[i]);
	ch_lsets_done(&all);
	ch_lsets_done(&match);
	buf_done(&sql);
	buf_done(&ans);
	buf_done(&ids);
	return err;
}

/* ---- stacks --------------------------------------------------------------------------------- */

struct cloc {
	uint64_t id;
	size_t off[4];		/* function, module, build_id, file in strs */
	uint32_t line;
	uint8_t flags;
	uint64_t address;
};

static int cmp_cloc(const void *a, const void *b)
{
	const struct cloc *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static void id_list(struct buf *b, const uint64_t *ids, size_t n)
{
	if (!n)
		buf_puts(b, "0");
	for (size_t i = 0; i < n; i++)
		buf_printf(b, "%s%llu", i ? "," : "", (unsigned long long)ids[i]);
}

int ch_stacks(struct store *st, const uint64_t *ids, size_t n,
	      int (*cb)(void *ctx, uint64_t id, const struct frame *frames, size_t nframes),
	      void *ctx)
{
	struct ch *c = (struct ch *)st;
	struct buf sql = { 0 }, sans = { 0 }, lans = { 0 }, strs = { 0 };
	struct u64map stack_at = { 0 };	/* stack id -> offset of its locs in sans */
	uint64_t *lids = NULL;
	size_t nl = 0, capl = 0, ncl = 0;
	struct cloc *cl = NULL;
	struct frame *frames = NULL;
	struct rbr r;
	int err;

	frames = malloc(BATCH_MAX_DEPTH * sizeof(*frames));
	if (!frames)
		return -ENOMEM;
	buf_printf(&sql, "SELECT id, any(locs) FROM %s.stacks WHERE id IN (", c->db);
	id_list(&sql, ids, n);
	buf_puts(&sql, ") GROUP BY id");
	err = select_rb(c, &sql, &sans);
	r = (struct rbr){ sans.p, sans.p + sans.len, false };
	while (!err && rbr_more(&r)) {
		uint64_t id = rbr_u64(&r), k;
		size_t at = (size_t)(r.p - sans.p);

		k = rbr_uvarint_count(&r);
		if (!u64map_upsert(&stack_at, id, at + 1, NULL)) {
			err = -ENOMEM;
			break;
		}
		for (uint64_t i = 0; i < k && !r.bad; i++) {
			if (array_reserve(&lids, &capl, nl + 1, sizeof(*lids), 1024)) {
				err = -ENOMEM;
				break;
			}
			lids[nl++] = rbr_u64(&r);
		}
	}
	if (!err && r.bad)
		err = -EIO;
	if (err)
		goto out;
	sql.len = 0;
	buf_printf(&sql, "SELECT id, any(function), any(module), any(build_id), any(file), any(line),"
		   " any(address), any(flags) FROM %s.locations WHERE id IN (", c->db);
	/* Stacks share most of their frames: ask for each location once. */
	qsort(lids, nl, sizeof(*lids), cmp_u64);
	{
		size_t k = 0;

		for (size_t i = 0; i < nl; i++)
			if (!k || lids[i] != lids[k - 1])
				lids[k++] = lids[i];
		nl = k;
	}
	id_list(&sql, lids, nl);
	buf_puts(&sql, ") GROUP BY id");
	err = select_rb(c, &sql, &lans);
	r = (struct rbr){ lans.p, lans.p + lans.len, false };
	cl = malloc((nl ? nl : 1) * sizeof(*cl));
	if (!cl && !err)
		err = -ENOMEM;
	while (!err && rbr_more(&r) && ncl < nl) {
		struct cloc *x = &cl[ncl++];

		x->id = rbr_u64(&r);
		for (int k = 0; k < 4; k++)
			x->off[k] = rbr_str_to(&r, &strs);
		x->line = rbr_u32(&r);
		x->address = rbr_u64(&r);
		x->flags = rbr_u8(&r);
	}
	if (!err && (r.bad || strs.oom))
		err = r.bad ? -EIO : -ENOMEM;
	if (err)
		goto out;
	qsort(cl, ncl, sizeof(*cl), cmp_cloc);
	for (size_t i = 0; i < n && !err; i++) {
		uint64_t *at = u64map_find(&stack_at, ids[i]), k;
		size_t nf = 0;

		if (at) {
			r = (struct rbr){ sans.p + *at - 1, sans.p + sans.len, false };
			k = rbr_uvarint_count(&r);
			for (uint64_t j = 0; j < k && nf < BATCH_MAX_DEPTH; j++) {
				struct cloc key = { .id = rbr_u64(&r) };
				const struct cloc *x = bsearch(&key, cl, ncl, sizeof(*cl), cmp_cloc);
				struct frame *f = &frames[nf++];

				if (!x) {
					*f = (struct frame){ "", "", "", "", 0, 0, false, false };
					continue;
				}
				f->function = (const char *)strs.p + x->off[0];
				f->module = (const char *)strs.p + x->off[1];
				f->build_id = (const char *)strs.p + x->off[2];
				f->file = (const char *)strs.p + x->off[3];
				f->line = x->line;
				f->address = x->address;
				f->kernel = x->flags & 1;
				f->inlined = x->flags & 2;
			}
		}
		err = cb(ctx, ids[i], frames, nf);
	}
out:
	if (err == -EIO && !*store_strerror())
		store_set_error("clickhouse: malformed stacks answer");
	free(frames);
	free(lids);
	free(cl);
	u64map_done(&stack_at);
	buf_done(&sql);
	buf_done(&sans);
	buf_done(&lans);
	buf_done(&strs);
	return err;
}

/* ---- series, names, intervals, nodes -------------------------------------------------------- */

struct ser {
	uint64_t id;
	const struct ch_lset *ls;
};

static int cmp_ser(const void *a, const void *b)
{
	const struct ser *x = a, *y = b;

	for (size_t i = 0; i < 2 * x->ls->n && i < 2 * y->ls->n; i++) {
		int d = strcmp(x->ls->pairs[i], y->ls->pairs[i]);

		if (d)
			return d;
	}
	if (x->ls->n != y->ls->n)
		return x->ls->n < y->ls->n ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

int ch_series(struct store *st, const char *name, uint64_t from, uint64_t to,
	      const struct selector *sel,
	      int (*series_cb)(void *ctx, uint64_t id, const char *const *pairs, size_t n),
	      store_point_cb point_cb, void *ctx)
{
	struct ch *c = (struct ch *)st;
	struct buf sql = { 0 }, ans = { 0 };
	struct ch_lsets l = { 0 };
	struct ser *sv = NULL;
	size_t ns = 0, cap = 0, cur = 0;
	struct rbr r;
	int err;

	err = ch_lsets_load(c, from, to, sel, &l);
	if (err)
		goto out;
	buf_printf(&sql, "SELECT id, any(labelset) FROM %s.series WHERE name = ", c->db);
	sql_str(&sql, name);
	buf_puts(&sql, " GROUP BY id");
	err = select_rb(c, &sql, &ans);
	r = (struct rbr){ ans.p, ans.p + ans.len, false };
	while (!err && rbr_more(&r)) {
		uint64_t id = rbr_u64(&r);
		const struct ch_lset *ls = lset_find(&l, rbr_u64(&r));

		if (!ls)
			continue;
		if (array_reserve(&sv, &cap, ns + 1, sizeof(*sv), 64)) {
			err = -ENOMEM;
			break;
		}
		sv[ns++] = (struct ser){ id, ls };
	}
	if (err || !ns)
		goto out;
	/* Series in label order; their points in that order, then by time. */
	qsort(sv, ns, sizeof(*sv), cmp_ser);
	sql.len = 0;
	ans.len = 0;
	buf_printf(&sql, "SELECT series, t, v FROM %s.points WHERE series IN (", c->db);
	for (size_t i = 0; i < ns; i++)
		buf_printf(&sql, "%s%llu", i ? "," : "", (unsigned long long)sv[i].id);
	buf_printf(&sql, ") AND t >= %llu AND t < %llu AND day >= %llu AND day <= %llu"
		   " ORDER BY indexOf([", (unsigned long long)from, (unsigned long long)to,
		   (unsigned long long)day_of(from), (unsigned long long)day_of(to));
	for (size_t i = 0; i < ns; i++)
		buf_printf(&sql, "%s%llu", i ? "," : "", (unsigned long long)sv[i].id);
	buf_puts(&sql, "], series), t");
	err = select_rb(c, &sql, &ans);
	if (err)
		goto out;
	err = series_cb(ctx, sv[0].id, sv[0].ls->pairs, sv[0].ls->n);
	r = (struct rbr){ ans.p, ans.p + ans.len, false };
	while (!err && rbr_more(&r)) {
		uint64_t id = rbr_u64(&r), t = rbr_u64(&r);
		double v = rbr_f64(&r);

		while (cur < ns && sv[cur].id != id && !err) {
			if (++cur < ns)
				err = series_cb(ctx, sv[cur].id, sv[cur].ls->pairs, sv[cur].ls->n);
		}
		if (!err && cur < ns)
			err = point_cb(ctx, id, t, v);
	}
	while (!err && ++cur < ns)
		err = series_cb(ctx, sv[cur].id, sv[cur].ls->pairs, sv[cur].ls->n);
out:
	free(sv);
	ch_lsets_done(&l);
	buf_done(&sql);
	buf_done(&ans);
	return err;
}

int ch_metric_names(struct store *st, store_name_cb cb, void *ctx)
{
	struct ch *c = (struct ch *)st;
	struct buf sql = { 0 }, ans = { 0 }, name = { 0 };
	struct rbr r;
	int err;

	buf_printf(&sql, "SELECT DISTINCT name FROM %s.series ORDER BY name", c->db);
	err = select_rb(c, &sql, &ans);
	r = (struct rbr){ ans.p, ans.p + ans.len, false };
	while (!err && rbr_more(&r)) {
		name.len = 0;
		rbr_str_to(&r, &name);
		err = name.oom ? -ENOMEM : cb(ctx, (const char *)name.p);
	}
	buf_done(&sql);
	buf_done(&ans);
	buf_done(&name);
	return err;
}

int ch_intervals(struct store *st, const char *kind, uint64_t from, uint64_t to,
		 const struct selector *sel, size_t limit, store_interval_cb cb, void *ctx,
		 bool *ret_truncated)
{
	struct ch *c = (struct ch *)st;
	struct buf sql = { 0 }, ans = { 0 }, strs = { 0 };
	struct ch_lsets l = { 0 };
	size_t n = 0;
	struct rbr r;
	int err;

	*ret_truncated = false;
	err = ch_lsets_load(c, from, to, sel, &l);
	if (err || !l.n)
		goto out;
	buf_printf(&sql, "SELECT kind, labelset, start_ns, end_ns, attr_names, attr_values FROM"
		   " %s.intervals WHERE end_ns > %llu AND start_ns < %llu AND day <= %llu", c->db,
		   (unsigned long long)from, (unsigned long long)to, (unsigned long long)day_of(to));
	if (kind) {
		buf_puts(&sql, " AND kind = ");
		sql_str(&sql, kind);
	}
	buf_puts(&sql, " AND labelset IN (");
	ch_lsets_ids(&l, &sql);
	buf_printf(&sql, ") ORDER BY start_ns, batch, seq LIMIT %zu", limit + 1);
	err = select_rb(c, &sql, &ans);
	r = (struct rbr){ ans.p, ans.p + ans.len, false };
	while (!err && rbr_more(&r)) {
		const char *attrs[2 * BATCH_MAX_LABELS];
		size_t offs[2 * BATCH_MAX_LABELS + 1], kind_off, na, nv;
		const struct ch_lset *ls;
		uint64_t s0, e0;

		strs.len = 0;
		kind_off = rbr_str_to(&r, &strs);
		ls = lset_find(&l, rbr_u64(&r));
		s0 = rbr_u64(&r);
		e0 = rbr_u64(&r);
		na = (size_t)rbr_uvarint_count(&r);
		if (na > BATCH_MAX_LABELS)
			r.bad = true;
		for (size_t k = 0; k < na && !r.bad; k++)
			offs[2 * k] = rbr_str_to(&r, &strs);
		nv = (size_t)rbr_uvarint_count(&r);
		if (nv != na)
			r.bad = true;
		for (size_t k = 0; k < nv && !r.bad; k++)
			offs[2 * k + 1] = rbr_str_to(&r, &strs);
		if (r.bad || strs.oom)
			break;
		if (!ls)
			continue;
		if (n == limit) {
			*ret_truncated = true;
			break;
		}
		for (size_t k = 0; k < 2 * na; k++)
			attrs[k] = (const char *)strs.p + offs[k];
		err = cb(ctx, (const char *)strs.p + kind_off, ls->pairs, ls->n, s0, e0, attrs, na);
		n++;
	}
	if (!err && (r.bad || strs.oom)) {
		store_set_error("clickhouse: malformed intervals answer");
		err = r.bad ? -EIO : -ENOMEM;
	}
out:
	ch_lsets_done(&l);
	buf_done(&sql);
	buf_done(&ans);
	buf_done(&strs);
	return err;
}

int ch_nodes(struct store *st,
	     int (*cb)(void *ctx, const char *node, uint64_t first_ns, uint64_t last_ns),
	     void *ctx)
{
	struct ch *c = (struct ch *)st;
	struct buf sql = { 0 }, ans = { 0 }, name = { 0 };
	struct rbr r;
	int err;

	buf_printf(&sql, "SELECT node, min(f), max(l) FROM (SELECT any(node) AS node,"
		   " minMerge(first_ns) AS f, maxMerge(last_ns) AS l FROM %s.labelsets GROUP BY id)"
		   " GROUP BY node ORDER BY node", c->db);
	err = select_rb(c, &sql, &ans);
	r = (struct rbr){ ans.p, ans.p + ans.len, false };
	while (!err && rbr_more(&r)) {
		uint64_t f, l;

		name.len = 0;
		rbr_str_to(&r, &name);
		f = rbr_u64(&r);
		l = rbr_u64(&r);
		if (r.bad || name.oom)
			break;
		err = cb(ctx, (const char *)name.p, f, l);
	}
	buf_done(&sql);
	buf_done(&ans);
	buf_done(&name);
	return err;
}
