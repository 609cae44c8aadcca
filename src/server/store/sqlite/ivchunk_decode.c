/* SPDX-License-Identifier: Apache-2.0 */
/* Interval chunks: the decoder (chunk.h) of what ivchunk.c encodes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/store/sqlite/chunk.h"
#include "server/store/sqlite/chunk_blob.h"

void ichunk_done(struct ichunk *c)
{
	buf_done(&c->raw);
	buf_done(&c->num);
	free(c->seq);
	free(c->labelset);
	free(c->start);
	free(c->end);
	free(c->stack);
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
/* v's decimal text into c->num (room reserved); snprintf took a fifth of a scan's time. */
static const char *num_text(struct ichunk *c, uint64_t v)
{
	char tmp[20], *o = (char *)c->num.p + c->num.len;
	size_t n = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	for (size_t i = 0; i < n; i++)
		o[i] = tmp[n - 1 - i];
	o[n] = 0;
	c->num.len += n + 1;
	return o;
}

/* Row i's number v of attr name: kept typed too where it is the stack. */
static void note_num(struct ichunk *c, size_t i, const char *name, uint64_t v)
{
	if (name == c->stack_name)
		c->stack[i] = v;
}

/* The names of the nshape shapes, each once, in order of first use: the value columns. */
static int shape_columns(const struct ichunk *c, uint64_t nshape, const char ***cols, size_t *ncols,
			 size_t *cap)
{
	int err = 0;

	for (size_t k = 0; k < nshape && !err; k++) {
		for (size_t j = 0; j < c->shapen[k] && !err; j++) {
			const char *name = c->shapes[c->shape0[k] + j];
			size_t x;

			for (x = 0; x < *ncols && (*cols)[x] != name; x++)
				;
			if (x == *ncols && !(err = arr_grow(cols, cap, *ncols + 1, sizeof(**cols))))
				(*cols)[(*ncols)++] = name;
		}
	}
	return err;
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
	err = shape_columns(c, nshape, &cols, &ncols, &capcols);
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
				if (u > 1 && !iv_ns_name(a[2 * j])) {	/* format 3: as it is */
					if ((v & 3) == 2) {
						r->bad = true;
						break;
					}
					a[2 * j + 1] = num_text(c, v >> 2);
					note_num(c, i, a[2 * j], v >> 2);
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
				note_num(c, i, a[2 * j], v * u);
				c->acc[i] = iv_acc_add(c->acc[i], v);
			}
		}
	}
	free(cols);
	return err;
}

/*
 * Format 4's values (put_values4()) into c->attrs; nattrs[i] holds row i's shape, rows[]
 * the rows by shape (those of shape k at rows[row0[k]], row0[k + 1] - row0[k] of them).
 * Counts the numbers' text first, so that c->num is sized once and never moves. 0, -EINVAL
 * or -ENOMEM.
 */
static int values_v4(struct ichunk *c, struct rd *r, uint64_t nshape, uint64_t u,
		     const size_t *rows, const size_t *row0)
{
	const char **cols = NULL;
	size_t ncols = 0, capcols = 0, nnum = 0;
	int err = 0;

	if (arr_grow(&c->acc, &c->capacc, c->n ? c->n : 1, sizeof(*c->acc)))
		return -ENOMEM;
	memset(c->acc, 0, c->n * sizeof(*c->acc));
	err = shape_columns(c, nshape, &cols, &ncols, &capcols);
	/* pass 0 checks the runs and counts the numbers' text, pass 1 decodes */
	for (int pass = 0; pass < 2 && !err; pass++) {
		struct rd v = *r;

		if (pass && !buf_reserve(&c->num, nnum * 21 + 1)) {
			err = -ENOMEM;
			break;
		}
		for (size_t x = 0; x < ncols && !err; x++) {
			bool colns = iv_ns_name(cols[x]);	/* once a column, not a value */

			for (size_t k = 0; k < nshape && !err; k++) {
				const char *const *sn = c->shapes + c->shape0[k], *txt = NULL;
				size_t m = 0, cnt = row0[k + 1] - row0[k];
				uint64_t mode, code;

				for (size_t j = 0; j < c->shapen[k]; j++)
					m += sn[j] == cols[x];
				if (!m || !cnt)
					continue;
				mode = rd_uvarint(&v);
				for (size_t y = 0; y < cnt && !err; y++) {
					size_t i = rows[row0[k] + y];
					const char **a = c->attrs + 2 * c->attr0[i];

					for (size_t j = 0; j < c->shapen[k] && !err; j++) {
						if (sn[j] != cols[x])
							continue;
						code = mode ? mode - 1 : rd_uvarint(&v);
						if (v.bad || (code & 3) == 3 ||
						    (!(code & 3) && code / 4 >= c->nstr) ||
						    ((code & 3) == 2 && u > 1 && !colns)) {
							err = -EINVAL;
							break;
						}
						/* a constant number shares its text */
						if (!pass) {
							nnum += (code & 3) == 2 ||
								((code & 3) == 1 && (!mode || !y));
							continue;
						}
						if (!(code & 3)) {
							a[2 * j + 1] = c->strs[code / 4];
							continue;
						}
						if ((code & 3) == 2) {	/* the length less the rest */
							uint64_t len = (c->end[i] - c->start[i]) / u;

							if (c->acc[i] > len) {
								err = -EINVAL;
								break;
							}
							code = len - c->acc[i];
						} else {
							code >>= 2;
						}
						if (u == 1 || colns)
							c->acc[i] = iv_acc_add(c->acc[i], code);
						note_num(c, i, cols[x], u > 1 && colns ? code * u : code);
						if (mode && txt && (mode - 1) % 4 == 1) {
							a[2 * j + 1] = txt;
							continue;
						}
						if (u > 1 && colns)
							code *= u;
						txt = num_text(c, code);
						a[2 * j + 1] = txt;
					}
				}
			}
		}
		if (pass)
			*r = v;
	}
	free(cols);
	return err;
}

/*
 * Format 4's rows after the shapes (chunk_intervals_encode()): label sets, shapes, lengths,
 * starts, arrival numbers, values. t: t_min in units, seq the least. 0, -EINVAL or -ENOMEM.
 */
static int rows_v4(struct ichunk *c, struct rd *r, uint64_t nshape, uint64_t u, uint64_t t,
		   uint64_t seq)
{
	size_t n = c->n, *rows = NULL, *row0 = NULL, *next = NULL, *m = NULL, *seen = NULL;
	uint64_t ngroups = rd_uvarint(r), ls = 0, k;
	struct pcol *pc = NULL;
	bool *listed = NULL, *head = NULL;
	size_t at = 0, na = 0;
	int err = -ENOMEM;

	if (r->bad || ngroups > n || (n && seq > UINT64_MAX - n))
		return -EINVAL;
	rows = malloc((n ? n : 1) * sizeof(*rows));
	row0 = calloc(nshape + 1, sizeof(*row0));
	pc = malloc((nshape ? nshape : 1) * sizeof(*pc));
	next = malloc((n ? n : 1) * sizeof(*next));
	m = malloc((n ? n : 1) * sizeof(*m));
	seen = malloc((n ? n : 1) * sizeof(*seen));
	listed = calloc(n ? n : 1, 1);
	head = malloc(n ? n : 1);
	if (!rows || !row0 || !pc || !next || !m || !seen || !listed || !head)
		goto out;
	err = -EINVAL;
	for (uint64_t g = 0; g < ngroups; g++) {
		uint64_t d = rd_uvarint(r), cnt = rd_uvarint(r);

		if (r->bad || !cnt || cnt > n - at)
			goto out;
		ls += d;
		for (uint64_t j = 0; j < cnt; j++, at++) {
			c->labelset[at] = ls;
			head[at] = !j;	/* its label set's first row (until the tie groups) */
		}
	}
	if (at != n)
		goto out;
	for (size_t i = 0; i < n; i++) {
		k = rd_uvarint(r);
		if (r->bad || k >= nshape)
			goto out;
		c->nattrs[i] = k;	/* the row's shape until the values are read */
		c->attr0[i] = na;
		na += c->shapen[k];
		row0[k + 1]++;
	}
	for (size_t x = 0; x < nshape; x++) {
		pcol_open(&pc[x], r, row0[x + 1]);
		row0[x + 1] += row0[x];
	}
	for (size_t i = 0; i < n; i++) {
		rows[row0[c->nattrs[i]]++] = i;	/* row0[k]: to the end of shape k's */
		c->end[i] = pcol_next(&pc[c->nattrs[i]], &r->bad);	/* the length, for now */
	}
	memmove(row0 + 1, row0, nshape * sizeof(*row0));
	row0[0] = 0;
	for (size_t i = 0; i < n && !r->bad; i++)
		if (head[i])
			c->start[i] = t + rd_uvarint(r);
	for (size_t i = 0; i < n && !r->bad; i++) {
		if (!head[i])	/* never row 0 */
			c->start[i] = c->end[i - 1] + (uint64_t)rd_svarint(r);
		if (c->start[i] > UINT64_MAX / u || c->end[i] > UINT64_MAX / u - c->start[i])
			goto out;
		c->end[i] += c->start[i];
	}
	/* arrival numbers: the listed rows', then the tie groups' order (put_seqs4()) */
	k = rd_uvarint(r);
	if (r->bad || k > n)
		goto out;
	for (size_t i = 0; i < n; i++)
		c->seq[i] = seq;
	at = 0;
	for (uint64_t j = 0; j < k; j++) {
		uint64_t d = rd_uvarint(r), q = rd_uvarint(r);

		if (r->bad || d >= n - at || (j && !d) || q > UINT64_MAX - seq)
			goto out;
		at += d;
		c->seq[at] = seq + q;
		listed[at] = true;
	}
	if (iv_tie_groups(c->start, listed, n, next, head)) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		size_t g = 0;
		uint64_t tag;

		if (!head[i])
			continue;
		for (size_t j = i; j != SIZE_MAX; j = next[j])
			m[g++] = j;
		tag = rd_uvarint(r);
		if (r->bad || tag > 1)
			goto out;
		if (!tag) {	/* in the predicted order */
			qsort_r(m, g, sizeof(*m), iv_cmp_pred, c->end);
			for (size_t x = 0; x < g; x++)
				c->seq[m[x]] = seq + x;
			continue;
		}
		for (size_t x = 0; x < g; x++)
			seen[x] = SIZE_MAX;
		for (size_t x = 0; x < g; x++) {
			uint64_t rank = rd_uvarint(r);

			if (r->bad || rank >= g || seen[rank] != SIZE_MAX)
				goto out;
			seen[rank] = x;
			c->seq[m[x]] = seq + rank;
		}
	}
	for (size_t i = 0; u > 1 && i < n; i++) {
		c->start[i] *= u;
		c->end[i] *= u;
	}
	c->num.len = 0;
	if (arr_grow(&c->attrs, &c->capattr, 2 * na + 1, sizeof(*c->attrs))) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		size_t s = c->nattrs[i];
		const char **a = c->attrs + 2 * c->attr0[i];

		for (size_t j = 0; j < c->shapen[s]; j++)
			a[2 * j] = c->shapes[c->shape0[s] + j];
	}
	err = values_v4(c, r, nshape, u, rows, row0);
	if (err)
		goto out;
	for (size_t i = 0; i < n; i++)
		c->nattrs[i] = c->shapen[c->nattrs[i]];
	c->nattr = na;
	err = r->bad ? -EINVAL : 0;
out:
	free(rows);
	free(row0);
	free(pc);
	free(next);
	free(m);
	free(seen);
	free(listed);
	free(head);
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
	c->stack_name = NULL;
	c->raw.len = 0;
	err = blob_unpack(blob, len, CHUNK_MAX_BLOB, &c->raw);
	if (err)
		return err;
	r = (struct rd){ c->raw.p, c->raw.p + c->raw.len, false };
	fmt = blob_format(&r);
	if (fmt < 0)
		goto bad;
	if (fmt >= 3) {	/* format 2 with times and durations in units of u ns; format 4 */
		u = rd_uvarint(&r);
		if (r.bad || !u || u > UNIT_MAX)
			goto bad;
	}
	c->unit = u;
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

		if (r.bad || k > (size_t)(r.end - r.p) || (fmt == 4 && k > CHUNK_MAX_ATTRS))
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
			if (!c->stack_name && !strcmp(c->strs[x], CHUNK_STACK_ATTR))
				c->stack_name = c->strs[x];
		}
	}
	if (arr_grow(&c->seq, &cap, c->n, sizeof(uint64_t)) ||
	    (cap = c->cap, arr_grow(&c->labelset, &cap, c->n, sizeof(uint64_t))) ||
	    (cap = c->cap, arr_grow(&c->start, &cap, c->n, sizeof(uint64_t))) ||
	    (cap = c->cap, arr_grow(&c->end, &cap, c->n, sizeof(uint64_t))) ||
	    (cap = c->cap, arr_grow(&c->stack, &cap, c->n, sizeof(uint64_t))) ||
	    (cap = c->cap, arr_grow(&c->attr0, &cap, c->n, sizeof(size_t))) ||
	    (cap = c->cap, arr_grow(&c->nattrs, &cap, c->n, sizeof(size_t))))
		goto nomem;
	c->cap = cap;
	if (c->n)
		memset(c->stack, 0, c->n * sizeof(*c->stack));
	if (fmt == 4) {
		err = rows_v4(c, &r, nshape, u, t, seq);
		if (err)
			c->n = 0;
		return err;
	}
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
	/* no store numbers that far (ivl_seq counts intervals from 1), and format 4 could not
	 * write such a chunk again (its least seq plus n must fit): a corrupt chunk */
	for (size_t i = 0; i < c->n; i++)
		if (c->seq[i] > UINT64_MAX - c->n)
			goto bad;
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
				if (v & 1)
					note_num(c, i, a[2 * j], v >> 1);
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
