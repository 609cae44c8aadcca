// SPDX-License-Identifier: Apache-2.0
/*
 * Loading NVML at run time (no link-time dependency on the driver) and the NVML options of the
 * agent's command line.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "agent/agent.h"
#include "agent/gpu/nvml.h"
#include "common/log.h"
#include "common/util.h"

const char *const nvml_source_names[NVML_SRC_MAX] = {
	[NVML_SRC_SAMPLES] = "samples", [NVML_SRC_MEMORY] = "memory", [NVML_SRC_GPM] = "gpm",
	[NVML_SRC_SLOW] = "slow",	[NVML_SRC_PROCESS] = "process", [NVML_SRC_FIELDS] = "fields",
};
_Static_assert(NVML_SRC_MAX == ARRAY_SIZE(((struct agent_opts *)0)->nvml_interval_ns),
	       "agent_opts.nvml_interval_ns has one slot per enum nvml_source");

void nvml_cfg_defaults(struct nvml_cfg *c)
{
	/*
	 * From the H200 (driver 580.159, docs/nvml.md): CPU per call, about the same as its wall
	 * time: GetSamples ~1.8 ms whatever it returns, GetProcessUtilization ~1.8 ms,
	 * GetFieldValues ~3.8 ms, GpmSampleGet 0.2 ms, GetMemoryInfo_v2 ~40 us, clocks and
	 * sensors 3-26 us. The driver keeps 2.4 s of power and 14 s of utilization samples with
	 * their own timestamps, so draining every 1 s (utilization every 4 s) loses no sample and
	 * no resolution. Per-process utilization keeps only the latest sample of each process
	 * (one per ~200 ms): 1 s keeps one in five, 200 ms all (+0.8 % of a core per GPU). GPM
	 * counters refresh every ~100 ms: shorter windows only add zeros.
	 */
	c->interval_ns[NVML_SRC_SAMPLES] = 1000 * NSEC_PER_MSEC;
	c->interval_ns[NVML_SRC_MEMORY] = 10 * NSEC_PER_MSEC;
	c->interval_ns[NVML_SRC_GPM] = 100 * NSEC_PER_MSEC;
	c->interval_ns[NVML_SRC_SLOW] = 100 * NSEC_PER_MSEC;
	c->interval_ns[NVML_SRC_PROCESS] = 1000 * NSEC_PER_MSEC;
	c->interval_ns[NVML_SRC_FIELDS] = 5000 * NSEC_PER_MSEC;
	/* memory 10 ms -> 80 ms, GPM 100 -> 800 ms (a GPM point still speaks for its whole
	 * window: at most 1 s, nvml.c), slow 100 -> 800 ms while nothing changes */
	c->backoff_max = 8;
}

void nvml_cfg_from_opts(struct nvml_cfg *c, const struct agent_opts *o)
{
	nvml_cfg_defaults(c);
	for (int i = 0; i < NVML_SRC_MAX; i++)
		if (o->nvml_interval_ns[i])
			c->interval_ns[i] = o->nvml_interval_ns[i] == UINT64_MAX ? 0 :
									    o->nvml_interval_ns[i];
	if (o->nvml_backoff)
		c->backoff_max = o->nvml_backoff;
}

const char nvml_usage[] =
	"  --nvml-library PATH         NVML to load (default libnvidia-ml.so.1)\n"
	"  --no-gpu                    do not poll NVML\n"
	"  --nvml-samples-interval D   drain the driver's buffered power samples every D, its\n"
	"                              utilization ones every 4 D (1s; each keeps its timestamp)\n"
	"  --nvml-memory-interval D    poll memory used every D (10ms)\n"
	"  --nvml-gpm-interval D       GPM windows of D (100ms, the driver's refresh period)\n"
	"  --nvml-slow-interval D      clocks, GPU temperature, throttle reasons, events (100ms)\n"
	"  --nvml-process-interval D   per-process utilization and memory (1s; 200ms keeps\n"
	"                              every per-process sample the driver makes)\n"
	"  --nvml-fields-interval D    energy counter, memory temperature (5s)\n"
	"                              (D = 0 turns that source off)\n"
	"  --nvml-backoff N            memory, GPM and clocks: up to N intervals apart while no\n"
	"                              reading changes, back to one at the first change (8; 1: off)\n";

int nvml_parse_opt(struct agent_opts *o, const char *name, const char *val)
{
	static const char *const iv[NVML_SRC_MAX] = {
		"nvml-samples-interval", "nvml-memory-interval", "nvml-gpm-interval",
		"nvml-slow-interval",	 "nvml-process-interval", "nvml-fields-interval",
	};
	uint64_t ns;

	if (!strcmp(name, "nvml-library")) {
		if (!val || !*val)
			goto bad;
		o->nvml_library = val;
		return 1;
	}
	if (!strcmp(name, "no-gpu")) {
		o->no_gpu = true;
		return 1;
	}
	if (!strcmp(name, "nvml-backoff")) {
		char *end;
		long n = val ? strtol(val, &end, 10) : 0;

		if (!val || *end || n < 1 || n > 64) {
			log_error("--nvml-backoff: '%s' is not a number of intervals in 1..64",
				  val ? val : "");
			return -EINVAL;
		}
		o->nvml_backoff = (unsigned)n;
		return 1;
	}
	for (int i = 0; i < NVML_SRC_MAX; i++) {
		if (strcmp(name, iv[i]))
			continue;
		if (!val || parse_duration_ns(val, &ns))
			goto bad;
		if (ns && ns < 1 * NSEC_PER_MSEC) {
			log_error("--%s: '%s' is below the 1ms floor", name, val);
			return -EINVAL;
		}
		o->nvml_interval_ns[i] = ns ? ns : UINT64_MAX;	/* UINT64_MAX: off */
		return 1;
	}
	return 0;
bad:
	log_error("--%s: bad value '%s'", name, val ? val : "");
	return -EINVAL;
}

int nvml_lib__open(const char *path, struct nvml_lib **ret, const char **why)
{
	static char whybuf[512];
	struct nvml_lib *l;
	size_t off = 0;

	if (!path)
		path = "libnvidia-ml.so.1";
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!l->dl) {
		snprintf(whybuf, sizeof(whybuf), "cannot load '%s': %s", path, dlerror());
		goto out_enoent;
	}
#define RESOLVE(req, name, args)                                                                   \
	l->f.name = dlsym(l->dl, #name);                                                           \
	if (!l->f.name && req) {                                                                   \
		snprintf(whybuf, sizeof(whybuf), "'%s' lacks %s: not a usable NVML", path, #name); \
		goto out_close;                                                                    \
	}                                                                                          \
	if (!l->f.name) {                                                                          \
		off += snprintf(l->missing + off, sizeof(l->missing) - off, "%s%s",                \
				l->nmissing ? ", " : "", #name);                                   \
		if (off >= sizeof(l->missing))                                                     \
			off = sizeof(l->missing) - 1;                                              \
		l->nmissing++;                                                                     \
	}
	NVML_FUNCS(RESOLVE)
#undef RESOLVE
	*ret = l;
	return 0;
out_close:
	dlclose(l->dl);
out_enoent:
	free(l);
	*why = whybuf;
	return -ENOENT;
}

void nvml_lib__close(struct nvml_lib *l)
{
	if (!l)
		return;
	if (l->dl)
		dlclose(l->dl);
	free(l);
}
