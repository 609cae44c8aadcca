/* SPDX-License-Identifier: Apache-2.0 */
/* Flame graph trees, diffs, top functions and pprof over the store interface (query.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/hmap.h"
#include "common/pprof.h"
#include "common/util.h"
#include "server/query.h"

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
	const struct u64map *agg, *agg2;
	int err;
};

static int64_t tree_child(struct tree *t, uint32_t parent, uint32_t name)
{
	int ins;
	uint64_t *v = u64map_upsert(&t->child, (uint64_t)parent << 32 | name, t->len, &ins);

	if (!v)
		return -ENOMEM;
	if (!ins)
		return (int64_t)*v;
	if (t->len == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 1024;
		struct tnode *n = realloc(t->n, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		t->n = n;
		t->cap = ncap;
	}
	t->n[t->len] = (struct tnode){ .name = name, .next_sibling = t->n[parent].first_child };
	t->n[parent].first_child = (uint32_t)t->len;
	t->n[parent].nchildren++;
	return (int64_t)t->len++;
}

static int tree_add_stack(void *ctx, uint64_t id, const struct frame *f, size_t nf)
{
	struct tree *t = ctx;
	uint64_t v = agg_get(t->agg, id), v2 = agg_get(t->agg2, id);
	uint32_t cur = 0;
	char tmp[256];

	t->n[0].value += v;
	t->n[0].value2 += v2;
	if (!nf) {
		int64_t name = strtab_intern(&t->names, "[unknown]");
		int64_t c = name < 0 ? name : tree_child(t, 0, (uint32_t)name);

		if (c < 0)
			return (int)c;
		cur = (uint32_t)c;
		t->n[cur].value += v;
		t->n[cur].value2 += v2;
	}
	for (size_t i = nf; i-- > 0;) {
		int64_t name = strtab_intern(&t->names, frame_name(&f[i], tmp, sizeof(tmp)));
		int64_t c = name < 0 ? name : tree_child(t, cur, (uint32_t)name);

		if (c < 0)
			return (int)c;
		cur = (uint32_t)c;
		t->n[cur].value += v;
		t->n[cur].value2 += v2;
	}
	t->n[cur].self += v;
	t->n[cur].self2 += v2;
	return 0;
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

int query_flamegraph(struct store *s, const struct store_query *q, const struct store_query *q2,
		     struct buf *out)
{
	struct u64map agg = { 0 }, agg2 = { 0 };
	struct tree t = { 0 };
	uint64_t *ids = NULL;
	size_t nids = 0;
	int err;

	err = s->ops->aggregate(s, q, &agg);
	if (!err && q2)
		err = s->ops->aggregate(s, q2, &agg2);
	if (!err)
		err = collect_ids(&agg, q2 ? &agg2 : NULL, &ids, &nids);
	if (err)
		goto out;
	t.agg = &agg;
	t.agg2 = q2 ? &agg2 : NULL;
	t.n = calloc(1024, sizeof(*t.n));
	t.cap = 1024;
	if (!t.n || strtab_intern(&t.names, "all") < 0) {
		err = -ENOMEM;
		goto out;
	}
	t.len = 1;
	err = s->ops->stacks(s, ids, nids, tree_add_stack, &t);
	if (err)
		goto out;
	buf_printf(out, "{\"unit\":\"%s\",\"total\":%llu,", q->kind == SAMPLE_CPU ? "samples" : "ns",
		   (unsigned long long)t.n[0].value);
	if (q2)
		buf_printf(out, "\"total2\":%llu,", (unsigned long long)t.n[0].value2);
	buf_puts(out, "\"root\":");
	err = emit_node(&t, 0, q2 != NULL, out, 0);
	buf_puts(out, "}");
	if (out->oom)
		err = -ENOMEM;
out:
	free(ids);
	free(t.n);
	strtab_done(&t.names);
	u64map_done(&t.child);
	u64map_done(&agg);
	u64map_done(&agg2);
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

static int cmp_top(const void *a, const void *b, void *ctx)
{
	const struct fn_stat *st = ctx, *x = &st[*(const size_t *)a], *y = &st[*(const size_t *)b];

	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return 0;
}

int query_top(struct store *s, const struct store_query *q, size_t limit, struct buf *out)
{
	struct u64map agg = { 0 };
	struct top t = { 0 };
	uint64_t *ids = NULL, total = 0;
	size_t nids = 0, *order = NULL;
	int err;

	err = s->ops->aggregate(s, q, &agg);
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
	qsort_r(order, t.names.len, sizeof(*order), cmp_top, t.st);
	buf_printf(out, "{\"unit\":\"%s\",\"total\":%llu,\"from_ms\":%llu,\"to_ms\":%llu,"
		   "\"functions\":[", q->kind == SAMPLE_CPU ? "samples" : "ns",
		   (unsigned long long)total, (unsigned long long)(q->from_ns / NSEC_PER_MSEC),
		   (unsigned long long)(q->to_ns / NSEC_PER_MSEC));
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

/* ---- pprof ------------------------------------------------------------------------------- */

struct pp {
	struct pprof *p;
	const struct u64map *agg;
	uint64_t *locs;
};

static int pp_add_stack(void *ctx, uint64_t id, const struct frame *f, size_t nf)
{
	struct pp *pp = ctx;
	int64_t v = (int64_t)agg_get(pp->agg, id);

	if (!v)
		return 0;
	for (size_t i = 0; i < nf; i++) {
		struct location l = {
			.function = f[i].function, .module = f[i].module, .build_id = f[i].build_id,
			.file = f[i].file, .line = f[i].line, .address = f[i].address,
			.kernel = f[i].kernel, .inlined = f[i].inlined,
		};

		pp->locs[i] = pprof__location(pp->p, &l);
		if (!pp->locs[i])
			return -ENOMEM;
	}
	return pprof__sample(pp->p, pp->locs, nf, &v, NULL, 0, NULL, 0);
}

int query_pprof(struct store *s, const struct store_query *q, uint8_t **ret, size_t *ret_len)
{
	struct pprof_value_type vt = { "samples", "count" }, pt = { "cpu", "nanoseconds" };
	struct u64map agg = { 0 };
	struct pp pp = { 0 };
	uint64_t *ids = NULL;
	size_t nids = 0;
	int err;

	if (q->kind != SAMPLE_CPU) {
		vt = (struct pprof_value_type){ sample_kind_name(q->kind), "nanoseconds" };
		pt = vt;
	}
	err = s->ops->aggregate(s, q, &agg);
	if (!err)
		err = collect_ids(&agg, NULL, &ids, &nids);
	if (err)
		goto out;
	pp.p = pprof__new(&vt, 1, pt, 0, q->from_ns, q->to_ns - q->from_ns);
	pp.locs = malloc(BATCH_MAX_DEPTH * sizeof(*pp.locs));
	pp.agg = &agg;
	if (!pp.p || !pp.locs) {
		err = -ENOMEM;
		goto out;
	}
	err = s->ops->stacks(s, ids, nids, pp_add_stack, &pp);
	if (!err)
		err = pprof__encode_gz(pp.p, ret, ret_len);
out:
	pprof__free(pp.p);
	free(pp.locs);
	free(ids);
	u64map_done(&agg);
	return err;
}
