/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The findings engine (insights.h): every workload of the efficiency answer, each GPU it held
 * through the gatherer and the detectors, the findings of a kind merged per workload, ranked by
 * dollars and GPU-seconds at stake, and written as the /api/v1/insights answer.
 */
#include "server/insights/ins_int.h"

struct run_ctx {
	struct insights *in;
	const struct insights_request *r;
	const char *by;
	struct findings *out;
	size_t workloads;
	struct buf *facts;		/* facts=1: each workload GPU's facts, comma-separated */
};

/* Folds a finding into an earlier one of the same kind and workload (another GPU). */
static void merge(struct findings *fs, size_t from)
{
	for (size_t i = from; i < fs->n;) {
		struct finding *x = &fs->v[i];
		size_t k = 0;

		while (k < i && !(fs->v[k].kind == x->kind && !strcmp(fs->v[k].workload, x->workload)))
			k++;
		if (k == i) {
			i++;
			continue;
		}
		{
			struct finding *y = &fs->v[k];
			double stake = x->stake_s + y->stake_s;
			double dollars = isnan(x->dollars) || isnan(y->dollars) ?
					 (isnan(x->dollars) ? y->dollars : x->dollars) :
					 x->dollars + y->dollars;
			double share = x->share_of_held + y->share_of_held;

			if (x->stake_s > y->stake_s)
				*y = *x;	/* the larger one's evidence speaks */
			y->stake_s = stake;
			y->dollars = dollars;
			y->share_of_held = share;
			y->has_gpu = false;
		}
		memmove(x, x + 1, (fs->n - i - 1) * sizeof(*x));
		fs->n--;
	}
}

/* f's fields from the request and the workload's GPU time on g. */
static void facts_init(struct ins_facts *f, const struct run_ctx *c, const struct eff_workload *w,
		       const struct eff_wl_gpu *g)
{
	memset(f, 0, sizeof(*f));
	f->from_ns = c->r->from_ns;
	f->to_ns = c->r->to_ns;
	f->ev_to_ns = f->to_ns;
	f->ev_from_ns = f->to_ns - f->from_ns > INS_EVIDENCE_MAX_NS ?
			f->to_ns - INS_EVIDENCE_MAX_NS : f->from_ns;
	f->by = c->by;
	f->workload = w->key;
	f->wl_selector = w->selector;
	f->node = g->node;
	f->gpu = g->gpu;
	f->model = g->model;
	f->price = g->price;
	f->wl_held_s = w->t.held / 1e9;
	f->held_s = g->t.held / 1e9;
	for (int s = 0; s < EFF_SRC_MAX; s++) {
		f->busy_s += g->t.busy[s] / 1e9;
		f->idle_s += g->t.idle[s] / 1e9;
	}
	f->unknown_s = g->t.unknown / 1e9;
}

/*
 * Every workload: the GPUs idle enough for CPU-side evidence first, their idle pieces read in
 * one pass (not one per GPU: each pass reads every GPU's series), then each workload's GPUs
 * through the gatherer and the detectors.
 */
static int all_workloads(void *ctx, const struct eff_workload *ws, size_t n)
{
	struct run_ctx *c = ctx;
	struct ins_facts *f = malloc(sizeof(*f));
	struct eff_piece_set *ps = NULL;
	struct ins_cache *cache = NULL;
	uint32_t *want = NULL;
	size_t nwant = 0, cap = 0;
	int err = f ? 0 : -ENOMEM;

	c->workloads = n;
	for (size_t i = 0; i < n && !err; i++) {
		for (size_t k = 0; k < ws[i].ngpus && !err; k++) {
			facts_init(f, c, &ws[i], &ws[i].gpus[k]);
			if (!ins_wants_cpu_side(f))
				continue;
			if (array_reserve(&want, &cap, nwant + 1, sizeof(*want), 64))
				err = -ENOMEM;
			else
				want[nwant++] = ws[i].gpus[k].id;
		}
	}
	if (!err) {
		uint64_t from = c->r->from_ns, to = c->r->to_ns;

		if (to - from > INS_EVIDENCE_MAX_NS)
			from = to - INS_EVIDENCE_MAX_NS;
		ps = efficiency_idle_pieces(c->in->e, from, to, want, nwant);
		if (!ps)
			err = -errno;
	}
	if (!err) {
		cache = ins_cache_new();
		if (!cache)
			err = -ENOMEM;
	}
	for (size_t i = 0; i < n && !err; i++) {
		size_t first = c->out->n;

		for (size_t k = 0; k < ws[i].ngpus && !err; k++) {
			facts_init(f, c, &ws[i], &ws[i].gpus[k]);
			err = ins_gather(c->in, ps, cache, &ws[i], &ws[i].gpus[k], f);
			if (err == -ENAMETOOLONG) {
				/* a label value too long for the evidence's selectors: the GPU
				 * time speaks, the CPU side stays silent */
				f->cpu_side = false;
				err = 0;
			}
			if (!err)
				err = ins_detect(f, c->out);
			if (!err && c->facts) {
				if (c->facts->len)
					buf_put(c->facts, ",", 1);
				ins_facts_json(c->facts, f);
			}
		}
		if (!err)
			merge(c->out, first);
	}
	efficiency_piece_set_free(ps);
	ins_cache_free(cache);
	free(want);
	free(f);
	return err;
}

static int cmp_find(const void *a, const void *b)
{
	const struct finding *x = a, *y = b;
	/* as the answer rounds them, so that equal-looking findings rank by name */
	double dx = isnan(x->dollars) ? -1 : round(x->dollars * 10000);
	double dy = isnan(y->dollars) ? -1 : round(y->dollars * 10000);
	double sx = round(x->stake_s * 1000), sy = round(y->stake_s * 1000);
	int k;

	if (dx != dy)
		return dx < dy ? 1 : -1;
	if (sx != sy)
		return sx < sy ? 1 : -1;
	k = strcmp(x->workload, y->workload);
	return k ? k : (int)x->kind - (int)y->kind;
}

int ins_run(struct insights *in, const struct insights_request *r, struct findings *out,
	    struct buf *facts, size_t *ret_workloads, char *err, size_t errlen)
{
	struct eff_request er = { r->from_ns, r->to_ns, r->by, r->selector, 0 };
	struct run_ctx c = { in, r, r->by && *r->by ? r->by : "namespace", out, 0, facts };
	int rc;

	rc = efficiency_workloads(in->e, &er, all_workloads, &c, err, errlen);
	if (rc == -ENODATA)
		snprintf(err, errlen, "no GPU data between the range's from and to: findings need "
			 "the GPU time of the workloads (agents with GPUs, or another range)");
	if (rc)
		return rc;
	qsort(out->v, out->n, sizeof(*out->v), cmp_find);
	*ret_workloads = c.workloads;
	return 0;
}

static void json_finding(struct buf *b, const struct finding *x)
{
	const char *kind = ins_kind_names[x->kind];

	buf_puts(b, "{\"id\":");
	{
		char id[400];

		snprintf(id, sizeof(id), "%s:%s", kind, x->workload);
		buf_json_str(b, id);
	}
	buf_puts(b, ",\"kind\":");
	buf_json_str(b, kind);
	buf_puts(b, ",\"title\":");
	buf_json_str(b, x->title);
	buf_puts(b, ",\"workload\":");
	buf_json_str(b, x->workload);
	buf_puts(b, ",\"selector\":");
	buf_json_str(b, x->selector);
	buf_puts(b, ",\"node\":");
	buf_json_str(b, x->node);
	buf_puts(b, ",\"gpu\":");
	if (x->has_gpu)
		buf_json_str(b, x->gpu);
	else
		buf_puts(b, "null");
	buf_puts(b, ",\"gpu_seconds_at_stake\":");
	buf_json_num(b, round(x->stake_s * 1000) / 1000);
	buf_puts(b, ",\"dollars_at_stake\":");
	if (isnan(x->dollars))
		buf_puts(b, "null");
	else
		buf_json_num(b, round(x->dollars * 10000) / 10000);
	buf_puts(b, ",\"share_of_held\":");
	buf_json_num(b, round(x->share_of_held * 10000) / 10000);
	buf_puts(b, ",\"confidence\":");
	buf_json_str(b, x->confidence);
	buf_puts(b, ",\"estimated_share\":");
	buf_json_num(b, round(x->est_share * 10000) / 10000);
	buf_puts(b, ",\"summary\":");
	buf_json_str(b, x->summary);
	buf_puts(b, ",\"recommendation\":");
	buf_json_str(b, x->recommendation);
	buf_puts(b, ",\"evidence\":[");
	for (size_t i = 0; i < x->nev; i++) {
		buf_puts(b, i ? ",{\"label\":" : "{\"label\":");
		buf_json_str(b, x->ev[i].label);
		buf_puts(b, ",\"value\":");
		buf_json_num(b, round(x->ev[i].value * 1e6) / 1e6);
		buf_puts(b, ",\"unit\":");
		buf_json_str(b, x->ev[i].unit);
		buf_puts(b, ",\"api\":");
		buf_json_str(b, x->ev[i].api);
		buf_puts(b, ",\"ui\":");
		buf_json_str(b, x->ev[i].ui);
		buf_puts(b, "}");
	}
	buf_puts(b, "]}");
}

int insights_query(struct insights *in, const struct insights_request *r, struct buf *out,
		   char *err, size_t errlen)
{
	struct findings fs = { 0 };
	struct buf facts = { 0 };
	size_t nwl = 0, n, est = 0;
	int rc;

	rc = ins_run(in, r, &fs, r->facts ? &facts : NULL, &nwl, err, errlen);
	if (rc)
		goto out;
	n = r->limit && r->limit < fs.n ? r->limit : fs.n;
	buf_puts(out, "{\"from_ms\":");
	buf_json_ms(out, r->from_ns);
	buf_puts(out, ",\"to_ms\":");
	buf_json_ms(out, r->to_ns);
	buf_puts(out, ",\"by\":");
	buf_json_str(out, r->by && *r->by ? r->by : "namespace");
	buf_puts(out, ",\"selector\":");
	buf_json_str(out, r->selector ? r->selector : "");
	buf_puts(out, ",\"findings\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			buf_put(out, ",", 1);
		json_finding(out, &fs.v[i]);
		est += !strcmp(fs.v[i].confidence, "estimated");
	}
	buf_printf(out, "],\"workloads_checked\":%zu,\"estimate\":{\"summary\":", nwl);
	{
		char s[300];

		if (!n)
			snprintf(s, sizeof(s), "no findings");
		else if (!est)
			snprintf(s, sizeof(s), "every finding rests on measured GPU time (sources "
				 "decided it where it was taken)");
		else
			snprintf(s, sizeof(s), "%zu of %zu findings rest mostly on estimated GPU-idle "
				 "samples (trace windows standing for time no source decided; "
				 "docs/estimator.md)", est, n);
		buf_json_str(out, s);
	}
	buf_puts(out, "}");
	if (r->facts) {
		buf_puts(out, ",\"facts\":[");
		if (facts.len)
			buf_put(out, facts.p, facts.len);
		buf_puts(out, "]");
		if (facts.oom)
			rc = -ENOMEM;
	}
	buf_puts(out, "}");
	if (out->oom)
		rc = -ENOMEM;
out:
	buf_done(&facts);
	free(fs.v);
	return rc;
}

struct insights *insights_new(struct store *st, struct efficiency *e,
			      const struct insights_cfg *cfg)
{
	struct insights *in = calloc(1, sizeof(*in));

	if (!in)
		return NULL;
	in->st = st;
	in->e = e;
	in->cfg = *cfg;
	in->prom = ins_prom_new();
	if (!in->prom) {
		free(in);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&in->mu, NULL);
	return in;
}

void insights_free(struct insights *in)
{
	if (!in)
		return;
	ins_prom_free(in->prom);
	pthread_mutex_destroy(&in->mu);
	free(in);
}

int insights_metrics(struct insights *in, FILE *out)
{
	uint64_t now = wall_ns(), end;
	int err = 0;

	pthread_mutex_lock(&in->mu);
	end = now > in->cfg.settle_ns ? (now - in->cfg.settle_ns) / NSEC_PER_MSEC * NSEC_PER_MSEC :
	      0;
	err = ins_prom_count(in, end);
	if (err)
		log_warn("insights: /metrics window: %s, counted at the next scrape",
			 strerror(-err));
	ins_prom_write(in->prom, out);
	pthread_mutex_unlock(&in->mu);
	return 0;
}
