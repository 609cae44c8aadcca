/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ABI shared by the BPF programs and user space: event layouts in the ring buffers and the
 * per-CPU error counters. Includes nothing: the includer supplies __u8.. __u64
 * (vmlinux.h in BPF, <linux/types.h> in user space).
 */
#ifndef GPUSCOPE_ABI_H
#define GPUSCOPE_ABI_H

#define GPUSCOPE_ABI_VERSION	1
#define GPUSCOPE_MAX_STACK	127	/* frames per user or kernel stack (PERF_MAX_STACK_DEPTH) */
#define GPUSCOPE_COMM_LEN	16

enum gpuscope_ev_type {
	GPUSCOPE_EV_CPU_SAMPLE = 1,
	GPUSCOPE_EV_PROC_EXEC = 2,	/* struct gpuscope_ev_proc: the process replaced its image */
	GPUSCOPE_EV_PROC_EXIT = 3,	/* struct gpuscope_ev_proc: the whole process exited */
	/* 4..31 reserved for the sched/strips, cuda and cupti programs */
};

/* Counters of what went wrong inside BPF, per CPU, indexed by this enum. */
enum gpuscope_err {
	GPUSCOPE_ERR_RINGBUF_FULL = 0,	/* bpf_ringbuf_output/reserve failed: event lost */
	GPUSCOPE_ERR_USTACK,		/* bpf_get_stack(user) failed: sample kept without user stack */
	GPUSCOPE_ERR_KSTACK,		/* bpf_get_stack(kernel) failed */
	GPUSCOPE_ERR_FILTERED,		/* not an error: samples outside the pid filter (for stats) */
	GPUSCOPE_ERR_SAMPLES,		/* not an error: samples taken (events attempted) */
	GPUSCOPE_ERR_MAX = 16,
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
