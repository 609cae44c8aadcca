/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unwinder's own state (unwind.c runs it; unwind_query.c answers what it holds): binaries
 * and their tables, the processes known, the two threads' shared fields. No other user.
 */
#ifndef GPUSCOPE_UNWIND_INT_H
#define GPUSCOPE_UNWIND_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "agent/procs/elf.h"
#include "agent/unwind/unwind.h"

#define BIN_BUCKETS	4096
#define PROC_BUCKETS	4096
#define FILE_BUCKETS	4096

enum bin_state { BIN_NEW, BIN_READY, BIN_NO_CFI, BIN_TOO_BIG, BIN_FAILED, BIN_EVICTED };

/* One binary (by build-id, else file identity): its table while loaded. */
struct bin {
	struct bin *hnext;
	struct bin *lru_prev, *lru_next;	/* loaded tables, most recently used first */
	char *key;
	enum bin_state state;
	uint32_t id;				/* in unwind_tables while READY */
	uint64_t bytes;
	struct elf_seg *segs;
	int nsegs;
	/* the build queue (u->lock): the file to build from, the processes to read again */
	struct bin *qnext;
	bool queued;
	int build_fd;
	uint64_t load_bytes;			/* its PT_LOAD bytes: the build's cost, roughly */
	uint32_t *waiters, nwait, capwait;
};

/* A file identity seen in some process -> its bin (saves re-reading the build-id). */
struct file_ent {
	struct file_ent *hnext;
	uint64_t dev, ino, size;
	int64_t mtime_ns;
	struct bin *bin;			/* NULL: not ELF */
};

struct proc_ent {
	struct proc_ent *hnext;
	uint32_t tgid;
	uint64_t mm, refreshed_ns;
	bool maps_moved;	/* a mapping record came since the last read (map events on) */
};

#define MAP_EVENTS_CAP	256	/* pids with new mappings between two drains; more: all moved */

struct unwinder {
	int tables_fd, procs_fd, want_fd, stats_fd, scratch_fd, template_fd, stacks_fd;
	uint64_t stacks_made_at_clear;	/* UNWIND_ST_STACK_NEW at the last clear (worker only) */
	uint64_t last_stacks_check_ns;
	struct unwinder_opts opts;
	pthread_t thread, builder;
	bool thread_started, builder_started;
	pthread_cond_t queue_cond;		/* the builder waits on it (u->lock) */
	struct bin *queue_head, *queue_tail;
	bool building;
	volatile bool stop;
	pthread_mutex_t lock;			/* stats and the maps' contents vs. metrics */
	struct unwinder_stats st;
	uint64_t stacks_gen;			/* unwinder__stacks_gen(); atomic */
	struct bin *bins[BIN_BUCKETS];
	struct bin lru;				/* list head */
	struct file_ent *files[FILE_BUCKETS];
	uint32_t nfiles;
	struct proc_ent *procs[PROC_BUCKETS];
	uint32_t next_id;
	uint64_t last_sweep_ns;
	volatile int pending;			/* requests seen in the last drain */
	volatile uint64_t drains;		/* drains that found requests (settle) */
	struct bin *vdso;
	struct unwind_proc *scratch_proc;	/* one value being assembled */
	struct python *py;			/* CPython frames (python.h); NULL: none */
	struct uw_cache *cache;			/* tables on disk (cache.h); NULL: none */
	/* the kernel's mapping records as run.c passes them on (unwinder__map_event(), u->lock) */
	bool map_events_on;
	bool map_events_all;			/* records lost, or too many pids: every one moved */
	unsigned n_map_events;
	pid_t map_events[MAP_EVENTS_CAP];
};

#endif
