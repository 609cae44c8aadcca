/* SPDX-License-Identifier: Apache-2.0 */
/* agent__pid_labels: node/pid/comm always, tid/thread for threads, process name from /proc. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/meta/labels.h"
#include "common/batch.h"
#include "test.h"

static const char *get(const struct label *l, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(l[i].name, name))
			return l[i].value;
	return NULL;
}

static bool test_agent_labels_thread_and_process(void)
{
	struct agent a = { .opts.node = "node-1" };
	struct agent_labels L;
	const struct label *l = L.l;
	char pid[16], comm[32] = "";
	FILE *f = fopen("/proc/self/comm", "r");
	size_t n;

	if (f) {
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = 0;
		fclose(f);
	}
	comm[strcspn(comm, "\n")] = 0;
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	/* A thread of this process named "worker-3": comm is the process's name, thread the task's. */
	CHECK(ASSERT_EQ(agent__pid_labels(&a, getpid(), getpid() + 100000, "worker-3", &L),
			LABELS_KEPT, "kept"));
	n = L.n;
	bool ok = ASSERT_STREQ(get(l, n, "node"), "node-1", "node") &&
		  ASSERT_STREQ(get(l, n, "pid"), pid, "pid") &&
		  ASSERT_STREQ(get(l, n, "comm"), comm, "comm from /proc/PID/comm") &&
		  ASSERT_STREQ(get(l, n, "thread"), "worker-3", "thread") &&
		  ASSERT_TRUE(get(l, n, "tid") != NULL, "tid");
	/* Process-wide (tid 0): no tid/thread, comm as given. */
	agent__pid_labels(&a, getpid(), 0, "given", &L);
	n = L.n;
	ok = ok && ASSERT_STREQ(get(l, n, "comm"), "given", "comm as given") &&
	     ASSERT_TRUE(!get(l, n, "tid") && !get(l, n, "thread"), "no thread labels");
	/* A process that is gone: the given name stands in. */
	agent__pid_labels(&a, 0x3ffffff0, 0x3ffffff1, "ghost", &L);
	n = L.n;
	ok = ok && ASSERT_STREQ(get(l, n, "comm"), "ghost", "gone process");
	/* The bound is honoured: one capacity, and a full set says so instead of overflowing. */
	agent__pid_labels(&a, getpid(), getpid(), "x", &L);
	while (L.n < AGENT_LABELS_CAP)
		agent_labels__add(&L, "x", "y");
	ok = ok && ASSERT_EQ(agent_labels__add(&L, "z", "1"), -ENOSPC, "full set refuses") &&
	     ASSERT_EQ(L.n, AGENT_LABELS_CAP, "max labels");
	return ok;
}

/* A process that exec'd: its name cached before is replaced at once, not after the cache's 10 s. */
static bool test_agent_labels_exec(void)
{
	struct agent a = { .opts.node = "node-1" };
	struct agent_labels L;
	bool ok;

	/* a thread's record reads the process name from the cache, which an event filled */
	agent__pid_labels(&a, getpid(), getpid(), "before-exec", &L);
	agent__pid_labels(&a, getpid(), getpid() + 100000, "worker", &L);
	ok = ASSERT_STREQ(get(L.l, L.n, "comm"), "before-exec", "the main thread's name cached");
	agent__pid_exec(&a, getpid(), "after-exec");
	agent__pid_labels(&a, getpid(), getpid() + 100000, "worker", &L);
	ok = ok && ASSERT_STREQ(get(L.l, L.n, "comm"), "after-exec", "the exec's name at once");
	/* a name not known: /proc is read again */
	agent__pid_exec(&a, getpid(), NULL);
	agent__pid_labels(&a, getpid(), getpid() + 100000, "worker", &L);
	ok = ok && ASSERT_TRUE(strcmp(get(L.l, L.n, "comm"), "after-exec"), "read from /proc");
	return ok;
}

TEST_MAIN(T(test_agent_labels_thread_and_process), T(test_agent_labels_exec))
