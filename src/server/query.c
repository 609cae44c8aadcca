/* SPDX-License-Identifier: Apache-2.0 */
/* Flame graph trees, diffs, top functions, processes and samples over time over the store
 * interface (query.h); pprof in query_pprof.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/hmap.h"
#include "common/util.h"
#include "server/query.h"
#include "server/store/idle_est.h"
#include "server/query_agg.h"
#include "server/selector.h"

const char *frame_name(const struct frame *f, char *buf, size_t len)
{
	const char *base;

	if (f->function && *f->function)
		return f->function;
	base = f->module ? strrchr(f->module, '/') : NULL;
	base = base ? base + 1 : (f->module && *f->module ? f->module : "[unknown]");
	snprintf(buf, len, "%s+0x%llx", base, (unsigned long long)f->address);
	return buf;
}

/* Collects the keys of one or two aggregations into one id array. */
static int collect_ids(const struct u64map *a, const struct u64map *b, uint64_t **ret,
		       size_t *ret_n)
{
	struct u64map seen = { 0 };
	const struct u64map *maps[2] = { a, b };
	size_t n = 0, cap = (a ? a->len + 1 : 0) + (b ? b->len + 1 : 0);
	uint64_t *ids = malloc((cap ? cap : 1) * sizeof(*ids));
	int ins;

	if (!ids)
		return -ENOMEM;
	for (int m = 0; m < 2; m++) {
		if (!maps[m])
			continue;
		if (maps[m]->has_zero && u64map_upsert(&seen, 0, 0, &ins) && ins)
			ids[n++] = 0;
		for (size_t i = 0; i < maps[m]->cap; i++) {
			uint64_t k = maps[m]->keys[i];

			if (!k)
				continue;
			if (!u64map_upsert(&seen, k, 0, &ins)) {
				free(ids);
				u64map_done(&seen);
				return -ENOMEM;
			}
			if (ins)
				ids[n++] = k;
		}
	}
	u64map_done(&seen);
	*ret = ids;
	*ret_n = n;
	return 0;
}

static uint64_t agg_get(const struct u64map *m, uint64_t id)
{
	uint64_t *v = m ? u64map_find(m, id) : NULL;

	return v ? *v : 0;
}

/* ---- grouped aggregations: per stack, the (group, value, value2) entries ---------------- */

static int gagg_put(struct gagg *g, uint32_t group, uint64_t stack, uint64_t v, int second)
{
	uint64_t *h;
	int ins;

	h = u64map_upsert(&g->head, stack, 0, &ins);
	if (!h)
		return -ENOMEM;
	if (ins) {
		if (array_reserve(&g->ids, &g->capids, g->nids + 1, sizeof(*g->ids), 1024))
			return -ENOMEM;
		g->ids[g->nids++] = stack;
	}
	for (uint64_t i = *h; i; i = g->e[i - 1].next) {
		if (g->e[i - 1].group == group) {
			*(second ? &g->e[i - 1].v2 : &g->e[i - 1].v) += v;
			return 0;
		}
	}
	if (array_reserve(&g->e, &g->cap, g->n + 1, sizeof(*g->e), 1024))
		return -ENOMEM;
	g->e[g->n] = (struct gent){ .group = group, .next = (uint32_t)*h,
				    .v = second ? 0 : v, .v2 = second ? v : 0 };
	*h = ++g->n;
	return 0;
}

/* store_query.emit of the first and the second (diff) query. */
int gagg_emit(void *ctx, uint32_t group, uint64_t stack, uint64_t v)
{
	return gagg_put(ctx, group, stack, v, 0);
}

int gagg_emit2(void *ctx, uint32_t group, uint64_t stack, uint64_t v)
{
	return gagg_put(ctx, group, stack, v, 1);
}

void gagg_done(struct gagg *g)
{
	free(g->e);
	free(g->ids);
	u64map_done(&g->head);
}

/* Display name of group index gi (1-based; 0: none) for a flame graph root child. */
static const char *group_display(const struct strtab *groups, const char *group_by, uint32_t gi,
				 char *buf, size_t len)
{
	const char *v = gi && gi <= groups->len ? groups->strs[gi - 1] : "";
	size_t o = 0;

	for (const char *p = v; *p && o + 1 < len; p++)
		buf[o++] = *p == STORE_GROUP_SEP[0] ? ' ' : *p;
	while (o && buf[o - 1] == ' ')
		o--;
	buf[o] = 0;
	if (!o)
		snprintf(buf, len, "[no %s]", group_by);
	return buf;
}

/* ---- flame tree -------------------------------------------------------------------------- */

struct tnode {
	uint32_t name, first_child, next_sibling, nchildren;
	uint64_t value, value2, self, self2;
};

struct tree {
	struct tnode *n;
	size_t len, cap;
	struct strtab names;
	struct u64map child;	/* parent << 32 | name -> node index */
	const struct gagg *g;
	const struct strtab *groups;	/* group_by: the groups' values */
	const char *group_by;
	bool python_only;	/* fold the interpreter's frames between Python and native ones */
	int err;
};

/* A frame of Python code (the agent names its module "[python]"). */
static bool python_frame(const struct frame *f)
{
	return f->module && !strcmp(f->module, "[python]");
}

/* A native frame of the CPython interpreter itself: libpython*, or a python* executable. */
static bool interpreter_frame(const struct frame *f)
{
	const char *m = f->module, *b;

	if (!m || f->kernel)
		return false;
	b = strrchr(m, '/');
	b = b ? b + 1 : m;
	return !strncmp(b, "libpython", 9) || !strncmp(b, "python", 6);
}

static int64_t tree_child(struct tree *t, uint32_t parent, uint32_t name)
{
	int ins;
	uint64_t *v = u64map_upsert(&t->child, (uint64_t)parent << 32 | name, t->len, &ins);

	if (!v)
		return -ENOMEM;
	if (!ins)
		return (int64_t)*v;
	if (array_reserve(&t->n, &t->cap, t->len + 1, sizeof(*t->n), 1024))
		return -ENOMEM;
	t->n[t->len] = (struct tnode){ .name = name, .next_sibling = t->n[parent].first_child };
	t->n[parent].first_child = (uint32_t)t->len;
	t->n[parent].nchildren++;
	return (int64_t)t->len++;
}

/* One step down from node *cur to its child called name (made if new), which gets the values
 * v and v2 of the stack on its way: *cur becomes that child. 0 or -ENOMEM. */
static int tree_step(struct tree *t, uint32_t *cur, const char *name, uint64_t v, uint64_t v2)
{
	int64_t k = strtab_intern(&t->names, name);
	int64_t c = k < 0 ? k : tree_child(t, *cur, (uint32_t)k);

	if (c < 0)
		return (int)c;
	*cur = (uint32_t)c;
	t->n[c].value += v;
	t->n[c].value2 += v2;
	return 0;
}

static int tree_add_one(struct tree *t, const struct gent *e, const struct frame *f, size_t nf)
{
	uint64_t v = e->v, v2 = e->v2;
	uint32_t cur = 0;
	char tmp[256];
	int err = 0;

	t->n[0].value += v;
	t->n[0].value2 += v2;
	if (t->g->grouped)
		err = tree_step(t, &cur, group_display(t->groups, t->group_by, e->group, tmp,
						       sizeof(tmp)), v, v2);
	if (!err && !nf)
		err = tree_step(t, &cur, "[unknown]", v, v2);
	if (err)
		return err;
	/* Python only, in a stack with a Python frame: the interpreter's frames with any other
	 * frame below them go (the evaluation loop and call machinery between Python functions
	 * and the native code they call, and the start-up above the first); its frames at the
	 * leaf, where the time went (allocation, the loop itself), stay */
	size_t tail = nf;
	bool py = false;

	for (size_t i = 0; t->python_only && i < nf; i++) {
		py |= python_frame(&f[i]);
		if (tail == nf && !interpreter_frame(&f[i]))
			tail = i;
	}
	for (size_t i = nf; i-- > 0 && !err;) {
		if (py && i > tail && interpreter_frame(&f[i]))
			continue;
		err = tree_step(t, &cur, frame_name(&f[i], tmp, sizeof(tmp)), v, v2);
	}
	if (err)
		return err;
	t->n[cur].self += v;
	t->n[cur].self2 += v2;
	return 0;
}

static int tree_add_stack(void *ctx, uint64_t id, const struct frame *f, size_t nf)
{
	struct tree *t = ctx;
	uint64_t *h = u64map_find(&t->g->head, id);
	int err = 0;

	for (uint64_t i = h ? *h : 0; i && !err; i = t->g->e[i - 1].next)
		err = tree_add_one(t, &t->g->e[i - 1], f, nf);
	return err;
}

static int cmp_child(const void *a, const void *b, void *ctx)
{
	const struct tree *t = ctx;
	const struct tnode *x = &t->n[*(const uint32_t *)a], *y = &t->n[*(const uint32_t *)b];

	return strcmp(t->names.strs[x->name], t->names.strs[y->name]);
}

static int emit_node(struct tree *t, uint32_t idx, bool diff, struct buf *out, int depth)
{
	const struct tnode *nd = &t->n[idx];
	uint32_t *kids;
	size_t k = 0;
	int err = 0;

	buf_puts(out, "{\"name\":");
	buf_json_str(out, t->names.strs[nd->name]);
	buf_printf(out, ",\"value\":%llu,\"self\":%llu", (unsigned long long)nd->value,
		   (unsigned long long)nd->self);
	if (diff)
		buf_printf(out, ",\"value2\":%llu,\"self2\":%llu", (unsigned long long)nd->value2,
			   (unsigned long long)nd->self2);
	buf_puts(out, ",\"children\":[");
	if (nd->nchildren) {
		kids = malloc(nd->nchildren * sizeof(*kids));
		if (!kids)
			return -ENOMEM;
		for (uint32_t c = nd->first_child; k < nd->nchildren; c = t->n[c].next_sibling)
			kids[k++] = c;
		qsort_r(kids, k, sizeof(*kids), cmp_child, t);
		for (size_t i = 0; i < k && !err; i++) {
			if (i)
				buf_put(out, ",", 1);
			err = emit_node(t, kids[i], diff, out, depth + 1);
		}
		free(kids);
	}
	buf_puts(out, "]}");
	return out->oom ? -ENOMEM : err;
}

/* ---- traced share of a range (kernel time comes only from CUPTI windows) ------------------- */

#define TRACE_WINDOWS_MAX 100000

struct spans {
	uint64_t (*v)[2];
	size_t n, cap;
	uint64_t from, to;
};

static int span_in(void *ctx, const char *kind, const char *const *labels, size_t nlabels,
		   uint64_t start, uint64_t end, const char *const *attrs, size_t nattrs)
{
	struct spans *sp = ctx;

	(void)kind, (void)labels, (void)nlabels, (void)attrs, (void)nattrs;
	if (sp->n == sp->cap) {
		size_t ncap = sp->cap ? sp->cap * 2 : 64;
		void *nv = realloc(sp->v, ncap * sizeof(*sp->v));

		if (!nv)
			return -ENOMEM;
		sp->v = nv;
		sp->cap = ncap;
	}
	sp->v[sp->n][0] = start < sp->from ? sp->from : start;
	sp->v[sp->n][1] = end > sp->to ? sp->to : end;
	sp->n++;
	return 0;
}

/* Length of the union of sp's spans (added sorted by start). */
static uint64_t spans_union(const struct spans *sp)
{
	uint64_t covered = 0, end = 0;

	for (size_t i = 0; i < sp->n; i++) {
		uint64_t a = sp->v[i][0] > end ? sp->v[i][0] : end, b = sp->v[i][1];

		if (b > a) {
			covered += b - a;
			end = b;
		}
	}
	return covered;
}

/*
 * "traced":{...}: the share of [from, to) that CUPTI windows (gpu_trace_window intervals of
 * the selected processes, any reason) covered, their count, and whether the count was capped.
 * Outside windows no kernel is recorded: a kernel flame graph is of the traced share only.
 */
static int emit_traced(struct store *s, const struct store_query *q, struct buf *out)
{
	struct spans sp = { .from = q->from_ns, .to = q->to_ns };
	bool truncated = false;
	uint64_t covered;
	int err;

	err = s->ops->intervals(s, "gpu_trace_window", q->from_ns, q->to_ns, q->sel,
				TRACE_WINDOWS_MAX, span_in, &sp, &truncated);
	if (err) {
		free(sp.v);
		return err;
	}
	covered = spans_union(&sp);
	buf_puts(out, "\"traced\":{\"fraction\":");
	buf_json_num(out, q->to_ns > q->from_ns ? (double)covered / (double)(q->to_ns - q->from_ns)
						 : 0.0);
	buf_printf(out, ",\"windows\":%zu,\"truncated\":%s},", sp.n, truncated ? "true" : "false");
	free(sp.v);
	return 0;
}

/* ---- who decided busy/idle for a GPU-idle flame graph -------------------------------------- */

#define SOURCES_MAX 4

struct observed {
	struct spans sp[SOURCES_MAX + 1];	/* per source, then all of them */
	char names[SOURCES_MAX][16];
	int nsrc;
	char gpu[16];
	bool other;			/* a source past SOURCES_MAX: only in the total */
};

static const char *pair_value(const char *const *labels, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(labels[2 * i], name))
			return labels[2 * i + 1];
	return "";
}

static int observed_in(void *ctx, const char *kind, const char *const *labels, size_t nlabels,
		       uint64_t start, uint64_t end, const char *const *attrs, size_t nattrs)
{
	struct observed *o = ctx;
	const char *src = pair_value(labels, nlabels, "source");
	int i, err;

	if (strcmp(pair_value(labels, nlabels, "gpu"), o->gpu))
		return 0;
	for (i = 0; i < o->nsrc && strcmp(o->names[i], src); i++)
		;
	if (i == o->nsrc && o->nsrc < SOURCES_MAX)
		snprintf(o->names[o->nsrc++], sizeof(o->names[0]), "%s", *src ? src : "?");
	else if (i == o->nsrc)
		o->other = true;
	if (i < o->nsrc) {
		err = span_in(&o->sp[i], kind, labels, nlabels, start, end, attrs, nattrs);
		if (err)
			return err;
	}
	return span_in(&o->sp[SOURCES_MAX], kind, labels, nlabels, start, end, attrs, nattrs);
}

static double share_of(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : 0;
}

int query_idle_summary(const struct idle_tally *t, int gpu, char *buf, size_t len)
{
	const struct idle_est_cover *c = &t->cover;
	double total = t->exact_value + t->estimated_value;

	if (!c->range_ns)
		return snprintf(buf, len, "GPU %d idle: no source observed this GPU in the range: "
				"every sample is unknown, none counted", gpu);
	if (!c->windows && !c->unknown_ns && !c->extrapolated_ns)
		return snprintf(buf, len,
				"GPU %d idle: %.1f %% of the range decided by the driver's counters and "
				"triggered windows, %.1f %% traced: nothing in this answer is estimated",
				gpu, 100 * share_of(c->exact_ns, c->range_ns),
				100 * share_of(c->traced_ns, c->range_ns));
	if (!c->windows)
		return snprintf(buf, len,
				"GPU %d idle: no duty-cycle trace window in reach (no process on it "
				"injected with the CUPTI library, or windows refused): %.1f %% of the "
				"range decided by the driver's counters and triggered windows, %.1f %% "
				"traced, %.1f %% unknown; nothing in this answer is estimated",
				gpu, 100 * share_of(c->exact_ns, c->range_ns),
				100 * share_of(c->traced_ns, c->range_ns),
				100 * share_of(c->unknown_ns + c->extrapolated_ns, c->range_ns));
	return snprintf(buf, len,
			"GPU %d idle: %.1f %% of the range decided where it happened (the driver's "
			"counters at 0/1, triggered trace windows), %.1f %% traced by %llu duty-cycle "
			"windows standing for %.1f %% undecided around them (weights up to %.1f), "
			"%.1f %% unknown; %.1f %% of this answer is estimated",
			gpu, 100 * share_of(c->exact_ns, c->range_ns),
			100 * share_of(c->traced_ns, c->range_ns), (unsigned long long)c->windows,
			100 * share_of(c->extrapolated_ns, c->range_ns), c->max_weight,
			100 * share_of(c->unknown_ns, c->range_ns),
			total > 0 ? 100 * t->estimated_value / total : 0.0);
}

void query_estimate_json(struct buf *out, const char *key, const struct idle_tally *t, int gpu)
{
	const struct idle_est_cover *c = &t->cover;
	double total = t->exact_value + t->estimated_value;
	char text[512];

	buf_printf(out, ",\"%s\":{\"exact\":", key);
	buf_json_num(out, share_of(c->exact_ns, c->range_ns));
	buf_puts(out, ",\"traced\":");
	buf_json_num(out, share_of(c->traced_ns, c->range_ns));
	buf_puts(out, ",\"extrapolated\":");
	buf_json_num(out, share_of(c->extrapolated_ns, c->range_ns));
	buf_puts(out, ",\"unknown\":");
	buf_json_num(out, c->range_ns ? share_of(c->unknown_ns, c->range_ns) : 1.0);
	buf_printf(out, ",\"windows\":%llu,\"max_weight\":", (unsigned long long)c->windows);
	buf_json_num(out, c->max_weight);
	buf_puts(out, ",\"estimated_share\":");
	buf_json_num(out, total > 0 ? t->estimated_value / total : 0);
	buf_puts(out, ",\"method\":\"nearest duty-cycle window, reach 120 s\",\"summary\":");
	query_idle_summary(t, gpu, text, sizeof(text));
	buf_json_str(out, text);
	buf_puts(out, "}");
}

/*
 * "gpu_sources":{...} of a GPU-idle query: the share of the range in which some source
 * observed that GPU (outside it busy/idle is unknown and no sample is kept), and each source's
 * share (kernels: CUPTI windows; nvml, gpm: the driver's counters). The GPU's intervals carry
 * node labels only, so the selector's node matcher chooses them.
 */
static int emit_gpu_sources(struct store *s, const struct store_query *q,
			    const struct idle_tally *t, const struct idle_tally *t2, struct buf *out)
{
	static const char *const node_level[] = { "node" };
	struct observed o = { .nsrc = 0 };
	double range = q->to_ns > q->from_ns ? (double)(q->to_ns - q->from_ns) : 1.0;
	struct selector *nsel;
	bool truncated = false;
	int err;

	for (int i = 0; i <= SOURCES_MAX; i++) {
		o.sp[i].from = q->from_ns;
		o.sp[i].to = q->to_ns;
	}
	snprintf(o.gpu, sizeof(o.gpu), "%d", q->gpu_idle);
	nsel = selector_restrict(q->sel, node_level, 1);
	if (!nsel)
		return -ENOMEM;
	err = s->ops->intervals(s, "gpu_observed", q->from_ns, q->to_ns, nsel, TRACE_WINDOWS_MAX,
				observed_in, &o, &truncated);
	selector_free(nsel);
	if (!err) {
		buf_printf(out, "\"gpu_sources\":{\"gpu\":%d,\"observed\":", q->gpu_idle);
		buf_json_num(out, (double)spans_union(&o.sp[SOURCES_MAX]) / range);
		buf_puts(out, ",\"by_source\":{");
		for (int i = 0; i < o.nsrc; i++) {
			buf_printf(out, "%s", i ? "," : "");
			buf_json_str(out, o.names[i]);
			buf_puts(out, ":");
			buf_json_num(out, (double)spans_union(&o.sp[i]) / range);
		}
		buf_printf(out, "},\"truncated\":%s", truncated || o.other ? "true" : "false");
		if (t && t->set)
			query_estimate_json(out, "estimate", t, q->gpu_idle);
		if (t2 && t2->set)
			query_estimate_json(out, "estimate2", t2, q->gpu_idle);
		buf_puts(out, "},");
	}
	for (int i = 0; i <= SOURCES_MAX; i++)
		free(o.sp[i].v);
	return err;
}

int query_flamegraph(struct store *s, const struct store_query *q, const struct store_query *q2,
		     struct buf *out)
{
	struct store_query qa = *q, qb = q2 ? *q2 : *q;
	struct u64map agg = { 0 };
	struct strtab groups = { 0 };
	struct gagg g = { .grouped = q->group_by != NULL };
	struct tree t = { 0 };
	struct idle_tally ta = { 0 }, tb = { 0 };
	int err;

	qa.idle = &ta;
	qb.idle = &tb;
	/* One group table for both sides of a diff: their indexes name the same groups. */
	qa.groups = qb.groups = &groups;
	qb.group_by = qa.group_by;
	qa.step_ns = qb.step_ns = 0;
	qa.emit = gagg_emit;
	qb.emit = gagg_emit2;
	qa.emit_ctx = qb.emit_ctx = &g;
	err = s->ops->aggregate(s, &qa, &agg);
	if (!err && q2)
		err = s->ops->aggregate(s, &qb, &agg);
	if (err)
		goto out;
	t.g = &g;
	t.groups = &groups;
	t.group_by = q->group_by;
	t.python_only = q->python_only;
	t.n = calloc(1024, sizeof(*t.n));
	t.cap = 1024;
	if (!t.n || strtab_intern(&t.names, "all") < 0) {
		err = -ENOMEM;
		goto out;
	}
	t.len = 1;
	err = s->ops->stacks(s, g.ids, g.nids, tree_add_stack, &t);
	if (err)
		goto out;
	buf_printf(out, "{\"unit\":\"%s\",\"total\":%llu,", q->kind == SAMPLE_CPU ? "samples" : "ns",
		   (unsigned long long)t.n[0].value);
	if (q2)
		buf_printf(out, "\"total2\":%llu,", (unsigned long long)t.n[0].value2);
	if (q->group_by) {
		buf_puts(out, "\"group_by\":");
		buf_json_str(out, q->group_by);
		buf_puts(out, ",");
	}
	if (q->kind == SAMPLE_GPU_KERNEL_NS && !q2) {
		err = emit_traced(s, q, out);
		if (err)
			goto out;
	}
	if (q->gpu_idle >= 0 || (q2 && q2->gpu_idle >= 0)) {
		err = emit_gpu_sources(s, q->gpu_idle >= 0 ? q : q2, ta.set ? &ta : NULL,
				       tb.set && q2 ? &tb : NULL, out);
		if (err)
			goto out;
	}
	buf_puts(out, "\"root\":");
	err = emit_node(&t, 0, q2 != NULL, out, 0);
	buf_puts(out, "}");
	if (out->oom)
		err = -ENOMEM;
out:
	free(t.n);
	strtab_done(&t.names);
	strtab_done(&groups);
	u64map_done(&t.child);
	u64map_done(&agg);
	gagg_done(&g);
	return err;
}

/* ---- top --------------------------------------------------------------------------------- */

struct fn_stat {
	uint64_t self, total, seen;	/* seen: last stack counter that counted total */
};

struct top {
	struct strtab names;
	struct fn_stat *st;
	size_t cap;
	const struct u64map *agg;
	uint64_t counter;
};

static int top_add_stack(void *ctx, uint64_t id, const struct frame *f, size_t nf)
{
	struct top *t = ctx;
	uint64_t v = agg_get(t->agg, id);
	char tmp[256];

	t->counter++;
	for (size_t i = 0; i < nf; i++) {
		int64_t k = strtab_intern(&t->names, frame_name(&f[i], tmp, sizeof(tmp)));

		if (k < 0)
			return (int)k;
		if ((size_t)k >= t->cap) {
			size_t ncap = t->cap ? t->cap * 2 : 1024;
			struct fn_stat *n = realloc(t->st, ncap * sizeof(*n));

			if (!n)
				return -ENOMEM;
			memset(n + t->cap, 0, (ncap - t->cap) * sizeof(*n));
			t->st = n;
			t->cap = ncap;
		}
		if (!i)
			t->st[k].self += v;
		if (t->st[k].seen != t->counter) {	/* recursion counts once */
			t->st[k].seen = t->counter;
			t->st[k].total += v;
		}
	}
	return 0;
}

/* By self, then total, then name: ties in the same order whatever order the stacks came in. */
static int cmp_top(const void *a, const void *b, void *ctx)
{
	const struct top *t = ctx;
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	const struct fn_stat *x = &t->st[i], *y = &t->st[j];

	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(t->names.strs[i], t->names.strs[j]);
}

int query_top(struct store *s, const struct store_query *q, size_t limit, struct buf *out)
{
	struct store_query qa = *q;
	struct idle_tally it = { 0 };
	struct u64map agg = { 0 };
	struct top t = { 0 };
	uint64_t *ids = NULL, total = 0;
	size_t nids = 0, *order = NULL;
	int err;

	qa.idle = &it;
	err = s->ops->aggregate(s, &qa, &agg);
	if (!err)
		err = collect_ids(&agg, NULL, &ids, &nids);
	if (err)
		goto out;
	t.agg = &agg;
	err = s->ops->stacks(s, ids, nids, top_add_stack, &t);
	if (err)
		goto out;
	for (size_t i = 0; i < nids; i++)
		total += agg_get(&agg, ids[i]);
	order = malloc((t.names.len ? t.names.len : 1) * sizeof(*order));
	if (!order) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < t.names.len; i++)
		order[i] = i;
	qsort_r(order, t.names.len, sizeof(*order), cmp_top, &t);
	buf_printf(out, "{\"unit\":\"%s\",\"total\":%llu,\"from_ms\":%llu,\"to_ms\":%llu,",
		   q->kind == SAMPLE_CPU ? "samples" : "ns", (unsigned long long)total,
		   (unsigned long long)(q->from_ns / NSEC_PER_MSEC),
		   (unsigned long long)(q->to_ns / NSEC_PER_MSEC));
	if (q->kind == SAMPLE_GPU_KERNEL_NS) {
		err = emit_traced(s, q, out);
		if (err)
			goto out;
	}
	if (q->gpu_idle >= 0) {
		err = emit_gpu_sources(s, q, &it, NULL, out);
		if (err)
			goto out;
	}
	buf_puts(out, "\"functions\":[");
	for (size_t i = 0; i < t.names.len && i < limit; i++) {
		const struct fn_stat *f = &t.st[order[i]];

		if (i)
			buf_put(out, ",", 1);
		buf_puts(out, "{\"name\":");
		buf_json_str(out, t.names.strs[order[i]]);
		buf_printf(out, ",\"self\":%llu,\"total\":%llu}", (unsigned long long)f->self,
			   (unsigned long long)f->total);
	}
	buf_puts(out, "]}");
	if (out->oom)
		err = -ENOMEM;
out:
	free(order);
	free(ids);
	free(t.st);
	strtab_done(&t.names);
	u64map_done(&agg);
	return err;
}

/* ---- processes and samples over time ----------------------------------------------------- */

struct proc {
	const char *pid, *comm, *pod;	/* into the groups' values (split in place) */
	const char *program, *cmdline;	/* of the busiest comm's group; "" when none */
	uint64_t value, comm_value;	/* comm: the one with the most samples */
};

static int cmp_proc(const void *a, const void *b)
{
	const struct proc *x = a, *y = b;

	if (x->value != y->value)
		return x->value > y->value ? -1 : 1;
	return strcmp(x->pid, y->pid);
}

/* Sums per (group, bucket): a growing matrix of ng x nb (store_query.emit). */
struct gsum {
	uint64_t *v;
	size_t ng, nb;
};

static int gsum_emit(void *ctx, uint32_t group, uint64_t key, uint64_t value)
{
	struct gsum *m = ctx;

	if (key >= m->nb)
		return 0;	/* a sample at to_ns exactly: outside */
	if (group >= m->ng) {
		size_t ng = (size_t)group + 64;
		uint64_t *v = realloc(m->v, ng * m->nb * sizeof(*v));

		if (!v)
			return -ENOMEM;
		memset(v + m->ng * m->nb, 0, (ng - m->ng) * m->nb * sizeof(*v));
		m->v = v;
		m->ng = ng;
	}
	m->v[group * m->nb + key] += value;
	return 0;
}

int query_processes(struct store *s, const struct store_query *q, size_t limit, struct buf *out)
{
	struct store_query qa = *q;
	struct strtab groups = { 0 };
	struct u64map agg = { 0 }, byp = { 0 };
	struct gsum m = { .nb = 1 };
	struct proc *pr = NULL;
	uint64_t *sum = NULL, total = 0;
	size_t n = 0;
	int err;

	/*
	 * comm is per thread: group by (pid, comm, pod, program, cmdline) and keep each pid's
	 * busiest comm, with what it ran then (a pid that exec'd ran several)
	 */
	qa.group_by = "pid,comm,pod,program,cmdline";
	qa.groups = &groups;
	qa.step_ns = q->to_ns - q->from_ns + 1;	/* one bucket */
	qa.emit = gsum_emit;
	qa.emit_ctx = &m;
	err = s->ops->aggregate(s, &qa, &agg);
	if (err)
		goto out;
	err = gsum_emit(&m, (uint32_t)groups.len, 0, 0);	/* every group has a row */
	sum = m.v;
	pr = calloc(groups.len + 1, sizeof(*pr));
	if (err || !pr) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t gi = 1; gi <= groups.len; gi++) {
		char *v = groups.strs[gi - 1], *c = strchr(v, STORE_GROUP_SEP[0]), *pod, *prog = NULL;
		char *cmd = NULL;
		uint64_t *slot;
		struct proc *p;
		int ins;

		total += sum[gi];
		if (!sum[gi] || !c)
			continue;
		*c++ = 0;
		pod = strchr(c, STORE_GROUP_SEP[0]);
		if (pod)
			*pod++ = 0;
		prog = pod ? strchr(pod, STORE_GROUP_SEP[0]) : NULL;
		if (prog)
			*prog++ = 0;
		cmd = prog ? strchr(prog, STORE_GROUP_SEP[0]) : NULL;
		if (cmd)
			*cmd++ = 0;
		if (!*v)
			continue;	/* samples without a pid: in the total only */
		slot = u64map_upsert(&byp, hash64(v, strlen(v), 7), n, &ins);
		if (!slot) {
			err = -ENOMEM;
			goto out;
		}
		p = &pr[*slot];
		if (ins) {
			*p = (struct proc){ .pid = v, .comm = c, .pod = pod ? pod : "",
					    .program = prog ? prog : "", .cmdline = cmd ? cmd : "" };
			n++;
		}
		p->value += sum[gi];
		if (sum[gi] > p->comm_value) {
			p->comm_value = sum[gi];
			p->comm = c;
			if (prog && *prog)
				p->program = prog;
			if (cmd && *cmd)
				p->cmdline = cmd;
		}
		if (pod && *pod)
			p->pod = pod;
	}
	total += sum[0];
	qsort(pr, n, sizeof(*pr), cmp_proc);
	buf_printf(out, "{\"unit\":\"%s\",\"total\":%llu,\"count\":%zu,\"processes\":[",
		   q->kind == SAMPLE_CPU ? "samples" : "ns", (unsigned long long)total, n);
	for (size_t i = 0; i < n && i < limit; i++) {
		buf_puts(out, i ? ",{\"pid\":" : "{\"pid\":");
		buf_json_str(out, pr[i].pid);
		buf_puts(out, ",\"comm\":");
		buf_json_str(out, pr[i].comm);
		if (*pr[i].pod) {
			buf_puts(out, ",\"pod\":");
			buf_json_str(out, pr[i].pod);
		}
		if (*pr[i].program) {
			buf_puts(out, ",\"program\":");
			buf_json_str(out, pr[i].program);
		}
		if (*pr[i].cmdline) {
			buf_puts(out, ",\"cmdline\":");
			buf_json_str(out, pr[i].cmdline);
		}
		buf_printf(out, ",\"value\":%llu}", (unsigned long long)pr[i].value);
	}
	buf_puts(out, "]}");
	if (out->oom)
		err = -ENOMEM;
out:
	free(pr);
	free(m.v);
	u64map_done(&byp);
	u64map_done(&agg);
	strtab_done(&groups);
	return err;
}

int query_samples(struct store *s, const struct store_query *q, struct buf *out)
{
	struct store_query qa = *q;
	struct strtab groups = { 0 };
	struct u64map agg = { 0 };
	size_t nb = (size_t)((q->to_ns - q->from_ns + q->step_ns - 1) / q->step_ns);
	struct gsum m = { .nb = nb ? nb : 1 };
	size_t ng;
	uint64_t *v;
	int err;

	qa.groups = &groups;
	qa.emit = gsum_emit;
	qa.emit_ctx = &m;
	err = s->ops->aggregate(s, &qa, &agg);
	if (!err)
		err = gsum_emit(&m, (uint32_t)groups.len, 0, 0);	/* every group has a row */
	if (err)
		goto out;
	nb = m.nb;
	v = m.v;
	ng = q->group_by ? groups.len + 1 : 1;
	buf_printf(out, "{\"unit\":\"%s\",\"from_ms\":%llu,\"step_ms\":%.3f,\"series\":[",
		   q->kind == SAMPLE_CPU ? "samples" : "ns",
		   (unsigned long long)(q->from_ns / NSEC_PER_MSEC), q->step_ns / 1e6);
	for (size_t g = 0, first = 1; g < ng; g++) {
		uint64_t tot = 0;

		for (size_t b = 0; b < nb; b++)
			tot += v[g * nb + b];
		if (q->group_by && !tot)
			continue;
		buf_puts(out, first ? "{" : ",{");
		first = 0;
		if (q->group_by) {
			char name[512];

			buf_puts(out, "\"group\":");
			buf_json_str(out, group_display(&groups, q->group_by, (uint32_t)g, name,
							sizeof(name)));
			buf_puts(out, ",");
		}
		buf_printf(out, "\"total\":%llu,\"values\":[", (unsigned long long)tot);
		for (size_t b = 0; b < nb; b++)
			buf_printf(out, b ? ",%llu" : "%llu", (unsigned long long)v[g * nb + b]);
		buf_puts(out, "]}");
	}
	buf_puts(out, "]}");
	if (out->oom)
		err = -ENOMEM;
out:
	free(m.v);
	u64map_done(&agg);
	strtab_done(&groups);
	return err;
}
