/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU-idle estimator shared by the store backends: what a GPU-idle answer (flame graph,
 * top, pprof, diff, the efficiency report's causes) would have been under continuous kernel
 * tracing, from what was observed. docs/estimator.md explains the method and its proof.
 */
#ifndef GPUSCOPE_STORE_IDLE_EST_H
#define GPUSCOPE_STORE_IDLE_EST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "server/store/store.h"

/* A representative trace window farther than this from an instant does not stand for it. */
#define IDLE_EST_REACH_NS (120ull * 1000000000ull)

/* A window with less undecided time of its own (the rest decided by the driver's counters)
 * stands for nothing: too few samples to speak for minutes; its neighbours do. */
#define IDLE_EST_MIN_OWN_NS (100ull * 1000000ull)

/* What an interval of kind gpu_busy / gpu_observed tells the estimator. */
enum idle_src {
	IDLE_SRC_NONE = -1,	/* not a busy/idle interval */
	IDLE_SRC_BUSY,		/* gpu_busy (any source): the GPU ran something */
	IDLE_SRC_EXACT,		/* gpu_observed by a source that decided the whole range: the
				 * driver's counters at 0 or 1 (gpm, nvml) and trace windows
				 * that opened for a reason tied to the GPU's state (idle or
				 * sync triggers, captures): exact for their own time only */
	IDLE_SRC_SAMPLE,	/* gpu_observed by a budget or continuous trace window: placed
				 * regardless of the GPU's state, so it also stands for the
				 * undecided time around it */
};

/* The class of an interval of `kind` with labels pairs (2n strings: name, value, ...). */
enum idle_src idle_est_class(const char *kind, const char *const *pairs, size_t n);

/* A representative window of one node, clipped to the loaded span. */
struct est_window {
	uint64_t s, e;
	double extra;		/* undecided time it stands for / its own undecided time */
};

struct node_est {
	const char *node;	/* not owned */
	const struct busy *busy, *exact, *rep;	/* merged lists (owned by the idle_est's sets) */
	size_t nbusy, nexact, nrep;
	struct est_window *w;
	size_t nw;
};

struct idle_est {
	struct busy_set sets[3];	/* by enum idle_src, while adding */
	uint64_t from, to;		/* the query's range */
	struct node_est *nodes;
	size_t n;
	struct idle_est_cover cover;
};

/* The span whose busy/idle intervals idle_est_add() should be given for a query over
 * [from, to): wider by the reach, so windows just outside can stand for time inside. */
void idle_est_load_span(uint64_t from, uint64_t to, uint64_t *ret_from, uint64_t *ret_to);
/* Adds one interval of class c of node (not copied: must outlive e). 0 or -ENOMEM. */
int idle_est_add(struct idle_est *e, enum idle_src c, const char *node, uint64_t start,
		 uint64_t end);
/* After the last idle_est_add(): merges, places every window's share, sums the coverage.
 * 0 or -ENOMEM. */
int idle_est_build(struct idle_est *e, uint64_t from, uint64_t to);
/* The node's estimate, NULL if no interval named it (its samples are unknown). */
const struct node_est *idle_est_node(const struct idle_est *e, const char *node);
/* The span whose samples can count (the range and the windows that stand for part of it). */
void idle_est_scan_span(const struct idle_est *e, uint64_t *ret_from, uint64_t *ret_to);
/*
 * A sample at t of a node with estimate ne (NULL: unknown): *ret_own is 1 where t is in the
 * range and decided idle (exactly or by a window), *ret_extra the share of undecided time it
 * stands for (a window's idle samples, also just outside the range). Both 0: not counted.
 */
void idle_est_weight(const struct idle_est *e, const struct node_est *ne, uint64_t t,
		     double *ret_own, double *ret_extra);
void idle_est_done(struct idle_est *e);

/*
 * Weighted counting for the backends: value x (own + extra), as whole numbers whose running
 * sum stays within 1 of the exact one (the fraction carried to the next sample), and the
 * exact and estimated parts tallied for the answer (store_query.idle).
 */
struct idle_dither {
	double carry;
	struct idle_tally *tally;	/* may be NULL */
};
/*
 * What a raw sample of value at *t of a node with estimate ne (NULL: unknown) counts for in a
 * GPU-idle answer, 0 for nothing (busy, unknown, or a fraction carried on); *t is moved to the
 * range's edge where a window's sample lies outside it.
 */
uint64_t idle_est_count(const struct idle_est *e, const struct node_est *ne,
			struct idle_dither *d, uint64_t *t, uint64_t value);

#endif
