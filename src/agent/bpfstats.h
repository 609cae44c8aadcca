/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The BPF side of the agent's self-profile: what the kernel accounts for each of the agent's BPF
 * programs (run time, runs, recursion misses), and the agent's own hold on that accounting
 * (BPF_ENABLE_STATS: on while the fd is open, for this agent's life, without the sysctl).
 */
#ifndef GPUSCOPE_BPFSTATS_H
#define GPUSCOPE_BPFSTATS_H

#include <stdio.h>

/*
 * Turns the kernel's BPF run-time accounting on until bpf_stats__release() (or exit): each run
 * of any BPF program on the machine then reads the clock twice. 0, or -errno (an old kernel:
 * -EINVAL; not root: -EPERM).
 */
int bpf_stats__hold(void);
void bpf_stats__release(void);

/*
 * gpuscope_agent_bpf_run_seconds_total / _runs_total{program,id} of every BPF program the
 * process holds, while the kernel accounts run time (kernel.bpf_stats_enabled is 1 or a
 * BPF_ENABLE_STATS fd is held); gpuscope_agent_bpf_recursion_misses_total{program,id} and
 * gpuscope_agent_bpf_stats_enabled always.
 */
void bpf_prog_stats__metrics(FILE *out);

#endif
