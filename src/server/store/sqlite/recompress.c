/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Background recompression (docs/server.md "Storage"): ingest compresses its blobs at a fast
 * zstd level (CHUNK_ZLEVEL); once a blob can no longer change (sample chunks once rolled up;
 * interval chunks, point chunks and dictionary blocks once committed) the maintenance thread
 * compresses it again at a high level, outside the writer lock, and writes it back where it is
 * shorter. The bytes it decompresses to are the same, so readers need no change and a store
 * stays readable by servers of the same schema that never recompress.
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
	return total;
}
