// SPDX-License-Identifier: Apache-2.0
/*
 * cupti_dump: the agent's cupti module alone, for the GPU machine (tests/device/): runs it with
 * the agent's symbolizer, swaps and encodes the batch every second like `gpuscope-agent run`,
 * and writes what the batches held into DIR: kernels.tsv (one gpu_kernel interval per line),
 * busy.tsv (gpu_busy), folded.txt (gpu_kernel_ns by stack, flame-graph folded format) and
 * stats.txt (the module's counters). Stops on SIGINT/SIGTERM. Linked statically so it runs on
 * whatever distribution the GPU machine has.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/cupti/cupti_usdt.h"
#include "agent/modules.h"
#include "agent/sym/symbolize.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"

#define FOLD_MAX 65536

static volatile sig_atomic_t stop;
static FILE *kernels_f, *busy_f;
static struct {
	char *stack;
	uint64_t ns;
} folds[FOLD_MAX];
static size_t nfolds;
static uint64_t encoded_bytes, nbatches, encode_ns;

static void on_signal(int sig)
{
	stop = 1;
}

static const char *pairs_get(const Gpuscope__V1__Batch *m, const uint32_t *p, size_t n,
			     const char *name)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		if (!strcmp(m->strings[p[i]], name))
			return m->strings[p[i + 1]];
	return "";
}

static void add_fold(const Gpuscope__V1__Batch *m, uint32_t sid, int64_t ns)
{
	char buf[8192];
	size_t len = 0;
	const Gpuscope__V1__Stack *st = m->stacks[sid];

	/* folded: outermost first, ';'-separated */
	for (size_t i = st->n_locations; i-- > 0 && len < sizeof(buf) - 256;) {
		const Gpuscope__V1__Location *l = m->locations[st->locations[i]];
		const char *fn = m->strings[l->function], *mod = m->strings[l->module];
		const char *base = strrchr(mod, '/');

		len += snprintf(buf + len, sizeof(buf) - len, "%s%s", len ? ";" : "",
				*fn ? fn : (base ? base + 1 : mod));
	}
	for (size_t i = 0; i < nfolds; i++)
		if (!strcmp(folds[i].stack, buf)) {
			folds[i].ns += ns;
			return;
		}
	if (nfolds < FOLD_MAX && (folds[nfolds].stack = strdup(buf)))
		folds[nfolds++].ns = ns;
}

static void flush(struct batch *b)
{
	Gpuscope__V1__Batch *m;
	uint8_t *buf = NULL;
	size_t len = 0;
	char err[256];
	uint64_t t0 = mono_ns();

	if (batch__encode(b, &buf, &len))
		return;
	encode_ns += mono_ns() - t0;
	encoded_bytes += len;
	nbatches++;
	m = batch_decode(buf, len, err, sizeof(err));
	free(buf);
	if (!m) {
		fprintf(stderr, "cupti_dump: decode: %s\n", err);
		return;
	}
	for (size_t i = 0; i < m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];
		const char *kind = m->strings[iv->kind];
		const Gpuscope__V1__LabelSet *ls = m->label_sets[iv->label_set];

		if (!strcmp(kind, "gpu_kernel"))
			fprintf(kernels_f, "%s\t%s\t%llu\t%llu\t%s\t%s\t%s\t%s\t%s\n",
				pairs_get(m, ls->pairs, ls->n_pairs, "pid"),
				pairs_get(m, ls->pairs, ls->n_pairs, "gpu"),
				(unsigned long long)iv->start_ns, (unsigned long long)iv->end_ns,
				pairs_get(m, iv->attrs, iv->n_attrs, "stream"),
				pairs_get(m, iv->attrs, iv->n_attrs, "graph_id"),
				iv->stack ? "1" : "0",
				pairs_get(m, iv->attrs, iv->n_attrs, "correlation_id"),
				pairs_get(m, iv->attrs, iv->n_attrs, "name"));
		else if (!strcmp(kind, "gpu_busy"))
			fprintf(busy_f, "%s\t%llu\t%llu\n",
				pairs_get(m, ls->pairs, ls->n_pairs, "gpu"),
				(unsigned long long)iv->start_ns, (unsigned long long)iv->end_ns);
	}
	for (size_t g = 0; g < m->n_samples; g++) {
		const Gpuscope__V1__SampleGroup *sg = m->samples[g];

		if (sg->kind == GPUSCOPE__V1__SAMPLE_KIND__SAMPLE_KIND_GPU_KERNEL_NS)
			for (size_t i = 0; i < sg->n_stack; i++)
				add_fold(m, sg->stack[i], sg->value[i]);
	}
	batch_decode_free(m);
}

int main(int argc, char **argv)
{
	struct agent a = { 0 };
	struct cupti_stats s;
	char path[4096];
	uint64_t next_flush;
	FILE *f;
	int err;

	if (argc != 2) {
		fprintf(stderr, "usage: cupti_dump DIR\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/kernels.tsv", argv[1]);
	kernels_f = fopen(path, "w");
	snprintf(path, sizeof(path), "%s/busy.tsv", argv[1]);
	busy_f = fopen(path, "w");
	if (!kernels_f || !busy_f) {
		perror("cupti_dump: open output");
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	a.opts.node = "device";
	a.mono_to_wall_ns = mono_to_wall_offset_ns();
	a.sym = symbolizer__new();
	a.batch = batch__new("device");
	if (!a.sym || !a.batch)
		return 1;
	err = cupti_module.start(&a);
	if (err) {
		fprintf(stderr, "cupti_dump: start: %s\n", strerror(-err));
		return 1;
	}
	printf("cupti_dump: running\n");
	fflush(stdout);
	next_flush = mono_ns() + NSEC_PER_SEC;
	while (!stop) {
		cupti_module.tick(&a);
		if (mono_ns() >= next_flush) {
			struct batch *old = a.batch;

			a.batch = batch__new("device");
			flush(old);
			batch__free(old);
			next_flush = mono_ns() + NSEC_PER_SEC;
		}
		usleep(20000);
	}
	cupti_module.tick(&a);
	cupti_usdt__stats(&s);
	cupti_module.stop(&a);
	flush(a.batch);
	fclose(kernels_f);
	fclose(busy_f);

	snprintf(path, sizeof(path), "%s/folded.txt", argv[1]);
	f = fopen(path, "w");
	for (size_t i = 0; f && i < nfolds; i++)
		fprintf(f, "%s %llu\n", folds[i].stack, (unsigned long long)folds[i].ns);
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "%s/stats.txt", argv[1]);
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "launches %llu\nrecords %llu\nkernels %llu\njoined %llu\nunjoined %llu\n"
			   "graph_kernels %llu\nmemcpys %llu\nmemsets %llu\nsyncs %llu\n"
			   "unknown_names %llu\nclock_pairs %llu\nclock_max_step_ns %llu\n"
			   "no_clock %llu\nlaunches_evicted %llu\nstacks_evicted %llu\n"
			   "stacks_symbolized %llu\nbusy_intervals %llu\nbusy_late %llu\n"
			   "batch_errors %llu\ncupti_drops %llu\nlib_drops %llu\n"
			   "bpf_ringbuf_lost %llu\nbpf_records_lost %llu\nbpf_ustack_fail %llu\n"
			   "bpf_launch_hits %llu\nbatches %llu\nencoded_bytes %llu\nencode_ns %llu\n",
			(unsigned long long)s.launches, (unsigned long long)s.records,
			(unsigned long long)s.kernels, (unsigned long long)s.joined,
			(unsigned long long)s.unjoined, (unsigned long long)s.graph_kernels,
			(unsigned long long)s.memcpys, (unsigned long long)s.memsets,
			(unsigned long long)s.syncs, (unsigned long long)s.unknown_names,
			(unsigned long long)s.clock_pairs, (unsigned long long)s.clock_max_step_ns,
			(unsigned long long)s.no_clock, (unsigned long long)s.launches_evicted,
			(unsigned long long)s.stacks_evicted, (unsigned long long)s.stacks_symbolized,
			(unsigned long long)s.busy_intervals, (unsigned long long)s.busy_late,
			(unsigned long long)s.batch_errors, (unsigned long long)s.cupti_drops,
			(unsigned long long)s.lib_drops,
			(unsigned long long)s.bpf[GPUSCOPE_CUPTI_ERR_RINGBUF],
			(unsigned long long)s.bpf[GPUSCOPE_CUPTI_ERR_RECS_LOST],
			(unsigned long long)s.bpf[GPUSCOPE_CUPTI_ERR_USTACK],
			(unsigned long long)s.bpf[GPUSCOPE_CUPTI_ERR_LAUNCHES],
			(unsigned long long)nbatches, (unsigned long long)encoded_bytes,
			(unsigned long long)encode_ns);
		fclose(f);
	}
	batch__free(a.batch);
	symbolizer__free(a.sym);
	return 0;
}
