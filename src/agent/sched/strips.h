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

#endif
