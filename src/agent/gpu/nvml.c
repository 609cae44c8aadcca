// SPDX-License-Identifier: Apache-2.0
/*
 * The NVML/GPM poller and the agent module around it. One thread; every source has its own
 * rate. Buffered driver samples (utilization, memory utilization, power) are drained with
 * lastSeenTimeStamp and keep their own timestamps; polled values get the agent clock.
 */
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
#include "agent/cupti/cupti_usdt.h"
#include "agent/gpu/nvml.h"
#include "agent/meta/labels.h"
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

enum stream { ST_POWER = NVML_TOTAL_POWER_SAMPLES, ST_UTIL = NVML_GPU_UTILIZATION_SAMPLES,
	      ST_MEMUTIL = NVML_MEMORY_UTILIZATION_SAMPLES, ST_MAX };
static const char *const stream_metric[ST_MAX] = { "gpu_power_watts", "gpu_utilization",
						   "gpu_memory_util" };

/* Gauges for /metrics, in the order of gauge_defs. NAN: never read. */
enum gauge { G_UTIL, G_MEMUTIL, G_POWER, G_FB_USED, G_FB_FREE, G_FB_TOTAL, G_SM_CLOCK,
	     G_MEM_CLOCK, G_TEMP, G_MEM_TEMP, G_ENERGY, G_THROTTLE, G_SM_ACTIVE, G_SM_OCC,
	     G_TENSOR, G_DRAM, G_PCIE_TX, G_PCIE_RX, G_NVL_TX, G_NVL_RX, G_MAX };
static const struct {
	const char *name, *help;
	double scale;	/* stored value * scale = exposed value */
} gauge_defs[G_MAX] = {
	[G_UTIL] = { "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (%), latest driver sample", 1 },
	[G_MEMUTIL] = { "DCGM_FI_DEV_MEM_COPY_UTIL", "Memory-controller busy (%)", 1 },
	[G_POWER] = { "DCGM_FI_DEV_POWER_USAGE", "Power draw (W), latest driver sample", 1 },
	[G_FB_USED] = { "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (MiB)", 1.0 / 1048576 },
	[G_FB_FREE] = { "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (MiB)", 1.0 / 1048576 },
	[G_FB_TOTAL] = { "DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (MiB)", 1.0 / 1048576 },
	[G_SM_CLOCK] = { "DCGM_FI_DEV_SM_CLOCK", "SM clock (MHz)", 1 },
	[G_MEM_CLOCK] = { "DCGM_FI_DEV_MEM_CLOCK", "Memory clock (MHz)", 1 },
	[G_TEMP] = { "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (C)", 1 },
	[G_MEM_TEMP] = { "DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (C)", 1 },
	[G_ENERGY] = { "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Energy since driver load (mJ)", 1 },
	[G_THROTTLE] = { "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Clock event reasons (bitmask)", 1 },
	[G_SM_ACTIVE] = { "DCGM_FI_PROF_SM_ACTIVE", "SM activity (ratio), last GPM window", 1 },
	[G_SM_OCC] = { "DCGM_FI_PROF_SM_OCCUPANCY", "SM occupancy (ratio), last GPM window", 1 },
	[G_TENSOR] = { "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Tensor activity (ratio)", 1 },
	[G_DRAM] = { "DCGM_FI_PROF_DRAM_ACTIVE", "DRAM bandwidth used (ratio)", 1 },
	[G_PCIE_TX] = { "DCGM_FI_PROF_PCIE_TX_BYTES", "PCIe bytes/s sent", 1 },
	[G_PCIE_RX] = { "DCGM_FI_PROF_PCIE_RX_BYTES", "PCIe bytes/s received", 1 },
	[G_NVL_TX] = { "DCGM_FI_PROF_NVLINK_TX_BYTES", "NVLink bytes/s sent", 1 },
	[G_NVL_RX] = { "DCGM_FI_PROF_NVLINK_RX_BYTES", "NVLink bytes/s received", 1 },
};

/* GPM metrics we ask for: id, batch metric name, gauge, scale (% -> ratio, MiB/s -> B/s). */
static const struct {
	unsigned id;
	const char *name;
	enum gauge g;
	double scale;
} gpm_defs[] = {
	{ NVML_GPM_METRIC_SM_UTIL, "gpu_sm_active", G_SM_ACTIVE, 0.01 },
	{ NVML_GPM_METRIC_SM_OCCUPANCY, "gpu_sm_occupancy", G_SM_OCC, 0.01 },
	{ NVML_GPM_METRIC_ANY_TENSOR_UTIL, "gpu_tensor_active", G_TENSOR, 0.01 },
	{ NVML_GPM_METRIC_DRAM_BW_UTIL, "gpu_dram_active", G_DRAM, 0.01 },
	{ NVML_GPM_METRIC_PCIE_TX_PER_SEC, "gpu_pcie_tx_bytes_per_second", G_PCIE_TX, 1048576 },
	{ NVML_GPM_METRIC_PCIE_RX_PER_SEC, "gpu_pcie_rx_bytes_per_second", G_PCIE_RX, 1048576 },
	{ NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, "gpu_nvlink_tx_bytes_per_second", G_NVL_TX,
	  1048576 },
	{ NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, "gpu_nvlink_rx_bytes_per_second", G_NVL_RX,
	  1048576 },
};
#define NGPM ARRAY_SIZE(gpm_defs)

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

static void gaps_add(struct gaps *g, uint64_t t_ns)
{
	if (g->last_ns && t_ns > g->last_ns) {
		uint64_t d = t_ns - g->last_ns;

		g->n++;
		g->sum_ns += (double)d;
		if (!g->min_ns || d < g->min_ns)
			g->min_ns = d;
		if (d > g->max_ns)
			g->max_ns = d;
	}
	g->last_ns = t_ns;
}

static void win_add(struct window *w, double v)
{
	w->v[w->next] = v;
	w->next = (w->next + 1) % WIN_CAP;
	if (w->n < WIN_CAP)
		w->n++;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* max and p99 (nearest rank) of the window; resets it. false if empty. */
static bool win_take(struct window *w, double *ret_max, double *ret_p99)
{
	size_t rank;

	if (!w->n)
		return false;
	qsort(w->v, w->n, sizeof(double), cmp_double);
	rank = (size_t)ceil(0.99 * w->n);
	*ret_max = w->v[w->n - 1];
	*ret_p99 = w->v[rank ? rank - 1 : 0];
	w->n = w->next = 0;
	return true;
}

static const char *errstr(struct nvml_poller *p, nvmlReturn_t r)
{
	static char buf[32];

	if (p->f.nvmlErrorString)
		return ((const char *(*)(nvmlReturn_t))p->f.nvmlErrorString)(r);
	snprintf(buf, sizeof(buf), "NVML error %d", r);
	return buf;
}

static uint64_t agent_now_ns(struct nvml_poller *p)
{
	return mono_ns() + (uint64_t)p->mono_to_wall_ns;
}

/* NVML's timestamps are CLOCK_REALTIME us; the agent's clock is CLOCK_MONOTONIC + offset. */
static int64_t clock_skew_ns(struct nvml_poller *p)
{
	int64_t skew = (int64_t)(wall_ns() - agent_now_ns(p));

	return (skew > (int64_t)SKEW_MIN_NS || skew < -(int64_t)SKEW_MIN_NS) ? skew : 0;
}

static void emit(struct nvml_poller *p, const char *name, const struct label *l, size_t n,
		 uint64_t t_ns, double v)
{
	if (p->sink.metric)
		p->sink.metric(p->sink.ctx, name, l, n, t_ns, v);
}

static void set_gauge(struct nvml_poller *p, struct gpu *g, enum gauge k, double v)
{
	pthread_mutex_lock(&p->mu);
	g->s.g[k] = v;
	pthread_mutex_unlock(&p->mu);
}

/* A failed call on g: counted; repeated failures or a lost GPU back off exponentially. */
static void gpu_fail(struct nvml_poller *p, struct gpu *g, nvmlReturn_t r, const char *what)
{
	uint64_t backoff;

	pthread_mutex_lock(&p->mu);
	g->s.errors++;
	pthread_mutex_unlock(&p->mu);
	g->fails++;
	if (r != NVML_ERROR_GPU_IS_LOST && g->fails < FAILS_TO_BACKOFF)
		return;
	backoff = BACKOFF_MIN_NS << (g->fails < 8 ? g->fails : 8);
	if (backoff > BACKOFF_MAX_NS)
		backoff = BACKOFF_MAX_NS;
	g->retry_at_ns = mono_ns() + backoff;
	if (!g->backed_off)
		log_warn("nvml: gpu %s (%s): %s: %s; retrying with backoff, other GPUs continue",
			 g->idx, g->uuid, what, errstr(p, r));
	pthread_mutex_lock(&p->mu);
	g->s.lost_backoffs++;
	pthread_mutex_unlock(&p->mu);
	g->backed_off = true;
}

static void gpu_ok(struct gpu *g)
{
	if (g->backed_off)
		log_info("nvml: gpu %s (%s) answers again", g->idx, g->uuid);
	g->fails = 0;
	g->backed_off = false;
}

/*
 * Classifies a result: 1 = data, 0 = no data / unsupported (flag set, logged once), -1 = error
 * (counted, may back off).
 */
static int check(struct nvml_poller *p, struct gpu *g, nvmlReturn_t r, const char *what, bool *off)
{
	if (r == NVML_SUCCESS) {
		gpu_ok(g);
		return 1;
	}
	if (r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_NO_DATA)
		return 0;
	if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_FUNCTION_NOT_FOUND ||
	    r == NVML_ERROR_NO_PERMISSION) {
		if (off && !*off)
			log_info("nvml: gpu %s: %s: %s; skipping it", g->idx, what, errstr(p, r));
		if (off)
			*off = true;
		return 0;
	}
	gpu_fail(p, g, r, what);
	return -1;
}

static double value_of(nvmlValueType_t t, nvmlValue_t v)
{
	switch (t) {
	case NVML_VALUE_TYPE_DOUBLE:
		return v.dVal;
	case NVML_VALUE_TYPE_UNSIGNED_INT:
		return v.uiVal;
	case NVML_VALUE_TYPE_UNSIGNED_LONG:
		return (double)v.ulVal;
	case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
		return (double)v.ullVal;
	case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
		return (double)v.sllVal;
	case NVML_VALUE_TYPE_SIGNED_INT:
		return v.siVal;
	case NVML_VALUE_TYPE_UNSIGNED_SHORT:
		return v.usVal;
	default:
		return NAN;
	}
}

static int cmp_sample(const void *a, const void *b)
{
	unsigned long long x = ((const nvmlSample_t *)a)->timeStamp;
	unsigned long long y = ((const nvmlSample_t *)b)->timeStamp;

	return x < y ? -1 : x > y;
}

/* One buffered driver sample: to the sink with its own timestamp, and into the scrape stats. */
static void take_sample(struct nvml_poller *p, struct gpu *g, int st, unsigned long long ts_us,
			double v, int64_t skew)
{
	uint64_t t_ns = ts_us * 1000ULL - (uint64_t)skew;

	if (st == ST_POWER)
		v /= 1000.0;	/* mW */
	emit(p, stream_metric[st], g->lab, g->nlab, t_ns, v);
	pthread_mutex_lock(&p->mu);
	g->s.samples[st]++;
	{
		const struct gaps *gp = &g->s.gaps[st];

		/* The driver samples at a fixed rate, idle or not: a hole means its buffer
		 * wrapped before we drained it (or it paused). */
		if (gp->n >= 8 && gp->last_ns && ts_us * 1000ULL > gp->last_ns &&
		    (double)(ts_us * 1000ULL - gp->last_ns) > 3 * gp->sum_ns / (double)gp->n)
			g->s.holes[st]++;
	}
	gaps_add(&g->s.gaps[st], ts_us * 1000ULL);
	if (st == ST_UTIL) {
		g->s.g[G_UTIL] = v;
		win_add(&g->s.w_util, v);
		if (g->last_util_ts && ts_us > g->last_util_ts) {
			unsigned long long d = ts_us - g->last_util_ts;
			double d_s = (double)(d < BUSY_GAP_CAP_US ? d : BUSY_GAP_CAP_US) / 1e6;

			g->s.sampled_s += d_s;
			g->s.busy_s += d_s * v / 100.0;
			if (v == 0)
				g->s.idle_s += d_s;
		}
		g->last_util_ts = ts_us;
	} else if (st == ST_POWER) {
		g->s.g[G_POWER] = v;
		win_add(&g->s.w_power, v);
	} else {
		g->s.g[G_MEMUTIL] = v;
	}
	pthread_mutex_unlock(&p->mu);
}

/* Drains one sample buffer: every sample newer than last_seen, each exactly once. */
static void drain_stream(struct nvml_poller *p, struct gpu *g, int st, int64_t skew)
{
	nvmlSample_t buf[SAMPLE_CAP];

	for (int round = 0; round < 16; round++) {
		unsigned int n = SAMPLE_CAP;
		nvmlValueType_t vt = NVML_VALUE_TYPE_UNSIGNED_INT;
		unsigned long long seen = g->last_seen[st];
		nvmlReturn_t r;

		r = NVML_CALL(&p->f, nvmlDeviceGetSamples, g->h, st, seen, &vt, &n, buf);
		if (check(p, g, r, "nvmlDeviceGetSamples", &g->stream_off[st]) <= 0)
			return;
		if (n > SAMPLE_CAP)
			n = SAMPLE_CAP;
		qsort(buf, n, sizeof(buf[0]), cmp_sample);
		for (unsigned i = 0; i < n; i++) {
			if (buf[i].timeStamp <= g->last_seen[st]) {	/* repeated: drop, count */
				pthread_mutex_lock(&p->mu);
				g->s.dups[st]++;
				pthread_mutex_unlock(&p->mu);
				continue;
			}
			take_sample(p, g, st, buf[i].timeStamp, value_of(vt, buf[i].sampleValue),
				    skew);
			g->last_seen[st] = buf[i].timeStamp;
		}
		if (n < SAMPLE_CAP || g->last_seen[st] == seen)
			return;
	}
}

static void poll_samples(struct nvml_poller *p, struct gpu *g, uint64_t now)
{
	int64_t skew;

	if (!p->f.nvmlDeviceGetSamples)
		return;
	skew = clock_skew_ns(p);
	for (int st = 0; st < ST_MAX; st++) {
		/* Each drain costs ~1.8 ms of CPU on the H200 whatever it returns; the driver keeps
		 * ~14 s of utilization samples but only ~2.4 s of power samples. */
		if (st != ST_POWER && g->drains % UTIL_DRAIN_EVERY)
			continue;
		if (!g->stream_off[st] && now >= g->retry_at_ns)
			drain_stream(p, g, st, skew);
	}
	g->drains++;
}

static void poll_memory(struct nvml_poller *p, struct gpu *g, uint64_t now)
{
	unsigned long long total, free_b, used;
	uint64_t t0 = agent_now_ns(p), t;
	nvmlReturn_t r;

	if (p->f.nvmlDeviceGetMemoryInfo_v2) {
		nvmlMemory_v2_t m = { .version = nvmlMemory_v2 };

		r = NVML_CALL(&p->f, nvmlDeviceGetMemoryInfo_v2, g->h, &m);
		total = m.total, free_b = m.free, used = m.used;
	} else if (p->f.nvmlDeviceGetMemoryInfo) {
		nvmlMemory_t m = { 0 };

		r = NVML_CALL(&p->f, nvmlDeviceGetMemoryInfo, g->h, &m);
		total = m.total, free_b = m.free, used = m.used;
	} else {
		return;
	}
	if (check(p, g, r, "nvmlDeviceGetMemoryInfo", &g->off[NVML_SRC_MEMORY]) <= 0)
		return;
	t = t0 + (agent_now_ns(p) - t0) / 2;
	emit(p, "gpu_memory_used_bytes", g->lab, g->nlab, t, (double)used);
	pthread_mutex_lock(&p->mu);
	g->s.g[G_FB_USED] = (double)used;
	g->s.g[G_FB_FREE] = (double)free_b;
	g->s.g[G_FB_TOTAL] = (double)total;
	gaps_add(&g->s.gaps[ST_MAX + NVML_SRC_MEMORY], t);
	pthread_mutex_unlock(&p->mu);
}

static void poll_gpm(struct nvml_poller *p, struct gpu *g, uint64_t now)
{
	nvmlGpmMetricsGet_t *mg = p->mg;
	nvmlGpmSample_t cur = g->gpm[g->gpm_cur];
	uint64_t t;
	nvmlReturn_t r;

	if (!g->gpm_ok)
		return;
	r = NVML_CALL(&p->f, nvmlGpmSampleGet, g->h, cur);
	t = agent_now_ns(p);
	if (check(p, g, r, "nvmlGpmSampleGet", &g->off[NVML_SRC_GPM]) <= 0) {
		g->gpm_primed = false;
		return;
	}
	g->gpm_cur ^= 1;
	if (!g->gpm_primed) {
		g->gpm_primed = true;
		return;
	}
	mg->version = NVML_GPM_METRICS_GET_VERSION;
	mg->numMetrics = NGPM;
	mg->sample1 = g->gpm[g->gpm_cur];	/* the previous one */
	mg->sample2 = cur;
	for (unsigned i = 0; i < NGPM; i++) {
		memset(&mg->metrics[i], 0, sizeof(mg->metrics[i]));
		mg->metrics[i].metricId = gpm_defs[i].id;
	}
	r = NVML_CALL(&p->f, nvmlGpmMetricsGet, mg);
	if (check(p, g, r, "nvmlGpmMetricsGet", &g->off[NVML_SRC_GPM]) <= 0)
		return;
	for (unsigned i = 0; i < NGPM; i++) {
		double v;

		/* NaN: the counters did not move between the samples (0/0) */
		if (mg->metrics[i].nvmlReturn != NVML_SUCCESS || isnan(mg->metrics[i].value))
			continue;
		v = mg->metrics[i].value * gpm_defs[i].scale;
		emit(p, gpm_defs[i].name, g->lab, g->nlab, t, v);
		set_gauge(p, g, gpm_defs[i].g, v);
	}
	pthread_mutex_lock(&p->mu);
	gaps_add(&g->s.gaps[ST_MAX + NVML_SRC_GPM], t);
	pthread_mutex_unlock(&p->mu);
}

static void poll_events(struct nvml_poller *p)
{
	nvmlEventData_t ev;
	char xid[24], type[24];

	if (!p->evset)
		return;
	for (int i = 0; i < 64; i++) {
		nvmlReturn_t r = NVML_CALL(&p->f, nvmlEventSetWait_v2, p->evset, &ev, 0);
		uint64_t t = agent_now_ns(p);
		struct gpu *g = NULL;

		if (r != NVML_SUCCESS)
			return;	/* NVML_ERROR_TIMEOUT: none pending */
		for (int k = 0; k < p->ngpus; k++)
			if (p->gpus[k].h == ev.device)
				g = &p->gpus[k];
		if (!g)
			continue;
		snprintf(xid, sizeof(xid), "%llu", ev.eventData);
		snprintf(type, sizeof(type), "%s",
			 ev.eventType == nvmlEventTypeXidCriticalError	 ? "xid" :
			 ev.eventType == nvmlEventTypeDoubleBitEccError ? "ecc_dbe" :
			 ev.eventType == nvmlEventTypeSingleBitEccError ? "ecc_sbe" : "other");
		struct label attrs[] = { { "xid", xid }, { "type", type } };

		log_warn("nvml: gpu %s (%s): event %s %s", g->idx, g->uuid, type, xid);
		if (p->sink.event)
			p->sink.event(p->sink.ctx, g->lab, g->nlab, t, attrs, 2);
		pthread_mutex_lock(&p->mu);
		g->s.events++;
		pthread_mutex_unlock(&p->mu);
	}
}

static void poll_slow(struct nvml_poller *p, struct gpu *g, uint64_t now)
{
	unsigned int v;
	unsigned long long reasons;
	uint64_t t = agent_now_ns(p);
	nvmlReturn_t r;

	if (g->parent >= 0)
		goto out_total;	/* clocks and sensors belong to the physical GPU */
	if (p->f.nvmlDeviceGetClockInfo && !g->clock_off) {
		r = NVML_CALL(&p->f, nvmlDeviceGetClockInfo, g->h, NVML_CLOCK_SM, &v);
		if (check(p, g, r, "nvmlDeviceGetClockInfo", &g->clock_off) > 0) {
			emit(p, "gpu_sm_clock_mhz", g->lab, g->nlab, t, v);
			set_gauge(p, g, G_SM_CLOCK, v);
		}
		r = NVML_CALL(&p->f, nvmlDeviceGetClockInfo, g->h, NVML_CLOCK_MEM, &v);
		if (check(p, g, r, "nvmlDeviceGetClockInfo", &g->clock_off) > 0) {
			emit(p, "gpu_mem_clock_mhz", g->lab, g->nlab, t, v);
			set_gauge(p, g, G_MEM_CLOCK, v);
		}
	}
	if (p->f.nvmlDeviceGetTemperature && !g->temp_off) {
		r = NVML_CALL(&p->f, nvmlDeviceGetTemperature, g->h, NVML_TEMPERATURE_GPU, &v);
		if (check(p, g, r, "nvmlDeviceGetTemperature", &g->temp_off) > 0) {
			emit(p, "gpu_temperature_c", g->lab, g->nlab, t, v);
			set_gauge(p, g, G_TEMP, v);
		}
	}
	if (!g->throttle_off && (p->f.nvmlDeviceGetCurrentClocksEventReasons ||
				 p->f.nvmlDeviceGetCurrentClocksThrottleReasons)) {
		r = p->f.nvmlDeviceGetCurrentClocksEventReasons ?
			    NVML_CALL(&p->f, nvmlDeviceGetCurrentClocksEventReasons, g->h, &reasons) :
			    NVML_CALL(&p->f, nvmlDeviceGetCurrentClocksThrottleReasons, g->h,
				      &reasons);
		if (check(p, g, r, "nvmlDeviceGetCurrentClocksEventReasons", &g->throttle_off) > 0) {
			emit(p, "gpu_throttle_reasons", g->lab, g->nlab, t, (double)reasons);
			set_gauge(p, g, G_THROTTLE, (double)reasons);
		}
	}
out_total:
	pthread_mutex_lock(&p->mu);
	double total = g->s.g[G_FB_TOTAL];

	gaps_add(&g->s.gaps[ST_MAX + NVML_SRC_SLOW], t);
	pthread_mutex_unlock(&p->mu);
	if (!isnan(total))
		emit(p, "gpu_memory_total_bytes", g->lab, g->nlab, t, total);
}

static void poll_fields(struct nvml_poller *p, struct gpu *g, uint64_t now)
{
	nvmlFieldValue_t fv[2] = { { .fieldId = NVML_FI_DEV_MEMORY_TEMP },
				   { .fieldId = NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION } };
	uint64_t t = agent_now_ns(p);
	nvmlReturn_t r;

	if (!p->f.nvmlDeviceGetFieldValues || g->fields_off || g->parent >= 0)
		return;
	r = NVML_CALL(&p->f, nvmlDeviceGetFieldValues, g->h, 2, fv);
	if (check(p, g, r, "nvmlDeviceGetFieldValues", &g->fields_off) <= 0)
		return;
	if (fv[0].nvmlReturn == NVML_SUCCESS) {
		double c = value_of(fv[0].valueType, fv[0].value);

		emit(p, "gpu_memory_temperature_c", g->lab, g->nlab, t, c);
		set_gauge(p, g, G_MEM_TEMP, c);
	}
	if (fv[1].nvmlReturn == NVML_SUCCESS) {
		double mj = value_of(fv[1].valueType, fv[1].value);

		emit(p, "gpu_energy_joules", g->lab, g->nlab, t, mj / 1000.0);
		set_gauge(p, g, G_ENERGY, mj);
	}
	pthread_mutex_lock(&p->mu);
	gaps_add(&g->s.gaps[ST_MAX + NVML_SRC_FIELDS], t);
	pthread_mutex_unlock(&p->mu);
}

/*
 * A per-process point's labels: the GPU's and pid. The sink labels the process (the agent's
 * label builder in `run`: comm, container, pod, relabel rules).
 */
static size_t proc_labels(struct gpu *g, struct label *l, char *pidbuf, size_t pidlen,
			  unsigned pid)
{
	size_t n = g->nlab;

	memcpy(l, g->lab, n * sizeof(*l));
	snprintf(pidbuf, pidlen, "%u", pid);
	l[n++] = (struct label){ "pid", pidbuf };
	return n;
}

/*
 * GetProcessUtilization wants a buffer as large as the driver's sample list, whatever the
 * number of processes (the H200 answered INSUFFICIENT_SIZE to 64 entries with two processes):
 * ask for the size with a NULL buffer, grow ours (bounded), call again.
 */
static nvmlReturn_t read_procutil(struct nvml_poller *p, struct gpu *g, unsigned long long seen,
				  unsigned int *ret_n)
{
	unsigned int n = p->ucap;
	nvmlReturn_t r = NVML_ERROR_INSUFFICIENT_SIZE;

	if (p->ucap)
		r = NVML_CALL(&p->f, nvmlDeviceGetProcessUtilization, g->h, p->ubuf, &n, seen);
	if (r != NVML_ERROR_INSUFFICIENT_SIZE)
		goto out;
	/* The H200 (driver 580) answers the NULL query with INSUFFICIENT_SIZE and the size. */
	n = 0;
	r = NVML_CALL(&p->f, nvmlDeviceGetProcessUtilization, g->h, NULL, &n, seen);
	if ((r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE) || !n) {
		if (r == NVML_ERROR_INSUFFICIENT_SIZE)
			r = NVML_ERROR_UNKNOWN;
		goto out;
	}
	if (n > PROC_UTIL_MAX) {
		pthread_mutex_lock(&p->mu);
		p->sink_drops++;
		pthread_mutex_unlock(&p->mu);
		n = PROC_UTIL_MAX;
	}
	if (n > p->ucap) {
		void *nb = realloc(p->ubuf, n * sizeof(*p->ubuf));

		if (!nb) {
			r = NVML_ERROR_UNKNOWN;
			goto out;
		}
		p->ubuf = nb;
		p->ucap = n;
	}
	n = p->ucap;
	r = NVML_CALL(&p->f, nvmlDeviceGetProcessUtilization, g->h, p->ubuf, &n, seen);
out:
	*ret_n = r == NVML_SUCCESS ? (n < p->ucap ? n : p->ucap) : 0;
	return r;
}

static void poll_process(struct nvml_poller *p, struct gpu *g, uint64_t now)
{
	nvmlProcessInfo_t pi[PROC_CAP];
	struct label l[ARRAY_SIZE(((struct gpu *)0)->lab) + 1];
	char pidbuf[16];
	unsigned int n;
	nvmlReturn_t r;
	uint64_t t;

	if (g->parent >= 0)
		return;
	if (p->f.nvmlDeviceGetProcessUtilization && !g->procutil_off) {
		unsigned long long seen = g->proc_last_seen, newest = seen;
		int64_t skew = clock_skew_ns(p);

		r = read_procutil(p, g, seen, &n);
		if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
			pthread_mutex_lock(&p->mu);
			p->sink_drops++;
			pthread_mutex_unlock(&p->mu);
		} else if (check(p, g, r, "nvmlDeviceGetProcessUtilization", &g->procutil_off) > 0) {
			nvmlProcessUtilizationSample_t *us = p->ubuf;

			for (unsigned i = 0; i < n; i++) {
				size_t nl;

				if (us[i].timeStamp <= seen)
					continue;
				/* Each sample carries its own pid: label with that, never another. */
				nl = proc_labels(g, l, pidbuf, sizeof(pidbuf), us[i].pid);
				t = us[i].timeStamp * 1000ULL - (uint64_t)skew;
				emit(p, "gpu_process_sm_util", l, nl, t, us[i].smUtil);
				emit(p, "gpu_process_mem_util", l, nl, t, us[i].memUtil);
				if (us[i].timeStamp > newest)
					newest = us[i].timeStamp;
			}
			g->proc_last_seen = newest;
		}
	}
	if (p->f.nvmlDeviceGetComputeRunningProcesses_v3 && !g->procmem_off) {
		n = PROC_CAP;
		r = NVML_CALL(&p->f, nvmlDeviceGetComputeRunningProcesses_v3, g->h, &n, pi);
		t = agent_now_ns(p);
		if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
			pthread_mutex_lock(&p->mu);
			p->sink_drops++;
			pthread_mutex_unlock(&p->mu);
		} else if (check(p, g, r, "nvmlDeviceGetComputeRunningProcesses_v3",
				 &g->procmem_off) > 0) {
			for (unsigned i = 0; i < n && i < PROC_CAP; i++) {
				size_t nl = proc_labels(g, l, pidbuf, sizeof(pidbuf), pi[i].pid);

				emit(p, "gpu_process_memory_bytes", l, nl, t,
				     (double)pi[i].usedGpuMemory);
			}
		}
	}
}

typedef void (*poll_fn)(struct nvml_poller *p, struct gpu *g, uint64_t now);
static const poll_fn pollers[NVML_SRC_MAX] = {
	[NVML_SRC_SAMPLES] = poll_samples, [NVML_SRC_MEMORY] = poll_memory,
	[NVML_SRC_GPM] = poll_gpm,	   [NVML_SRC_SLOW] = poll_slow,
	[NVML_SRC_PROCESS] = poll_process, [NVML_SRC_FIELDS] = poll_fields,
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

void nvml_poller__poll(struct nvml_poller *p, uint64_t now)
{
	for (int s = 0; s < NVML_SRC_MAX; s++) {
		uint64_t iv = p->cfg.interval_ns[s], t0;

		if (!iv || now < p->next_ns[s])
			continue;
		t0 = mono_ns();
		for (int i = 0; i < p->ngpus; i++) {
			struct gpu *g = &p->gpus[i];

			if (g->off[s] || t0 < g->retry_at_ns)
				continue;
			pollers[s](p, g, now);
		}
		if (s == NVML_SRC_SLOW)
			poll_events(p);
		pthread_mutex_lock(&p->mu);
		p->runs[s]++;
		p->call_ns[s] += mono_ns() - t0;
		gaps_add(&p->src_gaps[s], t0);
		/* Keep the grid; a source that fell a whole period behind skips ahead. */
		p->next_ns[s] += iv;
		if (p->next_ns[s] <= now) {
			if (p->runs[s] > 1)
				p->late[s]++;
			p->next_ns[s] = now + iv;
		}
		pthread_mutex_unlock(&p->mu);
	}
}

static void *poller_thread(void *arg)
{
	struct nvml_poller *p = arg;

	while (!p->stop) {
		uint64_t now = mono_ns(), next = now + 100 * NSEC_PER_MSEC;
		struct timespec ts;

		nvml_poller__poll(p, now);
		for (int s = 0; s < NVML_SRC_MAX; s++)
			if (p->cfg.interval_ns[s] && p->next_ns[s] < next)
				next = p->next_ns[s];
		pthread_mutex_lock(&p->mu);
		p->cpu_ns = thread_cpu_ns();
		p->last_loop_mono_ns = mono_ns();
		if (!p->warm_mono_ns && now - p->start_mono_ns >= NSEC_PER_SEC) {
			p->warm_mono_ns = mono_ns();
			p->warm_cpu_ns = p->cpu_ns;
		}
		pthread_mutex_unlock(&p->mu);
		ts.tv_sec = (time_t)(next / NSEC_PER_SEC);
		ts.tv_nsec = (long)(next % NSEC_PER_SEC);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !p->stop)
			;
	}
	pthread_mutex_lock(&p->mu);
	p->cpu_ns = thread_cpu_ns();
	p->last_loop_mono_ns = mono_ns();
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static void label_gpu(struct gpu *g)
{
	g->lab[0] = (struct label){ "gpu", g->idx };
	g->lab[1] = (struct label){ "gpu_uuid", g->parent >= 0 ? g->parent_uuid : g->uuid };
	g->nlab = 2;
	if (*g->name)	/* the server prices GPU time per model (docs/efficiency.md) */
		g->lab[g->nlab++] = (struct label){ "gpu_model", g->name };
	if (g->parent >= 0)
		g->lab[g->nlab++] = (struct label){ "mig_uuid", g->uuid };
}

static void init_stats(struct gpu *g)
{
	for (int k = 0; k < G_MAX; k++)
		g->s.g[k] = NAN;
}

static void probe_gpu(struct nvml_poller *p, struct gpu *g)
{
	nvmlReturn_t r;

	if (p->f.nvmlDeviceGetUUID) {
		r = NVML_CALL(&p->f, nvmlDeviceGetUUID, g->h, g->uuid, sizeof(g->uuid));
		if (r)
			snprintf(g->uuid, sizeof(g->uuid), "unknown-%s", g->idx);
	}
	if (p->f.nvmlDeviceGetName)
		if (NVML_CALL(&p->f, nvmlDeviceGetName, g->h, g->name, sizeof(g->name)))
			g->name[0] = 0;
	label_gpu(g);
	init_stats(g);
	g->gpm_ok = false;
	if (p->mg && p->f.nvmlGpmQueryDeviceSupport && p->f.nvmlGpmSampleAlloc &&
	    p->f.nvmlGpmSampleGet && p->f.nvmlGpmMetricsGet && g->parent < 0) {
		nvmlGpmSupport_t sup = { .version = NVML_GPM_SUPPORT_VERSION };

		r = NVML_CALL(&p->f, nvmlGpmQueryDeviceSupport, g->h, &sup);
		if (r == NVML_SUCCESS && sup.isSupportedDevice &&
		    !NVML_CALL(&p->f, nvmlGpmSampleAlloc, &g->gpm[0]) &&
		    !NVML_CALL(&p->f, nvmlGpmSampleAlloc, &g->gpm[1]))
			g->gpm_ok = true;
	}
	if (!g->gpm_ok)
		g->off[NVML_SRC_GPM] = true;
	if (g->parent >= 0) {
		g->off[NVML_SRC_SAMPLES] = true;	/* not supported on MIG devices */
		g->off[NVML_SRC_PROCESS] = true;
	}
	if (p->evset && g->parent < 0 && p->f.nvmlDeviceGetSupportedEventTypes &&
	    p->f.nvmlDeviceRegisterEvents) {
		unsigned long long types = 0, want = nvmlEventTypeXidCriticalError |
						     nvmlEventTypeDoubleBitEccError;

		if (!NVML_CALL(&p->f, nvmlDeviceGetSupportedEventTypes, g->h, &types) &&
		    (types & want))
			g->events_ok = !NVML_CALL(&p->f, nvmlDeviceRegisterEvents, g->h,
						  types & want, p->evset);
	}
}

/* Adds the MIG devices of gpus[pi] (when MIG is on) after the physical GPUs. */
static void add_migs(struct nvml_poller *p, int pi, int cap)
{
	unsigned int cur = 0, pend = 0, max = 0;
	struct gpu *parent = &p->gpus[pi];

	if (!p->f.nvmlDeviceGetMigMode || !p->f.nvmlDeviceGetMaxMigDeviceCount ||
	    !p->f.nvmlDeviceGetMigDeviceHandleByIndex)
		return;
	if (NVML_CALL(&p->f, nvmlDeviceGetMigMode, parent->h, &cur, &pend) || cur != 1)
		return;
	if (NVML_CALL(&p->f, nvmlDeviceGetMaxMigDeviceCount, parent->h, &max))
		return;
	for (unsigned i = 0; i < max && p->ngpus < cap; i++) {
		struct gpu *g = &p->gpus[p->ngpus];

		memset(g, 0, sizeof(*g));
		if (NVML_CALL(&p->f, nvmlDeviceGetMigDeviceHandleByIndex, parent->h, i, &g->h))
			continue;
		g->parent = pi;
		g->mig_index = i;
		snprintf(g->idx, sizeof(g->idx), "%s", parent->idx);
		snprintf(g->parent_uuid, sizeof(g->parent_uuid), "%s", parent->uuid);
		probe_gpu(p, g);
		if (!*g->name) {
			snprintf(g->name, sizeof(g->name), "%s", parent->name);
			label_gpu(g);
		}
		p->ngpus++;
	}
}

struct nvml_poller *nvml_poller__new(const struct nvml_fns *f, const char *missing,
				     const struct nvml_cfg *cfg, int64_t mono_to_wall_ns,
				     const struct nvml_sink *sink, const char **why)
{
	static char whybuf[256];
	struct nvml_poller *p;
	unsigned int count = 0;
	nvmlReturn_t r;
	int err, nphys;

	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->f = *f;
	p->cfg = *cfg;
	if (sink)
		p->sink = *sink;
	p->mono_to_wall_ns = mono_to_wall_ns;
	snprintf(p->missing, sizeof(p->missing), "%s", missing ? missing : "");
	pthread_mutex_init(&p->mu, NULL);
	r = NVML_CALL(&p->f, nvmlInit_v2);
	if (r) {
		snprintf(whybuf, sizeof(whybuf), "nvmlInit: %s", errstr(p, r));
		err = ENOENT;
		goto out_free;
	}
	r = NVML_CALL(&p->f, nvmlDeviceGetCount_v2, &count);
	if (r || !count) {
		snprintf(whybuf, sizeof(whybuf), "%s",
			 r ? errstr(p, r) : "NVML sees no GPU on this node");
		err = ENOENT;
		goto out_shutdown;
	}
	if (count > MAX_GPUS)
		count = MAX_GPUS;
	p->gpus = calloc(MAX_GPUS, sizeof(*p->gpus));
	p->mg = calloc(1, sizeof(*p->mg));
	if (!p->gpus || !p->mg) {
		err = ENOMEM;
		snprintf(whybuf, sizeof(whybuf), "out of memory");
		goto out_shutdown;
	}
	if (p->f.nvmlEventSetCreate && p->f.nvmlEventSetWait_v2 &&
	    NVML_CALL(&p->f, nvmlEventSetCreate, &p->evset))
		p->evset = NULL;
	for (unsigned i = 0; i < count; i++) {
		struct gpu *g = &p->gpus[p->ngpus];

		r = NVML_CALL(&p->f, nvmlDeviceGetHandleByIndex_v2, i, &g->h);
		if (r) {
			log_warn("nvml: gpu %u: %s; skipping it", i, errstr(p, r));
			continue;
		}
		g->parent = -1;
		snprintf(g->idx, sizeof(g->idx), "%u", i);
		probe_gpu(p, g);
		p->ngpus++;
	}
	nphys = p->ngpus;
	for (int i = 0; i < nphys; i++)
		add_migs(p, i, MAX_GPUS);
	if (!p->ngpus) {
		snprintf(whybuf, sizeof(whybuf), "no GPU answered nvmlDeviceGetHandleByIndex");
		err = ENOENT;
		goto out_shutdown;
	}
	p->start_mono_ns = mono_ns();
	for (int s = 0; s < NVML_SRC_MAX; s++)
		p->next_ns[s] = p->start_mono_ns;
	return p;
out_shutdown:
	NVML_CALL(&p->f, nvmlShutdown);
out_free:
	free(p->gpus);
	free(p->mg);
	pthread_mutex_destroy(&p->mu);
	free(p);
	if (why)
		*why = whybuf;
	errno = err;
	return NULL;
}

int nvml_poller__ngpus(const struct nvml_poller *p)
{
	return p->ngpus;
}

int nvml_poller__start(struct nvml_poller *p)
{
	int err = pthread_create(&p->thread, NULL, poller_thread, p);

	if (err)
		return -err;
	p->started = true;
	return 0;
}

void nvml_poller__stop(struct nvml_poller *p)
{
	if (!p || !p->started)
		return;
	p->stop = true;
	pthread_join(p->thread, NULL);
	p->started = false;
	/* Last drain of every buffer, so that stopping loses no driver sample. */
	if (p->cfg.interval_ns[NVML_SRC_SAMPLES] && p->f.nvmlDeviceGetSamples) {
		int64_t skew = clock_skew_ns(p);

		for (int i = 0; i < p->ngpus; i++)
			for (int st = 0; st < ST_MAX; st++)
				if (!p->gpus[i].off[NVML_SRC_SAMPLES] && !p->gpus[i].stream_off[st])
					drain_stream(p, &p->gpus[i], st, skew);
	}
}

void nvml_poller__free(struct nvml_poller *p)
{
	if (!p)
		return;
	nvml_poller__stop(p);
	for (int i = 0; i < p->ngpus; i++)
		for (int k = 0; k < 2; k++)
			if (p->gpus[i].gpm[k] && p->f.nvmlGpmSampleFree)
				NVML_CALL(&p->f, nvmlGpmSampleFree, p->gpus[i].gpm[k]);
	if (p->evset && p->f.nvmlEventSetFree)
		NVML_CALL(&p->f, nvmlEventSetFree, p->evset);
	NVML_CALL(&p->f, nvmlShutdown);
	free(p->gpus);
	free(p->mg);
	free(p->ubuf);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

/*
 * A GPU's labels (gpu, UUID, modelName, mig_uuid of a MIG instance) plus one extra. dcgm:
 * dcgm-exporter's DCGM_FI_* families keep its label names; ours are snake_case (uuid,
 * model_name).
 */
static size_t gpu_labels(const struct gpu *g, bool dcgm, const char *extra_name,
			 const char *extra_value, struct prom_label ret[5])
{
	size_t n = 0;

	ret[n++] = (struct prom_label){ "gpu", g->idx };
	ret[n++] = (struct prom_label){ dcgm ? "UUID" : "uuid",
					g->parent >= 0 ? g->parent_uuid : g->uuid };
	ret[n++] = (struct prom_label){ dcgm ? "modelName" : "model_name", g->name };
	if (g->parent >= 0)
		ret[n++] = (struct prom_label){ "mig_uuid", g->uuid };
	if (extra_name)
		ret[n++] = (struct prom_label){ extra_name, extra_value };
	return n;
}

/* One sample of GPU g. */
static void gpu_sample(FILE *out, const char *name, const struct gpu *g, const char *extra_name,
		       const char *extra_value, double v)
{
	bool dcgm = !strncmp(name, "DCGM_FI_", 8);
	struct prom_label l[5];

	prom_sample(out, name, l, gpu_labels(g, dcgm, extra_name, extra_value, l), v);
}

void nvml_poller__metrics(struct nvml_poller *p, FILE *out)
{
	struct gpu_stats *snap;
	double mx[2][MAX_GPUS], p99[2][MAX_GPUS];
	bool have[2][MAX_GPUS];
	static const char *const stream_label[ST_MAX] = { "power", "utilization",
							  "memory_util" };
	int n = p->ngpus;

	snap = malloc(sizeof(*snap) * (size_t)n);
	if (!snap)
		return;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < n; i++) {
		struct gpu_stats *s = &p->gpus[i].s;

		have[0][i] = win_take(&s->w_util, &mx[0][i], &p99[0][i]);
		have[1][i] = win_take(&s->w_power, &mx[1][i], &p99[1][i]);
		memcpy(&snap[i], s, offsetof(struct gpu_stats, w_util));
	}
	pthread_mutex_unlock(&p->mu);

	for (int k = 0; k < G_MAX; k++) {
		bool any = false;

		for (int i = 0; i < n; i++) {
			if (isnan(snap[i].g[k]))
				continue;
			if (!any)
				prom_family(out, gauge_defs[k].name, "gauge", gauge_defs[k].help);
			any = true;
			gpu_sample(out, gauge_defs[k].name, &p->gpus[i], NULL, NULL,
				   snap[i].g[k] * gauge_defs[k].scale);
		}
	}
#define PER_GPU(name, type, help, expr)                                                            \
	do {                                                                                       \
		prom_family(out, name, type, help);                                                \
		for (int i = 0; i < n; i++)                                                        \
			gpu_sample(out, name, &p->gpus[i], NULL, NULL, (double)(expr));            \
	} while (0)
	PER_GPU("gpuscope_agent_gpu_busy_seconds_total", "counter",
		"Utilization-weighted busy time from every driver utilization sample", snap[i].busy_s);
	PER_GPU("gpuscope_agent_gpu_idle_seconds_total", "counter",
		"Time covered by driver utilization samples that read 0%", snap[i].idle_s);
	PER_GPU("gpuscope_agent_gpu_sampled_seconds_total", "counter",
		"Time covered by driver utilization samples", snap[i].sampled_s);
	PER_GPU("gpuscope_agent_nvml_errors_total", "counter", "Failed NVML calls", snap[i].errors);
	PER_GPU("gpuscope_agent_nvml_backoffs_total", "counter",
		"Times polling of this GPU backed off after errors", snap[i].lost_backoffs);
	PER_GPU("gpuscope_agent_gpu_events_total", "counter", "Driver events (Xid, ECC)", snap[i].events);
#undef PER_GPU
	static const char *const wname[2][2] = {
		{ "gpuscope_agent_gpu_utilization_max", "gpuscope_agent_gpu_utilization_p99" },
		{ "gpuscope_agent_gpu_power_watts_max", "gpuscope_agent_gpu_power_watts_p99" },
	};
	for (int w = 0; w < 2; w++) {
		for (int q = 0; q < 2; q++) {
			bool any = false;

			for (int i = 0; i < n; i++) {
				if (!have[w][i])
					continue;
				if (!any)
					prom_family(out, wname[w][q], "gauge",
						    "Over the driver samples since the previous scrape");
				any = true;
				gpu_sample(out, wname[w][q], &p->gpus[i], NULL, NULL,
					   q ? p99[w][i] : mx[w][i]);
			}
		}
	}
	prom_family(out, "gpuscope_agent_nvml_samples_total", "counter",
		    "Buffered driver samples delivered");
	for (int i = 0; i < n; i++)
		for (int st = 0; st < ST_MAX; st++)
			gpu_sample(out, "gpuscope_agent_nvml_samples_total", &p->gpus[i], "stream",
				   stream_label[st], snap[i].samples[st]);
	prom_family(out, "gpuscope_agent_nvml_duplicate_samples_total", "counter",
		    "Driver samples dropped because their timestamp was already seen");
	for (int i = 0; i < n; i++)
		for (int st = 0; st < ST_MAX; st++)
			gpu_sample(out, "gpuscope_agent_nvml_duplicate_samples_total", &p->gpus[i], "stream",
				   stream_label[st], snap[i].dups[st]);
	prom_family(out, "gpuscope_agent_nvml_sample_holes_total", "counter",
		    "Gaps of more than 3x the usual spacing between driver samples (buffer overrun?)");
	for (int i = 0; i < n; i++)
		for (int st = 0; st < ST_MAX; st++)
			gpu_sample(out, "gpuscope_agent_nvml_sample_holes_total", &p->gpus[i], "stream",
				   stream_label[st], snap[i].holes[st]);
	prom_family(out, "gpuscope_agent_nvml_sample_interval_seconds", "gauge",
		    "Mean gap between successive points of each stream/source");
	for (int i = 0; i < n; i++)
		for (int k = 0; k < ST_MAX + NVML_SRC_MAX; k++) {
			const struct gaps *gp = &snap[i].gaps[k];

			if (!gp->n)
				continue;
			gpu_sample(out, "gpuscope_agent_nvml_sample_interval_seconds", &p->gpus[i], "stream",
				   k < ST_MAX ? stream_label[k] : nvml_source_names[k - ST_MAX],
				   gp->sum_ns / (double)gp->n / 1e9);
		}
	free(snap);
	pthread_mutex_lock(&p->mu);
	prom_family(out, "gpuscope_agent_nvml_poller_cpu_seconds_total", "counter",
		    "CPU time of the NVML poller thread");
	prom_sample(out, "gpuscope_agent_nvml_poller_cpu_seconds_total", NULL, 0, (double)p->cpu_ns / 1e9);
	prom_family(out, "gpuscope_agent_nvml_poll_late_total", "counter",
		    "Polls that fell a whole period behind");
	for (int s = 0; s < NVML_SRC_MAX; s++)
		prom_sample1_u64(out, "gpuscope_agent_nvml_poll_late_total", "source",
				 nvml_source_names[s], p->late[s]);
	prom_counter(out, "gpuscope_agent_nvml_dropped_total",
		     "Per-process records that did not fit the poller's buffers", p->sink_drops);
	pthread_mutex_unlock(&p->mu);
	prom_family(out, "gpuscope_agent_nvml_missing_functions", "gauge",
		    "NVML functions this driver lacks (their metrics are skipped)");
	int nmissing = *p->missing ? 1 : 0;

	for (const char *c = p->missing; *c; c++)
		nmissing += *c == ',';
	prom_sample1(out, "gpuscope_agent_nvml_missing_functions", "functions", p->missing, nmissing);
}

void nvml_poller__summary(struct nvml_poller *p, FILE *out)
{
	static const char *const stream_label[ST_MAX] = { "power", "utilization",
							  "memory_util" };
	double wall_s = (double)(mono_ns() - p->start_mono_ns) / 1e9;

	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	pthread_mutex_lock(&p->mu);
	fprintf(out, "nvml poller: %d device(s), %.2f s, poller thread CPU %.3f ms = %.3f%% of one "
		     "core (%.4f%% per device)\n",
		p->ngpus, wall_s, (double)p->cpu_ns / 1e6, (double)p->cpu_ns / 1e7 / wall_s,
		(double)p->cpu_ns / 1e7 / wall_s / p->ngpus);
	if (p->warm_mono_ns && p->last_loop_mono_ns > p->warm_mono_ns + NSEC_PER_SEC) {
		double s = (double)(p->last_loop_mono_ns - p->warm_mono_ns) / 1e9;
		double pct = (double)(p->cpu_ns - p->warm_cpu_ns) / 1e7 / s;

		fprintf(out, "  steady state (after the first second): %.3f%% of one core, %.4f%% "
			     "per device\n", pct, pct / p->ngpus);
	}
	fprintf(out, "  whole process (start-up, NVML init, main thread included): %.3f ms CPU\n",
		(double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
			(double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3);
	for (int s = 0; s < NVML_SRC_MAX; s++) {
		const struct gaps *g = &p->src_gaps[s];

		if (!p->runs[s])
			continue;
		fprintf(out, "  source %-8s set %7.2f ms  achieved %7.2f ms (min %.2f max %.2f)  "
			     "runs %" PRIu64 " late %" PRIu64 "  %.1f us/run\n",
			nvml_source_names[s], (double)p->cfg.interval_ns[s] / 1e6,
			g->n ? g->sum_ns / (double)g->n / 1e6 : 0, (double)g->min_ns / 1e6,
			(double)g->max_ns / 1e6, p->runs[s], p->late[s],
			(double)p->call_ns[s] / 1e3 / (double)p->runs[s]);
	}
	for (int i = 0; i < p->ngpus; i++) {
		struct gpu *gp = &p->gpus[i];

		fprintf(out, "  gpu %s %s%s%s (%s):", gp->idx, gp->parent >= 0 ? "mig " : "",
			gp->uuid, "", gp->name);
		for (int st = 0; st < ST_MAX; st++) {
			const struct gaps *g = &gp->s.gaps[st];

			fprintf(out, " %s %" PRIu64 " samples every %.1f ms (min %.1f max %.1f);",
				stream_label[st], gp->s.samples[st],
				g->n ? g->sum_ns / (double)g->n / 1e6 : 0, (double)g->min_ns / 1e6,
				(double)g->max_ns / 1e6);
		}
		fprintf(out, " holes %" PRIu64 "/%" PRIu64 "/%" PRIu64 " errors %" PRIu64 "\n",
			gp->s.holes[0], gp->s.holes[1], gp->s.holes[2], gp->s.errors);
	}
	pthread_mutex_unlock(&p->mu);
}

/* ---- the agent module ------------------------------------------------------------------- */

/*
 * The poller thread does not touch a->batch: run.c swaps batches under its own lock, and
 * tick() (main loop, that lock held) is where modules write. Points wait in a bounded queue;
 * their label strings are interned (bounded) until the queue has been drained.
 */
#define QCAP	   16384
#define QLAB	   5
#define INTERN_CAP 4096

struct qpoint {
	const char *name;	/* metric name; NULL for a gpu_event */
	uint64_t t_ns;
	double v;
	pid_t pid;		/* per-process point: labelled by the label builder at tick; else 0 */
	uint8_t nl, na;
	struct label l[QLAB];	/* interned; the GPU's (no pid) */
	struct label attrs[2];	/* interned */
};

static struct {
	struct nvml_lib *lib;
	struct nvml_poller *p;
	pthread_mutex_t qmu;
	struct qpoint *q;
	size_t head, len;
	char *interned[INTERN_CAP];
	size_t ninterned;
	uint64_t drops_full, drops_intern, drops_batch, drops_relabel, drops_labels;
} mod = { .qmu = PTHREAD_MUTEX_INITIALIZER };

/* Caller holds qmu. NULL when the table is full or memory is short. */
static const char *intern(const char *s)
{
	uint64_t h = hash64(s, strlen(s), 0);

	for (size_t i = 0; i < INTERN_CAP; i++) {
		size_t k = (size_t)((h + i) % INTERN_CAP);

		if (!mod.interned[k]) {
			mod.interned[k] = strdup(s);
			mod.ninterned += mod.interned[k] != NULL;
			return mod.interned[k];
		}
		if (!strcmp(mod.interned[k], s))
			return mod.interned[k];
	}
	return NULL;
}

static bool intern_labels(struct label *dst, const struct label *src, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		dst[i].name = intern(src[i].name);
		dst[i].value = intern(src[i].value);
		if (!dst[i].name || !dst[i].value)
			return false;
	}
	return true;
}

static void q_push(const char *name, const struct label *l, size_t n, uint64_t t_ns, double v,
		   const struct label *attrs, size_t na)
{
	struct qpoint *qp;

	pthread_mutex_lock(&mod.qmu);
	if (mod.len == QCAP) {
		mod.drops_full++;
		goto out;
	}
	qp = &mod.q[(mod.head + mod.len) % QCAP];
	qp->pid = 0;
	if (n && !strcmp(l[n - 1].name, "pid")) {	/* proc_labels(): the GPU's, then pid */
		qp->pid = (pid_t)atoi(l[n - 1].value);
		n--;
	}
	if (n > QLAB || na > 2) {	/* the poller never makes more: no silent cut */
		mod.drops_labels++;
		goto out;
	}
	qp->name = name ? intern(name) : NULL;
	if ((name && !qp->name) || !intern_labels(qp->l, l, n) ||
	    !intern_labels(qp->attrs, attrs, na)) {
		mod.drops_intern++;
		goto out;
	}
	qp->t_ns = t_ns;
	qp->v = v;
	qp->nl = (uint8_t)n;
	qp->na = (uint8_t)na;
	mod.len++;
out:
	pthread_mutex_unlock(&mod.qmu);
}

static void q_metric(void *ctx, const char *name, const struct label *l, size_t n,
		     uint64_t t_ns, double v)
{
	q_push(name, l, n, t_ns, v, NULL, 0);
}

static void q_event(void *ctx, const struct label *l, size_t n, uint64_t t_ns,
		    const struct label *attrs, size_t nattrs)
{
	q_push(NULL, l, n, t_ns, 0, attrs, nattrs);
}

static void intern_reset(void)
{
	for (size_t i = 0; i < INTERN_CAP; i++) {
		free(mod.interned[i]);
		mod.interned[i] = NULL;
	}
	mod.ninterned = 0;
}

/*
 * GPU busy/idle between trace windows (issue 14): each utilization point speaks for the time
 * since the previous one of its GPU (at most 1 s): 0 says idle, full says busy, anything in
 * between says "partly busy" and decides nothing (the GPU-idle filter calls that unknown).
 * Contiguous spans become gpu_observed / gpu_busy intervals labelled with their source:
 * nvml (gpu_utilization, the driver's sample period) or gpm (gpu_sm_active, the GPM window).
 */
#define SPAN_GPUS	64
#define SPAN_MAX_NS	(10 * NSEC_PER_SEC)	/* emit a long span in pieces */
#define SPAN_GAP_NS	NSEC_PER_SEC		/* a point speaks for at most this long */

#define RECENT		64		/* utilization points kept per GPU for the idle trigger */

struct span_src {
	char gpu[24];			/* "": free */
	uint64_t last_t;		/* previous point */
	uint64_t s[2], e[2];		/* pending [observed, busy] span; e == 0: none */
	struct {
		uint64_t t, dur;
		bool idle;
	} recent[RECENT];		/* ring of the last points (nvml source) */
	unsigned nrecent;
};
static struct span_src spans[2][SPAN_GPUS];	/* [nvml, gpm] */
static const char *const span_names[2] = { "nvml", "gpm" };

static void span_emit(struct agent *a, int src, struct span_src *g, int which)
{
	struct label lab[3] = { { "gpu", g->gpu }, { "source", span_names[src] } };
	size_t n = 2;

	if (!g->e[which])
		return;
	if (a->opts.node)
		lab[n++] = (struct label){ "node", a->opts.node };
	if (a->batch && batch__interval(a->batch, which ? "gpu_busy" : "gpu_observed", lab, n,
					g->s[which], g->e[which], -1, NULL, 0))
		mod.drops_batch++;
	g->e[which] = 0;
}

static void span_add(struct agent *a, int src, struct span_src *g, int which, uint64_t s,
		     uint64_t e)
{
	if (g->e[which] && (s > g->e[which] + NSEC_PER_MSEC || e - g->s[which] > SPAN_MAX_NS))
		span_emit(a, src, g, which);
	if (!g->e[which])
		g->s[which] = s;
	g->e[which] = e;
}

static void span_point(struct agent *a, const struct qpoint *qp)
{
	int src = !strcmp(qp->name, "gpu_utilization") ? 0 :
		  !strcmp(qp->name, "gpu_sm_active") ? 1 : -1;
	const char *gpu = NULL;
	struct span_src *g = NULL;
	double full = src == 0 ? 100 : 1;

	if (src < 0)
		return;
	for (size_t i = 0; i < qp->nl && !gpu; i++)
		if (!strcmp(qp->l[i].name, "gpu"))
			gpu = qp->l[i].value;
	if (!gpu || strlen(gpu) >= sizeof(g->gpu))
		return;
	for (int i = 0; i < SPAN_GPUS && !g; i++)
		if (!strcmp(spans[src][i].gpu, gpu))
			g = &spans[src][i];
	for (int i = 0; i < SPAN_GPUS && !g; i++)
		if (!spans[src][i].gpu[0]) {
			g = &spans[src][i];
			strcpy(g->gpu, gpu);
		}
	if (!g)
		return;
	if (g->last_t && qp->t_ns > g->last_t) {
		uint64_t s = qp->t_ns - g->last_t > SPAN_GAP_NS ? qp->t_ns - SPAN_GAP_NS : g->last_t;
		unsigned k = g->nrecent++ % RECENT;

		g->recent[k].t = qp->t_ns;
		g->recent[k].dur = qp->t_ns - s;
		g->recent[k].idle = qp->v <= 0;

		if (qp->v <= 0 || qp->v >= full) {
			span_add(a, src, g, 0, s, qp->t_ns);
			if (qp->v >= full)
				span_add(a, src, g, 1, s, qp->t_ns);
		} else {	/* partly busy: ends what was known */
			span_emit(a, src, g, 0);
			span_emit(a, src, g, 1);
		}
	}
	if (qp->t_ns > g->last_t)
		g->last_t = qp->t_ns;
}

/*
 * The largest idle share of any GPU over the last span_ns (by its utilization points), or -1
 * when no GPU has points covering at least half of it. The cupti module's idle trigger reads
 * it (main-loop thread, like nvml_tick).
 */
static double idle_share(uint64_t span_ns)
{
	uint64_t now = wall_ns();
	double best = -1;

	for (int i = 0; i < SPAN_GPUS; i++) {
		const struct span_src *g = &spans[0][i];
		uint64_t tot = 0, idle = 0;

		if (!g->gpu[0])
			continue;
		for (unsigned k = 0; k < RECENT && k < g->nrecent; k++)
			if (g->recent[k].t + span_ns >= now) {
				tot += g->recent[k].dur;
				idle += g->recent[k].idle ? g->recent[k].dur : 0;
			}
		if (tot >= span_ns / 2 && (double)idle / tot > best)
			best = (double)idle / tot;
	}
	return best;
}

static void spans_flush(struct agent *a)
{
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < SPAN_GPUS; i++) {
			span_emit(a, k, &spans[k][i], 0);
			span_emit(a, k, &spans[k][i], 1);
		}
}

/* Main loop, run.c's lock held: moves the queued points into a->batch. */
static int nvml_tick(struct agent *a)
{
	pthread_mutex_lock(&mod.qmu);
	while (mod.len) {
		const struct qpoint *qp = &mod.q[mod.head];
		const struct label *l = qp->l;
		size_t nl = qp->nl;
		struct agent_labels L;
		int err = -EINVAL;

		if (qp->pid) {
			/* the process's labels (comm, container, pod, relabeling), then the GPU's */
			if (agent__pid_labels(a, qp->pid, 0, NULL, &L) == LABELS_DROPPED) {
				mod.drops_relabel++;
				goto next;
			}
			for (size_t i = 0; i < qp->nl; i++)
				agent_labels__add(&L, qp->l[i].name, qp->l[i].value);
			l = L.l;
			nl = L.n;
		}
		if (a->batch && qp->name) {
			err = batch__metric(a->batch, qp->name, l, nl, qp->t_ns, qp->v);
			if (!err)
				span_point(a, qp);
		}
		else if (a->batch)
			err = batch__interval(a->batch, "gpu_event", l, nl, qp->t_ns, qp->t_ns, -1,
					      qp->attrs, qp->na);
		if (err == -ENOSPC)
			break;	/* the batch is full: keep the rest for the next one */
		if (err)
			mod.drops_batch++;
next:
		mod.head = (mod.head + 1) % QCAP;
		mod.len--;
	}
	/* Nothing refers to the interned strings now: start over before pids fill the table. */
	if (!mod.len && mod.ninterned > INTERN_CAP / 2)
		intern_reset();
	pthread_mutex_unlock(&mod.qmu);
	return 0;
}

/* NVML's index of the GPU or MIG instance with this UUID (hex without its GPU-/MIG- prefix). */
static int gpu_index(const char *uuid)
{
	const struct nvml_poller *p = mod.p;

	for (int i = 0; p && i < p->ngpus; i++) {
		const char *u = p->gpus[i].uuid;

		if (!strncmp(u, "GPU-", 4) || !strncmp(u, "MIG-", 4))
			u += 4;
		if (!strcasecmp(u, uuid))
			return atoi(p->gpus[i].idx);
	}
	return -1;
}

static int nvml_start(struct agent *a)
{
	struct nvml_sink sink = { .ctx = a, .metric = q_metric, .event = q_event };
	struct nvml_cfg cfg;
	const char *why = NULL;
	int err;

	if (a->opts.no_gpu) {
		log_info("nvml: --no-gpu: running CPU-only");
		return -ENOTSUP;
	}
	err = nvml_lib__open(a->opts.nvml_library, &mod.lib, &why);
	if (err) {
		log_info("nvml: running CPU-only: %s", why ? why : strerror(-err));
		return err;
	}
	mod.q = calloc(QCAP, sizeof(*mod.q));
	if (!mod.q) {
		err = -ENOMEM;
		goto out_close;
	}
	nvml_cfg_from_opts(&cfg, &a->opts);
	mod.p = nvml_poller__new(&mod.lib->f, mod.lib->missing, &cfg, a->mono_to_wall_ns, &sink,
				 &why);
	if (!mod.p) {
		err = -errno;
		log_info("nvml: running CPU-only: %s", why ? why : strerror(-err));
		goto out_close;
	}
	if (mod.lib->nmissing)
		log_info("nvml: functions missing from this driver, their metrics are skipped: %s",
			 mod.lib->missing);
	err = nvml_poller__start(mod.p);
	if (err)
		goto out_free;
	cupti_usdt__set_idle_source(idle_share);	/* the trace-window idle trigger */
	cupti_usdt__set_gpu_index(gpu_index);		/* kernels on NVML's GPU numbers */
	log_info("nvml: polling %d device(s)", nvml_poller__ngpus(mod.p));
	return 0;
out_free:
	nvml_poller__free(mod.p);
	mod.p = NULL;
out_close:
	free(mod.q);
	mod.q = NULL;
	nvml_lib__close(mod.lib);
	mod.lib = NULL;
	return err;
}

static void nvml_stop(struct agent *a)
{
	nvml_poller__free(mod.p);	/* joins the poller: nothing pushes after this */
	mod.p = NULL;
	nvml_tick(a);
	cupti_usdt__set_idle_source(NULL);
	cupti_usdt__set_gpu_index(NULL);
	spans_flush(a);
	memset(spans, 0, sizeof(spans));
	free(mod.q);
	mod.q = NULL;
	mod.head = mod.len = 0;
	intern_reset();
	nvml_lib__close(mod.lib);
	mod.lib = NULL;
}

static void nvml_metrics(struct agent *a, FILE *out)
{
	if (!mod.p)
		return;
	nvml_poller__metrics(mod.p, out);
	pthread_mutex_lock(&mod.qmu);
	prom_family(out, "gpuscope_agent_nvml_points_dropped_total", "counter",
		    "NVML points lost before the batch");
	prom_sample1_u64(out, "gpuscope_agent_nvml_points_dropped_total", "reason", "queue_full",
			 mod.drops_full);
	prom_sample1_u64(out, "gpuscope_agent_nvml_points_dropped_total", "reason", "label_table_full",
			 mod.drops_intern);
	prom_sample1_u64(out, "gpuscope_agent_nvml_points_dropped_total", "reason", "batch_refused",
			 mod.drops_batch);
	prom_sample1_u64(out, "gpuscope_agent_nvml_points_dropped_total", "reason",
			 "too_many_labels", mod.drops_labels);
	prom_sample1_u64(out, "gpuscope_agent_nvml_points_dropped_total", "reason", "relabel_drop",
			 mod.drops_relabel);
	pthread_mutex_unlock(&mod.qmu);
}

const struct agent_module nvml_module = {
	.name = "nvml",
	.start = nvml_start,
	.tick = nvml_tick,
	.stop = nvml_stop,
	.metrics = nvml_metrics,
};
