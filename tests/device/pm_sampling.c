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
#include "pm_sampling.h"

/* ---- options ---------------------------------------------------------------------------------- */
struct pm_opts opt = {
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

/* ---- errors, the watchdog ----------------------------------------------------------------------- */
const char *volatile phase = "start";
volatile pid_t worker_pid;

void msg_exit(int code, const char *fmt, ...)
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

const char *cu_err(CUresult r)
{
	const char *s = NULL;

	if (p_cuGetErrorString && p_cuGetErrorString(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown CUDA error";
}

const char *cupti_err(CUptiResult r)
{
	const char *s = NULL;

	if (p_cuptiGetResultString && p_cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s)
		return s;
	return "unknown CUPTI error";
}


/* The results that say "this machine cannot do PM sampling" rather than "this program is wrong". */
int unsupported(CUptiResult r)
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

uint64_t now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = ns / 1000000000u, .tv_nsec = ns % 1000000000u};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
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
		prof.chip = cn.pChipName;
		phase = "cuptiPmSamplingGetCounterAvailability";
		CPS(p_cuptiPmSamplingGetCounterAvailability(&ca));
		prof.avail = malloc(ca.counterAvailabilityImageSize);
		if (!prof.avail)
			die("out of memory");
		ca.pCounterAvailabilityImage = prof.avail;
		CPS(p_cuptiPmSamplingGetCounterAvailability(&ca));
		host_init();
		if (opt.list_metrics)
			list_metrics(opt.list_metrics);
		choose_metrics();
		passes = build_config();
		if (passes != 1 && !opt.metrics && prof.n_metrics > 1) {
			/* PM sampling takes one pass: keep the first metric alone */
			host_deinit();
			host_init();
			prof.n_metrics = 1;
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
		       opt.device, gpu.name, gpu.sms, prof.chip, drv, version, cupti_path,
		       opt.trigger == CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL ? "time"
											: "sysclk",
		       opt.hw_buffer >> 20, opt.decode_period_us);
		printf("pm_sampling: metrics");
		for (i = 0; i < (int)prof.n_metrics; i++)
			printf(" %s (%s)", prof.metrics[i], prof.counter[i] ? "counter" : "ratio");
		printf("; config image %zu B; pattern %s\n", prof.config_size, opt.pattern);
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
