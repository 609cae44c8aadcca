// SPDX-License-Identifier: Apache-2.0
/*
 * Stand-in libcupti.so.13 for tests/device/pm_sampling's dry run without a GPU: the PM sampling
 * and profiler host calls of CUPTI 13's public headers, checking their order as the headers
 * describe it (enable -> set config -> start -> stop -> disable; one enabled object per device;
 * counter data images initialised before decoding). Samples are made at decode time from the
 * sampling interval and the stand-in driver's busy ranges (standin_busy_share, pm_standin_cuda.c):
 * a counter metric reads 1.98 cycles per busy ns. Known metrics: sm__cycles_active.avg and
 * gr__cycles_active.max (counters). Environment: STANDIN_PM_UNSUPPORTED=1 (Enable says not
 * supported), STANDIN_MIN_INTERVAL_NS (SetConfig refuses finer intervals), STANDIN_FAIL=Start
 * (that call fails), STANDIN_HANG=Start (that call hangs), STANDIN_TS_OFFSET_NS (sample
 * timestamps that much later than the clocks pm_sampling knows).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <cupti_version.h>

#define EXPORT __attribute__((visibility("default")))
#define IMAGE_MAGIC 0x504d5341u
#define GHZ 1.98

struct CUpti_PmSampling_Object {
	int enabled, configured, started;
	uint64_t interval_ns, next_ns, stop_ns;
};
struct CUpti_Profiler_Host_Object {
	size_t n_metrics;
};

struct image_sample {
	uint64_t t0, t1;
	double share;
};
struct image {
	uint32_t magic, pad;
	uint64_t capacity, count;
	struct image_sample s[];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUpti_PmSampling_Object objs[8];
static int profiler_initialized;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int env_is(const char *name, const char *value)
{
	const char *e = getenv(name);

	return e && !strcmp(e, value);
}

static double busy_share(uint64_t t0, uint64_t t1)
{
	static double (*fn)(uint64_t, uint64_t);

	if (!fn)
		fn = (double (*)(uint64_t, uint64_t))dlsym(RTLD_DEFAULT, "standin_busy_share");
	return fn ? fn(t0, t1) : 0;
}

/* STANDIN_TS_OFFSET_NS: sample timestamps on a clock that is neither the GPU's nor the host's. */
static uint64_t ts_offset(void)
{
	const char *e = getenv("STANDIN_TS_OFFSET_NS");

	return e ? strtoull(e, NULL, 10) : 0;
}

static int known_metric(const char *name)
{
	return name && (!strcmp(name, "sm__cycles_active.avg") ||
			!strcmp(name, "gr__cycles_active.max"));
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char **s)
{
	*s = r == CUPTI_ERROR_NOT_SUPPORTED	  ? "CUPTI_ERROR_NOT_SUPPORTED"
	     : r == CUPTI_ERROR_INVALID_PARAMETER ? "CUPTI_ERROR_INVALID_PARAMETER"
	     : r == CUPTI_ERROR_INVALID_OPERATION ? "CUPTI_ERROR_INVALID_OPERATION"
						  : "CUPTI_ERROR_UNKNOWN";
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetVersion(uint32_t *v)
{
	*v = 130000;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerInitialize(CUpti_Profiler_Initialize_Params *p)
{
	if (p->structSize != CUpti_Profiler_Initialize_Params_STRUCT_SIZE)
		return CUPTI_ERROR_INVALID_PARAMETER;
	profiler_initialized = 1;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerDeInitialize(CUpti_Profiler_DeInitialize_Params *p)
{
	(void)p;
	profiler_initialized = 0;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiDeviceGetChipName(CUpti_Device_GetChipName_Params *p)
{
	if (!profiler_initialized || p->deviceIndex >= 8)
		return CUPTI_ERROR_INVALID_OPERATION;
	p->pChipName = "GH100";
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingGetCounterAvailability(
	CUpti_PmSampling_GetCounterAvailability_Params *p)
{
	if (!profiler_initialized)
		return CUPTI_ERROR_INVALID_OPERATION;
	if (p->pCounterAvailabilityImage)
		memset(p->pCounterAvailabilityImage, 0xa5, p->counterAvailabilityImageSize);
	else
		p->counterAvailabilityImageSize = 32;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingEnable(CUpti_PmSampling_Enable_Params *p)
{
	CUpti_PmSampling_Object *o;

	if (env_is("STANDIN_PM_UNSUPPORTED", "1"))
		return CUPTI_ERROR_NOT_SUPPORTED;
	if (!profiler_initialized || p->deviceIndex >= 8)
		return CUPTI_ERROR_INVALID_PARAMETER;
	o = &objs[p->deviceIndex];
	if (o->enabled)
		return CUPTI_ERROR_INVALID_OPERATION;
	memset(o, 0, sizeof(*o));
	o->enabled = 1;
	p->pPmSamplingObject = o;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingDisable(CUpti_PmSampling_Disable_Params *p)
{
	if (!p->pPmSamplingObject || !p->pPmSamplingObject->enabled)
		return CUPTI_ERROR_INVALID_PARAMETER;
	p->pPmSamplingObject->enabled = 0;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingSetConfig(CUpti_PmSampling_SetConfig_Params *p)
{
	CUpti_PmSampling_Object *o = p->pPmSamplingObject;

	const char *min = getenv("STANDIN_MIN_INTERVAL_NS");

	if (min && p->samplingInterval < strtoull(min, NULL, 10))
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (!o || !o->enabled || o->started || !p->pConfig || !p->configSize ||
	    !p->hardwareBufferSize || !p->samplingInterval ||
	    p->structSize != CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE)
		return CUPTI_ERROR_INVALID_PARAMETER;
	o->interval_ns = p->samplingInterval;
	o->configured = 1;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingStart(CUpti_PmSampling_Start_Params *p)
{
	CUpti_PmSampling_Object *o = p->pPmSamplingObject;

	while (env_is("STANDIN_HANG", "Start"))
		pause();
	if (env_is("STANDIN_FAIL", "Start"))
		return CUPTI_ERROR_UNKNOWN;
	if (!o || !o->enabled || !o->configured || o->started)
		return CUPTI_ERROR_INVALID_OPERATION;
	pthread_mutex_lock(&lock);
	o->started = 1;
	o->next_ns = now_ns();
	o->stop_ns = 0;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingStop(CUpti_PmSampling_Stop_Params *p)
{
	CUpti_PmSampling_Object *o = p->pPmSamplingObject;

	if (!o || !o->enabled || !o->started)
		return CUPTI_ERROR_INVALID_OPERATION;
	pthread_mutex_lock(&lock);
	o->started = 0;
	o->stop_ns = now_ns();
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingGetCounterDataSize(CUpti_PmSampling_GetCounterDataSize_Params *p)
{
	if (!p->pPmSamplingObject || !p->pPmSamplingObject->enabled || !p->numMetrics ||
	    !p->maxSamples)
		return CUPTI_ERROR_INVALID_PARAMETER;
	p->counterDataSize = sizeof(struct image) + p->maxSamples * sizeof(struct image_sample);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingCounterDataImageInitialize(
	CUpti_PmSampling_CounterDataImage_Initialize_Params *p)
{
	struct image *im = (struct image *)p->pCounterData;

	if (!p->pPmSamplingObject || !im || p->counterDataSize < sizeof(*im))
		return CUPTI_ERROR_INVALID_PARAMETER;
	im->magic = IMAGE_MAGIC;
	im->capacity = (p->counterDataSize - sizeof(*im)) / sizeof(struct image_sample);
	im->count = 0;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingDecodeData(CUpti_PmSampling_DecodeData_Params *p)
{
	CUpti_PmSampling_Object *o = p->pPmSamplingObject;
	struct image *im = (struct image *)p->pCounterDataImage;
	uint64_t end;

	if (!o || !o->enabled || !im || im->magic != IMAGE_MAGIC)
		return CUPTI_ERROR_INVALID_OPERATION;
	pthread_mutex_lock(&lock);
	end = o->started ? now_ns() : o->stop_ns;
	while (o->next_ns && o->next_ns + o->interval_ns <= end && im->count < im->capacity) {
		struct image_sample *s = &im->s[im->count++];

		s->t0 = o->next_ns;
		s->t1 = o->next_ns + o->interval_ns;
		o->next_ns = s->t1;
	}
	p->overflow = 0;
	p->decodeStopReason = o->next_ns + o->interval_ns <= end
				      ? CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL
				      : CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingGetCounterDataInfo(CUpti_PmSampling_GetCounterDataInfo_Params *p)
{
	const struct image *im = (const struct image *)p->pCounterDataImage;

	if (!im || im->magic != IMAGE_MAGIC)
		return CUPTI_ERROR_INVALID_PARAMETER;
	p->numTotalSamples = im->capacity;
	p->numPopulatedSamples = im->count;
	p->numCompletedSamples = im->count;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingCounterDataGetSampleInfo(
	CUpti_PmSampling_CounterData_GetSampleInfo_Params *p)
{
	const struct image *im = (const struct image *)p->pCounterDataImage;

	if (!im || im->magic != IMAGE_MAGIC || p->sampleIndex >= im->count)
		return CUPTI_ERROR_INVALID_PARAMETER;
	p->startTimestamp = im->s[p->sampleIndex].t0 + ts_offset();
	p->endTimestamp = im->s[p->sampleIndex].t1 + ts_offset();
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostInitialize(CUpti_Profiler_Host_Initialize_Params *p)
{
	if (p->profilerType != CUPTI_PROFILER_TYPE_PM_SAMPLING || !p->pChipName ||
	    strcmp(p->pChipName, "GH100") || !p->pCounterAvailabilityImage)
		return CUPTI_ERROR_INVALID_PARAMETER;
	p->pHostObject = calloc(1, sizeof(*p->pHostObject));
	return p->pHostObject ? CUPTI_SUCCESS : CUPTI_ERROR_OUT_OF_MEMORY;
}

EXPORT CUptiResult cuptiProfilerHostDeinitialize(CUpti_Profiler_Host_Deinitialize_Params *p)
{
	free(p->pHostObject);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostGetBaseMetrics(CUpti_Profiler_Host_GetBaseMetrics_Params *p)
{
	static const char *counters[] = {"sm__cycles_active", "gr__cycles_active", "dram__bytes"};

	if (!p->pHostObject)
		return CUPTI_ERROR_INVALID_PARAMETER;
	p->ppMetricNames = p->metricType == CUPTI_METRIC_TYPE_COUNTER ? counters : NULL;
	p->numMetrics = p->metricType == CUPTI_METRIC_TYPE_COUNTER ? 3 : 0;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostGetMetricProperties(
	CUpti_Profiler_Host_GetMetricProperties_Params *p)
{
	if (!p->pHostObject)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (!known_metric(p->pMetricName) && strcmp(p->pMetricName, "sm__cycles_active") &&
	    strcmp(p->pMetricName, "gr__cycles_active") && strcmp(p->pMetricName, "dram__bytes"))
		return CUPTI_ERROR_INVALID_METRIC_NAME;
	p->pDescription = "stand-in metric";
	p->pHwUnit = "sm";
	p->pDimUnit = "cycle";
	p->metricType = CUPTI_METRIC_TYPE_COUNTER;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostConfigAddMetrics(CUpti_Profiler_Host_ConfigAddMetrics_Params *p)
{
	size_t i;

	if (!p->pHostObject || !p->numMetrics)
		return CUPTI_ERROR_INVALID_PARAMETER;
	for (i = 0; i < p->numMetrics; i++)
		if (!known_metric(p->ppMetricNames[i]))
			return CUPTI_ERROR_INVALID_METRIC_NAME;
	p->pHostObject->n_metrics += p->numMetrics;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostGetConfigImageSize(
	CUpti_Profiler_Host_GetConfigImageSize_Params *p)
{
	if (!p->pHostObject || !p->pHostObject->n_metrics)
		return CUPTI_ERROR_INVALID_OPERATION;
	p->configImageSize = 64 * p->pHostObject->n_metrics;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostGetConfigImage(CUpti_Profiler_Host_GetConfigImage_Params *p)
{
	if (!p->pHostObject || !p->pConfigImage ||
	    p->configImageSize != 64 * p->pHostObject->n_metrics)
		return CUPTI_ERROR_INVALID_PARAMETER;
	memset(p->pConfigImage, 0x5a, p->configImageSize);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostGetNumOfPasses(CUpti_Profiler_Host_GetNumOfPasses_Params *p)
{
	if (!p->pConfigImage || !p->configImageSize)
		return CUPTI_ERROR_INVALID_PARAMETER;
	p->numOfPasses = 1;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostEvaluateToGpuValues(
	CUpti_Profiler_Host_EvaluateToGpuValues_Params *p)
{
	const struct image *im = (const struct image *)p->pCounterDataImage;
	const struct image_sample *s;
	size_t i;

	if (!p->pHostObject || !im || im->magic != IMAGE_MAGIC || p->rangeIndex >= im->count)
		return CUPTI_ERROR_INVALID_PARAMETER;
	s = &im->s[p->rangeIndex];
	for (i = 0; i < p->numMetrics; i++) {
		if (!known_metric(p->ppMetricNames[i]))
			return CUPTI_ERROR_INVALID_METRIC_NAME;
		p->pMetricValues[i] = busy_share(s->t0, s->t1) * GHZ * (double)(s->t1 - s->t0);
	}
	return CUPTI_SUCCESS;
}
