/* SPDX-License-Identifier: Apache-2.0 */
/* Sample chunks, point chunks and rollup rows: encoders beside their decoders (chunk.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "server/store/sqlite/chunk.h"

static int pack(struct buf *b, uint8_t **ret, size_t *ret_len)
{
	int err = b->oom ? -ENOMEM : zblob_pack(b->p, b->len, CHUNK_ZLEVEL, ret, ret_len);

	buf_done(b);
	return err;
}

int chunk_samples_encode(const struct srow *r, size_t n, uint8_t **ret, size_t *ret_len)
{
	struct buf b = { 0 };
	bool all_one = true;
	uint64_t prev = r[0].t;

	for (size_t i = 0; i < n; i++)
		all_one &= r[i].value == 1;
	buf_uvarint(&b, n);
	buf_uvarint(&b, all_one);
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, r[i].t - prev);
		prev = r[i].t;
	}
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
	memset(c, 0, sizeof(*c));
}

int chunk_samples_decode(struct chunk *c, const void *blob, size_t len, uint64_t t_min)
{
	struct rd r;
	uint64_t t = t_min;
	int err;

	c->n = 0;
	c->raw.len = 0;
	err = zblob_unpack(blob, len, CHUNK_MAX_BLOB, &c->raw);
	if (err)
		return err;
	r = (struct rd){ c->raw.p, c->raw.p + c->raw.len, false };
	c->n = rd_uvarint(&r);
	c->all_one = rd_uvarint(&r) & 1;
	if (r.bad || c->n > c->raw.len || c->n > CHUNK_MAX) {
		c->n = 0;
		return -EINVAL;
	}
	if (c->n > c->cap) {
		free(c->t);
		free(c->stack);
		free(c->value);
		c->t = malloc(c->n * sizeof(*c->t));
		c->stack = malloc(c->n * sizeof(*c->stack));
		c->value = malloc(c->n * sizeof(*c->value));
		c->cap = c->n;
		if (!c->t || !c->stack || !c->value) {
			c->cap = 0;
			c->n = 0;
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < c->n; i++) {
		t += rd_uvarint(&r);
		c->t[i] = t;
	}
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
	err = zblob_unpack(blob, len, CHUNK_MAX_BLOB, tmp);
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
	err = zblob_unpack(blob, len, CHUNK_MAX_BLOB, tmp);
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
