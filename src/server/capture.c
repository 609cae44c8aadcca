// SPDX-License-Identifier: Apache-2.0
/*
 * Capture requests (server side of `gpuscope capture`) and the trace export (capture.h). The
 * agent of a node polls for its node's requests, opens trace windows and posts its answer; the
 * CLI then reads the trace of the window's range, built here from the store.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/util.h"
#include "server/capture.h"
#include "server/selector.h"
#include "server/store/store.h"

#define CAPTURES_MAX	  64			/* requests kept (oldest finished ones recycled);
						 * at most this many in flight in all */
#define CAPTURES_PER_NODE 8			/* in flight (pending or delivered) per node */
#define CAPTURE_MAX_NS	  (600 * NSEC_PER_SEC)	/* longest capture */
#define TRACE_MAX_EVENTS  2000000
#define GPU_PID_BASE	  1000000000u		/* trace "processes" of the GPUs */

enum cap_state { CAP_FREE = 0, CAP_PENDING, CAP_DELIVERED, CAP_DONE, CAP_EXPIRED };
static const char *const state_names[] = { "free", "pending", "delivered", "done", "expired" };

struct capture {
	enum cap_state state;
	uint64_t id;
	char node[128];
	uint32_t pid;
	uint64_t duration_ns, asked_ns;
	uint64_t delivered_ns;	/* when its agent took it */
	char status[32];	/* the agent's: ok, not_injected, ... */
	char message[256];
	uint64_t from_ns, to_ns;	/* the agent's window range (wall) */
};

#define POLLERS_MAX	  64			/* nodes whose agents asked for captures */
#define POLLER_TTL_NS	  (300 * NSEC_PER_SEC)	/* listed while they asked this recently */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct capture caps[CAPTURES_MAX];
static struct {
	char node[128];
	uint64_t last_ns;	/* wall time of its last /capture/pending */
} pollers[POLLERS_MAX];
static uint64_t next_id = 1;
/* No agent took a request within this: expired; an agent that took one has its duration plus
 * this to answer, else expired too (an agent that dropped it must not hold its slot). */
static uint64_t timeout_ns = 30 * NSEC_PER_SEC;

void capture_set_timeout(uint64_t ns)
{
	timeout_ns = ns;
}

bool capture_path(const char *url)
{
	return !strcmp(url, "/api/v1/capture") || !strncmp(url, "/api/v1/capture/", 16) ||
	       !strcmp(url, "/api/v1/trace");
}

bool capture_agent_path(const char *url)
{
	return !strcmp(url, "/api/v1/capture/pending") || !strcmp(url, "/api/v1/capture/result");
}

static unsigned fail(struct buf *out, unsigned code, const char *msg)
{
	out->len = 0;
	buf_puts(out, "{\"error\":");
	buf_json_str(out, msg);
	buf_puts(out, "}");
	return code;
}

static void expire(uint64_t now)
{
	for (int i = 0; i < CAPTURES_MAX; i++) {
		struct capture *c = &caps[i];

		if (c->state == CAP_PENDING && now - c->asked_ns > timeout_ns) {
			c->state = CAP_EXPIRED;
			snprintf(c->message, sizeof(c->message),
				 "no agent of node '%s' asked for captures within %.1f s", c->node,
				 (double)timeout_ns / NSEC_PER_SEC);
		} else if (c->state == CAP_DELIVERED &&
			   now - c->delivered_ns > c->duration_ns + timeout_ns) {
			c->state = CAP_EXPIRED;
			snprintf(c->message, sizeof(c->message),
				 "the agent of node '%s' took the request but did not answer within "
				 "its duration and %.1f s", c->node, (double)timeout_ns / NSEC_PER_SEC);
		}
	}
}

static bool in_flight(const struct capture *c)
{
	return c->state == CAP_PENDING || c->state == CAP_DELIVERED;
}

static struct capture *find(uint64_t id)
{
	for (int i = 0; i < CAPTURES_MAX; i++)
		if (caps[i].state != CAP_FREE && caps[i].id == id)
			return &caps[i];
	return NULL;
}

static void cap_json(struct buf *out, const struct capture *c)
{
	buf_printf(out, "{\"id\":%" PRIu64 ",\"node\":", c->id);
	buf_json_str(out, c->node);
	buf_printf(out, ",\"pid\":%u,\"duration_ms\":%" PRIu64 ",\"state\":\"%s\"", c->pid,
		   (uint64_t)(c->duration_ns / NSEC_PER_MSEC), state_names[c->state]);
	if (c->status[0]) {
		buf_puts(out, ",\"status\":");
		buf_json_str(out, c->status);
	}
	if (c->message[0]) {
		buf_puts(out, ",\"message\":");
		buf_json_str(out, c->message);
	}
	if (c->to_ns) {
		buf_puts(out, ",\"from_ms\":");
		buf_json_ms(out, c->from_ns);
		buf_puts(out, ",\"to_ms\":");
		buf_json_ms(out, c->to_ns);
	}
	buf_puts(out, "}");
}

static int parse_u64(const char *s, uint64_t *ret)
{
	char *end;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	*ret = strtoull(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

static unsigned do_request(capture_arg_fn arg, void *actx, struct buf *out)
{
	const char *node = arg(actx, "node"), *pid_s = arg(actx, "pid"), *dur = arg(actx, "duration");
	uint64_t pid = 0, d = 5 * NSEC_PER_SEC, now = wall_ns();
	struct capture *c = NULL;
	unsigned flying = 0, of_node = 0;

	if (!node || !*node || strlen(node) >= sizeof(c->node))
		return fail(out, 400, "node is required (the agent's --node name)");
	if (pid_s && (parse_u64(pid_s, &pid) || pid > 0x3fffffff))
		return fail(out, 400, "pid must be a process id");
	if (dur && (parse_duration_ns(dur, &d) || d < 10 * NSEC_PER_MSEC || d > CAPTURE_MAX_NS))
		return fail(out, 400, "duration must be a duration in 10ms..10m");
	pthread_mutex_lock(&mu);
	expire(now);
	for (int i = 0; i < CAPTURES_MAX; i++) {
		if (!in_flight(&caps[i]))
			continue;
		flying++;
		if (!strcmp(caps[i].node, node))
			of_node++;
	}
	if (of_node >= CAPTURES_PER_NODE || flying >= CAPTURES_MAX) {
		pthread_mutex_unlock(&mu);
		return fail(out, 429, of_node >= CAPTURES_PER_NODE ?
			    "this node has as many captures in flight as allowed (8): wait for "
			    "them to finish or expire" :
			    "as many captures in flight as allowed (64): wait for some to finish "
			    "or expire");
	}
	for (int i = 0; i < CAPTURES_MAX && !c; i++)
		if (caps[i].state == CAP_FREE)
			c = &caps[i];
	for (int i = 0; i < CAPTURES_MAX; i++)	/* else the oldest finished one */
		if ((caps[i].state == CAP_DONE || caps[i].state == CAP_EXPIRED) &&
		    (!c || (c->state != CAP_FREE && caps[i].id < c->id)))
			c = &caps[i];
	if (!c) {	/* can't happen: fewer than CAPTURES_MAX in flight leave a slot */
		pthread_mutex_unlock(&mu);
		return fail(out, 429, "too many captures in flight");
	}
	memset(c, 0, sizeof(*c));
	c->state = CAP_PENDING;
	c->id = next_id++;
	snprintf(c->node, sizeof(c->node), "%s", node);
	c->pid = (uint32_t)pid;
	c->duration_ns = d;
	c->asked_ns = now;
	cap_json(out, c);
	pthread_mutex_unlock(&mu);
	return 200;
}

static unsigned do_pending(capture_arg_fn arg, void *actx, struct buf *out)
{
	const char *node = arg(actx, "node");
	bool first = true;

	int slot = 0;

	if (!node || !*node)
		return fail(out, 400, "node is required");
	pthread_mutex_lock(&mu);
	expire(wall_ns());
	/* the node's agent is there: its slot, else the one asked longest ago */
	for (int i = 0; i < POLLERS_MAX; i++) {
		if (!strcmp(pollers[i].node, node)) {
			slot = i;
			break;
		}
		if (pollers[i].last_ns < pollers[slot].last_ns)
			slot = i;
	}
	snprintf(pollers[slot].node, sizeof(pollers[slot].node), "%s", node);
	pollers[slot].last_ns = wall_ns();
	buf_puts(out, "{\"captures\":[");
	for (int i = 0; i < CAPTURES_MAX; i++) {
		struct capture *c = &caps[i];

		if (c->state != CAP_PENDING || strcmp(c->node, node))
			continue;
		c->state = CAP_DELIVERED;
		c->delivered_ns = wall_ns();
		if (!first)
			buf_puts(out, ",");
		first = false;
		cap_json(out, c);
	}
	buf_puts(out, "]}");
	pthread_mutex_unlock(&mu);
	return 200;
}

/* {"nodes":[{"node":..,"last_poll_ms":..}]}: the agents that asked for captures lately. */
static unsigned do_nodes(struct buf *out)
{
	uint64_t now = wall_ns();
	bool first = true;

	pthread_mutex_lock(&mu);
	buf_puts(out, "{\"nodes\":[");
	for (int i = 0; i < POLLERS_MAX; i++) {
		if (!pollers[i].node[0] || now - pollers[i].last_ns > POLLER_TTL_NS)
			continue;
		buf_puts(out, first ? "{\"node\":" : ",{\"node\":");
		buf_json_str(out, pollers[i].node);
		buf_printf(out, ",\"last_poll_ms\":%llu}",
			   (unsigned long long)(pollers[i].last_ns / NSEC_PER_MSEC));
		first = false;
	}
	buf_puts(out, "]}");
	pthread_mutex_unlock(&mu);
	return 200;
}

static unsigned do_result(capture_arg_fn arg, void *actx, struct buf *out)
{
	const char *st = arg(actx, "status"), *msg = arg(actx, "message");
	const char *node = arg(actx, "node");
	uint64_t id, from = 0, to = 0;
	struct capture *c;

	if (parse_u64(arg(actx, "id"), &id))
		return fail(out, 400, "id is required");
	if (!st || !*st || strlen(st) >= sizeof(c->status))
		return fail(out, 400, "status is required");
	if ((arg(actx, "from") && parse_u64(arg(actx, "from"), &from)) ||
	    (arg(actx, "to") && parse_u64(arg(actx, "to"), &to)))
		return fail(out, 400, "from and to are Unix nanoseconds");
	pthread_mutex_lock(&mu);
	expire(wall_ns());
	c = find(id);
	if (!c || (node && strcmp(node, c->node))) {
		pthread_mutex_unlock(&mu);
		return fail(out, 404, node ? "no such capture of this node" : "no such capture");
	}
	/* Only the answer to a request an agent took, once: a result for one still pending, or
	 * already answered or expired, is no agent's. */
	if (c->state != CAP_DELIVERED) {
		unsigned code = fail(out, 409, c->state == CAP_PENDING ?
				     "no agent has taken this capture yet" :
				     "this capture was answered or expired already");

		pthread_mutex_unlock(&mu);
		return code;
	}
	c->state = CAP_DONE;
	snprintf(c->status, sizeof(c->status), "%s", st);
	snprintf(c->message, sizeof(c->message), "%s", msg ? msg : "");
	c->from_ns = from;
	c->to_ns = to;
	cap_json(out, c);
	pthread_mutex_unlock(&mu);
	return 200;
}

static unsigned do_status(capture_arg_fn arg, void *actx, struct buf *out)
{
	struct capture *c;
	uint64_t id;

	if (parse_u64(arg(actx, "id"), &id))
		return fail(out, 400, "id is required");
	pthread_mutex_lock(&mu);
	expire(wall_ns());
	c = find(id);
	if (c)
		cap_json(out, c);
	pthread_mutex_unlock(&mu);
	return c ? 200 : fail(out, 404, "no such capture");
}

/* ---- trace export ------------------------------------------------------------------------- */

struct tx {
	struct buf *out;
	uint64_t from, to;
	uint32_t pid;			/* 0: all */
	size_t events;
	bool truncated;
	/* named tracks seen: "pid tid" pairs for thread_name metadata, GPUs, processes */
	struct track {
		uint32_t pid, tid;
		char name[96];
	} *tracks;
	size_t ntracks, cap;
};

static const char *get(const char *const *pairs, size_t n, const char *name)
{
	for (size_t i = 0; i + 1 < 2 * n; i += 2)
		if (!strcmp(pairs[i], name))
			return pairs[i + 1];
	return NULL;
}

static uint32_t num(const char *s)
{
	return s ? (uint32_t)strtoul(s, NULL, 10) : 0;
}

/* Remembers a track's name once (tid 0: the process's name). */
static void track(struct tx *t, uint32_t pid, uint32_t tid, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void track(struct tx *t, uint32_t pid, uint32_t tid, const char *fmt, ...)
{
	va_list ap;

	for (size_t i = 0; i < t->ntracks; i++)
		if (t->tracks[i].pid == pid && t->tracks[i].tid == tid)
			return;
	if (t->ntracks == t->cap) {
		size_t nc = t->cap ? 2 * t->cap : 64;
		struct track *n = realloc(t->tracks, nc * sizeof(*n));

		if (!n)
			return;
		t->tracks = n;
		t->cap = nc;
	}
	t->tracks[t->ntracks].pid = pid;
	t->tracks[t->ntracks].tid = tid;
	va_start(ap, fmt);
	vsnprintf(t->tracks[t->ntracks].name, sizeof(t->tracks[0].name), fmt, ap);
	va_end(ap);
	t->ntracks++;
}

static void ts(struct buf *b, const char *key, uint64_t t, uint64_t from)
{
	uint64_t d = t > from ? t - from : 0;

	buf_printf(b, ",\"%s\":%" PRIu64 ".%03u", key, d / 1000, (unsigned)(d % 1000));
}

/* One complete ("X") event; attrs become args. */
static int x_event(struct tx *t, const char *name, const char *cat, uint32_t pid, uint32_t tid,
		   uint64_t start, uint64_t end, const char *const *attrs, size_t nattrs)
{
	struct buf *b = t->out;

	if (t->events >= TRACE_MAX_EVENTS) {
		t->truncated = true;
		return 0;
	}
	if (start < t->from)
		start = t->from;
	if (end > t->to)
		end = t->to;
	if (end < start)
		end = start;
	buf_puts(b, t->events++ ? ",\n{\"ph\":\"X\",\"name\":" : "\n{\"ph\":\"X\",\"name\":");
	buf_json_str(b, name);
	buf_puts(b, ",\"cat\":");
	buf_json_str(b, cat);
	buf_printf(b, ",\"pid\":%u,\"tid\":%u", pid, tid);
	ts(b, "ts", start, t->from);
	buf_printf(b, ",\"dur\":%" PRIu64 ".%03u", (end - start) / 1000,
		   (unsigned)((end - start) % 1000));
	buf_puts(b, ",\"args\":");
	buf_json_labels(b, attrs, nattrs);
	buf_puts(b, "}");
	return b->oom ? -ENOMEM : 0;
}

static int on_interval(void *ctx, const char *kind, const char *const *labels, size_t nl,
		       uint64_t start, uint64_t end, const char *const *attrs, size_t na)
{
	struct tx *t = ctx;
	uint32_t pid = num(get(labels, nl, "pid")), tid = num(get(labels, nl, "tid"));
	const char *comm = get(labels, nl, "comm");

	if (t->pid && pid && pid != t->pid)
		return 0;
	if (!strcmp(kind, "gpu_kernel") || !strcmp(kind, "memcpy") || !strcmp(kind, "memset")) {
		uint32_t gpu = num(get(labels, nl, "gpu")), stream = num(get(attrs, na, "stream"));
		const char *name = !strcmp(kind, "gpu_kernel") ? get(attrs, na, "name") : kind;

		track(t, GPU_PID_BASE + gpu, 0, "GPU %u", gpu);
		track(t, GPU_PID_BASE + gpu, stream + 1, "stream %u", stream);
		return x_event(t, name ? name : kind, kind, GPU_PID_BASE + gpu, stream + 1, start, end,
			       attrs, na);
	}
	if (!pid)
		return 0;
	track(t, pid, 0, "%s (pid %u)", comm ? comm : "?", pid);
	if (!strcmp(kind, "thread_state") || !strcmp(kind, "cuda_api") ||
	    !strcmp(kind, "cuda_sync")) {
		const char *st = get(attrs, na, "state"), *api = get(attrs, na, "api");
		const char *th = get(labels, nl, "thread");

		if (!tid)
			tid = pid;
		track(t, pid, tid, "%s %u", th ? th : "thread", tid);
		return x_event(t, !strcmp(kind, "thread_state") ? (st ? st : "state") :
				  api ? api : kind, kind, pid, tid, start, end, attrs, na);
	}
	if (!strcmp(kind, "gpu_trace_window")) {
		track(t, pid, 1, "gpuscope trace windows");
		return x_event(t, "trace window", kind, pid, 1, start, end, attrs, na);
	}
	return 0;
}

struct ser {
	struct tx *t;
	char name[64];
	uint32_t gpu[4096];	/* series id -> GPU (by the series' gpu label) */
};

static int series_cb(void *ctx, uint64_t id, const char *const *pairs, size_t n)
{
	struct ser *s = ctx;

	if (id < ARRAY_SIZE(s->gpu))
		s->gpu[id] = num(get(pairs, n, "gpu"));
	return 0;
}

static int point_cb(void *ctx, uint64_t id, uint64_t t_ns, double v)
{
	struct ser *s = ctx;
	struct tx *t = s->t;
	uint32_t gpu = id < ARRAY_SIZE(s->gpu) ? s->gpu[id] : 0;
	struct buf *b = t->out;

	if (t->events >= TRACE_MAX_EVENTS) {
		t->truncated = true;
		return 0;
	}
	track(t, GPU_PID_BASE + gpu, 0, "GPU %u", gpu);
	buf_puts(b, t->events++ ? ",\n{\"ph\":\"C\",\"name\":" : "\n{\"ph\":\"C\",\"name\":");
	buf_json_str(b, s->name);
	buf_printf(b, ",\"pid\":%u", GPU_PID_BASE + gpu);
	ts(b, "ts", t_ns, t->from);
	buf_puts(b, ",\"args\":{\"value\":");
	buf_json_num(b, v);
	buf_puts(b, "}}");
	return b->oom ? -ENOMEM : 0;
}

/* {node="N"} with N escaped for the selector language. */
static struct selector *node_selector(const char *node)
{
	char s[600], err[200];
	size_t k = 0;

	k += snprintf(s, sizeof(s), "{node=\"");
	for (const char *p = node; *p && k < sizeof(s) - 8; p++) {
		if (*p == '"' || *p == '\\')
			s[k++] = '\\';
		s[k++] = *p;
	}
	snprintf(s + k, sizeof(s) - k, "\"}");
	return selector_parse(s, err, sizeof(err));
}

int trace_export(struct store *st, const char *node, uint32_t pid, uint64_t from_ns,
		 uint64_t to_ns, struct buf *out)
{
	static const char *const kinds[] = { "gpu_kernel", "memcpy",	"memset",
					     "cuda_api",   "cuda_sync", "thread_state",
					     "gpu_trace_window" };
	static const char *const counters[] = { "gpu_utilization", "gpu_sm_active",
						"gpu_tensor_active", "gpu_memory_used_bytes",
						"gpu_power_watts", "gpu_sm_clock_mhz" };
	struct tx t = { .out = out, .from = from_ns, .to = to_ns, .pid = pid };
	struct selector *sel = node_selector(node);
	struct ser *s = NULL;
	int err = 0;

	if (!sel)
		return -ENOMEM;
	buf_puts(out, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
	for (size_t k = 0; k < ARRAY_SIZE(kinds) && !err; k++) {
		bool trunc = false;

		err = st->ops->intervals(st, kinds[k], from_ns, to_ns, sel, TRACE_MAX_EVENTS,
					 on_interval, &t, &trunc);
		t.truncated |= trunc;
	}
	s = calloc(1, sizeof(*s));
	if (!s && !err)
		err = -ENOMEM;
	for (size_t k = 0; k < ARRAY_SIZE(counters) && !err; k++) {
		memset(s->gpu, 0, sizeof(s->gpu));
		s->t = &t;
		snprintf(s->name, sizeof(s->name), "%s", counters[k]);
		err = st->ops->series(st, counters[k], from_ns, to_ns, sel, series_cb, point_cb, s);
	}
	for (size_t i = 0; i < t.ntracks && !err; i++) {
		const struct track *k = &t.tracks[i];

		buf_puts(out, t.events++ ? ",\n{\"ph\":\"M\",\"name\":" : "\n{\"ph\":\"M\",\"name\":");
		buf_printf(out, "\"%s\",\"pid\":%u,\"tid\":%u,\"args\":{\"name\":",
			   k->tid ? "thread_name" : "process_name", k->pid, k->tid);
		buf_json_str(out, k->name);
		buf_puts(out, "}}");
	}
	buf_printf(out, "\n],\"otherData\":{\"from_unix_ns\":\"%" PRIu64 "\",\"to_unix_ns\":\"%" PRIu64
			"\",\"node\":",
		   from_ns, to_ns);
	buf_json_str(out, node);
	buf_printf(out, ",\"clock\":\"wall (agent: CLOCK_MONOTONIC + offset; CUPTI converted per "
			"process)\",\"events\":%zu,\"truncated\":%s}}\n",
		   t.events, t.truncated ? "true" : "false");
	if (!err && out->oom)
		err = -ENOMEM;
	free(s);
	free(t.tracks);
	selector_free(sel);
	return err;
}

static unsigned do_trace(struct store *st, capture_arg_fn arg, void *actx, struct buf *out)
{
	const char *node = arg(actx, "node"), *pid_s = arg(actx, "pid");
	uint64_t from, to, pid = 0;
	int err;

	if (!node || !*node)
		return fail(out, 400, "node is required");
	if (parse_time_ns(arg(actx, "from") ? arg(actx, "from") : "", &from) ||
	    parse_time_ns(arg(actx, "to") ? arg(actx, "to") : "", &to) || to <= from)
		return fail(out, 400, "from and to are required times (RFC 3339 or Unix seconds), "
				      "from before to");
	if (to - from > 3600 * NSEC_PER_SEC)
		return fail(out, 400, "a trace covers at most one hour");
	if (pid_s && (parse_u64(pid_s, &pid) || pid > 0x3fffffff))
		return fail(out, 400, "pid must be a process id");
	err = trace_export(st, node, (uint32_t)pid, from, to, out);
	if (err) {
		char msg[100];

		snprintf(msg, sizeof(msg), "trace export: %s", strerror(-err));
		return fail(out, err == -ENOMEM ? 503 : 500, msg);
	}
	return 200;
}

unsigned capture_handle(struct store *st, const char *url, bool post, capture_arg_fn arg,
			void *actx, struct buf *out)
{
	if (!strcmp(url, "/api/v1/trace"))
		return post ? fail(out, 405, "use GET") : do_trace(st, arg, actx, out);
	if (!strcmp(url, "/api/v1/capture"))
		return post ? do_request(arg, actx, out) : fail(out, 405, "use POST");
	if (!strcmp(url, "/api/v1/capture/result"))
		return post ? do_result(arg, actx, out) : fail(out, 405, "use POST");
	if (!strcmp(url, "/api/v1/capture/pending"))
		return do_pending(arg, actx, out);
	if (!strcmp(url, "/api/v1/capture/status"))
		return post ? fail(out, 405, "use GET") : do_status(arg, actx, out);
	if (!strcmp(url, "/api/v1/capture/nodes"))
		return post ? fail(out, 405, "use GET") : do_nodes(out);
	return fail(out, 404, "no such endpoint");
}
