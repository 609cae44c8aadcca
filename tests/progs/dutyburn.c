/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A light CPU workload for the push tests: spins in duty_spin() for DUTY % of every period and
 * sleeps the rest, so a long test produces a steady trickle of samples without hogging a CPU.
 * Each period is drawn at random from 3..17 ms: a fixed 10 ms period plus nanosleep's overshoot
 * is within a few µs of the sampler's 99 Hz, and the two phase-lock, so that every sample lands
 * in the spin for seconds and then none does (a test saw no sample for 15 s).
 * Usage: dutyburn SECONDS [DUTY_PERCENT=20]. Prints "ready" when started.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

__attribute__((noinline)) void duty_spin(unsigned long long ns)
{
	volatile unsigned long x = 0;
	unsigned long long end = now_ns() + ns;

	while (now_ns() < end)
		for (int i = 0; i < 10000; i++)
			x += i;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	int duty = argc > 2 ? atoi(argv[2]) : 20;
	unsigned long long end, rnd = (unsigned long long)getpid() * 0x9e3779b97f4a7c15ULL | 1;

	if (duty < 1 || duty > 100)
		duty = 20;
	printf("ready\n");
	fflush(stdout);
	end = now_ns() + (unsigned long long)(seconds * 1e9);
	while (now_ns() < end) {
		unsigned long long t0 = now_ns(), period;
		struct timespec ts;

		rnd ^= rnd << 13;	/* xorshift64: a period of 3..17 ms */
		rnd ^= rnd >> 7;
		rnd ^= rnd << 17;
		period = 3000000ULL + rnd % 14000000ULL;

		duty_spin(period * duty / 100);
		ts.tv_sec = 0;
		ts.tv_nsec = (long)(period - (now_ns() - t0) > period ? 0 : period - (now_ns() - t0));
		nanosleep(&ts, NULL);
	}
	return 0;
}
