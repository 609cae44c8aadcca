// SPDX-License-Identifier: Apache-2.0
/*
 * The agent's side of on-demand captures (gpuscope capture, the UI's Capture button): a thread
 * asks the server for this node's capture requests every second; the main loop opens the trace
 * windows (cupti_usdt__capture); once a window's time is over the thread posts the answer
 * (status ok / not_injected / unavailable, the window's range) to the server.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "agent/agent.h"
#include "agent/http_client.h"
#include "agent/cupti/capture_poll.h"
#include "agent/cupti/cupti_usdt.h"
#include "common/log.h"
#include "common/util.h"

#define QMAX		16
#define POLL_NS		NSEC_PER_SEC
#define RESP_MAX	(64 << 10)

enum { Q_FREE = 0, Q_NEW, Q_TRACING, Q_READY };

struct req {
	int state;
	uint64_t id, duration_ns;
	uint32_t pid;
	int rc;
	char why[200];
	uint64_t from_wall, until_mono, to_wall;
};

static struct {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started, stop;
	struct req q[QMAX];
	char node[256];
	struct http_link *link;		/* the server's, as the push's (run.c's) */
	struct agent *a;
	uint64_t polls, poll_errors, answered, refused;
} P = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

/* GET or POST (empty body) path on the server; the answer's JSON in *ret. 0 or -1. */
static int call(struct http_conn *cu, const char *path, bool post, json_t **ret)
{
	struct http_req req = { .method = post ? "POST" : "GET", .path = path,
				.max_body = RESP_MAX, .timeout_ns = 5 * NSEC_PER_SEC };
	struct http_answer ans;
	int err = -1;

	*ret = NULL;
	if (!http_conn__request(cu, &req, &ans) && ans.status / 100 == 2) {
		*ret = ans.body ? json_loadb(ans.body, ans.len, 0, NULL) : NULL;
		err = 0;
	} else {
		log_debug("capture poll: %s: %s", path, ans.why);
	}
	http_answer__done(&ans);
	return err;
}

/*
 * Posts the answer to capture request id: its status, a message, and the window's range
 * [from, to] (wall ns) where one was traced (from 0: none sent). 0 once the server took it.
 */
static int post_result(struct http_conn *cu, uint64_t id, const char *status,
		       const char *message, uint64_t from, uint64_t to)
{
	char url[1400], range[64] = "", *node = http_escape(P.node);
	char *msg = http_escape(message);
	json_t *j = NULL;
	int err;

	if (from)
		snprintf(range, sizeof(range), "&from=%" PRIu64 "&to=%" PRIu64, from, to);
	snprintf(url, sizeof(url), "/api/v1/capture/result?id=%" PRIu64 "&node=%s&status=%s"
		 "&message=%s%s", id, node ? node : "", status, msg ? msg : "", range);
	free(msg);
	free(node);
	err = call(cu, url, true, &j);
	json_decref(j);
	if (!err)
		P.answered++;
	return err;
}

/* Answers request id at once: refused, the agent's queue of QMAX captures is full. */
static void refuse(struct http_conn *cu, uint64_t id)
{
	P.refused++;
	log_warn("capture %" PRIu64 ": refused, %d captures already queued", id, QMAX);
	post_result(cu, id, "refused", "agent capture queue full", 0, 0);
}

static void take_requests(struct http_conn *cu)
{
	char url[1024];
	json_t *j, *caps, *c;
	char *node = http_escape(P.node);
	size_t i;

	snprintf(url, sizeof(url), "/api/v1/capture/pending?node=%s", node ? node : "");
	free(node);
	P.polls++;
	if (call(cu, url, false, &j)) {
		P.poll_errors++;
		return;
	}
	caps = json_object_get(j, "captures");
	json_array_foreach(caps, i, c) {
		uint64_t id = json_integer_value(json_object_get(c, "id"));
		uint64_t ms = json_integer_value(json_object_get(c, "duration_ms"));
		uint32_t pid = json_integer_value(json_object_get(c, "pid"));

		int k;

		pthread_mutex_lock(&P.mu);
		for (k = 0; k < QMAX; k++)
			if (P.q[k].state == Q_FREE) {
				P.q[k] = (struct req){ .state = Q_NEW, .id = id, .pid = pid,
						       .duration_ns = ms * NSEC_PER_MSEC };
				break;
			}
		pthread_mutex_unlock(&P.mu);
		if (k == QMAX)
			refuse(cu, id);	/* never a silent drop: the server frees its slot */
	}
	json_decref(j);
}

static void post_answers(struct http_conn *cu)
{
	for (int k = 0; k < QMAX; k++) {
		struct req r;
		const char *st;

		pthread_mutex_lock(&P.mu);
		r = P.q[k];
		pthread_mutex_unlock(&P.mu);
		if (r.state != Q_READY)
			continue;
		st = r.rc >= 0 ? "ok" : r.rc == -ENOENT ? "not_injected" : "unavailable";
		if (post_result(cu, r.id, st, r.why, r.from_wall,
				r.rc >= 0 ? r.to_wall : r.from_wall) == 0) {
			pthread_mutex_lock(&P.mu);
			P.q[k].state = Q_FREE;
			pthread_mutex_unlock(&P.mu);
		}
	}
}

static void *poll_main(void *arg)
{
	struct http_conn *cu = http_conn__new(P.link);

	(void)arg;
	if (!cu) {
		log_warn("capture poll: %s: capture requests are off", strerror(errno));
		return NULL;
	}
	pthread_mutex_lock(&P.mu);
	while (!P.stop) {
		struct timespec ts;

		pthread_mutex_unlock(&P.mu);
		take_requests(cu);
		post_answers(cu);
		cupti_usdt__capture_counts(P.polls, P.poll_errors, P.answered, P.refused);
		pthread_mutex_lock(&P.mu);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		if (!P.stop)
			pthread_cond_timedwait(&P.cv, &P.mu, &ts);
	}
	pthread_mutex_unlock(&P.mu);
	http_conn__free(cu);
	return NULL;
}

int capture_poll__start(struct agent *a)
{
	int err;

	if (!a->server || P.started)
		return 0;
	snprintf(P.node, sizeof(P.node), "%s", a->opts.node ? a->opts.node : "");
	P.link = a->server;
	P.a = a;
	P.stop = false;
	memset(P.q, 0, sizeof(P.q));
	err = pthread_create(&P.th, NULL, poll_main, NULL);
	if (err)
		return -err;
	P.started = true;
	return 0;
}

bool capture_poll__tick(void)
{
	uint64_t now = mono_ns();
	bool wake = false, ended = false;

	if (!P.started)
		return false;
	pthread_mutex_lock(&P.mu);
	for (int k = 0; k < QMAX; k++) {
		struct req *r = &P.q[k];

		if (r->state == Q_NEW) {
			r->rc = cupti_usdt__capture(r->pid, r->duration_ns, r->why, sizeof(r->why));
			r->from_wall = now + P.a->mono_to_wall_ns;
			r->until_mono = now + r->duration_ns;
			r->state = r->rc >= 0 ? Q_TRACING : Q_READY;
			log_info("capture %" PRIu64 ": %s", r->id, r->why);
			wake |= r->rc < 0;
		} else if (r->state == Q_TRACING && now >= r->until_mono &&
			   !cupti_usdt__capturing(r->pid)) {
			/* the window closed and its records are in the batch: push, then answer */
			r->state = Q_READY;
			r->to_wall = now + P.a->mono_to_wall_ns;
			wake = ended = true;
		}
	}
	if (wake)
		pthread_cond_signal(&P.cv);
	pthread_mutex_unlock(&P.mu);
	return ended;
}

void capture_poll__stop(void)
{
	if (!P.started)
		return;
	pthread_mutex_lock(&P.mu);
	P.stop = true;
	pthread_cond_signal(&P.cv);
	pthread_mutex_unlock(&P.mu);
	pthread_join(P.th, NULL);
	P.started = false;
}

