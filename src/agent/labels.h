/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one label builder of the agent: the label set of a process or thread, as every producer
 * (CPU samples, thread states, CUDA calls, CUPTI records, NVML per-process series) sends it.
 * One capacity (AGENT_LABELS_CAP, the batch's own limit) with room kept for the producer's
 * labels, and an explicit result when a relabel rule drops the process.
 */
#ifndef GPUSCOPE_AGENT_LABELS_H
#define GPUSCOPE_AGENT_LABELS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "agent/procs/procfs.h"
#include "common/batch.h"

#define AGENT_LABELS_CAP     BATCH_MAX_LABELS	/* labels of one record, all sources */
#define AGENT_LABELS_RESERVE 8			/* kept for the producer's own (gpu, ns_pid...) */

enum labels_result {
	LABELS_KEPT = 0,
	LABELS_DROPPED = 1,	/* a keep/drop relabel rule dropped the process: send nothing */
};

struct agent;

/* A label set being built. The strings it formats live in it; the others must outlive it. */
struct agent_labels {
	struct label l[AGENT_LABELS_CAP];
	size_t n;
	char pid[16], tid[16];
	char comm[PROCFS_COMM_LEN], thread[PROCFS_COMM_LEN];
	char ns_pid[16];	/* agent__tracked_labels() */
	char cmdline[PROCFS_CMDLINE_LEN], program[PROCFS_PROGRAM_LEN];
};

/*
 * The labels of process pid (thread tid; 0 for process-wide records) into ret: node, pid, comm
 * (the process's name), and when tid != 0 also tid and thread (the task's name: `comm` as given,
 * or read from /proc when NULL); then the metadata labels (program and cmdline: what the process
 * runs, procfs_cmdline(), absent for kernel threads and processes gone; container, pod,
 * namespace, Kubeflow/Ray; relabeled) when the meta module runs, else program and cmdline alone. For tid != pid the process
 * name is read from /proc (cached; replaced at an exec, agent__pid_exec()) and falls back to
 * `comm` if the process is gone; with tid == pid the given `comm` is cached as the process's;
 * with tid == 0 and comm NULL it is read from /proc too. Returns LABELS_KEPT or LABELS_DROPPED. Meta labels may use the builder's capacity less
 * AGENT_LABELS_RESERVE; beyond that they are cut and counted by meta. Strings of meta labels stay
 * valid until the next call on the same thread. Any thread.
 */
int agent__pid_labels(struct agent *a, pid_t pid, pid_t tid, const char *comm,
		      struct agent_labels *ret);

/*
 * The labels of a thread of a tracked GPU process (procs/tracker.h), for the records of the
 * thread-state and CUDA modules: agent__pid_labels() plus ns_pid when the process lives in another
 * pid namespace. thread may be NULL: the name procfs has for tid (procfs_comm_seen() from the BPF
 * events, else /proc). Returns LABELS_KEPT or LABELS_DROPPED. Main-loop thread.
 */
int agent__tracked_labels(struct agent *a, pid_t pid, pid_t tid, const char *thread,
			  struct agent_labels *ret);

/*
 * Where the metadata labels come from: meta__pid_labels() (meta.h) while the meta module runs
 * (meta__start() plugs it in, meta__stop() unplugs it with NULL); without it a record has the
 * process labels only. Same contract as meta__pid_labels().
 */
typedef int (*labels_meta_fn)(pid_t pid, const char *comm, struct label *ret, size_t max,
			      size_t *ret_n);
void agent_labels__set_meta(labels_meta_fn fn);

/*
 * Process pid exec'd and is now named comm (NULL if not known): what the label builder cached
 * for it (its name, its metadata labels: command line, program) is forgotten, so every
 * producer's next record of pid carries what it runs now. Called by whoever sees the kernel's
 * exec events (the sched module's tracepoint, the symbolizer's comm-exec records via run.c).
 * Any thread.
 */
void agent__pid_exec(struct agent *a, pid_t pid, const char *comm);

/* The metadata side of agent__pid_exec(): meta__pid_exec() while the meta module runs. */
typedef void (*labels_exec_fn)(pid_t pid);
void agent_labels__set_exec(labels_exec_fn fn);

/* Adds name=value (strings not copied). 0, or -ENOSPC when the set is full (caller counts). */
int agent_labels__add(struct agent_labels *l, const char *name, const char *value);

#endif
