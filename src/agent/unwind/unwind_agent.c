/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unwinder's face to the agent: its options (--unwind-cache-dir, --unwind-cache-max), its
 * /metrics lines, and the one unwinder every stack-taking module shares (agent__unwinder()).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "agent/agent.h"
#include "agent/unwind/cache.h"
#include "agent/unwind/frames.h"
#include "agent/unwind/python.h"
#include "agent/unwind/unwind.h"
#include "common/abi.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"

int unwind_parse_opt(struct agent_opts *o, const char *name, const char *val)
{
	if (!strcmp(name, "unwind-cache-dir")) {
		if (!val || !*val) {
			log_error("--unwind-cache-dir: empty path ('off' turns the cache off)");
			return -EINVAL;
		}
		o->unwind_cache_dir = val;
		return 1;
	}
	if (!strcmp(name, "unwind-cache-max")) {
		if (!val || parse_size_bytes(val, &o->unwind_cache_max) ||
		    o->unwind_cache_max < (1u << 20)) {
			log_error("--unwind-cache-max: '%s' is not a size >= 1MiB (512MiB, 2GiB)",
				  val ? val : "");
			return -EINVAL;
		}
		return 1;
	}
	return 0;
}

static void cache_metrics(const struct unwinder_stats *s, FILE *out)
{
	const char *n = "gpuscope_agent_unwind_cache_total";

	if (!s->cache_on)
		return;
	prom_family(out, n, "counter",
		    "On-disk unwind-table cache lookups: hit (loaded, no build), miss (built), "
		    "corrupt (an entry failed its checks: removed and built anew); entries written, "
		    "writes failed, entries evicted past the bound.");
	prom_sample1_u64(out, n, "result", "hit", s->cache_hits);
	prom_sample1_u64(out, n, "result", "miss", s->cache_misses);
	prom_sample1_u64(out, n, "result", "corrupt", s->cache_corrupt);
	prom_sample1_u64(out, n, "result", "stored", s->cache_stores);
	prom_sample1_u64(out, n, "result", "store_error", s->cache_store_errors);
	prom_sample1_u64(out, n, "result", "evicted", s->cache_evicted);
	prom_gauge(out, "gpuscope_agent_unwind_cache_bytes",
		   "Bytes of the on-disk unwind-table cache (as this agent last counted).",
		   (double)s->cache_bytes);
	prom_gauge(out, "gpuscope_agent_unwind_cache_max_bytes",
		   "Bound of the on-disk unwind-table cache (--unwind-cache-max).",
		   (double)s->cache_max_bytes);
	prom_family(out, "gpuscope_agent_unwind_cache_load_seconds_total", "counter",
		    "Time spent reading and checking unwind tables from the cache.");
	prom_sample(out, "gpuscope_agent_unwind_cache_load_seconds_total", NULL, 0,
		    s->cache_load_ns / 1e9);
}

void unwinder__metrics(struct unwinder *u, FILE *out)
{
	static const char *reasons[GPUSCOPE_TRUNC_MAX] = {
		[GPUSCOPE_TRUNC_DEPTH] = "depth",	  [GPUSCOPE_TRUNC_UNMAPPED] = "unmapped",
		[GPUSCOPE_TRUNC_READ] = "read_fault",	  [GPUSCOPE_TRUNC_NO_PROC] = "no_proc",
		[GPUSCOPE_TRUNC_BAD_FRAME] = "bad_frame", [GPUSCOPE_TRUNC_UNSUPPORTED] = "unsupported",
		[GPUSCOPE_TRUNC_PYTHON] = "python",
	};
	struct unwinder_stats s;
	const char *n;

	unwinder__stats(u, &s);
	prom_gauge(out, "gpuscope_agent_unwind_tables",
		   "Unwind tables loaded in BPF maps (LRU by build-id).", (double)s.tables);
	prom_gauge(out, "gpuscope_agent_unwind_table_bytes", "Bytes of unwind tables in BPF maps.",
		   (double)s.table_bytes);
	prom_gauge(out, "gpuscope_agent_unwind_budget_bytes",
		   "Budget for unwind tables; least recently used binaries are evicted beyond it.",
		   (double)s.budget_bytes);
	n = "gpuscope_agent_unwind_binaries_total";
	prom_family(out, n, "counter", "Binaries by unwind-table outcome (cached: read from the "
				       "on-disk cache, not built; no_cfi and over_budget unwind "
				       "with frame pointers).");
	prom_sample1_u64(out, n, "result", "built", s.built);
	prom_sample1_u64(out, n, "result", "cached", s.cached);
	prom_sample1_u64(out, n, "result", "no_cfi", s.no_cfi);
	prom_sample1_u64(out, n, "result", "over_budget", s.over_budget);
	prom_sample1_u64(out, n, "result", "evicted", s.evicted);
	prom_sample1_u64(out, n, "result", "error", s.build_errors);
	prom_family(out, "gpuscope_agent_unwind_build_seconds_total", "counter",
		    "Time spent building unwind tables.");
	prom_sample(out, "gpuscope_agent_unwind_build_seconds_total", NULL, 0, s.build_ns / 1e9);
	prom_gauge(out, "gpuscope_agent_unwind_build_queue",
		   "Binaries waiting for their unwind table to be built (frame pointers there "
		   "meanwhile).", (double)s.queued);
	prom_gauge(out, "gpuscope_agent_unwind_procs",
		   "Processes whose mappings the BPF walker knows.", (double)s.procs);
	n = "gpuscope_agent_unwind_maps_reads_total";
	prom_family(out, n, "counter", "Walker requests for a process's mappings: /proc/PID/maps "
				       "read (read), or not, no mapping record having come for it "
				       "since the last read (skipped: the address was a stray word).");
	prom_sample1_u64(out, n, "result", "read", s.refreshes);
	prom_sample1_u64(out, n, "result", "skipped", s.refreshes_skipped);
	n = "gpuscope_agent_unwind_walks_total";
	prom_family(out, n, "counter", "User-stack walks in BPF: all, of processes not known yet "
				       "(frame pointers), of those fork children walked with their "
				       "parent's mappings, without a free scratch slot (not taken).");
	prom_sample1_u64(out, n, "result", "all", s.walks);
	prom_sample1_u64(out, n, "result", "no_proc", s.no_proc);
	prom_sample1_u64(out, n, "result", "parent_maps", s.parent_maps);
	prom_sample1_u64(out, n, "result", "no_scratch", s.nested);
	n = "gpuscope_agent_unwind_frames_total";
	prom_family(out, n, "counter", "Native frames walked, by method.");
	prom_sample1_u64(out, n, "method", "table", s.table_frames);
	prom_sample1_u64(out, n, "method", "frame_pointer", s.fp_frames);
	prom_sample1_u64(out, n, "method", "table_evicted", s.no_table);
	n = "gpuscope_agent_unwind_kept_stacks_lost_total";
	prom_family(out, n, "counter", "Stacks for later (off-CPU, CUDA calls) not kept: map full, "
				       "id taken by another stack; clears of the map.");
	prom_sample1_u64(out, n, "reason", "full", s.stack_full);
	prom_sample1_u64(out, n, "reason", "collision", s.stack_collisions);
	prom_counter(out, "gpuscope_agent_unwind_kept_stacks_clears_total",
		     "Times the kept-stacks map was cleared near full.", s.stack_clears);
	n = "gpuscope_agent_unwind_truncated_total";
	prom_family(out, n, "counter", "Walks that ended early (a [truncated] frame), by reason.");
	for (int i = 1; i < GPUSCOPE_TRUNC_MAX; i++)
		prom_sample1_u64(out, n, "reason", reasons[i], s.truncated[i]);
	cache_metrics(&s, out);
	if (unwinder__python(u))
		python__metrics(unwinder__python(u), out);
}

struct unwinder *agent__unwinder(struct agent *a)
{
	struct unwinder_opts uo = { 0 };
	const char *why;

	if (a->unwind || a->unwind_tried)
		return a->unwind;
	a->unwind_tried = true;
	if (getenv("GPUSCOPE_FRAME_POINTERS")) {	/* comparisons and benchmarks */
		log_info("unwind: GPUSCOPE_FRAME_POINTERS set: user stacks from frame pointers only");
		return NULL;
	}
	uo.cache_dir = a->opts.unwind_cache_dir ? a->opts.unwind_cache_dir : UW_CACHE_DIR_DEFAULT;
	if (!strcmp(uo.cache_dir, "off"))
		uo.cache_dir = NULL;
	uo.cache_max_bytes = a->opts.unwind_cache_max;
	a->unwind = unwinder__new(&uo, &why);
	if (!a->unwind && errno != EPERM)	/* no privilege: the modules say so */
		log_warn("unwind: %s (%s): user stacks from frame pointers only",
			 why ? why : "cannot start", strerror(errno));
	return a->unwind;
}
