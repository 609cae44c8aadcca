/* SPDX-License-Identifier: Apache-2.0 */
/* GET /metrics for the agent over libmicrohttpd; the body is built by a callback per request. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "agent/push/metrics_http.h"
#include "common/netaddr.h"
#include "common/log.h"

struct metrics_http {
	struct MHD_Daemon *d;
	metrics_fill_fn fill;
	void *ctx;
	unsigned port;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
			     char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", type);
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_len, void **state)
{
	struct metrics_http *m = cls;
	static char not_found[] = "not found; try /metrics\n";
	static char bad_method[] = "method not allowed\n";
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", bad_method,
			     strlen(bad_method), MHD_RESPMEM_PERSISTENT);
	if (strcmp(url, "/metrics"))
		return reply(c, MHD_HTTP_NOT_FOUND, "text/plain", not_found, strlen(not_found),
			     MHD_RESPMEM_PERSISTENT);
	f = open_memstream(&buf, &len);
	if (!f)
		return MHD_NO;
	m->fill(m->ctx, f);
	if (fclose(f)) {
		free(buf);
		return MHD_NO;
	}
	return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", buf, len,
		     MHD_RESPMEM_MUST_FREE);
}

struct metrics_http *metrics_http__start(const char *listen, metrics_fill_fn fill, void *ctx)
{
	struct metrics_http *m;
	struct sockaddr_storage sa;
	socklen_t salen;
	const union MHD_DaemonInfo *info;
	/* epoll, not select(): the agent holds thousands of BPF/perf fds, past FD_SETSIZE. */
	unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD;
	int err;

	err = parse_listen_addr(listen, &sa, &salen);
	if (err) {
		errno = EINVAL;
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->fill = fill;
	m->ctx = ctx;
	if (sa.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	m->d = MHD_start_daemon(flags, 0, NULL, NULL, handle, m, MHD_OPTION_SOCK_ADDR,
				(struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, 16U,
				MHD_OPTION_CONNECTION_TIMEOUT, 10U, MHD_OPTION_END);
	if (!m->d) {
		free(m);
		errno = EADDRINUSE;
		return NULL;
	}
	info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
	m->port = info ? info->port : 0;
	return m;
}

unsigned metrics_http__port(const struct metrics_http *m)
{
	return m->port;
}

void metrics_http__stop(struct metrics_http *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->d);
	free(m);
}
