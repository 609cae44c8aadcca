/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one compression module: zstd and gzip compression of encoded batches (the agent's pushes
 * and spool) and bounded decompression of request bodies (the server's ingest, the agent's
 * 413 split). libzstd, zlib.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>
#include <zstd.h>
#include "common/compress.h"

static const char *const names[] = {
	[COMPRESS_ZSTD] = "zstd",
	[COMPRESS_GZIP] = "gzip",
	[COMPRESS_NONE] = "identity",
};

const char *compression_name(enum compression c)
{
	return (unsigned)c <= COMPRESS_NONE ? names[c] : "?";
}

int compression_parse(const char *s)
{
	if (!strcmp(s, "zstd"))
		return COMPRESS_ZSTD;
	if (!strcmp(s, "gzip"))
		return COMPRESS_GZIP;
	if (!strcmp(s, "none") || !strcmp(s, "identity"))
		return COMPRESS_NONE;
	return -EINVAL;
}

static int do_zstd(const uint8_t *in, size_t len, uint8_t **ret, size_t *ret_len)
{
	size_t cap = ZSTD_compressBound(len), n;
	uint8_t *out = malloc(cap ? cap : 1);

	if (!out)
		return -ENOMEM;
	n = ZSTD_compress(out, cap, in, len, 3);
	if (ZSTD_isError(n)) {
		free(out);
		return -EIO;
	}
	*ret = out;
	*ret_len = n;
	return 0;
}

static int do_gzip(const uint8_t *in, size_t len, uint8_t **ret, size_t *ret_len)
{
	z_stream zs = { 0 };
	uint8_t *out = NULL;
	size_t cap;
	int err;

	if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
	    Z_OK)
		return -ENOMEM;
	cap = deflateBound(&zs, len) + 32;
	out = malloc(cap);
	if (!out) {
		err = -ENOMEM;
		goto out_end;
	}
	zs.next_in = (Bytef *)in;
	zs.avail_in = len;
	zs.next_out = out;
	zs.avail_out = cap;
	if (deflate(&zs, Z_FINISH) != Z_STREAM_END) {
		err = -EIO;
		goto out_free;
	}
	*ret = out;
	*ret_len = zs.total_out;
	deflateEnd(&zs);
	return 0;
out_free:
	free(out);
out_end:
	deflateEnd(&zs);
	return err;
}

int compress_buf(enum compression c, const uint8_t *in, size_t len, uint8_t **ret, size_t *ret_len)
{
	uint8_t *out;

	switch (c) {
	case COMPRESS_ZSTD:
		return do_zstd(in, len, ret, ret_len);
	case COMPRESS_GZIP:
		return do_gzip(in, len, ret, ret_len);
	case COMPRESS_NONE:
		out = malloc(len ? len : 1);
		if (!out)
			return -ENOMEM;
		memcpy(out, in, len);
		*ret = out;
		*ret_len = len;
		return 0;
	}
	return -EINVAL;
}

/* Growable output of the decompressors. */
struct obuf {
	uint8_t *p;
	size_t len, cap;
};

static bool obuf_reserve(struct obuf *b, size_t more)
{
	size_t ncap;
	uint8_t *n;

	if (b->len + more <= b->cap)
		return true;
	ncap = b->cap ? b->cap : 4096;
	while (ncap < b->len + more)
		ncap *= 2;
	n = realloc(b->p, ncap);
	if (!n)
		return false;
	b->p = n;
	b->cap = ncap;
	return true;
}

static int gunzip(const uint8_t *in, size_t len, size_t max, struct obuf *b, decompress_check_fn check,
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

		if (!obuf_reserve(b, chunk)) {
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

static int unzstd(const uint8_t *in, size_t len, size_t max, struct obuf *b, decompress_check_fn check,
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

		if (!obuf_reserve(b, chunk)) {
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

int decompress_buf(const char *encoding, const uint8_t *in, size_t len, size_t max,
		   decompress_check_fn check, void *ctx, uint8_t **out, size_t *out_len)
{
	struct obuf b = { 0 };
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
		free(b.p);
		return err;
	}
	*out = b.p ? b.p : malloc(1);
	*out_len = b.len;
	return *out ? 0 : -ENOMEM;
}
