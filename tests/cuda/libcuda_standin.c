// SPDX-License-Identifier: Apache-2.0
/*
 * Stand-in libcuda.so.1 for the CUDA probe tests (no GPU here): exports the driver API functions
 * the agent probes, with a pretend GPU. A launch queues `grid_x` microseconds of GPU work; the
 * synchronize calls sleep until the queued work is done; the rest return at once.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
static uint64_t busy_until_ns;	/* CLOCK_MONOTONIC end of the queued GPU work */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void queue_us(unsigned us)
{
	uint64_t now = now_ns();

	busy_until_ns = (busy_until_ns > now ? busy_until_ns : now) + us * 1000ULL;
}

__attribute__((noinline)) static CUresult wait_idle(void)
{
	uint64_t now = now_ns();

	if (busy_until_ns > now) {
		uint64_t d = busy_until_ns - now;
		struct timespec ts = { d / 1000000000ULL, d % 1000000000ULL };

		nanosleep(&ts, NULL);
	}
	return 0;
}

#define LAUNCH(name)                                                                               \
	CUresult name(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,    \
		      unsigned bz, unsigned shmem, void *stream, void **params, void **extra)      \
	{                                                                                          \
		queue_us(gx);                                                                      \
		return 0;                                                                          \
	}
LAUNCH(cuLaunchKernel)
LAUNCH(cuLaunchKernel_ptsz)
LAUNCH(cuLaunchCooperativeKernel)
LAUNCH(cuLaunchCooperativeKernel_ptsz)

/* cuLaunchKernelEx(const CUlaunchConfig *config, ...): config->gridDimX first. */
CUresult cuLaunchKernelEx(const unsigned *config, void *f, void **params, void **extra)
{
	queue_us(config ? config[0] : 0);
	return 0;
}
CUresult cuLaunchKernelEx_ptsz(const unsigned *config, void *f, void **params, void **extra)
{
	return cuLaunchKernelEx(config, f, params, extra);
}

#define SYNC(name, ...)                                                                            \
	CUresult name(__VA_ARGS__)                                                                 \
	{                                                                                          \
		return wait_idle();                                                                \
	}
SYNC(cuStreamSynchronize, void *stream)
SYNC(cuStreamSynchronize_ptsz, void *stream)
SYNC(cuCtxSynchronize, void)
SYNC(cuEventSynchronize, void *event)

/* Everything else: returns at once (a memcpy of n bytes takes n/1000 us of GPU time). */
#define NOP(name)                                                                                  \
	CUresult name(void *a, void *b, uintptr_t n, void *d)                                      \
	{                                                                                          \
		return 0;                                                                          \
	}
NOP(cuStreamWaitEvent) NOP(cuStreamWaitEvent_ptsz)
NOP(cuMemcpy) NOP(cuMemcpy_ptds) NOP(cuMemcpyAsync) NOP(cuMemcpyAsync_ptsz)
NOP(cuMemcpyDtoH_v2) NOP(cuMemcpyDtoH_v2_ptds) NOP(cuMemcpyDtoD_v2) NOP(cuMemcpyDtoD_v2_ptds)
NOP(cuMemcpyHtoDAsync_v2) NOP(cuMemcpyHtoDAsync_v2_ptsz) NOP(cuMemcpyDtoHAsync_v2)
NOP(cuMemcpyDtoHAsync_v2_ptsz) NOP(cuMemcpyDtoDAsync_v2) NOP(cuMemcpyDtoDAsync_v2_ptsz)
NOP(cuMemcpy2D_v2) NOP(cuMemcpy2DAsync_v2) NOP(cuMemcpy3D_v2) NOP(cuMemcpy3DAsync_v2)
NOP(cuMemcpyPeer) NOP(cuMemcpyPeerAsync)
NOP(cuMemsetD8_v2) NOP(cuMemsetD16_v2) NOP(cuMemsetD32_v2) NOP(cuMemsetD8Async)
NOP(cuMemsetD16Async) NOP(cuMemsetD32Async) NOP(cuMemsetD8Async_ptsz) NOP(cuMemsetD32Async_ptsz)
NOP(cuMemAlloc_v2) NOP(cuMemAllocAsync) NOP(cuMemAllocHost_v2) NOP(cuMemAllocManaged)
NOP(cuMemAllocPitch_v2) NOP(cuMemHostAlloc) NOP(cuMemFree_v2) NOP(cuMemFreeAsync)
NOP(cuMemFreeHost)

/* Synchronous copy host -> device: waits for queued work, then n/1000 us of copying. */
CUresult cuMemcpyHtoD_v2(uintptr_t dst, const void *src, size_t n)
{
	queue_us((unsigned)(n / 1000));
	return wait_idle();
}
CUresult cuMemcpyHtoD_v2_ptds(uintptr_t dst, const void *src, size_t n)
{
	return cuMemcpyHtoD_v2(dst, src, n);
}

/*
 * Devices: GPUSCOPE_STANDIN_UUIDS="GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx,..." lists the
 * UUIDs of ordinals 0, 1, ... (as NVML prints them); one device of UUID 0 without it.
 */
static int uuids(unsigned char (*ret)[16], int max)
{
	const char *s = getenv("GPUSCOPE_STANDIN_UUIDS");
	int n = 0;

	if (!s || !*s) {
		memset(ret[0], 0, 16);
		return 1;
	}
	while (*s && n < max) {
		int k = 0;

		if (!strncmp(s, "GPU-", 4))
			s += 4;
		for (; *s && *s != ',' && k < 16; s++) {
			unsigned v;

			if (*s == '-')
				continue;
			if (sscanf(s, "%2x", &v) != 1)
				break;
			ret[n][k++] = (unsigned char)v;
			s++;
		}
		while (*s && *s != ',')
			s++;
		if (*s == ',')
			s++;
		if (k == 16)
			n++;
	}
	return n;
}

CUresult cuDeviceGetCount(int *n)
{
	unsigned char u[8][16];

	*n = uuids(u, 8);
	return 0;
}

CUresult cuDeviceGet(int *dev, int ordinal)
{
	*dev = ordinal;
	return 0;
}

CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int dev)
{
	unsigned char u[8][16];
	int n = uuids(u, 8);

	if (dev < 0 || dev >= n)
		return 101;	/* CUDA_ERROR_INVALID_DEVICE */
	memcpy(uuid, u[dev], 16);
	return 0;
}
