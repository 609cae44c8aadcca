/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVML poller's GPUs: discovery (physical GPUs and MIG instances), what each one supports,
 * their labels, and the poller's lifetime (new, start, stop, free).
 */
#include "agent/gpu/nvml_int.h"

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
		snprintf(whybuf, sizeof(whybuf), "nvmlInit: %s", nvml_errstr(p, r));
		err = ENOENT;
		goto out_free;
	}
	r = NVML_CALL(&p->f, nvmlDeviceGetCount_v2, &count);
	if (r || !count) {
		snprintf(whybuf, sizeof(whybuf), "%s",
			 r ? nvml_errstr(p, r) : "NVML sees no GPU on this node");
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
			log_warn("nvml: gpu %u: %s; skipping it", i, nvml_errstr(p, r));
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
	for (int s = 0; s < NVML_SRC_MAX; s++) {
		p->next_ns[s] = p->start_mono_ns;
		p->mult[s] = 1;
	}
	for (int i = 0; i < p->ngpus; i++) {
		struct gpu *g = &p->gpus[i];

		g->last_mem_used = NAN;
		g->last_proc_util = g->last_proc_mem = NAN;
		for (size_t k = 0; k < ARRAY_SIZE(g->last_gpm); k++)
			g->last_gpm[k] = NAN;
		for (size_t k = 0; k < ARRAY_SIZE(g->last_slow); k++)
			g->last_slow[k] = NAN;
	}
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
	int err = pthread_create(&p->thread, NULL, nvml_poller_thread, p);

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
		int64_t skew = nvml_clock_skew_ns(p);

		for (int i = 0; i < p->ngpus; i++)
			for (int st = 0; st < ST_MAX; st++)
				if (!p->gpus[i].off[NVML_SRC_SAMPLES] && !p->gpus[i].stream_off[st])
					nvml_drain_stream(p, &p->gpus[i], st, skew);
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
