/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the thread-state (sched.c) and CUDA API (cudaprobe.c) modules share: the set of tracked
 * processes (procs.c: GPU users, --pid, or all), the classification of why a thread blocked
 * (blocked.c), and the BPF map through which CUDA synchronize calls flag blocked threads.
 * Everything here is main-loop-thread only.
 */
#ifndef GPUSCOPE_AGENT_STRIPS_H
#define GPUSCOPE_AGENT_STRIPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "agent/meta/labels.h"

struct agent;

#define PROCS_MAX 4096	/* tracked processes; beyond this new ones are counted, not tracked */

/* Why a process is tracked. */
enum proc_why {
	PROC_WHY_PID = 1,	/* --pid */
	PROC_WHY_LIBCUDA,	/* maps libcuda.so */
	PROC_WHY_NVIDIA_DEV,	/* maps or holds /dev/nvidia* open */
	PROC_WHY_FORK,		/* forked by a tracked process */
};

struct proc_info {
	pid_t pid;		/* host pid */
	pid_t ns_pid;		/* pid inside its own pid namespace (== pid when the same) */
	enum proc_why why;
	char comm[16];
	uint64_t tracked_since_ns;	/* CLOCK_MONOTONIC */
};

/* Called when a pid becomes tracked (tracked = true) or stops being tracked. */
typedef void (*procs_hook_fn)(pid_t pid, bool tracked, void *ctx);

/*
 * Starts discovery (first caller) or takes a reference (later callers); scans /proc once.
 * The hook (may be NULL) is called for every tracked pid now and for every later change.
 * 0 or -errno. Each successful call is balanced by procs__release().
 */
int procs__acquire(struct agent *a, procs_hook_fn hook, void *ctx);
void procs__release(procs_hook_fn hook, void *ctx);

/* Periodic work: pending checks, slow full rescan. Cheap when nothing is due. */
void procs__tick(void);

/* Hints from BPF: an untracked pid opened a GPU file / exec'd; a tracked one forked or exited. */
void procs__hint_open(pid_t pid);
void procs__hint_exec(pid_t pid);
void procs__hint_fork(pid_t child, pid_t parent);
void procs__hint_exit(pid_t pid);

/* Does /proc/PID/maps name libcuda (or /dev/nvidia*)? 1 yes, 0 no, -errno. For tests too. */
int procs__check_gpu(pid_t pid, enum proc_why *ret_why);

struct procs_stats {
	uint64_t tracked, scans, checks, overflow, vanished;
};
void procs__stats(struct procs_stats *s);

/*
 * The labels of a thread's records: agent__pid_labels() (node, pid, comm, tid, thread, container
 * ...) plus ns_pid when the process lives in another pid namespace. thread may be NULL: the
 * name procfs has for tid (procfs_comm_seen() from the BPF events, else /proc). Returns
 * LABELS_KEPT or LABELS_DROPPED (labels.h).
 */
int strips_labels(struct agent *a, pid_t pid, pid_t tid, const char *thread,
		  struct agent_labels *ret);

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

/* fd of the sched program's `in_sync` map (tid -> 1 inside a CUDA sync), -1 if not loaded. */
extern int strips_in_sync_map_fd;

#endif
