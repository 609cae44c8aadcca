// SPDX-License-Identifier: Apache-2.0
/*
 * Per-launch cost of the launch probe: calls fake_launch() (the same probe as the injection
 * library's launch callback) N times from a call chain of DEPTH frames and prints ns per call.
 * Usage: cupti_launch_bench N [wait [BURST PAUSE_MS]]   (wait: first wait up to 10 s for a
 * tracer to attach; BURST: launches at full speed, then PAUSE_MS of sleep, until N; the wall
 * time printed is then of the launches alone). CUPTI_BENCH_DELAY_MS: sleep that long after the
 * tracer attached, before the first launch)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fake_lib.h"

#define DEPTH 24

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

__attribute__((noinline)) static void chain(int depth, unsigned n, unsigned *cid)
{
	if (depth > 0) {
		chain(depth - 1, n, cid);
		__asm__ volatile("" ::: "memory");	/* no tail call: keep the frames */
		return;
	}
	for (unsigned i = 0; i < n; i++)
		fake_launch((*cid)++, 0);
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000, cid = 1;
	unsigned burst = argc > 3 ? strtoul(argv[3], NULL, 10) : 0;
	unsigned pause_ms = argc > 4 ? strtoul(argv[4], NULL, 10) : 0;
	uint64_t t0, c0, slept = 0;

	if (argc > 2 && !strcmp(argv[2], "wait")) {
		for (int i = 0; i < 2000 && !fake_attached(); i++)
			usleep(5000);
		if (!fake_attached()) {
			fprintf(stderr, "no tracer attached\n");
			return 3;
		}
	}
	if (getenv("CUPTI_BENCH_DELAY_MS"))
		usleep(strtoul(getenv("CUPTI_BENCH_DELAY_MS"), NULL, 10) * 1000);
	chain(DEPTH, 1000, &cid);	/* warm */
	t0 = now_ns(CLOCK_MONOTONIC);
	c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	if (!burst) {
		chain(DEPTH, n, &cid);
	} else {
		for (unsigned done = 0; done < n; done += burst) {
			uint64_t s0;

			chain(DEPTH, n - done < burst ? n - done : burst, &cid);
			s0 = now_ns(CLOCK_MONOTONIC);
			usleep(pause_ms * 1000);
			slept += now_ns(CLOCK_MONOTONIC) - s0;
		}
	}
	t0 += slept;
	/* wall ns per launch, then CPU ns per launch (user + kernel, uprobe handling included) */
	printf("%.1f %.1f\n", (double)(now_ns(CLOCK_MONOTONIC) - t0) / n,
	       (double)(now_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / n);
	return 0;
}
