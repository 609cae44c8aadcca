/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The findings' Prometheus counter: GPU-seconds at stake per finding kind and workload (the
 * namespace), counted over the windows between scrapes (each at least 5 minutes, at most an
 * hour), with the exporter's bounded cardinality: the top workloads by GPU-seconds at stake
 * since the server started have series of their own, the rest add to workload="other"; a
 * workload that drops out hands its counts to "other", so every kind's series add up.
 */
#include "server/insights/ins_int.h"
#include "common/prom.h"

#define MIN_WINDOW_NS	(300 * NSEC_PER_SEC)	/* a held GPU needs 60 s idle to count */
#define MAX_WINDOW_NS	(3600 * NSEC_PER_SEC)

struct pw {
	char *workload;
	double secs[INS_KIND_MAX];	/* counted while slotted */
	double rank_s;			/* at stake since start (the ranking) */
	bool slotted;
};

struct ins_prom {
	struct pw *w;
	size_t n, cap;
	double other[INS_KIND_MAX];
	uint64_t wm_ns;
	uint64_t windows, errors;
};

struct ins_prom *ins_prom_new(void)
{
	struct ins_prom *p = calloc(1, sizeof(*p));

	if (p)
		p->wm_ns = wall_ns() / NSEC_PER_MSEC * NSEC_PER_MSEC;
	return p;
}

void ins_prom_free(struct ins_prom *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++)
		free(p->w[i].workload);
	free(p->w);
	free(p);
}

static struct pw *pw_get(struct ins_prom *p, const char *wl)
{
	for (size_t i = 0; i < p->n; i++)
		if (!strcmp(p->w[i].workload, wl))
			return &p->w[i];
	if (array_reserve(&p->w, &p->cap, p->n + 1, sizeof(*p->w), 16))
		return NULL;
	memset(&p->w[p->n], 0, sizeof(*p->w));
	p->w[p->n].workload = strdup(wl);
	if (!p->w[p->n].workload)
		return NULL;
	return &p->w[p->n++];
}

static int cmp_rank(const void *a, const void *b)
{
	const struct pw *x = a, *y = b;

	if (x->rank_s != y->rank_s)
		return x->rank_s < y->rank_s ? 1 : -1;
	return strcmp(x->workload, y->workload);
}

/* Slots the top workloads; those leaving hand their counts to other; the ranking keeps at most
 * 8 x top + 64 workloads (the least dropped, their counts already in other). */
static void rerank(struct ins_prom *p, size_t top)
{
	qsort(p->w, p->n, sizeof(*p->w), cmp_rank);
	for (size_t i = 0; i < p->n; i++) {
		bool want = i < top && p->w[i].rank_s > 0;

		if (p->w[i].slotted && !want)
			for (int k = 0; k < INS_KIND_MAX; k++) {
				p->other[k] += p->w[i].secs[k];
				p->w[i].secs[k] = 0;
			}
		p->w[i].slotted = want;
	}
	while (p->n > 8 * top + 64) {
		struct pw *w = &p->w[--p->n];

		for (int k = 0; k < INS_KIND_MAX; k++)
			p->other[k] += w->secs[k];
		free(w->workload);
	}
}

int ins_prom_add(struct ins_prom *p, const struct findings *fs, size_t top)
{
	int err = 0;

	for (size_t i = 0; i < fs->n; i++) {
		struct pw *w = pw_get(p, fs->v[i].workload);

		if (!w)
			return -ENOMEM;
		w->rank_s += fs->v[i].stake_s;
	}
	rerank(p, top);
	for (size_t i = 0; i < fs->n && !err; i++) {
		struct pw *w = pw_get(p, fs->v[i].workload);

		if (!w)
			err = -ENOMEM;
		else if (w->slotted)
			w->secs[fs->v[i].kind] += fs->v[i].stake_s;
		else
			p->other[fs->v[i].kind] += fs->v[i].stake_s;
	}
	return err;
}

int ins_prom_count(struct insights *in, uint64_t end)
{
	struct ins_prom *p = in->prom;
	struct insights_request r = { 0 };
	struct findings fs = { 0 };
	size_t nwl = 0;
	char err_s[512];
	int err;

	if (end < p->wm_ns + MIN_WINDOW_NS)
		return 0;
	if (end > p->wm_ns + MAX_WINDOW_NS)
		end = p->wm_ns + MAX_WINDOW_NS;
	r.from_ns = p->wm_ns;
	r.to_ns = end;
	err = ins_run(in, &r, &fs, NULL, &nwl, err_s, sizeof(err_s));
	if (err == -ENODATA)
		err = 0;
	if (err) {
		p->errors++;
		free(fs.v);
		return err;
	}
	err = ins_prom_add(p, &fs, in->cfg.top);
	free(fs.v);
	p->wm_ns = end;
	p->windows++;
	return err;
}

void ins_prom_write(struct ins_prom *p, FILE *out)
{
	const char *name = "gpuscope_server_insight_gpu_seconds_total";

	prom_family(out, name, "counter",
		    "GPU-seconds at stake in findings (docs/insights.md) by kind and workload "
		    "(namespace; the top workloads by GPU-seconds at stake, the rest as \"other\").");
	for (size_t i = 0; i < p->n; i++) {
		if (!p->w[i].slotted)
			continue;
		for (int k = 0; k < INS_KIND_MAX; k++)
			if (p->w[i].secs[k] > 0)
				prom_sample(out, name,
					    (struct prom_label[]){ { "kind", ins_kind_names[k] },
								   { "workload", p->w[i].workload } },
					    2, p->w[i].secs[k]);
	}
	for (int k = 0; k < INS_KIND_MAX; k++)
		prom_sample(out, name,
			    (struct prom_label[]){ { "kind", ins_kind_names[k] },
						   { "workload", "other" } },
			    2, p->other[k]);
	prom_family(out, "gpuscope_server_insight_windows_total", "counter",
		    "Windows the findings counter looked at, and those that failed (retried).");
	prom_sample1_u64(out, "gpuscope_server_insight_windows_total", "result", "ok", p->windows);
	prom_sample1_u64(out, "gpuscope_server_insight_windows_total", "result", "error",
			 p->errors);
}
