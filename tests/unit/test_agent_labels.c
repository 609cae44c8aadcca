/* SPDX-License-Identifier: Apache-2.0 */
/* agent__pid_labels: node/pid/comm always, tid/thread for threads, process name from /proc. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/labels.h"
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

/* What a process runs, from its argv: an interpreter's script or module, else the executable. */
static bool test_agent_labels_program(void)
{
	static const struct {
		const char *argv;	/* NUL-separated, as /proc/PID/cmdline */
		size_t len;
		const char *want;
	} cases[] = {
#define C(s, w) { s, sizeof(s) - 1, w }
		C("python3\0train.py\0--lr\0003e-4", "train.py"),
		C("/usr/bin/python3.11\0-u\0/home/u/proj/train.py", "train.py"),
		C("python3\0-m\0torch.distributed.run\0--nproc-per-node\08", "torch.distributed.run"),
		C("python\0-mpip\0install", "pip"),
		C("python3\0-W\0ignore\0-X\0dev\0serve.py", "serve.py"),
		C("python3\0-c\0print(1)", "python3"),
		C("python3", "python3"),
		C("/bin/bash\0./run.sh\0a", "run.sh"),
		C("sh\0-c\0exec sleep 1", "sh"),
		C("java\0-cp\0lib/*\0-jar\0app.jar", "app.jar"),
		C("node\0server.js", "server.js"),
		C("/usr/local/bin/gpuscope-server\0--listen\0:4040", "gpuscope-server"),
		C("", ""),
#undef C
	};
	char got[PROCFS_PROGRAM_LEN], cmd[PROCFS_CMDLINE_LEN], prog[PROCFS_PROGRAM_LEN];
	bool ok = true;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		procfs_program(cases[i].argv, cases[i].len, got, sizeof(got));
		ok = ok && ASSERT_STREQ(got, cases[i].want, cases[i].argv);
	}
	/* this process: its command line, never its environment */
	setenv("GPUSCOPE_TEST_SECRET", "not-in-cmdline", 1);
	ok = ok && ASSERT_TRUE(procfs_cmdline(getpid(), cmd, sizeof(cmd), prog, sizeof(prog)),
			       "own command line") &&
	     ASSERT_TRUE(strstr(cmd, "test_agent_labels") != NULL, cmd) &&
	     ASSERT_STREQ(prog, "test_agent_labels", "program") &&
	     ASSERT_TRUE(!strstr(cmd, "not-in-cmdline"), "no environment") &&
	     ASSERT_TRUE(!procfs_cmdline(2, cmd, sizeof(cmd), prog, sizeof(prog)) && !cmd[0],
			 "a kernel thread has none");
	return ok;
}

TEST_MAIN(T(test_agent_labels_thread_and_process), T(test_agent_labels_exec),
	  T(test_agent_labels_program))
