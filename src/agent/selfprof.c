/* SPDX-License-Identifier: Apache-2.0 */
/* The agent's own CPU by activity (selfprof.h): per-thread clocks charged to global counters. */
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include "agent/selfprof.h"
#include "common/prom.h"
#include "common/util.h"

#define NONE UINT_MAX	/* a thread not in any activity: its CPU is `other` */

static const char *const fixed_names[SELF_FIXED_MAX] = {
	[SELF_MAIN_LOOP] = "main_loop",
	[SELF_MMAP_RECORDS] = "mmap_records",
	[SELF_SYMBOLIZE] = "symbolize",
	[SELF_PYTHON] = "python",
	[SELF_UNWIND_TABLES] = "unwind_tables",
	[SELF_UNWIND_MAPS] = "unwind_maps",
	[SELF_ENCODE] = "encode",
	[SELF_COMPRESS] = "compress",
	[SELF_PUSH] = "push",
	[SELF_METRICS] = "metrics",
	[SELF_NVML_POLLER] = "nvml_poller",
	[SELF_NVML_SAMPLES] = "nvml_samples",
	[SELF_NVML_MEMORY] = "nvml_memory",
	[SELF_NVML_GPM] = "nvml_gpm",
	[SELF_NVML_SLOW] = "nvml_slow",
	[SELF_NVML_PROCESS] = "nvml_process",
	[SELF_NVML_FIELDS] = "nvml_fields",
};

static struct {
	pthread_mutex_t mu;		/* registration only */
	char names[SELF_ACT_MAX][40];	/* registered ones; fixed ones in fixed_names */
	unsigned n;			/* activities in use, fixed included */
	uint64_t ns[SELF_ACT_MAX];	/* charged CPU; atomics */
	uint64_t reads;			/* thread-clock reads; atomic */
} S = { .mu = PTHREAD_MUTEX_INITIALIZER, .n = SELF_FIXED_MAX };

static __thread unsigned cur = NONE;
static __thread uint64_t last_ns;

static uint64_t thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	__atomic_add_fetch(&S.reads, 1, __ATOMIC_RELAXED);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* Charges the thread's CPU since its last switch to its current activity; returns now. */
static uint64_t charge(void)
{
	uint64_t now = thread_ns();

	if (cur != NONE && now > last_ns)
		__atomic_add_fetch(&S.ns[cur], now - last_ns, __ATOMIC_RELAXED);
	last_ns = now;
	return now;
}

static const char *act_name(unsigned i)
{
	return i < SELF_FIXED_MAX ? fixed_names[i] : S.names[i];
}

unsigned selfprof_activity(const char *name)
{
	unsigned i;

	pthread_mutex_lock(&S.mu);
	for (i = 0; i < S.n && strcmp(act_name(i), name); i++)
		;
	if (i == S.n) {
		if (S.n == SELF_ACT_MAX) {
			i = SELF_MAIN_LOOP;
		} else {
			snprintf(S.names[i], sizeof(S.names[i]), "%s", name);
			__atomic_store_n(&S.n, S.n + 1, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&S.mu);
	return i;
}

unsigned selfprof_enter(unsigned act)
{
	unsigned prev = cur;

	charge();
	cur = act < SELF_ACT_MAX ? act : SELF_MAIN_LOOP;
	return prev;
}

void selfprof_leave(unsigned prev)
{
	charge();
	cur = prev;
}

void selfprof_thread(unsigned act)
{
	charge();
	cur = act < SELF_ACT_MAX ? act : SELF_MAIN_LOOP;
}

void selfprof_flush(void)
{
	if (cur != NONE)
		charge();
}

double selfprof_seconds(unsigned act)
{
	return act < SELF_ACT_MAX ? __atomic_load_n(&S.ns[act], __ATOMIC_RELAXED) / 1e9 : 0;
}

void selfprof__metrics(FILE *out)
{
	unsigned act = selfprof_enter(SELF_METRICS), n = __atomic_load_n(&S.n, __ATOMIC_ACQUIRE);
	struct rusage ru;
	uint64_t sum = 0, total = 0;

	if (!getrusage(RUSAGE_SELF, &ru))
		total = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * NSEC_PER_SEC +
			(uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
	prom_family(out, "gpuscope_agent_cpu_seconds_total", "counter",
		    "The agent's CPU by activity (thread CPU clocks; nested activities not counted "
		    "twice); other: the rest of the process's CPU (threads of libraries, the "
		    "accounting's lag of one loop turn).");
	for (unsigned i = 0; i < n; i++) {
		uint64_t ns = __atomic_load_n(&S.ns[i], __ATOMIC_RELAXED);

		sum += ns;
		prom_sample1(out, "gpuscope_agent_cpu_seconds_total", "activity", act_name(i),
			     ns / 1e9);
	}
	prom_sample1(out, "gpuscope_agent_cpu_seconds_total", "activity", "other",
		     total > sum ? (total - sum) / 1e9 : 0);
	prom_counter(out, "gpuscope_agent_selfprof_clock_reads_total",
		     "Thread CPU clock reads made by this accounting (its own cost).",
		     __atomic_load_n(&S.reads, __ATOMIC_RELAXED));
	selfprof_leave(act);
}
