/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The SQLite store's reads other than sample aggregation: stacks and their frames, label sets,
 * metric series, metric names, intervals and nodes.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/hmap.h"
#include "server/selector.h"
#include "server/store/sqlite/sqlite.h"


/* A location fetched once per sq_stacks() call: string offsets into the call's buffer. */
struct cloc {
	size_t off[4];		/* function, module, build_id, file; SIZE_MAX: unknown location */
	uint32_t line, flags;
	uint64_t address;
};

static int64_t fetch_loc(sqlite3_stmt *gl, uint64_t lid, struct u64map *idx, struct cloc **locs,
			 size_t *nlocs, size_t *cap, struct buf *strs)
{
	struct cloc *c;
	uint64_t *v;
	int ins;

	v = u64map_upsert(idx, lid, *nlocs, &ins);
	if (!v)
		return -ENOMEM;
	if (!ins)
		return (int64_t)*v;
	if (*nlocs == *cap) {
		size_t ncap = *cap ? *cap * 2 : 1024;
		struct cloc *n = realloc(*locs, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		*locs = n;
		*cap = ncap;
	}
	c = &(*locs)[*nlocs];
	memset(c, 0, sizeof(*c));
	sqlite3_bind_int64(gl, 1, (int64_t)lid);
	if (sqlite3_step(gl) == SQLITE_ROW) {
		for (int k = 0; k < 4; k++) {
			const char *t = (const char *)sqlite3_column_text(gl, k);

			c->off[k] = strs->len;
			buf_put(strs, t ? t : "", strlen(t ? t : "") + 1);
		}
		c->line = (uint32_t)sqlite3_column_int64(gl, 4);
		c->address = (uint64_t)sqlite3_column_int64(gl, 5);
		c->flags = (uint32_t)sqlite3_column_int64(gl, 6);
	} else {
		for (int k = 0; k < 4; k++)
			c->off[k] = SIZE_MAX;
	}
	sqlite3_reset(gl);
	if (strs->oom)
		return -ENOMEM;
	return (int64_t)(*nlocs)++;
}

int sq_stacks(struct store *st, const uint64_t *ids, size_t n,
	      int (*cb)(void *ctx, uint64_t id, const struct frame *frames, size_t nframes),
	      void *ctx)
{
	struct sq *s = (struct sq *)st;
	sqlite3_stmt *gs = NULL, *gl = NULL;
	struct frame *frames = NULL;
	struct u64map idx = { 0 };
	struct cloc *locs = NULL;
	size_t nlocs = 0, cap = 0, *fl = NULL;
	struct buf strs = { 0 };
	sqlite3 *db = sq_pool_get(s);
	int err = 0;

	if (!db)
		return -EIO;
	frames = malloc(BATCH_MAX_DEPTH * sizeof(*frames));
	fl = malloc(BATCH_MAX_DEPTH * sizeof(*fl));
	if (!frames || !fl) {
		err = -ENOMEM;
		goto out;
	}
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) ||
	    sqlite3_prepare_v2(db, "SELECT locs FROM stacks WHERE id = ?", -1, &gs, NULL) ||
	    sqlite3_prepare_v2(db, "SELECT function, module, build_id, file, line, address, flags"
			       " FROM locations WHERE id = ?", -1, &gl, NULL)) {
		err = -EIO;
		goto out;
	}
	for (size_t i = 0; i < n && !err; i++) {
		size_t nf = 0;

		sqlite3_bind_int64(gs, 1, (int64_t)ids[i]);
		if (sqlite3_step(gs) == SQLITE_ROW) {
			struct rd r = { sqlite3_column_blob(gs, 0), NULL, false };

			r.end = r.p + sqlite3_column_bytes(gs, 0);
			while (r.p < r.end && nf < BATCH_MAX_DEPTH && !r.bad && !err) {
				int64_t k = fetch_loc(gl, rd_uvarint(&r), &idx, &locs, &nlocs, &cap,
						      &strs);

				if (k < 0)
					err = (int)k;
				else
					fl[nf++] = (size_t)k;
			}
		}
		sqlite3_reset(gs);
		if (err)
			break;
		/* Resolve offsets now: strs may have moved while fetching. */
		for (size_t k = 0; k < nf; k++) {
			const struct cloc *c = &locs[fl[k]];
			const char **fs[4] = { &frames[k].function, &frames[k].module,
					       &frames[k].build_id, &frames[k].file };

			for (int j = 0; j < 4; j++)
				*fs[j] = c->off[j] == SIZE_MAX ? "" : (char *)strs.p + c->off[j];
			frames[k].line = c->line;
			frames[k].address = c->address;
			frames[k].kernel = c->flags & 1;
			frames[k].inlined = c->flags & 2;
		}
		err = cb(ctx, ids[i], frames, nf);
	}
out:
	sqlite3_finalize(gs);
	sqlite3_finalize(gl);
	sq_pool_put(s, db);
	u64map_done(&idx);
	buf_done(&strs);
	free(locs);
	free(frames);
	free(fl);
	return err;
}

int sq_label_sets(struct store *st, uint64_t from, uint64_t to, const struct selector *sel,
		  store_labels_cb cb, void *ctx)
{
	struct sq *s = (struct sq *)st;
	size_t n;
	struct lset_ref *v = sq_lsets_snapshot(s, from, to, &n, NULL);
	int err = v ? 0 : -ENOMEM;

	for (size_t i = 0; i < n && !err; i++)
		if (selector_match(sel, v[i].pairs, v[i].n))
			err = cb(ctx, v[i].pairs, v[i].n);
	free(v);
	return err;
}

struct points_ctx {
	uint64_t id, from, to;
	store_point_cb cb;
	void *ctx;
};

/* Passes the points of a chunk inside [from, to) on (chunk_points_decode callback). */
static int point_in_range(void *ctx, uint64_t t, double v)
{
	struct points_ctx *pc = ctx;

	return t >= pc->from && t < pc->to ? pc->cb(pc->ctx, pc->id, t, v) : 0;
}

int sq_series(struct store *st, const char *name, uint64_t from, uint64_t to,
	      const struct selector *sel,
	      int (*series_cb)(void *ctx, uint64_t id, const char *const *pairs, size_t n),
	      store_point_cb point_cb, void *ctx)
{
	struct sq *s = (struct sq *)st;
	sqlite3_stmt *ss = NULL, *ps = NULL;
	sqlite3 *db = sq_pool_get(s);
	struct points_ctx pc = { .from = from, .to = to, .cb = point_cb, .ctx = ctx };
	struct buf raw = { 0 };
	int rc, err = 0;

	if (!db)
		return -EIO;
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) ||
	    sqlite3_prepare_v2(db, "SELECT id, labelset FROM series WHERE name = ? ORDER BY id", -1,
			       &ss, NULL) ||
	    sqlite3_prepare_v2(db, "SELECT t_min, data FROM points WHERE series = ?1 AND"
			       " t_min >= ?2 AND t_min < ?3 AND t_max >= ?4 ORDER BY t_min", -1, &ps,
			       NULL)) {
		err = -EIO;
		goto out;
	}
	sqlite3_bind_text(ss, 1, name, -1, SQLITE_STATIC);
	while (!err && (rc = sqlite3_step(ss)) == SQLITE_ROW) {
		uint64_t id = (uint64_t)sqlite3_column_int64(ss, 0);
		uint64_t ls = (uint64_t)sqlite3_column_int64(ss, 1);
		struct lset l;
		bool ok;

		ok = sq_lset_get(s, ls, &l) && l.last_ns >= from && l.first_ns < to &&
		     selector_match(sel, (const char *const *)l.pairs, l.n);
		if (ok)
			err = series_cb(ctx, id, (const char *const *)l.pairs, l.n);
		if (!ok || err)
			continue;
		sqlite3_bind_int64(ps, 1, (int64_t)id);
		sqlite3_bind_int64(ps, 2, (int64_t)(from > CHUNK_SPAN_NS ? from - CHUNK_SPAN_NS : 0));
		sqlite3_bind_int64(ps, 3, (int64_t)to);
		sqlite3_bind_int64(ps, 4, (int64_t)from);
		pc.id = id;
		while (!err && sqlite3_step(ps) == SQLITE_ROW)
			err = chunk_points_decode(sqlite3_column_blob(ps, 1),
						  (size_t)sqlite3_column_bytes(ps, 1),
						  (uint64_t)sqlite3_column_int64(ps, 0), &raw,
						  point_in_range, &pc);
		sqlite3_reset(ps);
	}
out:
	sqlite3_finalize(ss);
	sqlite3_finalize(ps);
	sq_pool_put(s, db);
	buf_done(&raw);
	return err;
}

int sq_metric_names(struct store *st, store_name_cb cb, void *ctx)
{
	struct sq *s = (struct sq *)st;
	sqlite3 *db = sq_pool_get(s);
	sqlite3_stmt *q = NULL;
	int err = 0;

	if (!db)
		return -EIO;
	if (sqlite3_prepare_v2(db, "SELECT DISTINCT name FROM series ORDER BY name", -1, &q, NULL))
		err = -EIO;
	while (!err && sqlite3_step(q) == SQLITE_ROW)
		err = cb(ctx, (const char *)sqlite3_column_text(q, 0));
	sqlite3_finalize(q);
	sq_pool_put(s, db);
	return err;
}

#define IVL_LONG_NS	(600 * NSEC_PER_SEC)	/* longer intervals are looked up by length */

int sq_intervals(struct store *st, const char *kind, uint64_t from, uint64_t to,
		 const struct selector *sel, size_t limit, store_interval_cb cb, void *ctx,
		 bool *ret_truncated)
{
	struct sq *s = (struct sq *)st;
	sqlite3 *db = sq_pool_get(s);
	sqlite3_stmt *q = NULL;
	size_t n = 0;
	int err = 0;

	*ret_truncated = false;
	if (!db)
		return -EIO;
	/*
	 * With a kind, two bounded index ranges instead of "end_ns > from" (which reads every
	 * interval after from: a range a month back read the whole month): intervals ending in
	 * [from, to + LONG) by (kind, end_ns), plus the rare longer ones by (kind, length).
	 */
	if (sqlite3_prepare_v2(db, kind ? "SELECT kind, labelset, start_ns, end_ns, attrs FROM ("
				      " SELECT id, kind, labelset, start_ns, end_ns, attrs FROM intervals"
				      " WHERE kind = ?3 AND end_ns > ?1 AND end_ns < ?2 + ?4"
				      " AND start_ns < ?2 UNION ALL"
				      " SELECT id, kind, labelset, start_ns, end_ns, attrs FROM intervals"
				      " WHERE kind = ?3 AND (end_ns - start_ns) >= ?4 AND end_ns >= ?2 + ?4"
				      " AND start_ns < ?2) ORDER BY start_ns, id" :
					  "SELECT kind, labelset, start_ns, end_ns, attrs FROM"
				      " intervals WHERE end_ns > ?1 AND start_ns < ?2"
				      " ORDER BY start_ns, id", -1, &q, NULL)) {
		err = -EIO;
		goto out;
	}
	sqlite3_bind_int64(q, 1, (int64_t)from);
	sqlite3_bind_int64(q, 2, (int64_t)to);
	if (kind) {
		sqlite3_bind_text(q, 3, kind, -1, SQLITE_STATIC);
		sqlite3_bind_int64(q, 4, (int64_t)IVL_LONG_NS);
	}
	while (!err && sqlite3_step(q) == SQLITE_ROW) {
		uint64_t ls = (uint64_t)sqlite3_column_int64(q, 1);
		const char *attrs[2 * BATCH_MAX_LABELS];
		const char *p = sqlite3_column_blob(q, 4);
		size_t len = (size_t)sqlite3_column_bytes(q, 4), na = 0, off = 0;
		struct lset lc, *l = &lc;

		if (!sq_lset_get(s, ls, &lc))
			continue;
		if (!selector_match(sel, (const char *const *)l->pairs, l->n))
			continue;
		if (n == limit) {
			*ret_truncated = true;
			break;
		}
		while (p && off < len && na < 2 * BATCH_MAX_LABELS) {
			attrs[na++] = p + off;
			off += strnlen(p + off, len - off) + 1;
		}
		err = cb(ctx, (const char *)sqlite3_column_text(q, 0), (const char *const *)l->pairs,
			 l->n, (uint64_t)sqlite3_column_int64(q, 2),
			 (uint64_t)sqlite3_column_int64(q, 3), attrs, na / 2);
		n++;
	}
out:
	sqlite3_finalize(q);
	sq_pool_put(s, db);
	return err;
}

int sq_nodes(struct store *st,
	     int (*cb)(void *ctx, const char *node, uint64_t first_ns, uint64_t last_ns),
	     void *ctx)
{
	struct sq *s = (struct sq *)st;
	sqlite3 *db = sq_pool_get(s);
	sqlite3_stmt *q = NULL;
	int err = 0;

	if (!db)
		return -EIO;
	if (sqlite3_prepare_v2(db, "SELECT node, first_ns, last_ns FROM nodes ORDER BY node", -1, &q,
			       NULL))
		err = -EIO;
	while (!err && sqlite3_step(q) == SQLITE_ROW)
		err = cb(ctx, (const char *)sqlite3_column_text(q, 0),
			 (uint64_t)sqlite3_column_int64(q, 1), (uint64_t)sqlite3_column_int64(q, 2));
	sqlite3_finalize(q);
	sq_pool_put(s, db);
	return err;
}


int sq_cpu_period(struct store *st, const char *node, uint64_t *ret_ns)
{
	struct sq *s = (struct sq *)st;
	sqlite3 *db = sq_pool_get(s);
	sqlite3_stmt *q = NULL;
	int64_t v = 0;
	int err;

	if (!db)
		return -EIO;
	err = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'period_ns:' || ?1", -1, &q,
				 NULL) ? -EIO : 0;
	if (!err) {
		sqlite3_bind_text(q, 1, node, -1, SQLITE_STATIC);
		err = sq_step_i64(q, &v);
		err = err < 0 ? err : err == 0 || v <= 0 ? -ENOENT : 0;
	}
	if (!err)
		*ret_ns = (uint64_t)v;
	sqlite3_finalize(q);
	sq_pool_put(s, db);
	return err;
}
