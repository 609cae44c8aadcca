/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inside libgpuscope_cupti.so: GOT interposition (interpose.c) and the hand-over of CUPTI to a
 * user's own CUPTI client (handover.c), and what they ask of inject.c. Hidden symbols only.
 */
#ifndef GPUSCOPE_CUPTI_INTERPOSE_H
#define GPUSCOPE_CUPTI_INTERPOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* One function whose callers are sent to `fn`: `real` is what they called before. */
struct hook {
	const char *name;
	void *fn;	/* the wrapper */
	void *real;	/* the library function it stands for; NULL: not installed */
};

/*
 * Points every GOT slot (PLT JUMP_SLOT and GLOB_DAT relocations) that names one of hooks[] in
 * every loaded object but ours and the one that holds skip_addr (libcupti) at the hook's
 * wrapper; objects already seen are skipped until their mapping goes. The objects come from
 * /proc/self/maps, each pinned with dlopen(RTLD_NOLOAD) while it is read (interpose.c says
 * why). Safe to call from any thread (serialised inside). Returns the slots rewritten.
 */
HIDDEN int interpose_scan(struct hook *hooks, size_t n, const void *skip_addr);

/*
 * Cheap, paced: may objects have come or gone since the last interpose_scan()? Reads the
 * process's virtual size at most every 50 ms, and says no until the last scan's pacing passed.
 */
HIDDEN bool interpose_due(void);

/* ---- handover.c ---- */

/*
 * Installs the wrappers (resolves the real functions in the libcupti that holds
 * `cupti_addr`, then scans). Control thread or InitializeInjection. Returns slots rewritten,
 * or -errno.
 */
HIDDEN int handover_install(const void *cupti_addr);
/* Re-scan for objects loaded since (control thread, each window open and every tick). */
HIDDEN void handover_rescan(void);
/* A user's CUPTI client holds CUPTI now: no window may open. Any thread. */
HIDDEN bool handover_user_holds(void);
/* The user's client let go less than the grace time ago: wait before opening. */
HIDDEN bool handover_in_grace(uint64_t now_ns);
/* Has the user's client enabled this activity kind (a late hand-over leaves it on)? */
HIDDEN bool handover_user_kind(int kind);
/* Some user client has held CUPTI at some time: flush its buffers before registering ours. */
HIDDEN bool handover_user_seen(void);

/* ---- inject.c, for handover.c ---- */

/*
 * A user's client is about to take CUPTI (the caller's thread, before its call proceeds):
 * closes our window so CUPTI is clean for it, within a bound; reports YIELDED.
 */
HIDDEN void inject_yield(void);
/*
 * A client's subscribe failed, maybe on our subscription (a hand-over that could not wait):
 * waits up to 2 s more for our open or close in progress, and hands over. True: worth
 * retrying the call.
 */
HIDDEN bool inject_yield_retry(void);
/* Reports the user's client letting go (status RELEASED). */
HIDDEN void inject_released(void);
HIDDEN uint64_t inject_mono_now(void);
HIDDEN void inject_dbg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- thread.c: the control thread's stack and signals, the debug crash report ---- */

#include <signal.h>
/* Every signal but the synchronous ones (a fault must reach a handler, never kill silently). */
HIDDEN void thread_block_async(sigset_t *set);
/* Debug only: a report of any thread's fault to stderr, then the handler that was there. */
HIDDEN void thread_report_install(void);
/* First thing in the control thread: an alternate signal stack; its stack bounds (painted in debug). */
HIDDEN void thread_enter(void);
/* Debug only: the deepest the control thread's stack has been used, in bytes (0: unknown). */
HIDDEN size_t thread_stack_used(void);

#endif
