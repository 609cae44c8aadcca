// SPDX-License-Identifier: Apache-2.0
/*
 * Thread states ("strips") and the off-CPU profile of tracked processes: loads sched.bpf.c,
 * keeps its `tracked` map in step with the process layer's tracker (procs/tracker.c), and turns
 * its events into `thread_state` intervals and offcpu_ns samples (blocked time weighted by the
 * stacks at the switch-out).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "agent/agent.h"
#include "agent/bpfutil.h"
#include "agent/modules.h"
#include "agent/labels.h"
#include "agent/procs/procfs.h"
#include "agent/procs/tracker.h"
#include "agent/sched/strips.h"
#include "agent/unwind/frames.h"
#include "common/abi.h"
#include "common/abi_strips.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"
#include "sched.skel.h"

#include "agent/sym/stacks.h"
#include "agent/unwind/unwind.h"
#include "agent/sym/symbolize.h"

#define STACKMAP_CLEAR_AT 12000		/* of 16384 stack-map entries: clear the map */
#define LS_CACHE	  1024		/* threads whose batch label set is remembered */
#define LS_DROPPED	  (-ENOENT)	/* a relabel rule drops the thread's records */
#define STACKMAP_CHECK_NS (60 * NSEC_PER_SEC)
#define CPU_STRS	  1024		/* CPUs whose number's string index is kept per batch */

/* The strings thread-state intervals repeat, interned once per batch (struct batch_strs) */
enum {
	STR_KIND,
	STR_BLOCKED_NS,
	STR_CPU,
	STR_REASON,
	STR_RUNNABLE_NS,
	STR_RUNNING_NS,
	STR_STATE,
	STR_SUMMARY,
	STR_ONE,
	STR_STATE0,				/* + enum gpuscope_ts up to BLOCKED: its name */
	STR_REASON0 = STR_STATE0 + GPUSCOPE_TS_BLOCKED + 1,	/* + enum blocked_reason */
	STR_N = STR_REASON0 + BLOCKED_MAX,
};

struct sched_state {
	struct sched_bpf *skel;
	struct ring_buffer *rb;
	struct agent *a;
	struct unwinder *uw;		/* user stacks from unwind_stacks; NULL: from `stacks` */
	uint64_t next_stackmap_check_ns;
	uint64_t stackmap_gen;		/* clears of `stacks` (check_stackmap()) */
	uint64_t drain_now;		/* drain_offcpu()'s sample time */
	uint64_t offcpu_walks, offcpu_skips;	/* drains by a walk of the map, by its queue alone */
	struct bstack_cache bsc;	/* blocked stacks by their map ids, per batch */
	/* counters for /metrics */
	uint64_t intervals, summaries, offcpu_samples, offcpu_agg, stack_lost, track_errors,
		stackmap_clears, proc_events, batch_errors, relabel_dropped;
	uint64_t reasons[BLOCKED_MAX];
	uint64_t ls_hits, ls_misses;
	/*
	 * Indices in the current batch (its id) of the strings of thread-state intervals, each
	 * interned at its first use in the batch (0: not yet; index 0 is ""): their kind, attribute
	 * names, states, reasons and CPU numbers, so that an interval interns nothing but a
	 * summary's three durations.
	 */
	struct batch_strs {
		uint64_t batch_id;
		uint32_t idx[STR_N];
		uint32_t cpu[CPU_STRS];
	} strs;
	/*
	 * A thread's label set in the current batch (batch__label_set()), so that its next events
	 * skip building and interning its labels: valid while the batch (its id), the thread and
	 * its name are the same; an exec of its process forgets it.
	 */
	struct {
		uint64_t batch_id;
		__u32 tgid, tid;
		char comm[GPUSCOPE_COMM_LEN];
		int64_t ls;		/* >= 0, or LS_DROPPED */
	} lsc[LS_CACHE];
};

static struct sched_state S;

static void on_tracked(pid_t pid, bool tracked, void *ctx)
{
	struct sched_state *s = ctx;
	__u32 key = pid;
	__u8 one = 1;
	int err;

	if (!s->skel)
		return;
	/* read its maps while it lives: stacks of a short-lived process resolve after its exit */
	if (tracked && s->a->sym)
		symbolizer__pid_seen(s->a->sym, pid);
	if (tracked && s->uw)	/* its unwind tables before its first blocked stack */
		unwinder__add_pid(s->uw, pid);
	if (tracked)
		err = bpf_map_update_elem(bpf_map__fd(s->skel->maps.tracked), &key, &one, BPF_ANY);
	else
		err = bpf_map_delete_elem(bpf_map__fd(s->skel->maps.tracked), &key);
	if (err && (tracked || errno != ENOENT) && !s->track_errors++)
		log_warn("sched: tracked map update for pid %d: %s", pid, strerror(errno));
}

/* Copies the frames of stack id into out (zero-terminated in the map). Returns the count. */
static int read_stack(int fd, __s32 id, __u64 *out)
{
	__u32 key = id;
	int n = 0;

	if (id < 0 || bpf_map_lookup_elem(fd, &key, out))
		return 0;
	while (n < GPUSCOPE_MAX_STACK && out[n])
		n++;
	return n;
}

/*
 * Symbolized stack id in the batch for the blocked stacks; -1 when unknown. Sets *ret_reason.
 * Remembered per batch by (process, stack ids, syscall, CUDA sync) while neither stack map has
 * been cleared since (struct bstack_cache): the ids then still name the same frames.
 */
static int64_t blocked_stack(struct sched_state *s, __u32 tgid, __u32 tid, __s32 kid, __s32 uid,
			     int sys, bool cuda_sync, enum blocked_reason *ret_reason)
{
	static __u64 kf[GPUSCOPE_MAX_STACK], uf[GPUSCOPE_MAX_STACK];
	int fd = bpf_map__fd(s->skel->maps.stacks);
	struct bstack_key key = { .tgid = tgid, .kstack_id = kid, .ustack_id = uid,
				  .syscall_nr = sys, .cuda_sync = cuda_sync };
	uint64_t batch_id = batch__id(s->a->batch);
	uint64_t ugen = s->uw ? unwinder__stacks_gen(s->uw) : 0;	/* before the reads */
	const struct sym_stack *st;
	struct bstack_val v;
	int nk, nu;
	int64_t id = -1;

	if (bstack_cache__get(&s->bsc, &key, batch_id, s->stackmap_gen, ugen, mono_ns(), &v)) {
		*ret_reason = v.reason;
		s->reasons[v.reason]++;
		return v.stack;
	}
	nk = read_stack(fd, kid, kf);
	if (uid == GPUSCOPE_USTACK_NOT_WALKED) {	/* past the thread's walk budget */
		uf[0] = GPUSCOPE_FRAME_NOT_WALKED_BUSY;
		nu = 1;
	} else {
		nu = s->uw ? unwinder__read_stack(s->uw, uid, uf) : read_stack(fd, uid, uf);
	}

	*ret_reason = blocked__classify(kf, nk, sys, cuda_sync);
	s->reasons[*ret_reason]++;
	if (!nk && !nu) {
		s->stack_lost++;
		return -1;
	}
	/* an autograd thread blocked inside a task goes under the backward call it works for */
	id = agent__thread_stack(s->a, tgid, tid, kf, nk, uf, nu);
	if (id < 0) {
		s->stack_lost++;
		return id;
	}
	/*
	 * Not remembered: a stack an id no longer held (cleared: the entry would say "lost"), an
	 * autograd worker's (it goes under whichever backward call runs now).
	 */
	if ((kid >= 0 && !nk) || (uid >= 0 && !nu))
		return id;
	st = stack_cache__get(s->a->stacks, tgid, kf, nk, uf, nu);	/* a hit: just made */
	if (!st || st->engine_at >= 0)
		return id;
	v = (struct bstack_val){ .stack = id, .reason = *ret_reason };
	/* a stack with unresolved frames is symbolized again once STACK_RETRY_NS old */
	bstack_cache__put(&s->bsc, &key, batch_id, s->stackmap_gen, ugen,
			  st->nunknown ? st->resolved_ns + STACK_RETRY_NS : 0, &v);
	return id;
}

static const char *state_name(int st)
{
	switch (st) {
	case GPUSCOPE_TS_RUNNING:
		return "running";
	case GPUSCOPE_TS_RUNNABLE:
		return "runnable";
	case GPUSCOPE_TS_BLOCKED:
		return "blocked";
	}
	return "unknown";
}

/* The batch string index of STR_* k (struct batch_strs); >= 0 or -errno. */
static int64_t str(struct sched_state *s, int k)
{
	static const char *const names[STR_STATE0] = {
		[STR_KIND] = "thread_state",	     [STR_BLOCKED_NS] = "blocked_ns",
		[STR_CPU] = "cpu",		     [STR_REASON] = "reason",
		[STR_RUNNABLE_NS] = "runnable_ns", [STR_RUNNING_NS] = "running_ns",
		[STR_STATE] = "state",		     [STR_SUMMARY] = "summary",
		[STR_ONE] = "1",
	};
	int64_t i;

	if (s->strs.idx[k])
		return s->strs.idx[k];
	i = batch__string(s->a->batch, k < STR_STATE0  ? names[k] :
				       k < STR_REASON0 ? state_name(k - STR_STATE0) :
							 blocked_reason_name(k - STR_REASON0));
	if (i > 0)
		s->strs.idx[k] = (uint32_t)i;
	return i;
}

/* The batch string index of the decimal number v; a CPU's is remembered. >= 0 or -errno. */
static int64_t num_str(struct sched_state *s, uint64_t v, bool is_cpu)
{
	char buf[24], *p = buf + sizeof(buf) - 1;
	bool keep = is_cpu && v < CPU_STRS;
	uint64_t n = v;
	int64_t i;

	if (keep && s->strs.cpu[v])
		return s->strs.cpu[v];
	*p = 0;
	do
		*--p = (char)('0' + n % 10);
	while (n /= 10);
	i = batch__string(s->a->batch, p);
	if (i > 0 && keep)
		s->strs.cpu[v] = (uint32_t)i;
	return i;
}

/* STR_STATE0 + st: a state's name (state_name()) */
static int state_str(int st)
{
	return STR_STATE0 +
	       (st >= GPUSCOPE_TS_RUNNING && st <= GPUSCOPE_TS_BLOCKED ? st : GPUSCOPE_TS_UNKNOWN);
}

/*
 * The batch label set of thread tid of process tgid named thread: remembered from its last
 * event in this batch, else built (agent__tracked_labels()) and interned once. LS_DROPPED when a
 * relabel rule drops it; another -errno when the batch refuses it.
 */
static int64_t thread_ls(struct sched_state *s, __u32 tgid, __u32 tid, const char *thread)
{
	uint64_t id = batch__id(s->a->batch);
	unsigned k = (unsigned)((tid * 0x9e3779b1u) >> 22) % LS_CACHE;
	struct agent_labels L;
	int64_t ls;

	if (s->lsc[k].batch_id == id && s->lsc[k].tid == tid && s->lsc[k].tgid == tgid &&
	    !strncmp(s->lsc[k].comm, thread, GPUSCOPE_COMM_LEN)) {
		s->ls_hits++;
		return s->lsc[k].ls;
	}
	s->ls_misses++;
	if (agent__tracked_labels(s->a, tgid, tid, thread, &L) == LABELS_DROPPED)
		ls = LS_DROPPED;
	else if ((ls = batch__label_set(s->a->batch, L.l, L.n)) < 0)
		return ls;	/* the batch is full: not remembered */
	s->lsc[k].batch_id = id;
	s->lsc[k].tgid = tgid;
	s->lsc[k].tid = tid;
	memset(s->lsc[k].comm, 0, GPUSCOPE_COMM_LEN);
	memcpy(s->lsc[k].comm, thread, strnlen(thread, GPUSCOPE_COMM_LEN));
	s->lsc[k].ls = ls;
	return ls;
}

/* An exec: the process's threads' labels (comm, program, cmdline) are built again. */
static void ls_forget(struct sched_state *s, __u32 tgid)
{
	for (unsigned k = 0; k < LS_CACHE; k++)
		if (s->lsc[k].tgid == tgid)
			s->lsc[k].batch_id = 0;
}

static void thread_state(struct sched_state *s, const struct gpuscope_ev_thread_state *ev)
{
	struct agent *a = s->a;
	char thread[GPUSCOPE_COMM_LEN + 1];
	int64_t stack = -1;	/* BLOCKED: the stack at the switch-out */
	int64_t ls, kind;
	int64_t p[2 * 5];	/* (name, value) string indices, by name (batch__interval_idx()) */
	uint32_t attrs[2 * 5];
	size_t na = 0;
	uint64_t start = ev->start_ns + a->mono_to_wall_ns, end = ev->end_ns + a->mono_to_wall_ns;
	int st = ev->state;
	int err;

	memcpy(thread, ev->comm, GPUSCOPE_COMM_LEN);
	thread[GPUSCOPE_COMM_LEN] = 0;
	procfs_comm_seen(ev->tid, thread);
	ls = thread_ls(s, ev->tgid, ev->tid, thread);
	if (ls == LS_DROPPED) {
		s->relabel_dropped++;
		return;
	}
	if (ls < 0) {
		s->batch_errors++;
		return;
	}
	if (s->strs.batch_id != batch__id(a->batch)) {	/* a new batch: its strings anew */
		memset(&s->strs, 0, sizeof(s->strs));
		s->strs.batch_id = batch__id(a->batch);
	}
#define ATTR(name, value) (p[2 * na] = (name), p[2 * na + 1] = (value), na++)
	if (st == GPUSCOPE_TS_SUMMARY) {
		/* several short states: named after the one that took most of the time */
		st = GPUSCOPE_TS_RUNNING;
		if (ev->runnable_ns > ev->run_ns && ev->runnable_ns >= ev->blocked_ns)
			st = GPUSCOPE_TS_RUNNABLE;
		else if (ev->blocked_ns > ev->run_ns && ev->blocked_ns > ev->runnable_ns)
			st = GPUSCOPE_TS_BLOCKED;
		ATTR(str(s, STR_BLOCKED_NS), num_str(s, ev->blocked_ns, false));
		ATTR(str(s, STR_RUNNABLE_NS), num_str(s, ev->runnable_ns, false));
		ATTR(str(s, STR_RUNNING_NS), num_str(s, ev->run_ns, false));
		ATTR(str(s, STR_STATE), str(s, state_str(st)));
		ATTR(str(s, STR_SUMMARY), str(s, STR_ONE));
		s->summaries++;
	} else if (st == GPUSCOPE_TS_RUNNING) {
		ATTR(str(s, STR_CPU), num_str(s, ev->cpu, true));
		ATTR(str(s, STR_STATE), str(s, state_str(st)));
	} else if (st == GPUSCOPE_TS_BLOCKED) {
		enum blocked_reason r;
		int64_t id = blocked_stack(s, ev->tgid, ev->tid, ev->kstack_id, ev->ustack_id,
					   ev->syscall_nr, ev->flags & GPUSCOPE_TSF_CUDA_SYNC, &r);

		ATTR(str(s, STR_REASON), str(s, STR_REASON0 + (r < BLOCKED_MAX ? r : BLOCKED_OTHER)));
		ATTR(str(s, STR_STATE), str(s, state_str(st)));
		if (id >= 0) {
			stack = id;
			err = batch__sample_ls(a->batch, end, ls, id, SAMPLE_OFFCPU_NS,
					       (int64_t)(ev->end_ns - ev->start_ns));
			if (err)
				s->batch_errors++;
			else
				s->offcpu_samples++;
		}
	} else {
		ATTR(str(s, STR_STATE), str(s, state_str(st)));
	}
#undef ATTR
	kind = str(s, STR_KIND);
	err = kind < 0 ? (int)kind : 0;
	for (size_t k = 0; k < 2 * na; k++) {
		if (p[k] < 0)
			err = (int)p[k];	/* the batch is full */
		attrs[k] = (uint32_t)p[k];
	}
	if (!err)
		err = batch__interval_idx(a->batch, (uint32_t)kind, ls, start, end, stack, attrs, na);
	if (err)
		s->batch_errors++;
	else
		s->intervals++;
}

/* A process exec'd: its new name (and what the label builder cached) from now on. */
static void sched_exec(struct sched_state *s, const struct gpuscope_ev_strips_proc *p)
{
	char comm[GPUSCOPE_COMM_LEN + 1];

	memcpy(comm, p->comm, GPUSCOPE_COMM_LEN);
	comm[GPUSCOPE_COMM_LEN] = 0;
	agent__pid_exec(s->a, p->pid, comm);
	procs__hint_exec(p->pid);
	ls_forget(s, p->pid);
	bstack_cache__forget_pid(&s->bsc, p->pid);
}

static int on_event(void *ctx, void *data, size_t len)
{
	struct sched_state *s = ctx;
	const struct gpuscope_ev_hdr *h = data;

	if (len < sizeof(*h))
		return 0;
	switch (h->type) {
	case GPUSCOPE_EV_THREAD_STATE:
		if (len >= sizeof(struct gpuscope_ev_thread_state))
			thread_state(s, data);
		break;
	case GPUSCOPE_EV_PROC: {
		const struct gpuscope_ev_strips_proc *p = data;

		if (len < sizeof(*p))
			break;
		s->proc_events++;
		if (p->what == GPUSCOPE_PROC_OPEN_GPU)
			procs__hint_open(p->pid);
		else if (p->what == GPUSCOPE_PROC_EXEC)
			sched_exec(s, p);
		else if (p->what == GPUSCOPE_PROC_FORK)
			procs__hint_fork(p->pid, p->ppid);
		else if (p->what == GPUSCOPE_PROC_EXIT)
			procs__hint_exit(p->pid);
		break;
	}
	}
	return 0;
}

/* One key of the off-CPU map with its sums: one offcpu_ns sample (bpf_keyq_drain()). */
static void offcpu_one(void *ctx, const void *key, const void *val)
{
	struct sched_state *s = ctx;
	const struct gpuscope_offcpu_key *k = key;
	const struct gpuscope_offcpu_val *v = val;
	struct agent_labels L;
	enum blocked_reason r;
	int64_t id;

	id = blocked_stack(s, k->tgid, k->tid, k->kstack_id, k->ustack_id, k->syscall_nr,
			   k->flags & GPUSCOPE_TSF_CUDA_SYNC, &r);
	if (id < 0)
		return;
	if (agent__tracked_labels(s->a, k->tgid, k->tid, NULL, &L) == LABELS_DROPPED) {
		s->relabel_dropped++;
		return;
	}
	if (batch__sample(s->a->batch, s->drain_now, L.l, L.n, id, SAMPLE_OFFCPU_NS, (int64_t)v->ns))
		s->batch_errors++;
	else
		s->offcpu_agg++;
}

/*
 * Short blocked intervals summed in the kernel: one offcpu_ns sample per (thread, stack), from
 * the keys the program queued as it added them (no walk over the map's 16 384 buckets; a walk
 * only when the queue missed a key), at most 4096 a tick.
 */
static void drain_offcpu(struct sched_state *s)
{
	bool walked;

	s->drain_now = wall_ns();
	bpf_keyq_drain(bpf_map__fd(s->skel->maps.offcpu), bpf_map__fd(s->skel->maps.offcpu_new),
		       &s->skel->bss->offcpu_keys_lost, sizeof(struct gpuscope_offcpu_key),
		       sizeof(struct gpuscope_offcpu_val), 4096, offcpu_one, s, &walked);
	if (walked)
		s->offcpu_walks++;
	else
		s->offcpu_skips++;
}

/*
 * The stack map only grows (ids are hash buckets; a taken bucket makes bpf_get_stackid fail
 * with -EEXIST). Clear it when it gets full; stacks of threads blocked right now are lost then
 * (counted as stack_lost).
 */
static void check_stackmap(struct sched_state *s)
{
	int fd = bpf_map__fd(s->skel->maps.stacks);
	__u32 key, next, *prev = NULL, n = 0;

	while (!bpf_map_get_next_key(fd, prev, &next)) {
		n++;
		key = next;
		prev = &key;
	}
	if (n < STACKMAP_CLEAR_AT)
		return;
	prev = NULL;
	s->stackmap_gen++;	/* ids from now on may name other frames */
	/* odd while clearing: the programs re-use no thread's last kernel stack id meanwhile */
	__atomic_fetch_add(&s->skel->bss->kstack_gen, 1, __ATOMIC_SEQ_CST);
	while (!bpf_map_get_next_key(fd, NULL, &next))
		bpf_map_delete_elem(fd, &next);
	__atomic_fetch_add(&s->skel->bss->kstack_gen, 1, __ATOMIC_SEQ_CST);
	s->stackmap_clears++;
	log_debug("sched: stack map had %u entries: cleared", n);
}

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG && gpuscope_log_level < LOG_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

/* The kernel's wait functions (blocked.c), read on a thread of their own at start. */
struct blocked_job {
	pthread_t th;
	bool started;
	int err;
};

static void *blocked_job_run(void *arg)
{
	struct blocked_job *j = arg;

	j->err = blocked__init();
	return NULL;
}

/* Returns blocked__init()'s result; undone by blocked__done() when 0. */
static int blocked_job_wait(struct blocked_job *j)
{
	if (j->started)
		pthread_join(j->th, NULL);
	j->started = false;
	return j->err;
}

static int sched_start(struct agent *a)
{
	struct blocked_job bj = { 0 };
	struct sched_bpf *skel;
	int err;

	memset(&S, 0, sizeof(S));
	S.a = a;
	/*
	 * /proc/kallsyms (120k lines) is read beside the BPF load and the /proc scan: on a loaded
	 * 2-core machine each took 0.1-0.4 s, mostly waiting for a CPU.
	 */
	bj.started = !pthread_create(&bj.th, NULL, blocked_job_run, &bj);
	if (!bj.started)
		bj.err = blocked__init();
	libbpf_set_print(libbpf_quiet);
	skel = sched_bpf__open();
	if (!skel) {
		err = -errno;
		if (!blocked_job_wait(&bj))
			blocked__done();
		return err;
	}
	skel->rodata->track_all = a->opts.all_processes;
	if (a->opts.strip_event_rate >= 0)	/* else the program's default (250 a second) */
		skel->rodata->state_event_ns = a->opts.strip_event_rate ?
			NSEC_PER_SEC / (uint64_t)a->opts.strip_event_rate : 0;
	/* for benchmarks: 0 walks every allowed switch-out's user stack, and every blocking
	 * switch-out's kernel stack (as before the re-use) */
	bpf_env_ms("GPUSCOPE_SCHED_USTACK_REUSE_MS", &skel->rodata->ustack_reuse_ns);
	bpf_env_ms("GPUSCOPE_SCHED_KSTACK_REUSE_MS", &skel->rodata->kstack_reuse_ns);
	if (a->opts.offcpu_walk_share >= 0)	/* else the program's default (0.1 %) */
		skel->rodata->walk_share_ppm = (__u64)(a->opts.offcpu_walk_share * 1e6 + 0.5);
	/* shared with cuda_probe's programs, which set it (run.c made it) */
	if (a->shared.in_sync_map_fd > 0) {
		err = bpf_map__reuse_fd(skel->maps.in_sync, a->shared.in_sync_map_fd);
		if (err)
			goto out_destroy;
	}
	S.uw = agent__unwinder(a);
	if (S.uw) {
		err = unwinder__prepare(S.uw, skel->obj);
		if (err)
			goto out_destroy;
		skel->rodata->use_unwinder = true;
	}
	/* needs tracefs; without it the tracker (procs/tracker.c) finds new GPU processes by its
	 * periodic scans */
	bpf_program__set_autoattach(skel->progs.on_openat, false);
	err = sched_bpf__load(skel);
	if (err) {
		err = bpf_load_error("sched", err);
		goto out_destroy;
	}
	err = sched_bpf__attach(skel);
	if (err)
		goto out_destroy;
	if (!access("/sys/kernel/tracing/events/syscalls/sys_enter_openat", F_OK) ||
	    !access("/sys/kernel/debug/tracing/events/syscalls/sys_enter_openat", F_OK))
		skel->links.on_openat = bpf_program__attach(skel->progs.on_openat);
	if (!skel->links.on_openat)
		log_debug("sched: no syscalls/sys_enter_openat tracepoint (%s): discovery by scans",
			  strerror(errno));
	S.rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_event, &S, NULL);
	if (!S.rb) {
		err = -errno;
		goto out_destroy;
	}
	S.skel = skel;
	bpf_counters__set(GPUSCOPE_PROG_SCHED, bpf_map__fd(skel->maps.errors));
	err = procs__acquire(a, on_tracked, &S);
	if (err)
		goto out_rb;
	err = blocked_job_wait(&bj);
	if (err)
		log_warn("sched: /proc/kallsyms: %s: blocked reasons from syscalls only",
			 strerror(-err));
	if (a->sym && blocked__some_kernel_address()) {
		struct sym_frame f;

		/* loads the kernel symbols now rather than in the first tick */
		symbolizer__kernel(a->sym, blocked__some_kernel_address(), &f);
	}
	S.next_stackmap_check_ns = mono_ns() + STACKMAP_CHECK_NS;
	return 0;
out_rb:
	bpf_counters__set(GPUSCOPE_PROG_SCHED, -1);
	ring_buffer__free(S.rb);
	S.rb = NULL;
	S.skel = NULL;
out_destroy:
	if (!blocked_job_wait(&bj))
		blocked__done();
	sched_bpf__destroy(skel);
	return err;
}

static int sched_tick(struct agent *a)
{
	int err;

	if (!S.skel)
		return 0;
	err = ring_buffer__consume(S.rb);
	if (err < 0)
		return err;
	procs__tick();
	drain_offcpu(&S);
	if (mono_ns() >= S.next_stackmap_check_ns) {
		check_stackmap(&S);
		S.next_stackmap_check_ns = mono_ns() + STACKMAP_CHECK_NS;
	}
	return 0;
}

/* Emits the open state of every followed thread up to now, so nothing waits for a next event. */
static void close_open_states(struct sched_state *s)
{
	int fd = bpf_map__fd(s->skel->maps.threads);
	__u32 key, next, *prev = NULL;
	uint64_t now = mono_ns();
	struct gpuscope_sched_thr t;

	if (bpf_map__value_size(s->skel->maps.threads) != sizeof(t)) {	/* one header: never */
		log_error("sched: threads map value is %u bytes, struct gpuscope_sched_thr %zu",
			  bpf_map__value_size(s->skel->maps.threads), sizeof(t));
		return;
	}
	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, &t))
			continue;
		if (t.agg_start_ns) {
			struct gpuscope_ev_thread_state ev = {
				.start_ns = t.agg_start_ns, .end_ns = t.agg_end_ns,
				.run_ns = t.agg_ns[0], .runnable_ns = t.agg_ns[1],
				.blocked_ns = t.agg_ns[2], .tgid = t.tgid, .tid = key,
				.state = GPUSCOPE_TS_SUMMARY, .flags = GPUSCOPE_TSF_FINAL,
			};
			memcpy(ev.comm, t.comm, sizeof(ev.comm));
			thread_state(s, &ev);
		}
		if (t.state >= GPUSCOPE_TS_RUNNING && t.state <= GPUSCOPE_TS_BLOCKED &&
		    t.since_ns < now) {
			struct gpuscope_ev_thread_state ev = {
				.start_ns = t.since_ns, .end_ns = now, .tgid = t.tgid, .tid = key,
				.cpu = t.cpu, .kstack_id = t.kstack_id, .ustack_id = t.ustack_id,
				.syscall_nr = t.syscall_nr, .state = t.state,
				.flags = GPUSCOPE_TSF_FINAL | t.flags,
			};
			memcpy(ev.comm, t.comm, sizeof(ev.comm));
			thread_state(s, &ev);
		}
	}
}

static void sched_stop(struct agent *a)
{
	if (!S.skel)
		return;
	ring_buffer__consume(S.rb);
	drain_offcpu(&S);
	close_open_states(&S);
	procs__release(on_tracked, &S);
	blocked__done();
	bpf_counters__set(GPUSCOPE_PROG_SCHED, -1);
	ring_buffer__free(S.rb);
	sched_bpf__destroy(S.skel);
	S.rb = NULL;
	S.skel = NULL;
}

static void sched_metrics(struct agent *a, FILE *out)
{
	struct procs_stats ps;
	uint64_t followed = 0;

	if (!S.skel)
		return;
	procs__stats(&ps);
	prom_counter(out, "gpuscope_agent_sched_switches_total",
		     "Context switches of followed threads seen in BPF.",
		     bpf_percpu_sum(bpf_map__fd(S.skel->maps.errors),
				    GPUSCOPE_SERR_SWITCHES));
	prom_counter(out, "gpuscope_agent_sched_events_total",
		     "Thread-state events the BPF program emitted.",
		     bpf_percpu_sum(bpf_map__fd(S.skel->maps.errors),
				    GPUSCOPE_SERR_EMITTED));
	prom_counter(out, "gpuscope_agent_sched_stacks_not_walked_total",
		     "Switch-outs whose user stack was not walked: the thread, or its process, had "
		     "spent its share of time for walks (--offcpu-walk-share; shown as [stack not "
		     "walked: thread blocks often]).",
		     bpf_percpu_sum(bpf_map__fd(S.skel->maps.errors), GPUSCOPE_SERR_NOT_WALKED));
	prom_family(out, "gpuscope_agent_sched_stack_walk_seconds_total", "counter",
		    "Time the switch-out user stack walks took (within --offcpu-walk-share of each "
		    "process's time, and of each thread's).");
	prom_sample(out, "gpuscope_agent_sched_stack_walk_seconds_total", NULL, 0,
		    (double)bpf_percpu_sum(bpf_map__fd(S.skel->maps.errors),
					   GPUSCOPE_SERR_WALK_NS) / 1e9);
	{
		int fd = bpf_map__fd(S.skel->maps.threads);
		__u32 key, next, *prev = NULL;

		while (!bpf_map_get_next_key(fd, prev, &next) && followed < 1000000) {
			key = next;
			prev = &key;
			followed++;
		}
	}
	prom_gauge(out, "gpuscope_agent_sched_threads_followed",
		   "Threads in the BPF thread-state map.", followed);
	prom_counter(out, "gpuscope_agent_sched_intervals_total",
		     "Thread-state intervals added to batches.", S.intervals);
	prom_counter(out, "gpuscope_agent_sched_summaries_total",
		     "Summary intervals (short states folded) added to batches.", S.summaries);
	prom_counter(out, "gpuscope_agent_sched_offcpu_samples_total",
		     "Off-CPU samples added to batches.", S.offcpu_samples + S.offcpu_agg);
	prom_counter(out, "gpuscope_agent_sched_stack_lost_total",
		     "Blocked intervals whose stack was gone from the stack map.", S.stack_lost);
	prom_counter(out, "gpuscope_agent_sched_stackmap_clears_total",
		     "Times the BPF stack map was cleared.", S.stackmap_clears);
	prom_counter(out, "gpuscope_agent_sched_batch_errors_total",
		     "Records that could not be added to the batch.", S.batch_errors);
	prom_family(out, "gpuscope_agent_sched_label_sets_total", "counter",
		    "Thread-state events whose thread's label set was remembered from its last event "
		    "in the batch (hit), or built and interned (miss).");
	prom_sample1_u64(out, "gpuscope_agent_sched_label_sets_total", "result", "hit", S.ls_hits);
	prom_sample1_u64(out, "gpuscope_agent_sched_label_sets_total", "result", "miss",
			 S.ls_misses);
	prom_counter(out, "gpuscope_agent_sched_relabel_dropped_total",
		     "Records not sent because a relabel rule dropped the process.",
		     S.relabel_dropped);
	prom_family(out, "gpuscope_agent_sched_offcpu_walks_total", "counter",
		    "Drains of the off-CPU map by a walk of it (walked: its key queue missed a key) "
		    "or by the queue of the keys the BPF program added alone (skipped).");
	prom_sample1_u64(out, "gpuscope_agent_sched_offcpu_walks_total", "result", "walked",
			 S.offcpu_walks);
	prom_sample1_u64(out, "gpuscope_agent_sched_offcpu_walks_total", "result", "skipped",
			 S.offcpu_skips);
	prom_family(out, "gpuscope_agent_sched_blocked_stacks_total", "counter",
		    "Blocked stacks found in this batch by their stack-map ids (hit), or read from "
		    "the maps and symbolized (miss).");
	prom_sample1_u64(out, "gpuscope_agent_sched_blocked_stacks_total", "result", "hit",
			 S.bsc.hits);
	prom_sample1_u64(out, "gpuscope_agent_sched_blocked_stacks_total", "result", "miss",
			 S.bsc.misses);
	prom_family(out, "gpuscope_agent_sched_blocked_total", "counter",
		    "Blocked intervals, by reason.");
	for (int r = 0; r < BLOCKED_MAX; r++)
		prom_sample1_u64(out, "gpuscope_agent_sched_blocked_total", "reason",
				 blocked_reason_name(r), S.reasons[r]);
	prom_gauge(out, "gpuscope_agent_procs_tracked", "Processes whose threads are followed.",
		   ps.tracked);
	prom_counter(out, "gpuscope_agent_procs_overflow_total",
		     "Processes not followed because the table was full.", ps.overflow);
	prom_counter(out, "gpuscope_agent_procs_scans_total", "Scans of /proc for GPU processes.",
		     ps.scans);
}

const struct agent_module sched_module = {
	.name = "sched",
	.start = sched_start,
	.tick = sched_tick,
	.stop = sched_stop,
	.metrics = sched_metrics,
};
