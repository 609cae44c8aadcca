// SPDX-License-Identifier: Apache-2.0
/*
 * A stand-in libnvidia-ml.so.1 with NVML's ABI that plays back a trace recorded by
 * `gpuscope-agent nvml-record` (format: docs/nvml.md), named by GPUSCOPE_NVML_REPLAY, so the
 * production poller runs unchanged where there is no GPU. State-like calls answer the latest
 * recorded result at the replay's clock; buffered samples become available when the recording
 * first saw them and keep their spacing (shifted so the trace starts now).
 * This file: the clock, discovery and state-like calls (replay_int.h says where the rest is).
 * Built twice: as a current driver, and with -DREPLAY_OLD_DRIVER lacking newer entry points.
 */
#include "replay_int.h"

struct replay_state S = { .mu = PTHREAD_MUTEX_INITIALIZER };


uint64_t now_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t now_wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

uint64_t vnow(uint64_t *cycle)
{
	uint64_t v = (uint64_t)((double)(now_mono_ns() - S.start_mono_ns) / 1000.0 * S.speed);

	if (S.loop && S.dur_us) {
		if (cycle)
			*cycle = v / S.dur_us;
		return v % S.dur_us;
	}
	if (cycle)
		*cycle = 0;
	return v;
}

const struct entry *lookup(const char *key, uint64_t v)
{
	struct timeline *t = tl_get(key, false);
	size_t lo = 0, hi;

	if (!t || !t->n)
		return NULL;
	hi = t->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (t->e[mid].t_us <= v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return &t->e[lo ? lo - 1 : 0];
}

int fault_of(struct nvmlDevice_st *d, uint64_t v)
{
	for (int i = 0; i < d->nfaults; i++)
		if (v >= d->faults[i].from_us && v < d->faults[i].to_us)
			return d->faults[i].ret;
	return 0;
}

const struct entry *dev_lookup(const char *call, struct nvmlDevice_st *d, uint64_t v)
{
	char key[96];

	snprintf(key, sizeof(key), "%s %s", call, d->id);
	return lookup(key, v);
}

API nvmlReturn_t nvmlInit_v2(void)
{
	int err = 0;

	pthread_mutex_lock(&S.mu);
	if (!S.loaded) {
		S.load_err = load();
		S.loaded = true;
	}
	err = S.load_err;
	if (!err && !S.started) {
		const struct entry *e = lookup("init", 0);

		if (e && e->ret) {
			err = e->ret;
			goto out;
		}
		S.start_mono_ns = now_mono_ns();
		S.start_wall_us = now_wall_us();
		S.shift_us = (long long)S.start_wall_us - (long long)S.rec_start_wall_us;
		S.started = true;
	}
	if (!err)
		S.inits++;
out:
	pthread_mutex_unlock(&S.mu);
	return err;
}

/* Reference counted like NVML; the replay clock keeps running so a re-init continues. */
API nvmlReturn_t nvmlShutdown(void)
{
	pthread_mutex_lock(&S.mu);
	if (S.inits > 0)
		S.inits--;
	pthread_mutex_unlock(&S.mu);
	return NVML_SUCCESS;
}

API const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT:
		return "Timeout";
	case NVML_ERROR_GPU_IS_LOST:
		return "GPU is lost";
	default:
		return "Unknown Error";
	}
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	const struct entry *e = lookup("driver_version", 0);

	if (!S.started)
		return NVML_ERROR_UNINITIALIZED;
	if (!e || e->ret)
		return e ? e->ret : NVML_ERROR_NOT_SUPPORTED;
	snprintf(version, length, "%s", e->rest ? e->rest + (*e->rest == ' ') : "");
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	const struct entry *e;

	if (!S.started)
		return NVML_ERROR_UNINITIALIZED;
	e = lookup("count", vnow(NULL));
	if (!e)
		return NVML_ERROR_UNKNOWN;
	if (!e->ret)
		*count = (unsigned)strtoul(e->rest, NULL, 10);
	return e->ret;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	char key[32], id[16];
	const struct entry *e;

	if (!S.started)
		return NVML_ERROR_UNINITIALIZED;
	snprintf(key, sizeof(key), "handle %u", index);
	e = lookup(key, vnow(NULL));
	if (!e)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (e->ret)
		return e->ret;
	snprintf(id, sizeof(id), "%u", index);
	*device = dev_get(id, false);
	return *device ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t get_string(const char *call, nvmlDevice_t d, char *buf, unsigned int len)
{
	const struct entry *e;

	DEV_PROLOGUE(d, v);
	e = dev_lookup(call, d, v);
	if (!e)
		return NVML_ERROR_NOT_SUPPORTED;
	if (e->ret)
		return e->ret;
	const char *s = e->rest ? e->rest + strspn(e->rest, " ") : "";

	if (strlen(s) + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	snprintf(buf, len, "%s", s);
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
	return get_string("uuid", d, uuid, length);
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
	return get_string("name", d, name, length);
}

#ifndef REPLAY_OLD_DRIVER
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	const struct entry *e;

	DEV_PROLOGUE(d, v);
	if (!m || m->version != nvmlMemory_v2)
		return m ? 25 /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */ :
			   NVML_ERROR_INVALID_ARGUMENT;
	e = dev_lookup("meminfo2", d, v);
	if (!e) {
		e = dev_lookup("meminfo", d, v);
		if (!e)
			return NVML_ERROR_NOT_SUPPORTED;
		if (!e->ret && sscanf(e->rest, "%llu %llu %llu", &m->total, &m->free, &m->used) != 3)
			return NVML_ERROR_UNKNOWN;
		m->reserved = 0;
		return e->ret;
	}
	if (!e->ret && sscanf(e->rest, "%llu %llu %llu %llu", &m->total, &m->reserved, &m->free,
			      &m->used) != 4)
		return NVML_ERROR_UNKNOWN;
	return e->ret;
}
#endif

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	unsigned long long reserved;
	const struct entry *e;

	DEV_PROLOGUE(d, v);
	e = dev_lookup("meminfo", d, v);
	if (e) {
		if (!e->ret &&
		    sscanf(e->rest, "%llu %llu %llu", &m->total, &m->free, &m->used) != 3)
			return NVML_ERROR_UNKNOWN;
		return e->ret;
	}
	e = dev_lookup("meminfo2", d, v);
	if (!e)
		return NVML_ERROR_NOT_SUPPORTED;
	if (!e->ret && sscanf(e->rest, "%llu %llu %llu %llu", &m->total, &reserved, &m->free,
			      &m->used) != 4)
		return NVML_ERROR_UNKNOWN;
	m->used += reserved;	/* v1's used counts the reserved memory too */
	return e->ret;
}

API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int n, nvmlFieldValue_t *values)
{
	const struct entry *e;

	DEV_PROLOGUE(d, v);
	e = dev_lookup("fields", d, v);
	if (!e)
		return NVML_ERROR_NOT_SUPPORTED;
	if (e->ret)
		return e->ret;
	for (int i = 0; i < n; i++) {
		char *copy = strdup(e->rest), *s = copy, *t;

		values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
		tok(&s);	/* recorded count */
		while ((t = tok(&s))) {
			unsigned id, scope;
			int ret, vt, off = 0;
			long long ts;

			if (sscanf(t, "%u:%u:%d:%d:%lld:%n", &id, &scope, &ret, &vt, &ts, &off) < 5 ||
			    !off || id != values[i].fieldId)
				continue;
			values[i].nvmlReturn = ret;
			values[i].valueType = vt;
			values[i].timestamp = ts + S.shift_us;
			values[i].latencyUsec = 0;
			values[i].value = parse_value(vt, t + off);
			break;
		}
		free(copy);
	}
	return NVML_SUCCESS;
}

nvmlReturn_t get_uint_keyed(const char *call, nvmlDevice_t d, int sub,
				   unsigned long long *ret)
{
	const struct entry *e;
	char key[96];

	DEV_PROLOGUE(d, v);
	if (sub >= 0)
		snprintf(key, sizeof(key), "%s %s %d", call, d->id, sub);
	else
		snprintf(key, sizeof(key), "%s %s", call, d->id);
	e = lookup(key, v);
	if (!e)
		return NVML_ERROR_NOT_SUPPORTED;
	if (!e->ret)
		*ret = strtoull(e->rest, NULL, 10);
	return e->ret;
}

API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, nvmlClockType_t type, unsigned int *c)
{
	unsigned long long x = 0;
	nvmlReturn_t r = get_uint_keyed("clock", d, type, &x);

	if (!r)
		*c = (unsigned)x;
	return r;
}

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, nvmlTemperatureSensors_t s,
					  unsigned int *c)
{
	unsigned long long x = 0;
	nvmlReturn_t r = get_uint_keyed("temp", d, s, &x);

	if (!r)
		*c = (unsigned)x;
	return r;
}

#ifndef REPLAY_OLD_DRIVER
API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *m)
{
	return get_uint_keyed("throttle", d, -1, m);
}
#endif

API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *m)
{
	return get_uint_keyed("throttle", d, -1, m);
}

API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *cur, unsigned int *pend)
{
	const struct entry *e;

	DEV_PROLOGUE(d, v);
	e = dev_lookup("mig_mode", d, v);
	if (!e)
		return NVML_ERROR_NOT_SUPPORTED;
	if (!e->ret && sscanf(e->rest, "%u %u", cur, pend) != 2)
		return NVML_ERROR_UNKNOWN;
	return e->ret;
}

API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *n)
{
	unsigned long long x = 0;
	nvmlReturn_t r = get_uint_keyed("mig_max", d, -1, &x);

	if (!r)
		*n = (unsigned)x;
	return r;
}

API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int i,
						     nvmlDevice_t *mig)
{
	const struct entry *e;
	char key[96], id[40];

	DEV_PROLOGUE(d, v);
	snprintf(key, sizeof(key), "mig_handle %s %u", d->id, i);
	e = lookup(key, v);
	if (!e)
		return NVML_ERROR_NOT_FOUND;
	if (e->ret)
		return e->ret;
	snprintf(id, sizeof(id), "%sm%u", d->id, i);
	*mig = dev_get(id, false);
	return *mig ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}
