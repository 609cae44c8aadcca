/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unwinder's user-space half: creates the BPF maps every stack-taking program shares
 * (unwind.bpf.h), and on its own thread answers the walker's requests: reads a process's
 * executable mappings, builds each binary's unwind table once (keyed by build-id, LRU-evicted
 * under a byte budget) and loads it, so BPF can walk code without frame pointers.
 */
#ifndef GPUSCOPE_UNWIND_H
#define GPUSCOPE_UNWIND_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <linux/types.h>

struct bpf_object;
struct unwinder;

struct unwinder_opts {
	uint64_t budget_bytes;		/* unwind tables in BPF maps, LRU beyond (0: 256 MiB) */
	unsigned poll_ms;		/* how often the worker drains requests (0: 20 ms) */
	bool foreground;		/* builds at the caller's priority (record), not below the
					 * workloads (the always-on agent) */
	bool hold_builds;		/* tests: no build until unwinder__release_builds() */
	const char *cache_dir;		/* tables kept on disk across processes and restarts
					 * (cache.h); NULL: none */
	uint64_t cache_max_bytes;	/* its bound (0: 512 MiB) */
};

/*
 * Creates the shared maps and starts the worker and builder threads. NULL with errno set; *ret_why (static)
 * then says what the kernel lacks (the caller falls back to frame pointers and logs it once).
 */
struct unwinder *unwinder__new(const struct unwinder_opts *opts, const char **ret_why);
/* Stops the worker, closes the maps (programs still loaded keep their own references). */
void unwinder__free(struct unwinder *u);

/*
 * Before a skeleton loads: points obj's unwind_* maps at the shared ones (bpf_map__reuse_fd).
 * 0 or -errno. Any thread, before load.
 */
int unwinder__prepare(struct unwinder *u, struct bpf_object *obj);

/*
 * Asks the worker to read pid's mappings and build its tables now, before its first stack
 * (--pid). 0 or -errno. Any thread.
 */
int unwinder__add_pid(struct unwinder *u, int pid);

/*
 * The frames of a stack kept by unwind_stackid() (unwind.bpf.h) into frames (room for
 * GPUSCOPE_MAX_STACK words). The word count, 0 when the id is unknown (cleared, or < 0). Any
 * thread.
 */
int unwinder__read_stack(struct unwinder *u, int id, __u64 *frames);
/*
 * A count bumped before and after every clear of the stacks map (odd while one runs): an id
 * read while it stays the same and even names the same frames (a cache of what an id holds
 * checks it). Any thread.
 */
uint64_t unwinder__stacks_gen(struct unwinder *u);

/* The kept-stacks map and the walker's counters (UNWIND_ST_*), for tests. */
void unwinder__stack_fds(struct unwinder *u, int *ret_stacks_fd, int *ret_stats_fd);
/* The walker's requests (tgid -> mm), for tests: a request put there as the walker would. */
int unwinder__want_fd(struct unwinder *u);

struct unwinder_stats {
	uint64_t tables, table_bytes, budget_bytes;	/* loaded now */
	uint64_t built, build_ns, no_cfi, over_budget, evicted, build_errors;
	uint64_t cached;				/* loaded from the on-disk cache */
	uint64_t queued;				/* binaries waiting for a build now */
	uint64_t procs, refreshes, requests;
	uint64_t refreshes_skipped;			/* no mapping record since the last read */
	uint64_t worker_rounds;				/* the worker's wakeups */
	uint64_t walks, frames, table_frames, fp_frames, no_proc, no_table, nested;
	uint64_t parent_maps;	/* of no_proc: fork children walked with their parent's mappings */
	uint64_t stack_full, stack_collisions, stack_clears;
	uint64_t truncated[16];				/* by enum gpuscope_trunc */
	bool cache_on;					/* the on-disk cache (cache.h) */
	uint64_t cache_hits, cache_misses, cache_corrupt, cache_stores, cache_store_errors;
	uint64_t cache_evicted, cache_bytes, cache_max_bytes, cache_load_ns;
};
void unwinder__stats(struct unwinder *u, struct unwinder_stats *ret);
/* Prometheus text lines (gpuscope_agent_unwind_*). Any thread. */
void unwinder__metrics(struct unwinder *u, FILE *out);

struct agent;
struct agent_opts;
/*
 * Parses the unwinder's own agent options (--unwind-cache-dir DIR|off, --unwind-cache-max
 * SIZE) into o: 1 when name is one of them, 0 when not, -EINVAL (logged) on a bad value.
 */
int unwind_parse_opt(struct agent_opts *o, const char *name, const char *val);
/*
 * The agent's unwinder, created on first use (every stack-taking module asks for it), with the
 * on-disk table cache of a->opts (default /var/lib/gpuscope/unwind-cache). NULL when the
 * kernel cannot run it: logged once, stacks then come from frame pointers. Main thread.
 */
struct unwinder *agent__unwinder(struct agent *a);

/*
 * The kernel's mapping records (the symbolizer's watch, passed on by run.c): once on, a walk
 * that meets an address in none of a process's known mappings (a stray word on the stack) has
 * the process's /proc/PID/maps read again only when a record for it came since the last read
 * (pid <= 0: records were lost, every process may have moved). Main thread.
 */
void unwinder__map_events_on(struct unwinder *u);
void unwinder__map_event(struct unwinder *u, int pid);

/* The CPython side (python.h) the unwinder feeds with processes; NULL without one. */
struct python *unwinder__python(struct unwinder *u);

/* Tests: lets the builder go (opts.hold_builds). */
void unwinder__release_builds(struct unwinder *u);
/*
 * Tests: the executable mappings the walker knows for pid, and in *ret_tables how many of them
 * have a table. -ENOENT when it knows none.
 */
int unwinder__proc_mappings(struct unwinder *u, int pid, unsigned *ret_tables);

/* Waits until the worker has no pending requests and the builder no queued build (tests,
 * record's start). */
void unwinder__settle(struct unwinder *u, unsigned timeout_ms);

#endif
