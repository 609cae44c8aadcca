/* SPDX-License-Identifier: Apache-2.0 */
/* `gpuscope pprof`: downloads the merged profile (gzip'd profile.proto) for a range and selector. */
#include <stdio.h>
#include <stdlib.h>
#include "cli/client.h"
#include "cli/commands.h"

static const char usage_text[] =
	"usage: gpuscope pprof --server URL [--since 5m | --from T [--to T]] [--selector S]\n"
	"                      [--kind cpu|offcpu_ns|gpu_kernel_ns|cuda_sync_ns] [--token-file F] [--ca-file F]\n"
	"                      -o FILE\n"
	"Writes the merged pprof profile (gzip'd profile.proto; '-o -' for stdout).\n"
	"Times: RFC 3339 or Unix seconds; --since defaults to 1h.\n"
	"$GPUSCOPE_SERVER and $GPUSCOPE_TOKEN_FILE are the defaults of --server and --token-file.\n";

int cmd_pprof(int argc, char **argv)
{
	struct http_body b = { 0 };
	struct query q;
	char *url;
	int rc;

	url = query_open(argc, argv, Q_OUTPUT, usage_text, "pprof", &q, &rc);
	if (!url)
		return rc;
	rc = 1;
	if (http_get(&q, url, &b))
		goto out;
	if (b.len < 2 || (unsigned char)b.data[0] != 0x1f || (unsigned char)b.data[1] != 0x8b) {
		fprintf(stderr, "gpuscope: server: answer is not a gzip'd profile (%zu bytes)\n",
			b.len);
		goto out;
	}
	if (write_output(q.output, b.data, b.len))
		goto out;
	if (q.output[0] != '-' || q.output[1])
		fprintf(stderr, "gpuscope: wrote %s (%zu bytes)\n", q.output, b.len);
	rc = 0;
out:
	free(b.data);
	free(url);
	return rc;
}
