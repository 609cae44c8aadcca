/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Off-CPU samples kept as the blocked intervals they repeat (src/server/store/sqlite/offcpu.c):
 * the µs rule of a sample's value, which intervals stand for a sample, and the exactness the
 * pairing rests on: an interval as stored gives back the very sample ingest stores.
 */
#include <stdint.h>
#include <stdlib.h>
#include "test.h"
#include "server/store/sqlite/sqlite.h"

static bool test_offcpu_value_unit(void)
{
	uint64_t t = 1000000123;	/* 123 ns past a whole µs */

	return ASSERT_EQ(offcpu_value_unit(t, 1499, 1000), 2000, "the µs between the floors") &&
	       ASSERT_EQ(offcpu_value_unit(t, 122, 1000), 1000, "within the µs: at least one") &&
	       ASSERT_EQ(offcpu_value_unit(t, 1, 1000), 1000, "1 ns: one µs, never 0") &&
	       ASSERT_EQ(offcpu_value_unit(t, 1124, 1000), 2000, "one ns past the floor") &&
	       ASSERT_EQ(offcpu_value_unit(t, 1123, 1000), 1000, "at the floor") &&
	       ASSERT_EQ(offcpu_value_unit(t, 0, 1000), 0, "0 stays 0") &&
	       ASSERT_EQ(offcpu_value_unit(t, -1600, 1000), -2000, "negative: rounded") &&
	       ASSERT_EQ(offcpu_value_unit(500, 900, 1000), 1000, "a value past the time: from 0") &&
	       ASSERT_EQ(offcpu_value_unit(t, 1499, 1), 1499, "ns: as it came");
}

static bool test_offcpu_iv_sample(void)
{
	/* the stack comes typed (irow.stack, ichunk.stack), not as attr text */
	const char *blocked[] = { "state", "blocked", "reason", "io" };
	const char *marked[] = { "state", "blocked", OFFCPU_NO_SAMPLE, "1" };
	const char *running[] = { "state", "running" };
	const char *summary[] = { "state", "blocked", "summary", "1" };
	struct offcpu_key k = { 0 };

	return ASSERT_TRUE(offcpu_iv_sample("thread_state", blocked, 2, 42, 5000, 9000, 1000, &k),
			   "a blocked interval with a stack") &&
	       ASSERT_EQ(k.stack, 42, "its stack") && ASSERT_EQ(k.t, 9000, "at its end") &&
	       ASSERT_EQ(k.value, 4000, "its length") &&
	       ASSERT_TRUE(offcpu_iv_sample("thread_state", blocked, 2, 42, 5000, 5000, 1000, &k) &&
			   k.value == 1000, "an empty one: one unit") &&
	       ASSERT_TRUE(!offcpu_iv_sample("cuda_api", blocked, 2, 42, 5000, 9000, 1000, &k),
			   "another kind") &&
	       ASSERT_TRUE(!offcpu_iv_sample("thread_state", marked, 2, 42, 5000, 9000, 1000, &k),
			   "marked: no sample") &&
	       ASSERT_EQ(offcpu_public_nattrs(marked, 2), 1, "the mark is not shown") &&
	       ASSERT_EQ(offcpu_public_nattrs(blocked, 2), 2, "nothing else is left out") &&
	       ASSERT_TRUE(!offcpu_iv_sample("thread_state", running, 1, 42, 5000, 9000, 1000, &k),
			   "running") &&
	       ASSERT_TRUE(!offcpu_iv_sample("thread_state", summary, 2, 42, 5000, 9000, 1000, &k),
			   "a summary") &&
	       ASSERT_TRUE(!offcpu_iv_sample("thread_state", blocked, 2, 0, 5000, 9000, 1000, &k),
			   "no stack");
}

/* The property pairing needs: for any sample (t, v > 0) and its interval [t - v, t], the
 * interval's ends floored to the unit give back the sample's floored time and stored value. */
static bool test_offcpu_exact(void)
{
	const char *a[] = { "state", "blocked" };
	uint64_t seed = 88172645463325252ull;

	for (int i = 0; i < 200000; i++) {
		uint64_t u = i % 3 ? 1000 : 1, t, v, s, e;
		struct offcpu_key k;

		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		t = 1700000000000000000ull + seed % 1000000000000ull;
		v = 1 + (seed >> 40) % (i % 2 ? 3000 : 5000000000ull);
		s = (t - v) - (t - v) % u;
		e = t - t % u;
		if (!ASSERT_TRUE(offcpu_iv_sample("thread_state", a, 1, 7, s, e, u, &k), "stands") ||
		    !ASSERT_EQ(k.t, e, "time") ||
		    !ASSERT_EQ(k.value, offcpu_value_unit(t, (int64_t)v, u), "value"))
			return false;
	}
	return true;
}

static bool test_offcpu_take(void)
{
	struct offcpu_key smp[] = { { 1, 7, 100, 10, 0 }, { 1, 7, 100, 10, 1 }, { 1, 8, 100, 10, 2 },
				    { 2, 7, 100, 10, 3 } };
	struct offcpu_key iv = { 1, 7, 100, 10, 99 }, other = { 1, 7, 100, 11, 0 };
	uint8_t skip[4] = { 0 };

	offcpu_sort(smp, 4);
	return ASSERT_TRUE(offcpu_take(smp, 4, &iv, skip), "the first equal one") &&
	       ASSERT_TRUE(offcpu_take(smp, 4, &iv, skip), "the second equal one") &&
	       ASSERT_TRUE(skip[0] && skip[1] && !skip[2] && !skip[3], "those two taken") &&
	       ASSERT_TRUE(!offcpu_take(smp, 4, &iv, skip), "none left") &&
	       ASSERT_TRUE(!offcpu_take(smp, 4, &other, skip), "another value: none");
}

TEST_MAIN(T(test_offcpu_value_unit), T(test_offcpu_iv_sample), T(test_offcpu_exact),
	  T(test_offcpu_take))
