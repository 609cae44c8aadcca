/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/common/batch.c: encode/decode round trip, dedup, limits, validation. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "test.h"
#include "common/batch.h"
#include "gpuscope/v1/batch.pb-c.h"

static const struct location frames_a[] = {
	{ .function = "leaf", .module = "/bin/app", .address = 0x10, .line = 7, .file = "a.c" },
	{ .function = "mid", .module = "/bin/app", .address = 0x20 },
	{ .function = "main", .module = "/bin/app", .address = 0x30, .build_id = "abcd" },
};
static const struct location frames_k[] = {
	{ .function = "do_syscall_64", .module = "[kernel.kallsyms]", .address = 0xffffffff81000000,
	  .kernel = true },
	{ .function = "main", .module = "/bin/app", .address = 0x30, .build_id = "abcd" },
};

static Gpuscope__V1__Batch *roundtrip(struct batch *b)
{
	Gpuscope__V1__Batch *m;
	uint8_t *buf = NULL;
	size_t len = 0;
	char err[256] = "";

	if (!ASSERT_EQ(batch__encode(b, &buf, &len), 0, "encode"))
		return NULL;
	m = batch_decode(buf, len, err, sizeof(err));
	if (!m)
		fprintf(stderr, "  decode: %s\n", err);
	free(buf);
	return m;
}

static const char *str(const Gpuscope__V1__Batch *m, uint32_t i)
{
	return i < m->n_strings ? m->strings[i] : "(out of range)";
}

static bool test_batch_roundtrip(void)
{
	struct batch *b = batch__new("node-1");
	struct label l1[] = { { "pid", "42" }, { "comm", "app" } };
	struct label l1b[] = { { "comm", "app" }, { "pid", "42" } };	/* same set, other order */
	struct label gl[] = { { "gpu", "0" } };
	struct label attrs[] = { { "state", "running" }, { "cpu", "3" } };
	Gpuscope__V1__Batch *m = NULL;
	int64_t sa, sk, sa2;
	bool ok = false;

	CHECK(ASSERT_TRUE(b, "new"));
	batch__set_period(b, 10101010);
	sa = batch__stack(b, frames_a, 3);
	sk = batch__stack(b, frames_k, 2);
	sa2 = batch__stack(b, frames_a, 3);
	if (!ASSERT_EQ(sa, 0, "first stack") || !ASSERT_EQ(sk, 1, "second stack") ||
	    !ASSERT_EQ(sa2, sa, "same frames, same id"))
		goto out;
	if (!ASSERT_EQ(batch__sample(b, 1000, l1, 2, sa, SAMPLE_CPU, 1), 0, "s1") ||
	    !ASSERT_EQ(batch__sample(b, 3000, l1b, 2, sk, SAMPLE_CPU, 1), 0, "s2") ||
	    !ASSERT_EQ(batch__sample(b, 2000, l1, 2, sa, SAMPLE_CPU, 1), 0, "s3 (earlier)") ||
	    !ASSERT_EQ(batch__sample(b, 5000, l1, 2, sk, SAMPLE_OFFCPU_NS, 777), 0, "offcpu") ||
	    !ASSERT_EQ(batch__metric(b, "gpu_utilization", gl, 1, 100, 50.5), 0, "m1") ||
	    !ASSERT_EQ(batch__metric(b, "gpu_utilization", gl, 1, 200, 75), 0, "m2") ||
	    !ASSERT_EQ(batch__interval(b, "thread_state", l1, 2, 10, 20, -1, attrs, 2), 0, "ivl") ||
	    !ASSERT_EQ(batch__interval(b, "gpu_busy", gl, 1, 30, 40, -1, NULL, 0), 0, "busy"))
		goto out;
	if (!ASSERT_EQ(batch__nsamples(b), 4, "nsamples"))
		goto out;
	m = roundtrip(b);
	if (!ASSERT_TRUE(m, "decode"))
		goto out;
	if (!ASSERT_EQ(m->version, BATCH_VERSION, "version") ||
	    !ASSERT_STREQ(str(m, m->node), "node-1", "node") ||
	    !ASSERT_EQ(m->period_ns, 10101010, "period") || !ASSERT_TRUE(m->batch_id, "batch id") ||
	    !ASSERT_EQ(m->n_stacks, 2, "stacks") ||
	    !ASSERT_EQ(m->n_locations, 4, "locations (main shared)") ||
	    !ASSERT_EQ(m->n_label_sets, 2, "label sets") ||
	    !ASSERT_EQ(m->n_samples, 2, "groups (cpu, offcpu)") ||
	    !ASSERT_EQ(m->n_series, 1, "series") || !ASSERT_EQ(m->n_intervals, 2, "intervals"))
		goto out;
	/* Stack 0: leaf, mid, main, innermost first. */
	if (!ASSERT_STREQ(str(m, m->locations[m->stacks[0]->locations[0]]->function), "leaf", "f0") ||
	    !ASSERT_STREQ(str(m, m->locations[m->stacks[0]->locations[2]]->function), "main", "f2") ||
	    !ASSERT_EQ(m->locations[m->stacks[0]->locations[0]]->line, 7, "line") ||
	    !ASSERT_TRUE(m->locations[m->stacks[1]->locations[0]]->kernel, "kernel frame") ||
	    !ASSERT_EQ(m->stacks[1]->locations[1], m->stacks[0]->locations[2], "main deduped"))
		goto out;
	/* Label set sorted by name: comm, pid. */
	{
		Gpuscope__V1__LabelSet *ls = m->label_sets[m->samples[0]->label_set];

		if (!ASSERT_EQ(ls->n_pairs, 4, "pairs") ||
		    !ASSERT_STREQ(str(m, ls->pairs[0]), "comm", "sorted 0") ||
		    !ASSERT_STREQ(str(m, ls->pairs[3]), "42", "sorted 3"))
			goto out;
	}
	/* CPU group: three samples, delta-coded in insertion order, values omitted (all 1). */
	{
		Gpuscope__V1__SampleGroup *g = m->samples[0];

		if (!ASSERT_EQ(g->kind, 0, "kind cpu") || !ASSERT_EQ(g->n_time_delta_ns, 3, "n") ||
		    !ASSERT_EQ(g->time_delta_ns[0], 1000, "t0") ||
		    !ASSERT_EQ(g->time_delta_ns[1], 2000, "d1") ||
		    !ASSERT_EQ(g->time_delta_ns[2], -1000, "d2 negative") ||
		    !ASSERT_EQ(g->n_value, 0, "values omitted") || !ASSERT_EQ(g->stack[1], sk, "stack"))
			goto out;
		g = m->samples[1];
		if (!ASSERT_EQ(g->kind, 1, "offcpu") || !ASSERT_EQ(g->n_value, 1, "value kept") ||
		    !ASSERT_EQ(g->value[0], 777, "value"))
			goto out;
	}
	if (!ASSERT_EQ(m->series[0]->n_value, 2, "points") ||
	    !ASSERT_EQ(m->series[0]->time_delta_ns[1], 100, "point delta") ||
	    !ASSERT_TRUE(m->series[0]->value[0] == 50.5, "point value") ||
	    !ASSERT_STREQ(str(m, m->series[0]->name), "gpu_utilization", "metric name"))
		goto out;
	if (!ASSERT_STREQ(str(m, m->intervals[0]->kind), "thread_state", "ivl kind") ||
	    !ASSERT_EQ(m->intervals[0]->n_attrs, 4, "attrs") ||
	    !ASSERT_STREQ(str(m, m->intervals[0]->attrs[0]), "cpu", "attrs sorted") ||
	    !ASSERT_EQ(m->intervals[1]->end_ns, 40, "end"))
		goto out;
	ok = true;
out:
	batch_decode_free(m);
	batch__free(b);
	return ok;
}

static bool test_batch_reset(void)
{
	struct batch *b = batch__new("n");
	Gpuscope__V1__Batch *m = NULL;
	uint64_t id1;
	bool ok = false;

	CHECK(b);
	batch__sample(b, 1, NULL, 0, batch__stack(b, frames_a, 3), SAMPLE_CPU, 1);
	m = roundtrip(b);
	if (!ASSERT_TRUE(m, "decode 1"))
		goto out;
	id1 = m->batch_id;
	batch_decode_free(m);
	batch__reset(b);
	if (!ASSERT_EQ(batch__nsamples(b), 0, "empty after reset"))
		goto out;
	m = roundtrip(b);
	if (!ASSERT_TRUE(m, "decode 2") || !ASSERT_EQ(m->n_samples, 0, "no samples") ||
	    !ASSERT_EQ(m->n_stacks, 0, "no stacks") || !ASSERT_STREQ(str(m, m->node), "n", "node kept") ||
	    !ASSERT_TRUE(m->batch_id != id1, "new batch id"))
		goto out;
	ok = true;
out:
	batch_decode_free(m);
	batch__free(b);
	return ok;
}

static bool test_batch_limits(void)
{
	struct batch *b = batch__new("n");
	struct location *deep = calloc(BATCH_MAX_DEPTH + 1, sizeof(*deep));
	struct label many[BATCH_MAX_LABELS + 1];
	struct label dup[] = { { "a", "1" }, { "a", "2" } };
	char names[BATCH_MAX_LABELS + 1][8];
	int64_t st;
	bool ok = false;

	if (!b || !deep)
		goto out;
	for (int i = 0; i <= BATCH_MAX_DEPTH; i++)
		deep[i].function = "f";
	for (int i = 0; i <= BATCH_MAX_LABELS; i++) {
		snprintf(names[i], sizeof(names[i]), "l%d", i);
		many[i] = (struct label){ names[i], "v" };
	}
	st = batch__stack(b, deep, BATCH_MAX_DEPTH);
	if (!ASSERT_TRUE(st >= 0, "max depth ok") ||
	    !ASSERT_EQ(batch__stack(b, deep, BATCH_MAX_DEPTH + 1), -E2BIG, "too deep") ||
	    !ASSERT_EQ(batch__sample(b, 1, many, BATCH_MAX_LABELS + 1, st, SAMPLE_CPU, 1), -E2BIG,
		       "too many labels") ||
	    !ASSERT_EQ(batch__sample(b, 1, many, BATCH_MAX_LABELS, st, SAMPLE_CPU, 1), 0,
		       "max labels ok") ||
	    !ASSERT_EQ(batch__sample(b, 1, dup, 2, st, SAMPLE_CPU, 1), -EINVAL, "dup label") ||
	    /* a time the server would refuse the whole batch for stays out of it */
	    !ASSERT_EQ(batch__sample(b, 0, many, 1, st, SAMPLE_CPU, 1), -ERANGE, "time 0") ||
	    !ASSERT_EQ(batch__sample(b, (uint64_t)-5, many, 1, st, SAMPLE_CPU, 1), -ERANGE,
		       "time before 1970") ||
	    !ASSERT_EQ(batch__metric(b, "m", many, 1, 0, 1.0), -ERANGE, "metric at 0") ||
	    !ASSERT_EQ(batch__interval(b, "k", many, 1, 0, 5, -1, NULL, 0), -ERANGE, "interval at 0") ||
	    !ASSERT_EQ(batch__sample(b, 1, NULL, 0, 99, SAMPLE_CPU, 1), -EINVAL, "bad stack id") ||
	    !ASSERT_EQ(batch__sample(b, 1, NULL, 0, st, SAMPLE_KIND_MAX, 1), -EINVAL, "bad kind") ||
	    !ASSERT_EQ(batch__interval(b, "k", NULL, 0, 5, 4, -1, NULL, 0), -EINVAL, "end < start") ||
	    !ASSERT_EQ(batch__metric(b, "", NULL, 0, 1, 1), -EINVAL, "empty metric name"))
		goto out;
	ok = ASSERT_EQ(batch__nsamples(b), 1, "only the valid sample");
out:
	free(deep);
	batch__free(b);
	return ok;
}

static bool test_batch_kind_names(void)
{
	for (int k = 0; k < SAMPLE_KIND_MAX; k++)
		CHECK(ASSERT_EQ(sample_kind_parse(sample_kind_name(k)), k, "round trip"));
	CHECK(ASSERT_STREQ(sample_kind_name(SAMPLE_OFFCPU_NS), "offcpu_ns", "name"));
	return ASSERT_EQ(sample_kind_parse("bogus"), -EINVAL, "unknown");
}

/* Hand-made protobufs the decoder must refuse with a reason. */
static bool refuses(const Gpuscope__V1__Batch *m, const char *what)
{
	uint8_t buf[4096];
	size_t len = gpuscope__v1__batch__pack(m, buf);
	char err[256] = "";
	Gpuscope__V1__Batch *d = batch_decode(buf, len, err, sizeof(err));

	(void)what;
	batch_decode_free(d);
	return !d && err[0];
}

static bool test_batch_decode_refuses(void)
{
	char *strings[] = { "", "node", "f" };
	Gpuscope__V1__Batch m = GPUSCOPE__V1__BATCH__INIT;
	Gpuscope__V1__Stack st = GPUSCOPE__V1__STACK__INIT;
	Gpuscope__V1__Stack *stp = &st;
	Gpuscope__V1__LabelSet ls = GPUSCOPE__V1__LABEL_SET__INIT;
	Gpuscope__V1__LabelSet *lsp = &ls;
	Gpuscope__V1__SampleGroup g = GPUSCOPE__V1__SAMPLE_GROUP__INIT;
	Gpuscope__V1__SampleGroup *gp = &g;
	uint32_t bad_loc = 5, stk = 0, stk_bad = 3, odd[] = { 1 };
	int64_t t[] = { 100 };
	char err[128];
	uint8_t junk[] = { 0x0a, 0xff, 0xff, 0xff };

	m.version = 1;
	m.n_strings = 3;
	m.strings = strings;
	m.node = 1;
	CHECK(ASSERT_TRUE(!refuses(&m, "minimal valid batch"), "minimal accepted"));
	m.version = BATCH_VERSION + 1;
	CHECK(ASSERT_TRUE(refuses(&m, "a version after this server's"), "version"));
	m.version = 0;
	CHECK(ASSERT_TRUE(refuses(&m, "version 0"), "version missing"));
	m.version = 1;
	m.node = 0;
	CHECK(ASSERT_TRUE(refuses(&m, "no node"), "node"));
	m.node = 7;
	CHECK(ASSERT_TRUE(refuses(&m, "node oob"), "node oob"));
	m.node = 1;
	st.n_locations = 1;
	st.locations = &bad_loc;
	m.n_stacks = 1;
	m.stacks = &stp;
	CHECK(ASSERT_TRUE(refuses(&m, "location oob"), "location"));
	st.n_locations = 0;
	ls.n_pairs = 1;
	ls.pairs = odd;
	m.n_label_sets = 1;
	m.label_sets = &lsp;
	CHECK(ASSERT_TRUE(refuses(&m, "odd pairs"), "odd pairs"));
	ls.n_pairs = 0;
	g.n_time_delta_ns = 1;
	g.time_delta_ns = t;
	g.n_stack = 1;
	g.stack = &stk;
	m.n_samples = 1;
	m.samples = &gp;
	CHECK(ASSERT_TRUE(!refuses(&m, "valid sample"), "valid sample"));
	g.stack = &stk_bad;
	CHECK(ASSERT_TRUE(refuses(&m, "stack oob"), "stack oob"));
	g.stack = &stk;
	g.n_stack = 0;
	CHECK(ASSERT_TRUE(refuses(&m, "columns"), "column lengths"));
	g.n_stack = 1;
	g.kind = 9;
	CHECK(ASSERT_TRUE(refuses(&m, "kind"), "kind"));
	CHECK(ASSERT_TRUE(!batch_decode(junk, sizeof(junk), err, sizeof(err)), "truncated"));
	return ASSERT_TRUE(!batch_decode((const uint8_t *)"", 0, err, sizeof(err)), "empty = v0");
}

struct thr_arg {
	struct batch *b;
	int64_t stack;
	int n;
};

static void *producer(void *p)
{
	struct thr_arg *a = p;
	struct label l[] = { { "tid", "1" } };

	for (int i = 0; i < a->n; i++)
		batch__sample(a->b, (uint64_t)i + 1, l, 1, a->stack, SAMPLE_CPU, 1);
	return NULL;
}

static bool test_batch_threads(void)
{
	struct batch *b = batch__new("n");
	struct thr_arg a;
	pthread_t th[4];
	Gpuscope__V1__Batch *m;
	bool ok;

	CHECK(b);
	a = (struct thr_arg){ b, batch__stack(b, frames_a, 3), 20000 };
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, producer, &a);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	m = roundtrip(b);
	ok = ASSERT_TRUE(m, "decode") && ASSERT_EQ(m->n_samples, 1, "one group") &&
	     ASSERT_EQ(m->samples[0]->n_stack, 80000, "all samples");
	batch_decode_free(m);
	batch__free(b);
	return ok;
}

/* batch_split: halves by whole label sets, each self-contained, nothing lost or duplicated. */
static bool test_batch_split(void)
{
	struct batch *b = batch__new("n1"), *h[2] = { NULL, NULL };
	struct label l1[] = { { "pid", "1" }, { "comm", "a" } }, at[] = { { "state", "R" } };
	Gpuscope__V1__Batch *m[2] = { NULL, NULL };
	uint8_t *buf = NULL;
	size_t len = 0, samples = 0, points = 0, ivs = 0;
	int64_t sa = batch__stack(b, frames_a, 3), sk = batch__stack(b, frames_k, 2);
	uint64_t tsum = 0, want = 0;
	bool ok = false;

	for (int i = 0; i < 10; i++) {
		batch__sample(b, 1000 + i, l1, 2, i % 2 ? sa : sk, SAMPLE_CPU, 1);
		want += 1000 + i;
	}
	for (int i = 0; i < 4; i++)
		batch__metric(b, "gpu_util", l1, 1, 5000 + i, i);
	for (int i = 0; i < 3; i++)
		batch__interval(b, "thread_state", l1, 2, 7000 + i, 7100 + i, -1, at, 1);
	batch__set_period(b, 1234);
	if (!ASSERT_EQ(batch__encode(b, &buf, &len), 0, "encode") ||
	    !ASSERT_EQ(batch_split(buf, len, &h[0], &h[1]), 0, "split"))
		goto out;
	for (int k = 0; k < 2; k++) {
		m[k] = roundtrip(h[k]);
		if (!ASSERT_TRUE(m[k], "half decodes"))
			goto out;
		CHECK(ASSERT_STREQ(str(m[k], m[k]->node), "n1", "node") &&
		      ASSERT_EQ(m[k]->period_ns, 1234, "period"));
		for (size_t i = 0; i < m[k]->n_samples; i++) {
			uint64_t t = 0;

			for (size_t j = 0; j < m[k]->samples[i]->n_stack; j++) {
				t += (uint64_t)m[k]->samples[i]->time_delta_ns[j];
				tsum += t;
				samples++;
			}
		}
		for (size_t i = 0; i < m[k]->n_series; i++)
			points += m[k]->series[i]->n_value;
		ivs += m[k]->n_intervals;
	}
	/*
	 * 17 records of two label sets: (pid, comm)'s 10 samples and 3 intervals, pid's 4 points.
	 * Whole label sets to each half (13 of 17 is not past 3/4), so a thread's samples and
	 * intervals stay together.
	 */
	ok = ASSERT_EQ(samples, 10, "samples") && ASSERT_EQ(tsum, want, "sample times") &&
	     ASSERT_EQ(points, 4, "points") && ASSERT_EQ(ivs, 3, "intervals") &&
	     ASSERT_EQ(m[0]->n_series, 0, "first half: no points") &&
	     ASSERT_EQ(m[0]->n_intervals, 3, "first half: the samples' label set whole") &&
	     ASSERT_EQ(m[1]->n_samples + m[1]->n_intervals, 0, "second half: the points only") &&
	     ASSERT_EQ(m[0]->n_stacks, 2, "first half: only its stacks");
out:
	batch_decode_free(m[0]);
	batch_decode_free(m[1]);
	batch__free(h[0]);
	batch__free(h[1]);
	free(buf);
	batch__free(b);
	return ok;
}

static bool test_batch_split_single(void)
{
	struct batch *b = batch__new("n1"), *h[2] = { NULL, NULL };
	struct label l1[] = { { "pid", "1" } };
	uint8_t *buf = NULL;
	size_t len = 0;
	bool ok;

	batch__metric(b, "x", l1, 1, 5, 1);
	ok = ASSERT_EQ(batch__encode(b, &buf, &len), 0, "encode") &&
	     ASSERT_EQ(batch_split(buf, len, &h[0], &h[1]), -E2BIG, "one record cannot split");
	free(buf);
	batch__free(b);
	return ok;
}

/*
 * Interval.stack (version 2): typed, through encode, decode and a 413 split (the half that gets
 * the interval gets its stack); a stack the batch lacks is refused; version 1 (the stack as
 * attr "stack_id") is still read.
 */
static bool test_batch_interval_stack(void)
{
	struct batch *b = batch__new("n1"), *h[2] = { NULL, NULL };
	struct label l1[] = { { "pid", "1" } }, at[] = { { "state", "blocked" } };
	Gpuscope__V1__Batch *m = NULL, *hm[2] = { NULL, NULL };
	Gpuscope__V1__Interval iv = GPUSCOPE__V1__INTERVAL__INIT, *ivp = &iv, **orig;
	size_t norig;
	uint8_t *buf = NULL;
	size_t len = 0;
	int64_t sa = batch__stack(b, frames_a, 3), sk = batch__stack(b, frames_k, 2);
	bool ok = false;

	CHECK(ASSERT_EQ(batch__interval(b, "thread_state", l1, 1, 10, 20, 7, at, 1), -EINVAL,
			"a stack the batch lacks"));
	for (int i = 0; i < 4; i++)
		if (!ASSERT_EQ(batch__interval(b, "thread_state", l1, 1, 10 + i, 20 + i,
					       i < 2 ? -1 : i == 2 ? sa : sk, at, 1), 0, "interval"))
			goto out;
	m = roundtrip(b);
	if (!ASSERT_TRUE(m, "decode") || !ASSERT_EQ(m->version, 2, "version 2") ||
	    !ASSERT_EQ(m->intervals[0]->stack, 0, "none") ||
	    !ASSERT_EQ(m->intervals[2]->stack, sa + 1, "1 + stack index") ||
	    !ASSERT_EQ(m->intervals[3]->stack, sk + 1, "other stack") ||
	    !ASSERT_EQ(m->intervals[2]->n_attrs, 2, "no stack_id text in attrs"))
		goto out;
	if (!ASSERT_EQ(batch__encode(b, &buf, &len), 0, "encode") ||
	    !ASSERT_EQ(batch_split(buf, len, &h[0], &h[1]), 0, "split"))
		goto out;
	hm[1] = roundtrip(h[1]);
	if (!ASSERT_TRUE(hm[1], "second half decodes") ||
	    !ASSERT_EQ(hm[1]->n_intervals, 2, "second half: the stacked intervals") ||
	    !ASSERT_EQ(hm[1]->n_stacks, 2, "with their stacks") ||
	    !ASSERT_STREQ(str(hm[1], hm[1]->locations[hm[1]->stacks[hm[1]->intervals[0]->stack - 1]
						   ->locations[0]]->function),
			  "leaf", "the same frames"))
		goto out;
	/* version 1: the stack as an attr, still accepted */
	hm[0] = roundtrip(h[0]);
	if (!ASSERT_TRUE(hm[0], "first half decodes"))
		goto out;
	hm[0]->version = 1;
	free(buf);
	len = gpuscope__v1__batch__get_packed_size(hm[0]);
	buf = malloc(len);
	gpuscope__v1__batch__pack(hm[0], buf);
	{
		char err[128];
		Gpuscope__V1__Batch *v1 = batch_decode(buf, len, err, sizeof(err));

		ok = ASSERT_TRUE(v1, "version 1 read") && ASSERT_EQ(v1->version, 1, "as sent");
		batch_decode_free(v1);
	}
	/* an Interval.stack past the batch's stacks is refused */
	iv.kind = m->intervals[0]->kind;
	iv.label_set = 0;
	iv.stack = (uint32_t)m->n_stacks + 1;
	orig = m->intervals;
	norig = m->n_intervals;
	m->intervals = &ivp;
	m->n_intervals = 1;
	free(buf);
	len = gpuscope__v1__batch__get_packed_size(m);
	buf = malloc(len);
	gpuscope__v1__batch__pack(m, buf);
	{
		char err[128];
		Gpuscope__V1__Batch *bad = batch_decode(buf, len, err, sizeof(err));

		ok = ok && ASSERT_TRUE(!bad && strstr(err, "stack"), "stack out of range refused");
		batch_decode_free(bad);
	}
	m->intervals = orig;	/* the decoder's own, for batch_decode_free() */
	m->n_intervals = norig;
out:
	batch_decode_free(m);
	batch_decode_free(hm[0]);
	batch_decode_free(hm[1]);
	batch__free(h[0]);
	batch__free(h[1]);
	free(buf);
	batch__free(b);
	return ok;
}

/* Both batches encode to the same bytes. */
static bool same_encoding(struct batch *b[2])
{
	uint8_t *enc[2] = { NULL, NULL };
	size_t len[2] = { 0, 0 };
	bool ok = ASSERT_EQ(batch__encode(b[0], &enc[0], &len[0]), 0, "encode") &&
		  ASSERT_EQ(batch__encode(b[1], &enc[1], &len[1]), 0, "encode") &&
		  ASSERT_EQ(len[1], len[0], "same length") &&
		  ASSERT_TRUE(!memcmp(enc[0], enc[1], len[0]), "same bytes");

	free(enc[0]);
	free(enc[1]);
	return ok;
}

/* A label set interned once (batch__label_set) encodes exactly as the labels given each time. */
static bool test_batch_label_set_ids(void)
{
	struct batch *b[2] = { batch__new("node-1"), batch__new("node-1") };
	struct label l1[] = { { "pid", "42" }, { "comm", "app" }, { "tid", "43" } };
	struct label l2[] = { { "pid", "7" }, { "comm", "other" } };
	struct label attrs[] = { { "state", "blocked" }, { "reason", "io" } };
	int64_t ls1, ls2, st;
	bool ok = false;

	CHECK(ASSERT_TRUE(b[0] && b[1], "new"));
	for (int k = 0; k < 2; k++) {
		batch__set_id(b[k], 77);
		st = batch__stack(b[k], frames_a, 3);
		if (!ASSERT_EQ(st, 0, "stack"))
			goto out;
		for (int i = 0; i < 3; i++) {
			uint64_t t = 1000000000ull * (i + 1);
			int e[4];

			if (k == 0) {
				/* the strings in the same order as below (the string table's) */
				batch__label_set(b[0], l1, 3);
				batch__label_set(b[0], l2, 2);
				e[0] = batch__interval(b[0], "thread_state", l1, 3, t, t + 5, st, attrs, 2);
				e[1] = batch__sample(b[0], t + 5, l1, 3, st, SAMPLE_OFFCPU_NS, 5);
				e[2] = batch__interval(b[0], "thread_state", l2, 2, t, t + 9, -1, attrs, 1);
				e[3] = batch__sample(b[0], t + 9, l2, 2, st, SAMPLE_CPU, 1);
			} else {
				ls1 = batch__label_set(b[1], l1, 3);
				ls2 = batch__label_set(b[1], l2, 2);
				if (!ASSERT_TRUE(ls1 >= 0 && ls2 >= 0 && ls1 != ls2, "two sets"))
					goto out;
				e[0] = batch__interval_ls(b[1], "thread_state", ls1, t, t + 5, st, attrs, 2);
				e[1] = batch__sample_ls(b[1], t + 5, ls1, st, SAMPLE_OFFCPU_NS, 5);
				e[2] = batch__interval_ls(b[1], "thread_state", ls2, t, t + 9, -1, attrs, 1);
				e[3] = batch__sample_ls(b[1], t + 9, ls2, st, SAMPLE_CPU, 1);
			}
			if (!ASSERT_TRUE(!e[0] && !e[1] && !e[2] && !e[3], "records added"))
				goto out;
		}
	}
	if (!ASSERT_EQ(batch__interval_ls(b[1], "x", ls2 + 1, 1, 2, -1, NULL, 0), -EINVAL,
		       "an index the batch does not have") ||
	    !ASSERT_EQ(batch__sample_ls(b[1], 1, -3, 0, SAMPLE_CPU, 1), -EINVAL, "negative"))
		goto out;
	ok = same_encoding(b);
out:
	batch__free(b[0]);
	batch__free(b[1]);
	return ok;
}

/*
 * An interval given as string indices (batch__interval_idx) encodes exactly as the same
 * interval given as strings (batch__interval_ls), the strings interned in the same order; the
 * indices are checked.
 */
static bool test_batch_interval_idx(void)
{
	const struct label labels[] = { { "pid", "7" }, { "thread", "w" } };
	/* batch__interval_ls() sorts these by name */
	const struct label attrs[] = { { "state", "running" }, { "summary", "1" },
				       { "running_ns", "500" }, { "blocked_ns", "0" } };
	struct batch *b[2] = { batch__new("n"), batch__new("n") };
	int64_t ls[2], kind = -1, id[8];
	uint32_t pairs[8], bad[8];
	bool ok = false;

	if (!ASSERT_TRUE(b[0] && b[1], "new"))
		goto out;
	for (int k = 0; k < 2; k++) {
		batch__set_id(b[k], 99);
		ls[k] = batch__label_set(b[k], labels, 2);
	}
	kind = batch__string(b[1], "thread_state");
	for (int i = 0; i < 4; i++) {
		id[2 * i] = batch__string(b[1], attrs[i].name);
		id[2 * i + 1] = batch__string(b[1], attrs[i].value);
	}
	/* by name: blocked_ns, running_ns, state, summary */
	for (int i = 0, from[4] = { 3, 2, 0, 1 }; i < 4; i++) {
		pairs[2 * i] = (uint32_t)id[2 * from[i]];
		pairs[2 * i + 1] = (uint32_t)id[2 * from[i] + 1];
	}
	if (!ASSERT_TRUE(kind > 0 && id[0] > 0 && ls[0] >= 0 && ls[1] >= 0, "interned") ||
	    !ASSERT_EQ(batch__string(b[1], "state"), id[0], "the same string, the same index") ||
	    !ASSERT_EQ(batch__interval_ls(b[0], "thread_state", ls[0], 10, 20, -1, attrs, 4), 0,
		       "as strings") ||
	    !ASSERT_EQ(batch__interval_idx(b[1], (uint32_t)kind, ls[1], 10, 20, -1, pairs, 4), 0,
		       "as indices"))
		goto out;
	memcpy(bad, pairs, sizeof(bad));
	bad[0] = pairs[2], bad[1] = pairs[3], bad[2] = pairs[0], bad[3] = pairs[1];
	if (!ASSERT_EQ(batch__interval_idx(b[1], (uint32_t)kind, ls[1], 10, 20, -1, bad, 4),
		       -EINVAL, "pairs out of order") ||
	    !ASSERT_EQ(batch__interval_idx(b[1], (uint32_t)kind, ls[1], 10, 20, -1, pairs, 4), 0,
		       "again") ||
	    !ASSERT_EQ(batch__interval_idx(b[1], 1u << 30, ls[1], 10, 20, -1, pairs, 4), -EINVAL,
		       "a kind index the batch does not have") ||
	    !ASSERT_EQ(batch__interval_idx(b[1], 0, ls[1], 10, 20, -1, pairs, 4), -EINVAL,
		       "an empty kind"))
		goto out;
	memcpy(bad, pairs, sizeof(bad));
	bad[7] = 1u << 30;
	if (!ASSERT_EQ(batch__interval_idx(b[1], (uint32_t)kind, ls[1], 10, 20, -1, bad, 4),
		       -EINVAL, "a value index the batch does not have"))
		goto out;
	bad[7] = pairs[7];
	bad[0] = 0;	/* "" */
	if (!ASSERT_EQ(batch__interval_idx(b[1], (uint32_t)kind, ls[1], 10, 20, -1, bad, 4),
		       -EINVAL, "an empty name"))
		goto out;
	/* the second interval above ("again") has its twin as strings */
	if (!ASSERT_EQ(batch__interval_ls(b[0], "thread_state", ls[0], 10, 20, -1, attrs, 4), 0,
		       "as strings, again"))
		goto out;
	ok = same_encoding(b);
out:
	batch__free(b[0]);
	batch__free(b[1]);
	return ok;
}

TEST_MAIN(T(test_batch_interval_idx), T(test_batch_label_set_ids), T(test_batch_split), T(test_batch_split_single), T(test_batch_interval_stack), T(test_batch_roundtrip), T(test_batch_reset), T(test_batch_limits),
	  T(test_batch_kind_names), T(test_batch_decode_refuses), T(test_batch_threads))
