/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Findings (docs/insights.md): per workload and range, detectors over what the store and the
 * efficiency computation hold name the waste of GPU time, its cause, what it cost and the fix,
 * with links to the views that show the evidence. Answers GET /api/v1/insights and feeds a
 * Prometheus counter of GPU-seconds at stake per finding kind and workload.
 */
#ifndef GPUSCOPE_INSIGHTS_H
#define GPUSCOPE_INSIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "server/codec.h"
#include "server/efficiency.h"
#include "server/store/store.h"

struct insights;

struct insights_cfg {
	size_t top;			/* /metrics: workloads with series of their own */
	uint64_t settle_ns;		/* /metrics windows close this far behind now */
};

/* NULL with errno. Free with insights_free(). st and e must outlive it. */
struct insights *insights_new(struct store *st, struct efficiency *e,
			      const struct insights_cfg *cfg);
void insights_free(struct insights *in);

struct insights_request {
	uint64_t from_ns, to_ns;
	const char *by;			/* as efficiency's (NULL: namespace) */
	const char *selector;		/* NULL or "": everything */
	size_t limit;			/* findings in the answer; 0: all */
	bool facts;			/* add each workload GPU's facts (what the rules compare) */
};

/*
 * The findings JSON (docs/insights.md) appended to out. 0; -EINVAL (bad or empty by, bad
 * selector), -E2BIG (a selector regex past its limits), -ETIMEDOUT, -ENODATA (no GPU or CPU data
 * in the range) with a reason in err; other -errno from the store.
 */
int insights_query(struct insights *in, const struct insights_request *r, struct buf *out,
		   char *err, size_t errlen);

/*
 * Counts the findings of the window closed since the last call into the counters, then writes
 * gpuscope_server_insight_gpu_seconds_total{kind,workload} to out (common/prom.h). 0.
 */
int insights_metrics(struct insights *in, FILE *out);

#endif
