/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The USDT probes of provider "gpuscope_cupti" (layout in src/common/abi_cupti.h), with a
 * semaphore each so that a probe costs one load and a branch while no agent is attached.
 * Included by exactly one translation unit per DSO: the injection library, or the test program
 * that fires the same probes without a GPU.
 */
#ifndef GPUSCOPE_CUPTI_PROBES_H
#define GPUSCOPE_CUPTI_PROBES_H

#define _SDT_HAS_SEMAPHORES 1
#define STAP_SDT_ARG_CONSTRAINT nr	/* registers or constants: what every USDT reader parses */
#include <sys/sdt.h>

#define GPUSCOPE_SEMA(name)                                                                        \
	__extension__ volatile unsigned short gpuscope_cupti_##name##_semaphore                    \
		__attribute__((section(".probes"), used, visibility("hidden")))

GPUSCOPE_SEMA(launch);
GPUSCOPE_SEMA(buffer);
GPUSCOPE_SEMA(name);
GPUSCOPE_SEMA(clock);
GPUSCOPE_SEMA(drops);
GPUSCOPE_SEMA(window);
GPUSCOPE_SEMA(status);

/* Non-zero while some tracer has the probe attached (the kernel counts attachments). */
#define PROBE_ENABLED(name) __builtin_expect(gpuscope_cupti_##name##_semaphore != 0, 0)

/*
 * The launch probe site is a leaf function: GCC gives it no frame even with
 * -fno-omit-frame-pointer, and a frame-pointer unwind from it would skip its caller. Taking
 * the frame address forces the frame (only on the probe's path, after the semaphore test).
 */
#define PROBE_LAUNCH(cid, cid2)                                                                    \
	do {                                                                                       \
		__asm__ volatile("" ::"r"(__builtin_frame_address(0)));                            \
		STAP_PROBE2(gpuscope_cupti, launch, (unsigned)(cid), (unsigned)(cid2));             \
	} while (0)
#define PROBE_BUFFER(recs, n)	 STAP_PROBE2(gpuscope_cupti, buffer, (unsigned long)(recs), (unsigned)(n))
#define PROBE_NAME(idx, str)	 STAP_PROBE2(gpuscope_cupti, name, (unsigned)(idx), (unsigned long)(str))
#define PROBE_CLOCK(cupti, mono) STAP_PROBE2(gpuscope_cupti, clock, (unsigned long)(cupti), (unsigned long)(mono))
#define PROBE_DROPS(cupti, lib)	 STAP_PROBE2(gpuscope_cupti, drops, (unsigned long)(cupti), (unsigned long)(lib))
/* The window probe is never meant to be hit: its semaphore is the agent's per-process switch. */
#define PROBE_WINDOW(open)	 STAP_PROBE1(gpuscope_cupti, window, (unsigned)(open))
#define PROBE_STATUS(what, a, b) STAP_PROBE3(gpuscope_cupti, status, (unsigned)(what), (unsigned long)(a), (unsigned long)(b))

#endif
