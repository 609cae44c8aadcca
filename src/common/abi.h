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
 * The registry of the BPF programs' ring-buffer event types and per-CPU counter codes. Each
 * program owns a range of GPUSCOPE_PROG_RANGE numbers in both, so no two programs' numbers
 * collide; the counters' names live in one table (src/agent/bpfutil.c), exported as
 * gpuscope_agent_bpf_errors_total{program,error} and gpuscope_agent_bpf_events_total{program,event}.
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
};

/*
 * Per-CPU counters of what the BPF programs did and what went wrong, indexed by this enum in
 * each program's `errors` map (src/agent/gpuscope.bpf.h). Codes marked "event" count normal
 * work, not errors.
 */
enum gpuscope_err {
	/* cpu: 0..15 */
	GPUSCOPE_ERR_RINGBUF_FULL = 0,	/* bpf_ringbuf_output/reserve failed: event lost */
	GPUSCOPE_ERR_USTACK = 1,	/* bpf_get_stack(user) failed: sample kept without user stack */
	GPUSCOPE_ERR_KSTACK = 2,	/* bpf_get_stack(kernel) failed */
	GPUSCOPE_ERR_FILTERED = 3,	/* event: samples outside the pid filter */
	GPUSCOPE_ERR_SAMPLES = 4,	/* event: samples taken (events attempted) */
	/* sched: 16..31 */
	GPUSCOPE_SERR_RINGBUF_FULL = 16, /* event lost */
	GPUSCOPE_SERR_KSTACK = 17,	/* bpf_get_stackid(kernel) failed (-EEXIST: bucket taken) */
	GPUSCOPE_SERR_USTACK = 18,	/* bpf_get_stackid(user) failed */
	GPUSCOPE_SERR_THREADS_FULL = 19, /* thread-state map full: thread not followed */
	GPUSCOPE_SERR_AGG_FULL = 20,	/* offcpu map full: short interval lost */
	GPUSCOPE_SERR_SUMMARY = 21,	/* event: short states folded into summaries */
	GPUSCOPE_SERR_RACE = 22,	/* event: woken while still on its way out of the CPU */
	GPUSCOPE_SERR_SWITCH_IN_UNSEEN = 23, /* switched out with no switch-in seen: state dropped */
	/* cuda: 32..47 */
	GPUSCOPE_CERR_RINGBUF_FULL = 32, /* call event lost */
	GPUSCOPE_CERR_USTACK = 33,	/* bpf_get_stackid(user) failed */
	GPUSCOPE_CERR_AGG_FULL = 34,	/* inflight or calls map full: call lost */
	GPUSCOPE_CERR_NEST = 35,	/* event: call nested in another probed call (inner ignored) */
	/* cupti: 48..63 */
	GPUSCOPE_CUPTI_ERR_RINGBUF = 48, /* ring buffer full: launch/name/clock/drops event lost */
	GPUSCOPE_CUPTI_ERR_RECS_LOST = 49, /* activity records lost (ring buffer full or read failed) */
	GPUSCOPE_CUPTI_ERR_USTACK = 50,	/* no user stack at a launch */
	GPUSCOPE_CUPTI_ERR_READ = 51,	/* bpf_probe_read_user of records/name failed */
	GPUSCOPE_CUPTI_ERR_TRUNC = 52,	/* a buffer hit had more than GPUSCOPE_CUPTI_MAX_RECS */
	GPUSCOPE_CUPTI_ERR_LAUNCHES = 53, /* event: launch probe hits */
	GPUSCOPE_CUPTI_ERR_BACKWARDS = 54, /* event: autograd Engine::execute probe hits */
	GPUSCOPE_ERR_MAX = GPUSCOPE_PROG_MAX * GPUSCOPE_PROG_RANGE,
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
