/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The SQLite store's dictionaries outside a batch: their blocks written (label sets, locations,
 * stacks, stack days, location names), the string dictionary of location names and the
 * location and stack indexes in memory, loaded at open and marked stale after a rollback.
 * ingest.c maps a batch's entries onto them.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "common/util.h"
#include "server/store/sqlite/sqlite.h"

/* One block of n byte strings keyed by ascending ids (the stack-block format) through st. */
static int put_block(sqlite3_stmt *st, const uint64_t *ids, const uint8_t *const *v,
		     const size_t *lens, size_t n)
{
	uint8_t *z = NULL;
	size_t zlen = 0;
	int err;

	if (!n)
		return 0;
	err = stack_block_encode(ids, v, lens, n, &z, &zlen);
	if (err)
		return err;
	sqlite3_bind_int64(st, 1, (int64_t)ids[0]);
	sqlite3_bind_int64(st, 2, (int64_t)ids[n - 1]);
	sqlite3_bind_blob(st, 3, z, (int)zlen, SQLITE_STATIC);
	err = sq_step_done(st);
	free(z);
	return err;
}

/* ---- the string dictionary of location names (schema 10) ---- */

const char *sq_str_get(void *ctx, uint64_t sid)
{
	struct sq *s = ctx;
	uint64_t *v = u64map_find(&s->str_by_id, sid);

	return v ? (const char *)(uintptr_t)*v : NULL;
}

/* Forgets every string; smu held for writing (or no reader left). */
static void strs_clear(struct sq *s)
{
	for (size_t i = 0; i < s->str_by_id.cap; i++)
		if (s->str_by_id.keys[i])
			free((void *)(uintptr_t)s->str_by_id.vals[i]);
	u64map_done(&s->str_by_id);	/* no string has id 0 */
	u64map_done(&s->str_ids);
}

/* Adds string id sid (len bytes, copied) to the dictionary; wmu and smu (writing) held. */
static int strs_add(struct sq *s, uint64_t sid, const char *p, size_t len)
{
	uint64_t h = hash64(p, len, 31), *v;
	char *c = malloc(len + 1);

	if (!c)
		return -ENOMEM;
	memcpy(c, p, len);
	c[len] = 0;
	/* a content already under another id (none is written so) keeps the first */
	for (; (v = u64map_find(&s->str_ids, h)); h++)
		if (!strcmp(sq_str_get(s, *v), c))
			break;
	if (!u64map_upsert(&s->str_by_id, sid, (uint64_t)(uintptr_t)c, NULL)) {
		free(c);
		return -ENOMEM;
	}
	if (!v && !u64map_upsert(&s->str_ids, h, sid, NULL))
		return -ENOMEM;
	return 0;
}

int sq_strs_load(struct sq *s)
{
	sqlite3_stmt *st = NULL;
	struct sblock b = { 0 };
	int64_t seq = 0;
	int rc, err = 0;

	s->str_index_stale = true;
	if (sqlite3_prepare_v2(s->w, "SELECT value FROM meta WHERE key = 'str_seq'", -1, &st,
			       NULL))
		return -EIO;
	rc = sq_step_i64(st, &seq);
	sqlite3_finalize(st);
	if (rc < 0)
		return -EIO;
	if (sqlite3_prepare_v2(s->w, "SELECT id, data FROM strblocks ORDER BY id", -1, &st, NULL))
		return -EIO;
	pthread_rwlock_wrlock(&s->smu);
	strs_clear(s);
	s->str_seq = (uint64_t)seq;
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (stack_block_decode(&b, sqlite3_column_blob(st, 1),
				       (size_t)sqlite3_column_bytes(st, 1))) {
			/* the locations naming its strings are unreadable, as if unknown */
			log_warn("store: string block %lld is unreadable",
				 (long long)sqlite3_column_int64(st, 0));
			continue;
		}
		for (size_t i = 0; i < b.n && !err; i++)
			err = strs_add(s, b.id[i], (const char *)b.locs[i], b.len[i]);
	}
	pthread_rwlock_unlock(&s->smu);
	if (!err && rc != SQLITE_DONE)
		err = -EIO;
	sqlite3_finalize(st);
	sblock_done(&b);
	if (!err)
		s->str_index_stale = false;
	return err;
}

void sq_strs_forget(struct sq *s, const uint64_t *ids, size_t n)
{
	pthread_rwlock_wrlock(&s->smu);
	for (size_t i = 0; i < n; i++) {
		char *c = (char *)sq_str_get(s, ids[i]);
		uint64_t h, *v;

		if (!c)
			continue;
		for (h = hash64(c, strlen(c), 31); (v = u64map_find(&s->str_ids, h)); h++) {
			if (*v == ids[i]) {
				u64map_remove(&s->str_ids, h);
				break;
			}
		}
		u64map_remove(&s->str_by_id, ids[i]);
		free(c);
	}
	pthread_rwlock_unlock(&s->smu);
}

void sq_strs_done(struct sq *s)
{
	strs_clear(s);
}

/* The dictionary id of string p, a new one (after the last, listed in *pend for a string block)
 * if the dictionary has none. wmu held. 0/-errno. */
static int str_intern(struct sq *s, const char *p, struct u64vec *pend, uint64_t *ret)
{
	size_t len = strlen(p);
	uint64_t h = hash64(p, len, 31), *v;
	int err;

	if (!len) {
		*ret = 0;
		return 0;
	}
	for (; (v = u64map_find(&s->str_ids, h)); h++) {
		if (!strcmp(sq_str_get(s, *v), p)) {
			*ret = *v;
			return 0;
		}
	}
	pthread_rwlock_wrlock(&s->smu);
	err = strs_add(s, s->str_seq + 1, p, len);
	pthread_rwlock_unlock(&s->smu);
	if (err)
		return err;
	*ret = ++s->str_seq;
	return u64_push(&pend->v, &pend->n, &pend->cap, *ret);
}

int sq_put_loc_block(struct sq *s, struct lrow *r, size_t n)
{
	sqlite3_stmt *st = s->st[ST_LOCBLOCK_ADD];
	struct u64vec pend = { 0 };
	const uint8_t **v = NULL;
	uint64_t seq0 = s->str_seq;
	size_t *lens = NULL;
	uint8_t *z = NULL;
	size_t zlen = 0;
	int err = 0;

	if (!n)
		return 0;
	for (size_t i = 0; i < n && !err; i++)
		for (int k = 0; k < 4 && !err; k++)
			err = str_intern(s, r[i].str[k], &pend, &r[i].sid[k]);
	if (!err && pend.n) {	/* the new strings first, in blocks of STR_BLOCK_MAX */
		v = malloc(pend.n * sizeof(*v));
		lens = malloc(pend.n * sizeof(*lens));
		if (!v || !lens)
			err = -ENOMEM;
		for (size_t i = 0; i < pend.n && !err; i++) {
			v[i] = (const uint8_t *)sq_str_get(s, pend.v[i]);
			lens[i] = strlen((const char *)v[i]);
		}
		for (size_t i = 0; i < pend.n && !err; i += STR_BLOCK_MAX)
			err = put_block(s->st[ST_STRBLOCK_ADD], pend.v + i, v + i, lens + i,
					pend.n - i < STR_BLOCK_MAX ? pend.n - i : STR_BLOCK_MAX);
		if (!err) {
			sqlite3_bind_int64(s->st[ST_STR_SEQ], 1, (int64_t)s->str_seq);
			err = sq_step_done(s->st[ST_STR_SEQ]);
		}
	}
	if (!err)
		err = loc_block_encode(r, n, true, &z, &zlen);
	if (!err) {
		sqlite3_bind_int64(st, 1, (int64_t)r[0].id);
		sqlite3_bind_int64(st, 2, (int64_t)r[n - 1].id);
		sqlite3_bind_blob(st, 3, z, (int)zlen, SQLITE_STATIC);
		err = sq_step_done(st);
	}
	if (err && s->str_seq != seq0)
		s->loc_index_stale = true;	/* the new strings: read again with the index */
	free(z);
	free(v);
	free(lens);
	free(pend.v);
	return err;
}

/*
 * The batch's locations to global ids: known ones by content hash (the in-memory index of
 * every stored location, schema 6), new ones numbered after the last and stored together as
 * one block (a few if many).
 */

int sq_put_stack_block(struct sq *s, const uint64_t *ids, const uint8_t *const *locs,
		       const size_t *lens, size_t n)
{
	return put_block(s->st[ST_STACKBLOCK_ADD], ids, locs, lens, n);
}

int sq_put_ls_block(struct sq *s, const uint64_t *ids, const uint8_t *const *blobs,
		    const size_t *lens, size_t n)
{
	return put_block(s->st[ST_LSBLOCK_ADD], ids, blobs, lens, n);
}

int sq_put_stackdays(struct sq *s, uint64_t day, const uint64_t *ids, size_t n)
{
	sqlite3_stmt *st = s->st[ST_STACKDAYS_ADD];
	const uint8_t **none = calloc(n ? n : 1, sizeof(*none));
	size_t *lens = calloc(n ? n : 1, sizeof(*lens)), zlen = 0;
	uint8_t *z = NULL;
	int err = none && lens ? stack_block_encode(ids, none, lens, n, &z, &zlen) : -ENOMEM;

	if (!err) {
		sqlite3_bind_int64(st, 1, (int64_t)day);
		sqlite3_bind_blob(st, 2, z, (int)zlen, SQLITE_STATIC);
		err = sq_step_done(st);
	}
	free(z);
	free(none);
	free(lens);
	return err;
}

uint64_t sq_loc_row_hash(const struct lrow *r, struct buf *key)
{
	return store_location_hash_of(r->str, (uint32_t)r->line, r->address, (uint32_t)r->flags,
				      key);
}

int sq_locs_load(struct sq *s)
{
	sqlite3_stmt *st = NULL;
	struct lblock b = { 0 };
	struct buf key = { 0 };
	int rc, err = 0;

	u64map_done(&s->loc_ids);
	s->loc_index_stale = true;
	err = sq_strs_load(s);	/* what the blocks' names are read through */
	if (err)
		return err;
	if (sqlite3_prepare_v2(s->w, "SELECT id, data FROM locblocks ORDER BY id", -1, &st, NULL))
		return -EIO;
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (loc_block_decode(&b, sqlite3_column_blob(st, 1),
				     (size_t)sqlite3_column_bytes(st, 1), sq_str_get, s)) {
			/* its locations answer unknown and are stored again when met */
			log_warn("store: location block %lld is unreadable",
				 (long long)sqlite3_column_int64(st, 0));
			continue;
		}
		/* a content stored under two ids (none is written so) keeps the first */
		for (size_t i = 0; i < b.n && !err; i++)
			if (!u64map_upsert(&s->loc_ids, sq_loc_row_hash(&b.r[i], &key), b.r[i].id,
					   NULL) || key.oom)
				err = -ENOMEM;
	}
	if (!err && rc != SQLITE_DONE)
		err = -EIO;
	sqlite3_finalize(st);
	lblock_done(&b);
	buf_done(&key);
	if (!err)
		s->loc_index_stale = false;
	return err;
}

uint64_t sq_stack_hash(const uint64_t *ids, size_t n, struct buf *key)
{
	key->len = 0;
	for (size_t k = 0; k < n; k++)
		buf_uvarint(key, ids[k]);
	return hash64(key->p, key->len, 13);
}

int sq_stacks_load(struct sq *s)
{
	sqlite3_stmt *st = NULL;
	struct sblock b = { 0 };
	struct buf key = { 0 };
	uint64_t *ids = malloc(BATCH_MAX_DEPTH * sizeof(*ids));
	int rc = SQLITE_DONE, err = ids ? 0 : -ENOMEM;

	u64map_done(&s->stack_ids);
	s->stack_index_stale = true;
	/* schema 8: the blocks hold exactly the stacks kept (GC writes them again in the
	 * transaction that forgets their days) */
	if (!err && sqlite3_prepare_v2(s->w, "SELECT id, data FROM stackblocks ORDER BY id", -1, &st,
				       NULL))
		err = -EIO;
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (stack_block_decode(&b, sqlite3_column_blob(st, 1),
				       (size_t)sqlite3_column_bytes(st, 1))) {
			log_warn("store: stack block %lld is unreadable",
				 (long long)sqlite3_column_int64(st, 0));
			continue;
		}
		for (size_t i = 0; i < b.n && !err; i++) {
			size_t n = 0;

			if (stack_locs_decode(b.locs[i], b.len[i], ids, BATCH_MAX_DEPTH, &n))
				continue;
			if (!u64map_upsert(&s->stack_ids, sq_stack_hash(ids, n, &key), b.id[i],
					   NULL) || key.oom)
				err = -ENOMEM;
		}
	}
	if (!err && rc != SQLITE_DONE)
		err = -EIO;
	sqlite3_finalize(st);
	sblock_done(&b);
	buf_done(&key);
	free(ids);
	if (!err)
		s->stack_index_stale = false;
	return err;
}

void sq_dedup_reset(struct sq *s)
{
	/* the location and stack indexes are complete, not caches: read again from what is
	 * committed */
	s->loc_index_stale = true;
	s->stack_index_stale = true;
	sq_dedup_caches_reset(s);
}

void sq_dedup_caches_reset(struct sq *s)
{
	u64map_done(&s->series_ids);
	u64map_done(&s->stack_day);
}
