// SPDX-License-Identifier: Apache-2.0
/*
 * The library's control thread as a guest in someone else's process: its stack, its signal
 * mask, and (under GPUSCOPE_CUPTI_DEBUG) a report of a crash in it.
 *
 * The thread calls into CUPTI and the driver (subscribe, activity enable, flush), whose stack
 * use we do not control, so it gets a full-size stack (GPUSCOPE_CUPTI_STACK_KB, default 8 MiB
 * of address space; only the pages touched cost memory). It takes none of the application's
 * asynchronous signals, but the synchronous ones (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP,
 * SIGSYS) stay unblocked: a fault in a thread that blocks them kills the process without any
 * handler running, so neither Python's faulthandler nor the application's own crash handler
 * could say where it died. An alternate signal stack lets such a handler run after a stack
 * overflow too. Threads CUPTI creates from this thread inherit the same mask.
 *
 * With GPUSCOPE_CUPTI_DEBUG set, a fault in any thread first prints one report to stderr
 * (thread, fault address, the mappings holding the fault address and the instruction, a
 * backtrace, and whether the stack pointer had run below the control thread's stack), then the
 * handler that was there before (faulthandler's, or the default action) runs as it would have.
 * In debug mode the stack is also painted so that its deepest use can be printed
 * (thread_stack_used()).
 */
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#include "cupti/interpose.h"

#define ALTSTACK_BYTES	(64 * 1024)
#define PAINT		0x5a5a5a5a5a5a5a5aull
#define PAINT_SKIP	(64 * 1024)	/* bytes below the painter's frame left unpainted */

static const int sync_sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS };
static struct sigaction old_act[sizeof(sync_sigs) / sizeof(sync_sigs[0])];
static bool report_on;
static uintptr_t stack_lo, stack_hi;	/* the control thread's stack, once it runs */

void thread_block_async(sigset_t *set)
{
	sigfillset(set);
	for (size_t i = 0; i < sizeof(sync_sigs) / sizeof(sync_sigs[0]); i++)
		sigdelset(set, sync_sigs[i]);
}

/* ---- the crash report (debug only): async-signal-safe writes, then the old handler ---- */

static void put(const char *s)
{
	ssize_t r = write(2, s, strlen(s));

	(void)r;
}

static void put_hex(const char *label, uintptr_t v)
{
	char buf[32];
	int i = sizeof(buf) - 1;

	buf[i] = 0;
	do {
		buf[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v && i > 2);
	buf[--i] = 'x';
	buf[--i] = '0';
	put(label);
	put(buf + i);
}

/* The /proc/self/maps lines holding a and b (read with open/read: no stdio in a handler). */
static void put_maps(uintptr_t a, uintptr_t b)
{
	char buf[4096], line[512];
	size_t ll = 0;
	ssize_t r;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	while ((r = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < r; i++) {
			uintptr_t s, e;
			char *end;

			if (buf[i] != '\n') {
				if (ll < sizeof(line) - 2)
					line[ll++] = buf[i];
				continue;
			}
			line[ll] = 0;
			ll = 0;
			s = strtoull(line, &end, 16);
			e = *end == '-' ? strtoull(end + 1, NULL, 16) : 0;
			if ((a >= s && a < e) || (b >= s && b < e)) {
				put("[gpuscope-cupti]   ");
				put(line);
				put("\n");
			}
		}
	}
	close(fd);
}

static void on_fault(int sig, siginfo_t *si, void *uc_)
{
	static volatile int once;
	ucontext_t *uc = uc_;
	uintptr_t pc = 0, sp = 0, addr = (uintptr_t)si->si_addr;
	void *frames[48];
	char comm[32] = "?";
	int n, fd;

	if (!__atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL)) {
#if defined(__x86_64__)
		pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
		sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
		pc = (uintptr_t)uc->uc_mcontext.pc;
		sp = (uintptr_t)uc->uc_mcontext.sp;
#endif
		fd = open("/proc/thread-self/comm", O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t r = read(fd, comm, sizeof(comm) - 1);

			comm[r > 0 ? r - 1 : 0] = 0;
			close(fd);
		}
		put("[gpuscope-cupti] fatal signal ");
		put(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGILL ? "SIGILL" :
		    sig == SIGFPE ? "SIGFPE" : sig == SIGTRAP ? "SIGTRAP" : "SIGSYS");
		put(" in thread '");
		put(comm);
		put("'");
		put_hex(", address ", addr);
		put_hex(", instruction ", pc);
		put("\n");
		if (stack_lo && sp < stack_lo && sp + (64u << 20) >= stack_lo)
			put("[gpuscope-cupti]   the stack pointer is below the control thread's stack: "
			    "a stack overflow\n");
		put_maps(addr, pc);
		n = backtrace(frames, (int)(sizeof(frames) / sizeof(frames[0])));
		backtrace_symbols_fd(frames, n, 2);
	}
	/* the handler that was there before, as if we had not been */
	for (size_t i = 0; i < sizeof(sync_sigs) / sizeof(sync_sigs[0]); i++)
		if (sync_sigs[i] == sig)
			sigaction(sig, &old_act[i], NULL);
}

void thread_report_install(void)
{
	struct sigaction sa;
	void *warm[2];

	backtrace(warm, 2);	/* loads the unwinder now, not inside a handler */
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sync_sigs) / sizeof(sync_sigs[0]); i++)
		sigaction(sync_sigs[i], &sa, &old_act[i]);
	report_on = true;
}

/* ---- in the control thread ------------------------------------------------------------- */

/* Paints [lo, sp - PAINT_SKIP) so that thread_stack_used() finds the deepest use. */
static __attribute__((noinline)) void paint(uintptr_t lo)
{
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);

	for (volatile uint64_t *p = (uint64_t *)((lo + 7) & ~7ul);
	     (uintptr_t)p < sp - PAINT_SKIP; p++)
		*p = PAINT;
}

void thread_enter(void)
{
	pthread_attr_t attr;
	stack_t ss;
	void *base;
	size_t size;

	ss.ss_sp = malloc(ALTSTACK_BYTES);
	ss.ss_size = ALTSTACK_BYTES;
	ss.ss_flags = 0;
	if (ss.ss_sp && sigaltstack(&ss, NULL))
		free(ss.ss_sp);
	if (pthread_getattr_np(pthread_self(), &attr))
		return;
	if (!pthread_attr_getstack(&attr, &base, &size)) {
		stack_lo = (uintptr_t)base;
		stack_hi = (uintptr_t)base + size;
		if (report_on)
			paint(stack_lo);
	}
	pthread_attr_destroy(&attr);
}

size_t thread_stack_used(void)
{
	const uint64_t *p;

	if (!report_on || !stack_lo)
		return 0;
	for (p = (const uint64_t *)((stack_lo + 7) & ~7ul); (uintptr_t)p < stack_hi && *p == PAINT;
	     p++)
		;
	return stack_hi - (uintptr_t)p;
}
