/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's push-path cost on a realistic batch: 16 CPUs sampled at 99 Hz for one push interval
 * (10 s: 15 840 samples), a few thousand distinct stacks 10-60 frames deep sharing prefixes, the
 * label set of 64 threads in 4 processes. Measures CPU time to build the batch, encode it
 * (protobuf) and compress it (zstd, gzip, none), interleaved, and the bytes per sample on the wire;
 * and the push's fit check of the zstd batch (src/agent/push/fit.c) both ways, interleaved: the
 * bound from the batch's counts, and the server's decoder (batch_fits()).
 * Usage: push_bench [REPS=15] [STACKS=3000] [SAMPLES=15840]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/compress.h"
#include "agent/push/fit.h"
#include "agent/push/push.h"
#include "common/batch.h"
#include "common/util.h"

#define NFUNCS	 600
#define NMODULES 12
#define MAXDEPTH 60
#define FIT_ROUNDS 5	/* fit checks each way per repetition */

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

static unsigned long long rng = 0x853c49e6748fea9bULL;
static unsigned rnd(unsigned n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)(rng % n);
}

static const char *const modules[NMODULES] = {
	"/usr/lib/x86_64-linux-gnu/libc.so.6",
	"/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
	"/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
	"/opt/conda/lib/python3.11/site-packages/torch/lib/libc10.so",
	"/opt/conda/bin/python3.11",
	"/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15",
	"/opt/conda/lib/libstdc++.so.6",
	"/opt/conda/lib/python3.11/site-packages/numpy/core/_multiarray_umath.cpython-311.so",
	"/usr/lib/x86_64-linux-gnu/libpthread.so.0",
	"/opt/conda/lib/python3.11/lib-dynload/_pickle.cpython-311-x86_64-linux-gnu.so",
	"/usr/lib/x86_64-linux-gnu/libnccl.so.2",
	"[kernel.kallsyms]",
};
static const char *const stems[] = {
	"at::native::", "torch::autograd::", "c10::impl::", "_PyEval_", "PyObject_", "cudaLaunch",
	"std::_Function_handler<", "__GI___", "do_syscall_", "ncclKernel_", "at::TensorIterator::",
	"pybind11::detail::",
};

struct func {
	char name[96];
	char build_id[41];
	int module;
};

static struct func funcs[NFUNCS];
static struct location (*stacks)[MAXDEPTH];
static int *depth;

static void make_world(int nstacks)
{
	for (int i = 0; i < NFUNCS; i++) {
		struct func *f = &funcs[i];

		f->module = i < 60 ? NMODULES - 1 : rnd(NMODULES - 1);
		snprintf(f->name, sizeof(f->name), "%s%s_%d%s", stems[rnd(ARRAY_SIZE(stems))],
			 i < 60 ? "kfunc" : "op", i, rnd(3) ? "" : "(at::Tensor const&, c10::Scalar)");
		for (int k = 0; k < 40; k++)
			f->build_id[k] = "0123456789abcdef"[(f->module * 7 + k * 13) % 16];
	}
	stacks = calloc(nstacks, sizeof(*stacks));
	depth = calloc(nstacks, sizeof(*depth));
	/* Stacks grow from shared prefixes: each new stack copies a random earlier one's prefix. */
	for (int s = 0; s < nstacks; s++) {
		int d = 10 + rnd(MAXDEPTH - 10), keep = 0;

		if (s > 0) {
			int from = rnd(s);

			keep = depth[from] * (40 + rnd(50)) / 100;
			if (keep > d)
				keep = d;
			memcpy(stacks[s], stacks[from], keep * sizeof(struct location));
		}
		for (int k = keep; k < d; k++) {
			/* Outermost frames are user code, the innermost few may be kernel. */
			bool kern = k >= d - 4 && rnd(2);
			struct func *f = &funcs[kern ? rnd(60) : 60 + rnd(NFUNCS - 60)];

			stacks[s][k] = (struct location){
				.function = f->name,
				.module = modules[f->module],
				.build_id = kern ? NULL : f->build_id,
				.address = 0x1000 + (uint64_t)rnd(1 << 24),
				.kernel = kern,
			};
		}
		depth[s] = d;
	}
}

/* One push interval's worth of samples; returns CPU ns spent in the batch calls. */
static uint64_t fill(struct batch *b, int nstacks, int nsamples)
{
	char pids[4][16], tids[64][16], threads[64][16];
	static const char *const comms[4] = { "python3", "pt_main_thread", "ray::Worker", "nvidia-smi" };
	uint64_t t = 1764669720ull * NSEC_PER_SEC, t0 = cpu_ns();

	for (int i = 0; i < 4; i++)
		snprintf(pids[i], sizeof(pids[i]), "%d", 41000 + i * 97);
	for (int i = 0; i < 64; i++) {
		snprintf(tids[i], sizeof(tids[i]), "%d", 41000 + (i % 4) * 97 + i / 4);
		if (i / 4)
			snprintf(threads[i], sizeof(threads[i]), "pt_worker_%d", i / 4);
		else
			snprintf(threads[i], sizeof(threads[i]), "%s", comms[i % 4]);
	}
	for (int i = 0; i < nsamples; i++) {
		/* Zipf-like: a few hot stacks, a long tail. */
		int s = (int)((double)nstacks * (rnd(1000) / 1000.0) * (rnd(1000) / 1000.0) *
			      (rnd(1000) / 1000.0));
		int th = rnd(64);
		struct label l[5] = {
			{ "node", "gpu-node-7" }, { "pid", pids[th % 4] }, { "comm", comms[th % 4] },
			{ "tid", tids[th] }, { "thread", threads[th] },
		};
		int64_t id = batch__stack(b, stacks[s], depth[s]);

		t += 1000000000ull / (99 * 16) + rnd(20000);
		if (id < 0 || batch__sample(b, t, l, 5, id, SAMPLE_CPU, 1)) {
			fprintf(stderr, "batch error\n");
			exit(1);
		}
	}
	return cpu_ns() - t0;
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 15, nstacks = argc > 2 ? atoi(argv[2]) : 3000;
	int nsamples = argc > 3 ? atoi(argv[3]) : 15840;
	static const enum compression codecs[] = { COMPRESS_ZSTD, COMPRESS_GZIP, COMPRESS_NONE };
	double enc_ms[3] = { 0 }, comp_ms[3] = { 0 }, fill_ms = 0, fit_us[2] = { 0 };
	struct ingest_limits lim;
	unsigned fit_yes[2] = { 0 };
	size_t raw_len = 0, wire[3] = { 0 };

	ingest_limits_default(&lim);
	make_world(nstacks);
	for (int r = 0; r < reps; r++) {
		struct batch *b = batch__new("gpuscope-bench");

		fill_ms += fill(b, nstacks, nsamples) / 1e6;
		/* Interleave the codecs and rotate their order each repetition. */
		for (int c = 0; c < 3; c++) {
			int k = (c + r) % 3;
			uint8_t *raw = NULL, *out = NULL;
			size_t rl = 0, ol = 0;
			uint64_t t0 = cpu_ns(), t1;

			if (batch__encode(b, &raw, &rl)) {
				fprintf(stderr, "encode failed\n");
				return 1;
			}
			t1 = cpu_ns();
			if (compress_buf(codecs[k], raw, rl, &out, &ol)) {
				fprintf(stderr, "compress failed\n");
				return 1;
			}
			enc_ms[k] += (t1 - t0) / 1e6;
			comp_ms[k] += (cpu_ns() - t1) / 1e6;
			/* The fit check as the push runs it: FIT_ROUNDS of each way, order rotated. */
			for (int f = 0; k == 0 && f < 2 * FIT_ROUNDS; f++) {
				bool bound = (f + r) % 2;
				uint64_t t2 = cpu_ns();
				struct batch_counts bc;
				bool yes;

				if (bound) {
					batch__counts(b, &bc);
					yes = batch_fits_bound(&lim, &bc, rl, ol);
				} else {
					yes = batch_fits(&lim, raw, rl, ol);
				}
				fit_us[bound] += (cpu_ns() - t2) / 1e3;
				fit_yes[bound] += yes;
			}
			raw_len = rl;
			wire[k] = ol;
			free(raw);
			free(out);
		}
		batch__free(b);
	}
	printf("batch: %d samples, %d distinct stacks (10-60 frames), 64 threads; %d repetitions\n",
	       nsamples, nstacks, reps);
	printf("build (batch__stack + batch__sample): %.2f ms CPU per batch, %.0f ns per sample\n",
	       fill_ms / reps, fill_ms / reps * 1e6 / nsamples);
	printf("%-9s %12s %12s %12s %12s %14s %10s\n", "codec", "encode ms", "compress ms",
	       "total ms", "wire bytes", "bytes/sample", "ratio");
	for (int k = 0; k < 3; k++)
		printf("%-9s %12.2f %12.2f %12.2f %12zu %14.2f %10.2f\n", compression_name(codecs[k]),
		       enc_ms[k] / reps, comp_ms[k] / reps, (enc_ms[k] + comp_ms[k]) / reps, wire[k],
		       (double)wire[k] / nsamples, (double)raw_len / wire[k]);
	printf("fit check of the zstd batch, per check: bound (batch__counts + batch_fits_bound) "
	       "%.2f us (fits %u/%d), decoded (batch_fits) %.1f us (fits %u/%d)\n",
	       fit_us[1] / (reps * FIT_ROUNDS), fit_yes[1], reps * FIT_ROUNDS,
	       fit_us[0] / (reps * FIT_ROUNDS), fit_yes[0], reps * FIT_ROUNDS);
	printf("cost vs zstd: gzip %.2fx CPU, %.2fx bytes\n",
	       (enc_ms[1] + comp_ms[1]) / (enc_ms[0] + comp_ms[0]), (double)wire[1] / wire[0]);
	return 0;
}
