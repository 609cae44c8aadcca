/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The findings engine's reads: for one workload's GPU, what its threads did while that GPU was
 * idle (thread states, CUDA API calls, copies, the GPU-idle CPU samples with the estimator's
 * coverage, blocked stacks), its kernels inside trace windows and the GPU's NVML throttle
 * reasons. Everything comes through the store interface and the efficiency computation; the
 * arithmetic on it is the detectors' input (struct ins_facts).
 */
#include "server/insights/ins_int.h"

#define SYNC_MAX_BYTES	65536		/* a smaller device-to-host copy is a sync (.item()) */
#define FOLLOW_BEFORE_NS (1 * NSEC_PER_MSEC)	/* a sync returns this close to a gap's start... */
#define FOLLOW_AFTER_NS	(20 * NSEC_PER_MSEC)	/* ...to have caused it */
#define DRAIN_BEFORE_NS	(1 * NSEC_PER_MSEC)	/* the GPU went idle this close before a sync began */
#define DRAIN_AFTER_NS	(1 * NSEC_PER_MSEC)	/* ...or its idle gap starts this soon after it ended */
#define LAUNCH_SIDE	0.10		/* a thread with this share of the top launcher's launches */
#define THROTTLE_BAD	0xe8u		/* HW slowdown, SW/HW thermal, HW power brake */
#define REASONS		7

static const char *const reasons[REASONS] = { "futex", "lock", "io", "poll", "other", "sleep",
					      "cuda_sync" };

static const char *pair_get(const char *const *p, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(p[2 * i], name))
			return p[2 * i + 1];
	return "";
}

/* sel ("{a=\"b\"}") with name="val" added, into out. */
static void sel_add(const char *sel, const char *name, const char *val, char *out, size_t n)
{
	size_t len = strlen(sel), o;

	while (len && sel[len - 1] != '}')
		len--;
	if (!len) {
		snprintf(out, n, "{%s=\"%s\"}", name, val);
		return;
	}
	o = (size_t)snprintf(out, n, "%.*s", (int)(len - 1), sel);
	if (o >= n)
		return;
	snprintf(out + o, n - o, "%s%s=\"", len > 2 ? "," : "", name);
	o += strlen(out + o);
	for (const char *p = val; *p && o + 3 < n; p++) {
		if (*p == '"' || *p == '\\')
			out[o++] = '\\';
		out[o++] = *p;
	}
	if (o + 3 <= n)
		snprintf(out + o, n - o, "\"}");
}

/* Idle-weighted overlap of [s, e) with the sorted pieces. */
static double overlap(const struct eff_idle_seg *v, size_t n, uint64_t s, uint64_t e)
{
	size_t lo = 0, hi = n;
	double sum = 0;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (v[mid].e <= s)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < n && v[i].s < e; i++) {
		uint64_t a = v[i].s > s ? v[i].s : s, b = v[i].e < e ? v[i].e : e;

		if (a < b)
			sum += (double)(b - a) * v[i].idle;
	}
	return sum;
}

static int cmp_seg(const void *a, const void *b)
{
	const struct eff_idle_seg *x = a, *y = b;

	return x->s < y->s ? -1 : x->s > y->s;
}

/* ---- thread states and CUDA API calls ----------------------------------------------------- */

struct thr {
	char pid[24], tid[24];
	double launches;
	double waits;			/* host syncs and copies (calls) */
	bool fw_side;			/* a framework's own launching thread, by its name */
	double run_idle, blocked_idle[REASONS];
};

enum call_cls { CALL_LAUNCH, CALL_SYNC, CALL_COPY };

struct call {
	uint32_t thr;
	uint8_t cls;
	char dir;			/* copies: 'H' HtoD, 'D' DtoH, '?' */
	uint64_t s, e, stack;
	double calls, total_ns;
};

struct copy_rec {
	char pid[24];
	uint64_t s, e;
	double bytes;
	char dir;
};

/* A thread state as read: its thread, its running (or runnable) share and blocked reason. */
struct st_rec {
	uint64_t s, e;
	uint32_t thr;
	uint8_t reason;			/* index into reasons[] */
	float run_frac;			/* the rest is blocked */
};

/*
 * What a workload's threads did on one node over the evidence span, read once and weighed
 * against each of its GPUs' idle pieces there (struct ins_cache, opaque to the engine).
 */
struct ins_cache {
	const void *wl;			/* the workload and node it holds; NULL: empty */
	char node[256];
	int load_err;
	bool truncated;			/* a read stopped at INS_INTERVALS_MAX */
	struct thr *t;
	size_t nt, capt;
	struct st_rec *st;
	size_t nst, capst;
	struct eff_idle_seg *active;	/* running/runnable of any thread of the workload, union */
	size_t nact, capact;
	struct call *c;
	size_t nc, capc, ncopies;
	struct copy_rec *m;
	size_t nm, capm;
	/* per GPU */
	struct ins_facts *f;
	const struct eff_idle_seg *seg;
	size_t nseg;
};

struct ins_cache *ins_cache_new(void)
{
	return calloc(1, sizeof(struct ins_cache));
}

static void cache_reset(struct ins_cache *c)
{
	c->wl = NULL;
	c->load_err = 0;
	c->nt = c->nst = c->nact = c->nc = c->ncopies = c->nm = 0;
}

void ins_cache_free(struct ins_cache *c)
{
	if (!c)
		return;
	free(c->t);
	free(c->st);
	free(c->active);
	free(c->c);
	free(c->m);
	free(c);
}

static struct thr *thr_get(struct ins_cache *g, const char *pid, const char *tid)
{
	for (size_t i = 0; i < g->nt; i++)
		if (!strcmp(g->t[i].tid, tid) && !strcmp(g->t[i].pid, pid))
			return &g->t[i];
	if (array_reserve(&g->t, &g->capt, g->nt + 1, sizeof(*g->t), 64))
		return NULL;
	memset(&g->t[g->nt], 0, sizeof(*g->t));
	snprintf(g->t[g->nt].pid, sizeof(g->t[g->nt].pid), "%s", pid);
	snprintf(g->t[g->nt].tid, sizeof(g->t[g->nt].tid), "%s", tid);
	return &g->t[g->nt++];
}

static int active_add(struct ins_cache *g, uint64_t s, uint64_t e)
{
	if (array_reserve(&g->active, &g->capact, g->nact + 1, sizeof(*g->active), 1024))
		return -ENOMEM;
	g->active[g->nact++] = (struct eff_idle_seg){ s, e, 1 };
	return 0;
}

/*
 * Threads a framework starts to launch work for the thread that called it, known by the name
 * the framework gives them: PyTorch's autograd device threads ("pt_autograd_0", one per
 * device) run the backward pass while the Python thread blocks in loss.backward(). Their own
 * launches say the same inside trace windows; between windows (the default agent probes no
 * cuLaunch* call) the name is all there is, and without it such a thread would count as an
 * input worker running while the launching thread waits.
 */
static bool framework_launcher(const char *thread)
{
	return !strncmp(thread, "pt_autograd_", 12);
}

static int state_in(void *ctx, const char *kind, const char *const *labels, size_t n,
		    uint64_t start, uint64_t end, const char *const *attrs, size_t na)
{
	struct ins_cache *g = ctx;
	const char *state = pair_get(attrs, na, "state"), *reason = pair_get(attrs, na, "reason");
	struct thr *t = thr_get(g, pair_get(labels, n, "pid"), pair_get(labels, n, "tid"));
	double run_frac = 0;
	size_t r;

	(void)kind;
	if (!t)
		return -ENOMEM;
	t->fw_side |= framework_launcher(pair_get(labels, n, "thread"));
	if (!strcmp(pair_get(attrs, na, "summary"), "1")) {
		double len = (double)(end - start);

		run_frac = (strtod(pair_get(attrs, na, "running_ns"), NULL) +
			    strtod(pair_get(attrs, na, "runnable_ns"), NULL)) / (len > 0 ? len : 1);
		run_frac = run_frac > 1 ? 1 : run_frac;
		reason = "other";
	} else if (!strcmp(state, "blocked")) {
		run_frac = 0;
	} else {
		run_frac = 1;
	}
	if (run_frac > 0 && active_add(g, start, end))
		return -ENOMEM;
	for (r = 0; r < REASONS - 1 && strcmp(reasons[r], reason); r++)
		;
	if (r == REASONS - 1 && strcmp(reasons[r], reason))
		r = 4;	/* other */
	if (array_reserve(&g->st, &g->capst, g->nst + 1, sizeof(*g->st), 1024))
		return -ENOMEM;
	g->st[g->nst++] = (struct st_rec){ start, end, (uint32_t)(t - g->t), (uint8_t)r,
					   (float)run_frac };
	return 0;
}

/* Each thread's running and blocked time during the current GPU's idle pieces. */
static void weigh_states(struct ins_cache *g)
{
	for (size_t i = 0; i < g->nt; i++) {
		g->t[i].run_idle = 0;
		memset(g->t[i].blocked_idle, 0, sizeof(g->t[i].blocked_idle));
	}
	for (size_t i = 0; i < g->nst; i++) {
		const struct st_rec *r = &g->st[i];
		double w = overlap(g->seg, g->nseg, r->s, r->e);

		if (w <= 0)
			continue;
		g->t[r->thr].run_idle += w * r->run_frac;
		g->t[r->thr].blocked_idle[r->reason] += w * (1 - r->run_frac);
	}
}

static int api_in(void *ctx, const char *kind, const char *const *labels, size_t n,
		  uint64_t start, uint64_t end, const char *const *attrs, size_t na)
{
	struct ins_cache *g = ctx;
	const char *api = pair_get(attrs, na, "api"), *calls = pair_get(attrs, na, "calls");
	const char *tot = pair_get(attrs, na, "total_ns");
	struct thr *t;
	struct call c = { 0 };

	(void)kind;
	if (!strncmp(api, "cuLaunch", 8))
		c.cls = CALL_LAUNCH;
	else if (strstr(api, "Synchronize"))
		c.cls = CALL_SYNC;
	else if (!strncmp(api, "cuMemcpy", 8))
		c.cls = CALL_COPY;
	else
		return 0;
	t = thr_get(g, pair_get(labels, n, "pid"), pair_get(labels, n, "tid"));
	if (!t || array_reserve(&g->c, &g->capc, g->nc + 1, sizeof(*g->c), 1024))
		return -ENOMEM;
	c.thr = (uint32_t)(t - g->t);
	c.dir = strstr(api, "HtoD") ? 'H' : strstr(api, "DtoH") ? 'D' : '?';
	c.s = start;
	c.e = end;
	c.stack = strtoull(pair_get(attrs, na, "stack_id"), NULL, 10);
	c.calls = *calls ? strtod(calls, NULL) : 1;
	c.total_ns = *tot ? strtod(tot, NULL) : (double)(end - start);
	if (c.cls == CALL_LAUNCH)
		t->launches += c.calls;
	else
		t->waits += c.calls;
	g->ncopies += c.cls == CALL_COPY;
	g->c[g->nc++] = c;
	return 0;
}

static int copy_in(void *ctx, const char *kind, const char *const *labels, size_t n,
		   uint64_t start, uint64_t end, const char *const *attrs, size_t na)
{
	struct ins_cache *g = ctx;
	const char *k = pair_get(attrs, na, "kind");
	struct copy_rec *m;

	(void)kind;
	if (array_reserve(&g->m, &g->capm, g->nm + 1, sizeof(*g->m), 1024))
		return -ENOMEM;
	m = &g->m[g->nm++];
	snprintf(m->pid, sizeof(m->pid), "%s", pair_get(labels, n, "pid"));
	m->s = start;
	m->e = end;
	m->bytes = strtod(pair_get(attrs, na, "bytes"), NULL);
	m->dir = !strcmp(k, "HtoD") ? 'H' : !strcmp(k, "DtoH") ? 'D' : '?';
	return 0;
}

/* ---- samples while idle ------------------------------------------------------------------- */

static int idle_samples(struct insights *in, struct ins_facts *f, int gpu)
{
	struct store *st = in->st;
	struct selector *sel = NULL;
	struct u64map agg = { 0 };
	struct idle_tally it = { 0 };
	struct fn_rank r = { 0 };
	char err_s[256];
	int err = 0;

	sel = selector_parse(f->sel_thread, err_s, sizeof(err_s));
	if (!sel)
		return -ENAMETOOLONG;
	/* each read only where a detector could use it (they decode the node's sample chunks) */
	if (ins_needs_samples(f)) {
		struct store_query q = { f->ev_from_ns, f->ev_to_ns, sel, SAMPLE_CPU, gpu, &it };

		err = st->ops->aggregate(st, &q, &agg);
		r.classify = true;
		if (!err)
			err = ins_rank(st, &agg, NULL, &r, f->fns, INS_FNS, &f->nfns);
	}
	if (!err) {
		f->idle_samples = r.total;
		f->fw_samples = r.fw;
		for (size_t i = 0; i < f->nfns; i++)
			f->fns[i].share = r.total > 0 ? f->fns[i].value / r.total : 0;
		if (it.set) {
			double all = it.exact_value + it.estimated_value;

			f->est_set = true;
			f->est_share = all > 0 ? it.estimated_value / all : 0;
			query_idle_summary(&it, gpu, f->est_summary, sizeof(f->est_summary));
		}
	}
	ins_rank_done(&r);
	u64map_done(&agg);
	memset(&r, 0, sizeof(r));
	/* where it blocked while the GPU was idle */
	if (!err && ins_needs_blocked(f)) {
		struct store_query q = { f->ev_from_ns, f->ev_to_ns, sel, SAMPLE_OFFCPU_NS, gpu };

		err = st->ops->aggregate(st, &q, &agg);
		if (!err && agg.len)
			err = ins_rank(st, &agg, NULL, &r, &f->blocked_fn, 1, NULL);
	}
	ins_rank_done(&r);
	u64map_done(&agg);
	selector_free(sel);
	return err;
}

/* The CPU time of every process of the node while the GPU was idle. */
static int node_cpu(struct insights *in, struct ins_facts *f, int gpu)
{
	struct store *st = in->st;
	struct u64map agg = { 0 };
	struct selector *sel;
	char ns[300], err_s[256];
	int err;

	sel_add("{}", "node", f->node, ns, sizeof(ns));
	sel = selector_parse(ns, err_s, sizeof(err_s));
	if (!sel)
		return -ENAMETOOLONG;
	{
		struct store_query q = { f->ev_from_ns, f->ev_to_ns, sel, SAMPLE_CPU, gpu };

		err = st->ops->aggregate(st, &q, &agg);
	}
	for (size_t i = 0; !err && i < agg.cap; i++)
		if (agg.keys[i])
			f->node_cpu_s += (double)agg.vals[i];
	if (!err && agg.has_zero)
		f->node_cpu_s += (double)agg.zero_val;
	f->node_cpu_s *= f->period_s;
	f->node_cpu_set = !err;
	u64map_done(&agg);
	selector_free(sel);
	return err;
}

/* ---- syncs and copies of the launching thread ---------------------------------------------- */

static int cmp_u64p(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Bytes and direction of the copies of pid that started during [s, e) (m sorted by start). */
static double copies_in(const struct ins_cache *g, const char *pid, uint64_t s, uint64_t e, char *dir,
			double *gpu_ns, bool *found)
{
	size_t lo = 0, hi = g->nm;
	double bytes = 0;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (g->m[mid].s < s)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < g->nm && g->m[i].s < e; i++) {
		if (strcmp(g->m[i].pid, pid))
			continue;
		bytes += g->m[i].bytes;
		*gpu_ns += (double)(g->m[i].e - g->m[i].s);
		*dir = g->m[i].dir;
		*found = true;
	}
	return bytes;
}

/* A whole-idle gap of the GPU (idle pieces >= 99 % merged) and whether it begins as the GPU
 * goes idle (busy, or not the workload's, right before it: not a piece of another source). */
struct gap {
	uint64_t s, e;
	bool from_busy;
};

/* The whole-idle gaps of the current GPU's pieces, in order. *ret malloc'ed; 0 or -ENOMEM. */
static int whole_gaps(const struct ins_cache *g, uint64_t span_from, struct gap **ret,
		      size_t *ret_n)
{
	struct gap *v = malloc((g->nseg + 1) * sizeof(*v));
	size_t n = 0;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < g->nseg;) {
		uint64_t s = g->seg[i].s, e = g->seg[i].e;
		bool from_busy = i ? g->seg[i - 1].e < s : s > span_from;

		if (g->seg[i].idle < 0.99) {
			i++;
			continue;
		}
		while (++i < g->nseg && g->seg[i].s <= e && g->seg[i].idle >= 0.99)
			e = g->seg[i].e > e ? g->seg[i].e : e;
		v[n++] = (struct gap){ s, e, from_busy };
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

/*
 * Whether the sync [s, e) was seen where a source decided whole idle (its return inside a
 * whole-idle gap, or one starting right after it), and whether it drained the GPU: the gap began
 * as the GPU went idle, during the call or just before it (a sync called on a GPU idle for long
 * waited on nothing: the idle came before it).
 */
static void drain_test(const struct gap *v, size_t n, uint64_t s, uint64_t e, bool *seen,
		       bool *drained)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (v[mid].e <= e)
			lo = mid + 1;
		else
			hi = mid;
	}
	*seen = lo < n && v[lo].s <= e + DRAIN_AFTER_NS;
	*drained = *seen && v[lo].from_busy && v[lo].s + DRAIN_BEFORE_NS >= s;
}

static int calls_of_launcher(struct insights *in, struct ins_cache *g, uint32_t L)
{
	struct ins_facts *f = g->f;
	struct u64map sync_by = { 0 }, copy_by = { 0 }, learned = { 0 };
	uint64_t *ends = NULL;
	size_t nends = 0, ngaps = 0;
	struct gap *gaps = NULL;
	struct fn_rank r = { 0 };
	int err = 0;

	ends = malloc((g->nc + 1) * sizeof(*ends));
	if (!ends)
		return -ENOMEM;
	err = whole_gaps(g, f->ev_from_ns, &gaps, &ngaps);
	if (err) {
		free(ends);
		return err;
	}
	/* learn from traced copies which stacks copy little device-to-host (syncs) */
	for (int pass = 0; pass < 2 && !err; pass++) {
		for (size_t i = 0; i < g->nc && !err; i++) {
			struct call *c = &g->c[i];
			bool sync = c->cls == CALL_SYNC, found = false;
			double gpu_ns = 0, bytes = 0;
			char dir = c->dir;
			uint64_t *cls, *slot;
			int ins;

			if (c->thr != L || c->cls == CALL_LAUNCH)
				continue;
			if (c->cls == CALL_COPY) {
				bytes = copies_in(g, g->t[L].pid, c->s, c->e, &dir, &gpu_ns, &found);
				if (pass == 0) {
					if (found && c->stack) {
						slot = u64map_upsert(&learned, c->stack,
								     dir == 'D' && bytes < SYNC_MAX_BYTES ?
								     1 : 2, &ins);
						if (!slot)
							err = -ENOMEM;
					}
					continue;
				}
				cls = c->stack ? u64map_find(&learned, c->stack) : NULL;
				if (found)
					sync = dir == 'D' && bytes < SYNC_MAX_BYTES;
				else if (cls)
					sync = *cls == 1;
				else if (dir == '?')
					continue;
				else
					sync = dir == 'D';
			} else if (pass == 0) {
				continue;
			}
			if (sync) {
				bool seen = false, drained = false;

				f->sync_calls += c->calls;
				if (c->calls <= 1)
					f->sync_one += c->calls;
				else
					f->sync_ticked += c->calls;
				f->sync_s += c->total_ns / 1e9;
				/* one call with its own times (not counted per tick) */
				if (c->calls <= 1)
					drain_test(gaps, ngaps, c->s, c->e, &seen, &drained);
				f->sync_seen += seen;
				f->sync_drained += drained;
				if (drained)
					ends[nends++] = c->e;
			} else {
				f->copy_calls += c->calls;
				f->copy_s += c->total_ns / 1e9;
				f->copy_bytes += bytes;
				f->copy_gpu_s += gpu_ns / 1e9;
				/* a call counted per tick spans its first to last: weigh by its share */
				f->copy_idle_s += overlap(g->seg, g->nseg, c->s, c->e) / 1e9 *
						  (c->e > c->s ? c->total_ns / (double)(c->e - c->s) : 1);
			}
			if (c->stack) {
				struct u64map *m = sync ? &sync_by : &copy_by;
				double v = 0;

				slot = u64map_upsert(m, c->stack, 0, &ins);
				if (!slot) {
					err = -ENOMEM;
					break;
				}
				memcpy(&v, slot, sizeof(v));
				v += c->total_ns;
				memcpy(slot, &v, sizeof(v));
			}
		}
	}
	if (f->copy_idle_s > f->copy_s)
		f->copy_idle_s = f->copy_s;
	/* idle gaps that began right before a draining sync returned: the step it ended */
	qsort(ends, nends, sizeof(*ends), cmp_u64p);
	for (size_t i = 0; i < ngaps && !err; i++) {
		uint64_t s = gaps[i].s, e = gaps[i].e;
		size_t lo = 0, hi = nends;

		f->gap_idle_s += (double)(e - s) / 1e9;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;

			if (ends[mid] + FOLLOW_BEFORE_NS < s)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo < nends && ends[lo] <= s + FOLLOW_AFTER_NS)
			f->sync_follow_idle_s += (double)(e - s) / 1e9;
	}
	if (!err && sync_by.len)
		err = ins_rank(in->st, NULL, &sync_by, &r, &f->sync_fn, 1, NULL);
	ins_rank_done(&r);
	memset(&r, 0, sizeof(r));
	if (!err && copy_by.len)
		err = ins_rank(in->st, NULL, &copy_by, &r, &f->copy_fn, 1, NULL);
	ins_rank_done(&r);
	u64map_done(&sync_by);
	u64map_done(&copy_by);
	u64map_done(&learned);
	free(gaps);
	free(ends);
	return err;
}

/* ---- kernels and throttling --------------------------------------------------------------- */

struct ksum {
	double n, ns;
};

static int kernel_in(void *ctx, const char *kind, const char *const *labels, size_t n,
		     uint64_t start, uint64_t end, const char *const *attrs, size_t na)
{
	struct ksum *k = ctx;

	(void)kind, (void)labels, (void)n, (void)attrs, (void)na;
	k->n++;
	k->ns += (double)(end - start);
	return 0;
}

struct thr_ctx {
	int which;			/* 0 throttle reasons, 1 utilization, 2 SM clock */
	struct pt3 { uint64_t t; double v; } *p[3];
	size_t n[3], cap[3];
};

static int thr_series(void *ctx, uint64_t id, const char *const *pairs, size_t n)
{
	(void)ctx, (void)id, (void)pairs, (void)n;
	return 0;
}

static int thr_point(void *ctx, uint64_t id, uint64_t t, double v)
{
	struct thr_ctx *c = ctx;
	int w = c->which;

	(void)id;
	if (array_reserve(&c->p[w], &c->cap[w], c->n[w] + 1, sizeof(*c->p[w]), 1024))
		return -ENOMEM;
	c->p[w][c->n[w]++] = (struct pt3){ t, v };
	return 0;
}

/* The value of series w in force at t (its last point at or before t, within 1 s); NAN. */
static double at(const struct thr_ctx *c, int w, uint64_t t)
{
	size_t lo = 0, hi = c->n[w];

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (c->p[w][mid].t <= t)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || t - c->p[w][lo - 1].t > NSEC_PER_SEC)
		return NAN;
	return c->p[w][lo - 1].v;
}

static int throttling(struct insights *in, struct ins_facts *f)
{
	static const char *const names[3] = { "gpu_throttle_reasons", "gpu_utilization",
					      "gpu_sm_clock_mhz" };
	struct thr_ctx c = { 0 };
	struct selector *sel;
	char s[400], s2[460], err_s[256];
	double maxclk = 0;
	int err = 0;

	sel_add("{}", "node", f->node, s, sizeof(s));
	sel_add(s, "gpu", f->gpu, s2, sizeof(s2));
	sel = selector_parse(s2, err_s, sizeof(err_s));
	if (!sel)
		return -ENAMETOOLONG;
	for (int w = 0; w < 3 && !err; w++) {
		c.which = w;
		err = in->st->ops->series(in->st, names[w], f->ev_from_ns, f->ev_to_ns, sel,
					  thr_series, thr_point, &c);
	}
	for (size_t i = 0; i < c.n[2]; i++)
		maxclk = c.p[2][i].v > maxclk ? c.p[2][i].v : maxclk;
	for (size_t i = 1; i < c.n[1]; i++)
		if (c.p[1][i].t - c.p[1][i - 1].t <= NSEC_PER_SEC)
			f->span_busy_s += (double)(c.p[1][i].t - c.p[1][i - 1].t) / 1e9 *
					  c.p[1][i].v / 100;
	for (size_t i = 0; !err && i < c.n[0]; i++) {
		unsigned mask = (unsigned)c.p[0][i].v;
		uint64_t t = c.p[0][i].t, prev = i ? c.p[0][i - 1].t : t;
		double d = i && t - prev <= NSEC_PER_SEC ? (double)(t - prev) / 1e9 : 0;
		double util = at(&c, 1, t), clk = at(&c, 2, t);

		if (!(mask & THROTTLE_BAD) || d <= 0 || isnan(util) || util < 50)
			continue;
		f->throttle_mask |= mask & THROTTLE_BAD;
		f->throttled_busy_s += d * util / 100;
		if (!isnan(clk) && maxclk > 0)
			f->throttle_loss_s += d * util / 100 * (1 - clk / maxclk);
	}
	for (int w = 0; w < 3; w++)
		free(c.p[w]);
	selector_free(sel);
	return err;
}

/* {node="n",pid=~"p1|p2"}: the workload's processes holding GPUs on gp's node. */
static void pids_selector(const struct eff_workload *w, const struct eff_wl_gpu *gp, char *out,
			  size_t n)
{
	size_t o = (size_t)snprintf(out, n, "{node=\"%s\",pid=~\"", gp->node);
	bool first = true;

	for (size_t h = 0; h < w->nholders && o + 24 < n; h++) {
		if (strcmp(w->holders[h].node, gp->node) ||
		    strspn(w->holders[h].pid, "0123456789") != strlen(w->holders[h].pid))
			continue;
		o += (size_t)snprintf(out + o, n - o, "%s%s", first ? "" : "|", w->holders[h].pid);
		first = false;
	}
	if (o + 3 <= n)
		snprintf(out + o, n - o, "\"}");
}

/* ---- one workload's GPU ------------------------------------------------------------------- */

/* Reads what the workload's threads did on gp's node over the span into g (once per workload
 * and node). 0 or -errno. */
static int load(struct insights *in, struct ins_cache *g, const struct eff_workload *w,
		const struct eff_wl_gpu *gp, const struct ins_facts *f)
{
	struct store *st = in->st;
	struct selector *sel;
	char err_s[256];
	bool trunc = false;
	int err;

	cache_reset(g);
	g->wl = w;
	snprintf(g->node, sizeof(g->node), "%s", gp->node);
	sel = selector_parse(f->sel_node, err_s, sizeof(err_s));
	if (!sel)
		return -ENAMETOOLONG;
	err = st->ops->intervals(st, "thread_state", f->ev_from_ns, f->ev_to_ns, sel,
				 INS_INTERVALS_MAX, state_in, g, &trunc);
	g->truncated = trunc;
	if (!err)
		err = st->ops->intervals(st, "cuda_api", f->ev_from_ns, f->ev_to_ns, sel,
					 INS_INTERVALS_MAX, api_in, g, &trunc);
	g->truncated |= trunc;
	selector_free(sel);
	if (err)
		return err;
	/* the GPU side (kernels, copies) carries the process's pid, not its workload labels */
	sel = selector_parse(f->sel_procs, err_s, sizeof(err_s));
	if (!sel)
		return -ENAMETOOLONG;
	if (g->ncopies) {
		err = st->ops->intervals(st, "memcpy", f->ev_from_ns, f->ev_to_ns, sel,
					 INS_INTERVALS_MAX, copy_in, g, &trunc);
		g->truncated |= trunc;
	}
	selector_free(sel);
	if (err || !g->nact)
		return err;
	{
		size_t k = 0;

		qsort(g->active, g->nact, sizeof(*g->active), cmp_seg);
		for (size_t i = 1; i < g->nact; i++) {	/* union */
			if (g->active[i].s <= g->active[k].e) {
				if (g->active[i].e > g->active[k].e)
					g->active[k].e = g->active[i].e;
			} else {
				g->active[++k] = g->active[i];
			}
		}
		g->nact = k + 1;
	}
	return 0;
}

int ins_gather(struct insights *in, const struct eff_piece_set *ps, struct ins_cache *g,
	       const struct eff_workload *w, const struct eff_wl_gpu *gp, struct ins_facts *f)
{
	struct store *st = in->st;
	struct eff_idle_seg *seg = NULL;
	struct selector *sel = NULL;
	struct ksum ks = { 0 };
	char err_s[256], tmp[1100];
	uint64_t period = 0;
	size_t nseg = 0, L = SIZE_MAX;
	bool trunc = false;
	double best = 0;
	int gpu = (int)strtol(gp->gpu, NULL, 10), err;

	sel_add(w->selector, "node", gp->node, f->sel_node, sizeof(f->sel_node));
	pids_selector(w, gp, f->sel_procs, sizeof(f->sel_procs));
	if (ins_wants_throttle(f)) {
		err = throttling(in, f);
		if (err)
			return err;
	}
	if (!ins_wants_cpu_side(f))
		return 0;
	err = efficiency_idle_segments_of(ps, w, gp->id, &seg, &nseg);
	if (err)
		return err;
	qsort(seg, nseg, sizeof(*seg), cmp_seg);
	for (size_t i = 0; i < nseg; i++)
		f->seg_idle_s += (double)(seg[i].e - seg[i].s) * seg[i].idle / 1e9;
	if (f->seg_idle_s < 1)
		goto out;
	f->cpu_side = true;
	if (st->ops->cpu_period && !st->ops->cpu_period(st, gp->node, &period))
		f->period_s = (double)period / 1e9;
	if (g->wl != w || strcmp(g->node, gp->node))
		g->load_err = load(in, g, w, gp, f);
	err = g->load_err;
	if (err)
		goto out;
	g->f = f;
	g->seg = seg;
	g->nseg = nseg;
	f->truncated = g->truncated;
	weigh_states(g);
	/*
	 * The launching side: every thread with a tenth of the top launcher's cuLaunch* calls (a
	 * framework's own launching threads, as autograd's device thread that launches the backward
	 * pass while the Python thread waits for it, are part of it, not input workers). The
	 * launching thread is the one of them that drives the steps: the most host syncs and
	 * copies, then the most launches (the backward pass outnumbers the forward's launches);
	 * else the main thread of a holder.
	 */
	for (size_t i = 0; i < g->nt; i++) {
		f->launches += g->t[i].launches;
		best = g->t[i].launches > best ? g->t[i].launches : best;
	}
	for (size_t i = 0; i < g->nt && best > 0; i++) {
		if (g->t[i].launches < LAUNCH_SIDE * best)
			continue;
		f->launchers++;
		if (L == SIZE_MAX || g->t[i].waits > g->t[L].waits ||
		    (g->t[i].waits == g->t[L].waits && g->t[i].launches > g->t[L].launches))
			L = i;
	}
	f->launch_seen = L != SIZE_MAX;
	for (size_t h = 0; h < w->nholders && L == SIZE_MAX; h++) {
		if (strcmp(w->holders[h].node, gp->node))
			continue;
		for (size_t i = 0; i < g->nt && L == SIZE_MAX; i++)
			if (!strcmp(g->t[i].tid, w->holders[h].pid) &&
			    !strcmp(g->t[i].pid, w->holders[h].pid))
				L = i;
	}
	/* idle time with none of the workload's threads on a CPU */
	if (g->nact) {
		double act = 0;

		for (size_t i = 0; i < g->nact; i++)
			act += overlap(seg, nseg, g->active[i].s, g->active[i].e) / 1e9;
		f->no_cpu_idle_s = f->seg_idle_s - act > 0 ? f->seg_idle_s - act : 0;
	} else if (g->nt) {
		f->no_cpu_idle_s = f->seg_idle_s;
	}
	if (L == SIZE_MAX)
		goto kernels;
	snprintf(f->launch_pid, sizeof(f->launch_pid), "%s", g->t[L].pid);
	snprintf(f->launch_tid, sizeof(f->launch_tid), "%s", g->t[L].tid);
	sel_add(f->sel_node, "pid", g->t[L].pid, tmp, sizeof(tmp));
	sel_add(tmp, "tid", g->t[L].tid, f->sel_thread, sizeof(f->sel_thread));
	f->run_idle_s = g->t[L].run_idle / 1e9;
	{
		double bmax = 0;

		for (size_t r = 0; r < REASONS - 2; r++) {	/* not sleep, not cuda_sync */
			f->blocked_idle_s += g->t[L].blocked_idle[r] / 1e9;
			if (g->t[L].blocked_idle[r] > bmax) {
				bmax = g->t[L].blocked_idle[r];
				snprintf(f->blocked_reason, sizeof(f->blocked_reason), "%s", reasons[r]);
			}
		}
	}
	/* the side's threads in its process help it; those of another (a rank of the same job on
	 * another GPU) launch for their own GPU: neither helpers nor input workers */
	for (size_t i = 0; i < g->nt; i++) {
		bool side = (g->t[i].launches > 0 && g->t[i].launches >= LAUNCH_SIDE * best) ||
			    g->t[i].fw_side;

		if (i == L)
			continue;
		if (side && !strcmp(g->t[i].pid, g->t[L].pid))
			f->helpers_run_idle_s += g->t[i].run_idle / 1e9;
		else if (!side)
			f->others_run_idle_s += g->t[i].run_idle / 1e9;
	}
	err = calls_of_launcher(in, g, (uint32_t)L);
	if (!err)
		err = idle_samples(in, f, gpu);
	if (err)
		goto out;
kernels:
	if (ins_needs_node_cpu(f)) {
		err = node_cpu(in, f, gpu);
		if (err)
			goto out;
	}
	if (ins_needs_kernels(f)) {
		char s2[1100];

		sel_add(f->sel_procs, "gpu", gp->gpu, s2, sizeof(s2));
		selector_free(sel);
		sel = selector_parse(s2, err_s, sizeof(err_s));
		if (!sel) {
			err = -ENAMETOOLONG;
			goto out;
		}
		err = st->ops->intervals(st, "gpu_kernel", f->ev_from_ns, f->ev_to_ns, sel,
					 INS_INTERVALS_MAX, kernel_in, &ks, &trunc);
		f->kernels = ks.n;
		f->kernel_s = ks.ns / 1e9;
		f->truncated |= trunc;
		selector_free(sel);
		sel_add("{}", "node", gp->node, tmp, sizeof(tmp));
		sel_add(tmp, "gpu", gp->gpu, s2, sizeof(s2));
		sel_add(s2, "source", "kernels", tmp, sizeof(tmp));
		sel = selector_parse(tmp, err_s, sizeof(err_s));
		memset(&ks, 0, sizeof(ks));
		if (!err && sel)
			err = st->ops->intervals(st, "gpu_observed", f->ev_from_ns, f->ev_to_ns, sel,
						 INS_INTERVALS_MAX, kernel_in, &ks, &trunc);
		f->traced_s = ks.ns / 1e9;
	}
out:
	selector_free(sel);
	free(seg);
	g->seg = NULL;
	g->nseg = 0;
	return err;
}
