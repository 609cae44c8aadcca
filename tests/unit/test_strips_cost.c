// SPDX-License-Identifier: Apache-2.0
/*
 * What the thread-state programs do to cost less, against the real kernel (root): the kernel
 * stack re-used for a thread blocking where it blocked before, and the per-thread event budget
 * (docs/strips.md). tests/progs/kstack_pair's reader blocks in read(2) on a pipe and an eventfd.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test.h"
#include "strips_testlib.h"
#include "strips_agentlib.h"

/*
 * Runs kstack_pair for secs (its phases to *ph, at most max) followed by the sched module at
 * event rate `rate` (0: no budget); decodes the batch into *rs and reads the BPF counter
 * `counter` (its event name) into *ret_count. The phases read, or -1. *a: agent_done() after.
 */
static int run_pair(const char *secs, long rate, const char *counter, struct agent *a,
		    struct recs *rs, struct phase *ph, int max, long *ret_count)
{
	char out[] = "/tmp/kstack_pair_XXXXXX", name[96];
	char *argv[] = { ".output/tests/progs/kstack_pair", out, (char *)secs, "-", NULL };
	int fd = mkstemp(out), gofd = -1, status, n = -1;
	pid_t pid;

	close(fd);
	pid = spawn(argv, &gofd);
	agent_init(a, pid);
	a->opts.strip_event_rate = rate;
	if (!ASSERT_EQ(sched_module.start(a), 0, "sched start")) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		goto out;
	}
	/* the reader's libraries' unwind tables first (as run_condwait_n() in test_strips.c):
	 * before them its read(2) stacks lack read_one (glibc keeps no frame pointer), and one
	 * loaded run lost 30 % of its off-CPU time under read_one so */
	sched_module.tick(a);
	if (a->unwind)
		unwinder__settle(a->unwind, 20000);
	go(gofd);
	status = run_until_exit(a, &sched_module, pid, 10000);
	snprintf(name, sizeof(name), "program=\"sched\",event=\"%s\"} ", counter);
	*ret_count = metric(a, &sched_module, name);
	sched_module.stop(a);
	if (ASSERT_EQ(status, 0, "workload exit status") &&
	    ASSERT_EQ(recs_from_batch(a->batch, rs), 0, "decode batch"))
		n = read_phases(out, ph, max);
out:
	unlink(out);
	return n;
}

/*
 * The kernel stack re-used only where the thread blocks as before: "reader" blocks in read(2)
 * from one call site on a pipe twice, then on an eventfd twice; each block's kernel stack must
 * be its file's (pipe_read or eventfd_read), and the repeats must have been re-used. Fails when
 * the signature leaves out the syscall's first argument (the fd).
 */
static bool test_strips_kstack_reuse(void)
{
	struct agent a;
	struct recs rs = { 0 };
	struct phase ph[512];
	int n, good = 0, seen = 0;
	long same = 0;
	bool ok = false;

	if (skip())
		return true;
	n = run_pair("1.0", 0, "kstack_same", &a, &rs, ph, 512, &same);
	if (n < 0)
		goto out;
	for (int i = 0; i < n; i++) {
		bool pipe = !strcmp(ph[i].name, "pipe");
		const struct rec *b = blocked_in(&rs, ph[i].tid, ph[i].t0 + a.mono_to_wall_ns,
						 ph[i].t1 + a.mono_to_wall_ns);

		if (!b || !strstr(b->frames, "read_one"))
			continue;	/* not blocked (the writer came first), or not walked */
		seen++;
		if (strstr(b->kframes, pipe ? "pipe_read" : "eventfd_read") &&
		    !strstr(b->kframes, pipe ? "eventfd_read" : "pipe_read"))
			good++;
		else
			fprintf(stderr, "  %s read %d: kernel stack %s\n", ph[i].name, i, b->kframes);
	}
	fprintf(stderr, "  %d reads, %d blocked with stacks, %d of them with their file's kernel "
			"stack; %ld kernel stacks re-used\n", n, seen, good, same);
	ok = ASSERT_TRUE(seen >= n / 2 && seen >= 40, "most reads blocked, with stacks") &&
	     ASSERT_EQ(good, seen, "every block has its own file's kernel stack") &&
	     ASSERT_TRUE(same >= seen / 4, "the repeated blocks re-used their kernel stack");
out:
	free(rs.r);
	agent_done(&a);
	return ok;
}

/*
 * The event budget (--strip-event-rate 250): "reader" blocks ~3 ms at a time (~600 states a
 * second, each over the 1-ms threshold). Its events must stay within the budget (250 a second,
 * the 62-event burst, the summaries of at most 20 ms each), its intervals must still cover its
 * time without holes or overlaps, and its blocked time must still reach the off-CPU profile
 * under read_one (offcpu_ns samples: a long block's at its end, the off-CPU map's sums of the
 * folded ones at a tick).
 */
static bool test_strips_event_budget(void)
{
	struct agent a;
	struct recs rs = { 0 };
	struct phase ph[1024];
	int n, tid, events = 0, summaries = 0;
	uint64_t t0 = UINT64_MAX, t1 = 0, covered, blocked = 0, offcpu = 0;
	long folded = 0;
	bool ok = false;

	if (skip())
		return true;
	n = run_pair("1.5", 250, "folded_over_budget", &a, &rs, ph, 1024, &folded);
	if (!ASSERT_TRUE(n >= 100, "the reader's reads recorded"))
		goto out;
	tid = ph[0].tid;
	for (int i = 0; i < n; i++)
		blocked += ph[i].t1 - ph[i].t0;
	for (size_t i = 0; i < rs.n; i++) {
		const struct rec *r = &rs.r[i];

		if (r->tid != tid)
			continue;
		if (!r->sample && !strcmp(r->kind, "thread_state")) {
			events++;
			summaries += r->summary;
			t0 = r->start_ns < t0 ? r->start_ns : t0;
			t1 = r->end_ns > t1 ? r->end_ns : t1;
		} else if (r->sample && !strcmp(r->kind, "offcpu_ns") && strstr(r->frames, "read_one")) {
			offcpu += (uint64_t)r->value;
		}
	}
	covered = overlap(&rs, tid, NULL, t0, t1);
	fprintf(stderr, "  %d reads (%.0f ms blocked); reader: %d events (%d summaries) over %.0f ms, "
			"covering %.1f %%; off-CPU under read_one %.0f ms; %ld states folded\n",
		n, blocked / 1e6, events, summaries, (t1 - t0) / 1e6,
		t1 > t0 ? 100.0 * covered / (t1 - t0) : 0, offcpu / 1e6, folded);
	ok = ASSERT_TRUE(folded > 0 && summaries > 0, "states folded for the budget") &&
	     ASSERT_TRUE(events <= (t1 - t0) / 1e9 * (250 + 50) + 62 + 10,
			 "events within the budget and the summaries") &&
	     ASSERT_TRUE(covered >= (t1 - t0) * 97 / 100 && covered <= (t1 - t0) + MS,
			 "the reader's time covered once") &&
	     ASSERT_TRUE(offcpu >= blocked * 8 / 10 && offcpu <= blocked * 11 / 10,
			 "its blocked time in the off-CPU profile under read_one");
out:
	free(rs.r);
	agent_done(&a);
	return ok;
}

TEST_MAIN(T(test_strips_kstack_reuse), T(test_strips_event_budget))
