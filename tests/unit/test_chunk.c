/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/server/store/sqlite/chunk.c: round trips and refusals of the blob codec. */
#include <errno.h>
#include <stdlib.h>
#include "test.h"
#include "server/store/sqlite/chunk.h"

static bool test_chunk_samples(void)
{
	struct srow r[3] = { { 1000, 7, 1 }, { 1500, 9, -4 }, { 1500, 7, 300 } };
	struct chunk c = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = false;

	if (!ASSERT_EQ(chunk_samples_encode(r, 3, &z, &zlen), 0, "encode"))
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
	uint64_t stack[8], count[8];
	int64_t sum[8];
	size_t n;
};

static int got_rollup(void *ctx, uint64_t stack, int64_t sum, uint64_t count)
{
	struct rsum *r = ctx;

	if (r->n == 8)
		return -E2BIG;
	r->stack[r->n] = stack;
	r->sum[r->n] = sum;
	r->count[r->n++] = count;
	return 0;
}

static bool test_chunk_rollup(void)
{
	uint64_t stack[3] = { 40, 3, 17 }, count[3] = { 1, 2, 3 };
	int64_t sum[3] = { 100, -5, 1LL << 40 };
	size_t order[3] = { 1, 2, 0 };	/* ascending stack */
	struct rsum got = { 0 };
	struct buf tmp = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = ASSERT_EQ(rollup_encode(stack, sum, count, order, 3, &z, &zlen), 0, "encode") &&
		  ASSERT_EQ(rollup_decode(z, zlen, &tmp, got_rollup, &got), 0, "decode") &&
		  ASSERT_EQ(got.n, 3, "n") && ASSERT_EQ(got.stack[0], 3, "first stack") &&
		  ASSERT_EQ(got.sum[0], -5, "its sum") && ASSERT_EQ(got.count[0], 2, "its count") &&
		  ASSERT_EQ(got.stack[2], 40, "last stack") && ASSERT_EQ(got.sum[1], 1LL << 40, "sum");

	ok = ok && ASSERT_EQ(rollup_decode("junk", 4, &tmp, got_rollup, &got), -EINVAL, "not zstd");
	free(z);
	buf_done(&tmp);
	return ok;
}

/* Schema 2: a chunk of several label sets carries each sample's; small payloads stay raw. */
static bool test_chunk_samples_mixed(void)
{
	struct srow r[3] = { { 1000, 7, 1, 4 }, { 1500, 9, 1, 2 }, { 1500, 7, 1, 4 } };
	struct chunk c = { 0 };
	uint8_t *z = NULL;
	size_t zlen = 0;
	bool ok = ASSERT_EQ(chunk_samples_encode(r, 3, &z, &zlen), 0, "encode") &&
		  ASSERT_EQ(z[0], 0, "stored raw (zstd would be longer)") &&
		  ASSERT_EQ(chunk_samples_decode(&c, z, zlen, 1000), 0, "decode") &&
		  ASSERT_TRUE(c.mixed && c.all_one, "mixed, all ones") &&
		  ASSERT_EQ(c.labelset[0], 4, "ls 0") && ASSERT_EQ(c.labelset[1], 2, "ls 1") &&
		  ASSERT_EQ(c.labelset[2], 4, "ls 2") && ASSERT_EQ(c.stack[1], 9, "stack");

	free(z);
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
	bool ok = ASSERT_EQ(chunk_intervals_encode(r, 3, &z, &zlen), 0, "encode") &&
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

TEST_MAIN(T(test_chunk_samples), T(test_chunk_samples_bound), T(test_chunk_points),
	  T(test_chunk_rollup), T(test_chunk_samples_mixed), T(test_chunk_intervals))
