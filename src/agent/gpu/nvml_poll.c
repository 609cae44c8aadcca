/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVML/GPM poller's thread. Every source has its own rate. Buffered driver samples
 * (utilization, memory utilization, power) are drained with lastSeenTimeStamp and keep their own
 * timestamps; polled values get the agent clock.
 */
#include "agent/gpu/nvml_int.h"
#include "agent/selfprof.h"

static const char *const stream_metric[ST_MAX] = { "gpu_power_watts", "gpu_utilization",
						   "gpu_memory_util" };
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
bool nvml_win_take(struct window *w, double *ret_max, double *ret_p99)
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

const char *nvml_errstr(struct nvml_poller *p, nvmlReturn_t r)
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
int64_t nvml_clock_skew_ns(struct nvml_poller *p)
{
	int64_t skew = (int64_t)(wall_ns() - agent_now_ns(p));

	return (skew > (int64_t)SKEW_MIN_NS || skew < -(int64_t)SKEW_MIN_NS) ? skew : 0;
}

/* The process source's "same": its new samples' mean SM utilization within 5 points, the
 * processes' memory within 64 MiB, the same pids. */
#define PROC_SAME_UTIL	5.0
#define PROC_SAME_BYTES	(64.0 * 1024 * 1024)

/*
 * Keeps v as the last reading in *last; a change (more than same apart, or a first reading)
 * marks this run of the source as changed: its cadence goes back to every interval.
 */
static void note(struct nvml_poller *p, double *last, double v, double same)
{
	if (isnan(*last) || fabs(v - *last) > same)
		p->changed = true;
	*last = v;
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
			 g->idx, g->uuid, what, nvml_errstr(p, r));
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
			log_info("nvml: gpu %s: %s: %s; skipping it", g->idx, what, nvml_errstr(p, r));
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
void nvml_drain_stream(struct nvml_poller *p, struct gpu *g, int st, int64_t skew)
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
	skew = nvml_clock_skew_ns(p);
	for (int st = 0; st < ST_MAX; st++) {
		/* Each drain costs ~1.8 ms of CPU on the H200 whatever it returns; the driver keeps
		 * ~14 s of utilization samples but only ~2.4 s of power samples. */
		if (st != ST_POWER && g->drains % UTIL_DRAIN_EVERY)
			continue;
		if (!g->stream_off[st] && now >= g->retry_at_ns)
			nvml_drain_stream(p, g, st, skew);
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
	note(p, &g->last_mem_used, (double)used, 0);
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
		bool ok = mg->metrics[i].nvmlReturn == NVML_SUCCESS;
		double v;

		/* the ratios (0..1) tell a change: NaN (counters that did not move) reads as 0; a
		 * ratio at 0 or 1 (a window that decides idle or busy) only equals another such */
		if (i < ARRAY_SIZE(g->last_gpm) && ok) {
			double r = isnan(mg->metrics[i].value) ? 0 :
								 mg->metrics[i].value * gpm_defs[i].scale;
			double was = g->last_gpm[i];

			if (!isnan(was) && (r <= 0 || r >= 1 || was <= 0 || was >= 1) && r != was)
				p->changed = true;
			note(p, &g->last_gpm[i], r, GPM_SAME_DELTA);
		}
		/* NaN: the counters did not move between the samples (0/0) */
		if (!ok || isnan(mg->metrics[i].value))
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
			note(p, &g->last_slow[0], v, 0);
			emit(p, "gpu_sm_clock_mhz", g->lab, g->nlab, t, v);
			set_gauge(p, g, G_SM_CLOCK, v);
		}
		r = NVML_CALL(&p->f, nvmlDeviceGetClockInfo, g->h, NVML_CLOCK_MEM, &v);
		if (check(p, g, r, "nvmlDeviceGetClockInfo", &g->clock_off) > 0) {
			note(p, &g->last_slow[1], v, 0);
			emit(p, "gpu_mem_clock_mhz", g->lab, g->nlab, t, v);
			set_gauge(p, g, G_MEM_CLOCK, v);
		}
	}
	if (p->f.nvmlDeviceGetTemperature && !g->temp_off) {
		r = NVML_CALL(&p->f, nvmlDeviceGetTemperature, g->h, NVML_TEMPERATURE_GPU, &v);
		if (check(p, g, r, "nvmlDeviceGetTemperature", &g->temp_off) > 0) {
			note(p, &g->last_slow[2], v, TEMP_SAME_DELTA - 1);
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
			note(p, &g->last_slow[3], (double)reasons, 0);
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
		int64_t skew = nvml_clock_skew_ns(p);
		double util = 0;
		unsigned fresh = 0;

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
				util += us[i].smUtil;
				fresh++;
			}
			g->proc_last_seen = newest;
			if (fresh)
				note(p, &g->last_proc_util, util / fresh, PROC_SAME_UTIL);
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
			uint64_t pids = 0;
			double mem = 0;

			for (unsigned i = 0; i < n && i < PROC_CAP; i++) {
				size_t nl = proc_labels(g, l, pidbuf, sizeof(pidbuf), pi[i].pid);

				emit(p, "gpu_process_memory_bytes", l, nl, t,
				     (double)pi[i].usedGpuMemory);
				pids += hash64(&pi[i].pid, sizeof(pi[i].pid), 0x9);	/* any order */
				mem += (double)pi[i].usedGpuMemory;
			}
			if (pids != g->last_proc_pids)
				p->changed = true;
			g->last_proc_pids = pids;
			note(p, &g->last_proc_mem, mem, PROC_SAME_BYTES);
		}
	}
}

_Static_assert(SELF_NVML_FIELDS - SELF_NVML_SAMPLES + 1 == NVML_SRC_MAX,
	       "selfprof.h: one activity per NVML source, in enum nvml_source's order");

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

/*
 * The interval multiple of source s after a run (cfg.backoff_max): back to 1 when a reading
 * changed, doubled (up to the maximum) after BACKOFF_AFTER runs with none. Readings of memory,
 * GPM and clocks repeat while a job runs steadily or the GPU sits idle; each repeat costs a call
 * (GPM: ~0.2 ms) and tells nothing. Caller holds p->mu.
 */
static unsigned follow_changes(struct nvml_poller *p, int s)
{
	unsigned max = p->cfg.backoff_max ? p->cfg.backoff_max : 1;

	if (s != NVML_SRC_MEMORY && s != NVML_SRC_GPM && s != NVML_SRC_SLOW &&
	    s != NVML_SRC_PROCESS)
		return 1;
	if (p->changed || max <= 1) {
		p->mult[s] = 1;
		p->streak[s] = 0;
	} else if (++p->streak[s] >= BACKOFF_AFTER && p->mult[s] < max) {
		p->mult[s] = p->mult[s] * 2 < max ? p->mult[s] * 2 : max;
		p->streak[s] = 0;
	}
	return p->mult[s];
}

void nvml_poller__poll(struct nvml_poller *p, uint64_t now)
{
	for (int s = 0; s < NVML_SRC_MAX; s++) {
		uint64_t iv = p->cfg.interval_ns[s], t0;
		unsigned act;

		if (!iv || now < p->next_ns[s])
			continue;
		act = selfprof_enter(SELF_NVML_SAMPLES + s);
		p->changed = false;
		t0 = mono_ns();
		for (int i = 0; i < p->ngpus; i++) {
			struct gpu *g = &p->gpus[i];

			if (g->off[s] || t0 < g->retry_at_ns)
				continue;
			pollers[s](p, g, now);
		}
		if (s == NVML_SRC_SLOW)
			poll_events(p);
		selfprof_leave(act);
		pthread_mutex_lock(&p->mu);
		p->runs[s]++;
		p->call_ns[s] += mono_ns() - t0;
		gaps_add(&p->src_gaps[s], t0);
		iv *= follow_changes(p, s);
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

void *nvml_poller_thread(void *arg)
{
	struct nvml_poller *p = arg;

	selfprof_thread(SELF_NVML_POLLER);
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
