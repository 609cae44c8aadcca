/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope mcp`'s timeline_summary tool: over one absolute range, each GPU's busy, idle and
 * unknown seconds (an efficiency answer grouped by node: the server's best source per piece) and
 * the threads' time running, runnable and blocked by reason (thread_state intervals).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/client.h"
#include "cli/mcp.h"
#include "common/util.h"

#define IV_LIMIT        100000	/* thread_state intervals one summary reads */
#define THREADS_SHOWN   15

static const char *str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static double num(json_t *o, const char *k)
{
	return json_number_value(json_object_get(o, k));
}

struct gpu_sum {
	char key[96];		/* node "/" gpu */
	const char *node, *gpu, *model, *source;
	double busy_s, idle_s, unknown_s, held_s;
};

struct thread_sum {
	char key[160];		/* pid/tid */
	const char *comm, *thread, *pid, *tid;
	double state_ns[3];	/* running, runnable, blocked */
};

struct summary {
	struct gpu_sum gpus[256];
	int ngpus;
	struct thread_sum *threads;
	size_t nthreads, cap;
	double state_ns[3];
	json_t *reasons;	/* reason -> ns */
};

static struct gpu_sum *gpu_of(struct summary *s, json_t *g)
{
	char key[96];

	snprintf(key, sizeof(key), "%s/%s", str(g, "node") ?: "?", str(g, "gpu") ?: "?");
	for (int i = 0; i < s->ngpus; i++)
		if (!strcmp(s->gpus[i].key, key))
			return &s->gpus[i];
	if (s->ngpus == (int)(sizeof(s->gpus) / sizeof(s->gpus[0])))
		return NULL;
	snprintf(s->gpus[s->ngpus].key, sizeof(key), "%s", key);
	s->gpus[s->ngpus].node = str(g, "node");
	s->gpus[s->ngpus].gpu = str(g, "gpu");
	s->gpus[s->ngpus].model = str(g, "model");
	s->gpus[s->ngpus].source = str(g, "source");
	return &s->gpus[s->ngpus++];
}

/* Busy/idle/unknown per GPU from an efficiency answer grouped by node. */
static void add_gpus(struct summary *s, json_t *eff)
{
	json_t *w, *g;
	size_t i, k;

	json_array_foreach(json_object_get(eff, "workloads"), i, w) {
		json_array_foreach(json_object_get(w, "gpus"), k, g) {
			struct gpu_sum *x = gpu_of(s, g);

			if (!x)
				continue;
			x->busy_s += num(g, "busy_gpu_hours") * 3600;
			x->idle_s += num(g, "idle_gpu_hours") * 3600;
			x->unknown_s += num(g, "unknown_gpu_hours") * 3600;
			x->held_s += num(g, "held_gpu_hours") * 3600;
		}
	}
	json_array_foreach(json_object_get(eff, "unheld"), i, g) {
		struct gpu_sum *x = gpu_of(s, g);

		if (!x)
			continue;
		x->busy_s += num(g, "busy_gpu_hours") * 3600;
		x->idle_s += (num(g, "gpu_hours") - num(g, "busy_gpu_hours")) * 3600;
	}
}

static struct thread_sum *thread_of(struct summary *s, json_t *labels)
{
	char key[160];

	snprintf(key, sizeof(key), "%s/%s", str(labels, "pid") ?: "?", str(labels, "tid") ?: "?");
	for (size_t i = 0; i < s->nthreads; i++)
		if (!strcmp(s->threads[i].key, key))
			return &s->threads[i];
	if (array_reserve(&s->threads, &s->cap, s->nthreads + 1, sizeof(*s->threads), 64))
		return NULL;
	memset(&s->threads[s->nthreads], 0, sizeof(s->threads[0]));
	snprintf(s->threads[s->nthreads].key, sizeof(key), "%s", key);
	s->threads[s->nthreads].comm = str(labels, "comm");
	s->threads[s->nthreads].thread = str(labels, "thread");
	s->threads[s->nthreads].pid = str(labels, "pid");
	s->threads[s->nthreads].tid = str(labels, "tid");
	return &s->threads[s->nthreads++];
}

static double attr_num(json_t *attrs, const char *k)
{
	const char *v = str(attrs, k);

	return v ? strtod(v, NULL) : 0;
}

static void add_reason(struct summary *s, const char *reason, double ns)
{
	json_t *v = json_object_get(s->reasons, reason);

	json_object_set_new(s->reasons, reason, json_real(json_number_value(v) + ns));
}

/* One thread_state interval, clipped to [from_ms, to_ms). */
static void add_state(struct summary *s, json_t *iv, double from_ms, double to_ms)
{
	json_t *attrs = json_object_get(iv, "attrs");
	const char *state = str(attrs, "state"), *sum = str(attrs, "summary");
	double a = num(iv, "start_ms"), b = num(iv, "end_ms"), len_ns, f = 1;
	struct thread_sum *th;
	int st = -1;

	if (a < from_ms)
		a = from_ms;
	if (b > to_ms)
		b = to_ms;
	if (b <= a || !state || !(th = thread_of(s, json_object_get(iv, "labels"))))
		return;
	len_ns = (b - a) * 1e6;
	if (sum && !strcmp(sum, "1")) {
		/* short states folded by the agent: each share of the span */
		double run = attr_num(attrs, "running_ns"), wait = attr_num(attrs, "runnable_ns");
		double blk = attr_num(attrs, "blocked_ns"), all = run + wait + blk;

		if (all <= 0)
			return;
		f = len_ns / all;
		th->state_ns[0] += run * f;
		th->state_ns[1] += wait * f;
		th->state_ns[2] += blk * f;
		s->state_ns[0] += run * f;
		s->state_ns[1] += wait * f;
		s->state_ns[2] += blk * f;
		if (blk > 0)
			add_reason(s, "(short, folded)", blk * f);
		return;
	}
	if (!strcmp(state, "running"))
		st = 0;
	else if (!strcmp(state, "runnable"))
		st = 1;
	else if (!strcmp(state, "blocked"))
		st = 2;
	if (st < 0)
		return;
	th->state_ns[st] += len_ns;
	s->state_ns[st] += len_ns;
	if (st == 2)
		add_reason(s, str(attrs, "reason") ?: "other", len_ns);
}

static int by_thread_time(const void *a, const void *b)
{
	const struct thread_sum *x = a, *y = b;
	double tx = x->state_ns[0] + x->state_ns[1], ty = y->state_ns[0] + y->state_ns[1];

	if (tx != ty)
		return tx < ty ? 1 : -1;
	return strcmp(x->key, y->key);
}

static void print_states(FILE *f, const double ns[3])
{
	double all = ns[0] + ns[1] + ns[2];

	fprintf(f, "running %.1f%%, runnable %.1f%%, blocked %.1f%%", all > 0 ? 100 * ns[0] / all :
		0.0, all > 0 ? 100 * ns[1] / all : 0.0, all > 0 ? 100 * ns[2] / all : 0.0);
}

json_t *mcp_timeline_summary(struct mcp_call *c)
{
	struct summary *s = calloc(1, sizeof(*s));
	json_t *eff = NULL, *ivs = NULL, *iv, *out = NULL, *gl, *tl, *r = NULL;
	char a[32], b[32], lim[24], eff_err[QUERY_ERRLEN];
	double from_ms, to_ms, all;
	const char *key;
	struct mcp_text t;
	size_t i;

	if (!s || !(s->reasons = json_object())) {
		free(s);
		return NULL;
	}
	/* one absolute range for both queries */
	if (!c->q.have_range) {
		uint64_t d = 3600 * NSEC_PER_SEC;

		if (c->q.since)
			parse_duration_ns(c->q.since, &d);
		c->q.to_ns = wall_ns();
		c->q.from_ns = c->q.to_ns > d ? c->q.to_ns - d : 0;
		c->q.have_range = true;
		c->q.since = NULL;
	}
	from_ms = c->q.from_ns / 1e6;
	to_ms = c->q.to_ns / 1e6;
	c->q.by = "node";
	eff = mcp_get(c, "efficiency", "causes", "0", NULL);
	snprintf(eff_err, sizeof(eff_err), "%s", eff ? "" : c->err);
	c->q.by = NULL;
	if (!eff && c->q.cancel && *c->q.cancel)
		goto out;
	snprintf(lim, sizeof(lim), "%d", IV_LIMIT);
	ivs = mcp_get(c, "intervals", "kind", "thread_state", "limit", lim, NULL);
	if (!ivs)
		goto out;
	add_gpus(s, eff);
	json_array_foreach(json_object_get(ivs, "intervals"), i, iv)
		add_state(s, iv, from_ms, to_ms);
	qsort(s->threads, s->nthreads, sizeof(*s->threads), by_thread_time);
	if (mcp_text_open(&t))
		goto out;
	fprintf(t.f, "%s to %s\nGPUs (busy/idle decided by the best source; unknown: no source "
		"observed it while held):\n", mcp_iso(from_ms, a, sizeof(a)), mcp_iso(to_ms, b, sizeof(b)));
	gl = json_array();
	for (int g = 0; g < s->ngpus; g++) {
		struct gpu_sum *x = &s->gpus[g];
		double obs = x->busy_s + x->idle_s;

		fprintf(t.f, "  node %s GPU %s (%s): busy %.1f s, idle %.1f s, unknown %.1f s, busy "
			"share %.1f%%, held %.1f s, source %s\n", x->node ?: "?", x->gpu ?: "?",
			x->model ?: "?", x->busy_s, x->idle_s, x->unknown_s,
			obs > 0 ? 100 * x->busy_s / obs : 0.0, x->held_s, x->source ?: "?");
		json_array_append_new(gl, json_pack("{s:s?, s:s?, s:s?, s:s?, s:f, s:f, s:f, s:f}",
			"node", x->node, "gpu", x->gpu, "model", x->model, "source", x->source,
			"busy_seconds", x->busy_s, "idle_seconds", x->idle_s,
			"unknown_seconds", x->unknown_s, "held_seconds", x->held_s));
	}
	if (!s->ngpus)
		fprintf(t.f, "  none: %s\n", eff ? "no GPU matches the selector" : eff_err);
	all = s->state_ns[0] + s->state_ns[1] + s->state_ns[2];
	fprintf(t.f, "Threads (%zu, %.1f thread-seconds of states): ", s->nthreads, all / 1e9);
	print_states(t.f, s->state_ns);
	fprintf(t.f, "\n  blocked by reason:");
	json_object_foreach(s->reasons, key, iv)
		fprintf(t.f, " %s %.1f s (%.1f%%)", key, json_number_value(iv) / 1e9,
			all > 0 ? 100 * json_number_value(iv) / all : 0.0);
	fprintf(t.f, "\n");
	tl = json_array();
	for (size_t k = 0; k < s->nthreads && k < THREADS_SHOWN; k++) {
		struct thread_sum *x = &s->threads[k];

		fprintf(t.f, "  pid %s tid %s %s (%s): ", x->pid ?: "?", x->tid ?: "?",
			x->thread ?: "?", x->comm ?: "?");
		print_states(t.f, x->state_ns);
		fprintf(t.f, "\n");
		json_array_append_new(tl, json_pack("{s:s?, s:s?, s:s?, s:s?, s:f, s:f, s:f}",
			"pid", x->pid, "tid", x->tid, "thread", x->thread, "comm", x->comm,
			"running_seconds", x->state_ns[0] / 1e9,
			"runnable_seconds", x->state_ns[1] / 1e9,
			"blocked_seconds", x->state_ns[2] / 1e9));
	}
	if (!s->nthreads)
		fprintf(t.f, "  no thread states match (the agent records them for the processes it "
			"follows)\n");
	if (json_is_true(json_object_get(ivs, "truncated")))
		fprintf(t.f, "(thread states cut at %d intervals: narrow the range or selector)\n",
			IV_LIMIT);
	json_object_foreach(s->reasons, key, iv)
		json_object_set_new(s->reasons, key, json_real(json_number_value(iv) / 1e9));
	out = json_pack("{s:f, s:f, s:o, s:{s:f, s:f, s:f, s:O}, s:o, s:b}", "from_ms", from_ms,
			"to_ms", to_ms, "gpus", gl, "thread_states", "running_seconds",
			s->state_ns[0] / 1e9, "runnable_seconds", s->state_ns[1] / 1e9,
			"blocked_seconds", s->state_ns[2] / 1e9, "blocked_by_reason", s->reasons,
			"threads", tl, "truncated",
			json_is_true(json_object_get(ivs, "truncated")));
	r = mcp_text_result(&t, out);
out:
	if (!r && !ivs)
		r = mcp_error_result(c);
	json_decref(eff);
	json_decref(ivs);
	json_decref(s->reasons);
	free(s->threads);
	free(s);
	return r;
}

