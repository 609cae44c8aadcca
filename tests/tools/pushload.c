/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's real push code (src/agent/push: pusher, spool, batch sizing) under batches the
 * size of continuous CUDA tracing on the GPU machine: SAMPLES stack samples (CPU and
 * gpu_kernel_ns, 64 threads) and INTERVALS gpu_kernel intervals whose kernel names are
 * NAME_BYTES long (templated kernels: the attrs resolve to far more bytes than the compressed
 * body; --samples MIN-MAX: the batches' sizes spread over the range), every batch submitted to a pusher against a real server. Prints the pusher's counts
 * and metrics. With --raw, POSTs the first batch as it is (no sizing) and prints the HTTP code.
 * Usage: pushload --url URL [--batches 3] [--samples 150000|MIN-MAX] [--intervals 60000]
 *                 [--name-bytes 2048] [--spool DIR] [--raw]
 */
#include <curl/curl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "agent/http_client.h"
#include "agent/push/push.h"
#include "agent/push/spool.h"
#include "common/batch.h"
#include "common/compress.h"
#include "common/util.h"

#define NKERNELS 48
#define NTHREADS 64

static struct batch *make_batch(uint64_t t0, unsigned seq, unsigned nsamples, unsigned nivs,
				size_t name_bytes)
{
	struct batch *b = batch__new("pushload");
	static char *kernels[NKERNELS];
	char func[64], tid[16], corr[24];
	int64_t stacks[32];

	if (!b)
		return NULL;
	batch__set_period(b, 10101010);
	for (int k = 0; k < NKERNELS && !kernels[k]; k++) {
		kernels[k] = malloc(name_bytes + 1);
		if (!kernels[k])
			exit(1);
		/* cutlass-like: "void cutlass::Kernel<...>" padded with template arguments */
		snprintf(kernels[k], name_bytes + 1, "void cutlass::Kernel%d<cutlass::gemm::kernel::"
			 "GemmUniversal<", k);
		for (size_t n = strlen(kernels[k]); n < name_bytes; n++)
			kernels[k][n] = "cutlass::half_t, cutlass::layout::RowMajor, 128, 64, "[n % 52];
		kernels[k][name_bytes] = 0;
	}
	for (int s = 0; s < 32; s++) {
		struct location fr[12];

		for (int d = 0; d < 12; d++) {
			snprintf(func, sizeof(func), "torch::op_%d_%d", d, (s * 7 + d) % 29);
			fr[d] = (struct location){ .function = strdup(func), .module = "/usr/lib/libtorch.so",
						   .address = 0x1000 + (uint64_t)(s * 12 + d) * 16 };
		}
		stacks[s] = batch__stack(b, fr, 12);
		for (int d = 0; d < 12; d++)
			free((char *)fr[d].function);
		if (stacks[s] < 0)
			return NULL;
	}
	for (unsigned i = 0; i < nsamples; i++) {
		struct label l[3] = { { "pid", "4242" }, { "comm", "python3" }, { "tid", tid } };

		snprintf(tid, sizeof(tid), "%u", 5000 + i % NTHREADS);
		if (batch__sample(b, t0 + (uint64_t)seq * 1000000000ull + i * 1000ull, l, 3,
				  stacks[i % 32], i % 3 ? SAMPLE_CPU : SAMPLE_GPU_KERNEL_NS,
				  i % 3 ? 1 : 2000 + i % 500))
			return NULL;
	}
	for (unsigned i = 0; i < nivs; i++) {
		struct label l[2] = { { "pid", "4242" }, { "gpu", "0" } };
		struct label a[4] = { { "name", kernels[i % NKERNELS] }, { "stream", "7" },
				      { "device", "0" }, { "correlation", corr } };
		uint64_t st = t0 + (uint64_t)seq * 1000000000ull + i * 1500ull;

		snprintf(corr, sizeof(corr), "%u", seq * 1000000u + i);
		if (batch__interval(b, "gpu_kernel", l, 2, st, st + 1200, stacks[i % 32], a, 4))
			return NULL;
	}
	return b;
}

static size_t sink(void *p, size_t sz, size_t n, void *ctx)
{
	(void)p, (void)ctx;
	return sz * n;
}

/* POSTs one batch as it is (zstd), as an agent that does not size its batches would. */
static long post_raw(const char *url, struct batch *b)
{
	uint8_t *z = NULL;
	size_t zlen = 0, raw = 0;
	struct curl_slist *h = NULL;
	char full[512];
	long code = 0;
	CURL *c;

	if (push_encode(b, COMPRESS_ZSTD, &z, &zlen, &raw))
		return -1;
	snprintf(full, sizeof(full), "%s/api/v1/ingest", url);
	c = curl_easy_init();
	h = curl_slist_append(h, "Content-Encoding: zstd");
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, full);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, (const char *)z);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)zlen);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	fprintf(stderr, "raw batch: %zu bytes, %zu compressed: HTTP %ld\n", raw, zlen, code);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(z);
	return code;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "url", required_argument, NULL, 'u' },
		{ "batches", required_argument, NULL, 'b' },
		{ "samples", required_argument, NULL, 's' },
		{ "intervals", required_argument, NULL, 'i' },
		{ "name-bytes", required_argument, NULL, 'n' },
		{ "spool", required_argument, NULL, 'd' },
		{ "raw", no_argument, NULL, 'r' },
		{ 0 },
	};
	const char *url = NULL, *spool_dir = "/tmp/pushload-spool";
	unsigned nb = 3, ns = 150000, ns_max = 0, ni = 60000;
	size_t name_bytes = 2048;
	bool raw = false;
	struct push_counts pc;
	struct spool *sp;
	struct http_link *link;
	struct pusher *p;
	uint64_t t0 = wall_ns() - 60 * NSEC_PER_SEC, cpu0;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'u': url = optarg; break;
		case 'b': nb = (unsigned)atoi(optarg); break;
		case 's':
			ns = (unsigned)atoi(optarg);
			ns_max = strchr(optarg, '-') ? (unsigned)atoi(strchr(optarg, '-') + 1) : 0;
			break;
		case 'i': ni = (unsigned)atoi(optarg); break;
		case 'n': name_bytes = (size_t)atoi(optarg); break;
		case 'd': spool_dir = optarg; break;
		case 'r': raw = true; break;
		default: return 2;
		}
	}
	if (!url || name_bytes < 64 || name_bytes > 16000)
		return 2;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (raw) {
		struct batch *b = make_batch(t0, 0, ns, ni, name_bytes);

		printf("{\"raw_code\": %ld}\n", b ? post_raw(url, b) : -1L);
		batch__free(b);
		return 0;
	}
	sp = spool__open(spool_dir, 1ull << 30);
	if (!sp)
		return 1;
	link = http_link__new(&(struct http_link_opts){ .name = "server", .base_url = url,
							.timeout_ns = 60 * NSEC_PER_SEC });
	if (!link)
		return 1;
	p = pusher__new(&(struct pusher_opts){ .link = link, .compression = COMPRESS_ZSTD,
					       .timeout_ns = 60 * NSEC_PER_SEC }, sp);
	if (!p)
		return 1;
	cpu0 = mono_ns();
	for (unsigned i = 0; i < nb; i++) {
		unsigned n = ns_max > ns && nb > 1 ? ns + (ns_max - ns) * i / (nb - 1) : ns;
		struct batch *b = make_batch(t0, i, n, ni, name_bytes);

		if (!b || pusher__submit(p, b))
			return 1;
	}
	pusher__stop(p, mono_ns() + 120 * NSEC_PER_SEC);
	pusher__counts(p, &pc);
	printf("{\"submitted\": %" PRIu64 ", \"delivered\": %" PRIu64 ", \"rejected\": %" PRIu64
	       ", \"dropped\": %" PRIu64 ", \"spooled\": %" PRIu64 ", \"split_after_413\": %" PRIu64
	       ", \"seconds\": %.2f}\n",
	       pc.samples_submitted, pc.samples_pushed, pc.samples_rejected, pc.samples_dropped,
	       pc.spool_files, pc.batches_split, (double)(mono_ns() - cpu0) / 1e9);
	pusher__metrics(p, stdout);
	pusher__free(p);
	http_link__free(link);
	spool__free(sp);
	return 0;
}
