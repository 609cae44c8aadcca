/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cost of meta__pid_labels(): cached (same pid again within 10 s), rebuild after a pod-cache
 * change (the watch bumped the generation), and cold (read /proc/PID/cgroup + parse + build)
 * over every process of this machine. Run by bench/meta/run.sh.
 */
#include <dirent.h>
#include <stdlib.h>
#include "../../src/agent/meta/cgroup.c"
#include "../../src/agent/meta/kube.c"
#include "../../src/agent/meta/meta.c"

static pid_t pids[8192];

/* Labels of pid (meta's only): how many. */
static size_t labels_of(pid_t pid, struct label *l)
{
	size_t n = 0;

	meta__pid_labels(pid, NULL, l, 64, &n);
	return n;
}

int main(int argc, char **argv)
{
	struct label l[64];
	DIR *d = opendir("/proc");
	struct dirent *e;
	size_t n = 0, rounds = 2000000, total = 0;
	uint64_t t0, t1;

	while (d && (e = readdir(d)) && n < 8192)
		if (atoi(e->d_name) > 0)
			pids[n++] = atoi(e->d_name);
	closedir(d);
	meta__start(NULL);
	labels_of(getpid(), l);	/* allocates the pid cache */
	if (argc > 1) {
		/* "cached N": only N cached calls, for instruction counts under callgrind */
		for (long i = atol(argv[1]); i > 0; i--)
			total += labels_of(getpid(), l);
		meta__stop();
		return total == 0;
	}

	t0 = mono_ns();
	for (size_t i = 0; i < n; i++)
		total += labels_of(pids[i], l);
	t1 = mono_ns();
	printf("cold:    %zu processes, %.0f ns/call (read /proc/PID/cgroup, parse, build)\n", n,
	       (double)(t1 - t0) / (double)n);

	t0 = mono_ns();
	for (size_t i = 0; i < n; i++) {
		struct meta_cgroup cg;

		total += read_cgroup(pids[i], &cg) == 0;
	}
	t1 = mono_ns();
	printf("         of which reading + parsing /proc/PID/cgroup: %.0f ns/call\n",
	       (double)(t1 - t0) / (double)n);

	t0 = mono_ns();
	for (size_t i = 0; i < rounds; i++)
		total += labels_of(pids[i % n], l);
	t1 = mono_ns();
	printf("cached:  %.1f ns/call over %zu processes\n", (double)(t1 - t0) / (double)rounds, n);

	t0 = mono_ns();
	for (size_t i = 0; i < 20000; i++) {
		if (i % n == 0)
			atomic_fetch_add(&meta_pc.gen, 1);	/* what every watch event does */
		total += labels_of(pids[i % n], l);
	}
	t1 = mono_ns();
	printf("rebuild: %.0f ns/call (pod cache changed since the last call)\n",
	       (double)(t1 - t0) / 20000.0);
	meta__stop();
	return total == 0;
}
