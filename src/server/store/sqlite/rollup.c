/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rollups of the SQLite store: the maintenance thread folds new sample chunks (by id, above the
 * watermark meta.rollup_wm) into per-minute, per-hour and per-day rows, and runs retention.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "common/hmap.h"
#include "common/log.h"
#include "common/util.h"
#include "server/store/sqlite/sqlite.h"

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

static int racc_merge(void *ctx, uint64_t stack, int64_t sum, uint64_t count)
{
	return racc_add(ctx, stack, sum, count);
}

/* Merges the accumulated row with the stored one and writes it back (wmu held, in a tx). */
static int rollup_write(struct sq *s, sqlite3_stmt *get, sqlite3_stmt *put, struct racc *a,
			struct buf *tmp)
{
	size_t *order = NULL;
	uint8_t *z = NULL;
	size_t zlen;
	int rc, err = 0;

	sqlite3_bind_int64(get, 1, (int64_t)a->level);
	sqlite3_bind_int64(get, 2, (int64_t)a->kind);
	sqlite3_bind_int64(get, 3, (int64_t)a->bucket);
	sqlite3_bind_int64(get, 4, (int64_t)a->ls);
	rc = sqlite3_step(get);
	if (rc == SQLITE_ROW)
		err = rollup_decode(sqlite3_column_blob(get, 0), (size_t)sqlite3_column_bytes(get, 0),
				    tmp, racc_merge, a);
	else if (rc != SQLITE_DONE)
		err = -EIO;
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
	err = rollup_encode(a->stack, a->sum, a->count, order, a->n, &z, &zlen);
	if (err)
		goto out;
	sqlite3_bind_int64(put, 1, (int64_t)a->level);
	sqlite3_bind_int64(put, 2, (int64_t)a->kind);
	sqlite3_bind_int64(put, 3, (int64_t)a->bucket);
	sqlite3_bind_int64(put, 4, (int64_t)a->ls);
	sqlite3_bind_blob(put, 5, z, (int)zlen, SQLITE_STATIC);
	err = sq_step_done(put);
	free(z);
out:
	free(order);
	return err;
}

/* Folds up to ROLLUP_ROUND new chunks into the rollups. >0: chunks folded, 0: none, -errno. */
static int rollup_round(struct sq *s)
{
	sqlite3_stmt *sel = NULL, *get = NULL, *put = NULL, *wm = NULL;
	struct rollup_round rr = { 0 };
	struct chunk c = { .any_order = true };	/* sums: no time order needed */
	struct buf tmp = { 0 };
	int64_t last = -1;
	int rc, err = 0, n = 0;

	pthread_mutex_lock(&s->wmu);
	if (sq_step_done(s->st[ST_BEGIN])) {
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
		err = chunk_samples_decode(&c, sqlite3_column_blob(sel, 4),
					   (size_t)sqlite3_column_bytes(sel, 4),
					   (uint64_t)sqlite3_column_int64(sel, 3));
		if (err) {
			log_warn("chunk %lld: undecodable (%s), not rolled up", (long long)last,
				 strerror(-err));
			err = 0;
			continue;
		}
		for (size_t i = 0; i < c.n && !err; i++) {
			for (int lv = 0; lv < LEVELS && !err; lv++) {
				uint64_t b = c.t[i] / sq_level_ns[lv] * sq_level_ns[lv];
				struct racc *acc = round_get(&rr, (uint64_t)lv, kind, b,
							     c.mixed ? c.labelset[i] : ls);

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
	round_done(&rr);
	chunk_done(&c);
	buf_done(&tmp);
	return err ? err : n;
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

