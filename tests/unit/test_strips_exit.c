// SPDX-License-Identifier: Apache-2.0
/*
 * Thread states of processes that exit, against the real kernel (root): tests/progs/exit_tail's
 * children, followed by the sched module, have no state past the moment their parent reaped
 * them (test_strips.c has the other thread-state cases).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "test.h"
#include "strips_testlib.h"
#include "strips_agentlib.h"

/*
 * Runs tests/progs/exit_tail (n children, mode NULL or "leader-first") followed from its pid,
 * and checks that no thread state of a child lasts past the moment its parent reaped it.
 */
static bool exit_case(int n, const char *mode)
{
	char path[] = "/tmp/gpuscope-exit-tail-XXXXXX", nstr[16];
	char *argv[] = { ".output/tests/progs/exit_tail", nstr, path, (char *)mode, NULL };
	struct { int pid; uint64_t reaped_ns; } kids[32];
	struct agent a;
	struct recs rs = { 0 };
	int gofd = -1, status, nkids = 0, followed = 0, late = 0, fd;
	bool ok = false;
	pid_t pid;
	FILE *f;

	if (skip())
		return true;
	snprintf(nstr, sizeof(nstr), "%d", n);
	fd = mkstemp(path);
	if (!ASSERT_TRUE(fd >= 0, "mkstemp"))
		return false;
	close(fd);
	pid = spawn_followed(argv, &a, 0, &gofd);
	if (pid < 0)
		goto out;
	go(gofd);
	status = run_until_exit(&a, &sched_module, pid, 60000);
	sched_module.stop(&a);
	if (!ASSERT_EQ(status, 0, "exit_tail exit status") ||
	    !ASSERT_EQ(recs_from_batch(a.batch, &rs), 0, "decode batch"))
		goto out;
	f = fopen(path, "r");
	while (f && nkids < (int)ARRAY_SIZE(kids) &&
	       fscanf(f, "%d %lu", &kids[nkids].pid, &kids[nkids].reaped_ns) == 2)
		nkids++;
	if (f)
		fclose(f);
	for (int k = 0; k < nkids; k++) {
		uint64_t reaped = kids[k].reaped_ns + a.mono_to_wall_ns;
		int states = 0, after = 0;

		for (size_t i = 0; i < rs.n; i++) {
			const struct rec *r = &rs.r[i];

			if (r->pid != kids[k].pid || r->sample || strcmp(r->kind, "thread_state"))
				continue;
			states++;
			if (r->end_ns <= reaped)
				continue;
			if (!after++ && late < 3)
				fprintf(stderr, "  child %d: %s state of tid %d ends %.1f ms "
					"after it was reaped\n", kids[k].pid, r->state, r->tid,
					(r->end_ns - reaped) / 1e6);
		}
		followed += states > 0;
		late += after > 0;
	}
	fprintf(stderr, "  %d children, %d with states, %d with a state past their end\n", nkids,
		followed, late);
	ok = ASSERT_EQ(nkids, n, "every child reaped") &&
	     ASSERT_TRUE(followed * 4 >= n * 3, "forked children are followed") &&
	     ASSERT_EQ(late, 0, "no child has a state after its exit");
out:
	unlink(path);
	free(rs.r);
	agent_done(&a);
	return ok;
}

/*
 * Processes switched out after their exit tracepoint (a real-time parent preempts each exiting
 * child as do_exit closes its files): no state of a child outlives it. Such a switch-out had
 * made the programs follow the thread anew after its exit had closed its states, and that last
 * state stayed open: closed at the agent's stop, or when the tid came back in another process
 * (an ML node's hour: 'running' intervals of up to 3543 s, one of 1762 s that ended where a
 * thread of a later process with the same tid began). Kernels from 6.16 on fire
 * sched_process_exit before exit_mm(), so a large process is often switched out after it.
 */
static bool test_strips_exit_tail(void)
{
	return exit_case(20, NULL);
}

/*
 * A process whose main thread leaves first (pthread_exit) and whose last thread ends it 300 ms
 * later: the leader's exit untracks the process (procs/tracker.c), and the last thread's exit, seen
 * untracked, had left its entry behind with its state open up to the agent's stop.
 */
static bool test_strips_exit_leader_first(void)
{
	return exit_case(3, "leader-first");
}

TEST_MAIN(T(test_strips_exit_tail), T(test_strips_exit_leader_first))
