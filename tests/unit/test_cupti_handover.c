/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUPTI handed over to a user's own CUPTI client (issue 31): cupti_window runs the real
 * libgpuscope_cupti.so over the libcupti.so.13 stand-in, which keeps CUPTI's one-subscriber and
 * process-wide activity rules, under the real cupti module; a client (tests/cupti/user_prof.c,
 * loaded after the injection, calling CUPTI through its PLT or through dlsym) starts while one
 * of our windows is open. Needs root and the CUDA toolkit's headers (exit 77 without).
 */
#define CUPTI_WINDOW_NO_MAIN
#pragma GCC diagnostic ignored "-Wunused-function"
#include "test_cupti_window.c"
#pragma GCC diagnostic warning "-Wunused-function"

/*
 * A user's own CUPTI client started inside one of our windows (issue 31): it gets every kernel
 * launched while it runs, our window ends "yielded" before the client's first call goes on,
 * no window of ours opens while it holds CUPTI, and windows come again once it let go.
 */
static bool check_user_run(struct run *r, const char *reason)
{
	uint64_t t0, t1, yield_end = 0, resumed = 0, overlap = 0, agent_kernels_during = 0;
	size_t yielded = 0, refused = 0;
	int64_t w = r->mono_to_wall_ns;
	bool ok;

	if (!ASSERT_EQ(final_num(r, "phase"), 2, "the client ran and stopped") ||
	    !ASSERT_EQ(final_num(r, "patched"), 1, "its object, loaded after us, was interposed") ||
	    !ASSERT_EQ(final_num(r, "start_rc"), 0, "its subscribe, register and enables worked") ||
	    !ASSERT_EQ(final_num(r, "stop_rc"), 0, "and its disable, flush, unsubscribe"))
		goto fail;
	t0 = final_num(r, "t0") + w;
	t1 = final_num(r, "t1") + w;
	if (final_num(r, "subscribes") != r->st.windows_opened[TRACE_BUDGET] +
						   r->st.windows_opened[TRACE_CONTINUOUS] + 1 ||
	    r->st.win_stray) {
		/* another agent on this machine (a parallel test run) opened windows in our
		 * process too, maybe the one the client took over: the client's side only */
		fprintf(stderr, "  another agent opened windows here (%llu subscribes, %llu ours): "
				"checking the client only\n", final_num(r, "subscribes"),
			(unsigned long long)(r->st.windows_opened[TRACE_BUDGET] +
					     r->st.windows_opened[TRACE_CONTINUOUS]));
		ok = ASSERT_EQ(final_num(r, "missing"), 0, "the client got every kernel") &&
		     ASSERT_EQ(final_num(r, "pool_at_start"), 250, "CUPTI's buffers as before us") &&
		     ASSERT_TRUE(final_num(r, "hi") > final_num(r, "lo") + 100, "many") &&
		     ASSERT_EQ(final_num(r, "subs_during"), 0, "no window while it held CUPTI");
		batch_decode_free(r->m);
		return ok;
	}
	for (size_t i = 0; i < r->m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = r->m->intervals[i];
		const char *st = attr(r->m, iv, "status"), *why = attr(r->m, iv, "reason");

		if (strcmp(S(r->m, iv->kind), "gpu_trace_window"))
			continue;
		if (!st || !why)
			continue;
		if (!strcmp(st, "yielded")) {
			yielded++;
			yield_end = iv->end_ns;
			if (!ASSERT_STREQ(why, reason, "the yielded window's reason"))
				goto fail;
		} else if (!strcmp(st, "user profiler")) {
			refused++;
		} else if (!strcmp(st, "traced") || !strcmp(st, "closed early")) {
			if (iv->start_ns < t1 && iv->end_ns > t0)
				overlap++;
			if (iv->start_ns >= t1)
				resumed++;
		}
	}
	for (size_t i = 0; i < r->m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = r->m->intervals[i];

		if (!strcmp(S(r->m, iv->kind), "gpu_kernel") && yield_end &&
		    iv->start_ns > yield_end && iv->start_ns < t1)
			agent_kernels_during++;
	}
	fprintf(stderr, "  client held CUPTI %.2f s: %llu kernels launched, %llu records and %llu "
			"launch callbacks to it; %zu window(s) refused meanwhile\n",
		(t1 - t0) / 1e9, final_num(r, "hi") - final_num(r, "lo") + 1,
		final_num(r, "records"), final_num(r, "cbs"), refused);
	ok = ASSERT_EQ(final_num(r, "pool_at_start"), 250, "the client found CUPTI's device "
							   "buffers as they were before us") &&
	     ASSERT_EQ(final_num(r, "missing"), 0, "the client got every kernel launched while it "
						   "ran") &&
	     ASSERT_TRUE(final_num(r, "hi") > final_num(r, "lo") + 100, "and there were many") &&
	     ASSERT_TRUE(final_num(r, "cbs") >= final_num(r, "hi") - final_num(r, "lo") + 1,
			 "and every launch callback") &&
	     ASSERT_EQ(yielded, 1, "one window yielded") &&
	     ASSERT_TRUE(yield_end >= t0 && yield_end < t1,
			 "it ended after the client's first call began, before the client stopped") &&
	     ASSERT_EQ(r->st.win_yielded, 1, "counted as yielded") &&
	     ASSERT_EQ(final_num(r, "subs_during"), 0, "we never subscribed while the client held "
						       "CUPTI") &&
	     ASSERT_EQ(overlap, 0, "no window of ours traced while the client held CUPTI") &&
	     ASSERT_EQ(agent_kernels_during, 0, "no kernel came to us while the client held it") &&
	     ASSERT_EQ(r->st.win_user, refused, "refusals counted") &&
	     ASSERT_TRUE(r->st.user_released >= 1, "the client's letting go was reported") &&
	     ASSERT_TRUE(resumed >= 1, "windows resumed after the client let go") &&
	     ASSERT_EQ(final_num(r, "kinds"), 0, "no activity kind left enabled");
	if (!ok)
		goto fail;
	batch_decode_free(r->m);
	return true;
fail:
	fprintf(stderr, "  ran %.1f s: %llu windows asked, %llu closed, %llu yielded, %llu refused "
			"for the client, %llu releases; workload: %s\n", r->elapsed_ns / 1e9,
		(unsigned long long)r->st.windows_asked, (unsigned long long)r->st.windows_closed,
		(unsigned long long)r->st.win_yielded, (unsigned long long)r->st.win_user,
		(unsigned long long)r->st.user_released, r->final);
	batch_decode_free(r->m);
	return false;
}

/* Budget windows; the client calls CUPTI through its PLT and finalizes at its end. */
static bool test_cupti_handover_budget(void)
{
	struct trace_cfg cfg = test_cfg();
	struct run r;

	user_lib = "libuserprof_plt.so";
	user_hold_ms = "1500";	/* past the window's 200 ms and the 600 ms period: several asks */
	user_finalize = "1";
	CHECK(run_window(&cfg, false, 2000, 0, 0, 0, &r));
	user_lib = NULL;
	return check_user_run(&r, "budget");
}

/* Continuous tracing; the client resolves CUPTI with dlsym and only unsubscribes at its end. */
static bool test_cupti_handover_continuous(void)
{
	struct trace_cfg cfg = test_cfg();
	struct run r;

	cfg.budget = 1;
	user_lib = "libuserprof_dlsym.so";
	user_hold_ms = "1500";
	user_finalize = "0";
	CHECK(run_window(&cfg, false, 2000, 0, 0, 0, &r));
	user_lib = NULL;
	/* our dlsym keeps the caller's lookups: its scope holds its dependency's symbol (read
	 * once the rescan reached the client's object: the run's own checks first, so that a
	 * client that never started says so) */
	if (!ASSERT_EQ(final_num(&r, "scope"), 7, "RTLD_DEFAULT and RTLD_NEXT lookups from the "
						   "client's object as without us")) {
		fprintf(stderr, "  workload: %s\n", r.final);
		batch_decode_free(r.m);
		return false;
	}
	return check_user_run(&r, "continuous");
}

/*
 * A slow CUPTI (enabling memcpy or memset activity takes 400 ms): the client comes while our
 * window is still opening (kernels on, memcpy under way), and its first call gives up waiting
 * after 250 ms. The client registers and enables kernels before it subscribes (Kineto's order),
 * so its kernel kind is on before our open stops: the open stops at its next step for the
 * client, leaves the client's kind on, and the client's subscribe, refused meanwhile, is
 * retried once the open has stopped. The client gets every kernel.
 */
static bool test_cupti_handover_slow_open(void)
{
	struct trace_cfg cfg = test_cfg();
	struct run r;
	bool ok;

	setenv("FAKE_CUPTI_ENABLE_DELAY_MS", "400", 1);
	setenv("USER_PROF_ACTIVITY_FIRST", "1", 1);
	user_lib = "libuserprof_plt.so";
	user_hold_ms = "1000";
	user_finalize = "1";
	ok = run_window(&cfg, false, 2000, 0, 0, 0, &r);
	user_lib = NULL;
	unsetenv("FAKE_CUPTI_ENABLE_DELAY_MS");
	unsetenv("USER_PROF_ACTIVITY_FIRST");
	CHECK(ok);
	fprintf(stderr, "  %llu yielded (%llu late), %llu refused for the client\n",
		(unsigned long long)r.st.win_yielded, (unsigned long long)r.st.win_yield_late,
		(unsigned long long)r.st.win_user);
	ok = ASSERT_EQ(final_num(&r, "phase"), 2, "the client ran and stopped") &&
	     ASSERT_EQ(final_num(&r, "start_rc"), 0, "its subscribe, register and enables worked") &&
	     ASSERT_EQ(final_num(&r, "stop_rc"), 0, "and its stop") &&
	     ASSERT_EQ(final_num(&r, "missing"), 0, "the client got every kernel") &&
	     ASSERT_TRUE(final_num(&r, "hi") > final_num(&r, "lo") + 100, "many") &&
	     ASSERT_EQ(final_num(&r, "subs_during"), 0, "no window while it held CUPTI") &&
	     ASSERT_EQ(final_num(&r, "kinds"), 0, "no activity kind left enabled");
	if (!ok)
		fprintf(stderr, "  workload: %s\n", r.final);
	batch_decode_free(r.m);
	return ok;
}

int main(int argc, char **argv)
{
	static const struct test_case tests[] = {
		T(test_cupti_handover_budget), T(test_cupti_handover_continuous),
		T(test_cupti_handover_slow_open),
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
