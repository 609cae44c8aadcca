// SPDX-License-Identifier: Apache-2.0
/*
 * Test workload for the CUPTI USDT path without a GPU: fires libgpuscope_cupti's probes through
 * libgpuscope_cupti_fake.so with known correlation ids, names, timestamps and call paths,
 * including out-of-order completions, a graph launch, a nested (aliased) launch, a kernel whose
 * launch was never seen and an unannounced name. Protocol on stdout: "ready", then once the
 * test has written one byte on stdin (its agent has attached), "clock C0 M0" and "done"; exits
 * when stdin closes.
 */
#include <linux/types.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common/abi_cupti.h"
#include "scenario.h"
#include "fake_lib.h"

#define NOINLINE __attribute__((noinline))

static uint64_t mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

NOINLINE void launch_matmul(void) { fake_launch(101, 0); }
NOINLINE void launch_relu(void) { fake_launch(102, 0); }
NOINLINE void train_step(void) { launch_matmul(); launch_relu(); }
NOINLINE void launch_graph(void) { fake_launch(103, 0); }
NOINLINE void launch_nested(void) { fake_launch(104, 204); }
NOINLINE void launch_other(void) { fake_launch(105, 0); fake_launch(106, 0); }
/* its record is handed over before its launch probe fires (a window's close can flush so) */
NOINLINE void launch_late(void) { fake_launch(SC_LATE_CID, 0); }
NOINLINE void launch_many(void)
{
	for (unsigned i = 0; i < SC_MANY; i++)
		fake_launch(SC_MANY_CID0 + i, 0);
}

static struct gpuscope_cupti_rec kern(uint32_t cid, uint32_t name, uint32_t dev, uint32_t stream,
				      uint64_t s, uint64_t e)
{
	struct gpuscope_cupti_rec r;

	memset(&r, 0, sizeof(r));
	r.kind = GPUSCOPE_CUPTI_KERNEL;
	r.name_idx = name;
	r.correlation_id = cid;
	r.device = dev;
	r.context = 1;
	r.stream = stream;
	r.start_ns = SC_C0 + s;
	r.end_ns = SC_C0 + e;
	r.grid[0] = 64, r.grid[1] = 1, r.grid[2] = 1;
	r.block[0] = 256, r.block[1] = 1, r.block[2] = 1;
	return r;
}

int main(void)
{
	static struct gpuscope_cupti_rec b1[16], many[SC_MANY], late[1];
	uint64_t m0;
	unsigned n = 0;
	char c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	/*
	 * Wait for the test's "go" (its module has attached): the semaphores alone are not enough,
	 * another agent on the machine (a parallel test run) may have attached first.
	 */
	if (read(0, &c, 1) != 1)
		return 4;
	for (int i = 0; i < 2000 && !fake_attached(); i++)
		usleep(5000);
	if (!fake_attached()) {
		fprintf(stderr, "cupti_replay: no tracer attached\n");
		return 3;
	}
	m0 = mono_now();
	fake_clock(SC_C0, m0);
	fake_name(0, SC_NAME_MATMUL);
	fake_name(1, SC_NAME_RELU);
	fake_name(2, SC_NAME_GRAPH);

	train_step();
	launch_graph();
	launch_nested();
	launch_other();
	launch_many();

	/* completions out of launch order; times in ms after C0 */
	b1[n++] = kern(102, 1, 0, 7, 2 * SC_MS, 2600000);			/* relu */
	b1[n++] = kern(101, 0, 0, 13, 1 * SC_MS, 2200000);			/* matmul */
	b1[n] = kern(103, 2, 0, 7, 5 * SC_MS, 5100000);
	b1[n].graph_id = 7, b1[n++].graph_node_id = 1;
	b1[n] = kern(103, 2, 0, 7, 5100000, 5300000);
	b1[n].graph_id = 7, b1[n++].graph_node_id = 2;
	b1[n++] = kern(204, 0, 0, 7, 6 * SC_MS, 6500000);			/* nested launch */
	b1[n++] = kern(999, 1, 0, 7, 7 * SC_MS, 7100000);			/* launch never seen */
	b1[n++] = kern(105, 0, 1, 7, 1 * SC_MS, 1500000);			/* device 1 */
	b1[n++] = kern(106, 9, 0, 7, 8 * SC_MS, 8100000);			/* name never announced */
	memset(&b1[n], 0, sizeof(b1[n]));
	b1[n].kind = GPUSCOPE_CUPTI_MEMCPY, b1[n].subkind = 1, b1[n].correlation_id = 110;
	b1[n].stream = 7, b1[n].bytes = 4096;
	b1[n].start_ns = SC_C0 + 500000, b1[n++].end_ns = SC_C0 + 600000;
	memset(&b1[n], 0, sizeof(b1[n]));
	b1[n].kind = GPUSCOPE_CUPTI_MEMSET, b1[n].correlation_id = 111, b1[n].stream = 7;
	b1[n].bytes = 512, b1[n].start_ns = SC_C0 + 700000, b1[n++].end_ns = SC_C0 + 710000;
	memset(&b1[n], 0, sizeof(b1[n]));
	b1[n].kind = GPUSCOPE_CUPTI_SYNC, b1[n].subkind = 3, b1[n].stream = 7;
	b1[n].start_ns = SC_C0 + 2600000, b1[n++].end_ns = SC_C0 + 2700000;
	fake_buffer(b1, n);

	/* a buffer larger than one BPF chunk, completed in reverse launch order */
	for (unsigned i = 0; i < SC_MANY; i++) {
		unsigned k = SC_MANY - 1 - i;

		many[i] = kern(SC_MANY_CID0 + k, 1, 0, 3, 10 * SC_MS + k * 10000ull,
			       10 * SC_MS + k * 10000ull + 5000);
	}
	fake_buffer(many, SC_MANY);
	late[0] = kern(SC_LATE_CID, 0, 0, 7, 9 * SC_MS, 9100000);
	fake_buffer(late, 1);
	launch_late();
	fake_drops(SC_CUPTI_DROPS, SC_LIB_DROPS);

	printf("clock %llu %llu\n", (unsigned long long)SC_C0, (unsigned long long)m0);
	printf("done\n");
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
