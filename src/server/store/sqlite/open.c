/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The SQLite store's lifetime: schema, the writer connection and its prepared statements, the
 * read connection pool, open, close and stats. One database in WAL mode (docs/server.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/log.h"
#include "common/util.h"
#include "server/store/sqlite/sqlite.h"

const uint64_t sq_level_ns[LEVELS] = { MINUTE_NS, HOUR_NS, DAY_NS };

static const char *const wsql[ST_MAX] = {
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_BATCH_SEEN] = "SELECT 1 FROM batches WHERE id = ?",
	[ST_BATCH_ADD] = "INSERT INTO batches(id, node, t) VALUES (?, ?, ?)",
	/* label sets added in the open transaction (the committed ones are all in memory): a
	 * temporary table of the writer connection, emptied as each transaction begins, that a
	 * batch's savepoint rolls back with the rest of its rows */
	[ST_LS_GET] = "SELECT id FROM temp.ls_new WHERE hash = ?1",
	[ST_LS_NEW] = "INSERT INTO temp.ls_new(hash, id) VALUES (?1, ?2)",
	[ST_LS_NEW_CLEAR] = "DELETE FROM temp.ls_new",
	[ST_LS_SEQ] = "UPDATE meta SET value = ? WHERE key = 'ls_seq'",
	/* label sets' extents (lsext.c) */
	[ST_LSEXT_GET] = "SELECT data FROM lsext WHERE id = ?",
	[ST_LSEXT_PUT] = "INSERT OR REPLACE INTO lsext(id, data) VALUES (?, ?)",
	[ST_LSEXT_DEL] = "DELETE FROM lsext WHERE id = ?",
	[ST_LSBLOCK_ADD] = "INSERT INTO lsblocks(id, last, data) VALUES (?, ?, ?)",
	/* OR REPLACE: the migration to schema 10 writes blocks again under their key */
	[ST_LOCBLOCK_ADD] = "INSERT OR REPLACE INTO locblocks(id, last, data) VALUES (?, ?, ?)",
	[ST_LOC_SEQ] = "UPDATE meta SET value = ? WHERE key = 'loc_seq'",
	[ST_STRBLOCK_ADD] = "INSERT INTO strblocks(id, last, data) VALUES (?, ?, ?)",
	[ST_STR_SEQ] = "UPDATE meta SET value = ? WHERE key = 'str_seq'",
	[ST_STACKDAYS_ADD] = "INSERT INTO stackdays(day, data) VALUES (?, ?)",
	[ST_STACKBLOCK_ADD] = "INSERT INTO stackblocks(id, last, data) VALUES (?, ?, ?)",
	[ST_STACK_SEQ] = "UPDATE meta SET value = ? WHERE key = 'stack_seq'",
	[ST_CHUNK_ADD] = "INSERT INTO chunks(labelset, kind, t_min, t_max, n, data)"
			 " VALUES (?, ?, ?, ?, ?, ?)",
	[ST_SERIES_GET] = "SELECT id FROM series WHERE hash = ?",
	[ST_SERIES_ADD] = "INSERT INTO series(hash, name, labelset) VALUES (?, ?, ?)",
	[ST_POINTS_ADD] = "INSERT INTO points(series, t_min, t_max, n, data) VALUES (?, ?, ?, ?, ?)",
	[ST_IVL_ADD] = "INSERT INTO ivchunks(kind, t_min, t_max, n, data) VALUES (?, ?, ?, ?, ?)",
	[ST_OFFCPU_IV_ADD] = "INSERT INTO offcpu_ivs(id, t_max, n)"
			     " VALUES (last_insert_rowid(), ?, ?)",
	[ST_IVL_SEQ] = "UPDATE meta SET value = ? WHERE key = 'ivl_seq'",
	[ST_NODE_UP] = "INSERT INTO nodes(node, first_ns, last_ns) VALUES (?1, ?2, ?3) ON CONFLICT(node)"
		       " DO UPDATE SET first_ns = min(first_ns, ?2), last_ns = max(last_ns, ?3)",
	[ST_PERIOD_SET] = "INSERT INTO meta(key, value) VALUES ('period_ns:' || ?1, ?2) ON CONFLICT(key)"
			  " DO UPDATE SET value = ?2",
};

/*
 * Schema 4 (docs/server.md "Storage"): label sets, locations and stacks are stored in compressed
 * blocks (a batch's new ones together) beside a table each (label sets: id, hash and time
 * extent; locations and stacks: content hash -> id), a stack's location ids delta-coded; samples
 * and intervals in compressed chunks per kind and batch, written in format 2 (chunk.h; schema
 * 3's too), format 1 (schema 2's) still read. Older stores are migrated in place at open
 * (migrate.c).
 */
static const char schema[] =
	"CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER);"
	"INSERT OR IGNORE INTO meta VALUES ('rollup_wm', 0), ('ivl_seq', 0), ('loc_seq', 0),"
	" ('stack_seq', 0), ('str_seq', 0), ('ls_seq', 0);"
	/* background recompression: the last id of each table recompressed (recompress.c) */
	"INSERT OR IGNORE INTO meta VALUES ('rz_chunks', 0), ('rz_ivchunks', 0), ('rz_points', 0),"
	" ('rz_locblocks', 0), ('rz_stackblocks', 0), ('rz_lsblocks', 0), ('rz_strblocks', 0);"
	/* ...and the last block merged into a larger one (recompress.c) */
	"INSERT OR IGNORE INTO meta VALUES ('mz_stackblocks', 0), ('mz_lsblocks', 0),"
	" ('mz_strblocks', 0), ('mz2_stackblocks', 0), ('mz2_lsblocks', 0), ('mz2_strblocks', 0);"
	"CREATE TABLE IF NOT EXISTS batches(id INTEGER PRIMARY KEY, node TEXT, t INTEGER);"
	"CREATE INDEX IF NOT EXISTS batches_t ON batches(t);"
	"CREATE TABLE IF NOT EXISTS nodes(node TEXT PRIMARY KEY, first_ns INTEGER, last_ns INTEGER);"
	/* label sets: ids from meta.ls_seq, the time extents of their records in rows of 512
	 * consecutive ids (lsext.c; schema 14, a labelsets row each before); their contents
	 * ("n\0v\0...") in blocks of a batch's new ones, in the stack-block format (chunk.h).
	 * Found by content through an in-memory index of every committed one, its hashes
	 * computed from the blocks at open (schema 12; a hash column before) */
	"CREATE TABLE IF NOT EXISTS lsext(id INTEGER PRIMARY KEY, data BLOB NOT NULL);"
	"CREATE TEMP TABLE IF NOT EXISTS ls_new(hash INTEGER PRIMARY KEY, id INTEGER NOT NULL);"
	"CREATE TABLE IF NOT EXISTS lsblocks(id INTEGER PRIMARY KEY, last INTEGER NOT NULL,"
	" data BLOB NOT NULL);"
	/* locations: in blocks of consecutive ids, a block keyed by its first id, `last` its last
	 * (chunk.h has the blob); found by content through an in-memory index loaded from the
	 * blocks at open (schema 6; schema 5 had a table of 32-bit hash keys -> id) */
	"CREATE TABLE IF NOT EXISTS locblocks(id INTEGER PRIMARY KEY, last INTEGER NOT NULL,"
	" data BLOB NOT NULL);"
	/* their names (schema 10): a batch's new strings as a block (stack-block format), ids
	 * numbered by the store (meta.str_seq), every one in memory (loaded at open) */
	"CREATE TABLE IF NOT EXISTS strblocks(id INTEGER PRIMARY KEY, last INTEGER NOT NULL,"
	" data BLOB NOT NULL);"
	/* stacks likewise: their location lists in blocks, found by content through an
	 * in-memory index; the stacks a batch used first on its day (dictionary GC keeps those of
	 * days still retained) as one row of ids (stack-block format, empty entries) */
	"CREATE TABLE IF NOT EXISTS stackdays(id INTEGER PRIMARY KEY, day INTEGER NOT NULL,"
	" data BLOB NOT NULL);"
	"CREATE TABLE IF NOT EXISTS stackblocks(id INTEGER PRIMARY KEY, last INTEGER NOT NULL,"
	" data BLOB NOT NULL);"
	"CREATE TABLE IF NOT EXISTS chunks(id INTEGER PRIMARY KEY, labelset INTEGER, kind INTEGER,"
	" t_min INTEGER, t_max INTEGER, n INTEGER, data BLOB);"
	"CREATE INDEX IF NOT EXISTS chunks_kt ON chunks(kind, t_min);"
	/* rollups (schema 11): a row per (level, bucket, kind, node), every label set of the node
	 * in its blob (chunk.h); hour and day rows only for buckets before
	 * meta.rollup_built_<level> (rollup.c builds them once their bucket closes) */
	"CREATE TABLE IF NOT EXISTS rollups(level INTEGER, bucket INTEGER, kind INTEGER,"
	" node TEXT, data BLOB, PRIMARY KEY(level, bucket, kind, node)) WITHOUT ROWID;"
	"INSERT OR IGNORE INTO meta VALUES ('rollup_built_1', 0), ('rollup_built_2', 0);"
	"CREATE TABLE IF NOT EXISTS series(id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL,"
	" name TEXT, labelset INTEGER);"
	"CREATE INDEX IF NOT EXISTS series_name ON series(name);"
	"CREATE TABLE IF NOT EXISTS points(id INTEGER PRIMARY KEY, series INTEGER, t_min INTEGER,"
	" t_max INTEGER, n INTEGER, data BLOB);"
	"CREATE INDEX IF NOT EXISTS points_st ON points(series, t_min);"
	"CREATE INDEX IF NOT EXISTS points_t ON points(t_max);"
	/* intervals of one kind and batch (starts within CHUNK_SPAN_NS; migrated ones: ends),
	 * t_min the least start, t_max the last end (chunk.h has the blob) */
	"CREATE TABLE IF NOT EXISTS ivchunks(id INTEGER PRIMARY KEY, kind TEXT, t_min INTEGER,"
	" t_max INTEGER, n INTEGER, data BLOB);"
	/* schema 15: off-CPU samples kept as the blocked intervals they repeat (offcpu.c), in
	 * chunks after offcpu_iv_after (a migrated store's older ones stand for none);
	 * offcpu_ivs: how many of a chunk's intervals do (a row for a chunk with some, beside
	 * it: a column after the chunk's blob would be read through its overflow pages);
	 * rollup_ivwm: the last chunk whose samples the rollups hold */
	"CREATE TABLE IF NOT EXISTS offcpu_ivs(id INTEGER PRIMARY KEY, t_max INTEGER NOT NULL,"
	" n INTEGER NOT NULL);"
	"INSERT OR IGNORE INTO meta VALUES ('offcpu_iv_after', 0), ('rollup_ivwm', 0);"
	"CREATE INDEX IF NOT EXISTS ivchunks_ke ON ivchunks(kind, t_max);"
	"CREATE INDEX IF NOT EXISTS ivchunks_e ON ivchunks(t_max);"
	/* the chunks holding long intervals, for a range query bounded on both sides (lookup.c) */
	"CREATE INDEX IF NOT EXISTS ivchunks_klen ON ivchunks(kind, (t_max - t_min));";

/* ---- connections ------------------------------------------------------------------------ */

int sq_open_conn(struct sq *s, sqlite3 **ret)
{
	char pragmas[320];
	sqlite3 *db = NULL;
	int rc;

	rc = sqlite3_open_v2(s->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				       SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite open '%s': %s", s->path, db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return -EIO;
	}
	sqlite3_busy_timeout(db, SQ_BUSY_TIMEOUT_MS);
	/* synchronous=FULL: a COMMIT has reached the disk before ingest answers 204. */
	/* journal_size_limit: the WAL shrinks back after a checkpoint past a burst (its bytes
	 * count in the store's bytes per sample); the maintenance thread empties it when ingest
	 * pauses (rollup.c). */
	/* page_size (a new store's only; before WAL, which fixes it): a blob's last overflow page
	 * is half empty on average, and most rows are blobs of a few KiB (SQ_PAGE_SIZE). */
	/* cache_size: a quarter of --sqlite-cache (at most 32 MiB), so that a few connections
	 * busy at once fill the budget; past it (the soft heap limit, set at open) caches recycle
	 * their pages instead of growing. */
	snprintf(pragmas, sizeof(pragmas), "PRAGMA page_size=" SQ_PAGE_SIZE_S ";"
		 " PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA cache_size=-%llu;"
		 " PRAGMA temp_store=MEMORY; PRAGMA journal_size_limit=4194304;",
		 (unsigned long long)(s->o.sqlite_cache_bytes / 4 / 1024 < 32768 ?
					      s->o.sqlite_cache_bytes / 4 / 1024 : 32768));
	rc = sqlite3_exec(db, pragmas, NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite pragmas: %s", sqlite3_errmsg(db));
		sqlite3_close(db);
		return -EIO;
	}
	*ret = db;
	return 0;
}

sqlite3 *sq_pool_get(struct sq *s)
{
	sqlite3 *db = NULL;

	pthread_mutex_lock(&s->pmu);
	if (s->npool)
		db = s->pool[--s->npool];
	pthread_mutex_unlock(&s->pmu);
	if (!db && sq_open_conn(s, &db))
		return NULL;
	return db;
}

void sq_pool_put(struct sq *s, sqlite3 *db)
{
	if (!db)
		return;
	sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);	/* no-op unless a query bailed out */
	/* Over the budget: an idle connection keeps no cache (the others' go on recycling). */
	if ((uint64_t)sqlite3_memory_used() > s->o.sqlite_cache_bytes)
		sqlite3_db_release_memory(db);
	pthread_mutex_lock(&s->pmu);
	if (s->npool < POOL_MAX) {
		s->pool[s->npool++] = db;
		db = NULL;
	}
	pthread_mutex_unlock(&s->pmu);
	sqlite3_close(db);
}

int sq_step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -EIO;
}

int sq_end_write(sqlite3 *db, int err)
{
	if (!err && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK)
		return 0;
	sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	return -EIO;
}

/* Runs a single-value query; *ret set if a row came back. 1 found, 0 none, -EIO. */
int sq_step_i64(sqlite3_stmt *st, int64_t *ret)
{
	int rc = sqlite3_step(st), found = 0;

	if (rc == SQLITE_ROW) {
		*ret = sqlite3_column_int64(st, 0);
		found = 1;
	} else if (rc != SQLITE_DONE) {
		found = -EIO;
	}
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return found;
}

uint64_t sq_raw_retention_ns(const struct sq *s)
{
	return s->o.raw_retention_ns < s->o.retention_ns ? s->o.raw_retention_ns : s->o.retention_ns;
}

/* ---- open, close, stats ------------------------------------------------------------------ */

static uint64_t file_size(const char *path, const char *suffix)
{
	char p[4096];
	struct stat sb;

	snprintf(p, sizeof(p), "%s%s", path, suffix);
	return stat(p, &sb) ? 0 : (uint64_t)sb.st_size;
}

static int64_t query_i64(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *q;
	int64_t v = 0;

	if (sqlite3_prepare_v2(db, sql, -1, &q, NULL))
		return 0;
	if (sq_step_i64(q, &v) <= 0)
		v = 0;
	sqlite3_finalize(q);
	return v;
}

/* Bytes of the in-memory dictionaries: the index maps (16 bytes a slot) and the strings. */
static uint64_t dict_bytes(struct sq *s)
{
	const struct u64map *maps[] = { &s->loc_ids, &s->stack_ids, &s->series_ids, &s->stack_day,
					&s->str_ids, &s->str_by_id };
	uint64_t n = 0;

	pthread_rwlock_rdlock(&s->smu);
	for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++)
		n += __atomic_load_n(&maps[i]->cap, __ATOMIC_RELAXED) * 16;
	for (size_t i = 0; i < s->str_by_id.cap; i++)
		if (s->str_by_id.keys[i])
			n += strlen((const char *)(uintptr_t)s->str_by_id.vals[i]) + 1 + 16;
	pthread_rwlock_unlock(&s->smu);
	return n;
}

static void sq_stats(struct store *st, struct store_stats *o)
{
	struct sq *s = (struct sq *)st;
	sqlite3 *db = sq_pool_get(s);

	memset(o, 0, sizeof(*o));
	o->bytes_on_disk = file_size(s->path, "") + file_size(s->path, "-wal");
	o->samples = __atomic_load_n(&s->n_samples, __ATOMIC_RELAXED);
	o->locations = __atomic_load_n(&s->loc_ids.len, __ATOMIC_RELAXED);
	o->stacks = __atomic_load_n(&s->stack_ids.len, __ATOMIC_RELAXED);
	o->points = __atomic_load_n(&s->n_points, __ATOMIC_RELAXED);
	o->intervals = __atomic_load_n(&s->n_intervals, __ATOMIC_RELAXED);
	o->offcpu_paired = __atomic_load_n(&s->n_offcpu_paired, __ATOMIC_RELAXED);
	o->offcpu_unpaired = __atomic_load_n(&s->n_offcpu_unpaired, __ATOMIC_RELAXED);
	o->batches = __atomic_load_n(&s->n_batches, __ATOMIC_RELAXED);
	o->duplicate_batches = __atomic_load_n(&s->n_dups, __ATOMIC_RELAXED);
	o->commits = __atomic_load_n(&s->commitq.commits, __ATOMIC_RELAXED);
	o->raw_chunks_deleted = __atomic_load_n(&s->n_raw_deleted, __ATOMIC_RELAXED);
	o->rollups_deleted = __atomic_load_n(&s->n_rollups_deleted, __ATOMIC_RELAXED);
	o->rollups_waiting = __atomic_load_n(&s->n_pending, __ATOMIC_RELAXED);
	for (int lv = 1; lv < LEVELS; lv++) {
		o->rollups_kept[lv - 1] = __atomic_load_n(&s->n_rollups_kept[lv], __ATOMIC_RELAXED);
		o->rollups_deferred[lv - 1] = __atomic_load_n(&s->n_rollups_deferred[lv],
							      __ATOMIC_RELAXED);
	}
	if (db) {
		int64_t lag = query_i64(db, "SELECT (SELECT coalesce(max(id), 0) FROM chunks) -"
					    " (SELECT value FROM meta WHERE key = 'rollup_wm')");
		int64_t ivlag = query_i64(db, "SELECT count(*) FROM ivchunks WHERE id > (SELECT"
					      " value FROM meta WHERE key = 'rollup_ivwm')"
					      " AND kind = '" OFFCPU_IV_KIND "'");
		char sql[256];

		o->rollup_lag_chunks = (lag > 0 ? (uint64_t)lag : 0) +
				       (ivlag > 0 ? (uint64_t)ivlag : 0);
		/* and the off-CPU samples intervals stand for, while raw samples are kept */
		snprintf(sql, sizeof(sql), "SELECT (SELECT coalesce(sum(n), 0) FROM chunks) +"
			 " (SELECT coalesce(sum(n), 0) FROM offcpu_ivs WHERE t_max >= %lld)",
			 (long long)(wall_ns() - sq_raw_retention_ns(s)));
		o->samples_held = (uint64_t)query_i64(db, sql);
		/* pages freed by deletes and merges, reused by the next writes */
		o->bytes_free = (uint64_t)query_i64(db, "PRAGMA freelist_count") *
				(uint64_t)query_i64(db, "PRAGMA page_size");
		if (o->bytes_free > o->bytes_on_disk)
			o->bytes_free = o->bytes_on_disk;
		lag = sq_recompress_lag(s, db);
		o->recompress_lag_rows = lag > 0 ? (uint64_t)lag : 0;
		sq_pool_put(s, db);
	}
	o->gc_stacks = __atomic_load_n(&s->n_gc_stacks, __ATOMIC_RELAXED);
	o->gc_locations = __atomic_load_n(&s->n_gc_locations, __ATOMIC_RELAXED);
	o->gc_label_sets = __atomic_load_n(&s->n_gc_lsets, __ATOMIC_RELAXED);
	o->gc_series = __atomic_load_n(&s->n_gc_series, __ATOMIC_RELAXED);
	o->wal_truncations = __atomic_load_n(&s->n_wal_truncations, __ATOMIC_RELAXED);
	o->recompress_cpu_ns = __atomic_load_n(&s->n_rz_cpu_ns, __ATOMIC_RELAXED);
	o->recompress_in = __atomic_load_n(&s->n_rz_in, __ATOMIC_RELAXED);
	o->recompress_out = __atomic_load_n(&s->n_rz_out, __ATOMIC_RELAXED);
	o->merged_blocks = __atomic_load_n(&s->n_mz_blocks, __ATOMIC_RELAXED);
	o->merge_in = __atomic_load_n(&s->n_mz_in, __ATOMIC_RELAXED);
	o->merge_out = __atomic_load_n(&s->n_mz_out, __ATOMIC_RELAXED);
	o->cardinality_dropped_label_sets = __atomic_load_n(&s->n_card_dropped_ls,
							    __ATOMIC_RELAXED);
	o->label_set_bytes = __atomic_load_n(&s->lset_bytes, __ATOMIC_RELAXED);
	o->nodes_held = __atomic_load_n(&s->ncard, __ATOMIC_RELAXED);
	o->nodes_refused = __atomic_load_n(&s->n_node_refused, __ATOMIC_RELAXED);
	o->cardinality_dropped_records = __atomic_load_n(&s->n_card_dropped_records,
							 __ATOMIC_RELAXED);
	pthread_rwlock_rdlock(&s->lmu);
	for (size_t i = 1; i < s->nlsets; i++)
		o->label_sets += s->lsets[i].pairs != NULL;
	pthread_rwlock_unlock(&s->lmu);
	o->sqlite_heap_bytes = (uint64_t)sqlite3_memory_used();
	o->sqlite_heap_limit = s->o.sqlite_cache_bytes;
	o->dict_bytes = dict_bytes(s);
}

static void sq_close(struct store *st)
{
	struct sq *s = (struct sq *)st;

	if (!s)
		return;
	if (s->maint_started) {
		pthread_mutex_lock(&s->mmu);
		s->stopping = true;
		pthread_cond_signal(&s->mcond);
		pthread_mutex_unlock(&s->mmu);
		pthread_join(s->maint, NULL);
	}
	for (int i = 0; i < ST_MAX; i++)
		sqlite3_finalize(s->st[i]);
	sqlite3_close(s->w);
	for (int i = 0; i < s->npool; i++)
		sqlite3_close(s->pool[i]);
	sq_lsets_done(s);
	sq_graveyard_free(s);
	sq_rollup_pending_free(s);
	sq_dedup_reset(s);
	sq_strs_done(s);
	free(s->card);
	if (s->lock_fd >= 0)
		close(s->lock_fd);	/* the lock goes last: the database is closed */
	store_commitq_done(&s->commitq);
	pthread_mutex_destroy(&s->wmu);
	pthread_mutex_destroy(&s->pmu);
	pthread_mutex_destroy(&s->mmu);
	pthread_cond_destroy(&s->mcond);
	pthread_rwlock_destroy(&s->lmu);
	pthread_rwlock_destroy(&s->smu);
	free(s->path);
	free(s);
}

static const struct store_ops sqlite_ops = {
	.ingest = sq_ingest,
	.aggregate = sq_aggregate,
	.stacks = sq_stacks,
	.label_sets = sq_label_sets,
	.series = sq_series,
	.metric_names = sq_metric_names,
	.intervals = sq_intervals,
	.nodes = sq_nodes,
	.cpu_period = sq_cpu_period,
	.stats = sq_stats,
	.close = sq_close,
};

void sq_vacuum(struct sq *s, const char *after)
{
	uint64_t t0 = mono_ns();
	sqlite3_stmt *st;
	bool rollback_journal = false;
	int rc;

	/*
	 * Only outside WAL mode does a vacuum take the page size (SQ_PAGE_SIZE_S) to an older
	 * store; the writer is the only connection while the store opens.
	 */
	if (!sqlite3_prepare_v2(s->w, "PRAGMA journal_mode=DELETE", -1, &st, NULL)) {
		rollback_journal = sqlite3_step(st) == SQLITE_ROW &&
				   !strcmp((const char *)sqlite3_column_text(st, 0), "delete");
		sqlite3_finalize(st);
	}
	rc = sqlite3_exec(s->w, "PRAGMA page_size=" SQ_PAGE_SIZE_S "; VACUUM", NULL, NULL, NULL);
	if (rc)
		log_warn("store: vacuum after %s: %s (the free pages are reused)", after,
			 sqlite3_errmsg(s->w));
	if (rollback_journal && sqlite3_exec(s->w, "PRAGMA journal_mode=WAL", NULL, NULL, NULL))
		log_warn("store: back to WAL after the vacuum: %s", sqlite3_errmsg(s->w));
	if (!rc)
		log_info("store: '%s' vacuumed in %.1f s", s->path, (double)(mono_ns() - t0) / 1e9);
	/* the copy went through the WAL: give that back too */
	sqlite3_exec(s->w, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
}

/* Whether table has column (false where there is no such table). */
static bool table_has_column(struct sq *s, const char *table, const char *column)
{
	sqlite3_stmt *st;
	bool have;

	if (sqlite3_prepare_v2(s->w, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2", -1, &st,
			       NULL))
		return false;
	sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
	have = sqlite3_step(st) == SQLITE_ROW;
	sqlite3_finalize(st);
	return have;
}

/*
 * Stores made before dictionary GC have no stacks.day (the last day a batch used the stack):
 * added, and every stack counts as used today. 0 or -EIO.
 */
static int migrate_stack_day(struct sq *s)
{
	char sql[128];

	if (table_has_column(s, "stacks", "day"))
		return 0;
	snprintf(sql, sizeof(sql), "ALTER TABLE stacks ADD COLUMN day INTEGER NOT NULL DEFAULT %llu",
		 (unsigned long long)(wall_ns() / DAY_NS));
	return sqlite3_exec(s->w, sql, NULL, NULL, NULL) ? -EIO : 0;
}

/*
 * One writer per data directory: an exclusive flock() on <dir>/lock, held until close or the
 * process's death (the kernel releases it then). A second server on the same directory would
 * write beside the first and lose acknowledged rollups (issue 36): it is refused, naming the
 * holder's pid (written into the file). 0 or -1 with err set.
 */
static int lock_dir(struct sq *s, const char *dir, char *err, size_t errlen)
{
	char path[PATH_MAX], pid[32] = "";
	ssize_t n;

	snprintf(path, sizeof(path), "%s/lock", dir);
	s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (s->lock_fd < 0) {
		snprintf(err, errlen, "open '%s': %s", path, strerror(errno));
		return -1;
	}
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB)) {
		int e = errno;

		n = pread(s->lock_fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = 0;
		pid[strcspn(pid, "\n")] = 0;
		if (e == EWOULDBLOCK)
			snprintf(err, errlen, "'%s' is in use by another gpuscope-server (pid %s): "
				 "one server per --data directory", dir, pid[0] ? pid : "?");
		else
			snprintf(err, errlen, "lock '%s': %s", path, strerror(e));
		return -1;
	}
	n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(s->lock_fd, 0) || pwrite(s->lock_fd, pid, (size_t)n, 0) != n)
		log_warn("store: writing the pid into '%s': %s", path, strerror(errno));
	return 0;
}

struct store *store_sqlite_open(const struct store_opts *opts, char *err, size_t errlen)
{
	struct sq *s = calloc(1, sizeof(*s));
	char *emsg = NULL, sql[96];
	uint64_t t0 = 0;
	int ver;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->base.ops = &sqlite_ops;
	s->o = *opts;
	if (!s->o.sqlite_cache_bytes)
		s->o.sqlite_cache_bytes = SQ_CACHE_DEFAULT;
	/* Process-wide: one store per process. */
	sqlite3_soft_heap_limit64((sqlite3_int64)s->o.sqlite_cache_bytes);
	s->max_new_ls = opts->max_new_label_sets_per_hour;
	s->max_new_stacks = opts->max_new_stacks_per_hour;
	s->max_ls_bytes = opts->max_label_set_bytes;
	s->max_nodes = opts->max_nodes;
	store_commitq_init(&s->commitq, 0);
	pthread_mutex_init(&s->wmu, NULL);
	pthread_mutex_init(&s->pmu, NULL);
	pthread_mutex_init(&s->mmu, NULL);
	pthread_cond_init(&s->mcond, NULL);
	pthread_rwlock_init(&s->lmu, NULL);
	pthread_rwlock_init(&s->smu, NULL);
	s->lock_fd = -1;
	if (mkdir(opts->dir, 0750) && errno != EEXIST) {
		snprintf(err, errlen, "mkdir '%s': %s", opts->dir, strerror(errno));
		goto out_close;
	}
	if (lock_dir(s, opts->dir, err, errlen))
		goto out_close;
	if (asprintf(&s->path, "%s/gpuscope.db", opts->dir) < 0) {
		s->path = NULL;
		snprintf(err, errlen, "out of memory");
		goto out_close;
	}
	if (sq_open_conn(s, &s->w)) {
		snprintf(err, errlen, "cannot open '%s'", s->path);
		goto out_close;
	}
	ver = sq_schema_version(s);
	if (ver < 0) {
		snprintf(err, errlen, "reading the schema version of '%s': %s", s->path,
			 sqlite3_errmsg(s->w));
		goto out_close;
	}
	if (ver > SQ_SCHEMA_VERSION) {
		snprintf(err, errlen, "'%s' has schema %d, written by a newer gpuscope-server (this one"
			 " reads %d and older): run that version, or give another --data", s->path,
			 ver, SQ_SCHEMA_VERSION);
		goto out_close;
	}
	/* An older store is migrated in one transaction: all of it, or the old store as it was. */
	if (ver && ver < SQ_SCHEMA_VERSION) {
		log_info("store: '%s' has schema %d: migrating to %d", s->path, ver, SQ_SCHEMA_VERSION);
		t0 = mono_ns();
		/* schemas 9, 13 and 14 change no table: a schema-8, -12 or -13 store is only
		 * marked (its chunks and rollup rows are read as they are) */
		if (sqlite3_exec(s->w, "BEGIN IMMEDIATE", NULL, NULL, NULL) ||
		    (ver < 8 && migrate_stack_day(s))) {
			snprintf(err, errlen, "schema of '%s': %s", s->path, sqlite3_errmsg(s->w));
			goto out_rollback;
		}
		if (ver < 2 && sq_migrate_v1_rename(s, err, errlen))
			goto out_rollback;
		if (ver < 4 && sq_migrate_v3_rename(s, err, errlen))
			goto out_rollback;
		if (ver >= 2 && ver < 7 && sq_migrate_v4_rename(s, ver, err, errlen))
			goto out_rollback;
		/* schema 11's rollups are per node: the old rows wait in rollups_v10 until the
		 * label sets (their nodes) are loaded, then sq_rollups_convert_v10() */
		if (table_has_column(s, "rollups", "labelset") &&
		    sqlite3_exec(s->w, "ALTER TABLE rollups RENAME TO rollups_v10", NULL, NULL,
				 NULL)) {
			snprintf(err, errlen, "schema of '%s': %s", s->path, sqlite3_errmsg(s->w));
			goto out_rollback;
		}
		/* schema 12: label sets' content hashes only in memory, their extents as a start
		 * and a length */
		if ((table_has_column(s, "labelsets", "hash") &&
		     sqlite3_exec(s->w, "ALTER TABLE labelsets DROP COLUMN hash", NULL, NULL,
				  NULL)) ||
		    (table_has_column(s, "labelsets", "last_ns") &&
		     sqlite3_exec(s->w, "ALTER TABLE labelsets ADD COLUMN dur_ns INTEGER;"
				  "UPDATE labelsets SET dur_ns = last_ns - first_ns;"
				  "ALTER TABLE labelsets DROP COLUMN last_ns;", NULL, NULL, NULL))) {
			snprintf(err, errlen, "schema of '%s': %s", s->path, sqlite3_errmsg(s->w));
			goto out_rollback;
		}
		/* schema 13's label sets' table, which the copies below may fill and schema 14's
		 * conversion empties into lsext rows (sq_migrate_v14_lsext()) */
		if (sqlite3_exec(s->w, "CREATE TABLE IF NOT EXISTS labelsets(id INTEGER PRIMARY KEY,"
				 " first_ns INTEGER, dur_ns INTEGER)", NULL, NULL, NULL)) {
			snprintf(err, errlen, "schema of '%s': %s", s->path, sqlite3_errmsg(s->w));
			goto out_rollback;
		}
		/* the (id, day) table the copies below fill, then make stackdays rows of */
		if (ver < 8 && sqlite3_exec(s->w, "CREATE TABLE IF NOT EXISTS stacks(id INTEGER"
					      " PRIMARY KEY, day INTEGER NOT NULL)", NULL, NULL,
					      NULL)) {
			snprintf(err, errlen, "schema of '%s': %s", s->path, sqlite3_errmsg(s->w));
			goto out_rollback;
		}
	}
	if (sqlite3_exec(s->w, schema, NULL, NULL, &emsg)) {
		snprintf(err, errlen, "schema of '%s': %s", s->path, emsg ? emsg : "?");
		sqlite3_free(emsg);
		goto out_rollback;
	}
	for (int i = 0; i < ST_MAX; i++) {
		if (sqlite3_prepare_v3(s->w, wsql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i],
				       NULL)) {
			snprintf(err, errlen, "prepare '%s': %s", wsql[i], sqlite3_errmsg(s->w));
			goto out_rollback;
		}
	}
	if (ver && ver < 2 && sq_migrate_v1_copy(s, err, errlen))
		goto out_rollback;
	if (ver && ver < 4 && sq_migrate_v3_copy(s, err, errlen))
		goto out_rollback;
	if (ver >= 2 && ver < 7 && sq_migrate_v4_copy(s, err, errlen))
		goto out_rollback;
	if (ver && ver < 8 && sq_migrate_v8_stackdays(s, err, errlen))
		goto out_rollback;
	if (ver && ver < 10 && sq_migrate_v10_locnames(s, err, errlen))
		goto out_rollback;
	if (ver && ver < 14 && sq_migrate_v14_lsext(s, err, errlen))
		goto out_rollback;
	/* schema 15: the interval chunks already stored stand for no off-CPU sample */
	if (ver && ver < 15 &&
	    sqlite3_exec(s->w, "UPDATE meta SET value = (SELECT coalesce(max(id), 0) FROM ivchunks)"
			 " WHERE key IN ('offcpu_iv_after', 'rollup_ivwm')", NULL, NULL, NULL)) {
		snprintf(err, errlen, "schema of '%s': %s", s->path, sqlite3_errmsg(s->w));
		goto out_rollback;
	}
	snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO meta VALUES ('schema', %d)",
		 SQ_SCHEMA_VERSION);
	if (sqlite3_exec(s->w, sql, NULL, NULL, NULL) ||
	    (ver && ver < SQ_SCHEMA_VERSION && sqlite3_exec(s->w, "COMMIT", NULL, NULL, NULL))) {
		snprintf(err, errlen, "schema of '%s': %s", s->path, sqlite3_errmsg(s->w));
		goto out_rollback;
	}
	if (ver && ver < SQ_SCHEMA_VERSION)
		log_info("store: '%s' migrated to schema %d in %.1f s", s->path, SQ_SCHEMA_VERSION,
			 (double)(mono_ns() - t0) / 1e9);
	if (ver && ver < 10) {
		/* The old rows' pages are free now (schema 1: a tenth is left; 3: the label sets'
		 * tenth of the store; 4 and 5: the hash tables; 8: the stacks' (id, day) table;
		 * 10: the location blocks' names):
		 * give them back to the disk.
		 * Needs room for a copy of what is left; without it the pages are reused later. */
		sq_vacuum(s, "the migration");
	}
	{
		sqlite3_stmt *q = NULL;
		int64_t ivl = 0, loc = 0;

		if (sqlite3_prepare_v2(s->w, "SELECT (SELECT value FROM meta WHERE key = 'ivl_seq'),"
				       " (SELECT value FROM meta WHERE key = 'loc_seq'),"
				       " (SELECT value FROM meta WHERE key = 'stack_seq'),"
				       " (SELECT value FROM meta WHERE key = 'ls_seq')", -1, &q,
				       NULL) ||
		    sqlite3_step(q) != SQLITE_ROW) {
			snprintf(err, errlen, "reading '%s': %s", s->path, sqlite3_errmsg(s->w));
			sqlite3_finalize(q);
			goto out_close;
		}
		ivl = sqlite3_column_int64(q, 0);
		loc = sqlite3_column_int64(q, 1);
		s->stack_seq = (uint64_t)sqlite3_column_int64(q, 2);
		s->ls_seq = (uint64_t)sqlite3_column_int64(q, 3);
		sqlite3_finalize(q);
		s->ivl_seq = (uint64_t)ivl;
		s->loc_seq = (uint64_t)loc;
	}
	if (sq_lsets_load(s)) {
		snprintf(err, errlen, "loading label sets: %s", sqlite3_errmsg(s->w));
		goto out_close;
	}
	if (sq_rollups_convert_v10(s, err, errlen))
		goto out_close;
	t0 = mono_ns();
	if (sq_locs_load(s)) {
		snprintf(err, errlen, "loading the location index: %s", sqlite3_errmsg(s->w));
		goto out_close;
	}
	if (sq_stacks_load(s)) {
		snprintf(err, errlen, "loading the stack index: %s", sqlite3_errmsg(s->w));
		goto out_close;
	}
	log_debug("store: %zu locations, %zu stacks indexed in %.2f s", s->loc_ids.len,
		  s->stack_ids.len, (double)(mono_ns() - t0) / 1e9);
	sq_rollup_pending_load(s);
	if (pthread_create(&s->maint, NULL, sq_maint_main, s)) {
		snprintf(err, errlen, "cannot start the maintenance thread");
		goto out_close;
	}
	s->maint_started = true;
	return &s->base;
out_rollback:
	if (!sqlite3_get_autocommit(s->w))
		sqlite3_exec(s->w, "ROLLBACK", NULL, NULL, NULL);
out_close:
	sq_close(&s->base);
	return NULL;
}
