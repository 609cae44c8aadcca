// SPDX-License-Identifier: Apache-2.0
/*
 * tests/device/pm_sampling: what its files share (pm_sampling.c: options, errors, the
 * measurements and main; pm_sampling_gpu.c: the kernels and the busy/idle pattern;
 * pm_sampling_cupti.c: loading libcuda and libcupti, the metrics' config image, a sampling
 * session; pm_sampling_analyse.c: samples against the pattern, raw dumps).
 */
#ifndef PM_SAMPLING_H
#define PM_SAMPLING_H

#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h> /* includes C++'s <string>: the build puts an empty one first */
#include <cupti_profiler_target.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <cupti_version.h>

#define MAX_METRICS 4
#define MAX_GROUPS 16
#define MAX_STRETCHES 2000
#define MAX_INTERVALS 16

/* ---- the dynamically loaded API ------------------------------------------------------------ */
#define STR_(x) #x
#define STR(x) STR_(x) /* after macro expansion: cuMemAlloc -> "cuMemAlloc_v2" */
#define CU_EARLY(X) X(cuInit) X(cuDeviceGetCount) X(cuGetErrorString)
#define CU_REST(X)                                                                                 \
	X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDriverGetVersion)            \
	X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)                \
	X(cuModuleLoadData) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuCtxSynchronize)           \
	X(cuMemAlloc) X(cuMemFree) X(cuMemcpyDtoH) X(cuMemsetD8)
#define CUPTI_FNS(X)                                                                               \
	X(cuptiGetResultString) X(cuptiGetVersion) X(cuptiProfilerInitialize)                      \
	X(cuptiProfilerDeInitialize) X(cuptiDeviceGetChipName) X(cuptiPmSamplingEnable)            \
	X(cuptiPmSamplingDisable) X(cuptiPmSamplingSetConfig) X(cuptiPmSamplingStart)              \
	X(cuptiPmSamplingStop) X(cuptiPmSamplingDecodeData)                                        \
	X(cuptiPmSamplingGetCounterAvailability) X(cuptiPmSamplingGetCounterDataSize)              \
	X(cuptiPmSamplingCounterDataImageInitialize) X(cuptiPmSamplingGetCounterDataInfo)          \
	X(cuptiPmSamplingCounterDataGetSampleInfo) X(cuptiProfilerHostInitialize)                  \
	X(cuptiProfilerHostDeinitialize) X(cuptiProfilerHostGetBaseMetrics)                        \
	X(cuptiProfilerHostGetMetricProperties) X(cuptiProfilerHostConfigAddMetrics)               \
	X(cuptiProfilerHostGetConfigImageSize) X(cuptiProfilerHostGetConfigImage)                  \
	X(cuptiProfilerHostGetNumOfPasses) X(cuptiProfilerHostEvaluateToGpuValues)
#define DECL(f) extern typeof(f) *p_##f;
CU_EARLY(DECL)
CU_REST(DECL)
CUPTI_FNS(DECL)
#undef DECL

/* ---- options (pm_sampling.c) ------------------------------------------------------------------ */
struct group {
	uint64_t busy_ns, idle_ns;
	int count;
};

struct pm_opts {
	const char *libcuda, *libcupti, *metrics, *list_metrics, *raw_dir, *pattern;
	uint64_t intervals[MAX_INTERVALS];
	int n_intervals;
	CUpti_PmSampling_TriggerMode trigger;
	uint64_t cross_interval_ns;
	int device, rounds, launches, timeout_s, decode_period_us, max_samples;
	uint32_t work_iters;
	size_t hw_buffer;
	struct group groups[MAX_GROUPS];
	int n_groups;
};
extern struct pm_opts opt;

/* ---- errors, the watchdog (pm_sampling.c) ----------------------------------------------------- */
extern const char *volatile phase;
extern volatile pid_t worker_pid;
#define die(...) msg_exit(1, __VA_ARGS__)
#define skip(...) msg_exit(77, "skip: " __VA_ARGS__)
#define CK(call)                                                                                   \
	do {                                                                                       \
		CUresult r_ = (call);                                                              \
		if (r_ != CUDA_SUCCESS)                                                            \
			die("%s: %s: %s (%d)", phase, #call, cu_err(r_), (int)r_);                 \
	} while (0)
#define CP(call)                                                                                   \
	do {                                                                                       \
		CUptiResult r_ = (call);                                                           \
		if (r_ != CUPTI_SUCCESS)                                                           \
			die("%s: %s: %s (%d)", phase, #call, cupti_err(r_), (int)r_);              \
	} while (0)
/* For the calls that first touch the profiler: unsupported -> 77, anything else -> 1. */
#define CPS(call)                                                                                  \
	do {                                                                                       \
		CUptiResult r_ = (call);                                                           \
		if (r_ != CUPTI_SUCCESS && unsupported(r_))                                        \
			skip("PM sampling not available here: %s: %s (%d)", #call, cupti_err(r_),  \
			     (int)r_);                                                             \
		if (r_ != CUPTI_SUCCESS)                                                           \
			die("%s: %s: %s (%d)", phase, #call, cupti_err(r_), (int)r_);              \
	} while (0)

/* ---- the GPU side (pm_sampling_gpu.c) ---------------------------------------------------------- */
struct gpu {
	CUdevice dev;
	CUcontext ctx;
	CUfunction spin, empty, work;
	CUdeviceptr marks; /* 2 u64 per busy stretch: GPU ns at its start and end */
	CUdeviceptr sink;
	int sms;
	char name[128];
};
extern struct gpu gpu;

struct stretch {
	uint64_t g0, g1; /* GPU ns (%globaltimer): the spin kernel's start and end */
	uint64_t h0, h1; /* host CLOCK_REALTIME ns: before the launch, after the synchronize */
	int group;
};

struct run {
	struct stretch st[MAX_STRETCHES];
	int n;
};

/* ---- CUPTI (pm_sampling_cupti.c) --------------------------------------------------------------- */
struct prof {
	CUpti_Profiler_Host_Object *host;
	const char *chip;
	const char *metrics[MAX_METRICS];
	int counter[MAX_METRICS]; /* a counter (divided by the sample's ns), not a ratio */
	size_t n_metrics;
	uint8_t *config;
	size_t config_size;
	uint8_t *avail;
};
extern struct prof prof;
extern const char *cupti_path;

struct sample {
	uint64_t t0, t1;
	double v[MAX_METRICS];
};

struct sampler {
	CUpti_PmSampling_Object *obj;
	uint8_t *cd; /* the counter data image */
	size_t cd_size, next;
	struct sample *s;
	size_t n, cap;
	uint64_t overflows, decodes, full_resets, eval_errors;
	uint64_t start_host_ns; /* CLOCK_REALTIME just before cuptiPmSamplingStart */
	CUptiResult decode_err, eval_err;
	double cpu_ms;
	pthread_t thr;
	atomic_int stop;
};

/* ---- functions, by file ---------------------------------------------------------------------- */
/* pm_sampling.c: errors (exit 1 with phase and reason; 77: this machine cannot; 2: usage), time */
__attribute__((noreturn, format(printf, 2, 3))) void msg_exit(int code, const char *fmt, ...);
const char *cu_err(CUresult r);
const char *cupti_err(CUptiResult r);
int unsupported(CUptiResult r);
uint64_t now_ns(clockid_t c);
void sleep_ns(uint64_t ns);

/* pm_sampling_gpu.c */
extern const char ptx[];	/* the kernels, for --ptx */
void gpu_open(void);
uint64_t launch_loop(void);
uint64_t work_kernel(void);
void run_pattern(struct run *r);

/* pm_sampling_cupti.c */
void load_cuda_early(void);
void load_cuda_rest(void);
void load_cupti(void);
size_t build_config(void);
void host_init(void);
void host_deinit(void);
void list_metrics(const char *path);
void choose_metrics(void);
uint64_t sampler_open(struct sampler *sp, uint64_t interval_ns, CUptiResult *ret_err);
uint64_t sampler_close(struct sampler *sp);
void sampler_free(struct sampler *sp);
void sampler_start(struct sampler *sp);
void sampler_stop(struct sampler *sp);

/* pm_sampling_analyse.c */
double median(double *v, size_t n);
const char *fmt_ns(uint64_t ns, char *buf, size_t len);
void analyse(const char *label, uint64_t interval_ns, const struct sampler *sp,
	     const struct run *r, uint64_t host_ns);

#endif
