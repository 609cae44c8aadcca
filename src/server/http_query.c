/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The query API: parameters (ranges, selectors, limits) and the GET handlers of docs/design.md
 * (flame graphs, top, pprof, labels, series, intervals, nodes, stacks, efficiency, /metrics).
 */
#include "server/http_int.h"
#include "server/insights.h"

/* ---- parameters --------------------------------------------------------------------------- */

struct params {
	struct store_query q, q2;
	struct selector *sel, *sel2;
	char err[256];
};

static void params_done(struct params *p)
{
	selector_free(p->sel);
	selector_free(p->sel2);
}

static int parse_range(struct MHD_Connection *c, const char *fk, const char *tk, uint64_t *from,
		       uint64_t *to, char *err, size_t errlen)
{
	const char *f = http_arg(c, fk), *t = http_arg(c, tk), *since = http_arg(c, "since");
	uint64_t now = wall_ns(), d;

	*to = now;
	if (t && parse_time_ns(t, to)) {
		snprintf(err, errlen, "'%s' is not a time (RFC 3339 or Unix seconds): '%s'", tk, t);
		return -EINVAL;
	}
	if (f) {
		if (parse_time_ns(f, from)) {
			snprintf(err, errlen, "'%s' is not a time (RFC 3339 or Unix seconds): '%s'",
				 fk, f);
			return -EINVAL;
		}
	} else {
		d = 3600 * NSEC_PER_SEC;
		if (since && parse_duration_ns(since, &d)) {
			snprintf(err, errlen, "'since' is not a duration: '%s'", since);
			return -EINVAL;
		}
		*from = *to > d ? *to - d : 0;
	}
	if (*from > *to) {
		snprintf(err, errlen, "'%s' is after '%s'", fk, tk);
		return -EINVAL;
	}
	if (*to > INT64_MAX || *from > INT64_MAX) {
		snprintf(err, errlen, "time out of range");
		return -EINVAL;
	}
	return 0;
}

/* Time one query may spend matching label sets against regexes. */
#define SELECTOR_BUDGET_NS (2 * NSEC_PER_SEC)

static int parse_selector(struct MHD_Connection *c, const char *key, struct selector **ret,
			  char *err, size_t errlen)
{
	const char *s = http_arg(c, key);
	char why[200];

	if (!s || !*s)
		return 0;
	*ret = selector_parse(s, why, sizeof(why));
	if (!*ret) {
		snprintf(err, errlen, "bad %s: %s", key, why);
		return -EINVAL;
	}
	selector_set_deadline(*ret, mono_ns() + SELECTOR_BUDGET_NS);
	return 0;
}

/*
 * After a query: if a selector stopped matching (a regex past its per-match limits, or the
 * query's matching budget spent), the result is incomplete and must not be served. True and
 * *ret set when it answered so.
 */
static bool selector_refused(struct http_server *h, struct MHD_Connection *c,
			     const struct selector *a, const struct selector *b,
			     enum MHD_Result *ret)
{
	int f = selector_failed(a);

	if (!f)
		f = selector_failed(b);
	if (!f)
		return false;
	if (f == -E2BIG)
		*ret = http_reply_error(h, c, MHD_HTTP_UNPROCESSABLE_CONTENT, REJ_SELECTOR,
					"a regex of the selector exceeds its matching limits on a label "
					"value (nested repetition?): simplify it");
	else if (f == -ETIMEDOUT)
		*ret = http_reply_error(h, c, MHD_HTTP_SERVICE_UNAVAILABLE, REJ_SELECTOR,
					"matching the selector took more than %llu s: narrow the range "
					"or simplify the regex",
					(unsigned long long)(SELECTOR_BUDGET_NS / NSEC_PER_SEC));
	else
		*ret = http_reply_error(h, c, MHD_HTTP_SERVICE_UNAVAILABLE, REJ_SELECTOR,
					"out of memory while matching the selector");
	return true;
}

/* Common parameters of the sample queries: from/to/since, selector, kind, gpu_idle, group_by. */
static int parse_sample_query(struct MHD_Connection *c, struct params *p, bool diff)
{
	const char *kind = http_arg(c, "kind"), *gi = http_arg(c, "gpu_idle");
	const char *group_by = http_arg(c, "group_by"), *view = http_arg(c, "view");
	int k = SAMPLE_CPU;

	p->q.gpu_idle = -1;
	if (view && strcmp(view, "python") && strcmp(view, "raw")) {
		snprintf(p->err, sizeof(p->err), "view is 'python' or 'raw', not '%.50s'", view);
		return -EINVAL;
	}
	p->q.python_only = view && !strcmp(view, "python");
	if (parse_range(c, "from", "to", &p->q.from_ns, &p->q.to_ns, p->err, sizeof(p->err)) ||
	    parse_selector(c, "selector", &p->sel, p->err, sizeof(p->err)))
		return -EINVAL;
	if (kind && (k = sample_kind_parse(kind)) < 0) {
		snprintf(p->err, sizeof(p->err),
			 "unknown kind '%.50s' (cpu, offcpu_ns, gpu_kernel_ns, cuda_sync_ns)", kind);
		return -EINVAL;
	}
	p->q.kind = (enum sample_kind)k;
	if (gi) {
		char *end;
		long v = strtol(gi, &end, 10);

		if (!*gi || *end || v < 0 || v > 1 << 20) {
			snprintf(p->err, sizeof(p->err), "gpu_idle must be a GPU index, not '%.50s'",
				 gi);
			return -EINVAL;
		}
		p->q.gpu_idle = (int)v;
	}
	p->q.sel = p->sel;
	if (group_by && *group_by) {
		size_t n = strspn(group_by, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					    "0123456789_,");

		if ((strcmp(group_by, "*") && (group_by[n] || group_by[0] == ',')) ||
		    strlen(group_by) > 200) {
			snprintf(p->err, sizeof(p->err), "group_by wants label names separated by "
				 "commas, not '%.50s'", group_by);
			return -EINVAL;
		}
		p->q.group_by = group_by;
	}
	if (!diff)
		return 0;
	p->q2 = p->q;
	if (http_arg(c, "from2") || http_arg(c, "to2")) {
		if (parse_range(c, "from2", "to2", &p->q2.from_ns, &p->q2.to_ns, p->err,
				sizeof(p->err)))
			return -EINVAL;
	}
	if (parse_selector(c, "selector2", &p->sel2, p->err, sizeof(p->err)))
		return -EINVAL;
	if (p->sel2)
		p->q2.sel = p->sel2;
	return 0;
}

/* ---- query endpoints ---------------------------------------------------------------------- */

/* A query the store could not answer: 503 when it is a matter of time (memory, a ClickHouse
 * shard down: the reason names it), else 500. */
static enum MHD_Result store_failed(struct http_server *h, struct MHD_Connection *c, int err)
{
	const char *why = err == -EHOSTDOWN || err == -EIO || err == -EACCES ? store_strerror() : "";
	enum MHD_Result ret;

	ret = http_reply_error(h, c, err == -ENOMEM || err == -EHOSTDOWN ? MHD_HTTP_SERVICE_UNAVAILABLE :
			       MHD_HTTP_INTERNAL_SERVER_ERROR,
			       REJ_MAX, "query failed: %s", *why ? why : strerror(-err));
	store_set_error("%s", "");
	return ret;
}

/*
 * The answer of a JSON sample query: 400 when its parameters did not parse (p->err; the query
 * was not run), else the selector's refusal, the store's error or the JSON in b. Frees b and p.
 */
static enum MHD_Result sample_answer(struct http_server *h, struct MHD_Connection *c,
				     struct params *p, bool parsed, int err, struct buf *b)
{
	enum MHD_Result ret;

	if (!parsed)
		ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", p->err);
	else if (!selector_refused(h, c, p->sel, p->sel2, &ret))
		ret = err ? store_failed(h, c, err) : http_reply_json(c, b);
	buf_done(b);
	params_done(p);
	return ret;
}

static enum MHD_Result do_flamegraph(struct http_server *h, struct MHD_Connection *c, bool diff)
{
	struct params p = { 0 };
	struct buf b = { 0 };
	int err = 0;
	bool parsed = !parse_sample_query(c, &p, diff);

	if (parsed)
		err = query_flamegraph(h->st, &p.q, diff ? &p.q2 : NULL, &b);
	return sample_answer(h, c, &p, parsed, err, &b);
}

/* GET /api/v1/processes: the processes with the most samples (limit, default 100). */
static enum MHD_Result do_processes(struct http_server *h, struct MHD_Connection *c,
				    const char *url)
{
	const char *lim = http_arg(c, "limit");
	struct params p = { 0 };
	struct buf b = { 0 };
	long limit = 100;
	int err = 0;
	bool parsed;

	if (lim && (limit = strtol(lim, NULL, 10)) < 1)
		limit = 100;
	parsed = !parse_sample_query(c, &p, false);
	if (parsed)
		err = query_processes(h->st, &p.q, (size_t)limit, &b);
	return sample_answer(h, c, &p, parsed, err, &b);
}

/* GET /api/v1/samples: samples over time in `buckets` buckets (default 200, at most 5000). */
static enum MHD_Result do_samples(struct http_server *h, struct MHD_Connection *c,
				  const char *url)
{
	const char *nb = http_arg(c, "buckets");
	struct params p = { 0 };
	struct buf b = { 0 };
	long buckets = 200;
	int err = 0;
	bool parsed;

	if (nb && ((buckets = strtol(nb, NULL, 10)) < 1 || buckets > 5000))
		return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
					"buckets wants 1 to 5000, not '%.20s'", nb);
	parsed = !parse_sample_query(c, &p, false);
	if (parsed) {
		p.q.step_ns = (p.q.to_ns - p.q.from_ns + (uint64_t)buckets - 1) /
			      (uint64_t)buckets;
		if (!p.q.step_ns)
			p.q.step_ns = 1;
		err = query_samples(h->st, &p.q, &b);
	}
	return sample_answer(h, c, &p, parsed, err, &b);
}

static enum MHD_Result do_top(struct http_server *h, struct MHD_Connection *c,
			      const char *url)
{
	const char *lim = http_arg(c, "limit");
	struct params p = { 0 };
	struct buf b = { 0 };
	long limit = 100;
	char *end;
	int err = 0;
	bool parsed;

	if (lim) {
		limit = strtol(lim, &end, 10);
		if (!*lim || *end || limit <= 0 || limit > 1000000)
			return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
						"limit must be 1..1000000");
	}
	parsed = !parse_sample_query(c, &p, false);
	if (parsed)
		err = query_top(h->st, &p.q, (size_t)limit, &b);
	return sample_answer(h, c, &p, parsed, err, &b);
}

static enum MHD_Result do_pprof(struct http_server *h, struct MHD_Connection *c,
				const char *url)
{
	struct params p = { 0 };
	enum MHD_Result ret;
	uint8_t *gz = NULL;
	size_t len = 0;
	int err;

	if (parse_sample_query(c, &p, false)) {
		ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", p.err);
		goto out;
	}
	err = query_pprof(h->st, &p.q, &gz, &len);
	if (selector_refused(h, c, p.sel, NULL, &ret)) {
		free(gz);
	} else if (err) {
		ret = store_failed(h, c, err);
	} else {
		struct buf b = { .p = gz, .len = len, .cap = len };
		struct MHD_Response *resp;

		/* The body is a .pb.gz file, not a gzip transfer encoding of protobuf. */
		resp = MHD_create_response_from_buffer(b.len, b.p, MHD_RESPMEM_MUST_FREE);
		if (!resp) {
			free(gz);
			ret = MHD_NO;
			goto out;
		}
		MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
		MHD_add_response_header(resp, "Content-Disposition",
					"attachment; filename=\"profile.pb.gz\"");
		ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
		MHD_destroy_response(resp);
	}
out:
	params_done(&p);
	return ret;
}

struct names_ctx {
	struct strtab t;
	const char *label;	/* NULL: collect names; else values of that label */
};

static int collect_names(void *ctx, const char *const *pairs, size_t n)
{
	struct names_ctx *nc = ctx;

	for (size_t i = 0; i < n; i++) {
		if (!nc->label && strtab_intern(&nc->t, pairs[2 * i]) < 0)
			return -ENOMEM;
		if (nc->label && !strcmp(pairs[2 * i], nc->label) &&
		    strtab_intern(&nc->t, pairs[2 * i + 1]) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Label names and values per answer: the default and the most a client may ask for. */
#define LABELS_DEFAULT_LIMIT 10000
#define LABELS_MAX_LIMIT     100000
/* Bytes of names or values per answer: a page ends at the first value past it (next_offset). */
#define LABELS_PAGE_BYTES    (4u << 20)

/* An optional integer parameter in [min, max]; *ret untouched when absent. 0 or -EINVAL. */
static int parse_count(struct MHD_Connection *c, const char *key, unsigned long long min,
		       unsigned long long max, unsigned long long *ret, char *err, size_t errlen)
{
	const char *v = http_arg(c, key);
	unsigned long long n;
	char *end;

	if (!v)
		return 0;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (!*v || *end || errno || n < min || n > max || *v == '-') {
		snprintf(err, errlen, "'%s' must be an integer in %llu..%llu, not '%.40s'", key, min,
			 max, v);
		return -EINVAL;
	}
	*ret = n;
	return 0;
}

static enum MHD_Result do_labels(struct http_server *h, struct MHD_Connection *c,
				const char *label)
{
	struct names_ctx nc = { .label = label };
	struct selector *sel = NULL;
	uint64_t from = 0, to = 0;
	unsigned long long limit = LABELS_DEFAULT_LIMIT, offset = 0, end;
	struct buf b = { 0 };
	enum MHD_Result ret;
	char err[256];
	int rc;

	if (parse_count(c, "limit", 1, LABELS_MAX_LIMIT, &limit, err, sizeof(err)) ||
	    parse_count(c, "offset", 0, UINT32_MAX, &offset, err, sizeof(err))) {
		ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
		goto out;
	}
	if ((http_arg(c, "from") || http_arg(c, "since") || http_arg(c, "to")) ?
		    parse_range(c, "from", "to", &from, &to, err, sizeof(err)) :
		    (to = UINT64_MAX, 0)) {
		ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
		goto out;
	}
	if (parse_selector(c, "selector", &sel, err, sizeof(err))) {
		ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
		goto out;
	}
	rc = h->st->ops->label_sets(h->st, from, to, sel, collect_names, &nc);
	if (selector_refused(h, c, sel, NULL, &ret))
		goto out;
	if (rc) {
		ret = store_failed(h, c, rc);
		goto out;
	}
	qsort(nc.t.strs, nc.t.len, sizeof(char *), cmp_str);
	buf_puts(&b, label ? "{\"values\":[" : "{\"labels\":[");
	end = offset;
	for (size_t i = offset; i < nc.t.len && i < offset + limit; i++) {
		if (i > offset && b.len >= LABELS_PAGE_BYTES)
			break;
		if (i > offset)
			buf_put(&b, ",", 1);
		buf_json_str(&b, nc.t.strs[i]);
		end = i + 1;
	}
	/* Sorted, so offset pages are stable while no new value arrives. */
	buf_printf(&b, "],\"total\":%zu", nc.t.len);
	if (end < nc.t.len)
		buf_printf(&b, ",\"next_offset\":%llu", end);
	buf_puts(&b, "}");
	ret = http_reply_json(c, &b);
out:
	/* strtab's index no longer matches the sorted array; free the strings directly. */
	for (size_t i = 0; i < nc.t.len; i++)
		free(nc.t.strs[i]);
	free(nc.t.strs);
	u64map_done(&nc.t.index);
	selector_free(sel);
	buf_done(&b);
	return ret;
}

static enum MHD_Result do_series(struct http_server *h, struct MHD_Connection *c,
				 const char *url)
{
	const char *name = http_arg(c, "name"), *bk = http_arg(c, "buckets");
	struct selector *sel = NULL;
	uint64_t from, to;
	struct buf b = { 0 };
	enum MHD_Result ret;
	long buckets = 500;
	char err[256], *end;
	int rc;

	if (!name || !*name) {
		ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "missing 'name'");
		goto out;
	}
	if (bk) {
		buckets = strtol(bk, &end, 10);
		if (!*bk || *end || buckets < 1 || buckets > 100000) {
			ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
					       "buckets must be 1..100000");
			goto out;
		}
	}
	if (parse_range(c, "from", "to", &from, &to, err, sizeof(err)) ||
	    parse_selector(c, "selector", &sel, err, sizeof(err))) {
		ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
		goto out;
	}
	rc = query_series(h->st, name, from, to, sel, (size_t)buckets, &b);
	if (selector_refused(h, c, sel, NULL, &ret))
		goto out;
	if (rc == -E2BIG) {
		ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
				       "more than %u points in range: narrow the range or selector",
				       QUERY_SERIES_MAX_POINTS);
		goto out;
	}
	if (rc) {
		ret = store_failed(h, c, rc);
		goto out;
	}
	ret = http_reply_json(c, &b);
out:
	selector_free(sel);
	buf_done(&b);
	return ret;
}

static int name_out(void *ctx, const char *name)
{
	struct buf *b = ctx;

	if (b->p[b->len - 1] != '[')
		buf_put(b, ",", 1);
	buf_json_str(b, name);
	return b->oom ? -ENOMEM : 0;
}

static enum MHD_Result do_metric_names(struct http_server *h, struct MHD_Connection *c,
				       const char *url)
{
	struct buf b = { 0 };
	int rc;

	buf_puts(&b, "{\"names\":[");
	rc = b.oom ? -ENOMEM : h->st->ops->metric_names(h->st, name_out, &b);
	if (rc) {
		buf_done(&b);
		return store_failed(h, c, rc);
	}
	buf_puts(&b, "]}");
	return http_reply_json(c, &b);
}

static int interval_out(void *ctx, const char *kind, const char *const *labels, size_t nlabels,
			uint64_t start, uint64_t end, const char *const *attrs, size_t nattrs)
{
	struct buf *b = ctx;

	if (b->p[b->len - 1] != '[')
		buf_put(b, ",", 1);
	buf_puts(b, "{\"labels\":");
	buf_json_labels(b, labels, nlabels);
	buf_puts(b, ",\"kind\":");
	buf_json_str(b, kind);
	buf_puts(b, ",\"start_ms\":");
	buf_json_ms(b, start);
	buf_puts(b, ",\"end_ms\":");
	buf_json_ms(b, end);
	buf_puts(b, ",\"attrs\":");
	buf_json_labels(b, attrs, nattrs);
	buf_put(b, "}", 1);
	return b->oom ? -ENOMEM : 0;
}

static enum MHD_Result do_intervals(struct http_server *h, struct MHD_Connection *c,
				    const char *url)
{
	const char *kind = http_arg(c, "kind"), *lim = http_arg(c, "limit");
	struct selector *sel = NULL;
	uint64_t from, to;
	struct buf b = { 0 };
	enum MHD_Result ret;
	bool truncated;
	long limit = 10000;
	char err[256], *end;
	int rc;

	if (lim) {
		limit = strtol(lim, &end, 10);
		if (!*lim || *end || limit < 1 || limit > 1000000) {
			ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
					       "limit must be 1..1000000");
			goto out;
		}
	}
	if (parse_range(c, "from", "to", &from, &to, err, sizeof(err)) ||
	    parse_selector(c, "selector", &sel, err, sizeof(err))) {
		ret = http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
		goto out;
	}
	buf_puts(&b, "{\"intervals\":[");
	rc = b.oom ? -ENOMEM : h->st->ops->intervals(h->st, kind && *kind ? kind : NULL, from, to,
						     sel, (size_t)limit, interval_out, &b,
						     &truncated);
	if (selector_refused(h, c, sel, NULL, &ret))
		goto out;
	if (rc) {
		ret = store_failed(h, c, rc);
		goto out;
	}
	buf_printf(&b, "],\"truncated\":%s}", truncated ? "true" : "false");
	ret = http_reply_json(c, &b);
out:
	selector_free(sel);
	buf_done(&b);
	return ret;
}

static int node_out(void *ctx, const char *node, uint64_t first, uint64_t last)
{
	struct buf *b = ctx;

	if (b->p[b->len - 1] != '[')
		buf_put(b, ",", 1);
	buf_puts(b, "{\"node\":");
	buf_json_str(b, node);
	buf_puts(b, ",\"first_ms\":");
	buf_json_ms(b, first);
	buf_puts(b, ",\"last_ms\":");
	buf_json_ms(b, last);
	buf_put(b, "}", 1);
	return b->oom ? -ENOMEM : 0;
}

static enum MHD_Result do_nodes(struct http_server *h, struct MHD_Connection *c,
				const char *url)
{
	struct buf b = { 0 };
	int rc;

	buf_puts(&b, "{\"nodes\":[");
	rc = b.oom ? -ENOMEM : h->st->ops->nodes(h->st, node_out, &b);
	if (rc) {
		buf_done(&b);
		return store_failed(h, c, rc);
	}
	buf_puts(&b, "]}");
	return http_reply_json(c, &b);
}

struct stack_out {
	struct buf *b;
	size_t nframes;
	bool found;
};

static int stack_cb(void *ctx, uint64_t id, const struct frame *f, size_t nf)
{
	struct stack_out *so = ctx;
	struct buf *b = so->b;

	(void)id;
	so->found = nf > 0;
	buf_puts(b, "{\"frames\":[");
	for (size_t i = 0; i < nf; i++) {
		char tmp[256];

		if (i)
			buf_put(b, ",", 1);
		buf_puts(b, "{\"function\":");
		buf_json_str(b, frame_name(&f[i], tmp, sizeof(tmp)));
		buf_puts(b, ",\"module\":");
		buf_json_str(b, f[i].module);
		if (f[i].file && *f[i].file) {
			buf_puts(b, ",\"file\":");
			buf_json_str(b, f[i].file);
			buf_printf(b, ",\"line\":%u", f[i].line);
		}
		/* 0: not stored (a named frame, --frame-addresses unnamed) */
		if (f[i].address)
			buf_printf(b, ",\"address\":\"0x%llx\"", (unsigned long long)f[i].address);
		buf_printf(b, ",\"kernel\":%s,\"inlined\":%s}", f[i].kernel ? "true" : "false",
			   f[i].inlined ? "true" : "false");
	}
	buf_puts(b, "]}");
	return b->oom ? -ENOMEM : 0;
}

static enum MHD_Result do_stack(struct http_server *h, struct MHD_Connection *c, const char *idstr)
{
	struct buf b = { 0 };
	struct stack_out so = { &b, 0, false };
	unsigned long long id;
	char *end;
	int rc;

	id = strtoull(idstr, &end, 10);
	if (!*idstr || *end || !id)
		return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
					"stack id must be a positive integer");
	rc = h->st->ops->stacks(h->st, (uint64_t[]){ id }, 1, stack_cb, &so);
	if (rc) {
		buf_done(&b);
		return store_failed(h, c, rc);
	}
	if (!so.found) {
		buf_done(&b);
		return http_reply_error(h, c, MHD_HTTP_NOT_FOUND, REJ_NOT_FOUND, "no stack %llu", id);
	}
	return http_reply_json(c, &b);
}

/*
 * The answer of a report query (efficiency, insights) for its return code: the JSON in b, or
 * 422/503 on a selector's limits, 400 (-EINVAL) or 404 (-ENODATA) with err, else a store error.
 */
static enum MHD_Result report_answer(struct http_server *h, struct MHD_Connection *c, int rc,
				     struct buf *b, const char *err)
{
	if (!rc)
		return http_reply_json(c, b);
	buf_done(b);
	if (rc == -E2BIG || rc == -ETIMEDOUT)
		return http_reply_error(h, c, rc == -E2BIG ? MHD_HTTP_UNPROCESSABLE_CONTENT :
					MHD_HTTP_SERVICE_UNAVAILABLE, REJ_SELECTOR, "%s", err);
	if (rc == -EINVAL || rc == -ENODATA)
		return http_reply_error(h, c, rc == -EINVAL ? MHD_HTTP_BAD_REQUEST : MHD_HTTP_NOT_FOUND,
					REJ_BAD_QUERY, "%s", err);
	return store_failed(h, c, rc);
}

static enum MHD_Result do_efficiency(struct http_server *h, struct MHD_Connection *c)
{
	const char *cs = http_arg(c, "causes");
	struct eff_request rq = { .by = http_arg(c, "by"), .selector = http_arg(c, "selector"),
				  .causes = 10 };
	struct buf b = { 0 };
	char err[512], *end;
	int rc;

	if (cs) {
		rq.causes = strtoul(cs, &end, 10);
		if (!*cs || *end || rq.causes > 1000)
			return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
						"causes must be 0..1000");
	}
	if (parse_range(c, "from", "to", &rq.from_ns, &rq.to_ns, err, sizeof(err)))
		return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
	rc = efficiency_query(h->o.eff, &rq, &b, err, sizeof(err));
	return report_answer(h, c, rc, &b, err);
}

/* GET /api/v1/insights (docs/insights.md): the same range, by and selector errors as
 * /api/v1/efficiency. */
static enum MHD_Result get_insights(struct http_server *h, struct MHD_Connection *c,
				    const char *url)
{
	const char *ls = http_arg(c, "limit"), *fs = http_arg(c, "facts");
	struct insights_request rq = { .by = http_arg(c, "by"), .selector = http_arg(c, "selector") };
	struct buf b = { 0 };
	char err[512], *end;
	int rc;

	if (!h->o.ins)
		return http_no_endpoint(h, c, url);
	if (ls) {
		rq.limit = strtoul(ls, &end, 10);
		if (!*ls || *end || rq.limit > 100000)
			return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
						"limit must be 0..100000");
	}
	if (fs && strcmp(fs, "0") && strcmp(fs, "1"))
		return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
					"facts must be 0 or 1");
	rq.facts = fs && !strcmp(fs, "1");
	if (parse_range(c, "from", "to", &rq.from_ns, &rq.to_ns, err, sizeof(err)))
		return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
	rc = insights_query(h->o.ins, &rq, &b, err, sizeof(err));
	return report_answer(h, c, rc, &b, err);
}

static enum MHD_Result metrics_work(struct http_server *h, struct MHD_Connection *c,
				    struct req *r)
{
	struct buf b = { 0 };

	(void)r;
	if (server_metrics(h->st, &h->ctr, http_rate_get(h), h->o.eff, h->o.exp, &b))
		return MHD_NO;
	if (h->o.ins) {
		char *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);

		if (f) {
			insights_metrics(h->o.ins, f);
			fclose(f);
			buf_put(&b, text, len);
		}
		free(text);
	}
	return http_reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4", &b, NULL);
}

enum MHD_Result http_do_metrics(struct http_server *h, struct MHD_Connection *c, struct req *r)
{
	if (r->worked)
		return r->answered ? http_reply(c, r->ans_code, r->ans_type, &r->ans, NULL) : MHD_NO;
	if (http_offload(h, c, r, metrics_work, &h->metrics_workers, METRICS_WORKERS_MAX))
		return MHD_YES;
	return http_reply_error(h, c, MHD_HTTP_SERVICE_UNAVAILABLE, REJ_BUSY,
				"%d scrapes of /metrics in progress already: retry",
				METRICS_WORKERS_MAX);
}

static enum MHD_Result get_flamegraph(struct http_server *h, struct MHD_Connection *c,
				      const char *url)
{
	return do_flamegraph(h, c, false);
}

static enum MHD_Result get_diff(struct http_server *h, struct MHD_Connection *c, const char *url)
{
	return do_flamegraph(h, c, true);
}

static enum MHD_Result get_labels(struct http_server *h, struct MHD_Connection *c, const char *url)
{
	return do_labels(h, c, NULL);
}

/* /api/v1/label/NAME/values */
static enum MHD_Result get_label_values(struct http_server *h, struct MHD_Connection *c,
					const char *url)
{
	const char *name = url + strlen("/api/v1/label/"), *slash = strchr(name, '/');
	char label[256];

	if (slash && !strcmp(slash, "/values") && slash > name &&
	    (size_t)(slash - name) < sizeof(label)) {
		memcpy(label, name, (size_t)(slash - name));
		label[slash - name] = 0;
		return do_labels(h, c, label);
	}
	return http_no_endpoint(h, c, url);
}

/* /api/v1/stack/ID */
static enum MHD_Result get_stack(struct http_server *h, struct MHD_Connection *c, const char *url)
{
	return do_stack(h, c, url + strlen("/api/v1/stack/"));
}

static enum MHD_Result get_efficiency(struct http_server *h, struct MHD_Connection *c,
				      const char *url)
{
	if (!h->o.eff)
		return http_no_endpoint(h, c, url);
	return do_efficiency(h, c);
}

const struct http_route http_query_routes[] = {
	{ "/api/v1/flamegraph", false, get_flamegraph },
	{ "/api/v1/diff", false, get_diff },
	{ "/api/v1/top", false, do_top },
	{ "/api/v1/processes", false, do_processes },
	{ "/api/v1/samples", false, do_samples },
	{ "/api/v1/pprof", false, do_pprof },
	{ "/api/v1/labels", false, get_labels },
	{ "/api/v1/label/", true, get_label_values },
	{ "/api/v1/series", false, do_series },
	{ "/api/v1/metric_names", false, do_metric_names },
	{ "/api/v1/intervals", false, do_intervals },
	{ "/api/v1/nodes", false, do_nodes },
	{ "/api/v1/efficiency", false, get_efficiency },
	{ "/api/v1/insights", false, get_insights },
	{ "/api/v1/stack/", true, get_stack },
	{ NULL, false, NULL },
};
