/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prometheus counters the server computes from stored data (docs/efficiency.md): GPU seconds
 * busy/idle/unknown/unheld and idle dollars per workload (namespace, pod), at most N workloads
 * plus "other", and the named profile queries of --export-queries. Each scrape counts the
 * window from the previous scrape's end to now minus the settle time.
 */
#ifndef GPUSCOPE_EXPORTER_H
#define GPUSCOPE_EXPORTER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "server/codec.h"
#include "server/efficiency.h"
#include "server/store/store.h"

#define EXPORT_TIMEOUT_DEFAULT_NS (5 * 1000000000ull)

struct exporter_cfg {
	const char *queries_file;	/* --export-queries, or NULL */
	size_t top;			/* workloads with series of their own */
	uint64_t settle_ns;		/* windows close this far behind now */
	uint64_t budget_ns;		/* --export-timeout: a scrape's time for the queries (0:
					 * EXPORT_TIMEOUT_DEFAULT_NS) */
};

struct exporter;

/*
 * Reads and checks the queries file. NULL with a reason in err ("FILE:LINE: why") when a query
 * is bad or the file cannot be read. Free with exporter_free().
 */
struct exporter *exporter_new(struct store *st, struct efficiency *e,
			      const struct exporter_cfg *cfg, char *err, size_t errlen);
void exporter_free(struct exporter *x);

/*
 * Counts the window that closed since the last call, then writes every counter to out
 * (common/prom.h). 0 (a window that failed is counted and retried at the next call). The
 * queries' regexes run here, within cfg.budget_ns: call it off the HTTP event loops. While
 * another call counts, it prints what is counted so far without waiting. Any thread.
 */
int exporter_metrics(struct exporter *x, FILE *out);

#endif
