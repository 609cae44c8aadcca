/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's shared state for `run` (continuous) mode and the module interface each data
 * source implements: CPU sampler, thread states, CUDA uprobes, CUPTI USDT, NVML poller.
 */
#ifndef GPUSCOPE_AGENT_H
#define GPUSCOPE_AGENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <linux/types.h>

struct batch;
struct symbolizer;
struct stack_cache;
struct trace_cfg;
struct unwinder;

#define AGENT_MAX_PIDS 64

struct agent_opts {
	const char *node;		/* node label; default: hostname */
	unsigned frequency_hz;		/* CPU sampling, default 99 */
	pid_t pids[AGENT_MAX_PIDS];	/* --pid filter; npids == 0: all processes */
	int npids;
	bool all_processes;		/* --all-processes (thread states of every process) */
	double offcpu_walk_share;	/* --offcpu-walk-share: the share of a thread's time its
					 * switch-out stack walks may take (sched.bpf.c); 0: every
					 * one walked; < 0: the default (0.1 %) */
	const char *nvml_library;	/* --nvml-library; NULL: "libnvidia-ml.so.1" */
	bool no_gpu;			/* --no-gpu: skip NVML */
	const char *relabel_config;	/* --relabel-config FILE (meta.c); NULL: none */
	uint64_t nvml_interval_ns[6];	/* --nvml-*-interval per enum nvml_source; 0: default,
					 * UINT64_MAX: off (parsed by nvml_parse_opt()) */
	const struct trace_cfg *trace;	/* --gpu-trace-* (cupti/window.h); NULL: defaults */
	bool cuda_launch_probes;	/* --cuda-launch-probes: uprobes on cuLaunch* always */
	const char *server;		/* --server URL (capture requests come from there) */
	const char *token_file;		/* --token-file */
	const char *ca_file;		/* --ca-file: the PEM CA for an https:// server */
};

struct agent {
	struct agent_opts opts;
	struct batch *batch;		/* where modules write; thread-safe, flushed by run.c */
	struct symbolizer *sym;		/* shared symbolizer; main-loop thread only */
	struct stack_cache *stacks;	/* raw frames -> symbolized locations (stacks.h); main loop only */
	/*
	 * The backward call (autograd Engine::execute) process pid's thread tid works for, as the
	 * caller's raw user frames (valid until the next main-loop event): false when none is
	 * known. Set by the cupti module while it runs (records.c), NULL otherwise. Main loop.
	 */
	bool (*backward_caller)(struct agent *a, pid_t pid, uint32_t tid, const __u64 **frames,
				uint32_t *n);
	struct unwinder *unwind;	/* shared BPF user-stack walker's maps and worker (unwind.h);
					 * created by agent__unwinder(), freed by run.c */
	bool unwind_tried;
	int64_t mono_to_wall_ns;	/* wall = bpf ktime (CLOCK_MONOTONIC) + this */
	uint64_t start_ns;		/* CLOCK_MONOTONIC when `run` started (start metrics) */
	unsigned sampling_hz;		/* the CPU sampler's rate while it runs, else 0 */
	volatile bool stopping;
};

/*
 * A data source. start() returns 0, or -ENOTSUP/-ENOENT when the source is unavailable here
 * (the agent logs one line and runs without it), or another -errno (fatal). tick() is called
 * from the main loop every ~50 ms to drain buffers into a->batch. metrics() appends
 * Prometheus text-format lines for the agent's /metrics. Any callback may be NULL.
 */
struct agent_module {
	const char *name;
	int (*start)(struct agent *a);
	int (*tick)(struct agent *a);
	void (*stop)(struct agent *a);
	void (*metrics)(struct agent *a, FILE *out);
};

#endif
