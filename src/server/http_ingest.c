/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ingest API (POST /api/v1/ingest): bodies decompressed and decoded, batches stored on a pool
 * of worker threads while the connection waits suspended, and the ingest rate /metrics shows.
 */
#include "server/http_int.h"

/* ---- ingest ------------------------------------------------------------------------------- */

static void rate_add(struct http_server *h, uint64_t n)
{
	uint64_t sec = mono_ns() / NSEC_PER_SEC;
	size_t i = sec % RATE_SLOTS;

	pthread_mutex_lock(&h->rmu);
	if (h->rate_sec[i] != sec) {
		h->rate_sec[i] = sec;
		h->rate_n[i] = 0;
	}
	h->rate_n[i] += n;
	pthread_mutex_unlock(&h->rmu);
}

/* Samples per second over the last 10 complete seconds. */
double http_rate_get(struct http_server *h)
{
	uint64_t sec = mono_ns() / NSEC_PER_SEC, sum = 0;

	pthread_mutex_lock(&h->rmu);
	for (size_t i = 0; i < RATE_SLOTS; i++)
		if (h->rate_sec[i] < sec && h->rate_sec[i] + 10 >= sec)
			sum += h->rate_n[i];
	pthread_mutex_unlock(&h->rmu);
	return (double)sum / 10.0;
}

/* Data further ahead than this is a broken clock, not a measurement. */
#define TIME_AHEAD_MAX_NS (86400 * NSEC_PER_SEC)

static int scan_chunk(void *ctx, const uint8_t *p, size_t len)
{
	return batch_scan(ctx, p, len);
}

static const char *fmt_unix(uint64_t ns, char *buf, size_t len)
{
	time_t t = (time_t)(ns / NSEC_PER_SEC);
	struct tm tm;

	if (ns / NSEC_PER_SEC > (uint64_t)253402300799ull || !gmtime_r(&t, &tm))
		snprintf(buf, len, "%llu ns", (unsigned long long)ns);
	else
		strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return buf;
}

/* How long a worker waits for room in --max-inflight-bodies to decode its batch. */
#define DECODE_WAIT_NS (5 * NSEC_PER_SEC)

/*
 * Counts a batch's decompressed form and what unpacking it allocates (batch_scan()'s estimate:
 * protobuf-c's structures, held until the batch is stored) against --max-inflight-bodies, with
 * the bodies: a backlog of decoded batches waiting for their commit stays within the budget.
 * Without room, a worker waits for it (at most DECODE_WAIT_NS; on an event loop it does not
 * wait); a batch goes past the budget only when no other is being decoded, so that one too
 * large for the budget alone is not refused for ever and decoding always goes on. False: busy.
 */
static bool decode_admit(struct http_server *h, struct req *r, size_t need)
{
	uint64_t deadline = mono_ns() + DECODE_WAIT_NS;
	bool ok;

	pthread_mutex_lock(&h->dmu);
	for (;;) {
		uint64_t now = mono_ns(), until = now + 100 * NSEC_PER_MSEC;
		struct timespec ts;

		ok = http_inflight_charge(h, r, need);
		if (!ok && !h->decoding) {
			__atomic_add_fetch(&h->ctr.inflight_bytes, (int64_t)need, __ATOMIC_RELAXED);
			r->charged += need;
			ok = true;
		}
		if (ok || !http_deferred || now >= deadline)
			break;
		/* CLOCK_REALTIME for the condition variable; polled, a release also signals */
		clock_gettime(CLOCK_REALTIME, &ts);
		until = (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec + (until - now);
		ts = (struct timespec){ (time_t)(until / NSEC_PER_SEC), (long)(until % NSEC_PER_SEC) };
		pthread_cond_timedwait(&h->dcond, &h->dmu, &ts);
	}
	if (ok)
		h->decoding++;
	pthread_mutex_unlock(&h->dmu);
	return ok;
}

/* The decoded batch is freed: its bytes leave the budget, and a waiting worker may go on. */
static void decode_done(struct http_server *h, struct req *r, size_t need)
{
	pthread_mutex_lock(&h->dmu);
	__atomic_sub_fetch(&h->ctr.inflight_bytes, (int64_t)need, __ATOMIC_RELAXED);
	r->charged -= need;
	h->decoding--;
	pthread_cond_broadcast(&h->dcond);
	pthread_mutex_unlock(&h->dmu);
}

static enum MHD_Result do_ingest(struct http_server *h, struct MHD_Connection *c, struct req *r)
{
	const char *enc = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
	struct Gpuscope__V1__Batch *m;
	uint8_t *raw = NULL;
	size_t raw_len = 0, n = 0, need;
	char err[256] = "";
	uint64_t t0 = mono_ns(), t_dec, tmin, tmax, now;
	struct batch_scan scan;
	struct ingest_result parts = { 0 };
	int rc;

	if (r->over)
		return http_reply_error(h, c, MHD_HTTP_CONTENT_TOO_LARGE, REJ_TOO_LARGE,
					"body larger than %zu bytes", h->o.max_body);
	if (r->busy)
		return http_reply_error(h, c, MHD_HTTP_SERVICE_UNAVAILABLE, REJ_BUSY,
					"%zu bytes of request bodies held already "
					"(--max-inflight-bodies): retry", h->o.max_inflight);
	if (!r->body.len) {
		/* An empty upload stores nothing: `gpuscope doctor` checks reach and token so. */
		struct buf b = { 0 };

		return http_reply(c, MHD_HTTP_NO_CONTENT, NULL, &b, NULL);
	}
	/* Memory for decoding stays proportional to what was sent: the scan refuses a bomb while
	 * it is being decompressed, before protobuf-c allocates anything. */
	batch_scan_init(&scan, BATCH_DECODE_BASE + (uint64_t)BATCH_DECODE_RATIO * r->body.len);
	rc = decompress_buf(enc, r->body.p, r->body.len, h->o.max_body, scan_chunk, &scan, &raw,
			    &raw_len);
	if (rc == -E2BIG && scan.why[0])
		return http_reply_error(h, c, MHD_HTTP_CONTENT_TOO_LARGE, REJ_LIMIT, "%s", scan.why);
	if (rc == -E2BIG)
		return http_reply_error(h, c, MHD_HTTP_CONTENT_TOO_LARGE, REJ_TOO_LARGE,
					"decompressed body larger than %zu bytes", h->o.max_body);
	if (rc == -EPROTONOSUPPORT)
		return http_reply_error(h, c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, REJ_UNKNOWN_ENCODING,
					"unsupported Content-Encoding '%.40s' (gzip, zstd or none)", enc);
	if (rc == -EINVAL && scan.why[0])
		return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_MALFORMED,
					"malformed protobuf Batch: %s", scan.why);
	if (rc)
		return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_BAD_ENCODING,
					"corrupt or truncated %.20s body", enc);
	need = raw_len + scan.est;
	if (!decode_admit(h, r, need)) {
		free(raw);
		return http_reply_error(h, c, MHD_HTTP_SERVICE_UNAVAILABLE, REJ_BUSY,
					"%zu bytes of request bodies held already "
					"(--max-inflight-bodies): retry", h->o.max_inflight);
	}
	m = batch_decode_scanned(&scan, raw ? raw : r->body.p, raw ? raw_len : r->body.len, err,
				 sizeof(err));
	if (!m) {
		int e = errno;

		free(raw);
		decode_done(h, r, need);
		if (e == E2BIG)
			return http_reply_error(h, c, MHD_HTTP_CONTENT_TOO_LARGE, REJ_LIMIT, "%s", err);
		return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST,
					e == EPROTONOSUPPORT ? REJ_VERSION : REJ_MALFORMED, "%s", err);
	}
	batch_time_bounds(m, &tmin, &tmax);
	now = wall_ns();
	if (tmin <= tmax && (tmin + h->o.retention_ns < now || tmax > now + TIME_AHEAD_MAX_NS)) {
		char a[40], b[40];

		batch_decode_free(m);
		free(raw);
		decode_done(h, r, need);
		return http_reply_error(h, c, MHD_HTTP_BAD_REQUEST, REJ_TIME,
					"timestamps %s .. %s outside [now - retention, now + 1 day]: "
					"nothing stored",
					fmt_unix(tmin, a, sizeof(a)), fmt_unix(tmax, b, sizeof(b)));
	}
	err[0] = 0;
	t_dec = mono_ns();
	/* A large batch goes in parts, each its own group commit: other pushes are committed
	 * between them instead of waiting for all of it. A part already stored is a duplicate. */
	rc = ingest_store(h->st, m, raw ? raw : r->body.p, raw ? raw_len : r->body.len,
			  INGEST_PART_RECORDS, h->o.all_addresses, &parts, err, sizeof(err));
	if (rc == 0 && parts.duplicate_parts == parts.parts)
		rc = 1;
	if (rc == 0)
		efficiency_ingested(h->o.eff, m);
	log_debug("ingest: %zu bytes, decode %.1f ms, store %.1f ms in %u part(s)", r->body.len,
		  (double)(t_dec - t0) / 1e6, (double)(mono_ns() - t_dec) / 1e6, parts.parts);
	for (size_t i = 0; i < m->n_samples; i++)
		n += m->samples[i]->n_stack;
	batch_decode_free(m);
	free(raw);
	decode_done(h, r, need);
	if (rc == -EDQUOT)	/* the node's cardinality this hour: it may retry later */
		return http_reply_error(h, c, MHD_HTTP_TOO_MANY_REQUESTS, REJ_CARDINALITY, "%s", err);
	if (rc < 0) {
		log_warn("ingest: %s", err);
		return http_reply_error(h, c, MHD_HTTP_SERVICE_UNAVAILABLE, REJ_STORE, "%s", err);
	}
	__atomic_add_fetch(&h->ctr.ingest_batches, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->ctr.ingest_parts, parts.parts, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->ctr.ingest_bytes, r->body.len, __ATOMIC_RELAXED);
	if (rc == 0) {
		__atomic_add_fetch(&h->ingest_samples, n, __ATOMIC_RELAXED);
		rate_add(h, n);
	}
	{
		struct buf b = { 0 };

		return http_reply(c, MHD_HTTP_NO_CONTENT, NULL, &b, NULL);
	}
}

/*
 * POST /api/v1/ingest. The store answers only once a batch is durable, which may take its group
 * commit's wait (ClickHouse: up to --clickhouse-commit-delay and the INSERTs): the connection is
 * suspended and a worker thread stores the batch, so the event loop goes on serving its other
 * connections (other agents, queries) meanwhile. Past INGEST_WORKERS_MAX at once, or without a
 * thread, the upload is stored on the loop.
 */
enum MHD_Result http_ingest_route(struct http_server *h, struct MHD_Connection *c,
				  struct req *r)
{
	if (r->worked)
		return r->answered ? http_reply(c, r->ans_code, r->ans_type, &r->ans, NULL) : MHD_NO;
	if (http_offload(h, c, r, do_ingest, &h->ingest_workers, INGEST_WORKERS_MAX))
		return MHD_YES;
	return do_ingest(h, c, r);
}
