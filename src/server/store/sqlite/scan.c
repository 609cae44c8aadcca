/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sample aggregation of the SQLite store (stack id -> summed value, optionally per label group
 * and time bucket): whole days, hours and minutes from rollups, partial minutes and
 * not-yet-rolled-up chunks raw, in one read snapshot.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/util.h"
#include "server/store/idle_est.h"
#include "server/store/sqlite/sqlite.h"

struct agg_ctx {
	struct sq *s;
	const struct store_query *q;
	struct u64map *agg;
	const uint8_t *match;		/* label set id -> selected */
	size_t nmatch;
	struct idle_est est;		/* gpu_idle: what was observed, and the weights */
	const struct node_est **ls_est;	/* label set id -> its node's estimate, gpu_idle only */
	struct idle_dither dither;
	uint32_t *ls_group;		/* label set id -> group index + 1, group_by only */
	struct u64map nodes;		/* hash of the node of some matching label set */
	int64_t built[LEVELS];		/* hour and day rows are whole before these (meta) */
	int64_t ivwm;			/* meta.rollup_ivwm: off-CPU samples of intervals */
	uint64_t raw_cut;		/* raw samples are kept from here on (whole minutes) */
	struct chunk c;
};

/* The nodes of the matching label sets (lmu held): rollup rows of other nodes are not read. */
static int load_nodes(struct agg_ctx *a)
{
	struct sq *s = a->s;

	for (size_t id = 0; id < a->nmatch && id < s->nlsets; id++) {
		const char *node = s->lsets[id].node;

		if (a->match[id] && s->lsets[id].pairs &&
		    !u64map_upsert(&a->nodes, hash64(node, strlen(node), 17), 0, NULL))
			return -ENOMEM;
	}
	return 0;
}

/* Group index + 1 of every matching label set (lmu held). 0 or -ENOMEM. */
static int load_groups(struct agg_ctx *a)
{
	struct sq *s = a->s;
	struct buf b = { 0 };
	int err = 0;

	a->ls_group = calloc(a->nmatch ? a->nmatch : 1, sizeof(*a->ls_group));
	if (!a->ls_group)
		return -ENOMEM;
	for (size_t id = 0; !err && id < a->nmatch && id < s->nlsets; id++) {
		if (!a->match[id] || !s->lsets[id].pairs)
			continue;
		err = store_group_index(a->q->groups, (const char *const *)s->lsets[id].pairs,
					s->lsets[id].n, a->q->group_by, &b, &a->ls_group[id]);
	}
	buf_done(&b);
	return err;
}

static int agg_put(struct agg_ctx *a, uint64_t ls, uint64_t stack, uint64_t t, uint64_t value)
{
	const struct store_query *q = a->q;
	uint64_t *v;

	if (q->emit) {
		uint64_t key = stack;

		if (q->step_ns)
			key = t > q->from_ns ? (t - q->from_ns) / q->step_ns : 0;
		return q->emit(q->emit_ctx, a->ls_group ? a->ls_group[ls] : 0, key, value);
	}
	v = u64map_upsert(a->agg, stack, 0, NULL);
	if (!v)
		return -ENOMEM;
	*v += value;
	return 0;
}

/* One gpu_busy or gpu_observed interval of the asked GPU: to the estimator (sq_interval_scan
 * callback). */
static int busy_in_range(void *ctx, const char *kind, uint64_t ls, uint64_t start, uint64_t end,
			 const char *const *attrs, size_t nattrs)
{
	struct agg_ctx *a = ctx;
	struct lset l;

	(void)attrs;
	(void)nattrs;
	/* lmu only per label set looked up: its strings stay valid unlocked. */
	if (!sq_lset_get(a->s, ls, &l) || l.gpu != a->q->gpu_idle ||
	    !u64map_find(&a->nodes, hash64(l.node, strlen(l.node), 17)))
		return 0;	/* another GPU, or a node none of the samples asked for is on */
	return idle_est_add(&a->est, idle_est_class(kind, (const char *const *)l.pairs, l.n), l.node,
			    start, end);
}

static int load_busy(struct agg_ctx *a, sqlite3 *db)
{
	struct sq *s = a->s;
	uint64_t lo, hi;
	int err;

	/* idle = decided by some source (kernels, gpm, nvml) and not busy; trace windows stand for
	 * the undecided time near them; what none stands for is unknown */
	idle_est_load_span(a->q->from_ns, a->q->to_ns, &lo, &hi);
	err = sq_interval_scan(s, db, "gpu_busy", lo, hi, busy_in_range, a);
	if (!err)
		err = sq_interval_scan(s, db, "gpu_observed", lo, hi, busy_in_range, a);
	if (!err)
		err = idle_est_build(&a->est, a->q->from_ns, a->q->to_ns);
	if (!err) {
		a->ls_est = calloc(a->nmatch ? a->nmatch : 1, sizeof(*a->ls_est));
		if (!a->ls_est)
			err = -ENOMEM;
	}
	for (size_t id = 0; !err && id < a->nmatch; id++) {
		struct lset l;

		if (!a->match[id] || !sq_lset_get(s, id, &l))
			continue;
		a->ls_est[id] = idle_est_node(&a->est, l.node);
	}
	a->dither.tally = a->q->idle;
	return err;
}

/* One rollup row being folded: its bucket start. */
struct rollup_row {
	struct agg_ctx *a;
	uint64_t t;
};

/* The rollup rows of one scan: its aggregation, the decoder's scratch. */
struct scan_rows {
	struct agg_ctx *a;
	struct buf tmp;
};

/* Adds one rollup entry of a matching label set to the aggregation (rollup_decode callback). */
static int agg_add(void *ctx, uint64_t ls, uint64_t stack, int64_t sum, uint64_t count)
{
	struct rollup_row *r = ctx;

	(void)count;
	if (ls >= r->a->nmatch || !r->a->match[ls])
		return 0;
	return agg_put(r->a, ls, stack, r->t, (uint64_t)sum);
}

enum scan_mode { SCAN_ANY, SCAN_ROLLED, SCAN_UNROLLED };

/* One raw sample of label set l at t: counted unless the query's filters leave it out. */
static int scan_sample(struct agg_ctx *a, uint64_t l, uint64_t stack, uint64_t t, uint64_t value)
{
	if (l >= a->nmatch || !a->match[l])
		return 0;
	if (a->ls_est && !(value = idle_est_count(&a->est, a->ls_est[l], &a->dither, &t, value)))
		return 0;
	return agg_put(a, l, stack, t, value);
}

/* An off-CPU sample an interval stands for (offcpu.c). */
static int scan_offcpu(void *ctx, uint64_t ls, uint64_t stack, uint64_t t, uint64_t value)
{
	return scan_sample(ctx, ls, stack, t, value);
}

/* Adds the samples of matching chunks in [from, to) to the aggregation. */
static int scan_chunks(struct agg_ctx *a, sqlite3 *db, enum scan_mode mode, int64_t wm,
		       uint64_t from, uint64_t to)
{
	static const char *const sql[] = {
		[SCAN_ANY] = "SELECT labelset, t_min, t_max, data FROM chunks WHERE kind = ?1 AND"
			     " t_min >= ?2 AND t_min < ?3 AND t_max >= ?4",
		[SCAN_ROLLED] = "SELECT labelset, t_min, t_max, data FROM chunks WHERE kind = ?1 AND"
				" t_min >= ?2 AND t_min < ?3 AND t_max >= ?4 AND id <= ?5",
		[SCAN_UNROLLED] = "SELECT labelset, t_min, t_max, data FROM chunks WHERE id > ?5 AND"
				  " kind = ?1 AND t_min < ?3 AND t_max >= ?4",
	};
	sqlite3_stmt *st;
	int rc, err = 0;

	if (from >= to)
		return 0;
	rc = sqlite3_prepare_v2(db, sql[mode], -1, &st, NULL);
	if (rc)
		return -EIO;
	sqlite3_bind_int(st, 1, a->q->kind);
	sqlite3_bind_int64(st, 2, (int64_t)(from > CHUNK_SPAN_NS ? from - CHUNK_SPAN_NS : 0));
	sqlite3_bind_int64(st, 3, (int64_t)to);
	sqlite3_bind_int64(st, 4, (int64_t)from);
	if (mode != SCAN_ANY)
		sqlite3_bind_int64(st, 5, wm);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t ls = (uint64_t)sqlite3_column_int64(st, 0);
		uint64_t t_min = (uint64_t)sqlite3_column_int64(st, 1);
		uint64_t t_max = (uint64_t)sqlite3_column_int64(st, 2);
		bool inside = t_min >= from && t_max < to;

		/* ls 0: a chunk of several label sets, filtered per sample */
		if (ls && (ls >= a->nmatch || !a->match[ls]))
			continue;
		err = chunk_samples_decode(&a->c, sqlite3_column_blob(st, 3),
					   (size_t)sqlite3_column_bytes(st, 3), t_min);
		for (size_t i = 0; !err && i < a->c.n; i++) {
			uint64_t t = a->c.t[i], l = a->c.mixed ? a->c.labelset[i] : ls;

			if (!inside && (t < from || t >= to))
				continue;
			err = scan_sample(a, l, a->c.stack[i], t, (uint64_t)a->c.value[i]);
		}
	}
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = -EIO;
	sqlite3_finalize(st);
	/* and those intervals stand for; the rolled-up ones' only where raw samples are still
	 * kept, as their chunks would be */
	if (!err && a->q->kind == SAMPLE_OFFCPU_NS)
		err = sq_offcpu_scan(db, from, to, mode == SCAN_UNROLLED ? a->ivwm : 0,
				     mode == SCAN_ROLLED ? a->ivwm : INT64_MAX, a->ivwm, a->raw_cut,
				     scan_offcpu, a);
	return err;
}

/* Rollup rows of nodes other than the matching label sets' are not read (sq_rollup_rows()). */
static bool node_wanted(void *ctx, const char *node)
{
	struct scan_rows *r = ctx;

	return u64map_find(&r->a->nodes, hash64(node, strlen(node), 17)) != NULL;
}

/* A row's entries into the aggregation at its bucket's start (sq_rollup_rows() callback). */
static int scan_row(void *ctx, const char *node, int kind, uint64_t bucket, const void *blob,
		    size_t len)
{
	struct scan_rows *r = ctx;
	struct rollup_row row = { r->a, bucket };

	(void)node;
	(void)kind;
	return rollup_decode(blob, len, &r->tmp, agg_add, &row);
}

static int scan_rollups(struct agg_ctx *a, sqlite3 *db, int level, uint64_t from, uint64_t to)
{
	struct scan_rows r = { .a = a };
	int err = sq_rollup_rows(db, level, from, to, a->q->kind, NULL, node_wanted, scan_row, &r);

	buf_done(&r.tmp);
	return err;
}

static uint64_t floor_to(uint64_t t, uint64_t unit);
static uint64_t ceil_to(uint64_t t, uint64_t unit);

/* [a, b) aligned to level lv: the coarsest whole buckets from the level above, lv at the ends. */
static int scan_levels(struct agg_ctx *a, sqlite3 *db, int lv, uint64_t from, uint64_t to)
{
	uint64_t c, d;
	int err;

	if (from >= to)
		return 0;
	if (lv + 1 == LEVELS)
		return scan_rollups(a, db, lv, from, to);
	c = ceil_to(from, sq_level_ns[lv + 1]);
	d = floor_to(to, sq_level_ns[lv + 1]);
	if (d > (uint64_t)a->built[lv + 1])	/* not built yet: the level below has them */
		d = c > (uint64_t)a->built[lv + 1] ? c : (uint64_t)a->built[lv + 1];
	if (c >= d)
		return scan_rollups(a, db, lv, from, to);
	err = scan_levels(a, db, lv + 1, c, d);
	if (!err)
		err = scan_rollups(a, db, lv, from, c);
	if (!err)
		err = scan_rollups(a, db, lv, d, to);
	return err;
}

static uint64_t floor_to(uint64_t t, uint64_t unit)
{
	return t / unit * unit;
}

static uint64_t ceil_to(uint64_t t, uint64_t unit)
{
	return (t + unit - 1) / unit * unit;
}

/*
 * Plan: samples already rolled up (chunk id <= watermark) come from day and hour rollups for
 * whole days and hours already built (meta.rollup_built_<level>), minute rollups for whole
 * minutes, and raw chunks for the partial minutes at both
 * ends; chunks not yet rolled up are scanned raw. Edges older than the raw retention are
 * widened to whole minutes. gpu_idle needs each sample's time: raw chunks only.
 */
int sq_aggregate(struct store *st, const struct store_query *q, struct u64map *agg)
{
	struct sq *s = (struct sq *)st;
	/* sums by stack, by group and stack, by bucket: a chunk's samples in any order (time
	 * order cost a third of a raw off-CPU samples-over-time answer in its sort) */
	struct agg_ctx a = { .s = s, .q = q, .agg = agg, .c = { .any_order = true } };
	uint64_t raw_cut = wall_ns() - sq_raw_retention_ns(s), from = q->from_ns, to = q->to_ns, m1, m2;
	sqlite3 *db = sq_pool_get(s);
	int64_t wm = 0;
	int err;

	if (!db)
		return -EIO;
	err = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) ? -EIO : 0;
	if (!err) {
		sqlite3_stmt *w;

		err = sqlite3_prepare_v2(db, "SELECT (SELECT value FROM meta WHERE key = 'rollup_wm'),"
					 " (SELECT value FROM meta WHERE key = 'rollup_built_1'),"
					 " (SELECT value FROM meta WHERE key = 'rollup_built_2'),"
					 " (SELECT value FROM meta WHERE key = 'rollup_ivwm')", -1,
					 &w, NULL) ? -EIO : 0;
		if (!err && sqlite3_step(w) != SQLITE_ROW)
			err = -EIO;
		if (!err) {
			wm = sqlite3_column_int64(w, 0);
			a.built[0] = INT64_MAX;
			for (int lv = 1; lv < LEVELS; lv++)
				a.built[lv] = sqlite3_column_int64(w, lv);
			a.ivwm = sqlite3_column_int64(w, LEVELS);
		}
		sqlite3_finalize(w);
	}
	if (err)
		goto out;
	a.raw_cut = floor_to(raw_cut, MINUTE_NS);
	a.match = sq_lsets_match(s, q->sel, from, to, &a.nmatch);
	if (!a.match)
		err = -ENOMEM;
	if (!err) {
		pthread_rwlock_rdlock(&s->lmu);
		err = load_nodes(&a);
		if (!err && q->emit && q->group_by && q->groups)
			err = load_groups(&a);
		pthread_rwlock_unlock(&s->lmu);
	}
	if (err)
		goto out;
	if (q->emit && q->step_ns && q->gpu_idle < 0) {
		/*
		 * Each sample's time decides its bucket: raw chunks where they are kept, minute
		 * rollups before (a sample there counts at its minute's start), plus chunks not
		 * yet rolled up. Rollups hold only samples before b, raw samples count from b on.
		 */
		uint64_t b = floor_to(raw_cut, MINUTE_NS);

		if (from < b) {
			uint64_t e = to < b ? ceil_to(to, MINUTE_NS) : b;

			err = scan_rollups(&a, db, 0, floor_to(from, MINUTE_NS), e);
			if (!err)
				err = scan_chunks(&a, db, SCAN_UNROLLED, wm, from, e);
			from = e;
		}
		if (!err && from < to)
			err = scan_chunks(&a, db, SCAN_ANY, 0, from, to);
		goto out;
	}
	if (q->gpu_idle >= 0) {
		err = load_busy(&a, db);
		if (!err)
			idle_est_scan_span(&a.est, &from, &to);
		if (!err)
			err = scan_chunks(&a, db, SCAN_ANY, 0, from, to);
		if (!err && q->idle) {
			q->idle->cover = a.est.cover;
			q->idle->set = true;
		}
		goto out;
	}
	if (from < raw_cut)
		from = floor_to(from, MINUTE_NS);
	if (to < raw_cut)
		to = ceil_to(to, MINUTE_NS);
	m1 = ceil_to(from, MINUTE_NS);
	m2 = floor_to(to, MINUTE_NS);
	if (m1 >= m2) {
		err = scan_chunks(&a, db, SCAN_ANY, 0, from, to);
		goto out;
	}
	err = scan_levels(&a, db, 0, m1, m2);
	if (!err)
		err = scan_chunks(&a, db, SCAN_ROLLED, wm, from, m1);
	if (!err)
		err = scan_chunks(&a, db, SCAN_ROLLED, wm, m2, to);
	if (!err)
		err = scan_chunks(&a, db, SCAN_UNROLLED, wm, from, to);
out:
	sq_pool_put(s, db);
	idle_est_done(&a.est);
	free(a.ls_est);
	free(a.ls_group);
	u64map_done(&a.nodes);
	free((void *)a.match);
	chunk_done(&a.c);
	return err;
}
