/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVML/GPM poller as an agent module: points queued from the poller thread, written into
 * the batch on tick, busy/idle spans per GPU for the trace windows' idle trigger.
 */
#include "agent/gpu/nvml_int.h"

/* ---- the agent module ------------------------------------------------------------------- */

/*
 * The poller thread does not touch a->batch: run.c swaps batches under its own lock, and
 * tick() (main loop, that lock held) is where modules write. Points wait in a bounded queue;
 * their label strings are interned (bounded) until the queue has been drained.
 */
#define QCAP	   16384
#define QLAB	   5
#define INTERN_CAP 4096

struct qpoint {
	const char *name;	/* metric name; NULL for a gpu_event */
	uint64_t t_ns;
	double v;
	pid_t pid;		/* per-process point: labelled by the label builder at tick; else 0 */
	uint8_t nl, na;
	struct label l[QLAB];	/* interned; the GPU's (no pid) */
	struct label attrs[2];	/* interned */
};

static struct {
	struct nvml_lib *lib;
	struct nvml_poller *p;
	pthread_mutex_t qmu;
	struct qpoint *q;
	size_t head, len;
	char *interned[INTERN_CAP];
	size_t ninterned;
	uint64_t drops_full, drops_intern, drops_batch, drops_relabel, drops_labels;
} mod = { .qmu = PTHREAD_MUTEX_INITIALIZER };

/* Caller holds qmu. NULL when the table is full or memory is short. */
static const char *intern(const char *s)
{
	uint64_t h = hash64(s, strlen(s), 0);

	for (size_t i = 0; i < INTERN_CAP; i++) {
		size_t k = (size_t)((h + i) % INTERN_CAP);

		if (!mod.interned[k]) {
			mod.interned[k] = strdup(s);
			mod.ninterned += mod.interned[k] != NULL;
			return mod.interned[k];
		}
		if (!strcmp(mod.interned[k], s))
			return mod.interned[k];
	}
	return NULL;
}

static bool intern_labels(struct label *dst, const struct label *src, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		dst[i].name = intern(src[i].name);
		dst[i].value = intern(src[i].value);
		if (!dst[i].name || !dst[i].value)
			return false;
	}
	return true;
}

static void q_push(const char *name, const struct label *l, size_t n, uint64_t t_ns, double v,
		   const struct label *attrs, size_t na)
{
	struct qpoint *qp;

	pthread_mutex_lock(&mod.qmu);
	if (mod.len == QCAP) {
		mod.drops_full++;
		goto out;
	}
	qp = &mod.q[(mod.head + mod.len) % QCAP];
	qp->pid = 0;
	if (n && !strcmp(l[n - 1].name, "pid")) {	/* proc_labels(): the GPU's, then pid */
		qp->pid = (pid_t)atoi(l[n - 1].value);
		n--;
	}
	if (n > QLAB || na > 2) {	/* the poller never makes more: no silent cut */
		mod.drops_labels++;
		goto out;
	}
	qp->name = name ? intern(name) : NULL;
	if ((name && !qp->name) || !intern_labels(qp->l, l, n) ||
	    !intern_labels(qp->attrs, attrs, na)) {
		mod.drops_intern++;
		goto out;
	}
	qp->t_ns = t_ns;
	qp->v = v;
	qp->nl = (uint8_t)n;
	qp->na = (uint8_t)na;
	mod.len++;
out:
	pthread_mutex_unlock(&mod.qmu);
}

static void q_metric(void *ctx, const char *name, const struct label *l, size_t n,
		     uint64_t t_ns, double v)
{
	q_push(name, l, n, t_ns, v, NULL, 0);
}

static void q_event(void *ctx, const struct label *l, size_t n, uint64_t t_ns,
		    const struct label *attrs, size_t nattrs)
{
	q_push(NULL, l, n, t_ns, 0, attrs, nattrs);
}

static void intern_reset(void)
{
	for (size_t i = 0; i < INTERN_CAP; i++) {
		free(mod.interned[i]);
		mod.interned[i] = NULL;
	}
	mod.ninterned = 0;
}

/*
 * GPU busy/idle between trace windows (issue 14): each utilization point speaks for the time
 * since the previous one of its GPU (at most 1 s): 0 says idle, full says busy, anything in
 * between says "partly busy" and decides nothing (the GPU-idle filter calls that unknown).
 * Contiguous spans become gpu_observed / gpu_busy intervals labelled with their source:
 * nvml (gpu_utilization, the driver's sample period) or gpm (gpu_sm_active, the GPM window).
 */
#define SPAN_GPUS	64
#define SPAN_MAX_NS	(10 * NSEC_PER_SEC)	/* emit a long span in pieces */
#define SPAN_GAP_NS	NSEC_PER_SEC		/* a point speaks for at most this long */

#define RECENT		64		/* utilization points kept per GPU for the idle trigger */

struct span_src {
	char gpu[24];			/* "": free */
	uint64_t last_t;		/* previous point */
	uint64_t s[2], e[2];		/* pending [observed, busy] span; e == 0: none */
	struct {
		uint64_t t, dur;
		bool idle;
	} recent[RECENT];		/* ring of the last points (nvml source) */
	unsigned nrecent;
};
static struct span_src spans[2][SPAN_GPUS];	/* [nvml, gpm] */
static const char *const span_names[2] = { "nvml", "gpm" };

static void span_emit(struct agent *a, int src, struct span_src *g, int which)
{
	struct label lab[3] = { { "gpu", g->gpu }, { "source", span_names[src] } };
	size_t n = 2;

	if (!g->e[which])
		return;
	if (a->opts.node)
		lab[n++] = (struct label){ "node", a->opts.node };
	if (a->batch && batch__interval(a->batch, which ? "gpu_busy" : "gpu_observed", lab, n,
					g->s[which], g->e[which], -1, NULL, 0))
		mod.drops_batch++;
	g->e[which] = 0;
}

static void span_add(struct agent *a, int src, struct span_src *g, int which, uint64_t s,
		     uint64_t e)
{
	if (g->e[which] && (s > g->e[which] + NSEC_PER_MSEC || e - g->s[which] > SPAN_MAX_NS))
		span_emit(a, src, g, which);
	if (!g->e[which])
		g->s[which] = s;
	g->e[which] = e;
}

static void span_point(struct agent *a, const struct qpoint *qp)
{
	int src = !strcmp(qp->name, "gpu_utilization") ? 0 :
		  !strcmp(qp->name, "gpu_sm_active") ? 1 : -1;
	const char *gpu = NULL;
	struct span_src *g = NULL;
	double full = src == 0 ? 100 : 1;

	if (src < 0)
		return;
	for (size_t i = 0; i < qp->nl && !gpu; i++)
		if (!strcmp(qp->l[i].name, "gpu"))
			gpu = qp->l[i].value;
	if (!gpu || strlen(gpu) >= sizeof(g->gpu))
		return;
	for (int i = 0; i < SPAN_GPUS && !g; i++)
		if (!strcmp(spans[src][i].gpu, gpu))
			g = &spans[src][i];
	for (int i = 0; i < SPAN_GPUS && !g; i++)
		if (!spans[src][i].gpu[0]) {
			g = &spans[src][i];
			strcpy(g->gpu, gpu);
		}
	if (!g)
		return;
	if (g->last_t && qp->t_ns > g->last_t) {
		uint64_t s = qp->t_ns - g->last_t > SPAN_GAP_NS ? qp->t_ns - SPAN_GAP_NS : g->last_t;
		unsigned k = g->nrecent++ % RECENT;

		g->recent[k].t = qp->t_ns;
		g->recent[k].dur = qp->t_ns - s;
		g->recent[k].idle = qp->v <= 0;

		if (qp->v <= 0 || qp->v >= full) {
			span_add(a, src, g, 0, s, qp->t_ns);
			if (qp->v >= full)
				span_add(a, src, g, 1, s, qp->t_ns);
		} else {	/* partly busy: ends what was known */
			span_emit(a, src, g, 0);
			span_emit(a, src, g, 1);
		}
	}
	if (qp->t_ns > g->last_t)
		g->last_t = qp->t_ns;
}

/*
 * The largest idle share of any GPU over the last span_ns (by its utilization points), or -1
 * when no GPU has points covering at least half of it. The cupti module's idle trigger reads
 * it (main-loop thread, like nvml_tick).
 */
static double idle_share(uint64_t span_ns)
{
	uint64_t now = wall_ns();
	double best = -1;

	for (int i = 0; i < SPAN_GPUS; i++) {
		const struct span_src *g = &spans[0][i];
		uint64_t tot = 0, idle = 0;

		if (!g->gpu[0])
			continue;
		for (unsigned k = 0; k < RECENT && k < g->nrecent; k++)
			if (g->recent[k].t + span_ns >= now) {
				tot += g->recent[k].dur;
				idle += g->recent[k].idle ? g->recent[k].dur : 0;
			}
		if (tot >= span_ns / 2 && (double)idle / tot > best)
			best = (double)idle / tot;
	}
	return best;
}

static void spans_flush(struct agent *a)
{
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < SPAN_GPUS; i++) {
			span_emit(a, k, &spans[k][i], 0);
			span_emit(a, k, &spans[k][i], 1);
		}
}

/* Main loop, run.c's lock held: moves the queued points into a->batch. */
static int nvml_tick(struct agent *a)
{
	pthread_mutex_lock(&mod.qmu);
	while (mod.len) {
		const struct qpoint *qp = &mod.q[mod.head];
		const struct label *l = qp->l;
		size_t nl = qp->nl;
		struct agent_labels L;
		int err = -EINVAL;

		if (qp->pid) {
			/* the process's labels (comm, container, pod, relabeling), then the GPU's */
			if (agent__pid_labels(a, qp->pid, 0, NULL, &L) == LABELS_DROPPED) {
				mod.drops_relabel++;
				goto next;
			}
			for (size_t i = 0; i < qp->nl; i++)
				agent_labels__add(&L, qp->l[i].name, qp->l[i].value);
			l = L.l;
			nl = L.n;
		}
		if (a->batch && qp->name) {
			err = batch__metric(a->batch, qp->name, l, nl, qp->t_ns, qp->v);
			if (!err)
				span_point(a, qp);
		}
		else if (a->batch)
			err = batch__interval(a->batch, "gpu_event", l, nl, qp->t_ns, qp->t_ns, -1,
					      qp->attrs, qp->na);
		if (err == -ENOSPC)
			break;	/* the batch is full: keep the rest for the next one */
		if (err)
			mod.drops_batch++;
next:
		mod.head = (mod.head + 1) % QCAP;
		mod.len--;
	}
	/* Nothing refers to the interned strings now: start over before pids fill the table. */
	if (!mod.len && mod.ninterned > INTERN_CAP / 2)
		intern_reset();
	pthread_mutex_unlock(&mod.qmu);
	return 0;
}

/* NVML's index of the GPU or MIG instance with this UUID (hex without its GPU-/MIG- prefix). */
static int gpu_index(const char *uuid)
{
	const struct nvml_poller *p = mod.p;

	for (int i = 0; p && i < p->ngpus; i++) {
		const char *u = p->gpus[i].uuid;

		if (!strncmp(u, "GPU-", 4) || !strncmp(u, "MIG-", 4))
			u += 4;
		if (!strcasecmp(u, uuid))
			return atoi(p->gpus[i].idx);
	}
	return -1;
}

static int nvml_start(struct agent *a)
{
	struct nvml_sink sink = { .ctx = a, .metric = q_metric, .event = q_event };
	struct nvml_cfg cfg;
	const char *why = NULL;
	int err;

	if (a->opts.no_gpu) {
		log_info("nvml: --no-gpu: running CPU-only");
		return -ENOTSUP;
	}
	err = nvml_lib__open(a->opts.nvml_library, &mod.lib, &why);
	if (err) {
		log_info("nvml: running CPU-only: %s", why ? why : strerror(-err));
		return err;
	}
	mod.q = calloc(QCAP, sizeof(*mod.q));
	if (!mod.q) {
		err = -ENOMEM;
		goto out_close;
	}
	nvml_cfg_from_opts(&cfg, &a->opts);
	mod.p = nvml_poller__new(&mod.lib->f, mod.lib->missing, &cfg, a->mono_to_wall_ns, &sink,
				 &why);
	if (!mod.p) {
		err = -errno;
		log_info("nvml: running CPU-only: %s", why ? why : strerror(-err));
		goto out_close;
	}
	if (mod.lib->nmissing)
		log_info("nvml: functions missing from this driver, their metrics are skipped: %s",
			 mod.lib->missing);
	err = nvml_poller__start(mod.p);
	if (err)
		goto out_free;
	a->shared.gpu_idle_share = idle_share;	/* the trace windows' idle trigger */
	a->shared.gpu_index = gpu_index;	/* kernels on NVML's GPU numbers */
	log_info("nvml: polling %d device(s)", nvml_poller__ngpus(mod.p));
	return 0;
out_free:
	nvml_poller__free(mod.p);
	mod.p = NULL;
out_close:
	free(mod.q);
	mod.q = NULL;
	nvml_lib__close(mod.lib);
	mod.lib = NULL;
	return err;
}

static void nvml_stop(struct agent *a)
{
	nvml_poller__free(mod.p);	/* joins the poller: nothing pushes after this */
	mod.p = NULL;
	nvml_tick(a);
	a->shared.gpu_idle_share = NULL;
	a->shared.gpu_index = NULL;
	spans_flush(a);
	memset(spans, 0, sizeof(spans));
	free(mod.q);
	mod.q = NULL;
	mod.head = mod.len = 0;
	intern_reset();
	nvml_lib__close(mod.lib);
	mod.lib = NULL;
}

static void nvml_metrics(struct agent *a, FILE *out)
{
	if (!mod.p)
		return;
	nvml_poller__metrics(mod.p, out);
	pthread_mutex_lock(&mod.qmu);
	prom_family(out, "gpuscope_agent_nvml_points_dropped_total", "counter",
		    "NVML points lost before the batch");
	prom_sample1_u64(out, "gpuscope_agent_nvml_points_dropped_total", "reason", "queue_full",
			 mod.drops_full);
	prom_sample1_u64(out, "gpuscope_agent_nvml_points_dropped_total", "reason", "label_table_full",
			 mod.drops_intern);
	prom_sample1_u64(out, "gpuscope_agent_nvml_points_dropped_total", "reason", "batch_refused",
			 mod.drops_batch);
	prom_sample1_u64(out, "gpuscope_agent_nvml_points_dropped_total", "reason",
			 "too_many_labels", mod.drops_labels);
	prom_sample1_u64(out, "gpuscope_agent_nvml_points_dropped_total", "reason", "relabel_drop",
			 mod.drops_relabel);
	pthread_mutex_unlock(&mod.qmu);
}

const struct agent_module nvml_module = {
	.name = "nvml",
	.start = nvml_start,
	.tick = nvml_tick,
	.stop = nvml_stop,
	.metrics = nvml_metrics,
};
