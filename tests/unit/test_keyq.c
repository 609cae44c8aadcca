// SPDX-License-Identifier: Apache-2.0
/*
 * bpf_keyq_drain() (bpfutil.h) on real kernel maps (root): a hash map and the queue of the keys
 * added to it, filled from here as a BPF program would (insert, then push). Each addition of a
 * key is drained once with its value; a key the queue missed (the program's lost flag) makes it
 * walk the map, again at the next drain while a walk may have left keys behind.
 */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include "test.h"
#include "agent/bpfutil.h"

struct seen {
	uint64_t n, sum_keys, sum_vals;
};

static void on_key(void *ctx, const void *key, const void *val)
{
	struct seen *s = ctx;

	s->n++;
	s->sum_keys += *(const uint64_t *)key;
	s->sum_vals += *(const uint64_t *)val;
}

/* Inserts key k with value 10 k; pushes it when push. */
static void add(int map, int q, uint64_t k, bool push)
{
	uint64_t v = 10 * k;

	bpf_map_update_elem(map, &k, &v, BPF_NOEXIST);
	if (push)
		bpf_map_update_elem(q, NULL, &k, BPF_ANY);
}

static bool test_keyq_drain(void)
{
	int map, q;
	uint32_t lost = 0;
	struct seen s = { 0 };
	bool walked, ok = false;
	uint64_t k;

	if (geteuid() != 0) {
		printf("skip: needs root for BPF maps\n");
		return true;
	}
	map = bpf_map_create(BPF_MAP_TYPE_HASH, "keyq_map", 8, 8, 64, NULL);
	q = bpf_map_create(BPF_MAP_TYPE_QUEUE, "keyq_q", 0, 8, 16, NULL);
	if (!ASSERT_TRUE(map >= 0 && q >= 0, "maps created"))
		goto out;
	/* five keys queued: all five drained, with their values; the map left empty */
	for (k = 1; k <= 5; k++)
		add(map, q, k, true);
	bpf_keyq_drain(map, q, &lost, 8, 8, 100, on_key, &s, &walked);
	if (!ASSERT_EQ(s.n, 5, "keys drained") || !ASSERT_EQ(s.sum_vals, 150, "their values") ||
	    !ASSERT_TRUE(!walked, "no walk") ||
	    !ASSERT_TRUE(bpf_map_get_next_key(map, NULL, &k) == -ENOENT, "the map emptied"))
		goto out;
	/* a key queued twice (added, drained by a walk, added again): drained once */
	s = (struct seen){ 0 };
	add(map, q, 7, true);
	bpf_map_update_elem(q, NULL, &(uint64_t){ 7 }, BPF_ANY);
	bpf_keyq_drain(map, q, &lost, 8, 8, 100, on_key, &s, &walked);
	if (!ASSERT_EQ(s.n, 1, "a key queued twice drained once") ||
	    !ASSERT_EQ(s.sum_vals, 70, "with its value once"))
		goto out;
	/* at most max a call: the rest wait in the queue */
	s = (struct seen){ 0 };
	for (k = 1; k <= 6; k++)
		add(map, q, k, true);
	bpf_keyq_drain(map, q, &lost, 8, 8, 4, on_key, &s, &walked);
	bpf_keyq_drain(map, q, &lost, 8, 8, 4, on_key, &s, &walked);
	if (!ASSERT_EQ(s.n, 6, "six keys in two drains of at most four"))
		goto out;
	/* 20 keys, the queue (16) missed 4 and the program set lost: walks of at most 8 keys until
	 * every key is drained once; the queue's stale keys are dropped */
	s = (struct seen){ 0 };
	for (k = 1; k <= 20; k++)
		add(map, q, k, k <= 16);
	lost = 1;
	for (int i = 0; i < 5; i++) {
		bool w;

		bpf_keyq_drain(map, q, &lost, 8, 8, 8, on_key, &s, &w);
		if (i == 0 && !ASSERT_TRUE(w, "a lost key makes a walk"))
			goto out;
	}
	if (!ASSERT_EQ(s.n, 20, "every key drained once after the walks") ||
	    !ASSERT_EQ(s.sum_keys, 210, "each key once") || !ASSERT_EQ(lost, 0, "lost cleared") ||
	    !ASSERT_TRUE(bpf_map_get_next_key(map, NULL, &k) == -ENOENT, "the map emptied") ||
	    !ASSERT_TRUE(bpf_map_lookup_and_delete_elem(q, NULL, &k) == -ENOENT, "the queue emptied"))
		goto out;
	ok = true;
out:
	if (map >= 0)
		close(map);
	if (q >= 0)
		close(q);
	return ok;
}

TEST_MAIN(T(test_keyq_drain))
