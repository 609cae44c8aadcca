/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU processes the agent follows (tracker.c), for every feature that needs them (thread
 * states, CUDA probes): a process is tracked when it maps libcuda or /dev/nvidia* (or holds such
 * a device open), is named by --pid, or was forked by a tracked process; hooks tell the features
 * when one comes or goes. Main-loop thread only.
 */
#ifndef GPUSCOPE_AGENT_PROCS_TRACKER_H
#define GPUSCOPE_AGENT_PROCS_TRACKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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

/*
 * Whether a feed of new mappings (the kernel's mmap records, run.c) hints every process that maps
 * libcuda: the light /proc scan, then only a safety net, runs every 10 s instead of every second.
 */
void procs__map_feed(bool on);

/* Does /proc/PID/maps name libcuda (or /dev/nvidia*)? 1 yes, 0 no, -errno. For tests too. */
int procs__check_gpu(pid_t pid, enum proc_why *ret_why);

struct procs_stats {
	uint64_t tracked, scans, checks, overflow, vanished;
};
void procs__stats(struct procs_stats *s);

/* The pid in its own pid namespace of tracked process pid (== pid when the same); 0: untracked. */
pid_t procs__ns_pid(pid_t pid);

#endif
