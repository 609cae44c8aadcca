/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUPTI module's window switches (attach and detach of the pid-filtered `window` probe) run
 * on its own thread, so the agent's main loop keeps draining the other rings while one is slow.
 * cupti_window runs the real libgpuscope_cupti.so over the libcupti stand-in; the real cupti
 * module and the real CPU sampler (a 1 MiB ring fed by a deep-stack spinner) are ticked in
 * turn as run.c's main loop does, while winwork_test_delay_ns makes every attach and detach
 * take seconds longer (the slow uprobe (un)registration of a loaded machine). Checked: no loop
 * iteration takes more than half the delay, samples drained while a switch was in flight, none
 * lost; the window's time starts after its attach; a process that exits during its attach; a
 * stop with an attach waiting (not made, the thread joined, every fd released). Needs root and
 * the CUDA toolkit's headers (exit 77 without).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test.h"
#include "cupti_test.h"
#include "spawn.h"
#include "agent/agent.h"
#include "agent/cpu/oncpu.h"
#include "agent/cupti/cupti_usdt.h"
#include "agent/cupti/window.h"
#include "agent/cupti/winwork.h"
#include "agent/modules.h"
#include "agent/sym/symbolize.h"
#include "common/batch.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"

static char DIR_[600];	/* .output/tests */

#define SPINNERS 1
#define DEPTH	 120	/* frames under the spinner's loop: ~1 KiB a sample (perf's cap is 127) */

/* Everything one run sets up: the workload, the spinner, the sampler, the module. */
struct rig {
	pid_t pid;			/* cupti_window */
	int in, out;			/* its stdin (close: it exits) and stdout */
	pid_t spin[SPINNERS];
	struct agent a;
	struct trace_cfg cfg;
	struct oncpu *cpu;
	uint64_t samples;		/* drained from the CPU ring */
	int fds0, threads0;		/* before the module started */
	char final[512];		/* the workload's "final ..." line */
};

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static volatile unsigned long spun;

static __attribute__((noinline)) void spin(int depth)
{
	if (depth > 0)
		spin(depth - 1);
	while (spun != ~0ul)	/* never: the parent kills it */
		spun++;
}

static void on_sample(void *ctx, const struct gpuscope_ev_cpu_sample *ev, const __u64 *frames)
{
	((struct rig *)ctx)->samples++;
}

/* cpu: also the spinner and the CPU sampler (the slow-switch case only: it burns a core). */
static bool rig_start(struct rig *r, uint64_t delay_ns, bool cpu)
{
	char prog[700], lib[700], buf[4096];
	char *argv[] = { prog, lib, NULL };
	struct oncpu_opts oo = { .frequency_hz = 999, .ringbuf_mb = 1, .npids = SPINNERS };
	const char *why = NULL;
	size_t len = 0;

	memset(r, 0, sizeof(*r));
	r->in = r->out = -1;
	for (int i = 0; cpu && i < SPINNERS; i++) {
		r->spin[i] = fork();
		if (r->spin[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			spin(DEPTH);
		}
		if (!ASSERT_TRUE(r->spin[i] > 0, "fork the spinner"))
			return false;
	}
	oo.pids = r->spin;
	r->cpu = cpu ? oncpu__new(&oo, on_sample, NULL, r, &why) : NULL;
	if (cpu && !ASSERT_TRUE(r->cpu, why ? why : "CPU sampler"))
		return false;
	snprintf(prog, sizeof(prog), "%s/cupti/cupti_window", DIR_);
	snprintf(lib, sizeof(lib), "%s/../libgpuscope_cupti.so", DIR_);
	buf[0] = 0;
	r->pid = spawn_ready(argv, &r->in, &r->out, buf, sizeof(buf), &len);
	if (!ASSERT_TRUE(r->pid > 0, "spawn cupti_window") ||
	    !ASSERT_TRUE(strstr(buf, "ready\n"), "workload ready"))
		return false;
	trace_cfg_defaults(&r->cfg);
	r->cfg.budget = 0.5;
	r->cfg.window_ns = 300 * NSEC_PER_MSEC;
	r->cfg.min_period_ns = 60 * NSEC_PER_SEC;	/* one window */
	r->cfg.kernel_cost_ns = 1000;
	r->cfg.idle_trigger = 0;
	r->a.batch = batch__new("test-node");
	r->a.opts.node = "test-node";
	r->a.opts.trace = &r->cfg;
	r->a.sym = symbolizer__new();
	r->a.mono_to_wall_ns = mono_to_wall_offset_ns();
	r->a.unwind_tried = true;	/* frame pointers: no unwinder thread to count */
	r->a.opts.npids = 1;	/* other test runs may load the same library */
	r->a.opts.pids[0] = r->pid;
	r->fds0 = count_dir("/proc/self/fd");
	r->threads0 = count_dir("/proc/self/task");
	winwork_test_delay_ns = delay_ns;
	return ASSERT_TRUE(r->a.batch, "batch") &&
	       ASSERT_EQ(cupti_module.start(&r->a), 0, "start the cupti module");
}

/* Stops the module (if started) and everything else; the workload's final line into r->final. */
static void rig_stop(struct rig *r, bool module_started)
{
	int status;

	if (module_started)
		cupti_module.stop(&r->a);
	winwork_test_delay_ns = 0;
	if (r->in >= 0)
		cupti_test_final(r->in, r->out, r->final, sizeof(r->final));
	if (r->pid > 0)
		waitpid(r->pid, &status, 0);
	for (int i = 0; i < SPINNERS; i++)
		if (r->spin[i] > 0) {
			kill(r->spin[i], SIGKILL);
			waitpid(r->spin[i], &status, 0);
		}
	oncpu__free(r->cpu);
	batch__free(r->a.batch);
	symbolizer__free(r->a.sym);
}

/* One iteration of the main loop: the CPU ring, then the module. Returns how long it took. */
static uint64_t loop_once(struct rig *r, uint64_t *ret_drained)
{
	uint64_t t0 = mono_ns(), before = r->samples;

	if (r->cpu)
		oncpu__poll(r->cpu, 0);
	cupti_module.tick(&r->a);
	*ret_drained = r->samples - before;
	return mono_ns() - t0;
}

/* The first tick: the module posts the workload's first window's attach. */
static bool first_attach_posted(struct rig *r)
{
	struct cupti_stats st;
	uint64_t drained;

	loop_once(r, &drained);
	cupti_usdt__stats(&st);
	return ASSERT_EQ(st.win_switch_pending, 1, "attach posted");
}

static Gpuscope__V1__Batch *decode(struct batch *b)
{
	uint8_t *enc = NULL;
	size_t len = 0;
	char err[256];
	Gpuscope__V1__Batch *m = NULL;

	if (!batch__encode(b, &enc, &len))
		m = batch_decode(enc, len, err, sizeof(err));
	free(enc);
	return m;
}

/*
 * Every attach and detach takes DELAY longer: the loop goes on draining the CPU ring meanwhile
 * (on the old main-loop switch one iteration took the whole delay, and the 1 MiB ring, ~1 KiB a
 * sample at up to 999 a second, overflowed); the window is timed from its attach's end.
 */
static bool test_cupti_winworker_slow_switch(void)
{
	const uint64_t DELAY = 3 * NSEC_PER_SEC;
	struct rig r;
	struct cupti_stats st;
	struct oncpu_stats cs;
	Gpuscope__V1__Batch *m = NULL;
	uint64_t t0, max_iter = 0, flight_iters = 0, flight_samples = 0, ws = 0, we = 0, lost0;
	size_t windows = 0, kernels = 0, outside = 0;
	const char *status = NULL;
	bool ok = false, started;

	started = rig_start(&r, DELAY, true);
	if (!started)
		goto out;
	/* what the ring lost while the module started (nobody drained it) is not the loop's */
	oncpu__poll(r.cpu, 0);
	oncpu__stats(r.cpu, &cs);
	lost0 = cs.lost;
	t0 = mono_ns();
	for (;;) {
		uint64_t drained, dt = loop_once(&r, &drained);

		if (dt > max_iter)
			max_iter = dt;
		cupti_usdt__stats(&st);
		if (st.win_switch_pending) {
			flight_iters++;
			flight_samples += drained;
		}
		if ((st.windows_closed >= 1 && !st.win_switch_pending) ||
		    mono_ns() - t0 > 6 * DELAY + 10 * NSEC_PER_SEC)
			break;
		usleep(20000);
	}
	oncpu__stats(r.cpu, &cs);
	cupti_module.stop(&r.a);
	started = false;
	cupti_usdt__stats(&st);
	m = decode(r.a.batch);
	if (!ASSERT_TRUE(m, "decode the batch"))
		goto out;
	for (size_t i = 0; i < m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];

		if (!strcmp(S(m, iv->kind), "gpu_trace_window")) {
			windows++;
			/* back to CLOCK_MONOTONIC */
			ws = iv->start_ns - r.a.mono_to_wall_ns;
			we = iv->end_ns - r.a.mono_to_wall_ns;
			status = attr(m, iv, "status");
		}
	}
	for (size_t i = 0; i < m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];
		uint64_t s = iv->start_ns - r.a.mono_to_wall_ns;

		if (strcmp(S(m, iv->kind), "gpu_kernel"))
			continue;
		kernels++;
		outside += s < ws || s > we;
	}
	fprintf(stderr, "  delay %.1f s: longest loop iteration %.1f ms; %llu iterations and %llu "
			"samples while a switch was in flight; %llu samples, %llu lost; window "
			"%.0f ms from %.2f s after start, %zu kernels; attach %.0f ms, detach %.0f "
			"ms\n",
		DELAY / 1e9, max_iter / 1e6, (unsigned long long)flight_iters,
		(unsigned long long)flight_samples, (unsigned long long)cs.delivered,
		(unsigned long long)(cs.lost - lost0), (we - ws) / 1e6,
		ws > t0 ? (ws - t0) / 1e9 : -1.0,
		kernels, st.win_attach_max_ns / 1e6, st.win_detach_max_ns / 1e6);
	ok = ASSERT_TRUE(max_iter < DELAY / 2, "no loop iteration waited for a switch") &&
	     ASSERT_TRUE(flight_iters >= 10, "the loop went on while a switch was in flight") &&
	     ASSERT_TRUE(flight_samples > 0, "CPU samples drained while a switch was in flight") &&
	     ASSERT_EQ(cs.lost - lost0, 0, "no CPU sample lost while the loop ran") &&
	     ASSERT_TRUE(cs.delivered > 0, "CPU samples taken") &&
	     ASSERT_EQ(windows, 1, "one window") && ASSERT_STREQ(status, "traced", "it traced") &&
	     ASSERT_EQ(st.windows_opened[TRACE_BUDGET], 1, "counted as opened") &&
	     ASSERT_EQ(st.win_attach_errors, 0, "no attach error") &&
	     /* the library saw the semaphore only once the delayed attach was done */
	     ASSERT_TRUE(ws >= t0 + DELAY, "the window's range starts after its attach") &&
	     /* timed from the attach's end (from the request, it would be over when it opens),
	      * and it ends when the delayed detach drops the semaphore */
	     ASSERT_TRUE(we - ws >= 300 * NSEC_PER_MSEC + DELAY, "the window's full length") &&
	     ASSERT_TRUE(kernels > 0, "kernels traced") &&
	     ASSERT_EQ(outside, 0, "no kernel outside the window") &&
	     ASSERT_TRUE(st.win_attach_max_ns > 0 && st.win_detach_max_ns > 0, "switches timed");
out:
	if (m)
		batch_decode_free(m);
	rig_stop(&r, started);
	return ok;
}

/* The workload exits while its window's attach is in flight: counted, nothing left attached. */
static bool test_cupti_winworker_exit_in_flight(void)
{
	struct rig r;
	struct cupti_stats st;
	uint64_t t0, drained;
	int status;
	bool ok = false, started;

	started = rig_start(&r, 2 * NSEC_PER_SEC, false);
	if (!started || !first_attach_posted(&r))
		goto out;
	kill(r.pid, SIGKILL);
	waitpid(r.pid, &status, 0);
	r.pid = -1;
	t0 = mono_ns();
	/* the attach fails on the gone process; the 2-s scan marks it dead */
	do {
		loop_once(&r, &drained);
		cupti_usdt__stats(&st);
		usleep(20000);
	} while ((st.win_switch_pending || mono_ns() - t0 < 3 * NSEC_PER_SEC) &&
		 mono_ns() - t0 < 30 * NSEC_PER_SEC);
	cupti_module.stop(&r.a);
	started = false;
	ok = ASSERT_EQ(st.win_switch_pending, 0, "the attach was reaped") &&
	     ASSERT_EQ(st.win_attach_errors, 1, "the failed attach counted") &&
	     ASSERT_EQ(st.windows_asked, 0, "no window asked") &&
	     ASSERT_EQ(st.processes, 0, "the process is gone") &&
	     ASSERT_EQ(count_dir("/proc/self/fd"), r.fds0, "every fd released at stop");
out:
	rig_stop(&r, started);
	return ok;
}

/*
 * Stopping while a window's attach waits on the switch thread: the attach is not made (a window
 * opened now would only be closed again), the thread is joined, every fd released, and the
 * library never saw the switch.
 */
static bool test_cupti_winworker_stop_in_flight(void)
{
	const uint64_t DELAY = 1500 * NSEC_PER_MSEC;
	struct cupti_stats st;
	struct rig r;
	uint64_t t0, took;
	int fds, threads;
	bool ok = false, started;

	started = rig_start(&r, DELAY, false);
	if (!started || !first_attach_posted(&r))
		goto out;
	t0 = mono_ns();
	cupti_module.stop(&r.a);
	took = mono_ns() - t0;
	started = false;
	cupti_usdt__stats(&st);	/* the stopped module's last counters */
	fds = count_dir("/proc/self/fd");
	threads = count_dir("/proc/self/task");
	rig_stop(&r, false);	/* the workload exits and prints what CUPTI saw */
	fprintf(stderr, "  stop took %.2f s; workload: %s\n", took / 1e9, r.final);
	return ASSERT_TRUE(took >= DELAY, "stop waited for the switch thread's job") &&
	       ASSERT_TRUE(took < DELAY + 10 * NSEC_PER_SEC, "and returned") &&
	       ASSERT_EQ(st.win_attach_errors, 0, "a cancelled attach is no error") &&
	       ASSERT_EQ(fds, r.fds0, "every fd released") &&
	       ASSERT_EQ(threads, r.threads0, "every thread joined") &&
	       ASSERT_TRUE(strstr(r.final, " subscribes=0 "), "the library never saw the switch") &&
	       ASSERT_TRUE(strstr(r.final, " subscribed=0"), "nor holds CUPTI");
out:
	rig_stop(&r, started);
	return ok;
}

int main(int argc, char **argv)
{
	static const struct test_case tests[] = {
		T(test_cupti_winworker_slow_switch),
		T(test_cupti_winworker_exit_in_flight),
		T(test_cupti_winworker_stop_in_flight),
	};
	const char *why = NULL;
	int rc = cupti_test_dir(DIR_, sizeof(DIR_), &why);

	if (rc < 0)
		return 1;
	if (rc > 0) {
		printf("skip: %s\n", why);
		return 77;
	}
	return test_main(tests, ARRAY_SIZE(tests), argc, argv);
}
