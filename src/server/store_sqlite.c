/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The default store: one SQLite database in WAL mode. Samples are stored as zstd-compressed
 * columnar chunks per (batch, label set, kind), metric points as chunks per series, stacks,
 * locations and label sets deduplicated globally by content hash; a maintenance thread folds
 * new chunks into per-minute, per-hour and per-day rollups and enforces retention (docs/server.md).
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "common/log.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/codec.h"
#include "server/selector.h"
#include "server/store.h"

#define CHUNK_SPAN_NS	(600 * NSEC_PER_SEC)	/* a chunk never spans more (query index bound) */
#define CHUNK_MAX	65536			/* samples or points per chunk */
#define ZLEVEL		3
#define MINUTE_NS	(60 * NSEC_PER_SEC)
#define HOUR_NS		(3600 * NSEC_PER_SEC)
#define DAY_NS		(86400 * NSEC_PER_SEC)
#define LEVELS		3			/* rollups: minute, hour, day (UTC) */

static const uint64_t level_ns[LEVELS] = { MINUTE_NS, HOUR_NS, DAY_NS };
#define POOL_MAX	16
#define DEDUP_CACHE_MAX	(4u << 20)		/* hash -> id entries before the cache is reset */
#define ROLLUP_ROUND	400			/* chunks folded per write transaction */
#define DELETE_ROUND	2000			/* rows deleted per write transaction */
#define ROLLUP_PERIOD_NS	(2 * NSEC_PER_SEC)	/* new chunks wait at most this for rollup */
#define MAX_BLOB	(256u << 20)		/* decompressed chunk bound */

struct lset {
	char **pairs;		/* 2n strings, one allocation with the strings after the pointers */
	size_t n;
	uint64_t first_ns, last_ns;
	const char *node;
	int64_t gpu;		/* value of the "gpu" label, -1 if none */
};

struct sq {
	struct store base;
	struct store_opts o;
	char *path;

	pthread_mutex_t gmu;		/* group commit queue */
	pthread_cond_t gcond;
	struct gitem *ghead, **gtail;
	bool gleader;

	pthread_mutex_t wmu;		/* the writer connection and the dedup caches */
	sqlite3 *w;
	sqlite3_stmt *st[32];
	struct u64map loc_ids, stack_ids, series_ids;	/* content hash -> id */

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
	uint64_t n_raw_deleted, n_rollups_deleted, rollup_lag;
};

enum {
	ST_BEGIN, ST_COMMIT, ST_ROLLBACK, ST_BATCH_SEEN, ST_BATCH_ADD, ST_LS_GET, ST_LS_ADD,
	ST_LS_TIME, ST_LOC_GET, ST_LOC_ADD, ST_STACK_GET, ST_STACK_ADD, ST_CHUNK_ADD,
	ST_SERIES_GET, ST_SERIES_ADD, ST_POINTS_ADD, ST_IVL_ADD, ST_NODE_UP, ST_MAX,
};

static const char *const wsql[ST_MAX] = {
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_BATCH_SEEN] = "SELECT 1 FROM batches WHERE id = ?",
	[ST_BATCH_ADD] = "INSERT INTO batches(id, node, t) VALUES (?, ?, ?)",
	[ST_LS_GET] = "SELECT id FROM labelsets WHERE hash = ?",
	[ST_LS_ADD] = "INSERT INTO labelsets(hash, labels, first_ns, last_ns) VALUES (?, ?, ?, ?)",
	[ST_LS_TIME] = "UPDATE labelsets SET first_ns = min(first_ns, ?2), last_ns = max(last_ns, ?3)"
		       " WHERE id = ?1",
	[ST_LOC_GET] = "SELECT id FROM locations WHERE hash = ?",
	[ST_LOC_ADD] = "INSERT INTO locations(hash, function, module, build_id, file, line, address,"
		       " flags) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
	[ST_STACK_GET] = "SELECT id FROM stacks WHERE hash = ?",
	[ST_STACK_ADD] = "INSERT INTO stacks(hash, locs) VALUES (?, ?)",
	[ST_CHUNK_ADD] = "INSERT INTO chunks(labelset, kind, t_min, t_max, n, data)"
			 " VALUES (?, ?, ?, ?, ?, ?)",
	[ST_SERIES_GET] = "SELECT id FROM series WHERE hash = ?",
	[ST_SERIES_ADD] = "INSERT INTO series(hash, name, labelset) VALUES (?, ?, ?)",
	[ST_POINTS_ADD] = "INSERT INTO points(series, t_min, t_max, n, data) VALUES (?, ?, ?, ?, ?)",
	[ST_IVL_ADD] = "INSERT INTO intervals(kind, labelset, start_ns, end_ns, attrs)"
		       " VALUES (?, ?, ?, ?, ?)",
	[ST_NODE_UP] = "INSERT INTO nodes(node, first_ns, last_ns) VALUES (?1, ?2, ?3) ON CONFLICT(node)"
		       " DO UPDATE SET first_ns = min(first_ns, ?2), last_ns = max(last_ns, ?3)",
};

static const char schema[] =
	"CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER);"
	"INSERT OR IGNORE INTO meta VALUES ('schema', 1), ('rollup_wm', 0);"
	"CREATE TABLE IF NOT EXISTS batches(id INTEGER PRIMARY KEY, node TEXT, t INTEGER);"
	"CREATE INDEX IF NOT EXISTS batches_t ON batches(t);"
	"CREATE TABLE IF NOT EXISTS nodes(node TEXT PRIMARY KEY, first_ns INTEGER, last_ns INTEGER);"
	"CREATE TABLE IF NOT EXISTS labelsets(id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL,"
	" labels BLOB NOT NULL, first_ns INTEGER, last_ns INTEGER);"
	"CREATE TABLE IF NOT EXISTS locations(id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL,"
	" function TEXT, module TEXT, build_id TEXT, file TEXT, line INTEGER, address INTEGER,"
	" flags INTEGER);"
	"CREATE TABLE IF NOT EXISTS stacks(id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL,"
	" locs BLOB NOT NULL);"
	"CREATE TABLE IF NOT EXISTS chunks(id INTEGER PRIMARY KEY, labelset INTEGER, kind INTEGER,"
	" t_min INTEGER, t_max INTEGER, n INTEGER, data BLOB);"
	"CREATE INDEX IF NOT EXISTS chunks_kt ON chunks(kind, t_min);"
	"CREATE TABLE IF NOT EXISTS rollups(level INTEGER, kind INTEGER, bucket INTEGER,"
	" labelset INTEGER, data BLOB, PRIMARY KEY(level, kind, bucket, labelset)) WITHOUT ROWID;"
	"CREATE TABLE IF NOT EXISTS series(id INTEGER PRIMARY KEY, hash INTEGER UNIQUE NOT NULL,"
	" name TEXT, labelset INTEGER);"
	"CREATE INDEX IF NOT EXISTS series_name ON series(name);"
	"CREATE TABLE IF NOT EXISTS points(id INTEGER PRIMARY KEY, series INTEGER, t_min INTEGER,"
	" t_max INTEGER, n INTEGER, data BLOB);"
	"CREATE INDEX IF NOT EXISTS points_st ON points(series, t_min);"
	"CREATE INDEX IF NOT EXISTS points_t ON points(t_max);"
	"CREATE TABLE IF NOT EXISTS intervals(id INTEGER PRIMARY KEY, kind TEXT, labelset INTEGER,"
	" start_ns INTEGER, end_ns INTEGER, attrs BLOB);"
	"CREATE INDEX IF NOT EXISTS intervals_ke ON intervals(kind, end_ns);"
	"CREATE INDEX IF NOT EXISTS intervals_e ON intervals(end_ns);";

/* ---- connections ------------------------------------------------------------------------ */

static int open_conn(struct sq *s, sqlite3 **ret)
{
	sqlite3 *db = NULL;
	int rc;

	rc = sqlite3_open_v2(s->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				       SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite open '%s': %s", s->path, db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return -EIO;
	}
	sqlite3_busy_timeout(db, 60000);
	/* synchronous=FULL: a COMMIT has reached the disk before ingest answers 204. */
	rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
			      " PRAGMA cache_size=-32768; PRAGMA temp_store=MEMORY;",
			  NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite pragmas: %s", sqlite3_errmsg(db));
		sqlite3_close(db);
		return -EIO;
	}
	*ret = db;
	return 0;
}

static sqlite3 *pool_get(struct sq *s)
{
	sqlite3 *db = NULL;

	pthread_mutex_lock(&s->pmu);
	if (s->npool)
		db = s->pool[--s->npool];
	pthread_mutex_unlock(&s->pmu);
	if (!db && open_conn(s, &db))
		return NULL;
	return db;
}

static void pool_put(struct sq *s, sqlite3 *db)
{
	if (!db)
		return;
	sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);	/* no-op unless a query bailed out */
	pthread_mutex_lock(&s->pmu);
	if (s->npool < POOL_MAX) {
		s->pool[s->npool++] = db;
		db = NULL;
	}
	pthread_mutex_unlock(&s->pmu);
	sqlite3_close(db);
}

static int step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -EIO;
}

/* Runs a single-value query; *ret set if a row came back. 1 found, 0 none, -EIO. */
static int step_i64(sqlite3_stmt *st, int64_t *ret)
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

/* ---- label sets ------------------------------------------------------------------------- */

static int cmp_names(const void *a, const void *b)
{
	const char *const *x = a, *const *y = b;

	return strcmp(x[0], y[0]);
}

/* Serialized label set "n\0v\0n\0v\0" of sorted pairs. */
static void ls_bytes(const char *const *pairs, size_t n, struct buf *b)
{
	for (size_t i = 0; i < 2 * n; i++)
		buf_put(b, pairs[i], strlen(pairs[i]) + 1);
}

static int lset_from_blob(struct lset *l, const uint8_t *p, size_t len)
{
	size_t n = 0, off;
	char *strs;

	for (size_t i = 0; i < len; i++)
		n += !p[i];
	if (n % 2)
		return -EINVAL;
	l->pairs = malloc(n * sizeof(char *) + len);
	if (!l->pairs)
		return -ENOMEM;
	strs = (char *)(l->pairs + n);
	memcpy(strs, p, len);
	off = 0;
	for (size_t i = 0; i < n; i++) {
		l->pairs[i] = strs + off;
		off += strlen(strs + off) + 1;
	}
	l->n = n / 2;
	l->node = "";
	l->gpu = -1;
	for (size_t i = 0; i < l->n; i++) {
		if (!strcmp(l->pairs[2 * i], "node"))
			l->node = l->pairs[2 * i + 1];
		else if (!strcmp(l->pairs[2 * i], "gpu"))
			l->gpu = strtoll(l->pairs[2 * i + 1], NULL, 10);
	}
	return 0;
}

/* Adds label set `id` to the in-memory table (lmu held for writing). */
static int lset_put(struct sq *s, uint64_t id, uint64_t hash, const uint8_t *blob, size_t len,
		    uint64_t first, uint64_t last)
{
	struct lset l = { 0 };
	int err;

	if (id >= s->caplsets) {
		size_t ncap = s->caplsets ? s->caplsets : 256;
		struct lset *n;

		while (ncap <= id)
			ncap *= 2;
		n = realloc(s->lsets, ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		memset(n + s->caplsets, 0, (ncap - s->caplsets) * sizeof(*n));
		s->lsets = n;
		s->caplsets = ncap;
	}
	err = lset_from_blob(&l, blob, len);
	if (err)
		return err;
	l.first_ns = first;
	l.last_ns = last;
	free(s->lsets[id].pairs);
	s->lsets[id] = l;
	if (id + 1 > s->nlsets)
		s->nlsets = id + 1;
	if (!u64map_upsert(&s->ls_ids, hash, id, NULL))
		return -ENOMEM;
	return 0;
}

static int load_lsets(struct sq *s)
{
	sqlite3_stmt *st;
	int rc, err = 0;

	rc = sqlite3_prepare_v2(s->w, "SELECT id, hash, labels, first_ns, last_ns FROM labelsets",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		return -EIO;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && !err)
		err = lset_put(s, (uint64_t)sqlite3_column_int64(st, 0),
			       (uint64_t)sqlite3_column_int64(st, 1), sqlite3_column_blob(st, 2),
			       (size_t)sqlite3_column_bytes(st, 2),
			       (uint64_t)sqlite3_column_int64(st, 3),
			       (uint64_t)sqlite3_column_int64(st, 4));
	sqlite3_finalize(st);
	return err ? err : rc == SQLITE_DONE ? 0 : -EIO;
}

/* Which label set ids match sel and [from, to): malloc'ed array of nlsets bytes (lmu held). */
static uint8_t *match_lsets(struct sq *s, const struct selector *sel, uint64_t from, uint64_t to,
			    size_t *ret_n)
{
	uint8_t *m = calloc(s->nlsets ? s->nlsets : 1, 1);

	if (!m)
		return NULL;
	for (size_t i = 1; i < s->nlsets; i++) {
		const struct lset *l = &s->lsets[i];

		if (!l->pairs || l->last_ns < from || l->first_ns >= to)
			continue;
		m[i] = selector_match(sel, (const char *const *)l->pairs, l->n);
	}
	*ret_n = s->nlsets;
	return m;
}

/* ---- ingest ----------------------------------------------------------------------------- */

struct gitem;

struct ls_pending {
	uint64_t id, hash, first, last;
	struct buf blob;
	bool is_new;
};

struct ingest {
	struct sq *s;
	const Gpuscope__V1__Batch *m;
	struct ls_pending *ls;		/* per batch label set */
	uint64_t *loc_gid, *stack_gid;
	char *err;
	size_t errlen;
};

static const char *S(const struct ingest *in, uint32_t i)
{
	return in->m->strings[i];
}

/* Resolves a hash to an id through the cache, then the table; inserts via add otherwise. */
static int dedup_id(struct sq *s, struct u64map *cache, int get, uint64_t hash, uint64_t *ret)
{
	uint64_t *v = u64map_find(cache, hash);
	int64_t id;
	int rc;

	if (v) {
		*ret = *v;
		return 1;
	}
	sqlite3_bind_int64(s->st[get], 1, (int64_t)hash);
	rc = step_i64(s->st[get], &id);
	if (rc < 0)
		return rc;
	if (rc) {
		if (cache->len > DEDUP_CACHE_MAX)
			u64map_done(cache);
		if (!u64map_upsert(cache, hash, (uint64_t)id, NULL))
			return -ENOMEM;
		*ret = (uint64_t)id;
		return 1;
	}
	return 0;
}

static int cache_new(struct sq *s, struct u64map *cache, uint64_t hash, uint64_t id)
{
	(void)s;
	if (cache->len > DEDUP_CACHE_MAX)
		u64map_done(cache);
	return u64map_upsert(cache, hash, id, NULL) ? 0 : -ENOMEM;
}

static int map_label_sets(struct ingest *in)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct sq *s = in->s;
	const char *pairs[2 * (BATCH_MAX_LABELS + 1)];

	for (size_t i = 0; i < m->n_label_sets; i++) {
		const Gpuscope__V1__LabelSet *ls = m->label_sets[i];
		struct ls_pending *p = &in->ls[i];
		size_t n = 0;
		uint64_t *v;
		int64_t id;
		int rc;

		pairs[n++] = "node";
		pairs[n++] = S(in, m->node);
		for (size_t k = 0; k < ls->n_pairs; k += 2) {
			const char *name = S(in, ls->pairs[k]);
			bool dup = !strcmp(name, "node");

			for (size_t j = 2; j < n && !dup; j += 2)
				dup = !strcmp(pairs[j], name);
			if (dup)
				continue;	/* the batch's node wins; first of duplicates wins */
			pairs[n++] = name;
			pairs[n++] = S(in, ls->pairs[k + 1]);
		}
		qsort(pairs, n / 2, 2 * sizeof(char *), cmp_names);
		ls_bytes(pairs, n / 2, &p->blob);
		if (p->blob.oom)
			return -ENOMEM;
		p->hash = hash64(p->blob.p, p->blob.len, 11);
		p->first = UINT64_MAX;
		pthread_rwlock_rdlock(&s->lmu);
		v = u64map_find(&s->ls_ids, p->hash);
		if (v)
			p->id = *v;
		pthread_rwlock_unlock(&s->lmu);
		if (v)
			continue;
		sqlite3_bind_int64(s->st[ST_LS_GET], 1, (int64_t)p->hash);
		rc = step_i64(s->st[ST_LS_GET], &id);
		if (rc < 0)
			return rc;
		if (rc) {
			p->id = (uint64_t)id;
			continue;
		}
		/* Times are set once the records are known (UPDATE below). */
		sqlite3_bind_int64(s->st[ST_LS_ADD], 1, (int64_t)p->hash);
		sqlite3_bind_blob(s->st[ST_LS_ADD], 2, p->blob.p, (int)p->blob.len, SQLITE_STATIC);
		sqlite3_bind_int64(s->st[ST_LS_ADD], 3, INT64_MAX);
		sqlite3_bind_int64(s->st[ST_LS_ADD], 4, 0);
		if (step_done(s->st[ST_LS_ADD]))
			return -EIO;
		p->id = (uint64_t)sqlite3_last_insert_rowid(s->w);
		p->is_new = true;
	}
	return 0;
}

static void ls_touch(struct ingest *in, uint32_t ls, uint64_t t0, uint64_t t1)
{
	struct ls_pending *p = &in->ls[ls];

	if (t0 < p->first)
		p->first = t0;
	if (t1 > p->last)
		p->last = t1;
}

static int map_locations(struct ingest *in)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct sq *s = in->s;
	struct buf key = { 0 };
	int err = 0;

	for (size_t i = 0; i < m->n_locations && !err; i++) {
		const Gpuscope__V1__Location *l = m->locations[i];
		uint32_t flags = (l->kernel ? 1 : 0) | (l->inlined ? 2 : 0);
		sqlite3_stmt *st = s->st[ST_LOC_ADD];
		uint64_t hash, id;
		int rc;

		key.len = 0;
		buf_puts(&key, S(in, l->function));
		buf_put(&key, "", 1);
		buf_puts(&key, S(in, l->module));
		buf_put(&key, "", 1);
		buf_puts(&key, S(in, l->build_id));
		buf_put(&key, "", 1);
		buf_puts(&key, S(in, l->file));
		buf_put(&key, "", 1);
		buf_put(&key, &l->line, sizeof(l->line));
		buf_put(&key, &l->address, sizeof(l->address));
		buf_put(&key, &flags, sizeof(flags));
		if (key.oom) {
			err = -ENOMEM;
			break;
		}
		hash = hash64(key.p, key.len, 12);
		rc = dedup_id(s, &s->loc_ids, ST_LOC_GET, hash, &id);
		if (rc < 0) {
			err = rc;
			break;
		}
		if (!rc) {
			sqlite3_bind_int64(st, 1, (int64_t)hash);
			sqlite3_bind_text(st, 2, S(in, l->function), -1, SQLITE_STATIC);
			sqlite3_bind_text(st, 3, S(in, l->module), -1, SQLITE_STATIC);
			sqlite3_bind_text(st, 4, S(in, l->build_id), -1, SQLITE_STATIC);
			sqlite3_bind_text(st, 5, S(in, l->file), -1, SQLITE_STATIC);
			sqlite3_bind_int64(st, 6, l->line);
			sqlite3_bind_int64(st, 7, (int64_t)l->address);
			sqlite3_bind_int64(st, 8, flags);
			if (step_done(st)) {
				err = -EIO;
				break;
			}
			id = (uint64_t)sqlite3_last_insert_rowid(s->w);
			err = cache_new(s, &s->loc_ids, hash, id);
		}
		in->loc_gid[i] = id;
	}
	buf_done(&key);
	return err;
}

static int map_stacks(struct ingest *in)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct sq *s = in->s;
	struct buf key = { 0 };
	int err = 0;

	for (size_t i = 0; i < m->n_stacks && !err; i++) {
		const Gpuscope__V1__Stack *st = m->stacks[i];
		uint64_t hash, id;
		int rc;

		key.len = 0;
		for (size_t k = 0; k < st->n_locations; k++)
			buf_uvarint(&key, in->loc_gid[st->locations[k]]);
		if (key.oom) {
			err = -ENOMEM;
			break;
		}
		hash = hash64(key.p, key.len, 13);
		rc = dedup_id(s, &s->stack_ids, ST_STACK_GET, hash, &id);
		if (rc < 0) {
			err = rc;
			break;
		}
		if (!rc) {
			sqlite3_bind_int64(s->st[ST_STACK_ADD], 1, (int64_t)hash);
			sqlite3_bind_blob(s->st[ST_STACK_ADD], 2, key.p ? (void *)key.p : "",
					  (int)key.len, SQLITE_STATIC);
			if (step_done(s->st[ST_STACK_ADD])) {
				err = -EIO;
				break;
			}
			id = (uint64_t)sqlite3_last_insert_rowid(s->w);
			err = cache_new(s, &s->stack_ids, hash, id);
		}
		in->stack_gid[i] = id;
	}
	buf_done(&key);
	return err;
}

struct srow {
	uint64_t t;
	uint64_t stack;
	int64_t value;
};

static int cmp_srow(const void *a, const void *b)
{
	const struct srow *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

/*
 * Sample chunk blob (before zstd): uvarint n, flags (bit 0: every value is 1), then n time
 * deltas from t_min (uvarint, times sorted), n stack ids (uvarint), n values (svarint) unless
 * all are 1.
 */
static int put_sample_chunk(struct ingest *in, uint64_t ls, int kind, const struct srow *r,
			    size_t n)
{
	struct sq *s = in->s;
	sqlite3_stmt *st = s->st[ST_CHUNK_ADD];
	struct buf b = { 0 };
	bool all_one = true;
	uint64_t prev = r[0].t;
	uint8_t *z = NULL;
	size_t zlen = 0;
	int err;

	for (size_t i = 0; i < n; i++)
		all_one &= r[i].value == 1;
	buf_uvarint(&b, n);
	buf_uvarint(&b, all_one);
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, r[i].t - prev);
		prev = r[i].t;
	}
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, r[i].stack);
	for (size_t i = 0; i < n && !all_one; i++)
		buf_svarint(&b, r[i].value);
	err = b.oom ? -ENOMEM : zblob_pack(b.p, b.len, ZLEVEL, &z, &zlen);
	buf_done(&b);
	if (err)
		return err;
	sqlite3_bind_int64(st, 1, (int64_t)ls);
	sqlite3_bind_int(st, 2, kind);
	sqlite3_bind_int64(st, 3, (int64_t)r[0].t);
	sqlite3_bind_int64(st, 4, (int64_t)r[n - 1].t);
	sqlite3_bind_int64(st, 5, (int64_t)n);
	sqlite3_bind_blob(st, 6, z, (int)zlen, SQLITE_STATIC);
	err = step_done(st);
	free(z);
	return err;
}

static int store_samples(struct ingest *in, uint64_t *ret_n)
{
	const Gpuscope__V1__Batch *m = in->m;
	int err = 0;

	for (size_t g = 0; g < m->n_samples && !err; g++) {
		const Gpuscope__V1__SampleGroup *sg = m->samples[g];
		size_t n = sg->n_stack, start = 0;
		struct srow *r;
		uint64_t t = 0;

		if (!n)
			continue;
		r = malloc(n * sizeof(*r));
		if (!r)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			t += (uint64_t)sg->time_delta_ns[i];
			r[i].t = t;
			r[i].stack = in->stack_gid[sg->stack[i]];
			r[i].value = sg->n_value ? sg->value[i] : 1;
		}
		qsort(r, n, sizeof(*r), cmp_srow);
		ls_touch(in, sg->label_set, r[0].t, r[n - 1].t);
		for (size_t i = 1; i <= n && !err; i++) {
			if (i < n && i - start < CHUNK_MAX && r[i].t - r[start].t < CHUNK_SPAN_NS)
				continue;
			err = put_sample_chunk(in, in->ls[sg->label_set].id, sg->kind, r + start,
					       i - start);
			start = i;
		}
		free(r);
		*ret_n += n;
	}
	return err;
}

struct prow {
	uint64_t t;
	double v;
};

static int cmp_prow(const void *a, const void *b)
{
	const struct prow *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

/* Points chunk blob: uvarint n, n time deltas from t_min, n doubles (8 bytes LE each). */
static int put_points_chunk(struct sq *s, uint64_t series, const struct prow *r, size_t n)
{
	sqlite3_stmt *st = s->st[ST_POINTS_ADD];
	struct buf b = { 0 };
	uint64_t prev = r[0].t;
	uint8_t *z = NULL;
	size_t zlen = 0;
	int err;

	buf_uvarint(&b, n);
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, r[i].t - prev);
		prev = r[i].t;
	}
	for (size_t i = 0; i < n; i++)
		buf_put(&b, &r[i].v, sizeof(double));
	err = b.oom ? -ENOMEM : zblob_pack(b.p, b.len, ZLEVEL, &z, &zlen);
	buf_done(&b);
	if (err)
		return err;
	sqlite3_bind_int64(st, 1, (int64_t)series);
	sqlite3_bind_int64(st, 2, (int64_t)r[0].t);
	sqlite3_bind_int64(st, 3, (int64_t)r[n - 1].t);
	sqlite3_bind_int64(st, 4, (int64_t)n);
	sqlite3_bind_blob(st, 5, z, (int)zlen, SQLITE_STATIC);
	err = step_done(st);
	free(z);
	return err;
}

static int store_series(struct ingest *in, uint64_t *ret_n)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct sq *s = in->s;
	int err = 0;

	for (size_t i = 0; i < m->n_series && !err; i++) {
		const Gpuscope__V1__MetricSeries *ms = m->series[i];
		const char *name = S(in, ms->name);
		uint64_t ls = in->ls[ms->label_set].id, hash, id, t = 0;
		size_t n = ms->n_value, start = 0;
		struct buf key = { 0 };
		struct prow *r;
		int rc;

		if (!n)
			continue;
		buf_puts(&key, name);
		buf_put(&key, &ls, sizeof(ls));
		hash = key.oom ? 0 : hash64(key.p, key.len, 14);
		buf_done(&key);
		rc = dedup_id(s, &s->series_ids, ST_SERIES_GET, hash, &id);
		if (rc < 0)
			return rc;
		if (!rc) {
			sqlite3_bind_int64(s->st[ST_SERIES_ADD], 1, (int64_t)hash);
			sqlite3_bind_text(s->st[ST_SERIES_ADD], 2, name, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s->st[ST_SERIES_ADD], 3, (int64_t)ls);
			if (step_done(s->st[ST_SERIES_ADD]))
				return -EIO;
			id = (uint64_t)sqlite3_last_insert_rowid(s->w);
			if ((err = cache_new(s, &s->series_ids, hash, id)))
				return err;
		}
		r = malloc(n * sizeof(*r));
		if (!r)
			return -ENOMEM;
		for (size_t k = 0; k < n; k++) {
			t += (uint64_t)ms->time_delta_ns[k];
			r[k].t = t;
			r[k].v = ms->value[k];
		}
		qsort(r, n, sizeof(*r), cmp_prow);
		ls_touch(in, ms->label_set, r[0].t, r[n - 1].t);
		for (size_t k = 1; k <= n && !err; k++) {
			if (k < n && k - start < CHUNK_MAX && r[k].t - r[start].t < CHUNK_SPAN_NS)
				continue;
			err = put_points_chunk(s, id, r + start, k - start);
			start = k;
		}
		free(r);
		*ret_n += n;
	}
	return err;
}

static int store_intervals(struct ingest *in)
{
	const Gpuscope__V1__Batch *m = in->m;
	sqlite3_stmt *st = in->s->st[ST_IVL_ADD];
	struct buf attrs = { 0 };
	int err = 0;

	for (size_t i = 0; i < m->n_intervals && !err; i++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];

		attrs.len = 0;
		for (size_t k = 0; k < iv->n_attrs; k += 2) {
			const char *name = S(in, iv->attrs[k]), *val = S(in, iv->attrs[k + 1]);
			char num[24], *end;

			if (!strcmp(name, "stack_id")) {
				unsigned long long sid = strtoull(val, &end, 10);

				/* Batch-local index -> global id; an invalid one is dropped. */
				if (!*val || *end || sid >= m->n_stacks)
					continue;
				snprintf(num, sizeof(num), "%llu",
					 (unsigned long long)in->stack_gid[sid]);
				val = num;
			}
			buf_put(&attrs, name, strlen(name) + 1);
			buf_put(&attrs, val, strlen(val) + 1);
		}
		if (attrs.oom) {
			err = -ENOMEM;
			break;
		}
		ls_touch(in, iv->label_set, iv->start_ns, iv->end_ns);
		sqlite3_bind_text(st, 1, S(in, iv->kind), -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, (int64_t)in->ls[iv->label_set].id);
		sqlite3_bind_int64(st, 3, (int64_t)iv->start_ns);
		sqlite3_bind_int64(st, 4, (int64_t)iv->end_ns);
		sqlite3_bind_blob(st, 5, attrs.p ? (void *)attrs.p : "", (int)attrs.len,
				  SQLITE_STATIC);
		err = step_done(st);
	}
	buf_done(&attrs);
	return err;
}

static int finish_label_sets(struct ingest *in, uint64_t *ret_first, uint64_t *ret_last)
{
	struct sq *s = in->s;

	*ret_first = UINT64_MAX;
	*ret_last = 0;
	for (size_t i = 0; i < in->m->n_label_sets; i++) {
		struct ls_pending *p = &in->ls[i];

		if (p->first == UINT64_MAX) {
			if (!p->is_new)
				continue;
			p->first = p->last = 0;	/* a set without records: keep it valid */
		}
		if (p->first < *ret_first)
			*ret_first = p->first;
		if (p->last > *ret_last)
			*ret_last = p->last;
		sqlite3_bind_int64(s->st[ST_LS_TIME], 1, (int64_t)p->id);
		sqlite3_bind_int64(s->st[ST_LS_TIME], 2, (int64_t)p->first);
		sqlite3_bind_int64(s->st[ST_LS_TIME], 3, (int64_t)p->last);
		if (step_done(s->st[ST_LS_TIME]))
			return -EIO;
	}
	return 0;
}

/* After COMMIT: publish new label sets and time extents to queries. */
static void publish_label_sets(struct ingest *in)
{
	struct sq *s = in->s;

	pthread_rwlock_wrlock(&s->lmu);
	for (size_t i = 0; i < in->m->n_label_sets; i++) {
		struct ls_pending *p = &in->ls[i];
		struct lset *l;

		if (p->is_new || p->id >= s->nlsets || !s->lsets[p->id].pairs) {
			if (lset_put(s, p->id, p->hash, p->blob.p, p->blob.len, p->first, p->last))
				log_warn("label set %llu: out of memory, not queryable until restart",
					 (unsigned long long)p->id);
			continue;
		}
		if (p->first == UINT64_MAX)
			continue;
		l = &s->lsets[p->id];
		if (p->first < l->first_ns)
			l->first_ns = p->first;
		if (p->last > l->last_ns)
			l->last_ns = p->last;
	}
	pthread_rwlock_unlock(&s->lmu);
}

/* One batch waiting for (or in) a group commit. */
struct gitem {
	struct ingest in;
	int rc;
	bool done;
	uint64_t nsamples, npoints;
	struct gitem *next;
};

/* Stores one batch inside the open transaction, under a savepoint: whole or not at all. */
static int ingest_one(struct sq *s, struct gitem *g)
{
	struct ingest *in = &g->in;
	const Gpuscope__V1__Batch *m = in->m;
	uint64_t first, last;
	int64_t seen;
	int rc;

	if (sqlite3_exec(s->w, "SAVEPOINT b", NULL, NULL, NULL)) {
		snprintf(in->err, in->errlen, "store: %s", sqlite3_errmsg(s->w));
		return -EIO;
	}
	sqlite3_bind_int64(s->st[ST_BATCH_SEEN], 1, (int64_t)m->batch_id);
	rc = m->batch_id ? step_i64(s->st[ST_BATCH_SEEN], &seen) : 0;
	if (rc < 0)
		goto out_rollback;
	if (rc > 0) {
		__atomic_add_fetch(&s->n_dups, 1, __ATOMIC_RELAXED);
		sqlite3_exec(s->w, "RELEASE b", NULL, NULL, NULL);
		return 1;
	}
	if ((rc = map_label_sets(in)) || (rc = map_locations(in)) || (rc = map_stacks(in)) ||
	    (rc = store_samples(in, &g->nsamples)) || (rc = store_series(in, &g->npoints)) ||
	    (rc = store_intervals(in)) || (rc = finish_label_sets(in, &first, &last)))
		goto out_rollback;
	if (first != UINT64_MAX) {
		sqlite3_bind_text(s->st[ST_NODE_UP], 1, S(in, m->node), -1, SQLITE_STATIC);
		sqlite3_bind_int64(s->st[ST_NODE_UP], 2, (int64_t)first);
		sqlite3_bind_int64(s->st[ST_NODE_UP], 3, (int64_t)last);
		if ((rc = step_done(s->st[ST_NODE_UP])))
			goto out_rollback;
	}
	if (m->batch_id) {
		sqlite3_bind_int64(s->st[ST_BATCH_ADD], 1, (int64_t)m->batch_id);
		sqlite3_bind_text(s->st[ST_BATCH_ADD], 2, S(in, m->node), -1, SQLITE_STATIC);
		sqlite3_bind_int64(s->st[ST_BATCH_ADD], 3, (int64_t)wall_ns());
		if ((rc = step_done(s->st[ST_BATCH_ADD])))
			goto out_rollback;
	}
	if (sqlite3_exec(s->w, "RELEASE b", NULL, NULL, NULL)) {
		rc = -EIO;
		goto out_rollback;
	}
	return 0;
out_rollback:
	snprintf(in->err, in->errlen, "store: %s",
		 rc == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->w));
	sqlite3_exec(s->w, "ROLLBACK TO b; RELEASE b", NULL, NULL, NULL);
	/* The dedup caches may name rows that the rollback removed. */
	u64map_done(&s->loc_ids);
	u64map_done(&s->stack_ids);
	u64map_done(&s->series_ids);
	return rc < 0 ? rc : -EIO;
}

#define GROUP_MAX 64

/*
 * Group commit: concurrent ingests queue up; one of them (the leader) stores every queued
 * batch in one transaction, each under its own savepoint, and commits once, so that one fsync
 * covers many batches. Every caller returns only after the COMMIT that holds its batch.
 */
static void run_group(struct sq *s, struct gitem *list)
{
	int rc;

	pthread_mutex_lock(&s->wmu);
	rc = step_done(s->st[ST_BEGIN]);
	for (struct gitem *g = list; g; g = g->next) {
		if (rc) {
			g->rc = -EIO;
			snprintf(g->in.err, g->in.errlen, "store: %s", sqlite3_errmsg(s->w));
			continue;
		}
		g->rc = ingest_one(s, g);
	}
	if (!rc && step_done(s->st[ST_COMMIT])) {
		rc = -EIO;
		for (struct gitem *g = list; g; g = g->next) {
			if (g->rc >= 0) {
				g->rc = -EIO;
				snprintf(g->in.err, g->in.errlen, "store: commit: %s",
					 sqlite3_errmsg(s->w));
			}
		}
		step_done(s->st[ST_ROLLBACK]);
		u64map_done(&s->loc_ids);
		u64map_done(&s->stack_ids);
		u64map_done(&s->series_ids);
	}
	for (struct gitem *g = list; g; g = g->next) {
		if (g->rc)
			continue;
		publish_label_sets(&g->in);
		__atomic_add_fetch(&s->n_samples, g->nsamples, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_points, g->npoints, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_intervals, g->in.m->n_intervals, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_batches, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&s->wmu);
}

static int sq_ingest(struct store *st, const Gpuscope__V1__Batch *m, char *err, size_t errlen)
{
	struct sq *s = (struct sq *)st;
	struct gitem g = { .in = { .s = s, .m = m, .err = err, .errlen = errlen } };
	struct ingest *in = &g.in;

	in->ls = calloc(m->n_label_sets + 1, sizeof(*in->ls));
	in->loc_gid = calloc(m->n_locations + 1, sizeof(*in->loc_gid));
	in->stack_gid = calloc(m->n_stacks + 1, sizeof(*in->stack_gid));
	if (!in->ls || !in->loc_gid || !in->stack_gid) {
		snprintf(err, errlen, "store: out of memory");
		g.rc = -ENOMEM;
		goto out_free;
	}
	pthread_mutex_lock(&s->gmu);
	*s->gtail = &g;
	s->gtail = &g.next;
	while (!g.done) {
		struct gitem *list, **cut;
		int n = 0;

		if (s->gleader) {
			pthread_cond_wait(&s->gcond, &s->gmu);
			continue;
		}
		s->gleader = true;
		list = s->ghead;
		for (cut = &s->ghead; *cut && n < GROUP_MAX; cut = &(*cut)->next)
			n++;
		s->ghead = *cut;
		*cut = NULL;
		if (!s->ghead)
			s->gtail = &s->ghead;
		pthread_mutex_unlock(&s->gmu);
		run_group(s, list);
		pthread_mutex_lock(&s->gmu);
		for (struct gitem *it = list, *next; it; it = next) {
			next = it->next;
			it->done = true;
		}
		s->gleader = false;
		pthread_cond_broadcast(&s->gcond);
	}
	pthread_mutex_unlock(&s->gmu);
out_free:
	for (size_t i = 0; in->ls && i < m->n_label_sets; i++)
		buf_done(&in->ls[i].blob);
	free(in->ls);
	free(in->loc_gid);
	free(in->stack_gid);
	return g.rc;
}

/* ---- chunk and rollup decoding ------------------------------------------------------------ */

/* Decoded sample chunk, in struct-of-arrays form. */
struct chunk {
	struct buf raw;
	size_t n;
	bool all_one;
	uint64_t *t, *stack;
	int64_t *value;
	size_t cap;
};

static void chunk_done(struct chunk *c)
{
	buf_done(&c->raw);
	free(c->t);
	free(c->stack);
	free(c->value);
	memset(c, 0, sizeof(*c));
}

static int chunk_decode(struct chunk *c, const void *blob, size_t len, uint64_t t_min)
{
	struct rd r;
	uint64_t t = t_min;
	int err;

	c->raw.len = 0;
	err = zblob_unpack(blob, len, MAX_BLOB, &c->raw);
	if (err)
		return err;
	r = (struct rd){ c->raw.p, c->raw.p + c->raw.len, false };
	c->n = rd_uvarint(&r);
	c->all_one = rd_uvarint(&r) & 1;
	if (r.bad || c->n > c->raw.len)
		return -EINVAL;
	if (c->n > c->cap) {
		free(c->t);
		free(c->stack);
		free(c->value);
		c->t = malloc(c->n * sizeof(*c->t));
		c->stack = malloc(c->n * sizeof(*c->stack));
		c->value = malloc(c->n * sizeof(*c->value));
		c->cap = c->n;
		if (!c->t || !c->stack || !c->value) {
			c->cap = 0;
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < c->n; i++) {
		t += rd_uvarint(&r);
		c->t[i] = t;
	}
	for (size_t i = 0; i < c->n; i++)
		c->stack[i] = rd_uvarint(&r);
	for (size_t i = 0; i < c->n; i++)
		c->value[i] = c->all_one ? 1 : rd_svarint(&r);
	return r.bad ? -EINVAL : 0;
}

/* Rollup blob: uvarint n, then n x (stack delta uvarint, sum svarint, count uvarint). */
static int rollup_fold(const void *blob, size_t len, struct buf *tmp, struct u64map *agg)
{
	struct rd r;
	uint64_t stack = 0, n;
	int err;

	tmp->len = 0;
	err = zblob_unpack(blob, len, MAX_BLOB, tmp);
	if (err)
		return err;
	r = (struct rd){ tmp->p, tmp->p + tmp->len, false };
	n = rd_uvarint(&r);
	for (uint64_t i = 0; i < n && !r.bad; i++) {
		uint64_t *v;
		int64_t sum;

		stack += rd_uvarint(&r);
		sum = rd_svarint(&r);
		rd_uvarint(&r);
		v = u64map_upsert(agg, stack, 0, NULL);
		if (!v)
			return -ENOMEM;
		*v += (uint64_t)sum;
	}
	return r.bad ? -EINVAL : 0;
}

/* ---- rollup builder ------------------------------------------------------------------------ */

/* One rollup row being built: stack -> (sum, count). */
struct racc {
	uint64_t level, kind, bucket, ls;
	struct u64map idx;	/* stack -> index */
	uint64_t *stack, *count;
	int64_t *sum;
	size_t n, cap;
};

static int racc_add(struct racc *a, uint64_t stack, int64_t sum, uint64_t count)
{
	int ins;
	uint64_t *v = u64map_upsert(&a->idx, stack, a->n, &ins);

	if (!v)
		return -ENOMEM;
	if (ins) {
		if (a->n == a->cap) {
			size_t ncap = a->cap ? a->cap * 2 : 64;
			uint64_t *ns = realloc(a->stack, ncap * sizeof(*ns));
			uint64_t *nc;
			int64_t *nsum;

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
		}
		a->stack[a->n] = stack;
		a->sum[a->n] = 0;
		a->count[a->n] = 0;
		a->n++;
	}
	a->sum[*v] += sum;
	a->count[*v] += count;
	return 0;
}

static void racc_free(struct racc *a)
{
	if (!a)
		return;
	u64map_done(&a->idx);
	free(a->stack);
	free(a->sum);
	free(a->count);
	free(a);
}

struct rollup_round {
	struct u64map keys;	/* hash of (level, kind, bucket, ls) -> index+1 into accs (probe) */
	struct racc **accs;
	size_t n, cap;
};

static struct racc *round_get(struct rollup_round *rr, uint64_t level, uint64_t kind,
			      uint64_t bucket, uint64_t ls)
{
	uint64_t k[4] = { level, kind, bucket, ls }, h = hash64(k, sizeof(k), 15), *v;
	struct racc *a;

	for (; (v = u64map_find(&rr->keys, h)); h++) {
		a = rr->accs[*v];
		if (a->level == level && a->kind == kind && a->bucket == bucket && a->ls == ls)
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
	*a = (struct racc){ .level = level, .kind = kind, .bucket = bucket, .ls = ls };
	if (!u64map_upsert(&rr->keys, h, rr->n, NULL)) {
		free(a);
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

static int cmp_u64idx(const void *a, const void *b, void *ctx)
{
	const uint64_t *stacks = ctx;
	uint64_t x = stacks[*(const size_t *)a], y = stacks[*(const size_t *)b];

	return x < y ? -1 : x > y;
}

/* Merges the accumulated row with the stored one and writes it back (wmu held, in a tx). */
static int rollup_write(struct sq *s, sqlite3_stmt *get, sqlite3_stmt *put, struct racc *a,
			struct buf *tmp)
{
	struct buf b = { 0 };
	size_t *order = NULL;
	uint64_t prev = 0;
	uint8_t *z = NULL;
	size_t zlen;
	int rc, err = 0;

	sqlite3_bind_int64(get, 1, (int64_t)a->level);
	sqlite3_bind_int64(get, 2, (int64_t)a->kind);
	sqlite3_bind_int64(get, 3, (int64_t)a->bucket);
	sqlite3_bind_int64(get, 4, (int64_t)a->ls);
	rc = sqlite3_step(get);
	if (rc == SQLITE_ROW) {
		struct rd r;
		uint64_t n, stack = 0;

		tmp->len = 0;
		err = zblob_unpack(sqlite3_column_blob(get, 0), (size_t)sqlite3_column_bytes(get, 0),
				   MAX_BLOB, tmp);
		r = (struct rd){ tmp->p, tmp->p + tmp->len, false };
		n = err ? 0 : rd_uvarint(&r);
		for (uint64_t i = 0; i < n && !r.bad && !err; i++) {
			int64_t sum;
			uint64_t cnt;

			stack += rd_uvarint(&r);
			sum = rd_svarint(&r);
			cnt = rd_uvarint(&r);
			err = racc_add(a, stack, sum, cnt);
		}
		if (r.bad)
			err = -EINVAL;
	} else if (rc != SQLITE_DONE) {
		err = -EIO;
	}
	sqlite3_reset(get);
	if (err)
		goto out;
	order = malloc((a->n ? a->n : 1) * sizeof(*order));
	if (!order) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < a->n; i++)
		order[i] = i;
	qsort_r(order, a->n, sizeof(*order), cmp_u64idx, a->stack);
	buf_uvarint(&b, a->n);
	for (size_t i = 0; i < a->n; i++) {
		size_t k = order[i];

		buf_uvarint(&b, a->stack[k] - prev);
		prev = a->stack[k];
		buf_svarint(&b, a->sum[k]);
		buf_uvarint(&b, a->count[k]);
	}
	err = b.oom ? -ENOMEM : zblob_pack(b.p, b.len, ZLEVEL, &z, &zlen);
	if (err)
		goto out;
	sqlite3_bind_int64(put, 1, (int64_t)a->level);
	sqlite3_bind_int64(put, 2, (int64_t)a->kind);
	sqlite3_bind_int64(put, 3, (int64_t)a->bucket);
	sqlite3_bind_int64(put, 4, (int64_t)a->ls);
	sqlite3_bind_blob(put, 5, z, (int)zlen, SQLITE_STATIC);
	err = step_done(put);
	free(z);
out:
	free(order);
	buf_done(&b);
	return err;
}

/* Folds up to ROLLUP_ROUND new chunks into the rollups. >0: chunks folded, 0: none, -errno. */
static int rollup_round(struct sq *s)
{
	sqlite3_stmt *sel = NULL, *get = NULL, *put = NULL, *wm = NULL;
	struct rollup_round rr = { 0 };
	struct chunk c = { 0 };
	struct buf tmp = { 0 };
	int64_t last = -1;
	int rc, err = 0, n = 0;

	pthread_mutex_lock(&s->wmu);
	if (step_done(s->st[ST_BEGIN])) {
		pthread_mutex_unlock(&s->wmu);
		return -EIO;
	}
	rc = sqlite3_prepare_v2(s->w, "SELECT id, labelset, kind, t_min, data FROM chunks WHERE id >"
				" (SELECT value FROM meta WHERE key = 'rollup_wm') ORDER BY id LIMIT ?",
				-1, &sel, NULL);
	rc |= sqlite3_prepare_v2(s->w, "SELECT data FROM rollups WHERE level = ? AND kind = ? AND"
				 " bucket = ? AND labelset = ?", -1, &get, NULL);
	rc |= sqlite3_prepare_v2(s->w, "INSERT OR REPLACE INTO rollups(level, kind, bucket, labelset,"
				 " data) VALUES (?, ?, ?, ?, ?)", -1, &put, NULL);
	rc |= sqlite3_prepare_v2(s->w, "UPDATE meta SET value = ? WHERE key = 'rollup_wm'", -1, &wm,
				 NULL);
	if (rc) {
		err = -EIO;
		goto out;
	}
	sqlite3_bind_int(sel, 1, ROLLUP_ROUND);
	while (!err && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
		uint64_t ls = (uint64_t)sqlite3_column_int64(sel, 1);
		uint64_t kind = (uint64_t)sqlite3_column_int64(sel, 2);

		last = sqlite3_column_int64(sel, 0);
		n++;
		err = chunk_decode(&c, sqlite3_column_blob(sel, 4), (size_t)sqlite3_column_bytes(sel, 4),
				   (uint64_t)sqlite3_column_int64(sel, 3));
		if (err) {
			log_warn("chunk %lld: undecodable (%s), not rolled up", (long long)last,
				 strerror(-err));
			err = 0;
			continue;
		}
		for (size_t i = 0; i < c.n && !err; i++) {
			for (int lv = 0; lv < LEVELS && !err; lv++) {
				uint64_t b = c.t[i] / level_ns[lv] * level_ns[lv];
				struct racc *acc = round_get(&rr, (uint64_t)lv, kind, b, ls);

				if (!acc || racc_add(acc, c.stack[i], c.value[i], 1))
					err = -ENOMEM;
			}
		}
	}
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = -EIO;
	sqlite3_reset(sel);
	for (size_t i = 0; i < rr.n && !err; i++)
		err = rollup_write(s, get, put, rr.accs[i], &tmp);
	if (!err && last >= 0) {
		sqlite3_bind_int64(wm, 1, last);
		err = step_done(wm);
	}
out:
	sqlite3_finalize(sel);
	sqlite3_finalize(get);
	sqlite3_finalize(put);
	sqlite3_finalize(wm);
	if (err || step_done(s->st[ST_COMMIT])) {
		log_warn("rollup: %s", err == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->w));
		step_done(s->st[ST_ROLLBACK]);
		err = err ? err : -EIO;
	}
	pthread_mutex_unlock(&s->wmu);
	round_done(&rr);
	chunk_done(&c);
	buf_done(&tmp);
	return err ? err : n;
}

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

static void enforce_retention(struct sq *s)
{
	uint64_t now = wall_ns(), raw = s->o.raw_retention_ns < s->o.retention_ns ?
					      s->o.raw_retention_ns : s->o.retention_ns;
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
				   " AND bucket <= ?1 LIMIT ?3)", cut - (int64_t)level_ns[lv], lv);
	__atomic_add_fetch(&s->n_rollups_deleted, (uint64_t)n, __ATOMIC_RELAXED);
	n = delete_all(s, "DELETE FROM points WHERE id IN (SELECT id FROM points WHERE t_max < ?1"
			  " AND ?2 = ?2 LIMIT ?3)", cut, 0);
	n = delete_all(s, "DELETE FROM intervals WHERE id IN (SELECT id FROM intervals WHERE"
			  " end_ns < ?1 AND ?2 = ?2 LIMIT ?3)", cut, 0);
	n = delete_all(s, "DELETE FROM batches WHERE id IN (SELECT id FROM batches WHERE t < ?1"
			  " AND ?2 = ?2 LIMIT ?3)", cut, 0);
}

static void *maint_main(void *arg)
{
	struct sq *s = arg;
	uint64_t last_ret = 0;

	pthread_mutex_lock(&s->mmu);
	while (!s->stopping) {
		struct timespec ts;
		uint64_t period = s->o.enforce_period_ns < ROLLUP_PERIOD_NS ? s->o.enforce_period_ns
										: ROLLUP_PERIOD_NS;
		uint64_t until = wall_ns() + period;
		int n;

		pthread_mutex_unlock(&s->mmu);
		do
			n = rollup_round(s);
		while (n == ROLLUP_ROUND && !s->stopping);
		if (wall_ns() - last_ret >= s->o.enforce_period_ns) {
			enforce_retention(s);
			last_ret = wall_ns();
		}
		pthread_mutex_lock(&s->mmu);
		if (s->stopping)
			break;
		ts.tv_sec = (time_t)(until / NSEC_PER_SEC);
		ts.tv_nsec = (long)(until % NSEC_PER_SEC);
		pthread_cond_timedwait(&s->mcond, &s->mmu, &ts);
	}
	pthread_mutex_unlock(&s->mmu);
	return NULL;
}

/* ---- queries ----------------------------------------------------------------------------- */

struct busy {
	uint64_t start, end;
};

/* gpu_busy intervals of one node, merged and sorted. */
struct node_busy {
	const char *node;
	struct busy *v;
	size_t n, cap;
};

struct agg_ctx {
	struct sq *s;
	const struct store_query *q;
	struct u64map *agg;
	const uint8_t *match;		/* label set id -> selected */
	size_t nmatch;
	struct node_busy *nodes;
	size_t nnodes;
	struct node_busy **ls_busy;	/* label set id -> its node's busy list, gpu_idle only */
	struct chunk c;
};

static int cmp_busy(const void *a, const void *b)
{
	const struct busy *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

static bool in_busy(const struct node_busy *nb, uint64_t t)
{
	size_t lo = 0, hi = nb->n;

	/* Last interval starting at or before t. */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (nb->v[mid].start <= t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo && t < nb->v[lo - 1].end;
}

static int load_busy(struct agg_ctx *a, sqlite3 *db)
{
	struct sq *s = a->s;
	sqlite3_stmt *st;
	int rc, err = 0;

	rc = sqlite3_prepare_v2(db, "SELECT labelset, start_ns, end_ns FROM intervals WHERE"
				" kind = 'gpu_busy' AND end_ns > ?1 AND start_ns < ?2", -1, &st, NULL);
	if (rc)
		return -EIO;
	sqlite3_bind_int64(st, 1, (int64_t)a->q->from_ns);
	sqlite3_bind_int64(st, 2, (int64_t)a->q->to_ns);
	pthread_rwlock_rdlock(&s->lmu);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t ls = (uint64_t)sqlite3_column_int64(st, 0);
		struct busy b = { (uint64_t)sqlite3_column_int64(st, 1),
				  (uint64_t)sqlite3_column_int64(st, 2) };
		struct node_busy *nb = NULL;

		if (ls >= s->nlsets || !s->lsets[ls].pairs || s->lsets[ls].gpu != a->q->gpu_idle)
			continue;
		for (size_t i = 0; i < a->nnodes && !nb; i++)
			if (!strcmp(a->nodes[i].node, s->lsets[ls].node))
				nb = &a->nodes[i];
		if (!nb) {
			struct node_busy *n = realloc(a->nodes, (a->nnodes + 1) * sizeof(*n));

			if (!n) {
				err = -ENOMEM;
				break;
			}
			a->nodes = n;
			nb = &a->nodes[a->nnodes++];
			*nb = (struct node_busy){ .node = s->lsets[ls].node };
		}
		if (nb->n == nb->cap) {
			size_t ncap = nb->cap ? nb->cap * 2 : 64;
			struct busy *v = realloc(nb->v, ncap * sizeof(*v));

			if (!v) {
				err = -ENOMEM;
				break;
			}
			nb->v = v;
			nb->cap = ncap;
		}
		nb->v[nb->n++] = b;
	}
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = -EIO;
	sqlite3_finalize(st);
	/* Sort and merge overlapping intervals, then point every label set at its node's list. */
	for (size_t i = 0; i < a->nnodes && !err; i++) {
		struct node_busy *nb = &a->nodes[i];
		size_t k = 0;

		qsort(nb->v, nb->n, sizeof(*nb->v), cmp_busy);
		for (size_t j = 1; j < nb->n; j++) {
			if (nb->v[j].start <= nb->v[k].end) {
				if (nb->v[j].end > nb->v[k].end)
					nb->v[k].end = nb->v[j].end;
			} else {
				nb->v[++k] = nb->v[j];
			}
		}
		if (nb->n)
			nb->n = k + 1;
	}
	if (!err) {
		a->ls_busy = calloc(a->nmatch ? a->nmatch : 1, sizeof(*a->ls_busy));
		if (!a->ls_busy)
			err = -ENOMEM;
	}
	for (size_t id = 0; !err && id < a->nmatch && id < s->nlsets; id++) {
		if (!a->match[id])
			continue;
		for (size_t i = 0; i < a->nnodes; i++)
			if (!strcmp(a->nodes[i].node, s->lsets[id].node))
				a->ls_busy[id] = &a->nodes[i];
	}
	pthread_rwlock_unlock(&s->lmu);
	return err;
}

enum scan_mode { SCAN_ANY, SCAN_ROLLED, SCAN_UNROLLED };

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
		const struct node_busy *nb;
		bool inside = t_min >= from && t_max < to;

		if (ls >= a->nmatch || !a->match[ls])
			continue;
		nb = a->ls_busy ? a->ls_busy[ls] : NULL;
		err = chunk_decode(&a->c, sqlite3_column_blob(st, 3),
				   (size_t)sqlite3_column_bytes(st, 3), t_min);
		for (size_t i = 0; !err && i < a->c.n; i++) {
			uint64_t *v, t = a->c.t[i];

			if (!inside && (t < from || t >= to))
				continue;
			if (nb && in_busy(nb, t))
				continue;
			v = u64map_upsert(a->agg, a->c.stack[i], 0, NULL);
			if (!v)
				err = -ENOMEM;
			else
				*v += (uint64_t)a->c.value[i];
		}
	}
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = -EIO;
	sqlite3_finalize(st);
	return err;
}

static int scan_rollups(struct agg_ctx *a, sqlite3 *db, int level, uint64_t from, uint64_t to)
{
	struct buf tmp = { 0 };
	sqlite3_stmt *st;
	int rc, err = 0;

	if (from >= to)
		return 0;
	rc = sqlite3_prepare_v2(db, "SELECT labelset, data FROM rollups WHERE level = ?1 AND"
				" kind = ?2 AND bucket >= ?3 AND bucket < ?4", -1, &st, NULL);
	if (rc)
		return -EIO;
	sqlite3_bind_int(st, 1, level);
	sqlite3_bind_int(st, 2, a->q->kind);
	sqlite3_bind_int64(st, 3, (int64_t)from);
	sqlite3_bind_int64(st, 4, (int64_t)to);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t ls = (uint64_t)sqlite3_column_int64(st, 0);

		if (ls >= a->nmatch || !a->match[ls])
			continue;
		err = rollup_fold(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1),
				  &tmp, a->agg);
	}
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = -EIO;
	sqlite3_finalize(st);
	buf_done(&tmp);
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
	c = ceil_to(from, level_ns[lv + 1]);
	d = floor_to(to, level_ns[lv + 1]);
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
 * Plan: samples already rolled up (chunk id <= watermark) come from hour rollups for whole
 * hours, minute rollups for whole minutes, and raw chunks for the partial minutes at both
 * ends; chunks not yet rolled up are scanned raw. Edges older than the raw retention are
 * widened to whole minutes. gpu_idle needs each sample's time: raw chunks only.
 */
static int sq_aggregate(struct store *st, const struct store_query *q, struct u64map *agg)
{
	struct sq *s = (struct sq *)st;
	struct agg_ctx a = { .s = s, .q = q, .agg = agg };
	uint64_t raw = s->o.raw_retention_ns < s->o.retention_ns ? s->o.raw_retention_ns
								: s->o.retention_ns;
	uint64_t raw_cut = wall_ns() - raw, from = q->from_ns, to = q->to_ns, m1, m2;
	sqlite3 *db = pool_get(s);
	int64_t wm = 0;
	int err;

	if (!db)
		return -EIO;
	err = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) ? -EIO : 0;
	if (!err) {
		sqlite3_stmt *w;

		err = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'rollup_wm'", -1, &w,
					 NULL) ? -EIO : 0;
		if (!err && step_i64(w, &wm) < 0)
			err = -EIO;
		sqlite3_finalize(w);
	}
	if (err)
		goto out;
	pthread_rwlock_rdlock(&s->lmu);
	a.match = match_lsets(s, q->sel, from, to, &a.nmatch);
	pthread_rwlock_unlock(&s->lmu);
	if (!a.match) {
		err = -ENOMEM;
		goto out;
	}
	if (q->gpu_idle >= 0) {
		err = load_busy(&a, db);
		if (!err)
			err = scan_chunks(&a, db, SCAN_ANY, 0, from, to);
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
	pool_put(s, db);
	for (size_t i = 0; i < a.nnodes; i++)
		free(a.nodes[i].v);
	free(a.nodes);
	free(a.ls_busy);
	free((void *)a.match);
	chunk_done(&a.c);
	return err;
}

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

static int sq_stacks(struct store *st, const uint64_t *ids, size_t n,
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
	sqlite3 *db = pool_get(s);
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
	pool_put(s, db);
	u64map_done(&idx);
	buf_done(&strs);
	free(locs);
	free(frames);
	free(fl);
	return err;
}

static int sq_label_sets(struct store *st, uint64_t from, uint64_t to, const struct selector *sel,
			 store_labels_cb cb, void *ctx)
{
	struct sq *s = (struct sq *)st;
	int err = 0;

	pthread_rwlock_rdlock(&s->lmu);
	for (size_t i = 1; i < s->nlsets && !err; i++) {
		const struct lset *l = &s->lsets[i];

		if (!l->pairs || l->last_ns < from || l->first_ns >= to)
			continue;
		if (selector_match(sel, (const char *const *)l->pairs, l->n))
			err = cb(ctx, (const char *const *)l->pairs, l->n);
	}
	pthread_rwlock_unlock(&s->lmu);
	return err;
}

static int sq_series(struct store *st, const char *name, uint64_t from, uint64_t to,
		     const struct selector *sel,
		     int (*series_cb)(void *ctx, uint64_t id, const char *const *pairs, size_t n),
		     store_point_cb point_cb, void *ctx)
{
	struct sq *s = (struct sq *)st;
	sqlite3_stmt *ss = NULL, *ps = NULL;
	sqlite3 *db = pool_get(s);
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
		bool ok;

		pthread_rwlock_rdlock(&s->lmu);
		ok = ls < s->nlsets && s->lsets[ls].pairs && s->lsets[ls].last_ns >= from &&
		     s->lsets[ls].first_ns < to &&
		     selector_match(sel, (const char *const *)s->lsets[ls].pairs, s->lsets[ls].n);
		if (ok)
			err = series_cb(ctx, id, (const char *const *)s->lsets[ls].pairs,
					s->lsets[ls].n);
		pthread_rwlock_unlock(&s->lmu);
		if (!ok || err)
			continue;
		sqlite3_bind_int64(ps, 1, (int64_t)id);
		sqlite3_bind_int64(ps, 2, (int64_t)(from > CHUNK_SPAN_NS ? from - CHUNK_SPAN_NS : 0));
		sqlite3_bind_int64(ps, 3, (int64_t)to);
		sqlite3_bind_int64(ps, 4, (int64_t)from);
		while (!err && sqlite3_step(ps) == SQLITE_ROW) {
			uint64_t t = (uint64_t)sqlite3_column_int64(ps, 0), n;
			const uint8_t *vals;
			struct rd r;

			raw.len = 0;
			err = zblob_unpack(sqlite3_column_blob(ps, 1),
					   (size_t)sqlite3_column_bytes(ps, 1), MAX_BLOB, &raw);
			if (err)
				break;
			r = (struct rd){ raw.p, raw.p + raw.len, false };
			n = rd_uvarint(&r);
			if (n > raw.len)
				break;
			/* Times first, then the doubles: find where the doubles start. */
			{
				struct rd tr = r;

				for (uint64_t i = 0; i < n; i++)
					rd_uvarint(&tr);
				vals = tr.p;
				if (tr.bad || (size_t)(r.end - vals) < n * sizeof(double))
					break;
			}
			for (uint64_t i = 0; i < n && !err; i++) {
				double v;

				t += rd_uvarint(&r);
				memcpy(&v, vals + i * sizeof(double), sizeof(v));
				if (t >= from && t < to)
					err = point_cb(ctx, id, t, v);
			}
		}
		sqlite3_reset(ps);
	}
out:
	sqlite3_finalize(ss);
	sqlite3_finalize(ps);
	pool_put(s, db);
	buf_done(&raw);
	return err;
}

static int sq_metric_names(struct store *st, store_name_cb cb, void *ctx)
{
	struct sq *s = (struct sq *)st;
	sqlite3 *db = pool_get(s);
	sqlite3_stmt *q = NULL;
	int err = 0;

	if (!db)
		return -EIO;
	if (sqlite3_prepare_v2(db, "SELECT DISTINCT name FROM series ORDER BY name", -1, &q, NULL))
		err = -EIO;
	while (!err && sqlite3_step(q) == SQLITE_ROW)
		err = cb(ctx, (const char *)sqlite3_column_text(q, 0));
	sqlite3_finalize(q);
	pool_put(s, db);
	return err;
}

static int sq_intervals(struct store *st, const char *kind, uint64_t from, uint64_t to,
			const struct selector *sel, size_t limit, store_interval_cb cb, void *ctx,
			bool *ret_truncated)
{
	struct sq *s = (struct sq *)st;
	sqlite3 *db = pool_get(s);
	sqlite3_stmt *q = NULL;
	size_t n = 0;
	int err = 0;

	*ret_truncated = false;
	if (!db)
		return -EIO;
	if (sqlite3_prepare_v2(db, kind ? "SELECT kind, labelset, start_ns, end_ns, attrs FROM"
				      " intervals WHERE kind = ?3 AND end_ns > ?1 AND start_ns < ?2"
				      " ORDER BY start_ns, id" :
					  "SELECT kind, labelset, start_ns, end_ns, attrs FROM"
				      " intervals WHERE end_ns > ?1 AND start_ns < ?2"
				      " ORDER BY start_ns, id", -1, &q, NULL)) {
		err = -EIO;
		goto out;
	}
	sqlite3_bind_int64(q, 1, (int64_t)from);
	sqlite3_bind_int64(q, 2, (int64_t)to);
	if (kind)
		sqlite3_bind_text(q, 3, kind, -1, SQLITE_STATIC);
	pthread_rwlock_rdlock(&s->lmu);
	while (!err && sqlite3_step(q) == SQLITE_ROW) {
		uint64_t ls = (uint64_t)sqlite3_column_int64(q, 1);
		const char *attrs[2 * BATCH_MAX_LABELS];
		const char *p = sqlite3_column_blob(q, 4);
		size_t len = (size_t)sqlite3_column_bytes(q, 4), na = 0, off = 0;
		const struct lset *l;

		if (ls >= s->nlsets || !s->lsets[ls].pairs)
			continue;
		l = &s->lsets[ls];
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
	pthread_rwlock_unlock(&s->lmu);
out:
	sqlite3_finalize(q);
	pool_put(s, db);
	return err;
}

static int sq_nodes(struct store *st,
		    int (*cb)(void *ctx, const char *node, uint64_t first_ns, uint64_t last_ns),
		    void *ctx)
{
	struct sq *s = (struct sq *)st;
	sqlite3 *db = pool_get(s);
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
	pool_put(s, db);
	return err;
}

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
	if (step_i64(q, &v) <= 0)
		v = 0;
	sqlite3_finalize(q);
	return v;
}

static void sq_stats(struct store *st, struct store_stats *o)
{
	struct sq *s = (struct sq *)st;
	sqlite3 *db = pool_get(s);

	memset(o, 0, sizeof(*o));
	o->bytes_on_disk = file_size(s->path, "") + file_size(s->path, "-wal");
	o->samples = __atomic_load_n(&s->n_samples, __ATOMIC_RELAXED);
	o->points = __atomic_load_n(&s->n_points, __ATOMIC_RELAXED);
	o->intervals = __atomic_load_n(&s->n_intervals, __ATOMIC_RELAXED);
	o->batches = __atomic_load_n(&s->n_batches, __ATOMIC_RELAXED);
	o->duplicate_batches = __atomic_load_n(&s->n_dups, __ATOMIC_RELAXED);
	o->raw_chunks_deleted = __atomic_load_n(&s->n_raw_deleted, __ATOMIC_RELAXED);
	o->rollups_deleted = __atomic_load_n(&s->n_rollups_deleted, __ATOMIC_RELAXED);
	if (db) {
		int64_t lag = query_i64(db, "SELECT (SELECT coalesce(max(id), 0) FROM chunks) -"
					    " (SELECT value FROM meta WHERE key = 'rollup_wm')");

		o->rollup_lag_chunks = lag > 0 ? (uint64_t)lag : 0;
		o->stacks = (uint64_t)query_i64(db, "SELECT coalesce(max(id), 0) FROM stacks");
		o->locations = (uint64_t)query_i64(db, "SELECT coalesce(max(id), 0) FROM locations");
		pool_put(s, db);
	}
	pthread_rwlock_rdlock(&s->lmu);
	o->label_sets = s->nlsets ? s->nlsets - 1 : 0;
	pthread_rwlock_unlock(&s->lmu);
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
	for (size_t i = 0; i < s->nlsets; i++)
		free(s->lsets[i].pairs);
	free(s->lsets);
	u64map_done(&s->ls_ids);
	u64map_done(&s->loc_ids);
	u64map_done(&s->stack_ids);
	u64map_done(&s->series_ids);
	pthread_mutex_destroy(&s->gmu);
	pthread_cond_destroy(&s->gcond);
	pthread_mutex_destroy(&s->wmu);
	pthread_mutex_destroy(&s->pmu);
	pthread_mutex_destroy(&s->mmu);
	pthread_cond_destroy(&s->mcond);
	pthread_rwlock_destroy(&s->lmu);
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
	.stats = sq_stats,
	.close = sq_close,
};

struct store *store_sqlite_open(const struct store_opts *opts, char *err, size_t errlen)
{
	struct sq *s = calloc(1, sizeof(*s));
	char *emsg = NULL;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->base.ops = &sqlite_ops;
	s->o = *opts;
	s->gtail = &s->ghead;
	pthread_mutex_init(&s->gmu, NULL);
	pthread_cond_init(&s->gcond, NULL);
	pthread_mutex_init(&s->wmu, NULL);
	pthread_mutex_init(&s->pmu, NULL);
	pthread_mutex_init(&s->mmu, NULL);
	pthread_cond_init(&s->mcond, NULL);
	pthread_rwlock_init(&s->lmu, NULL);
	if (mkdir(opts->dir, 0750) && errno != EEXIST) {
		snprintf(err, errlen, "mkdir '%s': %s", opts->dir, strerror(errno));
		goto out_close;
	}
	if (asprintf(&s->path, "%s/gpuscope.db", opts->dir) < 0) {
		s->path = NULL;
		snprintf(err, errlen, "out of memory");
		goto out_close;
	}
	if (open_conn(s, &s->w)) {
		snprintf(err, errlen, "cannot open '%s'", s->path);
		goto out_close;
	}
	if (sqlite3_exec(s->w, schema, NULL, NULL, &emsg)) {
		snprintf(err, errlen, "schema of '%s': %s", s->path, emsg ? emsg : "?");
		sqlite3_free(emsg);
		goto out_close;
	}
	for (int i = 0; i < ST_MAX; i++) {
		if (sqlite3_prepare_v3(s->w, wsql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i],
				       NULL)) {
			snprintf(err, errlen, "prepare '%s': %s", wsql[i], sqlite3_errmsg(s->w));
			goto out_close;
		}
	}
	if (load_lsets(s)) {
		snprintf(err, errlen, "loading label sets: %s", sqlite3_errmsg(s->w));
		goto out_close;
	}
	if (pthread_create(&s->maint, NULL, maint_main, s)) {
		snprintf(err, errlen, "cannot start the maintenance thread");
		goto out_close;
	}
	s->maint_started = true;
	return &s->base;
out_close:
	sq_close(&s->base);
	return NULL;
}
