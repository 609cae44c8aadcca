/* SPDX-License-Identifier: Apache-2.0 */
/* Interval chunks: the encoder (chunk.h); its decoder beside it in ivchunk_decode.c. */
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

/* Numbers at or past this are stored as strings (4 x number + 1 must fit). */
#define NUM_MAX	(1ull << 62)

/* A row's attrs, its typed stack (irow.stack) among them at stack_at as attr "stack_id". */
static size_t row_nattrs(const struct irow *r)
{
	return r->nattrs + (r->stack != 0);
}

static const char *row_name(const struct irow *r, size_t k)
{
	if (r->stack && k >= r->stack_at) {
		if (k == r->stack_at)
			return CHUNK_STACK_ATTR;
		k--;
	}
	return r->attrs[2 * k];
}

/* Attr k's value: its text, or NULL for the typed stack (*ret_num). */
static const char *row_val(const struct irow *r, size_t k, uint64_t *ret_num)
{
	if (r->stack && k >= r->stack_at) {
		if (k == r->stack_at) {
			*ret_num = r->stack;
			return NULL;
		}
		k--;
	}
	return r->attrs[2 * k + 1];
}

/* A value as a number (false: kept as a string): a typed one, or a canonical decimal text. */
static bool row_num(const char *val, uint64_t num, uint64_t *ret)
{
	if (!val) {
		*ret = num;
		return num < NUM_MAX;
	}
	return decimal(val, ret) && *ret < NUM_MAX;
}

/* A row's attr names as one key: each NUL-terminated, after their count. */
static void shape_key(const struct irow *r, struct buf *b)
{
	b->len = 0;
	buf_uvarint(b, row_nattrs(r));
	for (size_t k = 0; k < row_nattrs(r); k++)
		buf_put(b, row_name(r, k), strlen(row_name(r, k)) + 1);
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
bool iv_ns_name(const char *name)
{
	size_t len = strlen(name);

	return len >= 3 && !strcmp(name + len - 3, "_ns");
}

/* The value tags of format 2: uvarint 4 x string index, 4 x number + 1, or 2: the row's length
 * (end - start) less the numbers of its columns written before (a thread-state summary's
 * running_ns is its length less runnable_ns and blocked_ns). acc: the sum so far, UINT64_MAX
 * once it does not fit. */
uint64_t iv_acc_add(uint64_t acc, uint64_t v)
{
	return acc > UINT64_MAX - v ? UINT64_MAX : acc + v;
}

/*
 * Format 4's tie groups: the rows not listed (listed[i] false) that share a start (in units,
 * s[i]) with another such row. next[i]: the group's next row (row order), SIZE_MAX after its
 * last; head[i]: whether row i is the first of a group of at least two. An open-addressing
 * table over the starts, so that decoding stays linear. 0 or -ENOMEM.
 */
int iv_tie_groups(const uint64_t *s, const bool *listed, size_t n, size_t *next, bool *head)
{
	size_t cap = 16, *first, *last;

	while (cap < 2 * n)
		cap *= 2;
	first = malloc(cap * sizeof(*first));
	last = malloc(cap * sizeof(*last));
	if (!first || !last) {
		free(first);
		free(last);
		return -ENOMEM;
	}
	memset(first, 0xff, cap * sizeof(*first));
	for (size_t i = 0; i < n; i++) {
		size_t h = (size_t)((s[i] * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);

		next[i] = SIZE_MAX;
		head[i] = false;
		if (listed[i])
			continue;
		while (first[h] != SIZE_MAX && s[first[h]] != s[i])
			h = (h + 1) & (cap - 1);
		if (first[h] == SIZE_MAX) {
			first[h] = last[h] = i;
			continue;
		}
		head[first[h]] = true;
		next[last[h]] = i;
		last[h] = i;
	}
	free(first);
	free(last);
	return 0;
}

/* Order of a tie group's rows as format 4 predicts arrival: by end (a state is sent when it
 * ends), then row. */
int iv_cmp_pred(const void *a, const void *b, void *ctx)
{
	const uint64_t *e = ctx;
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	if (e[x] != e[y])
		return e[x] < e[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Row order by (seq, row) through ctx (the rows' seqs). */
static int cmp_seq(const void *a, const void *b, void *ctx)
{
	const uint64_t *q = ctx;
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	if (q[x] != q[y])
		return q[x] < q[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/*
 * Format 4's value code of one attr (format 3's: 4 x string index, 4 x number + 1, 2 for the
 * row's length less its numbers before; with u > 1 only *_ns numbers, in units, take part).
 * acc/acc_u: the row's sums so far (ns, units); len/len_u its length.
 */
static uint64_t value_code(struct stab *t, const char *name, const char *val, uint64_t num,
			   uint64_t u, uint64_t len, uint64_t len_u, uint64_t *acc, uint64_t *acc_u)
{
	uint64_t v;

	if (!row_num(val, num, &v))
		return 4 * (uint64_t)stab_add(t, val);	/* present: no growth */
	if (u == 1) {
		uint64_t code = *acc <= len && len - *acc == v ? 2 : 4 * v + 1;

		*acc = iv_acc_add(*acc, v);
		return code;
	}
	if (!iv_ns_name(name))
		return 4 * v + 1;
	if (*acc <= len && len - *acc == v && *acc_u <= len_u) {
		*acc = iv_acc_add(*acc, v);
		*acc_u = len_u;
		return 2;
	}
	*acc = iv_acc_add(*acc, v);
	*acc_u = iv_acc_add(*acc_u, v / u);
	return 4 * (v / u) + 1;
}

/*
 * Format 4's values: a column per attr name (in the order the shapes first name them), within
 * it a run per shape holding that name (shape order): uvarint c + 1 when every value of the run
 * has code c, else 0 and the codes, rows in row order. 0 or -ENOMEM.
 */
static int put_values4(struct buf *b, const struct irow *r, const size_t *o, size_t n,
		       const uint32_t *shape, struct stab *t, const struct stab *shapes,
		       const size_t *rep, uint64_t u)
{
	uint64_t *acc = calloc(2 * n + 1, sizeof(*acc)), *acc_u = acc + n;
	size_t *cols = NULL, ncols = 0, capcols = 0;
	struct buf run = { 0 };
	int err = 0;

	if (!acc)
		return -ENOMEM;
	for (size_t i = 0; i < shapes->n && !err; i++) {
		const struct irow *x = &r[rep[i]];

		for (size_t k = 0; k < row_nattrs(x) && !err; k++) {
			size_t name = (size_t)stab_add(t, row_name(x, k)), c;

			for (c = 0; c < ncols && cols[c] != name; c++)
				;
			if (c == ncols && !(err = arr_grow(&cols, &capcols, ncols + 1, sizeof(*cols))))
				cols[ncols++] = name;
		}
	}
	for (size_t c = 0; c < ncols && !err; c++) {
		for (size_t sh = 0; sh < shapes->n; sh++) {
			const struct irow *y = &r[rep[sh]];
			uint64_t first = 0;
			bool same = true, any = false;

			for (size_t k = 0; k < row_nattrs(y) && !any; k++)
				any = (size_t)stab_add(t, row_name(y, k)) == cols[c];
			if (!any)
				continue;
			run.len = 0;
			for (size_t i = 0; i < n; i++) {
				const struct irow *x = &r[o[i]];
				uint64_t len = x->end - x->start, len_u = x->end / u - x->start / u;

				if (shape[o[i]] != sh)
					continue;
				for (size_t k = 0; k < row_nattrs(x); k++) {
					uint64_t code, num = 0;
					const char *val;

					if ((size_t)stab_add(t, row_name(x, k)) != cols[c])
						continue;
					val = row_val(x, k, &num);
					code = value_code(t, row_name(x, k), val, num, u, len,
							  len_u, &acc[i], &acc_u[i]);
					if (!run.len)
						first = code;
					same &= code == first;
					buf_uvarint(&run, code);
				}
			}
			if (same) {
				buf_uvarint(b, first + 1);
			} else {
				buf_uvarint(b, 0);
				buf_put(b, run.p, run.len);
			}
		}
	}
	b->oom |= run.oom;
	buf_done(&run);
	free(cols);
	free(acc);
	return err;
}

/*
 * Format 4's arrival numbers: the rows not seq_free listed with their seq; the others' tie
 * groups (iv_tie_groups()) each with uvarint 0 when they arrived in the predicted order
 * (iv_cmp_pred()), else 1 and each row's rank of arrival (row order). s, e: the rows' starts and
 * ends in units, in row order. 0 or -ENOMEM.
 */
static int put_seqs4(struct buf *b, const struct irow *r, const size_t *o, size_t n,
		     const uint64_t *s, uint64_t *e, uint64_t seq_min)
{
	size_t z = n ? n : 1, k = 0, last = 0;
	size_t *next = malloc(z * sizeof(*next)), *m = malloc(z * sizeof(*m));
	size_t *rank = malloc(z * sizeof(*rank));
	uint64_t *q = malloc(z * sizeof(*q));
	bool *listed = calloc(z, 1), *head = calloc(z, 1);
	int err = -ENOMEM;

	if (!next || !m || !rank || !q || !listed || !head)
		goto out;
	for (size_t i = 0; i < n; i++) {
		listed[i] = !r[o[i]].seq_free;
		q[i] = r[o[i]].seq;
		k += listed[i];
	}
	buf_uvarint(b, k);
	for (size_t i = 0; i < n; i++) {
		if (!listed[i])
			continue;
		buf_uvarint(b, i - last);
		buf_uvarint(b, r[o[i]].seq - seq_min);
		last = i;
	}
	err = iv_tie_groups(s, listed, n, next, head);
	for (size_t i = 0; i < n && !err; i++) {
		size_t g = 0;
		bool pred = true;

		if (!head[i])
			continue;
		for (size_t j = i; j != SIZE_MAX; j = next[j])
			m[g++] = j;
		/* rank[m[x]]: the row's place in arrival order; the prediction must match it */
		qsort_r(m, g, sizeof(*m), cmp_seq, q);
		for (size_t x = 0; x < g; x++)
			rank[m[x]] = x;
		qsort_r(m, g, sizeof(*m), iv_cmp_pred, e);
		for (size_t x = 0; x < g; x++)
			pred &= rank[m[x]] == x;
		buf_uvarint(b, !pred);
		for (size_t j = i; !pred && j != SIZE_MAX; j = next[j])
			buf_uvarint(b, rank[j]);
	}
out:
	free(next);
	free(m);
	free(rank);
	free(q);
	free(listed);
	free(head);
	return err;
}

int chunk_intervals_encode(const struct irow *r, size_t n, uint64_t unit_ns, uint8_t **ret,
			   size_t *ret_len)
{
	uint64_t u = unit_ns > 1 ? unit_ns : 1, seq_min = UINT64_MAX;
	struct stab t = { 0 }, shapes = { 0 };
	struct buf b = { 0 }, keys = { 0 }, key = { 0 };
	uint32_t *shape = NULL;
	size_t *koff = NULL, *klen = NULL, *rep = NULL;	/* rep: a row of each shape */
	size_t *o = NULL;	/* the order rows are written in */
	uint64_t *s = NULL, *e = NULL;	/* starts and ends in units, row order */
	uint64_t t_min = UINT64_MAX, prev;
	size_t ngroups = 0;
	int err = 0;

	/* shapes (the rows' lists of attr names) by content: keys holds each row's, in order */
	shape = malloc((n ? n : 1) * sizeof(*shape));
	koff = malloc((n ? n : 1) * sizeof(*koff));
	klen = malloc((n ? n : 1) * sizeof(*klen));
	rep = malloc((n ? n : 1) * sizeof(*rep));
	o = malloc((n ? n : 1) * sizeof(*o));
	s = malloc((n ? n : 1) * sizeof(*s));
	e = malloc((n ? n : 1) * sizeof(*e));
	if (!shape || !koff || !klen || !rep || !o || !s || !e) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (row_nattrs(&r[i]) > CHUNK_MAX_ATTRS ||
		    (r[i].stack && r[i].stack_at > r[i].nattrs)) {
			err = -EINVAL;
			goto out;
		}
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
	/* names and the values that are not numbers go to the string table */
	for (size_t i = 0; i < n && !err; i++) {
		for (size_t k = 0; k < row_nattrs(&r[i]) && !err; k++) {
			uint64_t v, num = 0;
			const char *val = row_val(&r[i], k, &num);
			int64_t x = stab_add(&t, row_name(&r[i], k));

			if (x >= 0 && !row_num(val, num, &v))
				x = val ? stab_add(&t, val) : -EINVAL;	/* a typed stack >= 2^62 */
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
	}
	qsort_r(o, n, sizeof(*o), cmp_row, (void *)r);
	for (size_t i = 0; i < n; i++) {
		s[i] = r[o[i]].start / u;
		e[i] = r[o[i]].end / u;
		ngroups += !i || r[o[i]].labelset != r[o[i - 1]].labelset;
	}
	buf_uvarint(&b, 0);	/* format 4 (format 1 starts with n >= 1) */
	buf_uvarint(&b, 4);
	buf_uvarint(&b, u);
	buf_uvarint(&b, n);
	buf_uvarint(&b, n ? seq_min : 0);
	buf_uvarint(&b, t.n);
	for (size_t i = 0; i < t.n; i++)
		buf_put(&b, t.v[i], strlen(t.v[i]) + 1);
	buf_uvarint(&b, shapes.n);
	for (size_t i = 0; i < shapes.n; i++) {
		const struct irow *x = &r[rep[i]];

		buf_uvarint(&b, row_nattrs(x));
		for (size_t k = 0; k < row_nattrs(x); k++)	/* present: no growth */
			buf_uvarint(&b, (uint64_t)stab_add(&t, row_name(x, k)));
	}
	/* a label set's rows together: its id delta and count */
	buf_uvarint(&b, ngroups);
	prev = 0;
	for (size_t i = 0, g0 = 0; i < n; i++) {
		if (i + 1 < n && r[o[i + 1]].labelset == r[o[g0]].labelset)
			continue;
		buf_uvarint(&b, r[o[g0]].labelset - prev);
		buf_uvarint(&b, i + 1 - g0);
		prev = r[o[g0]].labelset;
		g0 = i + 1;
	}
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, shape[o[i]]);
	/* lengths per shape (a thread's running, runnable and blocked states differ), planes */
	for (size_t sh = 0, cnt; sh < shapes.n; sh++) {
		key.len = cnt = 0;
		for (size_t i = 0; i < n; i++) {
			if (shape[o[i]] != sh)
				continue;
			buf_uvarint(&key, e[i] - s[i]);
			cnt++;
		}
		planes_put(&key, cnt, &b);
		b.oom |= key.oom;
	}
	/* each label set's first start from t_min, then every other row's from the end of the
	 * row before (a thread's next state starts where the last ended: 0) */
	for (size_t i = 0; i < n; i++)
		if (!i || r[o[i]].labelset != r[o[i - 1]].labelset)
			buf_uvarint(&b, s[i] - t_min / u);
	for (size_t i = 1; i < n; i++)
		if (r[o[i]].labelset == r[o[i - 1]].labelset)
			buf_svarint(&b, (int64_t)(s[i] - e[i - 1]));
	err = put_seqs4(&b, r, o, n, s, e, seq_min);
	if (!err)
		err = put_values4(&b, r, o, n, shape, &t, &shapes, rep, u);
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
	free(s);
	free(e);
	return err;
}
