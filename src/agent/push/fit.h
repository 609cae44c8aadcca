/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batches sized to the server's limits before they are sent: the limits the server advertises
 * on every answer (the Gpuscope-Ingest-Limits header: body size and decoding budget), and the
 * check of an encoded batch against them, the server's own decoding checks run on our side.
 */
#ifndef GPUSCOPE_AGENT_PUSH_FIT_H
#define GPUSCOPE_AGENT_PUSH_FIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The server's default --max-body: what a batch is held to before the server told its own. */
#define INGEST_MAX_BODY_DEFAULT (64u << 20)

struct ingest_limits {
	uint64_t max_body;		/* bytes of a body, compressed and decompressed */
	uint64_t decode_base, decode_ratio;	/* decoding budget: base + ratio x body bytes */
	bool known;			/* told by the server (else common/batch.h's and defaults) */
};

/* The defaults: INGEST_MAX_BODY_DEFAULT and common/batch.h's BATCH_DECODE_*. */
void ingest_limits_default(struct ingest_limits *l);

/* Takes a Gpuscope-Ingest-Limits value ("max-body=N, decode-base=N, decode-ratio=N") into l;
 * false (l unchanged) when it names no valid max-body. Unknown keys are ignored. */
bool ingest_limits_parse(struct ingest_limits *l, const char *v);

/*
 * Whether an encoded batch (raw: the uncompressed protobuf, body_len: the bytes sent) passes
 * the server's size and decoding checks under l: both lengths within max_body, and
 * batch_scan() plus batch_decode_scanned() (the label bytes it resolves) within the budget the
 * server gives a body of body_len bytes. Also false for a batch the server would find
 * malformed (then splitting decides nothing more: the caller sends it as it is).
 */
bool batch_fits(const struct ingest_limits *l, const uint8_t *raw, size_t raw_len,
		size_t body_len);

struct batch_counts;
/*
 * A bound of batch_fits() from what the agent knows of the batch it built (batch__counts()),
 * the encoded sizes and l, without decoding: true only if batch_fits() is true (docs/push.md,
 * "The fit check"); false also when it cannot tell, then the caller runs batch_fits().
 */
bool batch_fits_bound(const struct ingest_limits *l, const struct batch_counts *c,
		      size_t raw_len, size_t body_len);

#endif
