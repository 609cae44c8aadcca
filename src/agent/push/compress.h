/* SPDX-License-Identifier: Apache-2.0 */
/* Body compression for the agent's pushes: zstd (default) or gzip, as named by Content-Encoding. */
#ifndef GPUSCOPE_AGENT_COMPRESS_H
#define GPUSCOPE_AGENT_COMPRESS_H

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

#endif
