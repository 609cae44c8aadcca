/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's one reader of per-task /proc facts that every module labels with: a task's name
 * (/proc/TID/comm) and a process's pid in its own pid namespace (last NSpid field of
 * /proc/PID/status). One cache for both: direct-mapped by tid, bounded, entries re-read after
 * 10 s (pids get reused). Any thread.
 */
#ifndef GPUSCOPE_AGENT_PROCFS_H
#define GPUSCOPE_AGENT_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define PROCFS_COMM_LEN 16	/* TASK_COMM_LEN: the kernel's names are at most 15 bytes */

/*
 * Name of task tid (a process's main thread or any thread) into buf (NUL-terminated, cut to
 * len). Returns false, buf empty, when the task is gone or unreadable.
 */
bool procfs_comm(pid_t tid, char *buf, size_t len);

/* Records the name a BPF event gave for tid, so the next procfs_comm() need not read /proc. */
void procfs_comm_seen(pid_t tid, const char *name);

/*
 * Process pid exec'd and is now named comm (NULL or "": not known, the next procfs_comm() reads
 * /proc): the name cached for it is replaced at once rather than after the cache's 10 s.
 */
void procfs_exec(pid_t pid, const char *comm);

/* pid as its own pid namespace numbers it; pid itself when not in a child namespace or gone. */
pid_t procfs_nspid(pid_t pid);

/* The parent of process pid (/proc/PID/stat, not cached); 0 when gone or unreadable. */
pid_t procfs_ppid(pid_t pid);

struct procfs_stats {
	unsigned long long reads, hits, gone;	/* /proc reads, cache hits, tasks not found */
};
void procfs_stats(struct procfs_stats *ret);

#endif
