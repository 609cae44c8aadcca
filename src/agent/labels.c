/* SPDX-License-Identifier: Apache-2.0 */
/* The agent's one label builder (labels.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "agent/agent.h"
#include "agent/labels.h"
#include "agent/procs/tracker.h"

static labels_meta_fn meta_fn;	/* atomic: set by meta__start/stop, read by any producer */
static labels_exec_fn exec_fn;	/* the same */

void agent_labels__set_exec(labels_exec_fn fn)
{
	__atomic_store_n(&exec_fn, fn, __ATOMIC_RELEASE);
}

void agent__pid_exec(struct agent *a, pid_t pid, const char *comm)
{
	labels_exec_fn fn = __atomic_load_n(&exec_fn, __ATOMIC_ACQUIRE);

	(void)a;
	procfs_exec(pid, comm);
	if (fn)
		fn(pid);
}

void agent_labels__set_meta(labels_meta_fn fn)
{
	__atomic_store_n(&meta_fn, fn, __ATOMIC_RELEASE);
}

int agent_labels__add(struct agent_labels *l, const char *name, const char *value)
{
	if (l->n == AGENT_LABELS_CAP)
		return -ENOSPC;
	l->l[l->n++] = (struct label){ .name = name, .value = value };
	return 0;
}

int agent__pid_labels(struct agent *a, pid_t pid, pid_t tid, const char *comm,
		      struct agent_labels *ret)
{
	labels_meta_fn meta = __atomic_load_n(&meta_fn, __ATOMIC_ACQUIRE);
	size_t m = 0;

	ret->n = 0;
	if (a && a->opts.node)
		agent_labels__add(ret, "node", a->opts.node);
	snprintf(ret->pid, sizeof(ret->pid), "%d", (int)pid);
	agent_labels__add(ret, "pid", ret->pid);
	if (comm) {
		snprintf(ret->thread, sizeof(ret->thread), "%s", comm);
		if (tid == pid)	/* the main thread's name, as the event saw it: the process's */
			procfs_comm_seen(pid, ret->thread);
	}
	else if (!procfs_comm(tid ? tid : pid, ret->thread, sizeof(ret->thread)))
		ret->thread[0] = 0;
	if (tid == 0 || tid == pid || !procfs_comm(pid, ret->comm, sizeof(ret->comm)))
		snprintf(ret->comm, sizeof(ret->comm), "%s", ret->thread);
	agent_labels__add(ret, "comm", ret->comm);
	if (tid != 0) {
		snprintf(ret->tid, sizeof(ret->tid), "%d", (int)tid);
		agent_labels__add(ret, "tid", ret->tid);
		agent_labels__add(ret, "thread", ret->thread);
	}
	/* with meta, what the process runs is among its labels (the relabel rules see it) */
	if (!meta && procfs_cmdline(pid, ret->cmdline, sizeof(ret->cmdline), ret->program,
				    sizeof(ret->program))) {
		if (ret->program[0])
			agent_labels__add(ret, "program", ret->program);
		agent_labels__add(ret, "cmdline", ret->cmdline);
	}
	if (meta && meta(pid, ret->comm, ret->l + ret->n,
			 AGENT_LABELS_CAP - AGENT_LABELS_RESERVE - ret->n, &m) == LABELS_DROPPED) {
		ret->n = 0;
		return LABELS_DROPPED;
	}
	ret->n += m;
	return LABELS_KEPT;
}

int agent__tracked_labels(struct agent *a, pid_t pid, pid_t tid, const char *thread,
			  struct agent_labels *ret)
{
	pid_t ns_pid = procs__ns_pid(pid);

	if (agent__pid_labels(a, pid, tid, thread, ret) == LABELS_DROPPED)
		return LABELS_DROPPED;
	if (ns_pid && ns_pid != pid) {
		snprintf(ret->ns_pid, sizeof(ret->ns_pid), "%d", ns_pid);
		agent_labels__add(ret, "ns_pid", ret->ns_pid);
	}
	return LABELS_KEPT;
}
