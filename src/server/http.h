/* SPDX-License-Identifier: Apache-2.0 */
/* The server's HTTP front (libmicrohttpd): ingest, the query API, /metrics and the UI assets. */
#ifndef GPUSCOPE_HTTP_H
#define GPUSCOPE_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include "server/store/store.h"

struct http_opts {
	const char *listen;	/* "ADDR:PORT"; port 0 picks a free one */
	const char *token;	/* NULL: no auth; else /api/ needs "Authorization: Bearer TOKEN" */
	size_t max_body;	/* bytes, compressed and decompressed */
};

struct http_server;

/* Starts serving on its own threads. NULL with a reason in err. */
struct http_server *http_start(struct store *st, const struct http_opts *o, char *err,
			       size_t errlen);
/* The bound port (useful with port 0). */
uint16_t http_port(const struct http_server *h);
void http_stop(struct http_server *h);

#endif
