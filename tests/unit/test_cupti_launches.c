/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUPTI module's pending launches and their stacks (src/agent/cupti/records.c): a kernel
 * record finds its launch's stack by (pid, correlation id) while other stacks are launched in
 * between, also when they fall into the same set of the stack cache; a stack replaced by
 * newer ones is unknown (NULL, counted), never another launch's stack.
 */
#include <stdlib.h>
#include "test.h"
#include "agent/cupti/cupti_int.h"

#define PID 4242

static struct cupti_state *new_state(void)
{
	struct cupti_state *c = calloc(1, sizeof(*c));

	if (!c)
		abort();
	c->launches = calloc(1u << LAUNCH_BITS, sizeof(*c->launches));
	c->stacks = calloc(1u << STACK_BITS, sizeof(*c->stacks));
	if (!c->launches || !c->stacks)
		abort();
	return c;
}

static void free_state(struct cupti_state *c)
{
	free(c->launches);
	free(c->stacks);
	free(c);
}

struct stk {
	__u64 f[6];
};

static uint32_t set_of(const struct stk *s)
{
	uint64_t h = hash64(s->f, sizeof(s->f), PID) | 1;

	return (uint32_t)(h >> (64 - (STACK_BITS - 3)));
}

/* n distinct stacks that all fall into one set of the cache, as a Python loop's call sites may. */
static void same_set(struct stk *out, int n)
{
	uint64_t x = 0x7f0000401000ull;

	for (int k = 0; k < n;) {
		struct stk s = { { 0x7f0000123456ull, x, 0x55550000abcdull, 0x55550000beefull,
				   0x7f00002a0000ull + (x & 0xfff), 0x7f00003b0000ull } };

		x += 0x10;
		if (k && set_of(&s) != set_of(&out[0]))
			continue;
		out[k++] = s;
	}
}

static bool is(const struct raw_stack *rs, const struct stk *s)
{
	return rs && rs->pid == PID && rs->n == 6 && !memcmp(rs->frames, s->f, sizeof(s->f));
}

/* forward() then backward()'s launches of stacks in the same set: each kernel its own stack. */
static bool test_cupti_launches_same_set_join(void)
{
	struct cupti_state *c = new_state();
	struct stk s[STACK_WAYS];
	bool ok = true;

	same_set(s, STACK_WAYS);
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < STACK_WAYS; i++)
			cupti_launch_put(c, NULL, PID, PID, 1 + round * STACK_WAYS + i, 0, s[i].f, 6);
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < STACK_WAYS; i++)
			ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 1 + round * STACK_WAYS + i, NULL), &s[i]),
					  "the launch's own stack");
	ok &= ASSERT_EQ(c->st.stacks_evicted, 0, "none replaced");
	free_state(c);
	return ok;
}

/* Past the set's ways the least recently launched stack goes, and its kernels are unknown. */
static bool test_cupti_launches_replaced_is_unknown(void)
{
	struct cupti_state *c = new_state();
	struct stk s[STACK_WAYS + 2];
	bool ok = true;

	same_set(s, STACK_WAYS + 2);
	for (int i = 0; i < STACK_WAYS; i++)	/* cids 1..8: stacks 0..7 fill the set */
		cupti_launch_put(c, NULL, PID, PID, 1 + i, 0, s[i].f, 6);
	cupti_launch_put(c, NULL, PID, PID, 9, 0, s[0].f, 6);	/* stack 0 launched again */
	cupti_launch_put(c, NULL, PID, PID, 10, 0, s[STACK_WAYS].f, 6);	/* replaces stack 1 */
	ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 1, NULL), &s[0]), "stack 0, launched since, kept");
	ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 9, NULL), &s[0]), "stack 0 again");
	ok &= ASSERT_TRUE(cupti_launch_stack(c, PID, 2, NULL) == NULL, "stack 1, the oldest, unknown");
	ok &= ASSERT_EQ(c->st.stacks_evicted, 1, "counted");
	for (int i = 2; i < STACK_WAYS; i++)
		ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 1 + i, NULL), &s[i]), "the others kept");
	ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 10, NULL), &s[STACK_WAYS]), "the newcomer");
	free_state(c);
	return ok;
}

/* A nested launch's second id, another process's same frames, a launch never seen. */
static bool test_cupti_launches_ids(void)
{
	struct cupti_state *c = new_state();
	struct stk s[2];
	const struct raw_stack *other;
	bool ok = true;

	same_set(s, 2);
	cupti_launch_put(c, NULL, PID, PID + 1, 100, 7, s[0].f, 6);
	cupti_launch_put(c, NULL, PID + 1, PID + 1, 100, 0, s[1].f, 6);
	ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 100, NULL), &s[0]), "outer id");
	ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 7, NULL), &s[0]), "nested id");
	other = cupti_launch_stack(c, PID + 1, 100, NULL);
	ok &= ASSERT_TRUE(other && other->pid == PID + 1 && !memcmp(other->frames, s[1].f, 48),
			  "same id in another process");
	ok &= ASSERT_TRUE(cupti_launch_stack(c, PID, 101, NULL) == NULL, "never launched");
	ok &= ASSERT_EQ(c->st.stacks_evicted, 0, "an unseen launch is not a replaced stack");
	free_state(c);
	return ok;
}

/*
 * A backward call's stack rides on the launches of the process's other threads (autograd's),
 * not on its caller's own, survives while launched under (other stacks of its set come and go),
 * and a launch made after it was replaced carries none, never another stack.
 */
static bool test_cupti_launches_backward_parent(void)
{
	struct cupti_state *c = new_state();
	struct proc p = { .pid = PID };
	struct stk s[STACK_WAYS + 2];
	const struct raw_stack *parent, *own;
	bool ok = true;

	same_set(s, STACK_WAYS + 2);
	cupti_launch_put(c, &p, PID, PID, 1, 0, s[1].f, 6);	/* before any backward */
	cupti_backward_put(c, &p, PID, 1, false, s[0].f, 6);		/* the caller thread's */
	cupti_launch_put(c, &p, PID, PID + 1, 2, 0, s[1].f, 6);	/* autograd's thread */
	cupti_launch_put(c, &p, PID, PID, 3, 0, s[2].f, 6);	/* the caller itself */
	own = cupti_launch_stack(c, PID, 1, &parent);
	ok &= ASSERT_TRUE(is(own, &s[1]) && !parent, "a launch before the backward: no parent");
	own = cupti_launch_stack(c, PID, 2, &parent);
	ok &= ASSERT_TRUE(is(own, &s[1]) && is(parent, &s[0]), "another thread's: the caller's stack");
	own = cupti_launch_stack(c, PID, 3, &parent);
	ok &= ASSERT_TRUE(is(own, &s[2]) && !parent, "the caller's own launch: no parent");
	/* the set fills with other stacks; each autograd launch keeps the parent in use */
	for (int i = 3; i < STACK_WAYS + 2; i++)
		cupti_launch_put(c, &p, PID, PID + 1, 10 + i, 0, s[i].f, 6);
	own = cupti_launch_stack(c, PID, 10 + STACK_WAYS + 1, &parent);
	ok &= ASSERT_TRUE(is(own, &s[STACK_WAYS + 1]) && is(parent, &s[0]),
			  "the parent outlives STACK_WAYS other stacks of its set");
	/* launches of the caller thread only (no parent use): the parent ages out */
	for (int i = 1; i < STACK_WAYS + 2; i++)
		cupti_launch_put(c, &p, PID, PID, 100 + i, 0, s[i].f, 6);
	cupti_launch_put(c, &p, PID, PID + 1, 200, 0, s[1].f, 6);
	own = cupti_launch_stack(c, PID, 200, &parent);
	ok &= ASSERT_TRUE(is(own, &s[1]) && !parent && !p.bw_hash,
			  "replaced: no parent rather than another stack");
	free_state(c);
	return ok;
}

/*
 * A backward call sent as "same stack as this thread's walk at t" (not walked): that thread's
 * kept stack becomes the parent again, not the process's latest caller's; a walk this side never
 * got, a thread it never saw, or a stack replaced in the cache since, leaves no parent (counted
 * lost), never another stack; a repeated nested call leaves the outer call's caller.
 */
static bool test_cupti_launches_backward_same(void)
{
	struct cupti_state *c = new_state();
	struct proc p = { .pid = PID };
	struct stk s[STACK_WAYS + 2];
	const struct raw_stack *parent;
	const uint32_t t1 = PID, t2 = PID + 1, dev = PID + 2;
	bool ok = true;

	same_set(s, STACK_WAYS + 2);
	cupti_backward_put(c, &p, t1, 100, false, s[0].f, 6);
	cupti_backward_put(c, &p, t2, 200, false, s[1].f, 6);
	ok &= ASSERT_TRUE(cupti_backward_same(c, &p, t1, 100), "t1's walk is kept");
	cupti_launch_put(c, &p, PID, dev, 1, 0, s[2].f, 6);
	cupti_launch_stack(c, PID, 1, &parent);
	ok &= ASSERT_TRUE(is(parent, &s[0]), "t1's repeat: t1's stack, not the latest walk's (t2)");
	/* a nested call (autograd's thread) walked, then repeated: t1's stays */
	cupti_backward_put(c, &p, dev, 300, true, s[3].f, 6);
	ok &= ASSERT_TRUE(cupti_backward_same(c, &p, dev, 300), "a nested repeat is known");
	cupti_launch_put(c, &p, PID, dev, 2, 0, s[2].f, 6);
	cupti_launch_stack(c, PID, 2, &parent);
	ok &= ASSERT_TRUE(is(parent, &s[0]), "a nested call leaves the outer call's caller");
	ok &= ASSERT_EQ(c->st.backward_reused, 2, "re-uses counted");
	/* a walk of t2 that this side never got: its older one must not stand in */
	ok &= ASSERT_TRUE(!cupti_backward_same(c, &p, t2, 250), "a repeat of an unseen walk");
	cupti_launch_put(c, &p, PID, dev, 3, 0, s[2].f, 6);
	cupti_launch_stack(c, PID, 3, &parent);
	ok &= ASSERT_TRUE(!parent && !p.bw_hash, "an unseen walk's repeat: no parent");
	ok &= ASSERT_TRUE(!cupti_backward_same(c, &p, PID + 9, 100), "a thread never walked");
	ok &= ASSERT_EQ(c->st.backward_reuse_lost, 2, "lost re-uses counted");
	/* t1's stack replaced by STACK_WAYS other stacks of its set launched since */
	for (int i = 2; i < STACK_WAYS + 2; i++)
		cupti_launch_put(c, &p, PID, t1, 10 + i, 0, s[i].f, 6);
	ok &= ASSERT_TRUE(!cupti_backward_same(c, &p, t1, 100) && !p.bw_hash,
			  "a replaced stack is not re-used");
	/* more threads than BW_THREADS: the oldest walk is forgotten, the others kept */
	for (uint32_t i = 0; i < BW_THREADS; i++)
		cupti_backward_put(c, &p, 1000 + i, 1000 + i, false, s[1].f, 6);
	ok &= ASSERT_TRUE(!cupti_backward_same(c, &p, t2, 200), "the oldest thread's walk left");
	ok &= ASSERT_TRUE(cupti_backward_same(c, &p, 1000, 1000), "the others' kept");
	free_state(c);
	return ok;
}

TEST_MAIN(T(test_cupti_launches_same_set_join), T(test_cupti_launches_replaced_is_unknown),
	  T(test_cupti_launches_ids), T(test_cupti_launches_backward_parent),
	  T(test_cupti_launches_backward_same))
