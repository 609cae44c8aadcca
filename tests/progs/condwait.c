/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Off-CPU workload built with frame pointers (glibc has none): thread "waiter" blocks in
 * pthread_cond_wait() through main -> run_waiter -> wait_for_work; thread "signaler" wakes it
 * every 30 ms. With "busy", thread "busy" also sleeps 100 us at a time (thousands of blocks a
 * second); "busy N": N such threads. Usage: condwait SECONDS [- [busy [N]]] ("-": reads one
 * byte on stdin first).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static volatile int stop, work;

__attribute__((noinline)) void wait_for_work(void)
{
	pthread_mutex_lock(&mu);
	while (!work && !stop)
		pthread_cond_wait(&cv, &mu);
	work = 0;
	pthread_mutex_unlock(&mu);
}

__attribute__((noinline)) void *run_waiter(void *arg)
{
	pthread_setname_np(pthread_self(), "waiter");
	while (!stop)
		wait_for_work();
	return NULL;
}

static void *signaler(void *arg)
{
	while (!stop) {
		usleep(30000);
		pthread_mutex_lock(&mu);
		work = 1;
		pthread_cond_signal(&cv);
		pthread_mutex_unlock(&mu);
	}
	pthread_mutex_lock(&mu);
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return NULL;
}

/*
 * The busy thread sleeps 90 frames down, so that each of its switch-out walks costs what a deep
 * (Python-like) stack costs: a shallow one walks in about a microsecond on an idle machine, and
 * then its 0.1 % budget (and 5-ms burst) covered every one of its few thousand blocks.
 */
__attribute__((noinline)) static void busy_loop(int depth)
{
	struct timespec ts = { 0, 100000 };

	if (depth > 0) {
		busy_loop(depth - 1);
		__asm__ volatile("" ::: "memory");	/* a frame each: no tail call */
		return;
	}
	while (!stop)
		nanosleep(&ts, NULL);
}

__attribute__((noinline)) void *run_busy(void *arg)
{
	pthread_setname_np(pthread_self(), "busy");
	busy_loop(90);
	return NULL;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2;
	int busy = argc > 3 && !strcmp(argv[3], "busy") ? (argc > 4 ? atoi(argv[4]) : 1) : 0;
	pthread_t w, s, b[16];
	char c;

	if (busy > 16)
		busy = 16;
	if (argc > 2 && !strcmp(argv[2], "-") && read(0, &c, 1) != 1)
		return 1;
	pthread_create(&w, NULL, run_waiter, NULL);
	pthread_create(&s, NULL, signaler, NULL);
	for (int i = 0; i < busy; i++)
		pthread_create(&b[i], NULL, run_busy, NULL);
	usleep((useconds_t)(secs * 1e6));
	stop = 1;
	pthread_join(s, NULL);
	pthread_join(w, NULL);
	for (int i = 0; i < busy; i++)
		pthread_join(b[i], NULL);
	return 0;
}
