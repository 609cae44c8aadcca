/* SPDX-License-Identifier: Apache-2.0 */
/* zstd and gzip compression of encoded batches (libzstd, zlib). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#include "agent/push/compress.h"

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
