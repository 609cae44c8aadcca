// SPDX-License-Identifier: Apache-2.0
/* pm_sampling (see pm_sampling.h): loading libcuda and libcupti, the config image, sampling. */
#include "pm_sampling.h"

#define DEF(f) typeof(f) *p_##f;
CU_EARLY(DEF)
CU_REST(DEF)
CUPTI_FNS(DEF)
#undef DEF

/* ---- loading ------------------------------------------------------------------------------------ */
static void *cuda_lib;

void load_cuda_early(void)
{
	cuda_lib = dlopen(opt.libcuda, RTLD_NOW | RTLD_GLOBAL);
	if (!cuda_lib)
		skip("no CUDA driver (%s)", dlerror());
#define LOAD_EARLY(f)                                                                              \
	p_##f = (typeof(f) *)dlsym(cuda_lib, STR(f));                                             \
	if (!p_##f)                                                                                \
		skip("no CUDA driver: %s lacks %s", opt.libcuda, STR(f));
	CU_EARLY(LOAD_EARLY)
}

void load_cuda_rest(void)
{
#define LOAD_REST(f)                                                                               \
	p_##f = (typeof(f) *)dlsym(cuda_lib, STR(f));                                             \
	if (!p_##f)                                                                                \
		die("the CUDA driver %s lacks %s", opt.libcuda, STR(f));
	CU_REST(LOAD_REST)
}

const char *cupti_path = "?";

void load_cupti(void)
{
	const char *names[] = {opt.libcupti, "libcupti.so.13", "libcupti.so", NULL};
	void *h = NULL;
	Dl_info info;
	int i;

	for (i = opt.libcupti ? 0 : 1; names[i] && !h; i++) {
		h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
		if (opt.libcupti)
			break;
	}
	if (!h)
		skip("no CUPTI library (%s; put libcupti.so.13 on LD_LIBRARY_PATH or give --libcupti)",
		     dlerror());
#define LOAD_CUPTI(f)                                                                              \
	p_##f = (typeof(f) *)dlsym(h, STR(f));                                                    \
	if (!p_##f)                                                                                \
		skip("this CUPTI has no PM sampling: no %s", STR(f));
	CUPTI_FNS(LOAD_CUPTI)
	if (dladdr((void *)p_cuptiPmSamplingEnable, &info) && info.dli_fname)
		cupti_path = info.dli_fname;
}

/* ---- CUPTI: the host object and the config image --------------------------------------------- */
struct prof prof;


/* Tried in order when --metric is not given; each valid one is collected (one pass at most). */
static const char *default_metrics[] = {"sm__cycles_active.avg", "gr__cycles_active.avg",
					"gr__cycles_active.sum", "gr__cycles_active.max",
					"sm__cycles_active.sum", NULL};


static int metric_valid(const char *name, CUpti_MetricType *ret_type)
{
	CUpti_Profiler_Host_GetMetricProperties_Params p = {
		.structSize = CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE,
		.pHostObject = prof.host,
		.pMetricName = name,
	};
	CUptiResult r = p_cuptiProfilerHostGetMetricProperties(&p);

	if (r != CUPTI_SUCCESS)
		return 0;
	*ret_type = p.metricType;
	return 1;
}

size_t build_config(void)
{
	CUpti_Profiler_Host_ConfigAddMetrics_Params a = {
		.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE,
		.pHostObject = prof.host,
		.ppMetricNames = prof.metrics,
		.numMetrics = prof.n_metrics,
	};
	CUpti_Profiler_Host_GetConfigImageSize_Params s = {
		.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE,
		.pHostObject = prof.host,
	};
	CUpti_Profiler_Host_GetConfigImage_Params i = {
		.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE,
		.pHostObject = prof.host,
	};
	CUpti_Profiler_Host_GetNumOfPasses_Params n = {
		.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE,
	};

	phase = "building the config image";
	CP(p_cuptiProfilerHostConfigAddMetrics(&a));
	CP(p_cuptiProfilerHostGetConfigImageSize(&s));
	prof.config_size = s.configImageSize;
	prof.config = malloc(prof.config_size);
	if (!prof.config)
		die("out of memory");
	i.configImageSize = prof.config_size;
	i.pConfigImage = prof.config;
	CP(p_cuptiProfilerHostGetConfigImage(&i));
	n.configImageSize = prof.config_size;
	n.pConfigImage = prof.config;
	CP(p_cuptiProfilerHostGetNumOfPasses(&n));
	return n.numOfPasses;
}

void host_init(void)
{
	CUpti_Profiler_Host_Initialize_Params p = {
		.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE,
		.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING,
		.pChipName = prof.chip,
		.pCounterAvailabilityImage = prof.avail,
	};

	phase = "cuptiProfilerHostInitialize";
	CPS(p_cuptiProfilerHostInitialize(&p));
	prof.host = p.pHostObject;
}

void host_deinit(void)
{
	CUpti_Profiler_Host_Deinitialize_Params p = {
		.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE,
		.pHostObject = prof.host,
	};

	if (prof.host)
		p_cuptiProfilerHostDeinitialize(&p);
	prof.host = NULL;
	free(prof.config);
	prof.config = NULL;
}

void list_metrics(const char *path)
{
	static const char *types[] = {"counter", "ratio", "throughput"};
	FILE *f = fopen(path, "w");
	int t;

	if (!f)
		die("%s: %s", path, strerror(errno));
	phase = "listing metrics";
	for (t = 0; t < 3; t++) {
		CUpti_Profiler_Host_GetBaseMetrics_Params p = {
			.structSize = CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE,
			.pHostObject = prof.host,
			.metricType = (CUpti_MetricType)t,
		};
		size_t i;

		CP(p_cuptiProfilerHostGetBaseMetrics(&p));
		for (i = 0; i < p.numMetrics; i++) {
			CUpti_Profiler_Host_GetMetricProperties_Params q = {
				.structSize =
					CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE,
				.pHostObject = prof.host,
				.pMetricName = p.ppMetricNames[i],
			};
			int ok = p_cuptiProfilerHostGetMetricProperties(&q) == CUPTI_SUCCESS;

			fprintf(f, "%s\t%s\t%s\t%s\n", types[t], p.ppMetricNames[i],
				ok && q.pHwUnit ? q.pHwUnit : "",
				ok && q.pDescription ? q.pDescription : "");
		}
	}
	fclose(f);
}

/* Picks the metrics: --metric's list exactly, else every valid default, else the first counter
 * base metric named like "cycles_active" with a rollup. */
void choose_metrics(void)
{
	static char found[160];
	CUpti_MetricType type;
	char *list, *tok, *save = NULL;
	int i;

	phase = "choosing metrics";
	if (opt.metrics) {
		list = strdup(opt.metrics);
		for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (prof.n_metrics == MAX_METRICS)
				die("at most %d metrics", MAX_METRICS);
			if (!metric_valid(tok, &type))
				die("metric '%s' is not known for chip %s (see --list-metrics)", tok,
				    prof.chip);
			prof.counter[prof.n_metrics] = type == CUPTI_METRIC_TYPE_COUNTER;
			prof.metrics[prof.n_metrics++] = tok;
		}
		return;
	}
	for (i = 0; default_metrics[i] && prof.n_metrics < 2; i++) {
		/* one rollup of each base metric is enough */
		size_t base = strcspn(default_metrics[i], ".");
		size_t k;
		int dup = 0;

		for (k = 0; k < prof.n_metrics; k++)
			dup |= strncmp(prof.metrics[k], default_metrics[i], base) == 0;
		if (dup || !metric_valid(default_metrics[i], &type))
			continue;
		prof.counter[prof.n_metrics] = type == CUPTI_METRIC_TYPE_COUNTER;
		prof.metrics[prof.n_metrics++] = default_metrics[i];
	}
	if (prof.n_metrics)
		return;
	{
		CUpti_Profiler_Host_GetBaseMetrics_Params p = {
			.structSize = CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE,
			.pHostObject = prof.host,
			.metricType = CUPTI_METRIC_TYPE_COUNTER,
		};
		static const char *rollups[] = {".avg", ".sum", ".max"};
		size_t k;
		int r;

		CP(p_cuptiProfilerHostGetBaseMetrics(&p));
		for (k = 0; k < p.numMetrics && !prof.n_metrics; k++) {
			if (!strstr(p.ppMetricNames[k], "cycles_active"))
				continue;
			for (r = 0; r < 3 && !prof.n_metrics; r++) {
				snprintf(found, sizeof(found), "%s%s", p.ppMetricNames[k],
					 rollups[r]);
				if (metric_valid(found, &type)) {
					prof.counter[0] = type == CUPTI_METRIC_TYPE_COUNTER;
					prof.metrics[prof.n_metrics++] = found;
				}
			}
		}
	}
	if (!prof.n_metrics)
		die("none of the default metrics (sm__cycles_active.avg, gr__cycles_active.*) nor "
		    "any *cycles_active* counter is known for chip %s: give --metric (see "
		    "--list-metrics)",
		    prof.chip);
}

/* ---- CUPTI: one sampling session ------------------------------------------------------------- */

static void counter_data_init(struct sampler *sp)
{
	CUpti_PmSampling_CounterDataImage_Initialize_Params p = {
		.structSize = CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE,
		.pPmSamplingObject = sp->obj,
		.counterDataSize = sp->cd_size,
		.pCounterData = sp->cd,
	};

	CP(p_cuptiPmSamplingCounterDataImageInitialize(&p));
	sp->next = 0;
}


static int max_samples_for(uint64_t interval_ns)
{
	uint64_t n;

	if (opt.max_samples)
		return opt.max_samples;
	n = 4 * (uint64_t)opt.decode_period_us * 1000 / (interval_ns ? interval_ns : 1);
	return n < 1000 ? 1000 : n > 200000 ? 200000 : (int)n;
}

/* Enables PM sampling on the device and configures it; returns the wall ns that took, or 0 with
 * PM sampling disabled again where the configuration is refused (an interval too fine, say):
 * *ret_err then holds CUPTI's result. */
uint64_t sampler_open(struct sampler *sp, uint64_t interval_ns, CUptiResult *ret_err)
{
	CUpti_PmSampling_Enable_Params e = {
		.structSize = CUpti_PmSampling_Enable_Params_STRUCT_SIZE,
		.deviceIndex = (size_t)opt.device,
	};
	CUpti_PmSampling_GetCounterDataSize_Params ds = {
		.structSize = CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE,
		.pMetricNames = prof.metrics,
		.numMetrics = prof.n_metrics,
		.maxSamples = (uint32_t)max_samples_for(interval_ns),
	};
	CUpti_PmSampling_SetConfig_Params sc = {
		.structSize = CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE,
		.configSize = prof.config_size,
		.pConfig = prof.config,
		.hardwareBufferSize = opt.hw_buffer,
		.samplingInterval = interval_ns,
		.triggerMode = opt.trigger,
		.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST,
	};
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);

	memset(sp, 0, sizeof(*sp));
	phase = "cuptiPmSamplingEnable";
	CPS(p_cuptiPmSamplingEnable(&e));
	sp->obj = e.pPmSamplingObject;
	phase = "sizing the counter data image";
	ds.pPmSamplingObject = sp->obj;
	CP(p_cuptiPmSamplingGetCounterDataSize(&ds));
	sp->cd_size = ds.counterDataSize;
	sp->cd = malloc(sp->cd_size);
	if (!sp->cd)
		die("out of memory for a counter data image of %zu bytes", sp->cd_size);
	counter_data_init(sp);
	phase = "cuptiPmSamplingSetConfig";
	sc.pPmSamplingObject = sp->obj;
	*ret_err = p_cuptiPmSamplingSetConfig(&sc);
	if (*ret_err != CUPTI_SUCCESS) {
		sampler_close(sp);
		return 0;
	}
	return now_ns(CLOCK_MONOTONIC) - t0 + 1;
}

uint64_t sampler_close(struct sampler *sp)
{
	CUpti_PmSampling_Disable_Params d = {
		.structSize = CUpti_PmSampling_Disable_Params_STRUCT_SIZE,
		.pPmSamplingObject = sp->obj,
	};
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);

	phase = "cuptiPmSamplingDisable";
	CP(p_cuptiPmSamplingDisable(&d));
	free(sp->cd);
	sp->cd = NULL;
	return now_ns(CLOCK_MONOTONIC) - t0;
}

void sampler_free(struct sampler *sp)
{
	free(sp->s);
	sp->s = NULL;
}

/* Reads the completed samples of the image not read yet. Decode thread only. */
static void read_completed(struct sampler *sp)
{
	CUpti_PmSampling_GetCounterDataInfo_Params info = {
		.structSize = CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE,
		.pCounterDataImage = sp->cd,
		.counterDataImageSize = sp->cd_size,
	};
	CUptiResult r;
	size_t i;

	CP(p_cuptiPmSamplingGetCounterDataInfo(&info));
	for (i = sp->next; i < info.numCompletedSamples; i++) {
		CUpti_PmSampling_CounterData_GetSampleInfo_Params si = {
			.structSize = CUpti_PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE,
			.pPmSamplingObject = sp->obj,
			.pCounterDataImage = sp->cd,
			.counterDataImageSize = sp->cd_size,
			.sampleIndex = i,
		};
		CUpti_Profiler_Host_EvaluateToGpuValues_Params ev = {
			.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE,
			.pHostObject = prof.host,
			.pCounterDataImage = sp->cd,
			.counterDataImageSize = sp->cd_size,
			.rangeIndex = i,
			.ppMetricNames = prof.metrics,
			.numMetrics = prof.n_metrics,
		};
		struct sample *s;

		if (sp->n == sp->cap) {
			size_t cap = sp->cap ? 2 * sp->cap : 4096;
			struct sample *ns = realloc(sp->s, cap * sizeof(*ns));

			if (!ns)
				die("out of memory for %zu samples", cap);
			sp->s = ns;
			sp->cap = cap;
		}
		s = &sp->s[sp->n];
		r = p_cuptiPmSamplingCounterDataGetSampleInfo(&si);
		if (r == CUPTI_SUCCESS) {
			ev.pMetricValues = s->v;
			r = p_cuptiProfilerHostEvaluateToGpuValues(&ev);
		}
		if (r != CUPTI_SUCCESS) { /* counted and shown; the sample is left out */
			sp->eval_errors++;
			sp->eval_err = r;
			continue;
		}
		s->t0 = si.startTimestamp;
		s->t1 = si.endTimestamp;
		sp->n++;
	}
	sp->next = info.numCompletedSamples;
}

/* One decode: 1 more to decode (the image was full and is reset), 0 caught up, -1 error. */
static int decode_once(struct sampler *sp)
{
	CUpti_PmSampling_DecodeData_Params p = {
		.structSize = CUpti_PmSampling_DecodeData_Params_STRUCT_SIZE,
		.pPmSamplingObject = sp->obj,
		.pCounterDataImage = sp->cd,
		.counterDataImageSize = sp->cd_size,
	};
	CUptiResult r = p_cuptiPmSamplingDecodeData(&p);

	sp->decodes++;
	if (r == CUPTI_ERROR_OUT_OF_MEMORY) { /* the header: overflow of the hardware buffer */
		sp->overflows++;
		read_completed(sp);
		return -1;
	}
	if (r != CUPTI_SUCCESS) {
		sp->decode_err = r;
		return -1;
	}
	if (p.overflow)
		sp->overflows++;
	read_completed(sp);
	if (p.decodeStopReason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL) {
		counter_data_init(sp);
		sp->full_resets++;
		return 1;
	}
	return 0;
}

static void *decode_thread(void *arg)
{
	struct sampler *sp = arg;
	uint64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	int rc, last = 0;

	while (!last) {
		last = atomic_load(&sp->stop); /* set after cuptiPmSamplingStop: drain, then end */
		do
			rc = decode_once(sp);
		while (rc == 1);
		if (!last)
			sleep_ns((uint64_t)opt.decode_period_us * 1000);
	}
	sp->cpu_ms = (double)(now_ns(CLOCK_THREAD_CPUTIME_ID) - c0) / 1e6;
	return NULL;
}

void sampler_start(struct sampler *sp)
{
	CUpti_PmSampling_Start_Params p = {
		.structSize = CUpti_PmSampling_Start_Params_STRUCT_SIZE,
		.pPmSamplingObject = sp->obj,
	};

	phase = "cuptiPmSamplingStart";
	sp->start_host_ns = now_ns(CLOCK_REALTIME);
	CP(p_cuptiPmSamplingStart(&p));
	atomic_store(&sp->stop, 0);
	if (pthread_create(&sp->thr, NULL, decode_thread, sp))
		die("pthread_create failed");
}

void sampler_stop(struct sampler *sp)
{
	CUpti_PmSampling_Stop_Params p = {
		.structSize = CUpti_PmSampling_Stop_Params_STRUCT_SIZE,
		.pPmSamplingObject = sp->obj,
	};

	phase = "cuptiPmSamplingStop";
	CP(p_cuptiPmSamplingStop(&p));
	atomic_store(&sp->stop, 1);
	phase = "joining the decode thread";
	pthread_join(sp->thr, NULL);
}

