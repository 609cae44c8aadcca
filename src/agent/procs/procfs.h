/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's one reader of per-task /proc facts that every module labels with: a task's name
 * (/proc/TID/comm), a process's pid in its own pid namespace (last NSpid field of
 * /proc/PID/status) and its command line (/proc/PID/cmdline). Direct-mapped caches by tid and by
 * pid, bounded, entries re-read after 10 s (pids get reused) or at once after an exec. Any
 * thread.
 */
#ifndef GPUSCOPE_AGENT_PROCFS_H
#define GPUSCOPE_AGENT_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

#define PROCFS_CMDLINE_LEN 256	/* a process's command line as labelled, NUL included */
#define PROCFS_PROGRAM_LEN 128

/*
 * What process pid runs: its command line (/proc/PID/cmdline: the arguments joined by spaces,
 * line breaks and tabs as spaces, other control characters as '?', cut to
 * PROCFS_CMDLINE_LEN - 1 bytes; never the environment) into
 * cmdline, and the program into program: the script or module of an interpreter
 * (`python3 train.py --lr 3e-4` -> `train.py`, `python3 -m torch.distributed.run` ->
 * `torch.distributed.run`, `bash run.sh` -> `run.sh`, `java -jar app.jar` -> `app.jar`), else
 * the executable's base name. Cached per pid like the name (re-read after 10 s, at once after
 * procfs_exec()). Returns false, both empty, for a task that is gone or has no command line (a
 * kernel thread). Any thread.
 */
bool procfs_cmdline(pid_t pid, char *cmdline, size_t clen, char *program, size_t plen);

/*
 * The program of an argv given as NUL-separated strings (len bytes; the /proc/PID/cmdline
 * format) into ret, as procfs_cmdline() defines it; "" when there is none. For tests too.
 */
void procfs_program(const char *argv, size_t len, char *ret, size_t rlen);

/* pid as its own pid namespace numbers it; pid itself when not in a child namespace or gone. */
pid_t procfs_nspid(pid_t pid);

/* The parent of process pid (/proc/PID/stat, not cached); 0 when gone or unreadable. */
pid_t procfs_ppid(pid_t pid);

/*
 * The process's start time (clock ticks since boot) and virtual size (bytes) from
 * /proc/PID/stat: a process whose pair is unchanged has mapped nothing new. false on error
 * (gone); vsize 0 for a kernel thread.
 */
bool procfs_start_vsize(pid_t pid, uint64_t *start, uint64_t *vsize);

struct procfs_stats {
	unsigned long long reads, hits, gone;	/* /proc reads, cache hits, tasks not found */
};
void procfs_stats(struct procfs_stats *ret);

#endif
