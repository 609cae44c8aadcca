/* SPDX-License-Identifier: Apache-2.0 */
/* Body compression (zstd, gzip, as named by Content-Encoding) and bounded decompression. */
#ifndef GPUSCOPE_COMPRESS_H
#define GPUSCOPE_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum compression {
	COMPRESS_ZSTD = 0,
	COMPRESS_GZIP,
	COMPRESS_NONE,
};

/* "zstd", "gzip", "identity": the Content-Encoding value; also the spool file extension's key. */
const char *compression_name(enum compression c);
/* Parses "zstd", "gzip" or "none"/"identity"; -EINVAL otherwise. */
int compression_parse(const char *s);

/*
 * Compresses in[0..len) at the codec's default level. *ret is malloc'ed; the caller frees it.
 * Returns 0 or -errno (-ENOMEM, -EIO on a codec error).
 */
int compress_buf(enum compression c, const uint8_t *in, size_t len, uint8_t **ret, size_t *ret_len);

/*
 * Called with the whole output so far after each decompressed chunk (once for an identity
 * body): returns 0 to go on, or -errno to stop decompressing with that error (so a bomb is
 * refused after a bounded amount of output, see batch_scan()).
 */
typedef int (*decompress_check_fn)(void *ctx, const uint8_t *p, size_t len);

/*
 * Decompresses a body. encoding: NULL/"identity", "gzip" (or "deflate"), "zstd".
 * Output at most max bytes (-E2BIG beyond), -EINVAL for corrupt or truncated input,
 * -EPROTONOSUPPORT for an unknown encoding, or check's error. check may be NULL. On success
 * *out is malloc'ed (or NULL with *out_len 0 for an identity body, which the caller uses in
 * place).
 */
int decompress_buf(const char *encoding, const uint8_t *in, size_t len, size_t max,
		   decompress_check_fn check, void *ctx, uint8_t **out, size_t *out_len);

#endif
