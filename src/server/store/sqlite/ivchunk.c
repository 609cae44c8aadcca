/* SPDX-License-Identifier: Apache-2.0 */
/* Interval chunks: the encoder beside its decoder (chunk.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/store/sqlite/chunk.h"
#include "server/store/sqlite/chunk_blob.h"

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

/* Format 3 keeps the numbers of attrs named *_ns (durations) in its time unit. */
static bool ns_name(const char *name)
{
	size_t len = strlen(name);

	return len >= 3 && !strcmp(name + len - 3, "_ns");
}

/* Numbers at or past this are stored as strings (4 x number + 1 must fit). */
#define NUM_MAX	(1ull << 62)

/* The value tags of format 2: uvarint 4 x string index, 4 x number + 1, or 2: the row's length
 * (end - start) less the numbers of its columns written before (a thread-state summary's
 * running_ns is its length less runnable_ns and blocked_ns). acc: the sum so far, UINT64_MAX
 * once it does not fit. */
static uint64_t acc_add(uint64_t acc, uint64_t v)
{
	return acc > UINT64_MAX - v ? UINT64_MAX : acc + v;
}

/*
 * Format 2's values, a column per attr name (in the order the shapes first name them): each
 * row's values of that name in row order. 0 or -ENOMEM.
 */
static int put_values(struct buf *b, const struct irow *r, const size_t *o, size_t n,
		      struct stab *t, const struct stab *shapes, const size_t *rep, uint64_t u)
{
	uint64_t *acc = calloc(2 * n, sizeof(*acc)), *acc_u = acc + n;	/* acc_u: format 3's */
	size_t *cols = NULL, ncols = 0, capcols = 0;
	int err = 0;

	if (!acc)
		return -ENOMEM;
	for (size_t i = 0; i < shapes->n && !err; i++) {
		const struct irow *x = &r[rep[i]];

		for (size_t k = 0; k < x->nattrs && !err; k++) {
			size_t name = (size_t)stab_add(t, x->attrs[2 * k]), c;

			for (c = 0; c < ncols && cols[c] != name; c++)
				;
			if (c < ncols)
				continue;
			if (ncols == capcols) {
				size_t ncap = capcols ? 2 * capcols : 16;
				size_t *nv = realloc(cols, ncap * sizeof(*nv));

				if (!nv) {
					err = -ENOMEM;
					break;
				}
				cols = nv;
				capcols = ncap;
			}
			cols[ncols++] = name;
		}
	}
	for (size_t c = 0; c < ncols && !err; c++) {
		for (size_t i = 0; i < n; i++) {
			const struct irow *x = &r[o[i]];
			uint64_t len = x->end - x->start, len_u = x->end / u - x->start / u;

			for (size_t k = 0; k < x->nattrs; k++) {
				const char *val = x->attrs[2 * k + 1];
				uint64_t v;

				if ((size_t)stab_add(t, x->attrs[2 * k]) != cols[c])
					continue;
				if (!decimal(val, &v) || v >= NUM_MAX) {
					buf_uvarint(b, 4 * (uint64_t)stab_add(t, val));
					continue;
				}
				if (u == 1) {
					buf_uvarint(b, acc[i] <= len && len - acc[i] == v ? 2 :
						    4 * v + 1);
					acc[i] = acc_add(acc[i], v);
					continue;
				}
				/* format 3: only durations (names ending in _ns) count, in units;
				 * the derived one is the row's length in units less the others */
				if (!ns_name(x->attrs[2 * k])) {
					buf_uvarint(b, 4 * v + 1);
					continue;
				}
				if (acc[i] <= len && len - acc[i] == v && acc_u[i] <= len_u) {
					buf_uvarint(b, 2);
					acc_u[i] = len_u;
				} else {
					buf_uvarint(b, 4 * (v / u) + 1);
					acc_u[i] = acc_add(acc_u[i], v / u);
				}
				acc[i] = acc_add(acc[i], v);
			}
		}
	}
	free(cols);
	free(acc);
	return err;
}

int chunk_intervals_encode(const struct irow *r, size_t n, uint64_t unit_ns, uint8_t **ret,
			   size_t *ret_len)
{
	uint64_t u = unit_ns > 1 ? unit_ns : 1, seq_min = UINT64_MAX;
	bool v3 = u > 1;
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

			if (k % 2 == 0 || !decimal(r[i].attrs[k], &v) || v >= NUM_MAX)
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
		if (r[i].seq < seq_min)
			seq_min = r[i].seq;
		v3 |= r[i].seq_free;
	}
	qsort_r(o, n, sizeof(*o), cmp_row, (void *)r);
	buf_uvarint(&b, 0);	/* format 2 or 3 (format 1 starts with n >= 1) */
	buf_uvarint(&b, v3 ? 3 : 2);
	if (v3)
		buf_uvarint(&b, u);
	buf_uvarint(&b, n);
	buf_uvarint(&b, v3 ? seq_min : r[o[0]].seq);
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
	if (v3) {	/* format 3: lengths in byte planes */
		key.len = 0;
		for (size_t i = 0; i < n; i++)
			buf_uvarint(&key, r[o[i]].end / u - r[o[i]].start / u);
		planes_put(&key, n, &b);
		b.oom |= key.oom;
	} else {
		for (size_t i = 0; i < n; i++)
			buf_uvarint(&b, r[o[i]].end - r[o[i]].start);
	}
	/* rows by (label set, start): a thread's states follow each other, each starting where
	 * the one before ended, so most start deltas are 0 */
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, r[o[i]].labelset - (i ? r[o[i - 1]].labelset : 0));
		if (i && r[o[i]].labelset == r[o[i - 1]].labelset)
			buf_svarint(&b, (int64_t)(r[o[i]].start / u - r[o[i - 1]].end / u));
		else
			buf_uvarint(&b, r[o[i]].start / u - t_min / u);
	}
	if (v3) {	/* the rows whose seq is kept: their index and seq */
		size_t k = 0, last = 0;

		for (size_t i = 0; i < n; i++)
			k += !r[o[i]].seq_free;
		buf_uvarint(&b, k);
		for (size_t i = 0; i < n; i++) {
			if (r[o[i]].seq_free)
				continue;
			buf_uvarint(&b, i - last);
			buf_uvarint(&b, r[o[i]].seq - seq_min);
			last = i;
		}
	} else {
		prev = r[o[0]].seq;
		for (size_t i = 0; i < n; i++) {
			buf_svarint(&b, (int64_t)(r[o[i]].seq - prev));
			prev = r[o[i]].seq;
		}
	}
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, shape[o[i]]);
	err = put_values(&b, r, o, n, &t, &shapes, rep, u);
	if (err)
		goto out;
	err = blob_pack(&b, ret, ret_len);
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
	free(c->acc);
	memset(c, 0, sizeof(*c));
}

/* Writes v's decimal text into c->num (sized for it) and returns it. */
static const char *num_text(struct ichunk *c, uint64_t v)
{
	char *o = (char *)c->num.p + c->num.len;

	c->num.len += (size_t)snprintf(o, 21, "%llu", (unsigned long long)v) + 1;
	return o;
}

/*
 * Format 2's values (put_values()): column by column, each row's values of that name. nattrs[i]
 * holds row i's shape. The values were checked (tags, string indexes) and counted; a derived
 * value past its row's length sets r->bad. 0 or -ENOMEM.
 */
static int values_v2(struct ichunk *c, struct rd *r, uint64_t nshape, uint64_t u)
{
	const char **cols = NULL;
	size_t ncols = 0, capcols = 0;
	int err = 0;

	if (!c->n)
		return 0;
	if (arr_grow(&c->acc, &c->capacc, c->n, sizeof(*c->acc)))
		return -ENOMEM;
	memset(c->acc, 0, c->n * sizeof(*c->acc));
	for (size_t k = 0; k < nshape && !err; k++) {
		for (size_t j = 0; j < c->shapen[k] && !err; j++) {
			const char *name = c->shapes[c->shape0[k] + j];
			size_t x;

			for (x = 0; x < ncols && cols[x] != name; x++)
				;
			if (x == ncols && !(err = arr_grow(&cols, &capcols, ncols + 1, sizeof(*cols))))
				cols[ncols++] = name;
		}
	}
	for (size_t x = 0; x < ncols && !err && !r->bad; x++) {
		for (size_t i = 0; i < c->n && !r->bad; i++) {
			size_t k = c->nattrs[i];
			const char **a = c->attrs + 2 * c->attr0[i];
			uint64_t len = (c->end[i] - c->start[i]) / u;

			for (size_t j = 0; j < c->shapen[k] && !r->bad; j++) {
				uint64_t v;

				if (a[2 * j] != cols[x])
					continue;
				v = rd_uvarint(r);
				if (!(v & 3)) {
					a[2 * j + 1] = c->strs[v / 4];
					continue;
				}
				if (u > 1 && !ns_name(a[2 * j])) {	/* format 3: as it is */
					if ((v & 3) == 2) {
						r->bad = true;
						break;
					}
					a[2 * j + 1] = num_text(c, v >> 2);
					continue;
				}
				if ((v & 3) == 2) {
					if (c->acc[i] > len) {
						r->bad = true;
						break;
					}
					v = len - c->acc[i];
				} else {
					v >>= 2;
				}
				a[2 * j + 1] = num_text(c, v * u);
				c->acc[i] = acc_add(c->acc[i], v);
			}
		}
	}
	free(cols);
	return err;
}

int chunk_intervals_decode(struct ichunk *c, const void *blob, size_t len, uint64_t t_min)
{
	uint64_t nstr, nshape, seq, t, u = 1;
	size_t cap = c->cap, na = 0, nsn = 0, nnum = 0;
	int fmt;
	struct rd r, vals;
	int err;

	c->n = c->nstr = c->nattr = 0;
	c->raw.len = 0;
	err = blob_unpack(blob, len, CHUNK_MAX_BLOB, &c->raw);
	if (err)
		return err;
	r = (struct rd){ c->raw.p, c->raw.p + c->raw.len, false };
	fmt = blob_format(&r);
	if (fmt < 0)
		goto bad;
	if (fmt == 3) {	/* format 2 with times and durations in units of u ns */
		u = rd_uvarint(&r);
		if (r.bad || !u || u > UNIT_MAX)
			goto bad;
	}
	t = t_min / u;
	c->n = rd_uvarint(&r);
	seq = rd_uvarint(&r);
	nstr = rd_uvarint(&r);
	if (r.bad || c->n > c->raw.len || c->n > CHUNK_MAX || nstr > (size_t)(r.end - r.p))
		goto bad;
	if (arr_grow(&c->strs, &c->capstr, nstr, sizeof(*c->strs)))
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
	if (arr_grow(&c->shape0, &c->capshape, nshape, sizeof(size_t)) ||
	    arr_grow(&c->shapen, &cap, nshape, sizeof(size_t)))
		goto nomem;
	cap = c->cap;
	for (uint64_t i = 0; i < nshape; i++) {
		uint64_t k = rd_uvarint(&r);

		if (r.bad || k > (size_t)(r.end - r.p))
			goto bad;
		if (arr_grow(&c->shapes, &c->capshapes, nsn + k, sizeof(*c->shapes)))
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
	if (arr_grow(&c->seq, &cap, c->n, sizeof(uint64_t)) ||
	    (cap = c->cap, arr_grow(&c->labelset, &cap, c->n, sizeof(uint64_t))) ||
	    (cap = c->cap, arr_grow(&c->start, &cap, c->n, sizeof(uint64_t))) ||
	    (cap = c->cap, arr_grow(&c->end, &cap, c->n, sizeof(uint64_t))) ||
	    (cap = c->cap, arr_grow(&c->attr0, &cap, c->n, sizeof(size_t))) ||
	    (cap = c->cap, arr_grow(&c->nattrs, &cap, c->n, sizeof(size_t))))
		goto nomem;
	c->cap = cap;
	if (fmt == 3) {	/* lengths in byte planes */
		struct pcol pc;

		pcol_open(&pc, &r, c->n);
		for (size_t i = 0; i < c->n; i++)
			c->end[i] = pcol_next(&pc, &r.bad);
	} else {
		for (size_t i = 0; i < c->n; i++)
			c->end[i] = rd_uvarint(&r);	/* the length until the start is known */
	}
	/* label set deltas and starts interleaved; a start follows its row's label set; in
	 * units until all are read */
	for (size_t i = 0; i < c->n && !r.bad; i++) {
		uint64_t d = rd_uvarint(&r);

		c->labelset[i] = d + (i ? c->labelset[i - 1] : 0);
		if (i && !d)	/* after the same label set's row: from its end */
			c->start[i] = c->end[i - 1] + (uint64_t)rd_svarint(&r);
		else
			c->start[i] = t + rd_uvarint(&r);
		if (c->start[i] > UINT64_MAX / u || c->end[i] > UINT64_MAX / u - c->start[i])
			goto bad;
		c->end[i] += c->start[i];
	}
	for (size_t i = 0; u > 1 && i < c->n; i++) {
		c->start[i] *= u;
		c->end[i] *= u;
	}
	if (fmt == 3) {	/* every row the least seq, but those listed */
		uint64_t k = rd_uvarint(&r);
		size_t at = 0;

		if (r.bad || k > c->n)
			goto bad;
		for (size_t i = 0; i < c->n; i++)
			c->seq[i] = seq;
		for (uint64_t j = 0; j < k; j++) {
			uint64_t d = rd_uvarint(&r);

			if (r.bad || d >= c->n - at || (j && !d))
				goto bad;
			at += d;
			c->seq[at] = seq + rd_uvarint(&r);
		}
	} else {
		for (size_t i = 0; i < c->n; i++) {
			seq += (uint64_t)rd_svarint(&r);
			c->seq[i] = seq;
		}
	}
	for (size_t i = 0; i < c->n; i++) {
		uint64_t k = rd_uvarint(&r);

		if (r.bad || k >= nshape)
			goto bad;
		c->attr0[i] = na;
		c->nattrs[i] = k;	/* the row's shape until the values are read */
		na += c->shapen[k];
	}
	/* values (format 1: 2 x string index or 2 x number + 1; format 2: put_values()): counted
	 * first, so the numbers' text (c->num) is sized once and never moves */
	vals = r;
	for (size_t i = 0; i < na; i++) {
		uint64_t v = rd_uvarint(&vals);

		if (fmt == 1 && (vals.bad || (!(v & 1) && v / 2 >= nstr)))
			goto bad;
		if (fmt >= 2 && (vals.bad || (v & 3) == 3 || (!(v & 3) && v / 4 >= nstr)))
			goto bad;
		nnum += fmt == 1 ? v & 1 : (v & 3) != 0;
	}
	c->num.len = 0;
	if (arr_grow(&c->attrs, &c->capattr, 2 * na + 1, sizeof(*c->attrs)) ||
	    !buf_reserve(&c->num, nnum * 21 + 1))
		goto nomem;
	for (size_t i = 0; i < c->n; i++) {
		size_t k = c->nattrs[i];
		const char **a = c->attrs + 2 * c->attr0[i];

		for (size_t j = 0; j < c->shapen[k]; j++)
			a[2 * j] = c->shapes[c->shape0[k] + j];
		if (fmt == 1) {
			for (size_t j = 0; j < c->shapen[k]; j++) {
				uint64_t v = rd_uvarint(&r);

				a[2 * j + 1] = v & 1 ? num_text(c, v >> 1) : c->strs[v / 2];
			}
		}
	}
	if (fmt >= 2 && values_v2(c, &r, nshape, u))
		goto nomem;
	for (size_t i = 0; i < c->n; i++)
		c->nattrs[i] = c->shapen[c->nattrs[i]];
	if (r.bad)
		goto bad;
	c->nattr = na;
	return 0;
nomem:
	c->n = 0;
	return -ENOMEM;
bad:
	c->n = 0;
	return -EINVAL;
}
