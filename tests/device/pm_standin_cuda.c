// SPDX-License-Identifier: Apache-2.0
/*
 * Stand-in libcuda.so.1 for tests/device/pm_sampling's dry run without a GPU
 * (tests/integration/test_pm_sampling.sh): the driver calls pm_sampling makes, with a pretend GPU
 * whose "spin" kernel sleeps for its length and stores its start and end (CLOCK_REALTIME, the
 * pretend %globaltimer). Busy ranges go to $STANDIN_BUSY_FILE (shared with a worker process);
 * pm_standin_cupti.c reads them back through standin_busy_share() to make its samples.
 * Environment: STANDIN_CUINIT (cuInit's result, default 0), STANDIN_DEVICES (default 1).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#define EXPORT __attribute__((visibility("default")))

struct fn {
	int kind; /* 1 spin, 2 empty, 3 work */
};
static struct fn fns[4] = {{0}, {1}, {2}, {3}};
static int ctx_dummy, mod_dummy;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const char *busy_file(void)
{
	const char *f = getenv("STANDIN_BUSY_FILE");

	return f && *f ? f : NULL;
}

/* The fraction of [t0, t1] (CLOCK_REALTIME ns) that a spin kernel ran, in any process. */
EXPORT double standin_busy_share(uint64_t t0, uint64_t t1)
{
	static uint64_t (*r)[2];
	static size_t n, cap;
	static off_t seen;
	const char *path = busy_file();
	struct stat st;
	uint64_t cover = 0;
	size_t i;

	if (!path || t1 <= t0)
		return 0;
	if (!stat(path, &st) && st.st_size != seen) {
		FILE *f = fopen(path, "r");
		unsigned long long a, b;

		n = 0;
		while (f && fscanf(f, "%llu %llu", &a, &b) == 2) {
			if (n && r[n - 1][0] == a) { /* the end of a range that was running */
				r[n - 1][1] = b;
				continue;
			}
			if (n == cap) {
				cap = cap ? 2 * cap : 256;
				r = realloc(r, cap * sizeof(*r));
				if (!r)
					abort();
			}
			r[n][0] = a;
			r[n][1] = b ? b : UINT64_MAX;
			n++;
		}
		if (f)
			fclose(f);
		seen = st.st_size;
	}
	for (i = 0; i < n; i++) {
		uint64_t a = r[i][0] > t0 ? r[i][0] : t0, b = r[i][1] < t1 ? r[i][1] : t1;

		if (b > a)
			cover += b - a;
	}
	return cover >= t1 - t0 ? 1.0 : (double)cover / (double)(t1 - t0);
}

/* Appends "start end" to the busy file; end 0: still running. */
static int append_range(const char *path, uint64_t t0, uint64_t t1)
{
	char line[64];
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
	int len = snprintf(line, sizeof(line), "%llu %llu\n", (unsigned long long)t0,
			   (unsigned long long)t1);
	int err = fd < 0 || write(fd, line, (size_t)len) != len;

	if (fd >= 0)
		close(fd);
	return err;
}

EXPORT CUresult cuInit(unsigned int flags)
{
	const char *e = getenv("STANDIN_CUINIT");

	(void)flags;
	return e ? (CUresult)atoi(e) : CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
	const char *e = getenv("STANDIN_DEVICES");

	*count = e ? atoi(e) : 1;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **s)
{
	*s = r == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device is detected" : "stand-in error";
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	*d = ordinal;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	(void)d;
	snprintf(name, (size_t)len, "Stand-in GPU");
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
	(void)d;
	*v = a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? 4 : 0;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	*v = 13000;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	(void)d;
	*c = (CUcontext)&ctx_dummy;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
	(void)d;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
	return c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	if (!strstr(image, ".entry spin") || !strstr(image, ".entry empty") ||
	    !strstr(image, ".entry work"))
		return CUDA_ERROR_INVALID_PTX;
	*m = (CUmodule)&mod_dummy;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	(void)m;
	if (!strcmp(name, "spin"))
		*f = (CUfunction)&fns[1];
	else if (!strcmp(name, "empty"))
		*f = (CUfunction)&fns[2];
	else if (!strcmp(name, "work"))
		*f = (CUfunction)&fns[3];
	else
		return CUDA_ERROR_NOT_FOUND;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **args,
			       void **extra)
{
	struct fn *fn = (struct fn *)f;

	(void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)extra;
	if (!gx)
		return CUDA_ERROR_INVALID_VALUE;
	if (fn->kind == 1) { /* spin(dur, out): runs at once, synchronously */
		uint64_t dur = *(uint64_t *)args[0], out = *(uint64_t *)args[1];
		uint64_t t0 = now_ns(), t1;
		struct timespec ts = {.tv_sec = dur / 1000000000u, .tv_nsec = dur % 1000000000u};
		const char *path = busy_file();

		if (path && append_range(path, t0, 0)) /* open: a decode meanwhile sees it run */
			return CUDA_ERROR_UNKNOWN;
		nanosleep(&ts, NULL);
		t1 = now_ns();
		if (out) {
			((uint64_t *)(uintptr_t)out)[0] = t0;
			((uint64_t *)(uintptr_t)out)[1] = t1;
		}
		if (path && append_range(path, t0, t1))
			return CUDA_ERROR_UNKNOWN;
	} else if (fn->kind == 3) {
		struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000};

		nanosleep(&ts, NULL);
	} else if (fn->kind != 2) {
		return CUDA_ERROR_INVALID_HANDLE;
	}
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void)
{
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc(CUdeviceptr *p, size_t n)
{
	void *m = calloc(1, n);

	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (CUdeviceptr)(uintptr_t)m;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree(CUdeviceptr p)
{
	free((void *)(uintptr_t)p);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
	memcpy(dst, (void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n)
{
	memset((void *)(uintptr_t)p, v, n);
	return CUDA_SUCCESS;
}
