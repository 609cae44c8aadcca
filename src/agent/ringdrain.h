/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A BPF ring buffer drained by a thread of its own into a bounded queue in user memory, for a
 * module whose ring fills faster than the main loop comes round: the ring stays small (it is
 * mapped twice, so it counts twice in RSS), its producer wakes the thread when it passes a
 * mark (BPF_RB_FORCE_WAKEUP), and a main loop busy for a while (symbolizing a new library,
 * pushing) loses nothing until the queue's cap. Queue memory is mapped in 1 MiB chunks and
 * given back once the main loop has taken them, so it is RSS only while it holds events.
 *
 * The thread and ring_drain__take() are the ring's only consumers, each under the drain's
 * lock. Events reach `fn` of ring_drain__take() in ring order, on the caller's thread.
 */
#ifndef GPUSCOPE_AGENT_RINGDRAIN_H
#define GPUSCOPE_AGENT_RINGDRAIN_H

#include <stddef.h>
#include <stdint.h>

struct ring_drain;

/* Called, with the drain's lock held, for each event the full queue could not take. */
typedef void (*ring_drain_lost_fn)(void *ctx, const void *data, size_t size);

/*
 * The bytes of an event worth keeping (<= size): a ring record is as long as its reservation,
 * which for a variable-length event (a stack) is its largest size.
 */
typedef size_t (*ring_drain_size_fn)(const void *data, size_t size);

/*
 * Starts draining BPF ring buffer map_fd into a queue of at most cap_bytes (event bytes, each
 * event cut to what used() says if given); NULL with errno on failure (no ring, no thread).
 */
struct ring_drain *ring_drain__start(int map_fd, size_t cap_bytes, ring_drain_size_fn used,
				     ring_drain_lost_fn lost, void *ctx);

/*
 * Drains the ring now, then hands every queued event to fn (a libbpf ring_buffer_sample_fn's
 * shape: ctx, data, size; its return value is ignored) and frees the queue. Returns the number
 * of events handed over.
 */
long ring_drain__take(struct ring_drain *d, int (*fn)(void *ctx, void *data, size_t size),
		      void *ctx);

struct ring_drain_stats {
	uint64_t wakeups;	/* the thread woken by the ring (a mark passed) */
	uint64_t queued;	/* events moved into the queue */
	uint64_t lost;		/* events the full queue could not take */
	uint64_t peak_bytes;	/* most queue memory mapped at once */
};
void ring_drain__stats(struct ring_drain *d, struct ring_drain_stats *ret);

/* Stops the thread (the queue is dropped: take what you need first) and frees everything. */
void ring_drain__free(struct ring_drain *d);

#endif
