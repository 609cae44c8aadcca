// SPDX-License-Identifier: Apache-2.0
/*
 * A CUDA application stand-in for trace windows: loads the real libgpuscope_cupti.so (argv[1])
 * over the fake libcupti.so.13 it is linked with, calls InitializeInjection as the CUDA driver
 * does, and launches a kernel every 500 us on two streams until stdin closes; then prints what
 * the fake CUPTI saw ("final ..."). argv[2] "held": another client holds CUPTI's subscription;
 * "sync:LIBCUDA:SECONDS": after SECONDS, each step also queues 20 ms of work on the libcuda
 * stand-in and waits for it in cuCtxSynchronize (a process whose sync wait jumps).
 * Protocol on stdout: "ready" once injected.
 */
#include <dlfcn.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fake_cupti.h"

#define NOINLINE __attribute__((noinline))

static const char *const names[2] = { "_Z10gemm_tiledPfS_S_i", "_Z7softmaxPf" };

NOINLINE static void launch_gemm(void) { fake_cupti_launch(names[0], 0, 7, 200000); }
NOINLINE static void launch_softmax(void) { fake_cupti_launch(names[1], 0, 13, 50000); }
NOINLINE static void step(void) { launch_gemm(); launch_softmax(); }

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
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
	printf("ready\n");
	for (;;) {
		struct timespec t = { 0, 500000 };

		step();
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
	return 0;
}
