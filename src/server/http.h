/* SPDX-License-Identifier: Apache-2.0 */
/* The server's HTTP front (libmicrohttpd): ingest, the query API, /metrics and the UI assets. */
#ifndef GPUSCOPE_HTTP_H
#define GPUSCOPE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "server/store/store.h"

struct efficiency;
struct exporter;
struct insights;

struct http_opts {
	const char *listen;		/* "ADDR:PORT" or "[V6]:PORT"; port 0 picks a free one */
	const char *ingest_token;	/* NULL: POST /api/v1/ingest is open; else it needs
					 * "Authorization: Bearer TOKEN" */
	const char *query_token;	/* the same for every other /api/ path */
	const char *metrics_token;	/* NULL: /metrics takes the query token (if any); else this
					 * one or the query token */
	const char *allowed_hosts;	/* comma-separated Host names served; NULL: on a loopback
					 * listen address only localhost, IP literals and this
					 * machine's name, on others any */
	size_t max_body;		/* bytes, compressed and decompressed */
	size_t max_inflight;		/* bytes of ingest bodies held at once (>= max_body) */
	uint64_t retention_ns;		/* uploads with a timestamp older than this are refused */
	bool all_addresses;		/* store named frames' addresses too (ingest_store()) */
	const char *tls_cert_pem;	/* PEM text of the certificate chain and its key; both */
	const char *tls_key_pem;	/* NULL: plain HTTP. Must outlive the server. */
	unsigned max_connections;	/* open connections in all */
	unsigned max_per_address;	/* open connections from one client address */
	unsigned idle_timeout_s;	/* a connection silent this long is closed */
	unsigned header_timeout_s;	/* a request's headers complete within this, from its first
					 * byte (a new connection: from accept); also the grace of
					 * its body */
	unsigned min_body_rate;		/* bytes/s a body keeps up past that grace; 0: no limit */
	unsigned threads;		/* event-loop threads (each serves many connections) */
	struct efficiency *eff;		/* /api/v1/efficiency */
	struct exporter *exp;		/* computed counters on /metrics; NULL: none */
	struct insights *ins;		/* /api/v1/insights and its counter; NULL: none */
};

struct http_server;

/*
 * Binds the listen address (exclusively: a second server on the same port fails with
 * EADDRINUSE named in err) and starts serving on its own threads. NULL with a reason in err.
 */
struct http_server *http_start(struct store *st, const struct http_opts *o, char *err,
			       size_t errlen);
/* The bound port (useful with port 0). */
uint16_t http_port(const struct http_server *h);
/* The bound address as "ADDR:PORT" / "[V6]:PORT", for the startup line. */
const char *http_address(const struct http_server *h);
void http_stop(struct http_server *h);

#endif
