// SPDX-License-Identifier: Apache-2.0
/*
 * The trace-window budget controller (window.h). A window's cost is what the library reported
 * spending to open and close CUPTI plus a per-kernel cost for what CUPTI and the launch probe
 * add to every traced kernel (measured on an H200: bench/cupti/README.md). The next budget
 * window opens cost / share after this one opened, where share is the budget less what the
 * always-on parts cost the process, so windows + always-on <= budget over any run of windows;
 * windows shrink when that spacing would pass max_period.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "agent/cupti/window.h"
#include "common/log.h"
#include "common/util.h"

const char *const trace_reason_names[] = { "none", "budget", "idle", "capture", "continuous",
					    "sync_wait" };

const char trace_usage[] =
	"      --gpu-trace-budget PCT     share of a CUDA process's time that gpuscope may cost it\n"
	"                                 (default 1%; 100% traces always): CUPTI windows get what\n"
	"                                 the always-on driver probes and CPU sampler leave\n"
	"      --gpu-trace-window DUR     length of a budget window (default 500ms)\n"
	"      --gpu-trace-period DUR     a window this often, whatever it costs (overrides the\n"
	"                                 budget's spacing; for measurements)\n"
	"      --gpu-trace-kernel-cost DUR  CUPTI's cost of tracing one kernel (default 3500ns,\n"
	"                                 H200); the launch probe's own cost is measured\n"
	"      --gpu-trace-idle-trigger PCT  open a window when a GPU was idle more than PCT of\n"
	"                                 the last 5 s (default 50%; 0 turns it off)\n"
	"      --gpu-trace-sync-trigger PCT  open a window when a process spent more than PCT of\n"
	"                                 the last 5 s in CUDA synchronize calls, 25 points\n"
	"                                 more than the 5 s before (default 50%; 0: off)\n";

void trace_cfg_defaults(struct trace_cfg *c)
{
	*c = (struct trace_cfg){
		.budget = 0.01,
		.window_ns = 500 * NSEC_PER_MSEC,
		.min_window_ns = 50 * NSEC_PER_MSEC,
		.min_period_ns = 5 * NSEC_PER_SEC,
		.max_period_ns = 60 * NSEC_PER_SEC,
		.kernel_cost_ns = 3500,
		.idle_trigger = 0.5,
		.sync_trigger = 0.5,
		.idle_span_ns = 5 * NSEC_PER_SEC,
		.idle_cooldown_ns = 30 * NSEC_PER_SEC,
	};
}

int trace_parse_opt(struct trace_cfg *c, const char *name, const char *val)
{
	uint64_t ns;
	double v;

	if (!strcmp(name, "gpu-trace-budget")) {
		if (parse_share(val, &v) || v <= 0) {
			log_error("--gpu-trace-budget: '%s' is not a share in (0, 100%%]", val);
			return -EINVAL;
		}
		c->budget = v;
		return 1;
	}
	if (!strcmp(name, "gpu-trace-idle-trigger") || !strcmp(name, "gpu-trace-sync-trigger")) {
		if (parse_share(val, &v)) {
			log_error("--%s: '%s' is not a share in [0, 100%%]", name, val);
			return -EINVAL;
		}
		if (name[10] == 'i')
			c->idle_trigger = v;
		else
			c->sync_trigger = v;
		return 1;
	}
	if (!strcmp(name, "gpu-trace-period")) {
		if (parse_duration_ns(val, &ns) || ns < 100 * NSEC_PER_MSEC) {
			log_error("--gpu-trace-period: '%s' is not a duration >= 100ms", val);
			return -EINVAL;
		}
		c->fixed_period_ns = ns;
		return 1;
	}
	if (!strcmp(name, "gpu-trace-window") || !strcmp(name, "gpu-trace-kernel-cost")) {
		bool win = name[10] == 'w';

		if (parse_duration_ns(val, &ns) || (win && ns < c->min_window_ns) ||
		    (!win && ns > NSEC_PER_SEC)) {
			log_error("--%s: '%s' is not a duration%s", name, val,
				  win ? " >= 50ms" : " <= 1s");
			return -EINVAL;
		}
		if (win)
			c->window_ns = ns;
		else
			c->kernel_cost_ns = ns;
		return 1;
	}
	return 0;
}

double trace_cost_ns(const struct trace_cfg *c, const struct trace_cost *w)
{
	return (double)w->open_ns + (double)w->close_ns + (double)w->kernels * c->kernel_cost_ns +
	       (double)w->probe_ns * TRACE_PROBE_FACTOR + (double)w->launches * TRACE_UPROBE_TRAP_NS;
}

uint64_t trace_budget__window_ns(const struct trace_budget *b, const struct trace_cfg *c)
{
	return b->window_ns ? b->window_ns : c->window_ns;
}

double trace_budget__window_share(const struct trace_budget *b, const struct trace_cfg *c)
{
	double share = c->budget - (b->always_on > 0 ? b->always_on : 0);

	return share > c->budget / 10 ? share : c->budget / 10;
}

void trace_budget__closed(struct trace_budget *b, const struct trace_cfg *c, uint64_t open_ns,
			  const struct trace_cost *w)
{
	double cost = trace_cost_ns(c, w), gap = cost / trace_budget__window_share(b, c);
	uint64_t len = trace_budget__window_ns(b, c);

	if (!b->windows++)
		b->first_open_ns = open_ns;
	b->cost_ns = cost;
	b->spent_ns += (uint64_t)cost;
	if (gap < (double)c->min_period_ns)
		gap = (double)c->min_period_ns;
	if (!c->fixed_period_ns) {
		/*
		 * Spacing x (0.5 + u), u from a golden-ratio sequence with a per-process random
		 * start: windows fall at no fixed phase of a periodic workload (an eval every
		 * minute, a checkpoint every ten), which the server's estimator needs to let a
		 * window stand for the time around it, while the mean spacing, so the budget,
		 * is kept over a few windows. At the shortest spacing: min_period x (1 + u).
		 */
		b->phase += 0.6180339887498949;
		b->phase -= (double)(uint64_t)b->phase;
		if (gap <= (double)c->min_period_ns)
			gap = (double)c->min_period_ns * (1 + b->phase);
		else
			gap *= 0.5 + b->phase;
	}
	if (gap < (double)c->min_period_ns)
		gap = (double)c->min_period_ns;
	b->next_open_ns = open_ns + (c->fixed_period_ns ? c->fixed_period_ns : (uint64_t)gap);
	if (c->fixed_period_ns)
		return;
	/*
	 * The jitter may bring a window early, never ahead of what the budget has earned since
	 * the first: every window so far is paid for before the next opens, so over any span from
	 * the first window the cost stays within the share of its length plus the window under
	 * way. Without it a new process paid about twice its budget over its first minute (the
	 * first window at once, the next up to half a spacing early): H100 training, 0.35 s of
	 * window cost in a fresh agent's first 33 s against 0.15 s earned.
	 */
	{
		uint64_t paid = b->first_open_ns +
				(uint64_t)((double)b->spent_ns / trace_budget__window_share(b, c));

		if (b->next_open_ns < paid)
			b->next_open_ns = paid;
	}
	/* keep windows at most max_period apart: shorter windows when each costs too much */
	if (gap > (double)c->max_period_ns)
		len = (uint64_t)((double)len * c->max_period_ns / gap);
	else if (gap < (double)c->max_period_ns / 2)
		len *= 2;
	if (len < c->min_window_ns)
		len = c->min_window_ns;
	if (len > c->window_ns)
		len = c->window_ns;
	b->window_ns = len;
}

bool trace_budget__overrun(const struct trace_budget *b, const struct trace_cfg *c,
			   uint64_t kernels, uint64_t probe_ns, uint64_t elapsed_ns)
{
	(void)b;
	(void)elapsed_ns;
	if (c->budget >= 1 || c->fixed_period_ns)
		return false;
	/* one window may spend what the budget earns over the longest spacing */
	return (double)kernels * (c->kernel_cost_ns + TRACE_UPROBE_TRAP_NS) +
		       (double)probe_ns * TRACE_PROBE_FACTOR >
	       c->budget * (double)c->max_period_ns;
}

double trace_budget__share(const struct trace_budget *b, uint64_t now_ns)
{
	if (!b->windows || now_ns <= b->first_open_ns)
		return 0;
	return (double)b->spent_ns / (double)(now_ns - b->first_open_ns);
}
