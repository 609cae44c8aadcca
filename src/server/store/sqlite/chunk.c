/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sample chunks, point chunks and rollup rows: encoders beside their decoders (chunk.h), and
 * the blob helpers every codec file shares (chunk_blob.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "server/store/sqlite/chunk.h"
#include "server/store/sqlite/chunk_blob.h"

/*
 * zstd, or a 0 byte and the bytes as they are where that is shorter (small chunks: a zstd
 * frame costs ~10 bytes of header). A zstd frame starts with its magic number, never 0.
 */
int blob_pack(struct buf *b, uint8_t **ret, size_t *ret_len)
{
	uint8_t *z = NULL;
	size_t zlen = 0;
	int err = b->oom ? -ENOMEM : zblob_pack(b->p, b->len, CHUNK_ZLEVEL, &z, &zlen);

	if (!err && zlen > b->len) {
		free(z);
		z = malloc(b->len + 1);
		if (z) {
			z[0] = 0;
			memcpy(z + 1, b->p, b->len);
			zlen = b->len + 1;
		} else {
			err = -ENOMEM;
		}
	}
	if (!err) {
		*ret = z;
		*ret_len = zlen;
	}
	buf_done(b);
	return err;
}

/*
 * The format of a sample or interval chunk's payload: 1 (it starts with its count, never 0), or
 * that of the uvarint after a leading 0 (read past); -EINVAL for one this file does not write.
 */
int blob_format(struct rd *r)
{
	uint64_t v;

	if (r->p >= r->end || r->p[0])
		return 1;
	r->p++;
	v = rd_uvarint(r);
	return !r->bad && v >= 2 && v <= 4 ? (int)v : -EINVAL;
}

/* The bytes blob_pack() wrapped, appended to b; at most max. 0 or -EINVAL/-E2BIG/-ENOMEM. */
int blob_unpack(const void *blob, size_t len, size_t max, struct buf *b)
{
	const uint8_t *p = blob;

	if (len && !p[0]) {
		if (len - 1 > max)
			return -E2BIG;
		if (!buf_reserve(b, len))	/* b->p set even for an empty payload */
			return -ENOMEM;
		if (len > 1)
			buf_put(b, p + 1, len - 1);
		return b->oom ? -ENOMEM : 0;
	}
	return zblob_unpack(blob, len, max, b);
}

int blob_read(const void *blob, size_t len, struct buf *tmp, struct rd *r)
{
	int err;

	tmp->len = 0;
	err = blob_unpack(blob, len, CHUNK_MAX_BLOB, tmp);
	if (!err)
		*r = (struct rd){ tmp->p, tmp->p + tmp->len, false };
	return err;
}

/*
 * Format 3's byte-plane columns (chunk.h): count values, given as the uvarints in `in` (zigzag
 * where signed), written as uvarint w (the bytes the largest needs, 0-8), then w planes of
 * count bytes each, the values' lowest bytes first: durations of similar size then share
 * their high bytes, which zstd finds. Appends to out.
 */
void planes_put(const struct buf *in, size_t count, struct buf *out)
{
	const uint8_t *p = in->p ? in->p : (const uint8_t *)"";	/* an empty column */
	struct rd r = { p, p + in->len, false };
	uint64_t *v = malloc((count ? count : 1) * sizeof(*v)), max = 0;
	size_t w = 0;

	if (!v) {
		out->oom = true;
		return;
	}
	for (size_t i = 0; i < count; i++) {
		v[i] = rd_uvarint(&r);
		max |= v[i];
	}
	while (w < 8 && max >> (8 * w))
		w++;
	buf_uvarint(out, w);
	if (buf_reserve(out, w * count)) {
		for (size_t k = 0; k < w; k++)
			for (size_t i = 0; i < count; i++)
				out->p[out->len++] = (uint8_t)(v[i] >> (8 * k));
	}
	free(v);
}

/* Opens the byte-plane column of count values at r (moving r past it); r->bad if short. */
void pcol_open(struct pcol *c, struct rd *r, size_t count)
{
	uint64_t w = rd_uvarint(r);

	*c = (struct pcol){ r->p, count, 0, 0 };
	if (r->bad || w > 8 || (w && count > (size_t)(r->end - r->p) / w)) {
		r->bad = true;
		c->count = 0;
		return;
	}
	c->w = (size_t)w;
	r->p += c->w * count;
}

/* The column's next value (0 past its end, which sets *bad). */
uint64_t pcol_next(struct pcol *c, bool *bad)
{
	uint64_t v = 0;

	if (c->i >= c->count) {
		*bad = true;
		return 0;
	}
	for (size_t k = 0; k < c->w; k++)
		v |= (uint64_t)c->p[k * c->count + c->i] << (8 * k);
	c->i++;
	return v;
}

int64_t pcol_snext(struct pcol *c, bool *bad)
{
	return unzigzag(pcol_next(c, bad));
}

/* Grows *v (elements of size sz, capacity *cap) to hold n. 0 or -ENOMEM. */
int arr_grow(void *v, size_t *cap, size_t n, size_t sz)
{
	void *nv;

	if (n <= *cap)
		return 0;
	nv = realloc(*(void **)v, n * sz);
	if (!nv)
		return -ENOMEM;
	*(void **)v = nv;
	*cap = n;
	return 0;
}

/*
 * Sample chunk, format 2 (chunk.h): samples by (label set, time), so that a thread's samples
 * sit together: its stacks repeat (move-to-front coded) and its times step by the sampling
 * period (coded as whole periods and the remainder, in columns of their own).
 */
#define MTF_MAX	32	/* stacks remembered per label set */

struct sorder {
	const struct srow *r;
	size_t i;
};

static int cmp_sorder(const void *a, const void *b)
{
	const struct sorder *x = a, *y = b;

	if (x->r->labelset != y->r->labelset)
		return x->r->labelset < y->r->labelset ? -1 : 1;
	if (x->r->t != y->r->t)
		return x->r->t < y->r->t ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/* Move-to-front over a label set's recent stacks: s's 1-based position before it moved to the
 * front, or 0 when absent (then pushed in front, the oldest dropped past MTF_MAX). */
static size_t mtf_code(uint64_t *v, size_t *n, uint64_t s)
{
	size_t k;

	for (k = 0; k < *n && v[k] != s; k++)
		;
	if (k == *n) {
		if (*n < MTF_MAX)
			(*n)++;
		k = *n - 1;
		memmove(v + 1, v, k * sizeof(*v));
		v[0] = s;
		return 0;
	}
	memmove(v + 1, v, k * sizeof(*v));
	v[0] = s;
	return k + 1;
}

/*
 * Sample chunk literals (flag 32, schema 16): a batch numbers its new stacks in the order its
 * chunks list them, so a literal is mostly the largest so far plus one (a new stack), coded 0;
 * any other (a stack met before) as 1 + the zigzagged difference to the last such literal. Two
 * states, so that an old stack among new ones costs one jump, not a jump there and one back:
 * on the churning hour's store the stack columns 1.82 -> 1.50 B per CPU sample (zstd 19).
 */
#define LIT_NEXT_NEW 32u

static void lit_put(struct buf *b, uint64_t stack, uint64_t *max, uint64_t *prev)
{
	if (stack == *max + 1) {
		buf_uvarint(b, 0);
		*max = stack;
		return;
	}
	buf_uvarint(b, 1 + zigzag((int64_t)(stack - *prev)));
	*prev = stack;
	if (stack > *max)
		*max = stack;
}

/* The next literal lit_put() wrote; false where it cannot be one (the largest id overflows). */
static bool lit_get(struct rd *r, uint64_t *stack, uint64_t *max, uint64_t *prev)
{
	uint64_t code = rd_uvarint(r);

	if (!code) {
		if (*max == UINT64_MAX)
			return false;
		*stack = ++*max;
		return true;
	}
	*stack = *prev + (uint64_t)unzigzag(code - 1);
	*prev = *stack;
	if (*stack > *max)
		*max = *stack;
	return true;
}

/* The whole periods in d (rounded to the nearest). */
static uint64_t periods(uint64_t d, uint64_t p)
{
	uint64_t q = d / p;

	return d - q * p > p / 2 ? q + 1 : q;
}

/* Format 1 (time order, plain columns): where format 2 could not give the order back. */
static int samples_encode_v1(const struct srow *r, size_t n, uint64_t u, uint8_t **ret,
			     size_t *ret_len)
{
	struct buf b = { 0 };
	bool all_one = true, mixed = false;
	uint64_t prev = r[0].t - r[0].t % u;	/* from the least time, as format 2 */

	for (size_t i = 0; i < n; i++) {
		all_one &= r[i].value == 1;
		mixed |= r[i].labelset != r[0].labelset;
		prev = r[i].t - r[i].t % u < prev ? r[i].t - r[i].t % u : prev;
	}
	buf_uvarint(&b, n);
	buf_uvarint(&b, (all_one ? 1u : 0u) | (mixed ? 2u : 0u));
	for (size_t i = 0; i < n; i++) {	/* floored to u: format 3's precision */
		buf_uvarint(&b, r[i].t - r[i].t % u - prev);
		prev = r[i].t - r[i].t % u;
	}
	for (size_t i = 0; i < n && mixed; i++)
		buf_uvarint(&b, r[i].labelset);
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, r[i].stack);
	for (size_t i = 0; i < n && !all_one; i++)
		buf_svarint(&b, r[i].value);
	return blob_pack(&b, ret, ret_len);
}

/* Where a run of samples of one time in r (sorted by time) is not in label-set order, the
 * order decoding must put it in. Every tie in r is found from its own run: one list per run. */
struct tie {
	uint64_t ls;
	size_t i;
};

static int cmp_tie(const void *a, const void *b)
{
	const struct tie *x = a, *y = b;

	if (x->ls != y->ls)
		return x->ls < y->ls ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/*
 * The tie fixes of format 2 (after the values): uvarint count; each a run of equal times that
 * decoding's (time, label set) order does not give as r had it: uvarint start (the difference
 * to the run before's), length k, then for each of r's samples of the run in r's order its
 * position among the run as decoded (uvarint, a permutation of 0..k-1). 0 or -ENOMEM.
 */
static int ties_put(const struct srow *r, size_t n, uint64_t u, struct buf *b)
{
	struct buf runs = { 0 };
	struct tie *v = NULL;
	size_t cap = 0, nruns = 0, prev = 0, *pos = NULL;
	int err = 0;

	for (size_t a = 0, e; a < n && !err; a = e) {
		bool sorted = true;

		for (e = a + 1; e < n && r[e].t / u == r[a].t / u; e++)
			sorted &= r[e].labelset >= r[e - 1].labelset;
		if (sorted)
			continue;
		if (e - a > cap) {
			struct tie *nv = realloc(v, (e - a) * sizeof(*nv));
			size_t *np = nv ? realloc(pos, (e - a) * sizeof(*np)) : NULL;

			if (nv)
				v = nv;
			if (!np) {
				err = -ENOMEM;
				break;
			}
			pos = np;
			cap = e - a;
		}
		for (size_t i = a; i < e; i++)
			v[i - a] = (struct tie){ r[i].labelset, i - a };
		qsort(v, e - a, sizeof(*v), cmp_tie);
		buf_uvarint(&runs, a - prev);
		buf_uvarint(&runs, e - a);
		prev = a;
		nruns++;
		/* position of r's j-th in the decoded run: v inverted */
		for (size_t k = 0; k < e - a; k++)
			pos[v[k].i] = k;
		for (size_t j = 0; j < e - a; j++)
			buf_uvarint(&runs, pos[j]);
	}
	if (nruns) {
		buf_uvarint(b, nruns);
		buf_put(b, runs.p, runs.len);
	}
	if (runs.oom)
		err = -ENOMEM;
	buf_done(&runs);
	free(v);
	free(pos);
	return err;
}

int chunk_samples_encode(const struct srow *r, size_t n, uint64_t period_ns, uint64_t unit_ns,
			 uint8_t **ret, size_t *ret_len)
{
	struct buf b = { 0 }, ties = { 0 }, col[7] = { 0 };	/* col: first t, periods,
		* remainders, mtf, literals, values, values as gaps */
	struct sorder *o = malloc(n * sizeof(*o));
	uint64_t t_min = UINT64_MAX, mtf[MTF_MAX], prev_lit = 0, lit_max = 0;
	uint64_t u = unit_ns > 1 ? unit_ns : 1, smin = UINT64_MAX, smax = 0;
	uint64_t period = period_ns / u;	/* in units: format 3's times are t / u */
	size_t ngroups = 0, nmtf = 0;
	bool all_one = true, gaps, vunit = u > 1;	/* vunit: every value a whole number of u */
	bool next_new;				/* literals coded by lit_put() */

	/* Decoders give format 2's samples back in time order, ties by label set, and then put
	 * right the ties that came in another order (ties_put()); r out of time order: format 1 */
	for (size_t i = 1; i < n; i++) {
		if (r[i].t < r[i - 1].t) {
			free(o);
			return samples_encode_v1(r, n, u, ret, ret_len);
		}
	}
	if (!o)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		o[i] = (struct sorder){ &r[i], i };
		all_one &= r[i].value == 1;
		vunit &= r[i].value % (int64_t)u == 0;
		t_min = r[i].t < t_min ? r[i].t : t_min;
		smin = r[i].stack < smin ? r[i].stack : smin;
		smax = r[i].stack > smax ? r[i].stack : smax;
	}
	vunit &= !all_one;
	/* two literals 2^63 apart have no 1 + zigzag code: then the literals as before */
	next_new = smax - smin < (1ull << 63);
	qsort(o, n, sizeof(*o), cmp_sorder);
	for (size_t i = 0; i < n; i++) {
		const struct srow *x = o[i].r;
		int64_t v = vunit ? x->value / (int64_t)u : x->value;	/* schema 9: in units */
		size_t k;

		if (!i || x->labelset != o[i - 1].r->labelset) {
			ngroups++;
			nmtf = 0;
			buf_uvarint(&col[0], x->t / u - t_min / u);
			buf_svarint(&col[6], v);
		} else {
			uint64_t d = x->t / u - o[i - 1].r->t / u, q = period ? periods(d, period) : d;

			buf_uvarint(&col[1], q);
			if (period)
				buf_svarint(&col[2], (int64_t)(d - q * period));
			buf_svarint(&col[6], (int64_t)((vunit ? d : d * u) - (uint64_t)v));
		}
		buf_svarint(&col[5], v);
		k = mtf_code(mtf, &nmtf, x->stack);
		buf_uvarint(&col[3], k);
		if (!k && next_new) {
			lit_put(&col[4], x->stack, &lit_max, &prev_lit);
		} else if (!k) {
			buf_svarint(&col[4], (int64_t)(x->stack - prev_lit));
			prev_lit = x->stack;
		}
	}
	gaps = !all_one && col[6].len < col[5].len;
	if (ngroups > 1 && ties_put(r, n, u, &ties))
		b.oom = true;
	buf_uvarint(&b, 0);	/* format 2 or 3 (format 1 starts with n >= 1) */
	buf_uvarint(&b, u > 1 ? 3 : 2);
	if (u > 1)
		buf_uvarint(&b, u);
	buf_uvarint(&b, n);
	buf_uvarint(&b, (all_one ? 1u : 0u) | (ngroups > 1 ? 2u : 0u) | (gaps ? 4u : 0u) |
			(ties.len ? 8u : 0u) | (vunit ? 16u : 0u) | (next_new ? LIT_NEXT_NEW : 0u));
	buf_uvarint(&b, period);
	if (ngroups > 1) {
		uint64_t prev = 0;

		buf_uvarint(&b, ngroups);
		for (size_t i = 1, start = 0; i <= n; i++) {
			if (i < n && o[i].r->labelset == o[start].r->labelset)
				continue;
			buf_uvarint(&b, o[start].r->labelset - prev);
			buf_uvarint(&b, i - start);
			prev = o[start].r->labelset;
			start = i;
		}
	}
	for (int k = 0; k < 7; k++) {	/* an empty column has no bytes (p NULL) */
		bool vals = !all_one && k == (gaps ? 6 : 5);

		if (u > 1 && ((k == 2 && period) || vals))	/* format 3: byte planes */
			planes_put(&col[k], k == 2 ? n - ngroups : n, &b);
		else if (col[k].len && (k < 5 || vals))
			buf_put(&b, col[k].p, col[k].len);
	}
	if (ties.len)
		buf_put(&b, ties.p, ties.len);
	b.oom |= ties.oom;
	buf_done(&ties);
	for (int k = 0; k < 7; k++) {
		b.oom |= col[k].oom;
		buf_done(&col[k]);
	}
	free(o);
	return blob_pack(&b, ret, ret_len);
}

void chunk_done(struct chunk *c)
{
	buf_done(&c->raw);
	free(c->t);
	free(c->stack);
	free(c->value);
	free(c->labelset);
	free(c->perm);
	free(c->tmp);
	memset(c, 0, sizeof(*c));
}

/* Sizes c's arrays for c->n samples. 0 or -ENOMEM (c emptied). */
static int chunk_reserve(struct chunk *c)
{
	if (c->n <= c->cap)
		return 0;
	free(c->t);
	free(c->stack);
	free(c->value);
	free(c->labelset);
	c->t = malloc(c->n * sizeof(*c->t));
	c->stack = malloc(c->n * sizeof(*c->stack));
	c->value = malloc(c->n * sizeof(*c->value));
	c->labelset = malloc(c->n * sizeof(*c->labelset));
	c->cap = c->n;
	if (!c->t || !c->stack || !c->value || !c->labelset) {
		c->cap = 0;
		c->n = 0;
		return -ENOMEM;
	}
	return 0;
}

/* Format 1: in time order, every column plain. */
static int samples_decode_v1(struct chunk *c, struct rd *r, uint64_t t)
{
	uint64_t flags;

	c->n = rd_uvarint(r);
	flags = rd_uvarint(r);
	c->all_one = flags & 1;
	c->mixed = flags & 2;
	if (r->bad || c->n > c->raw.len || c->n > CHUNK_MAX)
		return -EINVAL;
	if (chunk_reserve(c))
		return -ENOMEM;
	for (size_t i = 0; i < c->n; i++) {
		t += rd_uvarint(r);
		c->t[i] = t;
	}
	for (size_t i = 0; i < c->n && c->mixed; i++)
		c->labelset[i] = rd_uvarint(r);
	for (size_t i = 0; i < c->n; i++)
		c->stack[i] = rd_uvarint(r);
	for (size_t i = 0; i < c->n; i++)
		c->value[i] = c->all_one ? 1 : rd_svarint(r);
	return r->bad ? -EINVAL : 0;
}

static int cmp_by_time(const void *a, const void *b, void *ctx)
{
	const uint64_t *t = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (t[x] != t[y])
		return t[x] < t[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Puts a decoded format-2 chunk (by label set, then time) in time order, ties by label set then
 * as written: the order format 1 had, so that every reader sees the samples as before. */
static int time_order(struct chunk *c)
{
	uint64_t *u[3] = { c->t, c->stack, c->labelset };

	if (c->n > c->capscratch) {
		free(c->perm);
		free(c->tmp);
		c->perm = malloc(c->n * sizeof(*c->perm));
		c->tmp = malloc(c->n * sizeof(*c->tmp));
		c->capscratch = c->perm && c->tmp ? c->n : 0;
		if (!c->capscratch)
			return -ENOMEM;
	}
	for (size_t i = 0; i < c->n; i++)
		c->perm[i] = (uint32_t)i;
	qsort_r(c->perm, c->n, sizeof(*c->perm), cmp_by_time, c->t);
	for (int k = 0; k < 3; k++) {
		for (size_t i = 0; i < c->n; i++)
			c->tmp[i] = u[k][c->perm[i]];
		memcpy(u[k], c->tmp, c->n * sizeof(*c->tmp));
	}
	for (size_t i = 0; i < c->n; i++)
		c->tmp[i] = (uint64_t)c->value[c->perm[i]];
	for (size_t i = 0; i < c->n; i++)
		c->value[i] = (int64_t)c->tmp[i];
	return 0;
}

/* Puts the runs of equal times that ties_put() lists in the order they came (after
 * time_order()). 0 or -EINVAL. */
static int ties_apply(struct chunk *c, struct rd *r)
{
	uint64_t nruns = rd_uvarint(r);
	size_t a = 0, k0 = 0;

	if (r->bad || !nruns || nruns > c->n)
		return -EINVAL;
	for (uint64_t x = 0; x < nruns; x++) {
		uint64_t d = rd_uvarint(r), k = rd_uvarint(r);
		uint64_t *u[3] = { c->t, c->stack, c->labelset };

		if (r->bad || (x && d < k0) || d > c->n - a || k < 2 || k > c->n - a - d)
			return -EINVAL;	/* runs apart, in order */
		a += d;
		k0 = k;
		memset(c->tmp, 0, k * sizeof(*c->tmp));
		for (size_t j = 0; j < k; j++) {
			uint64_t p = rd_uvarint(r);

			if (r->bad || p >= k || c->tmp[p])
				return -EINVAL;	/* not a permutation */
			c->tmp[p] = 1;
			c->perm[j] = (uint32_t)p;
		}
		for (int m = 0; m < 3; m++) {
			for (size_t j = 0; j < k; j++)
				c->tmp[j] = u[m][a + c->perm[j]];
			memcpy(u[m] + a, c->tmp, k * sizeof(*c->tmp));
		}
		for (size_t j = 0; j < k; j++)
			c->tmp[j] = (uint64_t)c->value[a + c->perm[j]];
		for (size_t j = 0; j < k; j++)
			c->value[a + j] = (int64_t)c->tmp[j];
	}
	return 0;
}

/* Format 2 (chunk_samples_encode()). A group starts where the label set changes (their ids
 * strictly ascend); d, a sample's time less the one before in its group, waits in value[]
 * until the values are read. */
static int samples_decode_v2(struct chunk *c, struct rd *r, uint64_t t_min, uint64_t u,
			     bool planes)
{
	uint64_t flags, period, ngroups = 1, ls = 0, mtf[MTF_MAX], lit = 0, lit_max = 0;
	size_t nmtf = 0, nlit = 0;
	struct pcol pc = { 0 };
	struct rd lr;
	int err;

	t_min -= t_min % u;	/* format 3: times in whole units from there */
	c->n = rd_uvarint(r);
	flags = rd_uvarint(r);
	period = rd_uvarint(r);
	c->all_one = flags & 1;
	c->mixed = flags & 2;
	if (c->mixed)
		ngroups = rd_uvarint(r);
	if (r->bad || !c->n || c->n > c->raw.len || c->n > CHUNK_MAX ||
	    (flags & ~(planes ? 31u | LIT_NEXT_NEW : 15u | LIT_NEXT_NEW)) || !ngroups ||
	    ngroups > c->n ||
	    (c->mixed && ngroups < 2) || (c->all_one && (flags & 20)) ||
	    ((flags & 8) && !c->mixed))
		return -EINVAL;
	if (chunk_reserve(c))
		return -ENOMEM;
	for (size_t i = 0, k = 0; k < ngroups; k++) {
		uint64_t d = c->mixed ? rd_uvarint(r) : 0, cnt = c->mixed ? rd_uvarint(r) : c->n;

		if (r->bad || (k && !d) || d > UINT64_MAX - ls || !cnt || cnt > c->n - i ||
		    (k + 1 == ngroups && i + cnt != c->n))
			return -EINVAL;
		ls += d;
		for (uint64_t j = 0; j < cnt; j++)
			c->labelset[i + j] = ls;
		i += cnt;
	}
#define FIRST(i) (!(i) || c->labelset[i] != c->labelset[(i) - 1])
	for (size_t i = 0; i < c->n; i++)
		if (FIRST(i))
			c->t[i] = t_min + rd_uvarint(r) * u;
	for (size_t i = 0; i < c->n; i++)
		if (!FIRST(i))
			c->value[i] = (int64_t)(rd_uvarint(r) * (period ? period : 1));
	if (planes && period)
		pcol_open(&pc, r, c->n - ngroups);
	for (size_t i = 0; i < c->n; i++) {
		if (FIRST(i))
			continue;
		if (period)	/* modulo 2^64, as written */
			c->value[i] = (int64_t)((uint64_t)c->value[i] +
						(uint64_t)(planes ? pcol_snext(&pc, &r->bad) :
								    rd_svarint(r)));
		c->value[i] = (int64_t)((uint64_t)c->value[i] * u);	/* ns from here on */
		c->t[i] = c->t[i - 1] + (uint64_t)c->value[i];
	}
	/* stacks: move-to-front indexes, then the literals where they are 0 */
	for (size_t i = 0; i < c->n; i++) {
		c->stack[i] = rd_uvarint(r);
		if (c->stack[i] > MTF_MAX)
			return -EINVAL;
		nlit += !c->stack[i];
	}
	lr = *r;
	for (size_t i = 0; i < nlit; i++)
		rd_svarint(r);
	if (r->bad)
		return -EINVAL;
	for (size_t i = 0; i < c->n; i++) {
		uint64_t k = c->stack[i];

		if (FIRST(i))
			nmtf = 0;
		if (!k && (flags & LIT_NEXT_NEW)) {
			if (!lit_get(&lr, &c->stack[i], &lit_max, &lit))
				return -EINVAL;
		} else if (!k) {
			lit += (uint64_t)rd_svarint(&lr);
			c->stack[i] = lit;
		} else if (k > nmtf) {
			return -EINVAL;
		} else {
			c->stack[i] = mtf[k - 1];
		}
		mtf_code(mtf, &nmtf, c->stack[i]);
	}
	if (planes && !c->all_one)
		pcol_open(&pc, r, c->n);
	for (size_t i = 0; i < c->n; i++) {
		int64_t v = c->all_one ? 1 : planes ? pcol_snext(&pc, &r->bad) : rd_svarint(r);

		if (flags & 16)	/* values in units (schema 9), modulo 2^64 as written */
			v = (int64_t)((uint64_t)v * u);
		if (c->all_one || !(flags & 4) || FIRST(i))
			c->value[i] = v;
		else	/* the time since the sample before, less this */
			c->value[i] = (int64_t)((uint64_t)c->value[i] - (uint64_t)v);
	}
#undef FIRST
	if (!c->mixed)
		memset(c->labelset, 0, c->n * sizeof(*c->labelset));
	if (r->bad)
		return -EINVAL;
	if (!c->mixed || c->any_order)
		return 0;
	err = time_order(c);
	return !err && (flags & 8) ? ties_apply(c, r) : err;
}

int chunk_samples_decode(struct chunk *c, const void *blob, size_t len, uint64_t t_min)
{
	struct rd r;
	uint64_t u;
	int err, fmt;

	c->n = 0;
	c->raw.len = 0;
	err = blob_unpack(blob, len, CHUNK_MAX_BLOB, &c->raw);
	if (err)
		return err;
	r = (struct rd){ c->raw.p, c->raw.p + c->raw.len, false };
	fmt = blob_format(&r);
	switch (fmt) {
	case 1:
		err = samples_decode_v1(c, &r, t_min);
		break;
	case 2:
		err = samples_decode_v2(c, &r, t_min, 1, false);
		break;
	case 3:	/* format 2 with times in units of u ns, some columns in byte planes */
		u = rd_uvarint(&r);
		err = r.bad || !u || u > UNIT_MAX ? -EINVAL :
						     samples_decode_v2(c, &r, t_min, u, true);
		break;
	default:
		err = -EINVAL;
	}
	if (err)
		c->n = 0;
	return err;
}

int chunk_points_encode(const struct prow *r, size_t n, uint8_t **ret, size_t *ret_len)
{
	struct buf b = { 0 };
	uint64_t prev = r[0].t;

	buf_uvarint(&b, n);
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, r[i].t - prev);
		prev = r[i].t;
	}
	for (size_t i = 0; i < n; i++)
		buf_put(&b, &r[i].v, sizeof(double));
	return blob_pack(&b, ret, ret_len);
}

int chunk_points_decode(const void *blob, size_t len, uint64_t t_min, struct buf *tmp,
			int (*cb)(void *ctx, uint64_t t, double v), void *ctx)
{
	const uint8_t *vals;
	struct rd r, tr;
	uint64_t n, t = t_min;
	int err;

	err = blob_read(blob, len, tmp, &r);
	if (err)
		return err;
	n = rd_uvarint(&r);
	if (r.bad || n > tmp->len || n > CHUNK_MAX)
		return -EINVAL;
	/* Times first, then the doubles: find where the doubles start. */
	tr = r;
	for (uint64_t i = 0; i < n; i++)
		rd_uvarint(&tr);
	vals = tr.p;
	if (tr.bad || (size_t)(r.end - vals) < n * sizeof(double))
		return -EINVAL;
	for (uint64_t i = 0; i < n; i++) {
		double v;

		t += rd_uvarint(&r);
		memcpy(&v, vals + i * sizeof(double), sizeof(v));
		err = cb(ctx, t, v);
		if (err)
			return err;
	}
	return 0;
}

int rollup_encode(const uint64_t *ls, const uint64_t *stack, const int64_t *sum,
		  const uint64_t *count, const size_t *order, size_t n, uint8_t **ret,
		  size_t *ret_len)
{
	struct buf b = { 0 };
	uint64_t prev = 0, nls = 0;
	bool counts = false;	/* some count is not its sum (CPU samples: every one is) */

	for (size_t i = 0; i < n; i++) {
		counts |= (uint64_t)sum[i] != count[i];
		nls += !i || ls[order[i]] != ls[order[i - 1]];
	}
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 0);
	buf_uvarint(&b, 3);
	buf_uvarint(&b, counts ? ROLLUP_COUNTS : 0);
	buf_uvarint(&b, nls);
	for (size_t i = 0; i < n; i++) {	/* label sets: deltas */
		if (i && ls[order[i]] == ls[order[i - 1]])
			continue;
		buf_uvarint(&b, ls[order[i]] - prev);
		prev = ls[order[i]];
	}
	for (size_t i = 0, run = 0; i < n; i++) {	/* ...and their entries */
		run++;
		if (i + 1 == n || ls[order[i + 1]] != ls[order[i]]) {
			buf_uvarint(&b, run);
			run = 0;
		}
	}
	for (size_t i = 0; i < n; i++) {	/* stacks: deltas within a label set */
		bool first = !i || ls[order[i]] != ls[order[i - 1]];

		buf_uvarint(&b, stack[order[i]] - (first ? 0 : stack[order[i - 1]]));
	}
	for (size_t i = 0; i < n; i++)
		buf_svarint(&b, sum[order[i]]);
	for (size_t i = 0; counts && i < n; i++)
		buf_uvarint(&b, count[order[i]]);
	return blob_pack(&b, ret, ret_len);
}

int rollup_decode(const void *blob, size_t len, struct buf *tmp,
		  int (*cb)(void *ctx, uint64_t ls, uint64_t stack, int64_t sum, uint64_t count),
		  void *ctx)
{
	uint64_t flags, nls, n = 0, ls = 0, stack = 0, left = 0;
	struct rd r, lsr, runs, st, sm, ct;
	int err;

	err = blob_read(blob, len, tmp, &r);
	if (err)
		return err;
	if (rd_uvarint(&r) != 0 || rd_uvarint(&r) != 0 || rd_uvarint(&r) != 3)
		return -EINVAL;
	flags = rd_uvarint(&r);
	nls = rd_uvarint(&r);
	if (r.bad || (flags & ~(uint64_t)ROLLUP_COUNTS) || nls > (size_t)(r.end - r.p))
		return -EINVAL;
	/* every column's start, each read through once: all of it checked before cb */
	lsr = r;
	for (uint64_t i = 0; i < nls; i++)
		rd_uvarint(&r);
	runs = r;
	for (uint64_t i = 0; i < nls && !r.bad; i++) {
		uint64_t k = rd_uvarint(&r);

		if (!k || k > (size_t)(r.end - r.p))
			return -EINVAL;
		n += k;
	}
	if (r.bad || n > (size_t)(r.end - r.p))
		return -EINVAL;
	st = r;
	for (uint64_t i = 0; i < n; i++)
		rd_uvarint(&r);
	sm = r;
	for (uint64_t i = 0; i < n; i++)
		rd_svarint(&r);
	ct = r;
	for (uint64_t i = 0; (flags & ROLLUP_COUNTS) && i < n; i++)
		rd_uvarint(&r);
	if (r.bad || r.p != r.end)
		return -EINVAL;
	for (uint64_t i = 0; i < n; i++) {
		int64_t sum;

		if (!left) {	/* the next label set */
			ls += rd_uvarint(&lsr);
			left = rd_uvarint(&runs);
			stack = 0;
		}
		left--;
		stack += rd_uvarint(&st);
		sum = rd_svarint(&sm);
		err = cb(ctx, ls, stack, sum, (flags & ROLLUP_COUNTS) ? rd_uvarint(&ct) : (uint64_t)sum);
		if (err)
			return err;
	}
	return 0;
}

/* Format 2 after its leading 0: uvarint n, then columns of n: stack deltas, sums; each count is
 * its sum. All of it checked before cb. */
static int rollup_decode_v2(struct rd *r, int (*cb)(void *ctx, uint64_t stack, int64_t sum,
						    uint64_t count), void *ctx)
{
	uint64_t n = rd_uvarint(r), stack = 0;
	struct rd st, sm;
	int err;

	if (r->bad || n > (size_t)(r->end - r->p))
		return -EINVAL;
	st = *r;	/* the columns' starts, each read through once */
	for (uint64_t i = 0; i < n; i++)
		rd_uvarint(r);
	sm = *r;
	for (uint64_t i = 0; i < n; i++)
		rd_svarint(r);
	if (r->bad)
		return -EINVAL;
	for (uint64_t i = 0; i < n; i++) {
		int64_t sum;

		stack += rd_uvarint(&st);
		sum = rd_svarint(&sm);
		err = cb(ctx, stack, sum, (uint64_t)sum);
		if (err)
			return err;
	}
	return 0;
}

int rollup_decode_v10(const void *blob, size_t len, struct buf *tmp,
		      int (*cb)(void *ctx, uint64_t stack, int64_t sum, uint64_t count), void *ctx)
{
	uint64_t n, stack = 0;
	struct rd r;
	int err;

	err = blob_read(blob, len, tmp, &r);
	if (err)
		return err;
	n = rd_uvarint(&r);
	if (!n && r.p < r.end)
		return rollup_decode_v2(&r, cb, ctx);
	for (uint64_t i = 0; i < n && !r.bad; i++) {
		int64_t sum;
		uint64_t cnt;

		stack += rd_uvarint(&r);
		sum = rd_svarint(&r);
		cnt = rd_uvarint(&r);
		if (r.bad)
			break;
		err = cb(ctx, stack, sum, cnt);
		if (err)
			return err;
	}
	return r.bad ? -EINVAL : 0;
}
