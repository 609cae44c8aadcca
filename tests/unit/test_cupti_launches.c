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
			cupti_launch_put(c, PID, PID, 1 + round * STACK_WAYS + i, 0, s[i].f, 6);
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < STACK_WAYS; i++)
			ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 1 + round * STACK_WAYS + i), &s[i]),
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
		cupti_launch_put(c, PID, PID, 1 + i, 0, s[i].f, 6);
	cupti_launch_put(c, PID, PID, 9, 0, s[0].f, 6);	/* stack 0 launched again */
	cupti_launch_put(c, PID, PID, 10, 0, s[STACK_WAYS].f, 6);	/* replaces stack 1 */
	ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 1), &s[0]), "stack 0, launched since, kept");
	ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 9), &s[0]), "stack 0 again");
	ok &= ASSERT_TRUE(cupti_launch_stack(c, PID, 2) == NULL, "stack 1, the oldest, unknown");
	ok &= ASSERT_EQ(c->st.stacks_evicted, 1, "counted");
	for (int i = 2; i < STACK_WAYS; i++)
		ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 1 + i), &s[i]), "the others kept");
	ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 10), &s[STACK_WAYS]), "the newcomer");
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
	cupti_launch_put(c, PID, PID + 1, 100, 7, s[0].f, 6);
	cupti_launch_put(c, PID + 1, PID + 1, 100, 0, s[1].f, 6);
	ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 100), &s[0]), "outer id");
	ok &= ASSERT_TRUE(is(cupti_launch_stack(c, PID, 7), &s[0]), "nested id");
	other = cupti_launch_stack(c, PID + 1, 100);
	ok &= ASSERT_TRUE(other && other->pid == PID + 1 && !memcmp(other->frames, s[1].f, 48),
			  "same id in another process");
	ok &= ASSERT_TRUE(cupti_launch_stack(c, PID, 101) == NULL, "never launched");
	ok &= ASSERT_EQ(c->st.stacks_evicted, 0, "an unseen launch is not a replaced stack");
	free_state(c);
	return ok;
}

TEST_MAIN(T(test_cupti_launches_same_set_join), T(test_cupti_launches_replaced_is_unknown),
	  T(test_cupti_launches_ids))
