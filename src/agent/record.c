/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope-agent record`: a one-shot CPU profile. Samples every CPU (or the given pids) for a
 * duration, symbolizes as it goes (so short-lived processes still resolve), and writes pprof,
 * folded stacks and a top-functions table. Every sample keeps its own timestamp.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "agent/commands.h"
#include "agent/cpu/oncpu.h"
#include "agent/procs/procfs.h"
#include "agent/sym/stacks.h"
#include "agent/unwind/python.h"
#include "agent/unwind/python_abi.h"
#include "agent/unwind/unwind.h"
#include "agent/sym/symbolize.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/pprof.h"
#include "common/util.h"

#define MAX_PIDS 256

struct rec_stack {			/* a record-local copy of a symbolized stack */
	uint32_t n, nkernel, nunknown;
	uint64_t pprof_ids_ready;	/* 0/1: ids below computed */
	uint64_t *pprof_ids;
	struct location *locs;
};

struct rec_sample {
	uint64_t time_ns;		/* Unix ns */
	uint32_t pid, tid;
	uint32_t stack;			/* index into stacks */
	uint32_t comm, thread;		/* indices into names */
	uint16_t cpu;
};

struct recorder {
	struct symbolizer *sym;
	struct stack_cache *cache;
	struct u64map stack_index;	/* sym_stack key -> index+1 */
	struct rec_stack *stacks;
	size_t nstacks, cap_stacks;
	struct rec_sample *samples;
	size_t nsamples, cap_samples;
	struct strtab names;		/* process and thread names */
	struct u64map pid_comm;		/* pid -> names index + 1 */
	int64_t mono_to_wall;
	uint64_t unknown_frames, oom;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gpuscope-agent record [OPTIONS]\n"
		"  -d, --duration D     how long to profile (500ms, 5s, 10m, 1h; bare number: seconds; default 10s)\n"
		"  -F, --frequency HZ   samples per second per CPU (default 99)\n"
		"  -p, --pid PID        profile only this process (repeatable; default: every process)\n"
		"  -o, --output FILE    write a gzip'd pprof profile\n"
		"  -f, --folded FILE    write folded stacks (flamegraph.pl input)\n"
		"      --top N          print the N top functions (default 20; 0: none)\n"
		"      --event E        auto (default: cycles if present, else cpu-clock), cpu-clock, cycles\n"
		"      --no-kernel      do not record kernel stacks\n"
		"      --frame-pointers user stacks from frame pointers only (no unwind tables)\n"
		"      --unwind-cache-dir DIR  unwind tables read from and kept in DIR (default: none)\n"
		"  -v, --verbose        debug logging\n");
}

static int64_t proc_comm(struct recorder *r, pid_t pid, const char *fallback)
{
	uint64_t *slot = u64map_find(&r->pid_comm, (uint64_t)pid);
	char buf[PROCFS_COMM_LEN];
	int64_t idx;

	if (slot && *slot)
		return (int64_t)*slot - 1;
	procfs_comm(pid, buf, sizeof(buf));
	idx = strtab_intern(&r->names, *buf ? buf : fallback);
	if (idx >= 0 && !u64map_upsert(&r->pid_comm, (uint64_t)pid, (uint64_t)idx + 1, NULL))
		return -ENOMEM;
	symbolizer__pid_seen(r->sym, pid);
	return idx;
}

static int64_t rec_stack_of(struct recorder *r, const struct sym_stack *st)
{
	int inserted;
	uint64_t *slot = u64map_upsert(&r->stack_index, st->key, 0, &inserted);
	struct rec_stack *rs;

	if (!slot)
		return -ENOMEM;
	if (!inserted && *slot) {
		rs = &r->stacks[*slot - 1];
		if (st->nunknown < rs->nunknown && st->n == rs->n) {	/* resolved on a retry */
			memcpy(rs->locs, st->locs, st->n * sizeof(*rs->locs));
			r->unknown_frames -= rs->nunknown - st->nunknown;
			rs->nunknown = st->nunknown;
		}
		return (int64_t)*slot - 1;
	}
	if (array_reserve(&r->stacks, &r->cap_stacks, r->nstacks + 1, sizeof(*r->stacks), 1024))
		goto out_undo;
	rs = &r->stacks[r->nstacks];
	memset(rs, 0, sizeof(*rs));
	rs->locs = malloc((st->n ? st->n : 1) * sizeof(*rs->locs));
	if (!rs->locs)
		goto out_undo;
	memcpy(rs->locs, st->locs, st->n * sizeof(*rs->locs));
	rs->n = st->n;
	rs->nkernel = st->nkernel;
	rs->nunknown = st->nunknown;
	r->unknown_frames += st->nunknown;
	*slot = ++r->nstacks;
	return (int64_t)r->nstacks - 1;
out_undo:
	*slot = 0;
	return -ENOMEM;
}

static void on_sample(void *ctx, const struct gpuscope_ev_cpu_sample *ev, const __u64 *frames)
{
	struct recorder *r = ctx;
	char thread[GPUSCOPE_COMM_LEN + 1];
	const struct sym_stack *st;
	int64_t comm, tname, stack;
	struct rec_sample *s;

	memcpy(thread, ev->comm, GPUSCOPE_COMM_LEN);
	thread[GPUSCOPE_COMM_LEN] = 0;
	comm = proc_comm(r, ev->tgid, thread);
	if (comm >= 0 && ev->tid == ev->tgid && strcmp(r->names.strs[comm], thread)) {
		/* the main thread's name is the process's: it changed (an exec whose event is
		 * still behind this sample on a busy machine, or a rename) */
		comm = strtab_intern(&r->names, thread);
		if (comm >= 0 && !u64map_upsert(&r->pid_comm, (uint64_t)ev->tgid,
						(uint64_t)comm + 1, NULL))
			comm = -ENOMEM;
	}
	tname = strtab_intern(&r->names, thread);
	st = stack_cache__get(r->cache, ev->tgid, frames, ev->kstack_len, frames + ev->kstack_len,
			      ev->ustack_len);
	stack = st ? rec_stack_of(r, st) : -ENOMEM;
	if (comm < 0 || tname < 0 || stack < 0) {
		r->oom++;
		return;
	}
	if (array_reserve(&r->samples, &r->cap_samples, r->nsamples + 1, sizeof(*r->samples),
			  4096)) {
		r->oom++;
		return;
	}
	s = &r->samples[r->nsamples++];
	s->time_ns = ev->ktime_ns + r->mono_to_wall;
	s->pid = ev->tgid;
	s->tid = ev->tid;
	s->cpu = ev->cpu;
	s->stack = stack;
	s->comm = comm;
	s->thread = tname;
}

static void on_proc(void *ctx, pid_t tgid, bool exec, uint64_t ktime_ns)
{
	struct recorder *r = ctx;

	/* Samples arrive in order, but the process's other threads can still run after its
	 * leader's exit event: the maps stay a while for those (not for an exec's new image). */
	symbolizer__pid_gone(r->sym, tgid, exec, ktime_ns);
	if (exec) {
		uint64_t *slot = u64map_find(&r->pid_comm, (uint64_t)tgid);

		if (slot)	/* re-read /proc/PID/comm at the next sample */
			*slot = 0;
		procfs_exec(tgid, NULL);	/* not the name cached before the exec */
	}
}

static const char *frame_name(const struct location *l)
{
	return l->function && *l->function ? l->function : "[unknown]";
}

static int write_pprof(struct recorder *r, const char *path, unsigned freq, uint64_t start_ns,
		       uint64_t duration_ns)
{
	struct pprof_value_type types[] = { { "samples", "count" }, { "cpu", "nanoseconds" } };
	int64_t period = (int64_t)(NSEC_PER_SEC / freq);
	struct pprof *p = pprof__new(types, 2, (struct pprof_value_type){ "cpu", "nanoseconds" },
				     period, start_ns, duration_ns);
	uint64_t *ids = NULL;
	uint8_t *buf = NULL;
	size_t len;
	FILE *f = NULL;
	int err = 0;

	if (!p)
		return -errno;
	for (size_t i = 0; i < r->nsamples; i++) {
		struct rec_sample *s = &r->samples[i];
		struct rec_stack *st = &r->stacks[s->stack];
		int64_t values[2] = { 1, period };
		struct label labels[2] = { { "comm", r->names.strs[s->comm] },
					   { "thread", r->names.strs[s->thread] } };
		struct pprof_num_label nums[4] = { { "pid", s->pid, NULL },
						   { "tid", s->tid, NULL },
						   { "cpu", s->cpu, NULL },
						   { "timestamp", (int64_t)s->time_ns, "nanoseconds" } };

		if (!st->pprof_ids_ready) {
			st->pprof_ids = malloc((st->n ? st->n : 1) * sizeof(*st->pprof_ids));
			if (!st->pprof_ids) {
				err = -ENOMEM;
				goto out;
			}
			for (uint32_t j = 0; j < st->n; j++) {
				st->pprof_ids[j] = pprof__location(p, &st->locs[j]);
				if (!st->pprof_ids[j]) {
					err = -ENOMEM;
					goto out;
				}
			}
			st->pprof_ids_ready = 1;
		}
		err = pprof__sample(p, st->pprof_ids, st->n, values, labels, 2, nums, 4);
		if (err)
			goto out;
	}
	err = pprof__encode_gz(p, &buf, &len);
	if (err)
		goto out;
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fflush(f)) {
		err = -errno ? -errno : -EIO;
		goto out;
	}
out:
	if (f && fclose(f) && !err)
		err = -errno;
	free(buf);
	free(ids);
	pprof__free(p);
	return err;
}

/* Appends "comm;root;...;leaf" for sample s to a growing buffer; returns its length or -ENOMEM. */
static int folded_line(struct recorder *r, const struct rec_sample *s, char **buf, size_t *cap)
{
	const struct rec_stack *st = &r->stacks[s->stack];
	size_t len = 0;

	size_t need = strlen(r->names.strs[s->comm]) + 1;

	for (uint32_t j = 0; j < st->n; j++)
		need += strlen(frame_name(&st->locs[j])) + 6;	/* ';' + name + "_[k]" */
	if (need > *cap) {
		char *n = realloc(*buf, need);

		if (!n)
			return -ENOMEM;
		*buf = n;
		*cap = need;
	}
	len = strlen(strcpy(*buf, r->names.strs[s->comm]));
	for (uint32_t j = st->n; j-- > 0;)
		len += sprintf(*buf + len, ";%s%s", frame_name(&st->locs[j]), j < st->nkernel ? "_[k]" : "");
	return (int)len;
}

static int write_folded(struct recorder *r, const char *path)
{
	struct strtab lines = { 0 };	/* distinct folded stacks, in first-seen order */
	uint64_t *counts = NULL;
	size_t cap = 0;
	char *buf = NULL;
	FILE *f;
	int err = 0;

	/* Distinct raw stacks can symbolize to the same names: aggregate by the text. */
	counts = calloc(r->nsamples ? r->nsamples : 1, sizeof(*counts));
	if (!counts)
		return -ENOMEM;
	for (size_t i = 0; i < r->nsamples; i++) {
		int64_t idx;

		err = folded_line(r, &r->samples[i], &buf, &cap);
		if (err < 0)
			goto out;
		err = 0;
		idx = strtab_intern(&lines, buf);
		if (idx < 0) {
			err = -ENOMEM;
			goto out;
		}
		counts[idx]++;
	}
	f = fopen(path, "w");
	if (!f) {
		err = -errno;
		goto out;
	}
	for (size_t i = 0; i < lines.len; i++)
		fprintf(f, "%s %llu\n", lines.strs[i], (unsigned long long)counts[i]);
	if (fclose(f))
		err = -errno;
out:
	free(buf);
	free(counts);
	strtab_done(&lines);
	return err;
}

struct fn_count {
	const char *name;
	uint64_t self, total;
};

static int cmp_self(const void *a, const void *b)
{
	const struct fn_count *x = a, *y = b;

	if (x->self != y->self)
		return x->self < y->self ? 1 : -1;
	return x->total < y->total ? 1 : x->total > y->total ? -1 : 0;
}

static int print_top(struct recorder *r, int top)
{
	struct strtab fns = { 0 };
	struct fn_count *counts = NULL;
	size_t ncap = 0;
	uint64_t *per_stack = calloc(r->nstacks ? r->nstacks : 1, sizeof(*per_stack));
	uint32_t *seen = NULL;
	size_t nseen_cap = 0;
	int err = 0;

	if (!per_stack)
		return -ENOMEM;
	for (size_t i = 0; i < r->nsamples; i++)
		per_stack[r->samples[i].stack]++;
	for (size_t i = 0; i < r->nstacks; i++) {
		struct rec_stack *st = &r->stacks[i];
		size_t nseen = 0;

		if (!per_stack[i])
			continue;
		if (st->n > nseen_cap) {
			uint32_t *n = realloc(seen, st->n * sizeof(*n));

			if (!n) {
				err = -ENOMEM;
				goto out;
			}
			seen = n;
			nseen_cap = st->n;
		}
		for (uint32_t j = 0; j < st->n; j++) {
			int64_t idx = strtab_intern(&fns, frame_name(&st->locs[j]));
			bool dup = false;

			if (idx < 0) {
				err = -ENOMEM;
				goto out;
			}
			if ((size_t)idx >= ncap) {
				size_t nc = (idx + 1) * 2;
				struct fn_count *n = realloc(counts, nc * sizeof(*n));

				if (!n) {
					err = -ENOMEM;
					goto out;
				}
				memset(n + ncap, 0, (nc - ncap) * sizeof(*n));
				counts = n;
				ncap = nc;
			}
			if (j == 0)
				counts[idx].self += per_stack[i];
			for (size_t k = 0; k < nseen && !dup; k++)
				dup = seen[k] == idx;
			if (!dup) {
				counts[idx].total += per_stack[i];
				seen[nseen++] = idx;
			}
		}
	}
	for (size_t i = 0; i < fns.len; i++)
		counts[i].name = fns.strs[i];
	qsort(counts, fns.len, sizeof(*counts), cmp_self);
	printf("%8s %7s %8s %7s  %s\n", "SELF", "SELF%", "TOTAL", "TOTAL%", "FUNCTION");
	for (size_t i = 0; i < fns.len && (int)i < top; i++)
		printf("%8llu %6.2f%% %8llu %6.2f%%  %s\n", (unsigned long long)counts[i].self,
		       100.0 * counts[i].self / (r->nsamples ? r->nsamples : 1),
		       (unsigned long long)counts[i].total,
		       100.0 * counts[i].total / (r->nsamples ? r->nsamples : 1), counts[i].name);
out:
	free(seen);
	free(per_stack);
	free(counts);
	strtab_done(&fns);
	return err;
}

static void recorder_done(struct recorder *r)
{
	for (size_t i = 0; i < r->nstacks; i++) {
		free(r->stacks[i].locs);
		free(r->stacks[i].pprof_ids);
	}
	free(r->stacks);
	free(r->samples);
	u64map_done(&r->stack_index);
	u64map_done(&r->pid_comm);
	strtab_done(&r->names);
	stack_cache__free(r->cache);
	symbolizer__free(r->sym);
}

int cmd_record(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "duration", required_argument, NULL, 'd' }, { "frequency", required_argument, NULL, 'F' },
		{ "pid", required_argument, NULL, 'p' },      { "output", required_argument, NULL, 'o' },
		{ "folded", required_argument, NULL, 'f' },   { "top", required_argument, NULL, 't' },
		{ "event", required_argument, NULL, 'e' },    { "no-kernel", no_argument, NULL, 'K' },
		{ "verbose", no_argument, NULL, 'v' },	      { "help", no_argument, NULL, 'h' },
		{ "frame-pointers", no_argument, NULL, 'P' }, { "unwind-cache-dir", required_argument, NULL, 'U' },
		{ 0 } };
	struct oncpu_opts opts = { .frequency_hz = 99 };
	pid_t pids[MAX_PIDS];
	const char *output = NULL, *folded = NULL, *why = NULL;
	uint64_t duration_ns = 10 * NSEC_PER_SEC, start_mono, start_wall, elapsed;
	struct recorder r = { 0 };
	struct oncpu_stats st;
	struct symbolizer_stats sst;
	struct oncpu *o = NULL;
	struct unwinder *uw = NULL;
	bool no_unwind = false;
	const char *cache_dir = NULL;
	int c, top = 20, rc = 1, err;
	char *end;
	long v;

	optind = 1;
	while ((c = getopt_long(argc, argv, "d:F:p:o:f:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			if (parse_duration_ns(optarg, &duration_ns) || !duration_ns) {
				log_error("bad --duration '%s': want e.g. 500ms, 5s, 10m, 1h", optarg);
				return 2;
			}
			break;
		case 'F':
			v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 100000) {
				log_error("bad --frequency '%s': want 1..100000 Hz", optarg);
				return 2;
			}
			opts.frequency_hz = v;
			break;
		case 'p':
			v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 0x7fffffff || opts.npids == MAX_PIDS) {
				log_error("bad --pid '%s'", optarg);
				return 2;
			}
			if (kill((pid_t)v, 0) && errno == ESRCH)
				log_warn("no process %ld right now; recording it if it appears", v);
			pids[opts.npids++] = (pid_t)v;
			break;
		case 'o':
			output = optarg;
			break;
		case 'f':
			folded = optarg;
			break;
		case 't':
			v = strtol(optarg, &end, 10);
			if (*end || v < 0) {
				log_error("bad --top '%s'", optarg);
				return 2;
			}
			top = v;
			break;
		case 'e':
			if (!strcmp(optarg, "auto"))
				opts.event = ONCPU_EVENT_AUTO;
			else if (!strcmp(optarg, "cpu-clock"))
				opts.event = ONCPU_EVENT_CPU_CLOCK;
			else if (!strcmp(optarg, "cycles"))
				opts.event = ONCPU_EVENT_CYCLES;
			else {
				log_error("bad --event '%s': want auto, cpu-clock or cycles", optarg);
				return 2;
			}
			break;
		case 'K':
			opts.no_kernel = true;
			break;
		case 'P':
			no_unwind = true;
			break;
		case 'U':
			cache_dir = optarg;
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
	if (optind < argc) {
		log_error("unexpected argument '%s'", argv[optind]);
		usage(stderr);
		return 2;
	}
	opts.pids = pids;
	r.sym = symbolizer__new();
	r.cache = r.sym ? stack_cache__new(r.sym, 1 << 20) : NULL;
	if (!r.cache) {
		log_error("out of memory");
		goto out;
	}
	r.mono_to_wall = mono_to_wall_offset_ns();
	/* the whole machine: processes that end before their maps are read, too */
	if (!opts.npids && symbolizer__watch_mmaps(r.sym, &why) && errno != EPERM &&
	    errno != EACCES)	/* no privilege: the sampler says so below */
		log_warn("symbolizer: %s (%s): the maps of processes gone before a read are "
			 "unknown", why, strerror(errno));
	if (!no_unwind) {
		/* a command the user waits for: its tables at the user's priority */
		struct unwinder_opts uo = { .foreground = true, .cache_dir = cache_dir };

		uw = unwinder__new(&uo, &why);
		if (!uw && errno != EPERM)	/* no privilege: the sampler says so below */
			log_warn("unwind: %s (%s): user stacks from frame pointers only",
				 why ? why : "cannot start", strerror(errno));
	}
	if (uw && opts.npids) {	/* the given processes' tables before the first sample */
		for (int i = 0; i < opts.npids; i++)
			unwinder__add_pid(uw, opts.pids[i]);
		unwinder__settle(uw, 5000);
	}
	opts.unwinder = uw;
	o = oncpu__new(&opts, on_sample, on_proc, &r, &why);
	if (!o) {
		log_error("cannot start the CPU sampler: %s (%s)", why ? why : "unknown reason",
			  strerror(errno));
		rc = 2;
		goto out;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	start_mono = mono_ns();
	start_wall = wall_ns();
	oncpu__stats(o, &st);
	log_info("recording %s at %u Hz on %d CPUs (%s)%s", fmt_duration(duration_ns, (char[32]){ 0 }, 32),
		 opts.frequency_hz, st.ncpus, st.event, opts.npids ? " for the given pids" : "");
	while (!stop && (elapsed = mono_ns() - start_mono) < duration_ns) {
		uint64_t left_ms = (duration_ns - elapsed) / NSEC_PER_MSEC;

		symbolizer__poll(r.sym);	/* mappings first: the samples below need them */
		err = oncpu__poll(o, left_ms < 100 ? (int)left_ms + 1 : 100);
		if (err < 0) {
			log_error("ring buffer poll: %s", strerror(-err));
			goto out;
		}
	}
	elapsed = mono_ns() - start_mono;
	oncpu__poll(o, 0);
	oncpu__stats(o, &st);
	symbolizer__stats(r.sym, &sst);
	if (output) {
		err = write_pprof(&r, output, opts.frequency_hz, start_wall, elapsed);
		if (err) {
			log_error("writing '%s': %s", output, strerror(-err));
			goto out;
		}
	}
	if (folded) {
		err = write_folded(&r, folded);
		if (err) {
			log_error("writing '%s': %s", folded, strerror(-err));
			goto out;
		}
	}
	if (top > 0)
		print_top(&r, top);
	printf("\nrecorded %zu samples in %.2f s on %d CPUs (%s, %u Hz): %llu lost (ring buffer full), "
	       "%llu dropped (out of memory), %llu without user stack, %llu unknown frames, "
	       "%zu processes, %zu distinct stacks\n",
	       r.nsamples, elapsed / 1e9, st.ncpus, st.event, opts.frequency_hz,
	       (unsigned long long)st.lost, (unsigned long long)r.oom,
	       (unsigned long long)st.ustack_err, (unsigned long long)r.unknown_frames,
	       r.pid_comm.len + r.pid_comm.has_zero, r.nstacks);
	if (uw) {
		struct unwinder_stats us;
		uint64_t trunc = 0;

		unwinder__stats(uw, &us);
		for (int i = 0; i < 16; i++)
			trunc += us.truncated[i];
		for (int i = 0; i < 16; i++)
			if (us.truncated[i])
				log_debug("unwind: %llu walks truncated for reason %d",
					  (unsigned long long)us.truncated[i], i);
		log_debug("unwind: %llu processes, %llu refreshes for %llu requests, %llu walks of "
			  "unknown processes, %llu steps into an unloaded table, %llu nested walks",
			  (unsigned long long)us.procs, (unsigned long long)us.refreshes,
			  (unsigned long long)us.requests, (unsigned long long)us.no_proc,
			  (unsigned long long)us.no_table, (unsigned long long)us.nested);
		printf("unwind: %llu walks, %llu frames (%llu by tables, %llu by frame pointers), "
		       "%llu truncated, %llu tables (%llu KiB)\n",
		       (unsigned long long)us.walks, (unsigned long long)us.frames,
		       (unsigned long long)us.table_frames, (unsigned long long)us.fp_frames,
		       (unsigned long long)trunc, (unsigned long long)us.tables,
		       (unsigned long long)us.table_bytes >> 10);
		if (us.cache_on)
			printf("unwind cache: %llu hits, %llu misses, %llu corrupt, %llu stored\n",
			       (unsigned long long)us.cache_hits, (unsigned long long)us.cache_misses,
			       (unsigned long long)us.cache_corrupt, (unsigned long long)us.cache_stores);
		if (unwinder__python(uw)) {
			struct python_stats ps;

			python__stats(unwinder__python(uw), &ps);
			if (ps.bpf[GPUSCOPE_PY_STAT_WALKS] || ps.unsupported)
				printf("python: %llu stacks with Python frames, %llu frames (%llu "
				       "unreadable, %llu after a [truncated] gap), %llu stacks of "
				       "threads without a Python thread state, %llu unsupported "
				       "interpreters; code objects: %llu read from the process, %llu "
				       "named from BPF's copy (gone or replaced: %llu), %llu not "
				       "named\n",
				       (unsigned long long)ps.bpf[GPUSCOPE_PY_STAT_WALKS],
				       (unsigned long long)ps.bpf[GPUSCOPE_PY_STAT_FRAMES],
				       (unsigned long long)ps.bpf[GPUSCOPE_PY_STAT_READ_FAILED],
				       (unsigned long long)ps.bpf[GPUSCOPE_PY_STAT_UNREACHED],
				       (unsigned long long)ps.bpf[GPUSCOPE_PY_STAT_NO_THREAD],
				       (unsigned long long)ps.unsupported,
				       (unsigned long long)ps.code_reads,
				       (unsigned long long)ps.code_bpf_names,
				       (unsigned long long)ps.code_replaced,
				       (unsigned long long)ps.code_failed);
		}
	}
	if (output)
		printf("wrote %s (pprof: go tool pprof -top %s)\n", output, output);
	if (folded)
		printf("wrote %s (folded stacks: flamegraph.pl %s > cpu.svg)\n", folded, folded);
	rc = 0;
out:
	oncpu__free(o);
	unwinder__free(uw);
	recorder_done(&r);
	return rc;
}
