/* SPDX-License-Identifier: Apache-2.0 */
/* Shared helpers of the agent's modules: the label set of a process or thread. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "agent/agent.h"
#include "common/batch.h"
#include "common/util.h"

#define COMM_CACHE_SLOTS 1024			/* direct-mapped, by pid */
#define COMM_CACHE_TTL_NS (10 * NSEC_PER_SEC)	/* pids get reused: re-read after this */

struct comm_slot {
	pid_t pid;
	uint64_t read_ns;
	char comm[32];
};

static struct comm_slot comm_cache[COMM_CACHE_SLOTS];
static pthread_mutex_t comm_lock = PTHREAD_MUTEX_INITIALIZER;

/* Process name of pid into buf (from the cache or /proc); false if the process is gone. */
static bool process_comm(pid_t pid, char *buf, size_t len)
{
	struct comm_slot *s = &comm_cache[(unsigned)pid % COMM_CACHE_SLOTS];
	uint64_t now = mono_ns();
	char path[32], tmp[32];
	ssize_t n;
	int fd;

	pthread_mutex_lock(&comm_lock);
	if (s->pid == pid && s->read_ns && now - s->read_ns < COMM_CACHE_TTL_NS) {
		snprintf(buf, len, "%s", s->comm);
		pthread_mutex_unlock(&comm_lock);
		return true;
	}
	pthread_mutex_unlock(&comm_lock);
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, tmp, sizeof(tmp) - 1);
	close(fd);
	if (n <= 0)
		return false;
	tmp[n] = 0;
	tmp[strcspn(tmp, "\n")] = 0;
	pthread_mutex_lock(&comm_lock);
	s->pid = pid;
	s->read_ns = now;
	snprintf(s->comm, sizeof(s->comm), "%s", tmp);
	pthread_mutex_unlock(&comm_lock);
	snprintf(buf, len, "%s", tmp);
	return true;
}

size_t agent__pid_labels(struct agent *a, pid_t pid, pid_t tid, const char *comm,
			 struct label *ret, size_t max)
{
	static __thread struct {
		char pid[16], tid[16], comm[32], thread[32];
	} buf;
	size_t n = 0;

#define ADD(k, v)                                                                                  \
	do {                                                                                       \
		if (n < max)                                                                       \
			ret[n++] = (struct label){ .name = (k), .value = (v) };                    \
	} while (0)
	if (a && a->opts.node)
		ADD("node", a->opts.node);
	snprintf(buf.pid, sizeof(buf.pid), "%d", (int)pid);
	ADD("pid", buf.pid);
	snprintf(buf.thread, sizeof(buf.thread), "%s", comm ? comm : "");
	if (tid == 0 || tid == pid || !process_comm(pid, buf.comm, sizeof(buf.comm)))
		snprintf(buf.comm, sizeof(buf.comm), "%s", buf.thread);
	ADD("comm", buf.comm);
	if (tid != 0) {
		snprintf(buf.tid, sizeof(buf.tid), "%d", (int)tid);
		ADD("tid", buf.tid);
		ADD("thread", buf.thread);
	}
#undef ADD
	if (meta__pid_labels && n < max) {
		size_t m = meta__pid_labels(pid, ret + n, max - n);

		/* A keep/drop relabel rule dropped the process: its records are not sent. */
		if (m == 1 && !strcmp(ret[n].name, "__drop__"))
			return 0;
		n += m;
	}
	return n;
}
