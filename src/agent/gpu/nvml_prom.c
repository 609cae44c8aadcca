/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVML poller on the agent's /metrics: per-GPU gauges under dcgm-exporter's names and ours,
 * the poller's own counters, and the summary `gpuscope-agent nvml` prints.
 */
#include "agent/gpu/nvml_int.h"

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

		have[0][i] = nvml_win_take(&s->w_util, &mx[0][i], &p99[0][i]);
		have[1][i] = nvml_win_take(&s->w_power, &mx[1][i], &p99[1][i]);
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
	prom_family(out, "gpuscope_agent_nvml_interval_multiple", "gauge",
		    "How many intervals apart each source now reads (--nvml-backoff: more than 1 "
		    "while none of its readings changes)");
	for (int s = 0; s < NVML_SRC_MAX; s++)
		if (p->cfg.interval_ns[s])
			prom_sample1_u64(out, "gpuscope_agent_nvml_interval_multiple", "source",
					 nvml_source_names[s], p->mult[s]);
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
