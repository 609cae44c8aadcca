/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the SQLite store's blob decoders (chunk.c, ivchunk.c, ivchunk_decode.c and
 * blocks.c in src/server/store/sqlite/). The first byte picks the format (bits 0-1: samples,
 * points, rollup, then by bits 3-4: interval chunks, stack location lists, location blocks,
 * stack blocks) and whether the rest is the stored blob (bit 2 clear) or the payload before
 * compression (bit 2 set, packed here, so the fuzzer reaches the varint layer directly). Whatever decodes is encoded again and must decode
 * to the same values. Built by mk/server.mk, run by tests/integration/test_server_fuzz.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/store/sqlite/chunk.h"
/* The interval decoder, until mk/server.mk's fuzz_chunk rule lists ivchunk_decode.c beside
 * ivchunk.c (then drop this line). */
#include "server/store/sqlite/ivchunk_decode.c"

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

/* A rollup row's entries: (stack, sum, count) in e, their label sets in ls.a. */
struct rentries {
	struct entries e, ls;
};

static int on_rollup(void *ctx, uint64_t ls, uint64_t stack, int64_t sum, uint64_t count)
{
	struct rentries *r = ctx;

	return entries_add(&r->ls, ls, 0, 0) ? -1 : entries_add(&r->e, stack, sum, count);
}

static int on_rollup_v10(void *ctx, uint64_t stack, int64_t sum, uint64_t count)
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

/* Time order, ties by label set descending (so that format 2 has ties to put right). */
static int cmp_srow(const void *a, const void *b)
{
	const struct srow *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	if (x->labelset != y->labelset)
		return x->labelset > y->labelset ? -1 : 1;
	if (x->stack != y->stack)
		return x->stack < y->stack ? -1 : 1;
	return x->value < y->value ? -1 : x->value > y->value;
}

/* Whatever decodes, sorted by time, is encoded again (with and without a sampling period) and
 * must come back in that order. */
static void samples(const uint8_t *blob, size_t len)
{
	struct chunk c = { 0 }, d = { 0 };
	struct srow *r = NULL;
	uint8_t *z = NULL;
	size_t zlen;
	uint64_t t_min = UINT64_MAX;

	if (chunk_samples_decode(&c, blob, len, T_MIN) || !c.n)
		goto out;
	r = malloc(c.n * sizeof(*r));
	if (!r)
		goto out;
	for (size_t i = 0; i < c.n; i++) {
		r[i] = (struct srow){ c.t[i], c.stack[i], c.value[i], c.mixed ? c.labelset[i] : 0 };
		t_min = c.t[i] < t_min ? c.t[i] : t_min;
	}
	qsort(r, c.n, sizeof(*r), cmp_srow);
	/* format 2 (ns), and format 3 (µs: times floored, ties kept in r's order) */
	for (uint64_t k = 0; k < 4; k++) {
		uint64_t period = k % 2 ? 10101010 : 0, u = k < 2 ? 1 : 1000;

		free(z);
		z = NULL;
		if (chunk_samples_encode(r, c.n, period, u, &z, &zlen))
			goto out;
		if (chunk_samples_decode(&d, z, zlen, t_min) || d.n != c.n)
			abort();
		/* one label set in the end is the chunk row's (here r[0]'s) */
		for (size_t i = 0; i < c.n; i++)
			if (d.t[i] != r[i].t - r[i].t % u || d.stack[i] != r[i].stack ||
			    d.value[i] != r[i].value ||
			    (d.mixed ? d.labelset[i] : r[0].labelset) != r[i].labelset)
				abort();
	}
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
	struct rentries e = { 0 }, f = { 0 };
	struct entries old = { 0 };
	struct buf tmp = { 0 };
	size_t *order = NULL;
	uint8_t *z = NULL;
	size_t zlen;

	rollup_decode_v10(blob, len, &tmp, on_rollup_v10, &old);	/* the migration's reader */
	if (rollup_decode(blob, len, &tmp, on_rollup, &e))
		goto out;
	order = malloc((e.e.n ? e.e.n : 1) * sizeof(*order));
	if (!order)
		goto out;
	for (size_t i = 0; i < e.e.n; i++)
		order[i] = i;
	if (rollup_encode(e.ls.a, e.e.a, e.e.b, e.e.c, order, e.e.n, &z, &zlen))
		goto out;
	if (rollup_decode(z, zlen, &tmp, on_rollup, &f) || !same(&e.e, &f.e, true) ||
	    !same(&e.ls, &f.ls, false))
		abort();
out:
	free(z);
	free(order);
	buf_done(&tmp);
	entries_done(&e.e);
	entries_done(&e.ls);
	entries_done(&f.e);
	entries_done(&f.ls);
	entries_done(&old);
}

/* A decoded interval row as text, for comparing two decodes as multisets of rows. */
static char *row_text(const struct ichunk *c, size_t i)
{
	struct buf b = { 0 };

	buf_printf(&b, "%llu %llu %llu %llu", (unsigned long long)c->labelset[i],
		   (unsigned long long)c->start[i], (unsigned long long)c->end[i],
		   (unsigned long long)c->seq[i]);
	for (size_t k = 0; k < 2 * c->nattrs[i]; k++) {
		buf_put(&b, "\x1f", 1);
		buf_puts(&b, c->attrs[2 * c->attr0[i] + k]);
	}
	buf_put(&b, "", 1);
	return b.oom ? NULL : (char *)b.p;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The rows of c as sorted text lines; NULL on ENOMEM. */
static char **rows_text(const struct ichunk *c)
{
	char **v = calloc(c->n ? c->n : 1, sizeof(*v));

	for (size_t i = 0; v && i < c->n; i++)
		if (!(v[i] = row_text(c, i)))
			abort();
	if (v)
		qsort(v, c->n, sizeof(*v), cmp_str);
	return v;
}

/* c's rows encoded in unit u (every seq free or none) and decoded into d; false when encoding
 * failed (ENOMEM). */
static bool iv_roundtrip(const struct ichunk *c, uint64_t u, bool seq_free, struct ichunk *d)
{
	struct irow *r = malloc(c->n * sizeof(*r));
	uint64_t t_min = UINT64_MAX;
	uint8_t *z = NULL;
	size_t zlen;
	bool ok;

	if (!r)
		return false;
	for (size_t i = 0; i < c->n; i++) {
		r[i] = (struct irow){ c->seq[i], c->labelset[i], c->start[i], c->end[i],
				      c->attrs + 2 * c->attr0[i], c->nattrs[i], seq_free };
		if (c->start[i] < t_min)
			t_min = c->start[i];
	}
	ok = !chunk_intervals_encode(r, c->n, u, &z, &zlen);
	if (ok && (chunk_intervals_decode(d, z, zlen, t_min - t_min % u) || d->n != c->n))
		abort();
	free(z);
	free(r);
	return ok;
}

/* The rows of c and d the same (as sorted text)? */
static bool same_rows(const struct ichunk *c, const struct ichunk *d)
{
	char **x = rows_text(c), **y = rows_text(d);
	bool same = true;

	for (size_t i = 0; x && y && i < c->n; i++)
		same &= !strcmp(x[i], y[i]);
	for (size_t i = 0; x && i < c->n; i++)
		free(x[i]);
	for (size_t i = 0; y && i < c->n; i++)
		free(y[i]);
	free(x);
	free(y);
	return same;
}

/* Format 4 gives the rows back as they are with every seq kept; with seqs free (a tie group's
 * order only) once decoded, kept or free, and at µs once floored, it stays as it is. */
static void intervals(const uint8_t *blob, size_t len)
{
	struct ichunk c = { 0 }, d = { 0 }, e = { 0 };

	if (chunk_intervals_decode(&c, blob, len, T_MIN) || !c.n)
		goto out;
	if (iv_roundtrip(&c, 1, false, &d) && !same_rows(&c, &d))
		abort();
	if (iv_roundtrip(&c, 1, true, &d) && iv_roundtrip(&d, 1, false, &e) && !same_rows(&d, &e))
		abort();
	if (iv_roundtrip(&c, 1000, true, &d) && iv_roundtrip(&d, 1000, true, &e) &&
	    !same_rows(&d, &e))
		abort();
out:
	ichunk_done(&c);
	ichunk_done(&d);
	ichunk_done(&e);
}

static void stack_locs(const uint8_t *blob, size_t len)
{
	uint64_t a[1024], b[1024];
	size_t na = 0, nb = 0;
	struct buf e = { 0 };

	if (stack_locs_decode(blob, len, a, 1024, &na))
		return;
	stack_locs_encode(a, na, &e);
	if (e.oom)
		abort();
	if (stack_locs_decode(e.p, e.len, b, 1024, &nb) || na != nb ||
	    memcmp(a, b, na * sizeof(*a)))
		abort();
	buf_done(&e);
}

/* A dictionary for format 2 (schema 10): string id k is "s<k>", ids above 1000 unknown. */
static const char *fuzz_str(void *ctx, uint64_t sid)
{
	static char v[32];

	(void)ctx;
	if (sid > 1000)
		return NULL;
	snprintf(v, sizeof(v), "s%llu", (unsigned long long)sid);
	return v;
}

static void loc_block(const uint8_t *blob, size_t len)
{
	struct lblock b = { 0 }, c = { 0 };
	uint8_t *z = NULL;
	size_t zlen;

	if (loc_block_decode(&b, blob, len, fuzz_str, NULL))
		goto out;
	for (size_t i = 0; i < b.n; i++)
		if (loc_block_find(&b, b.r[i].id) != &b.r[i])
			abort();
	if (loc_block_encode(b.r, b.n, b.dict, &z, &zlen))
		goto out;
	if (loc_block_decode(&c, z, zlen, fuzz_str, NULL) || c.n != b.n || c.dict != b.dict)
		abort();
	for (size_t i = 0; i < b.n; i++) {
		if (c.r[i].id != b.r[i].id || c.r[i].line != b.r[i].line ||
		    c.r[i].address != b.r[i].address || c.r[i].flags != b.r[i].flags)
			abort();
		for (int k = 0; k < 4; k++)
			if (strcmp(c.r[i].str[k], b.r[i].str[k]))
				abort();
	}
out:
	free(z);
	lblock_done(&b);
	lblock_done(&c);
}

static void stack_block(const uint8_t *blob, size_t len)
{
	struct sblock b = { 0 }, c = { 0 };
	uint8_t *z = NULL;
	size_t zlen;

	if (stack_block_decode(&b, blob, len))
		goto out;
	for (size_t i = 0; i < b.n; i++)
		if (stack_block_find(&b, b.id[i]) != (ptrdiff_t)i)
			abort();
	if (stack_block_encode(b.id, b.locs, b.len, b.n, &z, &zlen))
		goto out;
	if (stack_block_decode(&c, z, zlen) || c.n != b.n)
		abort();
	for (size_t i = 0; i < b.n; i++)
		if (c.id[i] != b.id[i] || c.len[i] != b.len[i] ||
		    (b.len[i] && memcmp(c.locs[i], b.locs[i], b.len[i])))
			abort();
out:
	free(z);
	sblock_done(&b);
	sblock_done(&c);
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
	case 2:
		rollup(data, size);
		break;
	default:
		switch ((mode >> 3) & 3) {
		case 0:
			intervals(data, size);
			break;
		case 1:
			stack_locs(data, size);
			break;
		case 2:
			loc_block(data, size);
			break;
		default:
			stack_block(data, size);
			break;
		}
		break;
	}
	free(packed);
	return 0;
}
