// SPDX-License-Identifier: Apache-2.0
/* The NVML replay library: reading the trace (format: docs/nvml.md) into timelines and streams. */
#include "replay_int.h"

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n);

	if (!q) {
		fprintf(stderr, "nvml-replay: out of memory\n");
		abort();
	}
	return q;
}

static unsigned hash(const char *s)
{
	unsigned h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % NBUCKETS;
}

struct timeline *tl_get(const char *key, bool create)
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

struct nvmlDevice_st *dev_get(const char *id, bool create)
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

nvmlValue_t parse_value(int vt, const char *s)
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
char *tok(char **s)
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

int load(void)
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
