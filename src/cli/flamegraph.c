/* SPDX-License-Identifier: Apache-2.0 */
/* `gpuscope flamegraph`: fetches /api/v1/flamegraph and writes an interactive SVG. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/flamesvg.h"
#include "common/util.h"

static const char usage_text[] =
	"usage: gpuscope flamegraph --server URL [--since 1h | --from T [--to T]] [--selector S]\n"
	"                           [--kind cpu|offcpu_ns|gpu_kernel_ns|cuda_sync_ns]\n"
	"                           [--gpu-idle GPU] [--python-only] [--title T] [--token-file F]\n"
	"                           [--ca-file F] -o out.svg\n"
	"Writes a self-contained interactive flame graph (click to zoom, Ctrl-F to search).\n"
	"Times: RFC 3339 or Unix seconds; --since defaults to 1h. --gpu-idle GPU keeps only\n"
	"the samples taken while that GPU was idle. --python-only folds the interpreter's own frames\n"
	"between Python frames (Python functions adjacent, native code they call kept).\n"
	"$GPUSCOPE_SERVER and $GPUSCOPE_TOKEN_FILE are the defaults of --server and --token-file.\n";

static void fmt_time(uint64_t ns, char *buf, size_t len)
{
	time_t t = ns / NSEC_PER_SEC;
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int cmd_flamegraph(int argc, char **argv)
{
	struct flame_svg_stats st;
	char subtitle[1024], a[32], z[32], why[256];
	json_t *j = NULL;
	char *url, *svg = NULL;
	size_t svg_len = 0;
	struct query q;
	FILE *f;
	int rc, err;

	url = query_open(argc, argv, Q_OUTPUT | Q_GPU_IDLE | Q_TITLE, usage_text, "flamegraph", &q,
			 &rc);
	if (!url)
		return rc;
	rc = 1;
	j = http_get_json(&q, url);
	if (!j)
		goto out;
	if (q.have_range) {
		fmt_time(q.from_ns, a, sizeof(a));
		fmt_time(q.to_ns, z, sizeof(z));
	} else {
		snprintf(a, sizeof(a), "last %s", q.since);
		z[0] = 0;
	}
	snprintf(subtitle, sizeof(subtitle), "%s%s%s  kind %s%s%s%s%s", a, z[0] ? " .. " : "", z,
		 q.kind ? q.kind : "cpu", q.selector ? "  " : "", q.selector ? q.selector : "",
		 q.gpu_idle ? "  while idle: gpu " : "", q.gpu_idle ? q.gpu_idle : "");
	if (json_is_object(json_object_get(j, "traced"))) {
		size_t at = strlen(subtitle);

		/* kernel time exists only inside CUPTI windows */
		snprintf(subtitle + at, sizeof(subtitle) - at, "  kernels traced in %.1f%% of the range",
			 100.0 * json_number_value(json_object_get(json_object_get(j, "traced"),
								   "fraction")));
	}
	{
		json_t *e = json_object_get(json_object_get(j, "gpu_sources"), "estimate");
		size_t at = strlen(subtitle);

		/* a GPU-idle answer: what share of it windows' samples stand for */
		if (json_is_object(e))
			snprintf(subtitle + at, sizeof(subtitle) - at,
				 "  %.0f%% estimated from %.1f%% traced time, %.0f%% unknown",
				 100.0 * json_number_value(json_object_get(e, "estimated_share")),
				 100.0 * json_number_value(json_object_get(e, "traced")),
				 100.0 * json_number_value(json_object_get(e, "unknown")));
		if (json_is_object(e))
			fprintf(stderr, "%s\n", json_string_value(json_object_get(e, "summary")));
	}
	f = open_memstream(&svg, &svg_len);
	if (!f) {
		fprintf(stderr, "gpuscope: out of memory\n");
		goto out;
	}
	err = flame_svg_write(f, j, &(struct flame_svg_opts){ .title = q.title,
							       .subtitle = subtitle },
			      &st, why, sizeof(why));
	fclose(f);
	if (err) {
		fprintf(stderr, "gpuscope: server: bad flame graph answer: %s\n",
			err == -EINVAL ? why : strerror(-err));
		goto out;
	}
	if (write_output(q.output, svg, svg_len))
		goto out;
	if (strcmp(q.output, "-"))
		fprintf(stderr, "gpuscope: wrote %s (%zu frames, depth %u)\n", q.output, st.frames,
			st.max_depth);
	rc = 0;
out:
	free(svg);
	json_decref(j);
	free(url);
	return rc;
}
