/* SPDX-License-Identifier: Apache-2.0 */
/* Shared library for the burn workload: a leaf function that lives in a .so. */
#include <time.h>

static unsigned long long thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

__attribute__((noinline)) void burnlib_leaf(unsigned long long ns)
{
	volatile unsigned long x = 0;
	unsigned long long end = thread_cpu_ns() + ns;

	while (thread_cpu_ns() < end)
		for (int i = 0; i < 200000; i++)
			x += i;
}
