/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The detectors (docs/insights.md has every rule, its thresholds and why): pure functions of
 * one (workload, GPU)'s facts that say whether a known pattern of waste is there, how much GPU
 * time it holds idle, and what shows it. Precision over recall: each rule needs its pattern to
 * explain a large share of the idle time, and none fires on a GPU busy 90 % of the time.
 */
#include "server/insights/ins_int.h"

const char *const ins_kind_names[INS_KIND_MAX] = {
	"input_on_launch_thread", "starved_dataloader", "host_sync_per_step", "launch_bound",
	"sync_copies", "node_idle", "held_unused", "throttled",
};

/* CPU-side detectors look only at a GPU idle at least this share of its observed time... */
#define MIN_IDLE_SHARE		0.10
#define MIN_IDLE_S		2.0	/* ...and at least this long over the range */
#define ON_CPU_INPUT		0.50	/* launching thread on a CPU this share of the idle time */
#define INPUT_SHARE		0.50	/* ... its samples outside CUDA/framework code */
#define MIN_SAMPLES		20	/* fewer GPU-idle samples: confidence low */
#define SYNC_DRAIN		0.50	/* syncs seen that the GPU went idle in (drained it) */
#define SYNC_MIN_SEEN		10	/* ... of at least this many seen where idle was decided */
#define SYNC_FOLLOW		0.30	/* whole-idle gap time in steps ending with such a sync */
#define SYNC_ON_CPU		0.30	/* the launching side on a CPU (launching, its own work) */
#define SYNC_RATE		0.5	/* syncs per second of the evidence span, at least */
#define LAUNCH_ON_CPU		0.80	/* launch-bound: the thread on a CPU nearly all idle time */
#define LAUNCH_MEAN_US		50.0	/* ... its kernels this short on average */
#define LAUNCH_MIN_KERNELS	1000
#define LAUNCH_BUSY_MAX		0.70	/* ... and the GPU busy at most this share */
#define STARVED_BLOCKED		0.30	/* launching thread blocked this share of the idle time */
#define STARVED_WORKERS		0.20	/* ... while other threads ran (thread-s per idle s) */
#define STARVED_NODE_CPU	0.50	/* ... or the node's CPUs did (cores during idle) */
#define NODE_NO_CPU		0.50	/* node idle: no thread of the workload running... */
#define NODE_CPU_MAX		0.25	/* ... and the node's CPUs below this many cores */
#define COPY_IDLE		0.10	/* copies holding the thread during this share of idle */
#define COPY_MIN_S		1.0
#define HELD_BUSY_MAX		0.02	/* held but unused: busy at most 2 % of observed time */
#define HELD_MIN_S		60.0	/* ... for at least a minute of idle */
#define THROTTLE_LOSS		0.05	/* clock shortfall while throttled, share of busy time */
#define THROTTLE_MIN_S		30.0	/* busy seconds under a power/thermal reason */

/* ---- links -------------------------------------------------------------------------------- */

void ins_url_enc(struct buf *b, const char *s, bool form)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '_' || c == '.' || c == '*' || (!form && c == '~'))
			buf_put(b, s, 1);
		else if (form && c == ' ')
			buf_put(b, "+", 1);
		else if (form && c == ',')
			buf_put(b, ",", 1);	/* the UI writes its commas plain */
		else
			buf_printf(b, "%%%02X", c);
	}
}

static void secs(struct buf *b, uint64_t ns)
{
	buf_printf(b, "%llu.%03llu", (unsigned long long)(ns / NSEC_PER_SEC),
		   (unsigned long long)(ns % NSEC_PER_SEC / NSEC_PER_MSEC));
}

/* /api/v1/PATH?from=..&to=..&selector=SEL&EXTRA */
static void api_link(char *out, size_t n, const struct ins_facts *f, bool span, const char *path,
		     const char *sel, const char *extra)
{
	struct buf b = { 0 };

	buf_printf(&b, "/api/v1/%s?from=", path);
	secs(&b, span ? f->ev_from_ns : f->from_ns);
	buf_puts(&b, "&to=");
	secs(&b, span ? f->ev_to_ns : f->to_ns);
	if (sel && *sel) {
		buf_puts(&b, "&selector=");
		ins_url_enc(&b, sel, false);
	}
	if (extra && *extra)
		buf_printf(&b, "&%s", extra);
	snprintf(out, n, "%s", b.oom ? "" : (char *)(buf_put(&b, "", 1), b.p));
	buf_done(&b);
}

/* The UI's query string in the order ui/src/state.js writes it: node gpu pid sel kind q view by,
 * then from to (ms), then idle. */
static void ui_link(char *out, size_t n, const struct ins_facts *f, bool span, bool gpu,
		    const char *pid, const char *sel, const char *kind, const char *q,
		    const char *view, bool idle)
{
	const char *k[] = { "node", "gpu", "pid", "sel", "kind", "q", "view", "by" };
	const char *v[] = { view ? NULL : f->node, gpu && !view ? f->gpu : NULL, view ? NULL : pid,
			    sel, kind, q, view, view ? f->by : NULL };
	struct buf b = { 0 };
	bool first = true;

	buf_puts(&b, "/");
	for (size_t i = 0; i < ARRAY_SIZE(k); i++) {
		if (!v[i] || !*v[i])
			continue;
		buf_printf(&b, "%s%s=", first ? "?" : "&", k[i]);
		ins_url_enc(&b, v[i], true);
		first = false;
	}
	buf_printf(&b, "%sfrom=%llu&to=%llu", first ? "?" : "&",
		   (unsigned long long)((span ? f->ev_from_ns : f->from_ns) / NSEC_PER_MSEC),
		   (unsigned long long)((span ? f->ev_to_ns : f->to_ns) / NSEC_PER_MSEC));
	if (idle)
		buf_puts(&b, "&idle=1");
	buf_put(&b, "", 1);
	snprintf(out, n, "%s", b.oom ? "" : (char *)b.p);
	buf_done(&b);
}

/* ---- findings ----------------------------------------------------------------------------- */

static struct finding *add(struct findings *out, const struct ins_facts *f, enum ins_kind kind,
			   double stake_s, bool per_gpu)
{
	struct finding *x;

	if (array_reserve(&out->v, &out->cap, out->n + 1, sizeof(*out->v), 16))
		return NULL;
	x = &out->v[out->n++];
	memset(x, 0, sizeof(*x));
	x->kind = kind;
	snprintf(x->workload, sizeof(x->workload), "%s", f->workload);
	snprintf(x->selector, sizeof(x->selector), "%s", f->wl_selector);
	snprintf(x->node, sizeof(x->node), "%s", f->node);
	snprintf(x->gpu, sizeof(x->gpu), "%s", f->gpu);
	x->has_gpu = per_gpu;
	x->stake_s = stake_s;
	x->dollars = isnan(f->price) ? NAN : stake_s / 3600 * f->price;
	x->share_of_held = f->wl_held_s > 0 ? stake_s / f->wl_held_s : 0;
	/* mostly unknown GPU time, or evidence cut short at the read limit */
	x->confidence = f->unknown_s > f->held_s / 2 || (f->truncated && kind != INS_HELD_UNUSED &&
							 kind != INS_THROTTLED) ? "low" : "measured";
	return x;
}

static struct ins_ev *ev(struct finding *x, double value, const char *unit, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static struct ins_ev *ev(struct finding *x, double value, const char *unit, const char *fmt, ...)
{
	struct ins_ev *e = &x->ev[x->nev < INS_EV_MAX ? x->nev++ : INS_EV_MAX - 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->label, sizeof(e->label), fmt, ap);
	va_end(ap);
	e->value = value;
	e->unit = unit;
	return e;
}

/* The sample-based confidence: few samples are low, windows standing for time estimated. */
static void sample_confidence(struct finding *x, const struct ins_facts *f)
{
	x->est_share = f->est_set ? f->est_share : 0;
	if (f->idle_samples < MIN_SAMPLES || !strcmp(x->confidence, "low"))
		x->confidence = "low";
	else if (x->est_share >= 0.2)
		x->confidence = "estimated";
}

static void est_note(char *s, size_t n, const struct finding *x, const struct ins_facts *f)
{
	size_t len = strlen(s);

	if (x->est_share >= 0.2 && len + 2 < n)
		snprintf(s + len, n - len, " Estimated: %.0f %% of the GPU-idle samples stand for "
			 "time no trace window covered (%s).", 100 * x->est_share, f->est_summary);
}

/* The function of a name for the UI's search (q): "tokenize (train.py:42)" -> "tokenize". */
static const char *fn_only(const char *name, char *buf, size_t n)
{
	const char *p = strstr(name, " (");

	snprintf(buf, n, "%.*s", p ? (int)(p - name) : (int)strlen(name), name);
	return buf;
}

static void fn_list(char *s, size_t n, const struct ins_facts *f)
{
	size_t o = 0;

	s[0] = 0;
	for (size_t i = 0; i < f->nfns && o + 2 < n; i++)
		o += (size_t)snprintf(s + o, n - o, "%s%s %.0f %%", i ? ", " : "", f->fns[i].name,
				      100 * f->fns[i].share);
}

/* The launching thread's GPU-idle functions as evidence, each linked to its flame graph. */
static void fn_evidence(struct finding *x, const struct ins_facts *f)
{
	for (size_t i = 0; i < f->nfns; i++) {
		struct ins_ev *e = ev(x, f->fns[i].share, "share", "%s %.0f %% of GPU-idle CPU "
				      "samples", f->fns[i].name, 100 * f->fns[i].share);
		char q[192];

		api_link(e->api, sizeof(e->api), f, true, "top", f->sel_thread,
			 "kind=cpu&gpu_idle=");
		snprintf(e->api + strlen(e->api), sizeof(e->api) - strlen(e->api), "%s", f->gpu);
		ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, f->sel_thread, NULL,
			fn_only(f->fns[i].name, q, sizeof(q)), NULL, true);
	}
}

static int input_on_launch(const struct ins_facts *f, double on_cpu, double user,
			   struct findings *out)
{
	double stake = f->idle_s * on_cpu * user;
	struct finding *x = add(out, f, INS_INPUT_ON_LAUNCH, stake, true);
	char fns[600];

	if (!x)
		return -ENOMEM;
	sample_confidence(x, f);
	fn_list(fns, sizeof(fns), f);
	snprintf(x->title, sizeof(x->title), "%s: the training thread does input work while GPU "
		 "%s waits", f->workload, f->gpu);
	snprintf(x->summary, sizeof(x->summary), "While GPU %s on %s was idle (%.0f %% of its "
		 "time), the thread that launches its kernels (tid %s) was on a CPU %.0f %% of the "
		 "idle time, %.0f %% of it outside CUDA and framework code: %s.",
		 f->gpu, f->node, 100 * f->idle_s / (f->busy_s + f->idle_s), f->launch_tid,
		 100 * on_cpu, 100 * user, fns);
	est_note(x->summary, sizeof(x->summary), x, f);
	snprintf(x->recommendation, sizeof(x->recommendation), "Move %s off the training thread: "
		 "into DataLoader workers (num_workers > 0, the work in the Dataset or collate_fn) "
		 "or a prefetching thread, so the next batch is ready when the GPU is.",
		 f->nfns ? f->fns[0].name : "this work");
	fn_evidence(x, f);
	{
		struct ins_ev *e = ev(x, on_cpu, "share", "launching thread %s on a CPU %.0f %% of "
				      "the GPU's idle time", f->launch_tid, 100 * on_cpu);

		api_link(e->api, sizeof(e->api), f, true, "intervals", f->sel_thread,
			 "kind=thread_state");
		ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, NULL, NULL, NULL, NULL,
			false);
	}
	return 0;
}

static int sync_per_step(const struct ins_facts *f, const struct ins_derived *d,
			 struct findings *out)
{
	double follow = d->follow, user = d->user;
	double per = d->sync_steps > 0 ? f->sync_s / d->sync_steps : 0;
	double span = (double)(f->ev_to_ns - f->ev_from_ns) / 1e9;
	struct finding *x = add(out, f, INS_SYNC_PER_STEP, f->idle_s * follow, true);
	struct ins_ev *e;
	char q[200];

	if (!x)
		return -ENOMEM;
	/* the gaps were seen where a source decided whole idle; the rest of the idle is assumed
	 * alike */
	x->est_share = f->seg_idle_s > 0 ? fmax(0, 1 - f->gap_idle_s / f->seg_idle_s) : 0;
	if (x->est_share >= 0.2 && strcmp(x->confidence, "low"))
		x->confidence = "estimated";
	snprintf(x->title, sizeof(x->title), "%s: a host sync in every step stalls GPU %s",
		 f->workload, f->gpu);
	snprintf(x->summary, sizeof(x->summary), "The launching thread (tid %s) synchronizes with "
		 "the GPU %.1f times a second%s%s, waiting %.1f ms each; %.0f %% of the %.0f syncs "
		 "seen drained the GPU (it went idle as they waited) and %.0f %% of GPU %s's "
		 "whole-idle time came in the steps they ended: the GPU drains, then waits for "
		 "the next step's launches.", f->launch_tid, d->sync_rate,
		 f->sync_fn.name[0] ? " at " : "", f->sync_fn.name, per * 1e3, 100 * d->drain,
		 f->sync_seen, 100 * follow, f->gpu);
	if (x->est_share >= 0.2) {
		size_t l = strlen(x->summary);

		snprintf(x->summary + l, sizeof(x->summary) - l, " Estimated: the gaps were seen "
			 "over %.1f s of whole-idle time (trace windows, the driver at 0 %%), %.0f %% "
			 "of the idle time stands on them.", f->gap_idle_s, 100 * x->est_share);
	}
	snprintf(x->recommendation, sizeof(x->recommendation), "Remove the per-step host sync%s%s "
		 "(.item(), .cpu(), print of a tensor, a blocking copy): keep values on the GPU "
		 "and read them every N steps, or copy with non_blocking=True into pinned memory.",
		 f->sync_fn.name[0] ? " at " : "", f->sync_fn.name);
	/*
	 * What the sync exposes, when it is the thread's own input work (a tokenizer before a
	 * blocking host-to-device copy): named too, since moving it off the thread is the other fix.
	 */
	if (f->nfns && user >= INPUT_SHARE) {
		char fns[600];
		size_t l = strlen(x->summary);

		fn_list(fns, sizeof(fns), f);
		snprintf(x->summary + l, sizeof(x->summary) - l, " What the thread runs while the GPU "
			 "waits is its own work, %.0f %% of it outside CUDA and framework code: %s.",
			 100 * user, fns);
		l = strlen(x->recommendation);
		snprintf(x->recommendation + l, sizeof(x->recommendation) - l, " Or move %s off "
			 "the training thread (DataLoader workers), so it overlaps the GPU's work.",
			 f->fns[0].name);
	}
	e = ev(x, per, "per_step", "sync wait per step %.1f ms%s%s", per * 1e3,
	       f->sync_fn.name[0] ? " at " : "", f->sync_fn.name);
	api_link(e->api, sizeof(e->api), f, true, "intervals", f->sel_thread, "kind=cuda_api");
	fn_only(f->sync_fn.name, q, sizeof(q));
	ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, f->sel_thread, "cuda_sync_ns",
		q, NULL, false);
	e = ev(x, d->sync_steps, "count", "%.0f host syncs in %.0f s", d->sync_steps, span);
	api_link(e->api, sizeof(e->api), f, true, "intervals", f->sel_thread, "kind=cuda_api");
	ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, NULL, NULL, NULL, NULL, false);
	e = ev(x, d->drain, "share", "%.0f %% of %.0f syncs seen drained the GPU", 100 * d->drain,
	       f->sync_seen);
	api_link(e->api, sizeof(e->api), f, true, "intervals", f->sel_node, "kind=gpu_busy");
	ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, NULL, NULL, NULL, NULL, false);
	if (f->nfns && user >= INPUT_SHARE)
		fn_evidence(x, f);
	return 0;
}

static int launch_bound(const struct ins_facts *f, double on_cpu, double mean_us, double busy,
			struct findings *out)
{
	double span = (double)(f->ev_to_ns - f->ev_from_ns) / 1e9;
	struct finding *x = add(out, f, INS_LAUNCH_BOUND, f->idle_s * on_cpu, true);
	struct ins_ev *e;

	if (!x)
		return -ENOMEM;
	sample_confidence(x, f);
	snprintf(x->title, sizeof(x->title), "%s: launch-bound, GPU %s waits for many short kernels",
		 f->workload, f->gpu);
	snprintf(x->summary, sizeof(x->summary), "GPU %s was busy %.0f %% of its time running "
		 "kernels of %.1f us on average (%.0f per traced second), while the launching "
		 "thread (tid %s) was on a CPU %.0f %% of the idle time, %.0f %% of it in CUDA and "
		 "framework code: the CPU cannot issue kernels as fast as the GPU runs them.",
		 f->gpu, 100 * busy, mean_us, f->traced_s > 0 ? f->kernels / f->traced_s : 0,
		 f->launch_tid, 100 * on_cpu,
		 f->idle_samples > 0 ? 100 * f->fw_samples / f->idle_samples : 0);
	est_note(x->summary, sizeof(x->summary), x, f);
	snprintf(x->recommendation, sizeof(x->recommendation), "Capture the step in a CUDA graph "
		 "(torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs), fuse small "
		 "operations, or run larger batches so each launch carries more work.");
	e = ev(x, mean_us, "count", "mean kernel %.1f us over %.0f kernels", mean_us, f->kernels);
	api_link(e->api, sizeof(e->api), f, true, "flamegraph", f->sel_node, "kind=gpu_kernel_ns");
	ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, f->sel_node, "gpu_kernel_ns",
		NULL, NULL, false);
	e = ev(x, f->launches / span, "count", "%.0f kernel launches per second", f->launches / span);
	api_link(e->api, sizeof(e->api), f, true, "intervals", f->sel_thread, "kind=cuda_api");
	ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, NULL, NULL, NULL, NULL, false);
	e = ev(x, on_cpu, "share", "launching thread on a CPU %.0f %% of the idle time",
	       100 * on_cpu);
	api_link(e->api, sizeof(e->api), f, true, "top", f->sel_thread, "kind=cpu&gpu_idle=");
	snprintf(e->api + strlen(e->api), sizeof(e->api) - strlen(e->api), "%s", f->gpu);
	ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, f->sel_thread, NULL, NULL, NULL,
		true);
	return 0;
}

static int starved(const struct ins_facts *f, double blocked, double workers, double node_cpu,
		   struct findings *out)
{
	struct finding *x = add(out, f, INS_STARVED_LOADER, f->idle_s * blocked, true);
	struct ins_ev *e;

	if (!x)
		return -ENOMEM;
	snprintf(x->title, sizeof(x->title), "%s: the training thread waits for data while GPU %s "
		 "idles", f->workload, f->gpu);
	{
		char nodes[96] = "";

		if (f->node_cpu_set)
			snprintf(nodes, sizeof(nodes), " and the rest of the node's CPUs %.2f cores",
				 node_cpu);
		snprintf(x->summary, sizeof(x->summary), "During GPU %s's idle time the launching "
			 "thread (tid %s) was blocked (%s) %.0f %% of the time%s%s, while the "
			 "workload's other threads ran %.2f thread-seconds%s per idle second: the "
			 "input pipeline does not keep up.", f->gpu, f->launch_tid, f->blocked_reason,
			 100 * blocked, f->blocked_fn.name[0] ? " in " : "", f->blocked_fn.name,
			 workers, nodes);
	}
	snprintf(x->recommendation, sizeof(x->recommendation), "Feed the GPU faster: more "
		 "DataLoader workers (num_workers), prefetch_factor and pin_memory=True, persistent "
		 "workers; if the workers wait on storage, cache or pre-decode the data.");
	e = ev(x, blocked, "share", "launching thread blocked (%s) %.0f %% of the idle time%s%s",
	       f->blocked_reason, 100 * blocked, f->blocked_fn.name[0] ? " in " : "",
	       f->blocked_fn.name);
	api_link(e->api, sizeof(e->api), f, true, "flamegraph", f->sel_thread,
		 "kind=offcpu_ns&gpu_idle=");
	snprintf(e->api + strlen(e->api), sizeof(e->api) - strlen(e->api), "%s", f->gpu);
	ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, f->sel_thread, "offcpu_ns",
		NULL, NULL, true);
	e = ev(x, workers, "share", "other threads of the workload ran %.2f thread-s per idle s",
	       workers);
	api_link(e->api, sizeof(e->api), f, true, "flamegraph", f->sel_node,
		 "kind=cpu&group_by=tid&gpu_idle=");
	snprintf(e->api + strlen(e->api), sizeof(e->api) - strlen(e->api), "%s", f->gpu);
	ui_link(e->ui, sizeof(e->ui), f, true, true, NULL, f->sel_node, NULL, NULL, NULL, true);
	return 0;
}

static int node_idle(const struct ins_facts *f, double nocpu, double node_cpu,
		     struct findings *out)
{
	struct finding *x = add(out, f, INS_NODE_IDLE, f->idle_s * nocpu, true);
	char sel[300];
	struct ins_ev *e;

	if (!x)
		return -ENOMEM;
	snprintf(sel, sizeof(sel), "{node=\"%s\"}", f->node);
	snprintf(x->title, sizeof(x->title), "%s: GPU %s and the node's CPUs idle together",
		 f->workload, f->gpu);
	snprintf(x->summary, sizeof(x->summary), "For %.0f %% of GPU %s's idle time no thread of "
		 "the workload was on a CPU and the whole node used %.2f cores: the workload waits "
		 "on something off the node (storage, network, another rank)%s%s.", 100 * nocpu,
		 f->gpu, node_cpu, f->blocked_fn.name[0] ? ", blocked in " : "", f->blocked_fn.name);
	snprintf(x->recommendation, sizeof(x->recommendation), "Find what it waits for: a slow "
		 "rank in a collective (compare ranks' step times), remote storage reads (cache "
		 "locally, prefetch), or network I/O; overlap it with compute.");
	e = ev(x, nocpu, "share", "no thread of the workload on a CPU %.0f %% of the idle time",
	       100 * nocpu);
	api_link(e->api, sizeof(e->api), f, true, "intervals", f->sel_node, "kind=thread_state");
	ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, NULL, NULL, NULL, NULL, false);
	e = ev(x, node_cpu, "share", "node CPUs busy %.2f cores during GPU idle", node_cpu);
	api_link(e->api, sizeof(e->api), f, true, "top", sel, "kind=cpu&gpu_idle=");
	snprintf(e->api + strlen(e->api), sizeof(e->api) - strlen(e->api), "%s", f->gpu);
	ui_link(e->ui, sizeof(e->ui), f, true, true, NULL, sel, NULL, NULL, NULL, true);
	return 0;
}

static int sync_copies(const struct ins_facts *f, double share, struct findings *out)
{
	struct finding *x = add(out, f, INS_SYNC_COPIES, f->idle_s * share, true);
	double gbps = f->copy_gpu_s > 0 ? f->copy_bytes / f->copy_gpu_s / 1e9 : 0;
	struct ins_ev *e;

	if (!x)
		return -ENOMEM;
	snprintf(x->title, sizeof(x->title), "%s: synchronous host-device copies on the critical "
		 "path of GPU %s", f->workload, f->gpu);
	snprintf(x->summary, sizeof(x->summary), "The launching thread (tid %s) spent %.1f s in "
		 "%.0f blocking copies%s%s, %.0f %% of GPU %s's idle time%s: pageable or "
		 "synchronous copies hold the thread until the data moved.", f->launch_tid,
		 f->copy_s, f->copy_calls, f->copy_fn.name[0] ? " at " : "", f->copy_fn.name,
		 100 * share, f->gpu, gbps > 0 ? "" : "");
	if (gbps > 0) {
		size_t l = strlen(x->summary);

		snprintf(x->summary + l, sizeof(x->summary) - l, " Traced copies moved %.2f GB/s.",
			 gbps);
	}
	snprintf(x->recommendation, sizeof(x->recommendation), "Copy from pinned memory "
		 "asynchronously: DataLoader(pin_memory=True) or tensor.pin_memory(), then "
		 ".to(device, non_blocking=True), so copies overlap compute.");
	e = ev(x, f->copy_s, "seconds", "%.1f s in %.0f blocking copies%s%s", f->copy_s,
	       f->copy_calls, f->copy_fn.name[0] ? " at " : "", f->copy_fn.name);
	api_link(e->api, sizeof(e->api), f, true, "intervals", f->sel_thread, "kind=cuda_api");
	ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, NULL, NULL, NULL, NULL, false);
	e = ev(x, f->copy_bytes, "count", "%.0f bytes copied in traced windows", f->copy_bytes);
	api_link(e->api, sizeof(e->api), f, true, "intervals", f->sel_node, "kind=memcpy");
	ui_link(e->ui, sizeof(e->ui), f, true, true, f->launch_pid, NULL, NULL, NULL, NULL, false);
	return 0;
}

static int held_unused(const struct ins_facts *f, double busy, struct findings *out)
{
	struct finding *x = add(out, f, INS_HELD_UNUSED, f->idle_s, true);
	char sel[1100], extra[400];
	struct buf b = { 0 };
	struct ins_ev *e;

	if (!x)
		return -ENOMEM;
	snprintf(x->title, sizeof(x->title), "%s holds GPU %s on %s without using it",
		 f->workload, f->gpu, f->node);
	snprintf(x->summary, sizeof(x->summary), "GPU %s on %s was held %.0f s by the workload "
		 "(memory allocated) and busy %.1f %% of its observed time: %.0f GPU-seconds idle.",
		 f->gpu, f->node, f->held_s, 100 * busy, f->idle_s);
	snprintf(x->recommendation, sizeof(x->recommendation), "Release the GPU when the job is "
		 "not computing (end idle notebooks and servers, scale inference replicas to "
		 "load), or request fewer GPUs.");
	e = ev(x, busy, "share", "GPU %s busy %.1f %% of %.0f s held", f->gpu, 100 * busy,
	       f->held_s);
	buf_puts(&b, "by=");
	ins_url_enc(&b, f->by, false);
	buf_put(&b, "", 1);
	api_link(e->api, sizeof(e->api), f, false, "efficiency", f->wl_selector,
		 b.oom ? "" : (char *)b.p);
	buf_done(&b);
	ui_link(e->ui, sizeof(e->ui), f, false, false, NULL, f->wl_selector, NULL, NULL,
		"efficiency", false);
	e = ev(x, f->idle_s, "seconds", "%.0f GPU-seconds idle while held", f->idle_s);
	snprintf(sel, sizeof(sel), "{node=\"%s\",gpu=\"%s\"}", f->node, f->gpu);
	snprintf(extra, sizeof(extra), "name=gpu_utilization");
	api_link(e->api, sizeof(e->api), f, false, "series", sel, extra);
	ui_link(e->ui, sizeof(e->ui), f, false, true, NULL, NULL, NULL, NULL, NULL, false);
	return 0;
}

static int throttled(const struct ins_facts *f, struct findings *out)
{
	double stake = f->busy_s * f->throttle_loss_s / f->span_busy_s;
	struct finding *x = add(out, f, INS_THROTTLED, stake, true);
	char sel[600];
	struct ins_ev *e;

	if (!x)
		return -ENOMEM;
	snprintf(sel, sizeof(sel), "{node=\"%s\",gpu=\"%s\"}", f->node, f->gpu);
	snprintf(x->title, sizeof(x->title), "GPU %s on %s throttled while %s used it", f->gpu,
		 f->node, f->workload);
	snprintf(x->summary, sizeof(x->summary), "GPU %s ran %.0f busy seconds under %s%s%s "
		 "(clocks event reasons 0x%x), its SM clock short of its range maximum by %.0f %% "
		 "on average: %.0f GPU-seconds of work lost.", f->gpu, f->throttled_busy_s,
		 f->throttle_mask & 0x60 ? "thermal slowdown" : "",
		 (f->throttle_mask & 0x60) && (f->throttle_mask & 0x88) ? " and " : "",
		 f->throttle_mask & 0x88 ? "hardware slowdown / power brake" : "",
		 f->throttle_mask, f->throttled_busy_s > 0 ?
		 100 * f->throttle_loss_s / f->throttled_busy_s : 0, stake);
	snprintf(x->recommendation, sizeof(x->recommendation), "Check the node's cooling and power "
		 "delivery (fans, airflow, inlet temperature, PSU, power brake signals); the GPU "
		 "is slowed by its environment, not by the workload.");
	e = ev(x, f->throttled_busy_s, "seconds", "%.0f busy seconds throttled (reasons 0x%x)",
	       f->throttled_busy_s, f->throttle_mask);
	api_link(e->api, sizeof(e->api), f, false, "series", sel, "name=gpu_throttle_reasons");
	ui_link(e->ui, sizeof(e->ui), f, false, true, NULL, NULL, NULL, NULL, NULL, false);
	e = ev(x, f->throttled_busy_s > 0 ? f->throttle_loss_s / f->throttled_busy_s : 0, "share",
	       "SM clock %.0f %% below its maximum while throttled", f->throttled_busy_s > 0 ?
	       100 * f->throttle_loss_s / f->throttled_busy_s : 0);
	api_link(e->api, sizeof(e->api), f, false, "series", sel, "name=gpu_sm_clock_mhz");
	ui_link(e->ui, sizeof(e->ui), f, false, true, NULL, NULL, NULL, NULL, NULL, false);
	return 0;
}

bool ins_wants_cpu_side(const struct ins_facts *f)
{
	double obs = f->busy_s + f->idle_s;

	return obs > 0 && f->idle_s / obs >= MIN_IDLE_SHARE && f->idle_s >= MIN_IDLE_S &&
	       !(f->busy_s / obs <= HELD_BUSY_MAX && f->idle_s >= HELD_MIN_S);
}

bool ins_wants_throttle(const struct ins_facts *f)
{
	return f->busy_s >= THROTTLE_MIN_S;
}

static double of_idle(const struct ins_facts *f, double s)
{
	return f->seg_idle_s > 0 ? s / f->seg_idle_s : 0;
}

bool ins_needs_samples(const struct ins_facts *f)
{
	return of_idle(f, f->run_idle_s) >= fmin(ON_CPU_INPUT, LAUNCH_ON_CPU);
}

/* the launching thread blocked but while its side's other threads launched for it */
static double blocked_of_idle(const struct ins_facts *f)
{
	return of_idle(f, fmax(0, f->blocked_idle_s - f->helpers_run_idle_s));
}

bool ins_needs_blocked(const struct ins_facts *f)
{
	return blocked_of_idle(f) >= STARVED_BLOCKED ||
	       of_idle(f, f->no_cpu_idle_s) >= NODE_NO_CPU;
}

bool ins_needs_node_cpu(const struct ins_facts *f)
{
	return (blocked_of_idle(f) >= STARVED_BLOCKED &&
		of_idle(f, f->others_run_idle_s) < STARVED_WORKERS) ||
	       of_idle(f, f->no_cpu_idle_s) >= NODE_NO_CPU;
}

bool ins_needs_kernels(const struct ins_facts *f)
{
	return f->launch_tid[0] && of_idle(f, f->run_idle_s) >= LAUNCH_ON_CPU;
}

void ins_derive(const struct ins_facts *f, struct ins_derived *d)
{
	double obs = f->busy_s + f->idle_s;
	double si = f->seg_idle_s > 0 ? f->seg_idle_s : 1;
	double span = (double)(f->ev_to_ns - f->ev_from_ns) / 1e9;
	bool lt = f->launch_tid[0];

	memset(d, 0, sizeof(*d));
	d->span_s = span;
	d->busy = obs > 0 ? f->busy_s / obs : 1;
	d->thr = f->span_busy_s > 0 &&
		 f->throttled_busy_s >= THROTTLE_MIN_S * fmin(1, span / 3600) &&
		 f->throttle_loss_s / f->span_busy_s >= THROTTLE_LOSS;
	d->held = obs > 0 && d->busy <= HELD_BUSY_MAX && f->idle_s >= HELD_MIN_S &&
		  f->idle_s >= f->held_s / 2;
	d->checked = !d->held && f->cpu_side && obs > 0 && 1 - d->busy >= MIN_IDLE_SHARE &&
		     f->idle_s >= MIN_IDLE_S && span > 0;
	d->on_cpu = fmin(1, f->run_idle_s / si);
	d->side_on_cpu = fmin(1, (f->run_idle_s + f->helpers_run_idle_s) / si);
	d->fw = f->idle_samples > 0 ? f->fw_samples / f->idle_samples : 0;
	d->user = f->idle_samples > 0 ? 1 - d->fw : 0;
	d->blocked_raw = fmin(1, f->blocked_idle_s / si);
	/* a thread blocked while its side's other threads launch for it waits on them, not on
	 * data (loss.backward() on autograd's device thread) */
	d->blocked = fmin(1, fmax(0, f->blocked_idle_s - f->helpers_run_idle_s) / si);
	d->workers = f->others_run_idle_s / si;
	d->helpers = f->helpers_run_idle_s / si;
	d->node_cpu = f->node_cpu_s / si;
	/* the node's CPUs but the launching side's own: what could be producing its input */
	d->node_others = fmax(0, f->node_cpu_s - f->run_idle_s - f->helpers_run_idle_s) / si;
	d->nocpu = fmin(1, f->no_cpu_idle_s / si);
	d->sync_steps = f->sync_one || f->sync_ticked ? fmax(f->sync_one, f->sync_ticked) :
			f->sync_calls;
	d->sync_rate = span > 0 ? d->sync_steps / span : 0;
	d->drain = f->sync_seen >= SYNC_MIN_SEEN ? f->sync_drained / f->sync_seen : 0;
	/* where whole-idle gaps were seen (kernels inside windows, the driver at 0 %) */
	d->follow = f->gap_idle_s > 0 ? fmin(1, f->sync_follow_idle_s / f->gap_idle_s) : 0;
	d->copy_idle = fmin(1, f->copy_idle_s / si);
	d->mean_us = f->kernels > 0 ? f->kernel_s / f->kernels * 1e6 : 0;
	if (!d->checked)
		return;
	/*
	 * Which explanation of the launching thread's time wins: a sync that drains the GPU every
	 * step exposes whatever the thread does next (launching or Python work), so it goes first;
	 * blocking copies explain a thread busy in the driver; then short kernels; then the
	 * thread's own input work.
	 */
	d->sy = lt && d->drain >= SYNC_DRAIN && d->follow >= SYNC_FOLLOW &&
		d->side_on_cpu >= SYNC_ON_CPU && d->sync_rate >= SYNC_RATE;
	d->cp = lt && f->copy_s >= COPY_MIN_S * span / 3600 && d->copy_idle >= COPY_IDLE;
	d->lb = !d->sy && !d->cp && lt && f->kernels >= LAUNCH_MIN_KERNELS &&
		d->mean_us <= LAUNCH_MEAN_US && d->busy <= LAUNCH_BUSY_MAX &&
		d->on_cpu >= LAUNCH_ON_CPU && d->fw >= 0.5;
	d->in = !d->sy && !d->lb && lt && d->on_cpu >= ON_CPU_INPUT && d->user >= INPUT_SHARE &&
		f->nfns;
	d->st = lt && d->blocked >= STARVED_BLOCKED &&
		(d->workers >= STARVED_WORKERS ||
		 (f->node_cpu_set && d->node_others >= STARVED_NODE_CPU));
	d->ni = !d->st && d->nocpu >= NODE_NO_CPU && f->node_cpu_set &&
		d->node_cpu < NODE_CPU_MAX && f->period_s > 0;
}

int ins_detect(const struct ins_facts *f, struct findings *out)
{
	struct ins_derived d;
	int err = 0;

	ins_derive(f, &d);
	if (d.thr)
		err = throttled(f, out);
	if (err)
		return err;
	if (d.held)
		return held_unused(f, d.busy, out);
	if (!d.checked)
		return 0;
	if (d.sy)
		err = sync_per_step(f, &d, out);
	if (!err && d.cp)
		err = sync_copies(f, d.copy_idle, out);
	if (!err && d.lb)
		err = launch_bound(f, d.on_cpu, d.mean_us, d.busy, out);
	if (!err && d.in)
		err = input_on_launch(f, d.on_cpu, d.user, out);
	if (!err && d.st)
		err = starved(f, d.blocked, d.workers, d.node_others, out);
	if (!err && d.ni)
		err = node_idle(f, d.nocpu, d.node_cpu, out);
	return err;
}

/* ---- facts=1 ------------------------------------------------------------------------------ */

static void jnum(struct buf *b, const char *name, double v)
{
	buf_printf(b, ",\"%s\":", name);
	buf_json_num(b, isfinite(v) ? round(v * 1e4) / 1e4 : 0);
}

static void jstr(struct buf *b, const char *name, const char *v)
{
	buf_printf(b, ",\"%s\":", name);
	buf_json_str(b, v);
}

void ins_facts_json(struct buf *b, const struct ins_facts *f)
{
	static const char *const names[] = { "throttled", "held_unused", "host_sync_per_step",
					     "sync_copies", "launch_bound",
					     "input_on_launch_thread", "starved_dataloader",
					     "node_idle" };
	struct ins_derived d;
	bool fired[ARRAY_SIZE(names)], first = true;

	ins_derive(f, &d);
	fired[0] = d.thr, fired[1] = d.held, fired[2] = d.sy, fired[3] = d.cp;
	fired[4] = d.lb, fired[5] = d.in, fired[6] = d.st, fired[7] = d.ni;
	buf_puts(b, "{\"workload\":");
	buf_json_str(b, f->workload);
	jstr(b, "node", f->node);
	jstr(b, "gpu", f->gpu);
	buf_puts(b, ",\"fired\":[");
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		if (!fired[i])
			continue;
		buf_puts(b, first ? "" : ",");
		buf_json_str(b, names[i]);
		first = false;
	}
	buf_puts(b, "]");
	/* the GPU's time over the range (seconds) */
	jnum(b, "held_s", f->held_s);
	jnum(b, "busy_s", f->busy_s);
	jnum(b, "idle_s", f->idle_s);
	jnum(b, "unknown_s", f->unknown_s);
	jnum(b, "busy", d.busy);
	buf_printf(b, ",\"cpu_side\":%s,\"checked\":%s,\"truncated\":%s",
		   f->cpu_side ? "true" : "false", d.checked ? "true" : "false",
		   f->truncated ? "true" : "false");
	/* the evidence span: seconds, and shares of the GPU's idle time there */
	jnum(b, "span_s", d.span_s);
	jnum(b, "seg_idle_s", f->seg_idle_s);
	jstr(b, "launch_pid", f->launch_pid);
	jstr(b, "launch_tid", f->launch_tid);
	buf_printf(b, ",\"launch_seen\":%s", f->launch_seen ? "true" : "false");
	jnum(b, "launchers", f->launchers);
	jnum(b, "launches", f->launches);
	jnum(b, "on_cpu", d.on_cpu);
	jnum(b, "side_on_cpu", d.side_on_cpu);
	jnum(b, "blocked_raw", d.blocked_raw);
	jnum(b, "blocked", d.blocked);
	jstr(b, "blocked_reason", f->blocked_reason);
	jstr(b, "blocked_in", f->blocked_fn.name);
	jnum(b, "helpers", d.helpers);
	jnum(b, "workers", d.workers);
	jnum(b, "no_cpu", d.nocpu);
	buf_printf(b, ",\"node_cpu_read\":%s", f->node_cpu_set ? "true" : "false");
	jnum(b, "node_cpu", d.node_cpu);
	jnum(b, "node_others", d.node_others);
	jnum(b, "period_s", f->period_s);
	jnum(b, "idle_samples", f->idle_samples);
	jnum(b, "fw_share", d.fw);
	jnum(b, "user_share", d.user);
	jnum(b, "estimated_share", f->est_set ? f->est_share : 0);
	buf_puts(b, ",\"functions\":[");
	for (size_t i = 0; i < f->nfns; i++) {
		buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
		buf_json_str(b, f->fns[i].name);
		jnum(b, "share", f->fns[i].share);
		buf_puts(b, "}");
	}
	buf_puts(b, "]");
	jnum(b, "sync_calls", f->sync_calls);
	jnum(b, "sync_steps", d.sync_steps);
	jnum(b, "sync_rate", d.sync_rate);
	jnum(b, "sync_s", f->sync_s);
	jstr(b, "sync_at", f->sync_fn.name);
	jnum(b, "sync_seen", f->sync_seen);
	jnum(b, "sync_drained", f->sync_drained);
	jnum(b, "drain", d.drain);
	jnum(b, "gap_idle_s", f->gap_idle_s);
	jnum(b, "sync_follow_idle_s", f->sync_follow_idle_s);
	jnum(b, "follow", d.follow);
	jnum(b, "copy_calls", f->copy_calls);
	jnum(b, "copy_s", f->copy_s);
	jnum(b, "copy_idle", d.copy_idle);
	jnum(b, "copy_bytes", f->copy_bytes);
	jnum(b, "kernels", f->kernels);
	jnum(b, "mean_kernel_us", d.mean_us);
	jnum(b, "traced_s", f->traced_s);
	jnum(b, "throttled_busy_s", f->throttled_busy_s);
	jnum(b, "throttle_loss_s", f->throttle_loss_s);
	buf_puts(b, "}");
}
