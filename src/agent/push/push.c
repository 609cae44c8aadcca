/* SPDX-License-Identifier: Apache-2.0 */
/* The push thread: encode, compress, POST with backoff, spool during outages, drain oldest-first. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "agent/http_client.h"
#include "agent/push/fit.h"
#include "agent/push/push.h"
#include "agent/push/spool.h"
#include "agent/selfprof.h"
#include "common/batch.h"
#include "common/prom.h"
#include "common/log.h"
#include "common/util.h"

#define QUEUE_MAX	16		/* pending batches between the main loop and this thread */
#define BODY_MAX	1024		/* bytes of a server answer kept for the log */

enum post_result { POST_OK, POST_REJECTED, POST_TOO_LARGE, POST_FAILED };

/* Halvings of one batch at most (2^12 pieces) before a 413 is taken as final. */
#define SPLIT_DEPTH_MAX 12

/* Counters, updated with __atomic builtins: written by the push thread, read by /metrics. */
struct counters {
	uint64_t batches_submitted, samples_submitted;
	uint64_t batches_pushed, samples_pushed, bytes_pushed, raw_bytes_pushed;
	uint64_t batches_rejected, samples_rejected;
	uint64_t batches_split;		/* 413 answers that made us send a batch in halves */
	uint64_t batches_fitted;	/* batches split before sending, to fit the server's limits */
	uint64_t fit_bound, fit_decoded;	/* fit checks decided by the bound / by decoding */
	uint64_t samples_pushed_earlier;	/* of samples_pushed: from an earlier run's spool */
	uint64_t push_failures, batches_spooled;
	uint64_t queue_dropped_batches, queue_dropped_samples;
	uint64_t encode_errors, encode_error_samples, encode_cpu_ns;
	uint64_t last_push_wall_ns;
};

struct pusher {
	struct pusher_opts o;
	char *ingest_url;
	struct spool *spool;
	struct http_conn *conn;	/* on o.link; push thread only */
	char limits_header[256];	/* the last answer's Gpuscope-Ingest-Limits; push thread */
	pthread_t thread;
	bool started, joined;
	pthread_mutex_t lock;
	pthread_cond_t cond;	/* CLOCK_MONOTONIC */
	struct batch *queue[QUEUE_MAX];
	uint64_t queue_samples[QUEUE_MAX];
	size_t qhead, qlen;
	bool stopping;
	uint64_t stop_deadline_ns;
	/* push thread only */
	unsigned failures_in_row;
	uint64_t next_retry_ns;
	bool down;
	unsigned rand_state;
	uint64_t inherited_left;	/* spool entries an earlier run left, not handled yet */
	uint64_t spool_dropped_seen;	/* the spool's dropped_batches when last looked at */
	struct ingest_limits lim;	/* what batches are sized to (fit.h) */
	bool limits_asked;		/* the server answered our empty upload */
	struct counters c;
};

#define INC(p, field, n) __atomic_add_fetch(&(p)->c.field, (n), __ATOMIC_RELAXED)
#define GET(p, field)	 __atomic_load_n(&(p)->c.field, __ATOMIC_RELAXED)

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

int push_encode(struct batch *b, enum compression c, uint8_t **ret, size_t *ret_len,
		size_t *ret_raw_len)
{
	uint8_t *raw = NULL;
	size_t raw_len = 0;
	unsigned act = selfprof_enter(SELF_ENCODE);
	int err;

	err = batch__encode(b, &raw, &raw_len);
	selfprof_leave(act);
	if (err)
		return err;
	act = selfprof_enter(SELF_COMPRESS);
	err = compress_buf(c, raw, raw_len, ret, ret_len);
	free(raw);
	selfprof_leave(act);
	if (!err && ret_raw_len)
		*ret_raw_len = raw_len;
	return err;
}

/* The per-request timeout, cut to what is left of the stop deadline once stopping. */
static uint64_t request_timeout_ns(struct pusher *p)
{
	uint64_t t = p->o.timeout_ns, now = mono_ns(), deadline;
	bool stopping;

	pthread_mutex_lock(&p->lock);
	stopping = p->stopping;
	deadline = p->stop_deadline_ns;
	pthread_mutex_unlock(&p->lock);
	if (stopping)
		t = deadline > now + NSEC_PER_MSEC ? (deadline - now < t ? deadline - now : t)
						     : NSEC_PER_MSEC;
	return t;
}

/* Stopping and past the stop deadline: no more sending, batches go to the spool. */
static bool past_stop_deadline(struct pusher *p)
{
	bool past;

	pthread_mutex_lock(&p->lock);
	past = p->stopping && mono_ns() >= p->stop_deadline_ns;
	pthread_mutex_unlock(&p->lock);
	return past;
}

/* Asked during a request (about once a second, and on every transfer step): a request in
 * flight when the stop's deadline passes is cut there, its batch kept in the spool. */
static bool cut_at_deadline(void *arg)
{
	return past_stop_deadline(arg);
}

static enum post_result post(struct pusher *p, const uint8_t *data, size_t len,
			     enum compression enc, char *why, size_t whylen)
{
	struct http_req req = {
		.method = "POST",
		.url = p->ingest_url,
		.body = data,
		.body_len = len,
		.content_type = "application/x-protobuf",
		.content_encoding = enc != COMPRESS_NONE ? compression_name(enc) : NULL,
		.timeout_ns = request_timeout_ns(p),
		.max_body = BODY_MAX,
		.keep_head = true,
		.cancel = cut_at_deadline,
		.arg = p,
		.want_header = "Gpuscope-Ingest-Limits",
	};
	struct http_answer ans;
	enum post_result r;
	long status;
	int err;

	err = http_conn__request(p->conn, &req, &ans);
	status = ans.status;
	snprintf(why, whylen, "%s", ans.why);
	snprintf(p->limits_header, sizeof(p->limits_header), "%s", ans.header);
	if (err)
		r = POST_FAILED;
	else if (status >= 200 && status < 300)
		r = POST_OK;
	else if (status == 413)
		r = POST_TOO_LARGE;
	else if (status >= 400 && status < 500 && status != 401 && status != 403 &&
		 status != 408 && status != 429)
		r = POST_REJECTED;
	else
		r = POST_FAILED;
	http_answer__done(&ans);
	return r;
}

/* The limits the server's last answer advertised (Gpuscope-Ingest-Limits, kept by post());
 * an older server sends none: the defaults stay. */
static void learn_limits(struct pusher *p)
{
	if (p->limits_header[0] && ingest_limits_parse(&p->lim, p->limits_header))
		log_debug("push: the server takes bodies up to %" PRIu64 " bytes", p->lim.max_body);
}

/* post(), then what the answer says of the server's limits. */
static enum post_result post_learn(struct pusher *p, const uint8_t *data, size_t len,
				   enum compression enc, char *why, size_t whylen)
{
	enum post_result r = post(p, data, len, enc, why, whylen);

	if (r != POST_FAILED)
		learn_limits(p);
	return r;
}

/* Before the first batch is sized: an empty upload (stored nowhere, answered 204, as `gpuscope
 * doctor` checks reach) brings the server's limits. Once answered, not again. */
static void ask_limits(struct pusher *p)
{
	char why[BODY_MAX + 64];

	if (p->limits_asked || p->down)
		return;
	p->limits_asked = post_learn(p, (const uint8_t *)"", 0, COMPRESS_NONE, why, sizeof(why)) !=
			  POST_FAILED;
}

static void schedule_retry(struct pusher *p)
{
	p->next_retry_ns = mono_ns() + backoff_ns(p->o.retry_base_ns, p->o.retry_max_ns,
						   p->failures_in_row, &p->rand_state);
}

static void note_ok(struct pusher *p, size_t bytes, size_t raw, uint64_t nsamples)
{
	INC(p, batches_pushed, 1);
	INC(p, samples_pushed, nsamples);
	INC(p, bytes_pushed, bytes);
	INC(p, raw_bytes_pushed, raw);
	__atomic_store_n(&p->c.last_push_wall_ns, wall_ns(), __ATOMIC_RELAXED);
	if (p->down)
		log_info("push: server reachable again");
	p->down = false;
	p->failures_in_row = 0;
}

static void note_failure(struct pusher *p, const char *why)
{
	INC(p, push_failures, 1);
	if (!p->down)
		log_warn("push: %s: %s; spooling, retrying with backoff", p->ingest_url, why);
	else
		log_debug("push: retry failed: %s", why);
	p->down = true;
	p->failures_in_row++;
	schedule_retry(p);
}

static void note_rejected(struct pusher *p, uint64_t nsamples, const char *why)
{
	INC(p, batches_rejected, 1);
	INC(p, samples_rejected, nsamples);
	log_warn("push: server rejected a batch of %" PRIu64 " samples (%s); dropped", nsamples,
		 why);
}

static void to_spool(struct pusher *p, const uint8_t *data, size_t len, uint64_t nsamples)
{
	int err = spool__put(p->spool, data, len, p->o.compression, nsamples);

	if (!err)
		INC(p, batches_spooled, 1);
	else
		log_warn("push: spooling a batch of %" PRIu64 " samples: %s (dropped, counted)",
			 nsamples, strerror(-err));
}

static void send_fitted(struct pusher *p, const uint8_t *raw, size_t raw_len, uint64_t nsamples,
			const struct batch_counts *bc, unsigned depth);
static void send_split(struct pusher *p, const uint8_t *data, size_t len, enum compression enc,
		       uint64_t nsamples, unsigned depth, const char *why413);

/*
 * An encoded batch (raw: uncompressed) in two halves (batch_split), each sent by send_fitted()
 * (split again where it still does not fit). -E2BIG when it holds one record, -EINVAL when it
 * does not decode, -ENOMEM: nothing sent.
 */
static int send_halves(struct pusher *p, const uint8_t *raw, size_t raw_len, unsigned depth)
{
	struct batch *half[2] = { NULL, NULL };
	int err = batch_split(raw, raw_len, &half[0], &half[1]);

	if (err)
		return err;
	for (int h = 0; h < 2; h++) {
		uint64_t n = batch__nsamples(half[h]);
		unsigned act = selfprof_enter(SELF_ENCODE);
		struct batch_counts bc;
		uint8_t *r = NULL;
		size_t rlen = 0;

		batch__counts(half[h], &bc);
		err = batch__encode(half[h], &r, &rlen);
		selfprof_leave(act);
		batch__free(half[h]);
		if (err) {
			INC(p, encode_errors, 1);
			INC(p, encode_error_samples, n);
			log_error("push: encoding half of a split batch: %s (dropped, counted)",
				  strerror(-err));
			continue;
		}
		send_fitted(p, r, rlen, n, &bc, depth + 1);
		free(r);
	}
	return 0;
}

/*
 * After a 413: decompresses the batch and sends it in halves, splitting again while a half
 * does not fit the limits the 413 told, or the server still says 413. A half the server cannot
 * take alone (one record, or SPLIT_DEPTH_MAX halvings) is rejected and counted; a half that
 * meets a network failure goes to the spool. Nothing is dropped silently.
 */
static void send_split(struct pusher *p, const uint8_t *data, size_t len, enum compression enc,
		       uint64_t nsamples, unsigned depth, const char *why413)
{
	uint8_t *raw = NULL;
	size_t raw_len = 0;
	int err;

	err = decompress_buf(compression_name(enc), data, len, (size_t)1 << 31, NULL, NULL, &raw,
			     &raw_len);
	if (!err && depth >= SPLIT_DEPTH_MAX)
		err = -E2BIG;
	if (!err) {
		log_info("push: server answered 413 for a batch of %" PRIu64 " samples; sending it"
			 " in halves (%s)", nsamples, why413);
		err = send_halves(p, raw ? raw : data, raw ? raw_len : len, depth);
		if (!err)
			INC(p, batches_split, 1);
	}
	free(raw);
	if (err)
		note_rejected(p, nsamples, err == -E2BIG ? why413 : "413, and the batch does not split");
}

/* One piece, compressed and sized: spooled (older batches wait there, or the stop deadline
 * passed) or sent, and the answer handled. */
static void send_piece(struct pusher *p, const uint8_t *data, size_t len, size_t raw,
		       uint64_t nsamples, unsigned depth)
{
	char why[BODY_MAX + 64];

	if (spool__count(p->spool) || past_stop_deadline(p)) {
		/* Keep the order: older spooled batches go first; at exit, past the grace: kept */
		to_spool(p, data, len, nsamples);
		return;
	}
	switch (post_learn(p, data, len, p->o.compression, why, sizeof(why))) {
	case POST_OK:
		note_ok(p, len, raw, nsamples);
		break;
	case POST_REJECTED:
		note_rejected(p, nsamples, why);
		break;
	case POST_TOO_LARGE:
		send_split(p, data, len, p->o.compression, nsamples, depth, why);
		break;
	case POST_FAILED:
		note_failure(p, why);
		to_spool(p, data, len, nsamples);
		break;
	}
}

/*
 * Whether a piece fits the server's limits: the bound from the batch's counts (bc, when the
 * batch was at hand), else the server's own decoding checks (fit.h; docs/push.md).
 */
static bool fits(struct pusher *p, const uint8_t *raw, size_t raw_len, size_t zlen,
		 const struct batch_counts *bc)
{
	if (bc && batch_fits_bound(&p->lim, bc, raw_len, zlen)) {
		INC(p, fit_bound, 1);
		return true;
	}
	INC(p, fit_decoded, 1);
	return batch_fits(&p->lim, raw, raw_len, zlen);
}

/*
 * Sends an encoded batch (raw: uncompressed; bc: its counts, or NULL) as pieces within the
 * server's limits (fit.h): compressed, checked, and split in halves until each piece fits, so
 * that the server never has to answer 413. A piece of one record that does not fit is sent as
 * it is (the server's answer decides).
 */
static void send_fitted(struct pusher *p, const uint8_t *raw, size_t raw_len, uint64_t nsamples,
			const struct batch_counts *bc, unsigned depth)
{
	uint64_t t0 = thread_cpu_ns();
	uint8_t *z = NULL;
	size_t zlen = 0;
	unsigned act;
	bool fit;
	int err;

	act = selfprof_enter(SELF_COMPRESS);
	err = compress_buf(p->o.compression, raw, raw_len, &z, &zlen);
	selfprof_leave(act);
	if (err) {
		INC(p, encode_errors, 1);
		INC(p, encode_error_samples, nsamples);
		log_error("push: compressing a batch of %" PRIu64 " samples: %s (dropped, counted)",
			  nsamples, strerror(-err));
		return;
	}
	fit = depth >= SPLIT_DEPTH_MAX || fits(p, raw, raw_len, zlen, bc);
	INC(p, encode_cpu_ns, thread_cpu_ns() - t0);
	if (!fit) {
		log_debug("push: a batch of %" PRIu64 " samples (%zu bytes, %zu compressed) is past"
			  " the server's limits: sending it in halves", nsamples, raw_len, zlen);
		if (!send_halves(p, raw, raw_len, depth)) {
			INC(p, batches_fitted, 1);
			free(z);
			return;
		}
	}
	send_piece(p, z, zlen, raw_len, nsamples, depth);
	free(z);
}

/* Spool entries an earlier run left are the oldest: the first ones handled or dropped. */
static bool take_inherited(struct pusher *p)
{
	struct spool_stats st;
	uint64_t d;

	if (!p->inherited_left)
		return false;
	spool__stats(p->spool, &st);
	d = st.dropped_batches - p->spool_dropped_seen;
	p->spool_dropped_seen = st.dropped_batches;
	p->inherited_left -= d < p->inherited_left ? d : p->inherited_left;
	if (!p->inherited_left)
		return false;
	p->inherited_left--;
	return true;
}

/* Sends spooled batches oldest-first until the spool is empty, a send fails or the deadline. */
static void drain(struct pusher *p, uint64_t deadline_ns)
{
	char why[BODY_MAX + 64];

	while (mono_ns() < deadline_ns) {
		uint8_t *data;
		size_t len;
		enum compression enc;
		uint64_t nsamples;
		int err = spool__peek(p->spool, &data, &len, &enc, &nsamples);

		if (err == -ENOENT)
			break;
		if (err) {
			log_warn("push: reading the spool: %s", strerror(-err));
			p->failures_in_row++;
			schedule_retry(p);
			break;
		}
		switch (post_learn(p, data, len, enc, why, sizeof(why))) {
		case POST_OK:
			note_ok(p, len, 0, nsamples);
			if (take_inherited(p))
				INC(p, samples_pushed_earlier, nsamples);
			spool__pop(p->spool);
			break;
		case POST_REJECTED:
			note_rejected(p, nsamples, why);
			take_inherited(p);
			spool__pop(p->spool);
			break;
		case POST_TOO_LARGE:
			take_inherited(p);
			spool__pop(p->spool);	/* its halves are delivered or spooled anew */
			send_split(p, data, len, enc, nsamples, 0, why);
			break;
		case POST_FAILED:
			note_failure(p, why);
			free(data);
			return;
		}
		free(data);
	}
}

static void handle_batch(struct pusher *p, struct batch *b, uint64_t nsamples)
{
	struct batch_counts bc;
	uint8_t *raw = NULL;
	size_t raw_len = 0;
	uint64_t t0 = thread_cpu_ns();
	unsigned act = selfprof_enter(SELF_ENCODE);
	int err;

	batch__counts(b, &bc);
	err = batch__encode(b, &raw, &raw_len);
	selfprof_leave(act);
	batch__free(b);
	INC(p, encode_cpu_ns, thread_cpu_ns() - t0);
	if (err) {
		INC(p, encode_errors, 1);
		INC(p, encode_error_samples, nsamples);
		log_error("push: encoding a batch of %" PRIu64 " samples: %s (dropped, counted)",
			  nsamples, strerror(-err));
		return;
	}
	if (!spool__count(p->spool) && !past_stop_deadline(p))
		ask_limits(p);
	send_fitted(p, raw, raw_len, nsamples, &bc, 0);
	free(raw);
}

static void *thread_main(void *arg)
{
	struct pusher *p = arg;

	selfprof_thread(SELF_PUSH);
	for (;;) {
		struct batch *b = NULL;
		uint64_t nsamples = 0, now;
		bool stop;

		pthread_mutex_lock(&p->lock);
		for (;;) {
			now = mono_ns();
			if (p->qlen || p->stopping)
				break;
			if (spool__count(p->spool) && now >= p->next_retry_ns)
				break;
			if (spool__count(p->spool)) {
				struct timespec ts = { .tv_sec = p->next_retry_ns / NSEC_PER_SEC,
						       .tv_nsec = p->next_retry_ns % NSEC_PER_SEC };

				pthread_cond_timedwait(&p->cond, &p->lock, &ts);
			} else {
				pthread_cond_wait(&p->cond, &p->lock);
			}
		}
		if (p->qlen) {
			b = p->queue[p->qhead];
			nsamples = p->queue_samples[p->qhead];
			p->qhead = (p->qhead + 1) % QUEUE_MAX;
			p->qlen--;
		}
		stop = p->stopping;
		pthread_mutex_unlock(&p->lock);

		if (b) {
			handle_batch(p, b, nsamples);
			selfprof_flush();
			continue;
		}
		if (stop) {
			/* Last chance: one drain pass if the server answers, bounded by the deadline. */
			if (spool__count(p->spool) && (!p->down || now >= p->next_retry_ns))
				drain(p, p->stop_deadline_ns);
			break;
		}
		drain(p, UINT64_MAX);
		selfprof_flush();
	}
	return NULL;
}

struct pusher *pusher__new(const struct pusher_opts *o, struct spool *spool)
{
	struct pusher *p = calloc(1, sizeof(*p));
	pthread_condattr_t ca;
	const char *base;
	size_t n;
	int err;

	if (!p)
		return NULL;
	p->o = *o;
	if (!p->o.retry_base_ns)
		p->o.retry_base_ns = NSEC_PER_SEC;
	if (!p->o.retry_max_ns)
		p->o.retry_max_ns = 30 * NSEC_PER_SEC;
	if (p->o.retry_max_ns < p->o.retry_base_ns)
		p->o.retry_max_ns = p->o.retry_base_ns;
	if (!p->o.timeout_ns)
		p->o.timeout_ns = 10 * NSEC_PER_SEC;
	base = http_link__base(o->link);
	n = strlen(base);
	p->spool = spool;
	{
		struct spool_stats st;

		spool__stats(spool, &st);
		p->inherited_left = st.files;
		p->spool_dropped_seen = st.dropped_batches;
	}
	p->rand_state = (unsigned)(wall_ns() ^ (uint64_t)getpid());
	ingest_limits_default(&p->lim);
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cond, &ca);
	pthread_condattr_destroy(&ca);
	while (n && base[n - 1] == '/')
		n--;
	if (n >= 14 && !strncmp(base + n - 14, "/api/v1/ingest", 14))
		err = asprintf(&p->ingest_url, "%.*s", (int)n, base);
	else
		err = asprintf(&p->ingest_url, "%.*s/api/v1/ingest", (int)n, base);
	if (err < 0) {
		p->ingest_url = NULL;
		err = -ENOMEM;
		goto out_free;
	}
	p->conn = http_conn__new(o->link);
	if (!p->conn) {
		err = -errno;
		goto out_free;
	}
	err = -pthread_create(&p->thread, NULL, thread_main, p);
	if (err)
		goto out_free;
	p->started = true;
	return p;
out_free:
	pusher__free(p);
	errno = -err;
	return NULL;
}

int pusher__submit(struct pusher *p, struct batch *b)
{
	uint64_t nsamples = batch__nsamples(b);

	pthread_mutex_lock(&p->lock);
	if (p->stopping) {
		pthread_mutex_unlock(&p->lock);
		INC(p, queue_dropped_batches, 1);
		INC(p, queue_dropped_samples, nsamples);
		batch__free(b);
		return -ESHUTDOWN;
	}
	if (p->qlen == QUEUE_MAX) {
		size_t i = p->qhead;

		INC(p, queue_dropped_batches, 1);
		INC(p, queue_dropped_samples, p->queue_samples[i]);
		log_warn("push: %d batches pending, dropping the oldest (%" PRIu64 " samples)",
			 QUEUE_MAX, p->queue_samples[i]);
		batch__free(p->queue[i]);
		p->qhead = (p->qhead + 1) % QUEUE_MAX;
		p->qlen--;
	}
	p->queue[(p->qhead + p->qlen) % QUEUE_MAX] = b;
	p->queue_samples[(p->qhead + p->qlen) % QUEUE_MAX] = nsamples;
	p->qlen++;
	INC(p, batches_submitted, 1);
	INC(p, samples_submitted, nsamples);
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

void pusher__stop(struct pusher *p, uint64_t deadline_ns)
{
	struct spool_stats st;

	if (!p || !p->started || p->joined)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	p->stop_deadline_ns = deadline_ns;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	p->joined = true;
	spool__stats(p->spool, &st);
	if (st.files)
		log_warn("push: %" PRIu64 " batches (%" PRIu64 " bytes) not delivered, left in "
			 "the spool", st.files, st.bytes);
}

void pusher__free(struct pusher *p)
{
	if (!p)
		return;
	pusher__stop(p, mono_ns());
	for (size_t i = 0; i < p->qlen; i++)
		batch__free(p->queue[(p->qhead + i) % QUEUE_MAX]);
	http_conn__free(p->conn);
	free(p->ingest_url);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

void pusher__counts(struct pusher *p, struct push_counts *ret)
{
	struct spool_stats st;

	spool__stats(p->spool, &st);
	*ret = (struct push_counts){
		.batches_submitted = GET(p, batches_submitted),
		.samples_submitted = GET(p, samples_submitted),
		.batches_pushed = GET(p, batches_pushed),
		.samples_pushed = GET(p, samples_pushed),
		.batches_rejected = GET(p, batches_rejected),
		.samples_rejected = GET(p, samples_rejected),
		.samples_pushed_earlier = GET(p, samples_pushed_earlier),
		.batches_split = GET(p, batches_split),
		.samples_dropped = GET(p, queue_dropped_samples) + GET(p, encode_error_samples) +
				   st.dropped_samples,
		.spool_files = st.files,
		.spool_samples_dropped = st.dropped_samples,
	};
}

static void metric(FILE *out, const char *name, const char *type, const char *help, double v)
{
	prom_family(out, name, type, help);
	prom_sample(out, name, NULL, 0, v);
}

void pusher__metrics(struct pusher *p, FILE *out)
{
	struct spool_stats st;
	size_t pending;

	spool__stats(p->spool, &st);
	pthread_mutex_lock(&p->lock);
	pending = p->qlen;
	pthread_mutex_unlock(&p->lock);
	metric(out, "gpuscope_agent_batches_submitted_total", "counter",
	       "Batches the main loop handed to the push thread.", GET(p, batches_submitted));
	metric(out, "gpuscope_agent_samples_submitted_total", "counter",
	       "Stack samples in the batches handed to the push thread.",
	       GET(p, samples_submitted));
	metric(out, "gpuscope_agent_batches_pushed_total", "counter",
	       "Batches the server acknowledged (durable).", GET(p, batches_pushed));
	metric(out, "gpuscope_agent_samples_sent_total", "counter",
	       "Stack samples in acknowledged batches.", GET(p, samples_pushed));
	metric(out, "gpuscope_agent_bytes_sent_total", "counter",
	       "Compressed bytes of acknowledged batches.", GET(p, bytes_pushed));
	metric(out, "gpuscope_agent_push_failures_total", "counter",
	       "Push attempts that failed (unreachable, timeout, 5xx, 401/403/408/429).",
	       GET(p, push_failures));
	metric(out, "gpuscope_agent_batches_rejected_total", "counter",
	       "Batches the server refused with a 4xx (bad batch), dropped.",
	       GET(p, batches_rejected));
	metric(out, "gpuscope_agent_samples_rejected_total", "counter",
	       "Stack samples in batches the server refused.", GET(p, samples_rejected));
	metric(out, "gpuscope_agent_batches_split_total", "counter",
	       "Batches the server found too large (413), sent again in halves.",
	       GET(p, batches_split));
	metric(out, "gpuscope_agent_batches_fitted_total", "counter",
	       "Batches split before sending to fit the server's advertised limits (each split).",
	       GET(p, batches_fitted));
	prom_family(out, "gpuscope_agent_push_fit_checks_total", "counter",
		    "Pieces checked against the server's limits before sending, by how: the bound "
		    "from the batch's counts, or decoding with the server's decoder.");
	prom_sample1_u64(out, "gpuscope_agent_push_fit_checks_total", "how", "bound",
			 GET(p, fit_bound));
	prom_sample1_u64(out, "gpuscope_agent_push_fit_checks_total", "how", "decoded",
			 GET(p, fit_decoded));
	metric(out, "gpuscope_agent_spool_disk_full_drops_total", "counter",
	       "Oldest spooled batches dropped because the spool's disk was full.",
	       st.disk_full_drops);
	metric(out, "gpuscope_agent_batches_spooled_total", "counter",
	       "Batches written to the spool while the server was unreachable.",
	       GET(p, batches_spooled));
	metric(out, "gpuscope_agent_spool_files", "gauge", "Batches waiting in the spool.",
	       st.files);
	metric(out, "gpuscope_agent_spool_bytes", "gauge", "Bytes waiting in the spool.",
	       st.bytes);
	metric(out, "gpuscope_agent_spool_dropped_batches_total", "counter",
	       "Spooled batches dropped (oldest first) past --spool-max or unwritable.",
	       st.dropped_batches);
	metric(out, "gpuscope_agent_spool_dropped_samples_total", "counter",
	       "Stack samples in dropped spooled batches.", st.dropped_samples);
	metric(out, "gpuscope_agent_spool_write_errors_total", "counter",
	       "Spool writes that failed.", st.write_errors);
	metric(out, "gpuscope_agent_push_queue_batches", "gauge",
	       "Finished batches waiting for the push thread.", pending);
	metric(out, "gpuscope_agent_push_queue_dropped_batches_total", "counter",
	       "Batches dropped because the push thread fell behind.",
	       GET(p, queue_dropped_batches));
	metric(out, "gpuscope_agent_push_queue_dropped_samples_total", "counter",
	       "Stack samples in batches dropped because the push thread fell behind.",
	       GET(p, queue_dropped_samples));
	metric(out, "gpuscope_agent_encode_errors_total", "counter",
	       "Batches that could not be encoded (dropped).", GET(p, encode_errors));
	metric(out, "gpuscope_agent_encode_cpu_seconds_total", "counter",
	       "CPU time spent encoding and compressing batches.", GET(p, encode_cpu_ns) / 1e9);
	metric(out, "gpuscope_agent_last_push_timestamp_seconds", "gauge",
	       "Unix time of the last acknowledged push (0: none yet).",
	       GET(p, last_push_wall_ns) / 1e9);
}
