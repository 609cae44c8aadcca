/* SPDX-License-Identifier: Apache-2.0 */
/* Per-task /proc facts (comm, NSpid, command line) behind bounded caches: procfs.h. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "agent/procs/procfs.h"
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

/* Command lines: fewer slots (processes, not threads), bigger. */
#define CMD_SLOTS 2048

struct cmd_slot {
	pid_t pid;
	uint64_t read_ns;	/* 0: not read (or read again: the process exec'd) */
	bool none;		/* gone or no command line when read */
	char cmdline[PROCFS_CMDLINE_LEN];
	char program[PROCFS_PROGRAM_LEN];
};

static struct slot slots[SLOTS];
static struct cmd_slot *cmd_slots;	/* CMD_SLOTS, allocated on first use */
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
	if (cmd_slots && cmd_slots[(unsigned)pid % CMD_SLOTS].pid == pid)
		cmd_slots[(unsigned)pid % CMD_SLOTS].read_ns = 0;
	pthread_mutex_unlock(&lock);
}

/* The last path component of s (n bytes) into ret. */
static void base_name(const char *s, size_t n, char *ret, size_t rlen)
{
	const char *slash = memrchr(s, '/', n);

	if (slash && (size_t)(slash - s) + 1 < n) {
		n -= (size_t)(slash + 1 - s);
		s = slash + 1;
	}
	if (rlen)
		snprintf(ret, rlen, "%.*s", (int)n, s);
}

/* Does the executable's base name b start with prefix (python3.11 starts with python)? */
static bool named(const char *b, const char *prefix)
{
	return !strncmp(b, prefix, strlen(prefix));
}

void procfs_program(const char *argv, size_t len, char *ret, size_t rlen)
{
	const char *a[64], *end = argv + len;
	char exe[PROCFS_PROGRAM_LEN];
	size_t na = 0;
	bool py, sh, jvm;

	if (rlen)
		ret[0] = 0;
	for (const char *p = argv; p < end && na < 64;) {
		a[na++] = p;
		p += strnlen(p, (size_t)(end - p)) + 1;
	}
	if (!na || !a[0][0])
		return;
	base_name(a[0], strlen(a[0]), exe, sizeof(exe));
	py = named(exe, "python") || named(exe, "pypy");
	sh = !strcmp(exe, "sh") || !strcmp(exe, "bash") || !strcmp(exe, "dash") ||
	     !strcmp(exe, "zsh") || named(exe, "node") || named(exe, "ruby") || named(exe, "perl");
	jvm = !strcmp(exe, "java");
	for (size_t i = 1; (py || sh || jvm) && i < na; i++) {
		const char *x = a[i];

		if (x[0] != '-' || !x[1]) {	/* the script ("-": stdin) */
			base_name(x, strlen(x), ret, rlen);
			return;
		}
		if (!strcmp(x, "--"))
			continue;
		if (py && x[1] == 'm') {	/* -m module, -mmodule */
			snprintf(ret, rlen, "%s", x[2] ? x + 2 : i + 1 < na ? a[i + 1] : "");
			return;
		}
		if ((py || sh) && x[1] == 'c' && !x[2])	/* code on the command line */
			break;
		if (jvm && !strcmp(x, "-jar") && i + 1 < na) {
			base_name(a[i + 1], strlen(a[i + 1]), ret, rlen);
			return;
		}
		if ((py && (!strcmp(x, "-W") || !strcmp(x, "-X"))) ||
		    (jvm && (!strcmp(x, "-cp") || !strcmp(x, "-classpath"))))
			i++;	/* an option with an argument */
	}
	snprintf(ret, rlen, "%s", exe);
}

bool procfs_cmdline(pid_t pid, char *cmdline, size_t clen, char *program, size_t plen)
{
	uint64_t now = mono_ns();
	char path[32], raw[1024];
	struct cmd_slot *s, tmp = { .pid = pid };
	ssize_t n;
	size_t o = 0;

	if (clen)
		cmdline[0] = 0;
	if (plen)
		program[0] = 0;
	if (pid <= 0)
		return false;
	pthread_mutex_lock(&lock);
	if (!cmd_slots)
		cmd_slots = calloc(CMD_SLOTS, sizeof(*cmd_slots));
	s = cmd_slots ? &cmd_slots[(unsigned)pid % CMD_SLOTS] : NULL;
	if (s && s->pid == pid && s->read_ns && now - s->read_ns < TTL_NS) {
		st.hits++;
		snprintf(cmdline, clen, "%s", s->cmdline);
		snprintf(program, plen, "%s", s->program);
		pthread_mutex_unlock(&lock);
		return !s->none;
	}
	st.reads++;
	pthread_mutex_unlock(&lock);
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	n = read_small(path, raw, sizeof(raw));
	tmp.none = n <= 0;
	if (n > 0) {
		size_t len = (size_t)n;

		while (len && !raw[len - 1])	/* the last argument's NUL */
			len--;
		procfs_program(raw, len, tmp.program, sizeof(tmp.program));
		for (size_t i = 0; i < len && o + 1 < sizeof(tmp.cmdline); i++) {
			unsigned char c = (unsigned char)raw[i];

			tmp.cmdline[o++] = !c || c == '\n' || c == '\t' || c == '\r' ? ' ' :
					   c < 0x20 || c == 0x7f ? '?' : (char)c;
		}
		if (o < len && (unsigned char)raw[o] >= 0x80) {
			/* cut inside a UTF-8 sequence: the sequence goes */
			while (o && ((unsigned char)tmp.cmdline[o - 1] & 0xc0) == 0x80)
				o--;
			if (o && (unsigned char)tmp.cmdline[o - 1] >= 0xc0)
				o--;
		}
		tmp.cmdline[o] = 0;
	}
	tmp.read_ns = now;
	pthread_mutex_lock(&lock);
	if (n <= 0)
		st.gone++;
	if (cmd_slots)
		cmd_slots[(unsigned)pid % CMD_SLOTS] = tmp;
	pthread_mutex_unlock(&lock);
	snprintf(cmdline, clen, "%s", tmp.cmdline);
	snprintf(program, plen, "%s", tmp.program);
	return !tmp.none;
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

bool procfs_start_vsize(pid_t pid, uint64_t *start, uint64_t *vsize)
{
	char fn[64], buf[1024], *p;
	unsigned long long st = 0, vs = 0;
	ssize_t n;
	int fd;

	snprintf(fn, sizeof(fn), "/proc/%d/stat", (int)pid);
	fd = open(fn, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	p = strrchr(buf, ')');	/* comm may hold spaces and parentheses */
	/* after ") ": state (3) ... starttime (22), vsize (23) */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
			 "%*d %*d %*d %llu %llu", &st, &vs) != 2)
		return false;
	*start = st;
	*vsize = vs;
	return true;
}
