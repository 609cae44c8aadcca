/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unwinder's two threads on real BPF maps (src/agent/unwind/unwind.c): a process is known
 * to the walker (its mappings, frame pointers through each binary) while every table build
 * waits, so a new process on a busy node is not stuck behind other processes' builds (one of
 * libtorch_cpu's takes seconds); once the builds run, the waiting process gets its tables
 * without asking again; a later process of the same binaries gets them at once. The kept
 * stacks (unwind_stacks) are cleared when the walker's count of stacks put in since the last
 * clear nears the map's size, and not before. Needs root (exit 77).
 */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "test.h"
#include "agent/unwind/unwind.h"
#include "agent/unwind/unwind_maps.h"
#include "common/abi.h"
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

/* n stacks put into the kept-stacks map as the walker would, and its count raised by n. */
static bool put_stacks(int stacks_fd, int stats_fd, uint32_t first, uint32_t n)
{
	int ncpu = libbpf_num_possible_cpus();
	struct unwind_stack stk = { { 0 } };
	uint64_t *per = calloc(ncpu > 0 ? ncpu : 1, 8);
	uint32_t key = UNWIND_ST_STACK_NEW;
	bool ok = per && ncpu > 0 && !bpf_map_lookup_elem(stats_fd, &key, per);

	for (uint32_t i = 0; ok && i < n; i++) {
		uint32_t id = first + i;

		stk.words[0] = 1;
		stk.words[1] = 0x400000 + id;
		ok = !bpf_map_update_elem(stacks_fd, &id, &stk, BPF_NOEXIST);
	}
	if (ok) {
		per[0] += n;
		ok = !bpf_map_update_elem(stats_fd, &key, per, BPF_ANY);
	}
	free(per);
	return ok;
}

static uint32_t count_keys(int fd)
{
	uint32_t key, next, n = 0;

	for (int err = bpf_map_get_next_key(fd, NULL, &next); !err;
	     err = bpf_map_get_next_key(fd, &key, &next)) {
		key = next;
		n++;
	}
	return n;
}

static bool test_unwind_queue_stacks_cleared_near_full(void)
{
	const char *why = NULL;
	struct unwinder *u = unwinder__new(NULL, &why);
	struct unwinder_stats st;
	int stacks_fd, stats_fd;
	uint64_t end;
	bool ok = true;

	if (!ASSERT_TRUE(u != NULL, why ? why : "unwinder"))
		return false;
	unwinder__stack_fds(u, &stacks_fd, &stats_fd);
	/* well below 3/4 of the map: kept over two checks (one a second) */
	ok &= ASSERT_TRUE(put_stacks(stacks_fd, stats_fd, 1, 1000), "1000 stacks put in");
	usleep(2200 * 1000);
	unwinder__stats(u, &st);
	ok &= ASSERT_EQ(st.stack_clears, 0, "no clear while 1000 are kept");
	ok &= ASSERT_EQ(count_keys(stacks_fd), 1000, "the 1000 kept");
	/* past 3/4: cleared within a check or two, however loaded the machine (10 s) */
	ok &= ASSERT_TRUE(put_stacks(stacks_fd, stats_fd, 1001, UNWIND_MAX_STACKS * 3 / 4),
			  "past 3/4 of the map");
	{
		/* what the check cost when it walked the keys every second (informational) */
		uint64_t t0 = mono_ns();
		uint32_t n = count_keys(stacks_fd);

		printf("# walking %u kept stacks' keys: %.2f ms\n", n, (mono_ns() - t0) / 1e6);
	}
	end = mono_ns() + 10 * NSEC_PER_SEC;
	do {
		usleep(50 * 1000);
		unwinder__stats(u, &st);
	} while (!st.stack_clears && mono_ns() < end);
	ok &= ASSERT_EQ(st.stack_clears, 1, "one clear past 3/4");
	ok &= ASSERT_EQ(count_keys(stacks_fd), 0, "the map emptied");
	/* the count starts again from the clear: a few more stacks do not clear it again */
	ok &= ASSERT_TRUE(put_stacks(stacks_fd, stats_fd, 1, 100), "100 stacks after");
	usleep(2200 * 1000);
	unwinder__stats(u, &st);
	ok &= ASSERT_EQ(st.stack_clears, 1, "no second clear");
	ok &= ASSERT_EQ(count_keys(stacks_fd), 100, "the 100 kept");
	unwinder__free(u);
	return ok;
}

/*
 * The always-on agent's worker backs off while no request comes (10 wakeups a second, not 50),
 * and a request put in meanwhile is still served within its longer sleep.
 */
static bool test_unwind_queue_idle_worker(void)
{
	const char *why = NULL;
	struct unwinder *u = unwinder__new(NULL, &why);
	struct unwinder_stats st0, st1;
	unsigned tables = 0;
	uint64_t t0, took = 0, mm = 1;
	uint32_t key;
	bool ok = true;
	pid_t a;
	int n = 0;

	if (!ASSERT_TRUE(u != NULL, why ? why : "unwinder"))
		return false;
	usleep(1500 * 1000);	/* past its 10 idle rounds */
	unwinder__stats(u, &st0);
	usleep(2000 * 1000);
	unwinder__stats(u, &st1);
	fprintf(stderr, "  worker: %lu wakeups in 2 s while idle\n",
		(unsigned long)(st1.worker_rounds - st0.worker_rounds));
	ok &= ASSERT_TRUE(st1.worker_rounds - st0.worker_rounds <= 30,
			  "idle: at most ~10 wakeups a second (50 at 20 ms)");
	a = start_sleep();
	ok &= ASSERT_TRUE(a > 0, "spawn sleep");
	key = (uint32_t)a;
	t0 = mono_ns();
	ok &= ASSERT_EQ(bpf_map_update_elem(unwinder__want_fd(u), &key, &mm, BPF_NOEXIST), 0,
			"a request as the walker puts it");
	while (ok && mono_ns() - t0 < 5 * NSEC_PER_SEC) {
		n = unwinder__proc_mappings(u, a, &tables);
		if (n > 0) {
			took = mono_ns() - t0;
			break;
		}
		usleep(5000);
	}
	fprintf(stderr, "  request served in %.0f ms\n", took / 1e6);
	ok &= ASSERT_TRUE(n > 0, "the requested process's mappings read");
	stop(a);
	unwinder__free(u);
	return ok;
}

/* The reads of a's maps after n walker requests 300 ms apart (past the re-read gap). */
static uint64_t reads_after_requests(struct unwinder *u, pid_t a, int n)
{
	struct unwinder_stats st;
	uint64_t mm = 1;
	uint32_t key = (uint32_t)a;

	for (int i = 0; i < n; i++) {
		bpf_map_update_elem(unwinder__want_fd(u), &key, &mm, BPF_NOEXIST);
		usleep(300 * 1000);
	}
	unwinder__stats(u, &st);
	return st.refreshes;
}

/*
 * With the kernel's mapping records on (run.c passes them), a walker that keeps meeting an
 * address in none of a process's mappings (a stray word) no longer has its maps read again
 * every 200 ms: only after a record for that process came. Without them, as before.
 */
static bool test_unwind_queue_map_events(void)
{
	const char *why = NULL;
	struct unwinder *u = unwinder__new(NULL, &why), *plain = unwinder__new(NULL, &why);
	struct unwinder_stats st;
	uint64_t r0, r1, r2, p1;
	unsigned tables = 0;
	bool ok = true;
	pid_t a = start_sleep();

	if (!ASSERT_TRUE(u && plain, why ? why : "unwinder") || !ASSERT_TRUE(a > 0, "spawn sleep"))
		return false;
	unwinder__map_events_on(u);
	reads_after_requests(u, a, 1);
	/* its tables built (each build read its maps again for it) and the worker quiet */
	wait_known(u, a, 2, 20000, &tables);
	unwinder__settle(u, 20000);
	unwinder__stats(u, &st);
	r0 = st.refreshes;
	r1 = reads_after_requests(u, a, 4);
	unwinder__map_event(u, a);	/* a library mapped */
	r2 = reads_after_requests(u, a, 1);
	p1 = reads_after_requests(plain, a, 5);
	unwinder__stats(u, &st);
	fprintf(stderr, "  with records: %lu reads once its tables were in, %lu after 4 more "
		"requests, %lu after a record (%lu skipped); without: %lu reads for 5 requests\n",
		(unsigned long)r0,
		(unsigned long)r1, (unsigned long)r2, (unsigned long)st.refreshes_skipped,
		(unsigned long)p1);
	ok &= ASSERT_TRUE(r0 >= 1, "the first request reads the maps");
	ok &= ASSERT_EQ(r1, r0, "no record since: no re-read");
	ok &= ASSERT_EQ(r2, r0 + 1, "a record for the process: read again");
	ok &= ASSERT_TRUE(st.refreshes_skipped >= 4, "the skipped requests counted");
	ok &= ASSERT_TRUE(p1 >= 4, "without the records every request past the gap reads");
	stop(a);
	unwinder__free(u);
	unwinder__free(plain);
	return ok;
}

int main(int argc, char **argv)
{
	static const struct test_case tc[] = { T(test_unwind_queue_known_before_builds),
					       T(test_unwind_queue_stacks_cleared_near_full),
					       T(test_unwind_queue_idle_worker),
					       T(test_unwind_queue_map_events) };

	if (geteuid() != 0) {
		printf("skip: needs root for eBPF\n");
		return 77;
	}
	return test_main(tc, 4, argc, argv);
}
