/* SPDX-License-Identifier: Apache-2.0 */
/* The CUPTI USDT module's counters (for /metrics, tests and benchmarks). */
#ifndef GPUSCOPE_CUPTI_USDT_H
#define GPUSCOPE_CUPTI_USDT_H

#include <linux/types.h>
#include <stdbool.h>
#include <stdint.h>
#include "common/abi.h"
#include <stddef.h>
#include <sys/types.h>
#include "common/abi_cupti.h"

struct cupti_stats {
	uint64_t launches;		/* launch events received */
	uint64_t records;		/* activity records received */
	uint64_t kernels, joined, unjoined;	/* unjoined: no launch stack (kept, leaf only) */
	uint64_t joined_late;	/* of joined: the record came before its launch (parked) */
	uint64_t graph_kernels, memcpys, memsets, syncs;
	uint64_t names, unknown_names;
	uint64_t clock_pairs, clock_max_step_ns;	/* largest change of a process's offset */
	uint64_t no_clock;		/* records dropped: no clock pair from that process yet */
	uint64_t launches_evicted, stacks_evicted, stacks_symbolized;
	uint64_t busy_intervals, busy_late, busy_dropped;
	uint64_t bad_events, bad_records, batch_errors, agent_drops;
	uint64_t filtered;	/* not sent: outside --pid, or dropped by a relabel rule */
	uint64_t procs_seen, procs_full, processes;
	uint64_t libs_attached, libs_skipped;
	uint64_t scan_maps_read, scan_maps_skipped;	/* processes' maps read by the scans, not */
	/* autograd: libtorch_cpu files whose Engine::execute is probed, ones that could not be;
	 * backward calls seen, kernels of autograd's threads put under their caller's stack, and
	 * such kernels left under their own thread's stack (the caller's was replaced or unknown) */
	uint64_t torch_attached, torch_attach_errors;
	uint64_t backwards, backward_kernels, backward_lost;
	/* backward calls whose stack was walked, sent as their thread's last walked one and
	 * re-used, or so sent with that stack no longer kept (not attached: counted lost) */
	uint64_t backward_walks, backward_reused, backward_reuse_lost;
	uint64_t python_kernels, no_python_kernels;	/* records.c python_caller() */
	uint64_t cupti_drops, lib_drops;	/* as reported by the libraries, summed */
	/* the ring's drain thread (agent/ringdrain.h): woken at its mark, events the full queue
	 * lost, activity records in them, most queue memory at once */
	uint64_t ring_wakeups, queue_lost, queue_lost_recs, queue_peak_bytes;
	/* CUDA ordinals put on NVML's GPU by their UUID, and ones NVML did not know */
	uint64_t devices_mapped, devices_unmapped;
	uint64_t bpf[GPUSCOPE_ERR_MAX];	/* by enum gpuscope_err (cupti range), summed over CPUs */
	/* trace windows */
	uint64_t windows_asked, windows_opened[8], windows_closed;	/* opened: by trace_reason */
	uint64_t win_busy, win_failed, win_no_status, win_attach_errors, win_early, win_stray;
	uint64_t win_cost_ns, win_traced_ns;
	/* handed over to a user's CUPTI client (of them: after the client's call went on),
	 * refused while such a client held CUPTI, clients that let go */
	uint64_t win_yielded, win_yield_late, win_user, user_released;
	double always_on_max;		/* largest always-on share of a process (windows' budget) */
	/* the window switch thread: jobs posted and not reaped, its longest attach and detach */
	uint64_t win_switch_pending, win_attach_max_ns, win_detach_max_ns;
};

/* Snapshot of the running module's counters (zeros when not started). Main-loop thread. */
void cupti_usdt__stats(struct cupti_stats *ret);

/*
 * On-demand capture: traces pid (0: every injected process) for duration_ns from now. Returns
 * the number of processes that will be traced, -ENOENT when none is injected, -ENOTSUP when
 * the module is not running; *why says it in words. Main-loop thread.
 */
int cupti_usdt__capture(pid_t pid, uint64_t duration_ns, char *why, size_t whylen);

/* Is pid (0: any process) still in, or waiting for, a capture window? Main-loop thread. */
bool cupti_usdt__capturing(pid_t pid);

/* The capture poll's counters, for /metrics (capture_poll.c's thread; any thread). */
void cupti_usdt__capture_counts(uint64_t polls, uint64_t errors, uint64_t answered,
				uint64_t refused);

#endif
