// SPDX-License-Identifier: Apache-2.0
/*
 * How fine CUPTI's PM sampling tells GPU busy from idle, and what it costs (issue 14, item 4).
 * Runs a known busy/idle pattern (spin kernels of fixed length on every SM, host sleeps between)
 * while PM sampling at several intervals, and per interval prints the samples per second
 * achieved, gaps and hardware-buffer overflows, how many samples inside each known busy and idle
 * stretch read busy and idle, and the cost: a launch-bound loop and a fixed compute kernel timed
 * with sampling disabled, enabled but stopped, and running (interleaved rounds), plus the decode
 * thread's CPU. Optionally the same pattern from a second process (can a separate process, such
 * as the agent, see another process's work?).
 * Plain C over the CUDA driver API; libcuda and libcupti are loaded with dlopen so that a machine
 * without them gets exit 77 and one line. Kernels are PTX text (no nvcc needed to build).
 * Exit: 0 measured, 77 no GPU / no driver / no CUPTI / PM sampling unsupported (one line),
 * 1 error (with CUDA's or CUPTI's error string), 2 bad usage.
 */
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
#define DECL(f) static typeof(f) *p_##f;
CU_EARLY(DECL)
CU_REST(DECL)
CUPTI_FNS(DECL)

/* ---- the kernels: PTX, compiled by the driver at load --------------------------------------- */
/* spin: every block spins on %globaltimer for dur ns; block 0 thread 0 stores its start and end
 * (GPU ns) to out[0..1] when out != 0. empty: nothing (the launch-bound loop). work: a fixed
 * dependent FMA chain of n steps per thread (the compute-bound cost check). */
static const char ptx[] = ".version 7.0\n"
			  ".target sm_75\n"
			  ".address_size 64\n"
			  "\n"
			  ".visible .entry spin(.param .u64 spin_dur, .param .u64 spin_out)\n"
			  "{\n"
			  "\t.reg .pred %p<3>;\n"
			  "\t.reg .b32 %r<4>;\n"
			  "\t.reg .b64 %rd<7>;\n"
			  "\tld.param.u64 %rd1, [spin_dur];\n"
			  "\tld.param.u64 %rd2, [spin_out];\n"
			  "\tmov.u64 %rd3, %globaltimer;\n"
			  "\tadd.u64 %rd4, %rd3, %rd1;\n"
			  "$L_spin:\n"
			  "\tmov.u64 %rd5, %globaltimer;\n"
			  "\tsetp.lt.u64 %p1, %rd5, %rd4;\n"
			  "\t@%p1 bra $L_spin;\n"
			  "\tmov.u32 %r1, %tid.x;\n"
			  "\tmov.u32 %r2, %ctaid.x;\n"
			  "\tor.b32 %r3, %r1, %r2;\n"
			  "\tsetp.ne.u32 %p2, %r3, 0;\n"
			  "\t@%p2 bra $L_spin_done;\n"
			  "\tsetp.eq.u64 %p2, %rd2, 0;\n"
			  "\t@%p2 bra $L_spin_done;\n"
			  "\tcvta.to.global.u64 %rd6, %rd2;\n"
			  "\tst.global.u64 [%rd6], %rd3;\n"
			  "\tst.global.u64 [%rd6+8], %rd5;\n"
			  "$L_spin_done:\n"
			  "\tret;\n"
			  "}\n"
			  "\n"
			  ".visible .entry empty()\n"
			  "{\n"
			  "\tret;\n"
			  "}\n"
			  "\n"
			  ".visible .entry work(.param .u32 work_n, .param .u64 work_out)\n"
			  "{\n"
			  "\t.reg .pred %p<3>;\n"
			  "\t.reg .b32 %r<4>;\n"
			  "\t.reg .f32 %f<4>;\n"
			  "\t.reg .b64 %rd<3>;\n"
			  "\tld.param.u32 %r1, [work_n];\n"
			  "\tld.param.u64 %rd1, [work_out];\n"
			  "\tmov.u32 %r2, %tid.x;\n"
			  "\tcvt.rn.f32.u32 %f1, %r2;\n"
			  "\tmov.f32 %f2, 0f3F7FBE77;\n"
			  "\tmov.f32 %f3, 0f3A83126F;\n"
			  "\tmov.u32 %r3, 0;\n"
			  "$L_work:\n"
			  "\tfma.rn.f32 %f1, %f1, %f2, %f3;\n"
			  "\tadd.u32 %r3, %r3, 1;\n"
			  "\tsetp.lt.u32 %p1, %r3, %r1;\n"
			  "\t@%p1 bra $L_work;\n"
			  "\tsetp.neu.f32 %p2, %f1, 0f4640E400;\n"
			  "\t@%p2 bra $L_work_done;\n"
			  "\tcvta.to.global.u64 %rd2, %rd1;\n"
			  "\tst.global.f32 [%rd2], %f1;\n"
			  "$L_work_done:\n"
			  "\tret;\n"
			  "}\n";

/* ---- options ---------------------------------------------------------------------------------- */
struct group {
	uint64_t busy_ns, idle_ns;
	int count;
};

static struct {
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
} opt = {
	.libcuda = "libcuda.so.1",
	.pattern = "50:50x4,10:10x10,2:2x25,0.5:0.5x50",
	.trigger = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL,
	.cross_interval_ns = 1000000,
	.rounds = 5,
	.launches = 20000,
	.timeout_s = 300,
	.decode_period_us = 10000,
	.work_iters = 10000000,
	.hw_buffer = 256u << 20,
};

/* Tried in order when --metric is not given; each valid one is collected (one pass at most). */
static const char *default_metrics[] = {"sm__cycles_active.avg", "gr__cycles_active.avg",
					"gr__cycles_active.sum", "gr__cycles_active.max",
					"sm__cycles_active.sum", NULL};

/* ---- errors, the watchdog ----------------------------------------------------------------------- */
static const char *volatile phase = "start";
static volatile pid_t worker_pid;

static void msg_exit(int code, const char *fmt, ...)
{
	va_list ap;

	fputs("pm_sampling: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stdout);
	if (worker_pid > 0)
		kill(worker_pid, SIGKILL);
	exit(code);
}
#define die(...) msg_exit(1, __VA_ARGS__)
#define skip(...) msg_exit(77, "skip: " __VA_ARGS__)

static void on_alarm(int sig)
{
	const char *a = "pm_sampling: timed out (--timeout) in phase ";
	ssize_t w;

	(void)sig;
	w = write(2, a, strlen(a));
	w = write(2, (const char *)phase, strlen((const char *)phase));
	w = write(2, "\n", 1);
	(void)w;
	if (worker_pid > 0)
		kill(worker_pid, SIGKILL);
	_exit(1);
}

static const char *cu_err(CUresult r)
{
	const char *s = NULL;

	if (p_cuGetErrorString && p_cuGetErrorString(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown CUDA error";
}

static const char *cupti_err(CUptiResult r)
{
	const char *s = NULL;

	if (p_cuptiGetResultString && p_cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s)
		return s;
	return "unknown CUPTI error";
}

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

/* The results that say "this machine cannot do PM sampling" rather than "this program is wrong". */
static int unsupported(CUptiResult r)
{
	switch (r) {
	case CUPTI_ERROR_NOT_SUPPORTED:
	case CUPTI_ERROR_NOT_COMPATIBLE:
	case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
	case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
	case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
	case CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED:
	case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
	case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
	case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
	case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
	case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
	case CUPTI_ERROR_INVALID_CHIP_NAME:
		return 1;
	default:
		return 0;
	}
}
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

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000u, .tv_nsec = ns % 1000000000u};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* ---- loading ------------------------------------------------------------------------------------ */
static void *cuda_lib;

static void load_cuda_early(void)
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

static void load_cuda_rest(void)
{
#define LOAD_REST(f)                                                                               \
	p_##f = (typeof(f) *)dlsym(cuda_lib, STR(f));                                             \
	if (!p_##f)                                                                                \
		die("the CUDA driver %s lacks %s", opt.libcuda, STR(f));
	CU_REST(LOAD_REST)
}

static const char *cupti_path = "?";

static void load_cupti(void)
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

/* ---- the GPU side ------------------------------------------------------------------------------- */
static struct {
	CUdevice dev;
	CUcontext ctx;
	CUfunction spin, empty, work;
	CUdeviceptr marks; /* 2 u64 per busy stretch: GPU ns at its start and end */
	CUdeviceptr sink;
	int sms;
	char name[128];
} g;

static void gpu_open(void)
{
	CUmodule mod;

	phase = "CUDA setup";
	CK(p_cuDeviceGet(&g.dev, opt.device));
	CK(p_cuDeviceGetName(g.name, sizeof(g.name), g.dev));
	CK(p_cuDeviceGetAttribute(&g.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g.dev));
	CK(p_cuDevicePrimaryCtxRetain(&g.ctx, g.dev));
	CK(p_cuCtxSetCurrent(g.ctx));
	phase = "loading the PTX kernels";
	CK(p_cuModuleLoadData(&mod, ptx));
	CK(p_cuModuleGetFunction(&g.spin, mod, "spin"));
	CK(p_cuModuleGetFunction(&g.empty, mod, "empty"));
	CK(p_cuModuleGetFunction(&g.work, mod, "work"));
	CK(p_cuMemAlloc(&g.marks, MAX_STRETCHES * 2 * sizeof(uint64_t)));
	CK(p_cuMemAlloc(&g.sink, 64));
	CK(p_cuMemsetD8(g.marks, 0, MAX_STRETCHES * 2 * sizeof(uint64_t)));
	CK(p_cuCtxSynchronize());
}

static void launch_spin(uint64_t dur_ns, CUdeviceptr out)
{
	void *args[] = {&dur_ns, &out};

	CK(p_cuLaunchKernel(g.spin, g.sms * 2, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
}

/* The launch-bound loop: wall ns of opt.launches empty kernels and one synchronize. */
static uint64_t launch_loop(void)
{
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	int i;

	for (i = 0; i < opt.launches; i++)
		CK(p_cuLaunchKernel(g.empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
	CK(p_cuCtxSynchronize());
	return now_ns(CLOCK_MONOTONIC) - t0;
}

/* The compute-bound check: wall ns of one fixed FMA kernel over every SM. */
static uint64_t work_kernel(void)
{
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	void *args[] = {&opt.work_iters, &g.sink};

	CK(p_cuLaunchKernel(g.work, g.sms * 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CK(p_cuCtxSynchronize());
	return now_ns(CLOCK_MONOTONIC) - t0;
}

/* ---- the busy/idle pattern ---------------------------------------------------------------------- */
struct stretch {
	uint64_t g0, g1; /* GPU ns (%globaltimer): the spin kernel's start and end */
	uint64_t h0, h1; /* host CLOCK_REALTIME ns: before the launch, after the synchronize */
	int group;
};

struct run {
	struct stretch st[MAX_STRETCHES];
	int n;
};

static void run_pattern(struct run *r)
{
	uint64_t marks[MAX_STRETCHES * 2];
	int gi, k;

	phase = "the busy/idle pattern";
	r->n = 0;
	for (gi = 0; gi < opt.n_groups; gi++) {
		for (k = 0; k < opt.groups[gi].count && r->n < MAX_STRETCHES; k++) {
			struct stretch *s = &r->st[r->n];

			s->group = gi;
			s->h0 = now_ns(CLOCK_REALTIME);
			launch_spin(opt.groups[gi].busy_ns, g.marks + (CUdeviceptr)r->n * 16);
			CK(p_cuCtxSynchronize());
			s->h1 = now_ns(CLOCK_REALTIME);
			r->n++;
			sleep_ns(opt.groups[gi].idle_ns);
		}
	}
	CK(p_cuMemcpyDtoH(marks, g.marks, (size_t)r->n * 16));
	for (k = 0; k < r->n; k++) {
		r->st[k].g0 = marks[2 * k];
		r->st[k].g1 = marks[2 * k + 1];
	}
}

/* ---- CUPTI: the host object and the config image --------------------------------------------- */
static struct {
	CUpti_Profiler_Host_Object *host;
	const char *chip;
	const char *metrics[MAX_METRICS];
	int counter[MAX_METRICS]; /* a counter (divided by the sample's ns), not a ratio */
	size_t n_metrics;
	uint8_t *config;
	size_t config_size;
	uint8_t *avail;
} c;

static int metric_valid(const char *name, CUpti_MetricType *ret_type)
{
	CUpti_Profiler_Host_GetMetricProperties_Params p = {
		.structSize = CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE,
		.pHostObject = c.host,
		.pMetricName = name,
	};
	CUptiResult r = p_cuptiProfilerHostGetMetricProperties(&p);

	if (r != CUPTI_SUCCESS)
		return 0;
	*ret_type = p.metricType;
	return 1;
}

static size_t build_config(void)
{
	CUpti_Profiler_Host_ConfigAddMetrics_Params a = {
		.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE,
		.pHostObject = c.host,
		.ppMetricNames = c.metrics,
		.numMetrics = c.n_metrics,
	};
	CUpti_Profiler_Host_GetConfigImageSize_Params s = {
		.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE,
		.pHostObject = c.host,
	};
	CUpti_Profiler_Host_GetConfigImage_Params i = {
		.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE,
		.pHostObject = c.host,
	};
	CUpti_Profiler_Host_GetNumOfPasses_Params n = {
		.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE,
	};

	phase = "building the config image";
	CP(p_cuptiProfilerHostConfigAddMetrics(&a));
	CP(p_cuptiProfilerHostGetConfigImageSize(&s));
	c.config_size = s.configImageSize;
	c.config = malloc(c.config_size);
	if (!c.config)
		die("out of memory");
	i.configImageSize = c.config_size;
	i.pConfigImage = c.config;
	CP(p_cuptiProfilerHostGetConfigImage(&i));
	n.configImageSize = c.config_size;
	n.pConfigImage = c.config;
	CP(p_cuptiProfilerHostGetNumOfPasses(&n));
	return n.numOfPasses;
}

static void host_init(void)
{
	CUpti_Profiler_Host_Initialize_Params p = {
		.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE,
		.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING,
		.pChipName = c.chip,
		.pCounterAvailabilityImage = c.avail,
	};

	phase = "cuptiProfilerHostInitialize";
	CPS(p_cuptiProfilerHostInitialize(&p));
	c.host = p.pHostObject;
}

static void host_deinit(void)
{
	CUpti_Profiler_Host_Deinitialize_Params p = {
		.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE,
		.pHostObject = c.host,
	};

	if (c.host)
		p_cuptiProfilerHostDeinitialize(&p);
	c.host = NULL;
	free(c.config);
	c.config = NULL;
}

static void list_metrics(const char *path)
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
			.pHostObject = c.host,
			.metricType = (CUpti_MetricType)t,
		};
		size_t i;

		CP(p_cuptiProfilerHostGetBaseMetrics(&p));
		for (i = 0; i < p.numMetrics; i++) {
			CUpti_Profiler_Host_GetMetricProperties_Params q = {
				.structSize =
					CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE,
				.pHostObject = c.host,
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
static void choose_metrics(void)
{
	static char found[160];
	CUpti_MetricType type;
	char *list, *tok, *save = NULL;
	int i;

	phase = "choosing metrics";
	if (opt.metrics) {
		list = strdup(opt.metrics);
		for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (c.n_metrics == MAX_METRICS)
				die("at most %d metrics", MAX_METRICS);
			if (!metric_valid(tok, &type))
				die("metric '%s' is not known for chip %s (see --list-metrics)", tok,
				    c.chip);
			c.counter[c.n_metrics] = type == CUPTI_METRIC_TYPE_COUNTER;
			c.metrics[c.n_metrics++] = tok;
		}
		return;
	}
	for (i = 0; default_metrics[i] && c.n_metrics < 2; i++) {
		/* one rollup of each base metric is enough */
		size_t base = strcspn(default_metrics[i], ".");
		size_t k;
		int dup = 0;

		for (k = 0; k < c.n_metrics; k++)
			dup |= strncmp(c.metrics[k], default_metrics[i], base) == 0;
		if (dup || !metric_valid(default_metrics[i], &type))
			continue;
		c.counter[c.n_metrics] = type == CUPTI_METRIC_TYPE_COUNTER;
		c.metrics[c.n_metrics++] = default_metrics[i];
	}
	if (c.n_metrics)
		return;
	{
		CUpti_Profiler_Host_GetBaseMetrics_Params p = {
			.structSize = CUpti_Profiler_Host_GetBaseMetrics_Params_STRUCT_SIZE,
			.pHostObject = c.host,
			.metricType = CUPTI_METRIC_TYPE_COUNTER,
		};
		static const char *rollups[] = {".avg", ".sum", ".max"};
		size_t k;
		int r;

		CP(p_cuptiProfilerHostGetBaseMetrics(&p));
		for (k = 0; k < p.numMetrics && !c.n_metrics; k++) {
			if (!strstr(p.ppMetricNames[k], "cycles_active"))
				continue;
			for (r = 0; r < 3 && !c.n_metrics; r++) {
				snprintf(found, sizeof(found), "%s%s", p.ppMetricNames[k],
					 rollups[r]);
				if (metric_valid(found, &type)) {
					c.counter[0] = type == CUPTI_METRIC_TYPE_COUNTER;
					c.metrics[c.n_metrics++] = found;
				}
			}
		}
	}
	if (!c.n_metrics)
		die("none of the default metrics (sm__cycles_active.avg, gr__cycles_active.*) nor "
		    "any *cycles_active* counter is known for chip %s: give --metric (see "
		    "--list-metrics)",
		    c.chip);
}

/* ---- CUPTI: one sampling session ------------------------------------------------------------- */
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

static uint64_t sampler_close(struct sampler *sp);

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
static uint64_t sampler_open(struct sampler *sp, uint64_t interval_ns, CUptiResult *ret_err)
{
	CUpti_PmSampling_Enable_Params e = {
		.structSize = CUpti_PmSampling_Enable_Params_STRUCT_SIZE,
		.deviceIndex = (size_t)opt.device,
	};
	CUpti_PmSampling_GetCounterDataSize_Params ds = {
		.structSize = CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE,
		.pMetricNames = c.metrics,
		.numMetrics = c.n_metrics,
		.maxSamples = (uint32_t)max_samples_for(interval_ns),
	};
	CUpti_PmSampling_SetConfig_Params sc = {
		.structSize = CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE,
		.configSize = c.config_size,
		.pConfig = c.config,
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

static uint64_t sampler_close(struct sampler *sp)
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

static void sampler_free(struct sampler *sp)
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
			.pHostObject = c.host,
			.pCounterDataImage = sp->cd,
			.counterDataImageSize = sp->cd_size,
			.rangeIndex = i,
			.ppMetricNames = c.metrics,
			.numMetrics = c.n_metrics,
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

static void sampler_start(struct sampler *sp)
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

static void sampler_stop(struct sampler *sp)
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

/* ---- analysis ------------------------------------------------------------------------------------ */
static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
	if (!n)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double value_of(const struct sample *s, size_t m)
{
	double ns = (double)(s->t1 - s->t0);

	if (!c.counter[m])
		return s->v[m];
	return ns > 0 ? s->v[m] / ns : NAN;
}

static const char *fmt_ns(uint64_t ns, char *buf, size_t len)
{
	if (ns >= 1000000 && ns % 1000000 == 0)
		snprintf(buf, len, "%llums", (unsigned long long)(ns / 1000000));
	else if (ns >= 1000 && ns % 1000 == 0)
		snprintf(buf, len, "%lluus", (unsigned long long)(ns / 1000));
	else if (ns >= 1000000)
		snprintf(buf, len, "%.3gms", (double)ns / 1e6);
	else
		snprintf(buf, len, "%lluns", (unsigned long long)ns);
	return buf;
}

/* Which clock the sample timestamps are on: 1 GPU (%globaltimer), 2 host CLOCK_REALTIME, 0 neither
 * (the samples fall outside both pattern spans, give or take a second: the caller then aligns
 * the first sample with the host's time of cuptiPmSamplingStart). */
static int pick_clock(const struct sampler *sp, const struct run *r)
{
	uint64_t ga = r->st[0].g0, gb = r->st[r->n - 1].g1, ha = r->st[0].h0,
		 hb = r->st[r->n - 1].h1, slack = 1000000000u;
	size_t i, ing = 0, inh = 0;

	for (i = 0; i < sp->n; i++) {
		ing += sp->s[i].t0 + slack >= ga && sp->s[i].t0 <= gb + slack;
		inh += sp->s[i].t0 + slack >= ha && sp->s[i].t0 <= hb + slack;
	}
	if (ing >= inh && ing * 2 >= sp->n && ing)
		return 1;
	if (inh * 2 >= sp->n && inh)
		return 2;
	return 0;
}

/* A busy stretch's start (end = 0) or end (1) on the samples' clock (pick_clock). */
static uint64_t stretch_at(const struct stretch *s, int clock, int64_t off, int end)
{
	if (clock == 1)
		return end ? s->g1 : s->g0;
	return (uint64_t)((int64_t)(end ? s->h1 : s->h0) + (clock ? 0 : off));
}

static void write_raw(const char *label, const struct sampler *sp, const struct run *r)
{
	char path[512];
	FILE *f;
	size_t i, m;

	if (!opt.raw_dir)
		return;
	snprintf(path, sizeof(path), "%s/samples-%s.csv", opt.raw_dir, label);
	f = fopen(path, "w");
	if (!f)
		die("%s: %s", path, strerror(errno));
	fprintf(f, "t0_ns,t1_ns");
	for (m = 0; m < c.n_metrics; m++)
		fprintf(f, ",%s", c.metrics[m]);
	fputc('\n', f);
	for (i = 0; i < sp->n; i++) {
		fprintf(f, "%llu,%llu", (unsigned long long)sp->s[i].t0,
			(unsigned long long)sp->s[i].t1);
		for (m = 0; m < c.n_metrics; m++)
			fprintf(f, ",%.6g", sp->s[i].v[m]);
		fputc('\n', f);
	}
	fclose(f);
	snprintf(path, sizeof(path), "%s/stretches-%s.csv", opt.raw_dir, label);
	f = fopen(path, "w");
	if (!f)
		die("%s: %s", path, strerror(errno));
	fprintf(f, "group,busy_ns,idle_ns,gpu_start_ns,gpu_end_ns,host_start_ns,host_end_ns\n");
	for (i = 0; i < (size_t)r->n; i++) {
		const struct stretch *s = &r->st[i];

		fprintf(f, "%d,%llu,%llu,%llu,%llu,%llu,%llu\n", s->group,
			(unsigned long long)opt.groups[s->group].busy_ns,
			(unsigned long long)opt.groups[s->group].idle_ns,
			(unsigned long long)s->g0, (unsigned long long)s->g1,
			(unsigned long long)s->h0, (unsigned long long)s->h1);
	}
	fclose(f);
}

static void analyse(const char *label, uint64_t interval_ns, const struct sampler *sp,
		    const struct run *r, uint64_t host_ns)
{
	char b1[32], b2[32], asked[64];
	double *d, span_s, thr, med;
	int64_t off;
	size_t i, m, gaps = 0, nd = 0;
	uint64_t gap_ns = 0;
	int clock, gi;

	write_raw(label, sp, r);
	printf("%s: %zu samples", label, sp->n);
	if (sp->n < 2) {
		printf(" (too few to analyse); overflows %llu, decode error %s, samples not "
		       "evaluated %llu%s%s\n",
		       (unsigned long long)sp->overflows,
		       sp->decode_err ? cupti_err(sp->decode_err) : "none",
		       (unsigned long long)sp->eval_errors, sp->eval_errors ? ": " : "",
		       sp->eval_errors ? cupti_err(sp->eval_err) : "");
		return;
	}
	d = malloc(sp->n * sizeof(*d));
	if (!d)
		die("out of memory");
	span_s = (double)(sp->s[sp->n - 1].t1 - sp->s[0].t0) / 1e9;
	for (i = 0; i < sp->n; i++)
		d[nd++] = (double)(sp->s[i].t1 - sp->s[i].t0);
	med = median(d, nd);
	for (i = 0; i + 1 < sp->n; i++) {
		/* a gap: more than half a (median) sample between one sample's end and the next */
		if ((double)sp->s[i + 1].t0 > (double)sp->s[i].t1 + med / 2) {
			gaps++;
			gap_ns += sp->s[i + 1].t0 - sp->s[i].t1;
		}
	}
	if (opt.trigger == CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL)
		snprintf(asked, sizeof(asked), "%.0f/s", 1e9 / (double)interval_ns);
	else
		snprintf(asked, sizeof(asked), "every %llu sysclk cycles",
			 (unsigned long long)interval_ns);
	printf(" over %.3f s of samples (%.3f s sampled on the host) = %.0f/s (asked %s); "
	       "median sample %s; gaps %zu (%s); overflows %llu; image resets %llu; decodes %llu; "
	       "decode error %s; samples not evaluated %llu%s%s; decode thread CPU %.1f ms = "
	       "%.2f ms/s\n",
	       span_s, (double)host_ns / 1e9, (double)sp->n / span_s, asked,
	       fmt_ns((uint64_t)med, b1, sizeof(b1)), gaps,
	       fmt_ns(gap_ns, b2, sizeof(b2)), (unsigned long long)sp->overflows,
	       (unsigned long long)sp->full_resets, (unsigned long long)sp->decodes,
	       sp->decode_err ? cupti_err(sp->decode_err) : "none",
	       (unsigned long long)sp->eval_errors, sp->eval_errors ? ": " : "",
	       sp->eval_errors ? cupti_err(sp->eval_err) : "", sp->cpu_ms,
	       sp->cpu_ms / ((double)host_ns / 1e9));
	clock = pick_clock(sp, r);
	off = clock ? 0 : (int64_t)(sp->s[0].t0 - sp->start_host_ns);
	printf("  clock: sample timestamps %s (first sample %llu, first stretch gpu %llu host "
	       "%llu)\n",
	       clock == 1   ? "are on the GPU's %globaltimer"
	       : clock == 2 ? "are on the host's CLOCK_REALTIME"
			    : "match neither clock: host stretches shifted so that the first sample "
			      "starts at cuptiPmSamplingStart (+- the call's time)",
	       (unsigned long long)sp->s[0].t0, (unsigned long long)r->st[0].g0,
	       (unsigned long long)r->st[0].h0);
	for (m = 0; m < c.n_metrics; m++) {
		for (i = 0, nd = 0; i < sp->n; i++) {
			double v = value_of(&sp->s[i], m);

			if (!isnan(v))
				d[nd++] = v;
		}
		qsort(d, nd, sizeof(*d), cmp_double);
		thr = nd ? d[(size_t)((double)(nd - 1) * 0.95)] / 2 : 0;
		printf("  %s%s: busy above %.4g (half the 95th percentile)\n", c.metrics[m],
		       c.counter[m] ? " per ns" : "", thr);
		for (gi = 0; gi < opt.n_groups; gi++) {
			size_t bn = 0, bb = 0, in = 0, ii = 0;
			double bsum = 0, isum = 0;
			int k;

			for (k = 0; k < r->n; k++) {
				const struct stretch *s = &r->st[k];
				uint64_t a = stretch_at(s, clock, off, 0), b = stretch_at(s, clock, off, 1);
				uint64_t ia = b,
					 ib = k + 1 < r->n ? stretch_at(&r->st[k + 1], clock, off, 0) : 0;

				if (s->group != gi)
					continue;
				for (i = 0; i < sp->n; i++) {
					double v = value_of(&sp->s[i], m);

					if (isnan(v))
						continue;
					if (sp->s[i].t0 >= a && sp->s[i].t1 <= b) {
						bn++;
						bb += v > thr;
						bsum += v;
					} else if (ib && sp->s[i].t0 >= ia && sp->s[i].t1 <= ib) {
						in++;
						ii += v <= thr;
						isum += v;
					}
				}
			}
			printf("    busy %s / idle %s x%d: samples inside busy stretches read busy "
			       "%zu/%zu",
			       fmt_ns(opt.groups[gi].busy_ns, b1, sizeof(b1)),
			       fmt_ns(opt.groups[gi].idle_ns, b2, sizeof(b2)), opt.groups[gi].count,
			       bb, bn);
			if (bn)
				printf(" (%.1f%%, mean %.4g)", 100.0 * (double)bb / (double)bn,
				       bsum / (double)bn);
			printf(", inside idle stretches read idle %zu/%zu", ii, in);
			if (in)
				printf(" (%.1f%%, mean %.4g)", 100.0 * (double)ii / (double)in,
				       isum / (double)in);
			printf("\n");
		}
	}
	free(d);
	fflush(stdout);
}

/* ---- per interval: the pattern, then the cost rounds ------------------------------------------- */
static struct run run_buf;

static void measure_interval(uint64_t interval_ns)
{
	struct sampler sp;
	char label[64], b[32];
	double lb_on[64], lb_stop[64], wk_on[64], wk_stop[64], open_ms[64], close_ms[64],
		cpu_per_s[64];
	uint64_t t0, host_ns;
	int rd, rounds = opt.rounds > 64 ? 64 : opt.rounds;
	CUptiResult err;

	if (opt.trigger == CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL)
		snprintf(label, sizeof(label), "%s-time", fmt_ns(interval_ns, b, sizeof(b)));
	else
		snprintf(label, sizeof(label), "%llucycles-sysclk", (unsigned long long)interval_ns);
	if (!sampler_open(&sp, interval_ns, &err)) {
		printf("%s: cuptiPmSamplingSetConfig refused it: %s (%d)\n", label, cupti_err(err),
		       (int)err);
		return;
	}
	sampler_start(&sp);
	t0 = now_ns(CLOCK_MONOTONIC);
	sleep_ns(100000000); /* 100 ms idle lead-in */
	run_pattern(&run_buf);
	sleep_ns(50000000);
	sampler_stop(&sp);
	host_ns = now_ns(CLOCK_MONOTONIC) - t0;
	sampler_close(&sp);
	analyse(label, interval_ns, &sp, &run_buf, host_ns);
	sampler_free(&sp);

	/* cost: per round, disabled -> enabled but stopped -> sampling -> disabled */
	for (rd = 0; rd < rounds; rd++) {
		uint64_t lb_bare, wk_bare, lb, wk, t;

		phase = "cost rounds";
		lb_bare = launch_loop();
		wk_bare = work_kernel();
		t = sampler_open(&sp, interval_ns, &err);
		if (!t)
			die("%s: cuptiPmSamplingSetConfig: %s", label, cupti_err(err));
		open_ms[rd] = (double)t / 1e6;
		phase = "cost rounds";
		lb = launch_loop();
		wk = work_kernel();
		lb_stop[rd] = (double)lb / (double)lb_bare;
		wk_stop[rd] = (double)wk / (double)wk_bare;
		t = now_ns(CLOCK_MONOTONIC);
		sampler_start(&sp);
		phase = "cost rounds";
		lb = launch_loop();
		wk = work_kernel();
		sampler_stop(&sp);
		t = now_ns(CLOCK_MONOTONIC) - t;
		lb_on[rd] = (double)lb / (double)lb_bare;
		wk_on[rd] = (double)wk / (double)wk_bare;
		cpu_per_s[rd] = sp.cpu_ms / ((double)t / 1e9);
		close_ms[rd] = (double)sampler_close(&sp) / 1e6;
		sampler_free(&sp);
	}
	printf("  cost (median of %d rounds, wall time as a ratio to sampling disabled): "
	       "launch loop (%d empty kernels) sampling %.4f, enabled-but-stopped %.4f; "
	       "compute kernel sampling %.4f, enabled-but-stopped %.4f; decode thread %.2f ms "
	       "CPU/s; enable+config %.1f ms, disable %.1f ms\n",
	       rounds, opt.launches, median(lb_on, rounds), median(lb_stop, rounds),
	       median(wk_on, rounds), median(wk_stop, rounds), median(cpu_per_s, rounds),
	       median(open_ms, rounds), median(close_ms, rounds));
	fflush(stdout);
}

/* ---- a second process runs the pattern (--cross-interval) --------------------------------- */
static int worker_main(void)
{
	char line[64];
	int k;

	load_cuda_early();
	CK(p_cuInit(0));
	load_cuda_rest();
	gpu_open();
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin) || strcmp(line, "go\n"))
		die("worker: no 'go' from the parent");
	run_pattern(&run_buf);
	for (k = 0; k < run_buf.n; k++)
		printf("s %d %llu %llu %llu %llu\n", run_buf.st[k].group,
		       (unsigned long long)run_buf.st[k].g0, (unsigned long long)run_buf.st[k].g1,
		       (unsigned long long)run_buf.st[k].h0, (unsigned long long)run_buf.st[k].h1);
	printf("done\n");
	fflush(stdout);
	return 0;
}

static void measure_cross(uint64_t interval_ns, const char *self)
{
	int to_w[2], from_w[2], status;
	char line[256], b[32], label[64], dev[16];
	struct sampler sp;
	uint64_t t0, host_ns;
	CUptiResult err;
	FILE *in, *out;

	phase = "starting the worker process";
	if (pipe(to_w) || pipe(from_w))
		die("pipe: %s", strerror(errno));
	snprintf(dev, sizeof(dev), "%d", opt.device);
	worker_pid = fork();
	if (worker_pid < 0)
		die("fork: %s", strerror(errno));
	if (worker_pid == 0) {
		dup2(to_w[0], 0);
		dup2(from_w[1], 1);
		close(to_w[1]);
		close(from_w[0]);
		execl(self, self, "--worker", "--pattern", opt.pattern, "--device", dev,
		      "--libcuda", opt.libcuda, (char *)NULL);
		_exit(127);
	}
	close(to_w[0]);
	close(from_w[1]);
	out = fdopen(to_w[1], "w");
	in = fdopen(from_w[0], "r");
	phase = "waiting for the worker's context";
	if (!fgets(line, sizeof(line), in) || strcmp(line, "ready\n"))
		die("the worker process did not get ready (see its error above)");
	if (!sampler_open(&sp, interval_ns, &err))
		die("cross-process: cuptiPmSamplingSetConfig: %s", cupti_err(err));
	sampler_start(&sp);
	t0 = now_ns(CLOCK_MONOTONIC);
	sleep_ns(100000000);
	fputs("go\n", out);
	fflush(out);
	phase = "reading the worker's stretches";
	run_buf.n = 0;
	while (fgets(line, sizeof(line), in) && strcmp(line, "done\n")) {
		struct stretch *s = &run_buf.st[run_buf.n];
		unsigned long long a, bb, h0, h1;

		if (run_buf.n < MAX_STRETCHES &&
		    sscanf(line, "s %d %llu %llu %llu %llu", &s->group, &a, &bb, &h0, &h1) == 5) {
			s->g0 = a;
			s->g1 = bb;
			s->h0 = h0;
			s->h1 = h1;
			run_buf.n++;
		}
	}
	sleep_ns(50000000);
	sampler_stop(&sp);
	host_ns = now_ns(CLOCK_MONOTONIC) - t0;
	sampler_close(&sp);
	phase = "waiting for the worker to exit";
	fclose(out);
	fclose(in);
	waitpid(worker_pid, &status, 0);
	worker_pid = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) || !run_buf.n)
		die("the worker process failed (status 0x%x, %d stretches)", status, run_buf.n);
	snprintf(label, sizeof(label), "cross-process-%s", fmt_ns(interval_ns, b, sizeof(b)));
	analyse(label, interval_ns, &sp, &run_buf, host_ns);
	sampler_free(&sp);
}

/* ---- main ------------------------------------------------------------------------------------------ */
static uint64_t parse_ns(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || v < 0)
		return 0;
	if (!strcmp(end, "ns") || !*end)
		return (uint64_t)v;
	if (!strcmp(end, "us"))
		return (uint64_t)(v * 1e3);
	if (!strcmp(end, "ms"))
		return (uint64_t)(v * 1e6);
	if (!strcmp(end, "s"))
		return (uint64_t)(v * 1e9);
	return 0;
}

static int parse_pattern(const char *spec)
{
	char *copy = strdup(spec), *tok, *save = NULL;
	int total = 0;

	opt.n_groups = 0;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		double busy, idle;
		int count;

		if (opt.n_groups == MAX_GROUPS || sscanf(tok, "%lf:%lfx%d", &busy, &idle, &count) != 3 ||
		    busy <= 0 || idle <= 0 || count <= 0)
			return -1;
		opt.groups[opt.n_groups++] = (struct group){(uint64_t)(busy * 1e6),
							    (uint64_t)(idle * 1e6), count};
		total += count;
	}
	free(copy);
	return opt.n_groups && total <= MAX_STRETCHES ? 0 : -1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pm_sampling [options]\n"
		"  --intervals LIST      sampling intervals (ns, or with us/ms suffix; sysclk: cycles)\n"
		"                        default 10ms,1ms,100us,10us (coarse first)\n"
		"  --trigger time|sysclk trigger mode (default time)\n"
		"  --metric LIST         metrics (default: the valid ones of sm__cycles_active.avg,\n"
		"                        gr__cycles_active.{avg,sum,max}, else any *cycles_active*)\n"
		"  --pattern SPEC        busy:idle ms x count, comma-separated\n"
		"                        (default 50:50x4,10:10x10,2:2x25,0.5:0.5x50)\n"
		"  --rounds N            cost rounds per interval (default 5)\n"
		"  --launches N          empty kernels in the launch-bound loop (default 20000)\n"
		"  --work-iters N        FMA steps per thread of the compute kernel (default 10000000)\n"
		"  --hw-buffer-mib N     hardware buffer (default 256)\n"
		"  --decode-period-us N  decode thread period (default 10000)\n"
		"  --max-samples N       samples per counter data image (default: 4 decode periods)\n"
		"  --cross-interval T    also sample a second process's pattern at T (0: no; 1ms)\n"
		"  --list-metrics FILE   write the chip's metrics (type, name, unit, description)\n"
		"  --raw-dir DIR         write samples-*.csv and stretches-*.csv there\n"
		"  --device N            CUDA device (default 0)\n"
		"  --libcuda PATH        driver library (default libcuda.so.1)\n"
		"  --libcupti PATH       CUPTI library (default libcupti.so.13, libcupti.so)\n"
		"  --timeout S           give up after S seconds, naming the phase (default 300)\n"
		"  --dump-ptx            print the kernels' PTX and exit\n"
		"exit: 0 measured, 77 no GPU / driver / CUPTI / PM sampling here, 1 error, 2 usage\n");
}

int main(int argc, char **argv)
{
	enum { O_INTERVALS = 256, O_TRIGGER, O_METRIC, O_PATTERN, O_ROUNDS, O_LAUNCHES, O_WORK,
	       O_HWBUF, O_DECODE, O_MAXS, O_CROSS, O_LIST, O_RAW, O_DEVICE, O_LIBCUDA, O_LIBCUPTI,
	       O_TIMEOUT, O_PTX, O_WORKER, O_HELP };
	static const struct option longopts[] = {
		{"intervals", 1, NULL, O_INTERVALS}, {"trigger", 1, NULL, O_TRIGGER},
		{"metric", 1, NULL, O_METRIC},	     {"pattern", 1, NULL, O_PATTERN},
		{"rounds", 1, NULL, O_ROUNDS},	     {"launches", 1, NULL, O_LAUNCHES},
		{"work-iters", 1, NULL, O_WORK},     {"hw-buffer-mib", 1, NULL, O_HWBUF},
		{"decode-period-us", 1, NULL, O_DECODE}, {"max-samples", 1, NULL, O_MAXS},
		{"cross-interval", 1, NULL, O_CROSS}, {"list-metrics", 1, NULL, O_LIST},
		{"raw-dir", 1, NULL, O_RAW},	     {"device", 1, NULL, O_DEVICE},
		{"libcuda", 1, NULL, O_LIBCUDA},     {"libcupti", 1, NULL, O_LIBCUPTI},
		{"timeout", 1, NULL, O_TIMEOUT},     {"dump-ptx", 0, NULL, O_PTX},
		{"worker", 0, NULL, O_WORKER},	     {"help", 0, NULL, O_HELP},
		{NULL, 0, NULL, 0}};
	const char *intervals = "10ms,1ms,100us,10us";
	int o, worker = 0, i, count;
	char *copy, *tok, *save = NULL, self[4096];
	CUresult cr;
	ssize_t len;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((o = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (o) {
		case O_INTERVALS: intervals = optarg; break;
		case O_TRIGGER:
			if (!strcmp(optarg, "time"))
				opt.trigger = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
			else if (!strcmp(optarg, "sysclk"))
				opt.trigger = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_SYSCLK_INTERVAL;
			else
				msg_exit(2, "--trigger: 'time' or 'sysclk', not '%s'", optarg);
			break;
		case O_METRIC: opt.metrics = optarg; break;
		case O_PATTERN: opt.pattern = optarg; break;
		case O_ROUNDS: opt.rounds = atoi(optarg); break;
		case O_LAUNCHES: opt.launches = atoi(optarg); break;
		case O_WORK: opt.work_iters = (uint32_t)strtoul(optarg, NULL, 0); break;
		case O_HWBUF: opt.hw_buffer = strtoull(optarg, NULL, 0) << 20; break;
		case O_DECODE: opt.decode_period_us = atoi(optarg); break;
		case O_MAXS: opt.max_samples = atoi(optarg); break;
		case O_CROSS:
			opt.cross_interval_ns = parse_ns(optarg);
			if (!opt.cross_interval_ns && strcmp(optarg, "0"))
				msg_exit(2, "--cross-interval: bad time '%s'", optarg);
			break;
		case O_LIST: opt.list_metrics = optarg; break;
		case O_RAW: opt.raw_dir = optarg; break;
		case O_DEVICE: opt.device = atoi(optarg); break;
		case O_LIBCUDA: opt.libcuda = optarg; break;
		case O_LIBCUPTI: opt.libcupti = optarg; break;
		case O_TIMEOUT: opt.timeout_s = atoi(optarg); break;
		case O_PTX: fputs(ptx, stdout); return 0;
		case O_WORKER: worker = 1; break;
		case O_HELP: usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc)
		msg_exit(2, "unexpected argument '%s' (see --help)", argv[optind]);
	if (parse_pattern(opt.pattern))
		msg_exit(2, "--pattern: bad spec '%s' (busy:idle ms x count, at most %d stretches)",
			 opt.pattern, MAX_STRETCHES);
	copy = strdup(intervals);
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t ns = parse_ns(tok);

		if (!ns || opt.n_intervals == MAX_INTERVALS)
			msg_exit(2, "--intervals: bad or too many intervals at '%s'", tok);
		opt.intervals[opt.n_intervals++] = ns;
	}
	if (opt.rounds < 1 || opt.launches < 1 || opt.decode_period_us < 100 || !opt.hw_buffer ||
	    opt.timeout_s < 1)
		msg_exit(2, "bad --rounds, --launches, --decode-period-us, --hw-buffer-mib or "
			    "--timeout");
	signal(SIGALRM, on_alarm);
	alarm((unsigned)opt.timeout_s);
	if (worker)
		return worker_main();

	phase = "loading the CUDA driver";
	load_cuda_early();
	cr = p_cuInit(0);
	if (cr != CUDA_SUCCESS)
		skip("no usable GPU (cuInit: %s)", cu_err(cr));
	cr = p_cuDeviceGetCount(&count);
	if (cr != CUDA_SUCCESS || count <= opt.device)
		skip("no GPU %d (%d devices)", opt.device, cr == CUDA_SUCCESS ? count : 0);
	phase = "loading CUPTI";
	load_cupti();
	load_cuda_rest();
	gpu_open();

	{
		CUpti_Profiler_Initialize_Params pi = {
			.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
		CUpti_Device_GetChipName_Params cn = {
			.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE,
			.deviceIndex = (size_t)opt.device};
		CUpti_PmSampling_GetCounterAvailability_Params ca = {
			.structSize = CUpti_PmSampling_GetCounterAvailability_Params_STRUCT_SIZE,
			.deviceIndex = (size_t)opt.device};
		uint32_t version = 0;
		int drv = 0;
		size_t passes;

		phase = "cuptiProfilerInitialize";
		CPS(p_cuptiProfilerInitialize(&pi));
		phase = "cuptiDeviceGetChipName";
		CPS(p_cuptiDeviceGetChipName(&cn));
		c.chip = cn.pChipName;
		phase = "cuptiPmSamplingGetCounterAvailability";
		CPS(p_cuptiPmSamplingGetCounterAvailability(&ca));
		c.avail = malloc(ca.counterAvailabilityImageSize);
		if (!c.avail)
			die("out of memory");
		ca.pCounterAvailabilityImage = c.avail;
		CPS(p_cuptiPmSamplingGetCounterAvailability(&ca));
		host_init();
		if (opt.list_metrics)
			list_metrics(opt.list_metrics);
		choose_metrics();
		passes = build_config();
		if (passes != 1 && !opt.metrics && c.n_metrics > 1) {
			/* PM sampling takes one pass: keep the first metric alone */
			host_deinit();
			host_init();
			c.n_metrics = 1;
			passes = build_config();
		}
		if (passes != 1)
			die("the metrics need %zu passes; PM sampling takes one", passes);
		{ /* can this device sample at all? (77 before any output, not after) */
			CUpti_PmSampling_Enable_Params e = {
				.structSize = CUpti_PmSampling_Enable_Params_STRUCT_SIZE,
				.deviceIndex = (size_t)opt.device};
			CUpti_PmSampling_Disable_Params d = {
				.structSize = CUpti_PmSampling_Disable_Params_STRUCT_SIZE};

			phase = "cuptiPmSamplingEnable";
			CPS(p_cuptiPmSamplingEnable(&e));
			d.pPmSamplingObject = e.pPmSamplingObject;
			phase = "cuptiPmSamplingDisable";
			CP(p_cuptiPmSamplingDisable(&d));
		}
		p_cuptiGetVersion(&version);
		p_cuDriverGetVersion(&drv);
		printf("pm_sampling: device %d '%s' (%d SMs), chip %s, driver API %d, CUPTI API %u "
		       "(%s), trigger %s, hardware buffer %zu MiB, decode every %d us\n",
		       opt.device, g.name, g.sms, c.chip, drv, version, cupti_path,
		       opt.trigger == CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL ? "time"
											: "sysclk",
		       opt.hw_buffer >> 20, opt.decode_period_us);
		printf("pm_sampling: metrics");
		for (i = 0; i < (int)c.n_metrics; i++)
			printf(" %s (%s)", c.metrics[i], c.counter[i] ? "counter" : "ratio");
		printf("; config image %zu B; pattern %s\n", c.config_size, opt.pattern);
	}
	phase = "warm-up";
	launch_loop();
	work_kernel();
	for (i = 0; i < opt.n_intervals; i++)
		measure_interval(opt.intervals[i]);
	if (opt.cross_interval_ns) {
		len = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (len <= 0)
			die("readlink /proc/self/exe: %s", strerror(errno));
		self[len] = 0;
		measure_cross(opt.cross_interval_ns, self);
	}
	host_deinit();
	{
		CUpti_Profiler_DeInitialize_Params pd = {
			.structSize = CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE};

		p_cuptiProfilerDeInitialize(&pd);
	}
	printf("pm_sampling: done\n");
	return 0;
}
