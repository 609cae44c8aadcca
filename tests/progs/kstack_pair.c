// SPDX-License-Identifier: Apache-2.0
/*
 * Workload for the kernel-stack re-use of the thread-state programs (docs/strips.md): thread
 * "reader" blocks again and again in read(2) from one call site (read_one()), on a pipe twice,
 * then on an eventfd twice, and so on: the same syscall from the same user instruction, whose
 * kernel stacks differ only by the file (pipe_read against eventfd_read). Thread "writer" wakes
 * each read 3 ms after it started. Each read is a phase written to argv[1]:
 * "<pipe|eventfd> <tid> <start_ns> <end_ns>" (CLOCK_MONOTONIC).
 * Usage: kstack_pair OUT_FILE SECONDS [-]   ("-": start once a byte is on stdin)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int pipefd[2], efd;
static volatile int turn = -1, stop;	/* the fd the reader blocks on now */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* The one call site of every blocking read. */
__attribute__((noinline)) static void read_one(int fd)
{
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0)
		perror("read");
	__asm__ volatile("" ::: "memory");
}

static void *writer(void *arg)
{
	uint64_t one = 1;

	(void)arg;
	prctl(PR_SET_NAME, "writer");
	while (!stop) {
		int fd = turn;

		if (fd < 0) {
			usleep(200);
			continue;
		}
		usleep(3000);
		turn = -1;
		if (write(fd == efd ? efd : pipefd[1], &one, sizeof(one)) != sizeof(one))
			perror("write");
	}
	return NULL;
}

int main(int argc, char **argv)
{
	FILE *out;
	pthread_t w;
	uint64_t end;
	char c;

	if (argc < 3)
		return 2;
	out = fopen(argv[1], "w");
	if (!out || pipe(pipefd) || (efd = eventfd(0, 0)) < 0)
		return 1;
	if (argc > 3 && !strcmp(argv[3], "-") && read(0, &c, 1) != 1)
		return 1;
	prctl(PR_SET_NAME, "reader");
	pthread_create(&w, NULL, writer, NULL);
	end = now_ns() + (uint64_t)(atof(argv[2]) * 1e9);
	for (unsigned i = 0; now_ns() < end; i++) {
		int ev = (i / 2) % 2;
		uint64_t t0 = now_ns(), t1;

		turn = ev ? efd : pipefd[0];
		read_one(ev ? efd : pipefd[0]);
		t1 = now_ns();
		fprintf(out, "%s %ld %llu %llu\n", ev ? "eventfd" : "pipe", (long)syscall(SYS_gettid),
			(unsigned long long)t0, (unsigned long long)t1);
	}
	stop = 1;
	pthread_join(w, NULL);
	fclose(out);
	return 0;
}
