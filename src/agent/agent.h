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

struct batch;
struct symbolizer;
struct label;
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
	const char *nvml_library;	/* --nvml-library; NULL: "libnvidia-ml.so.1" */
	bool no_gpu;			/* --no-gpu: skip NVML */
	const char *relabel_config;	/* --relabel-config FILE (meta.c); NULL: none */
	uint64_t nvml_interval_ns[6];	/* --nvml-*-interval per enum nvml_source; 0: default,
					 * UINT64_MAX: off (parsed by nvml_parse_opt()) */
	const struct trace_cfg *trace;	/* --gpu-trace-* (cupti/window.h); NULL: defaults */
	bool cuda_launch_probes;	/* --cuda-launch-probes: uprobes on cuLaunch* always */
	const char *server;		/* --server URL (capture requests come from there) */
	const char *token_file;		/* --token-file */
};

struct agent {
	struct agent_opts opts;
	struct batch *batch;		/* where modules write; thread-safe, flushed by run.c */
	struct symbolizer *sym;		/* shared symbolizer; main-loop thread only */
	struct stack_cache *stacks;	/* raw frames -> symbolized locations (stacks.h); main loop only */
	struct unwinder *unwind;	/* shared BPF user-stack walker's maps and worker (unwind.h);
					 * created by agent__unwinder(), freed by run.c */
	bool unwind_tried;
	int64_t mono_to_wall_ns;	/* wall = bpf ktime (CLOCK_MONOTONIC) + this */
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

/*
 * The labels of a sample or interval of process pid (thread tid; 0 for process-wide records):
 * node, pid, comm (the process's name), and when tid != 0 also tid and thread (the thread's
 * name, i.e. `comm` as given: the kernel's task comm of tid); then container/pod/namespace
 * from meta__pid_labels() when the k8s module is linked. `comm` is the name the caller has
 * (BPF's task comm); for tid != pid the process name is read from /proc/PID/comm (cached,
 * bounded) and falls back to `comm` if the process is gone. Returns the number of labels
 * written (<= max), or 0 when a relabel rule drops the process: the caller then sends nothing
 * for it (and counts it). The strings stay valid until the next call on the same thread (and as
 * long as the agent for node). Any thread.
 */
size_t agent__pid_labels(struct agent *a, pid_t pid, pid_t tid, const char *comm,
			 struct label *ret, size_t max);

/*
 * Container/pod/namespace labels of pid (src/agent/meta/meta.c, the k8s module). Weak: NULL when
 * not linked. Returns the number of labels written (<= max); the strings belong to meta.c.
 */
size_t meta__pid_labels(pid_t pid, struct label *ret, size_t max) __attribute__((weak));

#endif
