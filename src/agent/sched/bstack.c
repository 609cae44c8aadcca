// SPDX-License-Identifier: Apache-2.0
/*
 * What a blocked stack came to in the current batch, by the stack-map ids it was reported with:
 * a thread that blocks again where it blocked before costs a lookup here instead of two map reads,
 * a hash of its frames and its classification (strips.h, struct bstack_cache).
 */
#include <string.h>
#include "agent/sched/strips.h"

static unsigned slot_of(const struct bstack_key *k)
{
	uint64_t h = (uint64_t)k->tgid * 0x9e3779b97f4a7c15ULL;

	h ^= (uint64_t)(uint32_t)k->kstack_id * 0xbf58476d1ce4e5b9ULL;
	h ^= (uint64_t)(uint32_t)k->ustack_id * 0x94d049bb133111ebULL;
	h ^= (uint64_t)(uint32_t)k->syscall_nr * 0xd6e8feb86659fd93ULL + k->cuda_sync;
	h ^= h >> 31;
	return (unsigned)(h * 0x9e3779b97f4a7c15ULL >> 40) % BSTACK_SLOTS;
}

static bool same_key(const struct bstack_key *a, const struct bstack_key *b)
{
	return a->tgid == b->tgid && a->kstack_id == b->kstack_id &&
	       a->ustack_id == b->ustack_id && a->syscall_nr == b->syscall_nr &&
	       a->cuda_sync == b->cuda_sync;
}

bool bstack_cache__get(struct bstack_cache *c, const struct bstack_key *k, uint64_t batch_id,
		       uint64_t kgen, uint64_t ugen, uint64_t now_ns, struct bstack_val *ret)
{
	const struct bstack_entry *e = &c->e[slot_of(k)];

	if (!e->batch_id || e->batch_id != batch_id || !same_key(&e->key, k) || e->kgen != kgen ||
	    e->ugen != ugen || (e->retry_ns && now_ns >= e->retry_ns)) {
		c->misses++;
		return false;
	}
	c->hits++;
	*ret = e->val;
	return true;
}

void bstack_cache__put(struct bstack_cache *c, const struct bstack_key *k, uint64_t batch_id,
		       uint64_t kgen, uint64_t ugen, uint64_t retry_ns, const struct bstack_val *v)
{
	struct bstack_entry *e = &c->e[slot_of(k)];

	if (ugen & 1)	/* the unwinder is clearing its stacks: what an id held is in flux */
		return;
	if (c->pids_batch != batch_id) {
		memset(c->pids, 0, sizeof(c->pids));
		c->pids_batch = batch_id;
	}
	c->pids[k->tgid / 64 % 16] |= 1ULL << (k->tgid % 64);
	memset(e, 0, sizeof(*e));
	e->key = *k;
	e->batch_id = batch_id;
	e->kgen = kgen;
	e->ugen = ugen;
	e->retry_ns = retry_ns;
	e->val = *v;
}

void bstack_cache__forget_pid(struct bstack_cache *c, uint32_t tgid)
{
	/* entries of batches before pids_batch never match again */
	if (!(c->pids[tgid / 64 % 16] & (1ULL << (tgid % 64))))
		return;
	for (unsigned i = 0; i < BSTACK_SLOTS; i++)
		if (c->e[i].key.tgid == tgid)
			c->e[i].batch_id = 0;
}
