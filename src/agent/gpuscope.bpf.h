/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every BPF program of the agent shares: the ABI registry (common/abi.h) and the per-CPU
 * `errors` counter map with count_err(), indexed by enum gpuscope_err. Each program counts only
 * in its own range of codes; user space reads the map through bpf_counters__add() (bpfutil.h).
 * Include after vmlinux.h and <bpf/bpf_helpers.h>.
 */
#ifndef GPUSCOPE_BPF_H
#define GPUSCOPE_BPF_H

#include "common/abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GPUSCOPE_ERR_MAX);
	__type(key, __u32);
	__type(value, __u64);
} errors SEC(".maps");

/* Adds n to counter `which` (enum gpuscope_err) of this CPU. */
static __always_inline void count_err_n(__u32 which, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&errors, &which);

	if (v)
		*v += n;
}

static __always_inline void count_err(__u32 which)
{
	count_err_n(which, 1);
}

/*
 * A queue of the keys a program adds to one of its aggregation maps (hash maps that user space
 * drains every tick): user space pops the keys instead of walking the map, a walk that scans
 * every bucket however few keys there are (htab_map_get_next_key: a tenth of the agent's CPU on
 * the H100 for the two maps drained 20 times a second). Push each key right after the
 * BPF_NOEXIST insert that added it; a key the queue could not take sets *lost, and user space
 * then walks the map once (bpfutil.h, bpf_keyq_drain()).
 */
#define GPUSCOPE_KEYQ(name, ktype, n)                                                              \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_QUEUE);                                                  \
		__uint(max_entries, n);                                                            \
		__type(value, ktype);                                                              \
	} name SEC(".maps")

static __always_inline void keyq_push(void *q, const void *key, __u32 *lost)
{
	if (bpf_map_push_elem(q, key, 0))
		*lost = 1;
}

#endif
