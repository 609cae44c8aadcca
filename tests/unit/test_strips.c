// SPDX-License-Identifier: Apache-2.0
/*
 * Thread states and off-CPU stacks, against the real kernel (root): runs the sched module on
 * tests/progs/strips_work (known phases) and on a thread-churning process, decodes the batch it
 * wrote and compares with the phase times the workload recorded itself.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "test.h"
#include "agent/unwind/unwind.h"
#include "strips_testlib.h"
#include "strips_agentlib.h"
#include "agent/bpfutil.h"
#include "agent/bpfstats.h"
#include "agent/agent.h"
#include "agent/sym/stacks.h"
#include "agent/sched/strips.h"
#include "agent/sym/symbolize.h"
#include "common/log.h"
#include "common/util.h"

static long long llabs_(long long v)
{
	return v < 0 ? -v : v;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return x < y ? -1 : x > y;
}

/*
 * How late this machine wakes a sleeper now: the 90th percentile of 30 oversleeps of a 2 ms
 * nanosleep, in ns. A loaded 2-core VM (parallel builds, host steal) shows milliseconds here;
 * timing margins below grow with it instead of failing.
 */
static long long sched_delay_p90(void)
{
	long long late[30];
	struct timespec ts = { 0, 2 * MS };

	for (int i = 0; i < 30; i++) {
		uint64_t t0 = mono_ns();

		nanosleep(&ts, NULL);
		late[i] = (long long)(mono_ns() - t0) - 2 * MS;
	}
	qsort(late, 30, sizeof(late[0]), cmp_ll);
	return late[26] > 0 ? late[26] : 0;
}

static bool test_strips_reason_names(void)
{
	CHECK(ASSERT_EQ(blocked__classify_name("futex_wait_queue"), BLOCKED_FUTEX, "futex"));
	CHECK(ASSERT_EQ(blocked__classify_name("do_nanosleep"), BLOCKED_SLEEP, "nanosleep"));
	CHECK(ASSERT_EQ(blocked__classify_name("ep_poll"), BLOCKED_POLL, "epoll"));
	CHECK(ASSERT_EQ(blocked__classify_name("pipe_read"), BLOCKED_IO, "pipe"));
	CHECK(ASSERT_EQ(blocked__classify_name("rwsem_down_read_slowpath"), BLOCKED_LOCK, "rwsem"));
	CHECK(ASSERT_EQ(blocked__classify_name("schedule"), BLOCKED_MAX, "no opinion"));
	CHECK(ASSERT_EQ(blocked__classify(NULL, 0, 202, false), BLOCKED_FUTEX, "futex syscall"));
	CHECK(ASSERT_EQ(blocked__classify(NULL, 0, 202, true), BLOCKED_CUDA_SYNC, "sync wins"));
	return true;
}

/* Phases, reasons, runnable time of the pinned pair, off-CPU stack of the futex wait. */

static bool test_strips_known_phases(void)
{
	char out[] = "/tmp/strips_work_XXXXXX";
	char *argv[] = { ".output/tests/progs/strips_work", out, "1.4", "-", NULL };
	struct agent a;
	struct recs rs = { 0 };
	struct phase ph[128];
	int nblocked = 0, nexact = 0, nunseen = 0;
	long races = 0;
	long long dur, delay, delay2, margin = 2 * MS;
	int fd, gofd = -1, n, status, checked = 0, pin_tids[2] = { 0 }, npin = 0;
	bool ok = false, futex_stack = false;
	pid_t pid;

	if (skip())
		return true;
	delay = sched_delay_p90();
	fd = mkstemp(out);
	close(fd);
	pid = spawn(argv, &gofd);
	fprintf(stderr, "  workload pid %d\n", pid);
	agent_init(&a, pid);
	{
		uint64_t t0 = mono_ns();
		if (!ASSERT_EQ(sched_module.start(&a), 0, "sched start"))
			goto out_kill;
		fprintf(stderr, "  sched start took %.1f ms\n", (mono_ns() - t0) / 1e6);
	}
	go(gofd);
	status = run_until_exit(&a, &sched_module, pid, 10000);
	/* states dropped for a switch-in the programs did not see ("races" below): on the dev VM,
	 * switch-ins from its init's threads, in whose context no sched tracepoint fires
	 * (docs/strips.md) */
	races = metric(&a, &sched_module, "program=\"sched\",error=\"switch_in_unseen\"} ");
	fprintf(stderr, "  %ld switch-ins unseen, %ld wakeups while on the CPU, on_switch runs "
			"skipped by the kernel (recursion): %ld\n", races,
		metric(&a, &sched_module, "program=\"sched\",event=\"woken_on_cpu\"} "),
		metric(&a, &sched_module, "recursion_misses_total{program=\"on_switch\",id=\""));
	sched_module.stop(&a);
	if (!ASSERT_EQ(status, 0, "workload exit status"))
		goto out;
	if (!ASSERT_EQ(recs_from_batch(a.batch, &rs), 0, "decode batch"))
		goto out;
	n = read_phases(out, ph, 128);
	if (!ASSERT_TRUE(n >= 7, "workload recorded two loops"))
		goto out;
	/* The margin: 2 ms on a quiet machine, plus twice the worse scheduling delay seen. */
	delay2 = sched_delay_p90();
	margin = 2 * MS + 2 * (delay > delay2 ? delay : delay2);
	fprintf(stderr, "  scheduling delay p90 %.3f / %.3f ms: margin %.3f ms\n", delay / 1e6,
		delay2 / 1e6, margin / 1e6);
	for (int i = 0; i < n; i++) {
		uint64_t t0 = ph[i].t0 + a.mono_to_wall_ns, t1 = ph[i].t1 + a.mono_to_wall_ns;
		const struct rec *b;
		long long lag;

		if (!strcmp(ph[i].name, "spin")) {
			uint64_t on = overlap(&rs, ph[i].tid, "running", t0, t1) +
				      overlap(&rs, ph[i].tid, "runnable", t0, t1);
			uint64_t blk = overlap(&rs, ph[i].tid, "blocked", t0, t1);

			if (llabs_((long long)on - (long long)(t1 - t0)) >= margin && races > nunseen) {
				/* a switch-in the programs did not see: that state is unknown */
				fprintf(stderr, "  spin phase %d: on %lu of %lu ns (%ld races)\n", i,
					on, t1 - t0, races);
				nunseen++;
				continue;
			}
			if (!ASSERT_TRUE(llabs_((long long)on - (long long)(t1 - t0)) < margin,
					 "spin: running+runnable = phase within the margin") ||
			    !ASSERT_TRUE((long long)blk < margin, "spin: not blocked")) {
				fprintf(stderr, "  phase %d: %lu ns at %lu, on %lu, blocked %lu\n", i,
					t1 - t0, t0, on, blk);
				goto out;
			}
			checked++;
		} else if (!strcmp(ph[i].name, "sleep") || !strcmp(ph[i].name, "futex")) {
			bool sleep = !strcmp(ph[i].name, "sleep");
			long long want = sleep ? 50 * MS : 30 * MS;

			b = blocked_in(&rs, ph[i].tid, t0, t1);
			if (!b && races > nunseen) {
				/* a switch-in the programs did not see (seen once in ~10 loaded runs):
				 * the state's end is unknown, so it is not reported */
				fprintf(stderr, "  %s phase %d: no blocked interval (%ld races)\n",
					ph[i].name, i, races);
				nunseen++;
				continue;
			}
			if (!ASSERT_TRUE(b != NULL, "blocked interval in the phase"))
				goto out;
			dur = (long long)(b->end_ns - b->start_ns);
			/*
			 * The phase clock is read before the sleep starts; time the workload spent
			 * preempted in between (runnable) delays the switch-out, on a loaded machine
			 * by more than any fixed bound. What is left must be short.
			 */
			lag = (long long)b->start_ns - (long long)t0;
			if (lag > 0)
				lag -= (long long)overlap(&rs, ph[i].tid, "runnable", t0, b->start_ns);
			/*
			 * Blocked from the switch-out to the timer's wake-up: the nominal time, never
			 * less, never more than the phase; a VM's late timer interrupt (host steal)
			 * may stretch a few, so 80 % must be within the margin of nominal.
			 */
			if (!ASSERT_TRUE(dur > want - MS / 2 && dur < (long long)(t1 - t0) + MS / 2,
					 "blocked between nominal and the phase duration") ||
			    !ASSERT_TRUE(llabs_(lag) < margin,
					 "blocked from the phase start (less its runnable time) within the margin") ||
			    !ASSERT_STREQ(b->reason, sleep ? "sleep" : "futex", "reason") ||
			    /* the thread blocks at both places, again and again: each block gets
			     * its own place's stack (sched.c remembers stacks by their ids) */
			    !ASSERT_TRUE(!strstr(b->frames, sleep ? "wait_on_futex" : "sleep_for"),
					 "the stack of this phase's place, not the other's")) {
				fprintf(stderr, "  %s phase %d: blocked %lld ns, starts %+lld ns\n",
					ph[i].name, i, dur, (long long)b->start_ns - (long long)t0);
				goto out;
			}
			nblocked++;
			if (llabs_(dur - want) < margin)
				nexact++;
			else
				fprintf(stderr, "  %s phase %d: blocked %.3f ms (phase %.3f ms)\n",
					ph[i].name, i, dur / 1e6, (t1 - t0) / 1e6);
			if (!sleep && strstr(b->frames, "phaser;wait_on_futex;"))
				futex_stack = true;
			checked++;
		}
	}
	/*
	 * Each unseen phase is one of the races the agent counted (checked above); 1-4 races a
	 * run on the dev VM, two unseen phases in one CI run: at most one phase in eight.
	 */
	fprintf(stderr, "  %d phases, %d checked, %d unseen, %ld races\n", n, checked, nunseen,
		races);
	if (!ASSERT_TRUE(nunseen * 8 <= n, "at most one phase in eight unseen") ||
	    !ASSERT_TRUE(checked >= 6, "phases checked") ||
	    !ASSERT_TRUE(nexact * 5 >= nblocked * 4, "80 % of blocked phases within the margin of nominal"))
		goto out;
	/* the pinned pair: each waits for the CPU while the other runs */
	for (size_t i = 0; i < rs.n && npin < 2; i++)
		if (!rs.r[i].sample && !strncmp(rs.r[i].thread, "pin", 3) &&
		    rs.r[i].tid != pin_tids[0])
			pin_tids[npin++] = rs.r[i].tid;
	if (!ASSERT_EQ(npin, 2, "both pinned threads seen"))
		goto out;
	for (int k = 0; k < 2; k++) {
		uint64_t run = overlap(&rs, pin_tids[k], "running", 0, UINT64_MAX);
		uint64_t wait = overlap(&rs, pin_tids[k], "runnable", 0, UINT64_MAX);

		fprintf(stderr, "  pinned %d: running %lu ms, runnable %lu ms\n", pin_tids[k],
			(unsigned long)(run / MS), (unsigned long)(wait / MS));
		if (!ASSERT_TRUE(wait * 10 >= (run + wait) * 3 && run > 10 * MS, "runnable-but-waiting"))
			goto out;
	}
	/* off-CPU profile: the futex wait under wait_on_futex, called from phaser */
	for (size_t i = 0; i < rs.n; i++) {
		const struct rec *r = &rs.r[i];

		if (r->sample && !strcmp(r->kind, "offcpu_ns") && r->value >= 29 * (int64_t)MS &&
		    r->value <= 32 * (int64_t)MS && strstr(r->frames, "phaser;wait_on_futex;"))
			futex_stack = true;
	}
	if (!ASSERT_TRUE(futex_stack, "off-CPU futex wait under phaser;wait_on_futex"))
		goto out;
	ok = true;
	goto out;
out_kill:
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
out:
	if (!ok)
		for (size_t i = 0; i < rs.n && i < 400; i++)
			if (!strcmp(rs.r[i].state, "blocked") || rs.r[i].sample)
			fprintf(stderr, "  %lu %s %s tid %d %s %s %.3f ms [%s]\n", rs.r[i].start_ns, rs.r[i].kind,
				rs.r[i].state, rs.r[i].tid, rs.r[i].thread, rs.r[i].reason,
				(rs.r[i].end_ns - rs.r[i].start_ns) / 1e6, rs.r[i].frames);
	free(rs.r);
	agent_done(&a);
	unlink(out);
	return ok;
}

static int read_sync_times(const char *path, struct phase *ph, int max)
{
	FILE *f = fopen(path, "r");
	int n = 0;

	if (!f)
		return 0;
	while (n < max && fscanf(f, "%15s %lu %lu", ph[n].name, &ph[n].t0, &ph[n].t1) == 3)
		n++;
	fclose(f);
	return n;
}

/* Duration the app measured around the sync call that started nearest to mono t. */
static long long app_sync_ns(const struct phase *ph, int n, uint64_t t)
{
	long long best = -1, bestd = 0;

	for (int i = 0; i < n; i++) {
		long long d = llabs_((long long)ph[i].t0 - (long long)t);

		if (best < 0 || d < bestd) {
			best = (long long)(ph[i].t1 - ph[i].t0);
			bestd = d;
		}
	}
	return bestd < 2 * MS ? best : -1;
}

/* gpuscope_agent_cuda_probes_attached from the module's /metrics lines */
static long probes_attached(struct agent *a)
{
	char *buf = NULL, *p;
	size_t len = 0;
	long n = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return 0;
	cuda_probe_module.metrics(a, f);
	fclose(f);
	p = strstr(buf, "\ngpuscope_agent_cuda_probes_attached ");	/* the sample, not HELP */
	if (p)
		n = atol(p + strlen("\ngpuscope_agent_cuda_probes_attached "));
	free(buf);
	return n;
}

static void tick2(struct agent *a)
{
	sched_module.tick(a);
	cuda_probe_module.tick(a);
}

/*
 * The stand-in libcuda is loaded after the agent started (and, with del, deleted right after
 * dlopen): the process is discovered, the library probed, and every sync call shows up with
 * its duration and the caller's stack; short calls are counted; the blocked thread says
 * cuda_sync.
 */
static bool cuda_case(bool del)
{
	char dir[] = "/tmp/strips_cuda_XXXXXX", lib[128], cmd[300], times[128];
	char *argv[] = { ".output/tests/progs/cuda_app", lib, "60", times, del ? "--delete" : NULL,
			 NULL };
	static struct phase ph[4096];	/* the app's syncs: 50 a second from its start */
	int nph;
	struct agent a;
	struct recs rs = { 0 };
	int gofd = -1, status, nsync = 0, nsync_ok = 0, nsync_stack = 0, nsamples = 0;
	long memsets = 0, launches = 0, memsets_walked = 0, memsets_unwalked = 0, memsets_main = 0;
	int blocked_sync = 0;
	bool ok = false;
	uint64_t end, attached = 0;
	pid_t pid;

	if (skip())
		return true;
	if (!mkdtemp(dir))
		return false;
	snprintf(lib, sizeof(lib), "%s/libcuda.so.1", dir);
	snprintf(times, sizeof(times), "%s/times", dir);
	snprintf(cmd, sizeof(cmd), "cp .output/tests/cuda/libcuda.so.1 %s", lib);
	if (!ASSERT_EQ(system(cmd), 0, "copy stand-in"))
		return false;
	/* the app alone (--pid): other CUDA processes on a shared machine (other test runs) stay
	 * unprobed, so the probe count below is this app's library's */
	pid = spawn(argv, &gofd);
	agent_init(&a, pid);
	a.opts.cuda_launch_probes = true;	/* off by default (issue 14); counted below */
	if (!ASSERT_EQ(sched_module.start(&a), 0, "sched start") ||
	    !ASSERT_EQ(cuda_probe_module.start(&a), 0, "cuda start")) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		goto out;
	}
	for (int i = 0; i < 5; i++) {	/* running before it loads the library */
		tick2(&a);
		usleep(20000);
	}
	go(gofd);
	/* found and probed (attaching takes from 30 ms to seconds on a loaded machine) ... */
	end = mono_ns() + 30000 * MS;
	while (mono_ns() < end && probes_attached(&a) < 100) {
		tick2(&a);
		usleep(20000);
	}
	/* ... with the unwind tables of what it mapped (a worker builds them: seconds on a loaded
	 * machine, and a sync walked before then stops in the library) ... */
	tick2(&a);
	if (a.unwind)
		unwinder__settle(a.unwind, 20000);
	/* ... then 1.5 s of calls (counted from here: attaching may have taken a while) */
	attached = mono_ns() + a.mono_to_wall_ns;
	end = mono_ns() + 1500 * MS;
	while (mono_ns() < end) {
		tick2(&a);
		usleep(20000);
	}
	kill(pid, SIGUSR1);
	end = mono_ns() + 5000 * MS;
	while (mono_ns() < end && waitpid(pid, &status, WNOHANG) != pid) {
		tick2(&a);
		usleep(20000);
	}
	if (mono_ns() >= end) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	for (int i = 0; i < 3; i++) {
		usleep(20000);
		tick2(&a);
	}
	cuda_probe_module.metrics(&a, stderr);
	{
		uint64_t t0 = mono_ns();

		cuda_probe_module.stop(&a);
		fprintf(stderr, "  cuda stop %.0f ms\n", (mono_ns() - t0) / 1e6);
		t0 = mono_ns();
		sched_module.stop(&a);
		fprintf(stderr, "  sched stop %.0f ms\n", (mono_ns() - t0) / 1e6);
	}
	if (!ASSERT_EQ(status, 0, "app exit status") ||
	    !ASSERT_EQ(recs_from_batch(a.batch, &rs), 0, "decode batch"))
		goto out;
	nph = read_sync_times(times, ph, ARRAY_SIZE(ph));
	for (size_t i = 0; i < rs.n; i++) {
		const struct rec *r = &rs.r[i];

		if (r->pid != pid || r->start_ns < attached)
			continue;
		if (!r->sample && !strcmp(r->kind, "cuda_api")) {
			if (!strcmp(r->api, "cuStreamSynchronize")) {
				long long d = (long long)(r->end_ns - r->start_ns);

				long long want = app_sync_ns(ph, nph, r->start_ns - a.mono_to_wall_ns);

				nsync++;
				nsync_ok += llabs_(d - want) < 2 * MS;
				if (llabs_(d - want) >= 2 * MS)
					fprintf(stderr, "  sync %.3f ms, app saw %.3f ms\n", d / 1e6,
						want / 1e6);
				if (strstr(r->frames, "train_step;wait_gpu;cuStreamSynchronize;"))
					nsync_stack++;
				else
					fprintf(stderr, "  sync without its stack: %s\n", r->frames);
			} else if (!strcmp(r->api, "cuMemsetD32Async")) {
				memsets += r->calls;
				if (strstr(r->frames, "[stack not walked: short call];cuMemsetD32Async"))
					memsets_unwalked += r->calls;
				else if (strstr(r->frames, "main;"))
					memsets_main += r->calls;	/* walked to the app's main */
			} else if (!strcmp(r->api, "cuLaunchKernel")) {
				launches += r->calls;
			}
		} else if (r->sample && !strcmp(r->kind, "cuda_sync_ns") &&
			   strstr(r->frames, "wait_gpu;cuStreamSynchronize;")) {
			nsamples++;
		} else if (!r->sample && !strcmp(r->kind, "thread_state") &&
			   !strcmp(r->state, "blocked") && !strcmp(r->reason, "cuda_sync")) {
			blocked_sync++;
		}
	}
	fprintf(stderr, "  %d syncs (%d of 20 +- 2 ms, %d with the stack), %d sync samples, %ld "
			"launches, %ld memsets (%ld not walked, %ld walked to main), %d blocked in cuda_sync\n",
		nsync, nsync_ok, nsync_stack, nsamples, launches, memsets, memsets_unwalked,
		memsets_main, blocked_sync);
	if (!ASSERT_TRUE(nsync >= 10, "sync calls recorded (lazy attach within ~1 s)") ||
	    /* a preemption between the app's clock read and the call can exceed 2 ms when loaded */
	    !ASSERT_TRUE(nsync_ok * 10 >= nsync * 9, "sync durations = the app's timing +- 2 ms") ||
	    /* one in a CI run (73 syncs) lacked it, cause unknown: the stack is printed above */
	    !ASSERT_TRUE(nsync_stack >= nsync - 1,
			 "sync stacks: train_step;wait_gpu;cuStreamSynchronize") ||
	    !ASSERT_TRUE(nsamples >= nsync - 1, "cuda_sync_ns samples") ||
	    /* the first calls may come while the probes are being attached */
	    !ASSERT_TRUE(launches >= nsync - 3 && memsets >= 5 * (nsync - 5), "short calls counted") ||
	    /* short calls: a random 1 in 16 walked (binomial over ~350: 1-12.5 %, 4 sigma each side) */
	    !ASSERT_TRUE((memsets_walked = memsets - memsets_unwalked) * 100 >= memsets &&
			 memsets_walked * 8 <= memsets && memsets_main > 0,
			 "short calls' stacks: about 1 in 16 walked, the rest marked not walked") ||
	    !ASSERT_TRUE(blocked_sync >= nsync * 9 / 10, "blocked threads say cuda_sync"))
		goto out;
	ok = true;
out:
	free(rs.r);
	agent_done(&a);
	unlink(lib);
	unlink(times);
	rmdir(dir);
	return ok;
}

static bool test_strips_cuda_lazy(void)
{
	return cuda_case(false);
}

static bool test_strips_cuda_deleted_lib(void)
{
	return cuda_case(true);
}

/* 2000 threads that live 1 ms each: followed, recorded, forgotten at exit, nothing lost. */
static bool test_strips_thread_churn(void)
{
	char *argv[] = { ".output/tests/progs/thread_churn", "2000", NULL };
	struct agent a;
	struct recs rs = { 0 };
	int gofd = -1, status, tids = 0;
	long followed, drops, full;
	bool ok = false;
	pid_t pid;

	if (skip())
		return true;
	pid = spawn_followed(argv, &a, 0, &gofd);
	if (pid < 0)
		goto out;
	go(gofd);
	status = run_until_exit(&a, &sched_module, pid, 60000);
	followed = metric(&a, &sched_module, "\ngpuscope_agent_sched_threads_followed ");
	drops = metric(&a, &sched_module, "program=\"sched\",error=\"ringbuf_full\"} ");
	full = metric(&a, &sched_module, "program=\"sched\",error=\"threads_full\"} ");
	sched_module.stop(&a);
	if (!ASSERT_EQ(status, 0, "churn exit status") ||
	    !ASSERT_EQ(recs_from_batch(a.batch, &rs), 0, "decode batch"))
		goto out;
	{
		/* distinct tids with a thread_state record (tids are not reused this fast) */
		static int seen[1 << 16];

		memset(seen, 0, sizeof(seen));
		for (size_t i = 0; i < rs.n; i++)
			if (rs.r[i].pid == pid && !strcmp(rs.r[i].kind, "thread_state") &&
			    !seen[rs.r[i].tid & 0xffff]++)
				tids++;
	}
	fprintf(stderr, "  %d threads recorded, %ld still followed, %ld drops, %ld map full\n",
		tids, followed, drops, full);
	if (!ASSERT_TRUE(tids >= 1900, "every short-lived thread has its states") ||
	    /* other GPU processes on this machine may be followed too: not the 2000 gone ones */
	    !ASSERT_TRUE(followed >= 0 && followed < 500, "exited threads are forgotten") ||
	    !ASSERT_EQ(drops, 0, "no ring buffer drops") || !ASSERT_EQ(full, 0, "map never full"))
		goto out;
	ok = true;
out:
	free(rs.r);
	agent_done(&a);
	return ok;
}

/* A blocked record with a stack: a blocked thread-state interval or an off-CPU sample. */
static bool blocked_rec(const struct rec *r)
{
	return r->stack >= 0 &&
	       (r->sample ? !strcmp(r->kind, "offcpu_ns") : !strcmp(r->state, "blocked"));
}

/*
 * Runs the sched module (user stack walks at most `share` of a thread's time; 0: all walked)
 * on tests/progs/condwait for 1.5 s, its "busy" thread too when busy, into *rs. Sets the BPF
 * counts of switch-outs seen and not walked.
 */
static bool run_condwait_n(int nbusy, const char *secs, double share, struct agent *a,
			   struct recs *rs, long *ret_switches, long *ret_not_walked,
			   double *ret_walk_s)
{
	char n[8];
	char *argv[] = { ".output/tests/progs/condwait", (char *)secs, "-", nbusy ? "busy" : NULL,
			 n, NULL };
	int gofd = -1, status;
	pid_t pid;

	snprintf(n, sizeof(n), "%d", nbusy);
	/* the walk budget itself: a busy thread blocking where it blocked before would have its
	 * stack re-used for the signature's cost (test_offcpu_stack_reuse.py), never spending it */
	setenv("GPUSCOPE_SCHED_USTACK_REUSE_MS", "0", 1);
	pid = spawn_followed(argv, a, share, &gofd);
	unsetenv("GPUSCOPE_SCHED_USTACK_REUSE_MS");
	if (pid < 0)
		return false;
	/* the waiter's libraries' unwind tables first: built by a worker, which a loaded machine
	 * can hold back for seconds (its first blocks then stopped in glibc: 63 of 97) */
	sched_module.tick(a);
	if (a->unwind)
		unwinder__settle(a->unwind, 20000);
	go(gofd);
	status = run_until_exit(a, &sched_module, pid, 10000);
	*ret_switches = metric(a, &sched_module, "\ngpuscope_agent_sched_switches_total ");
	*ret_not_walked = metric(a, &sched_module, "\ngpuscope_agent_sched_stacks_not_walked_total ");
	if (ret_walk_s)
		*ret_walk_s = metric_f(a, &sched_module,
				       "\ngpuscope_agent_sched_stack_walk_seconds_total ");
	sched_module.stop(a);
	return ASSERT_EQ(status, 0, "workload exit status") &&
	       ASSERT_EQ(recs_from_batch(a->batch, rs), 0, "decode batch");
}

static bool run_condwait(bool busy, double share, struct agent *a, struct recs *rs,
			 long *ret_switches, long *ret_not_walked)
{
	return run_condwait_n(busy, "1.5", share, a, rs, ret_switches, ret_not_walked, NULL);
}

/*
 * Stopping the module closes every followed thread's open state at the stop (a waiter blocked
 * across it gets a blocked record up to then, not one that ends at its last switch-in). The
 * threads map's value is read back for it: one struct for BPF and user space (a copy of it in
 * sched.c had gone stale, and the stop emitted nothing).
 */
static bool test_strips_open_states_at_stop(void)
{
	char *argv[] = { ".output/tests/progs/condwait", "30", "-", NULL };
	struct agent a;
	struct recs rs = { 0 };
	int gofd = -1, finals = 0, waiter_final = 0;
	uint64_t stop_at, end;
	bool ok = false;
	pid_t pid;

	if (skip())
		return true;
	pid = spawn_followed(argv, &a, 0, &gofd);
	if (pid < 0)
		goto out;
	go(gofd);
	end = mono_ns() + 500 * MS;
	while (mono_ns() < end) {
		sched_module.tick(&a);
		usleep(20000);
	}
	stop_at = mono_ns() + a.mono_to_wall_ns;
	sched_module.stop(&a);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	if (!ASSERT_EQ(recs_from_batch(a.batch, &rs), 0, "decode batch"))
		goto out;
	for (size_t i = 0; i < rs.n; i++) {
		const struct rec *r = &rs.r[i];

		if (r->pid != pid || r->sample || strcmp(r->kind, "thread_state") || r->end_ns < stop_at)
			continue;
		finals++;
		waiter_final += !strcmp(r->thread, "waiter");
	}
	fprintf(stderr, "  %d states closed at the stop, %d of the waiter\n", finals, waiter_final);
	ok = ASSERT_TRUE(finals >= 2, "the followed threads' states run up to the stop") &&
	     ASSERT_TRUE(waiter_final >= 1, "the waiter's state too");
out:
	free(rs.r);
	agent_done(&a);
	return ok;
}

/*
 * A frame-pointer program waiting in pthread_cond_wait (glibc without frame pointers): the
 * off-CPU stack goes through glibc by its unwind tables and reaches the function that waits.
 */
static bool test_strips_offcpu_cond_wait(void)
{
	struct agent a;
	struct recs rs = { 0 };
	int blocked = 0, full = 0;
	long switches, not_walked;
	bool ok = false;

	if (skip())
		return true;
	if (!run_condwait(false, 0, &a, &rs, &switches, &not_walked))
		goto out;
	for (size_t i = 0; i < rs.n; i++) {
		const struct rec *r = &rs.r[i];

		if (strcmp(r->thread, "waiter") || !blocked_rec(r))
			continue;
		blocked++;
		if (strstr(r->frames, "run_waiter;wait_for_work;pthread_cond_wait"))
			full++;
		else if (blocked - full <= 3)
			fprintf(stderr, "  waiter blocked without its caller: [%s]\n", r->frames);
	}
	fprintf(stderr, "  %d of %d blocked records of the waiter reach run_waiter;wait_for_work\n",
		full, blocked);
	ok = ASSERT_TRUE(blocked >= 10, "the waiter blocked") &&
	     ASSERT_TRUE(full * 10 >= blocked * 9, "90 % of its off-CPU stacks name the waiting function") &&
	     ASSERT_EQ(not_walked, 0, "no walk budget: every switch-out walked");
out:
	free(rs.r);
	agent_done(&a);
	return ok;
}

/*
 * The switch-out walk budget (--offcpu-walk-share, its default 0.1 %): a thread that blocks
 * thousands of times a second has its stacks walked while its walk time stays within the share
 * (1.5 ms in 1.5 s, after a 5-ms burst) and the rest marked; one that blocks 33 times a second
 * (~0.2 ms of walks a second) keeps every stack.
 */
static bool test_strips_offcpu_walk_budget(void)
{
	struct agent a;
	struct recs rs = { 0 };
	int waiter = 0, waiter_full = 0, busy_marked = 0, busy_walked = 0;
	long not_walked, switches;
	bool ok = false;

	if (skip())
		return true;
	if (!run_condwait(true, 0.001, &a, &rs, &switches, &not_walked))
		goto out;
	for (size_t i = 0; i < rs.n; i++) {
		const struct rec *r = &rs.r[i];
		bool marked = strstr(r->frames, "[stack not walked: thread blocks often]");

		if (!blocked_rec(r))
			continue;
		if (!strcmp(r->thread, "waiter")) {
			waiter++;
			waiter_full += !marked && strstr(r->frames, "run_waiter;wait_for_work");
		} else if (!strcmp(r->thread, "busy")) {
			busy_marked += marked;
			busy_walked += !marked && strstr(r->frames, "run_busy") != NULL;
		}
	}
	fprintf(stderr, "  %ld of %ld switch-outs not walked; waiter %d of %d records walked to "
		"wait_for_work; busy: %d marked, %d walked records\n", not_walked, switches,
		waiter_full, waiter, busy_marked, busy_walked);
	/* 6.5 ms of walks of a 95-frame stack (several us each, condwait.c): at most about a
	 * thousand of the busy thread's few thousand blocks */
	ok = ASSERT_TRUE(not_walked >= 1000, "the busy thread's blocks past its budget not walked") &&
	     ASSERT_TRUE(busy_marked > 0, "they are marked, not unknown") &&
	     ASSERT_TRUE(busy_walked > 0, "the budget's walks still name run_busy") &&
	     ASSERT_TRUE(waiter >= 10, "the waiter blocked") &&
	     ASSERT_TRUE(waiter_full * 10 >= waiter * 9, "the waiter, under its budget, walked");
out:
	free(rs.r);
	agent_done(&a);
	return ok;
}

/*
 * The walk budget is the process's too: four threads that block thousands of times a second
 * share the process's 0.1 % (3 ms in 3 s after its 5-ms burst; each thread's first half-burst
 * on its own; the bound leaves the waiter 6 ms), where each of them used to spend its own 0.1 %
 * (about 4 x 8 ms); the waiter,
 * which blocks 33 times a second, still has its stacks walked.
 */
static bool test_strips_offcpu_walk_process_budget(void)
{
	struct agent a;
	struct recs rs = { 0 };
	int waiter = 0, waiter_full = 0;
	long not_walked, switches;
	double walk_s = -1, bound = 3 * 0.001 + 0.005 + 4 * 0.0025 + 0.006;	/* + the waiter's own */
	bool ok = false;

	if (skip())
		return true;
	if (!run_condwait_n(4, "3", 0.001, &a, &rs, &switches, &not_walked, &walk_s))
		goto out;
	for (size_t i = 0; i < rs.n; i++) {
		const struct rec *r = &rs.r[i];

		if (!blocked_rec(r) || strcmp(r->thread, "waiter"))
			continue;
		waiter++;
		waiter_full += !strstr(r->frames, "[stack not walked") &&
			       strstr(r->frames, "run_waiter;wait_for_work");
	}
	fprintf(stderr, "  walks took %.2f ms in 3 s (bound %.1f ms); %ld of %ld switch-outs not "
		"walked; waiter %d of %d records walked\n", walk_s * 1e3, bound * 1e3, not_walked,
		switches, waiter_full, waiter);
	ok = ASSERT_TRUE(walk_s > 0 && walk_s <= bound, "walks within the process's share") &&
	     ASSERT_TRUE(not_walked >= 1000, "the busy threads' blocks past it not walked") &&
	     ASSERT_TRUE(waiter >= 20, "the waiter blocked") &&
	     ASSERT_TRUE(waiter_full * 10 >= waiter * 9, "the waiter's stacks walked");
out:
	free(rs.r);
	agent_done(&a);
	return ok;
}

TEST_MAIN(T(test_strips_reason_names), T(test_strips_known_phases), T(test_strips_cuda_lazy),
	  T(test_strips_cuda_deleted_lib), T(test_strips_thread_churn), T(test_strips_offcpu_cond_wait),
	  T(test_strips_offcpu_walk_budget),
	  T(test_strips_offcpu_walk_process_budget), T(test_strips_open_states_at_stop))
