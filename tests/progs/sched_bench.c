// SPDX-License-Identifier: Apache-2.0
/*
 * Context-switch-heavy workloads for bench/sched-overhead. Waits for a byte on stdin, runs, and
 * prints one JSON line: elapsed seconds and the context switches of its threads.
 *   sched_bench pingpong ROUNDS        two threads bounce a byte through two pipes
 *   sched_bench loader THREADS ITEMS   THREADS producers (20 us of work per item) feed one
 *                                      consumer (5 us per item) through a bounded queue
 */
#define _GNU_SOURCE
#include <sys/resource.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int p1[2], p2[2];
static long rounds;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void work_us(int us)
{
	double end = now_s() + us / 1e6;

	while (now_s() < end)
		;
}

static void *pong(void *arg)
{
	char c;

	for (long i = 0; i < rounds; i++)
		if (read(p1[0], &c, 1) != 1 || write(p2[1], &c, 1) != 1)
			break;
	return NULL;
}

#define QCAP 64
static struct {
	pthread_mutex_t mu;
	pthread_cond_t not_empty, not_full;
	int n;
	long produced, consumed, total;
} q = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER };

static void *producer(void *arg)
{
	for (;;) {
		work_us(20);
		pthread_mutex_lock(&q.mu);
		while (q.n == QCAP && q.produced < q.total)
			pthread_cond_wait(&q.not_full, &q.mu);
		if (q.produced >= q.total) {
			pthread_mutex_unlock(&q.mu);
			return NULL;
		}
		q.n++;
		q.produced++;
		pthread_cond_signal(&q.not_empty);
		pthread_mutex_unlock(&q.mu);
	}
}

static void *consumer(void *arg)
{
	while (q.consumed < q.total) {
		pthread_mutex_lock(&q.mu);
		while (!q.n)
			pthread_cond_wait(&q.not_empty, &q.mu);
		q.n--;
		q.consumed++;
		pthread_cond_signal(&q.not_full);
		pthread_mutex_unlock(&q.mu);
		work_us(5);
	}
	pthread_mutex_lock(&q.mu);
	pthread_cond_broadcast(&q.not_full);
	pthread_mutex_unlock(&q.mu);
	return NULL;
}

/* Voluntary + involuntary switches of every thread of this process so far, ended ones too. */
static long ctx_switches(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return -1;
	return ru.ru_nvcsw + ru.ru_nivcsw;
}

int main(int argc, char **argv)
{
	pthread_t th[65];
	int nth = 0;
	double t0, t1;
	long cs0, cs1;
	char c = 'x';

	if (argc < 3) {
		fprintf(stderr, "usage: %s pingpong ROUNDS | loader THREADS ITEMS\n", argv[0]);
		return 2;
	}
	if (read(0, &c, 1) != 1)
		return 1;
	cs0 = ctx_switches();
	t0 = now_s();
	if (!strcmp(argv[1], "pingpong")) {
		rounds = atol(argv[2]);
		if (pipe(p1) || pipe(p2))
			return 1;
		pthread_create(&th[nth++], NULL, pong, NULL);
		for (long i = 0; i < rounds; i++)
			if (write(p1[1], &c, 1) != 1 || read(p2[0], &c, 1) != 1)
				return 1;
	} else {
		int threads = atoi(argv[2]);

		q.total = atol(argv[3]);
		if (threads < 1 || threads > 64)
			return 2;
		for (int i = 0; i < threads; i++)
			pthread_create(&th[nth++], NULL, producer, NULL);
		pthread_create(&th[nth++], NULL, consumer, NULL);
	}
	for (int i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	t1 = now_s();
	cs1 = ctx_switches();
	printf("{\"mode\":\"%s\",\"elapsed_s\":%.6f,\"ctx_switches\":%ld}\n", argv[1], t1 - t0,
	       cs1 - cs0);
	return 0;
}
