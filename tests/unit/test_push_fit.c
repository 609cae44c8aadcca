/* SPDX-License-Identifier: Apache-2.0 */
/* Batch sizing to the server's advertised limits (src/agent/push/fit.c): the header's parsing,
 * and batch_fits() against the server's own size and decoding checks. */
#include <stdlib.h>
#include "agent/push/fit.h"
#include "common/batch.h"
#include "common/compress.h"
#include "test.h"

static bool test_push_fit_parse(void)
{
	struct ingest_limits l;

	ingest_limits_default(&l);
	CHECK(ASSERT_EQ(l.max_body, INGEST_MAX_BODY_DEFAULT, "default body") &&
	      ASSERT_EQ(l.decode_base, BATCH_DECODE_BASE, "default base") &&
	      ASSERT_TRUE(!l.known, "not known yet"));
	CHECK(ASSERT_TRUE(ingest_limits_parse(&l, "max-body=4096, decode-base=100, decode-ratio=3"),
			  "parsed") &&
	      ASSERT_EQ(l.max_body, 4096, "body") && ASSERT_EQ(l.decode_base, 100, "base") &&
	      ASSERT_EQ(l.decode_ratio, 3, "ratio") && ASSERT_TRUE(l.known, "known"));
	/* unknown keys ignored, order free */
	CHECK(ASSERT_TRUE(ingest_limits_parse(&l, "future=1,max-body=8192"), "with unknown key") &&
	      ASSERT_EQ(l.max_body, 8192, "body") && ASSERT_EQ(l.decode_ratio, 3, "ratio kept"));
	/* no valid max-body: nothing changes */
	CHECK(ASSERT_TRUE(!ingest_limits_parse(&l, "decode-base=1"), "no body: refused") &&
	      ASSERT_EQ(l.decode_base, 100, "unchanged") &&
	      ASSERT_TRUE(!ingest_limits_parse(&l, "max-body=12"), "tiny body refused") &&
	      ASSERT_TRUE(!ingest_limits_parse(&l, "max-body=x"), "not a number") &&
	      ASSERT_TRUE(!ingest_limits_parse(&l, ""), "empty") &&
	      ASSERT_EQ(l.max_body, 8192, "unchanged body"));
	return true;
}

/* A batch of n intervals whose attrs name a kernel of name_len bytes. */
static bool encoded(unsigned n, size_t name_len, uint8_t **raw, size_t *raw_len, size_t *zlen)
{
	struct batch *b = batch__new("fit");
	char *name = malloc(name_len + 1);
	uint8_t *z = NULL;
	bool ok = b && name;

	if (name) {
		memset(name, 'k', name_len);
		name[name_len] = 0;
	}
	for (unsigned i = 0; ok && i < n; i++) {
		struct label a[1] = { { "name", name } };

		ok = !batch__interval(b, "gpu_kernel", NULL, 0, 1000000000ull + i, 1000000500ull + i,
				      -1, a, 1);
	}
	ok = ok && !batch__encode(b, raw, raw_len) &&
	     !compress_buf(COMPRESS_ZSTD, *raw, *raw_len, &z, zlen);
	free(z);
	free(name);
	batch__free(b);
	return ok;
}

static bool test_push_fit_checks(void)
{
	struct ingest_limits l;
	uint8_t *raw = NULL;
	size_t raw_len = 0, zlen = 0;
	bool ok;

	ingest_limits_default(&l);
	/* 20 000 intervals x 8 KiB names: ~160 MiB resolved from a small zstd body, past the
	 * default decoding budget (16 MiB + 64 x the body) though within every size limit */
	if (!ASSERT_TRUE(encoded(20000, 8192, &raw, &raw_len, &zlen), "encode"))
		return false;
	ok = ASSERT_TRUE(zlen < l.max_body && raw_len < l.max_body, "within the body sizes") &&
	     ASSERT_TRUE(!batch_fits(&l, raw, raw_len, zlen), "past the decoding budget");
	free(raw);
	CHECK(ok);
	CHECK(ASSERT_TRUE(encoded(200, 8192, &raw, &raw_len, &zlen), "encode small"));
	ok = ASSERT_TRUE(batch_fits(&l, raw, raw_len, zlen), "a small one fits");
	l.max_body = raw_len - 1;	/* the decompressed size counts too */
	ok = ok && ASSERT_TRUE(!batch_fits(&l, raw, raw_len, zlen), "decompressed over max-body");
	l.max_body = raw_len;
	ok = ok && ASSERT_TRUE(batch_fits(&l, raw, raw_len, zlen), "exactly max-body fits");
	free(raw);
	return ok;
}

TEST_MAIN(T(test_push_fit_parse), T(test_push_fit_checks))
