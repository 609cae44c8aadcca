/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope explain`: the findings of /api/v1/insights (docs/insights.md), ranked by dollars at
 * stake, as a terminal list, Markdown or the server's JSON: what wastes GPU time, what it cost,
 * the evidence and the fix.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/client.h"
#include "cli/commands.h"

static const char usage_text[] =
	"usage: gpuscope explain --server URL [--since 24h | --from T [--to T]] [--by LABEL]\n"
	"                        [--selector S] [--format table|json|markdown] [--limit N]\n"
	"                        [--token-file F]   (--since defaults to 24h)\n"
	"Findings per workload (--by namespace, pod, comm, program, ...): what kept its GPUs\n"
	"idle or slow (input work on the training thread, a starved data loader, a host sync\n"
	"every step, launch-bound work, blocking copies, waiting off the node, GPUs held unused,\n"
	"throttled GPUs), the GPU-seconds and dollars at stake, the evidence and the fix; ranked\n"
	"by dollars at stake, --limit (default 25) printed.\n";

static void money(char *b, size_t n, double d)
{
	if (isnan(d))
		snprintf(b, n, "$?");
	else
		snprintf(b, n, "$%.2f", d);
}

static int print_findings(const struct query *q, json_t *j, bool md)
{
	json_t *fs = json_object_get(j, "findings"), *f, *e;
	size_t n = json_array_size(fs), i, k;
	double tot_s = 0, tot_d = 0;
	bool priced = true;

	if (!json_is_array(fs)) {
		fprintf(stderr, "gpuscope: server: answer has no \"findings\"\n");
		return 1;
	}
	json_array_foreach(fs, i, f) {
		tot_s += json_num(f, "gpu_seconds_at_stake");
		priced &= !isnan(json_num(f, "dollars_at_stake"));
		tot_d += isnan(json_num(f, "dollars_at_stake")) ? 0 : json_num(f, "dollars_at_stake");
	}
	{
		char d[32];

		money(d, sizeof(d), priced ? tot_d : NAN);
		printf("%s%zu finding%s over %.0f workload%s by %s: %.0f GPU-seconds at stake, %s%s\n",
		       md ? "### " : "", n, n == 1 ? "" : "s", json_num(j, "workloads_checked"),
		       json_num(j, "workloads_checked") == 1 ? "" : "s", json_str(j, "by"), tot_s, d,
		       priced ? "" : " (no --gpu-hour-price on the server: dollars unknown)");
	}
	if (!n)
		printf("%sNo finding: no workload shows a known pattern of waste in this range.\n",
		       md ? "\n" : "\n");
	json_array_foreach(fs, i, f) {
		char d[32];

		if ((long)i >= q->limit)
			break;
		money(d, sizeof(d), json_num(f, "dollars_at_stake"));
		if (md)
			printf("\n#### %zu. %s %s — %.0f GPU-s, %s (%s)\n\n%s\n\n**Fix:** %s\n\n", i + 1,
			       json_str(f, "workload"), json_str(f, "kind"), json_num(f, "gpu_seconds_at_stake"), d,
			       json_str(f, "confidence"), json_str(f, "summary"), json_str(f, "recommendation"));
		else
			printf("\n%zu. %-10s %s  %s  %.0f GPU-s  %.0f%% of held  confidence %s\n   %s\n"
			       "   %s\n   fix: %s\n", i + 1, d, json_str(f, "workload"), json_str(f, "kind"),
			       json_num(f, "gpu_seconds_at_stake"), 100 * json_num(f, "share_of_held"),
			       json_str(f, "confidence"), json_str(f, "title"), json_str(f, "summary"),
			       json_str(f, "recommendation"));
		json_array_foreach(json_object_get(f, "evidence"), k, e) {
			if (md)
				printf("- %s: [view](%s%s) · [api](%s%s)\n", json_str(e, "label"), q->server,
				       json_str(e, "ui"), q->server, json_str(e, "api"));
			else
				printf("   - %s\n     %s%s\n", json_str(e, "label"), q->server, json_str(e, "ui"));
		}
	}
	if ((long)n > q->limit)
		printf("\n(%zu more finding%s; --limit)\n", n - (size_t)q->limit,
		       n - (size_t)q->limit == 1 ? "" : "s");
	return 0;
}

int cmd_explain(int argc, char **argv)
{
	struct http_body body = { 0 };
	struct query q;
	char *url;
	int rc;

	url = query_open(argc, argv, Q_REPORT, usage_text, "insights", &q, &rc);
	if (!url)
		return rc;
	if (http_get(&q, url, &body)) {
		rc = 1;
		goto out;
	}
	rc = print_answer(&q, &body, print_findings);
out:
	free(body.data);
	free(url);
	return rc;
}
