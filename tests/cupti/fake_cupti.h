/* SPDX-License-Identifier: Apache-2.0 */
/* The workload side of tests/cupti/fake_cupti.c (the libcupti.so.13 stand-in). */
#ifndef GPUSCOPE_FAKE_CUPTI_H
#define GPUSCOPE_FAKE_CUPTI_H

#include <stddef.h>
#include <stdint.h>

struct fake_cupti_stats {
	uint64_t launches;		/* fake_cupti_launch() calls */
	uint64_t traced;		/* of them, recorded as kernel activity */
	uint64_t dropped;		/* no buffer from the client */
	uint64_t subscribes, unsubscribes, finalizes, registers, buffers_completed;
	int kinds_enabled;		/* activity kinds enabled now */
	int subscribed;			/* a subscriber holds CUPTI now */
	size_t device_buffer_bytes, device_buffer_pool;	/* as the client set them */
};

/* A cudaLaunchKernel of a kernel `name` (kept by the caller) lasting dur_ns; its correlation id. */
uint32_t fake_cupti_launch(const char *name, uint32_t device, uint32_t stream, uint64_t dur_ns);
/* other != 0: another client holds the subscription (cuptiSubscribe fails as with Nsight). */
void fake_cupti_hold(int other);
void fake_cupti_stats(struct fake_cupti_stats *ret);
/* The address of the stand-in's cuptiSubscribe (a caller's GOT may point elsewhere). */
void *fake_cupti_real_subscribe(void);

#endif
