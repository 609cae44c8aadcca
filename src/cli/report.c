/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope report`: GPU efficiency by workload from /api/v1/efficiency, as a terminal table,
 * Markdown or the server's JSON; rows sorted by idle dollars, with the top causes of idle time.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/client.h"
#include "cli/commands.h"
#include "common/util.h"

static const char usage_text[] =
	"usage: gpuscope report --server URL [--since 24h | --from T [--to T]] [--by LABEL]\n"
	"                       [--selector S] [--format table|json|markdown] [--limit N]\n"
	"                       [--token-file F]   (--since defaults to 24h)\n"
	"GPU-hours held, busy, idle and unknown per workload (--by namespace, pod, owner,\n"
	"kubeflow_job, ray_cluster, comm, program (the script: train.py), pid, node), idle\n"
	"dollars (the server's\n"
	"--gpu-hour-price), the busy source, and the top CPU causes while the GPU was idle.\n"
	"Rows are sorted by idle dollars; --limit (default 25) rows are printed.\n";

#define COLS 10

struct cell {
	char s[COLS][160];
};

static void fmt_h(char *b, size_t n, double v)
{
	if (isnan(v))
		snprintf(b, n, "-");
	else
		snprintf(b, n, "%.2f", v);
}

static void fmt_pct(char *b, size_t n, double v)
{
	if (isnan(v))
		snprintf(b, n, "-");
	else
		snprintf(b, n, "%.0f%%", 100 * v);
}

/* The source that decided most of a row: the largest of "sources", or unknown. */
static const char *main_source(json_t *row)
{
	json_t *src = json_object_get(row, "sources"), *v;
	const char *k, *best = "unknown";
	double bv = 0;

	json_object_foreach(src, k, v) {
		if (json_number_value(v) > bv) {
			bv = json_number_value(v);
			best = k;
		}
	}
	return best;
}

/* Up to three causes: the top functions while idle, then the top wait reason. */
static void fmt_causes(json_t *row, char *b, size_t n)
{
	json_t *c = json_object_get(row, "causes"), *fns, *blk, *it;
	double idle = json_num(c, "idle_seconds");
	size_t i, used = 0, k = 0;

	b[0] = 0;
	if (!json_is_object(c)) {
		snprintf(b, n, "-");
		return;
	}
	fns = json_object_get(c, "functions");
	blk = json_object_get(c, "blocked");
	/* estimated shares (windows standing for undecided time) are marked "~" */
	if (json_num(json_object_get(c, "idle_estimate"), "estimated_share") > 0)
		used += (size_t)snprintf(b + used, n - used, "~");
	json_array_foreach(fns, i, it) {
		if (k == 2 || used >= n)
			break;
		used += (size_t)snprintf(b + used, n - used, "%s%s %.0f%%", k ? ", " : "",
					 json_str(it, "name"), 100 * json_num(it, "share"));
		k++;
	}
	it = json_array_get(blk, 0);
	if (it && idle > 0 && used < n) {
		used += (size_t)snprintf(b + used, n - used, "%swait %s %.0f%%", k ? ", " : "",
					 json_str(it, "reason"), 100 * json_num(it, "thread_seconds") / idle);
		k++;
	}
	if (!k)
		snprintf(b, n, "(no CPU samples while idle)");
}

static void put_row(struct cell *rows, size_t *n, const char *const *v)
{
	for (int c = 0; c < COLS; c++)
		snprintf(rows[*n].s[c], sizeof(rows[*n].s[c]), "%s", v[c] ? v[c] : "");
	(*n)++;
}

static void print_rows(const struct cell *rows, size_t n, bool md)
{
	size_t w[COLS] = { 0 };

	for (size_t r = 0; r < n; r++)
		for (int c = 0; c < COLS; c++)
			if (strlen(rows[r].s[c]) > w[c])
				w[c] = strlen(rows[r].s[c]);
	for (size_t r = 0; r < n; r++) {
		for (int c = 0; c < COLS; c++) {
			bool left = c == 0 || c >= COLS - 2;
			int wd = (int)w[c];

			if (md)
				printf("| %-*s ", wd, rows[r].s[c]);
			else if (c == COLS - 1)
				printf("%s", rows[r].s[c]);
			else
				printf(left ? "%-*s  " : "%*s  ", wd, rows[r].s[c]);
		}
		printf(md ? "|\n" : "\n");
		if (md && !r) {
			for (int c = 0; c < COLS; c++) {
				bool left = c == 0 || c >= COLS - 2;

				printf("|%s", left ? " " : " ");
				for (size_t k = 0; k < w[c] - (left ? 0 : 1); k++)
					putchar('-');
				printf(left ? " " : ": ");
			}
			printf("|\n");
		}
	}
}

static int print_report(const struct query *q, json_t *j, bool md)
{
	json_t *wls = json_object_get(j, "workloads"), *un = json_object_get(j, "unheld");
	json_t *tot = json_object_get(j, "totals"), *it;
	size_t nw = json_array_size(wls), nu = json_array_size(un), n = 0, i;
	const char *by = json_str(j, "by");
	struct cell *rows;
	char hdr[64], dur[32], cols[COLS][160];
	double from = json_num(j, "from_ms"), to = json_num(j, "to_ms"), ngpus = 0;

	if (!json_is_array(wls) || !json_is_object(tot)) {
		fprintf(stderr, "gpuscope: server: answer has no \"workloads\"\n");
		return 1;
	}
	rows = calloc(nw + 4, sizeof(*rows));
	if (!rows) {
		fprintf(stderr, "gpuscope: out of memory\n");
		return 1;
	}
	snprintf(hdr, sizeof(hdr), "%s", by);
	for (char *p = hdr; *p; p++)
		*p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
	{
		const char *h[COLS] = { hdr, "GPUS", "HELD GPU-h", "BUSY", "IDLE", "UNKNOWN",
					"UTIL", "IDLE $", "SOURCE", "TOP CAUSES WHILE IDLE" };

		put_row(rows, &n, h);
	}
	json_array_foreach(wls, i, it) {
		const char *v[COLS];

		if ((long)i >= q->limit)
			break;
		ngpus += (double)json_array_size(json_object_get(it, "gpus"));
		snprintf(cols[1], sizeof(cols[1]), "%zu", json_array_size(json_object_get(it, "gpus")));
		fmt_h(cols[2], sizeof(cols[2]), json_num(it, "held_gpu_hours"));
		fmt_h(cols[3], sizeof(cols[3]), json_num(it, "busy_gpu_hours"));
		fmt_h(cols[4], sizeof(cols[4]), json_num(it, "idle_gpu_hours"));
		fmt_h(cols[5], sizeof(cols[5]), json_num(it, "unknown_gpu_hours"));
		fmt_pct(cols[6], sizeof(cols[6]), json_num(it, "utilization"));
		fmt_h(cols[7], sizeof(cols[7]), json_num(it, "idle_dollars"));
		fmt_causes(it, cols[9], sizeof(cols[9]));
		v[0] = json_str(it, "workload");
		for (int c = 1; c < COLS; c++)
			v[c] = cols[c];
		v[8] = main_source(it);
		put_row(rows, &n, v);
	}
	if (nu) {
		double h = 0, d = 0;
		bool priced = true;
		char where[160] = "";
		size_t used = 0;

		json_array_foreach(un, i, it) {
			h += json_num(it, "gpu_hours");
			priced &= !isnan(json_num(it, "dollars"));
			d += isnan(json_num(it, "dollars")) ? 0 : json_num(it, "dollars");
			if (used < sizeof(where))
				used += (size_t)snprintf(where + used, sizeof(where) - used, "%s%s/%s",
							 i ? ", " : "nobody held ", json_str(it, "node"),
							 json_str(it, "gpu"));
		}
		snprintf(cols[1], sizeof(cols[1]), "%zu", nu);
		fmt_h(cols[2], sizeof(cols[2]), h);
		fmt_h(cols[7], sizeof(cols[7]), priced ? d : NAN);
		{
			const char *v[COLS] = { "(unheld)", cols[1], cols[2], "-", "-", "-", "-",
						cols[7], json_str(json_array_get(un, 0), "source"), where };

			put_row(rows, &n, v);
		}
	}
	{
		double busy = json_num(tot, "busy_gpu_hours"), idle = json_num(tot, "idle_gpu_hours");
		const char *v[COLS];

		snprintf(cols[1], sizeof(cols[1]), "%.0f", ngpus + (double)nu);
		fmt_h(cols[2], sizeof(cols[2]), json_num(tot, "held_gpu_hours"));
		fmt_h(cols[3], sizeof(cols[3]), busy);
		fmt_h(cols[4], sizeof(cols[4]), idle);
		fmt_h(cols[5], sizeof(cols[5]), json_num(tot, "unknown_gpu_hours"));
		fmt_pct(cols[6], sizeof(cols[6]), busy + idle > 0 ? busy / (busy + idle) : NAN);
		fmt_h(cols[7], sizeof(cols[7]), json_num(tot, "idle_dollars"));
		v[0] = "TOTAL";
		for (int c = 1; c < COLS; c++)
			v[c] = cols[c];
		v[8] = "";
		v[9] = "";
		snprintf(cols[9], sizeof(cols[9]), "unheld: %.2f GPU-h", json_num(tot, "unheld_gpu_hours"));
		if (!isnan(json_num(tot, "unheld_dollars")))
			snprintf(cols[9] + strlen(cols[9]), sizeof(cols[9]) - strlen(cols[9]),
				 ", $%.2f", json_num(tot, "unheld_dollars"));
		v[9] = cols[9];
		put_row(rows, &n, v);
	}
	{
		double d = (to - from) / 1e3;

		if (d >= 3600 && fmod(d, 3600) == 0)
			snprintf(dur, sizeof(dur), "%.0fh", d / 3600);
		else if (d >= 60 && fmod(d, 60) == 0)
			snprintf(dur, sizeof(dur), "%.0fm", d / 60);
		else
			snprintf(dur, sizeof(dur), "%.3gs", d);
	}
	printf("%sGPU efficiency by %s over %s: %zu workload%s%s\n\n", md ? "### " : "", by, dur,
	       nw, nw == 1 ? "" : "s",
	       isnan(json_num(tot, "idle_dollars")) ? " (no --gpu-hour-price on the server: dollars unknown)" : "");
	print_rows(rows, n, md);
	if ((long)nw > q->limit)
		printf("%s(%zu more workload%s; --limit)\n", md ? "\n" : "", nw - (size_t)q->limit,
		       nw - (size_t)q->limit == 1 ? "" : "s");
	free(rows);
	return 0;
}

/*
 * A range without GPU data is an answer, not a failure: says so and why that may be (exit 0).
 * Returns 0 when the server's 404 said so (printed), 1 for another error (printed).
 */
static int no_gpu_data(const struct query *q, long status, const struct http_body *b)
{
	json_t *j = json_loadb(b->data, b->len, 0, NULL), *out;
	const char *err = json_string_value(json_object_get(j, "error"));
	char why[1024], range[96];
	int rc = 1;

	if (status != 404 || !err || strncmp(err, "no GPU data", 11)) {
		fprintf(stderr, "gpuscope: server: %s (HTTP %ld)\n",
			err ? err : b->len ? b->data : "(empty answer)", status);
		goto out;
	}
	if (q->have_range)
		snprintf(range, sizeof(range), "%.3f to %.3f (Unix seconds)",
			 q->from_ns / 1e9, q->to_ns / 1e9);
	else
		snprintf(range, sizeof(range), "the last %s", q->since);
	snprintf(why, sizeof(why),
		 "No GPU data in %s%s%s, so there is nothing to report. Maybe no "
		 "agent here sees a GPU (no NVIDIA driver or libnvidia-ml on the node, or the agent "
		 "runs with --no-gpu: `gpuscope doctor` on the node says), the agents ran at "
		 "another time (widen --since or --from/--to), or the selector matches no process "
		 "that holds a GPU.", range, q->selector ? " for selector " : "",
		 q->selector ? q->selector : "");
	if (!strcmp(q->format, "json")) {
		out = json_pack("{s:[],s:s}", "workloads", "no_gpu_data", why);
		if (out)
			json_dumpf(out, stdout, JSON_COMPACT);
		puts("");
		json_decref(out);
	} else {
		printf("%s%s\n", !strcmp(q->format, "markdown") ? "> " : "", why);
	}
	rc = 0;
out:
	json_decref(j);
	return rc;
}

int cmd_report(int argc, char **argv)
{
	struct http_body body = { 0 };
	struct query q;
	long status = 0;
	char *url;
	int rc;

	url = query_open(argc, argv, Q_REPORT, usage_text, "efficiency", &q, &rc);
	if (!url)
		return rc;
	rc = http_get_status(&q, url, &body, &status);
	if (rc < 0) {
		rc = 1;
		goto out;
	}
	if (rc) {
		rc = no_gpu_data(&q, status, &body);
		goto out;
	}
	rc = print_answer(&q, &body, print_report);
out:
	free(body.data);
	free(url);
	return rc;
}
