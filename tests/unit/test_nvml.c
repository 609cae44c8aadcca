// SPDX-License-Identifier: Apache-2.0
/*
 * The NVML poller and module, unchanged, against the replay library (a libnvidia-ml.so.1 with
 * NVML's ABI playing back traces recorded on the H200, tests/data/nvml/). Each case runs in a
 * child process: the replay library keeps one trace per process.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/gpu/nvml.h"
#include "agent/modules.h"
#include "common/batch.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "test.h"

#define REPLAY	   ".output/tests/nvml/libnvidia-ml.so.1"
#define REPLAY_OLD ".output/tests/nvml/old/libnvidia-ml.so.1"
#define DATA	   "tests/data/nvml/"
#define MAXPTS	   200000

struct pt {
	const char *name;	/* static metric name from the poller */
	char gpu[16], uuid[96], mig[96], pid[16];
	uint64_t t_ns;
	double v;
	bool event;
};

static struct pt *pts;
static int npts;
static int64_t run_offset_ns;	/* the poller's monotonic-to-wall offset */

/*
 * The poller moves NVML's wall-clock timestamps onto the agent's clock (monotonic + the offset
 * at its start) once the two are more than 1 ms apart: a wall clock stepped or slewed during the
 * run (a VM's time sync did, 2026-12-05) moves the points by that much. Points must then be
 * within the clocks' distance now; else exactly at the driver's time.
 */
static bool same_time(uint64_t got_ns, uint64_t driver_ns)
{
	int64_t skew = (int64_t)(wall_ns() - (mono_ns() + (uint64_t)run_offset_ns));
	int64_t d = (int64_t)(got_ns - driver_ns);

	if (got_ns == driver_ns)
		return true;
	skew = skew < 0 ? -skew : skew;
	return skew > (int64_t)NSEC_PER_MSEC && (d < 0 ? -d : d) <= skew;
}

static void collect(void *ctx, const char *name, const struct label *l, size_t n, uint64_t t_ns,
		    double v)
{
	struct pt *p;

	if (npts == MAXPTS)
		return;
	p = &pts[npts++];
	memset(p, 0, sizeof(*p));
	p->name = name;
	p->t_ns = t_ns;
	p->v = v;
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(l[i].name, "gpu"))
			snprintf(p->gpu, sizeof(p->gpu), "%s", l[i].value);
		else if (!strcmp(l[i].name, "gpu_uuid"))
			snprintf(p->uuid, sizeof(p->uuid), "%s", l[i].value);
		else if (!strcmp(l[i].name, "mig_uuid"))
			snprintf(p->mig, sizeof(p->mig), "%s", l[i].value);
		else if (!strcmp(l[i].name, "pid"))
			snprintf(p->pid, sizeof(p->pid), "%s", l[i].value);
	}
}

static void collect_event(void *ctx, const struct label *l, size_t n, uint64_t t_ns,
			  const struct label *attrs, size_t na)
{
	collect(ctx, "gpu_event", l, n, t_ns, na > 0 ? atof(attrs[0].value) : -1);
	pts[npts - 1].event = true;
}

/* Replay helpers exported by the replay library (same handle as the poller's dlopen). */
static int (*r_samples)(const char *, int, unsigned long long *, double *, int);
static int (*r_proc)(const char *, unsigned *, unsigned long long *, unsigned *, unsigned *, int);
static int (*r_finished)(void);

static bool replay_env(const char *trace, const char *speed)
{
	setenv("GPUSCOPE_NVML_REPLAY", trace, 1);
	setenv("GPUSCOPE_NVML_REPLAY_SPEED", speed, 1);
	unsetenv("GPUSCOPE_NVML_REPLAY_LOOP");
	return true;
}

static bool bind_helpers(const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);

	if (!h)
		return false;
	r_samples = dlsym(h, "gpuscope_nvml_replay_samples");
	r_proc = dlsym(h, "gpuscope_nvml_replay_proc_samples");
	r_finished = dlsym(h, "gpuscope_nvml_replay_finished");
	return r_samples && r_proc && r_finished;
}

/* Opens lib, runs the poller thread until the trace has played (+ margin). */
static struct nvml_poller *run_poller(const char *lib, struct nvml_cfg *cfg, struct nvml_lib **ret)
{
	struct nvml_sink sink = { .metric = collect, .event = collect_event };
	struct nvml_poller *p;
	const char *why = NULL;

	pts = calloc(MAXPTS, sizeof(*pts));
	npts = 0;
	if (!pts || nvml_lib__open(lib, ret, &why)) {
		fprintf(stderr, "  open %s: %s\n", lib, why ? why : "ENOMEM");
		return NULL;
	}
	run_offset_ns = mono_to_wall_offset_ns();
	p = nvml_poller__new(&(*ret)->f, (*ret)->missing, cfg, run_offset_ns, &sink,
			     &why);
	if (!p) {
		fprintf(stderr, "  poller: %s\n", why ? why : strerror(errno));
		return NULL;
	}
	if (!bind_helpers(lib) || nvml_poller__start(p)) {
		fprintf(stderr, "  replay helpers or thread missing\n");
		return NULL;
	}
	for (int i = 0; i < 600 && !r_finished(); i++)
		usleep(20000);
	/* one more round of every source after the end */
	usleep((useconds_t)(cfg->interval_ns[NVML_SRC_SAMPLES] / 1000 + 300000));
	nvml_poller__stop(p);
	return p;
}

/* Every buffered sample of gpu `dev` in the trace arrives exactly once, with its timestamp. */
static bool check_streams(const char *dev, int want_total)
{
	static const char *const names[3] = { "gpu_power_watts", "gpu_utilization",
					       "gpu_memory_util" };
	static unsigned long long ts[20000];
	static double val[20000];
	int total = 0;

	for (int st = 0; st < 3; st++) {
		int n = r_samples(dev, st, ts, val, 20000), got = 0;

		for (int i = 0; i < npts; i++)
			got += pts[i].name == names[st] && !strcmp(pts[i].gpu, dev) && !*pts[i].mig;
		CHECK(ASSERT_EQ(got, n, names[st]));
		for (int k = 0; k < n; k++) {
			int seen = 0;
			double want = st == 0 ? val[k] / 1000.0 : val[k];

			for (int i = 0; i < npts; i++) {
				if (pts[i].name != names[st] || strcmp(pts[i].gpu, dev) ||
				    !same_time(pts[i].t_ns, ts[k] * 1000ULL))
					continue;
				seen++;
				CHECK(ASSERT_TRUE(fabs(pts[i].v - want) < 1e-9, "value"));
			}
			if (!ASSERT_EQ(seen, 1, "sample seen exactly once at its timestamp")) {
				fprintf(stderr, "  gpu %s stream %d ts %llu\n", dev, st, ts[k]);
				return false;
			}
		}
		total += n;
	}
	if (want_total >= 0)
		CHECK(ASSERT_EQ(total > 0, want_total > 0, "samples present"));
	return true;
}

static int count(const char *name, const char *gpu)
{
	int n = 0;

	for (int i = 0; i < npts; i++)
		n += !strcmp(pts[i].name, name) && (!gpu || !strcmp(pts[i].gpu, gpu));
	return n;
}

static bool in_child(bool (*fn)(void))
{
	int status;
	pid_t pid = fork();

	if (pid == 0)
		_exit(fn() ? 0 : 1);
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return false;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static bool samples_exactly_once(void)
{
	struct nvml_lib *lib;
	struct nvml_poller *p;
	struct nvml_cfg cfg;

	replay_env(DATA "h200.trace.gz", "8");
	nvml_cfg_defaults(&cfg);	/* 1 s drains: each one returns many samples */
	p = run_poller(REPLAY, &cfg, &lib);
	CHECK(p);
	CHECK(check_streams("0", 1));
	/* the polled sources ran too, with the agent clock */
	/* memory at 10 ms, 8x apart while it stays (test_nvml_backoff): ~60 reads in the 2 s */
	CHECK(ASSERT_TRUE(count("gpu_memory_used_bytes", "0") > 20, "memory points"));
	CHECK(ASSERT_TRUE(count("gpu_sm_active", "0") > 10, "GPM points"));
	CHECK(ASSERT_TRUE(count("gpu_sm_clock_mhz", "0") > 10, "clock points"));
	CHECK(ASSERT_TRUE(count("gpu_energy_joules", "0") > 0, "field points"));
	nvml_poller__free(p);
	nvml_lib__close(lib);
	return true;
}

static bool test_nvml_samples_exactly_once(void)
{
	return in_child(samples_exactly_once);
}

/* The same with 100 ms drains (most calls return 0 or 1 sample, or NOT_FOUND). */
static bool samples_fast_drain(void)
{
	struct nvml_lib *lib;
	struct nvml_poller *p;
	struct nvml_cfg cfg;

	replay_env(DATA "h200.trace.gz", "8");
	nvml_cfg_defaults(&cfg);
	cfg.interval_ns[NVML_SRC_SAMPLES] = 10 * NSEC_PER_MSEC;
	p = run_poller(REPLAY, &cfg, &lib);
	CHECK(p);
	CHECK(check_streams("0", 1));
	nvml_poller__free(p);
	nvml_lib__close(lib);
	return true;
}

static bool test_nvml_samples_fast_drain(void)
{
	return in_child(samples_fast_drain);
}

static bool multi_gpu(void)
{
	struct nvml_lib *lib;
	struct nvml_poller *p;
	struct nvml_cfg cfg;
	char *m = NULL;
	size_t mlen = 0;
	FILE *f;

	replay_env(DATA "h200x8.trace.gz", "8");
	nvml_cfg_defaults(&cfg);
	p = run_poller(REPLAY, &cfg, &lib);
	CHECK(p);
	CHECK(ASSERT_EQ(nvml_poller__ngpus(p), 10, "8 GPUs and 2 MIG devices"));
	for (int k = 0; k < 8; k++) {
		char dev[4], uuid[96] = "";

		snprintf(dev, sizeof(dev), "%d", k);
		CHECK(check_streams(dev, 1));
		if (k == 7)	/* MIG on: power samples only, no utilization samples */
			CHECK(ASSERT_EQ(count("gpu_utilization", dev), 0, "no util with MIG"));
		for (int i = 0; i < npts; i++) {
			if (strcmp(pts[i].gpu, dev))
				continue;
			if (!*uuid)
				snprintf(uuid, sizeof(uuid), "%s", pts[i].uuid);
			CHECK(ASSERT_STREQ(pts[i].uuid, uuid, "one UUID per gpu label"));
		}
		for (int i = 0; i < npts; i++)
			if (strcmp(pts[i].gpu, dev) && !strcmp(pts[i].uuid, uuid))
				CHECK(ASSERT_TRUE(false, "UUID shared by two GPUs"));
	}
	/* MIG devices: memory per instance, labelled with their own MIG UUID */
	int mig0 = 0, mig1 = 0, xid = 0;

	for (int i = 0; i < npts; i++) {
		if (!strcmp(pts[i].name, "gpu_memory_used_bytes") && strstr(pts[i].mig, "-0"))
			mig0++;
		if (!strcmp(pts[i].name, "gpu_memory_used_bytes") && strstr(pts[i].mig, "-1"))
			mig1++;
		if (pts[i].event) {
			CHECK(ASSERT_STREQ(pts[i].gpu, "3", "Xid on GPU 3"));
			CHECK(ASSERT_EQ((long long)pts[i].v, 79, "Xid 79"));
			xid++;
		}
	}
	CHECK(ASSERT_TRUE(mig0 > 10 && mig1 > 10, "MIG devices polled"));
	CHECK(ASSERT_EQ(xid, 1, "one Xid event"));
	/* GPU 5 was lost for 1.5 s: errors counted there only, and its memory series has a gap
	 * while the other GPUs kept theirs */
	f = open_memstream(&m, &mlen);
	nvml_poller__metrics(p, f);
	fclose(f);
	{
		const char *l5 = strstr(m, "gpuscope_agent_nvml_errors_total{gpu=\"5\"");
		const char *l4 = strstr(m, "gpuscope_agent_nvml_errors_total{gpu=\"4\"");

		CHECK(ASSERT_TRUE(l5 && l4, "errors lines"));
		CHECK(ASSERT_TRUE(atof(strchr(strchr(l5, '}'), ' ')) > 0, "gpu 5 errors > 0"));
		CHECK(ASSERT_TRUE(atof(strchr(strchr(l4, '}'), ' ')) == 0, "gpu 4 errors == 0"));
	}
	CHECK(ASSERT_TRUE(count("gpu_memory_used_bytes", "4") > count("gpu_memory_used_bytes", "5"),
			  "gpu 5 backed off, gpu 4 did not"));
	free(m);
	nvml_poller__free(p);
	nvml_lib__close(lib);
	return true;
}

static bool test_nvml_multi_gpu(void)
{
	return in_child(multi_gpu);
}

/* Two processes on one GPU: every sample labelled with its own pid and value. */
static bool shared_gpu(void)
{
	static unsigned pid[20000], sm[20000], mem[20000];
	static unsigned long long ts[20000];
	struct nvml_lib *lib;
	struct nvml_poller *p;
	struct nvml_cfg cfg;
	int n, got = 0, pids[2] = { 0, 0 };

	replay_env(DATA "shared.trace.gz", "4");
	nvml_cfg_defaults(&cfg);
	/* the driver keeps only the latest sample of each process (one per ~200 ms): poll faster
	 * than that in replay time (4 x 15 ms = 60 ms) */
	cfg.interval_ns[NVML_SRC_PROCESS] = 15 * NSEC_PER_MSEC;
	cfg.backoff_max = 1;	/* every interval: a sample held under the spacing is not read */
	p = run_poller(REPLAY, &cfg, &lib);
	CHECK(p);
	n = r_proc("0", pid, ts, sm, mem, 20000);
	CHECK(ASSERT_TRUE(n > 50, "trace has per-process samples"));
	/* Every point is a sample of the trace, with that sample's own pid and value. */
	for (int i = 0; i < npts; i++) {
		int match = 0;

		if (strcmp(pts[i].name, "gpu_process_sm_util"))
			continue;
		got++;
		for (int k = 0; k < n; k++) {
			char want[16];

			snprintf(want, sizeof(want), "%u", pid[k]);
			if (same_time(pts[i].t_ns, ts[k] * 1000ULL) && !strcmp(pts[i].pid, want)) {
				match++;
				CHECK(ASSERT_EQ((long long)pts[i].v, sm[k], "sm util of this pid"));
				pids[pid[k] == 2222] = 1;
			}
		}
		if (!ASSERT_EQ(match, 1, "point = one trace sample, same pid")) {
			fprintf(stderr, "  pid %s t %llu\n", pts[i].pid,
				(unsigned long long)pts[i].t_ns);
			return false;
		}
	}
	/* The driver keeps only the latest sample of each process: a poll delayed past a period
	 * (this machine is shared) loses one, as it would on the GPU; most must arrive. */
	CHECK(ASSERT_TRUE(got >= n * 9 / 10, "at least 90% of the per-process samples"));
	CHECK(ASSERT_TRUE(pids[0] && pids[1], "both processes"));
	CHECK(ASSERT_TRUE(count("gpu_process_memory_bytes", "0") > 10, "per-process memory"));
	nvml_poller__free(p);
	nvml_lib__close(lib);
	return true;
}

static bool test_nvml_shared_gpu(void)
{
	return in_child(shared_gpu);
}

/* An older driver: the missing entry points are listed, their metrics skipped, the rest runs. */
static bool old_driver(void)
{
	struct nvml_lib *lib;
	struct nvml_poller *p;
	struct nvml_cfg cfg;
	char *m = NULL;
	size_t mlen = 0;
	FILE *f;

	replay_env(DATA "h200.trace.gz", "16");
	nvml_cfg_defaults(&cfg);
	p = run_poller(REPLAY_OLD, &cfg, &lib);
	CHECK(p);
	CHECK(ASSERT_TRUE(lib->nmissing >= 7, "several functions missing"));
	CHECK(ASSERT_TRUE(strstr(lib->missing, "nvmlGpmMetricsGet") != NULL, "GPM listed"));
	CHECK(ASSERT_TRUE(strstr(lib->missing, "nvmlDeviceGetMemoryInfo_v2") != NULL, "v2 listed"));
	CHECK(ASSERT_TRUE(strstr(lib->missing, "nvmlDeviceGetCurrentClocksEventReasons") != NULL,
			  "new throttle name listed"));
	CHECK(ASSERT_EQ(count("gpu_sm_active", NULL), 0, "no GPM points"));
	CHECK(ASSERT_TRUE(count("gpu_memory_used_bytes", "0") > 10, "memory through v1"));
	CHECK(ASSERT_TRUE(count("gpu_throttle_reasons", "0") > 5, "throttle through the old name"));
	CHECK(check_streams("0", 1));
	f = open_memstream(&m, &mlen);
	nvml_poller__metrics(p, f);
	fclose(f);
	CHECK(ASSERT_TRUE(strstr(m, "gpuscope_agent_nvml_missing_functions{functions=\"") != NULL,
			  "missing functions on /metrics"));
	free(m);
	nvml_poller__free(p);
	nvml_lib__close(lib);
	return true;
}

static bool test_nvml_old_driver(void)
{
	return in_child(old_driver);
}

/* No driver: the module says so and the agent runs CPU-only (-ENOENT). */
static bool no_driver(void)
{
	struct agent a = { 0 };

	a.opts.nvml_library = "/nonexistent/libnvidia-ml.so.1";
	CHECK(ASSERT_EQ(nvml_module.start(&a), -ENOENT, "no library"));
	unsetenv("GPUSCOPE_NVML_REPLAY");	/* a library whose nvmlInit fails */
	a.opts.nvml_library = REPLAY;
	CHECK(ASSERT_EQ(nvml_module.start(&a), -ENOENT, "nvmlInit fails"));
	a.opts.nvml_library = "libc.so.6";	/* a library that is not NVML */
	CHECK(ASSERT_EQ(nvml_module.start(&a), -ENOENT, "not an NVML"));
	a.opts.no_gpu = true;
	CHECK(ASSERT_EQ(nvml_module.start(&a), -ENOTSUP, "--no-gpu"));
	return true;
}

static bool test_nvml_no_driver(void)
{
	return in_child(no_driver);
}

/* The module as the agent runs it: points reach a->batch in tick(), and decode. */
static bool module_batch(void)
{
	static unsigned long long ts[20000];
	static double val[20000];
	struct agent a = { 0 };
	Gpuscope__V1__Batch *m;
	uint8_t *buf = NULL;
	size_t len = 0, npower = 0, nmem = 0;
	char err[256];
	int n;

	replay_env(DATA "h200.trace.gz", "8");
	a.opts.nvml_library = REPLAY;
	a.mono_to_wall_ns = mono_to_wall_offset_ns();
	a.batch = batch__new("test-node");
	CHECK(a.batch);
	CHECK(ASSERT_EQ(nvml_module.start(&a), 0, "start"));
	CHECK(bind_helpers(REPLAY));
	for (int i = 0; i < 600 && !r_finished(); i++) {
		nvml_module.tick(&a);
		usleep(50000);
	}
	usleep(1300000);
	nvml_module.stop(&a);	/* drains the queue one last time */
	CHECK(ASSERT_EQ(batch__encode(a.batch, &buf, &len), 0, "encode"));
	m = batch_decode(buf, len, err, sizeof(err));
	if (!m)
		fprintf(stderr, "  decode: %s\n", err);
	CHECK(m);
	for (size_t i = 0; i < m->n_series; i++) {
		const char *name = m->strings[m->series[i]->name];

		if (!strcmp(name, "gpu_power_watts"))
			npower += m->series[i]->n_value;
		if (!strcmp(name, "gpu_memory_used_bytes"))
			nmem += m->series[i]->n_value;
	}
	n = r_samples("0", 0, ts, val, 20000);
	CHECK(ASSERT_EQ(npower, n, "every power sample in the batch"));
	CHECK(ASSERT_TRUE(nmem > 20, "memory points in the batch"));
	batch_decode_free(m);
	free(buf);
	batch__free(a.batch);
	return true;
}

static bool test_nvml_module_batch(void)
{
	return in_child(module_batch);
}

/*
 * Cadences that follow what changes (--nvml-backoff): the same trace polled every interval and
 * with the default backoff, each in a child of its own (the replay's clock starts at its init).
 * Reads drop; every memory value the trace held for a while (at least three of the longest
 * intervals) is still read.
 */
struct bo_run {
	int mem, gpm, proc, nvals;
	double val[64];		/* gpu 0's memory used, consecutive distinct values... */
	int len[64];		/* ...and the points each held for */
};
static struct bo_run *bo;

static bool backoff_run(int k)
{
	struct nvml_lib *lib;
	struct nvml_poller *p;
	struct nvml_cfg cfg;
	struct bo_run *r = &bo[k];

	replay_env(DATA "h200.trace.gz", "8");
	nvml_cfg_defaults(&cfg);
	if (k == 0)
		cfg.backoff_max = 1;
	cfg.interval_ns[NVML_SRC_PROCESS] = 100 * NSEC_PER_MSEC;	/* enough reads to tell */
	p = run_poller(REPLAY, &cfg, &lib);
	CHECK(p);
	r->mem = count("gpu_memory_used_bytes", "0");
	r->gpm = count("gpu_sm_active", "0");
	{
		/* the process source's runs, from the poller's summary */
		char *txt = NULL, *at;
		size_t len = 0;
		FILE *f = open_memstream(&txt, &len);

		CHECK(f);
		nvml_poller__summary(p, f);
		fclose(f);
		at = txt ? strstr(txt, "source process") : NULL;
		at = at ? strstr(at, "runs ") : NULL;
		r->proc = at ? atoi(at + 5) : -1;
		free(txt);
	}
	for (int i = 0; i < npts; i++) {
		if (strcmp(pts[i].name, "gpu_memory_used_bytes") || strcmp(pts[i].gpu, "0"))
			continue;
		if (r->nvals && r->val[r->nvals - 1] == pts[i].v)
			r->len[r->nvals - 1]++;
		else if (r->nvals < 64)
			r->val[r->nvals] = pts[i].v, r->len[r->nvals++] = 1;
	}
	nvml_poller__free(p);
	nvml_lib__close(lib);
	return true;
}

static bool backoff_every(void)
{
	return backoff_run(0);
}

static bool backoff_default(void)
{
	return backoff_run(1);
}

static bool test_nvml_backoff(void)
{
	bool ok = false;

	bo = mmap(NULL, 2 * sizeof(*bo), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(bo != MAP_FAILED);
	if (!ASSERT_TRUE(in_child(backoff_every), "every interval") ||
	    !ASSERT_TRUE(in_child(backoff_default), "with backoff"))
		goto out;
	fprintf(stderr, "  memory reads %d -> %d, GPM windows %d -> %d, process reads %d -> %d, "
		"values %d -> %d\n", bo[0].mem, bo[1].mem, bo[0].gpm, bo[1].gpm, bo[0].proc,
		bo[1].proc, bo[0].nvals, bo[1].nvals);
	if (!ASSERT_TRUE(bo[0].mem > 100 && bo[1].mem * 2 < bo[0].mem, "memory read less often") ||
	    !ASSERT_TRUE(bo[1].gpm > 0 && bo[1].gpm < bo[0].gpm, "GPM read less often") ||
	    !ASSERT_TRUE(bo[1].proc > 0 && bo[1].proc * 10 < bo[0].proc * 9,
			 "processes read less often"))
		goto out;
	/* 8 x 10 ms at most between reads: a value held 25 base intervals (250 ms) is seen */
	for (int i = 0; i < bo[0].nvals; i++) {
		bool seen = false;

		for (int j = 0; j < bo[1].nvals; j++)
			seen |= bo[1].val[j] == bo[0].val[i];
		if (bo[0].len[i] >= 25 && !ASSERT_TRUE(seen, "a memory value held 250 ms is read")) {
			fprintf(stderr, "  %.0f bytes, %d points at 10 ms\n", bo[0].val[i], bo[0].len[i]);
			goto out;
		}
	}
	ok = ASSERT_TRUE(bo[0].nvals >= 2, "the trace's memory changes");
out:
	munmap(bo, 2 * sizeof(*bo));
	return ok;
}

static bool test_nvml_parse_opt(void)
{
	struct agent_opts o = { 0 };
	struct nvml_cfg c;

	CHECK(ASSERT_EQ(nvml_parse_opt(&o, "nvml-memory-interval", "50ms"), 1, "memory"));
	CHECK(ASSERT_EQ(nvml_parse_opt(&o, "nvml-gpm-interval", "0"), 1, "gpm off"));
	CHECK(ASSERT_EQ(nvml_parse_opt(&o, "nvml-slow-interval", "100us"), -EINVAL, "too fast"));
	CHECK(ASSERT_EQ(nvml_parse_opt(&o, "nvml-slow-interval", "soon"), -EINVAL, "junk"));
	CHECK(ASSERT_EQ(nvml_parse_opt(&o, "frequency", "99"), 0, "not ours"));
	CHECK(ASSERT_EQ(nvml_parse_opt(&o, "nvml-library", "/x/libnvidia-ml.so.1"), 1, "lib"));
	nvml_cfg_from_opts(&c, &o);
	CHECK(ASSERT_EQ(c.interval_ns[NVML_SRC_MEMORY], 50 * NSEC_PER_MSEC, "memory rate"));
	CHECK(ASSERT_EQ(c.interval_ns[NVML_SRC_GPM], 0, "gpm off"));
	CHECK(ASSERT_EQ(c.interval_ns[NVML_SRC_SAMPLES], NSEC_PER_SEC, "samples default"));
	CHECK(ASSERT_STREQ(o.nvml_library, "/x/libnvidia-ml.so.1", "library"));
	CHECK(ASSERT_EQ(c.backoff_max, 8, "backoff default"));
	CHECK(ASSERT_EQ(nvml_parse_opt(&o, "nvml-backoff", "0"), -EINVAL, "backoff 0"));
	CHECK(ASSERT_EQ(nvml_parse_opt(&o, "nvml-backoff", "1"), 1, "backoff off"));
	nvml_cfg_from_opts(&c, &o);
	CHECK(ASSERT_EQ(c.backoff_max, 1, "backoff off"));
	return true;
}

TEST_MAIN(T(test_nvml_parse_opt), T(test_nvml_no_driver), T(test_nvml_samples_exactly_once),
	  T(test_nvml_samples_fast_drain), T(test_nvml_multi_gpu), T(test_nvml_shared_gpu),
	  T(test_nvml_old_driver), T(test_nvml_module_batch), T(test_nvml_backoff))
