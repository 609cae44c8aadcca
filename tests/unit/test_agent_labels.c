/* SPDX-License-Identifier: Apache-2.0 */
/* agent__pid_labels: node/pid/comm always, tid/thread for threads, process name from /proc. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "agent/agent.h"
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
	struct label l[16];
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
	n = agent__pid_labels(&a, getpid(), getpid() + 100000, "worker-3", l, 16);
	bool ok = ASSERT_STREQ(get(l, n, "node"), "node-1", "node") &&
		  ASSERT_STREQ(get(l, n, "pid"), pid, "pid") &&
		  ASSERT_STREQ(get(l, n, "comm"), comm, "comm from /proc/PID/comm") &&
		  ASSERT_STREQ(get(l, n, "thread"), "worker-3", "thread") &&
		  ASSERT_TRUE(get(l, n, "tid") != NULL, "tid");
	/* Process-wide (tid 0): no tid/thread, comm as given. */
	n = agent__pid_labels(&a, getpid(), 0, "given", l, 16);
	ok = ok && ASSERT_STREQ(get(l, n, "comm"), "given", "comm as given") &&
	     ASSERT_TRUE(!get(l, n, "tid") && !get(l, n, "thread"), "no thread labels");
	/* A process that is gone: the given name stands in. */
	n = agent__pid_labels(&a, 0x3ffffff0, 0x3ffffff1, "ghost", l, 16);
	ok = ok && ASSERT_STREQ(get(l, n, "comm"), "ghost", "gone process");
	/* The bound is honoured. */
	n = agent__pid_labels(&a, getpid(), getpid(), "x", l, 2);
	ok = ok && ASSERT_EQ(n, 2, "max labels");
	return ok;
}

TEST_MAIN(T(test_agent_labels_thread_and_process))
