/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the NVML/GPM poller (nvml.h) shared by its files only: the per-GPU state and its
 * gauges, used by the polling (nvml_poll.c), GPU discovery (nvml_gpus.c) and /metrics
 * (nvml_prom.c).
 */
#ifndef GPUSCOPE_NVML_INT_H
#define GPUSCOPE_NVML_INT_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/gpu/nvml.h"
#include "agent/labels.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"

#define MAX_GPUS	 64	/* physical GPUs plus MIG devices */
#define SAMPLE_CAP	 256	/* driver samples read per GetSamples call */
#define PROC_CAP	 64	/* processes per GPU per call */
#define PROC_UTIL_MAX	 4096	/* per-process utilization samples per call */
#define WIN_CAP		 4096	/* samples kept between two scrapes, for max/p99 */
#define BUSY_GAP_CAP_US	 1000000ULL	/* a util sample covers at most 1 s before it */
#define SKEW_MIN_NS	 NSEC_PER_MSEC	/* correct NVML timestamps for wall-clock steps above 1 ms */
#define BACKOFF_MIN_NS	 (100 * NSEC_PER_MSEC)
#define BACKOFF_MAX_NS	 (10 * NSEC_PER_SEC)
#define FAILS_TO_BACKOFF 3
#define UTIL_DRAIN_EVERY 4	/* utilization buffers drained every 4th run (4 s at 1 s) */
#define BACKOFF_AFTER	 2	/* unchanged runs of a source before its interval doubles */
#define GPM_SAME_DELTA	 0.05	/* a GPM ratio (0..1) that moved less than this is the same */
#define TEMP_SAME_DELTA	 2	/* degrees C */

enum stream { ST_POWER = NVML_TOTAL_POWER_SAMPLES, ST_UTIL = NVML_GPU_UTILIZATION_SAMPLES,
	      ST_MEMUTIL = NVML_MEMORY_UTILIZATION_SAMPLES, ST_MAX };

/* Gauges for /metrics, in the order of gauge_defs. NAN: never read. */
enum gauge { G_UTIL, G_MEMUTIL, G_POWER, G_FB_USED, G_FB_FREE, G_FB_TOTAL, G_SM_CLOCK,
	     G_MEM_CLOCK, G_TEMP, G_MEM_TEMP, G_ENERGY, G_THROTTLE, G_SM_ACTIVE, G_SM_OCC,
	     G_TENSOR, G_DRAM, G_PCIE_TX, G_PCIE_RX, G_NVL_TX, G_NVL_RX, G_MAX };
/* Values since the last scrape, for max and p99; the oldest are overwritten when full. */
struct window {
	double v[WIN_CAP];
	uint32_t n, next;
};

/* Achieved interval of one series: gaps between successive timestamps. */
struct gaps {
	uint64_t n, last_ns, min_ns, max_ns;
	double sum_ns;
};

struct gpu_stats {	/* guarded by poller.mu */
	double g[G_MAX];
	double busy_s, idle_s, sampled_s;	/* from utilization samples */
	uint64_t samples[ST_MAX];		/* driver samples delivered */
	uint64_t dups[ST_MAX];			/* repeated timestamps dropped */
	uint64_t holes[ST_MAX];			/* gaps > 3x the usual spacing: lost samples? */
	uint64_t errors, lost_backoffs, events;
	struct gaps gaps[ST_MAX + NVML_SRC_MAX];	/* per stream, then per polled source */
	struct window w_util, w_power;
};

struct gpu {
	nvmlDevice_t h;
	int parent;			/* -1, or the index in gpus[] of a MIG device's GPU */
	unsigned mig_index;
	char idx[16], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	char parent_uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	struct label lab[4];		/* gpu, gpu_uuid[, gpu_model][, mig_uuid] */
	size_t nlab;
	bool off[NVML_SRC_MAX];		/* source unsupported on this device */
	bool stream_off[ST_MAX];
	bool gpm_ok, gpm_primed, events_ok;
	bool fields_off, clock_off, temp_off, throttle_off, procutil_off, procmem_off;
	nvmlGpmSample_t gpm[2];
	int gpm_cur;
	unsigned long long last_seen[ST_MAX];	/* lastSeenTimeStamp per stream, us */
	unsigned long long last_util_ts;	/* for busy/idle accounting */
	unsigned long long proc_last_seen;
	unsigned drains;			/* runs of the samples source */
	/* the last readings, to tell a change (cfg.backoff_max): NAN / ~0: none yet */
	double last_mem_used, last_gpm[4], last_slow[4];
	double last_proc_util, last_proc_mem;	/* the process source's change marks: mean SM % */
	uint64_t last_proc_pids;		/* of its new samples, bytes, the pid set's hash */
	unsigned fails;
	uint64_t retry_at_ns;
	bool backed_off;
	struct gpu_stats s;
};

struct nvml_poller {
	struct nvml_fns f;
	struct nvml_cfg cfg;
	struct nvml_sink sink;
	int64_t mono_to_wall_ns;
	struct gpu *gpus;
	int ngpus;
	nvmlEventSet_t evset;
	nvmlGpmMetricsGet_t *mg;
	uint64_t next_ns[NVML_SRC_MAX];
	uint64_t runs[NVML_SRC_MAX], late[NVML_SRC_MAX];
	uint64_t call_ns[NVML_SRC_MAX];		/* wall time inside the source, all GPUs */
	unsigned mult[NVML_SRC_MAX];		/* current interval multiple (1..backoff_max) */
	unsigned streak[NVML_SRC_MAX];		/* runs at this multiple with nothing changed */
	bool changed;				/* a poller saw a reading change (this run) */
	struct gaps src_gaps[NVML_SRC_MAX];
	uint64_t cpu_ns;			/* poller thread CPU time, updated each loop */
	uint64_t start_mono_ns;
	uint64_t sink_drops;
	nvmlProcessUtilizationSample_t *ubuf;	/* per-process samples, poller thread only */
	unsigned int ucap;
	uint64_t warm_mono_ns, warm_cpu_ns;	/* CPU time after the first second */
	uint64_t last_loop_mono_ns;		/* when cpu_ns was read */
	char missing[1024];
	pthread_mutex_t mu;
	pthread_t thread;
	bool started;
	volatile bool stop;
};

/* nvml_poll.c */
/* max and p99 (nearest rank) of the window; resets it. false if empty. */
bool nvml_win_take(struct window *w, double *ret_max, double *ret_p99);
const char *nvml_errstr(struct nvml_poller *p, nvmlReturn_t r);
/* NVML's timestamps are CLOCK_REALTIME us; the agent's clock is CLOCK_MONOTONIC + offset. */
int64_t nvml_clock_skew_ns(struct nvml_poller *p);
/* Drains one sample buffer: every sample newer than last_seen, each exactly once. */
void nvml_drain_stream(struct nvml_poller *p, struct gpu *g, int st, int64_t skew);
void *nvml_poller_thread(void *arg);

#endif /* GPUSCOPE_NVML_INT_H */
