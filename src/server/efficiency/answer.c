/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU efficiency's answer: prices, holders' labels, grouping by a workload label, the JSON of
 * GET /api/v1/efficiency and the windows the exporter reads.
 */
#include "server/efficiency/eff_int.h"

static const char *const src_names[EFF_SRC_MAX] = { "kernels", "gpm", "nvml" };
/* Labels a workload may be grouped by without being seen first. */
static const char *const known_by[] = {
	"namespace", "pod", "container", "owner", "owner_kind", "kubeflow_job",
	"kubeflow_replica_type", "ray_cluster", "ray_group", "comm", "program", "cmdline", "pid",
	"node", "systemd_unit",
};
/* CPU-side labels that are not the process's (one per thread or per interval). */
static const char *const thread_labels[] = { "tid", "thread", "ns_pid", "gpu", "gpu_uuid" };
/* ---- prices ------------------------------------------------------------------------------- */

int eff_cfg_add_price(struct eff_cfg *c, const char *arg, char *err, size_t errlen)
{
	const char *eq = strrchr(arg, '='), *num = eq ? eq + 1 : arg;
	struct eff_price *n;
	char *end;
	double v;

	errno = 0;
	v = strtod(num, &end);
	if (!*num || *end || errno || !isfinite(v) || v < 0) {
		snprintf(err, errlen, "--gpu-hour-price: '%s' is not a price (3.50, or 'MODEL=3.50')",
			 arg);
		return -EINVAL;
	}
	if (eq && eq == arg) {
		snprintf(err, errlen, "--gpu-hour-price: '%s' has an empty model name", arg);
		return -EINVAL;
	}
	n = realloc(c->prices, (c->nprices + 1) * sizeof(*n));
	if (!n) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	c->prices = n;
	n[c->nprices].model = eq ? strndup(arg, (size_t)(eq - arg)) : NULL;
	n[c->nprices].dollars = v;
	if (eq && !n[c->nprices].model) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	c->nprices++;
	return 0;
}

void eff_cfg_done(struct eff_cfg *c)
{
	for (size_t i = 0; i < c->nprices; i++)
		free(c->prices[i].model);
	free(c->prices);
	c->prices = NULL;
	c->nprices = 0;
}

/* Dollars per GPU-hour for a model: its own price, else the default; NAN when neither. */
static double price_of(const struct eff_cfg *c, const char *model)
{
	double dflt = NAN;

	for (size_t i = 0; i < c->nprices; i++) {
		if (!c->prices[i].model)
			dflt = c->prices[i].dollars;
		else if (model && !strcmp(model, c->prices[i].model))
			return c->prices[i].dollars;
	}
	return dflt;
}

/* ---- holder labels ------------------------------------------------------------------------ */


struct resolve {
	struct efficiency *e;
	struct hlabels *hl;
	const uint8_t *want;		/* holder id -> needed */
	size_t nwant;
	size_t *best;			/* holder id -> pairs kept so far */
};

static bool is_thread_label(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(thread_labels); i++)
		if (!strcmp(name, thread_labels[i]))
			return true;
	return false;
}

/* Copies pairs (minus thread labels) into one allocation: pointers, then the strings. */
static char **pack_pairs(const char *const *pairs, size_t n, size_t *ret_n)
{
	size_t bytes = 0, k = 0;
	char **out, *p;

	for (size_t i = 0; i < n; i++)
		if (!is_thread_label(pairs[2 * i]))
			bytes += strlen(pairs[2 * i]) + strlen(pairs[2 * i + 1]) + 2;
	out = malloc(2 * n * sizeof(char *) + bytes + 1);
	if (!out)
		return NULL;
	p = (char *)(out + 2 * n);
	for (size_t i = 0; i < n; i++) {
		if (is_thread_label(pairs[2 * i]))
			continue;
		for (int j = 0; j < 2; j++) {
			size_t l = strlen(pairs[2 * i + j]) + 1;

			memcpy(p, pairs[2 * i + j], l);
			out[2 * k + j] = p;
			p += l;
		}
		k++;
	}
	*ret_n = k;
	return out;
}

static int resolve_set(void *ctx, const char *const *pairs, size_t n)
{
	struct resolve *r = ctx;
	const char *pid = eff_pair_get(pairs, n, "pid"), *node = eff_pair_get(pairs, n, "node");
	uint64_t id;

	if (!*pid || *eff_pair_get(pairs, n, "gpu"))
		return 0;
	pthread_mutex_lock(&r->e->tmu);
	id = eff_holder_find(r->e, node, pid, eff_pair_get(pairs, n, "comm"));
	if (!id)	/* the GPU side could not read the process's comm */
		id = eff_holder_find(r->e, node, pid, "");
	pthread_mutex_unlock(&r->e->tmu);
	if (!id || id >= r->nwant || !r->want[id] || n <= r->best[id])
		return 0;
	free(r->hl->pairs[id]);
	r->hl->pairs[id] = pack_pairs(pairs, n, &r->hl->n[id]);
	if (!r->hl->pairs[id])
		return -ENOMEM;
	r->best[id] = n;
	return 0;
}

/*
 * Labels of every holder in want: the CPU-side label set of the same node, pid and comm with
 * the most labels (pod, namespace, ...), else node/pid/comm alone.
 */
static int resolve_labels(struct efficiency *e, uint64_t from, uint64_t to, const uint8_t *want,
			  size_t nwant, struct hlabels *hl)
{
	struct resolve r = { e, hl, want, nwant, calloc(nwant ? nwant : 1, sizeof(size_t)) };
	int err;

	hl->pairs = calloc(nwant ? nwant : 1, sizeof(*hl->pairs));
	hl->n = calloc(nwant ? nwant : 1, sizeof(*hl->n));
	hl->cap = nwant;
	if (!r.best || !hl->pairs || !hl->n) {
		free(r.best);
		return -ENOMEM;
	}
	/* A wide range: a short window may end before the process's first CPU record. */
	err = e->st->ops->label_sets(e->st, from > HOUR_NS ? from - HOUR_NS : 0, to + HOUR_NS,
				     NULL, resolve_set, &r);
	for (size_t id = 1; id < nwant && !err; id++) {
		const struct holder_info *h;
		const char *p[6];

		if (!want[id] || hl->pairs[id])
			continue;
		pthread_mutex_lock(&e->tmu);
		h = &e->holders[id - 1];
		p[0] = "comm", p[1] = h->comm, p[2] = "node", p[3] = h->node, p[4] = "pid";
		p[5] = h->pid;
		if (*h->comm)
			hl->pairs[id] = pack_pairs(p, 3, &hl->n[id]);
		else
			hl->pairs[id] = pack_pairs(p + 2, 2, &hl->n[id]);
		pthread_mutex_unlock(&e->tmu);
		if (!hl->pairs[id])
			err = -ENOMEM;
	}
	free(r.best);
	return err;
}

static void hlabels_done(struct hlabels *hl)
{
	for (size_t i = 0; i < hl->cap; i++)
		free(hl->pairs[i]);
	free(hl->pairs);
	free(hl->n);
}

/* ---- grouping ----------------------------------------------------------------------------- */

double eff_idle_of(const struct eff_tally *t)
{
	double s = 0;

	for (int i = 0; i < EFF_SRC_MAX; i++)
		s += t->idle[i];
	return s;
}

static double busy_of(const struct eff_tally *t)
{
	double s = 0;

	for (int i = 0; i < EFF_SRC_MAX; i++)
		s += t->busy[i];
	return s;
}

static void ans_done(struct eff_ans *a)
{
	for (size_t i = 0; i < a->nrows; i++) {
		free(a->rows[i].key);
		free(a->rows[i].g);
		free(a->rows[i].holders);
		free(a->rows[i].common);
	}
	free(a->rows);
	free(a->unheld);
	hlabels_done(&a->hl);
}

static int row_add_gpu(struct row *r, uint32_t gpu, const struct eff_tally *t)
{
	for (size_t i = 0; i < r->ng; i++) {
		if (r->g[i].gpu == gpu) {
			eff_tally_add(&r->g[i].t, t, 1);
			return 0;
		}
	}
	{
		struct row_gpu *n = realloc(r->g, (r->ng + 1) * sizeof(*n));

		if (!n)
			return -ENOMEM;
		r->g = n;
		r->g[r->ng++] = (struct row_gpu){ gpu, *t };
	}
	return 0;
}

static int row_add_holder(struct row *r, uint32_t h)
{
	uint32_t *n;

	for (size_t i = 0; i < r->nholders; i++)
		if (r->holders[i] == h)
			return 0;
	n = realloc(r->holders, (r->nholders + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	r->holders = n;
	r->holders[r->nholders++] = h;
	return 0;
}

/* Label pairs of an entry for the selector: the holder's and the GPU's. */
static size_t entry_pairs(struct efficiency *e, const struct eff_ans *a, uint32_t gpu,
			  uint32_t holder, const char **out, size_t max)
{
	const struct gpu_info *g = &e->gpus[gpu];
	size_t n = 0;

	if (holder && holder < a->nwant && a->hl.pairs[holder]) {
		for (size_t i = 0; i < a->hl.n[holder] && n + 4 < max; i++) {
			out[2 * n] = a->hl.pairs[holder][2 * i];
			out[2 * n + 1] = a->hl.pairs[holder][2 * i + 1];
			n++;
		}
	} else {
		out[2 * n] = "node";
		out[2 * n + 1] = g->node;
		n++;
	}
	out[2 * n] = "gpu", out[2 * n + 1] = g->gpu, n++;
	out[2 * n] = "gpu_uuid", out[2 * n + 1] = g->uuid ? g->uuid : "", n++;
	out[2 * n] = "gpu_model", out[2 * n + 1] = g->model ? g->model : "", n++;
	return n;
}

static int cmp_rows(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	double ix = isnan(x->idle_dollars) ? -1 : x->idle_dollars;
	double iy = isnan(y->idle_dollars) ? -1 : y->idle_dollars;

	if (ix != iy)
		return ix < iy ? 1 : -1;
	if (eff_idle_of(&x->t) != eff_idle_of(&y->t))
		return eff_idle_of(&x->t) < eff_idle_of(&y->t) ? 1 : -1;
	return strcmp(x->key, y->key);
}

static int cmp_unheld(const void *a, const void *b, void *ctx)
{
	const struct row_gpu *x = a, *y = b;
	const struct efficiency *e = ctx;
	int c = strcmp(e->gpus[x->gpu].node, e->gpus[y->gpu].node);

	if (c)
		return c;
	c = (int)(strtol(e->gpus[x->gpu].gpu, NULL, 10) - strtol(e->gpus[y->gpu].gpu, NULL, 10));
	return c ? c : strcmp(e->gpus[x->gpu].gpu, e->gpus[y->gpu].gpu);
}

/* Groups the tallies by the `by` label (holders) and by GPU (unheld); prices them. */
static int group(struct efficiency *e, struct acc *acc, const char *by, const struct selector *sel,
		 uint64_t from, uint64_t to, struct eff_ans *a)
{
	uint8_t *want;
	struct u64map ridx = { 0 };
	struct strtab keys = { 0 };
	int err = 0;

	pthread_mutex_lock(&e->tmu);
	a->nwant = e->nholders + 1;
	pthread_mutex_unlock(&e->tmu);
	want = calloc(a->nwant, 1);
	if (!want)
		return -ENOMEM;
	for (size_t i = 0; i < acc->n; i++)
		if (acc->v[i].holder < a->nwant)
			want[acc->v[i].holder] = 1;
	err = resolve_labels(e, from, to, want, a->nwant, &a->hl);
	free(want);
	pthread_mutex_lock(&e->tmu);
	for (size_t i = 0; i < acc->n && !err; i++) {
		const struct hour_ent *en = &acc->v[i];
		const char *pairs[2 * (BATCH_MAX_LABELS + 8)];
		size_t np = entry_pairs(e, a, en->gpu, en->holder, pairs, BATCH_MAX_LABELS + 8);
		const struct gpu_info *g = &e->gpus[en->gpu];
		double price = price_of(&e->cfg, g->model);
		struct row *r;
		const char *v;
		int64_t k;
		uint64_t *slot;
		int ins;

		if (!selector_match(sel, pairs, np))
			continue;
		if (!en->holder) {
			struct row_gpu *n = realloc(a->unheld, (a->nunheld + 1) * sizeof(*n));

			if (!n) {
				err = -ENOMEM;
				break;
			}
			a->unheld = n;
			a->unheld[a->nunheld++] = (struct row_gpu){ en->gpu, en->t };
			continue;
		}
		v = eff_pair_get(pairs, np, by);
		k = strtab_intern(&keys, *v ? v : "\x01(none)");
		if (k < 0) {
			err = (int)k;
			break;
		}
		slot = u64map_upsert(&ridx, (uint64_t)k + 1, a->nrows, &ins);
		if (!slot) {
			err = -ENOMEM;
			break;
		}
		if (ins) {
			struct row *n = realloc(a->rows, (a->nrows + 1) * sizeof(*n));

			if (!n) {
				err = -ENOMEM;
				break;
			}
			a->rows = n;
			a->rows[a->nrows] = (struct row){ .key = strdup(*v ? v : "(none)"),
							  .none = !*v };
			if (!a->rows[a->nrows].key) {
				err = -ENOMEM;
				break;
			}
			a->nrows++;
		}
		r = &a->rows[*slot];
		eff_tally_add(&r->t, &en->t, 1);
		if (isnan(price)) {
			r->unpriced_ns += en->t.held;
		} else {
			r->held_dollars += en->t.held / HOUR_NS * price;
			r->idle_dollars += eff_idle_of(&en->t) / HOUR_NS * price;
		}
		err = row_add_gpu(r, en->gpu, &en->t);
		if (!err)
			err = row_add_holder(r, en->holder);
	}
	pthread_mutex_unlock(&e->tmu);
	strtab_done(&keys);
	u64map_done(&ridx);
	if (err)
		return err;
	for (size_t i = 0; i < a->nrows; i++)
		if (a->rows[i].unpriced_ns > 0 && a->rows[i].held_dollars == 0)
			a->rows[i].idle_dollars = a->rows[i].held_dollars = NAN;
	qsort(a->rows, a->nrows, sizeof(*a->rows), cmp_rows);
	qsort_r(a->unheld, a->nunheld, sizeof(*a->unheld), cmp_unheld, e);
	return 0;
}


/* ---- the answer --------------------------------------------------------------------------- */

/* ",{" (or "{" for the first, i == 0) and a GPU's node, index, model and deciding source. */
static void json_gpu_open(struct buf *out, size_t i, const struct gpu_info *g,
			  const struct eff_tally *t)
{
	buf_printf(out, "%s{\"node\":", i ? "," : "");
	buf_json_str(out, g->node);
	buf_puts(out, ",\"gpu\":");
	buf_json_str(out, g->gpu);
	buf_puts(out, ",\"model\":");
	buf_json_str(out, g->model ? g->model : "");
	buf_puts(out, ",\"source\":");
	buf_json_str(out, eff_best_source(t));
}

static void json_hours(struct buf *b, const char *name, double ns)
{
	buf_printf(b, ",\"%s\":", name);
	buf_json_num(b, ns / (double)HOUR_NS);
}

static void json_dollars(struct buf *b, const char *name, double d)
{
	buf_printf(b, ",\"%s\":", name);
	if (isnan(d))
		buf_puts(b, "null");
	else
		buf_json_num(b, round(d * 1e6) / 1e6);
}

const char *eff_best_source(const struct eff_tally *t)
{
	int best = -1;
	double bv = 0;

	for (int i = 0; i < EFF_SRC_MAX; i++) {
		if (t->busy[i] + t->idle[i] > bv) {
			bv = t->busy[i] + t->idle[i];
			best = i;
		}
	}
	if (best < 0)
		return "unknown";
	return src_names[best];
}

static void json_tally(struct buf *b, const struct eff_tally *t)
{
	double busy = busy_of(t), idle = eff_idle_of(t);

	json_hours(b, "held_gpu_hours", t->held);
	json_hours(b, "busy_gpu_hours", busy);
	json_hours(b, "idle_gpu_hours", idle);
	json_hours(b, "unknown_gpu_hours", t->unknown);
	buf_puts(b, ",\"utilization\":");
	if (busy + idle > 0)
		buf_json_num(b, busy / (busy + idle));
	else
		buf_puts(b, "null");
	buf_puts(b, ",\"sources\":{");
	for (int i = 0; i < EFF_SRC_MAX; i++) {
		buf_printf(b, "%s\"%s\":", i ? "," : "", src_names[i]);
		buf_json_num(b, (t->busy[i] + t->idle[i]) / (double)HOUR_NS);
	}
	buf_puts(b, "}");
}

static bool by_known(const char *by)
{
	for (size_t i = 0; i < ARRAY_SIZE(known_by); i++)
		if (!strcmp(by, known_by[i]))
			return true;
	return false;
}

static bool by_seen(const struct eff_ans *a, const char *by)
{
	for (size_t h = 1; h < a->nwant; h++)
		for (size_t i = 0; a->hl.pairs[h] && i < a->hl.n[h]; i++)
			if (!strcmp(a->hl.pairs[h][2 * i], by))
				return true;
	return false;
}

/*
 * What efficiency_query() and efficiency_workloads() share: checks by and the selector, gathers
 * the tallies of the range and groups them into a (sorted rows). 0 or -errno with a reason in
 * err (efficiency.h); *ret_by is the label grouped by. acc and a are the caller's to free.
 */
static int prepare(struct efficiency *e, const struct eff_request *rq, const char **ret_by,
		   struct acc *acc, struct eff_ans *a, uint64_t *ret_rolled_ns, char *err,
		   size_t errlen)
{
	const char *by = rq->by && *rq->by ? rq->by : "namespace";
	struct selector *sel = NULL;
	int rc;

	*ret_by = by;
	if (rq->by && !*rq->by) {
		/* by= (or by=%00): a client's mistake, not a request for the default */
		snprintf(err, errlen, "'by' is empty: name a label (namespace, pod, comm, ...) or "
			 "leave 'by' out");
		return -EINVAL;
	}
	if (strlen(by) > 64 || strspn(by, "abcdefghijklmnopqrstuvwxyz"
				   "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != strlen(by)) {
		snprintf(err, errlen, "'by' must be a label name, not '%.64s'", by);
		return -EINVAL;
	}
	if (rq->selector && *rq->selector) {
		sel = selector_parse(rq->selector, err, errlen);
		if (!sel)
			return -EINVAL;
		selector_set_deadline(sel, mono_ns() + 2 * NSEC_PER_SEC);
	}
	rc = eff_gather(e, rq->from_ns, rq->to_ns, acc, ret_rolled_ns);
	if (!rc && !acc->n) {
		snprintf(err, errlen, "no GPU data between the range's from and to");
		rc = -ENODATA;
		goto out;
	}
	if (!rc)
		rc = group(e, acc, by, sel, rq->from_ns, rq->to_ns, a);
	if (!rc && selector_failed(sel)) {
		/* An answer missing the label sets a regex gave up on is not served: -E2BIG (the
		 * caller answers 422, as every query path does), -ETIMEDOUT or -ENOMEM (503). */
		rc = selector_failed(sel);
		snprintf(err, errlen, rc == -E2BIG ?
			 "a regex of the selector exceeds its matching limits on a label value "
			 "(nested repetition?): simplify it" :
			 "matching the selector took more than 2 s: narrow the range or simplify "
			 "the regex");
	}
	if (rc)
		goto out;
	if (!by_known(by) && !by_seen(a, by)) {
		snprintf(err, errlen, "unknown label '%s' for 'by': no process holding a GPU has it"
			 " (namespace, pod, owner, kubeflow_job, ray_cluster, comm, program, pid, node,"
			 " ...)",
			 by);
		rc = -EINVAL;
	}
out:
	selector_free(sel);
	return rc;
}

int efficiency_query(struct efficiency *e, const struct eff_request *rq, struct buf *out,
		     char *err, size_t errlen)
{
	const char *by;
	struct eff_ans a = { 0 };
	struct acc acc = { 0 };
	struct eff_tally tot = { 0 }, unheld = { 0 };
	double idle_d = 0, unheld_d = 0, held_d = 0;
	uint64_t rolled_ns = 0;
	int rc;

	rc = prepare(e, rq, &by, &acc, &a, &rolled_ns, err, errlen);
	if (rc)
		goto out;
	buf_puts(out, "{\"from_ms\":");
	eff_json_ms(out, rq->from_ns);
	buf_puts(out, ",\"to_ms\":");
	eff_json_ms(out, rq->to_ns);
	buf_puts(out, ",\"by\":");
	buf_json_str(out, by);
	buf_puts(out, ",\"selector\":");
	buf_json_str(out, rq->selector ? rq->selector : "");
	buf_puts(out, ",\"rollup_hours\":");
	buf_json_num(out, (double)(rolled_ns / HOUR_NS));
	buf_puts(out, ",\"prices\":[");
	for (size_t i = 0; i < e->cfg.nprices; i++) {
		buf_printf(out, "%s{\"model\":", i ? "," : "");
		if (e->cfg.prices[i].model)
			buf_json_str(out, e->cfg.prices[i].model);
		else
			buf_puts(out, "null");
		buf_puts(out, ",\"dollars_per_gpu_hour\":");
		buf_json_num(out, e->cfg.prices[i].dollars);
		buf_puts(out, "}");
	}
	buf_puts(out, "],\"workloads\":[");
	for (size_t i = 0; i < a.nrows && !rc; i++) {
		struct row *r = &a.rows[i];
		struct buf sb = { 0 };

		eff_tally_add(&tot, &r->t, 1);
		if (!isnan(r->idle_dollars)) {
			idle_d += r->idle_dollars;
			held_d += r->held_dollars;
		}
		buf_printf(out, "%s{\"workload\":", i ? "," : "");
		buf_json_str(out, r->key);
		eff_row_selector(e, r, by, NULL, &sb);
		buf_puts(out, ",\"selector\":");
		buf_json_str(out, sb.oom ? "" : (char *)sb.p);
		buf_done(&sb);
		buf_printf(out, ",\"processes\":%zu,\"holders\":[", r->nholders);
		pthread_mutex_lock(&e->tmu);
		for (size_t k = 0; k < r->nholders && k < 64; k++) {
			const struct holder_info *hi = &e->holders[r->holders[k] - 1];

			buf_printf(out, "%s{\"node\":", k ? "," : "");
			buf_json_str(out, hi->node);
			buf_puts(out, ",\"pid\":");
			buf_json_str(out, hi->pid);
			buf_puts(out, ",\"comm\":");
			buf_json_str(out, hi->comm);
			buf_puts(out, "}");
		}
		pthread_mutex_unlock(&e->tmu);
		buf_puts(out, "]");
		json_tally(out, &r->t);
		json_dollars(out, "held_dollars", r->held_dollars);
		json_dollars(out, "idle_dollars", r->idle_dollars);
		json_hours(out, "unpriced_gpu_hours", r->unpriced_ns);
		buf_puts(out, ",\"gpus\":[");
		pthread_mutex_lock(&e->tmu);
		for (size_t k = 0; k < r->ng; k++) {
			const struct gpu_info *g = &e->gpus[r->g[k].gpu];

			json_gpu_open(out, k, g, &r->g[k].t);
			json_tally(out, &r->g[k].t);
			buf_puts(out, "}");
		}
		pthread_mutex_unlock(&e->tmu);
		buf_puts(out, "]");
		if (i < rq->causes)
			rc = eff_causes(e, r, by, rq->from_ns, rq->to_ns, out);
		buf_puts(out, "}");
	}
	buf_puts(out, "],\"unheld\":[");
	pthread_mutex_lock(&e->tmu);
	for (size_t i = 0; i < a.nunheld; i++) {
		const struct gpu_info *g = &e->gpus[a.unheld[i].gpu];
		double price = price_of(&e->cfg, g->model);

		eff_tally_add(&unheld, &a.unheld[i].t, 1);
		unheld_d += isnan(price) ? 0 : a.unheld[i].t.held / HOUR_NS * price;
		json_gpu_open(out, i, g, &a.unheld[i].t);
		json_hours(out, "gpu_hours", a.unheld[i].t.held);
		json_hours(out, "busy_gpu_hours", busy_of(&a.unheld[i].t));
		json_dollars(out, "dollars", isnan(price) ? NAN : a.unheld[i].t.held / HOUR_NS * price);
		buf_puts(out, "}");
	}
	pthread_mutex_unlock(&e->tmu);
	buf_puts(out, "],\"totals\":{\"workloads\":");
	buf_json_num(out, (double)a.nrows);
	json_hours(out, "held_gpu_hours", tot.held);
	json_hours(out, "busy_gpu_hours", busy_of(&tot));
	json_hours(out, "idle_gpu_hours", eff_idle_of(&tot));
	json_hours(out, "unknown_gpu_hours", tot.unknown);
	json_hours(out, "unheld_gpu_hours", unheld.held);
	json_dollars(out, "held_dollars", e->cfg.nprices ? held_d : NAN);
	json_dollars(out, "idle_dollars", e->cfg.nprices ? idle_d : NAN);
	json_dollars(out, "unheld_dollars", e->cfg.nprices ? unheld_d : NAN);
	buf_puts(out, "}}");
	if (out->oom)
		rc = -ENOMEM;
out:
	ans_done(&a);
	eff_acc_done(&acc);
	return rc;
}

/* ---- workloads as structs (the insights engine) ----------------------------------------- */

int efficiency_workloads(struct efficiency *e, const struct eff_request *rq,
			 int (*cb)(void *ctx, const struct eff_workload *w), void *ctx, char *err,
			 size_t errlen)
{
	const char *by;
	struct eff_ans a = { 0 };
	struct acc acc = { 0 };
	uint64_t rolled_ns = 0;
	int rc;

	rc = prepare(e, rq, &by, &acc, &a, &rolled_ns, err, errlen);
	for (size_t i = 0; i < a.nrows && !rc; i++) {
		struct row *r = &a.rows[i];
		struct eff_wl_gpu *g = calloc(r->ng + 1, sizeof(*g));
		struct eff_wl_holder *h = calloc(r->nholders + 1, sizeof(*h));
		struct eff_workload w = { .key = r->key, .none = r->none, .t = r->t,
					  .held_dollars = r->held_dollars,
					  .idle_dollars = r->idle_dollars, .gpus = g, .ngpus = r->ng,
					  .holders = h, .nholders = r->nholders, .priv = r };
		struct buf sb = { 0 };

		eff_row_selector(e, r, by, NULL, &sb);
		if (!g || !h || sb.oom) {
			rc = -ENOMEM;
		} else {
			/* table strings are never freed while e lives */
			pthread_mutex_lock(&e->tmu);
			for (size_t k = 0; k < r->ng; k++) {
				const struct gpu_info *gi = &e->gpus[r->g[k].gpu];

				g[k] = (struct eff_wl_gpu){ gi->node, gi->gpu, gi->model ? gi->model : "",
							    r->g[k].gpu, r->g[k].t,
							    price_of(&e->cfg, gi->model) };
			}
			for (size_t k = 0; k < r->nholders; k++) {
				const struct holder_info *hi = &e->holders[r->holders[k] - 1];

				h[k] = (struct eff_wl_holder){ hi->node, hi->pid, hi->comm };
			}
			pthread_mutex_unlock(&e->tmu);
			w.selector = (const char *)sb.p;
			rc = cb(ctx, &w);
		}
		buf_done(&sb);
		free(g);
		free(h);
	}
	ans_done(&a);
	eff_acc_done(&acc);
	return rc;
}

/* ---- windows for the exporter ------------------------------------------------------------- */

int efficiency_window(struct efficiency *e, uint64_t from, uint64_t to,
		      int (*cb)(void *ctx, const struct eff_row *row), void *ctx)
{
	struct acc acc = { 0 };
	struct eff_ans a = { 0 };
	struct strtab keys = { 0 };
	struct eff_row *rows = NULL, unheld = { "", "", true };
	size_t nrows = 0;
	int err;

	err = eff_compute_raw(e, from, to, -1, &acc, NULL, NULL);
	if (!err && acc.n) {
		pthread_mutex_lock(&e->tmu);
		a.nwant = e->nholders + 1;
		pthread_mutex_unlock(&e->tmu);
		{
			uint8_t *want = calloc(a.nwant, 1);

			if (!want) {
				err = -ENOMEM;
				goto out;
			}
			for (size_t i = 0; i < acc.n; i++)
				want[acc.v[i].holder] = 1;
			err = resolve_labels(e, from, to, want, a.nwant, &a.hl);
			free(want);
		}
	}
	for (size_t i = 0; i < acc.n && !err; i++) {
		const struct hour_ent *en = &acc.v[i];
		double price;
		struct eff_row *r = &unheld;

		pthread_mutex_lock(&e->tmu);
		price = price_of(&e->cfg, e->gpus[en->gpu].model);
		pthread_mutex_unlock(&e->tmu);
		if (en->holder) {
			const char *const *p = (const char *const *)a.hl.pairs[en->holder];
			size_t n = a.hl.n[en->holder];
			const char *ns = eff_pair_get(p, n, "namespace"), *pod = eff_pair_get(p, n, "pod");
			char key[1024];
			int64_t k;

			snprintf(key, sizeof(key), "%s\x01%s", ns, pod);
			k = strtab_intern(&keys, key);
			if (k < 0) {
				err = (int)k;
				break;
			}
			if ((size_t)k == nrows) {
				struct eff_row *nr = realloc(rows, (nrows + 1) * sizeof(*nr));

				if (!nr) {
					err = -ENOMEM;
					break;
				}
				rows = nr;
				rows[nrows++] = (struct eff_row){ .namespace_ = ns, .pod = pod };
			}
			r = &rows[k];
			if (!isnan(price))
				r->idle_dollars += eff_idle_of(&en->t) / HOUR_NS * price;
		} else if (!isnan(price)) {
			r->unheld_dollars += en->t.held / HOUR_NS * price;
		}
		eff_tally_add(&r->t, &en->t, 1);
	}
	for (size_t i = 0; i < nrows && !err; i++)
		err = cb(ctx, &rows[i]);
	if (!err && unheld.t.held > 0)
		err = cb(ctx, &unheld);
out:
	free(rows);
	strtab_done(&keys);
	ans_done(&a);
	eff_acc_done(&acc);
	return err;
}
