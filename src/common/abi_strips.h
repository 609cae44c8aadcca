/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ABI of the thread-state (sched.bpf.c) and CUDA driver API (cudaprobe.bpf.c) programs: ring
 * buffer events, aggregation map keys and values. Includes nothing, like abi.h: the includer
 * supplies __u8.. __u64.
 */
#ifndef GPUSCOPE_ABI_STRIPS_H
#define GPUSCOPE_ABI_STRIPS_H

/* Event types and error codes: the registry in abi.h. */

/* Thread states as the scheduler sees them. */
enum gpuscope_tstate {
	GPUSCOPE_TS_UNKNOWN = 0,
	GPUSCOPE_TS_RUNNING = 1,	/* on a CPU */
	GPUSCOPE_TS_RUNNABLE = 2,	/* woken or preempted, waiting for a CPU */
	GPUSCOPE_TS_BLOCKED = 3,	/* switched out in a sleeping state, not woken yet */
	GPUSCOPE_TS_SUMMARY = 4,	/* several short states folded: see run/runnable/blocked_ns */
};

/* Flags of a thread-state event. */
#define GPUSCOPE_TSF_CUDA_SYNC	0x1	/* blocked while inside a CUDA synchronize call */
#define GPUSCOPE_TSF_FINAL	0x2	/* emitted at thread exit or agent stop (open state closed) */
#define GPUSCOPE_TSF_KTHREAD	0x4	/* no user stack: kernel thread or no user regs */

/*
 * One interval of one thread: [start_ns, end_ns) in state `state`. For RUNNING, cpu is where
 * it ran. For BLOCKED, the stacks at the switch-out (ids in the sched stack map, < 0: -errno of
 * bpf_get_stackid) and the syscall the thread was in (-1: none). For SUMMARY, the three ns
 * fields add up to end_ns - start_ns.
 */
struct gpuscope_ev_thread_state {
	struct gpuscope_ev_hdr hdr;
	__u64 start_ns, end_ns;		/* CLOCK_MONOTONIC */
	__u64 run_ns, runnable_ns, blocked_ns;	/* SUMMARY only */
	__u32 tgid, tid;
	__u32 cpu;
	__s32 kstack_id, ustack_id;
	__s32 syscall_nr;
	__u8 state;			/* enum gpuscope_tstate */
	__u8 flags;			/* GPUSCOPE_TSF_* */
	__u8 _pad[6];
	__u8 comm[GPUSCOPE_COMM_LEN];	/* thread name */
};
_Static_assert(sizeof(struct gpuscope_ev_thread_state) == 96, "ABI change: bump GPUSCOPE_ABI_VERSION");

/* Short blocked intervals, aggregated in the kernel: key of the `offcpu` hash map. */
struct gpuscope_offcpu_key {
	__u32 tgid, tid;
	__s32 kstack_id, ustack_id;
	__s32 syscall_nr;
	__u32 flags;			/* GPUSCOPE_TSF_CUDA_SYNC */
};
struct gpuscope_offcpu_val {
	__u64 ns, count;
};

#define GPUSCOPE_KSIGS 4	/* kernel stacks a thread keeps for re-use (sched.bpf.c) */
#define GPUSCOPE_USIGS 2	/* user stacks likewise */
/* A walked user stack of a thread's switch-out, and its call site (unwind/callsite.bpf.h). */
struct gpuscope_usig {
	struct gpuscope_callsite site;
	__u64 at_ns;		/* when it was walked; 0: empty */
	__s32 id;		/* its id in unwind_stacks */
	__u32 _pad;
};

/*
 * A followed thread's state machine: the value of the sched programs' `threads` hash map (by tid),
 * read by user space at stop to close every open state (sched.c: close_open_states()).
 */
struct gpuscope_sched_thr {
	__u64 since_ns;		/* start of the current state */
	__u64 agg_start_ns;	/* start of the pending summary; 0: none */
	__u64 agg_end_ns;
	__u64 agg_ns[3];	/* running, runnable, blocked ns in the summary */
	__u32 tgid;
	__u32 cpu;		/* RUNNING: the cpu */
	__s32 kstack_id, ustack_id;	/* BLOCKED: stacks at the switch-out */
	__s32 syscall_nr;
	__u8 state;		/* enum gpuscope_tstate */
	__u8 flags;		/* GPUSCOPE_TSF_CUDA_SYNC while BLOCKED in a sync */
	__u8 _pad[2];
	__s64 walk_credit_ns;	/* walk time the thread may still spend (walk_share_ppm) */
	__u64 walk_at_ns;	/* when walk_credit_ns was last topped up */
	/* the kernel stacks of its last GPUSCOPE_KSIGS walked switch-outs at different places, and
	 * where it blocked then (sched.bpf.c, kstack_reuse_ns) */
	__u64 ksig[GPUSCOPE_KSIGS];	/* signature of that switch-out; 0: none */
	__u64 ksig_at_ns[GPUSCOPE_KSIGS];	/* when that stack was walked */
	__s32 ksig_id[GPUSCOPE_KSIGS];	/* its id in the stack map */
	__u64 ksig_gen;		/* kstack_gen when they were walked */
	__u32 ksig_next;	/* the slot the next walk takes */
	__u32 folding;		/* 1 while its events are over the budget (state_event_ns) */
	__s64 ev_credit_ns;	/* event budget left (state_event_ns a state) */
	__u64 ev_at_ns;		/* when ev_credit_ns was last topped up */
	/* its last GPUSCOPE_USIGS walked user stacks at different call sites (ustack_reuse_ns) */
	struct gpuscope_usig usig[GPUSCOPE_USIGS];
	__u32 usig_next;	/* the slot the next walk takes */
	__u32 _pad3;
	__u8 comm[GPUSCOPE_COMM_LEN];
};

/* Process lifecycle and discovery hints. */
enum gpuscope_proc_ev {
	GPUSCOPE_PROC_EXEC = 1,		/* pid exec'd (any process) */
	GPUSCOPE_PROC_EXIT = 2,		/* a tracked thread exited; tid == pid: the leader */
	GPUSCOPE_PROC_FORK = 3,		/* a tracked process forked child pid (tracked already) */
	GPUSCOPE_PROC_OPEN_GPU = 4,	/* an untracked pid opened libcuda* or /dev/nvidia* */
};
struct gpuscope_ev_strips_proc {
	struct gpuscope_ev_hdr hdr;
	__u64 ktime_ns;
	__u32 pid, tid;			/* pid: the process concerned (child for FORK) */
	__u32 ppid;			/* FORK: parent */
	__u8 what;			/* enum gpuscope_proc_ev */
	__u8 _pad[3];
	__u8 comm[GPUSCOPE_COMM_LEN];
};
_Static_assert(sizeof(struct gpuscope_ev_strips_proc) == 48, "ABI change: bump GPUSCOPE_ABI_VERSION");

/* CUDA driver API calls (cudaprobe.bpf.c). The uprobe cookie: api index | flags. */
#define GPUSCOPE_CUDA_API_MASK	0xffff
#define GPUSCOPE_CUDA_SYNC	0x10000	/* synchronizing call: sets the in-sync flag of the thread */
/* ustack_id of a stack deliberately not walked: a short CUDA call not in the 1-in-N sample,
 * or a switch-out past its thread's walk budget (sched.bpf.c) */
#define GPUSCOPE_USTACK_NOT_WALKED	(-65536)

/* One call at least min_call_ns long (or any synchronizing call). */
struct gpuscope_ev_cuda_call {
	struct gpuscope_ev_hdr hdr;
	__u64 start_ns, end_ns;		/* CLOCK_MONOTONIC */
	__u64 entry_ip;			/* address of the probed function (leaf frame) */
	__u32 tgid, tid;
	__u32 api;			/* index into the agent's API table */
	__s32 ustack_id;		/* caller's user stack at return, < 0: -errno */
	__u8 comm[GPUSCOPE_COMM_LEN];
};
_Static_assert(sizeof(struct gpuscope_ev_cuda_call) == 64, "ABI change: bump GPUSCOPE_ABI_VERSION");

/* Short calls aggregated in the kernel: key/value of the `calls` hash map. */
struct gpuscope_cuda_agg_key {
	__u32 tgid, tid;
	__u32 api;
	__s32 ustack_id;
	__u64 entry_ip;
};
struct gpuscope_cuda_agg_val {
	__u64 count, ns;
	__u64 first_ns, last_ns;	/* start of the first call, end of the last */
};

#endif
