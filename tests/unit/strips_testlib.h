/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the thread-state and CUDA probe tests: run an agent module against a real batch,
 * then decode the encoded batch (the same protobuf the server reads) into flat records.
 */
#ifndef GPUSCOPE_TEST_STRIPS_TESTLIB_H
#define GPUSCOPE_TEST_STRIPS_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/batch.h"
#include "gpuscope/v1/batch.pb-c.h"

struct rec {
	char kind[24];		/* interval kind, or sample kind name */
	bool sample;
	int pid, tid;
	char thread[20], state[16], reason[16], api[40], comm[20];
	uint64_t start_ns, end_ns;	/* samples: start = end = time */
	int64_t value;			/* samples */
	long calls;			/* cuda_api attr */
	int stack;			/* index into Batch.stacks, -1 none */
	char frames[1024];		/* "f1;f2;..." outermost first, user frames only */
	char kframes[512];		/* the kernel frames, the same way */
	bool summary;			/* a summary of short states (attr summary=1) */
};

struct recs {
	struct rec *r;
	size_t n;
};

static const char *bstr(const Gpuscope__V1__Batch *m, uint32_t i)
{
	return i < m->n_strings ? m->strings[i] : "";
}

static void rec_frames(const Gpuscope__V1__Batch *m, int stack, char *out, size_t len,
		       bool kernel)
{
	const Gpuscope__V1__Stack *st;

	out[0] = 0;
	if (stack < 0 || (size_t)stack >= m->n_stacks)
		return;
	st = m->stacks[stack];
	for (size_t j = st->n_locations; j-- > 0;) {
		const Gpuscope__V1__Location *l = m->locations[st->locations[j]];
		const char *fn = bstr(m, l->function);

		size_t used = strlen(out);

		if (!l->kernel != !kernel)
			continue;
		if (used + strlen(*fn ? fn : "?") + 2 > len)
			break;	/* truncated: the tests look at the outermost frames */
		strcat(out, *fn ? fn : "?");
		strcat(out, ";");
	}
}

static void rec_labels(const Gpuscope__V1__Batch *m, uint32_t ls, const uint32_t *attrs,
		       size_t nattrs, struct rec *r)
{
	const Gpuscope__V1__LabelSet *set = m->label_sets[ls];

	for (size_t pass = 0; pass < 2; pass++) {
		const uint32_t *pairs = pass ? attrs : set->pairs;
		size_t n = pass ? nattrs : set->n_pairs;

		for (size_t i = 0; i + 1 < n; i += 2) {
			const char *k = bstr(m, pairs[i]), *v = bstr(m, pairs[i + 1]);

			if (!strcmp(k, "pid"))
				r->pid = atoi(v);
			else if (!strcmp(k, "tid"))
				r->tid = atoi(v);
			else if (!strcmp(k, "thread"))
				snprintf(r->thread, sizeof(r->thread), "%s", v);
			else if (!strcmp(k, "comm"))
				snprintf(r->comm, sizeof(r->comm), "%s", v);
			else if (!strcmp(k, "state"))
				snprintf(r->state, sizeof(r->state), "%s", v);
			else if (!strcmp(k, "reason"))
				snprintf(r->reason, sizeof(r->reason), "%s", v);
			else if (!strcmp(k, "api"))
				snprintf(r->api, sizeof(r->api), "%s", v);
			else if (!strcmp(k, "summary"))
				r->summary = !strcmp(v, "1");
			else if (!strcmp(k, "calls"))
				r->calls = atol(v);
			else if (!strcmp(k, "stack_id"))
				r->stack = atoi(v);
		}
	}
}

/* Decodes the batch into out (appending). 0 or -errno. */
static int recs_from_batch(struct batch *b, struct recs *out)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	char err[256];
	Gpuscope__V1__Batch *m;
	int ret = batch__encode(b, &buf, &len);

	if (ret)
		return ret;
	m = batch_decode(buf, len, err, sizeof(err));
	free(buf);
	if (!m) {
		fprintf(stderr, "  batch_decode: %s\n", err);
		return -EINVAL;
	}
	for (size_t i = 0; i < m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];
		struct rec r = { .stack = -1 };

		snprintf(r.kind, sizeof(r.kind), "%s", bstr(m, iv->kind));
		r.start_ns = iv->start_ns;
		r.end_ns = iv->end_ns;
		rec_labels(m, iv->label_set, iv->attrs, iv->n_attrs, &r);
		if (iv->stack)	/* Interval.stack (batch version 2) */
			r.stack = (int)iv->stack - 1;
		rec_frames(m, r.stack, r.frames, sizeof(r.frames), false);
		rec_frames(m, r.stack, r.kframes, sizeof(r.kframes), true);
		out->r = realloc(out->r, (out->n + 1) * sizeof(r));
		out->r[out->n++] = r;
	}
	for (size_t g = 0; g < m->n_samples; g++) {
		const Gpuscope__V1__SampleGroup *sg = m->samples[g];
		int64_t t = 0;

		for (size_t i = 0; i < sg->n_time_delta_ns; i++) {
			struct rec r = { .sample = true, .stack = (int)sg->stack[i] };

			t += sg->time_delta_ns[i];
			snprintf(r.kind, sizeof(r.kind), "%s",
				 sample_kind_name((enum sample_kind)sg->kind));
			r.start_ns = r.end_ns = (uint64_t)t;
			r.value = sg->n_value ? sg->value[i] : 1;
			rec_labels(m, sg->label_set, NULL, 0, &r);
			rec_frames(m, r.stack, r.frames, sizeof(r.frames), false);
			rec_frames(m, r.stack, r.kframes, sizeof(r.kframes), true);
			out->r = realloc(out->r, (out->n + 1) * sizeof(r));
			out->r[out->n++] = r;
		}
	}
	batch_decode_free(m);
	batch__reset(b);
	return 0;
}

/* A phase a workload recorded itself: "<name> <tid> <t0> <t1>" lines. */
struct phase {
	char name[16];
	int tid;
	uint64_t t0, t1;	/* CLOCK_MONOTONIC */
};

static inline int read_phases(const char *path, struct phase *ph, int max)
{
	FILE *f = fopen(path, "r");
	int n = 0;

	if (!f)
		return 0;
	while (n < max && fscanf(f, "%15s %d %lu %lu", ph[n].name, &ph[n].tid, &ph[n].t0,
				 &ph[n].t1) == 4)
		n++;
	fclose(f);
	return n;
}

/* ns of state `state` (or any, when NULL) of tid inside [t0, t1) (wall ns). */
static inline uint64_t overlap(const struct recs *rs, int tid, const char *state, uint64_t t0,
			uint64_t t1)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < rs->n; i++) {
		const struct rec *r = &rs->r[i];
		uint64_t s, e;

		if (r->sample || strcmp(r->kind, "thread_state") || r->tid != tid)
			continue;
		if (state && strcmp(r->state, state))
			continue;
		s = r->start_ns > t0 ? r->start_ns : t0;
		e = r->end_ns < t1 ? r->end_ns : t1;
		if (e > s)
			sum += e - s;
	}
	return sum;
}

static inline const struct rec *blocked_in(const struct recs *rs, int tid, uint64_t t0, uint64_t t1)
{
	const struct rec *best = NULL;

	for (size_t i = 0; i < rs->n; i++) {
		const struct rec *r = &rs->r[i];

		if (r->sample || strcmp(r->kind, "thread_state") || r->tid != tid ||
		    strcmp(r->state, "blocked") || r->end_ns <= t0 || r->start_ns >= t1)
			continue;
		if (!best || r->end_ns - r->start_ns > best->end_ns - best->start_ns)
			best = r;
	}
	return best;
}

#endif
