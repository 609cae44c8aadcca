// SPDX-License-Identifier: Apache-2.0
/*
 * Fixture loader for the web UI's end-to-end test and benchmark: builds batches with
 * src/common/batch.h holding a known dataset (the shares tests/integration/test_ui_e2e
 * expects are derived from the rules below) and POSTs them to a running gpuscope-server.
 */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/util.h"

#define MS NSEC_PER_MSEC
#define FLUSH_RECORDS 200000

struct loader {
	const char *url;
	CURL *curl;
	struct batch *b;
	size_t records;
	size_t posted, batches;
};

static int post(struct loader *l)
{
	struct curl_slist *hdr = NULL;
	uint8_t *buf = NULL;
	size_t len = 0;
	long code = 0;
	int err;

	if (!l->records)
		return 0;
	err = batch__encode(l->b, &buf, &len);
	if (err) {
		fprintf(stderr, "ui_fixture: encode: %s\n", strerror(-err));
		return err;
	}
	hdr = curl_slist_append(hdr, "Content-Type: application/x-protobuf");
	curl_easy_setopt(l->curl, CURLOPT_URL, l->url);
	curl_easy_setopt(l->curl, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(l->curl, CURLOPT_POSTFIELDS, (const char *)buf);
	curl_easy_setopt(l->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	curl_easy_setopt(l->curl, CURLOPT_TIMEOUT, 120L);
	if (curl_easy_perform(l->curl) != CURLE_OK) {
		fprintf(stderr, "ui_fixture: POST %s failed\n", l->url);
		err = -EIO;
		goto out;
	}
	curl_easy_getinfo(l->curl, CURLINFO_RESPONSE_CODE, &code);
	if (code / 100 != 2) {
		fprintf(stderr, "ui_fixture: POST %s: HTTP %ld\n", l->url, code);
		err = -EIO;
		goto out;
	}
	l->posted += l->records;
	l->batches++;
	l->records = 0;
	batch__reset(l->b);
out:
	curl_slist_free_all(hdr);
	free(buf);
	return err;
}

/* Counts a record and flushes a full batch; -errno on failure. */
static int added(struct loader *l, int err)
{
	if (err)
		return err;
	if (++l->records >= FLUSH_RECORDS)
		return post(l);
	return 0;
}

#define TRY(x)                                                                                    \
	do {                                                                                       \
		int e_ = (x);                                                                      \
		if (e_)                                                                            \
			return e_;                                                                 \
	} while (0)

/* A stack from function names, innermost first. */
static int64_t stack(struct loader *l, const char *const *fns, size_t n)
{
	struct location loc[16];
	size_t i;

	for (i = 0; i < n && i < 16; i++) {
		memset(&loc[i], 0, sizeof(loc[i]));
		loc[i].function = fns[i];
		loc[i].module = "/opt/train/bin/train";
		loc[i].address = 0x1000 + 0x40 * i + (hash64(fns[i], strlen(fns[i]), 0) & 0xfff);
	}
	return batch__stack(l->b, loc, n);
}
#define STACK(l, ...) stack(l, (const char *const[]){ __VA_ARGS__ }, \
			    sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(const char *))

static int sample(struct loader *l, uint64_t t, const char *pid, const char *tid, const char *comm,
		  int64_t st, enum sample_kind kind, int64_t v)
{
	struct label lb[] = { { "comm", comm }, { "pid", pid }, { "thread", comm }, { "tid", tid } };

	if (st < 0)
		return (int)st;
	return added(l, batch__sample(l->b, t, lb, 4, st, kind, v));
}

static int thread_state(struct loader *l, uint64_t s, uint64_t e, const char *pid, const char *tid,
			const char *thread, const char *state, const char *reason, int64_t st)
{
	struct label lb[] = { { "comm", "train" }, { "pid", pid }, { "thread", thread }, { "tid", tid } };
	struct label at[2] = { { "state", state } };
	size_t na = 1;

	if (reason)
		at[na++] = (struct label){ "reason", reason };
	return added(l, batch__interval(l->b, "thread_state", lb, 4, s, e, st >= 0 ? st : -1, at,
					na));
}

static int kernel(struct loader *l, uint64_t s, uint64_t e, const char *gpu, const char *pid,
		  const char *name, const char *stream, int64_t st, unsigned corr)
{
	struct label lb[] = { { "gpu", gpu }, { "pid", pid } };
	char c[16];
	struct label at[] = { { "name", name }, { "stream", stream }, { "device", gpu },
			      { "correlation_id", c } };

	snprintf(c, sizeof(c), "%u", corr);
	TRY(added(l, batch__interval(l->b, "gpu_kernel", lb, 2, s, e, st, at, 4)));
	/* GPU time attributed to the launching CPU stack */
	return sample(l, s, pid, pid, "train", st, SAMPLE_GPU_KERNEL_NS, (int64_t)(e - s));
}

static int metric(struct loader *l, const char *name, const char *gpu, uint64_t t, double v)
{
	char uuid[48];
	struct label lb[] = { { "gpu", gpu }, { "gpu_uuid", uuid } };

	snprintf(uuid, sizeof(uuid), "GPU-5e1f0c2a-0000-4000-8000-00000000000%s", gpu);
	return added(l, batch__metric(l->b, name, lb, 2, t, v));
}

/* Deterministic noise in [0, 1). */
static double noise(uint64_t k)
{
	return (double)(hash64(&k, sizeof(k), 7) % 10000) / 10000.0;
}

/*
 * The e2e dataset, 60 s from t0 on node-a (2 GPUs, process 100 "train" and 200 "logger") and
 * node-b (CPU only, process 300 "infer"). GPU 0 is busy in [0,20) and [30,50) s, GPU 1 in
 * [0,40) s. CPU samples every 10 ms: while GPU 0 is busy, tid 100 runs
 * main>train_step>model_forward (k%5 < 3) or model_backward; while it is idle, tid 101 runs
 * main>DataLoader.next>decode_jpeg (k%4 < 3) or read_file. The logger samples
 * main>log_flush>write every 100 ms at +50 ms. node-b samples main>serve>matmul every 10 ms.
 */
static bool gpu0_busy(uint64_t off_ms)
{
	return off_ms < 20000 || (off_ms >= 30000 && off_ms < 50000);
}

static int load_e2e(struct loader *l, uint64_t t0)
{
	int64_t s_fwd, s_bwd, s_dec, s_read, s_log, s_futex, s_sleep, s_sync, s_launch_f, s_launch_b,
		s_launch1, s_io;
	uint64_t k, c;
	unsigned corr = 1;

	s_fwd = STACK(l, "model_forward", "train_step", "main");
	s_bwd = STACK(l, "model_backward", "train_step", "main");
	s_dec = STACK(l, "decode_jpeg", "DataLoader.next", "main");
	s_read = STACK(l, "read_file", "DataLoader.next", "main");
	s_log = STACK(l, "write", "log_flush", "main");
	s_futex = STACK(l, "futex_wait", "queue_get", "train_step", "main");
	s_sleep = STACK(l, "nanosleep", "DataLoader.prefetch", "main");
	s_io = STACK(l, "io_schedule", "pin_memory_batch", "pin_memory_loop");
	s_sync = STACK(l, "cudaStreamSynchronize", "train_step", "main");
	s_launch_f = STACK(l, "cudaLaunchKernel", "model_forward", "train_step", "main");
	s_launch_b = STACK(l, "cudaLaunchKernel", "model_backward", "train_step", "main");
	s_launch1 = STACK(l, "cudaLaunchKernel", "attention_forward", "train_step", "main");

	for (k = 0; k < 6000; k++) {
		uint64_t off = k * 10, t = t0 + off * MS + 5 * MS;

		if (gpu0_busy(off))
			TRY(sample(l, t, "100", "100", "train", k % 5 < 3 ? s_fwd : s_bwd, SAMPLE_CPU, 1));
		else
			TRY(sample(l, t, "100", "101", "train", k % 4 < 3 ? s_dec : s_read, SAMPLE_CPU, 1));
		if (k % 10 == 5)
			TRY(sample(l, t0 + off * MS, "200", "200", "logger", s_log, SAMPLE_CPU, 1));
		/* metrics every 10 ms for both GPUs */
		for (c = 0; c < 2; c++) {
			const char *g = c ? "1" : "0";
			bool busy = c ? off < 40000 : gpu0_busy(off);
			uint64_t tm = t0 + off * MS;
			double n = noise(k * 2 + c);

			TRY(metric(l, "gpu_utilization", g, tm, busy ? 100 : 0));
			TRY(metric(l, "gpu_sm_active", g, tm, busy ? 0.80 + 0.1 * n : 0));
			TRY(metric(l, "gpu_tensor_active", g, tm, busy ? 0.45 + 0.2 * n : 0));
			TRY(metric(l, "gpu_memory_used_bytes", g, tm, (c ? 30.0 : 52.0) * (1ull << 30) +
				   (double)off / 60000.0 * 8 * (1ull << 30)));
			TRY(metric(l, "gpu_memory_total_bytes", g, tm, 141.0 * (1ull << 30)));
			TRY(metric(l, "gpu_power_watts", g, tm, busy ? 520 + 120 * n : 85 + 10 * n));
		}
	}
	/* GPU 0: kernels back to back in busy windows, 100 ms cycles on two streams */
	for (c = 0; c < 600; c++) {
		uint64_t off = c * 100, s = t0 + off * MS;

		if (!gpu0_busy(off))
			continue;
		TRY(kernel(l, s, s + 70 * MS, "0", "100", "ampere_sgemm_128x64_tn", "7",
			   c % 5 < 3 ? s_launch_f : s_launch_b, corr++));
		TRY(kernel(l, s + 70 * MS, s + 100 * MS, "0", "100",
			   "vectorized_elementwise_kernel<4, AddFunctor>", "13", s_launch_b, corr++));
		/* train thread: 90 ms running, 10 ms runnable */
		TRY(thread_state(l, s, s + 90 * MS, "100", "100", "train", "running", NULL, -1));
		TRY(thread_state(l, s + 90 * MS, s + 100 * MS, "100", "100", "train", "runnable", NULL, -1));
		if (c % 10 == 9)
			TRY(sample(l, s + 95 * MS, "100", "100", "train", s_sync, SAMPLE_CUDA_SYNC_NS, 5 * MS));
	}
	/* GPU 1: one long kernel per 100 ms in [0,40) s */
	for (c = 0; c < 400; c++) {
		uint64_t s = t0 + c * 100 * MS;

		TRY(kernel(l, s, s + 100 * MS, "1", "100", "flash_fwd_kernel", "21", s_launch1, corr++));
	}
	/* gpu_busy = union of kernels */
	{
		struct label g0[] = { { "gpu", "0" } }, g1[] = { { "gpu", "1" } };

		TRY(added(l, batch__interval(l->b, "gpu_busy", g0, 1, t0, t0 + 20000 * MS, -1, NULL, 0)));
		TRY(added(l, batch__interval(l->b, "gpu_busy", g0, 1, t0 + 30000 * MS, t0 + 50000 * MS, -1, NULL, 0)));
		TRY(added(l, batch__interval(l->b, "gpu_busy", g1, 1, t0, t0 + 40000 * MS, -1, NULL, 0)));
		/*
		 * Which source decided busy/idle. GPU 0: the whole minute, by sources that decide
		 * exactly (a capture window, then GPM, then NVML), so its GPU-idle answers count
		 * each sample once. GPU 1: NVML [0,40) s, GPM [40,44), a budget (duty-cycle) window
		 * [44,47), then nothing: [47,60) is unknown, and its GPU-idle answers estimate it
		 * from the window's samples.
		 */
		static const struct { const char *gpu, *source, *reason; uint64_t s, e; } obs[] = {
			{ "0", "kernels", "capture", 0, 35000 },
			{ "0", "gpm", NULL, 35000, 50000 },
			{ "0", "nvml", NULL, 50000, 60000 },
			{ "1", "nvml", NULL, 0, 40000 },
			{ "1", "gpm", NULL, 40000, 44000 },
			{ "1", "kernels", "budget", 44000, 47000 },
		};
		size_t i;

		for (i = 0; i < sizeof(obs) / sizeof(obs[0]); i++) {
			struct label lb[3] = { { "gpu", obs[i].gpu }, { "source", obs[i].source } };

			if (obs[i].reason) {	/* labels in name order */
				lb[1] = (struct label){ "reason", obs[i].reason };
				lb[2] = (struct label){ "source", obs[i].source };
			}
			uint64_t a = t0 + obs[i].s * MS, z = t0 + obs[i].e * MS;

			TRY(added(l, batch__interval(l->b, "gpu_observed", lb, obs[i].reason ? 3 : 2, a,
						     z, -1, NULL, 0)));
		}
	}
	/* idle windows: train blocks on the data queue, the loader runs; busy: loader sleeps */
	{
		static const uint64_t idle[][2] = { { 20000, 30000 }, { 50000, 60000 } };
		static const uint64_t busy[][2] = { { 0, 20000 }, { 30000, 50000 } };
		size_t i;

		for (i = 0; i < 2; i++) {
			uint64_t a = t0 + idle[i][0] * MS, z = t0 + idle[i][1] * MS, t;

			TRY(thread_state(l, a, z, "100", "100", "train", "blocked", "futex", s_futex));
			TRY(sample(l, a, "100", "100", "train", s_futex, SAMPLE_OFFCPU_NS, (int64_t)(z - a)));
			for (t = a; t < z; t += 200 * MS) {
				TRY(thread_state(l, t, t + 190 * MS, "100", "101", "dataloader", "running", NULL, -1));
				TRY(thread_state(l, t + 190 * MS, t + 200 * MS, "100", "101", "dataloader", "runnable", NULL, -1));
			}
			a = t0 + busy[i][0] * MS, z = t0 + busy[i][1] * MS;
			TRY(thread_state(l, a, z, "100", "101", "dataloader", "blocked", "sleep", s_sleep));
			TRY(sample(l, a, "100", "101", "dataloader", s_sleep, SAMPLE_OFFCPU_NS, (int64_t)(z - a)));
		}
	}
	/* pin_memory thread: 50 ms running, 450 ms blocked on io */
	for (k = 0; k < 120; k++) {
		uint64_t s = t0 + k * 500 * MS;

		TRY(thread_state(l, s, s + 50 * MS, "100", "102", "pin_memory", "running", NULL, -1));
		TRY(thread_state(l, s + 50 * MS, s + 500 * MS, "100", "102", "pin_memory", "blocked", "io", s_io));
		TRY(sample(l, s + 50 * MS, "100", "102", "pin_memory", s_io, SAMPLE_OFFCPU_NS, 450 * (int64_t)MS));
	}
	return 0;
}

static int load_node_b(struct loader *l, uint64_t t0)
{
	int64_t s = STACK(l, "matmul", "serve", "main");
	uint64_t k;

	for (k = 0; k < 6000; k++)
		TRY(sample(l, t0 + k * 10 * MS + 5 * MS, "300", "300", "infer", s, SAMPLE_CPU, 1));
	return 0;
}

/*
 * Benchmark dataset: one node with `gpus` GPUs over `secs` seconds: metrics every metric_ms,
 * GPU 0's power every power_ms, busy 8 s of every 10 s; GPU 0 also runs 50 ms kernels back to
 * back on two streams while busy; 4 threads of process 1000 alternate 800 ms running / 200 ms
 * blocked and are sampled at 99 Hz, each sample one of 4096 synthetic stacks 3-7 frames deep.
 */
static int load_bench(struct loader *l, uint64_t t0, unsigned secs, unsigned gpus, unsigned metric_ms,
		      unsigned power_ms)
{
	static const char *const names[] = { "main", "train_step", "model_forward", "model_backward",
		"optimizer_step", "DataLoader.next", "decode_jpeg", "collate", "all_reduce", "matmul" };
	char fn[8][32];
	const char *fr[8];
	uint64_t t, end = t0 + (uint64_t)secs * NSEC_PER_SEC, k = 0;
	unsigned g;

	for (g = 0; g < gpus; g++) {
		char gs[16];

		snprintf(gs, sizeof(gs), "%u", g);
		for (t = t0, k = 0; t < end; t += (uint64_t)metric_ms * MS, k++) {
			double n = noise(k * 16 + g);
			bool busy = (k / 50 + g) % 5 != 0;

			TRY(metric(l, "gpu_utilization", gs, t, busy ? 90 + 10 * n : 5 * n));
			TRY(metric(l, "gpu_sm_active", gs, t, busy ? 0.7 + 0.2 * n : 0.02));
			TRY(metric(l, "gpu_tensor_active", gs, t, busy ? 0.4 + 0.3 * n : 0));
			TRY(metric(l, "gpu_memory_used_bytes", gs, t, 60.0 * (1ull << 30) + n * (1ull << 30)));
			TRY(metric(l, "gpu_memory_total_bytes", gs, t, 141.0 * (1ull << 30)));
		}
		/* power: every power_ms on GPU 0 (the NVML fast path), every metric_ms elsewhere */
		for (t = t0, k = 0; t < end; t += (uint64_t)(g ? metric_ms : power_ms) * MS, k++)
			TRY(metric(l, "gpu_power_watts", gs, t, 300 + 350 * noise(k * 16 + g)));
		/* busy intervals: 8 s busy, 2 s idle */
		for (t = t0; t < end; t += 10 * NSEC_PER_SEC) {
			struct label lb[] = { { "gpu", gs } };

			TRY(added(l, batch__interval(l->b, "gpu_busy", lb, 1, t, t + 8 * NSEC_PER_SEC, -1, NULL, 0)));
			TRY(added(l, batch__interval(l->b, "gpu_observed", lb, 1, t, t + 10 * NSEC_PER_SEC,
						     -1, NULL, 0)));
		}
		TRY(post(l));
	}
	/* GPU 0 kernels, 50 ms, alternating streams, in the busy 8 s of every 10 s */
	for (t = t0, k = 0; t < end; t += 50 * MS, k++) {
		int64_t st = STACK(l, "cudaLaunchKernel", "model_forward_0", "train_step_0", "main_0");

		if ((t - t0) % (10 * NSEC_PER_SEC) >= 8 * NSEC_PER_SEC)
			continue;
		TRY(kernel(l, t, t + 50 * MS, "0", "1000", k % 3 ? "ampere_sgemm_128x64_tn" :
			   "flash_fwd_kernel", k % 2 ? "7" : "13", st, (unsigned)k));
	}
	/* thread states: 800 ms running, 200 ms blocked */
	for (t = t0; t < end; t += NSEC_PER_SEC) {
		static const char *const tids[] = { "1000", "1001", "1002", "1003" };
		int64_t st = STACK(l, "futex_wait", "queue_get", "main_0");
		unsigned th;

		for (th = 0; th < 4; th++) {
			TRY(thread_state(l, t, t + 800 * MS, "1000", tids[th], "train", "running", NULL, -1));
			TRY(thread_state(l, t + 800 * MS, t + NSEC_PER_SEC, "1000", tids[th], "train", "blocked",
					 "futex", st));
		}
	}
	/* CPU samples: 4 threads at 99 Hz, each from one of 4096 synthetic stacks */
	for (t = t0, k = 0; t < end; t += NSEC_PER_SEC / 99, k++) {
		unsigned th;

		for (th = 0; th < 4; th++) {
			uint64_t which = hash64(&k, sizeof(k), th) % 4096;
			uint64_t h = hash64(&which, sizeof(which), 99);
			char tid[16];
			int d, depth = 3 + (int)(h % 5);

			for (d = 0; d < depth; d++) {
				snprintf(fn[d], sizeof(fn[d]), "%s_%u", names[(h >> (d * 4)) % 10],
					 (unsigned)((h >> (d * 3 + 20)) % 10));
				fr[depth - 1 - d] = fn[d];
			}
			snprintf(tid, sizeof(tid), "%u", 1000 + th);
			TRY(sample(l, t, "1000", tid, "train", stack(l, fr, (size_t)depth), SAMPLE_CPU, 1));
		}
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: ui_fixture --server URL --t0 UNIX_SECONDS [--dataset e2e|bench]\n"
		   "                  [--secs N] [--gpus N] [--metric-ms N] [--power-ms N]\n"
		   "Loads a known dataset into a gpuscope-server (POST URL/api/v1/ingest).\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", required_argument, NULL, 's' }, { "t0", required_argument, NULL, 't' },
		{ "dataset", required_argument, NULL, 'd' }, { "secs", required_argument, NULL, 'n' },
		{ "gpus", required_argument, NULL, 'g' }, { "metric-ms", required_argument, NULL, 'm' },
		{ "power-ms", required_argument, NULL, 'p' }, { "help", no_argument, NULL, 'h' },
		{ 0 } };
	const char *server = NULL, *dataset = "e2e";
	unsigned secs = 3600, gpus = 8, metric_ms = 100, power_ms = 1;
	struct loader l = { 0 };
	char url[512];
	uint64_t t0 = 0;
	int c, err = 0;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': server = optarg; break;
		case 't': err = parse_time_ns(optarg, &t0); break;
		case 'd': dataset = optarg; break;
		case 'n': secs = (unsigned)atoi(optarg); break;
		case 'g': gpus = (unsigned)atoi(optarg); break;
		case 'm': metric_ms = (unsigned)atoi(optarg); break;
		case 'p': power_ms = (unsigned)atoi(optarg); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!server || !t0 || err || !metric_ms || !power_ms) {
		usage(stderr);
		return 2;
	}
	snprintf(url, sizeof(url), "%s/api/v1/ingest", server);
	l.url = url;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	l.curl = curl_easy_init();
	if (!l.curl) {
		err = -ENOMEM;
		goto out;
	}
	if (!strcmp(dataset, "e2e")) {
		l.b = batch__new("node-a");
		if (!l.b || (err = load_e2e(&l, t0)) || (err = post(&l)))
			goto out;
		batch__free(l.b);
		l.b = batch__new("node-b");
		if (!l.b || (err = load_node_b(&l, t0)) || (err = post(&l)))
			goto out;
	} else if (!strcmp(dataset, "bench")) {
		l.b = batch__new("bench-node");
		if (!l.b || (err = load_bench(&l, t0, secs, gpus, metric_ms, power_ms)) || (err = post(&l)))
			goto out;
	} else {
		usage(stderr);
		err = -EINVAL;
		goto out;
	}
	printf("{\"records\": %zu, \"batches\": %zu}\n", l.posted, l.batches);
out:
	if (!l.b && !err)
		err = -errno;
	batch__free(l.b);
	if (l.curl)
		curl_easy_cleanup(l.curl);
	curl_global_cleanup();
	if (err)
		fprintf(stderr, "ui_fixture: %s\n", strerror(-err));
	return err ? 1 : 0;
}
