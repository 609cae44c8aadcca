/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixed CPU-bound work on every CPU: each thread runs the same number of hash rounds.
 * Prints wall seconds and CPU seconds (user + system, all threads): on a shared machine the CPU
 * time is the steadier measure of what a profiler adds (its interrupt and BPF time is charged to
 * the interrupted task).
 */
#include <pthread.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long rounds;

__attribute__((noinline)) static unsigned long mix(unsigned long x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdUL;
	x ^= x >> 33;
	return x;
}

static void *worker(void *arg)
{
	volatile unsigned long acc = (unsigned long)arg;

	for (long i = 0; i < rounds; i++)
		acc = mix(acc + i);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = sysconf(_SC_NPROCESSORS_ONLN);
	pthread_t t[256];
	struct timespec a, b;

	rounds = argc > 1 ? atol(argv[1]) : 200000000;
	if (n > 256)
		n = 256;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, (void *)(long)i);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	printf("%.6f %.6f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9,
	       ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	return 0;
}
