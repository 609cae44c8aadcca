// SPDX-License-Identifier: Apache-2.0
/*
 * GPU process discovery for every feature that follows GPU processes (tracker.h; the
 * thread-state and CUDA modules): a process is tracked when it maps
 * libcuda or /dev/nvidia* (or holds such a device open), is named by --pid, or was forked by a
 * tracked process. With --pid, only the named processes and their children: "profile only
 * this process" (other GPU processes are neither probed nor stripped). Found by one /proc scan
 * at start, by hints from BPF (exec, fork, exit, opens of GPU files) checked shortly after, and
 * by a slow full rescan as a safety net.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/procs/maps.h"
#include "agent/procs/procfs.h"
#include "agent/procs/tracker.h"
#include "common/log.h"
#include "common/util.h"

#define RESCAN_NS	 (30 * NSEC_PER_SEC)	/* full /proc rescan period */
#define LIGHT_SCAN_NS	 NSEC_PER_SEC		/* /proc/PID/stat scan: maps re-read on vsize change */
/* ...with a feed of new mappings (procs__map_feed()): each one reads every process's stat,
 * ~1.7 ms a second of the agent on the H100 machine */
#define LIGHT_SCAN_FED_NS (10 * NSEC_PER_SEC)
#define VSIZE_SLOTS	 8192			/* untracked pids whose vsize is remembered */
#define PENDING_MAX	 256
#define PENDING_TRIES	 6			/* checks of a hinted pid, 100 ms .. 3.2 s apart */
#define HOOKS_MAX	 4

struct pending {
	pid_t pid;
	int tries;
	uint64_t due_ns;
};

static struct {
	int refs;
	struct agent *a;
	struct proc_info procs[PROCS_MAX];
	size_t nprocs;
	struct pending pending[PENDING_MAX];
	size_t npending;
	struct { procs_hook_fn fn; void *ctx; } hooks[HOOKS_MAX];
	uint64_t next_rescan_ns, next_light_ns;
	struct { pid_t pid; uint64_t vsize; } vs[VSIZE_SLOTS];	/* direct-mapped by pid */
	struct procs_stats st;
} P;

static void light_scan(void);
static bool map_fed;	/* procs__map_feed(): not reset by procs__release() */

static struct proc_info *find(pid_t pid)
{
	for (size_t i = 0; i < P.nprocs; i++)
		if (P.procs[i].pid == pid)
			return &P.procs[i];
	return NULL;
}

static bool in_pid_opt(pid_t pid)
{
	for (int i = 0; P.a && i < P.a->opts.npids; i++)
		if (P.a->opts.pids[i] == pid)
			return true;
	return false;
}

static void notify(pid_t pid, bool tracked)
{
	for (int i = 0; i < HOOKS_MAX; i++)
		if (P.hooks[i].fn)
			P.hooks[i].fn(pid, tracked, P.hooks[i].ctx);
}

static void track(pid_t pid, enum proc_why why)
{
	struct proc_info *p = find(pid);

	if (p)
		return;
	if (P.nprocs == PROCS_MAX) {
		if (!P.st.overflow++)
			log_warn("more than %d GPU processes: pid %d and later ones not tracked",
				 PROCS_MAX, pid);
		return;
	}
	p = &P.procs[P.nprocs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	p->why = why;
	p->ns_pid = procfs_nspid(pid);
	p->tracked_since_ns = mono_ns();
	procfs_comm(pid, p->comm, sizeof(p->comm));
	P.st.tracked++;
	log_debug("tracking pid %d '%s' (%d)", pid, p->comm, why);
	notify(pid, true);
}

static void untrack(pid_t pid)
{
	struct proc_info *p = find(pid);

	if (!p)
		return;
	*p = P.procs[--P.nprocs];
	notify(pid, false);
}

/* A mapping that makes its process a GPU process: /dev/nvidia*, or libcuda. */
static int gpu_mapping(const struct maps_line *l, void *ctx)
{
	if (!strncmp(l->path, "/dev/nvidia", 11))
		return PROC_WHY_NVIDIA_DEV;
	return maps_lib_named(l->path, "libcuda.so") ? PROC_WHY_LIBCUDA : 0;
}

int procs__check_gpu(pid_t pid, enum proc_why *ret_why)
{
	char path[64];
	int found;
	DIR *d;
	struct dirent *de;

	found = maps_each(pid, MAPS_ALL, gpu_mapping, NULL);
	if (found < 0)
		return found;
	P.st.checks++;
	if (!found) {
		/* a device held open but not mapped */
		snprintf(path, sizeof(path), "/proc/%d/fd", pid);
		d = opendir(path);
		while (d && (de = readdir(d))) {
			char lpath[300], target[64];
			ssize_t n;

			if (de->d_name[0] == '.')
				continue;
			snprintf(lpath, sizeof(lpath), "/proc/%d/fd/%s", pid, de->d_name);
			n = readlink(lpath, target, sizeof(target) - 1);
			if (n > 0 && n >= 11 && !strncmp(target, "/dev/nvidia", 11)) {
				found = PROC_WHY_NVIDIA_DEV;
				break;
			}
		}
		if (d)
			closedir(d);
	}
	if (found && ret_why)
		*ret_why = found;
	return found ? 1 : 0;
}

static void consider(pid_t pid)
{
	enum proc_why why;

	if (find(pid))
		return;
	if (in_pid_opt(pid)) {
		track(pid, PROC_WHY_PID);
		return;
	}
	if (P.a && P.a->opts.npids)
		return;
	if (procs__check_gpu(pid, &why) > 0)
		track(pid, why);
}

static void scan_all(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;

	P.st.scans++;
	while (d && (de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		consider(atoi(de->d_name));
	}
	if (d)
		closedir(d);
	/* tracked processes that are gone (exit events can be lost) */
	for (size_t i = 0; i < P.nprocs;) {
		char path[64];

		snprintf(path, sizeof(path), "/proc/%d", P.procs[i].pid);
		if (access(path, F_OK)) {
			P.st.vanished++;
			untrack(P.procs[i].pid);
			continue;
		}
		i++;
	}
	P.next_rescan_ns = mono_ns() + RESCAN_NS;
}

int procs__acquire(struct agent *a, procs_hook_fn hook, void *ctx)
{
	if (hook) {
		int i;

		for (i = 0; i < HOOKS_MAX && P.hooks[i].fn; i++)
			;
		if (i == HOOKS_MAX)
			return -ENOSPC;
		P.hooks[i].fn = hook;
		P.hooks[i].ctx = ctx;
	}
	if (P.refs++) {
		for (size_t i = 0; hook && i < P.nprocs; i++)
			hook(P.procs[i].pid, true, ctx);
		return 0;
	}
	P.a = a;
	for (int i = 0; i < a->opts.npids; i++)
		if (!kill(a->opts.pids[i], 0) || errno == EPERM)
			track(a->opts.pids[i], PROC_WHY_PID);
		else
			log_warn("--pid %d: no such process", a->opts.pids[i]);
	scan_all();
	light_scan();
	return 0;
}

void procs__release(procs_hook_fn hook, void *ctx)
{
	for (int i = 0; hook && i < HOOKS_MAX; i++)
		if (P.hooks[i].fn == hook && P.hooks[i].ctx == ctx)
			P.hooks[i].fn = NULL;
	if (!P.refs || --P.refs)
		return;
	P.nprocs = 0;
	P.npending = 0;
	P.a = NULL;
	memset(&P.st, 0, sizeof(P.st));
	memset(P.vs, 0, sizeof(P.vs));
}

static void add_pending(pid_t pid, uint64_t delay_ns)
{
	for (size_t i = 0; i < P.npending; i++)
		if (P.pending[i].pid == pid) {
			P.pending[i].tries = 0;
			return;
		}
	if (P.npending == PENDING_MAX) {
		/* lost hint: the next full rescan finds it */
		P.next_rescan_ns = 0;
		return;
	}
	P.pending[P.npending++] = (struct pending){ pid, 0, mono_ns() + delay_ns };
}

/* vsize (bytes) from /proc/PID/stat; 0 for kernel threads or on error. */
static uint64_t read_vsize(pid_t pid)
{
	uint64_t start, vsize;

	return procfs_start_vsize(pid, &start, &vsize) ? vsize : 0;
}

/*
 * Cheap discovery between full rescans: a process that maps a new library changes its vsize,
 * so maps are re-read only for processes whose vsize moved since the last look.
 */
static void light_scan(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;

	while (d && (de = readdir(d))) {
		pid_t pid;
		uint64_t v;
		size_t slot;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = atoi(de->d_name);
		if (find(pid))
			continue;
		v = read_vsize(pid);
		if (!v)
			continue;
		slot = (size_t)pid % VSIZE_SLOTS;
		if (P.vs[slot].pid == pid && P.vs[slot].vsize == v)
			continue;
		P.vs[slot].pid = pid;
		P.vs[slot].vsize = v;
		consider(pid);
	}
	if (d)
		closedir(d);
	P.next_light_ns = mono_ns() + (map_fed ? LIGHT_SCAN_FED_NS : LIGHT_SCAN_NS);
}

void procs__tick(void)
{
	uint64_t now = mono_ns();

	if (!P.refs)
		return;
	for (size_t i = 0; i < P.npending;) {
		struct pending *q = &P.pending[i];

		if (q->due_ns > now) {
			i++;
			continue;
		}
		consider(q->pid);
		if (find(q->pid) || ++q->tries >= PENDING_TRIES || kill(q->pid, 0)) {
			*q = P.pending[--P.npending];
			continue;
		}
		q->due_ns = now + (100 * NSEC_PER_MSEC << q->tries);
		i++;
	}
	if (now >= P.next_rescan_ns)
		scan_all();
	else if (now >= P.next_light_ns)
		light_scan();
}

void procs__map_feed(bool on)
{
	map_fed = on;
}

void procs__hint_open(pid_t pid)
{
	/* the library is mapped right after it is opened: look soon */
	add_pending(pid, 5 * NSEC_PER_MSEC);
}

void procs__hint_exec(pid_t pid)
{
	struct proc_info *p = find(pid);
	bool keep = p && p->why == PROC_WHY_FORK && P.a && P.a->opts.npids;

	/*
	 * A new image: its old mappings are gone, and a process found by them is looked at again.
	 * --pid stays tracked, and so do its children: with --pid the agent follows that tree,
	 * and a child forks only to exec (`nohup python3 train.py` is nohup up to its exec).
	 */
	if (p && p->why != PROC_WHY_PID)
		untrack(pid);
	if (in_pid_opt(pid))
		track(pid, PROC_WHY_PID);
	else if (keep)
		track(pid, PROC_WHY_FORK);	/* the modules see the new image as a new process */
}

void procs__hint_fork(pid_t child, pid_t parent)
{
	if (find(parent))
		track(child, PROC_WHY_FORK);
}

void procs__hint_exit(pid_t pid)
{
	untrack(pid);
}

void procs__stats(struct procs_stats *s)
{
	*s = P.st;
	s->tracked = P.nprocs;
}

pid_t procs__ns_pid(pid_t pid)
{
	const struct proc_info *p = find(pid);

	return p ? p->ns_pid : 0;
}
