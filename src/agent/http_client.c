/* SPDX-License-Identifier: Apache-2.0 */
/* The agent's one HTTP client (libcurl): links, connections, requests; see http_client.h. */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "agent/http_client.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/prom.h"
#include "common/util.h"

#define TOKEN_MAX	16384		/* a service-account token is ~1 KiB */
#define BODY_DEFAULT	(64u << 10)

/* What became of a request: gpuscope_agent_http_requests_total{link,result}. */
enum outcome {
	OUT_OK, OUT_HTTP_4XX, OUT_HTTP_5XX, OUT_HTTP_OTHER, OUT_UNREACHABLE, OUT_TIMEOUT, OUT_TLS,
	OUT_CLOSED, OUT_CANCELLED, OUT_TOO_LONG, OUT_ERROR, OUT_N
};
static const char *const outcome_name[OUT_N] = {
	[OUT_OK] = "ok", [OUT_HTTP_4XX] = "http_4xx", [OUT_HTTP_5XX] = "http_5xx",
	[OUT_HTTP_OTHER] = "http_other", [OUT_UNREACHABLE] = "unreachable",
	[OUT_TIMEOUT] = "timeout", [OUT_TLS] = "tls", [OUT_CLOSED] = "closed",
	[OUT_CANCELLED] = "cancelled", [OUT_TOO_LONG] = "too_long", [OUT_ERROR] = "error",
};

struct http_link {
	char *name, *base, *ca_file, *cert_file, *key_file, *token_file, *proxy;
	uint64_t connect_timeout_ns, timeout_ns;
	pthread_mutex_t mu;		/* token, token_warned */
	char *token;			/* the last good token; NULL: none read yet */
	bool token_warned;
	uint64_t outcomes[OUT_N];		/* __atomic; read by http_client_metrics() */
	struct http_link *next;		/* the live links (links_mu) */
};

static pthread_mutex_t links_mu = PTHREAD_MUTEX_INITIALIZER;
static struct http_link *links;

struct http_conn {
	struct http_link *l;
	CURL *curl;
	/* the request in flight */
	const struct http_req *req;
	struct http_answer *ans;
	size_t max_body;
	bool too_big, stopped;
	char err[CURL_ERROR_SIZE];
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static char *dup_or_null(const char *s, bool *nomem)
{
	char *d;

	if (!s)
		return NULL;
	d = strdup(s);
	*nomem |= !d;
	return d;
}

struct http_link *http_link__new(const struct http_link_opts *o)
{
	struct http_link *l;
	bool nomem = false;
	size_t n;

	if (!o->base_url || (strncmp(o->base_url, "http://", 7) &&
			     strncmp(o->base_url, "https://", 8))) {
		errno = EINVAL;
		return NULL;
	}
	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK) {
		errno = ENOMEM;
		return NULL;
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->name = dup_or_null(o->name ? o->name : "http", &nomem);
	l->base = dup_or_null(o->base_url, &nomem);
	l->ca_file = dup_or_null(o->ca_file, &nomem);
	l->cert_file = dup_or_null(o->cert_file, &nomem);
	l->key_file = dup_or_null(o->key_file, &nomem);
	l->token_file = dup_or_null(o->token_file, &nomem);
	l->proxy = dup_or_null(o->proxy, &nomem);
	l->connect_timeout_ns = o->connect_timeout_ns ? o->connect_timeout_ns : 5 * NSEC_PER_SEC;
	l->timeout_ns = o->timeout_ns ? o->timeout_ns : 10 * NSEC_PER_SEC;
	pthread_mutex_init(&l->mu, NULL);
	if (nomem) {
		http_link__free(l);
		errno = ENOMEM;
		return NULL;
	}
	n = strlen(l->base);
	while (n > 8 && l->base[n - 1] == '/')
		l->base[--n] = 0;
	pthread_mutex_lock(&links_mu);
	l->next = links;
	links = l;
	pthread_mutex_unlock(&links_mu);
	return l;
}

void http_link__free(struct http_link *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&links_mu);
	for (struct http_link **p = &links; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			break;
		}
	pthread_mutex_unlock(&links_mu);
	free(l->name);
	free(l->base);
	free(l->ca_file);
	free(l->cert_file);
	free(l->key_file);
	free(l->token_file);
	free(l->proxy);
	free(l->token);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

const char *http_link__base(const struct http_link *l)
{
	return l->base;
}

struct http_conn *http_conn__new(struct http_link *l)
{
	struct http_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->l = l;
	c->curl = curl_easy_init();
	if (!c->curl) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	return c;
}

void http_conn__free(struct http_conn *c)
{
	if (!c)
		return;
	curl_easy_cleanup(c->curl);
	free(c);
}

/*
 * The token file read again: *ret_auth gets "Authorization: Bearer <token>" (malloc'd) from
 * the file, or from the last good read while it is unreadable (said once), or NULL for none.
 */
static int auth_header(struct http_link *l, char **ret_auth)
{
	char *buf, *line = NULL;
	int n, err = 0;

	*ret_auth = NULL;
	if (!l->token_file)
		return 0;
	buf = malloc(TOKEN_MAX);
	if (!buf)
		return -ENOMEM;
	n = read_token_file(l->token_file, buf, TOKEN_MAX);
	pthread_mutex_lock(&l->mu);
	if (n >= 0) {
		char *t = strdup(buf);

		if (t) {
			free(l->token);
			l->token = t;
		}
		l->token_warned = false;
	} else if (!l->token_warned) {
		log_warn("%s: cannot read token file '%s': %s, %s", l->name, l->token_file,
			 n == -ENODATA ? "empty" : strerror(-n),
			 l->token ? "keeping the last token" : "sending none");
		l->token_warned = true;
	}
	if (l->token && asprintf(&line, "Authorization: Bearer %s", l->token) < 0) {
		line = NULL;
		err = -ENOMEM;
	}
	pthread_mutex_unlock(&l->mu);
	free(buf);
	*ret_auth = line;
	return err;
}

static bool keep(struct http_conn *c, const char *data, size_t n)
{
	struct http_answer *a = c->ans;
	size_t room;
	char *p;

	if (a->len + n > c->max_body) {
		if (!c->req->keep_head) {
			c->too_big = true;
			return false;
		}
		n = c->max_body - a->len;
		if (!n)
			return true;
	}
	room = a->len + n + 1;
	p = realloc(a->body, room);
	if (!p)
		return false;
	memcpy(p + a->len, data, n);
	a->len += n;
	p[a->len] = 0;
	a->body = p;
	return true;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *arg)
{
	struct http_conn *c = arg;
	size_t n = size * nmemb;
	long status = 0;

	if (c->req->on_data) {
		curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
		if (status / 100 == 2) {
			if (c->req->on_data(c->req->arg, data, n))
				return n;
			c->stopped = true;
			return 0;
		}
	}
	return keep(c, data, n) ? n : 0;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct http_conn *c = arg;

	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	if (c->req->cancel && c->req->cancel(c->req->arg)) {
		c->stopped = true;
		return 1;
	}
	return 0;
}

/* A libcurl failure as -errno. */
static int curl_errno(const struct http_conn *c, CURLcode rc)
{
	if (c->too_big)
		return -EMSGSIZE;
	if (c->stopped)
		return -ECANCELED;
	switch (rc) {
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
		return -ECONNRESET;
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -EHOSTUNREACH;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_CRL_BADFILE:
		return -EPROTO;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

static enum outcome outcome_of(int err, long status)
{
	switch (err) {
	case 0:
		return status / 100 == 2 ? OUT_OK : status / 100 == 4 ? OUT_HTTP_4XX :
		       status / 100 == 5 ? OUT_HTTP_5XX : OUT_HTTP_OTHER;
	case -ECONNREFUSED:
	case -EHOSTUNREACH:
		return OUT_UNREACHABLE;
	case -ETIMEDOUT:
		return OUT_TIMEOUT;
	case -EPROTO:
		return OUT_TLS;
	case -ECONNRESET:
		return OUT_CLOSED;
	case -ECANCELED:
		return OUT_CANCELLED;
	case -EMSGSIZE:
		return OUT_TOO_LONG;
	default:
		return OUT_ERROR;
	}
}

void http_client_metrics(FILE *out)
{
	prom_family(out, "gpuscope_agent_http_requests_total", "counter",
		    "Requests of the agent's HTTP client by link (server, kubernetes) and result: "
		    "ok (2xx), http_4xx, http_5xx, unreachable, timeout, tls, closed, cancelled, "
		    "too_long, error.");
	pthread_mutex_lock(&links_mu);
	for (struct http_link *l = links; l; l = l->next)
		for (int r = 0; r < OUT_N; r++) {
			struct prom_label lb[] = { { "link", l->name },
						   { "result", outcome_name[r] } };

			prom_sample_u64(out, "gpuscope_agent_http_requests_total", lb, 2,
					__atomic_load_n(&l->outcomes[r], __ATOMIC_RELAXED));
		}
	pthread_mutex_unlock(&links_mu);
}

/* The answer's first line (at most 200 bytes) as the reason of a status outside 2xx. */
static void status_why(struct http_answer *a)
{
	size_t n = 0;

	if (a->body)
		while (n < a->len && n < 200 && a->body[n] != '\n' && a->body[n] != '\r')
			n++;
	snprintf(a->why, sizeof(a->why), "HTTP %ld: %.*s", a->status, n ? (int)n : 7,
		 n ? a->body : "(empty)");
}

static long to_ms(uint64_t ns)
{
	return ns / NSEC_PER_MSEC ? (long)(ns / NSEC_PER_MSEC) : 1;
}

int http_conn__request(struct http_conn *c, const struct http_req *req, struct http_answer *ans)
{
	struct http_link *l = c->l;
	struct curl_slist *hdrs = NULL, *h;
	char line[256], *url = NULL, *auth = NULL;
	uint64_t timeout_ns = req->timeout_ns ? req->timeout_ns : l->timeout_ns;
	CURL *cu = c->curl;
	CURLcode rc;
	int err;

	*ans = (struct http_answer){ 0 };
	c->req = req;
	c->ans = ans;
	c->max_body = req->max_body ? req->max_body : BODY_DEFAULT;
	c->too_big = c->stopped = false;
	c->err[0] = 0;
	err = auth_header(l, &auth);
	if (err)
		goto out;
	if (!req->url && asprintf(&url, "%s%s", l->base, req->path ? req->path : "") < 0) {
		url = NULL;
		err = -ENOMEM;
		goto out;
	}
	/* Expect: no 100-continue round trip before a POST's body */
	h = curl_slist_append(hdrs, "Expect:");
	hdrs = h;
	if (h && req->content_type) {
		snprintf(line, sizeof(line), "Content-Type: %s", req->content_type);
		h = curl_slist_append(hdrs, line);
	}
	if (h && req->content_encoding) {
		snprintf(line, sizeof(line), "Content-Encoding: %s", req->content_encoding);
		h = curl_slist_append(hdrs, line);
	}
	if (h && req->accept) {
		snprintf(line, sizeof(line), "Accept: %s", req->accept);
		h = curl_slist_append(hdrs, line);
	}
	if (h && auth)
		h = curl_slist_append(hdrs, auth);
	if (!h) {
		err = -ENOMEM;
		goto out;
	}
	curl_easy_reset(cu);	/* keeps the live connections and caches */
	curl_easy_setopt(cu, CURLOPT_URL, req->url ? req->url : url);
	curl_easy_setopt(cu, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(cu, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(cu, CURLOPT_USERAGENT, "gpuscope-agent");
	curl_easy_setopt(cu, CURLOPT_ERRORBUFFER, c->err);
	curl_easy_setopt(cu, CURLOPT_TIMEOUT_MS, to_ms(timeout_ns));
	curl_easy_setopt(cu, CURLOPT_CONNECTTIMEOUT_MS,
			 to_ms(l->connect_timeout_ns < timeout_ns ? l->connect_timeout_ns
								  : timeout_ns));
	if (l->ca_file && !access(l->ca_file, R_OK))
		curl_easy_setopt(cu, CURLOPT_CAINFO, l->ca_file);
	if (l->cert_file) {
		curl_easy_setopt(cu, CURLOPT_SSLCERT, l->cert_file);
		curl_easy_setopt(cu, CURLOPT_SSLKEY, l->key_file ? l->key_file : l->cert_file);
	}
	if (l->proxy)
		curl_easy_setopt(cu, CURLOPT_PROXY, l->proxy);
	if (req->decompress)
		curl_easy_setopt(cu, CURLOPT_ACCEPT_ENCODING, "");
	if (req->method && !strcmp(req->method, "POST")) {
		curl_easy_setopt(cu, CURLOPT_POST, 1L);
		curl_easy_setopt(cu, CURLOPT_POSTFIELDS, req->body ? (const char *)req->body : "");
		curl_easy_setopt(cu, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)(req->body ? req->body_len : 0));
	}
	curl_easy_setopt(cu, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(cu, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(cu, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(cu, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(cu, CURLOPT_XFERINFODATA, c);
	rc = curl_easy_perform(cu);
	curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &ans->status);
	if (req->want_header && ans->status) {
		struct curl_header *hv = NULL;

		if (curl_easy_header(cu, req->want_header, 0, CURLH_HEADER, -1, &hv) == CURLHE_OK &&
		    hv && hv->value && strlen(hv->value) < sizeof(ans->header))
			strcpy(ans->header, hv->value);
	}
	curl_easy_setopt(cu, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(cu, CURLOPT_ERRORBUFFER, NULL);
	if (rc != CURLE_OK) {
		err = curl_errno(c, rc);
		snprintf(ans->why, sizeof(ans->why), "%s",
			 err == -EMSGSIZE  ? "answer too long" :
			 err == -ECANCELED ? "cancelled" :
			 c->err[0]	   ? c->err :
					     curl_easy_strerror(rc));
	} else if (ans->status / 100 != 2) {
		status_why(ans);
	}
	__atomic_add_fetch(&l->outcomes[outcome_of(err, ans->status)], 1, __ATOMIC_RELAXED);
out:
	if (err && !ans->why[0])
		snprintf(ans->why, sizeof(ans->why), "%s", strerror(-err));
	curl_slist_free_all(hdrs);
	free(url);
	free(auth);
	c->req = NULL;
	c->ans = NULL;
	return err;
}

void http_answer__done(struct http_answer *ans)
{
	free(ans->body);
	ans->body = NULL;
	ans->len = 0;
}

char *http_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *out = malloc(3 * n + 1), *o = out;

	if (!out)
		return NULL;
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		    ch == '-' || ch == '.' || ch == '_' || ch == '~') {
			*o++ = (char)ch;
		} else {
			*o++ = '%';
			*o++ = hex[ch >> 4];
			*o++ = hex[ch & 15];
		}
	}
	*o = 0;
	return out;
}
