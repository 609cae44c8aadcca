/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU efficiency per workload (docs/efficiency.md): for each (node, GPU) and each process that
 * held it, GPU time held, busy, idle and unknown, decided per range by the best busy source
 * (kernels inside trace windows, GPM, NVML utilization), grouped by a workload label and priced per
 * GPU-hour; plus the CPU causes of the idle time. Hours that have passed are kept in an
 * in-memory hourly rollup built by a background thread, so a 30-day answer reads the rollup and
 * computes only the partial hours at both ends from stored records.
 */
#ifndef GPUSCOPE_EFFICIENCY_H
#define GPUSCOPE_EFFICIENCY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "server/codec.h"
#include "server/store/store.h"

struct Gpuscope__V1__Batch;
struct selector;

enum eff_src { EFF_KERNELS, EFF_GPM, EFF_NVML, EFF_SRC_MAX };

/* GPU time of one (GPU, holder), nanoseconds (fractional where a utilization source decided). */
struct eff_tally {
	double held;			/* with a holder; for the unheld entry: time observed */
	double busy[EFF_SRC_MAX], idle[EFF_SRC_MAX];	/* by the source that decided */
	double unknown;			/* no source covered it */
};

struct eff_price {
	char *model;			/* NULL: the default price */
	double dollars;			/* per GPU-hour */
};

struct eff_cfg {
	struct eff_price *prices;	/* --gpu-hour-price, in order given */
	size_t nprices;
	uint64_t settle_ns;		/* hours (and export windows) close this far behind now */
	uint64_t raw_retention_ns;	/* samples older than this lost their times (no causes) */
	bool no_rollup;			/* no background rollup (tests of the raw path) */
};

/*
 * Adds one --gpu-hour-price argument: "3.50" (every GPU) or "MODEL=3.50" (GPUs whose gpu_model
 * label is MODEL). 0, or -EINVAL with a reason in err.
 */
int eff_cfg_add_price(struct eff_cfg *c, const char *arg, char *err, size_t errlen);
void eff_cfg_done(struct eff_cfg *c);

struct efficiency;

/* Starts the rollup thread over st. NULL with errno. Free with efficiency_free(). */
struct efficiency *efficiency_new(struct store *st, const struct eff_cfg *cfg);
void efficiency_free(struct efficiency *e);

struct eff_request {
	uint64_t from_ns, to_ns;
	const char *by;			/* workload label: namespace, pod, comm, pid, ... */
	const char *selector;		/* NULL or "": everything */
	size_t causes;			/* rows (by idle cost) that get causes; 0: none */
};

/*
 * The efficiency answer (docs/efficiency.md) appended to out. 0; -EINVAL (bad or empty by, bad
 * selector), -E2BIG (a selector regex past its matching limits), -ETIMEDOUT (the selector's 2 s
 * budget) or -ENODATA (no GPU data in the range) with a reason in err; other -errno from the
 * store.
 */
int efficiency_query(struct efficiency *e, const struct eff_request *r, struct buf *out,
		     char *err, size_t errlen);

/* One workload of an answer as structs (efficiency_workloads()); valid during the callback. */
struct eff_wl_gpu {
	const char *node, *gpu, *model;	/* model "" when unknown */
	uint32_t id;			/* for efficiency_idle_segments() */
	struct eff_tally t;		/* the workload's time on it */
	double price;			/* dollars per GPU-hour; NAN: no price */
};

struct eff_wl_holder {
	const char *node, *pid, *comm;
};

struct eff_workload {
	const char *key;		/* the by label's value; "(none)" */
	bool none;			/* its processes lack the label */
	const char *selector;		/* {by="key"}, or its processes' pids when none */
	struct eff_tally t;
	double held_dollars, idle_dollars;	/* NAN: unpriced */
	const struct eff_wl_gpu *gpus;
	size_t ngpus;
	const struct eff_wl_holder *holders;
	size_t nholders;
	const void *priv;		/* the efficiency's own row */
};

/*
 * The rows of efficiency_query()'s answer (same checks, errors and order, no causes), each
 * passed to cb. 0, the errors of efficiency_query() or cb's nonzero return.
 */
int efficiency_workloads(struct efficiency *e, const struct eff_request *r,
			 int (*cb)(void *ctx, const struct eff_workload *w), void *ctx, char *err,
			 size_t errlen);

/* A piece of GPU time and its idle fraction (0..1]. */
struct eff_idle_seg {
	uint64_t s, e;
	double idle;
};

/*
 * The idle pieces of GPU gpu (an eff_wl_gpu id of w) while w's processes held it, over
 * [from, to) from stored records, sorted by start (during efficiency_workloads()'s callback).
 * *ret malloc'ed (free()). 0 or -errno.
 */
int efficiency_idle_segments(struct efficiency *e, const struct eff_workload *w, uint32_t gpu,
			     uint64_t from, uint64_t to, struct eff_idle_seg **ret, size_t *ret_n);

/* Tells the rollup that a batch was stored: hours it touches that were rolled up are redone. */
void efficiency_ingested(struct efficiency *e, const struct Gpuscope__V1__Batch *m);

/* One row of a window's answer, for the /metrics exporter. */
struct eff_row {
	const char *namespace_, *pod;	/* "" when the holder has none */
	bool unheld;			/* the time nobody held (namespace_, pod "") */
	struct eff_tally t;
	double idle_dollars, unheld_dollars;
};

/*
 * Computes [from, to) from stored records and calls cb once per (namespace, pod) and once for
 * the unheld time. 0, -errno or cb's nonzero return.
 */
int efficiency_window(struct efficiency *e, uint64_t from_ns, uint64_t to_ns,
		      int (*cb)(void *ctx, const struct eff_row *row), void *ctx);

/* Rollup progress for /metrics: hours rolled up, hours waiting to be redone. */
void efficiency_stats(struct efficiency *e, uint64_t *ret_hours, uint64_t *ret_dirty,
		      uint64_t *ret_lag_hours);

#endif
