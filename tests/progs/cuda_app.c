// SPDX-License-Identifier: Apache-2.0
/*
 * A pretend CUDA training loop for the CUDA probe tests: waits for a byte on stdin, then
 * dlopen()s the given libcuda.so.1 (so the library arrives after the agent started), optionally
 * deletes the file (a library mapped from a path that no longer exists), and loops:
 * train_step() -> launch_work() launches 20 ms of GPU work, wait_gpu() -> cuStreamSynchronize,
 * a 1 MB cuMemcpyHtoD_v2, and a few cheap cuMemsetD32Async calls.
 * Each cuStreamSynchronize call's own start and end (CLOCK_MONOTONIC ns) go to OUT_FILE.
 * Runs SECONDS or until SIGUSR1.
 * Usage: cuda_app LIBCUDA SECONDS OUT_FILE [--delete]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			 unsigned, void *, void **, void **);
typedef int (*sync_fn)(void *);
typedef int (*copy_fn)(uintptr_t, const void *, size_t);
typedef int (*memset_fn)(void *, void *, uintptr_t, void *);

static launch_fn launch;
static sync_fn stream_sync;
static copy_fn htod;
static memset_fn memset_async;
static char host_buf[1 << 20];
static FILE *out;
static volatile sig_atomic_t stop;

static void on_usr1(int sig)
{
	stop = 1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

__attribute__((noinline)) void launch_work(void)
{
	launch(NULL, 20000, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);	/* 20 ms of GPU work */
	for (int i = 0; i < 5; i++)
		memset_async(NULL, NULL, 0, NULL);
}

static uint64_t now_ns(void);

__attribute__((noinline)) void wait_gpu(void)
{
	uint64_t t0 = now_ns(), t1;

	stream_sync(NULL);
	t1 = now_ns();
	fprintf(out, "sync %llu %llu\n", (unsigned long long)t0, (unsigned long long)t1);
}

__attribute__((noinline)) void copy_batch(void)
{
	htod(0, host_buf, sizeof(host_buf));	/* ~1 ms */
}

__attribute__((noinline)) void train_step(void)
{
	copy_batch();
	launch_work();
	wait_gpu();
}

int main(int argc, char **argv)
{
	void *h;
	uint64_t end;
	char c;

	if (argc < 4) {
		fprintf(stderr, "usage: %s LIBCUDA SECONDS OUT_FILE [--delete]\n", argv[0]);
		return 2;
	}
	out = fopen(argv[3], "w");
	if (!out) {
		perror(argv[3]);
		return 1;
	}
	prctl(PR_SET_NAME, "cuda_app");
	signal(SIGUSR1, on_usr1);
	if (read(0, &c, 1) != 1)
		return 1;
	h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	if (argc > 4 && !strcmp(argv[4], "--delete") && unlink(argv[1])) {
		perror("unlink");
		return 1;
	}
	launch = (launch_fn)dlsym(h, "cuLaunchKernel");
	stream_sync = (sync_fn)dlsym(h, "cuStreamSynchronize");
	htod = (copy_fn)dlsym(h, "cuMemcpyHtoD_v2");
	memset_async = (memset_fn)dlsym(h, "cuMemsetD32Async");
	if (!launch || !stream_sync || !htod || !memset_async) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	end = now_ns() + (uint64_t)(atof(argv[2]) * 1e9);
	while (now_ns() < end && !stop)
		train_step();
	fclose(out);
	return 0;
}
