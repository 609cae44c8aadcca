// SPDX-License-Identifier: Apache-2.0
/*
 * The NVML replay library: buffered driver samples, per-process utilization and memory, GPM and
 * events, each available from the trace time the recording first saw it; and what the trace
 * holds, for the tests.
 */
#include "replay_int.h"

API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t d, nvmlSamplingType_t type,
				      unsigned long long lastSeen, nvmlValueType_t *vt,
				      unsigned int *count, nvmlSample_t *samples)
{
	const struct entry *e;
	struct stream *st;
	uint64_t cycle, vc;
	unsigned n = 0;
	char key[64];

	DEV_PROLOGUE(d, v);
	if (!count || (samples && !*count) || !vt)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(key, sizeof(key), "samples %s %d", d->id, type);
	e = lookup(key, v);
	if (!e || type < 0 || type > 2)
		return NVML_ERROR_NOT_SUPPORTED;
	if (e->ret)
		return e->ret;
	st = &d->samples[type];
	*vt = st->vt;
	vc = vnow(&cycle);
	for (uint64_t k = 0; k <= cycle; k++) {
		uint64_t lim = k < cycle ? UINT64_MAX : vc;

		for (size_t i = 0; i < st->n; i++) {
			const struct sample *s = &st->s[i];
			long long out_ts;

			if (k > 0 && s->ts < S.rec_start_wall_us)
				continue;	/* history before the trace: first cycle only */
			out_ts = (long long)s->ts + S.shift_us + (long long)(k * S.dur_us);
			if (s->avail_us > lim || out_ts <= (long long)lastSeen)
				continue;
			if (samples) {
				if (n == *count)
					goto full;
				samples[n].timeStamp = (unsigned long long)out_ts;
				samples[n].sampleValue = s->v;
			}
			n++;
		}
	}
full:
	if (!n)
		return NVML_ERROR_NOT_FOUND;
	*count = n;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d,
						 nvmlProcessUtilizationSample_t *u,
						 unsigned int *count, unsigned long long lastSeen)
{
	const struct entry *e;
	struct stream *st;
	uint64_t cycle, vc;
	unsigned n = 0;

	DEV_PROLOGUE(d, v);
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	e = dev_lookup("procutil", d, v);
	if (!e)
		return NVML_ERROR_NOT_SUPPORTED;
	if (e->ret)
		return e->ret;
	st = &d->proc;
	vc = vnow(&cycle);
	/* Like the driver: only the latest sample of each process, if newer than lastSeen. */
	for (uint64_t k = cycle + 1; k-- > 0 && !n;) {
		uint64_t lim = k < cycle ? UINT64_MAX : vc;

		for (size_t i = st->n; i-- > 0;) {
			const struct sample *s = &st->s[i];
			long long out_ts;
			bool dup = false;

			if (k > 0 && s->ts < S.rec_start_wall_us)
				continue;
			out_ts = (long long)s->ts + S.shift_us + (long long)(k * S.dur_us);
			if (s->avail_us > lim)
				continue;
			if (out_ts <= (long long)lastSeen)
				break;
			for (unsigned j = 0; u && j < n; j++)
				dup |= u[j].pid == s->pid;
			if (dup)
				continue;
			if (u) {
				if (n == *count)
					return NVML_ERROR_INSUFFICIENT_SIZE;	/* like the driver */
				u[n] = (nvmlProcessUtilizationSample_t){
					s->pid, (unsigned long long)out_ts, s->sm, s->mem, s->enc,
					s->dec };
			}
			n++;
		}
	}
	if (!n)
		return NVML_ERROR_NOT_FOUND;
	*count = n;
	/* Like driver 580 on the H200: the size query answers INSUFFICIENT_SIZE with the size. */
	return u ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

#ifndef REPLAY_OLD_DRIVER
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
							 nvmlProcessInfo_t *infos)
{
	const struct entry *e;
	char *copy, *s, *t;
	unsigned n = 0;

	DEV_PROLOGUE(d, v);
	e = dev_lookup("procs", d, v);
	if (!e)
		return NVML_ERROR_NOT_SUPPORTED;
	if (e->ret)
		return e->ret;
	copy = strdup(e->rest);
	s = copy;
	tok(&s);
	while ((t = tok(&s))) {
		nvmlProcessInfo_t pi;

		if (sscanf(t, "%u:%llu:%u:%u", &pi.pid, &pi.usedGpuMemory, &pi.gpuInstanceId,
			   &pi.computeInstanceId) != 4)
			continue;
		if (infos && n < *count)
			infos[n] = pi;
		n++;
	}
	free(copy);
	if (n > *count) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*count = n;
	return NVML_SUCCESS;
}
#endif

#ifndef REPLAY_OLD_DRIVER
API nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *sup)
{
	unsigned long long x = 0;
	nvmlReturn_t r = get_uint_keyed("gpm_support", d, -1, &x);

	if (!r)
		sup->isSupportedDevice = (unsigned)x;
	return r;
}

API nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *s)
{
	*s = calloc(1, sizeof(**s));
	return *s ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

API nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s)
{
	free(s);
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, nvmlGpmSample_t s)
{
	const struct entry *e;

	DEV_PROLOGUE(d, v);
	if (!s)
		return NVML_ERROR_INVALID_ARGUMENT;
	e = dev_lookup("gpm_sample", d, v);
	if (e && e->ret)
		return e->ret;
	s->dev = d;
	s->v_us = v;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m)
{
	const struct entry *e;
	char key[96];

	if (!S.started)
		return NVML_ERROR_UNINITIALIZED;
	if (!m || m->version != NVML_GPM_METRICS_GET_VERSION || !m->sample1 || !m->sample2 ||
	    !m->sample2->dev || m->numMetrics > NVML_GPM_METRIC_MAX)
		return NVML_ERROR_INVALID_ARGUMENT;
	snprintf(key, sizeof(key), "gpm_metrics %s", m->sample2->dev->id);
	e = lookup(key, m->sample2->v_us);
	if (!e)
		return NVML_ERROR_NOT_SUPPORTED;
	if (e->ret)
		return e->ret;
	for (unsigned i = 0; i < m->numMetrics; i++) {
		char *copy = strdup(e->rest), *s = copy, *t;

		m->metrics[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
		tok(&s);
		while ((t = tok(&s))) {
			unsigned id;
			int ret;
			double val;

			if (sscanf(t, "%u:%d:%lf", &id, &ret, &val) == 3 &&
			    id == m->metrics[i].metricId) {
				m->metrics[i].nvmlReturn = ret;
				m->metrics[i].value = val;
				break;
			}
		}
		free(copy);
	}
	return NVML_SUCCESS;
}
#endif

API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	static int token;

	if (!S.started)
		return NVML_ERROR_UNINITIALIZED;
	*set = (nvmlEventSet_t)&token;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types)
{
	return get_uint_keyed("event_types", d, -1, types);
}

API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
					  nvmlEventSet_t set)
{
	DEV_PROLOGUE(d, v);
	(void)v;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
				     unsigned int timeoutms)
{
	uint64_t cycle, v, k, j;
	nvmlReturn_t r = NVML_ERROR_TIMEOUT;

	if (!S.started)
		return NVML_ERROR_UNINITIALIZED;
	pthread_mutex_lock(&S.mu);
	v = vnow(&cycle);
	if (S.nev) {
		k = S.ev_next / S.nev;
		j = S.ev_next % S.nev;
		if (k < cycle || (k == cycle && S.ev[j].t_us <= v)) {
			data->device = S.ev[j].dev;
			data->eventType = S.ev[j].type;
			data->eventData = S.ev[j].data;
			data->gpuInstanceId = S.ev[j].gi;
			data->computeInstanceId = S.ev[j].ci;
			S.ev_next++;
			r = NVML_SUCCESS;
		}
	}
	pthread_mutex_unlock(&S.mu);
	return r;
}

/* ---- for the tests: what the trace holds, in the timescale the replay hands out ---------- */

/* Every buffered sample of stream `type` on device `id`, timestamps shifted. Returns count. */
API int gpuscope_nvml_replay_samples(const char *id, int type, unsigned long long *ts,
				     double *val, int max)
{
	struct nvmlDevice_st *d = dev_get(id, false);
	int n = 0;

	if (!d || type < 0 || type > 2)
		return -1;
	for (size_t i = 0; i < d->samples[type].n && n < max; i++, n++) {
		const struct sample *s = &d->samples[type].s[i];
		int vt = d->samples[type].vt;

		ts[n] = (unsigned long long)((long long)s->ts + S.shift_us);
		val[n] = vt == NVML_VALUE_TYPE_DOUBLE	     ? s->v.dVal :
			 vt == NVML_VALUE_TYPE_UNSIGNED_INT ? (double)s->v.uiVal :
							      (double)s->v.ullVal;
	}
	return n;
}

/* Every per-process sample of device `id`. Returns count. */
API int gpuscope_nvml_replay_proc_samples(const char *id, unsigned *pid, unsigned long long *ts,
					  unsigned *sm, unsigned *mem, int max)
{
	struct nvmlDevice_st *d = dev_get(id, false);
	int n = 0;

	if (!d)
		return -1;
	for (size_t i = 0; i < d->proc.n && n < max; i++, n++) {
		pid[n] = d->proc.s[i].pid;
		ts[n] = (unsigned long long)((long long)d->proc.s[i].ts + S.shift_us);
		sm[n] = d->proc.s[i].sm;
		mem[n] = d->proc.s[i].mem;
	}
	return n;
}

/* 1 once the replay clock has passed the end of the trace (never in loop mode). */
API int gpuscope_nvml_replay_finished(void)
{
	return S.started && !S.loop && vnow(NULL) > S.dur_us;
}

API long long gpuscope_nvml_replay_shift_us(void)
{
	return S.shift_us;
}
