/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The thread-state module's own parts: the classification of why a thread blocked (blocked.c).
 * The tracked processes it follows are the process layer's (procs/tracker.h). Main-loop thread.
 */
#ifndef GPUSCOPE_AGENT_STRIPS_H
#define GPUSCOPE_AGENT_STRIPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Blocked reasons (thread_state attr `reason`). */
enum blocked_reason {
	BLOCKED_OTHER = 0,
	BLOCKED_FUTEX,
	BLOCKED_LOCK,		/* kernel mutex / rwsem / semaphore */
	BLOCKED_IO,
	BLOCKED_SLEEP,
	BLOCKED_POLL,
	BLOCKED_CUDA_SYNC,
	BLOCKED_MAX,
};
const char *blocked_reason_name(enum blocked_reason r);

/* Loads the kernel function ranges that decide a reason (from /proc/kallsyms). 0 or -errno. */
int blocked__init(void);
void blocked__done(void);
/* A kernel text address (for warming up a symbolizer), 0 if none is known. */
uint64_t blocked__some_kernel_address(void);
/*
 * Why a thread blocked: the innermost kernel frame that names a known wait (futex_*, do_nanosleep,
 * ep_poll, io_schedule, mutex_lock, pipe_read, ...) decides; else the syscall it was in; a
 * CUDA synchronize flag wins over both.
 */
enum blocked_reason blocked__classify(const unsigned long long *kframes, int nk, int syscall_nr,
				      bool in_cuda_sync);
/* Classification of one kernel function name (exposed for tests); BLOCKED_MAX: no opinion. */
enum blocked_reason blocked__classify_name(const char *fn);

/*
 * The blocked-stack cache (bstack.c): what the stacks a thread blocked with came to in the batch
 * (its stack id and the blocked reason), by process, stack-map ids, syscall and CUDA-sync flag,
 * so that a thread blocking again at the same place skips the map reads and the symbolization.
 * An id names the same frames only while its map is not cleared: kgen (the sched module's own
 * clears of its stack map) and ugen (unwinder__stacks_gen(), odd while a clear runs: nothing is
 * put then) must be what they were when the entry was put. An entry lives for one batch (its
 * id), and until retry_ns (0: no end), when the stack cache would symbolize a stack with
 * unresolved frames again. Direct-mapped: a new key takes its slot. Main-loop thread only.
 */
#define BSTACK_SLOTS 4096

struct bstack_key {
	uint32_t tgid;
	int32_t kstack_id, ustack_id, syscall_nr;
	bool cuda_sync;
};

struct bstack_val {
	int64_t stack;		/* batch stack id */
	enum blocked_reason reason;
};

struct bstack_entry {
	struct bstack_key key;
	uint64_t batch_id;	/* 0: empty */
	uint64_t kgen, ugen, retry_ns;
	struct bstack_val val;
};

struct bstack_cache {
	struct bstack_entry e[BSTACK_SLOTS];
	uint64_t hits, misses;
	/* the processes with entries put in batch pids_batch, by tgid % 1024: an exec of another
	 * (every exec on the machine is seen) skips the walk over the slots */
	uint64_t pids_batch;
	uint64_t pids[1024 / 64];
};

/* true with *ret when k has a live entry for this batch and these map generations. */
bool bstack_cache__get(struct bstack_cache *c, const struct bstack_key *k, uint64_t batch_id,
		       uint64_t kgen, uint64_t ugen, uint64_t now_ns, struct bstack_val *ret);
/* Remembers v for k; kgen and ugen are those read before the maps were (nothing if ugen is odd). */
void bstack_cache__put(struct bstack_cache *c, const struct bstack_key *k, uint64_t batch_id,
		       uint64_t kgen, uint64_t ugen, uint64_t retry_ns, const struct bstack_val *v);
/* An exec of tgid: its stacks are symbolized anew. */
void bstack_cache__forget_pid(struct bstack_cache *c, uint32_t tgid);

#endif
