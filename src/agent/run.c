/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope-agent run`: the long-running mode. Starts every data source of AGENT_MODULES,
 * ticks them every ~100 ms, and every push interval swaps in a fresh batch and hands the
 * finished one to the push thread (push.c), which delivers or spools it. Serves /metrics.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/bpfstats.h"
#include "agent/bpfutil.h"
#include "agent/cupti/capture_poll.h"
#include "agent/cupti/window.h"
#include "agent/gpu/nvml.h"
#include "agent/labels.h"
#include "agent/commands.h"
#include "agent/http_client.h"
#include "agent/push/metrics_http.h"
#include "agent/modules.h"
#include "agent/procs/maps.h"
#include "agent/procs/tracker.h"
#include "agent/push/push.h"
#include "agent/push/spool.h"
#include "agent/selfprof.h"
#include "agent/sym/stacks.h"
#include "agent/unwind/unwind.h"
#include "agent/sym/symbolize.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"

#define TICK_NS			(100 * NSEC_PER_MSEC)
#define EARLY_FLUSH_BYTES	(16u << 20)	/* swap before the interval past this estimate */

struct run_opts {
	const char *server;
	const char *token_file;
	const char *ca_file;
	const char *cert_file, *key_file;	/* --client-cert, --client-key */
	const char *proxy;			/* --proxy; NULL: libcurl's environment */
	const char *spool_dir;
	uint64_t spool_max;
	const char *metrics_listen;
	uint64_t push_interval_ns;
	uint64_t retry_max_ns;
	uint64_t stop_grace_ns;		/* last deliveries at exit */
	uint64_t duration_ns;		/* 0: until a signal */
	bool bpf_stats;			/* --bpf-stats: the kernel accounts BPF run time meanwhile */
	const char *modules;		/* --modules: comma-separated names; NULL: all */
	int compression;
};

struct mod_state {
	const struct agent_module *m;
	bool started;
	uint64_t tick_errors;
	bool tick_warned;
	uint64_t tick_max_ns;		/* longest tick: how long it held the main loop */
	uint64_t start_ns;		/* how long its start took (BPF load and verify, attach) */
	uint64_t up_after_ns;		/* from the agent's start to this module's being up */
	unsigned act;			/* its tick's activity (selfprof.h) */
};

/* Everything /metrics needs; the lock keeps module callbacks off each other's feet. */
struct run_ctx {
	struct agent *a;
	struct pusher *pusher;
	struct mod_state *mods;
	size_t nmods;
	pthread_mutex_t lock;
	uint64_t start_wall_ns;
	uint64_t empty_batches;
	uint64_t batch_errors;
	uint64_t map_records_lost;	/* the symbolizer's lost mmap records, as last seen */
};

static struct agent *signal_agent;

/*
 * The agent's own memory, to tell its parts apart (issue 13's budget): resident and peak from
 * /proc/self/status, and malloc's view (in use, held free, in mmapped chunks) from mallinfo2.
 */
static void mem_metrics(FILE *out)
{
	struct mallinfo2 mi = mallinfo2();
	char line[128];
	uint64_t rss = 0, hwm = 0, anon = 0, file = 0;
	FILE *f = fopen("/proc/self/status", "re");

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long kb;

		if (sscanf(line, "VmRSS: %llu", &kb) == 1)
			rss = kb << 10;
		else if (sscanf(line, "VmHWM: %llu", &kb) == 1)
			hwm = kb << 10;
		else if (sscanf(line, "RssAnon: %llu", &kb) == 1)
			anon = kb << 10;
		else if (sscanf(line, "RssFile: %llu", &kb) == 1)
			file = kb << 10;
	}
	if (f)
		fclose(f);
	prom_family(out, "gpuscope_agent_resident_bytes", "gauge",
		    "The agent's resident memory (kind: all, anon, file), from /proc/self/status.");
	prom_sample1_u64(out, "gpuscope_agent_resident_bytes", "kind", "all", rss);
	prom_sample1_u64(out, "gpuscope_agent_resident_bytes", "kind", "anon", anon);
	prom_sample1_u64(out, "gpuscope_agent_resident_bytes", "kind", "file", file);
	prom_gauge(out, "gpuscope_agent_resident_peak_bytes", "The agent's peak resident memory (VmHWM).",
		   hwm);
	prom_family(out, "gpuscope_agent_malloc_bytes", "gauge",
		    "malloc's memory: in use, held free in its arenas, in chunks of their own mapping.");
	prom_sample1_u64(out, "gpuscope_agent_malloc_bytes", "state", "in_use", mi.uordblks + mi.hblkhd);
	prom_sample1_u64(out, "gpuscope_agent_malloc_bytes", "state", "free", mi.fordblks);
	prom_sample1_u64(out, "gpuscope_agent_malloc_bytes", "state", "mmapped", mi.hblkhd);
}

static void on_signal(int sig)
{
	if (signal_agent)
		signal_agent->stopping = true;
}

/* The names of the linked modules, comma-separated, for the usage text. */
static const char *module_names(void)
{
	static char buf[256];
	const struct agent_module *all[] = AGENT_MODULES;
	size_t off = 0;

	buf[0] = 0;
	for (size_t i = 0; i < ARRAY_SIZE(all); i++)
		if (off < sizeof(buf))
			off += snprintf(buf + off, sizeof(buf) - off, "%s%s", off ? "," : "",
					all[i]->name);
	return buf;
}

/* Whether name is in the comma-separated list (NULL: every name is). */
static bool in_list(const char *list, const char *name)
{
	size_t n = strlen(name);

	if (!list)
		return true;
	for (const char *p = list; *p;) {
		const char *e = strchrnul(p, ',');

		if ((size_t)(e - p) == n && !strncmp(p, name, n))
			return true;
		p = *e ? e + 1 : e;
	}
	return false;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gpuscope-agent run --server URL [OPTIONS]\n"
		"\n"
		"Profiles continuously and pushes a batch to a gpuscope-server every interval;\n"
		"spools to disk while the server is unreachable.\n"
		"\n"
		"  --server URL             gpuscope-server base URL (http://host:7070)\n"
		"  --push-interval DUR      time between pushes (default 10s)\n"
		"  --pid PID                profile only this process (repeatable, up to %d)\n"
		"  --frequency HZ           CPU sampling frequency (default 99)\n"
		"  --all-processes          thread states of every process\n"
		"  --offcpu-walk-share PCT  the share of a thread's time its off-CPU stack walks may\n"
		"                           take, the rest marked not walked (default 0.1%%; 0: all)\n"
		"  --strip-event-rate N     thread-state events a second per thread; a thread over it\n"
		"                           has its states under 20 ms summarized (default 250; 0: all)\n"
		"  --token-file FILE        send 'Authorization: Bearer <contents>' (re-read on each push)\n"
		"  --ca-file FILE           trust this PEM CA for an https:// server (default: system CAs)\n"
		"  --client-cert FILE       present this PEM certificate to the server (mutual TLS)\n"
		"  --client-key FILE        its PEM key (default: in --client-cert's file)\n"
		"  --proxy URL              reach the server through this proxy ('' none; default: the\n"
		"                           https_proxy/http_proxy/no_proxy environment)\n"
		"  --spool-dir DIR          on-disk spool for outages (default: in memory, lost at exit)\n"
		"  --spool-max SIZE         spool bound, oldest dropped past it (default 512MiB)\n"
		"  --compression ALG        zstd (default), gzip or none\n"
		"  --retry-max DUR          longest backoff between retries (default 30s)\n"
		"  --stop-grace DUR         at exit, how long the last batches may take to deliver; what\n"
		"                           is not delivered by then stays in the spool (default 15s)\n"
		"  --metrics-listen ADDR    Prometheus /metrics address (default 127.0.0.1:9400; 'off')\n"
		"  --node NAME              node label (default: hostname)\n"
		"  --nvml-library PATH      NVML library (default libnvidia-ml.so.1)\n"
		"  --no-gpu                 do not poll NVML\n"
		"  --nvml-{samples,memory,gpm,slow,process,fields}-interval DUR\n"
		"                           NVML poll rates (docs/nvml.md; 0 turns one off)\n"
		"  --nvml-backoff N         memory, GPM, clocks up to N intervals apart while no reading\n"
		"                           changes (default 8; 1: every interval)\n"
		"  --unwind-cache-dir DIR   unwind tables kept on disk across processes and restarts\n"
		"                           (default /var/lib/gpuscope/unwind-cache; 'off': none)\n"
		"  --unwind-cache-max SIZE  its bound, least recently used out past it (default 512MiB)\n"
		"  --relabel-config FILE    Prometheus-style relabel rules for process labels\n"
		"                           (docs/kubernetes.md); a malformed file stops the start\n"
		"  --duration DUR           stop after this long (default: until SIGINT/SIGTERM)\n"
		"  --modules LIST           run only these data sources (comma-separated; default all:\n"
		"                           %s)\n"
		"  --bpf-stats              the kernel accounts the run time of BPF programs while the\n"
		"                           agent runs (its /metrics: gpuscope_agent_bpf_run_seconds_total)\n"
		"  -v, --verbose            debug logging\n",
		AGENT_MAX_PIDS, module_names());
	fputs(trace_usage, f);
	fputs("      --cuda-launch-probes       uprobes on the driver's cuLaunch* calls at all times\n"
	      "                                 (default: launches are seen inside trace windows)\n",
	      f);
}

static void fill_metrics(void *arg, FILE *out)
{
	struct run_ctx *c = arg;
	struct prom_label info[] = { { "node", c->a->opts.node }, { "version", GPUSCOPE_VERSION } };
	unsigned act = selfprof_enter(SELF_METRICS);

	prom_family(out, "gpuscope_agent_info", "gauge", "The agent's node name and version.");
	prom_sample(out, "gpuscope_agent_info", info, 2, 1);
	mem_metrics(out);
	prom_gauge(out, "gpuscope_agent_start_time_seconds", "Unix time the agent started.",
		   c->start_wall_ns / 1e9);
	http_client_metrics(out);	/* the server's link, and the Kubernetes API's */
	pthread_mutex_lock(&c->lock);
	prom_family(out, "gpuscope_agent_module_up", "gauge",
		    "1 if the data source runs, 0 if unavailable.");
	for (size_t i = 0; i < c->nmods; i++)
		prom_sample1(out, "gpuscope_agent_module_up", "module", c->mods[i].m->name,
			     c->mods[i].started);
	prom_family(out, "gpuscope_agent_module_start_seconds", "gauge",
		    "How long each module's start took (loading and verifying its BPF programs, "
		    "attaching), in the order modules start.");
	for (size_t i = 0; i < c->nmods; i++)
		prom_sample1(out, "gpuscope_agent_module_start_seconds", "module", c->mods[i].m->name,
			     c->mods[i].start_ns / 1e9);
	prom_family(out, "gpuscope_agent_module_up_after_seconds", "gauge",
		    "Seconds from the agent's start to each module's being up.");
	for (size_t i = 0; i < c->nmods; i++)
		if (c->mods[i].started)
			prom_sample1(out, "gpuscope_agent_module_up_after_seconds", "module",
				     c->mods[i].m->name, c->mods[i].up_after_ns / 1e9);
	prom_family(out, "gpuscope_agent_module_tick_errors_total", "counter",
		    "Failed module ticks.");
	for (size_t i = 0; i < c->nmods; i++)
		prom_sample1_u64(out, "gpuscope_agent_module_tick_errors_total", "module",
				 c->mods[i].m->name, c->mods[i].tick_errors);
	prom_family(out, "gpuscope_agent_module_tick_max_seconds", "gauge",
		    "Longest module tick since start: how long it held the main loop, which drains "
		    "every module's ring buffer in turn.");
	for (size_t i = 0; i < c->nmods; i++)
		prom_sample1(out, "gpuscope_agent_module_tick_max_seconds", "module",
			     c->mods[i].m->name, c->mods[i].tick_max_ns / 1e9);
	prom_counter(out, "gpuscope_agent_batch_errors_total",
		     "Batches that could not be created (ENOMEM): the current one kept growing.",
		     c->batch_errors);
	if (c->a->sym)
		symbolizer__metrics(c->a->sym, out);
	if (c->a->unwind)
		unwinder__metrics(c->a->unwind, out);
	if (c->a->stacks) {
		struct stack_cache_stats st;

		stack_cache__stats(c->a->stacks, &st);
		prom_counter(out, "gpuscope_agent_stack_cache_lookups_total", "Raw stacks looked up.",
			     st.lookups);
		prom_counter(out, "gpuscope_agent_stack_cache_misses_total", "Raw stacks symbolized.",
			     st.misses);
		prom_counter(out, "gpuscope_agent_stack_cache_clears_total",
			     "Times the full cache was cleared (65536 stacks or 32 MiB).", st.clears);
		prom_gauge(out, "gpuscope_agent_stack_cache_bytes",
			   "Memory of the symbolized stacks held (one location per frame).",
			   (double)st.bytes);
		prom_counter(out, "gpuscope_agent_stack_cache_retries_total",
			     "Stacks with unknown frames symbolized again.", st.retries);
		prom_counter(out, "gpuscope_agent_unknown_frames_total", "Frames kept as [unknown].",
			     st.unknown_frames);
		prom_family(out, "gpuscope_agent_stacks_truncated_total", "counter",
			    "Distinct stacks ending in [truncated] (cut_unmapped: cut in user space at "
			    "an unmapped address).");
		prom_sample_u64(out, "gpuscope_agent_stacks_truncated_total", NULL, 0, st.truncated);
		prom_sample1_u64(out, "gpuscope_agent_stacks_truncated_total", "where", "cut_unmapped",
				 st.cut_unmapped);
		prom_counter(out, "gpuscope_agent_stack_bpf_frames_dropped_total",
			     "The agent's own BPF frames removed from the top of kernel stacks.",
			     st.bpf_frames);
	}
	bpf_counters__metrics(out);
	bpf_prog_stats__metrics(out);
	selfprof__metrics(out);
	for (size_t i = 0; i < c->nmods; i++)
		if (c->mods[i].started && c->mods[i].m->metrics)
			c->mods[i].m->metrics(c->a, out);
	pthread_mutex_unlock(&c->lock);
	pusher__metrics(c->pusher, out);
	selfprof_leave(act);
}

/* Swaps in a fresh batch and hands the finished one to the push thread. Caller holds lock. */
static void flush_batch(struct run_ctx *c, size_t empty_size)
{
	struct agent *a = c->a;
	struct batch *fresh, *old = a->batch;

	if (!batch__nsamples(old) && batch__size_estimate(old) <= empty_size) {
		c->empty_batches++;
		return;
	}
	fresh = batch__new(a->opts.node);
	if (!fresh) {
		c->batch_errors++;
		log_warn("run: new batch: %s; keeping the current one", strerror(errno));
		return;
	}
	batch__set_period(fresh, NSEC_PER_SEC / (a->opts.frequency_hz ? a->opts.frequency_hz : 99));
	a->batch = fresh;
	pusher__submit(c->pusher, old);
}

static int tick_modules(struct run_ctx *c, size_t empty_size)
{
	unsigned act = selfprof_enter(SELF_MMAP_RECORDS);

	/* the mappings first: every module's stacks below may need them (mmapwatch.h) */
	symbolizer__poll(c->a->sym);
	if (c->a->unwind) {	/* records lost: any process may have new mappings */
		uint64_t records, lost;

		symbolizer__mmap_stats(c->a->sym, &records, &lost);
		if (lost != c->map_records_lost)
			unwinder__map_event(c->a->unwind, 0);
		c->map_records_lost = lost;
	}
	selfprof_leave(act);
	for (size_t i = 0; i < c->nmods; i++) {
		struct mod_state *ms = &c->mods[i];
		uint64_t t0;
		int err;

		if (!ms->started || !ms->m->tick)
			continue;
		t0 = mono_ns();
		act = selfprof_enter(ms->act);
		err = ms->m->tick(c->a);
		if (err == -ENOSPC) {
			/* The batch hit a limit: push it and let the module go on into a fresh one. */
			flush_batch(c, empty_size);
			err = ms->m->tick(c->a);
		}
		if (err < 0) {
			ms->tick_errors++;
			if (!ms->tick_warned)
				log_warn("module %s: tick: %s (counted; further errors at debug level)",
					 ms->m->name, strerror(-err));
			else
				log_debug("module %s: tick: %s", ms->m->name, strerror(-err));
			ms->tick_warned = true;
		}
		selfprof_leave(act);
		t0 = mono_ns() - t0;
		if (t0 > ms->tick_max_ns)
			ms->tick_max_ns = t0;
	}
	return 0;
}

/* The symbolizer read a new mapping from the kernel's records: libcuda's make a GPU process,
 * and the unwinder reads the process's maps again when a walk meets an unknown address. */
static void on_map(void *ctx, pid_t pid, const char *path)
{
	struct agent *a = ctx;

	if (maps_lib_named(path, "libcuda.so"))
		procs__hint_open(pid);
	unwinder__map_event(a->unwind, pid);
}

/* The symbolizer read an exec from the kernel's records: the label builder follows it. */
static void on_exec(void *ctx, pid_t pid, const char *comm)
{
	agent__pid_exec(ctx, pid, comm);
}

static void sleep_until(uint64_t t_ns)
{
	struct timespec ts = { .tv_sec = t_ns / NSEC_PER_SEC, .tv_nsec = t_ns % NSEC_PER_SEC };

	/* EINTR (a signal) ends the sleep early, which is what we want. */
	clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static int parse_args(int argc, char **argv, struct agent_opts *ao, struct run_opts *o)
{
	enum {
		OPT_SERVER = 256, OPT_INTERVAL, OPT_PID, OPT_FREQ, OPT_ALL, OPT_TOKEN, OPT_CA_FILE, OPT_SPOOL_DIR,
		OPT_SPOOL_MAX, OPT_METRICS, OPT_NODE, OPT_NVML, OPT_NO_GPU, OPT_COMPRESSION,
		OPT_RETRY_MAX, OPT_STOP_GRACE, OPT_DURATION, OPT_RELABEL, OPT_NVML_OPT, OPT_MODULES, OPT_TRACE_OPT, OPT_LAUNCH_PROBES, OPT_UNWIND_OPT,
		OPT_OFFCPU_WALK_SHARE, OPT_STRIP_EVENT_RATE, OPT_BPF_STATS, OPT_CLIENT_CERT, OPT_CLIENT_KEY, OPT_PROXY,
	};
	static struct trace_cfg trace;
	static const struct option lopts[] = {
		{ "server", required_argument, NULL, OPT_SERVER },
		{ "push-interval", required_argument, NULL, OPT_INTERVAL },
		{ "pid", required_argument, NULL, OPT_PID },
		{ "frequency", required_argument, NULL, OPT_FREQ },
		{ "all-processes", no_argument, NULL, OPT_ALL },
		{ "offcpu-walk-share", required_argument, NULL, OPT_OFFCPU_WALK_SHARE },
		{ "strip-event-rate", required_argument, NULL, OPT_STRIP_EVENT_RATE },
		{ "token-file", required_argument, NULL, OPT_TOKEN },
		{ "ca-file", required_argument, NULL, OPT_CA_FILE },
		{ "client-cert", required_argument, NULL, OPT_CLIENT_CERT },
		{ "client-key", required_argument, NULL, OPT_CLIENT_KEY },
		{ "proxy", required_argument, NULL, OPT_PROXY },
		{ "spool-dir", required_argument, NULL, OPT_SPOOL_DIR },
		{ "spool-max", required_argument, NULL, OPT_SPOOL_MAX },
		{ "metrics-listen", required_argument, NULL, OPT_METRICS },
		{ "node", required_argument, NULL, OPT_NODE },
		{ "nvml-library", required_argument, NULL, OPT_NVML },
		{ "no-gpu", no_argument, NULL, OPT_NO_GPU },
		{ "nvml-samples-interval", required_argument, NULL, OPT_NVML_OPT },
		{ "nvml-memory-interval", required_argument, NULL, OPT_NVML_OPT },
		{ "nvml-gpm-interval", required_argument, NULL, OPT_NVML_OPT },
		{ "nvml-slow-interval", required_argument, NULL, OPT_NVML_OPT },
		{ "nvml-process-interval", required_argument, NULL, OPT_NVML_OPT },
		{ "nvml-fields-interval", required_argument, NULL, OPT_NVML_OPT },
		{ "nvml-backoff", required_argument, NULL, OPT_NVML_OPT },
		{ "relabel-config", required_argument, NULL, OPT_RELABEL },
		{ "compression", required_argument, NULL, OPT_COMPRESSION },
		{ "retry-max", required_argument, NULL, OPT_RETRY_MAX },
		{ "stop-grace", required_argument, NULL, OPT_STOP_GRACE },
		{ "duration", required_argument, NULL, OPT_DURATION },
		{ "modules", required_argument, NULL, OPT_MODULES },
		{ "gpu-trace-budget", required_argument, NULL, OPT_TRACE_OPT },
		{ "gpu-trace-period", required_argument, NULL, OPT_TRACE_OPT },
		{ "cuda-launch-probes", no_argument, NULL, OPT_LAUNCH_PROBES },
		{ "unwind-cache-dir", required_argument, NULL, OPT_UNWIND_OPT },
		{ "unwind-cache-max", required_argument, NULL, OPT_UNWIND_OPT },
		{ "gpu-trace-window", required_argument, NULL, OPT_TRACE_OPT },
		{ "gpu-trace-kernel-cost", required_argument, NULL, OPT_TRACE_OPT },
		{ "gpu-trace-idle-trigger", required_argument, NULL, OPT_TRACE_OPT },
		{ "gpu-trace-sync-trigger", required_argument, NULL, OPT_TRACE_OPT },
		{ "bpf-stats", no_argument, NULL, OPT_BPF_STATS },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	char *end;
	long v;
	int opt, li = 0;

	optind = 1;
	trace_cfg_defaults(&trace);
	ao->trace = &trace;
	while ((opt = getopt_long(argc, argv, "vh", lopts, &li)) != -1) {
		switch (opt) {
		case OPT_TRACE_OPT:	/* cupti/window.c parses the trace-window options */
			if (trace_parse_opt(&trace, lopts[li].name, optarg) <= 0)
				return -EINVAL;
			break;
		case OPT_NVML_OPT:	/* gpu/nvml.c parses its own rates */
			if (nvml_parse_opt(ao, lopts[li].name, optarg) <= 0)
				return -EINVAL;
			break;
		case OPT_UNWIND_OPT:	/* unwind/ parses its own cache options */
			if (unwind_parse_opt(ao, lopts[li].name, optarg) <= 0)
				return -EINVAL;
			break;
		case OPT_LAUNCH_PROBES:
			ao->cuda_launch_probes = true;
			break;
		case OPT_SERVER:
			o->server = optarg;
			break;
		case OPT_INTERVAL:
			if (parse_duration_ns(optarg, &o->push_interval_ns) ||
			    o->push_interval_ns < 100 * NSEC_PER_MSEC) {
				log_error("--push-interval: '%s' is not a duration >= 100ms", optarg);
				return -EINVAL;
			}
			break;
		case OPT_PID:
			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || *end || v <= 0 || v > 0x3fffffff) {
				log_error("--pid: '%s' is not a process id", optarg);
				return -EINVAL;
			}
			if (ao->npids == AGENT_MAX_PIDS) {
				log_error("--pid: at most %d processes", AGENT_MAX_PIDS);
				return -EINVAL;
			}
			ao->pids[ao->npids++] = (pid_t)v;
			break;
		case OPT_FREQ:
			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || *end || v < 1 || v > 100000) {
				log_error("--frequency: '%s' is not a rate in 1..100000 Hz", optarg);
				return -EINVAL;
			}
			ao->frequency_hz = (unsigned)v;
			break;
		case OPT_ALL:
			ao->all_processes = true;
			break;
		case OPT_OFFCPU_WALK_SHARE:
			if (parse_share(optarg, &ao->offcpu_walk_share)) {
				log_error("--offcpu-walk-share: '%s' is not a share in [0, 100%%] "
					  "(0: every switch-out walked)", optarg);
				return -EINVAL;
			}
			break;
		case OPT_STRIP_EVENT_RATE: {
			char *end;

			errno = 0;
			ao->strip_event_rate = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || ao->strip_event_rate < 0 ||
			    ao->strip_event_rate > 1000000) {
				log_error("--strip-event-rate: '%s' is not a number of events a "
					  "second in [0, 1000000] (0: no limit)", optarg);
				return -EINVAL;
			}
			break;
		}
		case OPT_TOKEN:
			o->token_file = optarg;
			break;
		case OPT_CA_FILE:
			o->ca_file = optarg;
			break;
		case OPT_CLIENT_CERT:
			o->cert_file = optarg;
			break;
		case OPT_CLIENT_KEY:
			o->key_file = optarg;
			break;
		case OPT_PROXY:
			o->proxy = optarg;
			break;
		case OPT_SPOOL_DIR:
			o->spool_dir = optarg;
			break;
		case OPT_SPOOL_MAX:
			if (parse_size_bytes(optarg, &o->spool_max) || o->spool_max < 1024) {
				log_error("--spool-max: '%s' is not a size >= 1KiB (512MiB, 64KiB)",
					  optarg);
				return -EINVAL;
			}
			break;
		case OPT_METRICS:
			o->metrics_listen = optarg;
			break;
		case OPT_NODE:
			if (!*optarg) {
				log_error("--node: empty name");
				return -EINVAL;
			}
			ao->node = optarg;
			break;
		case OPT_NVML:
			ao->nvml_library = optarg;
			break;
		case OPT_NO_GPU:
			ao->no_gpu = true;
			break;
		case OPT_RELABEL:
			ao->relabel_config = optarg;
			break;
		case OPT_COMPRESSION:
			o->compression = compression_parse(optarg);
			if (o->compression < 0) {
				log_error("--compression: '%s': want zstd, gzip or none", optarg);
				return -EINVAL;
			}
			break;
		case OPT_RETRY_MAX:
			if (parse_duration_ns(optarg, &o->retry_max_ns) ||
			    o->retry_max_ns < 100 * NSEC_PER_MSEC) {
				log_error("--retry-max: '%s' is not a duration >= 100ms", optarg);
				return -EINVAL;
			}
			break;
		case OPT_STOP_GRACE:
			if (parse_duration_ns(optarg, &o->stop_grace_ns)) {
				log_error("--stop-grace: '%s' is not a duration", optarg);
				return -EINVAL;
			}
			break;
		case OPT_DURATION:
			if (parse_duration_ns(optarg, &o->duration_ns) || !o->duration_ns) {
				log_error("--duration: '%s' is not a positive duration", optarg);
				return -EINVAL;
			}
			break;
		case OPT_MODULES:
			o->modules = optarg;
			break;
		case OPT_BPF_STATS:
			o->bpf_stats = true;
			break;
		case 'v':
			gpuscope_log_level = LOG_DEBUG;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		log_error("run: unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	if (!o->server) {
		log_error("run: --server URL is required");
		usage(stderr);
		return -EINVAL;
	}
	if (strncmp(o->server, "http://", 7) && strncmp(o->server, "https://", 8)) {
		log_error("--server: '%s' is not an http:// or https:// URL", o->server);
		return -EINVAL;
	}
	if (o->modules) {
		const struct agent_module *all[] = AGENT_MODULES;

		for (const char *p = o->modules; *p;) {
			const char *e = strchrnul(p, ',');
			bool known = false;

			for (size_t i = 0; i < ARRAY_SIZE(all); i++)
				known |= strlen(all[i]->name) == (size_t)(e - p) &&
					 !strncmp(all[i]->name, p, e - p);
			if (!known) {
				log_error("--modules: unknown module '%.*s' (have: %s)", (int)(e - p), p,
					  module_names());
				return -EINVAL;
			}
			p = *e ? e + 1 : e;
		}
	}
	if (o->token_file && access(o->token_file, R_OK)) {
		log_error("--token-file: '%s': %s", o->token_file, strerror(errno));
		return -EINVAL;
	}
	if (o->ca_file && access(o->ca_file, R_OK)) {
		log_error("--ca-file: '%s': %s", o->ca_file, strerror(errno));
		return -EINVAL;
	}
	if (o->cert_file && access(o->cert_file, R_OK)) {
		log_error("--client-cert: '%s': %s", o->cert_file, strerror(errno));
		return -EINVAL;
	}
	if (o->key_file && (!o->cert_file || access(o->key_file, R_OK))) {
		log_error("--client-key: '%s': %s", o->key_file,
			  o->cert_file ? strerror(errno) : "no --client-cert");
		return -EINVAL;
	}
	return 0;
}

/* Is name listed in GPUSCOPE_AGENT_MODULES_OFF ("sched,cuda_probe")? For tests and triage. */
static bool module_off(const char *name)
{
	const char *off = getenv("GPUSCOPE_AGENT_MODULES_OFF"), *p;
	size_t n = strlen(name);

	for (p = off; p && (p = strstr(p, name)); p += n)
		if ((p == off || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return true;
	return false;
}

/*
 * The server's one link, for the push and the capture poll alike: its root URL (the query and
 * fragment, trailing '/' and an /api/v1/ingest suffix dropped), TLS, token and proxy.
 */
static struct http_link *server_link(const struct run_opts *o)
{
	char root[1024];
	size_t n;

	snprintf(root, sizeof(root), "%s", o->server);
	root[strcspn(root, "?#")] = 0;
	n = strlen(root);
	while (n && root[n - 1] == '/')
		root[--n] = 0;
	if (n >= 14 && !strcmp(root + n - 14, "/api/v1/ingest"))
		root[n - 14] = 0;
	return http_link__new(&(struct http_link_opts){ .name = "server", .base_url = root,
							.ca_file = o->ca_file,
							.cert_file = o->cert_file,
							.key_file = o->key_file,
							.token_file = o->token_file,
							.proxy = o->proxy });
}

int cmd_run(int argc, char **argv)
{
	static char hostname[256];
	struct agent_opts ao = { .frequency_hz = 99, .offcpu_walk_share = -1, .strip_event_rate = -1 };
	struct run_opts o = {
		.spool_max = 512ull << 20,
		.metrics_listen = "127.0.0.1:9400",
		.push_interval_ns = 10 * NSEC_PER_SEC,
		.retry_max_ns = 30 * NSEC_PER_SEC,
		.stop_grace_ns = 15 * NSEC_PER_SEC,
		.compression = COMPRESS_ZSTD,
	};
	const struct agent_module *all[] = AGENT_MODULES;
	struct mod_state mods[ARRAY_SIZE(all)];
	struct agent a = { 0 };
	struct run_ctx c = { .a = &a, .mods = mods };
	struct spool *spool = NULL;
	struct metrics_http *mh = NULL;
	bool mmap_records = false;	/* the symbolizer watches the kernel's mmap records */
	struct sigaction sa = { .sa_handler = on_signal };
	uint64_t t_run = mono_ns(), t_mod;
	struct push_counts pc;
	uint64_t next_push, end_ns = 0, now;
	size_t empty_size;
	int err, rc = 1;

	err = parse_args(argc, argv, &ao, &o);
	if (err)
		return err > 0 ? 0 : 2;
	selfprof_thread(selfprof_activity("start"));	/* module starts: BPF loads, verifier */
	if (o.bpf_stats && (err = bpf_stats__hold()))
		log_warn("--bpf-stats: %s; BPF run time is not accounted", strerror(-err));
	if (!ao.node) {
		if (gethostname(hostname, sizeof(hostname) - 1))
			snprintf(hostname, sizeof(hostname), "localhost");
		ao.node = hostname;
	}
	a.opts = ao;
	a.mono_to_wall_ns = mono_to_wall_offset_ns();
	a.start_ns = t_run;
	pthread_mutex_init(&c.lock, NULL);
	c.start_wall_ns = wall_ns();
	a.server = server_link(&o);
	if (!a.server) {
		log_error("run: --server '%s': %s", o.server, strerror(errno));
		goto out;
	}
	a.batch = batch__new(ao.node);
	if (!a.batch) {
		log_error("run: new batch: %s", strerror(errno));
		goto out_link;
	}
	/* the server's pprof gives CPU samples this period, as `record` does */
	batch__set_period(a.batch, NSEC_PER_SEC / ao.frequency_hz);
	empty_size = batch__size_estimate(a.batch);
	/* the maps modules share, before any of them loads (agent.h, struct agent_shared) */
	err = bpf_shared_maps__create(&a.shared);
	if (err && err != -EPERM)
		log_warn("run: shared BPF maps: %s; each module keeps its own", strerror(-err));
	a.sym = symbolizer__new();
	if (!a.sym) {
		log_error("run: symbolizer: %s", strerror(errno));
		goto out_batch;
	}
	{
		const char *why = NULL;

		/* processes that end before their maps are read (mmapwatch.h) */
		if (symbolizer__watch_mmaps(a.sym, &why)) {
			if (errno != EPERM && errno != EACCES)
				log_warn("run: symbolizer: %s (%s): the maps of processes gone "
					 "before a read are unknown", why, strerror(errno));
		} else {
			/* libcuda mapped anywhere: the GPU process tracker looks at once */
			symbolizer__on_map(a.sym, on_map, &a);
			procs__map_feed(true);
			mmap_records = true;
		}
	}
	/* execs the kernel's records tell reach the label builder even without the sched module */
	symbolizer__on_exec(a.sym, on_exec, &a);
	/* One stack cache for every module that takes stacks, whichever of them run. */
	a.stacks = stack_cache__new(a.sym, 0);
	if (!a.stacks) {
		log_error("run: stack cache: %s", strerror(errno));
		goto out_batch;
	}
	spool = spool__open(o.spool_dir, o.spool_max);
	if (!spool) {
		log_error("run: spool '%s': %s", o.spool_dir ? o.spool_dir : "(memory)",
			  strerror(errno));
		goto out_batch;
	}
	c.pusher = pusher__new(&(struct pusher_opts){ .link = a.server,
						     .compression = o.compression,
						     .retry_max_ns = o.retry_max_ns },
			       spool);
	if (!c.pusher) {
		log_error("run: push thread: %s", strerror(errno));
		goto out_spool;
	}

	/* Modules first, so that /metrics never shows a half-started agent... */
	signal_agent = &a;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < ARRAY_SIZE(all); i++) {
		struct mod_state *ms;

		if (!in_list(o.modules, all[i]->name))
			continue;
		ms = &mods[c.nmods++];
		*ms = (struct mod_state){ .m = all[i] };
		{
			char act[40];

			snprintf(act, sizeof(act), "tick_%s", all[i]->name);
			ms->act = selfprof_activity(act);
		}
		if (module_off(ms->m->name)) {
			log_info("module %s: off (GPUSCOPE_AGENT_MODULES_OFF)", ms->m->name);
			continue;
		}
		if (!ms->m->start) {
			ms->started = true;
			continue;
		}
		t_mod = mono_ns();
		err = ms->m->start(&a);
		ms->start_ns = mono_ns() - t_mod;
		ms->up_after_ns = mono_ns() - t_run;
		if (err == -ENOEXEC)	/* the kernel refused its programs: said, module_up 0 */
			continue;
		if (err == -ENOTSUP || err == -EOPNOTSUPP || err == -ENOENT) {
			log_info("module %s: not available here (%s), running without it",
				 ms->m->name, strerror(-err));
			continue;
		}
		if (err) {
			log_error("module %s: start: %s", ms->m->name, strerror(-err));
			rc = (err == -EPERM || err == -EACCES) ? 2 : 1;
			goto out_stop_modules;
		}
		ms->started = true;
		log_debug("module %s: started", ms->m->name);
	}
	/* the unwinder (made by the modules that take stacks) follows the kernel's mapping
	 * records (on_map) instead of re-reading a process's maps at each unknown address */
	if (mmap_records && a.unwind)
		unwinder__map_events_on(a.unwind);
	/* ...then the metrics endpoint. */
	if (strcmp(o.metrics_listen, "off")) {
		mh = metrics_http__start(o.metrics_listen, fill_metrics, &c);
		if (!mh) {
			log_error("--metrics-listen '%s': %s", o.metrics_listen, strerror(errno));
			rc = errno == EINVAL ? 2 : 1;
			goto out_stop_modules;
		}
	}
	log_info("run: node '%s', pushing to %s every %.3gs, spool %s", ao.node, o.server,
		 o.push_interval_ns / 1e9, o.spool_dir ? o.spool_dir : "in memory");
	if (mh) {
		/* The exact URL, also for scripts that asked for port 0. */
		const char *colon = strrchr(o.metrics_listen, ':');

		log_info("metrics: http://%.*s:%u/metrics", (int)(colon - o.metrics_listen),
			 o.metrics_listen, metrics_http__port(mh));
	}

	if (capture_poll__start(&a))
		log_warn("run: capture requests from the server are off (thread not started)");
	selfprof_thread(SELF_MAIN_LOOP);
	now = mono_ns();
	next_push = now + o.push_interval_ns;
	if (o.duration_ns)
		end_ns = now + o.duration_ns;
	while (!a.stopping) {
		uint64_t next_tick = mono_ns() + TICK_NS;

		pthread_mutex_lock(&c.lock);
		tick_modules(&c, empty_size);
		/* a capture window that just ended: push its records now, not at the next interval */
		bool captured = capture_poll__tick();
		now = mono_ns();
		if (now >= next_push || captured ||
		    batch__size_estimate(a.batch) > EARLY_FLUSH_BYTES) {
			flush_batch(&c, empty_size);
			symbolizer__trim(a.sym);	/* names read since: out of RSS */
			while (next_push <= now)
				next_push += o.push_interval_ns;
		}
		pthread_mutex_unlock(&c.lock);
		if (end_ns && now >= end_ns)
			break;
		if (!a.stopping)
			sleep_until(next_tick < next_push ? next_tick : next_push);
	}
	log_info("run: stopping: flushing the last batch");
	rc = 0;

out_stop_modules:
	capture_poll__stop();
	pthread_mutex_lock(&c.lock);
	if (rc == 0) {
		tick_modules(&c, empty_size);	/* drain what the modules still hold */
		/*
		 * ...and hand it to the pusher before the modules stop: detaching a hundred uprobes
		 * takes seconds on a loaded machine, and an agent killed at its grace period's end
		 * (Kubernetes: 30 s) would lose the last interval's data.
		 */
		flush_batch(&c, empty_size);
	}
	for (size_t i = c.nmods; i-- > 0;) {
		if (mods[i].started && mods[i].m->stop)
			mods[i].m->stop(&a);
		mods[i].started = false;
	}
	if (rc == 0)
		flush_batch(&c, empty_size);
	pthread_mutex_unlock(&c.lock);
	pusher__stop(c.pusher, mono_ns() + o.stop_grace_ns);
	metrics_http__stop(mh);
	pusher__counts(c.pusher, &pc);
	/* This run's samples and an earlier run's spooled ones apart, so that "X of Y" adds up. */
	log_info("run: done: %" PRIu64 " of %" PRIu64 " samples delivered in %" PRIu64
		 " batches (%" PRIu64 " split after a 413), %" PRIu64 " rejected by the server, %"
		 PRIu64 " dropped, %" PRIu64 " batches left in the spool; %" PRIu64
		 " more samples from an earlier run's spool delivered",
		 pc.samples_pushed - pc.samples_pushed_earlier, pc.samples_submitted,
		 pc.batches_pushed, pc.batches_split, pc.samples_rejected, pc.samples_dropped,
		 pc.spool_files, pc.samples_pushed_earlier);
	signal_agent = NULL;
	if (!o.spool_dir && spool__count(spool))
		log_warn("run: %zu undelivered batches in the memory spool are lost "
			 "(use --spool-dir to keep them)", spool__count(spool));
	pusher__free(c.pusher);
out_spool:
	spool__free(spool);
out_batch:
	stack_cache__free(a.stacks);
	unwinder__free(a.unwind);	/* created by the first module that takes stacks */
	symbolizer__free(a.sym);
	batch__free(a.batch);
	bpf_shared_maps__free(&a.shared);
out_link:
	http_link__free(a.server);	/* after the push and capture threads that used it */
out:
	bpf_stats__release();
	pthread_mutex_destroy(&c.lock);
	return rc;
}
