/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ABI shared by the BPF programs and user space: the registry of event types and counter codes,
 * and the CPU sampler's event layouts. Includes nothing: the includer supplies __u8.. __u64
 * (vmlinux.h in BPF, <linux/types.h> in user space).
 */
#ifndef GPUSCOPE_ABI_H
#define GPUSCOPE_ABI_H

#define GPUSCOPE_ABI_VERSION	1
#define GPUSCOPE_MAX_STACK	127	/* frames per user or kernel stack (PERF_MAX_STACK_DEPTH) */
#define GPUSCOPE_COMM_LEN	16

/*
 * A thread's call site as the probes' signature sees it (src/agent/unwind/callsite.bpf.h says
 * what the fields hold); kept in map values, some of them read by user space (sched's threads).
 */
struct gpuscope_callsite {
	__u64 sp, bp, ret, h;
};

/*
 * The registry of the BPF programs' ring-buffer event types and per-CPU counter codes. Each
 * program owns a range of GPUSCOPE_PROG_RANGE numbers in both, so no two programs' numbers
 * collide; the counters' names come from the same lists as their codes (GPUSCOPE_ERRORS below),
 * exported as gpuscope_agent_bpf_errors_total{program,error} and
 * gpuscope_agent_bpf_events_total{program,event}.
 * The event layouts of the sched/cuda programs are in abi_strips.h, of the cupti one in
 * abi_cupti.h.
 */
enum gpuscope_prog {
	GPUSCOPE_PROG_CPU = 0,		/* src/agent/cpu/oncpu.bpf.c */
	GPUSCOPE_PROG_SCHED = 1,	/* src/agent/sched/sched.bpf.c */
	GPUSCOPE_PROG_CUDA = 2,		/* src/agent/cuda/cudaprobe.bpf.c */
	GPUSCOPE_PROG_CUPTI = 3,	/* src/agent/cupti/cupti.bpf.c */
	GPUSCOPE_PROG_MAX = 4,
};
#define GPUSCOPE_PROG_RANGE 16	/* event types and counter codes per program */

enum gpuscope_ev_type {
	/* cpu: 1..15 (0 is never a type) */
	GPUSCOPE_EV_CPU_SAMPLE = 1,
	GPUSCOPE_EV_PROC_EXEC = 2,	/* struct gpuscope_ev_proc: the process replaced its image */
	GPUSCOPE_EV_PROC_EXIT = 3,	/* struct gpuscope_ev_proc: the whole process exited */
	/* sched: 16..31 */
	GPUSCOPE_EV_THREAD_STATE = 16,	/* struct gpuscope_ev_thread_state */
	GPUSCOPE_EV_PROC = 17,		/* struct gpuscope_ev_strips_proc */
	/* cuda: 32..47 */
	GPUSCOPE_EV_CUDA_CALL = 32,	/* struct gpuscope_ev_cuda_call */
	/* cupti: 48..63 */
	GPUSCOPE_EV_CUPTI_LAUNCH = 48,	/* struct gpuscope_ev_cupti_launch */
	GPUSCOPE_EV_CUPTI_RECS = 49,	/* struct gpuscope_ev_cupti_recs */
	GPUSCOPE_EV_CUPTI_NAME = 50,	/* struct gpuscope_ev_cupti_name */
	GPUSCOPE_EV_CUPTI_CLOCK = 51,	/* struct gpuscope_ev_cupti_pair */
	GPUSCOPE_EV_CUPTI_DROPS = 52,	/* struct gpuscope_ev_cupti_pair */
	GPUSCOPE_EV_CUPTI_STATUS = 53,	/* struct gpuscope_ev_cupti_pair (what: gpuscope_cupti_status) */
	GPUSCOPE_EV_CUPTI_BACKWARD = 54, /* struct gpuscope_ev_cupti_launch, cid 0: an autograd
					  * Engine::execute entry with its caller's stack */
	/* struct gpuscope_ev_cupti_pair: an Engine::execute entry of thread `what` from the call
	 * site of that thread's BACKWARD event whose ktime_ns is a (same stack); b: its ktime_ns */
	GPUSCOPE_EV_CUPTI_BACKWARD_SAME = 55,
};

/*
 * Per-CPU counters of what the BPF programs did and what went wrong, indexed by enum
 * gpuscope_err in each program's `errors` map (src/agent/gpuscope.bpf.h). One list makes both the
 * enum and the name table (src/agent/bpfutil.c), so the two cannot go out of step: X(code name,
 * number, "name on /metrics", ERROR or EVENT). EVENT codes count normal work, not errors. A new
 * counter is one line here, in its program's range; it shows on /metrics by itself.
 */
#define GPUSCOPE_ERRORS(X)                                                                         \
	/* cpu: 0..15 */                                                                           \
	X(GPUSCOPE_ERR_RINGBUF_FULL, 0, "ringbuf_full", ERROR) /* ringbuf output failed: lost */   \
	X(GPUSCOPE_ERR_USTACK, 1, "ustack", ERROR) /* bpf_get_stack(user) failed: no stack */      \
	X(GPUSCOPE_ERR_KSTACK, 2, "kstack", ERROR) /* bpf_get_stack(kernel) failed */              \
	X(GPUSCOPE_ERR_FILTERED, 3, "filtered", EVENT) /* samples outside the pid filter */        \
	X(GPUSCOPE_ERR_SAMPLES, 4, "samples", EVENT) /* samples taken (events attempted) */        \
	/* sched: 16..31 */                                                                        \
	X(GPUSCOPE_SERR_RINGBUF_FULL, 16, "ringbuf_full", ERROR) /* event lost */                  \
	/* bpf_get_stackid(kernel) failed (-EEXIST: bucket taken), (user) failed */                \
	X(GPUSCOPE_SERR_KSTACK, 17, "kstack", ERROR)                                               \
	X(GPUSCOPE_SERR_USTACK, 18, "ustack", ERROR)                                               \
	X(GPUSCOPE_SERR_THREADS_FULL, 19, "threads_full", ERROR) /* thread not followed */         \
	X(GPUSCOPE_SERR_AGG_FULL, 20, "offcpu_map_full", ERROR) /* short interval lost */          \
	X(GPUSCOPE_SERR_SUMMARY, 21, "folded", EVENT) /* short states folded into summaries */     \
	X(GPUSCOPE_SERR_RACE, 22, "woken_on_cpu", EVENT) /* woken while still on its way out */    \
	/* switched out with no switch-in seen: state dropped */                                   \
	X(GPUSCOPE_SERR_SWITCH_IN_UNSEEN, 23, "switch_in_unseen", ERROR)                           \
	X(GPUSCOPE_SERR_SWITCHES, 24, "switches", EVENT) /* switches of followed threads seen */   \
	X(GPUSCOPE_SERR_EMITTED, 25, "events", EVENT) /* thread-state events emitted */            \
	/* switch-outs whose user stack was not walked (the thread's walk share was spent) */      \
	X(GPUSCOPE_SERR_NOT_WALKED, 26, "stack_not_walked", EVENT)                                 \
	/* switch-outs walked, and the nanoseconds the walks took (walk_share_ppm's budget) */     \
	X(GPUSCOPE_SERR_WALKS, 27, "stack_walks", EVENT)                                           \
	X(GPUSCOPE_SERR_WALK_NS, 28, "stack_walk_ns", EVENT)                                       \
	/* switch-outs given the thread's last kernel stack (same syscall, site, argument) */      \
	X(GPUSCOPE_SERR_KSTACK_SAME, 29, "kstack_same", EVENT)                                     \
	/* states of 1-20 ms folded into summaries: the thread was over its event budget */        \
	X(GPUSCOPE_SERR_FOLDED_RATE, 30, "folded_over_budget", EVENT)                              \
	/* user stacks given the thread's last walked one from the same call site */               \
	X(GPUSCOPE_SERR_USTACK_SAME, 31, "ustack_same", EVENT)                                     \
	/* cuda: 32..47 */                                                                         \
	X(GPUSCOPE_CERR_RINGBUF_FULL, 32, "ringbuf_full", ERROR) /* call event lost */             \
	X(GPUSCOPE_CERR_USTACK, 33, "ustack", ERROR) /* bpf_get_stackid(user) failed */            \
	X(GPUSCOPE_CERR_AGG_FULL, 34, "map_full", ERROR) /* inflight or calls map full: lost */    \
	X(GPUSCOPE_CERR_NEST, 35, "nested", EVENT) /* call nested in another (inner ignored) */    \
	/* walked calls given the thread's last walked stack (same call site, < 1 s) */            \
	X(GPUSCOPE_CERR_STACK_SAME, 36, "stack_same", EVENT)                                       \
	/* cupti: 48..63 */                                                                        \
	/* ring buffer full: launch/name/clock/drops event lost */                                 \
	X(GPUSCOPE_CUPTI_ERR_RINGBUF, 48, "ringbuf_full", ERROR)                                   \
	/* activity records lost (ring buffer full or read failed) */                              \
	X(GPUSCOPE_CUPTI_ERR_RECS_LOST, 49, "records_lost", ERROR)                                 \
	X(GPUSCOPE_CUPTI_ERR_USTACK, 50, "ustack", ERROR) /* no user stack at a launch */          \
	X(GPUSCOPE_CUPTI_ERR_READ, 51, "read", ERROR) /* bpf_probe_read_user of records failed */  \
	/* a buffer hit had more than GPUSCOPE_CUPTI_MAX_RECS */                                   \
	X(GPUSCOPE_CUPTI_ERR_TRUNC, 52, "truncated", ERROR)                                        \
	X(GPUSCOPE_CUPTI_ERR_LAUNCHES, 53, "launches", EVENT) /* launch probe hits */              \
	/* autograd Engine::execute probe hits */                                                  \
	X(GPUSCOPE_CUPTI_ERR_BACKWARDS, 54, "backwards", EVENT)                                    \
	/* ...of which sent as "same stack as the thread's last one" (not walked) */               \
	X(GPUSCOPE_CUPTI_ERR_BACKWARDS_SAME, 55, "backwards_same", EVENT)

#define GPUSCOPE_COUNTER_ENUM(name, num, label, kind) name = num,
enum gpuscope_err {
	GPUSCOPE_ERRORS(GPUSCOPE_COUNTER_ENUM)
	GPUSCOPE_ERR_MAX = GPUSCOPE_PROG_MAX * GPUSCOPE_PROG_RANGE,
};

/*
 * The stack walkers' counters (src/agent/unwind/unwind.bpf.h, python.bpf.h), which every
 * program that walks stacks counts in: per-CPU arrays of their own (unwind_stats, py_stats) that
 * the unwinder creates once and shares with every program, indexed by these enums and exported
 * beside the programs' counters as program="unwind" and program="python". Lists as above.
 */
#define GPUSCOPE_WALKER_UNWIND	GPUSCOPE_PROG_MAX	/* bpf_counters__set() slot */
#define GPUSCOPE_WALKER_PYTHON	(GPUSCOPE_PROG_MAX + 1)
#define GPUSCOPE_COUNTER_SETS	(GPUSCOPE_PROG_MAX + 2)

#define GPUSCOPE_UNWIND_STATS(X)                                                                   \
	X(UNWIND_ST_WALKS, 0, "walks", EVENT)                                                      \
	X(UNWIND_ST_FRAMES, 1, "frames", EVENT) /* native frames pushed */                         \
	/* ...of which unwound with a table */                                                     \
	X(UNWIND_ST_TABLE_FRAMES, 2, "table_frames", EVENT)                                        \
	X(UNWIND_ST_FP_FRAMES, 3, "fp_frames", EVENT) /* ...with frame pointers */                 \
	/* walks of a process without an entry (frame pointers only) */                            \
	X(UNWIND_ST_NO_PROC, 4, "no_proc", EVENT)                                                  \
	/* mapping marked as table but the table is gone (evicted) */                              \
	X(UNWIND_ST_NO_TABLE, 5, "table_evicted", ERROR)                                           \
	/* no free scratch slot (deep nesting): stack not taken */                                 \
	X(UNWIND_ST_NESTED, 6, "no_scratch", ERROR)                                                \
	X(UNWIND_ST_STACK_FULL, 7, "kept_stacks_full", ERROR) /* unwind_stacks full: not kept */   \
	/* another stack holds the id: stack not kept */                                           \
	X(UNWIND_ST_STACK_COLLISION, 8, "kept_stacks_collision", ERROR)                            \
	/* of no_proc: a fork child walked with its parent's mappings */                           \
	X(UNWIND_ST_PARENT, 9, "parent_maps", EVENT)                                               \
	/* UNWIND_ST_TRUNC_BASE (10) + enum gpuscope_trunc (unwind/frames.h): walks ended early */ \
	X(UNWIND_ST_TRUNC_DEPTH, 11, "truncated_depth", ERROR)                                     \
	X(UNWIND_ST_TRUNC_UNMAPPED, 12, "truncated_unmapped", ERROR)                               \
	X(UNWIND_ST_TRUNC_READ, 13, "truncated_read", ERROR)                                       \
	X(UNWIND_ST_TRUNC_NO_PROC, 14, "truncated_no_proc", ERROR)                                 \
	X(UNWIND_ST_TRUNC_BAD_FRAME, 15, "truncated_bad_frame", ERROR)                             \
	X(UNWIND_ST_TRUNC_UNSUPPORTED, 16, "truncated_unsupported", ERROR)                         \
	X(UNWIND_ST_TRUNC_PYTHON, 17, "truncated_python", ERROR)                                   \
	/* stacks put into unwind_stacks (user space clears it near full by this count) */        \
	X(UNWIND_ST_STACK_NEW, 26, "kept_stacks_new", EVENT)

enum unwind_stat {
	GPUSCOPE_UNWIND_STATS(GPUSCOPE_COUNTER_ENUM)
	UNWIND_ST_TRUNC_BASE = 10,	/* + enum gpuscope_trunc, the walker's reason & 15 */
	UNWIND_ST_MAX = UNWIND_ST_TRUNC_BASE + 16 + 1,	/* + UNWIND_ST_STACK_NEW */
};

#define GPUSCOPE_PY_STATS(X)                                                                       \
	/* stacks of a Python process that reached the eval loop */                                \
	X(GPUSCOPE_PY_STAT_WALKS, 0, "walks", EVENT)                                               \
	X(GPUSCOPE_PY_STAT_FRAMES, 1, "frames", EVENT) /* Python frames written */                 \
	/* thread without a PyThreadState (a pure native thread) */                                \
	X(GPUSCOPE_PY_STAT_NO_THREAD, 2, "no_thread_state", EVENT)                                 \
	/* walks of the interpreter's thread list (cache misses) */                                \
	X(GPUSCOPE_PY_STAT_THREAD_SCANS, 3, "thread_scans", EVENT)                                 \
	/* thread list longer than the walk's bound */                                             \
	X(GPUSCOPE_PY_STAT_SCAN_LIMIT, 4, "thread_scan_limit", ERROR)                              \
	/* a frame could not be read: one PY_UNKNOWN, walk ends */                                 \
	X(GPUSCOPE_PY_STAT_READ_FAILED, 5, "read_failed", ERROR)                                   \
	/* no room left for the Python frames of the stack */                                      \
	X(GPUSCOPE_PY_STAT_TRUNCATED, 6, "truncated", ERROR)                                       \
	/* native walk ended above the eval loop: the remaining Python frames follow a             \
	 * [truncated] word */                                                                     \
	X(GPUSCOPE_PY_STAT_UNREACHED, 7, "unreached", ERROR)                                       \
	/* an eval-loop activation with no Python frame left */                                    \
	X(GPUSCOPE_PY_STAT_EVAL_EMPTY, 8, "eval_without_frames", EVENT)                            \
	/* code objects whose names BPF copied (py_names misses) */                                \
	X(GPUSCOPE_PY_STAT_NAMED, 9, "code_named", EVENT)                                          \
	/* ... whose names could not be read or stored */                                          \
	X(GPUSCOPE_PY_STAT_NAME_FAILED, 10, "code_name_failed", ERROR)

enum gpuscope_py_stat {
	GPUSCOPE_PY_STATS(GPUSCOPE_COUNTER_ENUM)
	GPUSCOPE_PY_STAT_MAX = 16,
};

struct gpuscope_ev_hdr {
	__u32 type;	/* enum gpuscope_ev_type, always at offset 0 */
	__u32 size;	/* bytes of the whole event, header included */
};

/*
 * One CPU sample. Followed by kstack_len kernel frames then ustack_len user frames (__u64 each,
 * innermost first); size = sizeof(struct) + 8 * (kstack_len + ustack_len).
 */
struct gpuscope_ev_cpu_sample {
	struct gpuscope_ev_hdr hdr;
	__u64 ktime_ns;		/* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u32 tgid, tid;	/* host pid and tid */
	__u32 cpu;
	__u16 kstack_len, ustack_len;	/* frames that follow */
	__u8 comm[GPUSCOPE_COMM_LEN];	/* thread name */

};
_Static_assert(sizeof(struct gpuscope_ev_cpu_sample) == 48, "ABI change: bump GPUSCOPE_ABI_VERSION");


/* Process lifecycle, so user space can drop or re-read cached memory maps. */
struct gpuscope_ev_proc {
	struct gpuscope_ev_hdr hdr;
	__u64 ktime_ns;
	__u32 tgid, _pad;
};
_Static_assert(sizeof(struct gpuscope_ev_proc) == 24, "ABI change: bump GPUSCOPE_ABI_VERSION");

#endif
