/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of GPU efficiency (efficiency.h) shared by its files only: the GPU and holder tables,
 * segment lists, the accumulators of the raw computation, the hourly rollup and the grouped rows.
 */
#ifndef GPUSCOPE_EFF_INT_H
#define GPUSCOPE_EFF_INT_H

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/batch.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/efficiency.h"
#include "server/query.h"
#include "server/selector.h"

#define HOUR_NS		(3600 * NSEC_PER_SEC)
#define UTIL_CAP_NS	NSEC_PER_SEC		/* a utilization sample speaks for at most 1 s */
#define HOLD_CAP_NS	(10 * NSEC_PER_SEC)	/* a process sample, at most 10 s */
#define MAX_IDS		(1u << 20)		/* GPUs and holders the tables can name */
#define ROLL_MAX_NS	(24 * HOUR_NS)		/* hours rolled up in one pass while catching up */
#define CAUSE_FUNCS	5
#define CAUSE_INTERVALS	2000000			/* thread states read per causes row */

struct gpu_info {
	char *node, *gpu, *uuid, *model;
};

struct holder_info {
	char *node, *pid, *comm;
};

struct hour_ent {
	uint32_t gpu, holder;		/* holder 0: nobody */
	struct eff_tally t;
};

struct hour_roll {
	struct hour_ent *v;
	size_t n;
	bool done, dirty;
};

struct efficiency {
	struct store *st;
	struct eff_cfg cfg;

	pthread_mutex_t tmu;		/* tables (only grow) */
	struct strtab gpu_keys;
	struct u64map holder_ids;	/* hash of "node\x01pid\x01comm" -> holder id */
	size_t nholders;
	struct gpu_info *gpus;		/* index = id */
	struct holder_info *holders;	/* index = id - 1 */
	size_t capg, caph;

	pthread_mutex_t rmu;		/* rollup */
	pthread_cond_t rcond;
	struct hour_roll *hours;	/* index = hour - r_start */
	size_t nhours;
	uint64_t r_start;		/* first hour (Unix ns, hour-aligned); 0: not started */
	uint64_t r_wm;			/* hours before this were rolled up once */
	pthread_t thread;
	bool stopping, started;
};

struct seg {
	uint64_t s, e;
	double v;
};

struct seglist {
	struct seg *v;
	size_t n, cap;
};

struct pt {
	uint64_t t;
	double v;
};

struct sbuf {
	uint32_t gpu, holder;		/* holder 0: a utilization series */
	int src;
	double scale;
	uint64_t cap_ns;
	struct pt *p;
	size_t n, cap;
};

struct hold {
	uint32_t holder;
	struct seglist segs;
};

struct gdat {
	bool seen;
	struct seglist win, busy, util[EFF_SRC_MAX];
	struct hold *holds;
	size_t nholds;
};

/* One elementary piece of a GPU's time, for callers that want more than the tallies. */
struct piece {
	uint32_t gpu;
	uint64_t s, e;
	int src;			/* -1: unknown */
	double busy;			/* fraction 0..1 */
	const uint32_t *holders;
	size_t nholders;
};

typedef int (*piece_cb)(void *ctx, const struct piece *p);

struct acc {
	struct u64map idx;		/* key -> index + 1 */
	struct hour_ent *v;
	uint32_t *hour;			/* per entry: hour index (only by_hour) */
	size_t n, cap;
	bool by_hour;
};

struct collect {
	struct efficiency *e;
	struct sbuf *s;
	size_t n, cap;
	struct u64map sidx;		/* store series id -> index + 1 */
	int src;			/* of the series being read; -1: holder series */
	double scale;
	struct gdat *g;
	size_t ng;
	int64_t only_gpu;		/* >= 0: ignore other GPUs */
	uint64_t from, to;
	int err;
};

struct hlabels {
	char ***pairs;			/* per holder id: merged label pairs (malloc'ed block) */
	size_t *n;
	size_t cap;
};
struct row_gpu {
	uint32_t gpu;
	struct eff_tally t;
};

struct row {
	char *key;			/* workload value, "(none)" */
	bool none;
	struct eff_tally t;
	double held_dollars, idle_dollars, unpriced_ns;
	struct row_gpu *g;
	size_t ng;
	uint32_t *holders;
	size_t nholders;
	char **common;			/* labels every holder shares (subset of wanted names) */
	size_t ncommon;
};

struct eff_ans {
	struct row *rows;
	size_t nrows;
	struct row_gpu *unheld;
	size_t nunheld;
	struct hlabels hl;
	size_t nwant;
};

/* answer.c */
double eff_idle_of(const struct eff_tally *t);
const char *eff_best_source(const struct eff_tally *t);

/* causes.c */
/* Builds the selector text of a row: its `by` label, or its processes when it has none. */
void eff_row_selector(struct efficiency *e, const struct row *r, const char *by,
		      const char *node, struct buf *out);
void eff_json_ms(struct buf *b, uint64_t ns);
/*
 * Causes of one row: its GPU with the most idle time; top functions of the row's CPU samples
 * while that GPU was idle (the store's GPU-idle filter, as the flame graph), blocked time by
 * reason and the idle share with no thread of the row running, over the part of the range
 * whose samples still carry their time (raw retention).
 */
int eff_causes(struct efficiency *e, const struct row *r, const char *by, uint64_t from,
	       uint64_t to, struct buf *out);

/* compute.c */
/*
 * Grows the zero-filled array *p of *cap elements of size bytes so that index i exists (doubling
 * from 64). 0 or -ENOMEM (the array is unchanged).
 */
int eff_grow_to(void **p, size_t *cap, size_t i, size_t size);
const char *eff_pair_get(const char *const *pairs, size_t n, const char *name);
/* Holder id (>= 1) of a known process, 0 if none. (tmu held) */
uint64_t eff_holder_find(struct efficiency *e, const char *node, const char *pid,
			 const char *comm);
int eff_seg_add(struct seglist *l, uint64_t s, uint64_t e, double v);
/* Sorts and merges overlapping or touching segments into their union (value 1). */
void eff_seg_union(struct seglist *l);
void eff_acc_done(struct acc *a);
struct eff_tally *eff_acc_get(struct acc *a, uint32_t hour, uint32_t gpu, uint32_t holder);
void eff_tally_add(struct eff_tally *d, const struct eff_tally *s, double k);
/*
 * Computes [from, to) from stored records: tallies into out (by hour when out->by_hour), and
 * every piece to cb when given. only_gpu >= 0 restricts to that GPU id.
 */
int eff_compute_raw(struct efficiency *e, uint64_t from, uint64_t to, int64_t only_gpu,
		    struct acc *out, piece_cb cb, void *ctx);

/* rollup.c */
/* Tallies of [from, to): whole rolled-up hours from the rollup, the rest from records. */
int eff_gather(struct efficiency *e, uint64_t from, uint64_t to, struct acc *out,
	       uint64_t *ret_rolled_ns);

#endif /* GPUSCOPE_EFF_INT_H */
