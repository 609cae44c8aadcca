// SPDX-License-Identifier: Apache-2.0
/*
 * `gpuscope timeline`: per-thread CPU strips of one process in the terminal, from the server's
 * thread_state intervals: one row per thread, one character per time bucket, the state that
 * took most of the bucket ('#' running, '-' runnable, '.' blocked, 'S' blocked in a CUDA
 * synchronize, ' ' no data).
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/client.h"
#include "cli/commands.h"
#include "common/util.h"

static const char usage_text[] =
	"usage: gpuscope timeline --server URL --pid PID [--since 5m | --from T [--to T]]\n"
	"                         [--width N] [--selector S] [--token-file F] [--ca-file F]\n"
	"Prints one row per thread of process PID, one character per time bucket:\n"
	"  '#' running  '-' runnable (waiting for a CPU)  '.' blocked  'S' blocked in a CUDA\n"
	"  synchronize  ' ' no data. Times: RFC 3339 or Unix seconds; --since defaults to 1h.\n"
	"$GPUSCOPE_SERVER and $GPUSCOPE_TOKEN_FILE are the defaults of --server and --token-file.\n";

enum { ST_RUN, ST_WAIT, ST_BLOCK, ST_SYNC, ST_MAX };
static const char state_chars[ST_MAX] = { '#', '-', '.', 'S' };

#define MAX_THREADS 512
#define MAX_WIDTH   1000
#define FETCH_LIMIT 200000

struct row {
	long tid;
	char name[32];
	double *ns;		/* width * ST_MAX: ns of each state in each bucket */
	double total[ST_MAX];
};

static int state_of(const char *state, const char *reason)
{
	if (!state)
		return -1;
	if (!strcmp(state, "running"))
		return ST_RUN;
	if (!strcmp(state, "runnable"))
		return ST_WAIT;
	if (!strcmp(state, "blocked"))
		return reason && !strcmp(reason, "cuda_sync") ? ST_SYNC : ST_BLOCK;
	return -1;
}

static struct row *row_get(struct row *rows, int *nrows, long tid, const char *name, int width)
{
	for (int i = 0; i < *nrows; i++)
		if (rows[i].tid == tid)
			return &rows[i];
	if (*nrows == MAX_THREADS)
		return NULL;
	rows[*nrows].tid = tid;
	snprintf(rows[*nrows].name, sizeof(rows[*nrows].name), "%s", name ? name : "?");
	rows[*nrows].ns = calloc((size_t)width * ST_MAX, sizeof(double));
	if (!rows[*nrows].ns)
		return NULL;
	return &rows[(*nrows)++];
}

/* Spreads ns of state st over [s, e) (ms) into the row's buckets. */
static void spread(struct row *r, int st, double s, double e, double weight, double from_ms,
		   double bucket_ms, int width)
{
	int b0, b1;

	if (e <= s)
		return;
	b0 = (int)((s - from_ms) / bucket_ms);
	b1 = (int)((e - from_ms) / bucket_ms);
	if (b0 < 0)
		b0 = 0;
	if (b1 >= width)
		b1 = width - 1;
	for (int b = b0; b <= b1; b++) {
		double bs = from_ms + b * bucket_ms, be = bs + bucket_ms;
		double os = s > bs ? s : bs, oe = e < be ? e : be;

		if (oe > os) {
			r->ns[b * ST_MAX + st] += (oe - os) * 1e6 * weight;
			r->total[st] += (oe - os) * 1e6 * weight;
		}
	}
}

static double attr_num(json_t *attrs, const char *k)
{
	const char *v = json_string_value(json_object_get(attrs, k));

	return v ? strtod(v, NULL) : 0;
}

/* Adds one interval of the answer to the rows. */
static void add_interval(json_t *iv, struct row *rows, int *nrows, double from_ms, double to_ms,
			 double bucket_ms, int width, int *dropped)
{
	json_t *labels = json_object_get(iv, "labels"), *attrs = json_object_get(iv, "attrs");
	const char *tid_s = json_string_value(json_object_get(labels, "tid"));
	const char *thread = json_string_value(json_object_get(labels, "thread"));
	const char *state = json_string_value(json_object_get(attrs, "state"));
	const char *reason = json_string_value(json_object_get(attrs, "reason"));
	const char *summary = json_string_value(json_object_get(attrs, "summary"));
	double s = json_number_value(json_object_get(iv, "start_ms"));
	double e = json_number_value(json_object_get(iv, "end_ms"));
	int st = state_of(state, reason);
	struct row *r;

	if (!tid_s || st < 0)
		return;
	if (s < from_ms)
		s = from_ms;
	if (e > to_ms)
		e = to_ms;
	r = row_get(rows, nrows, atol(tid_s), thread, width);
	if (!r) {
		(*dropped)++;
		return;
	}
	if (summary && !strcmp(summary, "1")) {
		/* short states folded by the agent: spread each share over the span */
		double run = attr_num(attrs, "running_ns"), wait = attr_num(attrs, "runnable_ns");
		double blk = attr_num(attrs, "blocked_ns"), sum = run + wait + blk;

		if (sum <= 0)
			return;
		spread(r, ST_RUN, s, e, run / sum, from_ms, bucket_ms, width);
		spread(r, ST_WAIT, s, e, wait / sum, from_ms, bucket_ms, width);
		spread(r, ST_BLOCK, s, e, blk / sum, from_ms, bucket_ms, width);
		return;
	}
	spread(r, st, s, e, 1.0, from_ms, bucket_ms, width);
}

static int by_tid(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	return x->tid < y->tid ? -1 : x->tid > y->tid;
}

static void print_rows(struct row *rows, int nrows, int width, double from_ms, double to_ms,
		       double bucket_ms)
{
	char when[64], span[32];
	time_t t = (time_t)(from_ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	fmt_duration((uint64_t)((to_ms - from_ms) * 1e6), span, sizeof(span));
	printf("%s + %s, %d buckets of %.3g ms\n", when, span, width, bucket_ms);
	printf("legend: '#' running  '-' runnable  '.' blocked  'S' CUDA sync  ' ' no data\n");
	printf("%-24s |%*s| %6s %6s %6s\n", "THREAD (TID)", width, "", "RUN%", "WAIT%", "BLOCK%");
	qsort(rows, nrows, sizeof(*rows), by_tid);
	for (int i = 0; i < nrows; i++) {
		struct row *r = &rows[i];
		char label[48];
		double all = 0;

		snprintf(label, sizeof(label), "%.15s (%ld)", r->name, r->tid);
		printf("%-24s |", label);
		for (int b = 0; b < width; b++) {
			const double *ns = &r->ns[b * ST_MAX];
			int best = -1;

			for (int s = 0; s < ST_MAX; s++)
				if (ns[s] > 0 && (best < 0 || ns[s] > ns[best]))
					best = s;
			putchar(best < 0 ? ' ' : state_chars[best]);
		}
		for (int s = 0; s < ST_MAX; s++)
			all += r->total[s];
		if (all <= 0)
			all = 1;
		printf("| %5.1f%% %5.1f%% %5.1f%%\n", 100 * r->total[ST_RUN] / all,
		       100 * r->total[ST_WAIT] / all,
		       100 * (r->total[ST_BLOCK] + r->total[ST_SYNC]) / all);
	}
	if (!nrows)
		printf("(no thread states for this process in this range)\n");
}

/* Takes --pid and --width out of argv (the rest goes to query_parse). -1 on a bad value. */
static int take_own_opts(int *argc, char **argv, long *pid, long *width)
{
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i], *v = NULL;
		long *dst = NULL;
		char *end;

		if (!strcmp(a, "--pid") || !strcmp(a, "--width")) {
			dst = a[2] == 'p' ? pid : width;
			if (i + 1 >= *argc) {
				fprintf(stderr, "gpuscope: option '%s' needs a value\n%s", a, usage_text);
				return -1;
			}
			v = argv[++i];
		} else if (!strncmp(a, "--pid=", 6) || !strncmp(a, "--width=", 8)) {
			dst = a[2] == 'p' ? pid : width;
			v = strchr(a, '=') + 1;
		} else {
			argv[out++] = argv[i];
			continue;
		}
		errno = 0;
		*dst = strtol(v, &end, 10);
		if (errno || *end || !*v || *dst <= 0 || (dst == width && *dst > MAX_WIDTH)) {
			fprintf(stderr, "gpuscope: %.*s: '%s' is not a valid value\n%s",
				(int)strcspn(a, "="), a, v, usage_text);
			return -1;
		}
	}
	*argc = out;
	argv[out] = NULL;
	return 0;
}

int cmd_timeline(int argc, char **argv)
{
	struct row rows[MAX_THREADS];
	char *url = NULL, *sel = NULL, limit[32];
	long pid = 0, width = 100;
	int nrows = 0, dropped = 0, rc;
	double from_ms, to_ms, bucket_ms;
	json_t *j = NULL, *ivs, *iv;
	struct query q;
	size_t i;

	if (take_own_opts(&argc, argv, &pid, &width))
		return 2;
	rc = query_parse(argc, argv, 0, usage_text, &q);
	if (rc)
		return rc == 1 ? 0 : rc;
	if (!pid) {
		fprintf(stderr, "gpuscope: --pid PID is required\n%s", usage_text);
		return 2;
	}
	/* buckets need an absolute range: --since becomes from/to here */
	if (!q.have_range) {
		uint64_t d = 3600 * NSEC_PER_SEC;

		if (q.since)
			parse_duration_ns(q.since, &d);
		q.to_ns = wall_ns();
		q.from_ns = q.to_ns > d ? q.to_ns - d : 0;
		q.have_range = true;
		q.since = NULL;
	}
	if (q.to_ns <= q.from_ns) {
		fprintf(stderr, "gpuscope: --to must be after --from\n");
		return 2;
	}
	/* the process, and the user's selector if any: {pid="P",...} */
	if (q.selector && q.selector[0] == '{' && q.selector[1] != '}')
		rc = asprintf(&sel, "{pid=\"%ld\",%s", pid, q.selector + 1);
	else
		rc = asprintf(&sel, "{pid=\"%ld\"}", pid);
	if (rc < 0) {
		fprintf(stderr, "gpuscope: out of memory\n");
		return 1;
	}
	q.selector = sel;
	rc = 1;
	url = query_url(&q, "intervals");
	snprintf(limit, sizeof(limit), "&kind=thread_state&limit=%d", FETCH_LIMIT);
	if (!url || !(url = realloc(url, strlen(url) + strlen(limit) + 1))) {
		fprintf(stderr, "gpuscope: out of memory\n");
		goto out;
	}
	strcat(url, limit);
	j = http_get_json(&q, url);
	if (!j)
		goto out;
	ivs = json_object_get(j, "intervals");
	if (!json_is_array(ivs)) {
		fprintf(stderr, "gpuscope: server: answer has no \"intervals\" array\n");
		goto out;
	}
	from_ms = q.from_ns / 1e6;
	to_ms = q.to_ns / 1e6;
	bucket_ms = (to_ms - from_ms) / width;
	json_array_foreach(ivs, i, iv)
		add_interval(iv, rows, &nrows, from_ms, to_ms, bucket_ms, (int)width, &dropped);
	print_rows(rows, nrows, (int)width, from_ms, to_ms, bucket_ms);
	if (json_is_true(json_object_get(j, "truncated")))
		printf("(truncated: more than %d intervals; narrow the range)\n", FETCH_LIMIT);
	if (dropped)
		printf("(%d intervals of threads beyond the first %d not shown)\n", dropped,
		       MAX_THREADS);
	rc = 0;
out:
	for (int k = 0; k < nrows; k++)
		free(rows[k].ns);
	json_decref(j);
	free(url);
	free(sel);
	return rc;
}
