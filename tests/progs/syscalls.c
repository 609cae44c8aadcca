/* SPDX-License-Identifier: Apache-2.0 */
/* Syscall-heavy workload: reads /dev/zero in a loop so samples land in the kernel. Usage: syscalls SECONDS */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 16];

__attribute__((noinline)) void read_zero_loop(int fd, double seconds)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		for (int i = 0; i < 64; i++)
			if (read(fd, buf, sizeof(buf)) < 0)
				exit(1);
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9 < seconds);
}

int main(int argc, char **argv)
{
	int fd = open("/dev/zero", O_RDONLY);

	if (fd < 0)
		return 1;
	printf("ready\n");
	fflush(stdout);
	read_zero_loop(fd, argc > 1 ? atof(argv[1]) : 5);
	return 0;
}
