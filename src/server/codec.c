/* SPDX-License-Identifier: Apache-2.0 */
/* Growable buffers, JSON escaping, zstd blobs and bounded gzip/zstd body decompression. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>
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
	if (!buf_reserve(b, n))
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

static int gunzip(const uint8_t *in, size_t len, size_t max, struct buf *b, body_check_fn check,
		  void *ctx)
{
	z_stream zs = { 0 };
	int rc, err = 0;

	/* 15 + 32: zlib or gzip header, detected. */
	if (inflateInit2(&zs, 15 + 32) != Z_OK)
		return -ENOMEM;
	zs.next_in = (Bytef *)in;
	zs.avail_in = (uInt)len;
	for (;;) {
		size_t room = b->len < max ? (max - b->len) : 0;
		size_t chunk = room < 65536 ? room + 1 : 65536;	/* +1 detects "over max" */

		if (!buf_reserve(b, chunk)) {
			err = -ENOMEM;
			break;
		}
		zs.next_out = b->p + b->len;
		zs.avail_out = (uInt)chunk;
		rc = inflate(&zs, Z_NO_FLUSH);
		b->len += chunk - zs.avail_out;
		if (b->len > max) {
			err = -E2BIG;
			break;
		}
		if (check && (err = check(ctx, b->p, b->len)))
			break;
		if (rc == Z_STREAM_END) {
			if (zs.avail_in)
				err = -EINVAL;	/* trailing garbage */
			break;
		}
		if (rc != Z_OK) {
			err = rc == Z_MEM_ERROR ? -ENOMEM : -EINVAL;
			break;
		}
		if (!zs.avail_in && zs.avail_out) {
			err = -EINVAL;	/* truncated */
			break;
		}
	}
	inflateEnd(&zs);
	return err;
}

static int unzstd(const uint8_t *in, size_t len, size_t max, struct buf *b, body_check_fn check,
		  void *ctx)
{
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	ZSTD_inBuffer ib = { in, len, 0 };
	size_t rc = 1;
	int err = 0;

	if (!dc)
		return -ENOMEM;
	ZSTD_DCtx_setParameter(dc, ZSTD_d_windowLogMax, 27);
	while (ib.pos < ib.size || rc != 0) {
		size_t room = b->len < max ? (max - b->len) : 0;
		size_t chunk = room < 131072 ? room + 1 : 131072;
		ZSTD_outBuffer ob;

		if (!buf_reserve(b, chunk)) {
			err = -ENOMEM;
			break;
		}
		ob = (ZSTD_outBuffer){ b->p + b->len, chunk, 0 };
		rc = ZSTD_decompressStream(dc, &ob, &ib);
		if (ZSTD_isError(rc)) {
			err = -EINVAL;
			break;
		}
		b->len += ob.pos;
		if (b->len > max) {
			err = -E2BIG;
			break;
		}
		if (check && (err = check(ctx, b->p, b->len)))
			break;
		if (rc == 0 && ib.pos == ib.size)
			break;
		if (ib.pos == ib.size && ob.pos < chunk && rc != 0) {
			err = -EINVAL;	/* truncated frame */
			break;
		}
	}
	ZSTD_freeDCtx(dc);
	return err;
}

int body_decode(const char *encoding, const uint8_t *in, size_t len, size_t max,
		body_check_fn check, void *ctx, uint8_t **out, size_t *out_len)
{
	struct buf b = { 0 };
	int err;

	*out = NULL;
	*out_len = 0;
	if (!encoding || !*encoding || !strcasecmp(encoding, "identity"))
		return len > max ? -E2BIG : check ? check(ctx, in, len) : 0;
	if (!strcasecmp(encoding, "gzip") || !strcasecmp(encoding, "x-gzip") ||
	    !strcasecmp(encoding, "deflate"))
		err = gunzip(in, len, max, &b, check, ctx);
	else if (!strcasecmp(encoding, "zstd"))
		err = unzstd(in, len, max, &b, check, ctx);
	else
		return -EPROTONOSUPPORT;
	if (err) {
		buf_done(&b);
		return err;
	}
	*out = b.p ? b.p : malloc(1);
	*out_len = b.len;
	return *out ? 0 : -ENOMEM;
}
