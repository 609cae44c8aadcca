// SPDX-License-Identifier: GPL-2.0
/*
 * Thread states of tracked processes from the scheduler: a per-thread state machine on
 * sched_switch / sched_waking / sched_wakeup_new / sched_process_exit that emits one event per
 * running / runnable / blocked interval at least min_interval_ns long and folds shorter ones into
 * summary intervals. Blocked intervals carry the stacks at the switch-out; short ones are summed
 * per stack in the `offcpu` map. Also reports exec/fork/exit and opens of libcuda or /dev/nvidia*
 * by untracked processes, for discovery.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "agent/gpuscope.bpf.h"
#include "common/abi_strips.h"
#include "agent/unwind/unwind.bpf.h"
#include "agent/unwind/callsite.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define TASK_RUNNING 0x0
#define TASK_DEAD    0x80
#define PF_EXITING   0x4	/* task_struct.flags: set by exit_signals(), early in do_exit() */

const volatile bool track_all = false;		/* every process, not only `tracked` tgids */
const volatile __u64 min_interval_ns = 1000000;	/* shorter intervals go into summaries */
const volatile __u64 max_summary_ns = 20000000;	/* a summary is flushed once it spans this */
const volatile bool want_stacks = true;
const volatile bool use_unwinder = false;	/* user stacks by unwind.bpf.h (unwind_stacks ids) */
/*
 * A switch-out's user stack walk (4-30 us with the unwinder, deeper Python stacks costing more)
 * is budgeted per thread in time: the thread earns walk_share_ppm of its elapsed time as walk
 * credit, at most walk_burst_ns saved, and each walk spends what it took. A thread that blocks
 * seldom (every thread with long blocks) has every stack walked; one that blocks thousands of
 * times a second (a spin-then-sleep lock, a busy queue) has the rest marked
 * GPUSCOPE_USTACK_NOT_WALKED, so the walks cost no thread more than its share (plus the burst).
 * The process's threads together earn the same share of the wall time (proc_walks): a process
 * whose many threads block often (a PyTorch process: its main, autograd, pin-memory and
 * DataLoader-feeding threads) costs at most that share of a core, not that share per thread.
 * Past the process's share, a thread that spends less than it earns (its credit at least half
 * the burst) walks on its own credit alone, so the threads that block often cannot starve one
 * that blocks seldom: they share the process's credit, the seldom ones keep their own.
 * walk_share_ppm 0: every switch-out walked.
 */
const volatile __u64 walk_share_ppm = 1000;	/* 0.1 % of the thread's time */
const volatile __s64 walk_burst_ns = 5000000;
/* the keys added to `offcpu`, for user space to drain it by (gpuscope.bpf.h) */
__u32 offcpu_keys_lost = 0;
/*
 * A blocking switch-out's kernel stack (bpf_get_stackid: ~2 us of the ~2.5 us on_switch took
 * here, the unwinding of 15-25 kernel frames) is taken again only when the thread blocks
 * somewhere else: a thread that blocks in the same syscall, from the same user instruction,
 * with the same first argument (the fd, the futex word, the poll set) and the same sleep state
 * as one of its last GPUSCOPE_KSIGS walked switch-outs (at different places: a training loop's
 * thread blocks at two or three) less than kstack_reuse_ns ago gets that switch-out's stack id
 * (GPUSCOPE_SERR_KSTACK_SAME). Blocks outside a syscall (page faults, kernel threads) are always
 * walked. User space bumps kstack_gen around each clear of `stacks` (odd while it runs): an id
 * from another generation may name other frames, so it is never re-used. 0: every switch-out
 * walked.
 */
const volatile __u64 kstack_reuse_ns = 250000000;
/*
 * The user stack likewise (with the unwinder): a walk allowed by the budget first takes the
 * thread's call site (sp, frame pointer, [sp], 8 frame-pointer pairs, 64 Python frames: the
 * signature of unwind/callsite.bpf.h, 1-5 us against 4-30 for the walk), and a site one of its
 * last GPUSCOPE_USIGS walks came from less than ustack_reuse_ns ago gets that walk's stack
 * (GPUSCOPE_SERR_USTACK_SAME). The budget is charged what was spent, so it covers more
 * switch-outs. 0: every allowed switch-out walked.
 */
const volatile __u64 ustack_reuse_ns = 250000000;
/*
 * The events a thread's states make are budgeted: each event costs state_event_ns of a credit
 * that grows with the thread's time, at most state_burst_ns saved (default: 250 events a second,
 * a burst of 62). A thread over its budget (one that changes state thousands of times a second:
 * a loader polling every millisecond) has its states shorter than max_summary_ns folded into
 * summary intervals as if they were short, until it has saved up half the burst again. States
 * blocked in a CUDA synchronize call are never folded (what the GPU-idle analyses look for),
 * nor states of max_summary_ns or more. 0: every state of min_interval_ns or more is an event.
 */
const volatile __u64 state_event_ns = 4000000;
const volatile __s64 state_burst_ns = 250000000;
__u64 kstack_gen = 0;

struct walk_credit {
	__s64 credit_ns;
	__u64 at_ns;
};

/* tgid -> the process's walk credit (LRU: gone processes age out). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct walk_credit);
} proc_walks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

/* tgid -> 1: processes whose threads are followed; filled by user space (and by fork below). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} tracked SEC(".maps");

/* tid -> 1 while the thread is inside a synchronizing CUDA call; written by cudaprobe.bpf.c. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} in_sync SEC(".maps");


struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);	/* tid */
	__type(value, struct gpuscope_sched_thr);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, GPUSCOPE_MAX_STACK * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct gpuscope_offcpu_key);
	__type(value, struct gpuscope_offcpu_val);
} offcpu SEC(".maps");
GPUSCOPE_KEYQ(offcpu_new, struct gpuscope_offcpu_key, 16384);

static __always_inline bool is_tracked(__u32 tgid)
{
	if (track_all)
		return tgid != 0;
	return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

static __always_inline void emit(struct gpuscope_sched_thr *t, struct gpuscope_ev_thread_state *ev)
{
	t->ev_credit_ns -= state_event_ns;
	ev->hdr.type = GPUSCOPE_EV_THREAD_STATE;
	ev->hdr.size = sizeof(*ev);
	if (bpf_ringbuf_output(&events, ev, sizeof(*ev), 0))
		count_err(GPUSCOPE_SERR_RINGBUF_FULL);
	else
		count_err(GPUSCOPE_SERR_EMITTED);
}

static __always_inline void flush_summary(struct gpuscope_sched_thr *t, __u32 tid, __u8 flags)
{
	struct gpuscope_ev_thread_state ev = {};

	if (!t->agg_start_ns)
		return;
	ev.start_ns = t->agg_start_ns;
	ev.end_ns = t->agg_end_ns;
	ev.run_ns = t->agg_ns[0];
	ev.runnable_ns = t->agg_ns[1];
	ev.blocked_ns = t->agg_ns[2];
	ev.tgid = t->tgid;
	ev.tid = tid;
	ev.cpu = t->cpu;
	ev.kstack_id = -1;
	ev.ustack_id = -1;
	ev.syscall_nr = -1;
	ev.state = GPUSCOPE_TS_SUMMARY;
	ev.flags = flags;
	__builtin_memcpy(ev.comm, t->comm, sizeof(ev.comm));
	emit(t, &ev);
	t->agg_start_ns = 0;
	t->agg_ns[0] = t->agg_ns[1] = t->agg_ns[2] = 0;
}

/*
 * Tops up a credit by ppm millionths of the time since its last top-up, at most burst saved (a
 * gap that fills the burst fills it: nothing overflows however long the gap). The thread's and
 * process's walk credits and the thread's event credit.
 */
static __always_inline void credit_topup(__s64 *credit, __u64 *at, __u64 now, __u64 ppm,
					 __s64 burst)
{
	__u64 gap, earned;

	if (now <= *at)
		return;
	gap = now - *at;
	earned = gap >= (__u64)burst * 1000000 / ppm ? (__u64)burst : gap * ppm / 1000000;
	*credit += (__s64)earned;
	if (*credit > burst)
		*credit = burst;
	*at = now;
}

/*
 * Whether a state of dur (at least min_interval_ns) is folded for the thread's event budget:
 * tops the credit up, and moves the thread into folding when it is spent and out of it when
 * half the burst is saved again.
 */
static __always_inline bool over_budget(struct gpuscope_sched_thr *t, __u8 st, __u64 dur, __u64 now)
{
	if (!state_event_ns || dur >= max_summary_ns ||
	    (st == GPUSCOPE_TS_BLOCKED && (t->flags & GPUSCOPE_TSF_CUDA_SYNC)))
		return false;
	credit_topup(&t->ev_credit_ns, &t->ev_at_ns, now, 1000000, state_burst_ns);
	if (t->folding && t->ev_credit_ns >= (state_burst_ns >> 1))
		t->folding = 0;
	else if (!t->folding && t->ev_credit_ns < 0)
		t->folding = 1;
	if (t->folding)
		count_err(GPUSCOPE_SERR_FOLDED_RATE);
	return t->folding;
}

/* Ends the thread's current state at now: one event, or folded into the summary. */
static __noinline void close_state(struct gpuscope_sched_thr *t, __u32 tid, __u64 now, __u8 flags)
{
	__u64 dur;
	__u8 st = t->state;

	if (st < GPUSCOPE_TS_RUNNING || st > GPUSCOPE_TS_BLOCKED || now <= t->since_ns)
		return;
	dur = now - t->since_ns;
	if ((dur >= min_interval_ns && !over_budget(t, st, dur, now)) || (flags & GPUSCOPE_TSF_FINAL)) {
		struct gpuscope_ev_thread_state ev = {};

		flush_summary(t, tid, 0);
		ev.start_ns = t->since_ns;
		ev.end_ns = now;
		ev.tgid = t->tgid;
		ev.tid = tid;
		ev.cpu = t->cpu;
		ev.kstack_id = t->kstack_id;
		ev.ustack_id = t->ustack_id;
		ev.syscall_nr = t->syscall_nr;
		ev.state = st;
		ev.flags = flags | (st == GPUSCOPE_TS_BLOCKED ? t->flags : 0);
		__builtin_memcpy(ev.comm, t->comm, sizeof(ev.comm));
		emit(t, &ev);
		return;
	}
	if (!t->agg_start_ns)
		t->agg_start_ns = t->since_ns;
	t->agg_end_ns = now;
	if (st == GPUSCOPE_TS_RUNNING)
		t->agg_ns[0] += dur;
	else if (st == GPUSCOPE_TS_RUNNABLE)
		t->agg_ns[1] += dur;
	else
		t->agg_ns[2] += dur;
	count_err(GPUSCOPE_SERR_SUMMARY);
	if (st == GPUSCOPE_TS_BLOCKED) {
		struct gpuscope_offcpu_key k = {
			.tgid = t->tgid, .tid = tid, .kstack_id = t->kstack_id,
			.ustack_id = t->ustack_id, .syscall_nr = t->syscall_nr, .flags = t->flags,
		};
		struct gpuscope_offcpu_val nv = { .ns = dur, .count = 1 };
		struct gpuscope_offcpu_val *v = bpf_map_lookup_elem(&offcpu, &k);

		if (!v && !bpf_map_update_elem(&offcpu, &k, &nv, BPF_NOEXIST)) {
			keyq_push(&offcpu_new, &k, &offcpu_keys_lost);	/* after the key is there */
			goto folded;
		}
		if (!v)
			v = bpf_map_lookup_elem(&offcpu, &k);
		if (v) {
			__sync_fetch_and_add(&v->ns, dur);
			__sync_fetch_and_add(&v->count, 1);
		} else {
			count_err(GPUSCOPE_SERR_AGG_FULL);
		}
	}
folded:
	if (t->agg_end_ns - t->agg_start_ns >= max_summary_ns)
		flush_summary(t, tid, 0);
}

/* Tops up a walk credit by what the time since its last top-up earned; true when it allows a
 * user stack walk now (the caller charges the walk's time). */
static __always_inline bool credit_allows(__s64 *credit, __u64 *at, __u64 now)
{
	credit_topup(credit, at, now, walk_share_ppm, walk_burst_ns);
	return *credit > 0;
}

/* The process's credit (made full on its first walk); NULL when the map is not writable. */
static __always_inline struct walk_credit *proc_credit(__u32 tgid, __u64 now)
{
	struct walk_credit *c = bpf_map_lookup_elem(&proc_walks, &tgid), nc;

	if (c)
		return c;
	nc.credit_ns = walk_burst_ns;
	nc.at_ns = now;
	bpf_map_update_elem(&proc_walks, &tgid, &nc, BPF_NOEXIST);
	return bpf_map_lookup_elem(&proc_walks, &tgid);
}

/*
 * Whether a walk is allowed now: the thread's credit, and the process's while the process is
 * within its share. Past it, only a thread that spends less than it earns (its credit at least
 * half the burst) walks, on its own credit; the others forfeit what they earned meanwhile, so a
 * thread held back by the process does not save up and pass as a seldom one. *pc: the
 * process's credit to charge, NULL when the walk is not the process's.
 */
static __always_inline bool walk_allowed(struct gpuscope_sched_thr *t, __u32 tgid, __u64 now,
					 struct walk_credit **pc)
{
	*pc = NULL;
	if (!walk_share_ppm)
		return true;
	*pc = proc_credit(tgid, now);
	if (*pc && !credit_allows(&(*pc)->credit_ns, &(*pc)->at_ns, now)) {
		*pc = NULL;	/* a seldom thread's walk is its own, not the process's */
		if (t->walk_credit_ns >= (walk_burst_ns >> 1))
			return credit_allows(&t->walk_credit_ns, &t->walk_at_ns, now);
		t->walk_at_ns = now;
		return false;
	}
	return credit_allows(&t->walk_credit_ns, &t->walk_at_ns, now);
}

/*
 * The current task's user stack, walked by the unwinder from its saved user registers. Its own
 * frame, and get_thr()'s and close_state()'s frames apart from on_switch's: 6.18 kernels count
 * on_switch's frame plus the walker's calls (bpf_loop callbacks included) against the 512-byte
 * stack limit, and with all of it inlined that was 592 (the program was refused).
 */
static __noinline __s32 walk_current(struct gpuscope_sched_thr *t, __u64 now)
{
	struct gpuscope_callsite sig;
	struct uwalk st;
	__s32 id;
	__u32 k;

	if (!t || !unwind_init_task(&st))
		return -1;
	if (!ustack_reuse_ns)
		return unwind_stackid(&st);
	callsite_sign(&st, &sig);
	for (int i = 0; i < GPUSCOPE_USIGS; i++) {
		struct gpuscope_usig *u = &t->usig[i];

		if (u->at_ns && callsite_same(&u->site, &sig) && now - u->at_ns < ustack_reuse_ns) {
			count_err(GPUSCOPE_SERR_USTACK_SAME);
			return u->id;
		}
	}
	if (!unwind_init_task(&st))
		return -1;
	id = unwind_stackid(&st);
	if (id >= 0 && !st.reason) {	/* a walk cut short is not one to re-use */
		k = t->usig_next++ % GPUSCOPE_USIGS;
		t->usig[k].site = sig;
		t->usig[k].at_ns = now;
		t->usig[k].id = id;
	}
	return id;
}

static __noinline struct gpuscope_sched_thr *get_thr(struct task_struct *p, __u32 tid, __u32 tgid)
{
	struct gpuscope_sched_thr *t = bpf_map_lookup_elem(&threads, &tid);
	struct gpuscope_sched_thr nt = {};

	if (t)
		return t;
	/*
	 * An exiting thread is not followed anew. sched_process_exit closed its states and
	 * dropped its entry, but the thread still runs on (exit_mm, closing its files, the
	 * parent's wakeup) and may be switched out and in again; its last switch-out (TASK_DEAD)
	 * is not followed, so an entry made now would keep its last state open until the agent
	 * stops or the tid comes back in another process.
	 */
	if (BPF_CORE_READ(p, flags) & PF_EXITING)
		return NULL;
	nt.tgid = tgid;
	nt.kstack_id = -1;
	nt.ustack_id = -1;
	nt.syscall_nr = -1;
	nt.walk_credit_ns = walk_burst_ns;
	nt.walk_at_ns = bpf_ktime_get_ns();
	nt.ev_credit_ns = state_burst_ns;
	nt.ev_at_ns = nt.walk_at_ns;
	BPF_CORE_READ_STR_INTO(&nt.comm, p, comm);
	bpf_map_update_elem(&threads, &tid, &nt, BPF_NOEXIST);
	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t)
		count_err(GPUSCOPE_SERR_THREADS_FULL);
	return t;
}

/*
 * The kernel stack of a thread blocking now (its stack id, < 0: -errno): its last one when it
 * blocks where it did then (kstack_reuse_ns), else walked and remembered.
 */
static __noinline __s32 kernel_stack(void *ctx, struct gpuscope_sched_thr *t, struct pt_regs *regs,
				     unsigned int prev_state, __u64 now)
{
	__u64 gen = *(volatile __u64 *)&kstack_gen, sig = 0;
	__u32 k;
	__s32 id;

	if (gen != t->ksig_gen) {	/* ids of another generation may name other frames */
		for (int i = 0; i < GPUSCOPE_KSIGS; i++)
			t->ksig[i] = 0;
		t->ksig_gen = gen;
	}
	if (kstack_reuse_ns && t->syscall_nr >= 0 && regs) {
		/* a mix of the syscall, the user instruction after it, its first argument and
		 * the sleep state; | 1: never 0 */
		sig = (__u64)t->syscall_nr * 0x9e3779b97f4a7c15ULL;
		sig = (sig ^ BPF_CORE_READ(regs, ip)) * 0xbf58476d1ce4e5b9ULL;
		sig = (sig ^ BPF_CORE_READ(regs, di)) * 0x94d049bb133111ebULL;
		sig = (sig ^ prev_state ^ (sig >> 31)) | 1;
		for (int i = 0; i < GPUSCOPE_KSIGS; i++) {
			if (t->ksig[i] == sig && !(gen & 1) &&
			    now - t->ksig_at_ns[i] < kstack_reuse_ns) {
				count_err(GPUSCOPE_SERR_KSTACK_SAME);
				return t->ksig_id[i];
			}
		}
	}
	id = bpf_get_stackid(ctx, &stacks, 0);
	if (id < 0)
		count_err(GPUSCOPE_SERR_KSTACK);
	if (id >= 0 && sig && !(gen & 1)) {
		for (k = 0; k < GPUSCOPE_KSIGS; k++)	/* its old slot, if it had one */
			if (t->ksig[k] == sig)
				break;
		if (k >= GPUSCOPE_KSIGS)
			k = t->ksig_next++ % GPUSCOPE_KSIGS;
		t->ksig[k] = sig;
		t->ksig_id[k] = id;
		t->ksig_at_ns[k] = now;
	}
	return id;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 ptid = prev->pid, ptgid = prev->tgid;
	__u32 ntid = next->pid, ntgid = next->tgid;
	struct gpuscope_sched_thr *t;

	if (ptid && is_tracked(ptgid) && !(prev_state & TASK_DEAD)) {
		t = get_thr(prev, ptid, ptgid);
		if (t) {
			count_err(GPUSCOPE_SERR_SWITCHES);
			if (t->state == GPUSCOPE_TS_RUNNABLE || t->state == GPUSCOPE_TS_BLOCKED) {
				/* it ran (it is being switched out), but its switch-in went unseen:
				 * when that state ended is unknown, so it is not reported */
				count_err(GPUSCOPE_SERR_SWITCH_IN_UNSEEN);
				t->state = GPUSCOPE_TS_UNKNOWN;
			}
			close_state(t, ptid, now, 0);
			t->since_ns = now;
			t->flags = 0;
			if (!preempt && prev_state != TASK_RUNNING) {
				__u8 *s = bpf_map_lookup_elem(&in_sync, &ptid);
				struct pt_regs *regs;

				t->state = GPUSCOPE_TS_BLOCKED;
				if (s)
					t->flags |= GPUSCOPE_TSF_CUDA_SYNC;
				t->kstack_id = -1;
				t->ustack_id = -1;
				regs = (struct pt_regs *)bpf_task_pt_regs(prev);
				t->syscall_nr = regs && prev->mm ? (__s32)BPF_CORE_READ(regs, orig_ax) : -1;
				if (want_stacks) {
					t->kstack_id = kernel_stack(ctx, t, regs, prev_state, now);
					struct walk_credit *pc = NULL;

					if (prev->mm && !walk_allowed(t, ptgid, now, &pc)) {
						t->ustack_id = GPUSCOPE_USTACK_NOT_WALKED;
						count_err(GPUSCOPE_SERR_NOT_WALKED);
					} else if (prev->mm) {
						__u64 w0 = bpf_ktime_get_ns(), dw;

						if (use_unwinder) {
							t->ustack_id = walk_current(t, now);
						} else {
							t->ustack_id = bpf_get_stackid(
								ctx, &stacks, BPF_F_USER_STACK);
						}
						if (t->ustack_id < 0)
							count_err(GPUSCOPE_SERR_USTACK);
						dw = bpf_ktime_get_ns() - w0;
						count_err(GPUSCOPE_SERR_WALKS);
						count_err_n(GPUSCOPE_SERR_WALK_NS, dw);
						t->walk_credit_ns -= dw;
						if (pc)
							pc->credit_ns -= dw;
					}
				}
			} else {
				t->state = GPUSCOPE_TS_RUNNABLE;
			}
		}
	}
	if (ntid && is_tracked(ntgid)) {
		t = get_thr(next, ntid, ntgid);
		if (t) {
			close_state(t, ntid, now, 0);
			t->since_ns = now;
			t->state = GPUSCOPE_TS_RUNNING;
			t->cpu = bpf_get_smp_processor_id();
			t->flags = 0;
			/* names change (prctl, pthread_setname_np); refresh when it runs */
			BPF_CORE_READ_STR_INTO(&t->comm, next, comm);
		}
	}
	return 0;
}

static __always_inline void woken(struct task_struct *p, bool new_task)
{
	__u32 tid = p->pid, tgid = p->tgid;
	__u64 now;
	struct gpuscope_sched_thr *t;

	if (!tid || !is_tracked(tgid))
		return;
	now = bpf_ktime_get_ns();
	t = new_task ? get_thr(p, tid, tgid) : bpf_map_lookup_elem(&threads, &tid);
	if (!t)
		return;
	if (t->state == GPUSCOPE_TS_BLOCKED) {
		close_state(t, tid, now, 0);
	} else if (t->state != GPUSCOPE_TS_UNKNOWN) {
		/* woken while still on its way out of the CPU: the switch-out follows */
		count_err(GPUSCOPE_SERR_RACE);
		return;
	}
	t->since_ns = now;
	t->state = GPUSCOPE_TS_RUNNABLE;
	t->flags = 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(on_waking, struct task_struct *p)
{
	woken(p, false);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p)
{
	woken(p, true);
	return 0;
}

static __always_inline void proc_event(__u8 what, __u32 pid, __u32 tid, __u32 ppid)
{
	struct gpuscope_ev_strips_proc ev = {};

	ev.hdr.type = GPUSCOPE_EV_PROC;
	ev.hdr.size = sizeof(ev);
	ev.ktime_ns = bpf_ktime_get_ns();
	ev.pid = pid;
	ev.tid = tid;
	ev.ppid = ppid;
	ev.what = what;
	bpf_get_current_comm(ev.comm, sizeof(ev.comm));
	if (bpf_ringbuf_output(&events, &ev, sizeof(ev), 0))
		count_err(GPUSCOPE_SERR_RINGBUF_FULL);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u32 tid = p->pid, tgid = p->tgid;
	bool tracked = is_tracked(tgid);
	struct gpuscope_sched_thr *t = bpf_map_lookup_elem(&threads, &tid);

	/*
	 * The entry goes with the thread even when its process is no longer tracked (user space
	 * untracks a process at its leader's exit, which may come first); its open state is
	 * reported only while tracked: since the untracking its switches went unseen.
	 */
	if (t) {
		if (tracked)
			close_state(t, tid, bpf_ktime_get_ns(), GPUSCOPE_TSF_FINAL);
		flush_summary(t, tid, GPUSCOPE_TSF_FINAL);
		bpf_map_delete_elem(&threads, &tid);
	}
	if (!tracked)
		return 0;
	bpf_map_delete_elem(&in_sync, &tid);
	if (tid == tgid && !track_all)
		proc_event(GPUSCOPE_PROC_EXIT, tgid, tid, 0);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, cpid = child->pid, ctgid = child->tgid;
	__u8 one = 1;

	/* a new process (not a thread) of a tracked one inherits its mappings: track it now */
	if (cpid != ctgid || track_all || !bpf_map_lookup_elem(&tracked, &ptgid))
		return 0;
	bpf_map_update_elem(&tracked, &ctgid, &one, BPF_ANY);
	proc_event(GPUSCOPE_PROC_FORK, ctgid, cpid, ptgid);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tid = p->pid;
	struct gpuscope_sched_thr *t = bpf_map_lookup_elem(&threads, &tid);

	/*
	 * The task has its new name here (begin_new_exec() set it): the state that ran up to the
	 * exec ends under the old name and the one from now on carries the new one, instead of
	 * the old name lasting until the next switch-in (a whole blocked state after it).
	 */
	if (t && is_tracked(p->tgid)) {
		__u64 now = bpf_ktime_get_ns();

		close_state(t, tid, now, 0);
		flush_summary(t, tid, 0);
		t->since_ns = now;
	}
	if (t)
		BPF_CORE_READ_STR_INTO(&t->comm, p, comm);
	proc_event(GPUSCOPE_PROC_EXEC, p->tgid, p->pid, 0);
	return 0;
}

/* Does the path name /dev/nvidia* or contain "libcuda." (libcuda.so, libcuda.so.1 ...)? */
static __always_inline bool gpu_path(const char *name)
{
	/* "libcuda." as a big-endian window of the last 8 bytes read */
	const __u64 want = 0x6c6962637564612eULL;
	char buf[128] = {};
	__u64 w = 0, hit = 0;

	if (bpf_probe_read_user_str(buf, sizeof(buf), name) <= 0)
		return false;
	if (buf[0] == '/' && buf[1] == 'd' && buf[2] == 'e' && buf[3] == 'v' && buf[4] == '/' &&
	    buf[5] == 'n' && buf[6] == 'v' && buf[7] == 'i' && buf[8] == 'd' && buf[9] == 'i' &&
	    buf[10] == 'a')
		return true;
	/*
	 * Branch-free (x == 0 as (x | -x) >> 63 == 0): a branch here made the verifier follow
	 * both outcomes at every byte, 290k instructions and 0.15-0.5 s at each start
	 * (.output/bench/start/verifier_stats); now about 2k.
	 */
	for (int i = 0; i < (int)sizeof(buf); i++) {
		__u64 x;

		w = (w << 8) | (__u8)buf[i];
		x = w ^ want;
		hit |= ((x | -x) >> 63) ^ 1;
	}
	return hit;
}

SEC("tp/syscalls/sys_enter_openat")
int on_openat(struct trace_event_raw_sys_enter *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (track_all || bpf_map_lookup_elem(&tracked, &tgid))
		return 0;
	if (gpu_path((const char *)ctx->args[1]))
		proc_event(GPUSCOPE_PROC_OPEN_GPU, tgid, (__u32)bpf_get_current_pid_tgid(), 0);
	return 0;
}
