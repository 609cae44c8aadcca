/* SPDX-License-Identifier: Apache-2.0 */
/* Small libbpf helpers shared by the agent's BPF modules. */
#include <stdlib.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "agent/bpfutil.h"

uint64_t bpf_percpu_sum(int map_fd, uint32_t key)
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t sum = 0, *vals;

	if (ncpu <= 0)
		return 0;
	vals = calloc(ncpu, sizeof(*vals));
	if (vals && !bpf_map_lookup_elem(map_fd, &key, vals))
		for (int i = 0; i < ncpu; i++)
			sum += vals[i];
	free(vals);
	return sum;
}
