/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Connection guard of the HTTP front: whole-request deadlines (headers complete within
 * --header-timeout, a body at --min-body-rate at least) and connection limits per client
 * address and in all that a slow client cannot exhaust (at a limit, the oldest connection still
 * sending its headers makes room). libmicrohttpd only closes fully idle sockets; a client that
 * trickles one byte now and then would hold its connection for ever.
 */
#include <linux/tcp.h>
#include <malloc.h>
#include "server/http_int.h"

#define REAP_PERIOD_MS 250
#define TRIM_PERIOD_NS (10 * NSEC_PER_SEC)	/* malloc_trim() */

/* One client address: IPv4, or an IPv6 /64 (what one host usually gets). */
struct addr_count {
	struct addr_count *next;
	unsigned char key[16];
	unsigned n;			/* connections open from it */
	unsigned cutting;		/* of them, cut and not closed yet */
};

enum phase { PH_HEADERS, PH_BODY, PH_WORK, PH_IDLE };

struct conn {
	struct conn *prev, *next;	/* every connection */
	struct conn *hprev, *hnext;	/* the header phase, oldest first */
	bool in_hlist;
	bool cut;			/* shut down by the guard; libmicrohttpd closes it next */
	enum phase phase;
	int fd;
	uint64_t phase_ns;		/* mono_ns() when the phase began */
	uint64_t bytes_mark;		/* IDLE: bytes received on the socket when it began */
	uint64_t body_bytes;		/* BODY: upload bytes received */
	struct addr_count *ac;
	char addr[64];
};

static void addr_key(const struct sockaddr *sa, unsigned char key[16])
{
	memset(key, 0, 16);
	if (sa->sa_family == AF_INET) {
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;

		if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)a))
			memcpy(key, a, 16);
		else
			memcpy(key, a, 8);
	}
}

static unsigned key_hash(const unsigned char key[16], unsigned nb)
{
	uint64_t h = 1469598103934665603ULL;

	for (int i = 0; i < 16; i++)
		h = (h ^ key[i]) * 1099511628211ULL;
	return (unsigned)(h >> 17) & (nb - 1);
}

static struct addr_count *addr_find(struct conn_guard *g, const unsigned char key[16])
{
	struct addr_count *a = g->buckets[key_hash(key, g->nbuckets)];

	while (a && memcmp(a->key, key, 16))
		a = a->next;
	return a;
}

static void hlist_del(struct conn_guard *g, struct conn *c)
{
	if (!c->in_hlist)
		return;
	if (c->hprev)
		c->hprev->hnext = c->hnext;
	else
		g->hhead = c->hnext;
	if (c->hnext)
		c->hnext->hprev = c->hprev;
	else
		g->htail = c->hprev;
	c->hprev = c->hnext = NULL;
	c->in_hlist = false;
}

static void set_phase(struct conn_guard *g, struct conn *c, enum phase p, uint64_t now)
{
	if (p == PH_HEADERS && !c->in_hlist) {
		c->hprev = g->htail;
		c->hnext = NULL;
		if (g->htail)
			g->htail->hnext = c;
		else
			g->hhead = c;
		g->htail = c;
		c->in_hlist = true;
	} else if (p != PH_HEADERS) {
		hlist_del(g, c);
	}
	c->phase = p;
	c->phase_ns = now;
}

static uint64_t bytes_received(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return 0;
	return ti.tcpi_bytes_received;
}

/* Warn at most once per 10 s and reason; the rest at debug level. */
static void guard_log(struct http_server *h, unsigned slot, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void guard_log(struct http_server *h, unsigned slot, const char *fmt, ...)
{
	struct conn_guard *g = &h->guard;
	uint64_t now = mono_ns();
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!g->last_log_ns[slot] || now - g->last_log_ns[slot] > 10 * NSEC_PER_SEC) {
		g->last_log_ns[slot] = now;
		log_warn("http: %s (more of these in the next 10 s: debug level only; counted on "
			 "/metrics)", msg);
	} else {
		log_debug("http: %s", msg);
	}
}

static const char *const cut_why[CUT_MAX] = {
	[CUT_HEADERS] = "headers not complete in time",
	[CUT_BODY] = "body slower than --min-body-rate",
	[CUT_EVICTED] = "still sending headers when a connection limit was reached: closed to "
			"make room",
};

/* Lock held. */
static void cut(struct http_server *h, struct conn *c, enum conn_cut why)
{
	c->cut = true;
	hlist_del(&h->guard, c);
	h->guard.cutting++;
	if (c->ac)
		c->ac->cutting++;
	shutdown(c->fd, SHUT_RDWR);
	__atomic_add_fetch(&h->ctr.cut[why], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->ctr.mhd_errors, 1, __ATOMIC_RELAXED);
	guard_log(h, 2 + why, "connection from %s cut: %s", c->addr, cut_why[why]);
}

/* Lock held. The oldest connection still in its header phase (of address a if not NULL). */
static struct conn *oldest_sending_headers(struct conn_guard *g, struct addr_count *a)
{
	for (struct conn *c = g->hhead; c; c = c->hnext)
		if (!a || c->ac == a)
			return c;
	return NULL;
}

/* Accept policy, on the accepting loop thread: room at each limit, made if need be. */
enum MHD_Result http_conn_accept(void *cls, const struct sockaddr *sa, socklen_t salen)
{
	struct http_server *h = cls;
	struct conn_guard *g = &h->guard;
	unsigned char key[16];
	enum MHD_Result ok = MHD_YES;
	struct addr_count *a;
	char addr[64];
	struct conn *old;

	(void)salen;
	addr_key(sa, key);
	pthread_mutex_lock(&g->mu);
	a = addr_find(g, key);
	if (h->o.max_per_address && a && a->n - a->cutting >= h->o.max_per_address) {
		old = oldest_sending_headers(g, a);
		if (old) {
			cut(h, old, CUT_EVICTED);
		} else {
			ok = MHD_NO;
			__atomic_add_fetch(&h->ctr.refused[REFUSE_PER_ADDRESS], 1,
					   __ATOMIC_RELAXED);
			__atomic_add_fetch(&h->ctr.mhd_errors, 1, __ATOMIC_RELAXED);
			guard_log(h, 0, "connection from %s refused: %u connections from this "
				  "address (--max-connections-per-address)",
				  format_sockaddr(sa, addr, sizeof(addr)), a->n);
		}
	}
	if (ok == MHD_YES && g->open - g->cutting >= g->max) {
		old = oldest_sending_headers(g, NULL);
		if (old) {
			cut(h, old, CUT_EVICTED);
		} else {
			ok = MHD_NO;
			__atomic_add_fetch(&h->ctr.refused[REFUSE_GLOBAL], 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&h->ctr.mhd_errors, 1, __ATOMIC_RELAXED);
			guard_log(h, 1, "connection from %s refused: %u connections open "
				  "(--max-connections)",
				  format_sockaddr(sa, addr, sizeof(addr)), g->open);
		}
	}
	pthread_mutex_unlock(&g->mu);
	return ok;
}

static struct conn *conn_of(struct MHD_Connection *mc)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

void http_conn_started(struct http_server *h, struct MHD_Connection *mc, void **socket_ctx)
{
	struct conn_guard *g = &h->guard;
	const union MHD_ConnectionInfo *fd = MHD_get_connection_info(
		mc, MHD_CONNECTION_INFO_CONNECTION_FD);
	const union MHD_ConnectionInfo *ca = MHD_get_connection_info(
		mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	struct conn *c = calloc(1, sizeof(*c));
	unsigned char key[16];
	struct addr_count *a;

	*socket_ctx = NULL;
	if (!c || !fd || !ca) {
		free(c);	/* untracked: only libmicrohttpd's idle timeout applies */
		return;
	}
	c->fd = fd->connect_fd;
	format_sockaddr(ca->client_addr, c->addr, sizeof(c->addr));
	addr_key(ca->client_addr, key);
	pthread_mutex_lock(&g->mu);
	a = addr_find(g, key);
	if (!a) {
		a = calloc(1, sizeof(*a));
		if (a) {
			unsigned b = key_hash(key, g->nbuckets);

			memcpy(a->key, key, 16);
			a->next = g->buckets[b];
			g->buckets[b] = a;
		}
	}
	if (a)
		a->n++;
	c->ac = a;
	c->next = g->all;
	if (g->all)
		g->all->prev = c;
	g->all = c;
	g->open++;
	set_phase(g, c, PH_HEADERS, mono_ns());
	/* Accepts on other threads may all have passed the accept policy before any of them was
	 * counted here: hold each limit now too, the oldest connection still sending headers
	 * (this one, if no other) closed. */
	if (h->o.max_per_address && a && a->n - a->cutting > h->o.max_per_address) {
		struct conn *old = oldest_sending_headers(g, a);

		if (old)
			cut(h, old, CUT_EVICTED);
	}
	if (g->open - g->cutting > g->max) {
		struct conn *old = oldest_sending_headers(g, NULL);

		if (old)
			cut(h, old, CUT_EVICTED);
	}
	pthread_mutex_unlock(&g->mu);
	*socket_ctx = c;
}

void http_conn_closed(struct http_server *h, void **socket_ctx)
{
	struct conn_guard *g = &h->guard;
	struct conn *c = *socket_ctx;
	struct addr_count *a;

	if (!c)
		return;
	pthread_mutex_lock(&g->mu);
	hlist_del(g, c);
	if (c->prev)
		c->prev->next = c->next;
	else
		g->all = c->next;
	if (c->next)
		c->next->prev = c->prev;
	g->open--;
	if (c->cut)
		g->cutting--;
	a = c->ac;
	if (a) {
		a->n--;
		if (c->cut)
			a->cutting--;
		if (!a->n) {
			struct addr_count **pp = &g->buckets[key_hash(a->key, g->nbuckets)];

			while (*pp != a)
				pp = &(*pp)->next;
			*pp = a->next;
			free(a);
		}
	}
	pthread_mutex_unlock(&g->mu);
	free(c);
	*socket_ctx = NULL;
}

/* The request's headers are in: its body's clock starts (a request without one moves on at
 * once, http_conn_work()). */
void http_conn_headers(struct http_server *h, struct MHD_Connection *mc)
{
	struct conn *c = conn_of(mc);

	if (!c)
		return;
	pthread_mutex_lock(&h->guard.mu);
	__atomic_store_n(&c->body_bytes, 0, __ATOMIC_RELAXED);
	if (!c->cut)
		set_phase(&h->guard, c, PH_BODY, mono_ns());
	pthread_mutex_unlock(&h->guard.mu);
}

void http_conn_body(struct http_server *h, struct MHD_Connection *mc, size_t n)
{
	struct conn *c = conn_of(mc);

	(void)h;
	if (c)
		__atomic_add_fetch(&c->body_bytes, n, __ATOMIC_RELAXED);
}

/* The whole request is in: handling it and sending the answer have no deadline of ours. */
void http_conn_work(struct http_server *h, struct MHD_Connection *mc)
{
	struct conn *c = conn_of(mc);

	if (!c || c->phase == PH_WORK)
		return;
	pthread_mutex_lock(&h->guard.mu);
	if (!c->cut)
		set_phase(&h->guard, c, PH_WORK, mono_ns());
	pthread_mutex_unlock(&h->guard.mu);
}

/* The answer is sent: the connection idles (kept alive) until its next request's first byte. */
void http_conn_done(struct http_server *h, struct MHD_Connection *mc)
{
	struct conn *c = conn_of(mc);
	uint64_t mark;

	if (!c)
		return;
	mark = bytes_received(c->fd);
	pthread_mutex_lock(&h->guard.mu);
	if (!c->cut) {
		set_phase(&h->guard, c, PH_IDLE, mono_ns());
		c->bytes_mark = mark;
	}
	pthread_mutex_unlock(&h->guard.mu);
}

static void reap(struct http_server *h, uint64_t now)
{
	struct conn_guard *g = &h->guard;
	uint64_t hdr_ns = (uint64_t)h->o.header_timeout_s * NSEC_PER_SEC;

	for (struct conn *c = g->all; c; c = c->next) {
		if (c->cut)
			continue;
		switch (c->phase) {
		case PH_HEADERS:
			if (now - c->phase_ns > hdr_ns)
				cut(h, c, CUT_HEADERS);
			break;
		case PH_BODY: {
			uint64_t got = __atomic_load_n(&c->body_bytes, __ATOMIC_RELAXED);
			uint64_t allowed = hdr_ns;

			if (h->o.min_body_rate)
				allowed += got * NSEC_PER_SEC / h->o.min_body_rate;
			if (h->o.min_body_rate && now - c->phase_ns > allowed)
				cut(h, c, CUT_BODY);
			break;
		}
		case PH_IDLE:
			/* A byte of the next request: its headers' clock starts. */
			if (bytes_received(c->fd) > c->bytes_mark)
				set_phase(g, c, PH_HEADERS, now);
			break;
		case PH_WORK:
			break;
		}
	}
}

static void *reaper(void *arg)
{
	struct http_server *h = arg;
	struct conn_guard *g = &h->guard;
	uint64_t next_trim_ns = mono_ns() + TRIM_PERIOD_NS;

	pthread_mutex_lock(&g->mu);
	while (!g->stop) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += REAP_PERIOD_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&g->cond, &g->mu, &ts);
		if (!g->stop)
			reap(h, mono_ns());
		if (!g->stop && mono_ns() >= next_trim_ns) {
			/* The malloc arenas give their free pages back: RSS follows what is held
			 * (docs/server.md, "Memory budget"), not its high-water mark (decoded
			 * batches are many small allocations, which no mmap threshold returns).
			 * Not under g->mu: it walks every arena (milliseconds). */
			next_trim_ns = mono_ns() + TRIM_PERIOD_NS;
			pthread_mutex_unlock(&g->mu);
			malloc_trim(0);
			pthread_mutex_lock(&g->mu);
		}
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

int http_conn_init(struct http_server *h)
{
	struct conn_guard *g = &h->guard;
	pthread_condattr_t ca;
	int err;

	g->max = h->o.max_connections ? h->o.max_connections : 8192u;
	g->nbuckets = 64;
	while (g->nbuckets < g->max)
		g->nbuckets <<= 1;
	g->buckets = calloc(g->nbuckets, sizeof(*g->buckets));
	if (!g->buckets)
		return -ENOMEM;
	pthread_mutex_init(&g->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g->cond, &ca);
	pthread_condattr_destroy(&ca);
	err = -pthread_create(&g->thread, NULL, reaper, h);
	if (err) {
		pthread_cond_destroy(&g->cond);
		pthread_mutex_destroy(&g->mu);
		free(g->buckets);
		return err;
	}
	return 0;
}

void http_conn_fini(struct http_server *h)
{
	struct conn_guard *g = &h->guard;

	pthread_mutex_lock(&g->mu);
	g->stop = true;
	pthread_cond_signal(&g->cond);
	pthread_mutex_unlock(&g->mu);
	pthread_join(g->thread, NULL);
	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->mu);
	for (unsigned i = 0; i < g->nbuckets; i++)
		while (g->buckets[i]) {
			struct addr_count *a = g->buckets[i];

			g->buckets[i] = a->next;
			free(a);
		}
	free(g->buckets);
}
