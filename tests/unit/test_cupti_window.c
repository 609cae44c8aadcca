/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Trace windows through the real control path, without a GPU: cupti_window runs the real
 * libgpuscope_cupti.so over the libcupti.so.13 stand-in (tests/cupti/fake_cupti.c), and the real
 * cupti module opens and closes windows in it by attaching to its `window` probe for that pid.
 * Checked: kernels only inside gpu_trace_window intervals and every one of them joined to its
 * launch stack (but a launch in flight at a window's open or close), CUPTI finalized after each
 * window, bounded device buffers, on-demand captures,
 * "not injected", a CUPTI held by another client, and the budget controller against synthetic
 * window costs. Needs root and the CUDA toolkit's headers (exit 77 without).
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test.h"
#include "cupti_test.h"
#include "spawn.h"
#include "agent/agent.h"
#include "agent/cupti/cupti_usdt.h"
#include "agent/cupti/window.h"
#include "agent/modules.h"
#include "agent/sym/symbolize.h"
#include "common/batch.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"

static char DIR_[600];	/* .output/tests */

struct run {
	Gpuscope__V1__Batch *m;
	struct cupti_stats st;
	char final[1024];	/* the workload's "final ..." line (and its "user ..." line) */
	int64_t mono_to_wall_ns;	/* the agent's: interval times are wall clock */
	int capture_rc;
	char capture_why[128];
	int not_injected_rc;
	char not_injected_why[128];
	uint64_t elapsed_ns;	/* how long the module ran (a loaded machine stretches it) */
};

static unsigned long long final_num(const struct run *r, const char *key)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof(k), " %s=", key);
	p = strstr(r->final, k);
	return p ? strtoull(p + strlen(k), NULL, 10) : ~0ull;
}

/*
 * Runs cupti_window (held: another CUPTI client) under the module with cfg for run_ms; at
 * capture_at_ms (if > 0) asks for an on-demand capture of capture_ms.
 */
/* A user's CUPTI client in the workload (cupti_window's "user" mode): its object and how long
 * it holds CUPTI; NULL: none. The run then lasts until a window opened after its hand-over. */
static const char *user_lib, *user_hold_ms, *user_finalize;

static bool run_window(const struct trace_cfg *cfg, bool held, int run_ms, int capture_at_ms,
		       int capture_ms, unsigned min_windows, struct run *ret)
{
	int in[2], out[2], status;
	char prog[700], lib[700], ulib[700], buf[4096];
	char *argv[] = { prog, lib, held ? "held" : NULL, NULL, NULL, NULL, NULL };
	uint64_t opened_at_yield = 0;
	struct agent a = { 0 };
	size_t len = 0;
	uint8_t *enc = NULL;
	size_t enc_len = 0;
	bool ok = false;
	pid_t pid;

	memset(ret, 0, sizeof(*ret));
	snprintf(prog, sizeof(prog), "%s/cupti/cupti_window", DIR_);
	snprintf(lib, sizeof(lib), "%s/../libgpuscope_cupti.so", DIR_);
	if (user_lib) {
		snprintf(ulib, sizeof(ulib), "%s/cupti/fakecupti/%s", DIR_, user_lib);
		argv[2] = "user";
		argv[3] = ulib;
		argv[4] = (char *)user_hold_ms;
		argv[5] = (char *)user_finalize;
	}
	buf[0] = 0;
	pid = spawn_ready(argv, &in[1], &out[0], buf, sizeof(buf), &len);
	if (!ASSERT_TRUE(pid > 0, "spawn cupti_window"))
		return false;
	if (!ASSERT_TRUE(strstr(buf, "ready\n"), "workload ready"))
		goto out_kill;
	a.batch = batch__new("test-node");
	a.opts.node = "test-node";
	a.opts.trace = cfg;
	a.sym = symbolizer__new();
	a.mono_to_wall_ns = mono_to_wall_offset_ns();
	ret->mono_to_wall_ns = a.mono_to_wall_ns;
	a.opts.npids = 1;	/* other test runs may load the same library */
	a.opts.pids[0] = pid;
	if (!ASSERT_TRUE(a.batch, "batch") || !ASSERT_EQ(cupti_module.start(&a), 0, "start"))
		goto out_kill;
	uint64_t t0 = mono_ns();
	bool captured = false;

	uint64_t end = run_ms * NSEC_PER_MSEC;

	/*
	 * A capture asked for is always made, and waited for as the agent does (capture_poll.c):
	 * the window switches run on the module's own thread and may take seconds on a loaded
	 * machine, so the capture's window can open and close well after end.
	 */
	for (uint64_t t = 0;
	     t < end || (capture_at_ms > 0 && (!captured || (cupti_usdt__capturing(pid) &&
							       t < 30 * NSEC_PER_SEC)));
	     t = mono_ns() - t0) {
		if (capture_at_ms > 0 && t >= capture_at_ms * NSEC_PER_MSEC && !captured) {
			captured = true;
			/* a loaded machine may be late: the window still gets its time after */
			if (end < t + (capture_ms + 600) * NSEC_PER_MSEC)
				end = t + (capture_ms + 600) * NSEC_PER_MSEC;
			ret->capture_rc = cupti_usdt__capture(pid, capture_ms * 1000000ull,
							      ret->capture_why,
							      sizeof(ret->capture_why));
			ret->not_injected_rc = cupti_usdt__capture(1, NSEC_PER_SEC,
								   ret->not_injected_why,
								   sizeof(ret->not_injected_why));
		}
		cupti_module.tick(&a);
		usleep(20000);
		if (t + 20 * NSEC_PER_MSEC >= end && min_windows && end < 30 * NSEC_PER_SEC) {
			struct cupti_stats st;

			/* a loaded machine stretches windows, and their measured cost spaces them
			 * (2 closed in 15 s at load 8): wait */
			cupti_usdt__stats(&st);
			/* a busy CUPTI's window is refused, not closed */
			if (st.windows_closed + st.win_busy < min_windows)
				end += 100 * NSEC_PER_MSEC;
		}
		if (user_lib && t + 20 * NSEC_PER_MSEC >= end && end < 30 * NSEC_PER_SEC) {
			struct cupti_stats st;
			uint64_t opened = 0;

			/* until a window opened after the hand-over (so after the client let go),
			 * and 300 ms of it */
			cupti_usdt__stats(&st);
			for (int i = 0; i < TRACE_REASONS; i++)
				opened += st.windows_opened[i];
			if ((st.win_yielded || st.win_user) && !opened_at_yield)
				opened_at_yield = opened;
			/* (another agent's windows here: the client may have taken one of those) */
			if ((!opened_at_yield || opened <= opened_at_yield) && !st.win_stray)
				end = t + 300 * NSEC_PER_MSEC;
		}
	}
	ret->elapsed_ns = mono_ns() - t0;
	cupti_module.stop(&a);	/* closes the open window and waits for its records */
	cupti_usdt__stats(&ret->st);
	ok = true;
out_kill:
	cupti_test_final(in[1], out[0], ret->final, sizeof(ret->final));
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "  cupti_window exit status %d\n", status);
		ok = false;
	}
	if (ok && a.batch && ASSERT_EQ(batch__encode(a.batch, &enc, &enc_len), 0, "encode")) {
		ret->m = batch_decode(enc, enc_len, buf, sizeof(buf));
		if (!ret->m)
			fprintf(stderr, "  decode: %s\n", buf);
		ok = ret->m != NULL;
	}
	free(enc);
	batch__free(a.batch);
	symbolizer__free(a.sym);
	return ok;
}

static struct trace_cfg test_cfg(void)
{
	struct trace_cfg c;

	trace_cfg_defaults(&c);
	c.budget = 0.5;			/* cost per window is tiny here: min_period decides */
	c.window_ns = 200 * NSEC_PER_MSEC;
	c.min_period_ns = 600 * NSEC_PER_MSEC;
	c.kernel_cost_ns = 1000;
	c.idle_trigger = 0;
	return c;
}

static bool test_cupti_window_budget_cycle(void)
{
	struct trace_cfg cfg = test_cfg();
	struct run r;
	size_t windows = 0, kernels = 0, outside = 0, joined = 0, late_unjoined = 0, at_close = 0;
	uint64_t ws[16], we[16], first[16], last[16];
	bool ok;

	CHECK(run_window(&cfg, false, 2600, 0, 0, 3, &r));
	for (size_t i = 0; i < r.m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = r.m->intervals[i];

		if (strcmp(S(r.m, iv->kind), "gpu_trace_window"))
			continue;
		if (windows < 16) {
			ws[windows] = iv->start_ns;
			we[windows] = iv->end_ns;
		}
		windows++;
		if (!ASSERT_STREQ(attr(r.m, iv, "reason"), "budget", "window reason") ||
		    !ASSERT_STREQ(attr(r.m, iv, "status"), "traced", "window status"))
			return false;
	}
	/*
	 * A launch in flight when a window opens (its API enter before the callbacks were on, its
	 * record after the kinds were) has a kernel but no launch probe, as with real CUPTI; one in
	 * flight when it closes can have its record flushed by the close before its API exit fires
	 * the launch probe, and the agent has no launch to join it to yet (docs/cupti.md). The
	 * workload's one launching thread can leave such a kernel at either end of a window.
	 */
	for (size_t w = 0; w < 16; w++) {
		first[w] = UINT64_MAX;
		last[w] = 0;
	}
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < r.m->n_intervals; i++) {
			const Gpuscope__V1__Interval *iv = r.m->intervals[i];
			size_t in = SIZE_MAX;

			if (strcmp(S(r.m, iv->kind), "gpu_kernel"))
				continue;
			for (size_t w = 0; w < windows && w < 16; w++)
				if (iv->start_ns >= ws[w] && iv->start_ns <= we[w])
					in = w;
			if (pass == 0) {
				if (in != SIZE_MAX && iv->start_ns < first[in])
					first[in] = iv->start_ns;
				if (in != SIZE_MAX && iv->start_ns > last[in])
					last[in] = iv->start_ns;
				continue;
			}
			kernels++;
			outside += in == SIZE_MAX;
			if (attr(r.m, iv, "stack_id"))
				joined++;
			else if (in == SIZE_MAX ||
				 (iv->start_ns != first[in] && iv->start_ns != last[in]))
				late_unjoined++;
			else if (iv->start_ns == last[in] && iv->start_ns != first[in])
				at_close++;
		}
	}
	fprintf(stderr, "  %zu kernels in %zu windows: %zu joined (%llu of them after waiting for "
			"their launch), %zu unjoined at a window's close\n", kernels, windows, joined,
		(unsigned long long)r.st.joined_late, at_close);
	if (final_num(&r, "subscribes") != r.st.windows_opened[TRACE_BUDGET] ||
	    r.st.win_stray || r.st.win_no_status) {
		/* another agent on this machine (a parallel test run without --pid) opened windows
		 * in our process too: only what does not depend on who opened what */
		fprintf(stderr, "  another agent opened windows here (%llu subscribes, %llu ours): "
				"checking joins only\n",
			final_num(&r, "subscribes"),
			(unsigned long long)r.st.windows_opened[TRACE_BUDGET]);
		ok = ASSERT_TRUE(windows >= 1, "a window") &&
		     ASSERT_EQ(late_unjoined, 0, "every kernel joined to its launch stack "
						 "but at a window's ends");
		batch_decode_free(r.m);
		return ok;
	}
	ok = ASSERT_TRUE(windows >= 3, "3 windows or more") &&
	     ASSERT_TRUE(windows <= r.elapsed_ns / (600 * NSEC_PER_MSEC) + 1,
			 "no two windows closer than the 600 ms minimum period") &&
	     ASSERT_EQ(r.st.windows_closed, windows, "every window closed") &&
	     ASSERT_TRUE(kernels > 100, "kernels traced") &&
	     ASSERT_EQ(outside, 0, "kernels outside a window") &&
	     ASSERT_EQ(late_unjoined, 0, "every kernel joined to its launch stack but at a "
					 "window's ends") &&
	     ASSERT_TRUE(joined + 2 * windows >= kernels, "at most two unjoined kernels a window") &&
	     /* launches in flight at a close, and the one that finalizes CUPTI, still report */
	     ASSERT_TRUE(r.st.launches >= kernels && r.st.launches <= kernels + 2 * windows,
			 "launch probe hits only inside windows") &&
	     ASSERT_EQ(final_num(&r, "traced"), kernels, "the agent got every traced kernel") &&
	     /* a loaded machine stretches the 200 ms windows; the 600 ms gaps stay untraced */
	     ASSERT_TRUE(final_num(&r, "traced") * 10 < final_num(&r, "launches") * 9,
			 "launches outside windows ran untraced") &&
	     /* never finalized by default: a CUDA graph faults after CUPTI's re-init */
	     ASSERT_EQ(final_num(&r, "finalizes"), 0, "CUPTI not finalized after a window") &&
	     ASSERT_EQ(final_num(&r, "subscribed"), 0, "not subscribed after the last window") &&
	     ASSERT_EQ(final_num(&r, "kinds"), 0, "no activity kind left enabled") &&
	     ASSERT_EQ(final_num(&r, "devbuf"), 4 << 20, "device buffer size bounded") &&
	     ASSERT_EQ(final_num(&r, "pool"), 4, "device buffer pool bounded");
	if (!ok)
		fprintf(stderr, "  %zu windows in %.1f s, %zu kernels, %llu launch events; "
				"workload: %s\n", windows, r.elapsed_ns / 1e9, kernels,
			(unsigned long long)r.st.launches, r.final);
	batch_decode_free(r.m);
	return ok;
}

static bool test_cupti_window_capture(void)
{
	struct trace_cfg cfg = test_cfg();
	struct run r;
	size_t captures = 0, budget = 0;
	uint64_t len = 0;
	bool ok;

	cfg.min_period_ns = 60 * NSEC_PER_SEC;	/* one budget window, then only the capture */
	cfg.window_ns = 100 * NSEC_PER_MSEC;
	CHECK(run_window(&cfg, false, 1500, 400, 500, 0, &r));
	for (size_t i = 0; i < r.m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = r.m->intervals[i];
		const char *why;

		if (strcmp(S(r.m, iv->kind), "gpu_trace_window"))
			continue;
		why = attr(r.m, iv, "reason");
		if (why && !strcmp(why, "capture")) {
			captures++;
			len = iv->end_ns - iv->start_ns;
		}
		budget += why && !strcmp(why, "budget");
	}
	ok = ASSERT_EQ(r.capture_rc, 1, "capture traces one process") &&
	     ASSERT_TRUE(r.elapsed_ns >= 900 * NSEC_PER_MSEC, "ran past the capture") &&
	     ASSERT_STREQ(r.capture_why, "tracing 1 process", "capture answer") &&
	     ASSERT_EQ(r.not_injected_rc, -ENOENT, "capture of a process without the library") &&
	     ASSERT_TRUE(strstr(r.not_injected_why, "not injected"), "says 'not injected'") &&
	     ASSERT_TRUE(budget >= 1, "a budget window first") &&
	     ASSERT_EQ(captures, 1, "one capture") &&
	     /* a loaded machine adds ticks (and the ~130 ms detach) to the end */
	     ASSERT_TRUE(len >= 450 * NSEC_PER_MSEC && len < 3 * NSEC_PER_SEC,
			 "capture window of 500 ms or a little more") &&
	     ASSERT_EQ(r.st.windows_opened[TRACE_CAPTURE], 1, "counted as capture");
	if (!ok)
		fprintf(stderr, "  capture len %llu ns; %s\n", (unsigned long long)len, r.final);
	batch_decode_free(r.m);
	return ok;
}

static bool test_cupti_window_cupti_busy(void)
{
	struct trace_cfg cfg = test_cfg();
	struct run r;
	size_t busy = 0, kernels = 0;
	bool ok;

	/* at least one window asked for and refused (a loaded machine can take more than the
	 * second to ask: a loaded run here saw none in it) */
	CHECK(run_window(&cfg, true, 1000, 0, 0, 1, &r));
	for (size_t i = 0; i < r.m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = r.m->intervals[i];
		const char *st = attr(r.m, iv, "status");

		kernels += !strcmp(S(r.m, iv->kind), "gpu_kernel");
		busy += !strcmp(S(r.m, iv->kind), "gpu_trace_window") && st &&
			!strcmp(st, "cupti busy");
	}
	ok = ASSERT_TRUE(busy >= 1, "a window says another client holds CUPTI") &&
	     ASSERT_TRUE(r.st.win_busy >= 1, "counted") && ASSERT_EQ(kernels, 0, "no kernels") &&
	     ASSERT_EQ(final_num(&r, "subscribes"), 0, "never subscribed") &&
	     ASSERT_EQ(final_num(&r, "finalizes"), 0, "never finalized the other's CUPTI");
	batch_decode_free(r.m);
	return ok;
}

static bool test_cupti_window_continuous(void)
{
	struct trace_cfg cfg = test_cfg();
	struct run r;
	size_t windows = 0, kernels = 0;
	bool ok;

	cfg.budget = 1;	/* --gpu-trace-budget 100% */
	CHECK(run_window(&cfg, false, 1000, 0, 0, 0, &r));
	for (size_t i = 0; i < r.m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = r.m->intervals[i];
		const char *why = attr(r.m, iv, "reason");

		kernels += !strcmp(S(r.m, iv->kind), "gpu_kernel");
		windows += !strcmp(S(r.m, iv->kind), "gpu_trace_window") && why &&
			   !strcmp(why, "continuous");
	}
	ok = ASSERT_EQ(windows, 1, "one continuous window") &&
	     /* another agent on this machine (a parallel test run) may open windows after ours */
	     ASSERT_TRUE(final_num(&r, "traced") >= kernels, "the traced kernels arrived") &&
	     ASSERT_TRUE(final_num(&r, "traced") >= 200, "launches traced from the first tick on");
	if (!ok)
		fprintf(stderr, "  %zu windows; %s\n", windows, r.final);
	batch_decode_free(r.m);
	return ok;
}

/*
 * Budget controller against synthetic windows: open/close costs, a kernel rate, the launch
 * probe's measured BPF time per launch. Returns the share of time spent as the cost model
 * counts it.
 */
/* share of the time the always-on parts cost the simulated process */
static double sim_always_on;
/* the most the windows before one had cost beyond the share of the time since the first (ns) */
static double sim_overspent;

static double simulate(const struct trace_cfg *c, double kernels_per_s, uint64_t open_ns,
		       uint64_t close_ns, uint64_t probe_ns, uint64_t run_ns,
		       uint64_t *ret_windows, uint64_t *ret_early)
{
	struct trace_budget b = { 0 };
	uint64_t now = 1000 * NSEC_PER_SEC, end = now + run_ns, spent = 0, start = now;

	*ret_windows = *ret_early = 0;
	sim_overspent = 0;
	while (now < end) {
		uint64_t len = trace_budget__window_ns(&b, c), el = 0, k = 0;
		struct trace_cost w;
		double over;

		if (now < b.next_open_ns) {
			now = b.next_open_ns;
			continue;
		}
		/* every window before this one paid for by the time since the first */
		b.always_on = sim_always_on;
		over = (double)spent - trace_budget__window_share(&b, c) * (double)(now - start);
		if (over > sim_overspent)
			sim_overspent = over;
		/* the module checks for an overrun every 50 ms tick */
		while (el < len) {
			el += 50 * NSEC_PER_MSEC;
			if (el > len)
				el = len;
			k = (uint64_t)(kernels_per_s * el / 1e9);
			if (trace_budget__overrun(&b, c, k, k * probe_ns, el)) {
				(*ret_early)++;
				break;
			}
		}
		w = (struct trace_cost){ open_ns, close_ns, k, el, k, k * probe_ns };
		b.always_on = sim_always_on;
		trace_budget__closed(&b, c, now, &w);
		spent += (uint64_t)trace_cost_ns(c, &w);
		(*ret_windows)++;
		now += el;
	}
	return (double)spent / (double)(now - start);
}

static bool test_cupti_window_budget_controller(void)
{
	struct trace_cfg c;
	uint64_t n, early;
	double share;

	trace_cfg_defaults(&c);
	/* launch-bound: 150 k kernels/s, 6 us each, 2 ms to open, 20 ms to close */
	share = simulate(&c, 150000, 2000000, 20000000, 0, 3600 * NSEC_PER_SEC, &n, &early);
	if (!ASSERT_TRUE(share <= c.budget * 1.02, "launch-bound share within 1 %") ||
	    !ASSERT_TRUE(share >= c.budget * 0.5, "and uses most of it") ||
	    !ASSERT_TRUE(n >= 60, "a window at least every minute") ||
	    !ASSERT_TRUE(sim_overspent <= 1e6, "no window before the ones before it are paid for"))
		goto fail;
	/* a new process's first minute, windows of ~0.09 s (the H100 training loop's were ~0.12
	 * s): the windows after the first within the share of the time since it */
	{
		uint64_t n60;
		double s60 = simulate(&c, 20000, 25000000, 3000000, 0, 60 * NSEC_PER_SEC, &n60,
				      &early);

		/* ~0.09 s a window: 0.6 s of budget a minute pays for the first and 6 more */
		if (!ASSERT_TRUE(sim_overspent <= 1e6, "first minute: every window paid for first") ||
		    !ASSERT_TRUE(n60 >= 4 && n60 <= 8, "first minute: 4-8 windows") ||
		    !ASSERT_TRUE(s60 <= c.budget * 1.2, "first minute: within the budget and one "
				 "window"))
			goto fail;
	}
	/* quiet process: 100 kernels/s; windows come every min_period to twice that (jittered:
	 * 1.5 x on average) */
	share = simulate(&c, 100, 2000000, 5000000, 0, 600 * NSEC_PER_SEC, &n, &early);
	if (!ASSERT_TRUE(share <= c.budget, "quiet share within 1 %") ||
	    !ASSERT_TRUE(n >= 600 / 10 && n <= 600 / 5, "one window per 1-2 min_periods") ||
	    !ASSERT_TRUE(n >= 600 / 7.5 * 0.95 && n <= 600 / 7.5 * 1.05, "1.5 on average"))
		goto fail;
	/* a kernel storm: 5 M kernels/s; each window is cut at its allowance */
	share = simulate(&c, 5e6, 1000000, 1000000, 0, 600 * NSEC_PER_SEC, &n, &early);
	if (!ASSERT_TRUE(share <= c.budget * 1.02, "storm share within 1 %") ||
	    !ASSERT_TRUE(n >= 3, "still windows (one tick of a storm costs ~150 s of budget)") ||
	    !ASSERT_TRUE(early >= 1, "storm windows closed early"))
		goto fail;
	/* launch-bound with deep Python stacks: the launch probe's BPF walk measured at 14 us a
	 * launch on the H200 (4x CUPTI's own cost): windows space out to hold the budget */
	{
		uint64_t n_cheap, n_deep;

		share = simulate(&c, 150000, 2000000, 20000000, 0, 3600 * NSEC_PER_SEC, &n_cheap,
				 &early);
		share = simulate(&c, 150000, 2000000, 20000000, 14000, 3600 * NSEC_PER_SEC, &n_deep,
				 &early);
		if (!ASSERT_TRUE(share <= c.budget * 1.02, "deep-stack launch-bound share within 1 %") ||
		    !ASSERT_TRUE(n_deep < n_cheap, "fewer windows when the probe costs more"))
			goto fail;
	}
	/* the always-on probes and sampler take 0.6 % of the process: windows get the other 0.4 % */
	sim_always_on = 0.006;
	share = simulate(&c, 150000, 2000000, 20000000, 0, 3600 * NSEC_PER_SEC, &n, &early);
	if (!ASSERT_TRUE(share <= 0.004 * 1.02 && share >= 0.002,
			 "windows + always-on within the 1 % budget"))
		goto fail;
	/* always-on alone over the budget: windows still come, at a tenth of the budget */
	sim_always_on = 0.02;
	share = simulate(&c, 150000, 2000000, 20000000, 0, 3600 * NSEC_PER_SEC, &n, &early);
	sim_always_on = 0;
	if (!ASSERT_TRUE(share <= 0.001 * 1.02 && n >= 30,
			 "always-on over the budget: windows at a tenth of it"))
		goto fail;
	/* half a percent */
	c.budget = 0.005;
	share = simulate(&c, 150000, 2000000, 20000000, 0, 3600 * NSEC_PER_SEC, &n, &early);
	if (!ASSERT_TRUE(share <= 0.005 * 1.02, "0.5 % budget held"))
		goto fail;
	return true;
fail:
	fprintf(stderr, "  share %.4f over %llu windows, %llu early\n", share,
		(unsigned long long)n, (unsigned long long)early);
	return false;
}

static bool test_cupti_window_options(void)
{
	struct trace_cfg c;

	trace_cfg_defaults(&c);
	return ASSERT_EQ(trace_parse_opt(&c, "gpu-trace-budget", "0.5%"), 1, "0.5%") &&
	       ASSERT_TRUE(c.budget > 0.00499 && c.budget < 0.00501, "budget 0.005") &&
	       ASSERT_EQ(trace_parse_opt(&c, "gpu-trace-budget", "100%"), 1, "100%") &&
	       ASSERT_TRUE(c.budget == 1, "continuous") &&
	       ASSERT_EQ(trace_parse_opt(&c, "gpu-trace-budget", "0"), -EINVAL, "0 refused") &&
	       ASSERT_EQ(trace_parse_opt(&c, "gpu-trace-budget", "150%"), -EINVAL, ">100% refused") &&
	       ASSERT_EQ(trace_parse_opt(&c, "gpu-trace-window", "2s"), 1, "window") &&
	       ASSERT_EQ(c.window_ns, 2 * NSEC_PER_SEC, "2 s") &&
	       ASSERT_EQ(trace_parse_opt(&c, "gpu-trace-window", "1ms"), -EINVAL, "too short") &&
	       ASSERT_EQ(trace_parse_opt(&c, "gpu-trace-idle-trigger", "0"), 1, "trigger off") &&
	       ASSERT_TRUE(c.sync_trigger == 0.5, "sync trigger on by default") &&
	       ASSERT_EQ(trace_parse_opt(&c, "gpu-trace-sync-trigger", "30%"), 1, "sync trigger") &&
	       ASSERT_TRUE(c.sync_trigger > 0.299 && c.sync_trigger < 0.301, "sync 0.3") &&
	       ASSERT_TRUE(c.idle_trigger == 0, "idle trigger left alone") &&
	       ASSERT_EQ(trace_parse_opt(&c, "gpu-trace-sync-trigger", "x"), -EINVAL, "bad share") &&
	       ASSERT_EQ(trace_parse_opt(&c, "nvml-gpm-interval", "1s"), 0, "not ours");
}

#ifndef CUPTI_WINDOW_NO_MAIN	/* test_cupti_handover.c includes this file for run_window() */
int main(int argc, char **argv)
{
	static const struct test_case tests[] = {
		T(test_cupti_window_budget_controller), T(test_cupti_window_options),
		T(test_cupti_window_budget_cycle), T(test_cupti_window_capture),
		T(test_cupti_window_cupti_busy), T(test_cupti_window_continuous),
	};
	const char *why = NULL;
	int rc = cupti_test_dir(DIR_, sizeof(DIR_), &why);

	if (rc < 0)
		return 1;
	if (rc > 0) {
		/* the controller alone needs neither */
		printf("skip: %s\n", why);
		return test_main(tests, 2, argc, argv) ? 1 : 77;
	}
	return test_main(tests, ARRAY_SIZE(tests), argc, argv);
}
#endif
