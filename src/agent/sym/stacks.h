/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Raw stacks (kernel + user return addresses from bpf_get_stack) to symbolized location lists,
 * cached by (pid, frames) so each distinct stack is symbolized once. Used by every producer
 * that captures stacks: CPU samples, off-CPU, CUDA API probes, CUPTI launches.
 */
#ifndef GPUSCOPE_STACKS_H
#define GPUSCOPE_STACKS_H

#include <stdint.h>
#include <sys/types.h>
#include <linux/types.h>
#include "common/batch.h"

struct agent;
struct symbolizer;
struct stack_cache;

/* A symbolized stack: kernel frames then user frames, innermost first. Owned by the cache. */
struct sym_stack {
	uint64_t key;		/* hash of (pid, frames) */
	uint32_t n, nkernel;
	uint32_t cap;		/* locations allocated (raw kernel + user words) */
	uint32_t nunknown;	/* frames whose function did not resolve */
	uint64_t resolved_ns;	/* when symbolized (CLOCK_MONOTONIC) */
	uint64_t batch_id;	/* agent__stack(): the batch whose stack id is cached below */
	int64_t batch_stack;
	/* where autograd's worker loop (torch::autograd::Engine::thread_main) is in locs: a
	 * thread that works for another thread's backward call (agent__thread_stack()); -1: not,
	 * or it waits for its next task (ReadyQueue::pop above the loop) */
	int32_t engine_at;
	bool has_python;	/* a Python frame (module "[python]") among the user frames */
	struct location locs[];
};

/*
 * Cache over symbolizer s, holding at most max_stacks (0: 65536) and STACK_CACHE_MAX_BYTES of
 * them (56 bytes a frame: ~6 KB for a 100-frame PyTorch stack); when full it is cleared and
 * the clear counted. Returns NULL with errno set. Strings in the returned stacks live as long as
 * the cache and the symbolizer.
 */
#define STACK_RETRY_NS (500 * 1000 * 1000ULL)
#define STACK_CACHE_MAX_BYTES (32u << 20)

struct stack_cache *stack_cache__new(struct symbolizer *s, size_t max_stacks);
void stack_cache__free(struct stack_cache *c);

/*
 * The symbolized stack for raw frames of process pid. Unresolved user frames become a
 * "[unknown] <module basename>" function (counted, never dropped). A stack with unresolved
 * frames is symbolized again once it is STACK_RETRY_NS old (its first sight may have raced
 * an exec or a dlopen, before the maps could be read). NULL only on ENOMEM.
 * Valid until the next call that clears the cache: use it before calling again.
 */
const struct sym_stack *stack_cache__get(struct stack_cache *c, pid_t pid, const __u64 *kframes,
					 int nk, const __u64 *uframes, int nu);

struct stack_cache_stats {
	uint64_t lookups, misses, clears, unknown_frames, retries;
	uint64_t truncated;	/* stacks ending in [truncated] (symbolized once each) */
	uint64_t cut_unmapped;	/* ...of which cut here at an address outside every mapping */
	uint64_t bpf_frames;	/* the agent's own BPF frames dropped from kernel stacks */
	uint64_t stacks, bytes;	/* held now, and their memory */
};
void stack_cache__stats(const struct stack_cache *c, struct stack_cache_stats *ret);

/*
 * For agent modules: symbolize (through a->stacks) and add to a->batch, returning the batch's
 * stack id, or -errno. Main-loop thread only.
 */
int64_t agent__stack(struct agent *a, pid_t pid, const __u64 *kframes, int nk, const __u64 *uframes,
		     int nu);

/*
 * agent__stack() for a sample of thread tid: when the stack is one of autograd's worker threads
 * (engine_at) and a->shared.backward_caller knows the backward call it works for, the stack goes
 * under that call's (agent__under_caller()).
 */
int64_t agent__thread_stack(struct agent *a, pid_t pid, uint32_t tid, const __u64 *kframes, int nk,
			    const __u64 *uframes, int nu);

/*
 * The batch stack id of head (nhead locations, innermost first: what a worker thread did, up to
 * its loop's frame) above an "[autograd thread]" frame above the caller's stack (pid's raw user
 * frames, symbolized here). head is copied first: it may point into the cache. -errno.
 */
int64_t agent__under_caller(struct agent *a, const struct location *head, uint32_t nhead, pid_t pid,
			    const __u64 *frames, uint32_t n);

#endif
