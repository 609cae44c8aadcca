/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the codec files (chunk.c, ivchunk.c, ivchunk_decode.c, blocks.c) share, not the store:
 * how a payload is stored (zstd, or raw where that is shorter), the leading format number,
 * format 3's byte-plane columns, and the interval encoder's helpers its decoder uses.
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

/* Interval chunks: what the encoder (ivchunk.c) shares with the decoder (ivchunk_decode.c). */
/* Format 3 keeps the numbers of attrs named *_ns (durations) in its time unit. */
bool iv_ns_name(const char *name);
/* The value tags of format 2: uvarint 4 x string index, 4 x number + 1, or 2: the row's length
 * (end - start) less the numbers of its columns written before (a thread-state summary's
 * running_ns is its length less runnable_ns and blocked_ns). acc: the sum so far, UINT64_MAX
 * once it does not fit. */
uint64_t iv_acc_add(uint64_t acc, uint64_t v);
/*
 * Format 4's tie groups: the rows not listed (listed[i] false) that share a start (in units,
 * s[i]) with another such row. next[i]: the group's next row (row order), SIZE_MAX after its
 * last; head[i]: whether row i is the first of a group of at least two. An open-addressing
 * table over the starts, so that decoding stays linear. 0 or -ENOMEM.
 */
int iv_tie_groups(const uint64_t *s, const bool *listed, size_t n, size_t *next, bool *head);
/* Order of a tie group's rows as format 4 predicts arrival: by end (a state is sent when it
 * ends), then row. */
int iv_cmp_pred(const void *a, const void *b, void *ctx);

#endif
