/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/server/store/sqlite/chunk.c: round trips and refusals of the blob codec. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test.h"
#include "server/store/sqlite/chunk.h"
#include "server/store/sqlite/chunk_blob.h"

static bool test_chunk_samples(void)
{
	struct srow r[3] = { { 1000, 7, 1 }, { 1500, 9, -4 }, { 1500, 7, 300 } };
	struct chunk c = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = false;

	if (!ASSERT_EQ(chunk_samples_encode(r, 3, 0, 0, &z, &zlen), 0, "encode"))
		goto out;
	if (!ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 1000), 0, "decode") ||
	    !ASSERT_EQ(c.n, 3, "n") || !ASSERT_EQ(c.all_one, 0, "values kept"))
		goto out;
	for (size_t i = 0; i < 3; i++)
		if (!ASSERT_EQ(c.t[i], r[i].t, "t") || !ASSERT_EQ(c.stack[i], r[i].stack, "stack") ||
		    !ASSERT_EQ(c.value[i], r[i].value, "value"))
			goto out;
	/* Truncated blob: refused, and the chunk reads as empty. */
	ok = ASSERT_EQ(chunk_samples_decode(&c, z, zlen - 1, 1000), -EINVAL, "truncated") &&
	     ASSERT_EQ(c.n, 0, "empty after refusal");
out:
	free(z);
	chunk_done(&c);
	return ok;
}

static bool test_chunk_samples_bound(void)
{
	struct buf b = { 0 };
	struct chunk c = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok;

	/* A payload claiming more samples than any encoder writes. */
	buf_uvarint(&b, CHUNK_MAX + 1);
	buf_uvarint(&b, 1);
	for (size_t i = 0; i < 2 * (CHUNK_MAX + 1); i++)
		buf_uvarint(&b, 0);
	ok = ASSERT_EQ(zblob_pack(b.p, b.len, 1, &z, &zlen), 0, "pack") &&
	     ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 0), -EINVAL, "over CHUNK_MAX");
	free(z);
	buf_done(&b);
	chunk_done(&c);
	return ok;
}

struct got {
	uint64_t t[8];
	double v[8];
	size_t n;
};

static int got_point(void *ctx, uint64_t t, double v)
{
	struct got *g = ctx;

	if (g->n == 8)
		return -E2BIG;
	g->t[g->n] = t;
	g->v[g->n++] = v;
	return 0;
}

static bool test_chunk_points(void)
{
	struct prow r[3] = { { 5000, 0.5 }, { 6000, -2 }, { 9000, 1e300 } };
	struct got g = { 0 };
	struct buf tmp = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = ASSERT_EQ(chunk_points_encode(r, 3, &z, &zlen), 0, "encode") &&
		  ASSERT_EQ(chunk_points_decode(z, zlen, 5000, &tmp, got_point, &g), 0, "decode") &&
		  ASSERT_EQ(g.n, 3, "n") && ASSERT_EQ(g.t[1], 6000, "t") &&
		  ASSERT_TRUE(g.v[0] == 0.5 && g.v[1] == -2 && g.v[2] == 1e300, "values");

	g.n = 0;
	ok = ok && ASSERT_EQ(chunk_points_decode(z, zlen / 2, 5000, &tmp, got_point, &g), -EINVAL,
			     "truncated") && ASSERT_EQ(g.n, 0, "nothing passed on before refusal");
	free(z);
	buf_done(&tmp);
	return ok;
}

struct rsum {
	uint64_t ls[8], stack[8], count[8];
	int64_t sum[8];
	size_t n;
};

static int got_rollup(void *ctx, uint64_t ls, uint64_t stack, int64_t sum, uint64_t count)
{
	struct rsum *r = ctx;

	if (r->n == 8)
		return -E2BIG;
	r->ls[r->n] = ls;
	r->stack[r->n] = stack;
	r->sum[r->n] = sum;
	r->count[r->n++] = count;
	return 0;
}

static int got_rollup_v10(void *ctx, uint64_t stack, int64_t sum, uint64_t count)
{
	return got_rollup(ctx, 0, stack, sum, count);
}

/* A row of schema 11 holds the entries of every label set of its node, in (label set, stack)
 * order, whatever order they were given in; counts are stored only where one is not its sum. */
static bool test_chunk_rollup(void)
{
	uint64_t ls[4] = { 9, 2, 9, 2 }, stack[4] = { 40, 3, 17, 50 }, count[4] = { 1, 2, 3, 4 };
	int64_t sum[4] = { 100, -5, 1LL << 40, 6 };
	size_t order[4] = { 1, 3, 2, 0 };	/* ascending (label set, stack) */
	struct rsum got = { 0 };
	struct buf tmp = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = ASSERT_EQ(rollup_encode(ls, stack, sum, count, order, 4, &z, &zlen), 0, "encode") &&
		  ASSERT_EQ(rollup_decode(z, zlen, &tmp, got_rollup, &got), 0, "decode") &&
		  ASSERT_EQ(got.n, 4, "n") && ASSERT_EQ(got.ls[0], 2, "first label set") &&
		  ASSERT_EQ(got.stack[0], 3, "its first stack") && ASSERT_EQ(got.sum[0], -5, "its sum") &&
		  ASSERT_EQ(got.count[0], 2, "its count") && ASSERT_EQ(got.stack[1], 50, "then") &&
		  ASSERT_EQ(got.ls[2], 9, "second label set") &&
		  ASSERT_EQ(got.stack[2], 17, "its stacks from 0 again") &&
		  ASSERT_EQ(got.sum[2], 1LL << 40, "sum") && ASSERT_EQ(got.stack[3], 40, "last stack") &&
		  ASSERT_EQ(got.count[3], 1, "last count");

	ok = ok && ASSERT_EQ(rollup_decode("junk", 4, &tmp, got_rollup, &got), -EINVAL, "not zstd");
	free(z);
	z = NULL;
	/* CPU samples: every count is its sum, and is not stored */
	{
		uint64_t c2[4] = { 100, 7, 1, 6 };
		int64_t s2[4] = { 100, 7, 1, 6 };
		uint8_t *y = NULL;
		size_t ylen = 0;

		got.n = 0;
		ok = ok && ASSERT_EQ(rollup_encode(ls, stack, s2, c2, order, 4, &y, &ylen), 0, "enc") &&
		     ASSERT_EQ(rollup_encode(ls, stack, sum, count, order, 4, &z, &zlen), 0, "enc") &&
		     ASSERT_TRUE(ylen < zlen, "shorter without counts") &&
		     ASSERT_EQ(rollup_decode(y, ylen, &tmp, got_rollup, &got), 0, "decode") &&
		     ASSERT_EQ(got.n, 4, "n") && ASSERT_EQ(got.count[0], 7, "count is the sum") &&
		     ASSERT_EQ(got.count[3], 100, "count is the sum");
		free(y);
		free(z);
		z = NULL;
	}
	/* schema 10's rows (one label set's, read by the migration) are not schema 11's */
	{
		struct buf b = { 0 };

		buf_uvarint(&b, 0);	/* format 2: 0, n, stack deltas, sums */
		buf_uvarint(&b, 2);
		buf_uvarint(&b, 5);
		buf_uvarint(&b, 2);
		buf_svarint(&b, -3);
		buf_svarint(&b, 9);
		got.n = 0;
		ok = ok && ASSERT_EQ(zblob_pack(b.p, b.len, 1, &z, &zlen), 0, "pack") &&
		     ASSERT_EQ(rollup_decode(z, zlen, &tmp, got_rollup, &got), -EINVAL, "not 11") &&
		     ASSERT_EQ(got.n, 0, "nothing passed") &&
		     ASSERT_EQ(rollup_decode_v10(z, zlen, &tmp, got_rollup_v10, &got), 0, "format 2") &&
		     ASSERT_EQ(got.n, 2, "n") && ASSERT_EQ(got.stack[1], 7, "stack") &&
		     ASSERT_EQ(got.sum[0], -3, "sum") && ASSERT_EQ(got.count[1], 9, "count: sum");
		buf_done(&b);
		free(z);
		z = NULL;
	}
	/* format 1 (schemas 2 and 3): n, then (stack delta, sum, count) each */
	{
		struct buf b = { 0 };

		buf_uvarint(&b, 2);
		buf_uvarint(&b, 5);
		buf_svarint(&b, -3);
		buf_uvarint(&b, 4);
		buf_uvarint(&b, 2);
		buf_svarint(&b, 9);
		buf_uvarint(&b, 1);
		got.n = 0;
		ok = ok && ASSERT_EQ(zblob_pack(b.p, b.len, 1, &z, &zlen), 0, "pack") &&
		     ASSERT_EQ(rollup_decode_v10(z, zlen, &tmp, got_rollup_v10, &got), 0, "format 1") &&
		     ASSERT_EQ(got.n, 2, "n") && ASSERT_EQ(got.stack[1], 7, "stack") &&
		     ASSERT_EQ(got.sum[0], -3, "sum") && ASSERT_EQ(got.count[0], 4, "count");
		buf_done(&b);
	}
	free(z);
	buf_done(&tmp);
	return ok;
}

/* A chunk of several label sets carries each sample's; samples come back in the order given
 * (time order; ties of time too, whichever label set came first); small payloads stay raw. */
static bool test_chunk_samples_mixed(void)
{
	struct srow r[3] = { { 1000, 7, 1, 4 }, { 1500, 9, 1, 2 }, { 1500, 7, 1, 4 } };
	struct srow q[3] = { { 1000, 7, 1, 4 }, { 1500, 9, 1, 4 }, { 1500, 7, 1, 2 } };
	struct chunk c = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = ASSERT_EQ(chunk_samples_encode(r, 3, 0, 0, &z, &zlen), 0, "encode") &&
		  ASSERT_EQ(z[0], 0, "stored raw (zstd would be longer)") &&
		  ASSERT_EQ(z[1], 0, "format 2") &&
		  ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 1000), 0, "decode") &&
		  ASSERT_TRUE(c.mixed && c.all_one, "mixed, all ones");

	for (size_t i = 0; ok && i < 3; i++)
		ok = ASSERT_EQ(c.t[i], r[i].t, "t") && ASSERT_EQ(c.labelset[i], r[i].labelset, "ls") &&
		     ASSERT_EQ(c.stack[i], r[i].stack, "stack");
	free(z);
	z = NULL;
	ok = ok && ASSERT_EQ(chunk_samples_encode(q, 3, 0, 0, &z, &zlen), 0, "encode") &&
	     ASSERT_EQ(z[1], 0, "format 2, its tie put right") &&
	     ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 1000), 0, "decode");
	for (size_t i = 0; ok && i < 3; i++)
		ok = ASSERT_EQ(c.labelset[i], q[i].labelset, "ls") &&
		     ASSERT_EQ(c.stack[i], q[i].stack, "stack");
	free(z);
	chunk_done(&c);
	return ok;
}

static int cmp_srow_all(const void *a, const void *b)
{
	const struct srow *x = a, *y = b;

	if (x->labelset != y->labelset)
		return x->labelset < y->labelset ? -1 : 1;
	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	if (x->stack != y->stack)
		return x->stack < y->stack ? -1 : 1;
	return x->value < y->value ? -1 : x->value > y->value;
}

/*
 * Format 2 round trip over what a node sends: threads sampled near every period with jitter,
 * stacks that repeat and ones that don't (more than move-to-front keeps), off-CPU values that
 * are the gap less the run time and ones that are not, extreme values and times, samples of
 * several threads at the same nanosecond in any order; with and without a period. Given in time
 * order, the samples come back in that order; given out of it (format 1), all of them.
 */
static bool test_chunk_samples_v2(void)
{
	enum { N = 5000 };
	struct srow *r = calloc(N, sizeof(*r)), *d = calloc(N, sizeof(*d));
	struct chunk c = { 0 };
	uint64_t seed = 42, t0 = 1796279143162609111ull;
	bool ok = r && d;

	for (int round = 0; ok && round < 4; round++) {
		uint64_t period = round & 1 ? 10101010 : 0, tmin = UINT64_MAX;
		uint8_t *z = NULL;
		size_t zlen = 0;

		for (size_t i = 0; i < N; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			r[i].labelset = 1 + (seed >> 33) % 37;
			r[i].t = t0 + (i / 37) * 10101010 + (seed >> 40) % 9000;
			r[i].stack = (seed >> 20) % 5 ? 1 + (seed >> 50) % 40 : 1 + (seed >> 24);
			r[i].value = round >= 2 ? (int64_t)(seed >> 30) - (int64_t)(1ull << 33) : 1;
			if (i == 7)
				r[i].value = INT64_MIN;
			if (i == 8 && round >= 2)
				r[i].t = t0 + (1ull << 40);
			if (i % 7 == 0)	/* at the same time as the one before */
				r[i].t = i ? r[i - 1].t : r[i].t;
			tmin = r[i].t < tmin ? r[i].t : tmin;
		}
		if (round < 3)	/* by time (insertion sort: stable) */
			for (size_t i = 1; i < N; i++)
				for (size_t j = i; j && r[j].t < r[j - 1].t; j--) {
					struct srow x = r[j];

					r[j] = r[j - 1];
					r[j - 1] = x;
				}
		ok = ASSERT_EQ(chunk_samples_encode(r, N, period, 0, &z, &zlen), 0, "encode") &&
		     ASSERT_EQ(chunk_samples_decode(&c, z, zlen, tmin), 0, "decode") &&
		     ASSERT_EQ(c.n, N, "n") && ASSERT_TRUE(c.mixed, "mixed");
		for (size_t i = 0; ok && i < N; i++)
			d[i] = (struct srow){ c.t[i], c.stack[i], c.value[i], c.labelset[i] };
		if (round == 3) {	/* out of time order: the same samples */
			qsort(r, N, sizeof(*r), cmp_srow_all);
			qsort(d, N, sizeof(*d), cmp_srow_all);
		}
		for (size_t i = 0; ok && i < N; i++)
			ok = ASSERT_EQ(d[i].t, r[i].t, "t") && ASSERT_EQ(d[i].stack, r[i].stack, "stack") &&
			     ASSERT_EQ(d[i].value, r[i].value, "value") &&
			     ASSERT_EQ(d[i].labelset, r[i].labelset, "label set");
		ok = ok && ASSERT_EQ(chunk_samples_decode(&c, z, zlen - 1, tmin) < 0, 1, "truncated");
		free(z);
	}
	free(r);
	free(d);
	chunk_done(&c);
	return ok;
}

/*
 * Stack literals (flag 32, schema 16): new stacks numbered as the chunk lists them cost a 0
 * each, an old one among them one jump; ids 2^63 apart are written without the flag; a chunk
 * of schema 15 (literals as differences) still decodes; a literal past the largest id is refused.
 */
static bool test_chunk_literals(void)
{
	struct srow r[64];
	struct chunk c = { 0 };
	struct buf b = { 0 }, raw = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0, n = 0;
	uint64_t next = 1000;
	bool ok = true;

	for (size_t i = 0; i < 64; i++)	/* one label set, all literals (distinct stacks) */
		r[n++] = (struct srow){ .t = 100 + i, .stack = i % 5 == 4 ? 3 + i : next++,
					.value = 1, .labelset = 1 };
	for (int round = 0; ok && round < 2; round++) {
		struct rd rd;

		if (round)	/* 2^63 apart: no 1 + zigzag code for the jump */
			r[10].stack = r[9].stack + (1ull << 63);
		raw.len = 0;
		ok = ASSERT_EQ(chunk_samples_encode(r, n, 0, 0, &z, &zlen), 0, "encode") &&
		     ASSERT_EQ(blob_unpack(z, zlen, 1 << 20, &raw), 0, "unpack") &&
		     ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 100), 0, "decode") &&
		     ASSERT_EQ(c.n, n, "n");
		rd = (struct rd){ raw.p, raw.p + raw.len, false };
		rd_uvarint(&rd);	/* 0, format 2, n, flags */
		rd_uvarint(&rd);
		rd_uvarint(&rd);
		ok = ok && ASSERT_EQ(!!(rd_uvarint(&rd) & 32), !round, "flag 32 unless 2^63 apart");
		for (size_t i = 0; ok && i < n; i++)
			ok = ASSERT_EQ(c.stack[i], r[i].stack, "stack");
		free(z);
		z = NULL;
	}
	/* schema 15's: literals 10 and 7 as differences, then the second again from the list */
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 2);
	buf_uvarint(&b, 3);	/* n */
	buf_uvarint(&b, 1);	/* every value 1 */
	buf_uvarint(&b, 0);	/* no period */
	buf_uvarint(&b, 0);	/* first time */
	buf_uvarint(&b, 5);	/* the next two: d */
	buf_uvarint(&b, 5);
	buf_uvarint(&b, 0);	/* stack codes */
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 1);
	buf_svarint(&b, 10);	/* literals */
	buf_svarint(&b, -3);
	ok = ok && ASSERT_EQ(zblob_pack(b.p, b.len, 1, &z, &zlen), 0, "pack") &&
	     ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 100), 0, "decode schema 15's") &&
	     ASSERT_EQ(c.stack[0], 10, "10") && ASSERT_EQ(c.stack[1], 7, "7") &&
	     ASSERT_EQ(c.stack[2], 7, "7 again") && ASSERT_EQ(c.t[2], 110, "t");
	free(z);
	z = NULL;
	/* flag 32: the largest literal 2^64 - 1 (0 less 1), then "the next new": refused */
	b.len = 0;
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 2);
	buf_uvarint(&b, 2);
	buf_uvarint(&b, 1 | 32);
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 5);
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 1 + zigzag(-1));
	buf_uvarint(&b, 0);
	ok = ok && ASSERT_EQ(zblob_pack(b.p, b.len, 1, &z, &zlen), 0, "pack") &&
	     ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 100), -EINVAL, "past the largest id");
	free(z);
	buf_done(&b);
	buf_done(&raw);
	chunk_done(&c);
	return ok;
}

/* A format-1 chunk (schema 2 stores) still decodes: time order, label sets per sample. */
static bool test_chunk_samples_v1(void)
{
	struct buf b = { 0 };
	struct chunk c = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok;

	buf_uvarint(&b, 2);	/* n */
	buf_uvarint(&b, 2);	/* mixed, values kept */
	buf_uvarint(&b, 0);	/* times: 100, 130 */
	buf_uvarint(&b, 30);
	buf_uvarint(&b, 5);	/* label sets */
	buf_uvarint(&b, 3);
	buf_uvarint(&b, 11);	/* stacks */
	buf_uvarint(&b, 12);
	buf_svarint(&b, -7);	/* values */
	buf_svarint(&b, 9);
	ok = ASSERT_EQ(zblob_pack(b.p, b.len, 1, &z, &zlen), 0, "pack") &&
	     ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 100), 0, "decode") &&
	     ASSERT_EQ(c.n, 2, "n") && ASSERT_EQ(c.t[1], 130, "t") &&
	     ASSERT_EQ(c.labelset[0], 5, "ls") && ASSERT_EQ(c.stack[1], 12, "stack") &&
	     ASSERT_EQ(c.value[0], -7, "value");
	free(z);
	buf_done(&b);
	chunk_done(&c);
	return ok;
}

/* Interval chunks: rows come back by (label set, start), with their arrival order, attrs of
 * different shapes (two sharing a first name), decimal values as the same text. */
static bool test_chunk_intervals(void)
{
	const char *a0[] = { "state", "blocked", "reason", "futex", "stack_id", "17" };
	const char *a1[] = { "state", "running" };
	const char *a2[] = { "state", "007", "cpu", "0" };
	struct irow r[3] = { { 10, 5, 2000, 3000, a0, 3 }, { 11, 5, 1000, 2000, a1, 1 },
			     { 12, 3, 2000, 2500, a2, 2 } };
	struct ichunk c = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = ASSERT_EQ(chunk_intervals_encode(r, 3, 0, &z, &zlen), 0, "encode") &&
		  ASSERT_EQ(chunk_intervals_decode(&c, z, zlen, 1000), 0, "decode") &&
		  ASSERT_EQ(c.n, 3, "n");

	/* order: (3, 2000), (5, 1000), (5, 2000) */
	ok = ok && ASSERT_EQ(c.labelset[0], 3, "ls") && ASSERT_EQ(c.seq[0], 12, "seq") &&
	     ASSERT_EQ(c.start[1], 1000, "start") && ASSERT_EQ(c.end[1], 2000, "end") &&
	     ASSERT_EQ(c.seq[1], 11, "seq") && ASSERT_EQ(c.start[2], 2000, "after its end") &&
	     ASSERT_EQ(c.end[2], 3000, "end") && ASSERT_EQ(c.nattrs[2], 3, "3 attrs") &&
	     ASSERT_EQ(c.nattrs[1], 1, "1 attr");
	for (size_t k = 0; ok && k < 6; k++)
		ok = ASSERT_STREQ(c.attrs[2 * c.attr0[2] + k], a0[k], "attr of row 2");
	for (size_t k = 0; ok && k < 4; k++)
		ok = ASSERT_STREQ(c.attrs[2 * c.attr0[0] + k], a2[k], "attr of row 0");
	ok = ok && ASSERT_STREQ(c.attrs[2 * c.attr0[1] + 1], "running", "attr of row 1");
	ok = ok && ASSERT_EQ(chunk_intervals_decode(&c, z, zlen - 1, 1000) < 0, 1, "truncated");
	free(z);
	ichunk_done(&c);
	return ok;
}

/*
 * Format 2's values: a summary's running_ns is stored as "the length less the numbers before"
 * and answered as the same text; numbers that cannot be (past 2^62, "007", one that is not the
 * rest of the length) keep their text. A format-1 chunk (schema 2 stores) still decodes.
 */
static bool test_chunk_intervals_summary(void)
{
	const char *a0[] = { "blocked_ns", "0", "runnable_ns", "20470", "running_ns", "333384",
			     "state", "running", "summary", "1" };
	const char *a1[] = { "blocked_ns", "5000000000000000000", "runnable_ns", "007",
			     "running_ns", "999", "state", "running" };
	const char *a2[] = { "running_ns", "0", "blocked_ns", "353854" };
	struct irow r[3] = { { 1, 9, 1000, 1000 + 353854, a0, 5 },
			     { 2, 9, 1000 + 353854, 1000 + 353854 + 999, a1, 4 },
			     { 3, 8, 500, 500 + 353854, a2, 2 } };
	struct ichunk c = { 0 };
	struct buf b = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = ASSERT_EQ(chunk_intervals_encode(r, 3, 0, &z, &zlen), 0, "encode") &&
		  ASSERT_EQ(chunk_intervals_decode(&c, z, zlen, 500), 0, "decode") &&
		  ASSERT_EQ(c.n, 3, "n");

	/* order: (8, 500), (9, 1000), (9, 1000 + 353854) */
	for (size_t k = 0; ok && k < 4; k++)
		ok = ASSERT_STREQ(c.attrs[2 * c.attr0[0] + k], a2[k], "attr of row 0");
	for (size_t k = 0; ok && k < 10; k++)
		ok = ASSERT_STREQ(c.attrs[2 * c.attr0[1] + k], a0[k], "attr of row 1");
	for (size_t k = 0; ok && k < 8; k++)
		ok = ASSERT_STREQ(c.attrs[2 * c.attr0[2] + k], a1[k], "attr of row 2");
	free(z);
	z = NULL;
	/* format 1: n 1, seq 4, strings "state" "running", one shape [0], length 10, label set
	 * 2 from t_min, seq delta 0, shape 0, value 2 x 1 */
	buf_uvarint(&b, 1);
	buf_uvarint(&b, 4);
	buf_uvarint(&b, 2);
	buf_put(&b, "state\0running\0", 14);
	buf_uvarint(&b, 1);
	buf_uvarint(&b, 1);
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 10);
	buf_uvarint(&b, 2);
	buf_uvarint(&b, 0);
	buf_svarint(&b, 0);
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 2);
	ok = ok && ASSERT_EQ(zblob_pack(b.p, b.len, 1, &z, &zlen), 0, "pack") &&
	     ASSERT_EQ(chunk_intervals_decode(&c, z, zlen, 100), 0, "format 1") &&
	     ASSERT_EQ(c.n, 1, "n") && ASSERT_EQ(c.seq[0], 4, "seq") &&
	     ASSERT_EQ(c.end[0], 110, "end") && ASSERT_EQ(c.labelset[0], 2, "ls") &&
	     ASSERT_STREQ(c.attrs[1], "running", "value");
	free(z);
	buf_done(&b);
	ichunk_done(&c);
	return ok;
}

/*
 * Format 3 (µs): sample times floored to the unit, ties that flooring makes keep the order
 * given, values in ns; interval starts and ends floored, *_ns attrs floored, a summary's
 * running_ns the length less the others (so the three still add up to the length), other
 * numbers (cpu, stack_id) as they are; a seq_free row's seq is the chunk's least.
 */
static bool test_chunk_format3(void)
{
	struct srow r[4] = { { 10001999, 7, 1500, 2 }, { 10001500, 8, 2, 1 },
			     { 20103000, 7, 10000999, 2 }, { 20103999, 9, 1, 1 } };
	const char *a0[] = { "blocked_ns", "1999", "runnable_ns", "20470", "running_ns", "331385",
			     "state", "running", "stack_id", "123456789", "cpu", "1" };
	const char *a1[] = { "state", "blocked" };
	struct irow iv[2] = { { 9, 3, 1000999, 1000999 + 353854, a0, 6, false },
			      { 7, 4, 1000999, 1001999, a1, 1, true } };
	struct chunk c = { 0 };
	struct ichunk ic = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok;

	/* r by time: 10001500 (ls 1), 10001999 (ls 2), 20103000 (ls 2), 20103999 (ls 1) */
	struct srow q[4] = { r[1], r[0], r[2], r[3] };

	ok = ASSERT_EQ(chunk_samples_encode(q, 4, 10101010, 1000, &z, &zlen), 0, "encode") &&
	     ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 10001000), 0, "decode") &&
	     ASSERT_EQ(c.n, 4, "n") && ASSERT_EQ(c.t[0], 10001000, "floored") &&
	     ASSERT_EQ(c.t[1], 10001000, "floored") && ASSERT_EQ(c.labelset[0], 1, "tie order") &&
	     ASSERT_EQ(c.t[2], 20103000, "t") && ASSERT_EQ(c.t[3], 20103000, "floored") &&
	     ASSERT_EQ(c.labelset[2], 2, "tie order kept") &&
	     ASSERT_EQ(c.value[2], 10000999, "value in ns") && ASSERT_EQ(c.value[1], 1500, "value");
	free(z);
	z = NULL;
	ok = ok && ASSERT_EQ(chunk_intervals_encode(iv, 2, 1000, &z, &zlen), 0, "encode") &&
	     ASSERT_EQ(chunk_intervals_decode(&ic, z, zlen, 1000000), 0, "decode") &&
	     ASSERT_EQ(ic.n, 2, "n") && ASSERT_EQ(ic.start[0], 1000000, "start floored") &&
	     ASSERT_EQ(ic.end[0], 1354000, "end floored") && ASSERT_EQ(ic.seq[0], 9, "seq kept") &&
	     ASSERT_EQ(ic.seq[1], 7, "a free seq: the chunk's least") &&
	     ASSERT_EQ(ic.end[1], 1001000, "end") &&
	     ASSERT_STREQ(ic.attrs[1], "1000", "blocked_ns floored") &&
	     ASSERT_STREQ(ic.attrs[3], "20000", "runnable_ns floored") &&
	     ASSERT_STREQ(ic.attrs[5], "333000", "running_ns: the rest of the length") &&
	     ASSERT_STREQ(ic.attrs[9], "123456789", "stack_id as it is") &&
	     ASSERT_STREQ(ic.attrs[11], "1", "cpu as it is");
	free(z);
	chunk_done(&c);
	ichunk_done(&ic);
	return ok;
}

/* A format-3 chunk as schema 8-12 servers wrote it (µs; before zstd): four rows of label sets
 * 3 and 4, a summary (running_ns the rest of its length), a blocked state, two running ones;
 * only the first row's seq (9) kept, the others the least (7). */
static const uint8_t fmt3_chunk[] = {
	0x00, 0x03, 0xe8, 0x07, 0x04, 0x07, 0x0b, 0x62, 0x6c, 0x6f, 0x63, 0x6b,
	0x65, 0x64, 0x5f, 0x6e, 0x73, 0x00, 0x72, 0x75, 0x6e, 0x6e, 0x61, 0x62,
	0x6c, 0x65, 0x5f, 0x6e, 0x73, 0x00, 0x72, 0x75, 0x6e, 0x6e, 0x69, 0x6e,
	0x67, 0x5f, 0x6e, 0x73, 0x00, 0x73, 0x74, 0x61, 0x74, 0x65, 0x00, 0x72,
	0x75, 0x6e, 0x6e, 0x69, 0x6e, 0x67, 0x00, 0x73, 0x75, 0x6d, 0x6d, 0x61,
	0x72, 0x79, 0x00, 0x72, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x00, 0x66, 0x75,
	0x74, 0x65, 0x78, 0x00, 0x62, 0x6c, 0x6f, 0x63, 0x6b, 0x65, 0x64, 0x00,
	0x73, 0x74, 0x61, 0x63, 0x6b, 0x5f, 0x69, 0x64, 0x00, 0x63, 0x70, 0x75,
	0x00, 0x03, 0x05, 0x00, 0x01, 0x02, 0x03, 0x05, 0x03, 0x06, 0x03, 0x09,
	0x02, 0x0a, 0x03, 0x02, 0x62, 0x86, 0x01, 0xf3, 0x01, 0x02, 0x00, 0x01,
	0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00,
	0x02, 0x01, 0x02, 0x05, 0x51, 0x02, 0x10, 0x10, 0x20, 0x10, 0x05, 0x1c,
	0x45, 0x0d, 0x0d,
};

/* Chunks written before format 4 still read, the same rows as those servers answered. */
static bool test_chunk_intervals_format3_read(void)
{
	struct ichunk c = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = ASSERT_EQ(zblob_pack(fmt3_chunk, sizeof(fmt3_chunk), 1, &z, &zlen), 0, "pack") &&
		  ASSERT_EQ(chunk_intervals_decode(&c, z, zlen, 1000000), 0, "decode") &&
		  ASSERT_EQ(c.n, 4, "n");

	ok = ok && ASSERT_EQ(c.labelset[0], 3, "ls") && ASSERT_EQ(c.start[0], 1000000, "start") &&
	     ASSERT_EQ(c.end[0], 1354000, "end") && ASSERT_EQ(c.seq[0], 9, "kept seq") &&
	     ASSERT_STREQ(c.attrs[2 * c.attr0[0] + 5], "333000", "running_ns") &&
	     ASSERT_EQ(c.start[1], 1354000, "back to back") && ASSERT_EQ(c.end[1], 2000000, "end") &&
	     ASSERT_STREQ(c.attrs[2 * c.attr0[1] + 1], "3", "cpu") && ASSERT_EQ(c.seq[1], 7, "least") &&
	     ASSERT_EQ(c.labelset[2], 4, "ls") && ASSERT_EQ(c.start[2], 1000000, "start") &&
	     ASSERT_STREQ(c.attrs[2 * c.attr0[2] + 1], "futex", "reason") &&
	     ASSERT_STREQ(c.attrs[2 * c.attr0[2] + 5], "17", "stack_id") &&
	     ASSERT_EQ(c.start[3], 1001000, "start") && ASSERT_EQ(c.end[3], 1500000, "end") &&
	     ASSERT_EQ(c.nattr, 12, "attrs");
	free(z);
	ichunk_done(&c);
	return ok;
}

/* Round trip of r (n rows) at unit u, decoded into c; t_min the least start, floored. */
static bool iv_roundtrip(const struct irow *r, size_t n, uint64_t u, struct ichunk *c)
{
	uint64_t t_min = UINT64_MAX;
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok;

	for (size_t i = 0; i < n; i++)
		t_min = r[i].start < t_min ? r[i].start : t_min;
	ok = ASSERT_EQ(chunk_intervals_encode(r, n, u, &z, &zlen), 0, "encode") &&
	     ASSERT_EQ(chunk_intervals_decode(c, z, zlen, n ? t_min - t_min % u : 0), 0, "decode") &&
	     ASSERT_EQ(c->n, n, "n") && ASSERT_EQ(c->raw.p[1], 4, "format 4");
	free(z);
	return ok;
}

/*
 * A stack kept typed (irow.stack at stack_at) writes the same bytes as its id as the text of
 * attr stack_id at that place, at both units (at ns every number may be coded as the row's
 * length less the numbers before it: here the stack of row 1), and comes back typed
 * (ichunk.stack) as well as answered as text.
 */
static bool test_chunk_intervals_typed_stack(void)
{
	const char *text0[] = { "state", "blocked", "stack_id", "40", "reason", "io" };
	const char *text1[] = { "state", "blocked", "stack_id", "500" };
	const char *text2[] = { "state", "running", "cpu", "3" };
	const char *bare0[] = { "state", "blocked", "reason", "io" };
	const char *bare1[] = { "state", "blocked" };
	struct irow text[3] = { { 1, 7, 1000, 2000, text0, 3, false },
				{ 2, 7, 2000, 2500, text1, 2, false },
				{ 3, 8, 1500, 9000, text2, 2, false } };
	struct irow typed[3] = { { 1, 7, 1000, 2000, bare0, 2, false, 40, 1 },
				 { 2, 7, 2000, 2500, bare1, 1, false, 500, 1 },
				 { 3, 8, 1500, 9000, text2, 2, false } };
	struct ichunk c = { 0 };
	bool ok = true;

	for (uint64_t u = 1; ok && u <= 100; u *= 100) {
		uint8_t *z1 = NULL, *z2 = NULL;
		size_t n1 = 0, n2 = 0;

		ok = ASSERT_EQ(chunk_intervals_encode(text, 3, u, &z1, &n1), 0, "encode text") &&
		     ASSERT_EQ(chunk_intervals_encode(typed, 3, u, &z2, &n2), 0, "encode typed") &&
		     ASSERT_EQ(n2, n1, "same length") &&
		     ASSERT_TRUE(!memcmp(z1, z2, n1), "same bytes") &&
		     ASSERT_EQ(chunk_intervals_decode(&c, z2, n2, 1000), 0, "decode") &&
		     ASSERT_EQ(c.n, 3, "rows") && ASSERT_EQ(c.stack[0], 40, "typed stack") &&
		     ASSERT_EQ(c.stack[1], 500, "typed stack: the row's length") &&
		     ASSERT_EQ(c.stack[2], 0, "none") &&
		     ASSERT_STREQ(c.attrs[2 * c.attr0[0] + 2], "stack_id", "at its place") &&
		     ASSERT_STREQ(c.attrs[2 * c.attr0[0] + 3], "40", "answered as text") &&
		     ASSERT_STREQ(c.attrs[2 * c.attr0[1] + 3], "500", "answered as text");
		free(z1);
		free(z2);
	}
	typed[0].stack_at = 3;	/* past the row's attrs */
	ok = ok && ASSERT_EQ(chunk_intervals_encode(typed, 3, 1, &(uint8_t *){ NULL },
						    &(size_t){ 0 }), -EINVAL, "a place past the attrs");
	ichunk_done(&c);
	return ok;
}

/*
 * Format 4's arrival numbers: rows whose start no other row shares get the chunk's least seq;
 * a tie group held whole by the chunk (seq_free) keeps only its order of arrival, whether or
 * not that is the predicted one (by end); rows not seq_free keep their seq as it is.
 */
static bool test_chunk_intervals_ties(void)
{
	const char *run[] = { "state", "running", "cpu", "2" };
	const char *blk[] = { "state", "blocked", "reason", "futex", "stack_id", "40" };
	/* ls 1 and 2 switch at 5000 (2 arrives first: it ends first, the prediction); ls 3, 4 and 5
	 * start at 9000 and arrive 5, 3, 4 (not by end); ls 6 and 7 at 12000 keep their seqs */
	struct irow r[9] = {
		{ 100, 1, 1000, 5000, run, 2, true }, { 103, 1, 5000, 9000, blk, 3, true },
		{ 101, 2, 5000, 6000, run, 2, true }, { 105, 3, 9000, 9500, run, 2, true },
		{ 106, 4, 9000, 9100, blk, 3, true }, { 104, 5, 9000, 20000, run, 2, true },
		{ 102, 2, 6000, 7000, blk, 3, true }, { 500, 6, 12000, 13000, run, 2, false },
		{ 90, 7, 12000, 12500, blk, 3, false },
	};
	struct ichunk c = { 0 };
	bool ok = iv_roundtrip(r, 9, 1, &c);

	/* rows by (label set, start): 1@1000 1@5000 2@5000 2@6000 3 4 5 6 7 */
	ok = ok && ASSERT_EQ(c.seq[0], 90, "no tie: the least") &&
	     ASSERT_EQ(c.seq[3], 90, "no tie: the least") &&
	     ASSERT_TRUE(c.seq[2] < c.seq[1], "ls 2 arrived first at 5000") &&
	     ASSERT_TRUE(c.seq[6] < c.seq[4] && c.seq[4] < c.seq[5], "5, 3, 4 at 9000") &&
	     ASSERT_EQ(c.seq[7], 500, "kept") && ASSERT_EQ(c.seq[8], 90, "kept");
	for (size_t i = 0; ok && i < 9; i++)
		ok = ASSERT_TRUE(c.seq[i] >= 90 && c.seq[i] <= 500, "within the batch's seqs");
	/* at µs: 5000 and 5999 fall into one µs, 9000 ns 9 µs */
	r[2].start = 5999;
	r[2].end = 5999 + 1;
	ok = ok && iv_roundtrip(r, 9, 1000, &c) &&
	     ASSERT_TRUE(c.seq[2] < c.seq[1], "ties of the stored start") &&
	     ASSERT_TRUE(c.seq[6] < c.seq[4] && c.seq[4] < c.seq[5], "5, 3, 4 at 9 µs");
	ichunk_done(&c);
	return ok;
}

/* Edge cases: no row, one row, rows given out of order and overlapping within a thread, huge
 * lengths, constant and varying values per shape, the derived running_ns. */
static bool test_chunk_intervals_edges(void)
{
	const char *sum[] = { "blocked_ns", "0", "runnable_ns", "20000", "running_ns", "333000",
			      "state", "running", "summary", "1" };
	const char *sum2[] = { "blocked_ns", "0", "runnable_ns", "1000", "running_ns", "1000",
			       "state", "runnable", "summary", "1" };
	const char *run[] = { "state", "running", "cpu", "2" };
	const char *a[65];
	struct irow r[5] = {
		{ 7, 1, 5000000, 5353000, sum, 5, true },
		{ 3, 1, 1000000, 9000000, run, 2, true },	/* overlaps the others */
		{ 9, 1, 4000000, 4002000, sum2, 5, true },
		{ 5, 2, 0, UINT64_MAX / 2, run, 2, true },	/* huge */
		{ 4, 1, 9000000, 8999999000000ull, sum, 5, false },	/* 20000 + 333000 != length */
	};
	struct ichunk c = { 0 };
	bool ok = iv_roundtrip(r, 0, 1000, &c) && iv_roundtrip(r, 1, 1000, &c) &&
		  ASSERT_EQ(c.start[0], 5000000, "one row") && ASSERT_EQ(c.end[0], 5353000, "end") &&
		  ASSERT_EQ(c.seq[0], 7, "seq") && ASSERT_STREQ(c.attrs[5], "333000", "running_ns");

	for (uint64_t u = 1; ok && u <= 1000; u *= 1000) {
		ok = iv_roundtrip(r, 5, u, &c) && ASSERT_EQ(c.labelset[4], 2, "ls 2 last") &&
		     ASSERT_EQ(c.start[0], 1000000, "by start") && ASSERT_EQ(c.end[0], 9000000, "end") &&
		     ASSERT_EQ(c.start[1], 4000000, "start before the last end") &&
		     ASSERT_EQ(c.start[2], 5000000, "start") && ASSERT_EQ(c.end[3], 8999999000000ull, "end") &&
		     ASSERT_EQ(c.seq[3], 4, "kept") && ASSERT_EQ(c.end[4], UINT64_MAX / 2 / u * u, "huge");
		for (size_t k = 0; ok && k < 10; k++)
			ok = ASSERT_STREQ(c.attrs[2 * c.attr0[1] + k], sum2[k], "summary 2") &&
			     ASSERT_STREQ(c.attrs[2 * c.attr0[2] + k], sum[k], "summary") &&
			     ASSERT_STREQ(c.attrs[2 * c.attr0[3] + k], sum[k], "not derived");
		ok = ok && ASSERT_STREQ(c.attrs[2 * c.attr0[0] + 3], "2", "cpu");
	}
	/* more attrs than a chunk takes */
	for (size_t k = 0; k < 65; k++)
		a[k] = "x";
	r[0] = (struct irow){ 1, 1, 0, 1, a, CHUNK_MAX_ATTRS + 1, true };
	ok = ok && ASSERT_EQ(chunk_intervals_encode(r, 1, 1000, &(uint8_t *){ NULL }, &(size_t){ 0 }),
			     -EINVAL, "too many attrs");
	ichunk_done(&c);
	return ok;
}

/* A corrupt format-4 chunk is refused (-EINVAL), never read past: every truncation and every
 * byte changed of a real one either decodes or is refused, and a chunk that decodes has
 * consistent rows. */
static bool test_chunk_intervals_corrupt(void)
{
	const char *run[] = { "state", "running", "cpu", "2" };
	const char *blk[] = { "state", "blocked", "reason", "futex", "stack_id", "40" };
	struct irow r[6] = {
		{ 10, 1, 1000, 5000, run, 2, true }, { 13, 1, 5000, 9000, blk, 3, true },
		{ 11, 2, 5000, 6000, run, 2, true }, { 12, 2, 6000, 7000, blk, 3, true },
		{ 15, 3, 5000, 5500, run, 2, true }, { 14, 3, 7000, 7500, run, 2, false },
	};
	struct ichunk c = { 0 };
	struct buf raw = { 0 };
	uint8_t *z = NULL, *y = NULL;
	size_t zlen = 0, ylen = 0, refused = 0;
	bool ok = ASSERT_EQ(chunk_intervals_encode(r, 6, 1000, &z, &zlen), 0, "encode") &&
		  ASSERT_EQ(blob_unpack(z, zlen, 1 << 20, &raw), 0, "unpack");

	for (size_t len = 0; ok && len < raw.len; len++) {
		ok = ASSERT_EQ(zblob_pack(raw.p, len, 1, &y, &ylen), 0, "pack") &&
		     ASSERT_EQ(chunk_intervals_decode(&c, y, ylen, 1000), -EINVAL,
			       "truncated: refused") &&
		     ASSERT_EQ(c.n, 0, "empty after refusal");
		free(y);
		y = NULL;
	}
	for (size_t i = 0; ok && i < raw.len; i++) {
		for (int bit = 0; ok && bit < 8; bit++) {
			int err;

			raw.p[i] ^= (uint8_t)(1 << bit);
			ok = ASSERT_EQ(zblob_pack(raw.p, raw.len, 1, &y, &ylen), 0, "pack");
			err = chunk_intervals_decode(&c, y, ylen, 1000);
			ok = ok && ASSERT_TRUE(err == 0 || err == -EINVAL, "decodes or refused");
			refused += err != 0;
			for (size_t k = 0; ok && !err && k < c.n; k++)
				ok = ASSERT_TRUE(c.end[k] >= c.start[k] && c.nattrs[k] <= 3,
						 "consistent rows");
			raw.p[i] ^= (uint8_t)(1 << bit);
			free(y);
			y = NULL;
		}
	}
	ok = ok && ASSERT_TRUE(refused > raw.len, "most changes refused");
	free(z);
	buf_done(&raw);
	ichunk_done(&c);
	return ok;
}

/*
 * Schema 9: where every value is a whole number of the unit (off-CPU values that ingest rounded
 * to µs), format 3 keeps them in units (flag 16), as gaps or as they are, and decodes them
 * back exactly; one value off the unit keeps them all in ns.
 */
static bool test_chunk_values_in_units(void)
{
	/* ls 1: off 3 ms, ran 1 ms, off 2 ms (gaps shorter); ls 2: scattered values */
	struct srow r[6] = { { 10000000, 7, 3000000, 1 }, { 10000000, 5, 17000, 2 },
			     { 14000000, 7, 2000000, 1 }, { 19000000, 8, -4000, 2 },
			     { 21000000, 7, 1000, 1 }, { 29000000, 9, 123456000, 2 } };
	struct chunk c = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = true;

	for (int pass = 0; pass < 2 && ok; pass++) {
		if (pass)
			r[4].value = 1001;	/* not a whole µs: every value in ns */
		ok = ASSERT_EQ(chunk_samples_encode(r, 6, 0, 1000, &z, &zlen), 0, "encode") &&
		     ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 10000000), 0, "decode") &&
		     ASSERT_EQ(c.n, 6, "n") && ASSERT_EQ(c.raw.p[1], 3, "format 3") &&
		     ASSERT_EQ(c.raw.p[5] & 16, pass ? 0 : 16, "flag 16: values in units");
		for (size_t i = 0; i < 6 && ok; i++)
			ok = ASSERT_EQ(c.value[i], r[i].value, "value back exactly") &&
			     ASSERT_EQ(c.stack[i], r[i].stack, "stack");
		free(z);
		z = NULL;
	}
	/* unit 1 (--time-resolution ns): format 2, no flag */
	ok = ok && ASSERT_EQ(chunk_samples_encode(r, 6, 0, 0, &z, &zlen), 0, "encode") &&
	     ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 10000000), 0, "decode") &&
	     ASSERT_EQ(c.raw.p[1], 2, "format 2") && ASSERT_EQ(c.raw.p[3] & 16, 0, "no flag") &&
	     ASSERT_EQ(c.value[4], 1001, "ns value");
	free(z);
	chunk_done(&c);
	return ok;
}

/* A stack's location list: written root first after a 0 (schema 12), read back leaf first;
 * schema 2's leaf-first lists still read; bad bytes refused. */
static bool test_chunk_stack_locs(void)
{
	const uint64_t ids[] = { 900, 37, 12, 11, 3 };	/* leaf ... root */
	uint64_t out[8];
	size_t n = 0;
	struct buf b = { 0 };
	bool ok;

	stack_locs_encode(ids, 5, &b);
	ok = ASSERT_TRUE(b.len > 2 && b.p[0] == 0 && b.p[1] == 3, "a 0, then the root's id") &&
	     ASSERT_EQ(stack_locs_decode(b.p, b.len, out, 8, &n), 0, "decodes") &&
	     ASSERT_EQ(n, 5, "five frames") &&
	     ASSERT_TRUE(!memcmp(out, ids, sizeof(ids)), "leaf first again") &&
	     ASSERT_EQ(stack_locs_decode(b.p, b.len, out, 4, &n), -E2BIG, "more than max");
	/* schema 2's order, leaf first: 900, then the differences -863 and -25 */
	b.len = 0;
	buf_uvarint(&b, 900);
	buf_svarint(&b, -863);
	buf_svarint(&b, -25);
	ok = ok && ASSERT_EQ(stack_locs_decode(b.p, b.len, out, 8, &n), 0, "a leaf-first list") &&
	     ASSERT_EQ(n, 3, "three frames") && ASSERT_EQ(out[0], 900, "leaf") &&
	     ASSERT_EQ(out[2], 12, "root");
	b.len = 0;
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 5);
	buf_svarint(&b, -9);	/* would be id -4 */
	ok = ok && ASSERT_EQ(stack_locs_decode(b.p, b.len, out, 8, &n), -EINVAL, "an id <= 0");
	buf_done(&b);
	return ok;
}

/* The dictionary a format-3 location block's string ids name: "s<sid>". */
static const char *loc_str(void *ctx, uint64_t sid)
{
	static char tab[4][32];
	static int k;

	(void)ctx;
	k = (k + 1) % 4;
	snprintf(tab[k], sizeof(tab[k]), "s%llu", (unsigned long long)sid);
	return tab[k];
}

/* Format 3 (schema 14): modules by move-to-front over the block's recent ones (more than 64
 * modules: the oldest go), build ids, files and addresses on that module's last in the block
 * (addresses going down as well as up), every field back as it was. */
static bool test_chunk_loc_block_format3(void)
{
	enum { N = 400 };
	struct lrow r[N];
	struct lblock b = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = true;

	for (size_t i = 0; i < N; i++) {
		uint64_t m = i < 200 ? 10 + i % 3 : 100 + (i * 7) % 90;	/* 3, then 90 modules */

		r[i] = (struct lrow){ .id = 1000 + 2 * i, .sid = { 5000 + i / 2, m, m + 1000,
								  i % 5 ? m + 2000 : 0 },
				      .line = i % 11, .address = (m << 32) + (i * 7919) % 65536,
				      .flags = i % 4 };
		if (i == 7)
			r[i].address = UINT64_MAX;	/* wraps as a difference */
	}
	ok = ASSERT_EQ(loc_block_encode(r, N, true, &z, &zlen), 0, "encodes") &&
	     ASSERT_EQ(loc_block_decode(&b, z, zlen, loc_str, NULL), 0, "decodes") &&
	     ASSERT_EQ(b.n, N, "every location") && ASSERT_TRUE(b.dict, "through the dictionary");
	for (size_t i = 0; ok && i < N; i++) {
		char want[32];

		ok = ASSERT_EQ(b.r[i].id, r[i].id, "id") && ASSERT_EQ(b.r[i].line, r[i].line, "line") &&
		     ASSERT_EQ(b.r[i].address, r[i].address, "address") &&
		     ASSERT_EQ(b.r[i].flags, r[i].flags, "flags");
		for (int k = 0; ok && k < 4; k++) {
			snprintf(want, sizeof(want), "s%llu", (unsigned long long)r[i].sid[k]);
			ok = ASSERT_EQ(b.r[i].sid[k], r[i].sid[k], "string id") &&
			     ASSERT_TRUE(!strcmp(b.r[i].str[k], r[i].sid[k] ? want : ""), "string");
		}
	}
	free(z);
	/* a module code past the list: refused, not read out of bounds */
	{
		struct buf raw = { 0 };

		buf_put(&raw, "", 1);	/* stored raw: a 0, then the bytes */
		buf_uvarint(&raw, 0);
		buf_uvarint(&raw, 3);
		buf_uvarint(&raw, 1);	/* one location */
		buf_uvarint(&raw, 5);	/* id */
		buf_svarint(&raw, 1);	/* function */
		buf_uvarint(&raw, 2);	/* module: position 2 of an empty list */
		ok = ok && ASSERT_EQ(loc_block_decode(&b, raw.p, raw.len, loc_str, NULL), -EINVAL,
				     "a module code past the list");
		buf_done(&raw);
	}
	lblock_done(&b);
	return ok;
}

TEST_MAIN(T(test_chunk_loc_block_format3), T(test_chunk_stack_locs), T(test_chunk_samples), T(test_chunk_samples_bound), T(test_chunk_points),
	  T(test_chunk_rollup), T(test_chunk_samples_mixed), T(test_chunk_samples_v2),
	  T(test_chunk_samples_v1), T(test_chunk_literals), T(test_chunk_intervals), T(test_chunk_intervals_summary),
	  T(test_chunk_format3), T(test_chunk_values_in_units), T(test_chunk_intervals_format3_read),
	  T(test_chunk_intervals_ties), T(test_chunk_intervals_edges),
	  T(test_chunk_intervals_typed_stack),
	  T(test_chunk_intervals_corrupt))
