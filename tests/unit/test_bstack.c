/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The blocked-stack cache (src/agent/sched/bstack.c): a stack is found again by its map ids only
 * while the maps were not cleared, in the same batch, before its retry time, and never under
 * another key; ids reused after a clear read the maps again.
 */
#include <stdlib.h>
#include "test.h"
#include "agent/sched/strips.h"

#define BATCH 0x1234567ULL

static struct bstack_cache *cache(void)
{
	return calloc(1, sizeof(struct bstack_cache));
}

static bool found(struct bstack_cache *c, const struct bstack_key *k, uint64_t batch, uint64_t kgen,
		  uint64_t ugen, uint64_t now, int64_t want_stack)
{
	struct bstack_val v = { .stack = -7 };
	bool hit = bstack_cache__get(c, k, batch, kgen, ugen, now, &v);

	if (want_stack < 0)
		return ASSERT_TRUE(!hit, "no entry");
	return ASSERT_TRUE(hit, "an entry") && ASSERT_EQ(v.stack, want_stack, "its stack");
}

/* Stack ids reused after the map was cleared: the entry of the old frames is not returned. */
static bool test_bstack_ids_reused_after_clear(void)
{
	struct bstack_cache *c = cache();
	struct bstack_key k = { .tgid = 42, .kstack_id = 5, .ustack_id = 7, .syscall_nr = 230 };
	struct bstack_val old = { .stack = 11, .reason = BLOCKED_SLEEP };
	struct bstack_val now = { .stack = 12, .reason = BLOCKED_FUTEX };
	bool ok = c && found(c, &k, BATCH, 0, 0, 100, -1);

	if (!ok)
		goto out;
	bstack_cache__put(c, &k, BATCH, 0, 0, 0, &old);
	ok = found(c, &k, BATCH, 0, 0, 100, 11) &&
	     /* the sched module cleared its stack map: ids 5 and 7 may now name other frames */
	     found(c, &k, BATCH, 1, 0, 100, -1);
	if (!ok)
		goto out;
	bstack_cache__put(c, &k, BATCH, 1, 0, 0, &now);	/* read again after the clear */
	ok = found(c, &k, BATCH, 1, 0, 100, 12) &&
	     /* the unwinder cleared its stacks (its count moved by two) */
	     found(c, &k, BATCH, 1, 2, 100, -1);
	if (!ok)
		goto out;
	/* while the unwinder's clear runs (odd count) nothing is kept: the read may be stale */
	bstack_cache__put(c, &k, BATCH, 1, 3, 0, &old);
	ok = found(c, &k, BATCH, 1, 3, 100, -1) && found(c, &k, BATCH, 1, 4, 100, -1);
	if (!ok)
		goto out;
	bstack_cache__put(c, &k, BATCH, 1, 4, 0, &old);
	ok = found(c, &k, BATCH, 1, 4, 100, 11) && ASSERT_EQ(c->hits, 3, "hits") &&
	     ASSERT_EQ(c->misses, 5, "misses");
out:
	free(c);
	return ok;
}

/* An entry lives for its batch, until its retry time, and until an exec of its process. */
static bool test_bstack_lifetime(void)
{
	struct bstack_cache *c = cache();
	struct bstack_key k = { .tgid = 42, .kstack_id = 5, .ustack_id = -14 };
	struct bstack_key other = { .tgid = 43, .kstack_id = 5, .ustack_id = -14 };
	struct bstack_val v = { .stack = 3, .reason = BLOCKED_IO };
	bool ok = c != NULL;

	if (!ok)
		goto out;
	bstack_cache__put(c, &k, BATCH, 0, 0, 0, &v);
	ok = found(c, &k, BATCH, 0, 0, 1, 3) && found(c, &k, BATCH + 2, 0, 0, 1, -1);
	if (!ok)
		goto out;
	/* unresolved frames: symbolized again once the stack cache's retry time is reached */
	bstack_cache__put(c, &k, BATCH, 0, 0, 500, &v);
	ok = found(c, &k, BATCH, 0, 0, 499, 3) && found(c, &k, BATCH, 0, 0, 500, -1);
	if (!ok)
		goto out;
	bstack_cache__put(c, &k, BATCH, 0, 0, 0, &v);
	bstack_cache__put(c, &other, BATCH, 0, 0, 0, &v);
	bstack_cache__forget_pid(c, 43);
	ok = found(c, &k, BATCH, 0, 0, 1, 3) && found(c, &other, BATCH, 0, 0, 1, -1);
	if (!ok)
		goto out;
	bstack_cache__forget_pid(c, 42);
	ok = found(c, &k, BATCH, 0, 0, 1, -1);
out:
	free(c);
	return ok;
}

/* Keys that share a slot, and keys that differ in one field: each finds only its own entry. */
static bool test_bstack_keys(void)
{
	struct bstack_cache *c = cache();
	struct bstack_key base = { .tgid = 7, .kstack_id = 100, .ustack_id = 200, .syscall_nr = 202 };
	struct bstack_key var[5];
	int hits = 0;
	bool ok = c != NULL;

	if (!ok)
		goto out;
	for (int i = 0; i < 5; i++)
		var[i] = base;
	var[0].tgid++;
	var[1].kstack_id++;
	var[2].ustack_id++;
	var[3].syscall_nr++;
	var[4].cuda_sync = true;
	bstack_cache__put(c, &base, BATCH, 0, 0, 0, &(struct bstack_val){ .stack = 1 });
	for (int i = 0; i < 5 && ok; i++)
		ok = found(c, &var[i], BATCH, 0, 0, 1, -1);
	/* every key put in turn into a full cache: the last of each slot is found, the others
	 * are not, and none finds another's stack */
	for (int32_t id = 0; id < 3 * BSTACK_SLOTS && ok; id++) {
		struct bstack_key k = { .tgid = 9, .kstack_id = id, .ustack_id = -1 };

		bstack_cache__put(c, &k, BATCH, 0, 0, 0, &(struct bstack_val){ .stack = id });
	}
	for (int32_t id = 0; id < 3 * BSTACK_SLOTS && ok; id++) {
		struct bstack_key k = { .tgid = 9, .kstack_id = id, .ustack_id = -1 };
		struct bstack_val v;

		if (bstack_cache__get(c, &k, BATCH, 0, 0, 1, &v)) {
			ok = ASSERT_EQ(v.stack, id, "the key's own stack");
			hits++;
		}
	}
	ok = ok && ASSERT_TRUE(hits > BSTACK_SLOTS / 2 && hits <= BSTACK_SLOTS, "one key a slot");
out:
	free(c);
	return ok;
}

TEST_MAIN(T(test_bstack_ids_reused_after_clear), T(test_bstack_lifetime), T(test_bstack_keys))
