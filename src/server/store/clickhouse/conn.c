/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ClickHouse's HTTP interface through libcurl: a pool of easy handles (keep-alive connections),
 * statements in the URL or the body, errors sorted into "unreachable" (503 upstream),
 * "credentials" and "ClickHouse said no", with the reason kept for the answer.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "server/store/clickhouse/ch.h"

#define CONNECT_TIMEOUT_MS	3000
#define REQUEST_TIMEOUT_S	300

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
	snprintf(out, len, "%s", url);
}

/* Sorts ClickHouse's error answer into -EHOSTDOWN (a shard unreachable), -EACCES or -EIO. */
static int classify(const char *url, long code, const struct buf *body)
{
	char msg[400], peer[200];
	size_t n = body->len < sizeof(msg) - 1 ? body->len : sizeof(msg) - 1;

	memcpy(msg, body->p ? (const char *)body->p : "", n);
	msg[n] = 0;
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	if (strstr(msg, "NetException") || strstr(msg, "Code: 279,") || strstr(msg, "Code: 209,") ||
	    strstr(msg, "Code: 210,")) {
		peer_of(msg, url, peer, sizeof(peer));
		store_set_error("clickhouse shard %s unavailable: %.200s", peer, msg);
		return -EHOSTDOWN;
	}
	if (strstr(msg, "Code: 192,") || strstr(msg, "Code: 193,") || strstr(msg, "Code: 516,") ||
	    code == 401 || code == 403) {
		store_set_error("clickhouse %s refused the credentials: %.200s", url, msg);
		return -EACCES;
	}
	store_set_error("clickhouse %s: HTTP %ld: %.300s", url, code, msg);
	return -EIO;
}

static int exec_one(struct ch *c, CURL *h, size_t ui, const char *sql, const void *body,
		    size_t len, const char *settings, struct buf *out, bool *ret_unreachable)
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
	if (settings)
		buf_printf(&url, "%s", settings);
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
	curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)REQUEST_TIMEOUT_S);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
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
		store_set_error("clickhouse %s: %s", c->urls[ui], curl_easy_strerror(rc));
		err = ans.oom ? -ENOMEM : -EHOSTDOWN;
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

int ch_exec(struct ch *c, int url_index, const char *sql, const void *body, size_t len,
	    const char *settings, struct buf *out)
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

		err = exec_one(c, h, (start + i) % c->nurls, sql, body, len, settings, out,
			       &unreachable);
		if (!err || !unreachable)
			break;
		if (out)
			out->len = keep;
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
