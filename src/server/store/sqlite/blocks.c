/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dictionary blobs (chunk.h): a stack's location ids, location blocks and stack blocks, encoders
 * beside their decoders; and the recompression of any settled blob.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include "common/hmap.h"
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

/*
 * Format 3's per-module state (encoder and decoder alike): the block's recent modules, most
 * recent first, for the module column's move-to-front codes; and each module's last build id,
 * file and address in the block, which its next location's are coded against.
 */
#define LOC_MODS_MTF	64

struct modlast {
	uint64_t bid, file, addr;
};

struct modstate {
	uint64_t mtf[LOC_MODS_MTF];
	size_t nmtf;
	struct u64map idx;	/* module sid -> index into last */
	struct modlast *last;
	size_t nlast, caplast;
};

/* m's 1-based move-to-front position before it moved to the front, 0 if it was not there
 * (then the oldest goes when the list is full). */
static size_t mod_mtf(struct modstate *st, uint64_t m)
{
	size_t k = 0, code;

	while (k < st->nmtf && st->mtf[k] != m)
		k++;
	if (k < st->nmtf) {
		code = k + 1;
	} else {
		code = 0;
		if (st->nmtf < LOC_MODS_MTF)
			st->nmtf++;
		k = st->nmtf - 1;
	}
	memmove(&st->mtf[1], &st->mtf[0], k * sizeof(st->mtf[0]));
	st->mtf[0] = m;
	return code;
}

/* Module m's last values in the block (zeros the first time); NULL out of memory. */
static struct modlast *mod_last(struct modstate *st, uint64_t m)
{
	int added = 0;
	uint64_t *v = u64map_upsert(&st->idx, m, st->nlast, &added);

	if (!v)
		return NULL;
	if (added) {
		if (arr_grow(&st->last, &st->caplast, st->nlast + 1, sizeof(*st->last)))
			return NULL;
		memset(&st->last[st->nlast++], 0, sizeof(*st->last));
	}
	return &st->last[*v];
}

static void modstate_done(struct modstate *st)
{
	u64map_done(&st->idx);
	free(st->last);
}

int loc_block_encode(const struct lrow *r, size_t n, bool dict, uint8_t **ret, size_t *ret_len)
{
	struct buf b = { 0 }, col[5] = { 0 };	/* format 3: modules, build ids, files, lines,
						 * addresses */
	struct modstate st = { 0 };
	uint64_t prev = 0;
	int err = 0;

	if (dict) {	/* format 3 (schema 14; 2 in schema 10): uvarint 0 (format 1 has n >= 1), 3 */
		buf_uvarint(&b, 0);
		buf_uvarint(&b, 3);
	}
	buf_uvarint(&b, n);
	for (size_t i = 0; i < n; i++) {
		buf_uvarint(&b, r[i].id - prev);
		prev = r[i].id;
	}
	if (dict) {
		uint64_t last = 0;

		for (size_t i = 0; i < n; i++) {	/* functions: differences */
			buf_svarint(&b, (int64_t)(r[i].sid[0] - last));
			last = r[i].sid[0];
		}
		for (size_t i = 0; i < n && !err; i++) {
			uint64_t m = r[i].sid[1];
			size_t k = mod_mtf(&st, m);
			struct modlast *l = mod_last(&st, m);

			if (!l) {
				err = -ENOMEM;
				break;
			}
			buf_uvarint(&col[0], k);
			if (!k)
				buf_svarint(&col[0], (int64_t)(m - (i ? r[i - 1].sid[1] : 0)));
			buf_svarint(&col[1], (int64_t)(r[i].sid[2] - l->bid));
			buf_svarint(&col[2], (int64_t)(r[i].sid[3] - l->file));
			buf_uvarint(&col[3], r[i].line);
			buf_svarint(&col[4], (int64_t)(r[i].address - l->addr));
			l->bid = r[i].sid[2];
			l->file = r[i].sid[3];
			l->addr = r[i].address;
		}
		for (int k = 0; k < 5; k++) {
			b.oom |= col[k].oom;
			buf_put(&b, col[k].p, col[k].len);
			buf_done(&col[k]);
		}
		modstate_done(&st);
		for (size_t i = 0; i < n; i++)
			buf_uvarint(&b, r[i].flags);
		if (err) {
			buf_done(&b);
			return err;
		}
		return blob_pack(&b, ret, ret_len);
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
	struct modstate st = { 0 };
	uint64_t id = 0, fmt = 1;
	struct rd r;
	int err;

	b->n = 0;
	b->dict = false;
	b->strs.len = 0;
	err = block_open(&b->raw, blob, len, &r, &b->n);
	if (err)
		return err;
	if (!b->n && r.p < r.end) {	/* formats 2 and 3: uvarint 0, 2 or 3, n */
		fmt = rd_uvarint(&r);
		b->dict = fmt == 2 || fmt == 3;
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
	if (fmt == 3) {
		/* each row's module state, found once (an index: the states' array may move) */
		size_t *mi = malloc((b->n ? b->n : 1) * sizeof(*mi));
		uint64_t fn = 0;

		if (!mi) {
			b->n = 0;
			return -ENOMEM;
		}
		for (size_t i = 0; i < b->n; i++) {
			fn += (uint64_t)rd_svarint(&r);
			b->r[i].sid[0] = fn;
		}
		for (size_t i = 0; i < b->n && !r.bad; i++) {	/* modules: move-to-front codes */
			uint64_t k = rd_uvarint(&r), m;
			struct modlast *l;

			if (k > st.nmtf) {
				r.bad = true;
				break;
			}
			m = k ? st.mtf[k - 1] : (i ? b->r[i - 1].sid[1] : 0) + (uint64_t)rd_svarint(&r);
			mod_mtf(&st, m);
			b->r[i].sid[1] = m;
			l = mod_last(&st, m);
			if (!l) {
				modstate_done(&st);
				free(mi);
				b->n = 0;
				return -ENOMEM;
			}
			mi[i] = (size_t)(l - st.last);
		}
		for (int c = 0; c < 2 && !r.bad; c++) {	/* build ids, files: on the module's last */
			for (size_t i = 0; i < b->n; i++) {
				struct modlast *l = &st.last[mi[i]];
				uint64_t *v = c ? &l->file : &l->bid;

				*v += (uint64_t)rd_svarint(&r);
				b->r[i].sid[2 + c] = *v;
			}
		}
		for (size_t i = 0; i < b->n; i++)
			b->r[i].line = rd_uvarint(&r);
		for (size_t i = 0; i < b->n && !r.bad; i++) {
			struct modlast *l = &st.last[mi[i]];

			l->addr += (uint64_t)rd_svarint(&r);
			b->r[i].address = l->addr;
		}
		modstate_done(&st);
		free(mi);
	}
	for (int k = 0; k < 4 && !r.bad; k++) {
		uint64_t sid = 0;

		for (size_t i = 0; i < b->n && b->dict; i++) {
			const char *v;

			if (fmt == 2) {
				sid += (uint64_t)rd_svarint(&r);
				b->r[i].sid[k] = sid;
			}
			v = b->r[i].sid[k] ? (str ? str(ctx, b->r[i].sid[k]) : NULL) : "";
			if (!v) {
				r.bad = true;	/* a string the dictionary does not have */
				break;
			}
			/* copied: the dictionary may lose it once the caller lets go of it;
			 * offsets until every one is in (strs may move) */
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
	for (size_t i = 0; i < b->n && fmt != 3; i++)
		b->r[i].line = rd_uvarint(&r);
	for (size_t i = 0; i < b->n && fmt != 3; i++)
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
