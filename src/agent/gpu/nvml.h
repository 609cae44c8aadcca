/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVML/GPM poller: loads libnvidia-ml with dlopen(), finds every GPU (and MIG device), and
 * runs one thread that drains the driver's buffered samples and polls the rest at per-source
 * rates, handing each point to a sink (the agent's batch in `run`, a trace in `nvml-record`).
 */
#ifndef GPUSCOPE_NVML_H
#define GPUSCOPE_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "agent/gpu/nvml_api.h"
#include "common/batch.h"

struct agent_opts;

/* What each source reads and how often (ns); 0 turns a source off. */
enum nvml_source {
	NVML_SRC_SAMPLES = 0,	/* buffered utilization, memory-util and power samples */
	NVML_SRC_MEMORY,	/* memory used/total */
	NVML_SRC_GPM,		/* SM/tensor/DRAM activity, occupancy, PCIe/NVLink */
	NVML_SRC_SLOW,		/* clocks, GPU temperature, throttle reasons, Xid events */
	NVML_SRC_PROCESS,	/* per-process utilization samples and memory */
	NVML_SRC_FIELDS,	/* field values: energy counter, memory temperature */
	NVML_SRC_MAX,
};
extern const char *const nvml_source_names[NVML_SRC_MAX];

struct nvml_cfg {
	uint64_t interval_ns[NVML_SRC_MAX];
	/*
	 * Cadences that follow what changes: memory, GPM and slow (clocks, temperature, throttle)
	 * are read every interval while a reading of some device changes, and at up to backoff_max
	 * intervals while none does (doubling after two unchanged runs); 1: always every interval.
	 */
	unsigned backoff_max;
};
/* Defaults (docs/nvml.md says why): samples 1 s, memory 10 ms, GPM 100 ms, slow 100 ms,
 * process 1 s, fields 5 s; backoff up to 8 intervals. */
void nvml_cfg_defaults(struct nvml_cfg *c);
/* Defaults, overridden by the non-zero intervals in o (the --nvml-*-interval flags). */
void nvml_cfg_from_opts(struct nvml_cfg *c, const struct agent_opts *o);

/*
 * Parses one agent option that belongs to the NVML poller: `name` is the long option without
 * dashes ("nvml-library", "no-gpu", "nvml-samples-interval", "nvml-memory-interval",
 * "nvml-gpm-interval", "nvml-slow-interval", "nvml-process-interval",
 * "nvml-fields-interval", "nvml-backoff"), `val` its argument (NULL
 * for flags). Returns 1 if consumed, 0 if not an NVML option, -EINVAL on a bad value (logged).
 */
int nvml_parse_opt(struct agent_opts *o, const char *name, const char *val);
/* Help text for those options, one per line. */
extern const char nvml_usage[];

/* A loaded NVML: the resolved entry points and the names of the optional ones missing. */
struct nvml_lib {
	void *dl;
	struct nvml_fns f;
	char missing[1024];	/* comma-separated */
	int nmissing;
};
/*
 * dlopen()s path (NULL: "libnvidia-ml.so.1") and resolves NVML_FUNCS. Returns 0, or -ENOENT
 * with *why describing the failure (library absent, required function missing). The caller
 * frees with nvml_lib__close().
 */
int nvml_lib__open(const char *path, struct nvml_lib **ret, const char **why);
void nvml_lib__close(struct nvml_lib *l);

/* Where points go. Called from the poller thread only. */
struct nvml_sink {
	void *ctx;
	void (*metric)(void *ctx, const char *name, const struct label *labels, size_t n,
		       uint64_t time_ns, double value);
	void (*event)(void *ctx, const struct label *labels, size_t n, uint64_t time_ns,
		      const struct label *attrs, size_t nattrs);
};

struct nvml_poller;

/*
 * Calls nvmlInit_v2 through f (copied), discovers the GPUs and their supported sources.
 * mono_to_wall_ns: the agent's clock (wall = CLOCK_MONOTONIC + this). Returns NULL with errno
 * set: ENOENT when NVML does not initialise or there is no GPU (*why says which). Free with
 * nvml_poller__free(), which also calls nvmlShutdown.
 */
struct nvml_poller *nvml_poller__new(const struct nvml_fns *f, const char *missing,
				     const struct nvml_cfg *cfg, int64_t mono_to_wall_ns,
				     const struct nvml_sink *sink, const char **why);
int nvml_poller__ngpus(const struct nvml_poller *p);
/* Starts the poller thread. 0 or -errno. */
int nvml_poller__start(struct nvml_poller *p);
/* Runs every due source once at `now_mono_ns` on the caller's thread (tests, the recorder). */
void nvml_poller__poll(struct nvml_poller *p, uint64_t now_mono_ns);
/* Stops and joins the thread (if started). */
void nvml_poller__stop(struct nvml_poller *p);
void nvml_poller__free(struct nvml_poller *p);
/* Appends the Prometheus text-format exposition; resets the since-last-scrape windows. */
void nvml_poller__metrics(struct nvml_poller *p, FILE *out);
/* Human summary of achieved intervals and poller CPU time (nvml-record, benchmarks). */
void nvml_poller__summary(struct nvml_poller *p, FILE *out);

#endif
