/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's push path: a thread that encodes and compresses finished batches, POSTs them to
 * the server's /api/v1/ingest (through agent/http_client.h), and while the server is
 * unreachable keeps them in the spool, retrying with exponential backoff and jitter, then
 * delivers the spool oldest-first.
 * 4xx answers other than 401/403/408/429 mean a bad batch: logged, counted, dropped.
 */
#ifndef GPUSCOPE_AGENT_PUSH_H
#define GPUSCOPE_AGENT_PUSH_H

#include <stdint.h>
#include <stdio.h>
#include "common/compress.h"

struct batch;
struct spool;
struct pusher;
struct http_link;

struct pusher_opts {
	struct http_link *link;		/* the server's link (base URL, TLS, token, proxy): the
					 * caller's, outliving the pusher; a base URL that ends in
					 * /api/v1/ingest is taken as is */
	enum compression compression;
	uint64_t retry_base_ns;		/* first backoff, default 1 s */
	uint64_t retry_max_ns;		/* backoff cap, default 30 s */
	uint64_t timeout_ns;		/* per request, default 10 s */
};

/*
 * Starts the push thread. The spool stays owned by the caller and must outlive the pusher.
 * Returns NULL with errno set; stop and free with pusher__stop() then pusher__free().
 */
struct pusher *pusher__new(const struct pusher_opts *o, struct spool *spool);

/*
 * Hands a finished batch to the push thread (ownership moves; it is freed there). Never
 * blocks on the network: when the queue of pending batches is full the oldest pending one is
 * dropped and counted. Returns 0 or -errno (then the batch was freed and counted as dropped).
 */
int pusher__submit(struct pusher *p, struct batch *b);

/*
 * Delivers or spools every pending batch, then tries to drain the spool until deadline_ns
 * (CLOCK_MONOTONIC) or the first failure, and joins the thread. A request in flight is cut at
 * the deadline (its batch stays in the spool), and batches still queued then are spooled
 * without a try. Idempotent.
 */
void pusher__stop(struct pusher *p, uint64_t deadline_ns);
void pusher__free(struct pusher *p);

/* Prometheus text lines for the push counters and the spool gauges. Any thread. */
void pusher__metrics(struct pusher *p, FILE *out);

/* Sample counts so far, for the summary line at exit. Any thread. */
struct push_counts {
	uint64_t batches_submitted, samples_submitted;	/* handed to the push thread */
	uint64_t batches_pushed, samples_pushed;	/* acknowledged by the server */
	uint64_t batches_rejected, samples_rejected;	/* refused with a 4xx, dropped */
	uint64_t samples_dropped;	/* push queue overflow, spool bound, encode errors */
	uint64_t spool_files, spool_samples_dropped;
	uint64_t samples_pushed_earlier;	/* of samples_pushed: an earlier run's spool */
	uint64_t batches_split;			/* 413s answered by sending halves */
};
void pusher__counts(struct pusher *p, struct push_counts *ret);

/* One-shot helpers, also used by the benchmark: encode + compress a batch. 0 or -errno. */
int push_encode(struct batch *b, enum compression c, uint8_t **ret, size_t *ret_len,
		size_t *ret_raw_len);

#endif
