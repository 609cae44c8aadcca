// SPDX-License-Identifier: Apache-2.0
/*
 * libgpuscope_cupti_fake.so: the stand-in for libgpuscope_cupti.so on machines without a GPU.
 * It fires the very same USDT probes (src/cupti/probes.h) with whatever the test program passes,
 * so the agent's real eBPF and join run unchanged against it.
 */
#include <linux/types.h>
#include <stdint.h>
#include "common/abi_cupti.h"
#include "cupti/probes.h"

#define EXPORT __attribute__((visibility("default"), noinline))

/* Non-zero once a tracer has attached to every probe. */
EXPORT int fake_attached(void)
{
	return gpuscope_cupti_launch_semaphore && gpuscope_cupti_buffer_semaphore &&
	       gpuscope_cupti_name_semaphore && gpuscope_cupti_clock_semaphore &&
	       gpuscope_cupti_drops_semaphore;
}

EXPORT void fake_launch(uint32_t cid, uint32_t cid2)
{
	if (PROBE_ENABLED(launch))
		PROBE_LAUNCH(cid, cid2);
}

EXPORT void fake_buffer(const struct gpuscope_cupti_rec *recs, uint32_t n)
{
	PROBE_BUFFER(recs, n);
}

EXPORT void fake_name(uint32_t idx, const char *name)
{
	PROBE_NAME(idx, name);
}

EXPORT void fake_clock(uint64_t cupti_ns, uint64_t mono_ns)
{
	PROBE_CLOCK(cupti_ns, mono_ns);
}

EXPORT void fake_drops(uint64_t cupti, uint64_t lib)
{
	PROBE_DROPS(cupti, lib);
}

EXPORT void fake_status(uint32_t what, uint64_t a, uint64_t b)
{
	if (PROBE_ENABLED(status))
		PROBE_STATUS(what, a, b);
}

/* Non-zero while an agent holds this process's trace window open. */
EXPORT int fake_window(void)
{
	if (PROBE_ENABLED(window))
		PROBE_WINDOW(1);
	return gpuscope_cupti_window_semaphore != 0;
}
