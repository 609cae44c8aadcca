/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the files of the SQLite backend (docs/server.md "Storage"): the store
 * object, its connections, the in-memory label-set table, and the entry points each file gives
 * the others. Nothing outside src/server/store/sqlite/ includes this header.
 */
#ifndef GPUSCOPE_STORE_SQLITE_H
#define GPUSCOPE_STORE_SQLITE_H

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include "common/hmap.h"
#include "common/util.h"
#include "server/codec.h"
#include "server/store/sqlite/chunk.h"
#include "server/store/store.h"

#define CHUNK_SPAN_NS	(600 * NSEC_PER_SEC)	/* a chunk never spans more (query index bound) */
#define MINUTE_NS	(60 * NSEC_PER_SEC)
#define HOUR_NS		(3600 * NSEC_PER_SEC)
#define DAY_NS		(86400 * NSEC_PER_SEC)
#define LEVELS		3			/* rollups: minute, hour, day (UTC) */
#define POOL_MAX	16
#define SQ_CACHE_DEFAULT	(64ull << 20)	/* --sqlite-cache */
#define DEDUP_CACHE_MAX	(4u << 20)		/* hash -> id entries before the cache is reset */
#define ROLLUP_ROUND	400			/* chunks folded per write transaction */
#define DELETE_ROUND	2000			/* rows deleted per write transaction */
#define ROLLUP_PERIOD_NS	(2 * NSEC_PER_SEC)	/* new chunks wait at most this for rollup */
#define ROLLUP_CLOSE_NS	(2 * MINUTE_NS)		/* an hour or day is built this long after its end */
/* An hour or day row is kept only where it takes at most 1/ROLLUP_KEEP_DIV of its children's
 * bytes; else it is deferred (schema 14: its data empty, readers read the level below). */
#define ROLLUP_KEEP_DIV	2
/* late samples into a built bucket without a kept row: its row is built this long after the
 * last of them (a spool drained after an outage comes batch by batch) */
#define ROLLUP_LATE_QUIET_NS	(30 * NSEC_PER_SEC)
#define SQ_BUSY_TIMEOUT_MS	60000			/* a connection waits this long for a lock */
#define WAL_IDLE_NS	(1 * NSEC_PER_SEC)	/* no ingest this long: the WAL is emptied */
/*
 * The page size of a new store (schema 11; 4096 before): most rows are blobs of a few KiB whose
 * last overflow page is half empty on average, 13 % of the recorded hour's store at 4096.
 * 1024 took that store 23.2 -> 20.7 MB (512: 20.6).
 */
#define SQ_PAGE_SIZE_S	"1024"

extern const uint64_t sq_level_ns[LEVELS];	/* bucket width of each rollup level */

struct lset {
	char **pairs;		/* 2n strings, one allocation with the strings after the pointers */
	size_t n;
	uint64_t first_ns, last_ns;
	uint64_t hash;		/* of its content (store_label_set()): the index's key */
	const char *node;
	int64_t gpu;		/* value of the "gpu" label, -1 if none */
};

struct gitem;

/* Prepared statements of the writer connection (open.c prepares them, ingest.c uses them). */
enum {
	ST_BEGIN, ST_COMMIT, ST_ROLLBACK, ST_BATCH_SEEN, ST_BATCH_ADD, ST_LS_GET, ST_LS_SEQ,
	ST_LSEXT_GET, ST_LSEXT_PUT, ST_LSEXT_DEL, ST_LOCBLOCK_ADD, ST_LOC_SEQ, ST_STACKDAYS_ADD,
	ST_CHUNK_ADD, ST_SERIES_GET, ST_SERIES_ADD, ST_POINTS_ADD, ST_IVL_ADD, ST_OFFCPU_IV_ADD,
	ST_IVL_SEQ,
	ST_NODE_UP, ST_PERIOD_SET, ST_STACKBLOCK_ADD, ST_STACK_SEQ, ST_LSBLOCK_ADD,
	ST_LS_NEW, ST_LS_NEW_CLEAR, ST_STRBLOCK_ADD, ST_STR_SEQ, ST_MAX,
};

struct sq {
	struct store base;
	struct store_opts o;
	char *path;
	int lock_fd;		/* <dir>/lock, flock()ed for the process's life: one writer */

	struct store_commitq commitq;	/* group commit */

	pthread_mutex_t wmu;		/* the writer connection and the dedup caches */
	sqlite3 *w;
	sqlite3_stmt *st[ST_MAX];
	/* content hash -> id: every stored location and stack (schemas 6 and 7: no index on
	 * disk, loaded from the blocks at open); a cache of the series' table */
	struct u64map loc_ids, stack_ids, series_ids;
	bool loc_index_stale, stack_index_stale;	/* to be loaded again (after a rollback) */
	uint64_t ivl_seq;		/* intervals stored so far: the next one's order (wmu) */
	uint64_t loc_seq, stack_seq;	/* the last location and stack ids given (wmu) */
	uint64_t ls_seq;		/* ...and label set id (schema 14; a table's rowid before) */
	struct u64map stack_day;	/* stack id -> the day (+ 1) a stackdays row last named it */

	/* The string dictionary of location names (schema 10): every stored string, loaded from
	 * strblocks at open. Changed with wmu and smu (for writing) held; read with either. */
	pthread_rwlock_t smu;
	struct u64map str_ids;		/* content hash (+ probe) -> string id */
	struct u64map str_by_id;	/* string id -> its malloc'ed NUL-terminated copy */
	uint64_t str_seq;		/* the last string id given (wmu) */
	bool str_index_stale;		/* to be loaded again (after a rollback) */

	pthread_mutex_t pmu;		/* read connection pool */
	sqlite3 *pool[POOL_MAX];
	int npool;

	pthread_rwlock_t lmu;		/* label sets */
	struct lset *lsets;		/* index = id; id 0 unused */
	size_t nlsets, caplsets;
	struct u64map ls_ids;		/* content hash -> id */

	pthread_t maint;
	pthread_mutex_t mmu;
	pthread_cond_t mcond;
	bool stopping, maint_started;

	/* Counters (updated with __atomic builtins). */
	uint64_t n_samples, n_points, n_intervals, n_batches, n_dups;
	uint64_t n_offcpu_paired, n_offcpu_unpaired;	/* offcpu.c, since start */

	/* New label sets and stacks per node in the current clock hour (wmu). */
	struct node_card {
		uint64_t node_hash, hour, new_ls, new_stacks;
		bool warned;	/* logged that its new label sets are being refused */
	} *card;
	size_t ncard, capcard;
	uint64_t max_new_ls, max_new_stacks;
	uint64_t max_ls_bytes, max_nodes;	/* 0: no limit */
	uint64_t lset_bytes;		/* label sets held in memory (atomic) */
	uint64_t n_node_refused;	/* batches of new nodes past max_nodes (atomic) */
	uint64_t n_raw_deleted, n_rollups_deleted, rollup_lag;
	uint64_t n_rollups_kept[LEVELS], n_rollups_deferred[LEVELS];	/* hour and day rows built */
	/* hour and day rows that late samples found missing or deferred: built again once no
	 * late sample came for ROLLUP_LATE_QUIET_NS (maintenance thread only; the count atomic) */
	struct rollup_pending *pend;
	size_t npend, cappend;
	uint64_t n_pending;
	uint64_t n_gc_stacks, n_gc_locations, n_gc_lsets, n_gc_series;	/* dictionary GC */
	uint64_t n_card_dropped_ls, n_card_dropped_records;	/* past the label-set limit */
	uint64_t last_commit_ns;	/* mono_ns() of the last ingest commit */
	uint64_t n_wal_truncations;	/* idle checkpoints that emptied the WAL */
	/* background recompression (recompress.c): CPU spent, stored bytes looked at, and what
	 * they take now */
	uint64_t n_rz_cpu_ns, n_rz_in, n_rz_out;
	/* ...and its block merges: blocks merged, their stored bytes, the merged blocks' bytes;
	 * per merged table the blocks of the last group, waiting for more */
#define MZ_TABLES 3
	uint64_t n_mz_blocks, n_mz_in, n_mz_out;
	size_t mz_tail[2 * MZ_TABLES];	/* by level, then table */

	/* Label-set pairs unpublished by GC, freed a round later (queries match pairs after
	 * dropping lmu); maintenance thread only. */
	char ***graveyard, ***graveyard_old;
	size_t ngrave, ngrave_old;
};

/* A growing array of ids (realloc'ed; free v). */
struct u64vec {
	uint64_t *v;
	size_t n, cap;
};

/* Appends x to *v (*n of *cap). 0 or -ENOMEM. */
static inline int u64_push(uint64_t **v, size_t *n, size_t *cap, uint64_t x)
{
	if (*n == *cap) {
		size_t ncap = *cap ? 2 * *cap : 256;
		uint64_t *nv = realloc(*v, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = ncap;
	}
	(*v)[(*n)++] = x;
	return 0;
}

/* ---- open.c: connections ---- */

/* Opens one connection to the database with the store's pragmas. 0 or -EIO (logged). */
int sq_open_conn(struct sq *s, sqlite3 **ret);
/* A read connection from the pool (opened if the pool is empty); NULL on failure. */
sqlite3 *sq_pool_get(struct sq *s);
/* Returns a connection to the pool (rolling back any open read); NULL is ignored. */
void sq_pool_put(struct sq *s, sqlite3 *db);
/* Steps a statement to its end and resets it. 0 or -EIO. */
int sq_step_done(sqlite3_stmt *st);
/* Ends db's write transaction: COMMIT when err is 0, else (or when COMMIT fails) ROLLBACK.
 * 0 when committed, -EIO when rolled back. */
int sq_end_write(sqlite3 *db, int err);
/* Runs a single-value query; *ret set if a row came back. 1 found, 0 none, -EIO. */
int sq_step_i64(sqlite3_stmt *st, int64_t *ret);
/* The raw-chunk retention: min(raw_retention, retention). */
uint64_t sq_raw_retention_ns(const struct sq *s);

/* ---- labels.c: the in-memory label-set table (lmu) ---- */

/* Adds label set `id` (serialized "n\0v\0...") to the table; lmu held for writing. 0/-errno. */
/* Memory a label set of this blob (NUL-terminated names and values) holds in lsets. */
static inline uint64_t sq_lset_mem(const uint8_t *blob, size_t len)
{
	uint64_t n = 0;

	for (size_t i = 0; i < len; i++)
		n += !blob[i];
	return sizeof(struct lset) + n * sizeof(char *) + len;
}

int sq_lset_put(struct sq *s, uint64_t id, uint64_t hash, const uint8_t *blob, size_t len,
		uint64_t first, uint64_t last);
/* Loads every stored label set into the table (at open, writer connection). 0 or -errno. */
int sq_lsets_load(struct sq *s);
/* A published label set: its pairs stay valid, unlocked, until the store closes. */
struct lset_ref {
	uint64_t id;
	const char *const *pairs;
	size_t n;
};
/*
 * The label sets whose extent meets [from, to), copied under lmu (briefly) so that the caller
 * matches them without it: malloc'ed array of *ret_n; *ret_nlsets (may be NULL) the table size
 * then. NULL on ENOMEM.
 */
struct lset_ref *sq_lsets_snapshot(struct sq *s, uint64_t from, uint64_t to, size_t *ret_n,
				   size_t *ret_nlsets);
/* Copies label set id's entry (its pointers stay valid unlocked); false if unknown. */
bool sq_lset_get(struct sq *s, uint64_t id, struct lset *ret);
/* Which label set ids match sel and [from, to): malloc'ed array of *ret_n bytes. Takes lmu
 * only to copy the table, never while matching. */
uint8_t *sq_lsets_match(struct sq *s, const struct selector *sel, uint64_t from, uint64_t to,
			size_t *ret_n);
/* Frees the table. */
void sq_lsets_done(struct sq *s);

/* ---- ingest.c ---- */
int sq_ingest(struct store *st, const struct Gpuscope__V1__Batch *m, char *err, size_t errlen);
/* Stores n intervals of kind (sorted by start) as one chunk, times in units of unit_ns (0 or
 * 1: ns, format 2; else format 3, floored), nsamples of them standing for off-CPU samples
 * (offcpu.c). wmu held, in a transaction. */
int sq_put_interval_chunk(struct sq *s, const char *kind, const struct irow *r, size_t n,
			  uint64_t unit_ns, uint64_t nsamples);

/* ---- dict.c: the dictionaries' blocks, the string dictionary, the indexes in memory ---- */
#define LOC_BLOCK_MAX	4096	/* locations per block */
#define STACK_BLOCK_MAX	4096	/* stacks per block */
#define LS_BLOCK_MAX	4096	/* label sets per block */
/* Stores n label sets (ids ascending, their serialized pairs) as one block. 0/-errno. */
int sq_put_ls_block(struct sq *s, const uint64_t *ids, const uint8_t *const *blobs,
		    const size_t *lens, size_t n);
/* Stores n stacks (ids ascending, their encoded location lists) as one block. 0/-errno. */
int sq_put_stack_block(struct sq *s, const uint64_t *ids, const uint8_t *const *locs,
		       const size_t *lens, size_t n);
/* A stackdays row (schema 8): stacks ids (ascending, distinct) used first on day. 0/-errno. */
int sq_put_stackdays(struct sq *s, uint64_t day, const uint64_t *ids, size_t n);
/* Stores n locations (ids ascending) as one block, format 2: their strings through the
 * dictionary (new ones added to it and stored as blocks first; r[].sid set). wmu held, in a
 * transaction. 0/-errno. */
int sq_put_loc_block(struct sq *s, struct lrow *r, size_t n);
/* Forgets the hash -> id caches and marks the location index for loading again (after a
 * rollback, they may name rows that are gone). wmu held. */
void sq_dedup_reset(struct sq *s);
/* Likewise the caches only (the location and stack indexes kept: dictionary GC removes what
 * it deletes). */
void sq_dedup_caches_reset(struct sq *s);
/* (Re)loads the location index from every location block (writer connection, wmu held or at
 * open; the string dictionary loaded first). 0 or -errno (then it stays marked stale). */
int sq_locs_load(struct sq *s);
#define STR_BLOCK_MAX	4096	/* strings per block */
/* (Re)loads the string dictionary from the string blocks and meta.str_seq (writer connection,
 * wmu held or at open). 0 or -errno (then it stays marked stale). */
int sq_strs_load(struct sq *s);
/* The string of dictionary id sid, NULL if unknown: ctx is the struct sq. Valid while the
 * caller holds wmu or smu (for reading). */
const char *sq_str_get(void *ctx, uint64_t sid);
/* Forgets dictionary ids ids[0..n) (dictionary GC, after its commit). wmu held. */
void sq_strs_forget(struct sq *s, const uint64_t *ids, size_t n);
/* Frees the dictionary (the store closing). */
void sq_strs_done(struct sq *s);
/* (Re)loads the stack index from the stack blocks, stacks with a row only (writer connection,
 * wmu held or at open). 0 or -errno (then it stays marked stale). */
int sq_stacks_load(struct sq *s);
/* The content hash of a stack of location ids; key is scratch. */
uint64_t sq_stack_hash(const uint64_t *ids, size_t n, struct buf *key);
/* The content hash of a stored location (store_location_hash_of()); key is scratch. */
uint64_t sq_loc_row_hash(const struct lrow *r, struct buf *key);

/* ---- migrate.c: older schemas ---- */
/* Schema 8: an older store's stacks(id, day) rows as stackdays rows (a row per day), the table
 * dropped. In the migration's transaction. 0/-errno. */
int sq_migrate_v8_stackdays(struct sq *s, char *err, size_t errlen);
/* Schema 10: an older store's location blocks (format 1, names inline) written again in format
 * 2, their names into the string dictionary, each under its key. In the migration's
 * transaction. 0/-errno. */
int sq_migrate_v10_locnames(struct sq *s, char *err, size_t errlen);
/* 3: chunks of samples and intervals in format 2 (chunk.h); a schema-2 store has the same
 * tables and its format-1 chunks are read as they are. 4: label sets in blocks. 5: the
 * locations' and stacks' tables keyed by 32 bits of their content hash. 6: no
 * locations table: the index of locations by content is in memory, loaded from the blocks. 7:
 * likewise stacks, whose table keeps (id, day) only. 8: chunks of samples and intervals may
 * be in format 3 (times in a unit: µs by default, --time-resolution); no stacks table: the
 * stacks a batch used first on a day, a `stackdays` row per batch (ids in a blob); an older
 * store's stacks(id, day) rows become a row per day. 9: off-CPU sample values at the time
 * unit too (rounded, chunk.h format 3's flag 16); an older store is read as it is. 10:
 * location names through a store-wide string dictionary (strblocks; location blocks of format
 * 2); older location blocks are read as they are. 13: interval chunks of format 4 (chunk.h:
 * a tie group's order instead of its seqs); a schema-12 store is only marked, its chunks read
 * as they are (a schema-12 server refuses the store rather than fail on the new chunks). 16:
 * sample chunks' stack literals coded against the next new stack (chunk.h flag 32); a
 * schema-15 store is only marked, so that a schema-15 server refuses it. */
#define SQ_SCHEMA_VERSION 16
/* The store's schema version: 0 for a new (empty) database, or -EIO. */
int sq_schema_version(struct sq *s);
/*
 * Renames the tables of schema 1 that schema 2 replaces, before the schema is created; then
 * sq_migrate_v1_copy() fills the new tables from them and drops them. Both inside one
 * transaction the caller opened. 0 or -errno (reason in err).
 */
int sq_migrate_v1_rename(struct sq *s, char *err, size_t errlen);
int sq_migrate_v1_copy(struct sq *s, char *err, size_t errlen);
/* Likewise schema 3 -> 4 (and 1 or 2 on their way): the label sets, one row each with their
 * pairs, into a row each without them and blocks of their pairs. */
int sq_migrate_v3_rename(struct sq *s, char *err, size_t errlen);
int sq_migrate_v3_copy(struct sq *s, char *err, size_t errlen);
/* Likewise 4 -> 7 (2 and 3 on their way, 5 and 6 too): the stacks' table to (id, day), ids and
 * days kept (schema 1's is copied from v1_stacks instead); the locations' table dropped. */
int sq_migrate_v4_rename(struct sq *s, int ver, char *err, size_t errlen);
int sq_migrate_v4_copy(struct sq *s, char *err, size_t errlen);

/* Vacuums the store after a migration (at open: the writer the only connection), taking it to
 * SQ_PAGE_SIZE_S; a failure only logged (the free pages are reused). */
void sq_vacuum(struct sq *s, const char *after);

/* ---- lsext.c: the label sets' time extents on disk (schema 14) ---- */
#define LSEXT_SHIFT	9	/* a row holds the extents of 512 consecutive ids */
struct lsext_ent {
	uint64_t id, first, last;
};
/* Widens the stored extents of e[0..n) (sorted here; an id may repeat), adding those not stored
 * (wmu held, in a transaction). 0 or -errno. */
int sq_lsext_widen(struct sq *s, struct lsext_ent *e, size_t n);
/* Removes the extents of ids[0..n) (sorted here; dictionary GC, wmu held, in a tx). 0/-errno. */
int sq_lsext_remove(struct sq *s, uint64_t *ids, size_t n);
/* cb for every stored extent, on connection db. 0, cb's error or -EIO. */
int sq_lsext_each(sqlite3 *db, int (*cb)(void *ctx, const struct lsext_ent *e), void *ctx);
/* Schema 13 -> 14 (in the migration's transaction): the labelsets table's rows into lsext rows,
 * meta.ls_seq their largest id, the table dropped. 0, or -1 with err set. */
int sq_migrate_v14_lsext(struct sq *s, char *err, size_t errlen);

/* ---- rollup.c: rollups and the maintenance thread ---- */
void *sq_maint_main(void *arg);
/* The rows a late sample left waiting before a restart (data NULL), into s->pend: at open,
 * before the maintenance thread starts and /metrics can be asked. */
void sq_rollup_pending_load(struct sq *s);
/*
 * Schema 10 -> 11, once the label sets are loaded: the rows of rollups_v10 (one label set's
 * each) merged into a row per (level, bucket, kind, node), in one transaction, then vacuumed;
 * nothing where there is no rollups_v10. 0, or -1 with err set.
 */
int sq_rollups_convert_v10(struct sq *s, char *err, size_t errlen);
/* Frees the rows still waiting to be built (at close: built again never, read from below). */
void sq_rollup_pending_free(struct sq *s);
/*
 * Calls cb for every rollup row of level lv with a bucket in [from, to), of kind (all kinds when
 * kind < 0) and node (all nodes when node is NULL; those node_ok refuses left out when it is
 * set), with its stored blob: a deferred hour or day row (schema 14: empty, as its row would
 * not have saved, ROLLUP_KEEP_DIV) by the rows of the level below in its bucket, recursively,
 * so cb sees only rows with entries, and each sample once. 0, cb's error, or -EIO.
 */
typedef int (*sq_rollup_row_cb)(void *ctx, const char *node, int kind, uint64_t bucket,
				const void *blob, size_t len);
int sq_rollup_rows(sqlite3 *db, int lv, uint64_t from, uint64_t to, int kind, const char *node,
		   bool (*node_ok)(void *ctx, const char *node), sq_rollup_row_cb cb, void *ctx);

/* ---- recompress.c ---- */
/* Recompresses settled blobs at o.recompress_level for up to a second (maintenance thread);
 * true when some are still waiting. */
bool sq_recompress(struct sq *s);
/* Rows waiting for recompression (read connection db). */
int64_t sq_recompress_lag(struct sq *s, sqlite3 *db);

/* ---- retention.c ---- */
/* Deletes what is past retention, in bounded rounds, then the dictionary rows no retained
 * record can use (maintenance thread). */
void sq_enforce_retention(struct sq *s);
/* The dictionary part: label sets (and their series), stacks, locations. */
void sq_gc_dictionaries(struct sq *s);
/* Frees the label-set pairs GC unpublished (at close). */
void sq_graveyard_free(struct sq *s);

/* ---- scan.c: sample aggregation over rollups and raw chunks ---- */
int sq_aggregate(struct store *st, const struct store_query *q, struct u64map *agg);

/* ---- lookup.c: the other reads ---- */
int sq_stacks(struct store *st, const uint64_t *ids, size_t n,
	      int (*cb)(void *ctx, uint64_t id, const struct frame *frames, size_t nframes),
	      void *ctx);
int sq_label_sets(struct store *st, uint64_t from, uint64_t to, const struct selector *sel,
		  store_labels_cb cb, void *ctx);
int sq_series(struct store *st, const char *name, uint64_t from, uint64_t to,
	      const struct selector *sel,
	      int (*series_cb)(void *ctx, uint64_t id, const char *const *pairs, size_t n),
	      store_point_cb point_cb, void *ctx);
int sq_metric_names(struct store *st, store_name_cb cb, void *ctx);
int sq_intervals(struct store *st, const char *kind, uint64_t from, uint64_t to,
		 const struct selector *sel, size_t limit, store_interval_cb cb, void *ctx,
		 bool *ret_truncated);
/*
 * Every stored interval of kind (NULL: all) overlapping [from, to) and not past retention, to
 * cb in no particular order, on db (a read connection, in the caller's snapshot). 0, -errno or
 * cb's nonzero return.
 */
/*
 * The interval chunks of kind (NULL: all) that may hold an interval overlapping [from, to):
 * a prepared statement with columns kind, t_min, data, id, and how many of the chunk's
 * intervals stand for off-CPU samples (offcpu_ivs.n, 0 for none). 0 or -EIO.
 */
int sq_ivchunks_query(sqlite3 *db, const char *kind, uint64_t from, uint64_t to,
		      sqlite3_stmt **ret);
int sq_interval_scan(struct sq *s, sqlite3 *db, const char *kind, uint64_t from, uint64_t to,
		     int (*cb)(void *ctx, const char *kind, uint64_t labelset, uint64_t start,
			       uint64_t end, const char *const *attrs, size_t nattrs),
		     void *ctx);
int sq_cpu_period(struct store *st, const char *node, uint64_t *ret_ns);
int sq_nodes(struct store *st,
	     int (*cb)(void *ctx, const char *node, uint64_t first_ns, uint64_t last_ns),
	     void *ctx);

/* ---- offcpu.c: off-CPU samples kept as the blocked intervals they repeat (schema 15) ---- */
#define OFFCPU_IV_KIND	"thread_state"
/* attr of a blocked interval with a stack that stands for no sample (none came to pair with);
 * readers of intervals leave it out (offcpu_public_nattrs()) */
#define OFFCPU_NO_SAMPLE	"__no_offcpu_sample"
/* An off-CPU sample, or what an interval stands for; ref: the caller's index of it. */
struct offcpu_key {
	uint64_t ls, stack, t, value;
	size_t ref;
};
typedef int (*offcpu_cb)(void *ctx, uint64_t ls, uint64_t stack, uint64_t t, uint64_t value);
/*
 * An off-CPU sample's value v (ns) at time t (ns, not yet floored) as stored at time unit u
 * (schema 15): the whole units between the floors of t - v and t, at least one for v > 0 (what
 * an interval of those ends gives back); v <= 0 is rounded to the nearest unit.
 */
int64_t offcpu_value_unit(uint64_t t, int64_t v, uint64_t u);
/* nattrs less the trailing OFFCPU_NO_SAMPLE, if it is there. */
size_t offcpu_public_nattrs(const char *const *attrs, size_t nattrs);
/* The sample an interval as stored (ends floored to unit) with stack (the store's id, 0: none;
 * irow.stack, ichunk.stack) stands for: stack, t, value into *ret (not ls). False if it stands
 * for none. */
bool offcpu_iv_sample(const char *kind, const char *const *attrs, size_t nattrs, uint64_t stack,
		      uint64_t start, uint64_t end, uint64_t unit, struct offcpu_key *ret);
/* Sorts sample keys for offcpu_take(). */
void offcpu_sort(struct offcpu_key *k, size_t n);
/* Takes a sample of smp (sorted) equal to *key (ref aside) whose skip[ref] is not set yet:
 * sets it and answers true; false if there is none. */
bool offcpu_take(const struct offcpu_key *smp, size_t n, const struct offcpu_key *key,
		 uint8_t *skip);
/* The samples a decoded chunk of OFFCPU_IV_KIND stands for, at times in [from, to), to cb;
 * *err: cb's nonzero return. */
void offcpu_chunk_samples(const struct ichunk *c, uint64_t from, uint64_t to, offcpu_cb cb,
			  void *ctx, int *err);
/* The samples at times in [from, to) of the interval chunks with ids in (id_gt, id_le] (and
 * past offcpu_iv_after), those of chunks up to cut_le only from cut_t on, each chunk read
 * once, on db in the caller's snapshot. 0, -errno or cb's return. */
int sq_offcpu_scan(sqlite3 *db, uint64_t from, uint64_t to, int64_t id_gt, int64_t id_le,
		   int64_t cut_le, uint64_t cut_t, offcpu_cb cb, void *ctx);

#endif
