// SPDX-License-Identifier: Apache-2.0
/*
 * cupti_module: attaches src/agent/cupti/cupti.bpf.c to the USDT probes of every
 * libgpuscope_cupti*.so file that processes have mapped (system-wide on that file, so later
 * processes are covered too), follows the processes that map it, and drains its ring into
 * records.c (launches joined with activity records: samples, intervals, busy). Tracing runs in
 * windows (window.c decides when): the module opens one in a process by attaching to its
 * library's `window` probe for that pid only (the kernel raises the probe's semaphore in that
 * process, and the library turns CUPTI on), and closes it by detaching. Each window becomes a
 * gpu_trace_window interval, and a gpu_observed interval per GPU it saw (source=kernels).
 */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/types.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/unwind/unwind.h"
#include "agent/bpfutil.h"
#include "agent/ringdrain.h"
#include "agent/cupti/cupti_usdt.h"
#include "agent/cupti/cupti_int.h"
#include "agent/cupti/window.h"
#include "agent/labels.h"
#include "agent/sym/stacks.h"
#include "agent/sym/symbolize.h"
#include "agent/procs/elf.h"
#include "agent/procs/maps.h"
#include "agent/procs/procfs.h"
#include "agent/procs/tracker.h"
#include "common/abi.h"
#include "common/abi_cupti.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"
#include "cupti.skel.h"


static const char *const probe_names[NPROBES] = { "launch", "buffer", "name",
						  "clock",  "drops",  "status" };
struct cupti_state *cupti_live;	/* the running module's state (cupti_int.h) */
static struct cupti_stats last_stats;	/* of the last module stopped */

/* ---- attaching ---------------------------------------------------------------------------- */

/* Is the file sb among the n libraries of libs (by device and inode)? */
static bool lib_known(const struct lib *libs, int n, const struct stat *sb)
{
	for (int i = 0; i < n; i++)
		if (libs[i].dev == sb->st_dev && libs[i].ino == sb->st_ino)
			return true;
	return false;
}

/* attach_lib()'s libbpf part, under the switch thread's lock. */
static int attach_probes(struct cupti_state *c, const char *path, const struct stat *sb)
{
	struct bpf_program *progs[NPROBES] = {
		c->skel->progs.on_launch, c->skel->progs.on_buffer, c->skel->progs.on_name,
		c->skel->progs.on_clock,  c->skel->progs.on_drops, c->skel->progs.on_status,
	};
	struct lib *l;
	int err = 0, i;

	l = &c->libs[c->nlibs];
	memset(l, 0, sizeof(*l));
	/* name and clock first: the library re-announces its names when their semaphore moves */
	static const int order[NPROBES] = { 2, 3, 4, 5, 0, 1 };
	for (int k = 0; k < NPROBES; k++) {
		i = order[k];
		l->links[i] = bpf_program__attach_usdt(progs[i], -1, path, GPUSCOPE_CUPTI_PROVIDER,
						       probe_names[i], NULL);
		if (!l->links[i] && i == 5) {	/* status: a library from before trace windows */
			log_debug("cupti: '%s' has no status probe (no trace windows)", path);
			continue;
		}
		if (!l->links[i]) {
			err = -errno;
			log_warn("cupti: attach USDT %s:%s in '%s': %s", GPUSCOPE_CUPTI_PROVIDER,
				 probe_names[i], path, strerror(-err));
			goto out_detach;
		}
	}
	l->dev = sb->st_dev;
	l->ino = sb->st_ino;
	c->nlibs++;
	c->st.libs_attached++;
	log_info("cupti: attached to '%s'", path);
	return 0;
out_detach:
	for (i = 0; i < NPROBES; i++)
		bpf_link__destroy(l->links[i]);
	memset(l, 0, sizeof(*l));
	return err;
}

/* Attach every probe to the library file at path, for all processes (uprobes are per inode). */
static int attach_lib(struct cupti_state *c, const char *path)
{
	struct stat sb;
	int err;

	if (stat(path, &sb))
		return -errno;
	if (lib_known(c->libs, c->nlibs, &sb))
		return 0;
	if (c->nlibs == MAX_LIBS) {
		c->st.libs_skipped++;
		return -ENOSPC;
	}
	if (!winwork__trylock(c->work))
		return -EAGAIN;	/* a window switch is under way: the next scan attaches it */
	err = attach_probes(c, path, &sb);
	winwork__unlock(c->work);
	return err;
}

/* Is path a shared library whose file name starts with prefix? */
static bool lib_named(const char *path, const char *prefix)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return !strncmp(base, prefix, strlen(prefix)) && strstr(base, ".so");
}

/* torch::autograd::Engine::execute(...), whatever its arguments in this build */
#define ENGINE_EXECUTE_PREFIX "_ZN5torch8autograd6Engine7executeE"

/*
 * Puts on_backward on Engine::execute of the libtorch_cpu file at path, for every process that
 * maps it (once per file; a file without the symbol, or whose attach failed, is not tried
 * again: counted in torch_attach_errors).
 */
static int attach_torch(struct cupti_state *c, const char *path)
{
	char name[512];
	uint64_t off = 0;
	struct stat sb;
	struct lib *l;
	int fd, err;

	if (stat(path, &sb))
		return -errno;
	if (lib_known(c->torch, c->ntorch, &sb))
		return 0;
	if (c->ntorch == MAX_LIBS) {
		c->st.libs_skipped++;
		return -ENOSPC;
	}
	if (!winwork__trylock(c->work))
		return -EAGAIN;	/* a window switch is under way: the next scan attaches it */
	l = &c->torch[c->ntorch++];
	memset(l, 0, sizeof(*l));
	l->dev = sb.st_dev;
	l->ino = sb.st_ino;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	/* by offset: libbpf's lookup by name would read the library's names (tens of MB) again */
	err = fd < 0 ? -errno : elf_find_function_prefix(fd, ENGINE_EXECUTE_PREFIX, name,
							 sizeof(name), &off);
	if (fd >= 0)
		close(fd);
	if (!err) {
		l->links[0] = bpf_program__attach_uprobe(c->skel->progs.on_backward, false, -1, path,
							 off);
		err = l->links[0] ? 0 : -errno;
	}
	winwork__unlock(c->work);
	if (err) {
		c->st.torch_attach_errors++;
		log_warn("cupti: no backward stacks for kernels of '%s' (autograd's Engine::execute: "
			 "%s)", path, strerror(-err));
		return 0;	/* not tried again */
	}
	c->st.torch_attached++;
	log_info("cupti: backward calls of '%s' followed", path);
	return 0;
}

/*
 * What tells that a process's maps may have changed since a scan read them: its start time
 * (a reused pid) and address-space size (a library loaded grows it), from /proc/PID/stat,
 * ~30 times cheaper to read than the maps of a process that maps PyTorch. A settled process
 * (the library attached and registered, libtorch_cpu's probe placed) has nothing left to find:
 * its start time alone (stamp.settled, even), so a training process whose heap moves is not
 * read again every scan; else both (stamp.sized, odd). Both 0 if unreadable.
 */
struct maps_stamp {
	uint64_t sized, settled;
};

static struct maps_stamp maps_stamp(pid_t pid)
{
	uint64_t start, vsize;

	if (!procfs_start_vsize(pid, &start, &vsize))
		return (struct maps_stamp){ 0, 0 };
	return (struct maps_stamp){ hash64(&vsize, sizeof(vsize), start) | 1,
				    hash64(&start, sizeof(start), 0x5e771ed) & ~1ull };
}

/* One process's scan: the library's mapping (attached when first seen) and libtorch_cpu's. */
struct scan {
	struct cupti_state *c;
	pid_t pid;
	bool ours;
	bool done;	/* nothing left to do here: skipped while its maps stay the same */
	char torch[PATH_MAX + 300];
};

static int scan_mapping(const struct maps_line *l, void *ctx)
{
	struct scan *q = ctx;
	char full[PATH_MAX + 300];

	if (l->path[0] != '/' || l->deleted)
		return 0;
	if (!q->torch[0] && lib_named(l->path, "libtorch_cpu")) {
		snprintf(q->torch, sizeof(q->torch), "/proc/%d/root%s", q->pid, l->path);
		if (q->ours)
			return 1;
	}
	if (q->ours || !lib_named(l->path, "libgpuscope_cupti"))
		return 0;
	q->ours = true;
	q->done = false;	/* read again next time unless attached and registered */
	snprintf(full, sizeof(full), "/proc/%d/root%s", q->pid, l->path);
	if (attach_lib(q->c, full) == 0) {
		struct proc *pr = cupti_pid_wanted(q->c->a, q->pid) ? cupti_proc_get(q->c, q->pid) :
								       NULL;

		if (pr && !pr->lib_path)
			pr->lib_path = strdup(full);
		q->done = pr && pr->lib_path;
	}
	return q->torch[0] ? 1 : 0;
}

/* The tracker's GPU processes (procs/tracker.h): only a process that maps libcuda can have the
 * injection library (libcuda loads it at cuInit), and --pid names are tracked too. */
static void on_tracked(pid_t pid, bool tracked, void *ctx)
{
	struct cupti_state *c = ctx;

	if (tracked)
		u64map_upsert(&c->gpu_pids, (uint64_t)pid, 1, NULL);
	else
		u64map_remove(&c->gpu_pids, (uint64_t)pid);
}

/* One process of a scan: its maps read unless its stamp says nothing changed. */
static void scan_one(struct cupti_state *c, pid_t pid, struct u64map *seen)
{
	struct scan q = { .c = c, .pid = pid, .done = true };
	uint64_t *was = u64map_find(&c->scan_seen, (uint64_t)pid);
	struct maps_stamp ms = maps_stamp(pid);
	uint64_t stamp = was && !(*was & 1) ? ms.settled : ms.sized;

	if (stamp && was && *was == stamp) {
		c->st.scan_maps_skipped++;
		u64map_upsert(seen, (uint64_t)pid, stamp, NULL);
		return;
	}
	c->st.scan_maps_read++;
	if (maps_each(pid, MAPS_ALL, scan_mapping, &q) < 0)
		return;
	if (q.ours && q.torch[0] && attach_torch(c, q.torch) == -EAGAIN)
		q.done = false;
	/* nothing more to come from its maps: settled; else (also after a reuse of a settled
	 * process's pid) by size */
	stamp = q.done && q.ours && q.torch[0] ? ms.settled : ms.sized;
	if (q.done && stamp)
		u64map_upsert(seen, (uint64_t)pid, stamp, NULL);
}

/*
 * Finds libgpuscope_cupti*.so in the maps of the GPU processes the tracker follows, attaches to
 * each file once, and remembers which processes map it (the ones whose windows the module
 * controls).
 */
void cupti_scan_procs(struct cupti_state *c)
{
	struct u64map seen = { 0 };	/* this scan's scan_seen: gone pids drop out */

	for (size_t i = 0; i < c->gpu_pids.cap; i++) {
		pid_t pid = (pid_t)c->gpu_pids.keys[i];

		/* with --pid, other processes' libraries are not ours to probe (nor to wait for) */
		if (pid > 0 && cupti_pid_wanted(c->a, pid))
			scan_one(c, pid, &seen);
	}
	u64map_done(&c->scan_seen);
	c->scan_seen = seen;
}

/* The library installed next to the agent binary, and GPUSCOPE_CUPTI_LIBRARY (colon list). */
static void attach_known_paths(struct cupti_state *c)
{
	char exe[PATH_MAX], *slash, *env, *save = NULL, *tok;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 32);

	if (n > 0) {
		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash) {
			strcpy(slash + 1, "libgpuscope_cupti.so");
			if (!access(exe, R_OK))
				attach_lib(c, exe);
		}
	}
	env = getenv("GPUSCOPE_CUPTI_LIBRARY");
	if (!env || !*env)
		return;
	env = strdup(env);
	if (!env)
		return;
	for (tok = strtok_r(env, ":", &save); tok; tok = strtok_r(NULL, ":", &save))
		if (attach_lib(c, tok) && access(tok, R_OK))
			log_warn("cupti: GPUSCOPE_CUPTI_LIBRARY '%s' is not readable", tok);
	free(env);
}

/* ---- processes ---------------------------------------------------------------------------- */

bool cupti_pid_wanted(struct agent *a, pid_t pid)
{
	if (a->opts.npids == 0)
		return true;
	for (int i = 0; i < a->opts.npids; i++)
		if (a->opts.pids[i] == pid)
			return true;
	return false;
}

/* Without a switch job in flight (a slot reused, or after cupti_win_shutdown()). */
static void proc_free_contents(struct proc *p)
{
	bpf_link__destroy(p->win_link);
	free(p->lib_path);
	if (p->names)
		for (uint32_t i = 0; i < GPUSCOPE_CUPTI_NAMES_CAP; i++)
			free(p->names[i]);
	free(p->names);
	memset(p, 0, sizeof(*p));
}

/* The capture poll's counters (capture_poll.c's thread writes, /metrics reads). */
static uint64_t capture_counts[4];

void cupti_usdt__capture_counts(uint64_t polls, uint64_t errors, uint64_t answered,
				uint64_t refused)
{
	__atomic_store_n(&capture_counts[0], polls, __ATOMIC_RELAXED);
	__atomic_store_n(&capture_counts[1], errors, __ATOMIC_RELAXED);
	__atomic_store_n(&capture_counts[2], answered, __ATOMIC_RELAXED);
	__atomic_store_n(&capture_counts[3], refused, __ATOMIC_RELAXED);
}

struct proc *cupti_proc_find(struct cupti_state *c, pid_t pid)
{
	for (int i = 0; i < MAX_PROCS; i++)
		if (c->procs[i].pid == pid)
			return &c->procs[i];
	return NULL;
}

void cupti_backward_rewalk(struct cupti_state *c, uint32_t tid)
{
	if (c->skel)
		bpf_map__delete_elem(c->skel->maps.bw_last, &tid, sizeof(tid), 0);
}

struct proc *cupti_proc_get(struct cupti_state *c, pid_t pid)
{
	struct proc *p, *free_slot = NULL, *dead = NULL;

	for (int i = 0; i < MAX_PROCS; i++) {
		p = &c->procs[i];
		if (p->pid == pid)
			return p;
		if (!p->pid && !free_slot)
			free_slot = p;
		/* a switch job or link of it is in flight: cupti_win_reap() still needs it */
		if (p->pid && p->dead && !p->job_busy && !p->win_link && !dead)
			dead = p;
	}
	if (!free_slot && dead) {
		proc_free_contents(dead);
		free_slot = dead;
	}
	if (!free_slot) {
		c->st.procs_full++;
		return NULL;
	}
	p = free_slot;
	p->pid = pid;
	{
		/* a random phase for its budget windows' spacing (trace_budget__closed()) */
		uint64_t r = (uint64_t)pid * 0x9e3779b97f4a7c15ull;

		if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
			r ^= (uint64_t)time(NULL) * 0xbf58476d1ce4e5b9ull;
		p->budget.phase = (double)(r >> 11) / (double)(1ull << 53);
	}
	p->names = calloc(GPUSCOPE_CUPTI_NAMES_CAP, sizeof(*p->names));
	if (!p->names) {
		p->pid = 0;
		return NULL;
	}
	procfs_comm(pid, p->comm, sizeof(p->comm));
	if (c->a->sym)
		symbolizer__pid_seen(c->a->sym, pid);	/* read its maps while it lives */
	c->st.procs_seen++;
	return p;
}

static void reap_procs(struct cupti_state *c)
{
	for (int i = 0; i < MAX_PROCS; i++) {
		struct proc *p = &c->procs[i];

		if (p->pid && kill(p->pid, 0) && errno == ESRCH)
			p->dead = true;
	}
}


/* ---- module ------------------------------------------------------------------------------- */


/* An event's own length: a launch is reserved with room for the deepest stack. */
static size_t event_used(const void *data, size_t size)
{
	const struct gpuscope_ev_cupti_pair *hdr = data;	/* type, size: every event's prefix */

	return size >= sizeof(*hdr) && hdr->size >= sizeof(*hdr) && hdr->size < size ? hdr->size
										      : size;
}

/* The drain thread, its lock held: an event the full queue could not take. */
static void queue_lost(void *ctx, const void *data, size_t size)
{
	struct cupti_state *c = ctx;
	const struct gpuscope_ev_cupti_recs *ev = data;

	if (size >= sizeof(*ev) && ev->type == GPUSCOPE_EV_CUPTI_RECS)
		__atomic_add_fetch(&c->queue_lost_recs, ev->n, __ATOMIC_RELAXED);
}

static void drain(struct cupti_state *c, bool force)
{
	ring_drain__take(c->drain, cupti_handle_event, c);
	cupti_parked_retry(c, force);
	cupti_busy_flush(c, force);
}

static void cupti_free(struct cupti_state *c)
{
	if (!c)
		return;
	cupti_win_shutdown(c);	/* the links go before the object (libbpf's USDT state) */
	for (int i = 0; i < MAX_PROCS; i++)
		proc_free_contents(&c->procs[i]);
	for (int i = 0; i < c->nlibs; i++)
		for (int k = 0; k < NPROBES; k++)
			bpf_link__destroy(c->libs[i].links[k]);
	for (int i = 0; i < c->ntorch; i++)
		bpf_link__destroy(c->torch[i].links[0]);
	ring_drain__free(c->drain);
	cupti_bpf__destroy(c->skel);
	for (int i = 0; i < MAX_DEVICES; i++)
		free(c->busy[i].pend);
	free(c->launches);
	free(c->stacks);
	free(c->parked);
	u64map_done(&c->scan_seen);
	if (c->tracking)
		procs__release(on_tracked, c);
	u64map_done(&c->gpu_pids);
	free(c);
}

static int cupti_start(struct agent *a)
{
	struct cupti_state *c;
	int err;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->a = a;
	if (a->opts.trace)
		c->cfg = *a->opts.trace;
	else
		trace_cfg_defaults(&c->cfg);
	c->launches = calloc(1u << LAUNCH_BITS, sizeof(*c->launches));
	c->stacks = calloc(1u << STACK_BITS, sizeof(*c->stacks));
	c->parked = calloc(PARK_CAP, sizeof(*c->parked));
	if (!c->launches || !c->stacks || !c->parked) {
		err = -ENOMEM;
		goto out_free;
	}
	c->skel = cupti_bpf__open();
	if (c->skel && agent__unwinder(a)) {
		err = unwinder__prepare(agent__unwinder(a), c->skel->obj);
		if (!err)
			c->skel->rodata->use_unwinder = true;
	}
	if (c->skel)	/* benchmarks, triage */
		bpf_env_ms("GPUSCOPE_CUPTI_BACKWARD_REUSE_MS", &c->skel->rodata->bw_reuse_ns);
	if (c->skel && cupti_bpf__load(c->skel)) {
		err = -errno;
		cupti_bpf__destroy(c->skel);
		c->skel = NULL;
		errno = -err;
	}
	if (!c->skel) {
		err = -errno;
		log_warn("cupti: load BPF: %s", strerror(-err));
		if (err == -EPERM || err == -EACCES)
			err = -ENOTSUP;
		goto out_free;
	}
	c->drain = ring_drain__start(bpf_map__fd(c->skel->maps.events), QUEUE_BYTES,
				     event_used, queue_lost, c);
	if (!c->drain) {
		err = -errno;
		goto out_free;
	}
	c->work = winwork__start(c->skel->progs.on_window, GPUSCOPE_CUPTI_PROVIDER);
	if (!c->work) {
		err = -errno;
		goto out_free;
	}
	attach_known_paths(c);
	err = procs__acquire(a, on_tracked, c);
	if (err)
		goto out_free;
	c->tracking = true;
	cupti_scan_procs(c);
	c->next_scan_ns = mono_ns() + SCAN_EVERY_NS;
	bpf_counters__set(GPUSCOPE_PROG_CUPTI, bpf_map__fd(c->skel->maps.errors));
	cupti_live = c;
	cupti_backward_hook(a, true);
	return 0;
out_free:
	cupti_free(c);
	return err;
}

static int cupti_tick(struct agent *a)
{
	struct cupti_state *c = cupti_live;
	uint64_t now = mono_ns();

	if (!c)
		return 0;
	cupti_win_reap(c);	/* before the ring: an OPENED then finds its window attached */
	drain(c, false);
	procs__tick();	/* cheap when nothing is due (sched ticks it too) */
	if (now >= c->next_scan_ns) {
		cupti_scan_procs(c);
		reap_procs(c);
		c->next_scan_ns = now + SCAN_EVERY_NS;
	}
	cupti_control_windows(c);
	return 0;
}

/* How long stopping waits for open windows' CLOSED (their detaches included). */
#define STOP_WAIT_NS (5 * NSEC_PER_SEC)
/* After a detach that may have raced the library's OPENED: its control thread looks every 10 ms. */
#define STOP_OPEN_GRACE_NS (250 * NSEC_PER_MSEC)

static void cupti_stop(struct agent *a)
{
	struct cupti_state *c = cupti_live;
	uint64_t end;

	if (!c)
		return;
	c->stopping = true;	/* attaches reaped from now on are undone at once */
	winwork__cancel_attaches(c->work);
	for (end = mono_ns() + STOP_WAIT_NS; mono_ns() < end; usleep(25000)) {
		bool pending = false;

		cupti_win_reap(c);
		ring_drain__take(c->drain, cupti_handle_event, c);
		for (int i = 0; i < MAX_PROCS; i++) {
			struct proc *p = &c->procs[i];

			if (!p->pid || p->dead)
				continue;
			if (p->win == WIN_ASKED || p->win == WIN_OPEN)
				cupti_win_detach(c, p, mono_ns());
			/*
			 * A window the library opened: its CLOSED brings the records it flushed. One
			 * attached at stop may have been seen: its OPENED comes within the grace.
			 */
			pending |= p->win == WIN_ATTACHING ||
				   (p->win == WIN_CLOSING &&
				    (p->win_opened || p->job_busy ||
				     mono_ns() - p->asked_ns < STOP_OPEN_GRACE_NS));
		}
		if (!pending)
			break;
	}
	drain(c, true);
	bpf_counters__set(GPUSCOPE_PROG_CUPTI, -1);
	cupti_usdt__stats(&last_stats);
	cupti_backward_hook(a, false);
	cupti_live = NULL;
	cupti_free(c);	/* joins the switch thread; what it still attached is destroyed */
}

void cupti_usdt__stats(struct cupti_stats *ret)
{
	struct cupti_state *c = cupti_live;
	struct ring_drain_stats rs;

	*ret = last_stats;
	if (!c)
		return;
	*ret = c->st;
	ring_drain__stats(c->drain, &rs);
	ret->ring_wakeups = rs.wakeups;
	ret->queue_lost = rs.lost;
	ret->queue_lost_recs = __atomic_load_n(&c->queue_lost_recs, __ATOMIC_RELAXED);
	ret->queue_peak_bytes = rs.peak_bytes;
	ret->win_switch_pending = winwork__pending(c->work);
	winwork__max_ns(c->work, &ret->win_attach_max_ns, &ret->win_detach_max_ns);
	for (int i = 0; i < MAX_PROCS; i++) {
		ret->cupti_drops += c->procs[i].cupti_drops;
		ret->lib_drops += c->procs[i].lib_drops;
		ret->processes += c->procs[i].pid && !c->procs[i].dead;
	}
	for (__u32 k = GPUSCOPE_PROG_CUPTI * GPUSCOPE_PROG_RANGE;
	     k < (GPUSCOPE_PROG_CUPTI + 1) * GPUSCOPE_PROG_RANGE; k++)
		ret->bpf[k] = bpf_percpu_sum(bpf_map__fd(c->skel->maps.errors), k);
}

static void cupti_metrics(struct agent *a, FILE *out)
{
	struct cupti_stats s;

	cupti_usdt__stats(&s);
	const struct {
		const char *where;
		uint64_t n;
	} drops[] = {
		{ "cupti", s.cupti_drops },
		{ "library", s.lib_drops },
		{ "bpf_records", s.bpf[GPUSCOPE_CUPTI_ERR_RECS_LOST] },
		{ "bpf_events", s.bpf[GPUSCOPE_CUPTI_ERR_RINGBUF] },
		{ "no_clock", s.no_clock },
		{ "agent", s.agent_drops + s.busy_dropped + s.batch_errors + s.queue_lost_recs },
	};

	prom_counter(out, "gpuscope_agent_cupti_kernels_total", "Kernel activity records received.",
		     s.kernels);
	prom_counter(out, "gpuscope_agent_cupti_kernels_joined_total",
		     "Kernels joined with their launch stack.", s.joined);
	prom_counter(out, "gpuscope_agent_cupti_kernels_unjoined_total",
		     "Kernels without a launch stack (kept, leaf only).", s.unjoined);
	prom_counter(out, "gpuscope_agent_cupti_kernels_joined_late_total",
		     "Kernels joined although their record came before their launch (held one drain).",
		     s.joined_late);
	prom_counter(out, "gpuscope_agent_cupti_graph_kernels_total", "Kernels launched from CUDA graphs.",
		     s.graph_kernels);
	prom_counter(out, "gpuscope_agent_cupti_launches_total", "Launch probe events received.",
		     s.launches);
	prom_family(out, "gpuscope_agent_cupti_devices_total", "counter",
		    "CUDA devices of injected processes put on NVML's GPU by UUID (mapped), or left "
		    "under their CUDA ordinal (unmapped: NVML off or without that UUID).");
	prom_sample1_u64(out, "gpuscope_agent_cupti_devices_total", "result", "mapped",
			 s.devices_mapped);
	prom_sample1_u64(out, "gpuscope_agent_cupti_devices_total", "result", "unmapped",
			 s.devices_unmapped);
	prom_counter(out, "gpuscope_agent_cupti_ring_wakeups_total",
		     "Times the ring buffer woke its drain thread (its mark passed between ticks).",
		     s.ring_wakeups);
	prom_counter(out, "gpuscope_agent_cupti_queue_lost_events_total",
		     "Ring events (launches, record chunks) lost: the drain queue was full.",
		     s.queue_lost);
	prom_gauge(out, "gpuscope_agent_cupti_queue_peak_bytes",
		   "Most memory the drain queue held at once.", s.queue_peak_bytes);
	prom_family(out, "gpuscope_agent_cupti_records_total", "counter",
		    "Non-kernel activity records received, by kind.");
	prom_sample1_u64(out, "gpuscope_agent_cupti_records_total", "kind", "memcpy", s.memcpys);
	prom_sample1_u64(out, "gpuscope_agent_cupti_records_total", "kind", "memset", s.memsets);
	prom_sample1_u64(out, "gpuscope_agent_cupti_records_total", "kind", "sync", s.syncs);
	prom_gauge(out, "gpuscope_agent_cupti_processes", "Processes with the CUPTI library seen.",
		   s.processes);
	prom_gauge(out, "gpuscope_agent_cupti_libraries_attached", "CUPTI libraries with probes attached.",
		   s.libs_attached);
	prom_family(out, "gpuscope_agent_cupti_scan_maps_total", "counter",
		    "Processes' maps the library scans (every 2 s) read, and skipped: start time "
		    "and address-space size unchanged since a read that left nothing to do.");
	prom_sample1_u64(out, "gpuscope_agent_cupti_scan_maps_total", "result", "read",
			 s.scan_maps_read);
	prom_sample1_u64(out, "gpuscope_agent_cupti_scan_maps_total", "result", "skipped",
			 s.scan_maps_skipped);
	prom_family(out, "gpuscope_agent_cupti_drops_total", "counter", "Activity records lost, by where.");
	for (size_t i = 0; i < ARRAY_SIZE(drops); i++)
		prom_sample1_u64(out, "gpuscope_agent_cupti_drops_total", "where", drops[i].where,
				 drops[i].n);
	prom_counter(out, "gpuscope_agent_cupti_launches_evicted_total",
		     "Pending launches evicted before their kernel record came.", s.launches_evicted);
	prom_counter(out, "gpuscope_agent_cupti_launch_stacks_evicted_total",
		     "Kernel records whose launch was seen but whose stack was replaced by newer ones.",
		     s.stacks_evicted);
	prom_gauge(out, "gpuscope_agent_cupti_torch_libraries_attached",
		   "libtorch_cpu files whose autograd Engine::execute is probed (backward stacks).",
		   s.torch_attached);
	prom_counter(out, "gpuscope_agent_cupti_torch_attach_errors_total",
		     "libtorch_cpu files whose Engine::execute could not be found or probed.",
		     s.torch_attach_errors);
	prom_counter(out, "gpuscope_agent_cupti_backward_calls_total",
		     "Autograd Engine::execute entries seen (backward passes, autograd.grad).",
		     s.backwards);
	prom_counter(out, "gpuscope_agent_cupti_backward_stacks_walked_total",
		     "Backward calls whose caller's stack was walked.", s.backward_walks);
	prom_counter(out, "gpuscope_agent_cupti_backward_stacks_reused_total",
		     "Backward calls from the call site of their thread's last walked one (within "
		     "a second of it): that stack re-used, not walked again.", s.backward_reused);
	prom_counter(out, "gpuscope_agent_cupti_backward_stacks_reuse_lost_total",
		     "Backward calls sent as a repeat of a walk whose stack was not kept: no caller "
		     "stack for them (the thread's next call is walked).", s.backward_reuse_lost);
	prom_counter(out, "gpuscope_agent_cupti_backward_kernels_total",
		     "Kernels launched by autograd's threads, put under the stack that called backward.",
		     s.backward_kernels);
	prom_counter(out, "gpuscope_agent_cupti_backward_kernels_lost_total",
		     "Kernels launched by autograd's threads left under their own thread's stack: the "
		     "backward call's stack was not seen or was replaced.", s.backward_lost);
	prom_counter(out, "gpuscope_agent_cupti_kernels_python_caller_total",
		     "Kernels whose launch stack (or the backward call it was joined to) holds a "
		     "Python frame.", s.python_kernels);
	prom_counter(out, "gpuscope_agent_cupti_kernels_no_python_caller_total",
		     "Kernels of a Python process launched from a stack with no Python frame (a "
		     "framework's own thread) and not joined to a Python call: under that thread's "
		     "own stack.", s.no_python_kernels);
	prom_counter(out, "gpuscope_agent_cupti_unknown_names_total",
		     "Kernel records whose name index was not known.", s.unknown_names);
	prom_gauge(out, "gpuscope_agent_cupti_clock_max_step_seconds",
		   "Largest change of a process's CUPTI-to-monotonic clock offset.",
		   s.clock_max_step_ns / 1e9);
	prom_family(out, "gpuscope_agent_cupti_windows_total", "counter",
		    "Trace windows the library opened, by reason.");
	for (int r = TRACE_BUDGET; r < TRACE_REASONS; r++)
		prom_sample1_u64(out, "gpuscope_agent_cupti_windows_total", "reason", trace_reason_names[r],
				 s.windows_opened[r]);
	prom_family(out, "gpuscope_agent_cupti_windows_refused_total", "counter",
		    "Windows asked for and not traced, by why.");
	prom_sample1_u64(out, "gpuscope_agent_cupti_windows_refused_total", "why", "cupti_busy", s.win_busy);
	prom_sample1_u64(out, "gpuscope_agent_cupti_windows_refused_total", "why", "cupti_failed",
			 s.win_failed);
	prom_sample1_u64(out, "gpuscope_agent_cupti_windows_refused_total", "why", "no_status",
			 s.win_no_status);
	prom_sample1_u64(out, "gpuscope_agent_cupti_windows_refused_total", "why", "attach",
			 s.win_attach_errors);
	prom_sample1_u64(out, "gpuscope_agent_cupti_windows_refused_total", "why", "user_profiler",
			 s.win_user);
	prom_counter(out, "gpuscope_agent_cupti_windows_yielded_total",
		     "Windows closed to hand CUPTI over to a user's own CUPTI client (torch.profiler, "
		     "Nsight, its own code) that started while they were open.", s.win_yielded);
	prom_counter(out, "gpuscope_agent_cupti_windows_yielded_late_total",
		     "Of them, windows the library closed only after the client's call had gone on "
		     "(the hand-over took longer than the call may wait).", s.win_yield_late);
	prom_counter(out, "gpuscope_agent_cupti_user_profiler_released_total",
		     "Times a user's CUPTI client let go of CUPTI (windows may open again).",
		     s.user_released);
	{
		uint64_t polls = __atomic_load_n(&capture_counts[0], __ATOMIC_RELAXED);
		uint64_t errs = __atomic_load_n(&capture_counts[1], __ATOMIC_RELAXED);
		uint64_t answered = __atomic_load_n(&capture_counts[2], __ATOMIC_RELAXED);
		uint64_t refused = __atomic_load_n(&capture_counts[3], __ATOMIC_RELAXED);

		prom_counter(out, "gpuscope_agent_capture_polls_total",
			     "Asks for this node's capture requests.", polls);
		prom_counter(out, "gpuscope_agent_capture_poll_errors_total",
			     "Asks that failed (server down, TLS, auth).", errs);
		prom_counter(out, "gpuscope_agent_capture_answers_total",
			     "Capture requests answered to the server.", answered);
		prom_counter(out, "gpuscope_agent_capture_refused_total",
			     "Capture requests refused because the agent's queue was full.", refused);
	}
	prom_family(out, "gpuscope_agent_cupti_window_switch_max_seconds", "gauge",
		    "Longest attach and detach of a window probe (on the module's switch thread, "
		    "not the main loop).");
	prom_sample1(out, "gpuscope_agent_cupti_window_switch_max_seconds", "op", "attach",
		     s.win_attach_max_ns / 1e9);
	prom_sample1(out, "gpuscope_agent_cupti_window_switch_max_seconds", "op", "detach",
		     s.win_detach_max_ns / 1e9);
	prom_gauge(out, "gpuscope_agent_cupti_window_switches_pending",
		   "Window probe attaches and detaches posted to the switch thread and not done.",
		   s.win_switch_pending);
	prom_counter(out, "gpuscope_agent_cupti_windows_closed_early_total",
		     "Windows closed early: over their share of the budget.", s.win_early);
	prom_family(out, "gpuscope_agent_cupti_window_seconds_total", "counter", "Time traced in windows.");
	prom_sample(out, "gpuscope_agent_cupti_window_seconds_total", NULL, 0, s.win_traced_ns / 1e9);
	prom_family(out, "gpuscope_agent_cupti_window_cost_seconds_total", "counter",
		    "Estimated cost of the windows to their processes.");
	prom_sample(out, "gpuscope_agent_cupti_window_cost_seconds_total", NULL, 0, s.win_cost_ns / 1e9);
	prom_gauge(out, "gpuscope_agent_cupti_always_on_share_max",
		   "Largest share of a CUDA process's time the always-on driver probes and CPU sampler "
		   "were estimated to cost it; its windows' budget is --gpu-trace-budget less this.",
		   s.always_on_max);
}

const struct agent_module cupti_module = {
	.name = "cupti",
	.start = cupti_start,
	.tick = cupti_tick,
	.stop = cupti_stop,
	.metrics = cupti_metrics,
};
