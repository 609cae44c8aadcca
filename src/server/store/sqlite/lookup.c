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
#include "common/util.h"
#include "server/selector.h"
#include "server/store/sqlite/sqlite.h"


/* A location fetched once per sq_stacks() call: string offsets into the call's buffer. */
struct cloc {
	size_t off[4];		/* function, module, build_id, file; SIZE_MAX: unknown location */
	uint32_t line, flags;
	uint64_t address;
};

/* The location blocks a sq_stacks() call decoded lately (a stack's locations are mostly in
 * the blocks of the batches that brought them). */
#define LC_SLOTS 16

struct lcache {
	struct sq *s;			/* its string dictionary */
	sqlite3_stmt *gb;		/* the block holding a location id */
	struct lblock b[LC_SLOTS];
	uint64_t first[LC_SLOTS], last[LC_SLOTS];
	size_t n, next;
};

/* The row of location lid, NULL if the store has none (unknown location). */
static const struct lrow *lcache_find(struct lcache *lc, uint64_t lid, int *ret_err)
{
	size_t k;

	for (k = 0; k < lc->n; k++)
		if (lid >= lc->first[k] && lid <= lc->last[k])
			return loc_block_find(&lc->b[k], lid);
	sqlite3_bind_int64(lc->gb, 1, (int64_t)lid);
	if (sqlite3_step(lc->gb) != SQLITE_ROW) {
		sqlite3_reset(lc->gb);
		return NULL;
	}
	k = lc->n < LC_SLOTS ? lc->n++ : lc->next++ % LC_SLOTS;
	lc->first[k] = (uint64_t)sqlite3_column_int64(lc->gb, 0);
	lc->last[k] = (uint64_t)sqlite3_column_int64(lc->gb, 1);
	pthread_rwlock_rdlock(&lc->s->smu);	/* the names are copied in the block */
	*ret_err = loc_block_decode(&lc->b[k], sqlite3_column_blob(lc->gb, 2),
				    (size_t)sqlite3_column_bytes(lc->gb, 2), sq_str_get, lc->s);
	pthread_rwlock_unlock(&lc->s->smu);
	sqlite3_reset(lc->gb);
	if (*ret_err) {
		lc->last[k] = 0;	/* never matches */
		lc->first[k] = 1;
		return NULL;
	}
	return lid <= lc->last[k] ? loc_block_find(&lc->b[k], lid) : NULL;
}

/* Likewise the stack blocks. */
struct scache {
	sqlite3_stmt *gb;
	struct sblock b[LC_SLOTS];
	uint64_t first[LC_SLOTS], last[LC_SLOTS];
	size_t n, next;
};

/* Stack id's location list (*ret_p, *ret_len bytes): 0 found, 1 unknown (or a block that does
 * not decode), -errno. */
static int scache_find(struct scache *sc, uint64_t id, const uint8_t **ret_p, size_t *ret_len)
{
	ptrdiff_t x;
	size_t k;
	int err;

	for (k = 0; k < sc->n; k++)
		if (id >= sc->first[k] && id <= sc->last[k])
			break;
	if (k == sc->n) {
		sqlite3_bind_int64(sc->gb, 1, (int64_t)id);
		if (sqlite3_step(sc->gb) != SQLITE_ROW) {
			sqlite3_reset(sc->gb);
			return 1;
		}
		k = sc->n < LC_SLOTS ? sc->n++ : sc->next++ % LC_SLOTS;
		sc->first[k] = (uint64_t)sqlite3_column_int64(sc->gb, 0);
		sc->last[k] = (uint64_t)sqlite3_column_int64(sc->gb, 1);
		err = stack_block_decode(&sc->b[k], sqlite3_column_blob(sc->gb, 2),
					 (size_t)sqlite3_column_bytes(sc->gb, 2));
		sqlite3_reset(sc->gb);
		if (err) {
			sc->first[k] = 1;	/* never matches */
			sc->last[k] = 0;
			return err == -EINVAL ? 1 : err;
		}
	}
	x = stack_block_find(&sc->b[k], id);
	if (x < 0)
		return 1;
	*ret_p = sc->b[k].locs[x];
	*ret_len = sc->b[k].len[x];
	return 0;
}

static int64_t fetch_loc(struct lcache *lc, uint64_t lid, struct u64map *idx, struct cloc **locs,
			 size_t *nlocs, size_t *cap, struct buf *strs)
{
	const struct lrow *r;
	struct cloc *c;
	uint64_t *v;
	int ins, err = 0;

	v = u64map_upsert(idx, lid, *nlocs, &ins);
	if (!v)
		return -ENOMEM;
	if (!ins)
		return (int64_t)*v;
	if (array_reserve(locs, cap, *nlocs + 1, sizeof(**locs), 1024))
		return -ENOMEM;
	c = &(*locs)[*nlocs];
	memset(c, 0, sizeof(*c));
	r = lcache_find(lc, lid, &err);
	if (err)
		return err;
	if (r) {
		for (int k = 0; k < 4; k++) {
			c->off[k] = strs->len;
			buf_put(strs, r->str[k], strlen(r->str[k]) + 1);
		}
		c->line = (uint32_t)r->line;
		c->address = r->address;
		c->flags = (uint32_t)r->flags;
	} else {
		for (int k = 0; k < 4; k++)
			c->off[k] = SIZE_MAX;
	}
	if (strs->oom)
		return -ENOMEM;
	return (int64_t)(*nlocs)++;
}

/* Stacks resolved per slice of a sq_stacks() call: bounds the location lists held at once. */
#define STACK_SLICE 65536

static int cmp_idx_by_id(const void *x, const void *y, void *ctx)
{
	const uint64_t *ids = ctx;
	uint64_t a = ids[*(const size_t *)x], b = ids[*(const size_t *)y];

	return a < b ? -1 : a > b;
}

/*
 * Stacks ids[0..n) of one slice: their location lists read in stack-id order, then their
 * locations fetched in location-id order, so that each block is decoded once, not once per
 * stack (a caller's order is a hash table's: an hour of a churning node, 360 blocks of each,
 * thrashed the 16-block caches for over a minute); then cb in the caller's order.
 */
static int stacks_slice(struct scache *sc, struct lcache *lc, const uint64_t *ids, size_t n,
			struct u64map *idx, struct cloc **locs, size_t *nlocs, size_t *cap,
			struct buf *strs, struct frame *frames,
			int (*cb)(void *ctx, uint64_t id, const struct frame *frames, size_t nframes),
			void *ctx)
{
	size_t *order = malloc((n ? n : 1) * sizeof(*order));
	size_t *off = calloc(n ? n : 1, sizeof(*off)), nall = 0, nuniq = 0;
	uint64_t *all = NULL, *uniq = NULL;
	int err = order && off ? 0 : -ENOMEM;

	for (size_t i = 0; !err && i < n; i++)
		order[i] = i;
	if (!err)
		qsort_r(order, n, sizeof(*order), cmp_idx_by_id, (void *)ids);
	/* pass 1: every stack's location ids, by stack id: stack i's at all[off[i]], len[i] */
	{
		size_t *len = calloc(n ? n : 1, sizeof(*len)), capall = 0;

		if (!len)
			err = -ENOMEM;
		for (size_t j = 0; j < n && !err; j++) {
			size_t i = order[j], nl = 0;
			const uint8_t *sp = NULL;
			size_t sl = 0;
			int rc = scache_find(sc, ids[i], &sp, &sl);

			if (rc < 0) {
				err = rc;
				break;
			}
			if (rc)
				continue;	/* unknown: no frames */
			if (capall - nall < BATCH_MAX_DEPTH) {
				size_t ncap = capall ? capall * 2 : 4 * BATCH_MAX_DEPTH;
				uint64_t *na = realloc(all, ncap * sizeof(*na));

				if (!na) {
					err = -ENOMEM;
					break;
				}
				all = na;
				capall = ncap;
			}
			/* a stack that does not decode answers the frames before the fault */
			stack_locs_decode(sp, sl, all + nall, BATCH_MAX_DEPTH, &nl);
			off[i] = nall;
			len[i] = nl;
			nall += nl;
		}
		/* pass 2: the distinct location ids not fetched by an earlier slice, ascending,
		 * fetched once each (a hash set first: sorting every stack's every frame took a
		 * third of an hour's top on a churning node) */
		uniq = err ? NULL : malloc((nall ? nall : 1) * sizeof(*uniq));
		if (!err && !uniq)
			err = -ENOMEM;
		if (!err) {
			struct u64map seen = { 0 };

			for (size_t k = 0; k < nall && !err; k++) {
				int ins;

				if (u64map_find(idx, all[k]))
					continue;
				if (!u64map_upsert(&seen, all[k], 0, &ins))
					err = -ENOMEM;
				else if (ins)
					uniq[nuniq++] = all[k];
			}
			u64map_done(&seen);
			qsort(uniq, nuniq, sizeof(*uniq), cmp_u64);
		}
		for (size_t k = 0; k < nuniq && !err; k++) {
			int64_t x = fetch_loc(lc, uniq[k], idx, locs, nlocs, cap, strs);

			if (x < 0)
				err = (int)x;
		}
		/* pass 3: frames in the caller's order */
		for (size_t i = 0; i < n && !err; i++) {
			const uint64_t *lids = all + off[i];

			for (size_t k = 0; k < len[i]; k++) {
				const struct cloc *c = &(*locs)[*u64map_find(idx, lids[k])];
				const char **fs[4] = { &frames[k].function, &frames[k].module,
						       &frames[k].build_id, &frames[k].file };

				for (int j = 0; j < 4; j++)
					*fs[j] = c->off[j] == SIZE_MAX ? "" : (char *)strs->p + c->off[j];
				frames[k].line = c->line;
				frames[k].address = c->address;
				frames[k].kernel = c->flags & 1;
				frames[k].inlined = c->flags & 2;
			}
			err = cb(ctx, ids[i], frames, len[i]);
		}
		free(len);
	}
	free(order);
	free(off);
	free(all);
	free(uniq);
	return err;
}

int sq_stacks(struct store *st, const uint64_t *ids, size_t n,
	      int (*cb)(void *ctx, uint64_t id, const struct frame *frames, size_t nframes),
	      void *ctx)
{
	struct sq *s = (struct sq *)st;
	struct scache sc = { 0 };
	struct lcache lc = { .s = s };
	struct frame *frames = NULL;
	struct u64map idx = { 0 };
	struct cloc *locs = NULL;
	size_t nlocs = 0, cap = 0;
	struct buf strs = { 0 };
	sqlite3 *db = sq_pool_get(s);
	int err = 0;

	if (!db)
		return -EIO;
	frames = malloc(BATCH_MAX_DEPTH * sizeof(*frames));
	if (!frames) {
		err = -ENOMEM;
		goto out;
	}
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) ||
	    sqlite3_prepare_v2(db, "SELECT id, last, data FROM stackblocks WHERE id <= ?1"
			       " ORDER BY id DESC LIMIT 1", -1, &sc.gb, NULL) ||
	    sqlite3_prepare_v2(db, "SELECT id, last, data FROM locblocks WHERE id <= ?1"
			       " ORDER BY id DESC LIMIT 1", -1, &lc.gb, NULL)) {
		err = -EIO;
		goto out;
	}
	/* the locations fetched stay for the later slices (idx, locs, strs) */
	for (size_t i = 0; i < n && !err; i += STACK_SLICE)
		err = stacks_slice(&sc, &lc, ids + i, n - i < STACK_SLICE ? n - i : STACK_SLICE, &idx,
				   &locs, &nlocs, &cap, &strs, frames, cb, ctx);
out:
	sqlite3_finalize(sc.gb);
	sqlite3_finalize(lc.gb);
	for (size_t k = 0; k < LC_SLOTS; k++) {
		lblock_done(&lc.b[k]);
		sblock_done(&sc.b[k]);
	}
	sq_pool_put(s, db);
	u64map_done(&idx);
	buf_done(&strs);
	free(locs);
	free(frames);
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

#define IVL_LONG_NS	(600 * NSEC_PER_SEC)	/* chunks spanning longer are looked up by length */

/* One interval of the answer: where it is among the decoded chunks. */
struct ivref {
	uint64_t start, seq;
	uint32_t chunk, row;
};

static int cmp_ivref(const void *a, const void *b)
{
	const struct ivref *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The interval chunks a query decoded and kept, with what it keeps of them. */
struct ivscan {
	struct ichunk *c;
	char **kind;
	size_t n, cap;
	struct ivref *r;
	size_t nr, capr;
	struct u64map ls_ok;	/* label set id -> 1 (no match) or 2 (match) */
};

static void ivscan_done(struct ivscan *v)
{
	for (size_t i = 0; i < v->n; i++) {
		ichunk_done(&v->c[i]);
		free(v->kind[i]);
	}
	free(v->c);
	free(v->kind);
	free(v->r);
	u64map_done(&v->ls_ok);
}

/* Whether label set ls matches sel (cached per query); false for a label set GC removed. */
static int ls_matches(struct sq *s, struct ivscan *v, const struct selector *sel, uint64_t ls)
{
	uint64_t *m = u64map_upsert(&v->ls_ok, ls, 0, NULL);
	struct lset l;

	if (!m)
		return -ENOMEM;
	if (!*m)
		*m = sq_lset_get(s, ls, &l) &&
		     selector_match(sel, (const char *const *)l.pairs, l.n) ? 2 : 1;
	return *m == 2;
}

/*
 * With a kind, two bounded index ranges instead of "t_max > from" (which reads every chunk
 * after from: a range a month back read the whole month): chunks ending in [from, to + LONG)
 * by (kind, t_max), plus the rare longer ones by (kind, length).
 */
int sq_ivchunks_query(sqlite3 *db, const char *kind, uint64_t from, uint64_t to,
		      sqlite3_stmt **ret)
{
#define IVQ_COLS "SELECT kind, t_min, data, id, (SELECT n FROM offcpu_ivs o WHERE o.id ="\
		 " ivchunks.id) FROM ivchunks WHERE "
	sqlite3_stmt *q;

	if (sqlite3_prepare_v2(db, kind ? IVQ_COLS "kind = ?3 AND t_max > ?1 AND t_max < ?2 + ?4"
				      " AND t_min < ?2 UNION ALL " IVQ_COLS "kind = ?3 AND"
				      " (t_max - t_min) >= ?4 AND t_max >= ?2 + ?4 AND t_min < ?2" :
				      IVQ_COLS "t_max > ?1 AND t_min < ?2", -1, &q, NULL))
		return -EIO;
#undef IVQ_COLS
	sqlite3_bind_int64(q, 1, (int64_t)from);
	sqlite3_bind_int64(q, 2, (int64_t)to);
	if (kind) {
		sqlite3_bind_text(q, 3, kind, -1, SQLITE_STATIC);
		sqlite3_bind_int64(q, 4, (int64_t)IVL_LONG_NS);
	}
	*ret = q;
	return 0;
}

/* Intervals ending before this are past retention: gone, whether or not their chunk is. */
static uint64_t retention_cut(const struct sq *s)
{
	uint64_t now = wall_ns();

	return now > s->o.retention_ns ? now - s->o.retention_ns : 0;
}

int sq_interval_scan(struct sq *s, sqlite3 *db, const char *kind, uint64_t from, uint64_t to,
		     int (*cb)(void *ctx, const char *kind, uint64_t labelset, uint64_t start,
			       uint64_t end, const char *const *attrs, size_t nattrs),
		     void *ctx)
{
	sqlite3_stmt *q = NULL;
	struct ichunk c = { 0 };
	uint64_t cut = retention_cut(s);
	int err = sq_ivchunks_query(db, kind, from, to, &q);

	if (err)
		return err;
	while (!err && sqlite3_step(q) == SQLITE_ROW) {
		const char *k = (const char *)sqlite3_column_text(q, 0);

		err = chunk_intervals_decode(&c, sqlite3_column_blob(q, 2),
					     (size_t)sqlite3_column_bytes(q, 2),
					     (uint64_t)sqlite3_column_int64(q, 1));
		/* what retention deletes by whole chunks is gone for queries already */
		for (size_t i = 0; !err && i < c.n; i++)
			if (c.end[i] > from && c.start[i] < to && c.end[i] >= cut)
				err = cb(ctx, k ? k : "", c.labelset[i], c.start[i], c.end[i],
					 c.attrs + 2 * c.attr0[i],
					 offcpu_public_nattrs(c.attrs + 2 * c.attr0[i],
							      c.nattrs[i]));
	}
	sqlite3_finalize(q);
	ichunk_done(&c);
	return err;
}

int sq_intervals(struct store *st, const char *kind, uint64_t from, uint64_t to,
		 const struct selector *sel, size_t limit, store_interval_cb cb, void *ctx,
		 bool *ret_truncated)
{
	struct sq *s = (struct sq *)st;
	sqlite3 *db = sq_pool_get(s);
	struct ivscan v = { 0 };
	sqlite3_stmt *q = NULL;
	struct ichunk c = { 0 };
	uint64_t cut = retention_cut(s);
	int err = 0;

	*ret_truncated = false;
	if (!db)
		return -EIO;
	err = sq_ivchunks_query(db, kind, from, to, &q);
	if (err)
		goto out;
	/* every overlapping interval of a matching label set, then sorted by (start, arrival) */
	while (!err && sqlite3_step(q) == SQLITE_ROW) {
		const char *k = (const char *)sqlite3_column_text(q, 0);
		size_t nr0 = v.nr;

		err = chunk_intervals_decode(&c, sqlite3_column_blob(q, 2),
					     (size_t)sqlite3_column_bytes(q, 2),
					     (uint64_t)sqlite3_column_int64(q, 1));
		for (size_t i = 0; !err && i < c.n; i++) {
			int m;

			/* what retention deletes by whole chunks is gone for queries already */
			if (c.end[i] <= from || c.start[i] >= to || c.end[i] < cut)
				continue;
			m = ls_matches(s, &v, sel, c.labelset[i]);
			if (m <= 0) {
				err = m;
				continue;
			}
			if (v.nr == v.capr) {
				size_t ncap = v.capr ? 2 * v.capr : 1024;
				struct ivref *nv = realloc(v.r, ncap * sizeof(*nv));

				if (!nv) {
					err = -ENOMEM;
					break;
				}
				v.r = nv;
				v.capr = ncap;
			}
			v.r[v.nr++] = (struct ivref){ c.start[i], c.seq[i], (uint32_t)v.n,
						      (uint32_t)i };
		}
		if (err || v.nr == nr0)
			continue;
		/* keep the chunk: the answer points into it */
		if (v.n == v.cap) {
			size_t ncap = v.cap ? 2 * v.cap : 64;
			struct ichunk *nc = realloc(v.c, ncap * sizeof(*nc));
			char **nk = nc ? realloc(v.kind, ncap * sizeof(*nk)) : NULL;

			if (nc)
				v.c = nc;
			if (!nc || !nk) {
				err = -ENOMEM;
				break;
			}
			v.kind = nk;
			v.cap = ncap;
		}
		v.kind[v.n] = strdup(k ? k : "");
		if (!v.kind[v.n]) {
			err = -ENOMEM;
			break;
		}
		v.c[v.n++] = c;
		memset(&c, 0, sizeof(c));
	}
	if (err)
		goto out;
	qsort(v.r, v.nr, sizeof(*v.r), cmp_ivref);
	for (size_t i = 0; i < v.nr && !err; i++) {
		const struct ivref *r = &v.r[i];
		const struct ichunk *ch = &v.c[r->chunk];
		struct lset l;

		if (i == limit) {
			*ret_truncated = true;
			break;
		}
		if (!sq_lset_get(s, ch->labelset[r->row], &l))
			continue;	/* removed by GC meanwhile */
		err = cb(ctx, v.kind[r->chunk], (const char *const *)l.pairs, l.n, r->start,
			 ch->end[r->row], ch->attrs + 2 * ch->attr0[r->row],
			 offcpu_public_nattrs(ch->attrs + 2 * ch->attr0[r->row],
					      ch->nattrs[r->row]));
	}
out:
	sqlite3_finalize(q);
	sq_pool_put(s, db);
	ichunk_done(&c);
	ivscan_done(&v);
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
