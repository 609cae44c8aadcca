/* SPDX-License-Identifier: Apache-2.0 */
/*
 * On-demand deep captures and the Perfetto-readable trace export (issue 14):
 *   POST /api/v1/capture?node=N[&pid=P]&duration=5s     ask node N's agent for a capture window
 *   GET  /api/v1/capture/pending?node=N                 the agent takes its node's requests
 *   POST /api/v1/capture/result?id=&status=&message=&from=&to=   the agent's answer
 *   GET  /api/v1/capture/status?id=                     the request's state and the answer
 *   GET  /api/v1/capture/nodes                          nodes whose agents asked lately (5 min)
 *   GET  /api/v1/trace?node=N&from=&to=[&pid=P]         Chrome trace-event JSON (Perfetto UI)
 * The request registry is in memory (a capture is a short-lived request; what it records is in
 * the store like everything else). The trace is built from the store's intervals and series.
 */
#ifndef GPUSCOPE_SERVER_CAPTURE_H
#define GPUSCOPE_SERVER_CAPTURE_H

#include <stdbool.h>
#include <stdint.h>
#include "server/codec.h"

struct store;

/*
 * How long a request waits for its node's agent to take it, and how long past its duration an
 * agent that took it has to answer; then it expires (its slot is free). Default 30 s. Call
 * before serving.
 */
void capture_set_timeout(uint64_t ns);

/* True for the agent's paths (pending, result): they take the ingest token, not the query
 * token. */
bool capture_agent_path(const char *url);

/* How the router passes query arguments: the value of `name`, or NULL. */
typedef const char *(*capture_arg_fn)(void *ctx, const char *name);

/* True for the paths capture_handle() serves. */
bool capture_path(const char *url);

/*
 * Serves one request on a capture path: fills out (JSON) and returns the HTTP status (200,
 * 400 with {"error": ...}, 404, 405, 409 for a result to a request no agent took or already
 * answered, 429 past 8 requests in flight for the node or 64 in all). Any thread.
 */
unsigned capture_handle(struct store *st, const char *url, bool post, capture_arg_fn arg,
			void *actx, struct buf *out);

/*
 * Appends the Chrome trace-event JSON of node's records in [from, to) (pid 0: every process):
 * GPU kernels, memcpy and memset on one lane per GPU stream, CUDA API calls and thread states
 * per thread, trace windows, NVML series as counter tracks. Times are microseconds from `from`
 * (otherData.from_unix_ns), one clock. 0 or -errno.
 */
int trace_export(struct store *st, const char *node, uint32_t pid, uint64_t from_ns,
		 uint64_t to_ns, struct buf *out);

#endif
