// SPDX-License-Identifier: Apache-2.0
/*
 * Processes switched out in the last part of their exit, for the thread-state tests: waits for
 * a byte on stdin, then forks N children one after another, all on one CPU, the parent at
 * SCHED_FIFO (the children at SCHED_OTHER). Each child burns 2 ms and exits holding the only
 * write end of a pipe the parent reads: do_exit closes it after the sched_process_exit
 * tracepoint, which wakes the real-time parent, which preempts the exiting child there; the
 * parent then waits for it. Writes one "pid reaped_ns" line per child (CLOCK_MONOTONIC, after
 * waitpid() returned) to PATH. With "leader-first", each child's main thread instead leaves with
 * pthread_exit() while a second thread sleeps 300 ms and ends the process: the leader's exit
 * comes first, and the agent stops tracking the process meanwhile.
 * Usage: exit_tail N PATH [leader-first]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void *last_thread(void *arg)
{
	struct timespec ts = { 0, 300000000 };

	nanosleep(&ts, NULL);
	_exit(0);	/* the process's last thread: not exit(), which would flush stdio copies */
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20;
	int leader_first = argc > 3 && !strcmp(argv[3], "leader-first");
	struct sched_param sp = { .sched_priority = 1 };
	cpu_set_t cpus;
	FILE *out;
	char c;

	if (argc < 3 || read(0, &c, 1) != 1)
		return 1;
	out = fopen(argv[2], "w");
	if (!out)
		return 1;
	CPU_ZERO(&cpus);
	CPU_SET(sched_getcpu(), &cpus);
	if (sched_setaffinity(0, sizeof(cpus), &cpus))
		perror("exit_tail: sched_setaffinity");
	/* without it the child is preempted in its exit only when something else wants the CPU */
	if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp))
		perror("exit_tail: SCHED_FIFO");
	for (int i = 0; i < n; i++) {
		int p[2], status;
		pid_t pid;

		if (pipe(p))
			return 1;
		pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			unsigned long long end = mono_ns() + 2000000;

			close(p[0]);
			while (mono_ns() < end)
				;
			if (leader_first) {
				pthread_t th;

				if (pthread_create(&th, NULL, last_thread, NULL))
					_exit(1);
				pthread_exit(NULL);
			}
			_exit(0);	/* p[1] is closed in do_exit, after sched_process_exit */
		}
		close(p[1]);
		while (read(p[0], &c, 1) > 0)
			;
		close(p[0]);
		if (waitpid(pid, &status, 0) != pid || status)
			return 1;
		fprintf(out, "%d %llu\n", pid, mono_ns());
	}
	return fclose(out) ? 1 : 0;
}
