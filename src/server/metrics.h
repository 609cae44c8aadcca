/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server's own metrics on GET /metrics, in the Prometheus text format: the HTTP front's
 * counters (ingest, rejects by reason, connections), the store's figures, the efficiency rollup's
 * state and the exporter's computed counters.
 */
#ifndef GPUSCOPE_SERVER_METRICS_H
#define GPUSCOPE_SERVER_METRICS_H

#include <stdint.h>
#include "server/codec.h"
#include "server/store/store.h"

struct efficiency;
struct exporter;

/* Why a request was refused: the reason label of gpuscope_server_rejected_total. */
enum reject {
	REJ_TOO_LARGE, REJ_BAD_ENCODING, REJ_UNKNOWN_ENCODING, REJ_MALFORMED, REJ_VERSION,
	REJ_STORE, REJ_UNAUTHORIZED, REJ_BAD_QUERY, REJ_NOT_FOUND, REJ_LIMIT, REJ_TIME, REJ_SELECTOR,
	REJ_CARDINALITY, REJ_HOST, REJ_ORIGIN, REJ_BUSY, REJ_MAX,
};

/* Connections refused at accept (labels of gpuscope_server_connections_refused_total). */
enum conn_refuse { REFUSE_PER_ADDRESS, REFUSE_GLOBAL, REFUSE_MAX };
/* Connections the server cut (gpuscope_server_connections_cut_total). */
enum conn_cut { CUT_HEADERS, CUT_BODY, CUT_EVICTED, CUT_MAX };

/* The HTTP front's counters; any thread updates them with relaxed atomics. */
struct http_counters {
	int64_t connections;		/* open now */
	uint64_t connections_total, mhd_errors;
	uint64_t cancelled;		/* requests whose client went away before the answer */
	uint64_t rejects[REJ_MAX];
	uint64_t refused[REFUSE_MAX], cut[CUT_MAX];
	uint64_t ingest_batches, ingest_parts, ingest_bytes;
	int64_t inflight_bytes;		/* ingest bodies (and their decompressed form) held now */
	uint64_t inflight_max;		/* --max-inflight-bodies */
};

/*
 * Renders the exposition (text/plain; version=0.0.4) into *ret: the counters of hc,
 * samples_per_second, the stats of st, and those of eff and ex where not NULL. 0, or -ENOMEM
 * with *ret untouched; the caller frees *ret with buf_done().
 */
int server_metrics(struct store *st, const struct http_counters *hc, double samples_per_second,
		   struct efficiency *eff, struct exporter *ex, struct buf *ret);

#endif
