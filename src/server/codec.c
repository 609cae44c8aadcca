/* SPDX-License-Identifier: Apache-2.0 */
/* Growable buffers, JSON escaping and zstd blobs. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zstd.h>
#include "common/util.h"
#include "server/codec.h"

void buf_done(struct buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

bool buf_reserve(struct buf *b, size_t more)
{
	size_t ncap;
	uint8_t *n;

	if (b->oom)
		return false;
	if (b->len + more <= b->cap)
		return true;
	ncap = b->cap ? b->cap : 256;
	while (ncap < b->len + more)
		ncap *= 2;
	n = realloc(b->p, ncap);
	if (!n) {
		b->oom = true;
		return false;
	}
	b->p = n;
	b->cap = ncap;
	return true;
}

void buf_put(struct buf *b, const void *p, size_t n)
{
	/* nothing to add (p may be NULL: an empty buffer's memcpy source is undefined) */
	if (!n || !buf_reserve(b, n))
		return;
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

void buf_puts(struct buf *b, const char *s)
{
	buf_put(b, s, strlen(s));
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !buf_reserve(b, (size_t)n + 1))
		return;
	va_start(ap, fmt);
	vsnprintf((char *)b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void buf_json_str(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	buf_put(b, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		if (*p == '"' || *p == '\\') {
			char e[2] = { '\\', (char)*p };

			buf_put(b, e, 2);
		} else if (*p < 0x20) {
			char e[6] = { '\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15] };

			buf_put(b, e, 6);
		} else {
			/* Bytes >= 0x80 pass through: names are UTF-8 (invalid UTF-8 stays as is). */
			buf_put(b, p, 1);
		}
	}
	buf_put(b, "\"", 1);
}

void buf_json_num(struct buf *b, double v)
{
	if (!isfinite(v))
		buf_puts(b, "null");
	else if (v == (double)(int64_t)v && fabs(v) < 9e15)
		buf_printf(b, "%lld", (long long)v);
	else
		buf_printf(b, "%.17g", v);
}

void buf_json_labels(struct buf *b, const char *const *pairs, size_t n)
{
	buf_put(b, "{", 1);
	for (size_t i = 0; i < n; i++) {
		if (i)
			buf_put(b, ",", 1);
		buf_json_str(b, pairs[2 * i]);
		buf_put(b, ":", 1);
		buf_json_str(b, pairs[2 * i + 1]);
	}
	buf_put(b, "}", 1);
}

void buf_json_ms(struct buf *b, uint64_t ns)
{
	/* Three decimals: Unix ms with µs resolution still fits a double exactly. */
	buf_printf(b, "%llu.%03llu", (unsigned long long)(ns / NSEC_PER_MSEC),
		   (unsigned long long)(ns % NSEC_PER_MSEC / 1000));
}

int zblob_pack(const uint8_t *in, size_t len, int level, uint8_t **out, size_t *out_len)
{
	size_t bound = ZSTD_compressBound(len), n;
	uint8_t *o = malloc(bound);

	if (!o)
		return -ENOMEM;
	n = ZSTD_compress(o, bound, in, len, level);
	if (ZSTD_isError(n)) {
		free(o);
		return -EINVAL;
	}
	*out = o;
	*out_len = n;
	return 0;
}

int zblob_unpack(const void *in, size_t len, size_t max, struct buf *b)
{
	unsigned long long n = ZSTD_getFrameContentSize(in, len);
	size_t r;

	if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN)
		return -EINVAL;
	if (n > max)
		return -E2BIG;
	if (!buf_reserve(b, (size_t)n + 1))
		return -ENOMEM;
	r = ZSTD_decompress(b->p + b->len, (size_t)n, in, len);
	if (ZSTD_isError(r) || r != n)
		return -EINVAL;
	b->len += r;
	return 0;
}

