// SPDX-License-Identifier: Apache-2.0
/*
 * A stand-in libnvidia-ml.so.1 with NVML's ABI that plays back a trace recorded by
 * `gpuscope-agent nvml-record` (format: docs/nvml.md), named by GPUSCOPE_NVML_REPLAY, so the
 * production poller runs unchanged where there is no GPU. State-like calls answer the latest
 * recorded result at the replay's clock; buffered samples become available when the recording
 * first saw them and keep their spacing (shifted so the trace starts now).
 * Built twice: as a current driver, and with -DREPLAY_OLD_DRIVER lacking newer entry points.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>
#include "agent/gpu/nvml_api.h"

#define API __attribute__((visibility("default")))
#define MAX_DEVS 128
#define NBUCKETS 1024
#define LINE_MAX_LEN (4 << 20)

struct entry {		/* one recorded call in a timeline */
	uint64_t t_us;
	int ret;
	char *rest;	/* the outputs, unparsed; NULL when not kept */
};

struct timeline {
	char *key;
	struct entry *e;
	size_t n, cap;
	struct timeline *next;	/* hash chain */
};

struct sample {		/* a buffered driver sample (or per-process sample) */
	uint64_t avail_us;	/* trace time when the recording first read it */
	unsigned long long ts;	/* recorded timestamp, us since 1970 */
	nvmlValue_t v;
	unsigned pid, sm, mem, enc, dec;
};

struct stream {
	struct sample *s;
	size_t n, cap;
	int vt;
};

struct fault {
	uint64_t from_us, to_us;
	int ret;
};

struct nvmlDevice_st {
	char id[16];
	struct stream samples[3];
	struct stream proc;
	struct fault faults[16];
	int nfaults;
};

struct nvmlGpmSample_st {
	struct nvmlDevice_st *dev;
	uint64_t v_us;
};

struct event {
	uint64_t t_us;
	struct nvmlDevice_st *dev;
	unsigned long long type, data;
	unsigned gi, ci;
};

static struct {
	pthread_mutex_t mu;
	bool loaded, started;
	int load_err;
	uint64_t rec_start_wall_us, dur_us;
	uint64_t start_mono_ns, start_wall_us;
	long long shift_us;
	double speed;
	bool loop;
	struct timeline *buckets[NBUCKETS];
	struct nvmlDevice_st devs[MAX_DEVS];
	int ndevs;
	struct event *ev;
	size_t nev, evcap;
	uint64_t ev_next;	/* events delivered so far, over all loop cycles */
	int inits;
} S = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n);

	if (!q) {
		fprintf(stderr, "nvml-replay: out of memory\n");
		abort();
	}
	return q;
}

static uint64_t now_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t now_wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000;
}

static unsigned hash(const char *s)
{
	unsigned h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % NBUCKETS;
}

static struct timeline *tl_get(const char *key, bool create)
{
	unsigned h = hash(key);
	struct timeline *t;

	for (t = S.buckets[h]; t; t = t->next)
		if (!strcmp(t->key, key))
			return t;
	if (!create)
		return NULL;
	t = xrealloc(NULL, sizeof(*t));
	memset(t, 0, sizeof(*t));
	t->key = strdup(key);
	t->next = S.buckets[h];
	S.buckets[h] = t;
	return t;
}

static void tl_add(const char *key, uint64_t t_us, int ret, const char *rest)
{
	struct timeline *t = tl_get(key, true);

	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 16;
		t->e = xrealloc(t->e, t->cap * sizeof(*t->e));
	}
	t->e[t->n++] = (struct entry){ t_us, ret, rest ? strdup(rest) : NULL };
}

static struct nvmlDevice_st *dev_get(const char *id, bool create)
{
	for (int i = 0; i < S.ndevs; i++)
		if (!strcmp(S.devs[i].id, id))
			return &S.devs[i];
	if (!create || S.ndevs == MAX_DEVS)
		return NULL;
	snprintf(S.devs[S.ndevs].id, sizeof(S.devs[0].id), "%s", id);
	return &S.devs[S.ndevs++];
}

static void stream_add(struct stream *st, const struct sample *s)
{
	if (st->n == st->cap) {
		st->cap = st->cap ? 2 * st->cap : 64;
		st->s = xrealloc(st->s, st->cap * sizeof(*st->s));
	}
	st->s[st->n++] = *s;
}

static nvmlValue_t parse_value(int vt, const char *s)
{
	nvmlValue_t v = { 0 };

	switch (vt) {
	case NVML_VALUE_TYPE_DOUBLE:
		v.dVal = strtod(s, NULL);
		break;
	case NVML_VALUE_TYPE_UNSIGNED_INT:
		v.uiVal = (unsigned)strtoul(s, NULL, 10);
		break;
	case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
		v.sllVal = strtoll(s, NULL, 10);
		break;
	case NVML_VALUE_TYPE_SIGNED_INT:
		v.siVal = (int)strtol(s, NULL, 10);
		break;
	case NVML_VALUE_TYPE_UNSIGNED_SHORT:
		v.usVal = (unsigned short)strtoul(s, NULL, 10);
		break;
	default:
		v.ullVal = strtoull(s, NULL, 10);
	}
	return v;
}

/* Splits off the next space-separated token; NULL at the end. */
static char *tok(char **s)
{
	char *p = *s, *b;

	while (*p == ' ')
		p++;
	if (!*p)
		return NULL;
	b = p;
	while (*p && *p != ' ')
		p++;
	if (*p)
		*p++ = 0;
	*s = p;
	return b;
}

static int cmp_sample(const void *a, const void *b)
{
	const struct sample *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

static int cmp_entry(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	return x->t_us < y->t_us ? -1 : x->t_us > y->t_us;
}

/* Sorts a stream by timestamp and keeps the first sighting of each (ts, pid). */
static void stream_finish(struct stream *st)
{
	size_t w = 0;

	qsort(st->s, st->n, sizeof(*st->s), cmp_sample);
	for (size_t i = 0; i < st->n; i++) {
		if (w && st->s[w - 1].ts == st->s[i].ts && st->s[w - 1].pid == st->s[i].pid) {
			if (st->s[i].avail_us < st->s[w - 1].avail_us)
				st->s[w - 1].avail_us = st->s[i].avail_us;
			continue;
		}
		st->s[w++] = st->s[i];
	}
	st->n = w;
}

static int parse_line(char *line)
{
	char *s = line, *ts, *call, *dev, *x, key[96];
	uint64_t t;
	int ret;

	line[strcspn(line, "\n")] = 0;
	if (!*line || *line == '#')
		return 0;
	ts = tok(&s);
	call = tok(&s);
	if (!ts || !call)
		return -EINVAL;
	t = strtoull(ts, NULL, 10);
	if (t + 1000 > S.dur_us)
		S.dur_us = t + 1000;
	if (!strcmp(call, "init") || !strcmp(call, "count") || !strcmp(call, "driver_version")) {
		ret = atoi(tok(&s) ?: "999");
		tl_add(call, t, ret, s);
	} else if (!strcmp(call, "shutdown") || !strcmp(call, "event_register")) {
		return 0;
	} else if (!strcmp(call, "handle")) {
		x = tok(&s);
		ret = atoi(tok(&s) ?: "999");
		if (!x)
			return -EINVAL;
		snprintf(key, sizeof(key), "handle %s", x);
		tl_add(key, t, ret, NULL);
		if (!ret)
			dev_get(x, true);
	} else if (!strcmp(call, "mig_handle")) {
		char id[40];

		dev = tok(&s);
		x = tok(&s);
		ret = atoi(tok(&s) ?: "999");
		if (!dev || !x)
			return -EINVAL;
		snprintf(key, sizeof(key), "mig_handle %s %s", dev, x);
		tl_add(key, t, ret, NULL);
		snprintf(id, sizeof(id), "%sm%s", dev, x);
		if (!ret)
			dev_get(id, true);
	} else if (!strcmp(call, "clock") || !strcmp(call, "temp")) {
		dev = tok(&s);
		x = tok(&s);
		ret = atoi(tok(&s) ?: "999");
		if (!dev || !x)
			return -EINVAL;
		snprintf(key, sizeof(key), "%s %s %s", call, dev, x);
		tl_add(key, t, ret, s);
	} else if (!strcmp(call, "samples")) {
		struct nvmlDevice_st *d;
		char *type = NULL, *vt_s, *n_s, *pair;
		int type_i, vt;

		dev = tok(&s);
		type = tok(&s);
		tok(&s);	/* lastSeen */
		ret = atoi(tok(&s) ?: "999");
		if (!dev || !type)
			return -EINVAL;
		type_i = atoi(type);
		snprintf(key, sizeof(key), "samples %s %d", dev, type_i);
		tl_add(key, t, ret == NVML_ERROR_NOT_FOUND ? 0 : ret, NULL);
		d = dev_get(dev, true);
		if (ret || type_i < 0 || type_i > 2 || !d)
			return 0;
		vt_s = tok(&s);
		n_s = tok(&s);
		if (!vt_s || !n_s)
			return -EINVAL;
		vt = atoi(vt_s);
		d->samples[type_i].vt = vt;
		while ((pair = tok(&s))) {
			struct sample sm = { .avail_us = t };
			char *colon = strchr(pair, ':');

			if (!colon)
				return -EINVAL;
			*colon = 0;
			sm.ts = strtoull(pair, NULL, 10);
			sm.v = parse_value(vt, colon + 1);
			stream_add(&d->samples[type_i], &sm);
		}
	} else if (!strcmp(call, "procutil")) {
		struct nvmlDevice_st *d;
		char *tup;

		dev = tok(&s);
		tok(&s);	/* lastSeen */
		ret = atoi(tok(&s) ?: "999");
		if (!dev)
			return -EINVAL;
		snprintf(key, sizeof(key), "procutil %s", dev);
		/* NOT_FOUND (nothing new) and INSUFFICIENT_SIZE (the recorder's buffer) are not
		 * states of the device: the replay decides those itself. */
		tl_add(key, t, ret == NVML_ERROR_NOT_FOUND || ret == NVML_ERROR_INSUFFICIENT_SIZE ?
				       0 : ret, NULL);
		d = dev_get(dev, true);
		if (ret || !d)
			return 0;
		tok(&s);	/* n */
		while ((tup = tok(&s))) {
			struct sample sm = { .avail_us = t };

			if (sscanf(tup, "%u:%llu:%u:%u:%u:%u", &sm.pid, &sm.ts, &sm.sm, &sm.mem,
				   &sm.enc, &sm.dec) != 6)
				return -EINVAL;
			stream_add(&d->proc, &sm);
		}
	} else if (!strcmp(call, "event")) {
		struct event e = { .t_us = t };

		ret = atoi(tok(&s) ?: "999");
		dev = tok(&s);
		if (ret || !dev)
			return 0;
		e.dev = dev_get(dev, true);
		if (sscanf(s, "%llu %llu %u %u", &e.type, &e.data, &e.gi, &e.ci) != 4)
			return -EINVAL;
		if (S.nev == S.evcap) {
			S.evcap = S.evcap ? 2 * S.evcap : 16;
			S.ev = xrealloc(S.ev, S.evcap * sizeof(*S.ev));
		}
		S.ev[S.nev++] = e;
	} else if (!strcmp(call, "fault")) {
		struct nvmlDevice_st *d;
		unsigned long long dur;

		dev = tok(&s);
		ret = atoi(tok(&s) ?: "999");
		x = tok(&s);
		d = dev ? dev_get(dev, true) : NULL;
		if (!d || !x)
			return -EINVAL;
		dur = strtoull(x, NULL, 10);
		if (d->nfaults < 16)
			d->faults[d->nfaults++] = (struct fault){ t, t + dur, ret };
	} else {
		/* "<call> <dev> <ret> <outputs...>" */
		dev = tok(&s);
		ret = atoi(tok(&s) ?: "999");
		if (!dev)
			return -EINVAL;
		snprintf(key, sizeof(key), "%s %s", call, dev);
		tl_add(key, t, ret, s);
	}
	return 0;
}

static int load(void)
{
	const char *path = getenv("GPUSCOPE_NVML_REPLAY"), *sp;
	char *line = NULL, head[256];
	unsigned lineno = 1;
	gzFile f;
	int err = 0;

	if (!path) {
		fprintf(stderr, "nvml-replay: GPUSCOPE_NVML_REPLAY is not set\n");
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
	f = gzopen(path, "rb");
	if (!f) {
		fprintf(stderr, "nvml-replay: open '%s': %s\n", path, strerror(errno));
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
	if (!gzgets(f, head, sizeof(head)) || strncmp(head, "gpuscope-nvml-trace 1 ", 22) ||
	    !strstr(head, "start_wall_us=")) {
		fprintf(stderr, "nvml-replay: '%s' is not a version 1 gpuscope NVML trace\n", path);
		err = NVML_ERROR_DRIVER_NOT_LOADED;
		goto out;
	}
	S.rec_start_wall_us = strtoull(strstr(head, "start_wall_us=") + 14, NULL, 10);
	line = xrealloc(NULL, LINE_MAX_LEN);
	while (gzgets(f, line, LINE_MAX_LEN)) {
		lineno++;
		if (parse_line(line)) {
			fprintf(stderr, "nvml-replay: %s:%u: malformed line\n", path, lineno);
			err = NVML_ERROR_DRIVER_NOT_LOADED;
			goto out;
		}
	}
	for (int i = 0; i < NBUCKETS; i++)
		for (struct timeline *t = S.buckets[i]; t; t = t->next)
			qsort(t->e, t->n, sizeof(*t->e), cmp_entry);
	for (int i = 0; i < S.ndevs; i++) {
		for (int k = 0; k < 3; k++)
			stream_finish(&S.devs[i].samples[k]);
		stream_finish(&S.devs[i].proc);
	}
	sp = getenv("GPUSCOPE_NVML_REPLAY_SPEED");
	S.speed = sp ? strtod(sp, NULL) : 1.0;
	if (!(S.speed > 0))
		S.speed = 1.0;
	S.loop = getenv("GPUSCOPE_NVML_REPLAY_LOOP") && *getenv("GPUSCOPE_NVML_REPLAY_LOOP") == '1';
out:
	free(line);
	gzclose(f);
	return err;
}

/* The replay clock: us of trace time since the first nvmlInit, and the loop cycle. */
static uint64_t vnow(uint64_t *cycle)
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

/* The latest entry at or before v, else the first; NULL if the call was never recorded. */
static const struct entry *lookup(const char *key, uint64_t v)
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

static int fault_of(struct nvmlDevice_st *d, uint64_t v)
{
	for (int i = 0; i < d->nfaults; i++)
		if (v >= d->faults[i].from_us && v < d->faults[i].to_us)
			return d->faults[i].ret;
	return 0;
}

/* Common prologue of a per-device call: initialised, valid handle, no fault. */
#define DEV_PROLOGUE(d, v)                                                                         \
	uint64_t v;                                                                                \
	int fr_;                                                                                   \
	if (!S.started)                                                                            \
		return NVML_ERROR_UNINITIALIZED;                                                   \
	if (!(d) || (d) < S.devs || (d) >= S.devs + S.ndevs)                                       \
		return NVML_ERROR_INVALID_ARGUMENT;                                                \
	v = vnow(NULL);                                                                            \
	fr_ = fault_of((d), v);                                                                    \
	if (fr_)                                                                                   \
		return fr_;

static const struct entry *dev_lookup(const char *call, struct nvmlDevice_st *d, uint64_t v)
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

static nvmlReturn_t get_uint_keyed(const char *call, nvmlDevice_t d, int sub,
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
