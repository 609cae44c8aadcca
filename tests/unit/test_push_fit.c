/* SPDX-License-Identifier: Apache-2.0 */
/* Batch sizing to the server's advertised limits (src/agent/push/fit.c): the header's parsing,
 * batch_fits() against the server's own size and decoding checks, and batch_fits_bound() (no
 * decoding) never saying "fits" for a batch batch_fits() refuses, near each limit. */
#include <stdio.h>
#include <stdlib.h>
#include "agent/push/fit.h"
#include "common/batch.h"
#include "common/compress.h"
#include "gpuscope/v1/batch.pb-c.h"
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

/* ---- the bound against the full check ------------------------------------------------------ */

struct verdicts {
	unsigned cases, bound_fits, full_fits;	/* limit settings tried; "fits" answers */
};

/* What validate() takes from the decoding budget: each label set once, each interval's attrs. */
static uint64_t resolved_bytes(const Gpuscope__V1__Batch *m)
{
	uint64_t n = 0;

	for (size_t i = 0; i < m->n_label_sets; i++)
		for (size_t k = 0; k < m->label_sets[i]->n_pairs; k++)
			n += strlen(m->strings[m->label_sets[i]->pairs[k]]) + 1;
	for (size_t i = 0; i < m->n_intervals; i++)
		for (size_t k = 0; k < m->intervals[i]->n_attrs; k++)
			n += strlen(m->strings[m->intervals[i]->attrs[k]]) + 1;
	return n;
}

/* The counts are the decoded message's (groups: at least those encoded). */
static bool counts_match(const char *what, const struct batch_counts *c,
			 const Gpuscope__V1__Batch *m)
{
	uint64_t sb = 0, fr = 0, le = 0, ns = 0, np = 0, ae = 0;

	for (size_t i = 0; i < m->n_strings; i++)
		sb += strlen(m->strings[i]);
	for (size_t i = 0; i < m->n_stacks; i++)
		fr += m->stacks[i]->n_locations;
	for (size_t i = 0; i < m->n_label_sets; i++)
		le += m->label_sets[i]->n_pairs;
	for (size_t i = 0; i < m->n_samples; i++)
		ns += m->samples[i]->n_stack;
	for (size_t i = 0; i < m->n_series; i++)
		np += m->series[i]->n_value;
	for (size_t i = 0; i < m->n_intervals; i++)
		ae += m->intervals[i]->n_attrs;
	return ASSERT_EQ(c->strings, m->n_strings, what) && ASSERT_EQ(c->string_bytes, sb, what) &&
	       ASSERT_EQ(c->locations, m->n_locations, what) &&
	       ASSERT_EQ(c->stacks, m->n_stacks, what) && ASSERT_EQ(c->frames, fr, what) &&
	       ASSERT_EQ(c->label_sets, m->n_label_sets, what) &&
	       ASSERT_EQ(c->label_entries, le, what) &&
	       ASSERT_TRUE(c->groups >= m->n_samples, what) && ASSERT_EQ(c->samples, ns, what) &&
	       ASSERT_EQ(c->series, m->n_series, what) && ASSERT_EQ(c->points, np, what) &&
	       ASSERT_EQ(c->intervals, m->n_intervals, what) &&
	       ASSERT_EQ(c->attr_entries, ae, what);
}

/* One limit setting: the bound may say "fits" only where the full check does. */
static bool one(const char *what, const struct ingest_limits *l, const struct batch_counts *c,
		const uint8_t *raw, size_t raw_len, size_t zlen, struct verdicts *v)
{
	bool full = batch_fits(l, raw, raw_len, zlen);
	bool bound = batch_fits_bound(l, c, raw_len, zlen);

	v->cases++;
	v->bound_fits += bound;
	v->full_fits += full;
	if (bound && !full)
		fprintf(stderr, "  %s: max-body %" PRIu64 ", decode-base %" PRIu64 ", ratio %" PRIu64
			", %zu bytes (%zu compressed): the bound says it fits, the decoder refuses\n",
			what, l->max_body, l->decode_base, l->decode_ratio, raw_len, zlen);
	return !bound || full;
}

/* Budget base + ratio x zlen == need + d, with ratio 1 (or base 0 when need is smaller). */
static void budget_at(struct ingest_limits *l, uint64_t need, int64_t d, size_t zlen)
{
	uint64_t want = (int64_t)need + d > 0 ? (uint64_t)((int64_t)need + d) : 0;

	l->decode_ratio = 1;
	l->decode_base = want > zlen ? want - zlen : 0;
}

/*
 * Encodes b (freed) and compares the two checks under the limits that matter for it: the
 * defaults, max-body at the raw and compressed sizes +-1, and the decoding budget around the
 * exact need (the scan's estimate + the resolved label bytes) and around the bound's own.
 * Also: the bound's estimate is at least the scan's, its label bytes are the decoder's.
 */
static bool compare(const char *what, struct batch *b, struct verdicts *v)
{
	struct batch_counts c;
	struct ingest_limits l;
	struct batch_scan s;
	Gpuscope__V1__Batch *m = NULL;
	uint8_t *raw = NULL, *z = NULL;
	size_t raw_len = 0, zlen = 0;
	uint64_t exact, bound;
	char why[256];
	bool ok;

	batch__counts(b, &c);
	ok = ASSERT_TRUE(!batch__encode(b, &raw, &raw_len), what) &&
	     ASSERT_TRUE(!compress_buf(COMPRESS_ZSTD, raw, raw_len, &z, &zlen), what);
	batch__free(b);
	if (!ok)
		goto out;
	batch_scan_init(&s, UINT64_MAX / 2);
	if (!batch_scan(&s, raw, raw_len) && (m = batch_decode_scanned(&s, raw, raw_len, why,
								       sizeof(why)))) {
		uint64_t lb = resolved_bytes(m);

		ok = ASSERT_TRUE(batch_scan_bound(&c) >= s.est, what) &&
		     ASSERT_EQ(c.label_bytes, lb, what) && counts_match(what, &c, m);
		batch_decode_free(m);
	}
	exact = s.est + c.label_bytes;
	bound = batch_scan_bound(&c) + c.label_bytes;
	if (getenv("FIT_VERBOSE"))
		fprintf(stderr, "  %s: %zu bytes (%zu zstd): scan %" PRIu64 ", bound %" PRIu64
			", label bytes %" PRIu64 "\n", what, raw_len, zlen, s.est,
			batch_scan_bound(&c), c.label_bytes);
	ingest_limits_default(&l);
	ok = ok && one(what, &l, &c, raw, raw_len, zlen, v);
	for (int d = -1; ok && d <= 1; d++) {
		ingest_limits_default(&l);
		l.max_body = raw_len + d;
		ok = one(what, &l, &c, raw, raw_len, zlen, v);
		l.max_body = zlen + d;
		ok = ok && one(what, &l, &c, raw, raw_len, zlen, v);
	}
	for (int d = -2; ok && d <= 2; d++) {
		ingest_limits_default(&l);
		budget_at(&l, exact, d, zlen);
		ok = one(what, &l, &c, raw, raw_len, zlen, v);
		budget_at(&l, bound, d, zlen);
		ok = ok && one(what, &l, &c, raw, raw_len, zlen, v);
	}
out:
	free(raw);
	free(z);
	return ok;
}

static struct batch *labelled(const char *node, size_t nsets, size_t value_len)
{
	struct batch *b = batch__new(node);
	struct location f = { "main", "/bin/prog", NULL, NULL, 0, 0x1000, false, false };
	char *val = malloc(value_len + 16);
	int64_t st = b ? batch__stack(b, &f, 1) : -1;

	if (!b || !val || st < 0) {
		free(val);
		batch__free(b);
		return NULL;
	}
	memset(val, 'v', value_len);
	val[value_len] = 0;
	for (size_t i = 0; i < nsets; i++) {
		char pid[24];
		struct label ls[2] = { { "pid", pid }, { "x", val } };

		snprintf(pid, sizeof(pid), "%zu", i);
		if (batch__sample(b, 1700000000000000000ull + i, ls, 2, st, SAMPLE_CPU, 1)) {
			batch__free(b);
			b = NULL;
			break;
		}
	}
	free(val);
	return b;
}

/* A node's batch: samples over stacks sharing prefixes, a few threads, metrics, intervals. */
static struct batch *node_batch(unsigned nsamples, unsigned nivl, size_t attr_len)
{
	struct batch *b = batch__new("node-1");
	char *attr = malloc(attr_len + 1);
	bool ok = b && attr;

	if (attr) {
		memset(attr, 'k', attr_len);
		attr[attr_len] = 0;
	}
	for (unsigned i = 0; ok && i < nsamples; i++) {
		struct location fr[40];
		char fn[40][24], tid[16];
		unsigned depth = 10 + i % 31;
		struct label ls[3] = { { "pid", "42" }, { "comm", "python3" }, { "tid", tid } };
		int64_t st;

		for (unsigned k = 0; k < depth; k++) {
			snprintf(fn[k], sizeof(fn[k]), "fn_%u", (k * 7 + i % 97) % 300);
			fr[k] = (struct location){ fn[k], "/usr/lib/libx.so", "abcd", NULL, 0,
						   0x1000 + k, false, false };
		}
		snprintf(tid, sizeof(tid), "%u", 100 + i % 16);
		st = batch__stack(b, fr, depth);
		ok = st >= 0 && !batch__sample(b, 1700000000000000000ull + i * 1000, ls, 3, st,
					       i % 3 ? SAMPLE_CPU : SAMPLE_OFFCPU_NS, 1 + i % 5);
		if (ok && i % 10 == 0)
			ok = !batch__metric(b, "gpu_util", ls, 1, 1700000000000000000ull + i, i % 100);
	}
	for (unsigned i = 0; ok && i < nivl; i++) {
		char stream[16];
		struct label a[2] = { { "name", attr }, { "stream", stream } };

		snprintf(stream, sizeof(stream), "%u", i % 7);
		ok = !batch__interval(b, "gpu_kernel", NULL, 0, 1700000000000000000ull + i,
				      1700000000000000500ull + i, -1, a, 2);
	}
	free(attr);
	if (!ok) {
		batch__free(b);
		return NULL;
	}
	return b;
}

static bool test_push_fit_bound_safe(void)
{
	struct verdicts v = { 0 };
	char name[64];
	struct batch *b;

	/* ordinary batches, and ones past the decoding budget by their attrs' label bytes */
	CHECK(ASSERT_TRUE((b = node_batch(3000, 200, 20)), "node batch") &&
	      compare("node batch", b, &v));
	CHECK(ASSERT_TRUE((b = node_batch(100, 20000, 8192)), "kernel intervals") &&
	      compare("kernel intervals", b, &v));
	/* a label set's and an interval's resolved bytes at their limits */
	for (int d = -1; d <= 1; d++) {
		struct batch_counts c;

		/* "pid\0" "0\0" "x\0" + value + 1 */
		snprintf(name, sizeof(name), "label set at %d", BATCH_MAX_LABEL_BYTES + d);
		CHECK(ASSERT_TRUE((b = labelled("n", 3, BATCH_MAX_LABEL_BYTES + d - 9)), name));
		batch__counts(b, &c);
		CHECK(ASSERT_EQ(c.label_set_bytes_max, BATCH_MAX_LABEL_BYTES + d, name) &&
		      compare(name, b, &v));
		snprintf(name, sizeof(name), "attrs at %d", BATCH_MAX_ATTR_BYTES + d);
		CHECK(ASSERT_TRUE((b = node_batch(10, 1, 0)), name));
		{
			char *val = malloc(BATCH_MAX_ATTR_BYTES);
			struct label a[2] = { { "a", "" }, { "b", val } };

			/* "a\0" "\0" "b\0" + value + 1 */
			memset(val, 'w', BATCH_MAX_ATTR_BYTES - 1);
			val[BATCH_MAX_ATTR_BYTES + d - 6] = 0;
			CHECK(ASSERT_TRUE(!batch__interval(b, "k", NULL, 0, 1700000000000000000ull,
							   1700000000000000001ull, -1, a, 2),
					  name));
			free(val);
		}
		batch__counts(b, &c);
		CHECK(ASSERT_EQ(c.attr_bytes_max, BATCH_MAX_ATTR_BYTES + d, name) &&
		      compare(name, b, &v));
	}
	/* label sets and groups at their counts' limits */
	CHECK(ASSERT_TRUE((b = labelled("n", BATCH_MAX_LABEL_SETS, 1)), "label sets") &&
	      compare("label sets at the limit", b, &v));
	CHECK(ASSERT_TRUE((b = labelled("n", BATCH_MAX_LABEL_SETS + 1, 1)), "label sets") &&
	      compare("label sets past the limit", b, &v));
	for (unsigned extra = 0; extra <= 1; extra++) {
		b = batch__new("n");
		for (unsigned i = 0; b && i < BATCH_MAX_GROUPS + extra; i++) {
			char nm[24];

			snprintf(nm, sizeof(nm), "m%u", i);
			if (batch__metric(b, nm, NULL, 0, 1700000000000000000ull, 1.0)) {
				batch__free(b);
				b = NULL;
			}
		}
		CHECK(ASSERT_TRUE(b, "series") && compare(extra ? "series past the limit" :
							      "series at the limit", b, &v));
	}
	/* what the decoder refuses whatever the sizes: a time <= 0, no node name */
	b = node_batch(10, 0, 0);
	CHECK(ASSERT_TRUE(b, "any time"));
	batch__allow_any_time(b);
	{
		struct location f = { "f", "m", NULL, NULL, 0, 1, false, false };
		int64_t st = batch__stack(b, &f, 1);

		CHECK(ASSERT_TRUE(st >= 0 && !batch__sample(b, (uint64_t)-5, NULL, 0, st,
							    SAMPLE_CPU, 1), "negative time"));
	}
	CHECK(compare("a time before 1970", b, &v));
	CHECK(ASSERT_TRUE((b = labelled("", 2, 4)), "no node") && compare("no node", b, &v));
	/* bytes that are not UTF-8: protobuf-c does not check, nor does the bound */
	CHECK(ASSERT_TRUE((b = labelled("n\xff\xfe", 2, 4)), "not UTF-8") &&
	      compare("not UTF-8", b, &v));
	/* the comparison is not vacuous: both checks said "fits" and "does not" many times */
	fprintf(stderr, "  %u limit settings: the bound said fits %u times, the decoder %u\n",
		v.cases, v.bound_fits, v.full_fits);
	return ASSERT_TRUE(v.bound_fits > 20, "the bound says fits") &&
	       ASSERT_TRUE(v.full_fits > v.bound_fits, "the decoder, more often") &&
	       ASSERT_TRUE(v.cases - v.full_fits > 20, "both refuse");
}

/* An ordinary batch under the server's default limits: decided by the bound, no decoding. */
static bool test_push_fit_bound_ordinary(void)
{
	struct ingest_limits l;
	struct batch_counts c;
	struct batch *b = node_batch(15840, 0, 0);
	uint8_t *raw = NULL, *z = NULL;
	size_t raw_len = 0, zlen = 0;
	bool ok;

	if (!ASSERT_TRUE(b, "batch"))
		return false;
	batch__counts(b, &c);
	ok = ASSERT_TRUE(!batch__encode(b, &raw, &raw_len), "encode") &&
	     ASSERT_TRUE(!compress_buf(COMPRESS_ZSTD, raw, raw_len, &z, &zlen), "compress");
	batch__free(b);
	ingest_limits_default(&l);
	ok = ok && ASSERT_EQ(c.samples, 15840, "samples") &&
	     ASSERT_TRUE(batch_fits_bound(&l, &c, raw_len, zlen), "bound: fits") &&
	     ASSERT_TRUE(batch_fits(&l, raw, raw_len, zlen), "decoder: fits");
	/* with the --max-body 1MiB of tests/integration/test_push_fit.py too */
	l.max_body = 1 << 20;
	ok = ok && ASSERT_TRUE(batch_fits_bound(&l, &c, raw_len, zlen), "bound, 1 MiB: fits");
	free(raw);
	free(z);
	return ok;
}

TEST_MAIN(T(test_push_fit_parse), T(test_push_fit_checks), T(test_push_fit_bound_safe),
	  T(test_push_fit_bound_ordinary))
