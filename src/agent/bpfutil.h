/* SPDX-License-Identifier: Apache-2.0 */
/* Small libbpf helpers shared by the agent's BPF modules. */
#ifndef GPUSCOPE_BPFUTIL_H
#define GPUSCOPE_BPFUTIL_H

#include <stdint.h>

/*
 * Sum over CPUs of the u64 at `key` of a BPF_MAP_TYPE_PERCPU_ARRAY (the modules' error and
 * event counters). 0 when the map cannot be read.
 */
uint64_t bpf_percpu_sum(int map_fd, uint32_t key);

#endif
