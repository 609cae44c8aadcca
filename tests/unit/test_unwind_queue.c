/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unwinder's two threads on real BPF maps (src/agent/unwind/unwind.c): a process is known
 * to the walker (its mappings, frame pointers through each binary) while every table build
 * waits, so a new process on a busy node is not stuck behind other processes' builds (one of
 * libtorch_cpu's takes seconds); once the builds run, the waiting process gets its tables
 * without asking again; a later process of the same binaries gets them at once. Needs root
 * (exit 77).
 */
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "test.h"
#include "agent/unwind/unwind.h"
#include "common/util.h"

extern char **environ;

static pid_t start_sleep(void)
{
	char *argv[] = { "/bin/sleep", "60", NULL };
	pid_t pid;

	if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ))
		return -1;
	usleep(100 * 1000);	/* the loader has mapped libc */
	return pid;
}

static void stop(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

/* Until pid's mappings are known with at least want_tables tables, or timeout_ms. */
static int wait_known(struct unwinder *u, pid_t pid, unsigned want_tables, unsigned timeout_ms,
		      unsigned *tables)
{
	uint64_t end = mono_ns() + (uint64_t)timeout_ms * NSEC_PER_MSEC;
	int n;

	do {
		n = unwinder__proc_mappings(u, pid, tables);
		if (n > 0 && *tables >= want_tables)
			return n;
		usleep(10 * 1000);
	} while (mono_ns() < end);
	return n;
}

static bool test_unwind_queue_known_before_builds(void)
{
	struct unwinder_opts o = { .hold_builds = true };
	const char *why = NULL;
	struct unwinder *u = unwinder__new(&o, &why);
	struct unwinder_stats st;
	unsigned tables = 0;
	pid_t a, b = -1;
	bool ok = true;
	int n;

	if (!ASSERT_TRUE(u != NULL, why ? why : "unwinder"))
		return false;
	a = start_sleep();
	ok &= ASSERT_TRUE(a > 0, "spawn sleep");
	unwinder__add_pid(u, a);
	/* a worker round (20 ms), however loaded the machine: 5 s */
	n = wait_known(u, a, 0, 5000, &tables);
	ok &= ASSERT_TRUE(n >= 3, "mappings known while every build waits (sleep, libc, ld)");
	/* (the vDSO's few rows are built in place: the same code in every process) */
	ok &= ASSERT_TRUE(tables <= 1, "no file's table yet: frame pointers meanwhile");
	unwinder__stats(u, &st);
	ok &= ASSERT_TRUE(st.queued >= 3, "the binaries queued for the builder");
	ok &= ASSERT_TRUE(st.built <= 1, "nothing built but the vDSO's while held");

	unwinder__release_builds(u);
	unwinder__settle(u, 60000);
	n = wait_known(u, a, 4, 1000, &tables);
	ok &= ASSERT_TRUE(tables >= 4, "the waiting process has its tables, unasked");
	unwinder__stats(u, &st);
	ok &= ASSERT_EQ(st.queued, 0, "queue empty after settle");
	ok &= ASSERT_TRUE(st.built >= 4, "built");

	b = start_sleep();
	unwinder__add_pid(u, b);
	unwinder__settle(u, 5000);
	n = unwinder__proc_mappings(u, b, &tables);
	ok &= ASSERT_TRUE(n >= 4 && tables >= 4, "a later process of the same binaries: tables at once");
	stop(a);
	stop(b);
	unwinder__free(u);
	return ok;
}

int main(int argc, char **argv)
{
	static const struct test_case tc[] = { T(test_unwind_queue_known_before_builds) };

	if (geteuid() != 0) {
		printf("skip: needs root for eBPF\n");
		return 77;
	}
	return test_main(tc, 1, argc, argv);
}
