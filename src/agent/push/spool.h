/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's bounded outage queue: compressed batches the server has not acknowledged yet,
 * oldest first. On disk (one fsync'd file per batch, written under a temporary name then
 * renamed, so a crash never leaves a half batch) or, without --spool-dir, in memory. Past the
 * byte bound, or when the disk is full, the oldest batches are dropped and counted (one drop
 * policy for both). Thread-safe (one mutex).
 */
#ifndef GPUSCOPE_AGENT_SPOOL_H
#define GPUSCOPE_AGENT_SPOOL_H

#include <stddef.h>
#include <stdint.h>
#include "common/compress.h"

struct spool;

struct spool_stats {
	uint64_t files, bytes;			/* queued now */
	uint64_t dropped_batches, dropped_samples, dropped_bytes;	/* oldest dropped past the bound */
	uint64_t write_errors;			/* disk writes that failed (batch dropped, counted) */
	uint64_t disk_full_drops;		/* of dropped_batches: oldest dropped for a full disk */
};

/*
 * Opens the spool in dir (created if missing; files left by an earlier run are queued again,
 * temporary leftovers removed), or in memory when dir is NULL. max_bytes bounds the queued
 * bytes. Returns NULL with errno set; free with spool__free().
 */
struct spool *spool__open(const char *dir, uint64_t max_bytes);
void spool__free(struct spool *s);

/*
 * Appends one compressed batch holding nsamples stack samples (copied). Drops the oldest
 * batches while over the bound or while the disk is full (ENOSPC, EDQUOT); a batch larger than
 * the whole bound, or one that fits no disk space at all, is dropped itself.
 * Returns 0 when queued, -E2BIG when dropped for size, or -errno on a write error (counted).
 */
int spool__put(struct spool *s, const uint8_t *data, size_t len, enum compression enc,
	       uint64_t nsamples);

/*
 * Reads the oldest batch. *ret_data is malloc'ed (the caller frees). Returns 0, -ENOENT when
 * empty, or -errno (an unreadable file is dropped, counted, and the next one is tried).
 */
int spool__peek(struct spool *s, uint8_t **ret_data, size_t *ret_len, enum compression *ret_enc,
		uint64_t *ret_nsamples);
/* Removes the oldest batch (after it was delivered or rejected). */
void spool__pop(struct spool *s);

size_t spool__count(struct spool *s);
void spool__stats(struct spool *s, struct spool_stats *ret);

#endif
