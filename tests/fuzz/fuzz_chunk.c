/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the SQLite store's blob decoders (src/server/store/sqlite/chunk.c). The
 * first byte picks the format (bits 0-1: samples, points, rollup) and whether the rest is the
 * stored zstd blob (bit 2 clear) or the payload before compression (bit 2 set, packed here, so
 * the fuzzer reaches the varint layer directly). Whatever decodes is encoded again and must
 * decode to the same values. Built by mk/server.mk, run by tests/integration/test_server_fuzz.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "server/store/sqlite/chunk.h"

#define T_MIN 1700000000000000000ULL

struct entries {
	uint64_t *a;
	int64_t *b;
	uint64_t *c;
	size_t n, cap;
};

static int entries_add(struct entries *e, uint64_t a, int64_t b, uint64_t c)
{
	if (e->n == e->cap) {
		size_t ncap = e->cap ? e->cap * 2 : 64;
		uint64_t *na = realloc(e->a, ncap * sizeof(*na));
		int64_t *nb;
		uint64_t *nc;

		if (!na)
			return -1;
		e->a = na;
		nb = realloc(e->b, ncap * sizeof(*nb));
		if (!nb)
			return -1;
		e->b = nb;
		nc = realloc(e->c, ncap * sizeof(*nc));
		if (!nc)
			return -1;
		e->c = nc;
		e->cap = ncap;
	}
	e->a[e->n] = a;
	e->b[e->n] = b;
	e->c[e->n] = c;
	e->n++;
	return 0;
}

static void entries_done(struct entries *e)
{
	free(e->a);
	free(e->b);
	free(e->c);
	memset(e, 0, sizeof(*e));
}

static int on_point(void *ctx, uint64_t t, double v)
{
	int64_t bits;

	memcpy(&bits, &v, sizeof(bits));	/* compare bit patterns: NaN round-trips too */
	return entries_add(ctx, t, bits, 0);
}

static int on_rollup(void *ctx, uint64_t stack, int64_t sum, uint64_t count)
{
	return entries_add(ctx, stack, sum, count);
}

static int same(const struct entries *x, const struct entries *y, bool third)
{
	if (x->n != y->n)
		return 0;
	for (size_t i = 0; i < x->n; i++)
		if (x->a[i] != y->a[i] || x->b[i] != y->b[i] || (third && x->c[i] != y->c[i]))
			return 0;
	return 1;
}

static void samples(const uint8_t *blob, size_t len)
{
	struct chunk c = { 0 }, d = { 0 };
	struct srow *r = NULL;
	uint8_t *z = NULL;
	size_t zlen;

	if (chunk_samples_decode(&c, blob, len, T_MIN) || !c.n)
		goto out;
	r = malloc(c.n * sizeof(*r));
	if (!r)
		goto out;
	for (size_t i = 0; i < c.n; i++)
		r[i] = (struct srow){ c.t[i], c.stack[i], c.value[i] };
	if (chunk_samples_encode(r, c.n, &z, &zlen))
		goto out;
	if (chunk_samples_decode(&d, z, zlen, c.t[0]) || d.n != c.n)
		abort();
	for (size_t i = 0; i < c.n; i++)
		if (d.t[i] != c.t[i] || d.stack[i] != c.stack[i] || d.value[i] != c.value[i])
			abort();
out:
	free(z);
	free(r);
	chunk_done(&c);
	chunk_done(&d);
}

static void points(const uint8_t *blob, size_t len)
{
	struct entries e = { 0 }, f = { 0 };
	struct buf tmp = { 0 };
	struct prow *r = NULL;
	uint8_t *z = NULL;
	size_t zlen;

	if (chunk_points_decode(blob, len, T_MIN, &tmp, on_point, &e) || !e.n)
		goto out;
	r = malloc(e.n * sizeof(*r));
	if (!r)
		goto out;
	for (size_t i = 0; i < e.n; i++) {
		r[i].t = e.a[i];
		memcpy(&r[i].v, &e.b[i], sizeof(double));
	}
	if (chunk_points_encode(r, e.n, &z, &zlen))
		goto out;
	if (chunk_points_decode(z, zlen, r[0].t, &tmp, on_point, &f) || !same(&e, &f, false))
		abort();
out:
	free(z);
	free(r);
	buf_done(&tmp);
	entries_done(&e);
	entries_done(&f);
}

static void rollup(const uint8_t *blob, size_t len)
{
	struct entries e = { 0 }, f = { 0 };
	struct buf tmp = { 0 };
	size_t *order = NULL;
	uint8_t *z = NULL;
	size_t zlen;

	if (rollup_decode(blob, len, &tmp, on_rollup, &e))
		goto out;
	order = malloc((e.n ? e.n : 1) * sizeof(*order));
	if (!order)
		goto out;
	for (size_t i = 0; i < e.n; i++)
		order[i] = i;
	if (rollup_encode(e.a, e.b, e.c, order, e.n, &z, &zlen))
		goto out;
	if (rollup_decode(z, zlen, &tmp, on_rollup, &f) || !same(&e, &f, true))
		abort();
out:
	free(z);
	free(order);
	buf_done(&tmp);
	entries_done(&e);
	entries_done(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *packed = NULL;
	size_t plen = 0;
	int mode;

	if (!size)
		return 0;
	mode = data[0];
	data++;
	size--;
	if (mode & 4) {
		if (zblob_pack(data, size, 1, &packed, &plen))
			return 0;
		data = packed;
		size = plen;
	}
	switch (mode & 3) {
	case 0:
		samples(data, size);
		break;
	case 1:
		points(data, size);
		break;
	default:
		rollup(data, size);
		break;
	}
	free(packed);
	return 0;
}
