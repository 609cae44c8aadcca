/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HTTP front of gpuscope-server on libmicrohttpd: a few epoll event-loop threads serve thousands
 * of kept-alive connections; auth and size checks in the header phase (before any body byte);
 * request bodies bounded and decompressed; routing of the API in docs/design.md, JSON errors,
 * and the counters /metrics exposes (ingest rate, rejects and drops by reason, connections;
 * server/metrics.c renders them).
 */
#include <arpa/inet.h>
#include <stdarg.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "common/batch.h"
#include "common/compress.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/capture.h"
#include "server/codec.h"
#include "server/efficiency.h"
#include "server/http.h"
#include "server/ingest.h"
#include "server/metrics.h"
#include "server/query.h"
#include "server/selector.h"
#include "server/ui_assets.h"

#define RATE_SLOTS 16

struct http_server {
	struct MHD_Daemon *d;
	struct store *st;
	struct http_opts o;
	int listen_fd;
	uint16_t port;
	char addr[64];			/* bound address, "ADDR:PORT" */
	struct http_counters ctr;	/* on /metrics */
	uint64_t last_mhd_log_ns;
	uint64_t ingest_samples, requests;
	pthread_mutex_t rmu;		/* rate ring */
	uint64_t rate_sec[RATE_SLOTS], rate_n[RATE_SLOTS];
	pthread_mutex_t wmu;		/* ingest workers running, and their end (stop) */
	pthread_cond_t wcond;
	unsigned workers;
};

/* Ingests stored on worker threads at once; past it one waits on its event loop. */
#define INGEST_WORKERS_MAX 512

struct req {
	struct buf body;		/* only POST /api/v1/ingest keeps its body */
	bool ingest;
	bool over;			/* body beyond max_body: discarded */
	/* Stored by a worker while the connection was suspended: the answer it left. */
	bool worked, answered;
	unsigned ans_code;
	const char *ans_type;
	struct buf ans;
};

/* On an ingest worker: the request whose answer reply() keeps instead of queueing it (only the
 * connection's own event-loop thread may queue a response). */
static __thread struct req *deferred;

static void count(struct http_server *h, enum reject r)
{
	__atomic_add_fetch(&h->ctr.rejects[r], 1, __ATOMIC_RELAXED);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type,
			     struct buf *body, const char *encoding)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	if (deferred) {
		deferred->ans_code = code;
		deferred->ans_type = type;
		deferred->ans = *body;
		*body = (struct buf){ 0 };
		deferred->answered = true;
		return MHD_YES;
	}
	resp = MHD_create_response_from_buffer(body->len, body->p ? body->p : (void *)"",
					       body->p ? MHD_RESPMEM_MUST_FREE :
							 MHD_RESPMEM_PERSISTENT);
	if (!resp) {
		buf_done(body);
		return MHD_NO;
	}
	body->p = NULL;
	body->len = body->cap = 0;
	if (type)
		MHD_add_response_header(resp, "Content-Type", type);
	if (encoding)
		MHD_add_response_header(resp, "Content-Encoding", encoding);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	ret = MHD_queue_response(c, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result reply_error(struct http_server *h, struct MHD_Connection *c, unsigned code,
				   enum reject why, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static enum MHD_Result reply_error(struct http_server *h, struct MHD_Connection *c, unsigned code,
				   enum reject why, const char *fmt, ...)
{
	struct buf b = { 0 };
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (why < REJ_MAX)
		count(h, why);
	buf_puts(&b, "{\"error\":");
	buf_json_str(&b, msg);
	buf_puts(&b, "}\n");
	if (b.oom)
		return MHD_NO;
	return reply(c, code, "application/json", &b, NULL);
}

static enum MHD_Result reply_json(struct MHD_Connection *c, struct buf *b)
{
	if (b->oom) {
		buf_done(b);
		return MHD_NO;
	}
	buf_put(b, "\n", 1);
	return reply(c, MHD_HTTP_OK, "application/json", b, NULL);
}

static const char *arg(struct MHD_Connection *c, const char *name)
{
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
}

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
	const char *f = arg(c, fk), *t = arg(c, tk), *since = arg(c, "since");
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
	const char *s = arg(c, key);
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
		*ret = reply_error(h, c, MHD_HTTP_UNPROCESSABLE_CONTENT, REJ_SELECTOR,
				   "a regex of the selector exceeds its matching limits on a label "
				   "value (nested repetition?): simplify it");
	else if (f == -ETIMEDOUT)
		*ret = reply_error(h, c, MHD_HTTP_SERVICE_UNAVAILABLE, REJ_SELECTOR,
				   "matching the selector took more than %llu s: narrow the range "
				   "or simplify the regex",
				   (unsigned long long)(SELECTOR_BUDGET_NS / NSEC_PER_SEC));
	else
		*ret = reply_error(h, c, MHD_HTTP_SERVICE_UNAVAILABLE, REJ_SELECTOR,
				   "out of memory while matching the selector");
	return true;
}

/* Common parameters of the sample queries: from/to/since, selector, kind, gpu_idle, group_by. */
static int parse_sample_query(struct MHD_Connection *c, struct params *p, bool diff)
{
	const char *kind = arg(c, "kind"), *gi = arg(c, "gpu_idle"), *group_by = arg(c, "group_by");
	int k = SAMPLE_CPU;

	p->q.gpu_idle = -1;
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
	if (arg(c, "from2") || arg(c, "to2")) {
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

/* ---- ingest ------------------------------------------------------------------------------- */

static void rate_add(struct http_server *h, uint64_t n)
{
	uint64_t sec = mono_ns() / NSEC_PER_SEC;
	size_t i = sec % RATE_SLOTS;

	pthread_mutex_lock(&h->rmu);
	if (h->rate_sec[i] != sec) {
		h->rate_sec[i] = sec;
		h->rate_n[i] = 0;
	}
	h->rate_n[i] += n;
	pthread_mutex_unlock(&h->rmu);
}

/* Samples per second over the last 10 complete seconds. */
static double rate_get(struct http_server *h)
{
	uint64_t sec = mono_ns() / NSEC_PER_SEC, sum = 0;

	pthread_mutex_lock(&h->rmu);
	for (size_t i = 0; i < RATE_SLOTS; i++)
		if (h->rate_sec[i] < sec && h->rate_sec[i] + 10 >= sec)
			sum += h->rate_n[i];
	pthread_mutex_unlock(&h->rmu);
	return (double)sum / 10.0;
}

/* Data further ahead than this is a broken clock, not a measurement. */
#define TIME_AHEAD_MAX_NS (86400 * NSEC_PER_SEC)

static int scan_chunk(void *ctx, const uint8_t *p, size_t len)
{
	return batch_scan(ctx, p, len);
}

static const char *fmt_unix(uint64_t ns, char *buf, size_t len)
{
	time_t t = (time_t)(ns / NSEC_PER_SEC);
	struct tm tm;

	if (ns / NSEC_PER_SEC > (uint64_t)253402300799ull || !gmtime_r(&t, &tm))
		snprintf(buf, len, "%llu ns", (unsigned long long)ns);
	else
		strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return buf;
}

static enum MHD_Result do_ingest(struct http_server *h, struct MHD_Connection *c, struct req *r)
{
	const char *enc = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
	struct Gpuscope__V1__Batch *m;
	uint8_t *raw = NULL;
	size_t raw_len = 0, n = 0;
	char err[256] = "";
	uint64_t t0 = mono_ns(), t_dec, tmin, tmax, now;
	struct batch_scan scan;
	struct ingest_result parts = { 0 };
	int rc;

	if (r->over)
		return reply_error(h, c, MHD_HTTP_CONTENT_TOO_LARGE, REJ_TOO_LARGE,
				   "body larger than %zu bytes", h->o.max_body);
	if (!r->body.len) {
		/* An empty upload stores nothing: `gpuscope doctor` checks reach and token so. */
		struct buf b = { 0 };

		return reply(c, MHD_HTTP_NO_CONTENT, NULL, &b, NULL);
	}
	/* Memory for decoding stays proportional to what was sent: the scan refuses a bomb while
	 * it is being decompressed, before protobuf-c allocates anything. */
	batch_scan_init(&scan, BATCH_DECODE_BASE + (uint64_t)BATCH_DECODE_RATIO * r->body.len);
	rc = decompress_buf(enc, r->body.p, r->body.len, h->o.max_body, scan_chunk, &scan, &raw,
			    &raw_len);
	if (rc == -E2BIG && scan.why[0])
		return reply_error(h, c, MHD_HTTP_CONTENT_TOO_LARGE, REJ_LIMIT, "%s", scan.why);
	if (rc == -E2BIG)
		return reply_error(h, c, MHD_HTTP_CONTENT_TOO_LARGE, REJ_TOO_LARGE,
				   "decompressed body larger than %zu bytes", h->o.max_body);
	if (rc == -EPROTONOSUPPORT)
		return reply_error(h, c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, REJ_UNKNOWN_ENCODING,
				   "unsupported Content-Encoding '%.40s' (gzip, zstd or none)", enc);
	if (rc == -EINVAL && scan.why[0])
		return reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_MALFORMED,
				   "malformed protobuf Batch: %s", scan.why);
	if (rc)
		return reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_ENCODING,
				   "corrupt or truncated %.20s body", enc);
	m = batch_decode_scanned(&scan, raw ? raw : r->body.p, raw ? raw_len : r->body.len, err,
				 sizeof(err));
	if (!m) {
		int e = errno;

		free(raw);
		if (e == E2BIG)
			return reply_error(h, c, MHD_HTTP_CONTENT_TOO_LARGE, REJ_LIMIT, "%s", err);
		return reply_error(h, c, MHD_HTTP_BAD_REQUEST,
				   e == EPROTONOSUPPORT ? REJ_VERSION : REJ_MALFORMED, "%s", err);
	}
	batch_time_bounds(m, &tmin, &tmax);
	now = wall_ns();
	if (tmin <= tmax && (tmin + h->o.retention_ns < now || tmax > now + TIME_AHEAD_MAX_NS)) {
		char a[40], b[40];

		batch_decode_free(m);
		free(raw);
		return reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_TIME,
				   "timestamps %s .. %s outside [now - retention, now + 1 day]: "
				   "nothing stored",
				   fmt_unix(tmin, a, sizeof(a)), fmt_unix(tmax, b, sizeof(b)));
	}
	err[0] = 0;
	t_dec = mono_ns();
	/* A large batch goes in parts, each its own group commit: other pushes are committed
	 * between them instead of waiting for all of it. A part already stored is a duplicate. */
	rc = ingest_store(h->st, m, raw ? raw : r->body.p, raw ? raw_len : r->body.len,
			  INGEST_PART_RECORDS, h->o.all_addresses, &parts, err, sizeof(err));
	if (rc == 0 && parts.duplicate_parts == parts.parts)
		rc = 1;
	if (rc == 0)
		efficiency_ingested(h->o.eff, m);
	log_debug("ingest: %zu bytes, decode %.1f ms, store %.1f ms in %u part(s)", r->body.len,
		  (double)(t_dec - t0) / 1e6, (double)(mono_ns() - t_dec) / 1e6, parts.parts);
	for (size_t i = 0; i < m->n_samples; i++)
		n += m->samples[i]->n_stack;
	batch_decode_free(m);
	free(raw);
	if (rc == -EDQUOT)	/* the node's cardinality this hour: it may retry later */
		return reply_error(h, c, MHD_HTTP_TOO_MANY_REQUESTS, REJ_CARDINALITY, "%s", err);
	if (rc < 0) {
		log_warn("ingest: %s", err);
		return reply_error(h, c, MHD_HTTP_SERVICE_UNAVAILABLE, REJ_STORE, "%s", err);
	}
	__atomic_add_fetch(&h->ctr.ingest_batches, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->ctr.ingest_parts, parts.parts, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->ctr.ingest_bytes, r->body.len, __ATOMIC_RELAXED);
	if (rc == 0) {
		__atomic_add_fetch(&h->ingest_samples, n, __ATOMIC_RELAXED);
		rate_add(h, n);
	}
	{
		struct buf b = { 0 };

		return reply(c, MHD_HTTP_NO_CONTENT, NULL, &b, NULL);
	}
}

struct ingest_job {
	struct http_server *h;
	struct MHD_Connection *c;
	struct req *r;
};

/* Stores one upload off the event loop, then resumes its connection, whose handler queues the
 * answer left in r. Neither c nor r is touched after the resume. */
static void *ingest_worker(void *arg)
{
	struct ingest_job *j = arg;
	struct http_server *h = j->h;

	deferred = j->r;
	do_ingest(h, j->c, j->r);
	deferred = NULL;
	MHD_resume_connection(j->c);
	free(j);
	pthread_mutex_lock(&h->wmu);
	if (!--h->workers)
		pthread_cond_broadcast(&h->wcond);
	pthread_mutex_unlock(&h->wmu);
	return NULL;
}

/*
 * POST /api/v1/ingest. The store answers only once a batch is durable, which may take its group
 * commit's wait (ClickHouse: up to --clickhouse-commit-delay and the INSERTs): the connection is
 * suspended and a worker thread stores the batch, so the event loop goes on serving its other
 * connections (other agents, queries) meanwhile. Past INGEST_WORKERS_MAX at once, or without a
 * thread, the upload is stored on the loop.
 */
static enum MHD_Result ingest_route(struct http_server *h, struct MHD_Connection *c,
				    struct req *r)
{
	struct ingest_job *j;
	pthread_attr_t attr;
	pthread_t t;
	bool started = false;

	if (r->worked)
		return r->answered ? reply(c, r->ans_code, r->ans_type, &r->ans, NULL) : MHD_NO;
	pthread_mutex_lock(&h->wmu);
	if (h->workers < INGEST_WORKERS_MAX && (j = malloc(sizeof(*j)))) {
		*j = (struct ingest_job){ h, c, r };
		h->workers++;
		r->worked = true;
		MHD_suspend_connection(c);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		started = !pthread_create(&t, &attr, ingest_worker, j);
		pthread_attr_destroy(&attr);
		if (!started) {
			h->workers--;
			r->worked = false;
			free(j);
			MHD_resume_connection(c);
		}
	}
	pthread_mutex_unlock(&h->wmu);
	if (started)
		return MHD_YES;
	if (r->worked)	/* resumed above: the handler runs again */
		return MHD_YES;
	return do_ingest(h, c, r);
}

/* ---- query endpoints ---------------------------------------------------------------------- */

/* A query the store could not answer: 503 when it is a matter of time (memory, a ClickHouse
 * shard down: the reason names it), else 500. */
static enum MHD_Result store_failed(struct http_server *h, struct MHD_Connection *c, int err)
{
	const char *why = err == -EHOSTDOWN || err == -EIO || err == -EACCES ? store_strerror() : "";
	enum MHD_Result ret;

	ret = reply_error(h, c, err == -ENOMEM || err == -EHOSTDOWN ? MHD_HTTP_SERVICE_UNAVAILABLE :
								      MHD_HTTP_INTERNAL_SERVER_ERROR,
			  REJ_MAX, "query failed: %s", *why ? why : strerror(-err));
	store_set_error("%s", "");
	return ret;
}

static enum MHD_Result do_flamegraph(struct http_server *h, struct MHD_Connection *c, bool diff)
{
	struct params p = { 0 };
	struct buf b = { 0 };
	enum MHD_Result ret;
	int err;

	if (parse_sample_query(c, &p, diff)) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", p.err);
		goto out;
	}
	err = query_flamegraph(h->st, &p.q, diff ? &p.q2 : NULL, &b);
	if (!selector_refused(h, c, p.sel, p.sel2, &ret))
		ret = err ? store_failed(h, c, err) : reply_json(c, &b);
out:
	buf_done(&b);
	params_done(&p);
	return ret;
}

/* GET /api/v1/processes: the processes with the most samples (limit, default 100). */
static enum MHD_Result do_processes(struct http_server *h, struct MHD_Connection *c)
{
	const char *lim = arg(c, "limit");
	struct params p = { 0 };
	struct buf b = { 0 };
	enum MHD_Result ret;
	long limit = 100;
	int err;

	if (lim && (limit = strtol(lim, NULL, 10)) < 1)
		limit = 100;
	if (parse_sample_query(c, &p, false)) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", p.err);
		goto out;
	}
	err = query_processes(h->st, &p.q, (size_t)limit, &b);
	ret = err ? store_failed(h, c, err) : reply_json(c, &b);
out:
	buf_done(&b);
	params_done(&p);
	return ret;
}

/* GET /api/v1/samples: samples over time in `buckets` buckets (default 200, at most 5000). */
static enum MHD_Result do_samples(struct http_server *h, struct MHD_Connection *c)
{
	const char *nb = arg(c, "buckets");
	struct params p = { 0 };
	struct buf b = { 0 };
	enum MHD_Result ret;
	long buckets = 200;
	int err;

	if (nb && ((buckets = strtol(nb, NULL, 10)) < 1 || buckets > 5000)) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
				  "buckets wants 1 to 5000, not '%.20s'", nb);
		goto out;
	}
	if (parse_sample_query(c, &p, false)) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", p.err);
		goto out;
	}
	p.q.step_ns = (p.q.to_ns - p.q.from_ns + (uint64_t)buckets - 1) / (uint64_t)buckets;
	if (!p.q.step_ns)
		p.q.step_ns = 1;
	err = query_samples(h->st, &p.q, &b);
	ret = err ? store_failed(h, c, err) : reply_json(c, &b);
out:
	buf_done(&b);
	params_done(&p);
	return ret;
}

static enum MHD_Result do_top(struct http_server *h, struct MHD_Connection *c)
{
	const char *lim = arg(c, "limit");
	struct params p = { 0 };
	struct buf b = { 0 };
	enum MHD_Result ret;
	long limit = 100;
	char *end;
	int err;

	if (lim) {
		limit = strtol(lim, &end, 10);
		if (!*lim || *end || limit <= 0 || limit > 1000000) {
			ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
					  "limit must be 1..1000000");
			goto out;
		}
	}
	if (parse_sample_query(c, &p, false)) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", p.err);
		goto out;
	}
	err = query_top(h->st, &p.q, (size_t)limit, &b);
	if (!selector_refused(h, c, p.sel, NULL, &ret))
		ret = err ? store_failed(h, c, err) : reply_json(c, &b);
out:
	buf_done(&b);
	params_done(&p);
	return ret;
}

static enum MHD_Result do_pprof(struct http_server *h, struct MHD_Connection *c)
{
	struct params p = { 0 };
	enum MHD_Result ret;
	uint8_t *gz = NULL;
	size_t len = 0;
	int err;

	if (parse_sample_query(c, &p, false)) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", p.err);
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

/* An optional integer parameter in [min, max]; *ret untouched when absent. 0 or -EINVAL. */
static int parse_count(struct MHD_Connection *c, const char *key, unsigned long long min,
		       unsigned long long max, unsigned long long *ret, char *err, size_t errlen)
{
	const char *v = arg(c, key);
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
	unsigned long long limit = LABELS_DEFAULT_LIMIT, offset = 0;
	struct buf b = { 0 };
	enum MHD_Result ret;
	char err[256];
	int rc;

	if (parse_count(c, "limit", 1, LABELS_MAX_LIMIT, &limit, err, sizeof(err)) ||
	    parse_count(c, "offset", 0, UINT32_MAX, &offset, err, sizeof(err))) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
		goto out;
	}
	if ((arg(c, "from") || arg(c, "since") || arg(c, "to")) ?
		    parse_range(c, "from", "to", &from, &to, err, sizeof(err)) :
		    (to = UINT64_MAX, 0)) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
		goto out;
	}
	if (parse_selector(c, "selector", &sel, err, sizeof(err))) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
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
	for (size_t i = offset; i < nc.t.len && i < offset + limit; i++) {
		if (i > offset)
			buf_put(&b, ",", 1);
		buf_json_str(&b, nc.t.strs[i]);
	}
	/* Sorted, so offset pages are stable while no new value arrives. */
	buf_printf(&b, "],\"total\":%zu", nc.t.len);
	if (offset + limit < nc.t.len)
		buf_printf(&b, ",\"next_offset\":%llu", offset + limit);
	buf_puts(&b, "}");
	ret = reply_json(c, &b);
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

static enum MHD_Result do_series(struct http_server *h, struct MHD_Connection *c)
{
	const char *name = arg(c, "name"), *bk = arg(c, "buckets");
	struct selector *sel = NULL;
	uint64_t from, to;
	struct buf b = { 0 };
	enum MHD_Result ret;
	long buckets = 500;
	char err[256], *end;
	int rc;

	if (!name || !*name) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "missing 'name'");
		goto out;
	}
	if (bk) {
		buckets = strtol(bk, &end, 10);
		if (!*bk || *end || buckets < 1 || buckets > 100000) {
			ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
					  "buckets must be 1..100000");
			goto out;
		}
	}
	if (parse_range(c, "from", "to", &from, &to, err, sizeof(err)) ||
	    parse_selector(c, "selector", &sel, err, sizeof(err))) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
		goto out;
	}
	rc = query_series(h->st, name, from, to, sel, (size_t)buckets, &b);
	if (selector_refused(h, c, sel, NULL, &ret))
		goto out;
	if (rc == -E2BIG) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
				  "more than %u points in range: narrow the range or selector",
				  QUERY_SERIES_MAX_POINTS);
		goto out;
	}
	if (rc) {
		ret = store_failed(h, c, rc);
		goto out;
	}
	ret = reply_json(c, &b);
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

static enum MHD_Result do_metric_names(struct http_server *h, struct MHD_Connection *c)
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
	return reply_json(c, &b);
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

static enum MHD_Result do_intervals(struct http_server *h, struct MHD_Connection *c)
{
	const char *kind = arg(c, "kind"), *lim = arg(c, "limit");
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
			ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
					  "limit must be 1..1000000");
			goto out;
		}
	}
	if (parse_range(c, "from", "to", &from, &to, err, sizeof(err)) ||
	    parse_selector(c, "selector", &sel, err, sizeof(err))) {
		ret = reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
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
	ret = reply_json(c, &b);
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

static enum MHD_Result do_nodes(struct http_server *h, struct MHD_Connection *c)
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
	return reply_json(c, &b);
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
		return reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
				   "stack id must be a positive integer");
	rc = h->st->ops->stacks(h->st, (uint64_t[]){ id }, 1, stack_cb, &so);
	if (rc) {
		buf_done(&b);
		return store_failed(h, c, rc);
	}
	if (!so.found) {
		buf_done(&b);
		return reply_error(h, c, MHD_HTTP_NOT_FOUND, REJ_NOT_FOUND, "no stack %llu", id);
	}
	return reply_json(c, &b);
}

static enum MHD_Result do_efficiency(struct http_server *h, struct MHD_Connection *c)
{
	const char *cs = arg(c, "causes");
	struct eff_request rq = { .by = arg(c, "by"), .selector = arg(c, "selector"), .causes = 10 };
	struct buf b = { 0 };
	char err[512], *end;
	int rc;

	if (cs) {
		rq.causes = strtoul(cs, &end, 10);
		if (!*cs || *end || rq.causes > 1000)
			return reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY,
					   "causes must be 0..1000");
	}
	if (parse_range(c, "from", "to", &rq.from_ns, &rq.to_ns, err, sizeof(err)))
		return reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_QUERY, "%s", err);
	rc = efficiency_query(h->o.eff, &rq, &b, err, sizeof(err));
	if (rc == -EINVAL || rc == -ENODATA) {
		buf_done(&b);
		return reply_error(h, c, rc == -EINVAL ? MHD_HTTP_BAD_REQUEST : MHD_HTTP_NOT_FOUND,
				   REJ_BAD_QUERY, "%s", err);
	}
	if (rc) {
		buf_done(&b);
		return store_failed(h, c, rc);
	}
	return reply_json(c, &b);
}

static enum MHD_Result do_metrics(struct http_server *h, struct MHD_Connection *c)
{
	struct buf b = { 0 };

	if (server_metrics(h->st, &h->ctr, rate_get(h), h->o.eff, h->o.exp, &b))
		return MHD_NO;
	return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4", &b, NULL);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

static bool authorized(const char *token, struct MHD_Connection *c)
{
	const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	size_t tl = strlen(token), al;
	unsigned char diff = 0;

	if (!a || strncmp(a, "Bearer ", 7))
		return false;
	a += 7;
	al = strlen(a);
	/* Constant time in the token's length. */
	for (size_t i = 0; i < tl; i++)
		diff |= (unsigned char)token[i] ^ (unsigned char)(i < al ? a[i] : 0);
	return !diff && al == tl;
}

/*
 * Whether an Accept-Encoding header (RFC 9110 12.5.3) takes coding: listed (or "*") with a
 * q-value above 0. No header: only the identity.
 */
static bool accepts_encoding(const char *ae, const char *coding)
{
	bool star = false, named = false, named_ok = false;

	while (ae && *ae) {
		size_t n = strcspn(ae, ",;"), len = n;
		const char *p = ae, *q;
		double qv = 1;

		while (len && (*p == ' ' || *p == '\t'))
			p++, len--;
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		q = ae + n;
		if (*q == ';') {
			const char *qs = strstr(q, "q=");
			const char *end = q + strcspn(q, ",");

			if (qs && qs < end)
				qv = strtod(qs + 2, NULL);
			q = end;
		}
		if (len == strlen(coding) && !strncasecmp(p, coding, len)) {
			named = true;
			named_ok = qv > 0;
		} else if (len == 1 && *p == '*') {
			star = qv > 0;
		}
		ae = *q ? q + 1 : q;
	}
	return named ? named_ok : star;
}

static const char *capture_arg(void *ctx, const char *name)
{
	return arg(ctx, name);
}

/* Captures and the trace export (server/capture.c). */
static enum MHD_Result do_capture(struct http_server *h, struct MHD_Connection *c, const char *url,
				  const char *method)
{
	struct buf b = { 0 };
	unsigned code = capture_handle(h->st, url, !strcmp(method, MHD_HTTP_METHOD_POST),
				       capture_arg, c, &b);

	if (b.oom) {
		buf_done(&b);
		return MHD_NO;
	}
	return reply(c, code, "application/json", &b, NULL);
}

static enum MHD_Result route(struct http_server *h, struct MHD_Connection *c, const char *url,
			     const char *method, struct req *r)
{
	bool get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);

	if (!strcmp(url, "/metrics") && get)
		return do_metrics(h, c);
	if (strncmp(url, "/api/", 5)) {
		const struct ui_asset *a = ui_asset_find(url);
		struct MHD_Response *resp;
		enum MHD_Result ret;

		if (!a || !get)
			return reply_error(h, c, MHD_HTTP_NOT_FOUND, REJ_NOT_FOUND, "no such page");
		if (a->encoding && !accepts_encoding(MHD_lookup_connection_value(
					   c, MHD_HEADER_KIND, "Accept-Encoding"), a->encoding)) {
			/* A client that takes no gzip (plain curl) gets the file itself. */
			struct buf plain = { 0 };
			uint8_t *out;
			size_t len;

			if (decompress_buf(a->encoding, a->data, a->len, 64u << 20, NULL, NULL, &out,
					   &len) < 0)
				return reply_error(h, c, MHD_HTTP_INTERNAL_SERVER_ERROR, REJ_MAX,
						   "cannot decompress the page");
			plain = (struct buf){ .p = out, .len = len, .cap = len };
			return reply(c, MHD_HTTP_OK, a->content_type, &plain, NULL);
		}
		resp = MHD_create_response_from_buffer(a->len, (void *)a->data,
						       MHD_RESPMEM_PERSISTENT);
		if (!resp)
			return MHD_NO;
		MHD_add_response_header(resp, "Content-Type", a->content_type);
		if (a->encoding)
			MHD_add_response_header(resp, "Content-Encoding", a->encoding);
		MHD_add_response_header(resp, "Vary", "Accept-Encoding");
		ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
		MHD_destroy_response(resp);
		return ret;
	}
	/* Auth was checked in the header phase (on_request). */
	if (!strcmp(url, "/api/v1/ingest")) {
		if (strcmp(method, MHD_HTTP_METHOD_POST))
			return reply_error(h, c, MHD_HTTP_METHOD_NOT_ALLOWED, REJ_BAD_QUERY,
					   "use POST");
		return ingest_route(h, c, r);
	}
	if (capture_path(url))
		return do_capture(h, c, url, method);
	if (!get)
		return reply_error(h, c, MHD_HTTP_METHOD_NOT_ALLOWED, REJ_BAD_QUERY, "use GET");
	if (!strcmp(url, "/api/v1/flamegraph"))
		return do_flamegraph(h, c, false);
	if (!strcmp(url, "/api/v1/diff"))
		return do_flamegraph(h, c, true);
	if (!strcmp(url, "/api/v1/top"))
		return do_top(h, c);
	if (!strcmp(url, "/api/v1/processes"))
		return do_processes(h, c);
	if (!strcmp(url, "/api/v1/samples"))
		return do_samples(h, c);
	if (!strcmp(url, "/api/v1/pprof"))
		return do_pprof(h, c);
	if (!strcmp(url, "/api/v1/labels"))
		return do_labels(h, c, NULL);
	if (!strncmp(url, "/api/v1/label/", 14)) {
		const char *name = url + 14, *slash = strchr(name, '/');
		char label[256];

		if (slash && !strcmp(slash, "/values") && slash > name &&
		    (size_t)(slash - name) < sizeof(label)) {
			memcpy(label, name, (size_t)(slash - name));
			label[slash - name] = 0;
			return do_labels(h, c, label);
		}
	}
	if (!strcmp(url, "/api/v1/series"))
		return do_series(h, c);
	if (!strcmp(url, "/api/v1/metric_names"))
		return do_metric_names(h, c);
	if (!strcmp(url, "/api/v1/intervals"))
		return do_intervals(h, c);
	if (!strcmp(url, "/api/v1/nodes"))
		return do_nodes(h, c);
	if (!strcmp(url, "/api/v1/efficiency") && h->o.eff)
		return do_efficiency(h, c);
	if (!strncmp(url, "/api/v1/stack/", 14))
		return do_stack(h, c, url + 14);
	return reply_error(h, c, MHD_HTTP_NOT_FOUND, REJ_NOT_FOUND, "no such endpoint '%.100s'", url);
}

/*
 * Header phase (first call, *con_cls NULL): the token and the declared size are checked before
 * any body byte is read, so an unauthenticated or oversized upload costs nothing; the early
 * answer makes libmicrohttpd close the connection instead of reading the body. Then the body
 * (ingest only; other paths' bodies are discarded), then the route.
 */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *data,
				  size_t *size, void **con_cls)
{
	struct http_server *h = cls;
	struct req *r = *con_cls;

	(void)version;
	if (!r) {
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
		bool over, api = !strncmp(url, "/api/", 5);
		bool ingest = !strcmp(url, "/api/v1/ingest");
		const char *token = ingest ? h->o.ingest_token : h->o.query_token;

		__atomic_add_fetch(&h->requests, 1, __ATOMIC_RELAXED);
		if (api && token && !authorized(token, c))
			return reply_error(h, c, MHD_HTTP_UNAUTHORIZED, REJ_UNAUTHORIZED,
					   "missing or wrong bearer token for %s",
					   ingest ? "ingest" : "queries");
		over = ingest && cl && strtoull(cl, NULL, 10) > h->o.max_body;
		/* A client that waits for "100 Continue" learns now; one that sends the body
		 * anyway would only see a broken pipe, so its body is read and dropped, then
		 * answered 413 (over: nothing is kept). */
		if (over && expect && !strcasecmp(expect, "100-continue"))
			return reply_error(h, c, MHD_HTTP_CONTENT_TOO_LARGE, REJ_TOO_LARGE,
					   "body larger than %zu bytes", h->o.max_body);
		r = calloc(1, sizeof(*r));
		if (!r)
			return MHD_NO;
		r->ingest = ingest && !strcmp(method, MHD_HTTP_METHOD_POST);
		r->over = over;
		*con_cls = r;
		return MHD_YES;
	}
	if (*size) {
		if (r->ingest && !r->over && r->body.len + *size > h->o.max_body) {
			r->over = true;
			buf_done(&r->body);
		}
		if (r->ingest && !r->over) {
			buf_put(&r->body, data, *size);
			if (r->body.oom)
				return MHD_NO;
		}
		*size = 0;
		return MHD_YES;
	}
	return route(h, c, url, method, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct req *r = *con_cls;

	(void)cls;
	(void)c;
	(void)toe;
	if (!r)
		return;
	buf_done(&r->body);
	buf_done(&r->ans);
	free(r);
	*con_cls = NULL;
}

/* libmicrohttpd's own messages (refused connections at a limit, TLS handshakes failing, ...):
 * counted, and logged at most once a minute so that a flood does not fill the log. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct http_server *h = cls;
	uint64_t now = mono_ns(), last = __atomic_load_n(&h->last_mhd_log_ns, __ATOMIC_RELAXED);
	char msg[256];
	size_t n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '.'))
		msg[--n] = 0;
	/* A client that gave up (the UI aborts superseded queries) is not a server error. */
	if (strstr(msg, "no longer available") || strstr(msg, "reset by peer") ||
	    strstr(msg, "Broken pipe") || strstr(msg, "closed by") ||
	    strstr(msg, "disconnected")) {
		__atomic_add_fetch(&h->ctr.cancelled, 1, __ATOMIC_RELAXED);
		log_debug("http: client went away: %s", msg);
		return;
	}
	__atomic_add_fetch(&h->ctr.mhd_errors, 1, __ATOMIC_RELAXED);
	if ((!last || now - last > 60 * NSEC_PER_SEC) &&
	    __atomic_compare_exchange_n(&h->last_mhd_log_ns, &last, now, false, __ATOMIC_RELAXED,
					__ATOMIC_RELAXED))
		log_warn("http: %s (further messages in the next minute: debug level only)", msg);
	else
		log_debug("http: %s", msg);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
			  enum MHD_ConnectionNotificationCode code)
{
	struct http_server *h = cls;

	(void)c;
	(void)socket_ctx;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		__atomic_add_fetch(&h->ctr.connections, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&h->ctr.connections_total, 1, __ATOMIC_RELAXED);
	} else {
		__atomic_sub_fetch(&h->ctr.connections, 1, __ATOMIC_RELAXED);
	}
}

/*
 * Our own listening socket rather than libmicrohttpd's: SO_REUSEADDR only (restarts while old
 * connections sit in TIME_WAIT), never SO_REUSEPORT, so that a second server on the same port
 * fails here instead of silently taking half of the batches; and errors we can name.
 */
static int open_listener(struct http_server *h, const char *listen_s, char *err, size_t errlen)
{
	struct sockaddr_storage sa;
	socklen_t salen;
	int one = 1, zero = 0, fd;

	if (parse_listen_addr(listen_s, &sa, &salen)) {
		snprintf(err, errlen,
			 "--listen wants ADDR:PORT or [IPV6]:PORT (127.0.0.1:7070, [::]:7070), "
			 "not '%s'", listen_s);
		return -EINVAL;
	}
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, errlen, "cannot listen on %s: socket: %s", listen_s, strerror(errno));
		return -errno;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* "[::]:PORT" serves IPv4 clients too, whatever the host's bindv6only default. */
	if (sa.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(fd, (struct sockaddr *)&sa, salen)) {
		int e = errno;

		snprintf(err, errlen, "cannot listen on %s: %s%s", listen_s, strerror(e),
			 e == EADDRINUSE ? " (another gpuscope-server, or another program, already "
					   "listens on this port)" : "");
		close(fd);
		return -e;
	}
	if (listen(fd, 4096)) {
		int e = errno;

		snprintf(err, errlen, "cannot listen on %s: %s", listen_s, strerror(e));
		close(fd);
		return -e;
	}
	salen = sizeof(sa);
	getsockname(fd, (struct sockaddr *)&sa, &salen);
	format_sockaddr((struct sockaddr *)&sa, h->addr, sizeof(h->addr));
	h->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port :
						   ((struct sockaddr_in *)&sa)->sin_port);
	h->listen_fd = fd;
	return 0;
}

struct http_server *http_start(struct store *st, const struct http_opts *o, char *err,
			       size_t errlen)
{
	struct http_server *h = calloc(1, sizeof(*h));
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
			 MHD_ALLOW_SUSPEND_RESUME;
	bool tls = o->tls_cert_pem && o->tls_key_pem;

	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->st = st;
	h->o = *o;
	h->listen_fd = -1;
	pthread_mutex_init(&h->rmu, NULL);
	pthread_mutex_init(&h->wmu, NULL);
	pthread_cond_init(&h->wcond, NULL);
	if (open_listener(h, o->listen, err, errlen))
		goto out_free;
	if (tls && !MHD_is_feature_supported(MHD_FEATURE_TLS)) {
		snprintf(err, errlen, "TLS asked for, but this libmicrohttpd has no TLS support");
		goto out_close;
	}
	/*
	 * Event loops, not a thread per connection: idle kept-alive agents cost a socket and a
	 * small buffer each, never a thread, and a slow client only occupies its own connection.
	 * A handler (ingest, a query) runs on its loop's thread; `threads` loops keep one slow
	 * query from holding up everyone else.
	 */
	h->d = MHD_start_daemon(
		flags | (tls ? MHD_USE_TLS : 0), 0, NULL, NULL, on_request, h,
		MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
		MHD_OPTION_LISTEN_SOCKET, h->listen_fd,
		MHD_OPTION_THREAD_POOL_SIZE, o->threads ? o->threads : 8u,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
		MHD_OPTION_CONNECTION_LIMIT, o->max_connections ? o->max_connections : 8192u,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->max_per_address,
		MHD_OPTION_CONNECTION_TIMEOUT, o->idle_timeout_s ? o->idle_timeout_s : 30u,
		tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, o->tls_cert_pem,
		MHD_OPTION_HTTPS_MEM_KEY, o->tls_key_pem, MHD_OPTION_END);
	if (!h->d) {
		snprintf(err, errlen, "cannot serve on %s%s", h->addr,
			 tls ? ": TLS setup failed (is --tls-key-file the key of --tls-cert-file?)"
			     : "");
		goto out_close;
	}
	return h;
out_close:
	close(h->listen_fd);
out_free:
	pthread_mutex_destroy(&h->rmu);
	pthread_mutex_destroy(&h->wmu);
	pthread_cond_destroy(&h->wcond);
	free(h);
	return NULL;
}

uint16_t http_port(const struct http_server *h)
{
	return h->port;
}

const char *http_address(const struct http_server *h)
{
	return h->addr;
}

void http_stop(struct http_server *h)
{
	if (!h)
		return;
	/* Suspended connections must be resumed before the daemon stops: let the workers end. */
	pthread_mutex_lock(&h->wmu);
	while (h->workers)
		pthread_cond_wait(&h->wcond, &h->wmu);
	pthread_mutex_unlock(&h->wmu);
	MHD_stop_daemon(h->d);
	close(h->listen_fd);
	pthread_mutex_destroy(&h->rmu);
	pthread_mutex_destroy(&h->wmu);
	pthread_cond_destroy(&h->wcond);
	free(h);
}
