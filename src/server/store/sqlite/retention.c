/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention of the SQLite store: what is older than --retention (raw chunks: older than
 * --raw-retention and rolled up) is deleted in bounded rounds, so ingest is never blocked long.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include "common/log.h"
#include "common/util.h"
#include "server/store/sqlite/sqlite.h"
/* Runs one bounded DELETE; returns rows deleted or -EIO. */
static int64_t delete_round(struct sq *s, const char *sql, int64_t a, int64_t b)
{
	sqlite3_stmt *st = NULL;
	int64_t n = -EIO;

	pthread_mutex_lock(&s->wmu);
	if (sqlite3_prepare_v2(s->w, sql, -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, a);
		sqlite3_bind_int64(st, 2, b);
		sqlite3_bind_int(st, 3, DELETE_ROUND);
		if (sqlite3_step(st) == SQLITE_DONE)
			n = sqlite3_changes(s->w);
	}
	if (n < 0)
		log_warn("retention: %s", sqlite3_errmsg(s->w));
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->wmu);
	return n;
}

static int64_t delete_all(struct sq *s, const char *sql, int64_t a, int64_t b)
{
	int64_t total = 0, n;

	do {
		n = delete_round(s, sql, a, b);
		if (n > 0)
			total += n;
	} while (n == DELETE_ROUND && !s->stopping);
	return total;
}

void sq_enforce_retention(struct sq *s)
{
	uint64_t now = wall_ns(), raw = sq_raw_retention_ns(s);
	int64_t cut = (int64_t)(now - s->o.retention_ns), raw_cut = (int64_t)(now - raw), n;

	/* Raw chunks only once rolled up (id <= watermark). */
	n = delete_all(s, "DELETE FROM chunks WHERE id IN (SELECT id FROM chunks WHERE t_max < ?1"
			  " AND id <= (SELECT value FROM meta WHERE key = 'rollup_wm') AND ?2 = ?2"
			  " LIMIT ?3)", raw_cut, 0);
	__atomic_add_fetch(&s->n_raw_deleted, (uint64_t)n, __ATOMIC_RELAXED);
	n = 0;
	for (int lv = 0; lv < LEVELS; lv++)
		n += delete_all(s, "DELETE FROM rollups WHERE (level, kind, bucket, labelset) IN"
				   " (SELECT level, kind, bucket, labelset FROM rollups WHERE level = ?2"
				   " AND bucket <= ?1 LIMIT ?3)", cut - (int64_t)sq_level_ns[lv], lv);
	__atomic_add_fetch(&s->n_rollups_deleted, (uint64_t)n, __ATOMIC_RELAXED);
	n = delete_all(s, "DELETE FROM points WHERE id IN (SELECT id FROM points WHERE t_max < ?1"
			  " AND ?2 = ?2 LIMIT ?3)", cut, 0);
	n = delete_all(s, "DELETE FROM intervals WHERE id IN (SELECT id FROM intervals WHERE"
			  " end_ns < ?1 AND ?2 = ?2 LIMIT ?3)", cut, 0);
	n = delete_all(s, "DELETE FROM batches WHERE id IN (SELECT id FROM batches WHERE t < ?1"
			  " AND ?2 = ?2 LIMIT ?3)", cut, 0);
}

