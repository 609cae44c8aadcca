/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the findings engine's pure parts (src/server/insights/): the detectors'
 * thresholds on hand-made facts (a healthy GPU gets nothing, each pattern just past its
 * threshold gets its finding, just short of it nothing), the links' encoding, and the /metrics
 * counter's bounded cardinality (top workloads and "other", hand-over, sums kept).
 */
#include <stdlib.h>
#include "test.h"
#include "server/insights/ins_int.h"

/* A GPU held 1000 s, busy 500, idle 500 over a 1000 s range; the launching thread known. */
static struct ins_facts base(void)
{
	struct ins_facts f = { 0 };

	f.from_ns = f.ev_from_ns = 1000 * NSEC_PER_SEC;
	f.to_ns = f.ev_to_ns = 2000 * NSEC_PER_SEC;
	f.by = "namespace";
	f.workload = "w";
	f.wl_selector = "{namespace=\"w\"}";
	snprintf(f.sel_node, sizeof(f.sel_node), "{namespace=\"w\",node=\"n\"}");
	snprintf(f.sel_thread, sizeof(f.sel_thread), "{namespace=\"w\",node=\"n\",pid=\"1\",tid=\"1\"}");
	f.node = "n";
	f.gpu = "0";
	f.model = "M";
	f.price = 3.6;
	f.wl_held_s = f.held_s = 1000;
	f.busy_s = f.idle_s = f.seg_idle_s = 500;
	f.cpu_side = true;
	f.period_s = 0.01;
	f.node_cpu_set = true;
	snprintf(f.launch_pid, sizeof(f.launch_pid), "1");
	snprintf(f.launch_tid, sizeof(f.launch_tid), "1");
	return f;
}

static size_t run(const struct ins_facts *f, struct findings *out)
{
	out->n = 0;
	if (ins_detect(f, out))
		return (size_t)-1;
	return out->n;
}

static bool test_insights_healthy_none(void)
{
	struct findings fs = { 0 };
	struct ins_facts f = base();
	bool ok = true;

	/* idle 9 % of the time: whatever the threads did, no CPU-side finding */
	f.busy_s = 910;
	f.idle_s = f.seg_idle_s = 90;
	f.run_idle_s = 90;
	f.idle_samples = 1000;
	f.nfns = 1;
	snprintf(f.fns[0].name, sizeof(f.fns[0].name), "tokenize (t.py:1)");
	f.fns[0].share = 1;
	f.blocked_idle_s = 90;
	f.no_cpu_idle_s = 90;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "busy 91 %: nothing");
	/* idle, but nothing of a pattern: the thread half on a CPU in framework code */
	f = base();
	f.run_idle_s = 250;
	f.idle_samples = 1000;
	f.fw_samples = 1000;
	f.others_run_idle_s = 500;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "no pattern: nothing");
	free(fs.v);
	return ok;
}

static bool test_insights_thresholds(void)
{
	struct findings fs = { 0 };
	struct ins_facts f = base();
	bool ok = true;

	/* input work: on a CPU 50 % of the idle time, 50 % of its samples outside CUDA */
	f.run_idle_s = 250;
	f.idle_samples = 100;
	f.fw_samples = 50;
	f.nfns = 1;
	snprintf(f.fns[0].name, sizeof(f.fns[0].name), "tokenize (t.py:1)");
	f.fns[0].share = 0.5;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "input at its thresholds");
	ok &= ASSERT_EQ(fs.v[0].kind, INS_INPUT_ON_LAUNCH, "kind");
	ok &= ASSERT_TRUE(fabs(fs.v[0].stake_s - 500 * 0.5 * 0.5) < 1e-9, "stake 125 s");
	ok &= ASSERT_TRUE(fabs(fs.v[0].dollars - 0.125) < 1e-9, "$0.125 at $3.60/h");
	ok &= ASSERT_STREQ(fs.v[0].confidence, "measured", "measured");
	f.fw_samples = 51;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "49 % input work: nothing");
	f.fw_samples = 50;
	f.idle_samples = 19;
	f.fw_samples = 9;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "few samples");
	ok &= ASSERT_STREQ(fs.v[0].confidence, "low", "19 samples: low confidence");
	f.idle_samples = 100;
	f.fw_samples = 50;
	f.est_set = true;
	f.est_share = 0.8;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "estimated");
	ok &= ASSERT_STREQ(fs.v[0].confidence, "estimated", "80 % estimated");
	ok &= ASSERT_TRUE(strstr(fs.v[0].summary, "Estimated: 80 %") != NULL, "says so");

	/* starved: blocked 30 % of the idle time while others ran 0.2 thread-s per idle s */
	f = base();
	f.blocked_idle_s = 150;
	snprintf(f.blocked_reason, sizeof(f.blocked_reason), "futex");
	f.others_run_idle_s = 100;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "starved at its thresholds");
	ok &= ASSERT_EQ(fs.v[0].kind, INS_STARVED_LOADER, "kind");
	f.others_run_idle_s = 99;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "workers idle, node idle: not starved");
	f.no_cpu_idle_s = 250;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "no CPU half the idle time, node idle");
	ok &= ASSERT_EQ(fs.v[0].kind, INS_NODE_IDLE, "node_idle");
	f.node_cpu_s = 125;	/* 0.25 cores */
	ok &= ASSERT_EQ(run(&f, &fs), 0, "the node busy 0.25 cores: not node_idle");

	/*
	 * A launching thread blocked while another thread of its side launches for it (the
	 * Python thread in loss.backward(), autograd's device thread launching): not starved,
	 * neither by that thread's run time nor by the node's CPUs it and the side use.
	 */
	f = base();
	f.launchers = 2;
	f.run_idle_s = 300;
	f.blocked_idle_s = 175;
	snprintf(f.blocked_reason, sizeof(f.blocked_reason), "other");
	f.helpers_run_idle_s = 185;
	f.others_run_idle_s = 10;
	f.node_cpu_s = 500;	/* one core: the side's own 0.97 and a little */
	ok &= ASSERT_EQ(run(&f, &fs), 0, "blocked on its launching helper: not starved");
	f.others_run_idle_s = 195;	/* the same time counted as workers' (before): starved */
	f.helpers_run_idle_s = 0;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "the same time run by a worker: starved");
	ok &= ASSERT_EQ(fs.v[0].kind, INS_STARVED_LOADER, "kind");
	f.others_run_idle_s = 10;
	f.node_cpu_s = 300 + 0.5 * 500;	/* the launching thread's own, the rest 0.5 cores */
	ok &= ASSERT_EQ(run(&f, &fs), 1, "workers idle, the rest of the node 0.5 cores: starved");
	ok &= ASSERT_TRUE(strstr(fs.v[0].summary, "the rest of the node's CPUs 0.50 cores") != NULL,
			  "names the rest of the node");
	f.node_cpu_s -= 1;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "0.498 cores: not starved");

	/* half of 10 syncs seen drained the GPU, 30 % of the gap time in their steps, 0.5 syncs
	 * a second, the launching side (the thread and a helper) on a CPU 30 % of the idle time */
	f = base();
	f.run_idle_s = 100;
	f.helpers_run_idle_s = 50;
	f.idle_samples = 100;
	f.fw_samples = 100;
	f.gap_idle_s = 500;
	f.sync_follow_idle_s = 150;
	f.sync_seen = 10;
	f.sync_drained = 5;
	f.sync_calls = 500;
	f.sync_s = 5;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "sync at its thresholds");
	ok &= ASSERT_EQ(fs.v[0].kind, INS_SYNC_PER_STEP, "kind");
	ok &= ASSERT_TRUE(fabs(fs.v[0].stake_s - 500 * 0.3) < 1e-9, "stake: idle x follow");
	ok &= ASSERT_TRUE(strstr(fs.v[0].summary, "waiting 10.0 ms each; 50 % of the 10 syncs "
				 "seen drained") != NULL, "per step, drained");
	f.sync_drained = 4.9;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "49 % drained (the GPU idle before them): nothing");
	f.sync_drained = 4.5;
	f.sync_seen = 9;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "9 syncs seen: too few to tell");
	f.sync_seen = 10;
	f.sync_drained = 5;
	f.sync_follow_idle_s = 149;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "29.8 % of the gap time in their steps: nothing");
	f.sync_follow_idle_s = 150;
	f.helpers_run_idle_s = 49;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "the side on a CPU 29.8 %: nothing");
	f.helpers_run_idle_s = 50;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "back at the thresholds");
	ok &= ASSERT_TRUE(strstr(fs.v[0].summary, "its own work") == NULL,
			  "framework code after the sync: no input work named");
	f.kernels = 5000;	/* short kernels, and Python work after each sync: the sync wins */
	f.kernel_s = 0.1;
	f.run_idle_s = 500;
	f.fw_samples = 0;
	f.nfns = 1;
	snprintf(f.fns[0].name, sizeof(f.fns[0].name), "log_metrics (t.py:9)");
	f.fns[0].share = 1;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "sync before launch-bound and input work");
	ok &= ASSERT_EQ(fs.v[0].kind, INS_SYNC_PER_STEP, "the sync");
	ok &= ASSERT_TRUE(strstr(fs.v[0].summary, "log_metrics (t.py:9) 100 %") != NULL,
			  "and the input work it exposes, named");
	ok &= ASSERT_TRUE(strstr(fs.v[0].recommendation, "Or move log_metrics (t.py:9)") != NULL,
			  "moving it off the thread the other fix");
	f.sync_calls = 499;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "0.499 syncs/s: not a sync");
	ok &= ASSERT_EQ(fs.v[0].kind, INS_INPUT_ON_LAUNCH, "the Python work then");

	/* launch-bound: 1000 kernels of 50 us, busy 50 %, on a CPU 80 % in framework code */
	f = base();
	f.run_idle_s = 400;
	f.idle_samples = 100;
	f.fw_samples = 100;
	f.kernels = 1000;
	f.kernel_s = 0.05;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "launch-bound at its thresholds");
	ok &= ASSERT_EQ(fs.v[0].kind, INS_LAUNCH_BOUND, "kind");
	f.kernel_s = 0.051;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "51 us kernels: nothing");

	/* held, unused: busy 2 %, idle >= 60 s and half the held time */
	f = base();
	f.busy_s = 2;
	f.idle_s = 98;
	f.held_s = 100;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "held unused");
	ok &= ASSERT_EQ(fs.v[0].kind, INS_HELD_UNUSED, "kind");
	f.busy_s = 2.1;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "busy 2.1 %: not unused (and idle 98 %: too few facts)");

	/* throttled: thermal, 5 % of the busy time lost */
	f = base();
	f.cpu_side = false;
	f.span_busy_s = 500;
	f.throttled_busy_s = 100;
	f.throttle_loss_s = 25;
	f.throttle_mask = 0x20;
	ok &= ASSERT_EQ(run(&f, &fs), 1, "throttled");
	ok &= ASSERT_EQ(fs.v[0].kind, INS_THROTTLED, "kind");
	ok &= ASSERT_TRUE(fabs(fs.v[0].stake_s - 25) < 1e-9, "stake: busy x loss share");
	f.throttle_loss_s = 24;
	ok &= ASSERT_EQ(run(&f, &fs), 0, "4.8 % lost: nothing");
	free(fs.v);
	return ok;
}

static bool test_insights_url(void)
{
	struct buf b = { 0 };
	bool ok;

	ins_url_enc(&b, "{a=\"x y\",b=~\"1|2\"}", true);
	ins_url_enc(&b, " ", false);
	buf_put(&b, "", 1);
	ok = ASSERT_STREQ((char *)b.p, "%7Ba%3D%22x+y%22,b%3D%7E%221%7C2%22%7D%20",
			   "form (URLSearchParams: ~ escaped), then API");
	buf_done(&b);
	return ok;
}

static char *metrics(struct ins_prom *p)
{
	static char *text;	/* static: open_memstream keeps their addresses until fclose */
	static size_t len;
	FILE *f = open_memstream(&text, &len);

	ins_prom_write(p, f);
	fclose(f);
	return text;
}

static void add(struct findings *fs, const char *wl, enum ins_kind k, double s)
{
	struct finding *x;

	fs->v = realloc(fs->v, (fs->n + 1) * sizeof(*fs->v));
	x = &fs->v[fs->n++];
	memset(x, 0, sizeof(*x));
	snprintf(x->workload, sizeof(x->workload), "%s", wl);
	x->kind = k;
	x->stake_s = s;
}

static double sample(const char *text, const char *series)
{
	const char *p = strstr(text, series);

	return p ? strtod(p + strlen(series), NULL) : -1;
}

static bool test_insights_prom_top(void)
{
	struct ins_prom *p = ins_prom_new();
	struct findings fs = { 0 };
	bool ok = true;
	char *t;

	add(&fs, "a", INS_HELD_UNUSED, 100);
	add(&fs, "b", INS_HELD_UNUSED, 50);
	add(&fs, "c", INS_HELD_UNUSED, 10);
	ok &= ASSERT_EQ(ins_prom_add(p, &fs, 2), 0, "window 1");
	t = metrics(p);
	ok &= ASSERT_TRUE(sample(t, "{kind=\"held_unused\",workload=\"a\"} ") == 100, "a own");
	ok &= ASSERT_TRUE(sample(t, "{kind=\"held_unused\",workload=\"b\"} ") == 50, "b own");
	ok &= ASSERT_TRUE(strstr(t, "workload=\"c\"") == NULL, "c in other");
	ok &= ASSERT_TRUE(sample(t, "{kind=\"held_unused\",workload=\"other\"} ") == 10, "other 10");
	free(t);
	/* c overtakes b: b's counts go to other (other keeps rising), c starts from this window */
	fs.n = 0;
	add(&fs, "c", INS_HELD_UNUSED, 200);
	ok &= ASSERT_EQ(ins_prom_add(p, &fs, 2), 0, "window 2");
	t = metrics(p);
	ok &= ASSERT_TRUE(sample(t, "{kind=\"held_unused\",workload=\"c\"} ") == 200, "c own");
	ok &= ASSERT_TRUE(strstr(t, "workload=\"b\"") == NULL, "b left");
	ok &= ASSERT_TRUE(sample(t, "{kind=\"held_unused\",workload=\"other\"} ") == 60,
			  "other 10 + b's 50");
	free(t);
	/* many workloads: the ranking stays bounded, the series at top + other per kind */
	fs.n = 0;
	for (int i = 0; i < 500; i++) {
		char wl[16];

		snprintf(wl, sizeof(wl), "w%d", i);
		add(&fs, wl, INS_NODE_IDLE, 1);
	}
	ok &= ASSERT_EQ(ins_prom_add(p, &fs, 2), 0, "window 3");
	t = metrics(p);
	{
		size_t series = 0;

		for (const char *q = t; (q = strstr(q, "gpuscope_server_insight_gpu_seconds_total{"));
		     q++)
			series++;
		ok &= ASSERT_EQ(series, 2 + INS_KIND_MAX, "2 workloads' series + other per kind");
	}
	ok &= ASSERT_TRUE(sample(t, "{kind=\"node_idle\",workload=\"other\"} ") == 500, "sums kept");
	free(t);
	ins_prom_free(p);
	free(fs.v);
	return ok;
}

int main(int argc, char **argv)
{
	static const struct test_case tc[] = {
		T(test_insights_healthy_none),
		T(test_insights_thresholds),
		T(test_insights_url),
		T(test_insights_prom_top),
	};

	return test_main(tc, sizeof(tc) / sizeof(tc[0]), argc, argv);
}
