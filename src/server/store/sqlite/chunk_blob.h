/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the codec files (chunk.c, ivchunk.c, blocks.c) share, not the store: how a payload is
 * stored (zstd, or raw where that is shorter), the leading format number, and format 3's
 * byte-plane columns.
 */
#ifndef GPUSCOPE_SQLITE_CHUNK_BLOB_H
#define GPUSCOPE_SQLITE_CHUNK_BLOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "server/codec.h"

/* b's bytes as a stored blob: zstd at CHUNK_ZLEVEL, or a 0 byte and the bytes as they are where
 * that is shorter. Frees b either way; *ret malloc'ed. 0 or -ENOMEM/-EINVAL. */
int blob_pack(struct buf *b, uint8_t **ret, size_t *ret_len);
/* The bytes blob_pack() wrapped, appended to b; at most max. 0 or -EINVAL/-E2BIG/-ENOMEM. */
int blob_unpack(const void *blob, size_t len, size_t max, struct buf *b);
/* tmp (emptied) holds the blob's bytes, r reads them. 0 or -EINVAL/-E2BIG/-ENOMEM. */
int blob_read(const void *blob, size_t len, struct buf *tmp, struct rd *r);
/* A sample or interval chunk's format: 1 (it starts with its count, never 0), or that of the
 * uvarint after a leading 0 (read past); -EINVAL for one these files do not write. */
int blob_format(struct rd *r);

/* Format 3's byte-plane columns: count uvarints of in written as planes (chunk.c says how). */
void planes_put(const struct buf *in, size_t count, struct buf *out);
/* A byte-plane column being read: count values at p, w bytes each. */
struct pcol {
	const uint8_t *p;
	size_t count, w, i;
};

/* Opens the byte-plane column of count values at r (moving r past it); r->bad if short. */
void pcol_open(struct pcol *c, struct rd *r, size_t count);
/* The column's next value (0 past its end, which sets *bad); pcol_snext() zigzag-decoded. */
uint64_t pcol_next(struct pcol *c, bool *bad);
int64_t pcol_snext(struct pcol *c, bool *bad);
/* Grows *v (elements of size sz, capacity *cap) to hold n. 0 or -ENOMEM. */
int arr_grow(void *v, size_t *cap, size_t n, size_t sz);

#endif
