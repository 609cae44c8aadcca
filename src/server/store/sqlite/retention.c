/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention of the SQLite store: what is older than --retention (raw chunks: older than
 * --raw-retention and rolled up) is deleted in bounded rounds, so ingest is never blocked long.
 * The dictionaries follow: label sets, stacks and locations no retained record can use.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/log.h"
#include "common/util.h"
#include "server/store/sqlite/sqlite.h"
/* Runs one bounded DELETE; returns rows deleted or -EIO. */
static int64_t delete_round_locked(struct sq *s, const char *sql, int64_t a, int64_t b)
{
	sqlite3_stmt *st = NULL;
	int64_t n = -EIO;

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
	return n;
}

static int64_t delete_round(struct sq *s, const char *sql, int64_t a, int64_t b)
{
	int64_t n;

	pthread_mutex_lock(&s->wmu);
	n = delete_round_locked(s, sql, a, b);
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
		n += delete_all(s, "DELETE FROM rollups WHERE (level, bucket, kind, node) IN"
				   " (SELECT level, bucket, kind, node FROM rollups WHERE level = ?2"
				   " AND bucket <= ?1 LIMIT ?3)", cut - (int64_t)sq_level_ns[lv], lv);
	__atomic_add_fetch(&s->n_rollups_deleted, (uint64_t)n, __ATOMIC_RELAXED);
	n = delete_all(s, "DELETE FROM points WHERE id IN (SELECT id FROM points WHERE t_max < ?1"
			  " AND ?2 = ?2 LIMIT ?3)", cut, 0);
	/* a chunk goes once its last interval is older (queries leave out the older ones) */
	n = delete_all(s, "DELETE FROM ivchunks WHERE id IN (SELECT id FROM ivchunks WHERE"
			  " t_max < ?1 AND ?2 = ?2 LIMIT ?3)", cut, 0);
	/* ...and their counts of off-CPU samples (the same t_max) */
	n = delete_all(s, "DELETE FROM offcpu_ivs WHERE id IN (SELECT id FROM offcpu_ivs WHERE"
			  " t_max < ?1 AND ?2 = ?2 LIMIT ?3)", cut, 0);
	n = delete_all(s, "DELETE FROM batches WHERE id IN (SELECT id FROM batches WHERE t < ?1"
			  " AND ?2 = ?2 LIMIT ?3)", cut, 0);
	sq_gc_dictionaries(s);
}


/* ---- dictionary GC ------------------------------------------------------------------------ */

static int rewrite_blocks(struct sq *s, const char *table, const struct u64map *live,
			  struct u64map *index);

/* Frees what the previous round unpublished, and keeps this round's for the next. */
static void graveyard_rotate(struct sq *s)
{
	for (size_t i = 0; i < s->ngrave_old; i++)
		free(s->graveyard_old[i]);
	free(s->graveyard_old);
	s->graveyard_old = s->graveyard;
	s->ngrave_old = s->ngrave;
	s->graveyard = NULL;
	s->ngrave = 0;
}

void sq_graveyard_free(struct sq *s)
{
	graveyard_rotate(s);
	graveyard_rotate(s);
}

/*
 * Label sets whose last record is older than the cut: every record of them is gone (records
 * older than retention are deleted; a day rollup may reach a day past its bucket, hence the
 * extra day in the cut), and so are their series. wmu held. Returns how many, or -errno.
 */
/* The ids of the label sets whose extent ends before the cut, and of all others (live). */
struct ls_gc {
	int64_t cut;
	uint64_t *ids;
	size_t n, cap;
	struct u64map *live;
};

static int ls_gc_add(void *ctx, const struct lsext_ent *e)
{
	struct ls_gc *g = ctx;

	if ((int64_t)e->last >= g->cut)
		return g->live && !u64map_upsert(g->live, e->id, 1, NULL) ? -ENOMEM : 0;
	if (array_reserve(&g->ids, &g->cap, g->n + 1, sizeof(*g->ids), 256))
		return -ENOMEM;
	g->ids[g->n++] = e->id;
	return 0;
}

static int64_t gc_label_sets(struct sq *s, int64_t cut)
{
	struct ls_gc g = { .cut = cut };
	int64_t n = 0;
	uint64_t *ids;
	size_t nids;
	int err;

	err = sq_lsext_each(s->w, ls_gc_add, &g);
	ids = g.ids;
	nids = g.n;
	if (err || !nids)
		goto out;
	if (sqlite3_exec(s->w, "BEGIN IMMEDIATE", NULL, NULL, NULL)) {
		err = -EIO;
		goto out;
	}
	/* their series have no points left: points older than retention are gone */
	{
		sqlite3_stmt *del = NULL;

		err = sqlite3_prepare_v2(s->w, "DELETE FROM series WHERE labelset = ?", -1, &del,
					 NULL) ? -EIO : 0;
		for (size_t i = 0; !err && i < nids; i++) {
			sqlite3_bind_int64(del, 1, (int64_t)ids[i]);
			err = sq_step_done(del);
			n += sqlite3_changes(s->w);
		}
		sqlite3_finalize(del);
		__atomic_add_fetch(&s->n_gc_series, (uint64_t)n, __ATOMIC_RELAXED);
		if (!err)
			err = sq_lsext_remove(s, ids, nids);
	}
	/* their pairs: blocks rewritten in the same transaction */
	if (!err) {
		struct u64map live = { 0 };
		struct ls_gc all = { .cut = INT64_MIN, .live = &live };

		err = sq_lsext_each(s->w, ls_gc_add, &all);
		if (!err)
			err = rewrite_blocks(s, "lsblocks", &live, NULL);
		u64map_done(&live);
		free(all.ids);
	}
	if (sq_end_write(s->w, err)) {
		err = -EIO;
		goto out;
	}
	/* Unpublish them; queries that copied the table before may still read the pairs. */
	pthread_rwlock_wrlock(&s->lmu);
	{
		char ***g = realloc(s->graveyard, (s->ngrave + nids) * sizeof(*g));

		if (g)
			s->graveyard = g;
		for (size_t i = 0; i < nids; i++) {
			uint64_t id = ids[i];

			if (id >= s->nlsets || !s->lsets[id].pairs)
				continue;
			if (g)
				s->graveyard[s->ngrave++] = s->lsets[id].pairs;
			/* without room in the graveyard, the pairs stay allocated (leak, never a
			 * use after free) */
			s->lsets[id].pairs = NULL;
			s->lsets[id].n = 0;
			s->lsets[id].node = "";
			s->lsets[id].gpu = -1;
		}
		/* the content hash -> id index, rebuilt from what is left */
		u64map_done(&s->ls_ids);
	}
	for (size_t i = 1; i < s->nlsets; i++)
		if (s->lsets[i].pairs && !u64map_upsert(&s->ls_ids, s->lsets[i].hash, i, NULL))
			break;
	pthread_rwlock_unlock(&s->lmu);
	n = (int64_t)nids;
	__atomic_add_fetch(&s->n_gc_lsets, (uint64_t)n, __ATOMIC_RELAXED);
out:
	free(ids);
	return err ? err : n;
}

/* The blocks of a table that GC deletes, and those it writes again with some entries only. */
struct block_edits {
	uint64_t *gone;		/* first ids of the blocks to delete (or to write again) */
	size_t ngone, capgone;
	struct kept {
		uint8_t *z;	/* the block's new bytes (owned) */
		size_t zlen;
		uint64_t first, last;
	} *keep;
	size_t nkeep, capkeep;
};

/* Block `first` goes; n > 0 of its entries, ids[0] to ids[n - 1], stay in the block that z
 * holds (taken over, freed by edits_done() also on failure); n == 0: none stays. 0/-ENOMEM. */
static int edits_add(struct block_edits *e, uint64_t first, const uint64_t *ids, size_t n,
		     uint8_t *z, size_t zlen)
{
	if (u64_push(&e->gone, &e->ngone, &e->capgone, first)) {
		free(z);
		return -ENOMEM;
	}
	if (!n)
		return 0;
	if (e->nkeep == e->capkeep) {
		size_t ncap = e->capkeep ? 2 * e->capkeep : 16;
		struct kept *nk = realloc(e->keep, ncap * sizeof(*nk));

		if (!nk) {
			free(z);
			return -ENOMEM;
		}
		e->keep = nk;
		e->capkeep = ncap;
	}
	e->keep[e->nkeep++] = (struct kept){ z, zlen, ids[0], ids[n - 1] };
	return 0;
}

/* Deletes the blocks that go and inserts the ones written again, in the caller's write
 * transaction (wmu held). 0 or -EIO. */
static int edits_apply(struct sq *s, const char *table, const struct block_edits *e)
{
	sqlite3_stmt *del = NULL, *ins = NULL;
	char sql[96];
	int err = 0;

	snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE id = ?", table);
	if (sqlite3_prepare_v2(s->w, sql, -1, &del, NULL))
		err = -EIO;
	snprintf(sql, sizeof(sql), "INSERT INTO %s(id, last, data) VALUES (?, ?, ?)", table);
	if (!err && sqlite3_prepare_v2(s->w, sql, -1, &ins, NULL))
		err = -EIO;
	for (size_t i = 0; !err && i < e->ngone; i++) {
		sqlite3_bind_int64(del, 1, (int64_t)e->gone[i]);
		err = sq_step_done(del);
	}
	for (size_t i = 0; !err && i < e->nkeep; i++) {
		sqlite3_bind_int64(ins, 1, (int64_t)e->keep[i].first);
		sqlite3_bind_int64(ins, 2, (int64_t)e->keep[i].last);
		sqlite3_bind_blob(ins, 3, e->keep[i].z, (int)e->keep[i].zlen, SQLITE_STATIC);
		err = sq_step_done(ins);
	}
	sqlite3_finalize(del);
	sqlite3_finalize(ins);
	return err;
}

static void edits_done(struct block_edits *e)
{
	for (size_t i = 0; i < e->nkeep; i++)
		free(e->keep[i].z);
	free(e->keep);
	free(e->gone);
}

/* Removes stack id (its location list locs) from the stack index, if the index names it. */
static int forget_stack(struct u64map *index, uint64_t id, const uint8_t *locs, size_t len)
{
	uint64_t ids[BATCH_MAX_DEPTH], *v, h;
	struct buf key = { 0 };
	size_t n = 0;

	if (stack_locs_decode(locs, len, ids, BATCH_MAX_DEPTH, &n))
		return 0;	/* unreadable: not in the index either */
	h = sq_stack_hash(ids, n, &key);
	if (key.oom) {
		buf_done(&key);
		return -ENOMEM;
	}
	buf_done(&key);
	v = u64map_find(index, h);
	if (v && *v == id)
		u64map_remove(index, h);
	return 0;
}

/*
 * Blocks (stack-block format: stacks, label sets) after their entries went: a block none of
 * whose ids is in live is deleted, one with some is written again with those only (its key,
 * the first id, may change), so that an entry GC removed is unknown to queries. wmu held; the
 * caller holds the write transaction. 0 or -errno.
 */
static int rewrite_blocks(struct sq *s, const char *table, const struct u64map *live,
			  struct u64map *index)
{
	struct sblock b = { 0 };
	struct block_edits e = { 0 };
	sqlite3_stmt *st = NULL;
	uint64_t *ids = NULL;
	const uint8_t **locs = NULL;
	size_t *lens = NULL;
	char sql[96];
	int err = 0;

	snprintf(sql, sizeof(sql), "SELECT id, data FROM %s", table);
	if (sqlite3_prepare_v2(s->w, sql, -1, &st, NULL))
		err = -EIO;
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		uint64_t first = (uint64_t)sqlite3_column_int64(st, 0);
		size_t nl = 0;

		if (stack_block_decode(&b, sqlite3_column_blob(st, 1),
				       (size_t)sqlite3_column_bytes(st, 1)))
			continue;	/* corrupt: left alone */
		free(ids);
		free(locs);
		free(lens);
		ids = malloc((b.n + 1) * sizeof(*ids));
		locs = malloc((b.n + 1) * sizeof(*locs));
		lens = malloc((b.n + 1) * sizeof(*lens));
		if (!ids || !locs || !lens) {
			err = -ENOMEM;
			break;
		}
		for (size_t i = 0; i < b.n && !err; i++) {
			if (!u64map_find(live, b.id[i])) {
				if (index)	/* a stack gone: the index forgets it */
					err = forget_stack(index, b.id[i], b.locs[i], b.len[i]);
				continue;
			}
			ids[nl] = b.id[i];
			locs[nl] = b.locs[i];
			lens[nl++] = b.len[i];
		}
		if (err || nl == b.n)
			continue;
		if (nl) {
			uint8_t *z = NULL;
			size_t zlen = 0;

			err = stack_block_encode(ids, locs, lens, nl, &z, &zlen);
			if (err)
				break;
			err = edits_add(&e, first, ids, nl, z, zlen);
		} else {
			err = edits_add(&e, first, NULL, 0, NULL, 0);
		}
	}
	sqlite3_finalize(st);
	if (!err && (e.ngone || e.nkeep))
		err = edits_apply(s, table, &e);
	edits_done(&e);
	free(ids);
	free(locs);
	free(lens);
	sblock_done(&b);
	return err;
}

/*
 * Stacks no stackdays row of day cut_day or later names (schema 8: not used since): their
 * blocks written again without them (rewrite_blocks(), the index forgets them) and the older
 * rows deleted, in one transaction. wmu held. Returns how many stacks went, or -errno.
 */
static int64_t gc_stacks(struct sq *s, int64_t cut_day)
{
	struct u64map live = { 0 };
	struct sblock b = { 0 };
	sqlite3_stmt *st = NULL;
	int64_t old = 0;
	size_t before = s->stack_ids.len;
	int err = 0, rc = SQLITE_DONE;

	if (sqlite3_prepare_v2(s->w, "SELECT count(*) FROM stackdays WHERE day < ?", -1, &st, NULL))
		return -EIO;
	sqlite3_bind_int64(st, 1, cut_day);
	if (sq_step_i64(st, &old) < 0)
		err = -EIO;
	sqlite3_finalize(st);
	st = NULL;
	if (err || !old)
		return err;
	if (s->stack_index_stale && (err = sq_stacks_load(s)))
		return err;
	before = s->stack_ids.len;
	if (sqlite3_prepare_v2(s->w, "SELECT data FROM stackdays WHERE day >= ?", -1, &st, NULL))
		return -EIO;
	sqlite3_bind_int64(st, 1, cut_day);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (stack_block_decode(&b, sqlite3_column_blob(st, 0),
				       (size_t)sqlite3_column_bytes(st, 0))) {
			err = -EIO;	/* unreadable: keep every stack */
			break;
		}
		for (size_t i = 0; i < b.n && !err; i++)
			if (!u64map_upsert(&live, b.id[i], 1, NULL))
				err = -ENOMEM;
	}
	if (!err && rc != SQLITE_DONE)
		err = -EIO;
	sqlite3_finalize(st);
	sblock_done(&b);
	if (!err && sqlite3_exec(s->w, "BEGIN IMMEDIATE", NULL, NULL, NULL))
		err = -EIO;
	else if (!err) {
		err = rewrite_blocks(s, "stackblocks", &live, &s->stack_ids);
		if (!err && sqlite3_prepare_v2(s->w, "DELETE FROM stackdays WHERE day < ?", -1, &st,
					       NULL))
			err = -EIO;
		if (!err) {
			sqlite3_bind_int64(st, 1, cut_day);
			err = sq_step_done(st);
		}
		sqlite3_finalize(st);
		err = sq_end_write(s->w, err);
		if (err)	/* rolled back: the index may have forgotten kept stacks */
			s->stack_index_stale = true;
	}
	u64map_done(&live);
	return err ? err : (int64_t)(before - s->stack_ids.len);
}

/*
 * The dictionary's strings no location left names (schema 10), given the ids of those named
 * (used): string blocks edited likewise (into *e), the strings that go listed in *dead.
 * 0/-errno.
 */
static int gc_strings(struct sq *s, const struct u64map *used, struct block_edits *e,
		      struct u64vec *dead)
{
	sqlite3_stmt *st = NULL;
	struct sblock b = { 0 };
	uint64_t *ids = NULL;
	const uint8_t **v = NULL;
	size_t *lens = NULL;
	int err = 0;

	if (sqlite3_prepare_v2(s->w, "SELECT id, data FROM strblocks", -1, &st, NULL))
		return -EIO;
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		uint64_t first = (uint64_t)sqlite3_column_int64(st, 0);
		size_t nl = 0;

		if (stack_block_decode(&b, sqlite3_column_blob(st, 1),
				       (size_t)sqlite3_column_bytes(st, 1)))
			continue;	/* unreadable: left as it is */
		free(ids);
		free(v);
		free(lens);
		ids = malloc((b.n ? b.n : 1) * sizeof(*ids));
		v = malloc((b.n ? b.n : 1) * sizeof(*v));
		lens = malloc((b.n ? b.n : 1) * sizeof(*lens));
		if (!ids || !v || !lens) {
			err = -ENOMEM;
			break;
		}
		for (size_t i = 0; i < b.n && !err; i++) {
			if (u64map_find(used, b.id[i])) {
				ids[nl] = b.id[i];
				v[nl] = b.locs[i];
				lens[nl++] = b.len[i];
			} else {
				err = u64_push(&dead->v, &dead->n, &dead->cap, b.id[i]);
			}
		}
		if (err || nl == b.n)
			continue;
		if (nl) {
			uint8_t *z = NULL;
			size_t zlen = 0;

			err = stack_block_encode(ids, v, lens, nl, &z, &zlen);
			if (!err)
				err = edits_add(e, first, ids, nl, z, zlen);
		} else {
			err = edits_add(e, first, NULL, 0, NULL, 0);
		}
	}
	sqlite3_finalize(st);
	sblock_done(&b);
	free(ids);
	free(v);
	free(lens);
	return err;
}

/*
 * Locations no stack refers to (after stacks went): the stacks' location lists are read whole,
 * then every location block: one none of whose locations is used is deleted, one with some
 * written again with those only (keyed by its first one left), and the index forgets each
 * location that went; then the strings no location left names (gc_strings()), in the same
 * transaction. wmu held. Returns how many locations, or -errno.
 */
static int64_t gc_locations(struct sq *s)
{
	struct u64map used = { 0 }, used_str = { 0 };
	struct block_edits e = { 0 }, es = { 0 };
	struct u64vec dead_str = { 0 };
	sqlite3_stmt *st = NULL;
	uint64_t *ids, *dead = NULL, *live_ids = NULL;
	size_t ndead = 0, capdead = 0;
	struct sblock sb = { 0 };
	struct lblock lb = { 0 };
	struct lrow *live = NULL;
	struct buf key = { 0 };
	int64_t n = 0;
	int err = 0;

	ids = malloc(BATCH_MAX_DEPTH * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	/* the stack blocks hold only stacks still known (gc_stacks() went first) */
	if (sqlite3_prepare_v2(s->w, "SELECT data FROM stackblocks", -1, &st, NULL)) {
		free(ids);
		return -EIO;
	}
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		/* a corrupt block or stack: keep every location */
		err = stack_block_decode(&sb, sqlite3_column_blob(st, 0),
					 (size_t)sqlite3_column_bytes(st, 0)) ? -EIO : 0;
		for (size_t i = 0; !err && i < sb.n; i++) {
			size_t n_ids = 0;

			err = stack_locs_decode(sb.locs[i], sb.len[i], ids, BATCH_MAX_DEPTH, &n_ids) ?
				      -EIO : 0;
			for (size_t k = 0; !err && k < n_ids; k++)
				if (!u64map_upsert(&used, ids[k], 1, NULL))
					err = -ENOMEM;
		}
	}
	sqlite3_finalize(st);
	st = NULL;
	sblock_done(&sb);
	free(ids);
	if (err)
		goto out;
	if (sqlite3_prepare_v2(s->w, "SELECT id, data FROM locblocks", -1, &st, NULL)) {
		err = -EIO;
		goto out;
	}
	/* what to delete and write again first, then done (not while the table is being read) */
	while (!err && sqlite3_step(st) == SQLITE_ROW) {
		uint64_t first = (uint64_t)sqlite3_column_int64(st, 0);
		size_t nl = 0;

		if (loc_block_decode(&lb, sqlite3_column_blob(st, 1),
				     (size_t)sqlite3_column_bytes(st, 1), sq_str_get, s))
			continue;	/* unreadable: left as it is */
		free(live);
		free(live_ids);
		live = malloc((lb.n ? lb.n : 1) * sizeof(*live));
		live_ids = malloc((lb.n ? lb.n : 1) * sizeof(*live_ids));
		if (!live || !live_ids) {
			err = -ENOMEM;
			break;
		}
		for (size_t i = 0; i < lb.n && !err; i++) {
			uint64_t h, *v;

			if (u64map_find(&used, lb.r[i].id)) {
				live_ids[nl] = lb.r[i].id;
				live[nl++] = lb.r[i];
				for (int k = 0; k < 4 && !err; k++)	/* its names stay */
					if (lb.r[i].sid[k] &&
					    !u64map_upsert(&used_str, lb.r[i].sid[k], 1, NULL))
						err = -ENOMEM;
				continue;
			}
			/* the index forgets it (unless it names another id of the same content) */
			h = sq_loc_row_hash(&lb.r[i], &key);
			v = u64map_find(&s->loc_ids, h);
			if (key.oom)
				err = -ENOMEM;
			else if (v && *v == lb.r[i].id &&
				 (u64_push(&dead, &ndead, &capdead, h) ||
				  u64_push(&dead, &ndead, &capdead, lb.r[i].id)))
				err = -ENOMEM;
			n++;
		}
		if (err || nl == lb.n)
			continue;
		if (nl) {
			uint8_t *z = NULL;
			size_t zlen = 0;

			err = loc_block_encode(live, nl, lb.dict, &z, &zlen);
			if (err)
				break;
			err = edits_add(&e, first, live_ids, nl, z, zlen);
		} else {
			err = edits_add(&e, first, NULL, 0, NULL, 0);
		}
	}
	sqlite3_finalize(st);
	st = NULL;
	if (err || (!e.ngone && !e.nkeep))
		goto out;
	err = gc_strings(s, &used_str, &es, &dead_str);
	if (err)
		goto out;
	if (sqlite3_exec(s->w, "BEGIN IMMEDIATE", NULL, NULL, NULL)) {
		err = -EIO;
		goto out;
	}
	err = edits_apply(s, "locblocks", &e);
	if (!err)
		err = edits_apply(s, "strblocks", &es);
	if (sq_end_write(s->w, err)) {
		err = -EIO;
		s->loc_index_stale = true;	/* rolled back: nothing went; read it again */
	} else {
		for (size_t i = 0; i + 1 < ndead; i += 2) {
			uint64_t *v = u64map_find(&s->loc_ids, dead[i]);

			if (v && *v == dead[i + 1])
				u64map_remove(&s->loc_ids, dead[i]);
		}
		sq_strs_forget(s, dead_str.v, dead_str.n);
	}
out:
	sqlite3_finalize(st);
	edits_done(&e);
	edits_done(&es);
	u64map_done(&used);
	u64map_done(&used_str);
	free(dead_str.v);
	lblock_done(&lb);
	buf_done(&key);
	free(live);
	free(live_ids);
	free(dead);
	if (!err)
		__atomic_add_fetch(&s->n_gc_locations, (uint64_t)n, __ATOMIC_RELAXED);
	return err ? err : n;
}

void sq_gc_dictionaries(struct sq *s)
{
	uint64_t now = wall_ns(), keep = s->o.retention_ns + DAY_NS;
	int64_t cut = now > keep ? (int64_t)(now - keep) : 0, nl, ns = 0;
	/* a stack last used on day d serves records of day d at most */
	int64_t cut_day = cut / (int64_t)DAY_NS - 1;

	if (cut <= 0)
		return;
	graveyard_rotate(s);
	pthread_mutex_lock(&s->wmu);
	nl = gc_label_sets(s, cut);
	if (cut_day > 0) {
		ns = gc_stacks(s, cut_day);
		if (ns > 0)
			__atomic_add_fetch(&s->n_gc_stacks, (uint64_t)ns, __ATOMIC_RELAXED);
		else if (ns < 0)
			log_warn("retention: stacks: %s", strerror((int)-ns));
	}
	if (ns > 0)
		gc_locations(s);
	if (nl > 0 || ns > 0)
		sq_dedup_caches_reset(s);	/* the caches may name deleted rows */
	pthread_mutex_unlock(&s->wmu);
	if (nl < 0)
		log_warn("retention: label sets: %s", strerror((int)-nl));
}
