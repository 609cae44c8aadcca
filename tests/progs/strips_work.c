// SPDX-License-Identifier: Apache-2.0
/*
 * Workload with known thread behaviour for the thread-state tests. Thread "phaser" loops: spin
 * 100 ms, sleep 50 ms, wait on a futex 30 ms (in wait_on_futex()). Threads "pinA"/"pinB" both
 * spin pinned to one CPU, so each is runnable while the other runs. Writes the phase times
 * (CLOCK_MONOTONIC ns) to the file given as argv[1]: "<phase> <tid> <start_ns> <end_ns>".
 * Usage: strips_work OUT_FILE SECONDS [START_DELAY_MS | -]   ("-": start once a byte is on stdin)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static FILE *out;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int stop;
static uint32_t futex_word;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void record(const char *phase, uint64_t t0, uint64_t t1)
{
	pthread_mutex_lock(&out_lock);
	fprintf(out, "%s %ld %llu %llu\n", phase, (long)syscall(SYS_gettid),
		(unsigned long long)t0, (unsigned long long)t1);
	fflush(out);
	pthread_mutex_unlock(&out_lock);
}

__attribute__((noinline)) void spin_for(uint64_t ns)
{
	uint64_t end = now_ns() + ns;

	while (now_ns() < end)
		;
}

__attribute__((noinline)) void sleep_for(uint64_t ns)
{
	struct timespec ts = { ns / 1000000000ULL, ns % 1000000000ULL };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/*
 * Nobody wakes the futex: the wait ends by its timeout. The syscall instruction is issued here,
 * not in glibc's frameless syscall() wrapper, so that frame-pointer unwinding from the blocked
 * user context sees this function (a frameless leaf hides its caller's return address).
 */
__attribute__((noinline)) void wait_on_futex(uint64_t ns)
{
	struct timespec ts = { ns / 1000000000ULL, ns % 1000000000ULL };
#if defined(__x86_64__)
	long ret;
	register long r10 __asm__("r10") = (long)&ts;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"((long)SYS_futex), "D"(&futex_word), "S"((long)FUTEX_WAIT_PRIVATE),
			   "d"(0L), "r"(r10)
			 : "rcx", "r11", "memory");
	(void)ret;
#else
	syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
#endif
}

static void *phaser(void *arg)
{
	prctl(PR_SET_NAME, "phaser");
	while (!stop) {
		uint64_t t0 = now_ns(), t1, t2, t3;

		spin_for(100000000ULL);
		t1 = now_ns();
		sleep_for(50000000ULL);
		t2 = now_ns();
		wait_on_futex(30000000ULL);
		t3 = now_ns();
		record("spin", t0, t1);
		record("sleep", t1, t2);
		record("futex", t2, t3);
	}
	return NULL;
}

static void *pinned(void *arg)
{
	cpu_set_t set;

	prctl(PR_SET_NAME, (const char *)arg);
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	sched_setaffinity(0, sizeof(set), &set);
	while (!stop)
		spin_for(1000000ULL);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[3];
	double secs;

	if (argc < 3) {
		fprintf(stderr, "usage: %s OUT_FILE SECONDS [START_DELAY_MS]\n", argv[0]);
		return 2;
	}
	out = fopen(argv[1], "w");
	if (!out) {
		perror(argv[1]);
		return 1;
	}
	secs = atof(argv[2]);
	if (argc > 3 && !strcmp(argv[3], "-")) {
		char c;

		if (read(0, &c, 1) != 1)
			return 1;
	} else if (argc > 3) {
		usleep(atoi(argv[3]) * 1000);
	}
	fprintf(out, "start %ld %llu 0\n", (long)getpid(), (unsigned long long)now_ns());
	fflush(out);
	pthread_create(&th[0], NULL, phaser, NULL);
	pthread_create(&th[1], NULL, pinned, "pinA");
	pthread_create(&th[2], NULL, pinned, "pinB");
	usleep((useconds_t)(secs * 1e6));
	stop = 1;
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	fclose(out);
	return 0;
}
