/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent side of the thread-state tests (test_strips*.c): a workload started on a go byte,
 * followed by the sched module on a real batch, ticked until it exits.
 */
#ifndef GPUSCOPE_TEST_STRIPS_AGENTLIB_H
#define GPUSCOPE_TEST_STRIPS_AGENTLIB_H

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test.h"
#include "agent/agent.h"
#include "agent/bpfutil.h"
#include "agent/bpfstats.h"
#include "agent/sym/stacks.h"
#include "agent/sym/symbolize.h"
#include "agent/unwind/unwind.h"
#include "common/util.h"

/* strong references: pull the modules from the archive */
extern const struct agent_module sched_module, cuda_probe_module;

#define MS 1000000LL

static inline bool skip(void)
{
	if (geteuid() == 0)
		return false;
	printf("skip: needs root for eBPF\n");
	return true;
}

/* Starts argv with a pipe on its stdin; *ret_go is the write end (a byte there: "start"). */
static inline pid_t spawn(char *const argv[], int *ret_go)
{
	int p[2];
	pid_t pid;

	if (pipe(p))
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(p[0], 0);
		close(p[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[0]);
	*ret_go = p[1];
	return pid;
}

static inline void go(int fd)
{
	if (write(fd, "g", 1) != 1)
		perror("write");
	close(fd);
}

/* Ticks the module every 20 ms until child exits (or max_ms), then 100 ms more. */
static inline int run_until_exit(struct agent *a, const struct agent_module *m, pid_t child,
			  unsigned max_ms)
{
	int status = -1;
	uint64_t end = mono_ns() + max_ms * (uint64_t)MS;

	while (mono_ns() < end) {
		uint64_t t0 = mono_ns();
		if (m->tick)
			m->tick(a);
		if (mono_ns() - t0 > 50 * MS)
			fprintf(stderr, "  slow tick %.0f ms\n", (mono_ns() - t0) / 1e6);
		if (waitpid(child, &status, WNOHANG) == child)
			break;
		usleep(20000);
	}
	if (mono_ns() >= end) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
	}
	for (int i = 0; i < 5; i++) {
		usleep(20000);
		m->tick(a);
	}
	return status;
}

static inline void agent_init(struct agent *a, pid_t pid)
{
	memset(a, 0, sizeof(*a));
	a->opts.node = "test";
	if (pid > 0) {
		a->opts.pids[0] = pid;
		a->opts.npids = 1;
	}
	a->batch = batch__new("test");
	a->mono_to_wall_ns = mono_to_wall_offset_ns();
	a->sym = symbolizer__new();
	a->stacks = stack_cache__new(a->sym, 0);
	bpf_shared_maps__create(&a->shared);	/* as run.c: sched and cuda share in_sync */
}

static inline void agent_done(struct agent *a)
{
	batch__free(a->batch);
	stack_cache__free(a->stacks);
	unwinder__free(a->unwind);
	symbolizer__free(a->sym);
	bpf_shared_maps__free(&a->shared);
}

/*
 * Spawns argv (it waits for its go byte, *ret_go) and follows it with the sched module at walk
 * share `share` (0: every switch-out walked). The pid, or -1 with nothing left running when the
 * module did not start; *a is initialized either way (agent_done()).
 */
static inline pid_t spawn_followed(char *const argv[], struct agent *a, double share, int *ret_go)
{
	pid_t pid = spawn(argv, ret_go);

	agent_init(a, pid);
	a->opts.offcpu_walk_share = share;
	if (ASSERT_EQ(sched_module.start(a), 0, "sched start"))
		return pid;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

/* A metric's value (the module's, the BPF programs' counters, the kernel's run times of them);
 * name ending in a space: unlabelled, else a prefix of its labels. -1 when absent. */
static inline double metric_f(struct agent *a, const struct agent_module *m, const char *name)
{
	char *buf = NULL, *p;
	size_t len = 0;
	double v = -1;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return -1;
	m->metrics(a, f);
	bpf_counters__metrics(f);	/* what the BPF programs count: one agent-wide family */
	bpf_prog_stats__metrics(f);	/* and what the kernel counts of them */
	fclose(f);
	p = strstr(buf, name);
	if (p)
		p += strlen(name);
	if (p && name[strlen(name) - 1] != ' ') {	/* a prefix of the labels: the value after them */
		p = strstr(p, "} ");
		if (p)
			p += 2;
	}
	if (p)
		v = strtod(p, NULL);
	free(buf);
	return v;
}

static inline long metric(struct agent *a, const struct agent_module *m, const char *name)
{
	return (long)metric_f(a, m, name);
}

#endif
