/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the findings engine (insights.h) shared by its files only: the facts gathered
 * for one (workload, GPU) from the store and the efficiency computation (gather.c), the
 * detectors that turn facts into findings (detect.c), the answer (engine.c) and the /metrics
 * counters (prom.c).
 */
#ifndef GPUSCOPE_INS_INT_H
#define GPUSCOPE_INS_INT_H

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/hmap.h"
#include "common/log.h"
#include "common/util.h"
#include "server/insights.h"
#include "server/query.h"
#include "server/selector.h"

#define INS_EVIDENCE_MAX_NS	(3600 * NSEC_PER_SEC)	/* CPU-side evidence: the range's last hour */
#define INS_INTERVALS_MAX	2000000			/* records read per kind and workload */
#define INS_FNS			3			/* functions named in a finding */
#define INS_EV_MAX		6			/* evidence items of a finding */

enum ins_kind {
	INS_INPUT_ON_LAUNCH,		/* input_on_launch_thread */
	INS_STARVED_LOADER,		/* starved_dataloader */
	INS_SYNC_PER_STEP,		/* host_sync_per_step */
	INS_LAUNCH_BOUND,		/* launch_bound */
	INS_SYNC_COPIES,		/* sync_copies */
	INS_NODE_IDLE,			/* node_idle */
	INS_HELD_UNUSED,		/* held_unused */
	INS_THROTTLED,			/* throttled */
	INS_KIND_MAX
};

extern const char *const ins_kind_names[INS_KIND_MAX];

/* A function (the innermost Python frame of its stacks where there is one) and its share. */
struct ins_fn {
	char name[192];			/* "tokenize (train.py:42)" or a native name */
	double value;			/* samples or ns */
	double share;			/* of the set it was ranked in */
};

/* What the detectors know of one (workload, GPU): filled by ins_gather(). Seconds. */
struct ins_facts {
	/* the request and the workload */
	uint64_t from_ns, to_ns;	/* the request's range */
	uint64_t ev_from_ns, ev_to_ns;	/* the CPU-side evidence's span (at most the last hour) */
	const char *by, *workload, *wl_selector;	/* {by="x"} */
	char sel_node[1024];		/* {by="x",node="n"} */
	char sel_procs[1024];		/* {node="n",pid=~"p1|p2"}: its GPU processes there */
	char sel_thread[1200];		/* ...,tid="L"} (the launching thread), "" if none */
	const char *node, *gpu, *model;
	double price;			/* dollars per GPU-hour; NAN: none */
	double wl_held_s;		/* the workload's held GPU time, all its GPUs */
	/* efficiency tallies of this GPU held by the workload, over the whole range */
	double held_s, busy_s, idle_s, unknown_s;
	/* CPU-side evidence (the span) */
	bool cpu_side;			/* gathered (the GPU was idle enough in the span) */
	bool truncated;			/* a read of records stopped at INS_INTERVALS_MAX */
	double seg_idle_s;		/* idle GPU time in the span (idle-weighted pieces) */
	char launch_pid[32], launch_tid[32];	/* the thread that launches kernels */
	bool launch_seen;		/* found by its cuLaunch* calls (else: the main thread) */
	double launches;		/* cuLaunch* calls of the workload in the span */
	double run_idle_s;		/* the launching thread running or runnable during idle */
	double blocked_idle_s;		/* ... blocked (not in a CUDA sync) during idle */
	char blocked_reason[32];	/* its most common reason */
	double launchers;		/* threads of the launching side (>= 10 % of the top
					 * launcher's launches), the launching thread included */
	double helpers_run_idle_s;	/* the side's other threads of the launching thread's
					 * process running during idle (thread-seconds: autograd's
					 * device thread) */
	double others_run_idle_s;	/* the workload's threads off the launching side (of any
					 * process) running during idle (thread-seconds) */
	double no_cpu_idle_s;		/* idle time with no thread of the workload running */
	double period_s;		/* the node's CPU sampling period (0: unknown) */
	double idle_samples;		/* the launching thread's CPU samples while idle */
	double fw_samples;		/* ... of them in CUDA / framework code at the leaf */
	struct ins_fn fns[INS_FNS];	/* top functions of the rest */
	size_t nfns;
	double est_share;		/* of those samples, the share the estimator stood for */
	bool est_set;
	char est_summary[512];
	double node_cpu_s;		/* CPU time of every process of the node during idle */
	bool node_cpu_set;		/* ... read (only where a detector needs it) */
	struct ins_fn blocked_fn;	/* where the launching thread blocked during idle */
	double sync_calls, sync_s;	/* host syncs of the launching thread (incl. small DtoH) */
	double sync_one, sync_ticked;	/* ... calls recorded one by one, counted per tick */
	double gap_idle_s;		/* whole-idle gaps (where a source decided whole idle) */
	double sync_follow_idle_s;	/* ... of them, those that began right before a draining
					 * sync returned (the step it ended) */
	double sync_seen;		/* syncs (one call each) whose return a source decided:
					 * inside or right before a whole-idle gap */
	double sync_drained;		/* ... of them, those the GPU went idle in (or just
					 * before): they waited for the GPU's work to finish */
	struct ins_fn sync_fn;
	double copy_calls, copy_s;	/* host<->device copies that held the launching thread */
	double copy_idle_s;		/* ... overlapping GPU idle */
	double copy_bytes, copy_gpu_s;	/* their bytes and GPU time where traced */
	struct ins_fn copy_fn;
	double kernels, kernel_s;	/* kernels of the workload on this GPU inside windows */
	double traced_s;		/* the GPU's trace windows in the span */
	/* NVML over the span */
	double span_busy_s;		/* busy by gpu_utilization */
	double throttled_busy_s;	/* busy while a power/thermal reason held the clocks */
	double throttle_loss_s;		/* ... times the clock's shortfall from its range max */
	unsigned throttle_mask;		/* the reasons seen (NVML clocks-event bits) */
};

struct ins_ev {
	char label[256];
	double value;
	const char *unit;		/* share | seconds | count | per_step */
	char api[1024], ui[1024];
};

struct finding {
	enum ins_kind kind;
	char workload[256], selector[1024], node[256], gpu[32];
	bool has_gpu;
	double stake_s, dollars, share_of_held;	/* dollars NAN: no price */
	const char *confidence;		/* measured | estimated | low */
	double est_share;
	char title[256], summary[1024], recommendation[512];
	struct ins_ev ev[INS_EV_MAX];
	size_t nev;
};

struct findings {
	struct finding *v;
	size_t n, cap;
};

struct insights {
	struct store *st;
	struct efficiency *e;
	struct insights_cfg cfg;
	pthread_mutex_t mu;		/* /metrics counters */
	struct ins_prom *prom;
};

/* gather.c */
struct ins_cache;
/* Fills f's CPU-side and NVML facts for the workload w's GPU g (f's request fields and its
 * GPU time set; the idle pieces from ps, efficiency_idle_pieces() of the evidence's span).
 * 0, -ENAMETOOLONG (a label value too long for the evidence's selectors: what was gathered
 * is partial) or -errno. */
int ins_gather(struct insights *in, const struct eff_piece_set *ps, struct ins_cache *cache,
	       const struct eff_workload *w, const struct eff_wl_gpu *g, struct ins_facts *f);
/* What one workload's threads did on one node, kept across its GPUs there (ins_gather() reads
 * it again when the workload or the node changes). NULL on ENOMEM. */
struct ins_cache *ins_cache_new(void);
void ins_cache_free(struct ins_cache *c);

/* stacks.c */
#define FN_LINES 4			/* lines of one function told apart; more: the first 4 */

struct fn_lines {
	uint32_t line[FN_LINES];
	double v[FN_LINES];
};

/* Stacks ranked by function (a Python function by file, named at its busiest line). */
struct fn_rank {
	struct strtab names;
	double *v;
	struct fn_lines *lines;
	size_t cap;
	double total, fw;
	bool classify;			/* framework stacks counted in fw, not named */
	const struct u64map *agg;	/* stack id -> value; NULL: values from by_stack */
	struct u64map *by_stack;	/* stack id -> value as double bits */
};

/* Ranks the stacks of agg (stack id -> value), or of by_stack (values as double bits), by
 * function; the top n into out with their shares of the total (r->classify: framework stacks
 * only counted, in r->fw). 0 or -errno. */
int ins_rank(struct store *st, const struct u64map *agg, struct u64map *by_stack,
	     struct fn_rank *r, struct ins_fn *out, size_t n, size_t *ret_n);
void ins_rank_done(struct fn_rank *r);

/* detect.c */
/* Whether f's GPU is idle enough for the CPU-side facts, busy enough for throttling's. */
bool ins_wants_cpu_side(const struct ins_facts *f);
bool ins_wants_throttle(const struct ins_facts *f);
/* Whether a detector could use the launching thread's GPU-idle samples, its blocked stacks, the
 * node's CPU time, the GPU's kernels, given the thread states gathered so far. */
bool ins_needs_samples(const struct ins_facts *f);
bool ins_needs_blocked(const struct ins_facts *f);
bool ins_needs_node_cpu(const struct ins_facts *f);
bool ins_needs_kernels(const struct ins_facts *f);
/* What the rules compare (shares of the GPU's idle time in the span unless said) and which
 * fired: filled by ins_derive(), the one place they are computed (detectors and facts=1). */
struct ins_derived {
	double span_s;			/* the evidence span */
	double busy;			/* the GPU's busy share of its observed time */
	bool checked;			/* idle enough for the CPU-side rules, and gathered */
	double on_cpu;			/* the launching thread running or runnable */
	double side_on_cpu;		/* ... with the side's other threads (capped at 1) */
	double fw, user;		/* its GPU-idle samples in CUDA/framework code, the rest */
	double blocked_raw;		/* the launching thread blocked (not sleep, not a sync) */
	double blocked;			/* ... less the time its side's other threads ran */
	double workers;			/* threads off the launching side running (thread-s/s) */
	double helpers;			/* the side's other threads running (thread-s/s) */
	double node_cpu;		/* the node's CPUs (cores) */
	double node_others;		/* ... less the launching side's own running time */
	double nocpu;			/* no thread of the workload on a CPU */
	double sync_steps;		/* its host syncs as steps: .item() makes a small
					 * device-to-host copy (counted per tick) and a stream sync
					 * (one by one): the larger count of the two kinds */
	double sync_rate;		/* ... per second */
	double drain;			/* of its syncs seen, the share that drained the GPU
					 * (0: fewer than SYNC_MIN_SEEN seen) */
	double follow;			/* whole-idle gap time in steps ending with one */
	double copy_idle;		/* blocking copies overlapping idle */
	double mean_us;			/* mean traced kernel */
	bool thr, held, sy, cp, lb, in, st, ni;	/* the rules that fire */
};

void ins_derive(const struct ins_facts *f, struct ins_derived *d);
/* Appends f and what the rules made of it as a JSON object (facts=1; docs/insights.md). */
void ins_facts_json(struct buf *b, const struct ins_facts *f);
/* Runs every detector over f; appends the findings to out. 0 or -ENOMEM. */
int ins_detect(const struct ins_facts *f, struct findings *out);
/* Appends a URL-encoded copy of s to b (form: space as '+', as the UI's URLSearchParams). */
void ins_url_enc(struct buf *b, const char *s, bool form);

/* prom.c */
struct ins_prom;
struct ins_prom *ins_prom_new(void);
void ins_prom_free(struct ins_prom *p);
/* Adds one window's findings to the counters (the top workloads re-slotted first). 0 or
 * -ENOMEM. */
int ins_prom_add(struct ins_prom *p, const struct findings *fs, size_t top);
/* Counts the findings of [last end, end_ns) once that window is 5 minutes long (mu held).
 * 0 or -errno (the window is counted at a later call). */
int ins_prom_count(struct insights *in, uint64_t end_ns);
/* Writes gpuscope_server_insight_gpu_seconds_total (mu held). */
void ins_prom_write(struct ins_prom *p, FILE *out);

/* engine.c */
/* Findings of [from, to) over every workload (by, selector), sorted by dollars then GPU-seconds;
 * *ret_workloads the workloads checked; each workload GPU's facts appended to facts unless
 * NULL. 0 or efficiency_workloads()'s errors. */
int ins_run(struct insights *in, const struct insights_request *r, struct findings *out,
	    struct buf *facts, size_t *ret_workloads, char *err, size_t errlen);

#endif /* GPUSCOPE_INS_INT_H */
