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

struct agent;
struct batch;
struct http_link;
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
	long strip_event_rate;		/* --strip-event-rate: thread-state events a second a
					 * thread may make (sched.bpf.c); 0: no limit; < 0: 250 */
	const char *nvml_library;	/* --nvml-library; NULL: "libnvidia-ml.so.1" */
	bool no_gpu;			/* --no-gpu: skip NVML */
	const char *relabel_config;	/* --relabel-config FILE (meta.c); NULL: none */
	uint64_t nvml_interval_ns[6];	/* --nvml-*-interval per enum nvml_source; 0: default,
					 * UINT64_MAX: off (parsed by nvml_parse_opt()) */
	unsigned nvml_backoff;		/* --nvml-backoff; 0: default */
	const struct trace_cfg *trace;	/* --gpu-trace-* (cupti/window.h); NULL: defaults */
	bool cuda_launch_probes;	/* --cuda-launch-probes: uprobes on cuLaunch* always */
	const char *unwind_cache_dir;	/* --unwind-cache-dir (unwind/cache.h); NULL: the default,
					 * "off": none */
	uint64_t unwind_cache_max;	/* --unwind-cache-max; 0: the default */
};

/*
 * What one module learns that others need: the only way between the agent's modules, which never
 * call each other's functions nor include each other's headers. Each slot has one writer, named
 * first by its folder under src/agent/ (or run.c), then its readers; the writer fills its slots
 * in its start() and clears them in its stop(), and a reader checks the slot each time it needs
 * it (the writer may not run, or not yet). tests/integration/test_layout_module_headers.py
 * checks all three: calls (the objects' symbols), includes, and that only a slot's writer
 * assigns it. run.c owns the struct: it starts zeroed, and run.c creates the BPF maps several
 * modules share before any module starts (where nothing does, as in `record`, the slot stays 0
 * and each module keeps a map of its own). Main-loop thread.
 */
struct agent_shared {
	/*
	 * run.c: BPF map tid -> 1 while the thread is inside a synchronizing CUDA call (hash, __u32
	 * -> __u8, bpf_shared_maps__create()): cuda_probe's programs write it, sched's read it to
	 * name a blocked thread's reason. <= 0: none.
	 */
	int in_sync_map_fd;
	/* cpu: the sampler's rate while it runs, else 0. cupti: a window's budget counts it. */
	unsigned sampling_hz;
	/*
	 * gpu: NVML's index of the device with this CUDA UUID ("xxxxxxxx-xxxx-..." without the
	 * GPU-/MIG- prefix), -1 unknown. cupti: kernels go on NVML's GPU numbers.
	 */
	int (*gpu_index)(const char *uuid);
	/* gpu: the node's GPU idle share over the last span_ns (< 0: unknown). cupti: trigger */
	double (*gpu_idle_share)(uint64_t span_ns);
	/*
	 * cuda: pid's share of time in CUDA synchronize calls over the span ending at now_ns
	 * and over the span before it (*ret_before); < 0: not known. cupti: the sync trigger.
	 */
	double (*cuda_sync_share)(pid_t pid, uint64_t now_ns, uint64_t span_ns, double *ret_before);
	/*
	 * cuda: the share of pid's time over the last span_ns that the always-on driver
	 * probes cost it. cupti: a window's budget is what those and the CPU sampler leave.
	 */
	double (*cuda_probe_cost)(pid_t pid, uint64_t now_ns, uint64_t span_ns);
	/*
	 * cupti: the backward call (autograd Engine::execute) that process pid's thread tid works
	 * for, as the caller's raw user frames (valid until the next main-loop event); false when
	 * none is known. The stack cache (sym/stacks.c, agent__thread_stack()): an autograd
	 * thread's stack goes under its caller's.
	 */
	bool (*backward_caller)(struct agent *a, pid_t pid, uint32_t tid, const __u64 **frames,
				uint32_t *n);
};

struct agent {
	struct agent_opts opts;
	struct batch *batch;		/* where modules write; thread-safe, flushed by run.c */
	struct symbolizer *sym;		/* shared symbolizer; main-loop thread only */
	struct stack_cache *stacks;	/* raw frames -> symbolized locations (stacks.h); main loop only */
	struct unwinder *unwind;	/* shared BPF user-stack walker's maps and worker (unwind.h);
					 * created by agent__unwinder(), freed by run.c */
	bool unwind_tried;
	struct http_link *server;	/* the server's link (http_client.h): push and capture
					 * requests; made and freed by run.c */
	int64_t mono_to_wall_ns;	/* wall = bpf ktime (CLOCK_MONOTONIC) + this */
	uint64_t start_ns;		/* CLOCK_MONOTONIC when `run` started (start-time metrics) */
	struct agent_shared shared;	/* what modules hand each other (above) */
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
