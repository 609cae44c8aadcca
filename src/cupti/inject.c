// SPDX-License-Identifier: Apache-2.0
/*
 * libgpuscope_cupti.so: loaded into a CUDA process by CUDA_INJECTION64_PATH. Traces in windows:
 * while the agent holds the `window` USDT semaphore of this process, it subscribes to the CUPTI
 * launch callbacks (one USDT probe per launch with its correlation id, on the launching thread)
 * and to activity records (kernels, memcpy, memset), which it hands over in batches: one USDT
 * probe per chunk of a completed buffer, pointing at compact fixed-size records
 * (src/common/abi_cupti.h). Outside a window our subscription and activity kinds are off
 * (CUPTI stays initialised: a finalize breaks CUDA graphs), so the process runs at full speed. No sockets, no files; bounded memory; never blocks or aborts.
 */
#include <cupti.h>
#include <dlfcn.h>
#include <linux/types.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/abi_cupti.h"
#include "cupti/interpose.h"
#include "cupti/probes.h"

#define EXPORT __attribute__((visibility("default")))
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define CHUNK_RECS	  4096		/* compact records per buffer probe hit */
#define NAMES_BYTES_MAX	  (16u << 20)	/* bytes of kernel names kept */
#define CLOCK_EVERY_NS	  1000000000ull	/* re-send a clock pair this often */
#define DEF_BUF_KB	  2048
#define DEF_MAX_BUFS	  64
#define FLUSH_PERIOD_MS	  100
#define POLL_MS		  10		/* how often the control thread reads the window semaphore */
#define FINALIZE_WAIT_MS  100		/* wait for a launch callback to finalize on, then do it */
#define DEF_DEV_BUF_KB	  4096		/* CUPTI device buffer per context (CUPTI's default: 8 MiB) */
#define DEF_DEV_BUF_POOL  4		/* device buffers per context (CUPTI's default: 250) */
#define YIELD_WAIT_MS	  250		/* longest a user's CUPTI call waits for our window to close */
#define YIELD_RETRY_MS	  2000		/* ... and a subscribe we refused meanwhile, once more */
#define DEF_STACK_KB	  8192		/* the control thread's stack (thread.c says why) */

/* What closing a window does (GPUSCOPE_CUPTI_CLOSE); each also disables the activity kinds. */
enum close_mode {
	CLOSE_FINALIZE = 0,	/* unsubscribe and cuptiFinalize: CUPTI leaves the process */
	CLOSE_UNSUBSCRIBE = 1,	/* unsubscribe, keep CUPTI initialised */
	CLOSE_DISABLE = 2,	/* only disable the callbacks and activity kinds */
};

static bool debug;
static size_t buf_bytes = DEF_BUF_KB * 1024;
static unsigned max_bufs = DEF_MAX_BUFS;
static unsigned nbufs;			/* buffers handed to CUPTI and not yet returned (atomic) */
static CUpti_SubscriberHandle subscriber;
static enum close_mode close_mode;
static size_t dev_buf_bytes = DEF_DEV_BUF_KB * 1024, dev_buf_pool = DEF_DEV_BUF_POOL;

/*
 * Window state, owned by the control thread. `subscribed`: we hold the CUPTI subscription;
 * `registered`: our buffer callbacks are registered (cuptiFinalize forgets them); `gen` counts
 * windows so a launching thread can drop call depth left over from a window closed mid-call;
 * `finalize_req`: a launch callback at API exit should call cuptiFinalize (what CUPTI
 * recommends), `finalized` says one did.
 */
static bool window_open, subscribed, registered;
static unsigned gen = 1;
static int finalize_req, finalized;
/*
 * Hand-over to a user's CUPTI client (handover.c): `hand_mu` serialises our opening and closing
 * with a user's thread closing our window for its client. `yields` counts hand-overs (the
 * control thread then waits for the agent to let go of this request); `yield_late`: a user's
 * call went on before our window could be closed, the control thread closes it at once.
 */
static pthread_mutex_t hand_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned yields;
static int yield_late;
static bool handover_on;
static size_t orig_dev_buf[2];	/* device buffer size and pool limit before we set ours */
static bool orig_dev_buf_ok;

/* Launch state of the current thread: the outermost launch API call and a nested one's id. */
static __thread unsigned tls_depth, tls_gen;
static __thread uint32_t tls_cid, tls_cid2;

/* Completion side, under `lock`: compact chunk, name table, counters, clock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpuscope_cupti_rec chunk[CHUNK_RECS];
static unsigned chunk_n;
struct name_slot {
	uint64_t hash;
	char *str;	/* strdup'ed; NULL: empty slot */
	uint32_t idx;
};
static struct name_slot names[GPUSCOPE_CUPTI_NAMES_CAP * 2]; /* open addressing, load <= 1/2 */
static const char *names_by_idx[GPUSCOPE_CUPTI_NAMES_CAP];
static uint32_t names_n;
static size_t names_bytes;
static unsigned short seen_name_sema, seen_clock_sema, seen_drops_sema;
static uint64_t last_clock_ns;
static uint64_t cupti_drops, lib_drops, last_cupti_drops = ~0ull, last_lib_drops = ~0ull;

/* The library's own debug lines (inject_dbg(), shared with handover.c and interpose.c). */
#define dbg inject_dbg

static uint64_t mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

uint64_t inject_mono_now(void)
{
	return mono_now();
}

void inject_dbg(const char *fmt, ...)
{
	va_list ap;

	if (!debug)
		return;
	va_start(ap, fmt);
	fputs("[gpuscope-cupti] ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static unsigned long env_ulong(const char *name, unsigned long def, unsigned long lo,
			       unsigned long hi)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;

	if (!s || !*s)
		return def;
	v = strtoul(s, &end, 10);
	if (*end || v < lo || v > hi) {
		dbg("ignoring %s='%s' (want %lu..%lu)", name, s, lo, hi);
		return def;
	}
	return v;
}

/* ---- launching thread --------------------------------------------------------------------- */

static void CUPTIAPI on_callback(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid,
				 const void *data)
{
	const CUpti_CallbackData *cb = data;
	unsigned g = __atomic_load_n(&gen, __ATOMIC_RELAXED);

	if (tls_gen != g) {	/* first call of this thread in this window */
		tls_gen = g;
		tls_depth = 0;
	}
	if (cb->callbackSite == CUPTI_API_ENTER) {
		if (tls_depth++ == 0) {
			tls_cid = cb->correlationId;
			tls_cid2 = 0;
		} else if (cb->correlationId != tls_cid) {
			tls_cid2 = cb->correlationId;
		}
		return;
	}
	if (tls_depth == 0)	/* subscribed in the middle of a call */
		return;
	if (--tls_depth == 0 && PROBE_ENABLED(launch))
		PROBE_LAUNCH(tls_cid, tls_cid2);
	if (tls_depth == 0 && __atomic_load_n(&finalize_req, __ATOMIC_ACQUIRE) &&
	    __atomic_exchange_n(&finalize_req, 0, __ATOMIC_ACQ_REL)) {
		cuptiFinalize();
		__atomic_store_n(&finalized, 1, __ATOMIC_RELEASE);
	}
}

/* ---- completion thread -------------------------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* Index of `name` in the name table, adding (and announcing) it if new. Under `lock`. */
static uint32_t name_index(const char *name)
{
	uint64_t h;
	size_t i, len;
	char *copy;

	if (!name || !*name)
		return GPUSCOPE_CUPTI_NAME_NONE;
	h = fnv1a(name);
	for (i = h & (ARRAY_LEN(names) - 1);; i = (i + 1) & (ARRAY_LEN(names) - 1)) {
		if (!names[i].str)
			break;
		if (names[i].hash == h && !strcmp(names[i].str, name))
			return names[i].idx;
	}
	len = strlen(name) + 1;
	if (names_n >= GPUSCOPE_CUPTI_NAMES_CAP || names_bytes + len > NAMES_BYTES_MAX)
		return GPUSCOPE_CUPTI_NAME_NONE;
	copy = malloc(len);
	if (!copy)
		return GPUSCOPE_CUPTI_NAME_NONE;
	memcpy(copy, name, len);
	names[i].hash = h;
	names[i].str = copy;
	names[i].idx = names_n;
	names_by_idx[names_n] = copy;
	names_bytes += len;
	PROBE_NAME(names_n, copy);
	return names_n++;
}

static void flush_chunk(void)
{
	if (chunk_n)
		PROBE_BUFFER(chunk, chunk_n);
	chunk_n = 0;
}

static struct gpuscope_cupti_rec *next_slot(void)
{
	struct gpuscope_cupti_rec *r;

	if (chunk_n == CHUNK_RECS)
		flush_chunk();
	r = &chunk[chunk_n++];
	memset(r, 0, sizeof(*r));
	return r;
}

static void convert(const CUpti_Activity *a)
{
	struct gpuscope_cupti_rec *r;

	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k = (const void *)a;

		r = next_slot();
		r->kind = GPUSCOPE_CUPTI_KERNEL;
		r->name_idx = name_index(k->name);
		r->correlation_id = k->correlationId;
		r->device = k->deviceId;
		r->context = k->contextId;
		r->stream = k->streamId;
		r->start_ns = k->start;
		r->end_ns = k->end;
		r->grid[0] = k->gridX;
		r->grid[1] = k->gridY;
		r->grid[2] = k->gridZ;
		r->block[0] = k->blockX;
		r->block[1] = k->blockY;
		r->block[2] = k->blockZ;
		r->graph_id = k->graphId;
		r->graph_node_id = k->graphNodeId;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = (const void *)a;

		r = next_slot();
		r->kind = GPUSCOPE_CUPTI_MEMCPY;
		r->subkind = m->copyKind;
		r->name_idx = GPUSCOPE_CUPTI_NAME_NONE;
		r->correlation_id = m->correlationId;
		r->device = m->deviceId;
		r->context = m->contextId;
		r->stream = m->streamId;
		r->start_ns = m->start;
		r->end_ns = m->end;
		r->graph_id = m->graphId;
		r->graph_node_id = m->graphNodeId;
		r->bytes = m->bytes;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = (const void *)a;

		r = next_slot();
		r->kind = GPUSCOPE_CUPTI_MEMSET;
		r->subkind = m->memoryKind;
		r->name_idx = GPUSCOPE_CUPTI_NAME_NONE;
		r->correlation_id = m->correlationId;
		r->device = m->deviceId;
		r->context = m->contextId;
		r->stream = m->streamId;
		r->start_ns = m->start;
		r->end_ns = m->end;
		r->graph_id = m->graphId;
		r->graph_node_id = m->graphNodeId;
		r->bytes = m->bytes;
		break;
	}
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
		const CUpti_ActivitySynchronization2 *s = (const void *)a;

		r = next_slot();
		r->kind = GPUSCOPE_CUPTI_SYNC;
		r->subkind = s->type;
		r->name_idx = GPUSCOPE_CUPTI_NAME_NONE;
		r->correlation_id = s->correlationId;
		r->context = s->contextId;
		r->stream = s->streamId;
		r->start_ns = s->start;
		r->end_ns = s->end;
		break;
	}
	default:
		break;
	}
}

/* A (cupti, monotonic) pair from the tightest of a few bracketing reads. */
static void send_clock(void)
{
	uint64_t best_gap = ~0ull, best_c = 0, best_m = 0;

	for (int i = 0; i < 5; i++) {
		uint64_t m0 = mono_now(), c = 0, m1;

		if (cuptiGetTimestamp(&c) != CUPTI_SUCCESS)
			return;
		m1 = mono_now();
		if (m1 - m0 < best_gap) {
			best_gap = m1 - m0;
			best_c = c;
			best_m = m0 + (m1 - m0) / 2;
		}
	}
	PROBE_CLOCK(best_c, best_m);
	last_clock_ns = best_m;
}

/* Re-announce state when a tracer attaches (a probe's semaphore changed); under `lock`. */
static void sync_tracer(void)
{
	unsigned short s;

	s = gpuscope_cupti_name_semaphore;
	if (s != seen_name_sema) {
		seen_name_sema = s;
		if (s)
			for (uint32_t i = 0; i < names_n; i++)
				PROBE_NAME(i, names_by_idx[i]);
	}
	s = gpuscope_cupti_clock_semaphore;
	if (s != seen_clock_sema || (s && mono_now() - last_clock_ns >= CLOCK_EVERY_NS)) {
		seen_clock_sema = s;
		if (s)
			send_clock();
	}
	s = gpuscope_cupti_drops_semaphore;
	if (s != seen_drops_sema || cupti_drops != last_cupti_drops || lib_drops != last_lib_drops) {
		seen_drops_sema = s;
		last_cupti_drops = cupti_drops;
		last_lib_drops = lib_drops;
		if (s)
			PROBE_DROPS(cupti_drops, lib_drops);
	}
}

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
	*buf = NULL;
	*size = 0;
	*max_records = 0;
	if (__atomic_add_fetch(&nbufs, 1, __ATOMIC_RELAXED) > max_bufs)
		goto out_none;
	*buf = aligned_alloc(8, buf_bytes);
	if (!*buf)
		goto out_none;
	*size = buf_bytes;
	return;
out_none:
	/* CUPTI drops the records it cannot place and counts them (cupti_drops). */
	__atomic_sub_fetch(&nbufs, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&lib_drops, 1, __ATOMIC_RELAXED);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
				      size_t valid)
{
	CUpti_Activity *rec = NULL;
	size_t dropped = 0;

	pthread_mutex_lock(&lock);
	sync_tracer();
	if (PROBE_ENABLED(buffer)) {
		while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS)
			convert(rec);
		flush_chunk();
	}
	if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped) {
		cupti_drops += dropped;
		dbg("CUPTI dropped %zu records (total %llu)", dropped,
		    (unsigned long long)cupti_drops);
	}
	sync_tracer();
	pthread_mutex_unlock(&lock);
	free(buf);
	__atomic_sub_fetch(&nbufs, 1, __ATOMIC_RELAXED);
}

static const CUpti_CallbackId driver_cbids[] = {
	CUPTI_DRIVER_TRACE_CBID_cuLaunch,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice,
	CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
	CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};
static const CUpti_CallbackId runtime_cbids[] = {
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_ptsz_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000,
	CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
	CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
};
/*
 * Only what the agent uses. SYNCHRONIZATION is left off: the agent's always-on driver uprobes
 * time synchronisations, and CUPTI would instrument every sync call for it.
 */
static const CUpti_ActivityKind kinds[] = {
	CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
	CUPTI_ACTIVITY_KIND_MEMCPY,
	CUPTI_ACTIVITY_KIND_MEMSET,
};

static const char *errstr(CUptiResult r)
{
	const char *s = NULL;

	if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
		return "unknown CUPTI error";
	return s;
}

static void status(unsigned what, uint64_t a, uint64_t b)
{
	if (PROBE_ENABLED(status))
		PROBE_STATUS(what, a, b);
}

static void callbacks(uint32_t on)
{
	for (size_t i = 0; i < ARRAY_LEN(driver_cbids); i++)
		cuptiEnableCallback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, driver_cbids[i]);
	for (size_t i = 0; i < ARRAY_LEN(runtime_cbids); i++)
		cuptiEnableCallback(on, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, runtime_cbids[i]);
}

/*
 * The UUID of each device the process sees, for the agent to put kernels on the GPU NVML knows
 * by that UUID: a record's device is CUDA's ordinal in this process, which CUDA_VISIBLE_DEVICES
 * and a container's device list renumber. From the libcuda already loaded (never loads one);
 * nothing when the driver is not initialised yet (the next window tries again).
 */
static void report_devices(void)
{
	typedef int (*count_fn)(int *);
	typedef int (*get_fn)(int *, int);
	typedef int (*uuid_fn)(unsigned char *, int);
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	count_fn count;
	get_fn get;
	uuid_fn uuid;
	int n = 0;

	if (!h)
		return;
	count = (count_fn)dlsym(h, "cuDeviceGetCount");
	get = (get_fn)dlsym(h, "cuDeviceGet");
	uuid = (uuid_fn)dlsym(h, "cuDeviceGetUuid_v2");
	if (!uuid)
		uuid = (uuid_fn)dlsym(h, "cuDeviceGetUuid");
	if (count && get && uuid && count(&n) == 0) {
		for (int i = 0; i < n && i < GPUSCOPE_CUPTI_MAX_ORDINALS; i++) {
			unsigned char u[16];
			uint64_t a, b;
			int dev;

			if (get(&dev, i) || uuid(u, dev))
				continue;
			memcpy(&a, u, 8);
			memcpy(&b, u + 8, 8);
			status(GPUSCOPE_CUPTI_ST_DEVICE + i, a, b);
		}
	}
	dlclose(h);	/* only drops the reference RTLD_NOLOAD took */
}

static void hand_over(void);

/*
 * Control thread, under hand_mu. Subscribes, registers, enables; on any failure leaves nothing
 * enabled. Not while a user's CUPTI client holds CUPTI (status USER: refused), nor in the grace
 * time after it let go (returns without a status: asked again at the next poll).
 */
static void open_window(void)
{
	uint64_t t0 = mono_now();
	unsigned enabled = 0;
	CUptiResult r;

	if (handover_user_holds()) {
		dbg("a user's CUPTI client holds CUPTI; no window at %llu", (unsigned long long)t0);
		status(GPUSCOPE_CUPTI_ST_USER, t0, 0);
		return;
	}
	if (!subscribed) {
		r = cuptiSubscribe(&subscriber, on_callback, NULL);
		if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
			dbg("another CUPTI client holds the subscription; no window at %llu",
			    (unsigned long long)t0);
			status(GPUSCOPE_CUPTI_ST_BUSY, t0, r);
			return;
		}
		if (r != CUPTI_SUCCESS) {
			dbg("cuptiSubscribe: %s; no window", errstr(r));
			status(GPUSCOPE_CUPTI_ST_FAILED, t0, r);
			return;
		}
		subscribed = true;
	}
	if (!registered) {
		/* a client that let go may have buffers left in CUPTI: they go to its callbacks */
		if (handover_user_seen())
			cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
		if (r != CUPTI_SUCCESS) {
			dbg("cuptiActivityRegisterCallbacks: %s; no window", errstr(r));
			status(GPUSCOPE_CUPTI_ST_FAILED, t0, r);
			goto out_unsubscribe;
		}
		registered = true;
		/* bounded device memory (a peer's users saw 1 GiB at CUPTI's defaults); what was
		 * set before is given back to a user's client we hand CUPTI over to */
		size_t sz = sizeof(orig_dev_buf[0]);
		orig_dev_buf_ok =
			cuptiActivityGetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &sz,
						  &orig_dev_buf[0]) == CUPTI_SUCCESS &&
			cuptiActivityGetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT, &sz,
						  &orig_dev_buf[1]) == CUPTI_SUCCESS;
		sz = sizeof(dev_buf_bytes);
		cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &sz, &dev_buf_bytes);
		sz = sizeof(dev_buf_pool);
		cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT, &sz,
					  &dev_buf_pool);
	}
	__atomic_add_fetch(&gen, 1, __ATOMIC_RELAXED);
	/* Before the kinds: a buffer the flush thread completes right after an enable comes
	 * after the UUIDs, so no kernel of the window is put on its CUDA ordinal for want of
	 * one (a test saw some of a renumbered GPU's kernels on gpu 0). */
	report_devices();
	callbacks(1);	/* before the kinds: every recorded kernel has its launch probe */
	for (size_t i = 0; i < ARRAY_LEN(kinds); i++) {
		if (handover_user_holds())
			break;	/* a client is waiting for CUPTI: stop here (below) */
		r = cuptiActivityEnable(kinds[i]);
		if (r == CUPTI_SUCCESS)
			enabled++;
		else
			dbg("cuptiActivityEnable(%d): %s", (int)kinds[i], errstr(r));
	}
	if (handover_user_holds()) {
		/* a client's call came while we were opening (a slow CUPTI): undo at once */
		window_open = true;
		hand_over();
		status(GPUSCOPE_CUPTI_ST_USER, t0, 0);
		dbg("a user's CUPTI client came while the window opened; not opened");
		return;
	}
	if (!enabled) {
		status(GPUSCOPE_CUPTI_ST_FAILED, t0, r);
		callbacks(0);
		goto out_unsubscribe;
	}
	cuptiActivityFlushPeriod(FLUSH_PERIOD_MS);
	window_open = true;
	status(GPUSCOPE_CUPTI_ST_OPENED, t0, mono_now() - t0);
	dbg("window open at %llu: %u activity kinds, %llu ns; control thread stack used %zu KiB",
	    (unsigned long long)t0, enabled, (unsigned long long)(mono_now() - t0),
	    thread_stack_used() / 1024);
	return;
out_unsubscribe:
	cuptiUnsubscribe(subscriber);
	subscribed = false;
}

/* Control thread (or exit). Disables, hands over what was recorded, then tears down per mode. */
static void close_window(void)
{
	uint64_t t0 = mono_now();

	for (size_t i = 0; i < ARRAY_LEN(kinds); i++)
		cuptiActivityDisable(kinds[i]);
	cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	window_open = false;
	if (close_mode == CLOSE_DISABLE) {
		callbacks(0);
	} else if (close_mode == CLOSE_UNSUBSCRIBE) {
		cuptiUnsubscribe(subscriber);
		subscribed = false;
	} else {
		/* CUPTI wants cuptiFinalize at a CUDA API exit: ask the next launch callback */
		__atomic_store_n(&finalized, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&finalize_req, 1, __ATOMIC_RELEASE);
		for (int i = 0; i < FINALIZE_WAIT_MS && !__atomic_load_n(&finalized, __ATOMIC_ACQUIRE);
		     i++) {
			struct timespec ms = { 0, 1000000 };

			nanosleep(&ms, NULL);
		}
		if (__atomic_exchange_n(&finalize_req, 0, __ATOMIC_ACQ_REL))	/* no launch came */
			cuptiFinalize();
		else
			while (!__atomic_load_n(&finalized, __ATOMIC_ACQUIRE))
				sched_yield();	/* a callback took it and is finalizing now */
		subscribed = false;
		registered = false;
	}
	status(GPUSCOPE_CUPTI_ST_CLOSED, mono_now(), mono_now() - t0);
	dbg("window closed at %llu (%s), %llu ns; control thread stack used %zu KiB",
	    (unsigned long long)mono_now(),
	    close_mode == CLOSE_FINALIZE ? "finalize" :
	    close_mode == CLOSE_UNSUBSCRIBE ? "unsubscribe" : "disable",
	    (unsigned long long)(mono_now() - t0), thread_stack_used() / 1024);
}

/*
 * Closes our window so that CUPTI is clean for a user's client that is about to start: our
 * kinds disabled, what we recorded flushed to us, our callbacks off and our subscription gone.
 * Never cuptiFinalize: the client may already have registered its buffers (a call made before
 * we interposed its object), which finalize would forget. Under hand_mu.
 */
static void hand_over(void)
{
	if (window_open) {
		/* a kind the client enabled stays on: its calls may have gone on meanwhile (late,
		 * or while our open was under way) */
		for (size_t i = 0; i < ARRAY_LEN(kinds); i++)
			if (!handover_user_kind(kinds[i]))
				cuptiActivityDisable(kinds[i]);
		cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		window_open = false;
	}
	if (subscribed) {	/* also the disable mode's subscription kept between windows */
		callbacks(0);
		cuptiUnsubscribe(subscriber);
		subscribed = false;
	}
	if (registered && orig_dev_buf_ok) {	/* the client gets CUPTI's buffers as they were */
		size_t sz = sizeof(orig_dev_buf[0]);

		cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &sz,
					  &orig_dev_buf[0]);
		cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT, &sz,
					  &orig_dev_buf[1]);
	}
	registered = false;	/* the client registers its own; ours again at the next open */
}

/*
 * Hands CUPTI over (hand_over) and, where a window was open, reports it: status YIELDED (the
 * disable mode's subscription kept between windows goes silently). Under hand_mu.
 */
static void yield_window(uint64_t t0, bool late)
{
	bool was_open = window_open;

	hand_over();
	if (!was_open)
		return;
	__atomic_add_fetch(&yields, 1, __ATOMIC_RELEASE);
	status(GPUSCOPE_CUPTI_ST_YIELDED, mono_now(),
	       (mono_now() - t0) | (late ? GPUSCOPE_CUPTI_YIELD_LATE : 0));
	dbg("window handed over to a user's CUPTI client%s, %llu ns", late ? " (late)" : "",
	    (unsigned long long)(mono_now() - t0));
}

void inject_yield(void)
{
	uint64_t t0 = mono_now();
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += YIELD_WAIT_MS * 1000000L;
	dl.tv_sec += dl.tv_nsec / 1000000000L;
	dl.tv_nsec %= 1000000000L;
	if (pthread_mutex_timedlock(&hand_mu, &dl)) {
		/* our open or close is taking longer than a user's call may wait: the control
		 * thread closes the window as soon as it is done (yield_late) */
		__atomic_store_n(&yield_late, 1, __ATOMIC_RELEASE);
		dbg("a user's CUPTI client goes on before our window could be closed");
		return;
	}
	if (window_open || subscribed)
		yield_window(t0, false);
	else
		registered = false;	/* the client may replace or finalize our registration */
	pthread_mutex_unlock(&hand_mu);
}

bool inject_yield_retry(void)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += YIELD_RETRY_MS / 1000;
	dl.tv_nsec += YIELD_RETRY_MS % 1000 * 1000000L;
	dl.tv_sec += dl.tv_nsec / 1000000000L;
	dl.tv_nsec %= 1000000000L;
	if (pthread_mutex_timedlock(&hand_mu, &dl))
		return false;
	if (__atomic_exchange_n(&yield_late, 0, __ATOMIC_ACQ_REL) && (window_open || subscribed))
		yield_window(mono_now(), true);
	pthread_mutex_unlock(&hand_mu);
	return true;
}

void inject_released(void)
{
	status(GPUSCOPE_CUPTI_ST_RELEASED, mono_now(), 0);
	dbg("the user's CUPTI client let go");
}

/* Follows the agent's switch: the window semaphore of this process. */
static void *control_main(void *arg)
{
	struct timespec poll = { 0, POLL_MS * 1000000L };
	bool refused = false;	/* this request failed or was handed over: wait for the next */
	unsigned seen_yields = 0;

	(void)arg;
	thread_enter();
	for (;;) {
		bool want = gpuscope_cupti_window_semaphore != 0;

		if (handover_on)
			handover_rescan();	/* objects loaded since: their CUPTI calls too */
		pthread_mutex_lock(&hand_mu);
		if (__atomic_exchange_n(&yield_late, 0, __ATOMIC_ACQ_REL) &&
		    (window_open || subscribed))
			yield_window(mono_now(), true);
		if (__atomic_load_n(&yields, __ATOMIC_ACQUIRE) != seen_yields) {
			seen_yields = __atomic_load_n(&yields, __ATOMIC_ACQUIRE);
			refused = want;	/* this request's window was handed over */
		}
		if (want && !window_open && !refused && !handover_in_grace(mono_now())) {
			open_window();
			refused = !window_open;
			if (window_open && PROBE_ENABLED(window))
				PROBE_WINDOW(1);
		} else if (!want && window_open) {
			close_window();
		}
		pthread_mutex_unlock(&hand_mu);
		if (!want)
			refused = false;
		nanosleep(&poll, NULL);
	}
	return NULL;
}

/* The process exits inside a window: hand over what was recorded and say the window ended. */
static void at_exit(void)
{
	uint64_t t0 = mono_now();

	if (!window_open)
		return;
	for (size_t i = 0; i < ARRAY_LEN(kinds); i++)
		cuptiActivityDisable(kinds[i]);
	cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	window_open = false;
	status(GPUSCOPE_CUPTI_ST_CLOSED, mono_now(), mono_now() - t0);
}

/*
 * Entry point CUDA calls once it has loaded us. Returns 1 always: a failure here must not stop
 * the application. CUPTI is not touched until the agent opens a window; logs only under
 * GPUSCOPE_CUPTI_DEBUG.
 */
EXPORT int InitializeInjection(void)
{
	static const char *const modes[] = { "finalize", "unsubscribe", "disable" };
	const char *m = getenv("GPUSCOPE_CUPTI_CLOSE");
	pthread_attr_t attr;
	pthread_t th;
	sigset_t all, old;
	int err;

	debug = getenv("GPUSCOPE_CUPTI_DEBUG") && *getenv("GPUSCOPE_CUPTI_DEBUG") &&
		strcmp(getenv("GPUSCOPE_CUPTI_DEBUG"), "0");
	buf_bytes = env_ulong("GPUSCOPE_CUPTI_BUFFER_KB", DEF_BUF_KB, 64, 65536) * 1024;
	max_bufs = env_ulong("GPUSCOPE_CUPTI_MAX_BUFFERS", DEF_MAX_BUFS, 2, 4096);
	dev_buf_bytes = env_ulong("GPUSCOPE_CUPTI_DEVICE_BUFFER_KB", DEF_DEV_BUF_KB, 256, 262144) *
			1024;
	dev_buf_pool = env_ulong("GPUSCOPE_CUPTI_DEVICE_BUFFERS", DEF_DEV_BUF_POOL, 1, 250);
	handover_on = env_ulong("GPUSCOPE_CUPTI_HANDOVER", 1, 0, 1);
	/*
	 * Unsubscribe by default, never finalize: CUPTI initialised again after a finalize breaks
	 * CUDA graphs instantiated meanwhile (an H100 process replaying a graph after our first
	 * window's finalize died with Xid 31, "unspecified launch failure"; PyTorch turns Kineto's
	 * CUPTI teardown off for graphs for the same reason).
	 */
	close_mode = CLOSE_UNSUBSCRIBE;
	for (size_t i = 0; m && *m && i < ARRAY_LEN(modes); i++)
		if (!strcmp(m, modes[i]))
			close_mode = (enum close_mode)i;
	if (m && *m && strcmp(m, modes[close_mode]))
		dbg("ignoring GPUSCOPE_CUPTI_CLOSE='%s' (finalize, unsubscribe or disable)", m);

	/* before the control thread can open a window: a client's calls come to us first */
	if (handover_on)
		handover_install((const void *)cuptiGetTimestamp);
	if (debug)
		thread_report_install();
	/* the control thread takes none of the application's signals but its own faults
	 * (thread.c); CUPTI and the driver run on its stack, so a full-size one */
	thread_block_async(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, env_ulong("GPUSCOPE_CUPTI_STACK_KB", DEF_STACK_KB, 128,
						   1048576) * 1024);
	err = pthread_create(&th, &attr, control_main, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		dbg("pthread_create: %s; stepping aside", strerror(err));
		return 1;
	}
	pthread_setname_np(th, "gpuscope-cupti");
	atexit(at_exit);
	status(GPUSCOPE_CUPTI_ST_HELLO, mono_now(), close_mode);
	dbg("ready: windows close by %s; buffers %zu KiB x %u, device buffers %zu KiB x %zu",
	    modes[close_mode], buf_bytes / 1024, max_bufs, dev_buf_bytes / 1024, dev_buf_pool);
	return 1;
}
