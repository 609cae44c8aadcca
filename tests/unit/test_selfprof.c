// SPDX-License-Identifier: Apache-2.0
/*
 * The agent's CPU by activity (src/agent/selfprof.c): nested activities charged exclusively,
 * threads apart, the exposition's `other` the rest of the process. CPU is burned by the thread's
 * own CPU clock, so the figures do not depend on the machine's load.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include "agent/selfprof.h"
#include "common/util.h"
#include "test.h"

static uint64_t thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static void burn_ms(unsigned ms)
{
	uint64_t end = thread_ns() + ms * NSEC_PER_MSEC;
	volatile unsigned x = 0;

	while (thread_ns() < end)
		for (int i = 0; i < 1000; i++)
			x += i;
}

/* between want and want + 5 ms (the clock reads and the loop's last turn) */
static bool about(double got_s, unsigned want_ms)
{
	return got_s >= want_ms / 1e3 && got_s < (want_ms + 5) / 1e3;
}

static bool test_selfprof_nested(void)
{
	unsigned a = selfprof_activity("test_outer"), b = selfprof_activity("test_inner"), pa, pb;

	CHECK(ASSERT_EQ(selfprof_activity("test_outer"), a, "one id per name"));
	CHECK(ASSERT_TRUE(a >= SELF_FIXED_MAX && b != a, "registered after the fixed ones"));
	pa = selfprof_enter(a);
	burn_ms(20);
	pb = selfprof_enter(b);
	burn_ms(30);
	selfprof_leave(pb);
	burn_ms(10);
	selfprof_leave(pa);
	burn_ms(10);	/* outside every activity: `other` */
	if (!ASSERT_TRUE(about(selfprof_seconds(a), 30), "outer: its own 30 ms, not the inner's") ||
	    !ASSERT_TRUE(about(selfprof_seconds(b), 30), "inner: 30 ms")) {
		fprintf(stderr, "  outer %.4f s, inner %.4f s\n", selfprof_seconds(a),
			selfprof_seconds(b));
		return false;
	}
	return true;
}

static void *thread_main(void *arg)
{
	selfprof_thread(*(unsigned *)arg);
	burn_ms(25);
	selfprof_flush();
	burn_ms(25);	/* not flushed: charged at the thread's next switch, never here */
	return NULL;
}

static bool test_selfprof_threads(void)
{
	unsigned acts[2] = { selfprof_activity("test_t0"), selfprof_activity("test_t1") };
	pthread_t th[2];

	for (int i = 0; i < 2; i++)
		CHECK(ASSERT_EQ(pthread_create(&th[i], NULL, thread_main, &acts[i]), 0, "thread"));
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 2; i++)
		if (!ASSERT_TRUE(about(selfprof_seconds(acts[i]), 25), "each thread's own activity")) {
			fprintf(stderr, "  thread %d: %.4f s\n", i, selfprof_seconds(acts[i]));
			return false;
		}
	return true;
}

/* The exposition: every activity once, `other` the process's rest, the sum its whole CPU. */
static bool test_selfprof_metrics(void)
{
	char *buf = NULL, line[256];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	double sum = 0, other = -1, v, total;
	struct rusage ru;
	int outer = 0;

	CHECK(f);
	selfprof__metrics(f);
	fclose(f);
	getrusage(RUSAGE_SELF, &ru);
	total = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
		(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	f = fmemopen(buf, len, "r");
	CHECK(f);
	while (fgets(line, sizeof(line), f)) {
		char act[64];

		if (sscanf(line, "gpuscope_agent_cpu_seconds_total{activity=\"%63[^\"]\"} %lf", act,
			   &v) != 2)
			continue;
		sum += v;
		outer += !strcmp(act, "test_outer");
		if (!strcmp(act, "other"))
			other = v;
	}
	fclose(f);
	CHECK(ASSERT_EQ(outer, 1, "a registered activity, once"));
	CHECK(ASSERT_TRUE(other >= 0.010, "other: the 10 ms outside every activity, and more"));
	if (!ASSERT_TRUE(sum <= total + 0.001 && sum >= total - 0.02, "activities add up")) {
		fprintf(stderr, "  sum %.4f, process %.4f\n", sum, total);
		return false;
	}
	CHECK(ASSERT_TRUE(strstr(buf, "gpuscope_agent_selfprof_clock_reads_total ") != NULL,
			  "the accounting's own cost"));
	free(buf);
	return true;
}

static bool test_selfprof_full(void)
{
	char name[32];
	unsigned id = 0;

	for (int i = 0; i < SELF_ACT_MAX + 4; i++) {
		snprintf(name, sizeof(name), "test_fill_%d", i);
		id = selfprof_activity(name);
	}
	CHECK(ASSERT_EQ(id, SELF_MAIN_LOOP, "past the bound: charged to the main loop"));
	return true;
}

TEST_MAIN(T(test_selfprof_nested), T(test_selfprof_threads), T(test_selfprof_metrics),
	  T(test_selfprof_full))
