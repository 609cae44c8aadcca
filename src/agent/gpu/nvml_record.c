// SPDX-License-Identifier: Apache-2.0
/*
 * `gpuscope-agent nvml-record`: runs the production NVML poller for a while with every NVML
 * entry point wrapped, writing each call's inputs and outputs to a text trace (docs/nvml.md)
 * that tests/nvml-replay/ plays back. Also prints the achieved interval of every source.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/commands.h"
#include "agent/gpu/nvml.h"
#include "common/log.h"
#include "common/util.h"

#define MAX_HANDLES 128
#define MAX_GPM	    256

static struct {
	FILE *f;
	struct nvml_fns real;
	uint64_t t0;
	pthread_mutex_t mu;
	struct {
		void *h;
		char id[16];
	} handles[MAX_HANDLES];
	int nhandles;
	struct {
		void *s;
		char id[16];
	} gpm[MAX_GPM];
	int ngpm;
	FILE *points;
} R = { .mu = PTHREAD_MUTEX_INITIALIZER };

static const char *dev_id(void *h)
{
	for (int i = 0; i < R.nhandles; i++)
		if (R.handles[i].h == h)
			return R.handles[i].id;
	return "?";
}

static void add_handle(void *h, const char *id)
{
	for (int i = 0; i < R.nhandles; i++)
		if (R.handles[i].h == h)
			return;
	if (R.nhandles < MAX_HANDLES) {
		R.handles[R.nhandles].h = h;
		snprintf(R.handles[R.nhandles].id, sizeof(R.handles[0].id), "%s", id);
		R.nhandles++;
	}
}

/* Starts a trace line: "<us since start> <call>"; the caller appends and ends it with \n. */
static void line_start(const char *call)
{
	pthread_mutex_lock(&R.mu);
	fprintf(R.f, "%" PRIu64 " %s", (mono_ns() - R.t0) / 1000, call);
}

static void line_end(void)
{
	fputc('\n', R.f);
	pthread_mutex_unlock(&R.mu);
}

static void put_value(nvmlValueType_t t, nvmlValue_t v)
{
	switch (t) {
	case NVML_VALUE_TYPE_DOUBLE:
		fprintf(R.f, "%.17g", v.dVal);
		break;
	case NVML_VALUE_TYPE_UNSIGNED_INT:
		fprintf(R.f, "%u", v.uiVal);
		break;
	case NVML_VALUE_TYPE_UNSIGNED_LONG:
		fprintf(R.f, "%lu", v.ulVal);
		break;
	case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
		fprintf(R.f, "%lld", v.sllVal);
		break;
	case NVML_VALUE_TYPE_SIGNED_INT:
		fprintf(R.f, "%d", v.siVal);
		break;
	case NVML_VALUE_TYPE_UNSIGNED_SHORT:
		fprintf(R.f, "%hu", v.usVal);
		break;
	default:
		fprintf(R.f, "%llu", v.ullVal);
	}
}

/* Strings go last on their line; newlines would end it early. */
static void put_str(const char *s)
{
	fputc(' ', R.f);
	for (; *s; s++)
		fputc(*s == '\n' || *s == '\r' ? ' ' : *s, R.f);
}

#define REAL(name, ...) NVML_CALL(&R.real, name, __VA_ARGS__)

static nvmlReturn_t w_init(void)
{
	nvmlReturn_t r = ((nvmlInit_v2_fn)R.real.nvmlInit_v2)();

	line_start("init");
	fprintf(R.f, " %d", r);
	line_end();
	return r;
}

static nvmlReturn_t w_shutdown(void)
{
	nvmlReturn_t r = ((nvmlShutdown_fn)R.real.nvmlShutdown)();

	line_start("shutdown");
	fprintf(R.f, " %d", r);
	line_end();
	return r;
}

static nvmlReturn_t w_driver_version(char *v, unsigned int len)
{
	nvmlReturn_t r = REAL(nvmlSystemGetDriverVersion, v, len);

	line_start("driver_version");
	fprintf(R.f, " %d", r);
	if (!r)
		put_str(v);
	line_end();
	return r;
}

static nvmlReturn_t w_count(unsigned int *n)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetCount_v2, n);

	line_start("count");
	fprintf(R.f, " %d %u", r, r ? 0 : *n);
	line_end();
	return r;
}

static nvmlReturn_t w_handle(unsigned int i, nvmlDevice_t *d)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetHandleByIndex_v2, i, d);
	char id[16];

	line_start("handle");
	fprintf(R.f, " %u %d", i, r);
	if (!r) {
		snprintf(id, sizeof(id), "%u", i);
		add_handle(*d, id);
	}
	line_end();
	return r;
}

static nvmlReturn_t w_uuid(nvmlDevice_t d, char *s, unsigned int len)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetUUID, d, s, len);

	line_start("uuid");
	fprintf(R.f, " %s %d", dev_id(d), r);
	if (!r)
		put_str(s);
	line_end();
	return r;
}

static nvmlReturn_t w_name(nvmlDevice_t d, char *s, unsigned int len)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetName, d, s, len);

	line_start("name");
	fprintf(R.f, " %s %d", dev_id(d), r);
	if (!r)
		put_str(s);
	line_end();
	return r;
}

static nvmlReturn_t w_samples(nvmlDevice_t d, nvmlSamplingType_t type, unsigned long long seen,
			      nvmlValueType_t *vt, unsigned int *n, nvmlSample_t *s)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetSamples, d, type, seen, vt, n, s);

	line_start("samples");
	fprintf(R.f, " %s %d %llu %d", dev_id(d), type, seen, r);
	if (!r) {
		fprintf(R.f, " %d %u", *vt, *n);
		for (unsigned i = 0; s && i < *n; i++) {
			fprintf(R.f, " %llu:", s[i].timeStamp);
			put_value(*vt, s[i].sampleValue);
		}
	}
	line_end();
	return r;
}

static nvmlReturn_t w_meminfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetMemoryInfo, d, m);

	line_start("meminfo");
	fprintf(R.f, " %s %d", dev_id(d), r);
	if (!r)
		fprintf(R.f, " %llu %llu %llu", m->total, m->free, m->used);
	line_end();
	return r;
}

static nvmlReturn_t w_meminfo2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetMemoryInfo_v2, d, m);

	line_start("meminfo2");
	fprintf(R.f, " %s %d", dev_id(d), r);
	if (!r)
		fprintf(R.f, " %llu %llu %llu %llu", m->total, m->reserved, m->free, m->used);
	line_end();
	return r;
}

static nvmlReturn_t w_fields(nvmlDevice_t d, int n, nvmlFieldValue_t *v)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetFieldValues, d, n, v);

	line_start("fields");
	fprintf(R.f, " %s %d %d", dev_id(d), r, n);
	for (int i = 0; !r && i < n; i++) {
		fprintf(R.f, " %u:%u:%d:%d:%lld:", v[i].fieldId, v[i].scopeId, v[i].nvmlReturn,
			v[i].valueType, v[i].timestamp);
		put_value(v[i].valueType, v[i].value);
	}
	line_end();
	return r;
}

static nvmlReturn_t w_clock(nvmlDevice_t d, nvmlClockType_t t, unsigned int *c)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetClockInfo, d, t, c);

	line_start("clock");
	fprintf(R.f, " %s %d %d %u", dev_id(d), t, r, r ? 0 : *c);
	line_end();
	return r;
}

static nvmlReturn_t w_temp(nvmlDevice_t d, nvmlTemperatureSensors_t t, unsigned int *c)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetTemperature, d, t, c);

	line_start("temp");
	fprintf(R.f, " %s %d %d %u", dev_id(d), t, r, r ? 0 : *c);
	line_end();
	return r;
}

static nvmlReturn_t w_reasons(nvmlDevice_t d, unsigned long long *m)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetCurrentClocksEventReasons, d, m);

	line_start("throttle");
	fprintf(R.f, " %s %d %llu", dev_id(d), r, r ? 0 : *m);
	line_end();
	return r;
}

static nvmlReturn_t w_reasons_old(nvmlDevice_t d, unsigned long long *m)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetCurrentClocksThrottleReasons, d, m);

	line_start("throttle");
	fprintf(R.f, " %s %d %llu", dev_id(d), r, r ? 0 : *m);
	line_end();
	return r;
}

static nvmlReturn_t w_procutil(nvmlDevice_t d, nvmlProcessUtilizationSample_t *u, unsigned int *n,
			       unsigned long long seen)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetProcessUtilization, d, u, n, seen);

	line_start("procutil");
	fprintf(R.f, " %s %llu %d %u", dev_id(d), seen, r, n ? *n : 0);
	if (!r) {
		for (unsigned i = 0; u && i < *n; i++)
			fprintf(R.f, " %u:%llu:%u:%u:%u:%u", u[i].pid, u[i].timeStamp, u[i].smUtil,
				u[i].memUtil, u[i].encUtil, u[i].decUtil);
	}
	line_end();
	return r;
}

static nvmlReturn_t w_procs(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetComputeRunningProcesses_v3, d, n, p);

	line_start("procs");
	fprintf(R.f, " %s %d", dev_id(d), r);
	if (!r) {
		fprintf(R.f, " %u", *n);
		for (unsigned i = 0; p && i < *n; i++)
			fprintf(R.f, " %u:%llu:%u:%u", p[i].pid, p[i].usedGpuMemory,
				p[i].gpuInstanceId, p[i].computeInstanceId);
	}
	line_end();
	return r;
}

static nvmlReturn_t w_mig_mode(nvmlDevice_t d, unsigned int *c, unsigned int *pend)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetMigMode, d, c, pend);

	line_start("mig_mode");
	fprintf(R.f, " %s %d %u %u", dev_id(d), r, r ? 0 : *c, r ? 0 : *pend);
	line_end();
	return r;
}

static nvmlReturn_t w_mig_max(nvmlDevice_t d, unsigned int *n)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetMaxMigDeviceCount, d, n);

	line_start("mig_max");
	fprintf(R.f, " %s %d %u", dev_id(d), r, r ? 0 : *n);
	line_end();
	return r;
}

static nvmlReturn_t w_mig_handle(nvmlDevice_t d, unsigned int i, nvmlDevice_t *m)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetMigDeviceHandleByIndex, d, i, m);
	char id[16];

	line_start("mig_handle");
	fprintf(R.f, " %s %u %d", dev_id(d), i, r);
	if (!r) {
		snprintf(id, sizeof(id), "%sm%u", dev_id(d), i);
		add_handle(*m, id);
	}
	line_end();
	return r;
}

static nvmlReturn_t w_gpm_support(nvmlDevice_t d, nvmlGpmSupport_t *s)
{
	nvmlReturn_t r = REAL(nvmlGpmQueryDeviceSupport, d, s);

	line_start("gpm_support");
	fprintf(R.f, " %s %d %u", dev_id(d), r, r ? 0 : s->isSupportedDevice);
	line_end();
	return r;
}

static nvmlReturn_t w_gpm_sample(nvmlDevice_t d, nvmlGpmSample_t s)
{
	nvmlReturn_t r = REAL(nvmlGpmSampleGet, d, s);
	int i;

	line_start("gpm_sample");
	fprintf(R.f, " %s %d", dev_id(d), r);
	for (i = 0; i < R.ngpm && R.gpm[i].s != s; i++)
		;
	if (i == R.ngpm && R.ngpm < MAX_GPM)
		R.ngpm++;
	if (i < MAX_GPM) {
		R.gpm[i].s = s;
		snprintf(R.gpm[i].id, sizeof(R.gpm[i].id), "%s", dev_id(d));
	}
	line_end();
	return r;
}

static nvmlReturn_t w_gpm_metrics(nvmlGpmMetricsGet_t *m)
{
	nvmlReturn_t r = ((nvmlGpmMetricsGet_fn)R.real.nvmlGpmMetricsGet)(m);
	const char *id = "?";

	line_start("gpm_metrics");
	for (int i = 0; i < R.ngpm; i++)
		if (R.gpm[i].s == m->sample2)
			id = R.gpm[i].id;
	fprintf(R.f, " %s %d", id, r);
	if (!r) {
		fprintf(R.f, " %u", m->numMetrics);
		for (unsigned i = 0; i < m->numMetrics; i++)
			fprintf(R.f, " %u:%d:%.17g", m->metrics[i].metricId, m->metrics[i].nvmlReturn,
				m->metrics[i].value);
	}
	line_end();
	return r;
}

static nvmlReturn_t w_event_types(nvmlDevice_t d, unsigned long long *t)
{
	nvmlReturn_t r = REAL(nvmlDeviceGetSupportedEventTypes, d, t);

	line_start("event_types");
	fprintf(R.f, " %s %d %llu", dev_id(d), r, r ? 0 : *t);
	line_end();
	return r;
}

static nvmlReturn_t w_event_register(nvmlDevice_t d, unsigned long long t, nvmlEventSet_t s)
{
	nvmlReturn_t r = REAL(nvmlDeviceRegisterEvents, d, t, s);

	line_start("event_register");
	fprintf(R.f, " %s %llu %d", dev_id(d), t, r);
	line_end();
	return r;
}

/* Only delivered events are written: the empty polls (NVML_ERROR_TIMEOUT) carry nothing. */
static nvmlReturn_t w_event_wait(nvmlEventSet_t s, nvmlEventData_t *e, unsigned int ms)
{
	nvmlReturn_t r = REAL(nvmlEventSetWait_v2, s, e, ms);

	if (r == NVML_ERROR_TIMEOUT)
		return r;
	line_start("event");
	fprintf(R.f, " %d", r);
	if (!r)
		fprintf(R.f, " %s %llu %llu %u %u", dev_id(e->device), e->eventType, e->eventData,
			e->gpuInstanceId, e->computeInstanceId);
	line_end();
	return r;
}

/* Replaces every resolved entry point of f with its recording wrapper. */
static void wrap(struct nvml_fns *f)
{
	R.real = *f;
#define W(name, fn)                                                                                \
	if (f->name)                                                                               \
		f->name = (void *)fn;
	W(nvmlInit_v2, w_init);
	W(nvmlShutdown, w_shutdown);
	W(nvmlSystemGetDriverVersion, w_driver_version);
	W(nvmlDeviceGetCount_v2, w_count);
	W(nvmlDeviceGetHandleByIndex_v2, w_handle);
	W(nvmlDeviceGetUUID, w_uuid);
	W(nvmlDeviceGetName, w_name);
	W(nvmlDeviceGetSamples, w_samples);
	W(nvmlDeviceGetMemoryInfo, w_meminfo);
	W(nvmlDeviceGetMemoryInfo_v2, w_meminfo2);
	W(nvmlDeviceGetFieldValues, w_fields);
	W(nvmlDeviceGetClockInfo, w_clock);
	W(nvmlDeviceGetTemperature, w_temp);
	W(nvmlDeviceGetCurrentClocksEventReasons, w_reasons);
	W(nvmlDeviceGetCurrentClocksThrottleReasons, w_reasons_old);
	W(nvmlDeviceGetProcessUtilization, w_procutil);
	W(nvmlDeviceGetComputeRunningProcesses_v3, w_procs);
	W(nvmlDeviceGetMigMode, w_mig_mode);
	W(nvmlDeviceGetMaxMigDeviceCount, w_mig_max);
	W(nvmlDeviceGetMigDeviceHandleByIndex, w_mig_handle);
	W(nvmlGpmQueryDeviceSupport, w_gpm_support);
	W(nvmlGpmSampleGet, w_gpm_sample);
	W(nvmlGpmMetricsGet, w_gpm_metrics);
	W(nvmlDeviceGetSupportedEventTypes, w_event_types);
	W(nvmlDeviceRegisterEvents, w_event_register);
	W(nvmlEventSetWait_v2, w_event_wait);
#undef W
}

/* --points: every point the poller produces, as CSV (time_ns,metric,labels,value). */
static void point_csv(void *ctx, const char *name, const struct label *l, size_t n,
		      uint64_t t_ns, double v)
{
	fprintf(R.points, "%" PRIu64 ",%s,", t_ns, name);
	for (size_t i = 0; i < n; i++)
		fprintf(R.points, "%s%s=%s", i ? ";" : "", l[i].name, l[i].value);
	fprintf(R.points, ",%.17g\n", v);
}

static void event_csv(void *ctx, const struct label *l, size_t n, uint64_t t_ns,
		      const struct label *attrs, size_t nattrs)
{
	fprintf(R.points, "%" PRIu64 ",gpu_event,", t_ns);
	for (size_t i = 0; i < n; i++)
		fprintf(R.points, "%s%s=%s", i ? ";" : "", l[i].name, l[i].value);
	for (size_t i = 0; i < nattrs; i++)
		fprintf(R.points, ";%s=%s", attrs[i].name, attrs[i].value);
	fprintf(R.points, ",1\n");
}

static volatile sig_atomic_t interrupted;
static void on_signal(int sig)
{
	interrupted = 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: gpuscope-agent nvml-record --out FILE [--duration 10s] [options]\n"
		   "Runs the NVML poller and records every NVML call for the replay library.\n"
		   "  --out FILE                  trace to write (text, docs/nvml.md)\n"
		   "  --no-record                 poll without a trace (CPU-cost benchmark)\n"
		   "  --duration D                how long (default 10s)\n"
		   "  --points FILE               also write every point as CSV\n"
		   "  --metrics FILE              write the /metrics exposition at the end\n"
		   "  -v                          debug logging\n%s",
		nvml_usage);
}

int cmd_nvml_record(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "duration", required_argument, NULL, 'd' },
		{ "points", required_argument, NULL, 'p' },
		{ "metrics", required_argument, NULL, 'm' },
		{ "no-record", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ "nvml-library", required_argument, NULL, 0 },
		{ "no-gpu", no_argument, NULL, 0 },
		{ "nvml-samples-interval", required_argument, NULL, 0 },
		{ "nvml-memory-interval", required_argument, NULL, 0 },
		{ "nvml-gpm-interval", required_argument, NULL, 0 },
		{ "nvml-slow-interval", required_argument, NULL, 0 },
		{ "nvml-process-interval", required_argument, NULL, 0 },
		{ "nvml-fields-interval", required_argument, NULL, 0 },
		{ "nvml-backoff", required_argument, NULL, 0 },
		{ 0 },
	};
	struct agent_opts opts = { 0 };
	const char *out = NULL, *points = NULL, *metrics = NULL, *why = NULL;
	uint64_t duration_ns = 10 * NSEC_PER_SEC, end;
	struct nvml_sink sink = { 0 };
	struct nvml_poller *p = NULL;
	struct nvml_lib *lib = NULL;
	struct nvml_cfg cfg;
	bool no_record = false;
	char host[256] = "";
	int c, li, rc = 1, err;

	optind = 1;
	while ((c = getopt_long(argc, argv, "o:d:vh", lo, &li)) != -1) {
		switch (c) {
		case 0:
			if (nvml_parse_opt(&opts, lo[li].name, optarg) <= 0)
				return 2;
			break;
		case 'o':
			out = optarg;
			break;
		case 'd':
			if (parse_duration_ns(optarg, &duration_ns) || !duration_ns) {
				log_error("--duration: bad value '%s'", optarg);
				return 2;
			}
			break;
		case 'p':
			points = optarg;
			break;
		case 'm':
			metrics = optarg;
			break;
		case 'n':
			no_record = true;
			break;
		case 'v':
			gpuscope_log_level = LOG_DEBUG;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!out == !no_record || optind != argc) {
		usage(stderr);
		return 2;
	}
	err = nvml_lib__open(opts.nvml_library, &lib, &why);
	if (err) {
		log_error("nvml-record: %s", why);
		return 1;
	}
	if (lib->nmissing)
		log_info("nvml: functions missing from this driver, their metrics are skipped: %s",
			 lib->missing);
	if (out) {
		R.f = fopen(out, "w");
		if (!R.f) {
			log_error("nvml-record: open '%s': %s", out, strerror(errno));
			goto out_close;
		}
		setvbuf(R.f, NULL, _IOFBF, 1 << 20);
		R.t0 = mono_ns();
		gethostname(host, sizeof(host) - 1);
		fprintf(R.f, "gpuscope-nvml-trace 1 start_wall_us=%" PRIu64 " host=%s\n",
			wall_ns() / 1000 - (mono_ns() - R.t0) / 1000, host);
		fprintf(R.f, "# time_us_since_start call args... (docs/nvml.md)\n");
		wrap(&lib->f);
	}
	if (points) {
		R.points = fopen(points, "w");
		if (!R.points) {
			log_error("nvml-record: open '%s': %s", points, strerror(errno));
			goto out_close;
		}
		setvbuf(R.points, NULL, _IOFBF, 1 << 20);
		sink.metric = point_csv;
		sink.event = event_csv;
	}
	nvml_cfg_from_opts(&cfg, &opts);
	if (lib->f.nvmlSystemGetDriverVersion && ((nvmlInit_v2_fn)lib->f.nvmlInit_v2)() == 0) {
		char ver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];

		if (!NVML_CALL(&lib->f, nvmlSystemGetDriverVersion, ver, sizeof(ver)))
			log_info("nvml: driver %s", ver);
		NVML_CALL(&lib->f, nvmlShutdown);
	}
	p = nvml_poller__new(&lib->f, lib->missing, &cfg, mono_to_wall_offset_ns(), &sink, &why);
	if (!p) {
		log_error("nvml-record: %s", why ? why : strerror(errno));
		goto out_close;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	err = nvml_poller__start(p);
	if (err) {
		log_error("nvml-record: poller thread: %s", strerror(-err));
		goto out_close;
	}
	log_info("nvml-record: %d device(s) for %.1f s%s%s", nvml_poller__ngpus(p),
		 (double)duration_ns / 1e9, out ? " -> " : "", out ? out : "");
	end = mono_ns() + duration_ns;
	while (!interrupted && mono_ns() < end) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	nvml_poller__stop(p);
	nvml_poller__summary(p, stderr);
	if (metrics) {
		FILE *m = fopen(metrics, "w");

		if (m) {
			nvml_poller__metrics(p, m);
			fclose(m);
		}
	}
	rc = 0;
out_close:
	nvml_poller__free(p);
	nvml_lib__close(lib);
	if (R.f && fclose(R.f)) {
		log_error("nvml-record: write '%s': %s", out, strerror(errno));
		rc = 1;
	}
	if (R.points)
		fclose(R.points);
	return rc;
}
