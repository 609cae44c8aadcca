/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's one HTTP client: every request the agent sends or polls (batches to the server,
 * capture requests and answers, the Kubernetes API's list and watch) goes through here, and
 * nothing else in the agent touches libcurl. A link is one peer's settings, made once (base
 * URL, TLS CA, client certificate, bearer token file, proxy, timeouts); a connection is one
 * thread's libcurl handle on a link (kept-alive connections, reused between requests).
 * run.c makes the server's link once and hands the same one to push and the capture poll.
 */
#ifndef GPUSCOPE_AGENT_HTTP_CLIENT_H
#define GPUSCOPE_AGENT_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct http_link;
struct http_conn;

struct http_link_opts {
	const char *name;		/* for messages: "server", "kubernetes" */
	const char *base_url;		/* http[s]://host[:port][/prefix]; trailing '/' dropped */
	const char *ca_file;		/* PEM CA bundle for https://; NULL or unreadable: the
					 * system's */
	const char *cert_file;		/* PEM client certificate (mutual TLS); NULL: none */
	const char *key_file;		/* its PEM key; NULL: in cert_file */
	const char *token_file;		/* bearer token, re-read before every request (the last
					 * good one kept while unreadable); NULL: none */
	const char *proxy;		/* NULL: libcurl's environment (https_proxy, no_proxy, ...);
					 * "": none; else the proxy's URL */
	uint64_t connect_timeout_ns;	/* default 5 s (never more than a request's timeout) */
	uint64_t timeout_ns;		/* per request, default 10 s */
};

/*
 * A link to one peer. The strings are copied. Returns NULL with errno set (EINVAL: no
 * http:// or https:// base URL). Free with http_link__free() after every connection on it.
 * Any thread may use a link; each thread has its own connection.
 */
struct http_link *http_link__new(const struct http_link_opts *o);
void http_link__free(struct http_link *l);

/* The link's base URL (no trailing '/'); valid while the link lives. */
const char *http_link__base(const struct http_link *l);

/* A connection on link l for one thread at a time. NULL with errno set; free with __free. */
struct http_conn *http_conn__new(struct http_link *l);
void http_conn__free(struct http_conn *c);

struct http_req {
	const char *method;		/* "GET" (NULL) or "POST" */
	const char *path;		/* appended to the link's base: "/api/v1/x?y=1" */
	const char *url;		/* instead of base + path (the server's full ingest URL) */
	const void *body;		/* POST body (not copied), body_len bytes */
	size_t body_len;
	const char *content_type;	/* NULL: none */
	const char *content_encoding;	/* NULL: none */
	const char *accept;		/* NULL: none */
	bool decompress;		/* offer gzip/deflate and decode the answer */
	uint64_t timeout_ns;		/* 0: the link's */
	size_t max_body;		/* answer bytes kept in http_answer.body (0: 64 KiB) */
	bool keep_head;			/* a longer answer: its first max_body bytes kept, not an
					 * error (-EMSGSIZE) */
	/*
	 * Streaming: each piece of a 2xx answer's body goes here instead of http_answer.body
	 * (other answers are kept there, for the message); false stops the request (-ECANCELED).
	 */
	bool (*on_data)(void *arg, const char *data, size_t n);
	/* Asked about once a second and at every transfer step: true cuts the request. */
	bool (*cancel)(void *arg);
	void *arg;			/* for on_data and cancel */
	const char *want_header;	/* an answer header to keep in http_answer.header */
};

struct http_answer {
	long status;			/* the HTTP status; 0 when no answer came */
	char *body;			/* NUL-terminated when not NULL; http_answer__done() frees */
	size_t len;
	char why[256];			/* what went wrong, one line, for the caller's log: the
					 * transport's error, or "HTTP 413: <answer's first line>" */
	char header[256];		/* req.want_header's value ("" when absent or cut) */
};

/*
 * Sends req on c and waits for the answer. Returns 0 when an answer came, whatever its status
 * (ans->status; ans->why set for a status outside 2xx), or -ECANCELED (cancel() or on_data()
 * said stop), -ETIMEDOUT, -ECONNRESET (the peer closed before the answer's end: a watch
 * stream's normal end), -ECONNREFUSED, -EHOSTUNREACH (no such host or proxy), -EPROTO (TLS),
 * -EMSGSIZE (answer longer than max_body), -ENOMEM, -EIO (anything else); ans->why says it in
 * words. *ans is reset first; call http_answer__done() after either way. The thread that owns c.
 */
int http_conn__request(struct http_conn *c, const struct http_req *req, struct http_answer *ans);
void http_answer__done(struct http_answer *ans);

/*
 * gpuscope_agent_http_requests_total{link,result}: every live link's requests by what became
 * of them (ok, http_4xx, http_5xx, unreachable, timeout, tls, closed, cancelled, too_long,
 * error; requests that failed before sending, for memory, not counted). Any thread.
 */
void http_client_metrics(FILE *out);

/* s percent-encoded for a URL's query (RFC 3986 unreserved kept). NULL (ENOMEM); free(). */
char *http_escape(const char *s);

#endif
