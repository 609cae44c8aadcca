/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for src/common/prom.c (the Prometheus text writer) and the BPF counter registry
 * (common/abi.h, agent/bpfutil.c): names, ranges, one family for all programs.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include "test.h"
#include "agent/bpfutil.h"
#include "agent/unwind/frames.h"
#include "common/prom.h"
#include "common/util.h"

/* The walker's truncation counters are UNWIND_ST_TRUNC_BASE + enum gpuscope_trunc (frames.h). */
_Static_assert(UNWIND_ST_TRUNC_DEPTH == UNWIND_ST_TRUNC_BASE + GPUSCOPE_TRUNC_DEPTH, "trunc");
_Static_assert(UNWIND_ST_TRUNC_UNMAPPED == UNWIND_ST_TRUNC_BASE + GPUSCOPE_TRUNC_UNMAPPED, "trunc");
_Static_assert(UNWIND_ST_TRUNC_READ == UNWIND_ST_TRUNC_BASE + GPUSCOPE_TRUNC_READ, "trunc");
_Static_assert(UNWIND_ST_TRUNC_NO_PROC == UNWIND_ST_TRUNC_BASE + GPUSCOPE_TRUNC_NO_PROC, "trunc");
_Static_assert(UNWIND_ST_TRUNC_BAD_FRAME == UNWIND_ST_TRUNC_BASE + GPUSCOPE_TRUNC_BAD_FRAME,
	       "trunc");
_Static_assert(UNWIND_ST_TRUNC_UNSUPPORTED == UNWIND_ST_TRUNC_BASE + GPUSCOPE_TRUNC_UNSUPPORTED,
	       "trunc");
_Static_assert(UNWIND_ST_TRUNC_PYTHON == UNWIND_ST_TRUNC_BASE + GPUSCOPE_TRUNC_PYTHON, "trunc");
_Static_assert(GPUSCOPE_TRUNC_MAX - 1 == GPUSCOPE_TRUNC_PYTHON, "a new reason: name it in abi.h");
_Static_assert(UNWIND_ST_TRUNC_PYTHON < UNWIND_ST_MAX && GPUSCOPE_PY_STAT_NAME_FAILED <
	       GPUSCOPE_PY_STAT_MAX, "walker counters fit their maps");

/* Runs fn into a memory stream; returns the text (caller frees). */
static char *capture(void (*fn)(FILE *))
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	fn(f);
	fclose(f);
	return buf;
}

static void write_some(FILE *f)
{
	prom_family(f, "gpuscope_agent_x_total", "counter", "Lines\nand \\ back.");
	prom_sample1_u64(f, "gpuscope_agent_x_total", "reason", "a\"b\\c\nd", 18446744073709551615ull);
	prom_sample(f, "gpuscope_agent_x_total", NULL, 0, 0.1);
	prom_gauge(f, "gpuscope_agent_y", "A gauge.", 1.5);
	prom_counter(f, "gpuscope_agent_z_total", "A counter.", 7);
}

static bool test_prom_escaping(void)
{
	char *s = capture(write_some);
	bool ok = ASSERT_STREQ(s,
			       "# HELP gpuscope_agent_x_total Lines\\nand \\\\ back.\n"
			       "# TYPE gpuscope_agent_x_total counter\n"
			       "gpuscope_agent_x_total{reason=\"a\\\"b\\\\c\\nd\"} 18446744073709551615\n"
			       "gpuscope_agent_x_total 0.1\n"
			       "# HELP gpuscope_agent_y A gauge.\n"
			       "# TYPE gpuscope_agent_y gauge\n"
			       "gpuscope_agent_y 1.5\n"
			       "# HELP gpuscope_agent_z_total A counter.\n"
			       "# TYPE gpuscope_agent_z_total counter\n"
			       "gpuscope_agent_z_total 7\n",
			       "exposition");
	free(s);
	return ok;
}

/* Every named code lies in a program's range and names are unique within a program. */
static bool test_prom_bpf_registry(void)
{
	unsigned named[GPUSCOPE_PROG_MAX] = { 0 };

	for (unsigned k = 0; k < GPUSCOPE_ERR_MAX; k++) {
		bool is_err;
		const char *n = bpf_counter_name(k, &is_err);

		if (!n)
			continue;
		named[k / GPUSCOPE_PROG_RANGE]++;
		for (unsigned j = k / GPUSCOPE_PROG_RANGE * GPUSCOPE_PROG_RANGE; j < k; j++)
			if (bpf_counter_name(j, NULL))
				CHECK(ASSERT_TRUE(strcmp(bpf_counter_name(j, NULL), n), "unique name"));
	}
	for (unsigned p = 0; p < GPUSCOPE_PROG_MAX; p++)
		CHECK(ASSERT_TRUE(named[p] > 0 && bpf_prog_name(p), "every program has counters"));
	CHECK(ASSERT_EQ(GPUSCOPE_CUPTI_ERR_LAUNCHES / GPUSCOPE_PROG_RANGE, GPUSCOPE_PROG_CUPTI,
			"cupti range"));
	CHECK(ASSERT_EQ(GPUSCOPE_CERR_NEST / GPUSCOPE_PROG_RANGE, GPUSCOPE_PROG_CUDA, "cuda range"));
	CHECK(ASSERT_EQ(GPUSCOPE_SERR_RACE / GPUSCOPE_PROG_RANGE, GPUSCOPE_PROG_SCHED, "sched range"));
	CHECK(ASSERT_EQ(GPUSCOPE_EV_CUPTI_DROPS / GPUSCOPE_PROG_RANGE, GPUSCOPE_PROG_CUPTI, "ev"));
	CHECK(ASSERT_EQ(GPUSCOPE_EV_CUDA_CALL / GPUSCOPE_PROG_RANGE, GPUSCOPE_PROG_CUDA, "ev"));
	CHECK(ASSERT_EQ(GPUSCOPE_EV_PROC / GPUSCOPE_PROG_RANGE, GPUSCOPE_PROG_SCHED, "ev"));
	CHECK(ASSERT_EQ(GPUSCOPE_EV_PROC_EXIT / GPUSCOPE_PROG_RANGE, GPUSCOPE_PROG_CPU, "ev"));
	return true;
}

/* With no program loaded both families are still there, with HELP and TYPE and no samples. */
static bool test_prom_bpf_families(void)
{
	char *s = capture(bpf_counters__metrics);
	bool ok = ASSERT_STREQ(s,
			       "# HELP gpuscope_agent_bpf_errors_total Failures inside the BPF "
			       "programs (events or stacks lost), by program.\n"
			       "# TYPE gpuscope_agent_bpf_errors_total counter\n"
			       "# HELP gpuscope_agent_bpf_events_total Work counted inside the BPF "
			       "programs, by program.\n"
			       "# TYPE gpuscope_agent_bpf_events_total counter\n",
			       "families");
	free(s);
	return ok;
}

/*
 * The stack walkers' counters (unwind_stats, py_stats) are in the registry too: named, unique per
 * set, every truncation reason named, and exported in the two families once their map is set.
 */
static bool test_prom_bpf_walkers(void)
{
	static const unsigned sets[] = { GPUSCOPE_WALKER_UNWIND, GPUSCOPE_WALKER_PYTHON };
	static const unsigned max[] = { UNWIND_ST_MAX, GPUSCOPE_PY_STAT_MAX };
	char *s;
	bool ok;
	int fd;

	for (size_t i = 0; i < ARRAY_SIZE(sets); i++) {
		unsigned named = 0;

		CHECK(ASSERT_TRUE(bpf_prog_name(sets[i]) != NULL, "walker set has a name"));
		for (unsigned k = 0; k < max[i]; k++) {
			const char *n = bpf_set_counter_name(sets[i], k, NULL);

			if (!n)
				continue;
			named++;
			for (unsigned j = 0; j < k; j++) {
				const char *m = bpf_set_counter_name(sets[i], j, NULL);

				if (m)
					CHECK(ASSERT_TRUE(strcmp(m, n), "unique name"));
			}
		}
		CHECK(ASSERT_TRUE(named >= 10, "walker counters named"));
		CHECK(ASSERT_TRUE(!bpf_set_counter_name(sets[i], max[i], NULL), "out of range"));
	}
	for (unsigned r = 1; r < GPUSCOPE_TRUNC_MAX; r++) {
		unsigned k = UNWIND_ST_TRUNC_BASE + r;
		const char *n = bpf_set_counter_name(GPUSCOPE_WALKER_UNWIND, k, NULL);

		CHECK(ASSERT_TRUE(n && !strncmp(n, "truncated_", 10), "truncation reason named"));
	}
	CHECK(ASSERT_EQ(GPUSCOPE_SERR_NOT_WALKED / GPUSCOPE_PROG_RANGE, GPUSCOPE_PROG_SCHED,
			"sched's switch counters in its range"));
	CHECK(ASSERT_STREQ(bpf_counter_name(GPUSCOPE_SERR_SWITCHES, NULL), "switches", "name"));
	fd = bpf_map_create(BPF_MAP_TYPE_PERCPU_ARRAY, "py_stats", 4, 8, GPUSCOPE_PY_STAT_MAX,
			    NULL);
	if (fd < 0)	/* no BPF here: the names above are what this test is for */
		return true;
	bpf_counters__set(GPUSCOPE_WALKER_PYTHON, fd);
	s = capture(bpf_counters__metrics);
	ok = ASSERT_TRUE(strstr(s, "gpuscope_agent_bpf_events_total{program=\"python\","
				   "event=\"walks\"} 0\n"), "python walks exported") &&
	     ASSERT_TRUE(strstr(s, "gpuscope_agent_bpf_errors_total{program=\"python\","
				   "error=\"read_failed\"} 0\n"), "python errors exported") &&
	     ASSERT_TRUE(!strstr(s, "program=\"unwind\""), "only sets with a map");
	free(s);
	bpf_counters__drop(GPUSCOPE_WALKER_PYTHON, fd);
	close(fd);
	s = capture(bpf_counters__metrics);
	ok = ASSERT_TRUE(ok && !strstr(s, "python"), "dropped") && ok;
	free(s);
	return ok;
}

TEST_MAIN(T(test_prom_escaping), T(test_prom_bpf_registry), T(test_prom_bpf_families),
	  T(test_prom_bpf_walkers))
