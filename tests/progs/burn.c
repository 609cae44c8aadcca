/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPU workload with known shares: each thread loops main/worker -> burn_loop -> phase_* ->
 * leaf, burning thread CPU time 50 % in leaf_alpha, 30 % in leaf_beta and 20 % in
 * burnlib_leaf (in libburnlib.so). Usage: burn SECONDS [THREADS]. Prints "ready" when started.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void burnlib_leaf(unsigned long long ns);

static double seconds = 5;

static unsigned long long now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

__attribute__((noinline)) void leaf_alpha(unsigned long long ns)
{
	volatile unsigned long x = 0;
	unsigned long long end = now_ns(CLOCK_THREAD_CPUTIME_ID) + ns;

	while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		for (int i = 0; i < 200000; i++)
			x += i;
}

__attribute__((noinline)) void leaf_beta(unsigned long long ns)
{
	volatile unsigned long x = 0;
	unsigned long long end = now_ns(CLOCK_THREAD_CPUTIME_ID) + ns;

	while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		for (int i = 0; i < 200000; i++)
			x ^= i;
}

__attribute__((noinline)) void phase_alpha(void) { leaf_alpha(5000000); }
__attribute__((noinline)) void phase_beta(void) { leaf_beta(3000000); }
__attribute__((noinline)) void phase_lib(void) { burnlib_leaf(2000000); }

__attribute__((noinline)) void burn_loop(void)
{
	unsigned long long end = now_ns(CLOCK_MONOTONIC) + (unsigned long long)(seconds * 1e9);

	while (now_ns(CLOCK_MONOTONIC) < end) {
		phase_alpha();
		phase_beta();
		phase_lib();
	}
}

__attribute__((noinline)) void *worker(void *arg)
{
	burn_loop();
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 2 ? atoi(argv[2]) : 1;
	pthread_t t[64];

	if (argc > 1)
		seconds = atof(argv[1]);
	if (threads < 1 || threads > 64)
		threads = 1;
	for (int i = 1; i < threads; i++) {
		char name[16];

		pthread_create(&t[i], NULL, worker, NULL);
		snprintf(name, sizeof(name), "burn-w%d", i);
		pthread_setname_np(t[i], name);
	}
	printf("ready\n");
	fflush(stdout);
	burn_loop();
	for (int i = 1; i < threads; i++)
		pthread_join(t[i], NULL);
	return 0;
}
