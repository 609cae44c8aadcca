/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The label sets' time extents on disk (schema 14): a row of `lsext` per LSEXT_IDS consecutive
 * ids, keyed by id >> LSEXT_SHIFT, holding every extent of those ids as columns (id gaps, starts
 * as differences, lengths). Schema 13 had a `labelsets` row per label set (id, first_ns,
 * dur_ns: ~22 bytes with its cell and page share, 1.3 B/sample on a node of short-lived
 * threads); a row of 512 compresses to a few bytes a label set, its times in the store's time
 * unit. A batch rewrites the rows of the
 * label sets it used (read, widened, written back in its transaction, so a savepoint's rollback
 * takes them back too); the in-memory table (labels.c) is what queries read.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "common/util.h"
#include "server/store/sqlite/chunk.h"
#include "server/store/sqlite/chunk_blob.h"
#include "server/store/sqlite/sqlite.h"

#define LSEXT_FORMAT	1

static int ent_cmp(const void *x, const void *y)
{
	const struct lsext_ent *a = x, *b = y;

	return a->id < b->id ? -1 : a->id > b->id;
}

/* A row's extents (appended to *v, ids ascending). 0 or -EINVAL/-ENOMEM. */
static int lsext_decode(const void *blob, size_t len, struct buf *tmp, struct lsext_ent **v,
			size_t *n, size_t *cap)
{
	uint64_t id = 0, first = 0, unit;
	struct rd r;
	size_t cnt, base = *n;
	int err = blob_read(blob, len, tmp, &r);

	if (err)
		return err;
	if (rd_uvarint(&r) != LSEXT_FORMAT)
		return -EINVAL;
	unit = rd_uvarint(&r);
	cnt = rd_uvarint(&r);
	if (r.bad || !unit || cnt > (size_t)(r.end - r.p))
		return -EINVAL;
	if (arr_grow(v, cap, base + cnt, sizeof(**v)))
		return -ENOMEM;
	for (size_t i = 0; i < cnt; i++) {
		id += rd_uvarint(&r);
		(*v)[base + i].id = id;
	}
	for (size_t i = 0; i < cnt; i++) {
		first += (uint64_t)rd_svarint(&r);
		(*v)[base + i].first = first;
	}
	for (size_t i = 0; i < cnt; i++)
		(*v)[base + i].last = (*v)[base + i].first + rd_uvarint(&r);
	if (r.bad || r.p != r.end)
		return -EINVAL;
	for (size_t i = base; unit > 1 && i < base + cnt; i++) {
		(*v)[i].first *= unit;
		(*v)[i].last *= unit;
	}
	*n = base + cnt;
	return 0;
}

/*
 * n extents (ids ascending) as a row's blob, *ret malloc'ed: their times floored to the store's
 * time unit (`--time-resolution`: samples' and intervals' times are stored so floored, and a
 * query's bounds are whole milliseconds, so a floored extent overlaps exactly the ranges its
 * records do). 0 or -errno.
 */
static int lsext_encode(const struct lsext_ent *v, size_t n, uint64_t unit, uint8_t **ret,
			size_t *ret_len)
{
	struct buf b = { 0 };
	uint64_t id = 0, first = 0;

	buf_uvarint(&b, LSEXT_FORMAT);
	buf_uvarint(&b, unit);
	buf_uvarint(&b, n);
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, v[i].id - id);
		id = v[i].id;
	}
	for (size_t i = 0; i < n; i++) {
		buf_svarint(&b, (int64_t)(v[i].first / unit - first));
		first = v[i].first / unit;
	}
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, v[i].last / unit - v[i].first / unit);
	return blob_pack(&b, ret, ret_len);
}

/* Row k's extents into *v (emptied first; none if there is no row). 0 or -errno. */
static int row_get(struct sq *s, uint64_t k, struct buf *tmp, struct lsext_ent **v, size_t *n,
		   size_t *cap)
{
	sqlite3_stmt *st = s->st[ST_LSEXT_GET];
	int rc, err = 0;

	*n = 0;
	sqlite3_bind_int64(st, 1, (int64_t)k);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		err = lsext_decode(sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0),
				   tmp, v, n, cap);
	else if (rc != SQLITE_DONE)
		err = -EIO;
	sqlite3_reset(st);
	if (err == -EINVAL) {
		log_warn("store: label-set extents row %llu does not decode: written again with"
			 " this batch's only", (unsigned long long)k);
		*n = 0;
		err = 0;
	}
	return err;
}

/* Row k holds v[0..n) (deleted when n == 0). 0 or -errno. */
static int row_put(struct sq *s, uint64_t k, const struct lsext_ent *v, size_t n)
{
	sqlite3_stmt *st = s->st[n ? ST_LSEXT_PUT : ST_LSEXT_DEL];
	uint8_t *z = NULL;
	size_t zlen = 0;
	int err = n ? lsext_encode(v, n, s->o.time_unit_ns > 1 ? s->o.time_unit_ns : 1, &z,
				   &zlen) : 0;

	if (err)
		return err;
	sqlite3_bind_int64(st, 1, (int64_t)k);
	if (n)
		sqlite3_bind_blob(st, 2, z, (int)zlen, SQLITE_STATIC);
	err = sq_step_done(st);
	free(z);
	return err;
}

int sq_lsext_widen(struct sq *s, struct lsext_ent *e, size_t n)
{
	struct lsext_ent *v = NULL, *out = NULL;
	size_t nv = 0, capv = 0, capo = 0;
	struct buf tmp = { 0 };
	int err = 0;

	qsort(e, n, sizeof(*e), ent_cmp);
	for (size_t i = 0; i < n && !err;) {
		uint64_t k = e[i].id >> LSEXT_SHIFT;
		size_t j = i, a = 0, no = 0;

		while (j < n && e[j].id >> LSEXT_SHIFT == k)
			j++;
		err = row_get(s, k, &tmp, &v, &nv, &capv);
		if (!err && arr_grow(&out, &capo, nv + (j - i), sizeof(*out)))
			err = -ENOMEM;
		/* merge the row's extents (ascending) with the batch's e[i..j) (ascending) */
		for (size_t b = i; !err && (a < nv || b < j);) {
			struct lsext_ent x;

			if (b == j || (a < nv && v[a].id < e[b].id))
				x = v[a++];
			else if (a < nv && v[a].id == e[b].id) {
				x = v[a++];
				if (e[b].first < x.first)
					x.first = e[b].first;
				if (e[b].last > x.last)
					x.last = e[b].last;
				b++;
			} else
				x = e[b++];
			if (no && out[no - 1].id == x.id) {	/* one label set twice in a batch */
				if (x.first < out[no - 1].first)
					out[no - 1].first = x.first;
				if (x.last > out[no - 1].last)
					out[no - 1].last = x.last;
				continue;
			}
			out[no++] = x;
		}
		if (!err)
			err = row_put(s, k, out, no);
		i = j;
	}
	free(v);
	free(out);
	buf_done(&tmp);
	return err;
}

int sq_lsext_remove(struct sq *s, uint64_t *ids, size_t n)
{
	struct lsext_ent *v = NULL;
	size_t nv = 0, capv = 0;
	struct buf tmp = { 0 };
	int err = 0;

	qsort(ids, n, sizeof(*ids), cmp_u64);
	for (size_t i = 0; i < n && !err;) {
		uint64_t k = ids[i] >> LSEXT_SHIFT;
		size_t j = i, no = 0, b = i;

		while (j < n && ids[j] >> LSEXT_SHIFT == k)
			j++;
		err = row_get(s, k, &tmp, &v, &nv, &capv);
		for (size_t a = 0; !err && a < nv; a++) {
			while (b < j && ids[b] < v[a].id)
				b++;
			if (b < j && ids[b] == v[a].id)
				continue;
			v[no++] = v[a];
		}
		if (!err && no != nv)
			err = row_put(s, k, v, no);
		i = j;
	}
	free(v);
	buf_done(&tmp);
	return err;
}

int sq_lsext_each(sqlite3 *db, int (*cb)(void *ctx, const struct lsext_ent *e), void *ctx)
{
	struct lsext_ent *v = NULL;
	size_t nv, capv = 0;
	struct buf tmp = { 0 };
	sqlite3_stmt *st;
	int rc, err = 0;

	if (sqlite3_prepare_v2(db, "SELECT id, data FROM lsext", -1, &st, NULL)) {
		sqlite3_finalize(st);
		return -EIO;
	}
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		nv = 0;
		err = lsext_decode(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1),
				   &tmp, &v, &nv, &capv);
		if (err == -EINVAL) {
			log_warn("store: label-set extents row %lld does not decode: its label sets"
				 " are unknown", (long long)sqlite3_column_int64(st, 0));
			err = 0;
			continue;
		}
		for (size_t i = 0; !err && i < nv; i++)
			err = cb(ctx, &v[i]);
	}
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = -EIO;
	sqlite3_finalize(st);
	free(v);
	buf_done(&tmp);
	return err;
}

/* *max = the larger of itself and meta.ls_seq. 0 or -EIO. */
static int query_seq(struct sq *s, uint64_t *max)
{
	sqlite3_stmt *q = NULL;
	int err = 0;

	if (sqlite3_prepare_v2(s->w, "SELECT value FROM meta WHERE key = 'ls_seq'", -1, &q, NULL))
		err = -EIO;
	else if (sqlite3_step(q) == SQLITE_ROW && (uint64_t)sqlite3_column_int64(q, 0) > *max)
		*max = (uint64_t)sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	return err;
}

int sq_migrate_v14_lsext(struct sq *s, char *err, size_t errlen)
{
	struct lsext_ent *v = NULL;
	size_t n = 0, cap = 0;
	sqlite3_stmt *st = NULL;
	int rc, e = 0;
	uint64_t max = 0;
	char sql[96];

	if (sqlite3_prepare_v2(s->w, "SELECT id, first_ns, first_ns + dur_ns FROM labelsets"
			       " ORDER BY id", -1, &st, NULL)) {
		snprintf(err, errlen, "label sets of '%s': %s", s->path, sqlite3_errmsg(s->w));
		return -1;
	}
	while (!e && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap && arr_grow(&v, &cap, cap ? 2 * cap : 1024, sizeof(*v))) {
			e = -ENOMEM;
			break;
		}
		v[n++] = (struct lsext_ent){ (uint64_t)sqlite3_column_int64(st, 0),
					     (uint64_t)sqlite3_column_int64(st, 1),
					     (uint64_t)sqlite3_column_int64(st, 2) };
		max = v[n - 1].id;
	}
	if (!e && rc != SQLITE_DONE)
		e = -EIO;
	sqlite3_finalize(st);
	/* merged into rows there may be (a store marked older than it is) */
	if (!e && n)
		e = sq_lsext_widen(s, v, n);
	if (max < s->ls_seq)
		max = s->ls_seq;
	if (!e)
		e = query_seq(s, &max);
	snprintf(sql, sizeof(sql), "DROP TABLE labelsets; UPDATE meta SET value = %llu WHERE key ="
		 " 'ls_seq'", (unsigned long long)max);
	if (!e && sqlite3_exec(s->w, sql, NULL, NULL, NULL))
		e = -EIO;
	free(v);
	if (e) {
		snprintf(err, errlen, "label-set extents of '%s': %s", s->path,
			 e == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->w));
		return -1;
	}
	s->ls_seq = max;
	log_info("store: %zu label sets' extents moved into rows of %d", n, 1 << LSEXT_SHIFT);
	return 0;
}
