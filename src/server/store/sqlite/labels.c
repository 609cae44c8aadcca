/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The in-memory table of label sets (id -> sorted name/value pairs and time extent): loaded at
 * open, extended after each ingest commit, where selectors are evaluated before any chunk is read.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "server/selector.h"
#include "server/store/sqlite/sqlite.h"

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

int sq_lset_put(struct sq *s, uint64_t id, uint64_t hash, const uint8_t *blob, size_t len,
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
	if (s->lsets[id].pairs) {
		/* Published pairs are never freed or moved while the store is open: queries
		 * match them after dropping lmu. Same id, same content: widen the extent. */
		if (first < s->lsets[id].first_ns)
			s->lsets[id].first_ns = first;
		if (last > s->lsets[id].last_ns)
			s->lsets[id].last_ns = last;
		return 0;
	}
	err = lset_from_blob(&l, blob, len);
	if (err)
		return err;
	l.first_ns = first;
	l.last_ns = last;
	l.hash = hash;
	s->lsets[id] = l;
	__atomic_add_fetch(&s->lset_bytes, sq_lset_mem(blob, len), __ATOMIC_RELAXED);
	if (id + 1 > s->nlsets)
		s->nlsets = id + 1;
	if (!u64map_upsert(&s->ls_ids, hash, id, NULL))
		return -ENOMEM;
	return 0;
}

/* A label set's row: its time extent, and whether its pairs were found. */
struct ls_row {
	uint64_t first, last;
	bool found;
};

/* The extents being loaded: id -> index into rows. */
struct ls_load {
	struct u64map idx;
	struct ls_row *rows;
	size_t n, cap;
};

static int load_extent(void *ctx, const struct lsext_ent *e)
{
	struct ls_load *L = ctx;

	if (L->n == L->cap) {
		size_t ncap = L->cap ? 2 * L->cap : 1024;
		struct ls_row *nr = realloc(L->rows, ncap * sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		L->rows = nr;
		L->cap = ncap;
	}
	L->rows[L->n] = (struct ls_row){ e->first, e->last, false };
	return u64map_upsert(&L->idx, e->id, L->n++, NULL) ? 0 : -ENOMEM;
}

int sq_lsets_load(struct sq *s)
{
	struct ls_load L = { 0 };
	struct ls_row *rows;
	size_t n, missing = 0;
	struct sblock b = { 0 };
	sqlite3_stmt *st = NULL;
	int rc = SQLITE_DONE, err;

	err = sq_lsext_each(s->w, load_extent, &L);
	rows = L.rows;
	n = L.n;
	/* the pairs, block by block: an entry without its row went with dictionary GC */
	if (!err && sqlite3_prepare_v2(s->w, "SELECT data FROM lsblocks", -1, &st, NULL))
		err = -EIO;
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (stack_block_decode(&b, sqlite3_column_blob(st, 0),
				       (size_t)sqlite3_column_bytes(st, 0))) {
			log_warn("store: a label-set block does not decode: its label sets are unknown");
			continue;
		}
		for (size_t i = 0; !err && i < b.n; i++) {
			uint64_t *k = u64map_find(&L.idx, b.id[i]);
			struct ls_row *r = k ? &rows[*k] : NULL;

			if (!r || r->found)
				continue;
			r->found = true;
			/* the content hash store_label_set() gives the same pairs */
			err = sq_lset_put(s, b.id[i], hash64(b.locs[i], b.len[i], 11), b.locs[i],
					  b.len[i], r->first, r->last);
		}
	}
	if (!err && rc != SQLITE_DONE)
		err = -EIO;
	sqlite3_finalize(st);
	for (size_t i = 0; i < n; i++)
		missing += !rows[i].found;
	if (!err && missing)
		log_warn("store: %zu label sets have no pairs (a lost block): unknown to queries",
			 missing);
	sblock_done(&b);
	u64map_done(&L.idx);
	free(rows);
	return err;
}

struct lset_ref *sq_lsets_snapshot(struct sq *s, uint64_t from, uint64_t to, size_t *ret_n,
				   size_t *ret_nlsets)
{
	struct lset_ref *v;
	size_t n = 0;

	pthread_rwlock_rdlock(&s->lmu);
	v = malloc((s->nlsets ? s->nlsets : 1) * sizeof(*v));
	for (size_t i = 1; v && i < s->nlsets; i++) {
		const struct lset *l = &s->lsets[i];

		if (!l->pairs || l->last_ns < from || l->first_ns >= to)
			continue;
		v[n++] = (struct lset_ref){ i, (const char *const *)l->pairs, l->n };
	}
	if (ret_nlsets)
		*ret_nlsets = s->nlsets;
	pthread_rwlock_unlock(&s->lmu);
	*ret_n = n;
	return v;
}

bool sq_lset_get(struct sq *s, uint64_t id, struct lset *ret)
{
	bool ok;

	pthread_rwlock_rdlock(&s->lmu);
	ok = id < s->nlsets && s->lsets[id].pairs;
	if (ok)
		*ret = s->lsets[id];
	pthread_rwlock_unlock(&s->lmu);
	return ok;
}

uint8_t *sq_lsets_match(struct sq *s, const struct selector *sel, uint64_t from, uint64_t to,
			size_t *ret_n)
{
	size_t n, nlsets;
	struct lset_ref *v = sq_lsets_snapshot(s, from, to, &n, &nlsets);
	uint8_t *m = v ? calloc(nlsets ? nlsets : 1, 1) : NULL;

	/* No lock from here: ingest publishes new label sets while a regex runs. */
	for (size_t i = 0; m && i < n; i++)
		m[v[i].id] = selector_match(sel, v[i].pairs, v[i].n);
	free(v);
	*ret_n = nlsets;
	return m;
}

void sq_lsets_done(struct sq *s)
{
	for (size_t i = 0; i < s->nlsets; i++)
		free(s->lsets[i].pairs);
	free(s->lsets);
	s->lsets = NULL;
	s->nlsets = s->caplsets = 0;
	u64map_done(&s->ls_ids);
}
