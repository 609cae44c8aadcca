/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUPTI module's state, shared by its files: cupti_usdt.c (attaching, processes, the
 * module), records.c (the ring's events: launches, records, names, clocks) and winctl.c (trace
 * windows: who opens them, when they close, what they report). Main-loop thread only, like the
 * module.
 */
#ifndef GPUSCOPE_AGENT_CUPTI_INT_H
#define GPUSCOPE_AGENT_CUPTI_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "agent/agent.h"
#include "agent/cupti/cupti_usdt.h"
#include "agent/cupti/window.h"
#include "agent/cupti/winwork.h"
#include "common/hmap.h"
#include "common/abi_cupti.h"
#include "common/util.h"

struct bpf_link;
struct ring_drain;

#define MAX_LIBS	 32
#define NPROBES		 6
#define MAX_PROCS	 256
#define LAUNCH_BITS	 18		/* pending launches (all ways) */
#define STACK_BITS	 14		/* raw launch stacks (all ways) */
#define STACK_WAYS	 8		/* per set; the least recently launched one is replaced */
#define MAX_DEVICES	 64
#define PARK_CAP	 4096		/* kernel records waiting one drain for their launch */
#define BUSY_CAP	 65536		/* pending kernel intervals per device before the union */
#define BUSY_GRACE_NS	 (1500 * NSEC_PER_MSEC)	/* records arrive at most this late */
#define SCAN_EVERY_NS	 (2 * NSEC_PER_SEC)
/* events the drain thread may hold for a busy main loop: ~8 k launches 127 frames deep, twice
 * that at typical depths (~60 ms of a launch-bound loop on the H200 on top of the ring's 4 MiB) */
#define QUEUE_BYTES	 (8u << 20)

#define BW_THREADS	 8		/* per process: threads whose last backward stack is kept */

#define STATUS_WAIT_NS	 (3 * NSEC_PER_SEC)	/* a window's status must come within this */

/*
 * Where a process's window stands. The window probe's attach and detach run on the switch
 * thread (winwork.h): the main loop posts them and reaps them at its next ticks.
 */
enum win_state {
	WIN_IDLE = 0,	/* closed; the controller may open one once no switch is in flight */
	WIN_ATTACHING,	/* the attach is posted; not done yet (the window's time has not begun) */
	WIN_ASKED,	/* the window probe is attached; waiting for the library's OPENED */
	WIN_OPEN,	/* the library traces */
	WIN_CLOSING,	/* the detach is posted (or done); waiting for CLOSED */
};

/*
 * A thread's last walked backward call (cupti.bpf.c sends "same stack as tid's walk at
 * walked_ns" instead of walking again): its stack in the stack cache, as the process's bw_*.
 */
struct bw_thread {
	uint32_t tid;		/* 0: free */
	uint32_t slot;
	uint64_t walked_ns;	/* the walked event's ktime_ns */
	uint64_t hash;		/* 0: a nested call (autograd's own thread): not a parent */
};

struct lib {
	dev_t dev;
	ino_t ino;
	struct bpf_link *links[NPROBES];
};

struct proc {
	pid_t pid;			/* 0: free slot */
	bool have_clock;
	bool dead;
	int64_t cupti_to_mono;		/* mono = cupti + this */
	char comm[GPUSCOPE_COMM_LEN + 1];
	char **names;		/* demangled, by library index; GPUSCOPE_CUPTI_NAMES_CAP */
	uint64_t cupti_drops, lib_drops;	/* cumulative, as last reported */
	char *lib_path;			/* the library as this process maps it; NULL: none seen */
	bool lib_hello;			/* the library announced itself (status HELLO) */
	bool python_seen;		/* a kernel's launch stack held a Python frame */
	/* trace window */
	enum win_state win;
	enum trace_reason reason;
	/*
	 * The pid-filtered attachment to the window probe: the main loop's between the reap of
	 * its attach and the post of its detach, NULL otherwise. One switch job at a time per
	 * process (job_busy: posted and not reaped; the switch thread owns job then), and a slot
	 * is not reused while it has a job or a link.
	 */
	struct bpf_link *win_link;
	struct winwork_job job;
	bool job_busy;
	uint64_t asked_ns;		/* attach (or detach) done; status must come within
					 * STATUS_WAIT_NS of it. CLOCK_MONOTONIC */
	uint64_t close_at_ns;		/* 0 until the attach is done */
	uint64_t len_ns;		/* asked length; counted from the attach's end or OPENED */
	uint64_t opened_ns, open_cost_ns;	/* from the library's OPENED */
	bool win_opened;		/* this window's OPENED came */
	uint64_t emitted_ns;	/* a long window's gpu_trace_window interval reaches this far */
	uint64_t win_kernels, win_launches;
	uint64_t win_probe_ns;		/* the launch probes' BPF time in this window */
	uint64_t devices;		/* bit per GPU (gpu_of(), < 64) whose kernels the window saw */
	uint64_t all_devices;		/* every GPU (gpu_of()) ever seen in this process */
	/* by CUDA ordinal: the UUID the library reported, and NVML's index of it + 1 (0: not
	 * resolved yet, 0xffff: NVML does not know it) */
	unsigned char dev_uuid[MAX_DEVICES][16];
	uint16_t nvml_gpu[MAX_DEVICES];
	uint64_t uuid_known;		/* ordinals with dev_uuid set */
	bool early;			/* closed early: over its budget */
	bool yielded;			/* handed CUPTI over to a user's client (status YIELDED) */
	const char *refused;		/* "cupti busy", "cupti failed", "user profiler", or NULL */
	struct trace_budget budget;
	uint64_t capture_ns;		/* an on-demand capture of this length waits to open */
	/* the latest backward call (autograd Engine::execute) from outside autograd's threads:
	 * its thread and its stack in the stack cache (bw_hash 0: none seen) */
	uint32_t bw_tid, bw_slot;
	uint64_t bw_hash;
	struct bw_thread bw_threads[BW_THREADS];	/* the oldest walk is replaced */
};

struct launch {
	uint32_t pid, cid;
	uint32_t tid;
	uint32_t stack_slot;
	uint64_t stack_hash;
	uint64_t seq;		/* insertion order, for replacing the oldest way */
	/* the stack of the backward call under way in the process when another thread launched
	 * (an autograd device thread's kernels go under it): its slot, and its hash's low half
	 * (0: none) */
	uint32_t parent_slot, parent_check;
};

struct raw_stack {
	uint64_t hash;		/* 0: empty */
	uint64_t used;		/* launch_seq of its latest launch */
	uint32_t pid, n;
	__u64 frames[GPUSCOPE_MAX_STACK];
};

struct span {
	uint64_t start, end;
};

/* A kernel record whose launch had not come: given until the end of the next drain. */
struct parked {
	pid_t pid;
	uint32_t drains;		/* drain ends it has seen */
	struct gpuscope_cupti_rec r;
};

struct busy {
	bool used;
	uint32_t device;
	char gpu_s[12];
	struct span *pend;
	size_t n;
	bool unsorted;		/* a span added before the last one's start: busy_flush() sorts */
	uint64_t max_end, emitted_end;
};

struct cupti_state {
	struct cupti_bpf *skel;
	struct winwork *work;		/* the window switch thread */
	bool stopping;			/* cupti_stop(): attaches reaped now are undone */
	struct ring_drain *drain;	/* the ring, drained by its own thread (ringdrain.h) */
	uint64_t queue_lost_recs;	/* records in them; atomic (the drain thread adds) */
	struct agent *a;
	struct lib libs[MAX_LIBS];
	int nlibs;
	struct lib torch[MAX_LIBS];	/* libtorch_cpu files: links[0] on Engine::execute */
	int ntorch;
	uint64_t next_scan_ns;
	/*
	 * pid -> its start time and address-space size when a scan last read its maps with nothing
	 * left to do: the next scans skip its maps while both stay (a library loaded grows it).
	 */
	struct u64map scan_seen;
	struct u64map gpu_pids;		/* the processes the tracker follows (procs/tracker.h) */
	bool tracking;			/* procs__acquire() held */
	struct proc procs[MAX_PROCS];
	struct launch *launches;	/* set-associative, LAUNCH_WAYS per bucket */
	uint64_t launch_seq;
	struct raw_stack *stacks;	/* set-associative, STACK_WAYS per set */
	struct parked *parked;		/* PARK_CAP */
	size_t nparked;
	struct busy busy[MAX_DEVICES];
	struct trace_cfg cfg;
	struct cupti_stats st;
};

extern struct cupti_state *cupti_live;	/* NULL while the module is not running */

/* cupti_usdt.c */
void cupti_scan_procs(struct cupti_state *c);
/* Is pid inside the --pid filter (every pid without one)? */
bool cupti_pid_wanted(struct agent *a, pid_t pid);
/* pid's slot if it has one, else NULL. */
struct proc *cupti_proc_find(struct cupti_state *c, pid_t pid);
/* pid's slot, taken on first sight (over a dead process's if full); NULL when none is left. */
struct proc *cupti_proc_get(struct cupti_state *c, pid_t pid);
/* Makes on_backward walk thread tid's next backward call (its last walk is not kept here). */
void cupti_backward_rewalk(struct cupti_state *c, uint32_t tid);

/* records.c */
/*
 * A launch of pid's correlation id cid (and cid2 when not 0) from thread tid with the given
 * stack, pending until its record comes. The stack is kept by content in a set-associative
 * cache: a pending launch's stack is lost only after STACK_WAYS other stacks of its set were
 * launched since (counted when its record finds it gone). p: pid's slot (may be NULL), whose
 * backward call under way the launch carries when tid is not its caller.
 */
void cupti_launch_put(struct cupti_state *c, struct proc *p, uint32_t pid, uint32_t tid,
		      uint32_t cid, uint32_t cid2, const __u64 *frames, uint32_t n);
/*
 * A backward call's entry in process p (autograd's Engine::execute) from thread tid with its
 * stack, walked at walked_ns (the BPF event's ktime_ns): launches of p's other threads from now
 * on carry it as their parent, until the next; unless nested (the caller is one of autograd's
 * own threads), which only tid's later repeats of it (cupti_backward_same()) need to know.
 */
void cupti_backward_put(struct cupti_state *c, struct proc *p, uint32_t tid, uint64_t walked_ns,
			bool nested, const __u64 *frames, uint32_t n);
/*
 * A backward call of tid from the call site of its walk at walked_ns (not walked again): that
 * walk's stack becomes the parent again. False when it is not kept (never seen, replaced in
 * the cache): p then has no parent (autograd's kernels count as lost, never under another
 * stack), counted in st.backward_reuse_lost; the caller tells BPF to walk tid's next call.
 */
bool cupti_backward_same(struct cupti_state *c, struct proc *p, uint32_t tid, uint64_t walked_ns);
/*
 * The stack of pid's launch cid, NULL when the launch was not seen or its stack was replaced
 * (counted in st.stacks_evicted). *parent (may be NULL): the backward call's stack it carries,
 * NULL when none or replaced since.
 */
const struct raw_stack *cupti_launch_stack(struct cupti_state *c, uint32_t pid, uint32_t cid,
					   const struct raw_stack **parent);
/* A ring event (ring_drain__take() callback; ctx is the module's state). Returns 0. */
int cupti_handle_event(void *ctx, void *data, size_t size);
/*
 * At a drain's end: kernel records parked for want of their launch are joined if it came
 * meanwhile, else emitted unjoined once they waited a whole drain (all of them when final).
 */
void cupti_parked_retry(struct cupti_state *c, bool final);
/* Lends (on) or takes back the module's backward callers to a->shared.backward_caller. */
void cupti_backward_hook(struct agent *a, bool on);
/* Emits the gpu_busy unions that can no longer grow; all pending ones when force. */
void cupti_busy_flush(struct cupti_state *c, bool force);
void cupti_on_device(struct proc *p, uint32_t ordinal, uint64_t a, uint64_t b);

/* winctl.c */
void cupti_on_status(struct cupti_state *c, struct proc *p, uint32_t what, uint64_t a, uint64_t b);
void cupti_control_windows(struct cupti_state *c);
void cupti_win_detach(struct cupti_state *c, struct proc *p, uint64_t now);
/* Takes the switch thread's done jobs: windows whose attach is done, links to undo. */
void cupti_win_reap(struct cupti_state *c);
/* Stops the switch thread (what is in flight finishes) and destroys what it attached. */
void cupti_win_shutdown(struct cupti_state *c);

#endif
