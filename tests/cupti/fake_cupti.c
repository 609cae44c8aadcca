// SPDX-License-Identifier: Apache-2.0
/*
 * libcupti.so.13 stand-in (same ABI, CUDA 13 headers) for machines without a GPU: the real
 * libgpuscope_cupti.so runs against it unchanged. It keeps CUPTI's subscription, callback,
 * activity-kind and buffer state, and turns fake_cupti_launch() into what CUPTI would do for a
 * cudaLaunchKernel: the runtime API callbacks (enter/exit, with a correlation id) while they are
 * enabled, and a CONCURRENT_KERNEL record in a client buffer while that kind is enabled. Buffers
 * complete when full, every flush period (its own thread, like CUPTI's) and on
 * cuptiActivityFlushAll. Counters say what the client did (fake_cupti_stats). CUPTI's
 * process-wide rules hold: one subscriber at a time (a second cuptiSubscribe fails), and only
 * the current handle enables callbacks or unsubscribes; the activity buffer callbacks are one
 * pair for the process (the last registration wins; a buffer in use is first completed to the
 * client that asked for it); activity kinds are on or off for the process; cuptiFinalize drops
 * all of it. FAKE_CUPTI_SUBSCRIBE makes cuptiSubscribe misbehave as a real CUPTI could, on the
 * caller's thread: "fault" (a SIGSEGV), "stack:KB" (uses KB KiB of the caller's stack first).
 */
#include <alloca.h>
#include <cupti.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fake_cupti.h"

#define EXPORT __attribute__((visibility("default")))
#define CLOCK_OFFSET_NS 1000000000000ull	/* CUPTI time = CLOCK_MONOTONIC + this */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static CUpti_CallbackFunc cb_fn;
static void *cb_ud;
static uintptr_t sub_handle;	/* the current subscriber's handle; 0: none */
static bool subscribed, held_by_other, cb_on;
static CUpti_BuffersCallbackRequestFunc req_fn;
static CUpti_BuffersCallbackCompleteFunc comp_fn;
static bool kind_on[CUPTI_ACTIVITY_KIND_COUNT];
static uint8_t *buf;
static size_t buf_size, buf_used;
static uint32_t corr, flush_ms;
static struct fake_cupti_stats st;
static pthread_t flusher;
static bool flusher_started;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec + CLOCK_OFFSET_NS;
}

/* Hands the current buffer back to the client. Called with mu held; drops it meanwhile. */
static void complete_locked(void)
{
	uint8_t *b = buf;
	size_t used = buf_used, size = buf_size;
	CUpti_BuffersCallbackCompleteFunc fn = comp_fn;

	if (!b)
		return;
	buf = NULL;
	buf_used = buf_size = 0;
	st.buffers_completed++;
	pthread_mutex_unlock(&mu);
	if (fn)
		fn(NULL, 0, b, size, used);
	pthread_mutex_lock(&mu);
}

static void *flush_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec ts = { 0, 10 * 1000000L };
		uint32_t ms;

		pthread_mutex_lock(&mu);
		ms = flush_ms;
		if (ms && buf && buf_used)
			complete_locked();
		pthread_mutex_unlock(&mu);
		if (ms)
			ts.tv_nsec = (long)(ms < 1000 ? ms : 999) * 1000000L;
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* FAKE_CUPTI_SUBSCRIBE: what a real CUPTI might do inside cuptiSubscribe. */
static void misbehave(void)
{
	const char *m = getenv("FAKE_CUPTI_SUBSCRIBE");

	if (!m)
		return;
	if (!strcmp(m, "fault")) {
		volatile int *bad = NULL;
		uintptr_t off = 8;

		__asm__("" : "+r"(off));	/* not a constant the compiler could reason about */
		*(volatile int *)((uintptr_t)bad + off) = 1;
	}
	if (!strncmp(m, "stack:", 6)) {
		size_t n = (size_t)atol(m + 6) * 1024;
		volatile char *p = alloca(n);

		for (size_t i = 0; i < n; i += 512)
			p[i] = 1;
	}
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *s, CUpti_CallbackFunc fn, void *ud)
{
	CUptiResult r = CUPTI_SUCCESS;

	misbehave();
	pthread_mutex_lock(&mu);
	if (held_by_other || subscribed) {
		r = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	} else {
		subscribed = true;
		cb_fn = fn;
		cb_ud = ud;
		sub_handle = 0x1000 + 16 * (uintptr_t)++st.subscribes;
		*s = (CUpti_SubscriberHandle)sub_handle;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle s)
{
	pthread_mutex_lock(&mu);
	if (!subscribed || (uintptr_t)s != sub_handle) {
		pthread_mutex_unlock(&mu);
		return CUPTI_ERROR_INVALID_PARAMETER;
	}
	sub_handle = 0;
	subscribed = cb_on = false;
	cb_fn = NULL;
	st.unsubscribes++;
	pthread_mutex_unlock(&mu);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle s,
				       CUpti_CallbackDomain dom, CUpti_CallbackId cbid)
{
	bool ok;

	pthread_mutex_lock(&mu);
	ok = subscribed && (uintptr_t)s == sub_handle;
	if (ok && dom == CUPTI_CB_DOMAIN_RUNTIME_API &&
	    cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000)
		cb_on = enable;
	pthread_mutex_unlock(&mu);
	return ok ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc rq,
						  CUpti_BuffersCallbackCompleteFunc cp)
{
	pthread_mutex_lock(&mu);
	complete_locked();	/* the buffer in use goes to the client that asked for it */
	req_fn = rq;
	comp_fn = cp;
	st.registers++;
	if (!flusher_started && !pthread_create(&flusher, NULL, flush_main, NULL)) {
		pthread_detach(flusher);
		flusher_started = true;
	}
	pthread_mutex_unlock(&mu);
	return CUPTI_SUCCESS;
}

/* FAKE_CUPTI_ENABLE_DELAY_MS: enabling any kind but kernels takes that long (a slow CUPTI: a
 * window's open is still under way when a user's client comes, kernels already on) */
EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind k)
{
	const char *delay = getenv("FAKE_CUPTI_ENABLE_DELAY_MS");

	if ((unsigned)k >= CUPTI_ACTIVITY_KIND_COUNT)
		return CUPTI_ERROR_INVALID_KIND;
	if (delay && atoi(delay) > 0 && k != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
		nanosleep(&(struct timespec){ atoi(delay) / 1000, atoi(delay) % 1000 * 1000000L },
			  NULL);
	pthread_mutex_lock(&mu);
	if (!kind_on[k])
		st.kinds_enabled++;
	kind_on[k] = true;
	pthread_mutex_unlock(&mu);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind k)
{
	if ((unsigned)k >= CUPTI_ACTIVITY_KIND_COUNT)
		return CUPTI_ERROR_INVALID_KIND;
	pthread_mutex_lock(&mu);
	if (kind_on[k])
		st.kinds_enabled--;
	kind_on[k] = false;
	pthread_mutex_unlock(&mu);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivitySetAttribute(CUpti_ActivityAttribute a, size_t *size, void *v)
{
	pthread_mutex_lock(&mu);
	if (a == CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE && *size == sizeof(size_t))
		st.device_buffer_bytes = *(size_t *)v;
	else if (a == CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT && *size == sizeof(size_t))
		st.device_buffer_pool = *(size_t *)v;
	pthread_mutex_unlock(&mu);
	return CUPTI_SUCCESS;
}

/* CUPTI's defaults until a client sets them: 8 MiB, 250 buffers */
EXPORT CUptiResult cuptiActivityGetAttribute(CUpti_ActivityAttribute a, size_t *size, void *v)
{
	if (*size != sizeof(size_t))
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&mu);
	if (a == CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE)
		*(size_t *)v = st.device_buffer_bytes ? st.device_buffer_bytes : 8 << 20;
	else if (a == CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT)
		*(size_t *)v = st.device_buffer_pool ? st.device_buffer_pool : 250;
	pthread_mutex_unlock(&mu);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t ms)
{
	pthread_mutex_lock(&mu);
	flush_ms = ms;
	pthread_mutex_unlock(&mu);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
	(void)flag;
	pthread_mutex_lock(&mu);
	complete_locked();
	pthread_mutex_unlock(&mu);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *b, size_t valid, CUpti_Activity **rec)
{
	uint8_t *next = *rec ? (uint8_t *)*rec + sizeof(CUpti_ActivityKernel10) : b;

	if (next + sizeof(CUpti_ActivityKernel10) > b + valid)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	*rec = (CUpti_Activity *)next;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *n)
{
	(void)ctx, (void)stream;
	*n = 0;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *ts)
{
	*ts = now_ns();
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char **s)
{
	*s = r == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "fake CUPTI error";
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiFinalize(void)
{
	pthread_mutex_lock(&mu);
	subscribed = cb_on = false;
	sub_handle = 0;
	cb_fn = NULL;
	req_fn = NULL;
	comp_fn = NULL;
	memset(kind_on, 0, sizeof(kind_on));
	st.kinds_enabled = 0;
	st.finalizes++;
	free(buf);	/* CUPTI drops what was not flushed */
	buf = NULL;
	buf_used = buf_size = 0;
	pthread_mutex_unlock(&mu);
	return CUPTI_SUCCESS;
}

/* ---- the workload's side ------------------------------------------------------------------ */

/* cuptiSubscribe itself (this object's references are never interposed). */
EXPORT void *fake_cupti_real_subscribe(void)
{
	return (void *)cuptiSubscribe;
}

EXPORT void fake_cupti_hold(int other)
{
	pthread_mutex_lock(&mu);
	held_by_other = other;
	pthread_mutex_unlock(&mu);
}

EXPORT void fake_cupti_stats(struct fake_cupti_stats *ret)
{
	pthread_mutex_lock(&mu);
	*ret = st;
	ret->subscribed = subscribed;
	pthread_mutex_unlock(&mu);
}

static void callback(CUpti_ApiCallbackSite site, uint32_t cid)
{
	CUpti_CallbackData d;
	CUpti_CallbackFunc fn;
	void *ud;

	pthread_mutex_lock(&mu);
	fn = cb_on ? cb_fn : NULL;
	ud = cb_ud;
	pthread_mutex_unlock(&mu);
	if (!fn)
		return;
	memset(&d, 0, sizeof(d));
	d.callbackSite = site;
	d.functionName = "cudaLaunchKernel_v7000";
	d.correlationId = cid;
	fn(ud, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, &d);
}

EXPORT uint32_t fake_cupti_launch(const char *name, uint32_t device, uint32_t stream,
				  uint64_t dur_ns)
{
	CUpti_ActivityKernel10 *k;
	uint32_t cid;

	pthread_mutex_lock(&mu);
	cid = ++corr;
	st.launches++;
	pthread_mutex_unlock(&mu);
	callback(CUPTI_API_ENTER, cid);
	pthread_mutex_lock(&mu);
	if (kind_on[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] && req_fn) {
		if (buf && buf_used + sizeof(*k) > buf_size)
			complete_locked();
		if (!buf) {
			size_t max = 0;

			pthread_mutex_unlock(&mu);
			req_fn(&buf, &buf_size, &max);
			pthread_mutex_lock(&mu);
			buf_used = 0;
		}
		if (buf && buf_used + sizeof(*k) <= buf_size) {
			k = (void *)(buf + buf_used);
			memset(k, 0, sizeof(*k));
			k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
			k->name = name;
			k->correlationId = cid;
			k->deviceId = device;
			k->contextId = 1;
			k->streamId = stream;
			k->start = now_ns();
			k->end = k->start + dur_ns;
			k->gridX = k->gridY = k->gridZ = 1;
			k->blockX = 128, k->blockY = k->blockZ = 1;
			buf_used += sizeof(*k);
			st.traced++;
		} else {
			st.dropped++;
		}
	}
	pthread_mutex_unlock(&mu);
	callback(CUPTI_API_EXIT, cid);
	return cid;
}
