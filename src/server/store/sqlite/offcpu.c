/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Off-CPU samples kept as the blocked intervals they repeat (schema 15). For every blocked
 * thread state with a stack the agent sends the interval (start, end, stack) and an off-CPU
 * sample (end, end - start, stack) of the same label set: 70 % of an ML node's off-CPU samples,
 * 4.3 bytes each in a sample chunk. Ingest pairs each such interval with its sample and stores
 * the sample only as the interval; readers of samples (scan.c, rollup.c) take it back from
 * there. An interval that had no sample to pair with carries the attr OFFCPU_NO_SAMPLE, which
 * readers of intervals never show. Interval chunks written before the store reached schema 15
 * (ids up to meta.offcpu_iv_after) stand for no sample: their samples are in sample chunks.
 *
 * The pairing is exact: a sample pairs only with an interval that gives back its stored time,
 * value, stack and label set, as the readers compute them from what the interval chunk holds
 * (offcpu_iv_sample()), so an answer is the same whichever way a sample was kept.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include "common/util.h"
#include "server/store/sqlite/sqlite.h"

int64_t offcpu_value_unit(uint64_t t, int64_t v, uint64_t u)
{
	uint64_t a, q, from;

	if (u <= 1)
		return v;
	if (v <= 0) {	/* not a time blocked: rounded to the nearest unit */
		a = -(uint64_t)v;
		q = a / u + (a % u >= (u + 1) / 2);
		return -(int64_t)(q * u);
	}
	from = (uint64_t)v < t ? t - (uint64_t)v : 0;
	q = t / u - from / u;
	return (int64_t)((q ? q : 1) * u);
}

/* The value of attr name among nattrs pairs, or NULL. */
static const char *attr(const char *const *attrs, size_t nattrs, const char *name)
{
	for (size_t i = 0; i < nattrs; i++)
		if (!strcmp(attrs[2 * i], name))
			return attrs[2 * i + 1];
	return NULL;
}

/* Whether an interval is blocked time (kind OFFCPU_IV_KIND, not a summary). */
static bool offcpu_iv_blocked(const char *kind, const char *const *attrs, size_t nattrs)
{
	const char *st;

	if (strcmp(kind, OFFCPU_IV_KIND))
		return false;
	st = attr(attrs, nattrs, "state");
	return st && !strcmp(st, "blocked") && !attr(attrs, nattrs, "summary");
}

size_t offcpu_public_nattrs(const char *const *attrs, size_t nattrs)
{
	return nattrs && !strcmp(attrs[2 * (nattrs - 1)], OFFCPU_NO_SAMPLE) ? nattrs - 1 : nattrs;
}

bool offcpu_iv_sample(const char *kind, const char *const *attrs, size_t nattrs, uint64_t stack,
		      uint64_t start, uint64_t end, uint64_t unit, struct offcpu_key *ret)
{
	uint64_t u = unit > 1 ? unit : 1;

	if (!stack || !offcpu_iv_blocked(kind, attrs, nattrs) ||
	    offcpu_public_nattrs(attrs, nattrs) != nattrs)
		return false;
	ret->stack = stack;
	ret->t = end;
	ret->value = end - start > u ? end - start : u;
	return true;
}

static int key_cmp(const void *x, const void *y)
{
	const struct offcpu_key *a = x, *b = y;

	if (a->ls != b->ls)
		return a->ls < b->ls ? -1 : 1;
	if (a->stack != b->stack)
		return a->stack < b->stack ? -1 : 1;
	if (a->t != b->t)
		return a->t < b->t ? -1 : 1;
	if (a->value != b->value)
		return a->value < b->value ? -1 : 1;
	return a->ref < b->ref ? -1 : a->ref > b->ref;
}

void offcpu_sort(struct offcpu_key *k, size_t n)
{
	qsort(k, n, sizeof(*k), key_cmp);
}

bool offcpu_take(const struct offcpu_key *smp, size_t n, const struct offcpu_key *key,
		 uint8_t *skip)
{
	struct offcpu_key k = *key;
	size_t lo = 0, hi = n;

	k.ref = 0;
	while (lo < hi) {	/* the first sample not below k */
		size_t mid = lo + (hi - lo) / 2;

		if (key_cmp(&smp[mid], &k) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < n && smp[lo].ls == k.ls && smp[lo].stack == k.stack && smp[lo].t == k.t &&
	       smp[lo].value == k.value; lo++) {
		if (!skip[smp[lo].ref]) {
			skip[smp[lo].ref] = 1;
			return true;
		}
	}
	return false;
}

/* meta.offcpu_iv_after: interval chunks with greater ids stand for samples. */
static int sq_offcpu_after(sqlite3 *db, int64_t *ret)
{
	sqlite3_stmt *q;
	int err = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'offcpu_iv_after'", -1,
				     &q, NULL) ? -EIO : 0;

	*ret = 0;
	if (!err && sqlite3_step(q) == SQLITE_ROW)
		*ret = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	return err;
}

/*
 * The rows of a decoded chunk with the same list of attr names share their name pointers (its
 * shapes): whether such a list can stand for a sample is decided once per list (the shapes of
 * the chunk looked at last, by pointers), not with a row's every strcmp.
 */
#define SHAPES_SEEN	16
struct shape_seen {
	const char *const *names;	/* the first row's attrs, names at even places */
	size_t n;
	bool may;			/* has state and a stack, no summary, no mark */
};

static bool same_names(const char *const *a, const char *const *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[2 * i] != b[2 * i])
			return false;
	return true;
}

void offcpu_chunk_samples(const struct ichunk *c, uint64_t from, uint64_t to, offcpu_cb cb,
			  void *ctx, int *err)
{
	struct shape_seen seen[SHAPES_SEEN];
	size_t nseen = 0;

	for (size_t i = 0; !*err && i < c->n; i++) {
		const char *const *a = c->attrs + 2 * c->attr0[i];
		size_t n = c->nattrs[i], s;
		struct offcpu_key k;

		if (c->end[i] < from || c->end[i] >= to)
			continue;
		for (s = 0; s < nseen; s++)
			if (seen[s].n == n && same_names(seen[s].names, a, n))
				break;
		if (s == nseen && nseen < SHAPES_SEEN) {
			seen[nseen++] = (struct shape_seen){ a, n,
				attr(a, n, "state") && attr(a, n, CHUNK_STACK_ATTR) &&
				!attr(a, n, "summary") && offcpu_public_nattrs(a, n) == n };
		}
		if (s < nseen && !seen[s].may)
			continue;
		if (!offcpu_iv_sample(OFFCPU_IV_KIND, a, n, c->stack[i], c->start[i], c->end[i],
				      c->unit, &k))
			continue;
		*err = cb(ctx, c->labelset[i], k.stack, k.t, k.value);
	}
}

int sq_offcpu_scan(sqlite3 *db, uint64_t from, uint64_t to, int64_t id_gt, int64_t id_le,
		   int64_t cut_le, uint64_t cut_t, offcpu_cb cb, void *ctx)
{
	sqlite3_stmt *q = NULL;
	struct ichunk c = { 0 };
	int64_t after;
	int err;

	if (from >= to)
		return 0;
	err = sq_offcpu_after(db, &after);
	if (err)
		return err;
	if (id_gt < after)
		id_gt = after;
	if (id_gt >= id_le)
		return 0;
	/* the chunks holding an interval that ends at from too */
	err = sq_ivchunks_query(db, OFFCPU_IV_KIND, from ? from - 1 : 0, to, &q);
	while (!err && sqlite3_step(q) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(q, 3);

		/* a chunk none of whose intervals stands for a sample is not decoded */
		if (id <= id_gt || id > id_le || sqlite3_column_int64(q, 4) <= 0)
			continue;
		err = chunk_intervals_decode(&c, sqlite3_column_blob(q, 2),
					     (size_t)sqlite3_column_bytes(q, 2),
					     (uint64_t)sqlite3_column_int64(q, 1));
		if (!err)
			offcpu_chunk_samples(&c, id <= cut_le && cut_t > from ? cut_t : from, to, cb,
					     ctx, &err);
	}
	sqlite3_finalize(q);
	ichunk_done(&c);
	return err;
}
