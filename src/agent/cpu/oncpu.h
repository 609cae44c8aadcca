/* SPDX-License-Identifier: Apache-2.0 */
/*
 * On-CPU sampler: loads oncpu.bpf.c, opens one sampling perf event per online CPU, and hands
 * each sample (with its own timestamp and both stacks) to a callback.
 */
#ifndef GPUSCOPE_ONCPU_H
#define GPUSCOPE_ONCPU_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/types.h>
#include "common/abi.h"

enum oncpu_event { ONCPU_EVENT_AUTO, ONCPU_EVENT_CPU_CLOCK, ONCPU_EVENT_CYCLES };

struct oncpu_opts {
	unsigned frequency_hz;		/* samples per second per CPU */
	const pid_t *pids;		/* tgid filter; npids == 0: every process */
	int npids;
	bool no_kernel;			/* skip kernel stacks */
	enum oncpu_event event;		/* AUTO: hardware cycles if present, else cpu-clock */
	unsigned ringbuf_mb;		/* 0: sized for 0.5 s of samples, at least 1 MiB */
	struct unwinder *unwinder;	/* shared user-stack walker; NULL: frame pointers only */
};

/* Called for each sample from oncpu__poll(); frames: kstack_len kernel then ustack_len user. */
typedef void (*oncpu_cb)(void *ctx, const struct gpuscope_ev_cpu_sample *ev, const __u64 *frames);
/* Called when a sampled process execs (exec = true) or exits; may be NULL. */
typedef void (*oncpu_proc_cb)(void *ctx, pid_t tgid, bool exec, uint64_t ktime_ns);

struct oncpu;

/*
 * Loads and attaches. Returns NULL with errno set; *ret_why (static string) then says what is
 * missing and how to fix it (privilege, BTF, perf_event_paranoid, program type).
 */
struct oncpu *oncpu__new(const struct oncpu_opts *opts, oncpu_cb cb, oncpu_proc_cb proc_cb,
			 void *ctx, const char **ret_why);
/* Drains the ring buffer, waiting up to timeout_ms (0: don't wait). Events handled or -errno. */
int oncpu__poll(struct oncpu *o, int timeout_ms);
/* Adds a tgid to the filter at run time (only when started with a filter). 0 or -errno. */
int oncpu__add_pid(struct oncpu *o, pid_t pid);
void oncpu__free(struct oncpu *o);

struct oncpu_stats {
	uint64_t taken;		/* samples the BPF program saw (after the idle filter) */
	uint64_t delivered;	/* handed to the callback */
	uint64_t lost;		/* ring buffer full */
	uint64_t ustack_err, kstack_err;
	int ncpus;
	const char *event;	/* "cpu-clock" or "cycles" */
};
void oncpu__stats(const struct oncpu *o, struct oncpu_stats *ret);

#endif
