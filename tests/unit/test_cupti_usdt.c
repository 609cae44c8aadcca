/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUPTI USDT path end to end without a GPU: cupti_replay fires libgpuscope_cupti's probes
 * (through libgpuscope_cupti_fake.so, same probe definitions), the real cupti BPF program is
 * attached to those USDT notes by cupti_module, and the joined batch is decoded and checked:
 * stacks by correlation id (out of order, graph, nested alias, missing launch), clock
 * conversion, names, memcpy/memset/sync, the gpu_busy union, counters. Needs root (exit 77).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test.h"
#include "spawn.h"
#include "agent/agent.h"
#include "agent/cupti/cupti_int.h"
#include "agent/cupti/cupti_usdt.h"
#include "agent/modules.h"
#include "agent/sym/stacks.h"
#include "agent/sym/symbolize.h"
#include "common/batch.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "../cupti/scenario.h"

static Gpuscope__V1__Batch *M;
static struct cupti_stats ST;
static uint64_t WALL0;	/* Unix ns of CUPTI time SC_C0 */
static char REPLAY_DIR[600];

static const char *S(uint32_t i)
{
	return i < M->n_strings ? M->strings[i] : "(bad)";
}

static const char *pairs_get(const uint32_t *pairs, size_t n, const char *name)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		if (!strcmp(S(pairs[i]), name))
			return S(pairs[i + 1]);
	return NULL;
}

/* An interval's attr; "stack_id" is its Interval.stack (batch version 2) as a decimal index. */
static const char *attr(const Gpuscope__V1__Interval *iv, const char *name)
{
	static char sid[4][24];
	static unsigned k;

	if (strcmp(name, "stack_id"))
		return pairs_get(iv->attrs, iv->n_attrs, name);
	if (!iv->stack)
		return NULL;
	k = (k + 1) % 4;
	snprintf(sid[k], sizeof(sid[k]), "%u", iv->stack - 1);
	return sid[k];
}

static const char *label(uint32_t ls, const char *name)
{
	const Gpuscope__V1__LabelSet *l = M->label_sets[ls];

	return pairs_get(l->pairs, l->n_pairs, name);
}

static size_t count_kind(const char *kind)
{
	size_t n = 0;

	for (size_t i = 0; i < M->n_intervals; i++)
		n += !strcmp(S(M->intervals[i]->kind), kind);
	return n;
}

/* The gpu_kernel interval of correlation id cid (and graph node, if node_s). */
static const Gpuscope__V1__Interval *kernel(unsigned cid, const char *node_s)
{
	char cid_s[16];

	snprintf(cid_s, sizeof(cid_s), "%u", cid);
	for (size_t i = 0; i < M->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = M->intervals[i];
		const char *c = attr(iv, "correlation_id"), *n = attr(iv, "graph_node_id");

		if (strcmp(S(iv->kind), "gpu_kernel") || !c || strcmp(c, cid_s))
			continue;
		if (node_s && (!n || strcmp(n, node_s)))
			continue;
		return iv;
	}
	return NULL;
}

static const Gpuscope__V1__Location *frame(long sid, size_t i)
{
	if (sid < 0 || (size_t)sid >= M->n_stacks || i >= M->stacks[sid]->n_locations)
		return NULL;
	return M->locations[M->stacks[sid]->locations[i]];
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !strcmp(s + a - b, suffix);
}

/* Runs the replay under the module once; every test then reads M and ST. */
static bool run_scenario(void)
{
	static bool done, ok;
	int in[2], out[2], status;
	char prog[700], buf[4096];
	char *argv[] = { prog, NULL };
	struct agent a = { 0 };
	size_t len = 0;
	unsigned long long c0 = 0, m0 = 0;
	uint8_t *enc = NULL;
	size_t enc_len = 0;
	pid_t pid;

	if (done)
		return ok;
	done = true;
	snprintf(prog, sizeof(prog), "%s/cupti_replay", REPLAY_DIR);
	buf[0] = 0;
	pid = spawn_ready(argv, &in[1], &out[0], buf, sizeof(buf), &len);
	if (!ASSERT_TRUE(pid > 0, "spawn cupti_replay"))
		return false;
	a.batch = batch__new("test-node");
	a.opts.node = "test-node";
	a.sym = symbolizer__new();
	a.stacks = a.sym ? stack_cache__new(a.sym, 0) : NULL;
	a.mono_to_wall_ns = mono_to_wall_offset_ns();
	a.opts.npids = 1;	/* other engineers' test runs may fire the same probes */
	a.opts.pids[0] = pid;
	if (!ASSERT_TRUE(a.batch, "batch") || !ASSERT_EQ(cupti_module.start(&a), 0, "start"))
		goto out_kill;
	if (!ASSERT_EQ(write(in[1], "g", 1), 1, "go"))
		goto out_stop;

	fcntl(out[0], F_SETFL, O_NONBLOCK);
	for (int i = 0; i < 1000 && !strstr(buf, "done\n"); i++) {
		ssize_t n = read(out[0], buf + len, sizeof(buf) - 1 - len);

		if (n > 0) {
			len += n;
			buf[len] = 0;
		}
		cupti_module.tick(&a);
		usleep(10000);
	}
	cupti_module.tick(&a);
	if (!ASSERT_TRUE(strstr(buf, "done\n"), "replay finished")) {
		fprintf(stderr, "  replay said: %s\n", buf);
		goto out_stop;
	}
	sscanf(strstr(buf, "clock "), "clock %llu %llu", &c0, &m0);
	WALL0 = m0 + a.mono_to_wall_ns;
	cupti_usdt__stats(&ST);
	ok = true;
out_stop:
	cupti_module.stop(&a);
out_kill:
	close(in[1]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "  cupti_replay exit status %d\n", status);
		ok = false;
	}
	close(out[0]);
	if (ok && ASSERT_EQ(batch__encode(a.batch, &enc, &enc_len), 0, "encode")) {
		M = batch_decode(enc, enc_len, buf, sizeof(buf));
		if (!M)
			fprintf(stderr, "  decode: %s\n", buf);
		ok = M != NULL;
	}
	free(enc);
	batch__free(a.batch);
	stack_cache__free(a.stacks);
	symbolizer__free(a.sym);
	return ok;
}

static bool test_cupti_usdt_counts(void)
{
	CHECK(run_scenario());
	return ASSERT_EQ(ST.launches, 7 + SC_MANY, "launch events") &&
	       ASSERT_EQ(ST.kernels, 9 + SC_MANY, "kernels") &&
	       ASSERT_EQ(ST.joined, 8 + SC_MANY, "joined") &&
	       ASSERT_EQ(ST.joined_late, 1, "joined after its launch came (record first)") &&
	       ASSERT_EQ(ST.unjoined, 1, "unjoined (launch never seen)") &&
	       ASSERT_EQ(ST.graph_kernels, 2, "graph kernels") &&
	       ASSERT_EQ(ST.memcpys, 1, "memcpy") && ASSERT_EQ(ST.memsets, 1, "memset") &&
	       ASSERT_EQ(ST.syncs, 1, "sync") && ASSERT_EQ(ST.unknown_names, 1, "unknown names") &&
	       ASSERT_EQ(ST.no_clock, 0, "no_clock") &&
	       ASSERT_EQ(ST.cupti_drops, SC_CUPTI_DROPS, "cupti drops reported") &&
	       ASSERT_EQ(ST.lib_drops, SC_LIB_DROPS, "library drops reported") &&
	       ASSERT_EQ(ST.bpf[GPUSCOPE_CUPTI_ERR_RECS_LOST], 0, "records lost in BPF") &&
	       ASSERT_EQ(ST.bpf[GPUSCOPE_CUPTI_ERR_RINGBUF], 0, "events lost in BPF") &&
	       ASSERT_EQ(ST.bad_events + ST.bad_records, 0, "malformed") &&
	       ASSERT_EQ(count_kind("gpu_kernel"), 9 + SC_MANY, "gpu_kernel intervals");
}

static bool test_cupti_usdt_join(void)
{
	const Gpuscope__V1__Interval *mm, *relu, *g1, *g2, *nested, *orphan, *unk, *dev1;
	const Gpuscope__V1__Location *f;
	long s_mm, s_relu;
	bool in_lib = false, in_prog = false;

	CHECK(run_scenario());
	mm = kernel(101, NULL), relu = kernel(102, NULL);
	g1 = kernel(103, "1"), g2 = kernel(103, "2");
	nested = kernel(204, NULL), orphan = kernel(999, NULL);
	unk = kernel(106, NULL), dev1 = kernel(105, NULL);
	CHECK(ASSERT_TRUE(mm && relu && g1 && g2 && nested && orphan && unk && dev1, "all found"));

	CHECK(ASSERT_STREQ(attr(mm, "name"), "matmul_k1(float*, float*, int)", "demangled"));
	CHECK(ASSERT_STREQ(attr(relu, "name"), "relu_k(float*)", "demangled"));
	CHECK(ASSERT_STREQ(attr(g1, "name"), SC_NAME_GRAPH, "unmangled kept"));
	CHECK(ASSERT_STREQ(attr(unk, "name"), "[unknown kernel #9]", "unknown name"));
	CHECK(ASSERT_EQ(mm->start_ns, WALL0 + 1 * SC_MS, "matmul start (clock offset)"));
	CHECK(ASSERT_EQ(mm->end_ns, WALL0 + 2200000, "matmul end"));
	CHECK(ASSERT_STREQ(attr(mm, "stream"), "13", "stream"));
	CHECK(ASSERT_STREQ(attr(mm, "grid"), "64,1,1", "grid"));
	CHECK(ASSERT_STREQ(attr(mm, "block"), "256,1,1", "block"));
	CHECK(ASSERT_STREQ(label(mm->label_set, "gpu"), "0", "gpu label"));
	CHECK(ASSERT_STREQ(label(dev1->label_set, "gpu"), "1", "device 1"));
	CHECK(ASSERT_STREQ(label(mm->label_set, "comm"), "cupti_replay", "comm"));
	CHECK(ASSERT_STREQ(attr(g1, "graph_id"), "7", "graph id"));
	CHECK(ASSERT_STREQ(attr(g2, "graph_node_id"), "2", "graph node"));

	CHECK(ASSERT_TRUE(attr(mm, "stack_id") && attr(relu, "stack_id"), "stacks"));
	CHECK(ASSERT_TRUE(attr(nested, "stack_id"), "nested launch joined by its inner id"));
	CHECK(ASSERT_TRUE(!attr(orphan, "stack_id"), "missing launch: no stack"));
	CHECK(ASSERT_STREQ(attr(g1, "stack_id"), attr(g2, "stack_id"), "graph kernels share"));
	s_mm = atol(attr(mm, "stack_id"));
	s_relu = atol(attr(relu, "stack_id"));
	CHECK(ASSERT_TRUE(s_mm != s_relu, "different call paths, different stacks"));
	f = frame(s_mm, 0);
	CHECK(ASSERT_TRUE(f, "leaf"));
	CHECK(ASSERT_STREQ(S(f->function), "matmul_k1(float*, float*, int)", "leaf is the kernel"));
	CHECK(ASSERT_STREQ(S(f->module), "[gpu]", "leaf module"));
	/* the launching call path, symbolized by the agent's stack cache, without the injection
	 * library's own frames (the probe site, fake_launch): launch_matmul <- train_step <- main */
	CHECK(ASSERT_TRUE((f = frame(s_mm, 1)), "frame 1"));
	CHECK(ASSERT_STREQ(S(f->function), "launch_matmul", "launching function"));
	in_prog = ends_with(S(f->module), "/cupti_replay");
	for (size_t i = 1; (f = frame(s_mm, i)); i++)
		in_lib |= ends_with(S(f->module), "libgpuscope_cupti_fake.so");
	CHECK(ASSERT_STREQ(S(frame(s_mm, 2)->function), "train_step", "caller"));
	CHECK(ASSERT_STREQ(S(frame(s_relu, 1)->function), "launch_relu", "relu's path"));
	CHECK(ASSERT_STREQ(S(frame(atol(attr(g1, "stack_id")), 1)->function), "launch_graph",
			   "graph kernels under the graph launch"));
	CHECK(ASSERT_STREQ(S(frame(atol(attr(nested, "stack_id")), 1)->function), "launch_nested",
			   "nested launch"));
	CHECK(ASSERT_TRUE(!in_lib && in_prog, "modules: the program's, not the injection library's"));
	/* its record before its launch: held until the launch came, then joined */
	CHECK(ASSERT_TRUE(kernel(SC_LATE_CID, NULL) && attr(kernel(SC_LATE_CID, NULL), "stack_id"),
			  "a record that came before its launch is joined"));
	CHECK(ASSERT_STREQ(S(frame(atol(attr(kernel(SC_LATE_CID, NULL), "stack_id")), 1)->function),
			   "launch_late", "... under its own launch"));
	return ASSERT_STREQ(label(mm->label_set, "node"), "test-node", "node label");
}

static bool test_cupti_usdt_samples(void)
{
	int64_t total = 0, want = 0, mm_value = -1;
	size_t n = 0;

	CHECK(run_scenario());
	/* kernel durations in ns, as the scenario fires them */
	want = 600000 + 1200000 + 100000 + 200000 + 500000 + 100000 + 500000 + 100000 +
	       100000 /* the late one */ + SC_MANY * 5000;
	for (size_t g = 0; g < M->n_samples; g++) {
		const Gpuscope__V1__SampleGroup *sg = M->samples[g];
		int64_t t = 0;

		if (sg->kind != GPUSCOPE__V1__SAMPLE_KIND__SAMPLE_KIND_GPU_KERNEL_NS)
			continue;
		for (size_t i = 0; i < sg->n_time_delta_ns; i++) {
			const Gpuscope__V1__Location *f = frame(sg->stack[i], 0);

			t += sg->time_delta_ns[i];
			total += sg->value[i];
			n++;
			if (f && !strcmp(S(f->function), "matmul_k1(float*, float*, int)") &&
			    (uint64_t)t == WALL0 + SC_MS && !strcmp(label(sg->label_set, "gpu"), "0"))
				mm_value = sg->value[i];
		}
	}
	return ASSERT_EQ(n, 9 + SC_MANY, "one gpu_kernel_ns sample per kernel") &&
	       ASSERT_EQ(total, want, "GPU ns total") &&
	       ASSERT_EQ(mm_value, 1200000, "matmul sample: time and value");
}

static bool test_cupti_usdt_busy(void)
{
	uint64_t want0[][2] = { { 1000000, 2600000 }, { 5000000, 5300000 }, { 6000000, 6500000 },
				{ 7000000, 7100000 }, { 8000000, 8100000 }, { 9000000, 9100000 } };
	size_t n0 = 0, n1 = 0, matched = 0;
	uint64_t prev_end = 0;
	bool ordered = true;

	CHECK(run_scenario());
	for (size_t i = 0; i < M->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = M->intervals[i];
		const char *gpu;

		if (strcmp(S(iv->kind), "gpu_busy"))
			continue;
		gpu = label(iv->label_set, "gpu");
		if (gpu && !strcmp(gpu, "1")) {
			n1++;
			CHECK(ASSERT_EQ(iv->start_ns, WALL0 + 1000000, "gpu1 busy start"));
			CHECK(ASSERT_EQ(iv->end_ns, WALL0 + 1500000, "gpu1 busy end"));
			continue;
		}
		n0++;
		ordered &= iv->start_ns >= prev_end;
		prev_end = iv->end_ns;
		for (size_t k = 0; k < ARRAY_SIZE(want0); k++)
			matched += iv->start_ns == WALL0 + want0[k][0] &&
				   iv->end_ns == WALL0 + want0[k][1];
	}
	return ASSERT_EQ(n0, 6 + SC_MANY, "gpu0 busy intervals (overlaps merged)") &&
	       ASSERT_EQ(matched, ARRAY_SIZE(want0), "gpu0 merged intervals exact") &&
	       ASSERT_TRUE(ordered, "disjoint and in order") && ASSERT_EQ(n1, 1, "gpu1 busy");
}

static bool test_cupti_usdt_memops(void)
{
	const Gpuscope__V1__Interval *cp = NULL, *ms = NULL, *sy = NULL;

	CHECK(run_scenario());
	for (size_t i = 0; i < M->n_intervals; i++) {
		const char *k = S(M->intervals[i]->kind);

		if (!strcmp(k, "memcpy"))
			cp = M->intervals[i];
		else if (!strcmp(k, "memset"))
			ms = M->intervals[i];
		else if (!strcmp(k, "cuda_sync"))
			sy = M->intervals[i];
	}
	CHECK(ASSERT_TRUE(cp && ms && sy, "memcpy, memset, cuda_sync intervals"));
	return ASSERT_STREQ(attr(cp, "bytes"), "4096", "memcpy bytes") &&
	       ASSERT_STREQ(attr(cp, "kind"), "HtoD", "memcpy kind") &&
	       ASSERT_EQ(cp->start_ns, WALL0 + 500000, "memcpy start") &&
	       ASSERT_STREQ(attr(ms, "bytes"), "512", "memset bytes") &&
	       ASSERT_STREQ(attr(sy, "type"), "stream_synchronize", "sync type") &&
	       ASSERT_EQ(sy->end_ns - sy->start_ns, 100000, "sync duration");
}

/*
 * The library scans read a process's maps again only when its address-space size (or start
 * time) moved: a process without the library is skipped until it loads one, then found; a
 * process known to map it is skipped after.
 */
static bool test_cupti_usdt_scan_skips(void)
{
	static const char code[] = "import ctypes, sys\nprint('ready', flush=True)\n"
				   "sys.stdin.read(1)\nctypes.CDLL(sys.argv[1])\n"
				   "print('loaded', flush=True)\nsys.stdin.read(1)\n";
	char lib[700], buf[512];
	char *argv[] = { "/usr/bin/python3", "-c", (char *)code, lib, NULL };
	struct agent a = { 0 };
	struct cupti_stats s0, s1, s2, s3;
	int in = -1, out = -1, status;
	size_t len = 0;
	bool ok = false;
	pid_t pid;

	snprintf(lib, sizeof(lib), "%s/libgpuscope_cupti_fake.so", REPLAY_DIR);
	buf[0] = 0;
	pid = spawn_ready(argv, &in, &out, buf, sizeof(buf), &len);
	CHECK(ASSERT_TRUE(pid > 0, "spawn python3"));
	a.batch = batch__new("test-node");
	a.mono_to_wall_ns = mono_to_wall_offset_ns();
	a.opts.npids = 1;	/* this process only */
	a.opts.pids[0] = pid;
	if (!ASSERT_EQ(cupti_module.start(&a), 0, "start"))	/* its first scan: no library */
		goto out_kill;
	cupti_usdt__stats(&s0);
	cupti_scan_procs(cupti_live);
	cupti_usdt__stats(&s1);
	if (!ASSERT_EQ(s0.scan_maps_read, 1, "read at start") ||
	    !ASSERT_EQ(s1.scan_maps_skipped - s0.scan_maps_skipped, 1, "unchanged: skipped") ||
	    !ASSERT_EQ(s1.processes, 0, "no library yet") ||
	    !ASSERT_EQ(write(in, "g", 1), 1, "load"))
		goto out_stop;
	len = 0;
	buf[0] = 0;
	for (int i = 0; i < 500 && !strstr(buf, "loaded\n"); i++) {
		ssize_t n = read(out, buf + len, sizeof(buf) - 1 - len);

		if (n > 0)
			buf[len += n] = 0;
	}
	cupti_scan_procs(cupti_live);
	cupti_usdt__stats(&s2);
	cupti_scan_procs(cupti_live);
	cupti_usdt__stats(&s3);
	ok = ASSERT_EQ(s2.scan_maps_read - s1.scan_maps_read, 1, "grown: read again") &&
	     ASSERT_TRUE(cupti_proc_find(cupti_live, pid) != NULL, "the library found") &&
	     ASSERT_EQ(s3.scan_maps_skipped - s2.scan_maps_skipped, 1, "known: skipped");
out_stop:
	cupti_module.stop(&a);
out_kill:
	close(in);
	close(out);
	waitpid(pid, &status, 0);
	batch__free(a.batch);
	return ok;
}

static const struct test_case tests[] = {
	T(test_cupti_usdt_counts), T(test_cupti_usdt_join), T(test_cupti_usdt_samples),
	T(test_cupti_usdt_busy),   T(test_cupti_usdt_memops), T(test_cupti_usdt_scan_skips),
};

int main(int argc, char **argv)
{
	char self[512];
	ssize_t n;
	int rc;

	if (geteuid() != 0) {
		printf("skip: needs root for eBPF\n");
		return 77;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = 0;
	/* .output/tests/unit/test_cupti_usdt -> .output/tests/cupti */
	*strrchr(self, '/') = 0;
	snprintf(REPLAY_DIR, sizeof(REPLAY_DIR), "%s/../cupti", self);
	rc = test_main(tests, ARRAY_SIZE(tests), argc, argv);
	batch_decode_free(M);
	return rc;
}
