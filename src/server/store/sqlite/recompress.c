/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Background recompression (docs/server.md "Storage"): ingest compresses its blobs at a fast
 * zstd level (CHUNK_ZLEVEL); once a blob can no longer change (sample chunks once rolled up;
 * interval chunks, point chunks and dictionary blocks once committed) the maintenance thread
 * compresses it again at a high level, outside the writer lock, and writes it back where it is
 * shorter. The bytes it decompresses to are the same, so readers need no change and a store
 * stays readable by servers of the same schema that never recompress.
 *
 * Then it merges the blocks of the stack-block format (stacks, label sets, strings: a batch's
 * new entries each) that it recompressed, consecutive ones into a block of at least
 * MZ_RAW_BYTES of entries or MZ_ROWS blocks, compressed at the same level: a batch's new stacks
 * repeat the root-side frames of the batches before, which zstd finds only inside one frame.
 * A merged block is a block like any other (ids ascending, keyed by its first id, `last` its
 * last), so readers and dictionary GC need no change either.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <zstd.h>
#include "common/log.h"
#include "common/util.h"
#include "server/store/sqlite/sqlite.h"

#define RZ_ROWS		64			/* rows read per round */
#define RZ_ROUND_BYTES	(2u << 20)		/* stored bytes per round, at most (about) */
#define RZ_BUDGET_NS	(1 * NSEC_PER_SEC)	/* recompression per maintenance cycle */
#define MZ_RAW_BYTES	(1u << 20)		/* a merged block's entries, decompressed */
#define MZ_ROWS		64			/* ...or this many blocks merged */
#define MZ2_RAW_BYTES	(4u << 20)		/* merged blocks merged again, as large */
#define MZ2_ROWS	16

/* The tables whose blobs settle, and the meta key of each one's watermark (ids done). */
static const struct rz_table {
	const char *table, *wm;
	bool rolled_up;		/* only rows at or below meta.rollup_wm */
} rz_tables[] = {
	{ "chunks", "rz_chunks", true },
	{ "ivchunks", "rz_ivchunks", false },
	{ "points", "rz_points", false },
	{ "locblocks", "rz_locblocks", false },
	{ "stackblocks", "rz_stackblocks", false },
	{ "lsblocks", "rz_lsblocks", false },
	{ "strblocks", "rz_strblocks", false },
};

/* The tables whose blocks are merged (stack-block format), their merge and recompression
 * watermarks. */
static const struct mz_table {
	const char *table, *wm, *rz, *wm2;
} mz_tables[MZ_TABLES] = {
	{ "stackblocks", "mz_stackblocks", "rz_stackblocks", "mz2_stackblocks" },
	{ "lsblocks", "mz_lsblocks", "rz_lsblocks", "mz2_lsblocks" },
	{ "strblocks", "mz_strblocks", "rz_strblocks", "mz2_strblocks" },
};

/*
 * A merge level: the blocks past watermark wm up to the block whose key is in meta key upto,
 * merged in groups of raw bytes of entries or rows blocks. Level 1 merges a batch's blocks
 * once recompressed (upto: the recompression's watermark); level 2 merges level 1's blocks
 * again into groups four times as large (upto: level 1's watermark): zstd finds more of the
 * root-side frames new stacks repeat in a larger frame (the churning hour's stack blocks
 * 4.05 -> 3.59 MB merged in 4 MiB instead of 1 MiB), and the last, incomplete group of
 * level 1 stays small.
 */
struct mz_level {
	const char *wm, *upto;
	size_t raw, rows;
};

struct rz_row {
	int64_t id;
	void *old;		/* the blob read (the UPDATE checks it is still the row's) */
	size_t old_len;
	uint8_t *z;
	size_t zlen;
};

static uint64_t thread_cpu_ns(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru))
		return 0;
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * NSEC_PER_SEC +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

/*
 * One round over table t: reads up to RZ_ROWS rows past its watermark on a read connection,
 * recompresses them unlocked, then writes the shorter ones back and moves the watermark in one
 * short write transaction. 1 when rows were looked at, 0 when none is waiting, -errno.
 */
static int rz_round(struct sq *s, const struct rz_table *t, void *zctx, struct buf *tmp)
{
	struct rz_row rows[RZ_ROWS];
	sqlite3_stmt *sel = NULL, *upd = NULL, *wm = NULL;
	sqlite3 *db = sq_pool_get(s);
	size_t n = 0, bytes = 0;
	int64_t last = -1;
	char sql[256];
	int rc, err = 0;

	if (!db)
		return -EIO;
	snprintf(sql, sizeof(sql), "SELECT id, data FROM %s WHERE id > (SELECT value FROM meta"
		 " WHERE key = '%s')%s ORDER BY id LIMIT %d", t->table, t->wm,
		 t->rolled_up ? " AND id <= (SELECT value FROM meta WHERE key = 'rollup_wm')" : "",
		 RZ_ROWS);
	if (sqlite3_prepare_v2(db, sql, -1, &sel, NULL)) {
		sq_pool_put(s, db);
		return -EIO;
	}
	while (bytes < RZ_ROUND_BYTES && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
		const void *blob = sqlite3_column_blob(sel, 1);
		size_t len = (size_t)sqlite3_column_bytes(sel, 1);
		struct rz_row *r = &rows[n];
		uint64_t c0 = thread_cpu_ns();
		int got;

		last = sqlite3_column_int64(sel, 0);
		bytes += len;
		*r = (struct rz_row){ .id = last };
		got = blob_recompress(blob, len, zctx, s->o.recompress_level, tmp, &r->z, &r->zlen);
		__atomic_add_fetch(&s->n_rz_cpu_ns, thread_cpu_ns() - c0, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_rz_in, len, __ATOMIC_RELAXED);
		if (got <= 0) {
			/* not shorter (or not ours to read: left as it is) */
			__atomic_add_fetch(&s->n_rz_out, len, __ATOMIC_RELAXED);
			continue;
		}
		r->old = malloc(len);
		if (!r->old) {
			free(r->z);
			err = -ENOMEM;
			break;
		}
		memcpy(r->old, blob, len);
		r->old_len = len;
		n++;
	}
	sqlite3_finalize(sel);
	sq_pool_put(s, db);
	if (err || last < 0)
		goto out;
	pthread_mutex_lock(&s->wmu);
	snprintf(sql, sizeof(sql), "UPDATE %s SET data = ?1 WHERE id = ?2 AND data = ?3", t->table);
	if (sq_step_done(s->st[ST_BEGIN]) || sqlite3_prepare_v2(s->w, sql, -1, &upd, NULL)) {
		err = -EIO;
	} else {
		snprintf(sql, sizeof(sql), "UPDATE meta SET value = ?1 WHERE key = '%s'", t->wm);
		if (sqlite3_prepare_v2(s->w, sql, -1, &wm, NULL))
			err = -EIO;
	}
	for (size_t i = 0; !err && i < n; i++) {
		sqlite3_bind_blob(upd, 1, rows[i].z, (int)rows[i].zlen, SQLITE_STATIC);
		sqlite3_bind_int64(upd, 2, rows[i].id);
		sqlite3_bind_blob(upd, 3, rows[i].old, (int)rows[i].old_len, SQLITE_STATIC);
		err = sq_step_done(upd);
		/* a row gone meanwhile (retention) or written again (dictionary GC) is left alone */
		__atomic_add_fetch(&s->n_rz_out,
				   sqlite3_changes(s->w) ? rows[i].zlen : rows[i].old_len,
				   __ATOMIC_RELAXED);
	}
	if (!err) {
		sqlite3_bind_int64(wm, 1, last);
		err = sq_step_done(wm);
	}
	sqlite3_finalize(upd);
	sqlite3_finalize(wm);
	if (sq_end_write(s->w, err))
		err = -EIO;
	pthread_mutex_unlock(&s->wmu);
out:
	for (size_t i = 0; i < n; i++) {
		free(rows[i].old);
		free(rows[i].z);
	}
	if (err)
		return err;
	return last >= 0;
}

/* The blocks a merge reads: their entries appended, each block's stored bytes kept (the
 * DELETE checks they are still the row's). */
struct mz_group {
	int64_t key[MZ_ROWS];
	void *old[MZ_ROWS];
	size_t old_len[MZ_ROWS], n, raw;
	int64_t last;
	uint64_t *ids;
	size_t *lens, *offs, nent, cap;
	struct buf locs;	/* the entries' bytes back to back */
	bool bad;		/* the block after the group does not decode or does not ascend */
};

static void mz_group_done(struct mz_group *g)
{
	for (size_t i = 0; i < g->n; i++)
		free(g->old[i]);
	free(g->ids);
	free(g->lens);
	free(g->offs);
	buf_done(&g->locs);
}

/* Appends block (key, last, blob) to g. 0, 1 when it cannot join (g->bad), -ENOMEM. */
static int mz_add(struct mz_group *g, struct sblock *b, int64_t key, int64_t last,
		  const void *blob, size_t len)
{
	if (stack_block_decode(b, blob, len) || !b->n ||
	    (g->nent && b->id[0] <= g->ids[g->nent - 1])) {
		g->bad = true;
		return 1;
	}
	if (g->nent + b->n > g->cap) {
		size_t ncap = g->cap ? g->cap : 1024;

		while (ncap < g->nent + b->n)
			ncap *= 2;
		uint64_t *ids = realloc(g->ids, ncap * sizeof(*ids));

		if (ids)
			g->ids = ids;
		size_t *lens = ids ? realloc(g->lens, ncap * sizeof(*lens)) : NULL;

		if (lens)
			g->lens = lens;
		size_t *offs = lens ? realloc(g->offs, ncap * sizeof(*offs)) : NULL;

		if (!offs)
			return -ENOMEM;
		g->offs = offs;
		g->cap = ncap;
	}
	g->old[g->n] = malloc(len ? len : 1);
	if (!g->old[g->n])
		return -ENOMEM;
	memcpy(g->old[g->n], blob, len);
	g->old_len[g->n] = len;
	g->key[g->n++] = key;
	if (last > g->last)
		g->last = last;
	for (size_t i = 0; i < b->n; i++) {
		g->ids[g->nent] = b->id[i];
		g->lens[g->nent] = b->len[i];
		g->offs[g->nent++] = g->locs.len;
		buf_put(&g->locs, b->locs[i], b->len[i]);
	}
	g->raw += b->raw.len;
	return g->locs.oom ? -ENOMEM : 0;
}

/* Moves a level's merge watermark to key (a block that cannot be merged stays as it is). */
static int mz_skip(struct sq *s, const struct mz_level *lv, int64_t key)
{
	char sql[128];
	int err;

	snprintf(sql, sizeof(sql), "UPDATE meta SET value = %lld WHERE key = '%s'",
		 (long long)key, lv->wm);
	pthread_mutex_lock(&s->wmu);
	err = sqlite3_exec(s->w, sql, NULL, NULL, NULL) ? -EIO : 0;
	pthread_mutex_unlock(&s->wmu);
	return err;
}

/*
 * One merge of level lv over table t: reads the blocks past the level's watermark on a read
 * connection until they hold lv->raw bytes of entries or are lv->rows, merges and compresses
 * them unlocked, then replaces them in one short write transaction (none of them changed
 * meanwhile: else nothing, tried again next cycle). 1 when it merged (or stepped over a block
 * that cannot be merged), 0 when no group is complete (*tail: the blocks waiting), -errno.
 */
static int mz_round(struct sq *s, const struct mz_table *t, const struct mz_level *lv,
		    void *zctx, struct buf *tmp, size_t *tail)
{
	struct mz_group g = { .last = 0 };
	struct sblock b = { 0 };
	sqlite3_stmt *sel = NULL, *del = NULL, *ins = NULL, *wm = NULL;
	sqlite3 *db = sq_pool_get(s);
	const uint8_t **locs = NULL;
	uint8_t *z = NULL, *zz = NULL;
	size_t zlen = 0, zzlen = 0;
	int64_t next = -1;
	uint64_t c0;
	char sql[320];
	int rc, err = 0;

	*tail = 0;
	if (!db)
		return -EIO;
	snprintf(sql, sizeof(sql), "SELECT id, last, data FROM %s WHERE id > (SELECT value FROM"
		 " meta WHERE key = '%s') AND id <= (SELECT value FROM meta WHERE key = '%s')"
		 " ORDER BY id LIMIT %zu", t->table, lv->wm, lv->upto, lv->rows);
	if (sqlite3_prepare_v2(db, sql, -1, &sel, NULL)) {
		sq_pool_put(s, db);
		return -EIO;
	}
	c0 = thread_cpu_ns();
	while (!err && g.raw < lv->raw && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
		next = sqlite3_column_int64(sel, 0);
		err = mz_add(&g, &b, next, sqlite3_column_int64(sel, 1),
			     sqlite3_column_blob(sel, 2), (size_t)sqlite3_column_bytes(sel, 2));
		if (err == 1) {
			err = 0;
			break;
		}
	}
	sqlite3_finalize(sel);
	sq_pool_put(s, db);
	sblock_done(&b);
	if (err)
		goto out;
	if (g.bad && !g.n) {
		/* the first block past the watermark cannot be merged: stays, the next are tried */
		err = mz_skip(s, lv, next);
		rc = err ? err : 1;
		goto out;
	}
	if (!g.bad && g.raw < lv->raw && g.n < lv->rows) {
		*tail = g.n;	/* not enough yet: the group waits for more batches */
		rc = 0;
		goto out;
	}
	if (g.n == 1) {		/* large enough alone: recompressed already */
		err = mz_skip(s, lv, g.key[0]);
		rc = err ? err : 1;
		goto out;
	}
	locs = malloc(g.nent * sizeof(*locs));
	if (!locs) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < g.nent; i++)
		locs[i] = g.locs.p + g.offs[i];
	err = stack_block_encode(g.ids, locs, g.lens, g.nent, &z, &zlen);
	if (!err) {
		rc = blob_recompress(z, zlen, zctx, s->o.recompress_level, tmp, &zz, &zzlen);
		if (rc > 0) {
			free(z);
			z = zz;
			zlen = zzlen;
		} else if (rc < 0) {
			err = rc;
		}
	}
	__atomic_add_fetch(&s->n_rz_cpu_ns, thread_cpu_ns() - c0, __ATOMIC_RELAXED);
	if (err)
		goto out;
	pthread_mutex_lock(&s->wmu);
	snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE id = ?1 AND data = ?2", t->table);
	if (sq_step_done(s->st[ST_BEGIN]) || sqlite3_prepare_v2(s->w, sql, -1, &del, NULL))
		err = -EIO;
	snprintf(sql, sizeof(sql), "INSERT INTO %s(id, last, data) VALUES (?1, ?2, ?3)", t->table);
	if (!err && sqlite3_prepare_v2(s->w, sql, -1, &ins, NULL))
		err = -EIO;
	snprintf(sql, sizeof(sql), "UPDATE meta SET value = ?1 WHERE key = '%s'", lv->wm);
	if (!err && sqlite3_prepare_v2(s->w, sql, -1, &wm, NULL))
		err = -EIO;
	for (size_t i = 0; !err && i < g.n; i++) {
		sqlite3_bind_int64(del, 1, g.key[i]);
		sqlite3_bind_blob(del, 2, g.old[i], (int)g.old_len[i], SQLITE_STATIC);
		err = sq_step_done(del);
		if (!err && sqlite3_changes(s->w) != 1)
			err = -EAGAIN;	/* gone or written again (dictionary GC) meanwhile */
	}
	if (!err) {
		sqlite3_bind_int64(ins, 1, g.key[0]);
		sqlite3_bind_int64(ins, 2, g.last);
		sqlite3_bind_blob(ins, 3, z, (int)zlen, SQLITE_STATIC);
		err = sq_step_done(ins);
	}
	if (!err) {
		sqlite3_bind_int64(wm, 1, g.key[g.n - 1]);
		err = sq_step_done(wm);
	}
	sqlite3_finalize(del);
	sqlite3_finalize(ins);
	sqlite3_finalize(wm);
	if (sq_end_write(s->w, err) && !err)
		err = -EIO;
	pthread_mutex_unlock(&s->wmu);
	if (!err) {
		size_t in = 0;

		for (size_t i = 0; i < g.n; i++)
			in += g.old_len[i];
		__atomic_add_fetch(&s->n_mz_blocks, g.n, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_mz_in, in, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_mz_out, zlen, __ATOMIC_RELAXED);
	}
	rc = err == -EAGAIN ? 0 : err ? err : 1;
	err = 0;
out:
	free(z);
	free(locs);
	mz_group_done(&g);
	return err ? err : rc;
}

bool sq_recompress(struct sq *s)
{
	uint64_t t0 = mono_ns();
	struct buf tmp = { 0 };
	ZSTD_CCtx *zctx;
	bool more = false;

	if (!s->o.recompress_level)
		return false;
	zctx = ZSTD_createCCtx();
	if (!zctx)
		return false;
	for (size_t i = 0; i < sizeof(rz_tables) / sizeof(rz_tables[0]) && !s->stopping; i++) {
		int rc;

		while ((rc = rz_round(s, &rz_tables[i], zctx, &tmp)) > 0 && !s->stopping &&
		       mono_ns() - t0 < RZ_BUDGET_NS)
			;
		if (rc < 0) {
			log_warn("recompress %s: %s", rz_tables[i].table,
				 rc == -ENOMEM ? "out of memory" : "database error");
			break;
		}
		if (rc > 0) {
			more = true;	/* out of budget: the rest next cycle */
			break;
		}
	}
	for (size_t i = 0; i < 2 * MZ_TABLES && !more && !s->stopping; i++) {
		const struct mz_table *t = &mz_tables[i % MZ_TABLES];
		const struct mz_level lv = i < MZ_TABLES ?
			(struct mz_level){ t->wm, t->rz, MZ_RAW_BYTES, MZ_ROWS } :
			(struct mz_level){ t->wm2, t->wm, MZ2_RAW_BYTES, MZ2_ROWS };
		size_t tail = 0;
		int rc;

		while ((rc = mz_round(s, t, &lv, zctx, &tmp, &tail)) > 0 && !s->stopping &&
		       mono_ns() - t0 < RZ_BUDGET_NS)
			;
		__atomic_store_n(&s->mz_tail[i], rc == 0 ? tail : 0, __ATOMIC_RELAXED);
		if (rc < 0) {
			log_warn("merge %s: %s", t->table,
				 rc == -ENOMEM ? "out of memory" : "database error");
			break;
		}
		if (rc > 0)
			more = true;
	}
	ZSTD_freeCCtx(zctx);
	buf_done(&tmp);
	return more;
}

int64_t sq_recompress_lag(struct sq *s, sqlite3 *db)
{
	int64_t total = 0;

	if (!s->o.recompress_level)
		return 0;
	for (size_t i = 0; i < sizeof(rz_tables) / sizeof(rz_tables[0]); i++) {
		const struct rz_table *t = &rz_tables[i];
		sqlite3_stmt *st;
		char sql[256];
		int64_t v = 0;

		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE id > (SELECT value FROM meta"
			 " WHERE key = '%s')%s", t->table, t->wm,
			 t->rolled_up ? " AND id <= (SELECT value FROM meta WHERE key = 'rollup_wm')" :
					"");
		if (sqlite3_prepare_v2(db, sql, -1, &st, NULL))
			return -EIO;
		if (sq_step_i64(st, &v) > 0)
			total += v;
		sqlite3_finalize(st);
	}
	/* blocks of either merge level that a complete group would merge (the last group waits) */
	for (size_t i = 0; i < 2 * MZ_TABLES; i++) {
		const struct mz_table *t = &mz_tables[i % MZ_TABLES];
		sqlite3_stmt *st;
		char sql[256];
		int64_t v = 0, tail = (int64_t)__atomic_load_n(&s->mz_tail[i], __ATOMIC_RELAXED);

		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE id > (SELECT value FROM meta"
			 " WHERE key = '%s') AND id <= (SELECT value FROM meta WHERE key = '%s')",
			 t->table, i < MZ_TABLES ? t->wm : t->wm2, i < MZ_TABLES ? t->rz : t->wm);
		if (sqlite3_prepare_v2(db, sql, -1, &st, NULL))
			return -EIO;
		if (sq_step_i64(st, &v) > 0 && v > tail)
			total += v - tail;
		sqlite3_finalize(st);
	}
	return total;
}
