/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HTTP front of gpuscope-server on libmicrohttpd, the transport: a few epoll event-loop threads
 * serve thousands of kept-alive connections; auth and size checks in the header phase (before any
 * body byte); request bodies bounded; routing, the UI's files, replies and JSON errors.
 */
#include "server/http_int.h"

__thread struct req *http_deferred;
/* "Gpuscope-Ingest-Limits" on every answer (set once at start): what an agent sizes its batches
 * to before sending (the body size, and the decoding budget of common/batch.h's formula). */
static char ingest_limits[128];

static void count(struct http_server *h, enum reject r)
{
	__atomic_add_fetch(&h->ctr.rejects[r], 1, __ATOMIC_RELAXED);
}

enum MHD_Result http_reply(struct MHD_Connection *c, unsigned code, const char *type,
			   struct buf *body, const char *encoding)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	if (http_deferred) {
		http_deferred->ans_code = code;
		http_deferred->ans_type = type;
		http_deferred->ans = *body;
		*body = (struct buf){ 0 };
		http_deferred->answered = true;
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
	if (ingest_limits[0])
		MHD_add_response_header(resp, "Gpuscope-Ingest-Limits", ingest_limits);
	if (code == MHD_HTTP_SERVICE_UNAVAILABLE)	/* busy or a store failure: soon again */
		MHD_add_response_header(resp, "Retry-After", "1");
	ret = MHD_queue_response(c, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

struct offload_job {
	struct http_server *h;
	struct MHD_Connection *c;
	struct req *r;
	http_work_fn fn;
	unsigned *running;		/* its kind's count, in h->workers too */
};

/* Runs one request's work off the event loop, then resumes its connection, whose handler
 * queues the answer left in r. Neither c nor r is touched after the resume. */
static void *offload_worker(void *arg)
{
	struct offload_job *j = arg;
	struct http_server *h = j->h;

	http_deferred = j->r;
	j->fn(h, j->c, j->r);
	http_deferred = NULL;
	MHD_resume_connection(j->c);
	pthread_mutex_lock(&h->wmu);
	--*j->running;
	if (!--h->workers)
		pthread_cond_broadcast(&h->wcond);
	pthread_mutex_unlock(&h->wmu);
	free(j);
	return NULL;
}

bool http_offload(struct http_server *h, struct MHD_Connection *c, struct req *r,
		  http_work_fn fn, unsigned *running, unsigned max)
{
	struct offload_job *j;
	pthread_attr_t attr;
	pthread_t t;
	bool started = false;

	pthread_mutex_lock(&h->wmu);
	if (*running < max && (j = malloc(sizeof(*j)))) {
		*j = (struct offload_job){ h, c, r, fn, running };
		++*running;
		h->workers++;
		r->worked = true;
		MHD_suspend_connection(c);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		started = !pthread_create(&t, &attr, offload_worker, j);
		pthread_attr_destroy(&attr);
		if (!started) {
			--*running;
			h->workers--;
			r->worked = false;
			free(j);
			MHD_resume_connection(c);
		}
	}
	pthread_mutex_unlock(&h->wmu);
	return started;
}

bool http_inflight_charge(struct http_server *h, struct req *r, size_t n)
{
	int64_t now = __atomic_add_fetch(&h->ctr.inflight_bytes, (int64_t)n, __ATOMIC_RELAXED);

	if ((uint64_t)now > h->o.max_inflight) {
		__atomic_sub_fetch(&h->ctr.inflight_bytes, (int64_t)n, __ATOMIC_RELAXED);
		return false;
	}
	r->charged += n;
	return true;
}

static void inflight_release(struct http_server *h, struct req *r)
{
	__atomic_sub_fetch(&h->ctr.inflight_bytes, (int64_t)r->charged, __ATOMIC_RELAXED);
	r->charged = 0;
}

/*
 * Counts the buffer growth that n more body bytes cause (the whole declared Content-Length at
 * once when there is one, so the body takes one allocation); false when the budget is spent.
 */
static bool body_charge(struct http_server *h, struct req *r, size_t n)
{
	size_t need = r->body.len + n, ncap;

	if (need <= r->body.cap)
		return true;
	if (!r->body.cap && r->expect >= need && r->expect <= h->o.max_body)
		need = (size_t)r->expect;
	ncap = r->body.cap ? r->body.cap : 256;	/* buf_reserve()'s growth */
	while (ncap < need)
		ncap *= 2;
	if (!http_inflight_charge(h, r, ncap - r->body.cap))
		return false;
	if (need > r->body.len + n)
		buf_reserve(&r->body, need - r->body.len);	/* failure: body.oom, seen below */
	return true;
}

enum MHD_Result http_reply_error(struct http_server *h, struct MHD_Connection *c, unsigned code,
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
	return http_reply(c, code, "application/json", &b, NULL);
}

enum MHD_Result http_reply_json(struct MHD_Connection *c, struct buf *b)
{
	if (b->oom) {
		buf_done(b);
		return MHD_NO;
	}
	buf_put(b, "\n", 1);
	return http_reply(c, MHD_HTTP_OK, "application/json", b, NULL);
}

const char *http_arg(struct MHD_Connection *c, const char *name)
{
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
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

/* Whether name (len bytes) is one of the comma-separated list's entries. */
static bool in_list(const char *list, const char *name, size_t len)
{
	while (list && *list) {
		size_t n = strcspn(list, ",");
		const char *p = list;
		size_t l = n;

		while (l && *p == ' ')
			p++, l--;
		while (l && p[l - 1] == ' ')
			l--;
		if ((l == 1 && *p == '*') || (l == len && !strncasecmp(p, name, len)))
			return true;
		list += n + (list[n] == ',');
	}
	return false;
}

/*
 * The Host header against DNS rebinding: a page of evil.example whose name comes to resolve to
 * 127.0.0.1 makes the browser send "Host: evil.example" to this server. IP literals, localhost
 * (browsers resolve *.localhost themselves) and this machine's name are always this server's;
 * other names only in --allowed-hosts, or any on a non-loopback listen address without that list
 * (reached by names we cannot know). No Host (HTTP/1.0): allowed.
 */
static bool host_allowed(struct http_server *h, struct MHD_Connection *c)
{
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	char name[256];
	unsigned char tmp[16];
	size_t len;

	if (!host)
		return true;
	if (*host == '[') {
		host++;
		len = strcspn(host, "]");
	} else {
		len = strcspn(host, ":");
	}
	if (!len || len >= sizeof(name))
		return false;
	memcpy(name, host, len);
	name[len] = 0;
	if (name[len - 1] == '.')	/* "localhost." */
		name[--len] = 0;
	if (inet_pton(AF_INET, name, tmp) == 1 || inet_pton(AF_INET6, name, tmp) == 1)
		return true;
	if (!strcasecmp(name, "localhost") ||
	    (len > 10 && !strcasecmp(name + len - 10, ".localhost")) ||
	    (h->hostname[0] && !strcasecmp(name, h->hostname)))
		return true;
	if (h->o.allowed_hosts)
		return in_list(h->o.allowed_hosts, name, len);
	return !h->loopback;
}

/*
 * A browser's cross-origin request that changes state (a "simple" POST needs no preflight, so
 * the browser sends it and only hides the answer): its Origin names another host than Host.
 * The agent and the CLI send no Origin.
 */
static bool cross_origin(struct MHD_Connection *c, const char *method)
{
	const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	const char *auth;

	if (!strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD) ||
	    !origin)
		return false;
	auth = strstr(origin, "://");
	if (!auth || !host)
		return true;	/* "null" (a sandboxed page, a file) or no Host to compare */
	return strcasecmp(auth + 3, host) != 0;
}

static const char *capture_arg(void *ctx, const char *name)
{
	return http_arg(ctx, name);
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
	if (code == 429)
		count(h, REJ_LIMIT);
	return http_reply(c, code, "application/json", &b, NULL);
}

enum MHD_Result http_no_endpoint(struct http_server *h, struct MHD_Connection *c, const char *url)
{
	return http_reply_error(h, c, MHD_HTTP_NOT_FOUND, REJ_NOT_FOUND, "no such endpoint '%.100s'",
				url);
}

/* /metrics, the UI's files, ingest, captures, then the query API's table (http_query.c). */
static enum MHD_Result route(struct http_server *h, struct MHD_Connection *c, const char *url,
			     const char *method, struct req *r)
{
	bool get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);

	if (!strcmp(url, "/metrics") && get)
		return http_do_metrics(h, c, r);
	if (!strcmp(url, "/healthz") && get) {
		/* For probes: answered by the event loop alone, no token, no store. */
		struct buf ok = { 0 };

		buf_puts(&ok, "ok\n");
		if (ok.oom)
			return MHD_NO;
		return http_reply(c, MHD_HTTP_OK, "text/plain", &ok, NULL);
	}
	if (strncmp(url, "/api/", 5)) {
		const struct ui_asset *a = ui_asset_find(url);
		struct MHD_Response *resp;
		enum MHD_Result ret;

		if (!a || !get)
			return http_reply_error(h, c, MHD_HTTP_NOT_FOUND, REJ_NOT_FOUND, "no such page");
		if (a->encoding && !accepts_encoding(MHD_lookup_connection_value(
					   c, MHD_HEADER_KIND, "Accept-Encoding"), a->encoding)) {
			/* A client that takes no gzip (plain curl) gets the file itself. */
			struct buf plain = { 0 };
			uint8_t *out;
			size_t len;

			if (decompress_buf(a->encoding, a->data, a->len, 64u << 20, NULL, NULL, &out,
					   &len) < 0)
				return http_reply_error(h, c, MHD_HTTP_INTERNAL_SERVER_ERROR, REJ_MAX,
							"cannot decompress the page");
			plain = (struct buf){ .p = out, .len = len, .cap = len };
			return http_reply(c, MHD_HTTP_OK, a->content_type, &plain, NULL);
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
			return http_reply_error(h, c, MHD_HTTP_METHOD_NOT_ALLOWED, REJ_BAD_QUERY,
						"use POST");
		return http_ingest_route(h, c, r);
	}
	if (capture_path(url))
		return do_capture(h, c, url, method);
	if (!get)
		return http_reply_error(h, c, MHD_HTTP_METHOD_NOT_ALLOWED, REJ_BAD_QUERY, "use GET");
	for (const struct http_route *rt = http_query_routes; rt->path; rt++)
		if (rt->prefix ? !strncmp(url, rt->path, strlen(rt->path)) : !strcmp(url, rt->path))
			return rt->fn(h, c, url);
	return http_no_endpoint(h, c, url);
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
		/* The agent's paths take the agent's (ingest) token: with split tokens an agent
		 * holds no query token, and a query-token holder is no agent. */
		bool agent = ingest || capture_agent_path(url);
		const char *token = agent ? h->o.ingest_token : h->o.query_token;

		__atomic_add_fetch(&h->requests, 1, __ATOMIC_RELAXED);
		http_conn_headers(h, c);
		if (strcmp(url, "/healthz") && !host_allowed(h, c))
			return http_reply_error(h, c, MHD_HTTP_FORBIDDEN, REJ_HOST,
						"this server does not answer to Host '%.100s' "
						"(--allowed-hosts)",
						MHD_lookup_connection_value(c, MHD_HEADER_KIND,
									    "Host"));
		if (cross_origin(c, method))
			return http_reply_error(h, c, MHD_HTTP_FORBIDDEN, REJ_ORIGIN,
						"cross-origin requests that change state are refused");
		if (!strcmp(url, "/metrics") && (h->o.metrics_token || h->o.query_token) &&
		    !(h->o.metrics_token && authorized(h->o.metrics_token, c)) &&
		    !(h->o.query_token && authorized(h->o.query_token, c)))
			return http_reply_error(h, c, MHD_HTTP_UNAUTHORIZED, REJ_UNAUTHORIZED,
						"missing or wrong bearer token for /metrics (the "
						"query token or --metrics-token-file's)");
		if (api && token && !authorized(token, c))
			return http_reply_error(h, c, MHD_HTTP_UNAUTHORIZED, REJ_UNAUTHORIZED,
						"missing or wrong bearer token for %s",
						ingest ? "ingest" : agent ? "the agent's capture "
						"paths (the ingest token)" : "queries");
		over = ingest && cl && strtoull(cl, NULL, 10) > h->o.max_body;
		/* A client that waits for "100 Continue" learns now; one that sends the body
		 * anyway would only see a broken pipe, so its body is read and dropped, then
		 * answered 413 (over: nothing is kept). */
		if (over && expect && !strcasecmp(expect, "100-continue"))
			return http_reply_error(h, c, MHD_HTTP_CONTENT_TOO_LARGE, REJ_TOO_LARGE,
						"body larger than %zu bytes", h->o.max_body);
		r = calloc(1, sizeof(*r));
		if (!r)
			return MHD_NO;
		r->ingest = ingest && !strcmp(method, MHD_HTTP_METHOD_POST);
		r->over = over;
		r->expect = cl ? strtoull(cl, NULL, 10) : 0;
		*con_cls = r;
		return MHD_YES;
	}
	if (*size) {
		http_conn_body(h, c, *size);
		if (r->ingest && !r->over && r->body.len + *size > h->o.max_body) {
			r->over = true;
			buf_done(&r->body);
			inflight_release(h, r);
		}
		if (r->ingest && !r->over && !r->busy && !body_charge(h, r, *size)) {
			/* The budget of bodies held at once is spent: this one is read and
			 * dropped, and answered 503 with Retry-After (nothing kept). */
			r->busy = true;
			buf_done(&r->body);
			inflight_release(h, r);
		}
		if (r->ingest && !r->over && !r->busy) {
			buf_put(&r->body, data, *size);
			if (r->body.oom)
				return MHD_NO;
		}
		*size = 0;
		return MHD_YES;
	}
	http_conn_work(h, c);
	return route(h, c, url, method, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_server *h = cls;
	struct req *r = *con_cls;

	(void)toe;
	http_conn_done(h, c);
	if (!r)
		return;
	inflight_release(h, r);
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
	    strstr(msg, "disconnected") || strstr(msg, "connection closure")) {
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

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		__atomic_add_fetch(&h->ctr.connections, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&h->ctr.connections_total, 1, __ATOMIC_RELAXED);
		http_conn_started(h, c, socket_ctx);
	} else {
		__atomic_sub_fetch(&h->ctr.connections, 1, __ATOMIC_RELAXED);
		http_conn_closed(h, socket_ctx);
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
	h->loopback = sockaddr_is_loopback((struct sockaddr *)&sa);
	if (gethostname(h->hostname, sizeof(h->hostname)))
		h->hostname[0] = 0;
	h->hostname[sizeof(h->hostname) - 1] = 0;
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
	unsigned max_conn;

	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->st = st;
	h->o = *o;
	if (h->o.max_inflight < h->o.max_body)
		h->o.max_inflight = h->o.max_body;
	snprintf(ingest_limits, sizeof(ingest_limits), "max-body=%zu, decode-base=%u, decode-ratio=%u",
		 h->o.max_body, (unsigned)BATCH_DECODE_BASE, (unsigned)BATCH_DECODE_RATIO);
	h->ctr.inflight_max = h->o.max_inflight;
	h->listen_fd = -1;
	pthread_mutex_init(&h->rmu, NULL);
	pthread_mutex_init(&h->wmu, NULL);
	pthread_cond_init(&h->wcond, NULL);
	pthread_mutex_init(&h->dmu, NULL);
	pthread_cond_init(&h->dcond, NULL);
	if (open_listener(h, o->listen, err, errlen))
		goto out_free;
	if (tls && !MHD_is_feature_supported(MHD_FEATURE_TLS)) {
		snprintf(err, errlen, "TLS asked for, but this libmicrohttpd has no TLS support");
		goto out_close;
	}
	if (!h->o.header_timeout_s)
		h->o.header_timeout_s = 10;
	if (http_conn_init(h)) {
		snprintf(err, errlen, "cannot start the connection guard: out of memory");
		goto out_close;
	}
	max_conn = h->guard.max;
	/*
	 * Event loops, not a thread per connection: idle kept-alive agents cost a socket and a
	 * small buffer each, never a thread, and a slow client only occupies its own connection.
	 * A handler (ingest, a query) runs on its loop's thread; `threads` loops keep one slow
	 * query from holding up everyone else. The limits are the guard's (http_conn.c, which
	 * logs and counts a refusal and makes room by closing a slow request); libmicrohttpd's
	 * own limit is above them by the connections being closed meanwhile.
	 */
	h->d = MHD_start_daemon(
		flags | (tls ? MHD_USE_TLS : 0), 0, http_conn_accept, h, on_request, h,
		MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
		MHD_OPTION_LISTEN_SOCKET, h->listen_fd,
		MHD_OPTION_THREAD_POOL_SIZE, o->threads ? o->threads : 8u,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
		MHD_OPTION_CONNECTION_LIMIT, max_conn + max_conn / 4 + 64,
		MHD_OPTION_CONNECTION_TIMEOUT, o->idle_timeout_s ? o->idle_timeout_s : 30u,
		tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, o->tls_cert_pem,
		MHD_OPTION_HTTPS_MEM_KEY, o->tls_key_pem, MHD_OPTION_END);
	if (!h->d) {
		snprintf(err, errlen, "cannot serve on %s%s", h->addr,
			 tls ? ": TLS setup failed (is --tls-key-file the key of --tls-cert-file?)"
			     : "");
		goto out_guard;
	}
	return h;
out_guard:
	http_conn_fini(h);
out_close:
	close(h->listen_fd);
out_free:
	pthread_mutex_destroy(&h->rmu);
	pthread_mutex_destroy(&h->wmu);
	pthread_cond_destroy(&h->wcond);
	pthread_mutex_destroy(&h->dmu);
	pthread_cond_destroy(&h->dcond);
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
	http_conn_fini(h);
	close(h->listen_fd);
	pthread_mutex_destroy(&h->rmu);
	pthread_mutex_destroy(&h->wmu);
	pthread_cond_destroy(&h->wcond);
	pthread_mutex_destroy(&h->dmu);
	pthread_cond_destroy(&h->dcond);
	free(h);
}
