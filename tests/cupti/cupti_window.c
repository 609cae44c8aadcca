// SPDX-License-Identifier: Apache-2.0
/*
 * A CUDA application stand-in for trace windows: loads the real libgpuscope_cupti.so (argv[1])
 * over the fake libcupti.so.13 it is linked with, calls InitializeInjection as the CUDA driver
 * does, and launches a kernel every 500 us on two streams until stdin closes; then prints what
 * the fake CUPTI saw ("final ..."). argv[2] "held": another client holds CUPTI's subscription;
 * "sync:LIBCUDA:SECONDS": after SECONDS, each step also queues 20 ms of work on the libcuda
 * stand-in and waits for it in cuCtxSynchronize (a process whose sync wait jumps); "user"
 * USERLIB HOLD_MS FINALIZE: loads a user's CUPTI client (tests/cupti/user_prof.c) after the
 * injection, waits until its calls are interposed, starts it as soon as a window of ours is
 * open, stops it HOLD_MS later (with cuptiFinalize if FINALIZE is 1) and reports whether it got
 * every kernel launched meanwhile (a "user ..." line after the final one; CLOCK_MONOTONIC ns).
 * Protocol on stdout: "ready" once injected.
 */
#include <dlfcn.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fake_cupti.h"

#define NOINLINE __attribute__((noinline))

static const char *const names[2] = { "_Z10gemm_tiledPfS_S_i", "_Z7softmaxPf" };

static uint32_t last_cid;

NOINLINE static void launch_gemm(void) { last_cid = fake_cupti_launch(names[0], 0, 7, 200000); }
NOINLINE static void launch_softmax(void) { last_cid = fake_cupti_launch(names[1], 0, 13, 50000); }
NOINLINE static void step(void) { launch_gemm(); launch_softmax(); }

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The user's CUPTI client and what it saw. */
static struct user {
	int (*start)(void);
	int (*stop)(int);
	void (*counts)(uint64_t *, uint64_t *);
	int (*has)(uint32_t);
	void *(*addr)(void);
	size_t (*pool)(void);
	int (*scope)(void);
	int scope_bits;			/* user_prof_scope() once interposed */
	int hold_ms, finalize, phase;	/* phase 0: waiting for a window, 1: running, 2: done */
	int start_rc, stop_rc, patched;
	double t0, t1;
	uint32_t lo, hi;		/* correlation ids launched while it ran */
	unsigned long long subs_at_start, subs_at_stop, missing;
	uint64_t records, cbs;
} u;

static int user_load(const char *path, const char *hold, const char *fin)
{
	void *h = dlopen(path, RTLD_NOW);

	if (!h) {
		fprintf(stderr, "cupti_window: %s\n", dlerror());
		return -1;
	}
	u.start = (__typeof__(u.start))dlsym(h, "user_prof_start");
	u.stop = (__typeof__(u.stop))dlsym(h, "user_prof_stop");
	u.counts = (__typeof__(u.counts))dlsym(h, "user_prof_counts");
	u.has = (__typeof__(u.has))dlsym(h, "user_prof_has");
	u.addr = (__typeof__(u.addr))dlsym(h, "user_prof_subscribe_addr");
	u.pool = (__typeof__(u.pool))dlsym(h, "user_prof_pool");
	u.scope = (__typeof__(u.scope))dlsym(h, "user_prof_scope");
	u.hold_ms = atoi(hold);
	u.finalize = atoi(fin);
	return u.start && u.stop && u.counts && u.has && u.addr && u.pool && u.scope ? 0 : -1;
}

/* Each step: start the client once our window is open, stop it hold_ms later. */
static void user_step(uint32_t last_cid)
{
	struct fake_cupti_stats s;

	if (u.phase == 0 && !u.patched && u.addr() != fake_cupti_real_subscribe()) {
		u.patched = 1;	/* the library's rescan reached the client's object */
		u.scope_bits = u.scope();
	}
	if (u.phase == 0 && u.patched) {
		fake_cupti_stats(&s);
		if (s.subscribed && s.kinds_enabled > 0) {	/* our window is open */
			u.t0 = mono_s();
			u.start_rc = u.start();
			u.lo = last_cid + 1;
			fake_cupti_stats(&s);
			u.subs_at_start = s.subscribes;
			u.phase = 1;
		}
	} else if (u.phase == 1 && mono_s() - u.t0 >= u.hold_ms / 1e3) {
		fake_cupti_stats(&s);
		u.subs_at_stop = s.subscribes;
		u.hi = last_cid;
		u.stop_rc = u.stop(u.finalize);
		u.t1 = mono_s();
		for (uint32_t c = u.lo; c <= u.hi; c++)
			u.missing += !u.has(c);
		u.counts(&u.records, &u.cbs);
		u.phase = 2;
	}
}

int main(int argc, char **argv)
{
	struct fake_cupti_stats s;
	struct pollfd pfd = { .fd = 0, .events = POLLIN };
	void *lib;
	int (*init)(void);
	int (*cu_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			 unsigned, void *, void **, void **) = NULL;
	int (*cu_sync)(void) = NULL;
	double sync_from = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return 2;
	if (argc > 2 && !strcmp(argv[2], "held"))
		fake_cupti_hold(1);
	if (argc > 2 && !strncmp(argv[2], "sync:", 5)) {
		char path[512], *colon;
		void *cuda;

		snprintf(path, sizeof(path), "%s", argv[2] + 5);
		colon = strrchr(path, ':');
		if (!colon)
			return 2;
		*colon = 0;
		sync_from = mono_s() + atof(colon + 1);
		cuda = dlopen(path, RTLD_NOW);
		if (!cuda) {
			fprintf(stderr, "cupti_window: %s\n", dlerror());
			return 3;
		}
		cu_launch = (__typeof__(cu_launch))dlsym(cuda, "cuLaunchKernel");
		cu_sync = (__typeof__(cu_sync))dlsym(cuda, "cuCtxSynchronize");
		if (!cu_launch || !cu_sync)
			return 3;
	}
	lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "cupti_window: %s\n", dlerror());
		return 3;
	}
	init = (int (*)(void))dlsym(lib, "InitializeInjection");
	if (!init || init() != 1)
		return 4;
	/* loaded after the injection: the library's rescan must find it */
	if (argc > 5 && !strcmp(argv[2], "user") && user_load(argv[3], argv[4], argv[5]))
		return 5;
	printf("ready\n");
	for (;;) {
		struct timespec t = { 0, 500000 };

		step();
		if (u.start)
			user_step(last_cid);
		nanosleep(&t, NULL);
		if (cu_sync && mono_s() >= sync_from) {	/* 20 ms of "GPU work", waited for */
			cu_launch(NULL, 20000, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
			cu_sync();
		}
		if (poll(&pfd, 1, 0) > 0) {
			char c;

			if (read(0, &c, 1) <= 0)
				break;
		}
	}
	fake_cupti_stats(&s);
	printf("final launches=%llu traced=%llu subscribes=%llu finalizes=%llu kinds=%d subscribed=%d "
	       "devbuf=%zu pool=%zu\n",
	       (unsigned long long)s.launches, (unsigned long long)s.traced,
	       (unsigned long long)s.subscribes, (unsigned long long)s.finalizes, s.kinds_enabled,
	       s.subscribed, s.device_buffer_bytes, s.device_buffer_pool);
	if (u.start)
		printf("user phase=%d patched=%d start_rc=%d stop_rc=%d t0=%.0f t1=%.0f lo=%u hi=%u "
		       "missing=%llu records=%llu cbs=%llu subs_during=%llu pool_at_start=%zu scope=%d\n",
		       u.phase, u.patched, u.start_rc, u.stop_rc, u.t0 * 1e9, u.t1 * 1e9, u.lo, u.hi,
		       u.missing, (unsigned long long)u.records, (unsigned long long)u.cbs,
		       u.subs_at_stop - u.subs_at_start, u.pool(), u.scope_bits);
	return 0;
}
