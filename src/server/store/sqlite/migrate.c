/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Older schemas of the SQLite store, brought to the current one in place at open, inside one
 * transaction (a crash midway leaves the old store as it was). Schema 1 -> 2: locations and
 * stacks move from one row each into compressed blocks (a stack's location ids delta-coded),
 * intervals from one row each into chunks (docs/server.md "Storage"). Schema 2 -> 3: nothing
 * to move (format-1 chunks are read as they are). Schema 3 -> 4: label sets from one row each
 * with their pairs into a row without them and blocks of their pairs. Schema 4 -> 5: the
 * locations' and stacks' tables keyed by 32 bits of the content hash instead of 64. Schema 5 ->
 * 6: no locations table (an in-memory index loaded from the blocks). Schema 6 -> 7: likewise
 * stacks, whose table keeps (id, day). Schema 7 -> 8: nothing to move (format-3 chunks are
 * new ones) and the stacks' (id, day) rows become a stackdays row per day.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/log.h"
#include "server/store/sqlite/sqlite.h"

int sq_schema_version(struct sq *s)
{
	sqlite3_stmt *st;
	int64_t v = 0;
	int rc;

	if (sqlite3_prepare_v2(s->w, "SELECT 1 FROM sqlite_master WHERE name = 'meta'", -1, &st,
			       NULL))
		return -EIO;
	rc = sq_step_i64(st, &v);
	sqlite3_finalize(st);
	if (rc <= 0)
		return rc;
	if (sqlite3_prepare_v2(s->w, "SELECT value FROM meta WHERE key = 'schema'", -1, &st, NULL))
		return -EIO;
	rc = sq_step_i64(st, &v);
	sqlite3_finalize(st);
	if (rc < 0)
		return rc;
	/* a meta table without a version: a store from before versions were written */
	return rc ? (int)v : 1;
}

int sq_migrate_v1_rename(struct sq *s, char *err, size_t errlen)
{
	/* The indexes follow their table; schema 2's have other names. */
	if (sqlite3_exec(s->w, "ALTER TABLE locations RENAME TO v1_locations;"
			       " ALTER TABLE stacks RENAME TO v1_stacks;"
			       " ALTER TABLE intervals RENAME TO v1_intervals;", NULL, NULL, NULL)) {
		snprintf(err, errlen, "migrating schema 1: %s", sqlite3_errmsg(s->w));
		return -EIO;
	}
	return 0;
}

/* Schema 1's locations, one row each with their names, into blocks of consecutive ids. */
static int copy_locations(struct sq *s)
{
	sqlite3_stmt *sel = NULL, *seq = NULL;
	struct lrow *r = malloc(LOC_BLOCK_MAX * sizeof(*r));
	struct buf strs = { 0 };
	size_t nr = 0, off[LOC_BLOCK_MAX][4];
	int err = r ? 0 : -ENOMEM;

	/* schema 6: no table beside the blocks (the index is loaded from them at open) */
	if (!err && sqlite3_prepare_v2(s->w, "SELECT id, hash, function, module, build_id, file,"
					     " line, address, flags FROM v1_locations ORDER BY id",
				       -1, &sel, NULL))
		err = -EIO;
	while (!err) {
		int rc = sqlite3_step(sel);

		if (rc == SQLITE_ROW) {
			r[nr] = (struct lrow){ .id = (uint64_t)sqlite3_column_int64(sel, 0),
				.line = (uint64_t)sqlite3_column_int64(sel, 6),
				.address = (uint64_t)sqlite3_column_int64(sel, 7),
				.flags = (uint64_t)sqlite3_column_int64(sel, 8) };
			for (int k = 0; k < 4; k++) {
				const char *t = (const char *)sqlite3_column_text(sel, 2 + k);

				off[nr][k] = strs.len;
				buf_put(&strs, t ? t : "", strlen(t ? t : "") + 1);
			}
			s->loc_seq = r[nr].id;
			nr++;
		} else if (rc != SQLITE_DONE) {
			err = -EIO;
		}
		if (err || strs.oom || (nr < LOC_BLOCK_MAX && rc == SQLITE_ROW) || !nr) {
			if (strs.oom)
				err = -ENOMEM;
			if (err || rc != SQLITE_ROW)
				break;
			continue;
		}
		/* a block's worth (or the last rows): strings resolved now, strs may have moved */
		for (size_t i = 0; i < nr; i++)
			for (int k = 0; k < 4; k++)
				r[i].str[k] = (const char *)strs.p + off[i][k];
		err = sq_put_loc_block(s, r, nr);
		nr = 0;
		strs.len = 0;
		if (rc != SQLITE_ROW)
			break;
	}
	if (!err && sqlite3_prepare_v2(s->w, "UPDATE meta SET value = ? WHERE key = 'loc_seq'", -1,
				       &seq, NULL))
		err = -EIO;
	if (!err) {
		sqlite3_bind_int64(seq, 1, (int64_t)s->loc_seq);
		err = sq_step_done(seq);
	}
	sqlite3_finalize(sel);
	sqlite3_finalize(seq);
	buf_done(&strs);
	free(r);
	return err;
}

/* Schema 1's stacks, one row each with plain uvarint location ids, into blocks of consecutive
 * ids with the ids delta-coded. */
static int copy_stacks(struct sq *s)
{
	sqlite3_stmt *sel = NULL, *ins = NULL, *seq = NULL;
	uint64_t *ids = malloc(BATCH_MAX_DEPTH * sizeof(*ids));
	uint64_t *sid = malloc(STACK_BLOCK_MAX * sizeof(*sid));
	size_t *off = malloc(STACK_BLOCK_MAX * sizeof(*off));
	size_t *lens = malloc(STACK_BLOCK_MAX * sizeof(*lens));
	const uint8_t **locs = malloc(STACK_BLOCK_MAX * sizeof(*locs));
	struct buf b = { 0 };
	size_t nr = 0;
	int err = ids && sid && off && lens && locs ? 0 : -ENOMEM;

	if (!err && (sqlite3_prepare_v2(s->w, "SELECT id, hash, locs, day FROM v1_stacks ORDER BY id",
					-1, &sel, NULL) ||
		     sqlite3_prepare_v2(s->w, "INSERT INTO stacks(id, day) VALUES (?, ?)", -1, &ins,
					NULL)))
		err = -EIO;
	while (!err) {
		int rc = sqlite3_step(sel);

		if (rc == SQLITE_ROW) {
			const uint8_t *p = sqlite3_column_blob(sel, 2);
			struct rd r = { p, p ? p + sqlite3_column_bytes(sel, 2) : NULL, false };
			size_t n = 0;

			while (r.p < r.end && n < BATCH_MAX_DEPTH) {
				uint64_t v = rd_uvarint(&r);

				if (r.bad)
					break;
				ids[n++] = v;
			}
			sid[nr] = (uint64_t)sqlite3_column_int64(sel, 0);
			off[nr] = b.len;
			stack_locs_encode(ids, n, &b);
			lens[nr] = b.len - off[nr];
			sqlite3_bind_int64(ins, 1, sqlite3_column_int64(sel, 0));
			sqlite3_bind_int64(ins, 2, sqlite3_column_int64(sel, 3));
			err = sq_step_done(ins);
			s->stack_seq = sid[nr];
			nr++;
		} else if (rc != SQLITE_DONE) {
			err = -EIO;
		}
		if (!err && b.oom)
			err = -ENOMEM;
		if (err)
			break;
		if (nr && (nr == STACK_BLOCK_MAX || rc != SQLITE_ROW)) {
			for (size_t i = 0; i < nr; i++)
				locs[i] = b.p + off[i];
			err = sq_put_stack_block(s, sid, locs, lens, nr);
			nr = 0;
			b.len = 0;
		}
		if (rc != SQLITE_ROW)
			break;
	}
	if (!err && sqlite3_prepare_v2(s->w, "UPDATE meta SET value = ? WHERE key = 'stack_seq'", -1,
				       &seq, NULL))
		err = -EIO;
	if (!err) {
		sqlite3_bind_int64(seq, 1, (int64_t)s->stack_seq);
		err = sq_step_done(seq);
	}
	sqlite3_finalize(sel);
	sqlite3_finalize(ins);
	sqlite3_finalize(seq);
	buf_done(&b);
	free(ids);
	free(sid);
	free(off);
	free(lens);
	free(locs);
	return err;
}

static int cmp_irow(const void *a, const void *b)
{
	const struct irow *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* One chunk being gathered from schema 1's rows: the rows and copies of their attrs. */
struct ivacc {
	char *kind;
	struct irow *r;
	size_t n, cap;
	struct buf strs;	/* attr blobs, back to back */
	size_t *off, *len;	/* row i's attr blob in strs */
	const char **attrs;
	size_t nattrs;		/* strings in strs */
	uint64_t t0;		/* the first end */
};

static int ivacc_flush(struct sq *s, struct ivacc *a)
{
	size_t na = 0;
	int err;

	if (!a->n)
		return 0;
	if (a->strs.oom)
		return -ENOMEM;
	free(a->attrs);
	a->attrs = malloc((a->nattrs ? a->nattrs : 1) * sizeof(*a->attrs));
	if (!a->attrs)
		return -ENOMEM;
	for (size_t i = 0; i < a->n; i++) {
		const char *p = (const char *)a->strs.p + a->off[i];
		size_t k = 0;

		a->r[i].attrs = a->attrs + na;
		for (size_t o = 0; o < a->len[i]; o += strnlen(p + o, a->len[i] - o) + 1)
			a->attrs[na + k++] = p + o;
		a->r[i].nattrs = k / 2;
		na += k;
	}
	qsort(a->r, a->n, sizeof(*a->r), cmp_irow);
	err = sq_put_interval_chunk(s, a->kind, a->r, a->n, 1, 0);	/* as they were: ns */
	a->n = a->nattrs = 0;
	a->strs.len = 0;
	return err;
}

/*
 * Schema 1's intervals, one row each, into chunks of one kind: read in (kind, end) order along
 * its index (no sort of the whole table), cut every CHUNK_SPAN_NS of ends or CHUNK_MAX rows; a
 * row's id is its arrival order.
 */
static int copy_intervals(struct sq *s)
{
	sqlite3_stmt *sel = NULL, *up = NULL;
	struct ivacc a = { 0 };
	int64_t max_id = 0;
	int err = 0;

	a.cap = CHUNK_MAX;
	a.r = malloc(a.cap * sizeof(*a.r));
	a.off = malloc(a.cap * sizeof(*a.off));
	a.len = malloc(a.cap * sizeof(*a.len));
	if (!a.r || !a.off || !a.len) {
		err = -ENOMEM;
		goto out;
	}
	if (sqlite3_prepare_v2(s->w, "SELECT kind, id, labelset, start_ns, end_ns, attrs FROM"
				     " v1_intervals ORDER BY kind, end_ns", -1, &sel, NULL)) {
		err = -EIO;
		goto out;
	}
	while (!err && sqlite3_step(sel) == SQLITE_ROW) {
		const char *kind = (const char *)sqlite3_column_text(sel, 0);
		int64_t id = sqlite3_column_int64(sel, 1);
		uint64_t start = (uint64_t)sqlite3_column_int64(sel, 3);
		uint64_t end = (uint64_t)sqlite3_column_int64(sel, 4);
		const char *blob = sqlite3_column_blob(sel, 5);
		size_t len = (size_t)sqlite3_column_bytes(sel, 5), na = 0;

		kind = kind ? kind : "";
		if (a.n && (strcmp(a.kind, kind) || a.n == a.cap || end - a.t0 >= CHUNK_SPAN_NS))
			err = ivacc_flush(s, &a);
		if (err)
			break;
		if (!a.n) {
			free(a.kind);
			a.kind = strdup(kind);
			if (!a.kind) {
				err = -ENOMEM;
				break;
			}
			a.t0 = end;
		}
		for (size_t o = 0; blob && o < len; o += strnlen(blob + o, len - o) + 1)
			na++;
		a.nattrs += na;
		a.off[a.n] = a.strs.len;
		a.len[a.n] = len;
		if (len)
			buf_put(&a.strs, blob, len);
		a.r[a.n++] = (struct irow){ .seq = (uint64_t)id,
			.labelset = (uint64_t)sqlite3_column_int64(sel, 2), .start = start,
			.end = end < start ? start : end };
		if (id > max_id)
			max_id = id;
	}
	if (!err)
		err = ivacc_flush(s, &a);
	if (!err && sqlite3_prepare_v2(s->w, "UPDATE meta SET value = ? WHERE key = 'ivl_seq'", -1,
				       &up, NULL))
		err = -EIO;
	if (!err) {
		sqlite3_bind_int64(up, 1, max_id);
		err = sq_step_done(up);
		s->ivl_seq = (uint64_t)max_id;
	}
out:
	sqlite3_finalize(sel);
	sqlite3_finalize(up);
	free(a.kind);
	free(a.r);
	free(a.off);
	free(a.len);
	free(a.attrs);
	buf_done(&a.strs);
	return err;
}

int sq_migrate_v1_copy(struct sq *s, char *err, size_t errlen)
{
	const char *what = "locations";
	int rc = copy_locations(s);

	if (!rc) {
		what = "stacks";
		rc = copy_stacks(s);
	}
	if (!rc) {
		what = "intervals";
		rc = copy_intervals(s);
	}
	if (!rc) {
		what = "dropping the old tables";
		rc = sqlite3_exec(s->w, "DROP TABLE v1_locations; DROP TABLE v1_stacks;"
				  " DROP TABLE v1_intervals;", NULL, NULL, NULL) ? -EIO : 0;
	}
	if (rc) {
		snprintf(err, errlen, "migrating schema 1 to 2: %s: %s", what,
			 rc == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->w));
		sq_dedup_reset(s);
	}
	return rc;
}

int sq_migrate_v3_rename(struct sq *s, char *err, size_t errlen)
{
	/* its UNIQUE index on hash follows it, and goes with it */
	if (sqlite3_exec(s->w, "ALTER TABLE labelsets RENAME TO v3_labelsets", NULL, NULL, NULL)) {
		snprintf(err, errlen, "migrating label sets: %s", sqlite3_errmsg(s->w));
		return -EIO;
	}
	return 0;
}

/* Label sets in id order into rows and blocks of at most LS_BLOCK_MAX, ids kept. */
int sq_migrate_v3_copy(struct sq *s, char *err, size_t errlen)
{
	sqlite3_stmt *sel = NULL, *ins = NULL;
	uint64_t *ids = malloc(LS_BLOCK_MAX * sizeof(*ids));
	size_t *off = malloc(LS_BLOCK_MAX * sizeof(*off)), *lens = malloc(LS_BLOCK_MAX * sizeof(*lens));
	const uint8_t **v = malloc(LS_BLOCK_MAX * sizeof(*v));
	struct buf blobs = { 0 };
	size_t n = 0;
	int rc = 0, e = ids && off && lens && v ? 0 : -ENOMEM;

	if (!e && (sqlite3_prepare_v2(s->w, "SELECT id, hash, labels, first_ns, last_ns FROM"
					    " v3_labelsets ORDER BY id", -1, &sel, NULL) ||
		   sqlite3_prepare_v2(s->w, "INSERT INTO labelsets(id, first_ns, dur_ns)"
					    " VALUES (?1, ?2, ?3 - ?2)", -1, &ins, NULL)))
		e = -EIO;
	while (!e && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
		sqlite3_bind_int64(ins, 1, sqlite3_column_int64(sel, 0));
		sqlite3_bind_int64(ins, 2, sqlite3_column_int64(sel, 3));
		sqlite3_bind_int64(ins, 3, sqlite3_column_int64(sel, 4));
		e = sq_step_done(ins);
		ids[n] = (uint64_t)sqlite3_column_int64(sel, 0);
		off[n] = blobs.len;
		lens[n] = (size_t)sqlite3_column_bytes(sel, 2);
		if (lens[n])
			buf_put(&blobs, sqlite3_column_blob(sel, 2), lens[n]);
		n++;
		if (!e && blobs.oom)
			e = -ENOMEM;
		if (!e && n == LS_BLOCK_MAX) {
			for (size_t i = 0; i < n; i++)
				v[i] = blobs.p + off[i];
			e = sq_put_ls_block(s, ids, v, lens, n);
			n = 0;
			blobs.len = 0;
		}
	}
	if (!e && rc != SQLITE_DONE)
		e = -EIO;
	if (!e && n) {
		for (size_t i = 0; i < n; i++)
			v[i] = blobs.p + off[i];
		e = sq_put_ls_block(s, ids, v, lens, n);
	}
	sqlite3_finalize(sel);
	sqlite3_finalize(ins);
	if (!e && sqlite3_exec(s->w, "DROP TABLE v3_labelsets", NULL, NULL, NULL))
		e = -EIO;
	if (e)
		snprintf(err, errlen, "migrating label sets: %s",
			 e == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->w));
	buf_done(&blobs);
	free(ids);
	free(off);
	free(lens);
	free(v);
	return e;
}

int sq_migrate_v4_rename(struct sq *s, int ver, char *err, size_t errlen)
{
	if ((ver < 6 && sqlite3_exec(s->w, "DROP TABLE locations", NULL, NULL, NULL)) ||
	    sqlite3_exec(s->w, "ALTER TABLE stacks RENAME TO v4_stacks", NULL, NULL, NULL)) {
		snprintf(err, errlen, "migrating to 32-bit keys: %s", sqlite3_errmsg(s->w));
		return -EIO;
	}
	return 0;
}

int sq_migrate_v4_copy(struct sq *s, char *err, size_t errlen)
{
	if (sqlite3_exec(s->w, "INSERT INTO stacks(id, day) SELECT id, day FROM v4_stacks;"
			       " DROP TABLE v4_stacks;", NULL, NULL, NULL)) {
		snprintf(err, errlen, "migrating to 32-bit keys: %s", sqlite3_errmsg(s->w));
		return -EIO;
	}
	return 0;
}

#define STACKDAYS_MAX	65536	/* ids per stackdays row the migration writes */

int sq_migrate_v8_stackdays(struct sq *s, char *err, size_t errlen)
{
	sqlite3_stmt *q = NULL;
	uint64_t *ids = malloc(STACKDAYS_MAX * sizeof(*ids));
	int64_t day = 0;
	size_t n = 0;
	int e = ids ? 0 : -ENOMEM, rc = SQLITE_DONE;

	if (!e && sqlite3_prepare_v2(s->w, "SELECT day, id FROM stacks ORDER BY day, id", -1, &q,
				     NULL))
		e = -EIO;
	while (!e && (rc = sqlite3_step(q)) == SQLITE_ROW) {
		int64_t d = sqlite3_column_int64(q, 0);

		if (n && (d != day || n == STACKDAYS_MAX)) {
			e = sq_put_stackdays(s, (uint64_t)day, ids, n);
			n = 0;
		}
		day = d;
		ids[n++] = (uint64_t)sqlite3_column_int64(q, 1);
	}
	if (!e && rc != SQLITE_DONE)
		e = -EIO;
	if (!e && n)
		e = sq_put_stackdays(s, (uint64_t)day, ids, n);
	sqlite3_finalize(q);
	free(ids);
	if (!e && sqlite3_exec(s->w, "DROP TABLE stacks", NULL, NULL, NULL))
		e = -EIO;
	if (e)
		snprintf(err, errlen, "migrating the stacks' days: %s",
			 e == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->w));
	return e;
}

int sq_migrate_v10_locnames(struct sq *s, char *err, size_t errlen)
{
	sqlite3_stmt *q = NULL;
	struct lblock b = { 0 };
	void *blob = NULL;
	int64_t id = -1;
	int e = 0, rc;

	if (sqlite3_prepare_v2(s->w, "SELECT id, data FROM locblocks WHERE id > ? ORDER BY id"
			       " LIMIT 1", -1, &q, NULL))
		e = -EIO;
	/* a block at a time, the statement reset before its row is written again */
	while (!e) {
		size_t len;

		sqlite3_bind_int64(q, 1, id);
		rc = sqlite3_step(q);
		if (rc != SQLITE_ROW) {
			e = rc == SQLITE_DONE ? 0 : -EIO;
			break;
		}
		id = sqlite3_column_int64(q, 0);
		len = (size_t)sqlite3_column_bytes(q, 1);
		free(blob);
		blob = malloc(len ? len : 1);
		if (!blob) {
			e = -ENOMEM;
			break;
		}
		memcpy(blob, sqlite3_column_blob(q, 1), len);
		sqlite3_reset(q);
		if (loc_block_decode(&b, blob, len, sq_str_get, s) || b.dict || !b.n ||
		    b.r[0].id != (uint64_t)id)
			continue;	/* unreadable (its locations answer unknown, as before) */
		e = sq_put_loc_block(s, b.r, b.n);	/* the same key: the row replaced */
	}
	sqlite3_finalize(q);
	lblock_done(&b);
	free(blob);
	if (e)
		snprintf(err, errlen, "migrating the location names: %s",
			 e == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->w));
	return e;
}
