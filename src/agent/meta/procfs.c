/* SPDX-License-Identifier: Apache-2.0 */
/* Per-task /proc facts (comm, NSpid) behind one bounded cache: procfs.h. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "agent/meta/procfs.h"
#include "common/util.h"

#define SLOTS	8192				/* direct-mapped by tid */
#define TTL_NS	(10 * NSEC_PER_SEC)		/* pids get reused: re-read after this */

struct slot {
	pid_t tid;
	pid_t nspid;		/* 0: not read yet */
	uint64_t comm_ns;	/* when comm was read or seen; 0: not known */
	uint64_t nspid_ns;
	char comm[PROCFS_COMM_LEN];
};

static struct slot slots[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct procfs_stats st;

/* Reads a small /proc file into buf (NUL-terminated). Bytes read, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return n;
}

/* A task name into a slot, cut to PROCFS_COMM_LEN - 1 bytes. */
static void set_comm(struct slot *s, const char *name)
{
	size_t n = strnlen(name, sizeof(s->comm) - 1);

	memcpy(s->comm, name, n);
	s->comm[n] = 0;
}

static struct slot *slot_of(pid_t tid)
{
	return &slots[(unsigned)tid % SLOTS];
}

/* Claims the slot for tid, forgetting what it knew of another task. lock held. */
static struct slot *claim(pid_t tid)
{
	struct slot *s = slot_of(tid);

	if (s->tid != tid)
		*s = (struct slot){ .tid = tid };
	return s;
}

bool procfs_comm(pid_t tid, char *buf, size_t len)
{
	uint64_t now = mono_ns();
	char path[32], tmp[64];
	struct slot *s;

	if (len)
		buf[0] = 0;
	if (tid <= 0)
		return false;
	pthread_mutex_lock(&lock);
	s = slot_of(tid);
	if (s->tid == tid && s->comm_ns && now - s->comm_ns < TTL_NS) {
		st.hits++;
		snprintf(buf, len, "%s", s->comm);
		pthread_mutex_unlock(&lock);
		return true;
	}
	st.reads++;
	pthread_mutex_unlock(&lock);
	/* the read can take microseconds: not under the lock */
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)tid);
	if (read_small(path, tmp, sizeof(tmp)) <= 0) {
		pthread_mutex_lock(&lock);
		st.gone++;
		pthread_mutex_unlock(&lock);
		return false;
	}
	tmp[strcspn(tmp, "\n")] = 0;
	procfs_comm_seen(tid, tmp);
	snprintf(buf, len, "%s", tmp);
	return true;
}

void procfs_comm_seen(pid_t tid, const char *name)
{
	struct slot *s;

	if (tid <= 0)
		return;
	pthread_mutex_lock(&lock);
	s = claim(tid);
	set_comm(s, name);
	s->comm_ns = mono_ns();
	pthread_mutex_unlock(&lock);
}

void procfs_exec(pid_t pid, const char *comm)
{
	struct slot *s;

	if (pid <= 0)
		return;
	pthread_mutex_lock(&lock);
	s = claim(pid);
	s->comm_ns = 0;
	if (comm && comm[0]) {
		set_comm(s, comm);
		s->comm_ns = mono_ns();
	}
	pthread_mutex_unlock(&lock);
}

/* Last number of the "NSpid:" line of a /proc/PID/status text; 0 if none. */
static pid_t parse_nspid(const char *text)
{
	const char *l = strstr(text, "\nNSpid:");
	pid_t ns = 0;

	if (!l)
		return 0;
	for (l += 7; *l && *l != '\n';) {
		char *end;
		long v = strtol(l, &end, 10);

		if (end == l)
			break;
		ns = (pid_t)v;
		l = end;
	}
	return ns;
}

pid_t procfs_ppid(pid_t pid)
{
	char path[32], buf[512], *p;
	ssize_t n;
	int ppid = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	n = read_small(path, buf, sizeof(buf));
	if (n <= 0)
		return 0;
	p = strrchr(buf, ')');	/* the name may hold spaces and parentheses */
	if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
		return 0;
	return ppid;
}

pid_t procfs_nspid(pid_t pid)
{
	uint64_t now = mono_ns();
	char path[32], text[4096];
	struct slot *s;
	pid_t ns;

	if (pid <= 0)
		return pid;
	pthread_mutex_lock(&lock);
	s = slot_of(pid);
	if (s->tid == pid && s->nspid && now - s->nspid_ns < TTL_NS) {
		st.hits++;
		ns = s->nspid;
		pthread_mutex_unlock(&lock);
		return ns;
	}
	st.reads++;
	pthread_mutex_unlock(&lock);
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (read_small(path, text, sizeof(text)) <= 0) {
		pthread_mutex_lock(&lock);
		st.gone++;
		pthread_mutex_unlock(&lock);
		return pid;
	}
	ns = parse_nspid(text);
	if (ns <= 0)
		ns = pid;
	pthread_mutex_lock(&lock);
	s = claim(pid);
	s->nspid = ns;
	s->nspid_ns = now;
	pthread_mutex_unlock(&lock);
	return ns;
}

void procfs_stats(struct procfs_stats *ret)
{
	pthread_mutex_lock(&lock);
	*ret = st;
	pthread_mutex_unlock(&lock);
}
