/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ClickHouse's HTTP interface through libcurl: a pool of easy handles (keep-alive connections),
 * statements in the URL or the body, errors sorted into "unreachable" (503 upstream),
 * "credentials" and "ClickHouse said no", with the reason kept for the answer.
 */
#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "server/store/clickhouse/ch.h"

#define CONNECT_TIMEOUT_MS	3000

/*
 * While the store opens (c->opening), a SIGTERM or SIGINT waits blocked for main's sigwait():
 * abort the transfer so that start-up against a ClickHouse that never answers can be stopped.
 */
static int on_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct ch *c = ctx;
	sigset_t set;

	(void)dt, (void)dn, (void)ut, (void)un;
	if (!c->opening || sigpending(&set))
		return 0;
	return sigismember(&set, SIGTERM) == 1 || sigismember(&set, SIGINT) == 1;
}

/* "host:port" of a URL (no scheme, credentials or path): how errors name a shard. */
static void host_of(const char *url, char *out, size_t len)
{
	const char *p = strstr(url, "://"), *at, *e;

	p = p ? p + 3 : url;
	e = p + strcspn(p, "/?#");
	at = memchr(p, '@', (size_t)(e - p));
	if (at)
		p = at + 1;
	snprintf(out, len, "%.*s", (int)(e - p), p);
}

static size_t on_data(char *p, size_t size, size_t n, void *ctx)
{
	struct buf *b = ctx;

	buf_put(b, p, size * n);
	return b->oom ? 0 : size * n;
}

static CURL *handle_get(struct ch *c)
{
	CURL *h = NULL;

	pthread_mutex_lock(&c->pmu);
	if (c->npool)
		h = c->pool[--c->npool];
	pthread_mutex_unlock(&c->pmu);
	if (h) {
		curl_easy_reset(h);
		return h;
	}
	return curl_easy_init();
}

static void handle_put(struct ch *c, CURL *h)
{
	pthread_mutex_lock(&c->pmu);
	if (c->npool < CH_POOL_MAX) {
		c->pool[c->npool++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&c->pmu);
	if (h)
		curl_easy_cleanup(h);
}

void ch_conn_done(struct ch *c)
{
	for (int i = 0; i < c->npool; i++)
		curl_easy_cleanup(c->pool[i]);
	c->npool = 0;
}

/* The "(host:port)" a ClickHouse network error names, else the URL we talked to. */
static void peer_of(const char *msg, const char *url, char *out, size_t len)
{
	const char *p = strstr(msg, "Connection refused (");

	if (!p)
		p = strstr(msg, "while reading from socket (");
	if (!p)
		p = strstr(msg, "Timeout exceeded while");
	if (p && (p = strchr(p, '('))) {
		const char *e = strchr(p, ')');

		if (e) {
			snprintf(out, len, "%.*s", (int)(e - p - 1), p + 1);
			return;
		}
	}
	host_of(url, out, len);
}

/* Sorts ClickHouse's error answer into -EHOSTDOWN (a shard unreachable), -EACCES or -EIO. */
static int classify(const char *url, long code, const struct buf *body)
{
	char msg[400], peer[200], host[200];
	size_t n = body->len < sizeof(msg) - 1 ? body->len : sizeof(msg) - 1;

	memcpy(msg, body->p ? (const char *)body->p : "", n);
	msg[n] = 0;
	host_of(url, host, sizeof(host));
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	if (strstr(msg, "Code: 159,")) {	/* insert_distributed_timeout: some shard is silent */
		store_set_error("clickhouse shard %s: a shard did not answer in time", host);
		return -ETIMEDOUT;
	}
	if (strstr(msg, "NetException") || strstr(msg, "Code: 279,") || strstr(msg, "Code: 209,") ||
	    strstr(msg, "Code: 210,")) {
		peer_of(msg, url, peer, sizeof(peer));
		store_set_error("clickhouse shard %s unavailable: %.200s", peer, msg);
		return -EHOSTDOWN;
	}
	if (strstr(msg, "Code: 192,") || strstr(msg, "Code: 193,") || strstr(msg, "Code: 516,") ||
	    code == 401 || code == 403) {
		store_set_error("clickhouse %s refused the credentials", host);
		return -EACCES;
	}
	/* ClickHouse's text may quote the statement (a syntax error shows where): the log gets
	 * it, the answer only the code and the first words of the reason. */
	log_warn("clickhouse %s: HTTP %ld: %.300s", host, code, msg);
	{
		const char *k = strstr(msg, "Code: "), *r = strstr(msg, "DB::Exception: ");
		int kn = k ? (int)strspn(k + 6, "0123456789") : 0;
		int rn = r ? (int)strcspn(r + 15, ":(,.'\"`") : 0;

		store_set_error("clickhouse %s: HTTP %ld%s%.*s%s%.*s", host, code, k ? ", code " : "",
				kn, k ? k + 6 : "", r ? ": " : "", rn > 60 ? 60 : rn, r ? r + 15 : "");
	}
	return -EIO;
}

static int exec_one(struct ch *c, CURL *h, size_t ui, const char *sql, const void *body,
		    size_t len, const char *settings, long timeout_ms, struct buf *out,
		    bool *ret_unreachable)
{
	struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");
	struct buf url = { 0 }, ans = { 0 };
	char *q = NULL;
	long code = 0;
	CURLcode rc;
	int err = 0;

	*ret_unreachable = false;
	buf_printf(&url, "%s/?", c->urls[ui]);	/* every statement names its database */
	if (body) {
		q = curl_easy_escape(h, sql, 0);
		if (!q) {
			err = -ENOMEM;
			goto out;
		}
		buf_printf(&url, "query=%s&", q);
	}
	/* Shard-to-shard sockets (Distributed reads and synchronous inserts) give up on a silent
	 * shard well before our own deadline, so the error names the shard. */
	buf_printf(&url, "receive_timeout=%ld&send_timeout=%ld&insert_distributed_timeout=%ld",
		   c->shard_timeout_s, c->shard_timeout_s, c->shard_timeout_s);
	if (settings)
		buf_printf(&url, "&%s", settings);
	buf_put(&url, "", 1);
	if (url.oom || !hdrs) {
		err = -ENOMEM;
		goto out;
	}
	curl_easy_setopt(h, CURLOPT_URL, (char *)url.p);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_POST, 1L);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : sql);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : strlen(sql)));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &ans);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	if (c->o.ch_user || c->o.ch_password) {
		curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		curl_easy_setopt(h, CURLOPT_USERNAME, c->o.ch_user ? c->o.ch_user : "default");
		curl_easy_setopt(h, CURLOPT_PASSWORD, c->o.ch_password ? c->o.ch_password : "");
	}
	rc = curl_easy_perform(h);
	if (rc != CURLE_OK) {
		*ret_unreachable = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
				   rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_RECV_ERROR ||
				   rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING;
		char host[200];

		host_of(c->urls[ui], host, sizeof(host));
		if (rc == CURLE_ABORTED_BY_CALLBACK)
			store_set_error("clickhouse: interrupted by a signal");
		else if (rc == CURLE_OPERATION_TIMEDOUT)
			store_set_error("clickhouse shard %s unavailable: no answer within %ld ms", host,
					timeout_ms);
		else
			store_set_error("clickhouse shard %s unavailable: %s", host,
					curl_easy_strerror(rc));
		err = ans.oom ? -ENOMEM : rc == CURLE_ABORTED_BY_CALLBACK ? -EINTR :
		      rc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EHOSTDOWN;
		goto out;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200) {
		err = classify(c->urls[ui], code, &ans);
		goto out;
	}
	if (out) {
		buf_put(out, ans.p, ans.len);
		if (out->oom)
			err = -ENOMEM;
	}
out:
	curl_free(q);
	curl_slist_free_all(hdrs);
	buf_done(&url);
	buf_done(&ans);
	return err;
}

/*
 * A statement ran out of time: a shard is silent, but the URL we talked to may only have been
 * waiting on another one. Ping each URL briefly and name those that do not answer.
 */
#define PING_TIMEOUT_MS	1000

static void name_silent(struct ch *c, CURL *h)
{
	char list[400] = "", host[200];
	size_t used = 0;

	for (size_t i = 0; i < c->nurls; i++) {
		struct buf url = { 0 }, ans = { 0 };
		CURLcode rc;

		curl_easy_reset(h);
		buf_printf(&url, "%s/ping", c->urls[i]);
		buf_put(&url, "", 1);
		if (url.oom) {
			buf_done(&url);
			return;
		}
		curl_easy_setopt(h, CURLOPT_URL, (char *)url.p);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, &ans);
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)PING_TIMEOUT_MS);
		curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
		rc = curl_easy_perform(h);
		if (rc != CURLE_OK) {
			host_of(c->urls[i], host, sizeof(host));
			used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s",
						 used ? ", " : "", host);
			if (used >= sizeof(list))
				used = sizeof(list) - 1;
		}
		buf_done(&url);
		buf_done(&ans);
	}
	if (used)
		store_set_error("clickhouse shard %s unavailable: no answer within %ld ms", list,
				c->timeout_ms);
}

int ch_exec(struct ch *c, int url_index, const char *sql, const void *body, size_t len,
	    const char *settings, struct buf *out)
{
	return ch_exec_to(c, url_index, sql, body, len, settings, c->timeout_ms, out);
}

int ch_exec_to(struct ch *c, int url_index, const char *sql, const void *body, size_t len,
	       const char *settings, long timeout_ms, struct buf *out)
{
	CURL *h = handle_get(c);
	size_t start, tries;
	int err = -EHOSTDOWN;

	if (!h) {
		store_set_error("clickhouse: out of memory");
		return -ENOMEM;
	}
	log_debug("clickhouse: %.*s", 2000, sql);
	start = url_index >= 0 ? (size_t)url_index :
				 __atomic_fetch_add(&c->next_url, 1, __ATOMIC_RELAXED) % c->nurls;
	tries = url_index >= 0 ? 1 : c->nurls;
	for (size_t i = 0; i < tries; i++) {
		bool unreachable;
		size_t keep = out ? out->len : 0;

		err = exec_one(c, h, (start + i) % c->nurls, sql, body, len, settings, timeout_ms,
			       out, &unreachable);
		if (!err || !unreachable)
			break;
		if (out)
			out->len = keep;
	}
	if (err == -ETIMEDOUT) {
		if (url_index < 0)
			name_silent(c, h);
		err = -EHOSTDOWN;	/* 503 upstream, like a shard that is down */
	}
	handle_put(c, h);
	if (err)
		log_debug("clickhouse: %s", store_strerror());
	return err;
}

int ch_execf(struct ch *c, struct buf *out, const char *fmt, ...)
{
	char *sql = NULL;
	va_list ap;
	int n, err;

	va_start(ap, fmt);
	n = vasprintf(&sql, fmt, ap);
	va_end(ap);
	if (n < 0) {
		store_set_error("clickhouse: out of memory");
		return -ENOMEM;
	}
	err = ch_exec(c, -1, sql, NULL, 0, NULL, out);
	free(sql);
	return err;
}
