/* SPDX-License-Identifier: Apache-2.0 */
/* pprof answers over the store interface (query.h): the profile format of `gpuscope-agent
 * record`, with the labels of each sample's series. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/hmap.h"
#include "common/pprof.h"
#include "common/util.h"
#include "server/query.h"
#include "server/query_agg.h"

#define PP_MAX_LABELS 32

struct node_period {
	char *node;
	uint64_t period_ns;		/* 0: unknown */
};

struct pp {
	struct store *s;
	struct pprof *p;
	const struct gagg *g;
	const struct strtab *groups;
	uint64_t *locs;
	bool cpu;			/* two sample types: samples and cpu ns */
	struct node_period *periods;	/* per node seen, looked up once */
	size_t nperiods;
	struct strtab roots;		/* pass 1: outermost user module -> weight */
	uint64_t *root_w;		/* per roots index */
	char **root_bid;		/* its build id (first seen) */
	size_t nroots;
	int err;
};

/* The node's CPU sampling period (cached); 0 when its agent never said. */
static uint64_t pp_period(struct pp *pp, const char *node)
{
	struct node_period *n;
	uint64_t v = 0;

	for (size_t i = 0; i < pp->nperiods; i++)
		if (!strcmp(pp->periods[i].node, node))
			return pp->periods[i].period_ns;
	if (pp->s->ops->cpu_period && pp->s->ops->cpu_period(pp->s, node, &v))
		v = 0;
	n = realloc(pp->periods, (pp->nperiods + 1) * sizeof(*n));
	if (n) {
		pp->periods = n;
		n[pp->nperiods].node = strdup(node);
		n[pp->nperiods].period_ns = v;
		if (n[pp->nperiods].node)
			pp->nperiods++;
	}
	return v;
}

/* Splits a "*" group value into string labels and numeric pid/tid labels, in place in buf. */
static void pp_labels(char *buf, struct label *sl, size_t *ns, struct pprof_num_label *nl,
		      size_t *nn, const char **ret_node)
{
	char *p = buf;

	*ns = *nn = 0;
	*ret_node = "";
	while (p && *p) {
		char *next = strchr(p, STORE_GROUP_SEP[0]), *eq;

		if (next)
			*next++ = 0;
		eq = strchr(p, '=');
		if (eq) {
			char *end;
			long long v;

			*eq = 0;
			v = strtoll(eq + 1, &end, 10);
			if ((!strcmp(p, "pid") || !strcmp(p, "tid")) && eq[1] && !*end &&
			    *nn < PP_MAX_LABELS)
				nl[(*nn)++] = (struct pprof_num_label){ p, v, NULL };
			else if (*ns < PP_MAX_LABELS)
				sl[(*ns)++] = (struct label){ p, eq + 1 };
			if (!strcmp(p, "node"))
				*ret_node = eq + 1;
		}
		p = next;
	}
}

/* Pass 1: weight of each stack's outermost program module (pprof tools name a profile after
 * its first mapping, which should be the program, not the dynamic loader or libc). */
static int pp_count_roots(void *ctx, uint64_t id, const struct frame *f, size_t nf)
{
	struct pp *pp = ctx;
	uint64_t *h = u64map_find(&pp->g->head, id), w = 0;
	int64_t k;

	/* the outermost frame in a program: a file that is not a shared library ("[vdso]",
	 * "[truncated]", "libc.so.6" are not) */
	while (nf) {
		const char *m = f[nf - 1].module, *base = m ? strrchr(m, '/') : NULL;

		base = base ? base + 1 : m;
		if (!f[nf - 1].kernel && base && *base && *base != '[' && !strstr(base, ".so"))
			break;
		nf--;
	}
	if (!nf)
		return 0;
	for (uint64_t i = h ? *h : 0; i; i = pp->g->e[i - 1].next)
		w += pp->g->e[i - 1].v;
	k = strtab_intern(&pp->roots, f[nf - 1].module);
	if (k < 0)
		return (int)k;
	if ((size_t)k >= pp->nroots) {
		uint64_t *nw = realloc(pp->root_w, ((size_t)k + 1) * sizeof(*nw));
		char **nb = nw ? realloc(pp->root_bid, ((size_t)k + 1) * sizeof(*nb)) : NULL;

		if (nw)
			pp->root_w = nw;
		if (!nb)
			return -ENOMEM;
		pp->root_bid = nb;
		for (size_t j = pp->nroots; j <= (size_t)k; j++) {
			pp->root_w[j] = 0;
			pp->root_bid[j] = NULL;
		}
		pp->nroots = (size_t)k + 1;
	}
	if (!pp->root_bid[k] && f[nf - 1].build_id && *f[nf - 1].build_id)
		pp->root_bid[k] = strdup(f[nf - 1].build_id);
	pp->root_w[k] += w;
	return 0;
}

/* Orders a stack's entries by their group's labels (pp_add_stack()). */
static int cmp_pp_group(const void *a, const void *b, void *ctx)
{
	const struct pp *pp = ctx;
	const struct gent *x = &pp->g->e[*(const uint32_t *)a];
	const struct gent *y = &pp->g->e[*(const uint32_t *)b];
	size_t n = pp->groups->len;

	return strcmp(x->group && x->group <= n ? pp->groups->strs[x->group - 1] : "",
		      y->group && y->group <= n ? pp->groups->strs[y->group - 1] : "");
}

/*
 * A stack's samples, one per group (series) with a value, in the order of their labels: the
 * answer's bytes depend on what the store holds, not on the order it found the samples in.
 */
static int pp_add_stack(void *ctx, uint64_t id, const struct frame *f, size_t nf)
{
	struct pp *pp = ctx;
	uint64_t *h = u64map_find(&pp->g->head, id);
	struct label sl[PP_MAX_LABELS];
	struct pprof_num_label nl[PP_MAX_LABELS];
	char lbuf[4096];
	uint32_t *order;
	size_t n = 0;
	int err = 0;

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
	for (uint64_t i = h ? *h : 0; i; i = pp->g->e[i - 1].next)
		n++;
	order = malloc((n ? n : 1) * sizeof(*order));
	if (!order)
		return -ENOMEM;
	n = 0;
	for (uint64_t i = h ? *h : 0; i; i = pp->g->e[i - 1].next)
		if (pp->g->e[i - 1].v)
			order[n++] = (uint32_t)(i - 1);
	qsort_r(order, n, sizeof(*order), cmp_pp_group, pp);
	for (size_t k = 0; k < n && !err; k++) {
		const struct gent *e = &pp->g->e[order[k]];
		const char *gv = e->group && e->group <= pp->groups->len ?
					 pp->groups->strs[e->group - 1] : "";
		const char *node;
		int64_t values[2];
		size_t ns, nn;

		snprintf(lbuf, sizeof(lbuf), "%s", gv);
		pp_labels(lbuf, sl, &ns, nl, &nn, &node);
		values[0] = (int64_t)e->v;
		values[1] = (int64_t)(e->v * pp_period(pp, node));
		err = pprof__sample(pp->p, pp->locs, nf, values, sl, ns, nl, nn);
	}
	free(order);
	return err;
}

/*
 * Like `gpuscope-agent record`'s: CPU profiles carry samples/count and cpu/nanoseconds (each
 * sample's count times its node's sampling period; Period is that period), other kinds their
 * nanoseconds; every sample has the labels of its series (pid and tid numeric).
 */
int query_pprof(struct store *s, const struct store_query *q, uint8_t **ret, size_t *ret_len)
{
	struct pprof_value_type vt[2] = { { "samples", "count" }, { "cpu", "nanoseconds" } };
	struct pprof_value_type pt = { "cpu", "nanoseconds" };
	struct store_query qa = *q;
	struct strtab groups = { 0 };
	struct gagg g = { .grouped = true };
	struct u64map agg = { 0 };
	struct pp pp = { .s = s, .g = &g, .groups = &groups };
	struct idle_tally it = { 0 };
	uint64_t period = 0;
	size_t best = SIZE_MAX;
	int err;

	qa.group_by = "*";
	qa.groups = &groups;
	qa.step_ns = 0;
	qa.emit = gagg_emit;
	qa.emit_ctx = &g;
	qa.idle = &it;
	err = s->ops->aggregate(s, &qa, &agg);
	if (err)
		goto out;
	pp.cpu = q->kind == SAMPLE_CPU;
	if (pp.cpu) {
		/* Period: the first node's that is known (one node per profile, mostly). */
		for (size_t i = 0; i < groups.len && !period; i++) {
			const char *n = strstr(groups.strs[i], "node=");

			if (n && (n == groups.strs[i] || n[-1] == STORE_GROUP_SEP[0])) {
				char node[256];

				snprintf(node, sizeof(node), "%.*s", (int)strcspn(n + 5, STORE_GROUP_SEP),
					 n + 5);
				period = pp_period(&pp, node);
			}
		}
	} else {
		vt[0] = (struct pprof_value_type){ sample_kind_name(q->kind), "nanoseconds" };
		pt = vt[0];
	}
	/* Without a known period a cpu/nanoseconds column would be made up: samples only. */
	pp.p = pprof__new(vt, pp.cpu && period ? 2 : 1, pt, pp.cpu ? (int64_t)period : 0,
			  q->from_ns, q->to_ns - q->from_ns);
	pp.locs = malloc(BATCH_MAX_DEPTH * sizeof(*pp.locs));
	if (!pp.p || !pp.locs) {
		err = -ENOMEM;
		goto out;
	}
	/* stacks by id, each one's samples by labels (pp_add_stack()): the same answer from
	 * the same data, whatever order the store found it in */
	qsort(g.ids, g.nids, sizeof(*g.ids), cmp_u64);
	err = s->ops->stacks(s, g.ids, g.nids, pp_count_roots, &pp);
	for (size_t i = 0; !err && i < pp.nroots; i++)
		if (best == SIZE_MAX || pp.root_w[i] > pp.root_w[best])
			best = i;
	if (!err && best != SIZE_MAX)
		err = pprof__main_mapping(pp.p, pp.roots.strs[best], pp.root_bid[best]);
	if (!err && q->gpu_idle >= 0 && it.set) {
		char text[512];

		query_idle_summary(&it, q->gpu_idle, text, sizeof(text));
		err = pprof__comment(pp.p, text);
	}
	if (!err)
		err = s->ops->stacks(s, g.ids, g.nids, pp_add_stack, &pp);
	if (!err)
		err = pprof__encode_gz(pp.p, ret, ret_len);
out:
	pprof__free(pp.p);
	free(pp.locs);
	for (size_t i = 0; i < pp.nperiods; i++)
		free(pp.periods[i].node);
	free(pp.periods);
	for (size_t i = 0; i < pp.nroots; i++)
		free(pp.root_bid[i]);
	free(pp.root_bid);
	free(pp.root_w);
	strtab_done(&pp.roots);
	strtab_done(&groups);
	gagg_done(&g);
	u64map_done(&agg);
	return err;
}

