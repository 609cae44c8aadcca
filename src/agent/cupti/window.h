/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Trace windows: when the agent opens a CUPTI window in a process and for how long, held to a
 * cost budget (--gpu-trace-budget, default 1 %). Pure logic (no I/O), so the controller is
 * tested against synthetic window costs; cupti_usdt.c drives it.
 */
#ifndef GPUSCOPE_CUPTI_WINDOW_H
#define GPUSCOPE_CUPTI_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

struct agent_opts;

/* Why a window was opened (the `reason` attribute of gpu_trace_window intervals). */
enum trace_reason {
	TRACE_NONE = 0,
	TRACE_BUDGET,		/* the duty cycle */
	TRACE_IDLE,		/* the GPU was idle for more than the trigger share */
	TRACE_CAPTURE,		/* on demand (gpuscope capture, the UI) */
	TRACE_CONTINUOUS,	/* --gpu-trace-budget 100%: always open */
	TRACE_SYNC,		/* the process's CUDA sync wait jumped */
	TRACE_REASONS,
};
extern const char *const trace_reason_names[];

struct trace_cfg {
	double budget;			/* long-run share of the process's time, 0.01 = 1 % */
	uint64_t window_ns;		/* length of a budget window (default 500 ms) */
	uint64_t min_window_ns;		/* shortest window the controller shrinks to */
	uint64_t min_period_ns;		/* no two budget windows closer than this */
	uint64_t max_period_ns;		/* past this, windows shrink instead of spacing out */
	uint64_t kernel_cost_ns;	/* CUPTI's cost of tracing one kernel; the launch probe's
					 * is measured (struct trace_cost) */
	uint64_t fixed_period_ns;	/* --gpu-trace-period: windows this far apart, whatever
					 * they cost (benchmarks); 0: from the budget */
	double idle_trigger;		/* GPU idle share over the last idle_span that opens a
					 * window; 0: off */
	double sync_trigger;		/* a process's share of time in CUDA synchronize calls over
					 * the last idle_span that opens a window when it is also
					 * SYNC_JUMP above the span before; 0: off */
	uint64_t idle_span_ns;
	uint64_t idle_cooldown_ns;	/* no idle-triggered window closer than this */
};

/* How far a process's sync-wait share must rise over the span before for the sync trigger. */
#define TRACE_SYNC_JUMP 0.25

/* Defaults; then the --gpu-trace-* options in o (if set). */
void trace_cfg_defaults(struct trace_cfg *c);

/*
 * Parses one agent option of the trace windows: `name` without dashes ("gpu-trace-budget",
 * "gpu-trace-window", "gpu-trace-period", "gpu-trace-kernel-cost", "gpu-trace-idle-trigger"),
 * val its argument.
 * Returns 1 if consumed, 0 if not ours, -EINVAL on a bad value (logged).
 */
int trace_parse_opt(struct trace_cfg *c, const char *name, const char *val);
extern const char trace_usage[];

/* What one closed window cost, as the agent saw it. */
struct trace_cost {
	uint64_t open_ns, close_ns;	/* the library's own time opening and closing (status probe) */
	uint64_t kernels;		/* kernel records received from the window */
	uint64_t length_ns;		/* how long it was open */
	uint64_t launches;		/* launch probe hits in the window */
	uint64_t probe_ns;		/* their measured BPF run time (the stack walks) */
};

/* What a uprobe hit costs besides its BPF program (trap, single-step, return): measured ~1.5 us
 * on x86-64 kernels of 2024-2026; the program's own time is measured per launch. */
#define TRACE_UPROBE_TRAP_NS 1500
/*
 * The launch probe's measured BPF time counts this many times over: a deep walk's cache misses
 * slow the interpreter after it too. On the H200 two GPT-2 decode windows (12-13 k launches,
 * ~25 us walks) cost 0.41 and 0.62 s of the process's time against 0.37 and 0.42 s modeled
 * with the walks counted once (bench/cupti/README.md, 2026-12-03).
 */
#define TRACE_PROBE_FACTOR 1.6
/* What one CPU sample costs the sampled thread: the on-CPU program's walk through native and
 * Python frames, 31-34 us on the H200 (bench/cupti/README.md) */
#define TRACE_SAMPLE_NS 35000
/* A launch probe's measured run time counts up to this (a 127-frame walk with Python frames
 * takes ~15 us on an H200 host; more is preemption of the probe, not its work). */
#define TRACE_PROBE_MAX_NS 50000

/* Per-process controller state. Zero-initialised: the first window opens at once. */
struct trace_budget {
	uint64_t next_open_ns;		/* earliest next budget window (CLOCK_MONOTONIC) */
	uint64_t window_ns;		/* length of the next budget window; 0: cfg's */
	uint64_t last_idle_ns;		/* last idle- or sync-triggered window */
	double cost_ns;			/* estimated cost of the last window */
	uint64_t spent_ns, elapsed_ns;	/* totals since the first window: cost, wall time */
	uint64_t first_open_ns;
	uint64_t windows, early_closes;
	double phase;			/* [0, 1): the spacing's jitter (trace_budget__closed()); a
					 * random start where the budget is made */
	double always_on;		/* share of the process's time the always-on parts cost it
					 * (driver probes, CPU sampler); set before each close */
};

/*
 * The share of a process's time its windows may cost: the budget less what the always-on
 * parts already cost it, but never under a tenth of the budget (windows still come, further
 * apart, where the always-on parts alone exceed the budget).
 */
double trace_budget__window_share(const struct trace_budget *b, const struct trace_cfg *c);

/* Estimated cost of a window (ns of the process's time). */
double trace_cost_ns(const struct trace_cfg *c, const struct trace_cost *w);

/*
 * A window that opened at open_ns closed with cost w: plans the next one (next_open_ns and the
 * next length) so that the long-run cost stays within the budget.
 */
void trace_budget__closed(struct trace_budget *b, const struct trace_cfg *c, uint64_t open_ns,
			  const struct trace_cost *w);

/* Length of the next budget window. */
uint64_t trace_budget__window_ns(const struct trace_budget *b, const struct trace_cfg *c);

/*
 * Inside a window (opened at open_ns, kernels so far seen through launches): should it close
 * now because it already cost more than the budget allows one window?
 */
bool trace_budget__overrun(const struct trace_budget *b, const struct trace_cfg *c,
			   uint64_t kernels, uint64_t probe_ns, uint64_t elapsed_ns);

/* Long-run cost share so far (spent / elapsed), for /metrics. */
double trace_budget__share(const struct trace_budget *b, uint64_t now_ns);

#endif
