/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Byte-level helpers of the server: a growable buffer, varints, zstd-compressed blobs and JSON
 * string escaping (request bodies are decompressed by common/compress.h).
 */
#ifndef GPUSCOPE_CODEC_H
#define GPUSCOPE_CODEC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Growable byte buffer; zero-initialized is empty. On ENOMEM `oom` is set and writes stop. */
struct buf {
	uint8_t *p;
	size_t len, cap;
	bool oom;
};

void buf_done(struct buf *b);
bool buf_reserve(struct buf *b, size_t more);
void buf_put(struct buf *b, const void *p, size_t n);
void buf_puts(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal, quotes included. */
void buf_json_str(struct buf *b, const char *s);
/* Appends a number as JSON (non-finite as null). */
void buf_json_num(struct buf *b, double v);
/* Appends n name/value pairs (2n strings) as a JSON object. */
void buf_json_labels(struct buf *b, const char *const *pairs, size_t n);
/* Appends a time in Unix ns as JSON Unix milliseconds with three decimals. */
void buf_json_ms(struct buf *b, uint64_t ns);

static inline void buf_uvarint(struct buf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;

	while (v >= 0x80) {
		tmp[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	tmp[n++] = (uint8_t)v;
	buf_put(b, tmp, n);
}

/* Signed to unsigned so that small magnitudes stay small (protobuf's sint64), and back. */
static inline uint64_t zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static inline void buf_svarint(struct buf *b, int64_t v)
{
	buf_uvarint(b, zigzag(v));
}

/* Reader over a byte range; `bad` is set on overrun and reads return 0 from then on. */
struct rd {
	const uint8_t *p, *end;
	bool bad;
};

static inline uint64_t rd_uvarint(struct rd *r)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64; shift += 7) {
		if (r->p >= r->end) {
			r->bad = true;
			return 0;
		}
		uint8_t c = *r->p++;

		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return v;
	}
	r->bad = true;
	return 0;
}

static inline int64_t rd_svarint(struct rd *r)
{
	return unzigzag(rd_uvarint(r));
}

/* zstd-compresses in into *out (malloc'ed). 0 or -errno. */
int zblob_pack(const uint8_t *in, size_t len, int level, uint8_t **out, size_t *out_len);
/* Decompresses a zblob into b (appending); at most max bytes. 0 or -EINVAL/-E2BIG/-ENOMEM. */
int zblob_unpack(const void *in, size_t len, size_t max, struct buf *b);

#endif
