/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rollups of the SQLite store: the maintenance thread folds new sample chunks (by id, above the
 * watermark meta.rollup_wm), and the off-CPU samples of new interval chunks (above
 * meta.rollup_ivwm, offcpu.c), into per-minute, per-hour and per-day rows, and runs retention.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "common/batch.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/util.h"
#include "server/store/sqlite/sqlite.h"

/* One rollup row being built: (label set, stack) -> (sum, count). */
struct racc {
	uint64_t level, kind, bucket;
	char *node;
	struct u64map idx;	/* hash of (label set, stack) -> index (probe on collision) */
	uint64_t *ls, *stack, *count;
	int64_t *sum;
	size_t n, cap;
	uint64_t child_bytes;	/* built rows: the stored bytes of the rows read for it */
};

static int racc_grow(struct racc *a)
{
	size_t ncap = a->cap ? a->cap * 2 : 64;
	uint64_t *nl = realloc(a->ls, ncap * sizeof(*nl)), *ns, *nc;
	int64_t *nsum;

	if (!nl)
		return -ENOMEM;
	a->ls = nl;
	ns = realloc(a->stack, ncap * sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	a->stack = ns;
	nc = realloc(a->count, ncap * sizeof(*nc));
	if (!nc)
		return -ENOMEM;
	a->count = nc;
	nsum = realloc(a->sum, ncap * sizeof(*nsum));
	if (!nsum)
		return -ENOMEM;
	a->sum = nsum;
	a->cap = ncap;
	return 0;
}

static int racc_add(struct racc *a, uint64_t ls, uint64_t stack, int64_t sum, uint64_t count)
{
	uint64_t k[2] = { ls, stack }, h = hash64(k, sizeof(k), 16), *v;

	for (; (v = u64map_find(&a->idx, h)); h++) {
		if (a->ls[*v] == ls && a->stack[*v] == stack) {
			a->sum[*v] += sum;
			a->count[*v] += count;
			return 0;
		}
	}
	if (a->n == a->cap && racc_grow(a))
		return -ENOMEM;
	if (!u64map_upsert(&a->idx, h, a->n, NULL))
		return -ENOMEM;
	a->ls[a->n] = ls;
	a->stack[a->n] = stack;
	a->sum[a->n] = sum;
	a->count[a->n] = count;
	a->n++;
	return 0;
}

static void racc_free(struct racc *a)
{
	if (!a)
		return;
	u64map_done(&a->idx);
	free(a->node);
	free(a->ls);
	free(a->stack);
	free(a->sum);
	free(a->count);
	free(a);
}

struct rollup_round {
	struct u64map keys;	/* hash of (level, kind, bucket, node) -> index into accs (probe) */
	struct racc **accs;
	size_t n, cap;
};

static struct racc *round_get(struct rollup_round *rr, uint64_t level, uint64_t kind,
			      uint64_t bucket, const char *node)
{
	uint64_t k[4] = { level, kind, bucket, hash64(node, strlen(node), 17) };
	uint64_t h = hash64(k, sizeof(k), 15), *v;
	struct racc *a;

	for (; (v = u64map_find(&rr->keys, h)); h++) {
		a = rr->accs[*v];
		if (a->level == level && a->kind == kind && a->bucket == bucket &&
		    !strcmp(a->node, node))
			return a;
	}
	if (rr->n == rr->cap) {
		size_t ncap = rr->cap ? rr->cap * 2 : 64;
		struct racc **n = realloc(rr->accs, ncap * sizeof(*n));

		if (!n)
			return NULL;
		rr->accs = n;
		rr->cap = ncap;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	*a = (struct racc){ .level = level, .kind = kind, .bucket = bucket, .node = strdup(node) };
	if (!a->node || !u64map_upsert(&rr->keys, h, rr->n, NULL)) {
		racc_free(a);
		return NULL;
	}
	rr->accs[rr->n++] = a;
	return a;
}

static void round_done(struct rollup_round *rr)
{
	for (size_t i = 0; i < rr->n; i++)
		racc_free(rr->accs[i]);
	free(rr->accs);
	u64map_done(&rr->keys);
	memset(rr, 0, sizeof(*rr));
}

/* (label set, stack) order of a row's entries */
static int cmp_entry(const void *x, const void *y, void *ctx)
{
	const struct racc *a = ctx;
	size_t i = *(const size_t *)x, j = *(const size_t *)y;

	if (a->ls[i] != a->ls[j])
		return a->ls[i] < a->ls[j] ? -1 : 1;
	return a->stack[i] < a->stack[j] ? -1 : a->stack[i] > a->stack[j];
}

static int racc_merge(void *ctx, uint64_t ls, uint64_t stack, int64_t sum, uint64_t count)
{
	return racc_add(ctx, ls, stack, sum, count);
}

/* The SQL of the rollup rows, the maintenance thread's (prepared per round). */
#define ROLLUP_GET	"SELECT data FROM rollups WHERE level = ? AND bucket = ? AND kind = ? AND" \
			" node = ?"
#define ROLLUP_PUT	"INSERT OR REPLACE INTO rollups(level, bucket, kind, node, data) VALUES" \
			" (?, ?, ?, ?, ?)"

/* The accumulated row's blob: *ret malloc'ed. 0 or -errno. */
static int racc_encode(struct racc *a, uint8_t **ret, size_t *ret_len)
{
	size_t *order = malloc((a->n ? a->n : 1) * sizeof(*order));
	int err;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < a->n; i++)
		order[i] = i;
	qsort_r(order, a->n, sizeof(*order), cmp_entry, a);
	err = rollup_encode(a->ls, a->stack, a->sum, a->count, order, a->n, ret, ret_len);
	free(order);
	return err;
}

/*
 * What a stored row's data is: its entries (the blob z), or, for an hour or day row with no
 * entries of its own, read from the level below: deferred for good (an empty blob,
 * build_node()) or waiting to be built (NULL, rollup_write(): late samples came into a
 * missing or deferred row).
 */
enum row_data { ROW_BLOB, ROW_DEFERRED, ROW_WAITING };

/* Stores the row, replacing the one there (wmu held, in a tx). */
static int row_put(sqlite3_stmt *put, const struct racc *a, enum row_data what,
		   const uint8_t *z, size_t zlen)
{
	sqlite3_bind_int64(put, 1, (int64_t)a->level);
	sqlite3_bind_int64(put, 2, (int64_t)a->bucket);
	sqlite3_bind_int64(put, 3, (int64_t)a->kind);
	sqlite3_bind_text(put, 4, a->node, -1, SQLITE_STATIC);
	if (what == ROW_BLOB)
		sqlite3_bind_blob(put, 5, z, (int)zlen, SQLITE_STATIC);
	else if (what == ROW_DEFERRED)
		sqlite3_bind_zeroblob(put, 5, 0);
	else
		sqlite3_bind_null(put, 5);
	return sq_step_done(put);
}

/* Stores the accumulated row, replacing the one there (wmu held, in a tx). */
static int racc_put(sqlite3_stmt *put, struct racc *a)
{
	uint8_t *z = NULL;
	size_t zlen;
	int err = a->n ? racc_encode(a, &z, &zlen) : 0;

	if (!err && a->n)
		err = row_put(put, a, ROW_BLOB, z, zlen);
	free(z);
	return err;
}

/* A row of bucket b of level lv of node waits to be built again (pend: maintenance thread). */
struct rollup_pending {
	int lv;
	int64_t b;
	char *node;
	uint64_t touched;	/* mono_ns of the last late sample into it */
};

/* (lv, b, node) waits, its last late sample now. 0 or -ENOMEM. */
static int pending_touch(struct sq *s, int lv, int64_t b, const char *node)
{
	struct rollup_pending *p;

	for (size_t i = 0; i < s->npend; i++) {
		p = &s->pend[i];
		if (p->lv == lv && p->b == b && !strcmp(p->node, node)) {
			p->touched = mono_ns();
			return 0;
		}
	}
	if (s->npend == s->cappend) {
		size_t ncap = s->cappend ? s->cappend * 2 : 16;

		p = realloc(s->pend, ncap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		s->pend = p;
		s->cappend = ncap;
	}
	p = &s->pend[s->npend];
	*p = (struct rollup_pending){ .lv = lv, .b = b, .node = strdup(node), .touched = mono_ns() };
	if (!p->node)
		return -ENOMEM;
	s->npend++;
	__atomic_store_n(&s->n_pending, s->npend, __ATOMIC_RELAXED);
	return 0;
}

void sq_rollup_pending_free(struct sq *s)
{
	for (size_t i = 0; i < s->npend; i++)
		free(s->pend[i].node);
	free(s->pend);
	s->pend = NULL;
	s->npend = s->cappend = 0;
}

/*
 * Merges the accumulated row with the stored one and writes it back (wmu held, in a tx). An hour
 * or day row of a bucket already built that is missing or deferred (the late samples are in the
 * minute rows, folded in the same round) is not written from the late samples alone: it is
 * marked to build (data NULL: read from below meanwhile, and found again at open) and built from
 * the rows below once its late samples stop (rollup_pending()).
 */
static int rollup_write(struct sq *s, sqlite3_stmt *get, sqlite3_stmt *put, struct racc *a,
			struct buf *tmp)
{
	int rc, err = 0;

	sqlite3_bind_int64(get, 1, (int64_t)a->level);
	sqlite3_bind_int64(get, 2, (int64_t)a->bucket);
	sqlite3_bind_int64(get, 3, (int64_t)a->kind);
	sqlite3_bind_text(get, 4, a->node, -1, SQLITE_STATIC);
	rc = sqlite3_step(get);
	if (a->level && (rc == SQLITE_DONE || (rc == SQLITE_ROW && !sqlite3_column_bytes(get, 0)))) {
		bool missing = rc == SQLITE_DONE;

		sqlite3_reset(get);
		err = pending_touch(s, (int)a->level, (int64_t)a->bucket, a->node);
		return err || !missing ? err : row_put(put, a, ROW_WAITING, NULL, 0);
	}
	if (rc == SQLITE_ROW)
		err = rollup_decode(sqlite3_column_blob(get, 0), (size_t)sqlite3_column_bytes(get, 0),
				    tmp, racc_merge, a);
	else if (rc != SQLITE_DONE)
		err = -EIO;
	sqlite3_reset(get);
	return err ? err : racc_put(put, a);
}

/* The label set's node ("" if unknown), through a one-entry cache. */
static const char *ls_node(struct sq *s, uint64_t ls, uint64_t *last_ls, const char **last)
{
	struct lset l;

	if (*last && *last_ls == ls)
		return *last;
	*last_ls = ls;
	*last = sq_lset_get(s, ls, &l) ? l.node : "";
	return *last;
}

/*
 * meta.rollup_built_<level>: that level's rows are whole for every bucket before it. Only the
 * maintenance thread moves them: any connection of it reads the latest.
 */
static int built_get(sqlite3 *db, int64_t built[LEVELS])
{
	sqlite3_stmt *q;
	int err = 0;

	built[0] = INT64_MAX;	/* minute rows: folded as chunks come */
	if (sqlite3_prepare_v2(db, "SELECT (SELECT value FROM meta WHERE key = 'rollup_built_1'),"
			       " (SELECT value FROM meta WHERE key = 'rollup_built_2')", -1, &q,
			       NULL) || sqlite3_step(q) != SQLITE_ROW)
		err = -EIO;
	else
		for (int lv = 1; lv < LEVELS; lv++)
			built[lv] = sqlite3_column_int64(q, lv - 1);
	sqlite3_finalize(q);
	return err;
}

/* The samples of one round being folded (rollup_round()). */
struct fold {
	struct sq *s;
	struct rollup_round rr;
	int64_t built[LEVELS];
	uint64_t last_ls;	/* ls_node()'s cache */
	const char *node;
};

/* One sample into the round's rows of its buckets (those not built later from the minutes). */
static int fold_sample(struct fold *f, uint64_t kind, uint64_t l, uint64_t stack, uint64_t t,
		       int64_t value)
{
	const char *nd = ls_node(f->s, l, &f->last_ls, &f->node);

	for (int lv = 0; lv < LEVELS; lv++) {
		uint64_t b = t / sq_level_ns[lv] * sq_level_ns[lv];
		struct racc *acc;

		if (b >= (uint64_t)f->built[lv])
			continue;	/* built from the minutes once closed */
		acc = round_get(&f->rr, (uint64_t)lv, kind, b, nd);
		if (!acc || racc_add(acc, l, stack, value, 1))
			return -ENOMEM;
	}
	return 0;
}

/* An off-CPU sample an interval stands for (offcpu_chunk_samples() callback). */
static int fold_offcpu(void *ctx, uint64_t ls, uint64_t stack, uint64_t t, uint64_t value)
{
	return fold_sample(ctx, SAMPLE_OFFCPU_NS, ls, stack, t, (int64_t)value);
}

/*
 * Folds the off-CPU samples of up to ROLLUP_ROUND new chunks of blocked intervals (offcpu.c;
 * by id, above meta.rollup_ivwm) into f. >= 0: chunks folded, -errno.
 */
static int fold_intervals(struct fold *f)
{
	sqlite3_stmt *sel = NULL, *wm = NULL;
	struct ichunk c = { 0 };
	int64_t last = -1;
	int rc, err = 0, n = 0;

	rc = sqlite3_prepare_v2(f->s->w, "SELECT id, t_min, data, (SELECT n FROM offcpu_ivs o WHERE"
				" o.id = ivchunks.id) FROM ivchunks WHERE id >"
				" max((SELECT value FROM meta WHERE key = 'rollup_ivwm'), (SELECT"
				" value FROM meta WHERE key = 'offcpu_iv_after')) AND kind = '"
				OFFCPU_IV_KIND "' ORDER BY id LIMIT ?", -1, &sel, NULL);
	rc |= sqlite3_prepare_v2(f->s->w, "UPDATE meta SET value = ? WHERE key = 'rollup_ivwm'",
				 -1, &wm, NULL);
	if (rc) {
		err = -EIO;
		goto out;
	}
	sqlite3_bind_int(sel, 1, ROLLUP_ROUND);
	while (!err && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
		last = sqlite3_column_int64(sel, 0);
		n++;
		if (sqlite3_column_int64(sel, 3) <= 0)
			continue;	/* none of its intervals stands for a sample */
		err = chunk_intervals_decode(&c, sqlite3_column_blob(sel, 2),
					     (size_t)sqlite3_column_bytes(sel, 2),
					     (uint64_t)sqlite3_column_int64(sel, 1));
		if (err) {
			log_warn("interval chunk %lld: undecodable (%s), its off-CPU samples not"
				 " rolled up", (long long)last, strerror(-err));
			err = 0;
			continue;
		}
		offcpu_chunk_samples(&c, 0, UINT64_MAX, fold_offcpu, f, &err);
	}
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = -EIO;
	if (!err && last >= 0) {
		sqlite3_bind_int64(wm, 1, last);
		err = sq_step_done(wm);
	}
out:
	sqlite3_finalize(sel);
	sqlite3_finalize(wm);
	ichunk_done(&c);
	return err ? err : n;
}

/*
 * Folds up to ROLLUP_ROUND new chunks into the rollups (and as many chunks of intervals that
 * stand for off-CPU samples): minute rows always; hour and day rows only for buckets already
 * built (rollup_build(): a row there is whole, so a late sample is added to it), the others
 * are built from the minutes when their bucket closes. >0: the larger count of chunks folded,
 * 0: none, -errno.
 */
static int rollup_round(struct sq *s)
{
	sqlite3_stmt *sel = NULL, *get = NULL, *put = NULL, *wm = NULL;
	struct fold f = { .s = s };
	struct chunk c = { .any_order = true };	/* sums: no time order needed */
	struct buf tmp = { 0 };
	int64_t last = -1;
	int rc, err = 0, n = 0, niv = 0;

	pthread_mutex_lock(&s->wmu);
	if (sq_step_done(s->st[ST_BEGIN])) {
		pthread_mutex_unlock(&s->wmu);
		return -EIO;
	}
	rc = sqlite3_prepare_v2(s->w, "SELECT id, labelset, kind, t_min, data FROM chunks WHERE id >"
				" (SELECT value FROM meta WHERE key = 'rollup_wm') ORDER BY id LIMIT ?",
				-1, &sel, NULL);
	rc |= sqlite3_prepare_v2(s->w, ROLLUP_GET, -1, &get, NULL);
	rc |= sqlite3_prepare_v2(s->w, ROLLUP_PUT, -1, &put, NULL);
	rc |= sqlite3_prepare_v2(s->w, "UPDATE meta SET value = ? WHERE key = 'rollup_wm'", -1, &wm,
				 NULL);
	if (rc || built_get(s->w, f.built)) {
		err = -EIO;
		goto out;
	}
	sqlite3_bind_int(sel, 1, ROLLUP_ROUND);
	while (!err && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
		uint64_t ls = (uint64_t)sqlite3_column_int64(sel, 1);
		uint64_t kind = (uint64_t)sqlite3_column_int64(sel, 2);

		last = sqlite3_column_int64(sel, 0);
		n++;
		err = chunk_samples_decode(&c, sqlite3_column_blob(sel, 4),
					   (size_t)sqlite3_column_bytes(sel, 4),
					   (uint64_t)sqlite3_column_int64(sel, 3));
		if (err) {
			log_warn("chunk %lld: undecodable (%s), not rolled up", (long long)last,
				 strerror(-err));
			err = 0;
			continue;
		}
		for (size_t i = 0; i < c.n && !err; i++)
			err = fold_sample(&f, kind, c.mixed ? c.labelset[i] : ls, c.stack[i],
					  c.t[i], c.value[i]);
	}
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = -EIO;
	sqlite3_reset(sel);
	if (!err) {
		niv = fold_intervals(&f);
		err = niv < 0 ? niv : 0;
	}
	for (size_t i = 0; i < f.rr.n && !err; i++)
		err = rollup_write(s, get, put, f.rr.accs[i], &tmp);
	if (!err && last >= 0) {
		sqlite3_bind_int64(wm, 1, last);
		err = sq_step_done(wm);
	}
out:
	sqlite3_finalize(sel);
	sqlite3_finalize(get);
	sqlite3_finalize(put);
	sqlite3_finalize(wm);
	if (err || sq_step_done(s->st[ST_COMMIT])) {
		log_warn("rollup: %s", err == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->w));
		sq_step_done(s->st[ST_ROLLBACK]);
		err = err ? err : -EIO;
	}
	pthread_mutex_unlock(&s->wmu);
	round_done(&f.rr);
	chunk_done(&c);
	buf_done(&tmp);
	return err ? err : n > niv ? n : niv;
}

int sq_rollup_rows(sqlite3 *db, int lv, uint64_t from, uint64_t to, int kind, const char *node,
		   bool (*node_ok)(void *ctx, const char *node), sq_rollup_row_cb cb, void *ctx)
{
	sqlite3_stmt *st;
	int rc, err = 0;

	if (from >= to)
		return 0;
	if (sqlite3_prepare_v2(db, "SELECT node, kind, bucket, data FROM rollups WHERE level = ?1"
			       " AND bucket >= ?2 AND bucket < ?3 AND (?4 < 0 OR kind = ?4) AND"
			       " (?5 IS NULL OR node = ?5)", -1, &st, NULL)) {
		sqlite3_finalize(st);
		return -EIO;
	}
	sqlite3_bind_int(st, 1, lv);
	sqlite3_bind_int64(st, 2, (int64_t)from);
	sqlite3_bind_int64(st, 3, (int64_t)to);
	sqlite3_bind_int(st, 4, kind);
	if (node)
		sqlite3_bind_text(st, 5, node, -1, SQLITE_STATIC);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *nd = (const char *)sqlite3_column_text(st, 0);
		int k = sqlite3_column_int(st, 1);
		uint64_t b = (uint64_t)sqlite3_column_int64(st, 2);
		const void *blob = sqlite3_column_blob(st, 3);
		size_t len = (size_t)sqlite3_column_bytes(st, 3);

		nd = nd ? nd : "";
		if (node_ok && !node_ok(ctx, nd))
			continue;
		if (lv && !len)		/* deferred: its bucket's rows of the level below */
			err = sq_rollup_rows(db, lv - 1, b, b + sq_level_ns[lv], k, nd, NULL, cb, ctx);
		else
			err = cb(ctx, nd, k, b, blob, len);
	}
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = -EIO;
	sqlite3_finalize(st);
	return err;
}

/* A row of the level below into the row being built (sq_rollup_rows() callback). */
struct build_ctx {
	struct rollup_round *rr;
	struct buf tmp;
	int lv;
	int64_t b;
};

static int build_add(void *ctx, const char *node, int kind, uint64_t bucket, const void *blob,
		     size_t len)
{
	struct build_ctx *c = ctx;
	struct racc *a = round_get(c->rr, (uint64_t)c->lv, (uint64_t)kind, (uint64_t)c->b, node);
	int err;

	if (!a)
		return -ENOMEM;
	a->child_bytes += len;
	err = rollup_decode(blob, len, &c->tmp, racc_merge, a);
	if (err == -EINVAL) {
		log_warn("rollup: an undecodable row of node '%s' in bucket %llu, left out of its"
			 " level-%d row", node, (unsigned long long)bucket, c->lv);
		err = 0;
	}
	return err;
}

/*
 * Builds node's row of each kind for bucket b of level lv from the rows of the level below: read
 * and merged on the read connection db, outside the writer lock (only this thread writes rollup
 * rows), then written in one short transaction. A row that would take more than
 * 1/ROLLUP_KEEP_DIV of the bytes it was built from is deferred instead (stored empty: readers
 * read those rows; on a node of short-lived threads an hour row repeats its minutes' entries
 * nearly one for one). 0 or -errno.
 */
static int build_node(struct sq *s, sqlite3 *db, int lv, int64_t b, const char *node)
{
	sqlite3_stmt *put = NULL;
	struct rollup_round rr = { 0 };
	struct build_ctx c = { .rr = &rr, .lv = lv, .b = b };
	uint8_t **z = NULL;
	size_t *zlen = NULL;
	int err;

	err = sq_rollup_rows(db, lv - 1, (uint64_t)b, (uint64_t)b + sq_level_ns[lv], -1, node, NULL,
			     build_add, &c);
	z = calloc(rr.n ? rr.n : 1, sizeof(*z));
	zlen = calloc(rr.n ? rr.n : 1, sizeof(*zlen));
	if (!err && (!z || !zlen))
		err = -ENOMEM;
	for (size_t i = 0; i < rr.n && !err; i++)
		err = rr.accs[i]->n ? racc_encode(rr.accs[i], &z[i], &zlen[i]) : 0;
	if (!err && rr.n) {
		pthread_mutex_lock(&s->wmu);
		err = sq_step_done(s->st[ST_BEGIN]) ||
		      sqlite3_prepare_v2(s->w, ROLLUP_PUT, -1, &put, NULL) ? -EIO : 0;
		for (size_t i = 0; i < rr.n && !err; i++) {
			bool keep = zlen[i] * ROLLUP_KEEP_DIV <= rr.accs[i]->child_bytes;

			if (!z[i])
				continue;
			err = row_put(put, rr.accs[i], keep ? ROW_BLOB : ROW_DEFERRED, z[i], zlen[i]);
			if (!err)
				__atomic_add_fetch(keep ? &s->n_rollups_kept[lv] :
						   &s->n_rollups_deferred[lv], 1, __ATOMIC_RELAXED);
		}
		sqlite3_finalize(put);
		if (err || sq_step_done(s->st[ST_COMMIT])) {
			sq_step_done(s->st[ST_ROLLBACK]);
			err = err ? err : -EIO;
		}
		pthread_mutex_unlock(&s->wmu);
	}
	for (size_t i = 0; z && i < rr.n; i++)
		free(z[i]);
	free(z);
	free(zlen);
	round_done(&rr);
	buf_done(&c.tmp);
	return err;
}

/* meta.rollup_built_<lv> = v, in its own short transaction. 0 or -EIO. */
static int built_set(struct sq *s, int lv, int64_t v)
{
	char sql[96];
	int err;

	snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO meta VALUES ('rollup_built_%d', %lld)", lv,
		 (long long)v);
	pthread_mutex_lock(&s->wmu);
	err = sqlite3_exec(s->w, sql, NULL, NULL, NULL) ? -EIO : 0;
	pthread_mutex_unlock(&s->wmu);
	return err;
}

/*
 * Builds the rows of level lv (hour or day) whose bucket closed ROLLUP_CLOSE_NS ago, bucket by
 * bucket, a node at a time (build_node()), and moves meta.rollup_built_<lv> past each bucket
 * once all its nodes are built; a day once all its hours are. Rewriting an hour or day row on
 * every fold would re-encode its whole bucket every 2 s; built once, a row is only rewritten
 * for a sample that comes late. No fold runs meanwhile (the same thread), so none is missed
 * between a node's row and the mark; a crash before the mark builds the bucket again. 0 or
 * -errno.
 */
static int rollup_build(struct sq *s, int lv)
{
	uint64_t width = sq_level_ns[lv];
	int err = 0;

	while (!err && !s->stopping) {
		sqlite3 *db = sq_pool_get(s);
		sqlite3_stmt *first = NULL, *nodes = NULL;
		int64_t built[LEVELS], target, b = -1;
		uint64_t t0 = mono_ns();
		size_t n = 0;
		int rc;

		if (!db)
			return -EIO;
		err = built_get(db, built);
		target = (int64_t)((wall_ns() - ROLLUP_CLOSE_NS) / width * width);
		if (built[lv - 1] != INT64_MAX && built[lv - 1] / (int64_t)width * (int64_t)width < target)
			target = built[lv - 1] / (int64_t)width * (int64_t)width;
		if (!err && built[lv] >= target) {
			sq_pool_put(s, db);
			break;
		}
		/* the first bucket with rows below: the empty ones before it need nothing */
		if (!err && sqlite3_prepare_v2(db, "SELECT min(bucket) FROM rollups WHERE level = ?1 AND"
					       " bucket >= ?2", -1, &first, NULL))
			err = -EIO;
		if (!err) {
			sqlite3_bind_int(first, 1, lv - 1);
			sqlite3_bind_int64(first, 2, built[lv]);
			if (sqlite3_step(first) == SQLITE_ROW &&
			    sqlite3_column_type(first, 0) != SQLITE_NULL)
				b = sqlite3_column_int64(first, 0) / (int64_t)width * (int64_t)width;
			if (b >= target)
				b = -1;		/* nothing left to build before target */
		}
		sqlite3_finalize(first);
		if (!err && b >= 0 &&
		    sqlite3_prepare_v2(db, "SELECT DISTINCT node FROM rollups WHERE level = ?1 AND"
				       " bucket >= ?2 AND bucket < ?3", -1, &nodes, NULL))
			err = -EIO;
		if (!err && b >= 0) {
			sqlite3_bind_int(nodes, 1, lv - 1);
			sqlite3_bind_int64(nodes, 2, b);
			sqlite3_bind_int64(nodes, 3, b + (int64_t)width);
			while (!err && !s->stopping && (rc = sqlite3_step(nodes)) == SQLITE_ROW) {
				const char *node = (const char *)sqlite3_column_text(nodes, 0);

				err = build_node(s, db, lv, b, node ? node : "");
				n++;
			}
		}
		sqlite3_finalize(nodes);
		sq_pool_put(s, db);
		if (s->stopping)
			break;	/* the bucket is built again next time */
		if (!err)
			err = built_set(s, lv, b >= 0 ? b + (int64_t)width : target);
		if (err)
			log_warn("rollup: building level %d: %s", lv,
				 err == -ENOMEM ? "out of memory" : "the database failed");
		else if (b >= 0)
			log_debug("rollup: level %d bucket %lld built: %zu nodes in %.3f s", lv,
				  (long long)b, n, (double)(mono_ns() - t0) / 1e9);
		if (b < 0)
			break;	/* else the next bucket with rows below */
	}
	return err;
}

/*
 * Builds the rows late samples left waiting (rollup_write()) once none came for
 * ROLLUP_LATE_QUIET_NS: hours first, a day once none of its hours waits. A failed one waits for
 * the next round.
 */
static void rollup_pending(struct sq *s)
{
	uint64_t now = mono_ns();

	for (int lv = 1; lv < LEVELS; lv++) {
		for (size_t i = 0; i < s->npend && !s->stopping;) {
			struct rollup_pending *p = &s->pend[i];
			bool wait = p->lv != lv || now - p->touched < ROLLUP_LATE_QUIET_NS;
			sqlite3 *db;
			int err;

			for (size_t j = 0; !wait && j < s->npend; j++) {
				const struct rollup_pending *q = &s->pend[j];

				wait = q->lv < lv && q->b >= p->b &&
				       q->b < p->b + (int64_t)sq_level_ns[lv] && !strcmp(q->node, p->node);
			}
			if (wait) {
				i++;
				continue;
			}
			db = sq_pool_get(s);
			err = db ? build_node(s, db, lv, p->b, p->node) : -EIO;
			sq_pool_put(s, db);
			if (err) {
				log_warn("rollup: building level %d again: %s", lv,
					 err == -ENOMEM ? "out of memory" : "the database failed");
				return;
			}
			free(p->node);
			s->pend[i] = s->pend[--s->npend];
			__atomic_store_n(&s->n_pending, s->npend, __ATOMIC_RELAXED);
		}
	}
}

/* The rows a late sample left waiting before a restart (data NULL), found again at start. */
void sq_rollup_pending_load(struct sq *s)
{
	sqlite3 *db = sq_pool_get(s);
	sqlite3_stmt *q = NULL;

	if (!db)
		return;
	if (!sqlite3_prepare_v2(db, "SELECT level, bucket, node FROM rollups WHERE level > 0 AND"
				" data IS NULL", -1, &q, NULL)) {
		while (sqlite3_step(q) == SQLITE_ROW) {
			const char *node = (const char *)sqlite3_column_text(q, 2);

			if (pending_touch(s, sqlite3_column_int(q, 0), sqlite3_column_int64(q, 1),
					  node ? node : ""))
				break;
		}
	}
	sqlite3_finalize(q);
	sq_pool_put(s, db);
}

/* One old row's entries into its node's accumulator (rollup_decode_v10 callback). */
struct v10_row {
	struct racc *a;
	uint64_t ls;
};

static int v10_add(void *ctx, uint64_t stack, int64_t sum, uint64_t count)
{
	struct v10_row *r = ctx;

	return racc_add(r->a, r->ls, stack, sum, count);
}

int sq_rollups_convert_v10(struct sq *s, char *err, size_t errlen)
{
	sqlite3_stmt *sel = NULL, *put = NULL;
	struct rollup_round rr = { 0 };
	struct buf tmp = { 0 };
	uint64_t t0 = mono_ns(), level = 0, kind = 0, bucket = 0, last_ls = 0, rows = 0;
	uint64_t hour = (wall_ns() - ROLLUP_CLOSE_NS) / HOUR_NS * HOUR_NS;
	const char *node = NULL;
	char sql[256];
	int rc = SQLITE_DONE, e = 0;

	if (sqlite3_prepare_v2(s->w, "SELECT 1 FROM sqlite_schema WHERE name = 'rollups_v10'", -1,
			       &sel, NULL) || sqlite3_step(sel) != SQLITE_ROW) {
		sqlite3_finalize(sel);
		return 0;	/* nothing to convert */
	}
	sqlite3_finalize(sel);
	sel = NULL;
	if (sqlite3_exec(s->w, "BEGIN IMMEDIATE", NULL, NULL, NULL) ||
	    sqlite3_prepare_v2(s->w, "SELECT level, kind, bucket, labelset, data FROM rollups_v10"
			       " ORDER BY level, kind, bucket", -1, &sel, NULL) ||
	    sqlite3_prepare_v2(s->w, ROLLUP_PUT, -1, &put, NULL))
		e = -EIO;
	while (!e && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
		uint64_t lv = (uint64_t)sqlite3_column_int64(sel, 0);
		uint64_t k = (uint64_t)sqlite3_column_int64(sel, 1);
		uint64_t b = (uint64_t)sqlite3_column_int64(sel, 2);
		struct v10_row r = { NULL, (uint64_t)sqlite3_column_int64(sel, 3) };

		if (rr.n && (lv != level || k != kind || b != bucket)) {	/* a bucket done */
			for (size_t i = 0; i < rr.n && !e; i++)
				e = racc_put(put, rr.accs[i]);
			round_done(&rr);
		}
		level = lv, kind = k, bucket = b;
		rows++;
		r.a = round_get(&rr, lv, k, b, ls_node(s, r.ls, &last_ls, &node));
		if (!r.a) {
			e = -ENOMEM;
			break;
		}
		if (rollup_decode_v10(sqlite3_column_blob(sel, 4), (size_t)sqlite3_column_bytes(sel, 4),
				      &tmp, v10_add, &r) == -ENOMEM)
			e = -ENOMEM;	/* an undecodable row: what it held before the fault */
	}
	if (!e && rc != SQLITE_DONE)
		e = -EIO;
	for (size_t i = 0; i < rr.n && !e; i++)
		e = racc_put(put, rr.accs[i]);
	sqlite3_finalize(sel);
	sqlite3_finalize(put);
	/* every hour and day row of schema 10 is whole: the closed buckets count as built */
	snprintf(sql, sizeof(sql), "DROP TABLE rollups_v10; INSERT OR REPLACE INTO meta VALUES"
		 " ('rollup_built_1', %lld), ('rollup_built_2', %lld)", (long long)hour,
		 (long long)(hour / DAY_NS * DAY_NS));
	if (!e && (sqlite3_exec(s->w, sql, NULL, NULL, NULL) ||
		   sqlite3_exec(s->w, "COMMIT", NULL, NULL, NULL)))
		e = -EIO;
	round_done(&rr);
	buf_done(&tmp);
	if (e) {
		snprintf(err, errlen, "converting the rollups of '%s' to schema 11: %s", s->path,
			 e == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->w));
		if (!sqlite3_get_autocommit(s->w))
			sqlite3_exec(s->w, "ROLLBACK", NULL, NULL, NULL);
		return -1;
	}
	log_info("store: %llu rollup rows of '%s' converted to schema 11 in %.1f s",
		 (unsigned long long)rows, s->path, (double)(mono_ns() - t0) / 1e9);
	sq_vacuum(s, "the rollups' conversion");
	return 0;
}

/*
 * Empties the WAL once ingest has paused for WAL_IDLE_NS: a checkpoint that copies it into the
 * database (synced first: synchronous=FULL) and truncates it to 0 bytes, so that between pushes
 * the store on disk is its database alone instead of the WAL's high-water size (up to
 * journal_size_limit after an automatic checkpoint). It never waits: while a reader still uses
 * the WAL's frames it copies what it can and leaves the truncation to the next round.
 */
static void wal_truncate_if_idle(struct sq *s)
{
	char p[4096];
	struct stat sb;
	int rc;

	snprintf(p, sizeof(p), "%s-wal", s->path);
	if (stat(p, &sb) || sb.st_size == 0 ||
	    mono_ns() - __atomic_load_n(&s->last_commit_ns, __ATOMIC_RELAXED) < WAL_IDLE_NS)
		return;
	pthread_mutex_lock(&s->wmu);
	sqlite3_busy_timeout(s->w, 0);
	rc = sqlite3_wal_checkpoint_v2(s->w, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
	sqlite3_busy_timeout(s->w, SQ_BUSY_TIMEOUT_MS);
	pthread_mutex_unlock(&s->wmu);
	if (rc == SQLITE_OK)
		__atomic_add_fetch(&s->n_wal_truncations, 1, __ATOMIC_RELAXED);
}

void *sq_maint_main(void *arg)
{
	struct sq *s = arg;
	uint64_t last_ret = 0;

	pthread_mutex_lock(&s->mmu);
	while (!s->stopping) {
		struct timespec ts;
		uint64_t period = s->o.enforce_period_ns < ROLLUP_PERIOD_NS ? s->o.enforce_period_ns
										: ROLLUP_PERIOD_NS;
		uint64_t until = wall_ns() + period;
		bool more;
		int n;

		pthread_mutex_unlock(&s->mmu);
		do
			n = rollup_round(s);
		while (n == ROLLUP_ROUND && !s->stopping);
		for (int lv = 1; lv < LEVELS && n >= 0 && !s->stopping; lv++)
			rollup_build(s, lv);
		if (n >= 0 && !s->stopping)
			rollup_pending(s);
		if (wall_ns() - last_ret >= s->o.enforce_period_ns) {
			sq_enforce_retention(s);
			last_ret = wall_ns();
		}
		more = !s->stopping && sq_recompress(s);
		if (!s->stopping)
			wal_truncate_if_idle(s);
		pthread_mutex_lock(&s->mmu);
		if (s->stopping)
			break;
		if (more)
			until = wall_ns();	/* recompression left some: go on after the rollups */
		ts.tv_sec = (time_t)(until / NSEC_PER_SEC);
		ts.tv_nsec = (long)(until % NSEC_PER_SEC);
		pthread_cond_timedwait(&s->mcond, &s->mmu, &ts);
	}
	pthread_mutex_unlock(&s->mmu);
	return NULL;
}

