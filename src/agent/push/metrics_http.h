/* SPDX-License-Identifier: Apache-2.0 */
/* The agent's Prometheus endpoint: GET /metrics on a small libmicrohttpd server. */
#ifndef GPUSCOPE_AGENT_METRICS_HTTP_H
#define GPUSCOPE_AGENT_METRICS_HTTP_H

#include <stdio.h>

struct metrics_http;

/* Writes the whole exposition (text format 0.0.4) to out; runs on the HTTP server's thread. */
typedef void (*metrics_fill_fn)(void *ctx, FILE *out);

/*
 * Listens on "HOST:PORT" ("127.0.0.1:9400", "[::1]:9400", port 0 = any free port). Returns
 * NULL with errno set (EINVAL for a bad address, EADDRINUSE, ...); stop with
 * metrics_http__stop().
 */
struct metrics_http *metrics_http__start(const char *listen, metrics_fill_fn fill, void *ctx);
/* The port actually bound. */
unsigned metrics_http__port(const struct metrics_http *m);
void metrics_http__stop(struct metrics_http *m);

#endif
