/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel's own record of executable mappings, as perf keeps it: a software "dummy" event per
 * CPU with mmap2, comm (exec) and task (fork) records into a ring the agent reads. A process that
 * lived a few milliseconds (a compile loop's `as`, a shell's `mkdir`) is gone before anyone reads
 * its /proc/PID/maps; its mappings are still in these records, so its addresses resolve after it
 * exited. The symbolizer owns one (symbolizer__watch_mmaps()).
 */
#ifndef GPUSCOPE_MMAPWATCH_H
#define GPUSCOPE_MMAPWATCH_H

#include <stdint.h>
#include <sys/types.h>

enum mmapwatch_type {
	MMAPWATCH_MMAP,		/* an executable mapping of pid */
	MMAPWATCH_EXEC,		/* pid exec'd at t_ns: its mappings before are gone */
	MMAPWATCH_FORK,		/* pid (a new process) forked from ppid at t_ns */
};

struct mmapwatch_rec {
	enum mmapwatch_type type;
	pid_t pid, ppid;
	uint64_t t_ns;				/* CLOCK_MONOTONIC */
	uint64_t start, len, pgoff, dev, ino;	/* dev: major << 32 | minor, as /proc maps */
	const char *path;			/* valid until the next drain */
	char comm[16];				/* EXEC: the process's new name */
};

struct mmapwatch;

/* One event per online CPU; NULL with errno set (*ret_why, static, says what failed). */
struct mmapwatch *mmapwatch__new(const char **ret_why);
void mmapwatch__free(struct mmapwatch *w);

/*
 * Reads every record the rings hold, in time order (the CPUs' rings merged), and calls cb with
 * each. The number of records, or -ENOMEM. Not thread-safe.
 */
typedef void (*mmapwatch_cb)(void *ctx, const struct mmapwatch_rec *r);
int mmapwatch__drain(struct mmapwatch *w, mmapwatch_cb cb, void *ctx);

struct mmapwatch_stats {
	uint64_t records, lost;		/* lost: records the kernel dropped on a full ring */
};
void mmapwatch__stats(const struct mmapwatch *w, struct mmapwatch_stats *ret);

#endif
