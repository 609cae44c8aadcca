// SPDX-License-Identifier: Apache-2.0
/*
 * A user's own CUPTI client, as torch.profiler's Kineto or cupti-python is one: subscribes,
 * registers its activity buffers, enables kernel activity and the launch callback, and keeps
 * every kernel record's correlation id, until it stops (disable, flush, unsubscribe, and
 * finalize if asked). Built twice: calling CUPTI through its PLT (libuserprof_plt.so), and
 * resolving every CUPTI function with dlsym at start (libuserprof_dlsym.so, -DUSE_DLSYM), as
 * runtime-loading profilers do. Used by tests/cupti/cupti_window.c.
 */
#include <cupti.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "user_prof.h"

#define EXPORT __attribute__((visibility("default")))
#define CIDS   (1u << 22)	/* correlation ids remembered */

static uint8_t seen[CIDS / 8];
static uint64_t records, callbacks;
static CUpti_SubscriberHandle sub;
static size_t pool_at_start;	/* CUPTI's device buffer pool limit when it started */

#ifdef USE_DLSYM
#define F(name) p_##name
static __typeof__(cuptiSubscribe) *p_cuptiSubscribe;
static __typeof__(cuptiUnsubscribe) *p_cuptiUnsubscribe;
static __typeof__(cuptiEnableCallback) *p_cuptiEnableCallback;
static __typeof__(cuptiActivityRegisterCallbacks) *p_cuptiActivityRegisterCallbacks;
static __typeof__(cuptiActivityEnable) *p_cuptiActivityEnable;
static __typeof__(cuptiActivityDisable) *p_cuptiActivityDisable;
static __typeof__(cuptiActivityFlushAll) *p_cuptiActivityFlushAll;
static __typeof__(cuptiActivityGetNextRecord) *p_cuptiActivityGetNextRecord;
static __typeof__(cuptiFinalize) *p_cuptiFinalize;
static __typeof__(cuptiActivityGetAttribute) *p_cuptiActivityGetAttribute;

static int resolve(void)
{
#define R(name)                                                                                   \
	if (!(p_##name = (__typeof__(p_##name))dlsym(RTLD_DEFAULT, #name)))                        \
		return -1;
	R(cuptiSubscribe) R(cuptiUnsubscribe) R(cuptiEnableCallback)
	R(cuptiActivityRegisterCallbacks) R(cuptiActivityEnable) R(cuptiActivityDisable)
	R(cuptiActivityFlushAll) R(cuptiActivityGetNextRecord) R(cuptiFinalize)
	R(cuptiActivityGetAttribute)
#undef R
	return 0;
}
#else
#define F(name) name
static int resolve(void)
{
	return 0;
}
#endif

static void CUPTIAPI on_cb(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid,
			   const void *data)
{
	const CUpti_CallbackData *cb = data;

	(void)ud, (void)dom, (void)cbid;
	if (cb->callbackSite == CUPTI_API_ENTER)
		__atomic_add_fetch(&callbacks, 1, __ATOMIC_RELAXED);
}

static void CUPTIAPI buf_req(uint8_t **buf, size_t *size, size_t *max)
{
	*size = 64 * 1024;
	*buf = aligned_alloc(8, *size);
	*max = 0;
	if (!*buf)
		*size = 0;
}

static void CUPTIAPI buf_done(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
			      size_t valid)
{
	CUpti_Activity *rec = NULL;

	(void)ctx, (void)stream, (void)size;
	while (F(cuptiActivityGetNextRecord)(buf, valid, &rec) == CUPTI_SUCCESS) {
		const CUpti_ActivityKernel10 *k = (const void *)rec;

		if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
			continue;
		__atomic_add_fetch(&records, 1, __ATOMIC_RELAXED);
		if (k->correlationId < CIDS)
			__atomic_or_fetch(&seen[k->correlationId / 8],
					  (uint8_t)(1u << (k->correlationId % 8)), __ATOMIC_RELAXED);
	}
	free(buf);
}

/* USER_PROF_ACTIVITY_FIRST=1: buffers and kinds before the subscription (Kineto's order). */
EXPORT int user_prof_start(void)
{
	const char *o = getenv("USER_PROF_ACTIVITY_FIRST");
	bool activity_first = o && *o == '1';
	CUptiResult r;

	if (resolve())
		return -1;
	if (!activity_first) {
		r = F(cuptiSubscribe)(&sub, on_cb, NULL);
		if (r != CUPTI_SUCCESS)
			return (int)r;
	}
	r = F(cuptiActivityRegisterCallbacks)(buf_req, buf_done);
	if (r != CUPTI_SUCCESS)
		return (int)r;
	r = F(cuptiActivityEnable)(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (r != CUPTI_SUCCESS)
		return (int)r;
	if (activity_first) {
		r = F(cuptiSubscribe)(&sub, on_cb, NULL);
		if (r != CUPTI_SUCCESS)
			return (int)r;
	}
	size_t sz = sizeof(pool_at_start);
	F(cuptiActivityGetAttribute)(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT, &sz,
				     &pool_at_start);
	return (int)F(cuptiEnableCallback)(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API,
					   CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
}

EXPORT int user_prof_stop(int finalize)
{
	CUptiResult r;

	F(cuptiEnableCallback)(0, sub, CUPTI_CB_DOMAIN_RUNTIME_API,
			       CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
	r = F(cuptiActivityDisable)(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (r != CUPTI_SUCCESS)
		return (int)r;
	r = F(cuptiActivityFlushAll)(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	if (r != CUPTI_SUCCESS)
		return (int)r;
	r = F(cuptiUnsubscribe)(sub);
	if (r != CUPTI_SUCCESS)
		return (int)r;
	return finalize ? (int)F(cuptiFinalize)() : 0;
}

EXPORT void user_prof_counts(uint64_t *ret_records, uint64_t *ret_callbacks)
{
	*ret_records = __atomic_load_n(&records, __ATOMIC_RELAXED);
	*ret_callbacks = __atomic_load_n(&callbacks, __ATOMIC_RELAXED);
}

EXPORT size_t user_prof_pool(void)
{
	return pool_at_start;
}

EXPORT int user_prof_has(uint32_t cid)
{
	return cid < CIDS && (__atomic_load_n(&seen[cid / 8], __ATOMIC_RELAXED) >> (cid % 8) & 1);
}

/*
 * The dlsym build: do RTLD_DEFAULT and RTLD_NEXT lookups from here still search this object's
 * scope (its dependency libscopedep.so, which only it loaded)? Bits: 1 RTLD_DEFAULT found it,
 * 2 RTLD_NEXT found it, 4 both are the function. -1 in the PLT build.
 */
EXPORT int user_prof_scope(void)
{
#ifdef USE_DLSYM
	int (*d)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "scope_dep_fn");
	int (*n)(void) = (int (*)(void))dlsym(RTLD_NEXT, "scope_dep_fn");

	return (d ? 1 : 0) | (n ? 2 : 0) | (d && n && d() == 42 && n() == 42 ? 4 : 0);
#else
	return -1;
#endif
}

/* Where this object's calls to cuptiSubscribe go now (a wrapper once interposed). */
EXPORT void *user_prof_subscribe_addr(void)
{
#ifdef USE_DLSYM
	return (void *)dlsym(RTLD_DEFAULT, "cuptiSubscribe");
#else
	return (void *)cuptiSubscribe;
#endif
}
