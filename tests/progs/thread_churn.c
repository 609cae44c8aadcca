// SPDX-License-Identifier: Apache-2.0
/*
 * Threads that come and go by the thousand, for the thread-state tests: waits for a byte on
 * stdin, then starts N threads in batches of 50, each sleeping 1 ms and exiting.
 * Usage: thread_churn N
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *short_life(void *arg)
{
	struct timespec ts = { 0, 1000000 };

	nanosleep(&ts, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	pthread_t th[50];
	char c;

	if (read(0, &c, 1) != 1)
		return 1;
	for (int done = 0; done < n; done += 50) {
		for (int i = 0; i < 50; i++)
			if (pthread_create(&th[i], NULL, short_life, NULL))
				return 1;
		for (int i = 0; i < 50; i++)
			pthread_join(th[i], NULL);
	}
	return 0;
}
