/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The part of the public NVML API (nvml.h, driver R525+) that gpuscope uses, written by us from
 * the documented types, constants and signatures, since no NVML header ships here. The library
 * is loaded with dlopen(); NVML_FUNCS lists every entry point and whether the agent needs it.
 */
#ifndef GPUSCOPE_NVML_API_H
#define GPUSCOPE_NVML_API_H

typedef int nvmlReturn_t;
#define NVML_SUCCESS			0
#define NVML_ERROR_UNINITIALIZED	1
#define NVML_ERROR_INVALID_ARGUMENT	2
#define NVML_ERROR_NOT_SUPPORTED	3
#define NVML_ERROR_NO_PERMISSION	4
#define NVML_ERROR_NOT_FOUND		6
#define NVML_ERROR_INSUFFICIENT_SIZE	7
#define NVML_ERROR_DRIVER_NOT_LOADED	9
#define NVML_ERROR_TIMEOUT		10
#define NVML_ERROR_LIBRARY_NOT_FOUND	12
#define NVML_ERROR_FUNCTION_NOT_FOUND	13
#define NVML_ERROR_GPU_IS_LOST		15
#define NVML_ERROR_NO_DATA		21
#define NVML_ERROR_UNKNOWN		999

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;

typedef union nvmlValue_st {
	double dVal;
	int siVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
	signed long long sllVal;
	unsigned short usVal;
} nvmlValue_t;

typedef int nvmlValueType_t;
#define NVML_VALUE_TYPE_DOUBLE			0
#define NVML_VALUE_TYPE_UNSIGNED_INT		1
#define NVML_VALUE_TYPE_UNSIGNED_LONG		2
#define NVML_VALUE_TYPE_UNSIGNED_LONG_LONG	3
#define NVML_VALUE_TYPE_SIGNED_LONG_LONG	4
#define NVML_VALUE_TYPE_SIGNED_INT		5
#define NVML_VALUE_TYPE_UNSIGNED_SHORT		6

typedef struct nvmlSample_st {
	unsigned long long timeStamp;	/* CPU time, us since 1970 */
	nvmlValue_t sampleValue;
} nvmlSample_t;

typedef int nvmlSamplingType_t;
#define NVML_TOTAL_POWER_SAMPLES	0	/* mW */
#define NVML_GPU_UTILIZATION_SAMPLES	1	/* % of time a kernel ran */
#define NVML_MEMORY_UTILIZATION_SAMPLES	2	/* % of time device memory was read or written */

typedef struct nvmlMemory_st {
	unsigned long long total, free, used;	/* bytes */
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
	unsigned int version;			/* nvmlMemory_v2 */
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct nvmlFieldValue_st {
	unsigned int fieldId;
	unsigned int scopeId;
	long long timestamp;		/* us since 1970 */
	long long latencyUsec;
	nvmlValueType_t valueType;
	nvmlReturn_t nvmlReturn;
	nvmlValue_t value;
} nvmlFieldValue_t;
#define NVML_FI_DEV_MEMORY_TEMP			82	/* C */
#define NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION	83	/* mJ since driver load */

typedef int nvmlClockType_t;
#define NVML_CLOCK_SM	1
#define NVML_CLOCK_MEM	2
typedef int nvmlTemperatureSensors_t;
#define NVML_TEMPERATURE_GPU 0

typedef struct nvmlProcessUtilizationSample_st {
	unsigned int pid;
	unsigned long long timeStamp;	/* us since 1970 */
	unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/* nvmlProcessInfo_v2_t, which _v3 of GetComputeRunningProcesses fills. */
typedef struct nvmlProcessInfo_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;	/* bytes */
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

typedef struct nvmlEventData_st {
	nvmlDevice_t device;
	unsigned long long eventType;
	unsigned long long eventData;	/* the Xid for nvmlEventTypeXidCriticalError */
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
#define nvmlEventTypeSingleBitEccError	0x1ULL
#define nvmlEventTypeDoubleBitEccError	0x2ULL
#define nvmlEventTypeXidCriticalError	0x8ULL

/* GPM (Hopper+): metrics between two samples. */
#define NVML_GPM_METRIC_SM_UTIL			2
#define NVML_GPM_METRIC_SM_OCCUPANCY		3
#define NVML_GPM_METRIC_ANY_TENSOR_UTIL		5
#define NVML_GPM_METRIC_DRAM_BW_UTIL		10
#define NVML_GPM_METRIC_PCIE_TX_PER_SEC		20	/* MiB/s */
#define NVML_GPM_METRIC_PCIE_RX_PER_SEC		21
#define NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC	60
#define NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC	61
/* The array is sized like the newest header's NVML_GPM_METRIC_MAX (333); we fill numMetrics. */
#define NVML_GPM_METRIC_MAX 333

typedef struct {
	unsigned int metricId;
	nvmlReturn_t nvmlReturn;
	double value;
	struct {
		char *shortName, *longName, *unit;
	} metricInfo;
} nvmlGpmMetric_t;

typedef struct {
	unsigned int version;		/* NVML_GPM_METRICS_GET_VERSION */
	unsigned int numMetrics;
	nvmlGpmSample_t sample1, sample2;
	nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;
#define NVML_GPM_METRICS_GET_VERSION 1

typedef struct {
	unsigned int version;		/* NVML_GPM_SUPPORT_VERSION */
	unsigned int isSupportedDevice;
} nvmlGpmSupport_t;
#define NVML_GPM_SUPPORT_VERSION 1

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80

/*
 * X(required, name, args): every entry point we resolve. A required one missing means the
 * library is not a usable NVML; an optional one missing skips its metric.
 */
#define NVML_FUNCS(X)                                                                              \
	X(1, nvmlInit_v2, (void))                                                                  \
	X(1, nvmlShutdown, (void))                                                                 \
	X(0, nvmlErrorString, (nvmlReturn_t r))                                                    \
	X(0, nvmlSystemGetDriverVersion, (char *version, unsigned int length))                    \
	X(1, nvmlDeviceGetCount_v2, (unsigned int *count))                                         \
	X(1, nvmlDeviceGetHandleByIndex_v2, (unsigned int index, nvmlDevice_t *device))           \
	X(0, nvmlDeviceGetUUID, (nvmlDevice_t device, char *uuid, unsigned int length))           \
	X(0, nvmlDeviceGetName, (nvmlDevice_t device, char *name, unsigned int length))           \
	X(0, nvmlDeviceGetSamples,                                                                 \
	  (nvmlDevice_t device, nvmlSamplingType_t type, unsigned long long lastSeenTimeStamp,     \
	   nvmlValueType_t *sampleValType, unsigned int *sampleCount, nvmlSample_t *samples))      \
	X(0, nvmlDeviceGetMemoryInfo, (nvmlDevice_t device, nvmlMemory_t *memory))                \
	X(0, nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t device, nvmlMemory_v2_t *memory))          \
	X(0, nvmlDeviceGetFieldValues, (nvmlDevice_t device, int valuesCount,                     \
					nvmlFieldValue_t *values))                                 \
	X(0, nvmlDeviceGetClockInfo, (nvmlDevice_t device, nvmlClockType_t type,                  \
				      unsigned int *clock))                                        \
	X(0, nvmlDeviceGetTemperature, (nvmlDevice_t device, nvmlTemperatureSensors_t sensor,     \
					unsigned int *temp))                                       \
	X(0, nvmlDeviceGetCurrentClocksEventReasons, (nvmlDevice_t device,                        \
						      unsigned long long *reasons))                \
	X(0, nvmlDeviceGetCurrentClocksThrottleReasons, (nvmlDevice_t device,                     \
							 unsigned long long *reasons))             \
	X(0, nvmlDeviceGetProcessUtilization,                                                      \
	  (nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,                       \
	   unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp))               \
	X(0, nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t device, unsigned int *count,  \
						       nvmlProcessInfo_t *infos))                  \
	X(0, nvmlDeviceGetMigMode, (nvmlDevice_t device, unsigned int *current,                   \
				    unsigned int *pending))                                        \
	X(0, nvmlDeviceGetMaxMigDeviceCount, (nvmlDevice_t device, unsigned int *count))          \
	X(0, nvmlDeviceGetMigDeviceHandleByIndex, (nvmlDevice_t device, unsigned int index,      \
						   nvmlDevice_t *mig))                             \
	X(0, nvmlGpmQueryDeviceSupport, (nvmlDevice_t device, nvmlGpmSupport_t *support))         \
	X(0, nvmlGpmSampleAlloc, (nvmlGpmSample_t *sample))                                        \
	X(0, nvmlGpmSampleFree, (nvmlGpmSample_t sample))                                          \
	X(0, nvmlGpmSampleGet, (nvmlDevice_t device, nvmlGpmSample_t sample))                     \
	X(0, nvmlGpmMetricsGet, (nvmlGpmMetricsGet_t *metricsGet))                                 \
	X(0, nvmlEventSetCreate, (nvmlEventSet_t *set))                                            \
	X(0, nvmlEventSetFree, (nvmlEventSet_t set))                                               \
	X(0, nvmlDeviceGetSupportedEventTypes, (nvmlDevice_t device, unsigned long long *types))  \
	X(0, nvmlDeviceRegisterEvents, (nvmlDevice_t device, unsigned long long types,            \
					nvmlEventSet_t set))                                       \
	X(0, nvmlEventSetWait_v2, (nvmlEventSet_t set, nvmlEventData_t *data,                     \
				   unsigned int timeoutms))

/* nvmlErrorString returns const char *, the rest nvmlReturn_t: one table of untyped slots. */
#define NVML_FN_FIELD(req, name, args) void *name;
struct nvml_fns {
	NVML_FUNCS(NVML_FN_FIELD)
};
#undef NVML_FN_FIELD

/* Typed call through the table: NVML_CALL(f, nvmlDeviceGetCount_v2, &n). */
#define NVML_FN_TYPE(req, name, args) typedef nvmlReturn_t(*name##_fn) args;
NVML_FUNCS(NVML_FN_TYPE)
#undef NVML_FN_TYPE
#define NVML_CALL(f, name, ...) (((name##_fn)(f)->name)(__VA_ARGS__))

#endif
