/* SPDX-License-Identifier: Apache-2.0 */
/* `gpuscope top`: the functions with the most self (or total) samples or time, as a table. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/client.h"
#include "cli/commands.h"
#include "common/util.h"

static const char usage_text[] =
	"usage: gpuscope top --server URL [--since 5m | --from T [--to T]] [--selector S]\n"
	"                    [--kind cpu|offcpu_ns|gpu_kernel_ns|cuda_sync_ns] [--token-file F] [--ca-file F]\n"
	"                    [--limit 25] [--sort self|total] [--processes]\n"
	"Prints the top functions: self (leaf) and total (anywhere on the stack); with\n"
	"--processes, the processes with the most samples instead: pid, name, program (the\n"
	"script or module a Python runs: train.py) and command line.\n"
	"Times: RFC 3339 or Unix seconds; --since defaults to 1h.\n"
	"$GPUSCOPE_SERVER and $GPUSCOPE_TOKEN_FILE are the defaults of --server and --token-file.\n";

struct fn {
	const char *name;
	double self, total;
};

static int by_self(const void *a, const void *b)
{
	const struct fn *x = a, *y = b;

	if (x->self != y->self)
		return x->self < y->self ? 1 : -1;
	if (x->total != y->total)
		return x->total < y->total ? 1 : -1;
	return strcmp(x->name, y->name);
}

static int by_total(const void *a, const void *b)
{
	const struct fn *x = a, *y = b;

	if (x->total != y->total)
		return x->total < y->total ? 1 : -1;
	return by_self(a, b);
}

static void fmt_value(double v, bool ns, char *buf, size_t len)
{
	if (ns)
		fmt_duration((uint64_t)v, buf, len);
	else
		snprintf(buf, len, "%.0f", v);
}

/* "2026-12-02 16:50:20 → 16:55:06 UTC (4m46s), 42113 samples" from the answer's range. */
static void print_range(json_t *j, double total, bool ns)
{
	json_t *f = json_object_get(j, "from_ms"), *t = json_object_get(j, "to_ms");
	char a[32], b[32], d[32], v[32];
	struct tm ta, tb;
	time_t sa, sb;

	fmt_value(total, ns, v, sizeof(v));
	if (!json_is_number(f) || !json_is_number(t)) {
		printf("total %s%s\n", v, ns ? "" : " samples");
		return;
	}
	sa = (time_t)(json_number_value(f) / 1000);
	sb = (time_t)(json_number_value(t) / 1000);
	gmtime_r(&sa, &ta);
	gmtime_r(&sb, &tb);
	strftime(a, sizeof(a), "%Y-%m-%d %H:%M:%S", &ta);
	strftime(b, sizeof(b), ta.tm_yday == tb.tm_yday && ta.tm_year == tb.tm_year ?
			       "%H:%M:%S" : "%Y-%m-%d %H:%M:%S", &tb);
	fmt_duration((uint64_t)(sb - sa) * NSEC_PER_SEC, d, sizeof(d));
	printf("%s → %s UTC (%s), total %s%s\n", a, b, d, v, ns ? "" : " samples");
}

/* Kernel time exists only inside CUPTI windows: say how much of the range they covered. */
static void print_traced(json_t *j)
{
	json_t *tr = json_object_get(j, "traced");
	double f = json_number_value(json_object_get(tr, "fraction"));

	if (!json_is_object(tr))
		return;
	printf("kernels traced in %.1f%% of the range (%lld CUPTI window(s)%s); the rest of the "
	       "time is not in these figures\n", 100.0 * f,
	       (long long)json_integer_value(json_object_get(tr, "windows")),
	       json_is_true(json_object_get(tr, "truncated")) ? ", more not counted" : "");
}

/* A GPU-idle answer: how it was estimated (docs/estimator.md), the server's sentence. */
static void print_estimate(json_t *j)
{
	json_t *e = json_object_get(json_object_get(j, "gpu_sources"), "estimate");
	const char *s = json_string_value(json_object_get(e, "summary"));

	if (s)
		printf("%s\n", s);
}

/* Prints the table; returns 0, or 1 after printing what is wrong with the answer. */
static int print_top(const struct query *q, json_t *j)
{
	json_t *funcs = json_object_get(j, "functions"), *it;
	const char *unit = json_string_value(json_object_get(j, "unit"));
	bool ns = (unit && !strcmp(unit, "ns")) || (q->kind && strcmp(q->kind, "cpu"));
	double total = 0, sum_self = 0;
	struct fn *fns;
	size_t n, i;

	if (!json_is_array(funcs)) {
		fprintf(stderr, "gpuscope: server: answer has no \"functions\" array\n");
		return 1;
	}
	n = json_array_size(funcs);
	fns = calloc(n ? n : 1, sizeof(*fns));
	if (!fns) {
		fprintf(stderr, "gpuscope: out of memory\n");
		return 1;
	}
	json_array_foreach(funcs, i, it) {
		fns[i].name = json_string_value(json_object_get(it, "name"));
		fns[i].self = json_number_value(json_object_get(it, "self"));
		fns[i].total = json_number_value(json_object_get(it, "total"));
		if (!fns[i].name)
			fns[i].name = "?";
		sum_self += fns[i].self;
	}
	total = json_number_value(json_object_get(j, "total"));
	if (total <= 0)
		total = sum_self;	/* every sample has exactly one leaf */
	qsort(fns, n, sizeof(*fns), strcmp(q->sort, "total") ? by_self : by_total);
	print_range(j, total, ns);
	print_traced(j);
	print_estimate(j);
	printf("%12s %7s %12s %7s  %s\n", "SELF", "SELF%", "TOTAL", "TOTAL%", "FUNCTION");
	for (i = 0; i < n && (long)i < q->limit; i++) {
		char s[32], t[32];

		fmt_value(fns[i].self, ns, s, sizeof(s));
		fmt_value(fns[i].total, ns, t, sizeof(t));
		printf("%12s %6.2f%% %12s %6.2f%%  %s\n", s,
		       total > 0 ? 100.0 * fns[i].self / total : 0.0, t,
		       total > 0 ? 100.0 * fns[i].total / total : 0.0, fns[i].name);
	}
	if (!n)
		printf("(no samples in this range)\n");
	free(fns);
	return 0;
}

/* The processes table (/api/v1/processes); 0, or 1 after printing what is wrong. */
static int print_processes(const struct query *q, json_t *j)
{
	json_t *procs = json_object_get(j, "processes"), *it;
	const char *unit = json_string_value(json_object_get(j, "unit"));
	bool ns = (unit && !strcmp(unit, "ns")) || (q->kind && strcmp(q->kind, "cpu"));
	double total = json_number_value(json_object_get(j, "total"));
	size_t i, n = json_array_size(procs);
	char v[32];

	if (!json_is_array(procs)) {
		fprintf(stderr, "gpuscope: server: answer has no \"processes\" array\n");
		return 1;
	}
	fmt_value(total, ns, v, sizeof(v));
	printf("total %s%s, %lld process%s\n", v, ns ? "" : " samples",
	       (long long)json_integer_value(json_object_get(j, "count")),
	       json_integer_value(json_object_get(j, "count")) == 1 ? "" : "es");
	printf("%12s %7s %8s  %-15s %-24s %s\n", "VALUE", "SHARE", "PID", "COMM", "PROGRAM",
	       "COMMAND LINE");
	json_array_foreach(procs, i, it) {
		const char *s = json_string_value(json_object_get(it, "program"));
		const char *c = json_string_value(json_object_get(it, "cmdline"));
		double val = json_number_value(json_object_get(it, "value"));

		if ((long)i >= q->limit)
			break;
		fmt_value(val, ns, v, sizeof(v));
		printf("%12s %6.2f%% %8s  %-15s %-24s %s\n", v, total > 0 ? 100 * val / total : 0.0,
		       json_string_value(json_object_get(it, "pid")) ?: "?",
		       json_string_value(json_object_get(it, "comm")) ?: "?", s && *s ? s : "-",
		       c && *c ? c : "-");
	}
	if (!n)
		printf("(no samples in this range)\n");
	return 0;
}

int cmd_top(int argc, char **argv)
{
	json_t *j = NULL;
	struct query q;
	char *url, *u;
	int rc;

	url = query_open(argc, argv, Q_LIMIT | Q_SORT | Q_PROCESSES, usage_text, "top", &q, &rc);
	if (!url)
		return rc;
	rc = 1;
	if (q.processes) {
		free(url);
		url = query_url(&q, "processes");
		if (!url || asprintf(&u, "%s&limit=%ld", url, q.limit) < 0) {
			fprintf(stderr, "gpuscope: out of memory\n");
			goto out;
		}
		free(url);
		url = u;
		j = http_get_json(&q, url);
		rc = j ? print_processes(&q, j) : 1;
		goto out;
	}
	j = http_get_json(&q, url);
	if (!j)
		goto out;
	rc = print_top(&q, j);
out:
	json_decref(j);
	free(url);
	return rc;
}
