/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ABI between libgpuscope_cupti.so (in the CUDA process), the agent's cupti BPF program and the
 * agent: the USDT probes the library fires, the compact activity record array one probe hands
 * over per completed CUPTI buffer, and the ring-buffer events the BPF side emits. Includes
 * nothing: the includer supplies __u8.. __u64.
 */
#ifndef GPUSCOPE_ABI_CUPTI_H
#define GPUSCOPE_ABI_CUPTI_H

/*
 * USDT probes, provider "gpuscope_cupti" (src/cupti/probes.h fires them):
 *   launch(u32 cid, u32 cid2)        launching thread, once per kernel/graph launch; cid is the
 *                                    outermost launch API's correlation id, cid2 a nested
 *                                    launch API's (driver inside runtime) when it differs, else 0
 *   buffer(u64 recs, u32 n)          CUPTI's completion thread: n struct gpuscope_cupti_rec
 *   name(u32 idx, u64 str)           a new kernel name (NUL-terminated, mangled) got index idx
 *   clock(u64 cupti_ns, u64 mono_ns) a cuptiGetTimestamp() / CLOCK_MONOTONIC pair
 *   drops(u64 cupti, u64 lib)        cumulative records lost: by CUPTI, by the library's bounds
 *   window(u32 open)                 not fired in normal operation: its semaphore is the switch.
 *                                    The agent attaches to it for one process (pid-filtered
 *                                    uprobe: the kernel raises the semaphore in that process
 *                                    only) to open a trace window there, detaches to close it
 *   status(u32 what, u64 a, u64 b)   what the library did: enum gpuscope_cupti_status
 */
#define GPUSCOPE_CUPTI_PROVIDER "gpuscope_cupti"

enum gpuscope_cupti_rec_kind {
	GPUSCOPE_CUPTI_KERNEL = 1,
	GPUSCOPE_CUPTI_MEMCPY = 2,
	GPUSCOPE_CUPTI_MEMSET = 3,
	GPUSCOPE_CUPTI_SYNC = 4,
};

/* status probe: what happened, with two numbers (a, b). Times are CLOCK_MONOTONIC ns. */
enum gpuscope_cupti_status {
	GPUSCOPE_CUPTI_ST_OPENED = 1,	/* a = open time, b = ns the library spent opening */
	GPUSCOPE_CUPTI_ST_CLOSED = 2,	/* a = close time, b = ns spent closing (flush included) */
	GPUSCOPE_CUPTI_ST_BUSY = 3,	/* another CUPTI client holds the subscription; a = time */
	GPUSCOPE_CUPTI_ST_FAILED = 4,	/* a = time, b = CUptiResult of the call that failed */
	GPUSCOPE_CUPTI_ST_HELLO = 5,	/* library initialised; a = time, b = close mode */
	/* a user's CUPTI client (torch.profiler, Nsight, its own code) started while our window
	 * was open: the window was closed for it before its call went on. a = time, b = ns the
	 * hand-over took, | YIELD_LATE when the client's call could not wait for it */
	GPUSCOPE_CUPTI_ST_YIELDED = 6,
	GPUSCOPE_CUPTI_ST_USER = 7,	/* window refused: a user's CUPTI client holds CUPTI; a = time */
	GPUSCOPE_CUPTI_ST_RELEASED = 8,	/* the user's client let go of CUPTI; a = time */
	/* what = DEVICE + CUDA ordinal (< 256): that device's UUID, bytes 0-7 in a and 8-15 in b
	 * (memory order), sent at each window's open; a kernel record's `device` is the ordinal */
	GPUSCOPE_CUPTI_ST_DEVICE = 0x100,
};
#define GPUSCOPE_CUPTI_MAX_ORDINALS 256
#define GPUSCOPE_CUPTI_YIELD_LATE (1ull << 63)	/* YIELDED's b: closed after the client went on */

#define GPUSCOPE_CUPTI_NAME_NONE 0xffffffffu	/* name_idx when there is no (known) name */
#define GPUSCOPE_CUPTI_NAME_MAX	 512		/* bytes of a name the agent reads, NUL included */
#define GPUSCOPE_CUPTI_NAMES_CAP (1u << 15)	/* distinct kernel names per process (name idx) */

/* One completed activity, as the library hands it over. Times are cuptiGetTimestamp() ns. */
struct gpuscope_cupti_rec {
	__u16 kind;		/* enum gpuscope_cupti_rec_kind */
	__u16 subkind;		/* memcpy: CUpti_ActivityMemcpyKind; sync: its type; memset: memoryKind */
	__u32 name_idx;		/* kernel: index into the per-process name table */
	__u32 correlation_id;
	__u32 device;
	__u32 context;
	__u32 stream;
	__u64 start_ns, end_ns;
	__u32 grid[3], block[3];	/* kernel launch geometry */
	__u32 graph_id;		/* 0: not launched from a CUDA graph */
	__u32 _pad;
	__u64 graph_node_id;
	__u64 bytes;		/* memcpy/memset size */
};
_Static_assert(sizeof(struct gpuscope_cupti_rec) == 88, "ABI change: bump GPUSCOPE_CUPTI_ABI");

/* Ring-buffer events from src/agent/cupti/cupti.bpf.c; their types: the registry in abi.h. */

/* launch: followed by ustack_len user frames (__u64, innermost first). */
struct gpuscope_ev_cupti_launch {
	__u32 type, size;
	__u64 ktime_ns;
	__u32 tgid, tid;
	__u32 cid, cid2;
	__u32 ustack_len;
	__u32 probe_ns;		/* this probe's own BPF run time (the stack walk): part of what a
				 * window costs the process (window.h) */
};
_Static_assert(sizeof(struct gpuscope_ev_cupti_launch) == 40, "ABI change");

#define GPUSCOPE_CUPTI_RECS_PER_EV 32
#define GPUSCOPE_CUPTI_MAX_RECS	   (1u << 16)	/* per buffer probe hit; the library splits */

/* recs: a chunk of one buffer probe hit. */
struct gpuscope_ev_cupti_recs {
	__u32 type, size;
	__u32 tgid;
	__u32 n;		/* valid records in recs[] */
	__u32 seq;		/* chunk index within its probe hit */
	__u32 err;		/* bpf_probe_read_user failed: records lost */
	struct gpuscope_cupti_rec recs[GPUSCOPE_CUPTI_RECS_PER_EV];
};

struct gpuscope_ev_cupti_name {
	__u32 type, size;
	__u32 tgid, idx;
	char name[GPUSCOPE_CUPTI_NAME_MAX];
};

/* clock, drops and status: two numbers each (status: `what` says which). */
struct gpuscope_ev_cupti_pair {
	__u32 type, size;
	__u32 tgid, what;
	__u64 a, b;
};

#endif
