/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's one reader of /proc/PID/maps: the line parser, a walk over a process's mappings,
 * library discovery ("does this process map libcuda / libcupti / libpython / libtorch?") and the
 * opener of the file behind a mapping. Every feature asks here instead of scanning maps itself:
 * the symbolizer, the unwinder, the CPython detector, the CUDA probes, the CUPTI library's
 * attach and the GPU-process tracker. Any thread (no state).
 */
#ifndef GPUSCOPE_AGENT_PROCS_MAPS_H
#define GPUSCOPE_AGENT_PROCS_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One mapping of /proc/PID/maps; path points into the parsed line. */
struct maps_line {
	uint64_t start, end, pgoff, dev, ino;
	const char *path;	/* "" for anonymous; " (deleted)" cut off (see deleted) */
	bool deleted;
	bool exec;		/* mapped executable */
};

/*
 * Parses a /proc/PID/maps line (modified in place). 1: an executable mapping, 0: skip (not
 * executable, or malformed).
 */
int maps_parse_line(char *line, struct maps_line *ret);

/* maps_each() flags */
#define MAPS_ALL 1u	/* every mapping, not only executable ones */

/*
 * Calls fn for each executable mapping of pid (with MAPS_ALL: every mapping), in address order,
 * until fn returns non-zero, which maps_each() then returns. 0 when fn saw every mapping;
 * -ESRCH when the process is gone, another -errno when its maps cannot be read (-EIO: not to
 * the end).
 */
int maps_each(pid_t pid, unsigned flags, int (*fn)(const struct maps_line *l, void *ctx),
	      void *ctx);

/* Does the file name (after the last '/') of path start with prefix ("libcuda.so")? */
bool maps_lib_named(const char *path, const char *prefix);

/* A library a process maps, as maps_find_lib() found it. */
struct maps_lib {
	uint64_t start, end;	/* its first executable mapping */
	bool deleted;		/* the file was deleted or replaced since it was mapped */
	char path[4096];	/* as the process sees it */
};

/*
 * The first executable mapping of pid whose file name starts with prefix (maps_lib_named()):
 * 1 found (*ret filled), 0 not mapped, -errno as maps_each().
 */
int maps_find_lib(pid_t pid, const char *prefix, struct maps_lib *ret);

struct stat;
/*
 * Opens the file behind a mapping of pid: the exact mapped file through /proc/PID/map_files
 * (deleted files, other mount namespaces), else the path inside the process's root. fd or
 * -errno; *ret_st filled when not NULL.
 */
int maps_open_file(pid_t pid, uint64_t start, uint64_t end, const char *path, bool deleted,
		   struct stat *ret_st);

#endif
