/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the HTTP front (http.h) shared by its files only: the server and request state,
 * the reply helpers of the transport (http.c), the ingest API (http_ingest.c) and the query
 * API (http_query.c).
 */
#ifndef GPUSCOPE_HTTP_INT_H
#define GPUSCOPE_HTTP_INT_H

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

struct conn;
struct addr_count;

/* http_conn.c: the connections open, by client address, and the reaper of slow requests. */
struct conn_guard {
	pthread_mutex_t mu;		/* everything below */
	pthread_cond_t cond;		/* stop */
	pthread_t thread;		/* the reaper */
	bool stop;
	unsigned max;			/* --max-connections */
	unsigned open, cutting;		/* connections open; of them, cut and not yet closed */
	struct conn *all;
	struct conn *hhead, *htail;	/* in their header phase, oldest first */
	struct addr_count **buckets;
	unsigned nbuckets;
	uint64_t last_log_ns[2 + CUT_MAX];
};

struct http_server {
	struct MHD_Daemon *d;
	struct store *st;
	struct http_opts o;
	int listen_fd;
	uint16_t port;
	char addr[64];			/* bound address, "ADDR:PORT" */
	bool loopback;			/* bound to a loopback address (the default) */
	char hostname[256];		/* this machine's, for the Host check */
	struct http_counters ctr;	/* on /metrics */
	uint64_t last_mhd_log_ns;
	uint64_t ingest_samples, requests;
	pthread_mutex_t rmu;		/* rate ring */
	uint64_t rate_sec[RATE_SLOTS], rate_n[RATE_SLOTS];
	pthread_mutex_t wmu;		/* workers running (http_offload()), and their end (stop) */
	pthread_cond_t wcond;
	unsigned workers;		/* all of them */
	unsigned ingest_workers, metrics_workers;
	pthread_mutex_t dmu;		/* batches being decoded (http_ingest.c), and room for more */
	pthread_cond_t dcond;
	unsigned decoding;
	struct conn_guard guard;
};

/* Ingests stored on worker threads at once; past it one waits on its event loop. */
#define INGEST_WORKERS_MAX 512
/* /metrics answers computed at once (each on a thread); past it a scrape answers 503. */
#define METRICS_WORKERS_MAX 4

struct req {
	struct buf body;		/* only POST /api/v1/ingest keeps its body */
	bool ingest;
	bool over;			/* body beyond max_body: discarded */
	bool busy;			/* the in-flight budget was spent: discarded, 503 */
	size_t charged;			/* bytes of it counted in ctr.inflight_bytes */
	uint64_t expect;		/* its Content-Length; 0: none */
	/* Stored by a worker while the connection was suspended: the answer it left. */
	bool worked, answered;
	unsigned ans_code;
	const char *ans_type;
	struct buf ans;
};

/* http.c */
typedef enum MHD_Result (*http_work_fn)(struct http_server *h, struct MHD_Connection *c,
					 struct req *r);
/*
 * Runs fn(h, c, r) on a thread of its own while the connection waits suspended, so that the
 * event loop goes on serving its other connections; fn's http_reply() is kept in r, and the
 * request's handler, called again once the connection resumes, finds r->worked and queues it.
 * False (nothing started, the connection not suspended) when *running (counted under h->wmu,
 * a kind of work's own count) is at max or no thread starts.
 */
bool http_offload(struct http_server *h, struct MHD_Connection *c, struct req *r,
		  http_work_fn fn, unsigned *running, unsigned max);
/* Counts n more bytes held for r against --max-inflight-bodies; false (nothing counted) when
 * they do not fit. Released when the request completes. */
bool http_inflight_charge(struct http_server *h, struct req *r, size_t n);
/* On an ingest worker: the request whose answer http_reply() keeps instead of queueing it (only
 * the connection's own event-loop thread may queue a response). */
extern __thread struct req *http_deferred;
enum MHD_Result http_reply(struct MHD_Connection *c, unsigned code, const char *type,
			   struct buf *body, const char *encoding);
enum MHD_Result http_reply_error(struct http_server *h, struct MHD_Connection *c, unsigned code,
				 enum reject why, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
enum MHD_Result http_reply_json(struct MHD_Connection *c, struct buf *b);
const char *http_arg(struct MHD_Connection *c, const char *name);
/* 404 "no such endpoint" for url. */
enum MHD_Result http_no_endpoint(struct http_server *h, struct MHD_Connection *c, const char *url);

/* http_conn.c: the connection guard (see there). init starts the reaper thread (-errno);
 * fini stops it, after the daemon. The rest are libmicrohttpd callbacks' steps, on the
 * connection's event-loop thread. */
int http_conn_init(struct http_server *h);
void http_conn_fini(struct http_server *h);
enum MHD_Result http_conn_accept(void *cls, const struct sockaddr *sa, socklen_t salen);
void http_conn_started(struct http_server *h, struct MHD_Connection *mc, void **socket_ctx);
void http_conn_closed(struct http_server *h, void **socket_ctx);
void http_conn_headers(struct http_server *h, struct MHD_Connection *mc);
void http_conn_body(struct http_server *h, struct MHD_Connection *mc, size_t n);
void http_conn_work(struct http_server *h, struct MHD_Connection *mc);
void http_conn_done(struct http_server *h, struct MHD_Connection *mc);

/* http_ingest.c */
/* Samples per second over the last 10 complete seconds. */
double http_rate_get(struct http_server *h);
/*
 * POST /api/v1/ingest. The store answers only once a batch is durable, which may take its group
 * commit's wait (ClickHouse: up to --clickhouse-commit-delay and the INSERTs): the connection is
 * suspended and a worker thread stores the batch, so the event loop goes on serving its other
 * connections (other agents, queries) meanwhile. Past INGEST_WORKERS_MAX at once, or without a
 * thread, the upload is stored on the loop.
 */
enum MHD_Result http_ingest_route(struct http_server *h, struct MHD_Connection *c,
				  struct req *r);

/* http_query.c */
/* A GET (or HEAD) endpoint of the query API: path matched exactly, or as the start of the URL;
 * fn gets the whole URL. */
struct http_route {
	const char *path;
	bool prefix;
	enum MHD_Result (*fn)(struct http_server *h, struct MHD_Connection *c, const char *url);
};
/* The query API's endpoints, in the order route() tries them; a NULL path ends it. */
extern const struct http_route http_query_routes[];
/* GET /metrics (Prometheus text): computed on a worker thread (the export queries' regexes
 * never run on an event loop); 503 busy past METRICS_WORKERS_MAX scrapes at once. */
enum MHD_Result http_do_metrics(struct http_server *h, struct MHD_Connection *c, struct req *r);

#endif /* GPUSCOPE_HTTP_INT_H */
