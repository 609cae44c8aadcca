/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the unwinder holds, for its callers and tests (unwind.h): a process's mappings, the kept
 * stacks, its counters, and whether its threads have settled.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include "agent/bpfutil.h"
#include "agent/unwind/cache.h"
#include "agent/unwind/unwind.h"
#include "agent/unwind/unwind_int.h"
#include "agent/unwind/unwind_maps.h"
#include "common/abi.h"
#include "common/util.h"

int unwinder__proc_mappings(struct unwinder *u, int pid, unsigned *ret_tables)
{
	struct unwind_proc *p = malloc(sizeof(*p));
	uint32_t key = (uint32_t)pid;
	int n;

	*ret_tables = 0;
	if (!p)
		return -ENOMEM;
	if (bpf_map_lookup_elem(u->procs_fd, &key, p)) {
		free(p);
		return -ENOENT;
	}
	n = (int)p->n;
	for (uint32_t i = 0; i < p->n && i < UNWIND_MAX_MAPS; i++)
		*ret_tables += !!(p->m[i].flags & UNWIND_MAP_TABLE);
	free(p);
	return n;
}

int unwinder__want_fd(struct unwinder *u)
{
	return u->want_fd;
}

void unwinder__stack_fds(struct unwinder *u, int *ret_stacks_fd, int *ret_stats_fd)
{
	*ret_stacks_fd = u->stacks_fd;
	*ret_stats_fd = u->stats_fd;
}

int unwinder__read_stack(struct unwinder *u, int id, __u64 *frames)
{
	struct unwind_stack st;
	uint32_t key = (uint32_t)id, n;

	if (id < 0 || bpf_map_lookup_elem(u->stacks_fd, &key, &st))
		return 0;
	n = st.words[0] & 0xff;
	if (n > GPUSCOPE_MAX_STACK)
		n = GPUSCOPE_MAX_STACK;
	memcpy(frames, st.words + 1, n * sizeof(*frames));
	return (int)n;
}

uint64_t unwinder__stacks_gen(struct unwinder *u)
{
	return __atomic_load_n(&u->stacks_gen, __ATOMIC_SEQ_CST);
}

void unwinder__settle(struct unwinder *u, unsigned timeout_ms)
{
	uint64_t end = mono_ns() + (uint64_t)timeout_ms * NSEC_PER_MSEC;
	uint32_t k;

	while (mono_ns() < end) {
		uint64_t gen = __atomic_load_n(&u->drains, __ATOMIC_SEQ_CST);
		bool idle;

		/* The builder posts its requests before it is idle, a drain counts itself before it
		 * takes requests, and it queues builds before it is done: so the queue first, then
		 * the requests, and no drain in between. */
		pthread_mutex_lock(&u->lock);
		idle = !u->queue_head && !u->building;
		pthread_mutex_unlock(&u->lock);
		if (idle && !u->pending && bpf_map_get_next_key(u->want_fd, NULL, &k) &&
		    gen == __atomic_load_n(&u->drains, __ATOMIC_SEQ_CST))
			return;
		usleep(5000);
	}
}

void unwinder__stats(struct unwinder *u, struct unwinder_stats *ret)
{
	pthread_mutex_lock(&u->lock);
	*ret = u->st;
	pthread_mutex_unlock(&u->lock);
	ret->walks = bpf_percpu_sum(u->stats_fd, UNWIND_ST_WALKS);
	ret->frames = bpf_percpu_sum(u->stats_fd, UNWIND_ST_FRAMES);
	ret->table_frames = bpf_percpu_sum(u->stats_fd, UNWIND_ST_TABLE_FRAMES);
	ret->fp_frames = bpf_percpu_sum(u->stats_fd, UNWIND_ST_FP_FRAMES);
	ret->no_proc = bpf_percpu_sum(u->stats_fd, UNWIND_ST_NO_PROC);
	if (u->cache) {
		struct uw_cache_stats cs;

		uw_cache__stats(u->cache, &cs);
		ret->cache_on = true;
		ret->cache_hits = cs.hits;
		ret->cache_misses = cs.misses;
		ret->cache_corrupt = cs.corrupt;
		ret->cache_stores = cs.stores;
		ret->cache_store_errors = cs.store_errors;
		ret->cache_evicted = cs.evicted;
		ret->cache_bytes = cs.bytes;
		ret->cache_max_bytes = cs.max_bytes;
		ret->cache_load_ns = cs.load_ns;
	}
	ret->parent_maps = bpf_percpu_sum(u->stats_fd, UNWIND_ST_PARENT);
	ret->no_table = bpf_percpu_sum(u->stats_fd, UNWIND_ST_NO_TABLE);
	ret->nested = bpf_percpu_sum(u->stats_fd, UNWIND_ST_NESTED);
	ret->stack_full = bpf_percpu_sum(u->stats_fd, UNWIND_ST_STACK_FULL);
	ret->stack_collisions = bpf_percpu_sum(u->stats_fd, UNWIND_ST_STACK_COLLISION);
	for (int i = 0; i < 16; i++)
		ret->truncated[i] = bpf_percpu_sum(u->stats_fd, UNWIND_ST_TRUNC_BASE + i);
}
