/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dictionary blobs (chunk.h): a stack's location ids, location blocks and stack blocks, encoders
 * beside their decoders; and the recompression of any settled blob.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include "server/store/sqlite/chunk.h"
#include "server/store/sqlite/chunk_blob.h"

void stack_locs_encode(const uint64_t *ids, size_t n, struct buf *b)
{
	if (!n)
		return;
	buf_uvarint(b, 0);	/* root first */
	buf_uvarint(b, ids[n - 1]);
	for (size_t i = n - 1; i-- > 0;)
		buf_svarint(b, (int64_t)(ids[i] - ids[i + 1]));
}

int stack_locs_decode(const void *blob, size_t len, uint64_t *ids, size_t max, size_t *ret_n)
{
	struct rd r = { blob, blob ? (const uint8_t *)blob + len : NULL, false };
	bool root_first = len && !*(const uint8_t *)blob;
	uint64_t v = 0;
	size_t n = 0;
	int err = 0;

	if (root_first)
		r.p++;
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
	for (size_t i = 0; root_first && i < n / 2; i++) {	/* leaf first again */
		uint64_t t = ids[i];

		ids[i] = ids[n - 1 - i];
		ids[n - 1 - i] = t;
	}
	*ret_n = n;
	return err;
}

/* ---- location blocks ---------------------------------------------------------------------- */

int loc_block_encode(const struct lrow *r, size_t n, bool dict, uint8_t **ret, size_t *ret_len)
{
	struct buf b = { 0 };
	uint64_t prev = 0;

	if (dict) {	/* format 2 (schema 10): uvarint 0 (format 1 has n >= 1), 2 */
		buf_uvarint(&b, 0);
		buf_uvarint(&b, 2);
	}
	buf_uvarint(&b, n);
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, r[i].id - prev);
		prev = r[i].id;
	}
	for (int k = 0; k < 4; k++) {
		uint64_t last = 0;

		for (size_t i = 0; i < n; i++) {
			if (!dict) {
				buf_put(&b, r[i].str[k], strlen(r[i].str[k]) + 1);
				continue;
			}
			buf_svarint(&b, (int64_t)(r[i].sid[k] - last));
			last = r[i].sid[k];
		}
	}
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, r[i].line);
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, r[i].address);
	for (size_t i = 0; i < n; i++)
		buf_uvarint(&b, r[i].flags);
	return blob_pack(&b, ret, ret_len);
}

/*
 * The start of a location or stack block: the blob unpacked into raw, r reading it, the
 * entry count read (at most one per remaining byte). 0 or -errno (*n then 0).
 */
static int block_open(struct buf *raw, const void *blob, size_t len, struct rd *r, size_t *n)
{
	int err;

	*n = 0;
	err = blob_read(blob, len, raw, r);
	if (err)
		return err;
	*n = rd_uvarint(r);
	if (r->bad || *n > (size_t)(r->end - r->p)) {
		*n = 0;
		return -EINVAL;
	}
	return 0;
}

int loc_block_decode(struct lblock *b, const void *blob, size_t len,
		     const char *(*str)(void *ctx, uint64_t sid), void *ctx)
{
	uint64_t id = 0;
	struct rd r;
	int err;

	b->n = 0;
	b->dict = false;
	b->strs.len = 0;
	err = block_open(&b->raw, blob, len, &r, &b->n);
	if (err)
		return err;
	if (!b->n && r.p < r.end) {	/* format 2: uvarint 0, 2, n */
		b->dict = rd_uvarint(&r) == 2;
		b->n = rd_uvarint(&r);
		if (!b->dict || r.bad || b->n > (size_t)(r.end - r.p)) {
			b->n = 0;
			return -EINVAL;
		}
	}
	if (arr_grow(&b->r, &b->cap, b->n ? b->n : 1, sizeof(*b->r))) {
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
		uint64_t sid = 0;

		for (size_t i = 0; i < b->n && b->dict; i++) {
			const char *v;

			sid += (uint64_t)rd_svarint(&r);
			v = sid ? (str ? str(ctx, sid) : NULL) : "";
			if (!v) {
				r.bad = true;	/* a string the dictionary does not have */
				break;
			}
			/* copied: the dictionary may lose it once the caller lets go of it;
			 * offsets until every one is in (strs may move) */
			b->r[i].sid[k] = sid;
			b->r[i].str[k] = (const char *)(uintptr_t)b->strs.len;
			buf_put(&b->strs, v, strlen(v) + 1);
		}
		for (size_t i = 0; i < b->n && !b->dict; i++) {
			const uint8_t *z = memchr(r.p, 0, (size_t)(r.end - r.p));

			if (!z) {
				r.bad = true;
				break;
			}
			b->r[i].sid[k] = 0;
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
	if (r.bad || b->strs.oom) {
		b->n = 0;
		return r.bad ? -EINVAL : -ENOMEM;
	}
	for (size_t i = 0; i < b->n && b->dict; i++)
		for (int k = 0; k < 4; k++)
			b->r[i].str[k] = (const char *)b->strs.p + (uintptr_t)b->r[i].str[k];
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
	buf_done(&b->strs);
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
	return blob_pack(&b, ret, ret_len);
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
	if (arr_grow(&b->id, &cap, b->n + 1, sizeof(*b->id)) ||
	    (cap = b->cap, arr_grow(&b->locs, &cap, b->n + 1, sizeof(*b->locs))) ||
	    (cap = b->cap, arr_grow(&b->len, &cap, b->n + 1, sizeof(*b->len)))) {
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

int blob_recompress(const void *blob, size_t len, void *zctx, int level, struct buf *tmp,
		    uint8_t **ret, size_t *ret_len)
{
	const uint8_t *p = blob;
	uint8_t *z;
	size_t bound, n;
	int err;

	if (!len || !p[0])
		return 0;	/* stored as it is: zstd made it longer */
	tmp->len = 0;
	err = zblob_unpack(blob, len, CHUNK_MAX_BLOB, tmp);
	if (err)
		return err;
	bound = ZSTD_compressBound(tmp->len);
	z = malloc(bound);
	if (!z)
		return -ENOMEM;
	n = ZSTD_compressCCtx(zctx, z, bound, tmp->p, tmp->len, level);
	if (ZSTD_isError(n) || n >= len) {
		free(z);
		return ZSTD_isError(n) ? -EINVAL : 0;
	}
	*ret = z;
	*ret_len = n;
	return 1;
}
