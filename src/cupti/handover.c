// SPDX-License-Identifier: Apache-2.0
/*
 * Handing CUPTI over to a user's own CUPTI client (torch.profiler's Kineto, cupti-python, XLA's
 * profiler, the user's code): CUPTI has one subscriber, and its activity callbacks and enabled
 * kinds are process-wide, so a window of ours open when another client starts would take its
 * records. The entry points a client starts and stops with are interposed (interpose.c); the
 * first call of a client closes our window before it proceeds (inject_yield), and no window
 * opens until the client lets go: it unsubscribes with no activity kind of its own left
 * enabled, disables its last kind with no subscription, deinitialises the profiler APIs it
 * initialised with nothing else held, or calls cuptiFinalize. docs/cupti.md.
 */
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "cupti/interpose.h"

#define GRACE_NS (250 * 1000000ull)	/* after a client lets go: its last flush is done */
#define NKINDS	 256			/* activity kinds tracked (CUpti_ActivityKind values) */

typedef CUptiResult (*fn_sub)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
typedef CUptiResult (*fn_sub2)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *, void *);
typedef CUptiResult (*fn_unsub)(CUpti_SubscriberHandle);
typedef CUptiResult (*fn_reg)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
typedef CUptiResult (*fn_kind)(CUpti_ActivityKind);
typedef CUptiResult (*fn_ctxkind)(CUcontext, CUpti_ActivityKind);
typedef CUptiResult (*fn_cb)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
			     CUpti_CallbackId);
typedef CUptiResult (*fn_dom)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
typedef CUptiResult (*fn_alldom)(uint32_t, CUpti_SubscriberHandle);
typedef CUptiResult (*fn_void)(void);
typedef CUptiResult (*fn_params)(void *);
typedef void *(*fn_dlsym)(void *, const char *);

/*
 * What the user's client holds, under `mu` (user threads only). `holds` is also read without
 * it (atomic) by our control thread: set before our window is closed, so no open can follow.
 */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int holds, seen_user;
static uint64_t released_ns;
static bool subscribed, had_any;
static unsigned char kinds[NKINDS];
static unsigned nkinds, profilers;	/* kinds enabled; profiler-API sessions initialised */

enum {
	H_SUB, H_SUB2, H_UNSUB, H_REG, H_EN, H_EN_CTX, H_EN_DUMP, H_DIS, H_DIS_CTX, H_CB, H_DOM,
	H_ALLDOM, H_FINALIZE, H_PROF_INIT, H_PROF_DEINIT, H_PM_EN, H_PM_DIS, H_RANGE_EN,
	H_RANGE_DIS, H_DLSYM, H_COUNT
};

static struct hook hooks[H_COUNT];
static const void *cupti_text;	/* an address inside libcupti: never patched */

#define REAL(i, type) ((type)hooks[i].real)

/* A client call is about to change CUPTI's state: it holds CUPTI from now on. Under mu. */
static void claim(void)
{
	seen_user = 1;
	had_any = true;
	if (__atomic_load_n(&holds, __ATOMIC_ACQUIRE))
		return;
	__atomic_store_n(&holds, 1, __ATOMIC_RELEASE);
	inject_yield();	/* bounded; the window is closed before the call goes on */
}

/* After a call that lets something go: is nothing of the client's left? Under mu. */
static void maybe_release(bool finalized)
{
	if (!__atomic_load_n(&holds, __ATOMIC_ACQUIRE))
		return;
	if (!finalized && (subscribed || nkinds || profilers || !had_any))
		return;
	subscribed = false;
	memset(kinds, 0, sizeof(kinds));
	nkinds = profilers = 0;
	had_any = false;
	__atomic_store_n(&released_ns, inject_mono_now(), __ATOMIC_RELAXED);
	__atomic_store_n(&holds, 0, __ATOMIC_RELEASE);
	inject_released();
}

static void kind_on(CUpti_ActivityKind k, bool on)
{
	if ((unsigned)k >= NKINDS || kinds[k] == on)
		return;
	kinds[k] = on;
	nkinds += on ? 1 : -1;
}

static CUptiResult w_subscribe(CUpti_SubscriberHandle *s, CUpti_CallbackFunc fn, void *ud)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	claim();
	r = REAL(H_SUB, fn_sub)(s, fn, ud);
	if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && inject_yield_retry())
		r = REAL(H_SUB, fn_sub)(s, fn, ud);	/* ours, closed late */
	if (r == CUPTI_SUCCESS)
		subscribed = true;
	pthread_mutex_unlock(&mu);
	return r;
}

static CUptiResult w_subscribe_v2(CUpti_SubscriberHandle *s, CUpti_CallbackFunc fn, void *ud,
				  CUpti_SubscriberParams *p)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	claim();
	r = REAL(H_SUB2, fn_sub2)(s, fn, ud, p);
	if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && inject_yield_retry())
		r = REAL(H_SUB2, fn_sub2)(s, fn, ud, p);
	if (r == CUPTI_SUCCESS)
		subscribed = true;
	pthread_mutex_unlock(&mu);
	return r;
}

static CUptiResult w_unsubscribe(CUpti_SubscriberHandle s)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	r = REAL(H_UNSUB, fn_unsub)(s);
	if (r == CUPTI_SUCCESS)
		subscribed = false;
	maybe_release(false);
	pthread_mutex_unlock(&mu);
	return r;
}

static CUptiResult w_register(CUpti_BuffersCallbackRequestFunc rq,
			      CUpti_BuffersCallbackCompleteFunc cp)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	claim();
	r = REAL(H_REG, fn_reg)(rq, cp);
	pthread_mutex_unlock(&mu);
	return r;
}

static CUptiResult enable_kind(int which, CUcontext ctx, CUpti_ActivityKind k)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	claim();
	r = which == H_EN_CTX ? REAL(H_EN_CTX, fn_ctxkind)(ctx, k) : REAL(which, fn_kind)(k);
	if (r == CUPTI_SUCCESS)
		kind_on(k, true);
	pthread_mutex_unlock(&mu);
	return r;
}

static CUptiResult w_enable(CUpti_ActivityKind k) { return enable_kind(H_EN, NULL, k); }
static CUptiResult w_enable_dump(CUpti_ActivityKind k) { return enable_kind(H_EN_DUMP, NULL, k); }
static CUptiResult w_enable_ctx(CUcontext c, CUpti_ActivityKind k)
{
	return enable_kind(H_EN_CTX, c, k);
}

static CUptiResult disable_kind(int which, CUcontext ctx, CUpti_ActivityKind k)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	r = which == H_DIS_CTX ? REAL(H_DIS_CTX, fn_ctxkind)(ctx, k) : REAL(which, fn_kind)(k);
	if (r == CUPTI_SUCCESS && __atomic_load_n(&holds, __ATOMIC_ACQUIRE)) {
		kind_on(k, false);
		maybe_release(false);
	}
	pthread_mutex_unlock(&mu);
	return r;
}

static CUptiResult w_disable(CUpti_ActivityKind k) { return disable_kind(H_DIS, NULL, k); }
static CUptiResult w_disable_ctx(CUcontext c, CUpti_ActivityKind k)
{
	return disable_kind(H_DIS_CTX, c, k);
}

/* Enabling callbacks needs the client's own subscription, so only enabling claims. */
static CUptiResult w_enable_cb(uint32_t on, CUpti_SubscriberHandle s, CUpti_CallbackDomain d,
			       CUpti_CallbackId id)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	if (on)
		claim();
	r = REAL(H_CB, fn_cb)(on, s, d, id);
	pthread_mutex_unlock(&mu);
	return r;
}

static CUptiResult w_enable_dom(uint32_t on, CUpti_SubscriberHandle s, CUpti_CallbackDomain d)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	if (on)
		claim();
	r = REAL(H_DOM, fn_dom)(on, s, d);
	pthread_mutex_unlock(&mu);
	return r;
}

static CUptiResult w_enable_alldom(uint32_t on, CUpti_SubscriberHandle s)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	if (on)
		claim();
	r = REAL(H_ALLDOM, fn_alldom)(on, s);
	pthread_mutex_unlock(&mu);
	return r;
}

static CUptiResult w_finalize(void)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	claim();	/* a finalize while our window is open would end it under us */
	r = REAL(H_FINALIZE, fn_void)();
	maybe_release(true);
	pthread_mutex_unlock(&mu);
	return r;
}

/* The profiler, PM sampling and range profiler APIs: a session from init/enable to its end. */
static CUptiResult profiler_call(int which, void *params, int delta)
{
	CUptiResult r;

	pthread_mutex_lock(&mu);
	if (delta > 0)
		claim();
	r = REAL(which, fn_params)(params);
	if (r == CUPTI_SUCCESS && (delta > 0 || profilers))
		profilers += delta;
	if (delta < 0)
		maybe_release(false);
	pthread_mutex_unlock(&mu);
	return r;
}

static CUptiResult w_prof_init(void *p) { return profiler_call(H_PROF_INIT, p, 1); }
static CUptiResult w_prof_deinit(void *p) { return profiler_call(H_PROF_DEINIT, p, -1); }
static CUptiResult w_pm_en(void *p) { return profiler_call(H_PM_EN, p, 1); }
static CUptiResult w_pm_dis(void *p) { return profiler_call(H_PM_DIS, p, -1); }
static CUptiResult w_range_en(void *p) { return profiler_call(H_RANGE_EN, p, 1); }
static CUptiResult w_range_dis(void *p) { return profiler_call(H_RANGE_DIS, p, -1); }

/*
 * dlsym: a CUPTI function resolved at run time (XLA's, cupti-python's, ctypes) comes back as
 * its wrapper. glibc's RTLD_NEXT and RTLD_DEFAULT lookups depend on the caller (its address
 * picks the next object, its scope the search list), so the entry stub (below) jumps straight to
 * the real dlsym for them, keeping the caller's return address; only RTLD_DEFAULT lookups of a
 * "cupt..." name and lookups in a handle come here.
 */
__attribute__((used)) HIDDEN void *gpuscope_dlsym_c(void *h, const char *name)
{
	void *p = REAL(H_DLSYM, fn_dlsym)(h, name);

	if (p && name && name[0] == 'c' && name[1] == 'u')
		for (int i = 0; i < H_COUNT; i++)
			if (i != H_DLSYM && hooks[i].real == p)
				return hooks[i].fn;
	return p;
}

HIDDEN void *gpuscope_dlsym_real;
void *gpuscope_dlsym_stub(void *h, const char *name);
#if defined(__x86_64__)
__asm__(".text\n.p2align 4\n.hidden gpuscope_dlsym_stub\n.type gpuscope_dlsym_stub,@function\n"
	"gpuscope_dlsym_stub:\n"
	"\tcmpq $-1, %rdi\n"			/* RTLD_NEXT */
	"\tje 1f\n"
	"\ttestq %rdi, %rdi\n"			/* a handle */
	"\tjne gpuscope_dlsym_c\n"
	"\tcmpb $0x63, (%rsi)\n"		/* RTLD_DEFAULT and "cupt..." (byte by byte: */
	"\tjne 1f\n"				/*  never past the name's end) */
	"\tcmpb $0x75, 1(%rsi)\n"
	"\tjne 1f\n"
	"\tcmpb $0x70, 2(%rsi)\n"
	"\tjne 1f\n"
	"\tcmpb $0x74, 3(%rsi)\n"
	"\tje gpuscope_dlsym_c\n"
	"1:\tjmp *gpuscope_dlsym_real(%rip)\n"
	".size gpuscope_dlsym_stub, .-gpuscope_dlsym_stub\n");
#elif defined(__aarch64__)
__asm__(".text\n.p2align 4\n.hidden gpuscope_dlsym_stub\n.type gpuscope_dlsym_stub,%function\n"
	"gpuscope_dlsym_stub:\n"
	"\tcmn x0, #1\n"
	"\tb.eq 1f\n"
	"\tcbnz x0, gpuscope_dlsym_c\n"
	"\tldrb w16, [x1]\n"
	"\tcmp w16, #0x63\n"
	"\tb.ne 1f\n"
	"\tldrb w16, [x1, #1]\n"
	"\tcmp w16, #0x75\n"
	"\tb.ne 1f\n"
	"\tldrb w16, [x1, #2]\n"
	"\tcmp w16, #0x70\n"
	"\tb.ne 1f\n"
	"\tldrb w16, [x1, #3]\n"
	"\tcmp w16, #0x74\n"
	"\tb.eq gpuscope_dlsym_c\n"
	"1:\tadrp x16, gpuscope_dlsym_real\n"
	"\tldr x16, [x16, :lo12:gpuscope_dlsym_real]\n"
	"\tbr x16\n"
	".size gpuscope_dlsym_stub, .-gpuscope_dlsym_stub\n");
#endif

static void set(int i, const char *name, void *fn, void *lib)
{
	hooks[i] = (struct hook){ name, fn, lib ? dlsym(lib, name) : NULL };
}

int handover_install(const void *cupti_addr)
{
	Dl_info info;
	uint64_t t0;
	void *lib;
	int n;

	if (!dladdr(cupti_addr, &info) || !info.dli_fname)
		return -2;	/* -ENOENT */
	lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
	if (!lib)
		return -2;
	cupti_text = cupti_addr;
	set(H_SUB, "cuptiSubscribe", (void *)w_subscribe, lib);
	set(H_SUB2, "cuptiSubscribe_v2", (void *)w_subscribe_v2, lib);
	set(H_UNSUB, "cuptiUnsubscribe", (void *)w_unsubscribe, lib);
	set(H_REG, "cuptiActivityRegisterCallbacks", (void *)w_register, lib);
	set(H_EN, "cuptiActivityEnable", (void *)w_enable, lib);
	set(H_EN_CTX, "cuptiActivityEnableContext", (void *)w_enable_ctx, lib);
	set(H_EN_DUMP, "cuptiActivityEnableAndDump", (void *)w_enable_dump, lib);
	set(H_DIS, "cuptiActivityDisable", (void *)w_disable, lib);
	set(H_DIS_CTX, "cuptiActivityDisableContext", (void *)w_disable_ctx, lib);
	set(H_CB, "cuptiEnableCallback", (void *)w_enable_cb, lib);
	set(H_DOM, "cuptiEnableDomain", (void *)w_enable_dom, lib);
	set(H_ALLDOM, "cuptiEnableAllDomains", (void *)w_enable_alldom, lib);
	set(H_FINALIZE, "cuptiFinalize", (void *)w_finalize, lib);
	set(H_PROF_INIT, "cuptiProfilerInitialize", (void *)w_prof_init, lib);
	set(H_PROF_DEINIT, "cuptiProfilerDeInitialize", (void *)w_prof_deinit, lib);
	set(H_PM_EN, "cuptiPmSamplingEnable", (void *)w_pm_en, lib);
	set(H_PM_DIS, "cuptiPmSamplingDisable", (void *)w_pm_dis, lib);
	set(H_RANGE_EN, "cuptiRangeProfilerEnable", (void *)w_range_en, lib);
	set(H_RANGE_DIS, "cuptiRangeProfilerDisable", (void *)w_range_dis, lib);
#if defined(__x86_64__) || defined(__aarch64__)
	gpuscope_dlsym_real = (void *)dlsym;
	hooks[H_DLSYM] = (struct hook){ "dlsym", (void *)gpuscope_dlsym_stub, (void *)dlsym };
#endif
	/* the handle stays: libcupti is not unloaded while we hold its functions */
	t0 = inject_mono_now();
	n = interpose_scan(hooks, H_COUNT, cupti_text);
	inject_dbg("interposed %d GOT slots of CUPTI's entry points and dlsym in %llu us", n,
		   (unsigned long long)(inject_mono_now() - t0) / 1000);
	return n;
}

void handover_rescan(void)
{
	int n;

	if (!cupti_text || !interpose_due())
		return;
	n = interpose_scan(hooks, H_COUNT, cupti_text);
	if (n)
		inject_dbg("interposed %d more GOT slots (objects loaded since)", n);
}

bool handover_user_holds(void)
{
	return __atomic_load_n(&holds, __ATOMIC_ACQUIRE);
}

bool handover_in_grace(uint64_t now_ns)
{
	uint64_t r = __atomic_load_n(&released_ns, __ATOMIC_RELAXED);

	return r && now_ns - r < GRACE_NS;
}

bool handover_user_kind(int kind)
{
	return (unsigned)kind < NKINDS && __atomic_load_n(&kinds[kind], __ATOMIC_RELAXED);
}

bool handover_user_seen(void)
{
	return __atomic_load_n(&seen_user, __ATOMIC_RELAXED);
}
