/* SPDX-License-Identifier: Apache-2.0 */
/* Sample chunks, point chunks and rollup rows: encoders beside their decoders (chunk.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/store/sqlite/chunk.h"

/*
 * zstd, or a 0 byte and the bytes as they are where that is shorter (small chunks: a zstd
 * frame costs ~10 bytes of header). A zstd frame starts with its magic number, never 0.
 */
static int pack(struct buf *b, uint8_t **ret, size_t *ret_len)
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

/* The bytes pack() wrapped, appended to b; at most max. 0 or -EINVAL/-E2BIG/-ENOMEM. */
static int unpack(const void *blob, size_t len, size_t max, struct buf *b)
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

int chunk_samples_encode(const struct srow *r, size_t n, uint8_t **ret, size_t *ret_len)
{
	struct buf b = { 0 };
	bool all_one = true;
	uint64_t prev = r[0].t;

	bool mixed = false;

	for (size_t i = 0; i < n; i++) {
		all_one &= r[i].value == 1;
		mixed |= r[i].labelset != r[0].labelset;
	}
	buf_uvarint(&b, n);
	buf_uvarint(&b, (all_one ? 1u : 0u) | (mixed ? 2u : 0u));
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, r[i].t - prev);
		prev = r[i].t;
	}
	for (size_t i = 0; i < n && mixed; i++)
		buf_uvarint(&b, r[i].labelset);
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, r[i].stack);
	for (size_t i = 0; i < n && !all_one; i++)
		buf_svarint(&b, r[i].value);
	return pack(&b, ret, ret_len);
}

void chunk_done(struct chunk *c)
{
	buf_done(&c->raw);
	free(c->t);
	free(c->stack);
	free(c->value);
	free(c->labelset);
	memset(c, 0, sizeof(*c));
}

int chunk_samples_decode(struct chunk *c, const void *blob, size_t len, uint64_t t_min)
{
	struct rd r;
	uint64_t t = t_min;
	int err;

	c->n = 0;
	c->raw.len = 0;
	err = unpack(blob, len, CHUNK_MAX_BLOB, &c->raw);
	if (err)
		return err;
	r = (struct rd){ c->raw.p, c->raw.p + c->raw.len, false };
	{
		uint64_t flags;

		c->n = rd_uvarint(&r);
		flags = rd_uvarint(&r);
		c->all_one = flags & 1;
		c->mixed = flags & 2;
	}
	if (r.bad || c->n > c->raw.len || c->n > CHUNK_MAX) {
		c->n = 0;
		return -EINVAL;
	}
	if (c->n > c->cap) {
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
	}
	for (size_t i = 0; i < c->n; i++) {
		t += rd_uvarint(&r);
		c->t[i] = t;
	}
	for (size_t i = 0; i < c->n && c->mixed; i++)
		c->labelset[i] = rd_uvarint(&r);
	for (size_t i = 0; i < c->n; i++)
		c->stack[i] = rd_uvarint(&r);
	for (size_t i = 0; i < c->n; i++)
		c->value[i] = c->all_one ? 1 : rd_svarint(&r);
	if (r.bad) {
		c->n = 0;
		return -EINVAL;
	}
	return 0;
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
	return pack(&b, ret, ret_len);
}

int chunk_points_decode(const void *blob, size_t len, uint64_t t_min, struct buf *tmp,
			int (*cb)(void *ctx, uint64_t t, double v), void *ctx)
{
	const uint8_t *vals;
	struct rd r, tr;
	uint64_t n, t = t_min;
	int err;

	tmp->len = 0;
	err = unpack(blob, len, CHUNK_MAX_BLOB, tmp);
	if (err)
		return err;
	r = (struct rd){ tmp->p, tmp->p + tmp->len, false };
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

int rollup_encode(const uint64_t *stack, const int64_t *sum, const uint64_t *count,
		  const size_t *order, size_t n, uint8_t **ret, size_t *ret_len)
{
	struct buf b = { 0 };
	uint64_t prev = 0;

	buf_uvarint(&b, n);
	for (size_t i = 0; i < n; i++) {
		size_t k = order[i];

		buf_uvarint(&b, stack[k] - prev);
		prev = stack[k];
		buf_svarint(&b, sum[k]);
		buf_uvarint(&b, count[k]);
	}
	return pack(&b, ret, ret_len);
}

int rollup_decode(const void *blob, size_t len, struct buf *tmp,
		  int (*cb)(void *ctx, uint64_t stack, int64_t sum, uint64_t count), void *ctx)
{
	uint64_t n, stack = 0;
	struct rd r;
	int err;

	tmp->len = 0;
	err = unpack(blob, len, CHUNK_MAX_BLOB, tmp);
	if (err)
		return err;
	r = (struct rd){ tmp->p, tmp->p + tmp->len, false };
	n = rd_uvarint(&r);
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

void stack_locs_encode(const uint64_t *ids, size_t n, struct buf *b)
{
	for (size_t i = 0; i < n; i++) {
		if (i)
			buf_svarint(b, (int64_t)(ids[i] - ids[i - 1]));
		else
			buf_uvarint(b, ids[0]);
	}
}

int stack_locs_decode(const void *blob, size_t len, uint64_t *ids, size_t max, size_t *ret_n)
{
	struct rd r = { blob, blob ? (const uint8_t *)blob + len : NULL, false };
	uint64_t v = 0;
	size_t n = 0;
	int err = 0;

	while (r.p < r.end && !err) {
		if (n == max) {
			err = -E2BIG;
			break;
		}
		v = n ? v + (uint64_t)rd_svarint(&r) : rd_uvarint(&r);
		if (r.bad || (int64_t)v <= 0)
			err = -EINVAL;
		else
			ids[n++] = v;
	}
	*ret_n = n;
	return err;
}

/* ---- interval chunks ---------------------------------------------------------------------- */

/*
 * The chunk's string table: string -> index, by content (open addressing over FNV-1a; local,
 * so that the fuzzer builds this file with codec.c alone).
 */
struct stab {
	uint32_t *slot;		/* index + 1, 0: empty; cap slots, a power of two */
	size_t cap;
	const char **v;		/* the keys: bytes and their lengths */
	size_t *len;
	size_t n, capv;
};

static uint64_t fnv1a(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
	return h;
}

/* The index of key s (len bytes, any content) in t, added if new; -ENOMEM. */
static int64_t stab_addn(struct stab *t, const char *s, size_t len)
{
	size_t i;

	for (i = t->cap ? fnv1a(s, len) & (t->cap - 1) : 0; t->cap && t->slot[i];
	     i = (i + 1) & (t->cap - 1))
		if (t->len[t->slot[i] - 1] == len && !memcmp(t->v[t->slot[i] - 1], s, len))
			return t->slot[i] - 1;
	if (2 * (t->n + 1) > t->cap) {	/* at most half full */
		size_t ncap = t->cap ? 2 * t->cap : 64;
		uint32_t *ns = calloc(ncap, sizeof(*ns));

		if (!ns)
			return -ENOMEM;
		for (size_t k = 0; k < t->n; k++) {
			for (i = fnv1a(t->v[k], t->len[k]) & (ncap - 1); ns[i];
			     i = (i + 1) & (ncap - 1))
				;
			ns[i] = (uint32_t)k + 1;
		}
		free(t->slot);
		t->slot = ns;
		t->cap = ncap;
		for (i = fnv1a(s, len) & (t->cap - 1); t->slot[i]; i = (i + 1) & (t->cap - 1))
			;
	}
	if (t->n == t->capv) {
		size_t ncap = t->capv ? t->capv * 2 : 64;
		const char **nv = realloc(t->v, ncap * sizeof(*nv));
		size_t *nl = nv ? realloc(t->len, ncap * sizeof(*nl)) : NULL;

		if (nv)
			t->v = nv;
		if (!nl)
			return -ENOMEM;
		t->len = nl;
		t->capv = ncap;
	}
	t->v[t->n] = s;
	t->len[t->n] = len;
	t->slot[i] = (uint32_t)++t->n;
	return (int64_t)t->n - 1;
}

static int64_t stab_add(struct stab *t, const char *s)
{
	return stab_addn(t, s, strlen(s));
}

static void stab_done(struct stab *t)
{
	free(t->slot);
	free(t->v);
	free(t->len);
}

/* The value of a canonical decimal ("0", or digits without a leading 0, < 2^64) into *ret. */
static bool decimal(const char *s, uint64_t *ret)
{
	uint64_t v = 0;
	size_t i;

	if (!*s || (s[0] == '0' && s[1]))
		return false;
	for (i = 0; s[i]; i++) {
		if (s[i] < '0' || s[i] > '9' || i == 19)
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*ret = v;
	return true;
}

/* A row's attr names as one key: each NUL-terminated, after their count. */
static void shape_key(const struct irow *r, struct buf *b)
{
	b->len = 0;
	buf_uvarint(b, r->nattrs);
	for (size_t k = 0; k < r->nattrs; k++)
		buf_put(b, r->attrs[2 * k], strlen(r->attrs[2 * k]) + 1);
}

/* Row order of a chunk: label set, start, arrival. */
static int cmp_row(const void *a, const void *b, void *ctx)
{
	const struct irow *r = ctx, *x = &r[*(const size_t *)a], *y = &r[*(const size_t *)b];

	if (x->labelset != y->labelset)
		return x->labelset < y->labelset ? -1 : 1;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int chunk_intervals_encode(const struct irow *r, size_t n, uint8_t **ret, size_t *ret_len)
{
	struct stab t = { 0 }, shapes = { 0 };
	struct buf b = { 0 }, keys = { 0 }, key = { 0 };
	uint32_t *shape = NULL;
	size_t *koff = NULL, *klen = NULL, *rep = NULL;	/* rep: a row of each shape */
	size_t *o = NULL;	/* the order rows are written in */
	uint64_t prev, t_min = UINT64_MAX;
	int err = 0;

	/* shapes (the rows' lists of attr names) by content: keys holds each row's, in order */
	shape = malloc(n * sizeof(*shape));
	koff = malloc(n * sizeof(*koff));
	klen = malloc(n * sizeof(*klen));
	rep = malloc(n * sizeof(*rep));
	o = malloc(n * sizeof(*o));
	if (!shape || !koff || !klen || !rep || !o) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		shape_key(&r[i], &key);
		koff[i] = keys.len;
		klen[i] = key.len;
		buf_put(&keys, key.p, key.len);
	}
	if (keys.oom || key.oom) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n && !err; i++) {
		int64_t x = stab_addn(&shapes, (const char *)keys.p + koff[i], klen[i]);

		if (x < 0) {
			err = (int)x;
		} else {
			shape[i] = (uint32_t)x;
			if ((size_t)x + 1 == shapes.n)
				rep[x] = i;	/* new: this row is its first */
		}
	}
	/* names and the values that are not decimal numbers go to the string table */
	for (size_t i = 0; i < n && !err; i++) {
		for (size_t k = 0; k < 2 * r[i].nattrs && !err; k++) {
			uint64_t v;
			int64_t x = 0;

			if (k % 2 == 0 || !decimal(r[i].attrs[k], &v))
				x = stab_add(&t, r[i].attrs[k]);
			if (x < 0)
				err = (int)x;
		}
	}
	if (err)
		goto out;
	for (size_t i = 0; i < n; i++) {
		o[i] = i;
		if (r[i].start < t_min)
			t_min = r[i].start;
	}
	qsort_r(o, n, sizeof(*o), cmp_row, (void *)r);
	buf_uvarint(&b, n);
	buf_uvarint(&b, r[o[0]].seq);
	buf_uvarint(&b, t.n);
	for (size_t i = 0; i < t.n; i++)
		buf_put(&b, t.v[i], strlen(t.v[i]) + 1);
	buf_uvarint(&b, shapes.n);
	for (size_t i = 0; i < shapes.n; i++) {
		const struct irow *x = &r[rep[i]];

		buf_uvarint(&b, x->nattrs);
		for (size_t k = 0; k < x->nattrs; k++)	/* present: no growth */
			buf_uvarint(&b, (uint64_t)stab_add(&t, x->attrs[2 * k]));
	}
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, r[o[i]].end - r[o[i]].start);
	/* rows by (label set, start): a thread's states follow each other, each starting where
	 * the one before ended, so most start deltas are 0 */
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, r[o[i]].labelset - (i ? r[o[i - 1]].labelset : 0));
		if (i && r[o[i]].labelset == r[o[i - 1]].labelset)
			buf_svarint(&b, (int64_t)(r[o[i]].start - r[o[i - 1]].end));
		else
			buf_uvarint(&b, r[o[i]].start - t_min);
	}
	prev = r[o[0]].seq;
	for (size_t i = 0; i < n; i++) {
		buf_svarint(&b, (int64_t)(r[o[i]].seq - prev));
		prev = r[o[i]].seq;
	}
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, shape[o[i]]);
	/* values: 2 x string index, or 2 x number + 1 */
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < r[o[i]].nattrs; k++) {
			const char *val = r[o[i]].attrs[2 * k + 1];
			uint64_t v;

			if (decimal(val, &v) && v < (1ull << 63))
				buf_uvarint(&b, 2 * v + 1);
			else
				buf_uvarint(&b, 2 * (uint64_t)stab_add(&t, val));
		}
	}
	err = pack(&b, ret, ret_len);
out:
	buf_done(&b);
	buf_done(&keys);
	buf_done(&key);
	stab_done(&t);
	stab_done(&shapes);
	free(shape);
	free(koff);
	free(klen);
	free(rep);
	free(o);
	return err;
}

void ichunk_done(struct ichunk *c)
{
	buf_done(&c->raw);
	buf_done(&c->num);
	free(c->seq);
	free(c->labelset);
	free(c->start);
	free(c->end);
	free(c->attr0);
	free(c->nattrs);
	free(c->strs);
	free(c->attrs);
	free(c->shape0);
	free(c->shapen);
	free(c->shapes);
	memset(c, 0, sizeof(*c));
}

/* Grows *v (elements of size sz, capacity *cap) to hold n. 0 or -ENOMEM. */
static int grow(void *v, size_t *cap, size_t n, size_t sz)
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

int chunk_intervals_decode(struct ichunk *c, const void *blob, size_t len, uint64_t t_min)
{
	uint64_t nstr, nshape, seq, t = t_min;
	size_t cap = c->cap, na = 0, nsn = 0, nnum = 0;
	struct rd r, vals;
	int err;

	c->n = c->nstr = c->nattr = 0;
	c->raw.len = 0;
	err = unpack(blob, len, CHUNK_MAX_BLOB, &c->raw);
	if (err)
		return err;
	r = (struct rd){ c->raw.p, c->raw.p + c->raw.len, false };
	c->n = rd_uvarint(&r);
	seq = rd_uvarint(&r);
	nstr = rd_uvarint(&r);
	if (r.bad || c->n > c->raw.len || c->n > CHUNK_MAX || nstr > (size_t)(r.end - r.p))
		goto bad;
	if (grow(&c->strs, &c->capstr, nstr, sizeof(*c->strs)))
		goto nomem;
	for (uint64_t i = 0; i < nstr; i++) {
		const uint8_t *z = memchr(r.p, 0, (size_t)(r.end - r.p));

		if (!z)
			goto bad;
		c->strs[i] = (const char *)r.p;
		r.p = z + 1;
	}
	c->nstr = nstr;
	/* shapes: each a list of name string indexes, flattened into shapes[] */
	nshape = rd_uvarint(&r);
	if (r.bad || nshape > (size_t)(r.end - r.p))
		goto bad;
	cap = c->capshape;
	if (grow(&c->shape0, &c->capshape, nshape, sizeof(size_t)) ||
	    grow(&c->shapen, &cap, nshape, sizeof(size_t)))
		goto nomem;
	cap = c->cap;
	for (uint64_t i = 0; i < nshape; i++) {
		uint64_t k = rd_uvarint(&r);

		if (r.bad || k > (size_t)(r.end - r.p))
			goto bad;
		if (grow(&c->shapes, &c->capshapes, nsn + k, sizeof(*c->shapes)))
			goto nomem;
		c->shape0[i] = nsn;
		c->shapen[i] = k;
		for (uint64_t j = 0; j < k; j++) {
			uint64_t x = rd_uvarint(&r);

			if (r.bad || x >= nstr)
				goto bad;
			c->shapes[nsn++] = c->strs[x];
		}
	}
	if (grow(&c->seq, &cap, c->n, sizeof(uint64_t)) ||
	    (cap = c->cap, grow(&c->labelset, &cap, c->n, sizeof(uint64_t))) ||
	    (cap = c->cap, grow(&c->start, &cap, c->n, sizeof(uint64_t))) ||
	    (cap = c->cap, grow(&c->end, &cap, c->n, sizeof(uint64_t))) ||
	    (cap = c->cap, grow(&c->attr0, &cap, c->n, sizeof(size_t))) ||
	    (cap = c->cap, grow(&c->nattrs, &cap, c->n, sizeof(size_t))))
		goto nomem;
	c->cap = cap;
	for (size_t i = 0; i < c->n; i++)
		c->end[i] = rd_uvarint(&r);	/* the length until the start is known */
	/* label set deltas and starts interleaved; a start follows its row's label set */
	for (size_t i = 0; i < c->n && !r.bad; i++) {
		uint64_t d = rd_uvarint(&r);

		c->labelset[i] = d + (i ? c->labelset[i - 1] : 0);
		if (i && !d)	/* after the same label set's row: from its end */
			c->start[i] = c->end[i - 1] + (uint64_t)rd_svarint(&r);
		else
			c->start[i] = t + rd_uvarint(&r);
		if (c->end[i] > UINT64_MAX - c->start[i])
			goto bad;
		c->end[i] += c->start[i];
	}
	for (size_t i = 0; i < c->n; i++) {
		seq += (uint64_t)rd_svarint(&r);
		c->seq[i] = seq;
	}
	for (size_t i = 0; i < c->n; i++) {
		uint64_t k = rd_uvarint(&r);

		if (r.bad || k >= nshape)
			goto bad;
		c->attr0[i] = na;
		c->nattrs[i] = k;	/* the row's shape until the values are read */
		na += c->shapen[k];
	}
	/* values, 2 x string index or 2 x number + 1: counted first, so the numbers' text
	 * (c->num) is sized once and never moves */
	vals = r;
	for (size_t i = 0; i < na; i++) {
		uint64_t v = rd_uvarint(&vals);

		if (vals.bad || (!(v & 1) && v / 2 >= nstr))
			goto bad;
		nnum += v & 1;
	}
	c->num.len = 0;
	if (grow(&c->attrs, &c->capattr, 2 * na + 1, sizeof(*c->attrs)) ||
	    !buf_reserve(&c->num, nnum * 21 + 1))
		goto nomem;
	for (size_t i = 0; i < c->n; i++) {
		size_t k = c->nattrs[i];
		const char **a = c->attrs + 2 * c->attr0[i];

		for (size_t j = 0; j < c->shapen[k]; j++) {
			uint64_t v = rd_uvarint(&r);

			a[2 * j] = c->shapes[c->shape0[k] + j];
			if (v & 1) {
				char *o = (char *)c->num.p + c->num.len;

				c->num.len += (size_t)snprintf(o, 21, "%llu",
							       (unsigned long long)(v >> 1)) + 1;
				a[2 * j + 1] = o;
			} else {
				a[2 * j + 1] = c->strs[v / 2];
			}
		}
		c->nattrs[i] = c->shapen[k];
	}
	c->nattr = na;
	return 0;
nomem:
	c->n = 0;
	return -ENOMEM;
bad:
	c->n = 0;
	return -EINVAL;
}

/* ---- location blocks ---------------------------------------------------------------------- */

int loc_block_encode(const struct lrow *r, size_t n, uint8_t **ret, size_t *ret_len)
{
	struct buf b = { 0 };
	uint64_t prev = 0;

	buf_uvarint(&b, n);
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, r[i].id - prev);
		prev = r[i].id;
	}
	for (int k = 0; k < 4; k++)
		for (size_t i = 0; i < n; i++)
			buf_put(&b, r[i].str[k], strlen(r[i].str[k]) + 1);
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, r[i].line);
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, r[i].address);
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, r[i].flags);
	return pack(&b, ret, ret_len);
}

/*
 * The start of a location or stack block: the blob unpacked into raw, r reading it, the
 * entry count read (at most one per remaining byte). 0 or -errno (*n then 0).
 */
static int block_open(struct buf *raw, const void *blob, size_t len, struct rd *r, size_t *n)
{
	int err;

	raw->len = 0;
	*n = 0;
	err = unpack(blob, len, CHUNK_MAX_BLOB, raw);
	if (err)
		return err;
	*r = (struct rd){ raw->p, raw->p + raw->len, false };
	*n = rd_uvarint(r);
	if (r->bad || *n > (size_t)(r->end - r->p)) {
		*n = 0;
		return -EINVAL;
	}
	return 0;
}

int loc_block_decode(struct lblock *b, const void *blob, size_t len)
{
	uint64_t id = 0;
	struct rd r;
	int err;

	b->n = 0;
	err = block_open(&b->raw, blob, len, &r, &b->n);
	if (err)
		return err;
	if (grow(&b->r, &b->cap, b->n ? b->n : 1, sizeof(*b->r))) {
		b->n = 0;
		return -ENOMEM;
	}
	for (size_t i = 0; i < b->n; i++) {
		uint64_t d = rd_uvarint(&r);

		if ((i && !d) || d > UINT64_MAX - id)
			r.bad = true;	/* ids strictly ascending, no wrap */
		id += d;
		b->r[i].id = id;
	}
	for (int k = 0; k < 4 && !r.bad; k++) {
		for (size_t i = 0; i < b->n; i++) {
			const uint8_t *z = memchr(r.p, 0, (size_t)(r.end - r.p));

			if (!z) {
				r.bad = true;
				break;
			}
			b->r[i].str[k] = (const char *)r.p;
			r.p = z + 1;
		}
	}
	for (size_t i = 0; i < b->n; i++)
		b->r[i].line = rd_uvarint(&r);
	for (size_t i = 0; i < b->n; i++)
		b->r[i].address = rd_uvarint(&r);
	for (size_t i = 0; i < b->n; i++)
		b->r[i].flags = rd_uvarint(&r);
	if (r.bad) {
		b->n = 0;
		return -EINVAL;
	}
	return 0;
}

const struct lrow *loc_block_find(const struct lblock *b, uint64_t id)
{
	size_t lo = 0, hi = b->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (b->r[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < b->n && b->r[lo].id == id ? &b->r[lo] : NULL;
}

void lblock_done(struct lblock *b)
{
	buf_done(&b->raw);
	free(b->r);
	memset(b, 0, sizeof(*b));
}

/* ---- stack blocks ------------------------------------------------------------------------- */

int stack_block_encode(const uint64_t *ids, const uint8_t *const *locs, const size_t *lens,
		       size_t n, uint8_t **ret, size_t *ret_len)
{
	struct buf b = { 0 };
	uint64_t prev = 0;

	buf_uvarint(&b, n);
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, ids[i] - prev);
		prev = ids[i];
	}
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, lens[i]);
	for (size_t i = 0; i < n; i++)
		if (lens[i])
			buf_put(&b, locs[i], lens[i]);
	return pack(&b, ret, ret_len);
}

int stack_block_decode(struct sblock *b, const void *blob, size_t len)
{
	size_t cap;
	uint64_t id = 0;
	struct rd r;
	int err;

	b->n = 0;
	err = block_open(&b->raw, blob, len, &r, &b->n);
	if (err)
		return err;
	cap = b->cap;
	if (grow(&b->id, &cap, b->n + 1, sizeof(*b->id)) ||
	    (cap = b->cap, grow(&b->locs, &cap, b->n + 1, sizeof(*b->locs))) ||
	    (cap = b->cap, grow(&b->len, &cap, b->n + 1, sizeof(*b->len)))) {
		b->n = 0;
		return -ENOMEM;
	}
	b->cap = cap;
	for (size_t i = 0; i < b->n; i++) {
		uint64_t d = rd_uvarint(&r);

		if ((i && !d) || d > UINT64_MAX - id)
			r.bad = true;	/* ids strictly ascending, no wrap */
		id += d;
		b->id[i] = id;
	}
	for (size_t i = 0; i < b->n; i++)
		b->len[i] = rd_uvarint(&r);
	for (size_t i = 0; i < b->n && !r.bad; i++) {
		if (b->len[i] > (size_t)(r.end - r.p)) {
			r.bad = true;
			break;
		}
		b->locs[i] = r.p;
		r.p += b->len[i];
	}
	if (r.bad) {
		b->n = 0;
		return -EINVAL;
	}
	return 0;
}

ptrdiff_t stack_block_find(const struct sblock *b, uint64_t id)
{
	size_t lo = 0, hi = b->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (b->id[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < b->n && b->id[lo] == id ? (ptrdiff_t)lo : -1;
}

void sblock_done(struct sblock *b)
{
	buf_done(&b->raw);
	free(b->id);
	free(b->locs);
	free(b->len);
	memset(b, 0, sizeof(*b));
}
