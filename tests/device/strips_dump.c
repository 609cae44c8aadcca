// SPDX-License-Identifier: Apache-2.0
/*
 * Runs the agent's thread-state and CUDA API modules (and NVML when linked and asked for) with
 * no server, and writes every record they produce as JSON lines, for checks on the GPU machine
 * and for bench/sched-overhead. Stops at SIGINT/SIGTERM or after --duration.
 * Usage: strips-dump OUT.jsonl [--pid PID]... [--all-processes] [--duration SECONDS] [--nvml]
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/bpfutil.h"
#include "agent/sym/stacks.h"
#include "agent/sym/symbolize.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"

#include "agent/modules.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

static const char *S(const Gpuscope__V1__Batch *m, uint32_t i)
{
	return i < m->n_strings ? m->strings[i] : "";
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void pairs(FILE *f, const Gpuscope__V1__Batch *m, const uint32_t *p, size_t n)
{
	fputc('{', f);
	for (size_t i = 0; i + 1 < n; i += 2) {
		if (i)
			fputc(',', f);
		json_str(f, S(m, p[i]));
		fputc(':', f);
		json_str(f, S(m, p[i + 1]));
	}
	fputc('}', f);
}

static void frames(FILE *f, const Gpuscope__V1__Batch *m, uint32_t stack)
{
	const Gpuscope__V1__Stack *st = stack < m->n_stacks ? m->stacks[stack] : NULL;

	fputs(",\"frames\":[", f);
	for (size_t j = 0; st && j < st->n_locations; j++) {
		const Gpuscope__V1__Location *l = m->locations[st->locations[j]];
		const char *fn = S(m, l->function);

		if (j)
			fputc(',', f);
		json_str(f, *fn ? fn : S(m, l->module));
	}
	fputc(']', f);
}

/* Writes the batch's records as JSON lines and empties it. */
static int flush(struct agent *a, FILE *out, uint64_t *nrec)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	char err[256];
	Gpuscope__V1__Batch *m;
	int ret = batch__encode(a->batch, &buf, &len);

	if (ret)
		return ret;
	m = batch_decode(buf, len, err, sizeof(err));
	free(buf);
	if (!m) {
		fprintf(stderr, "strips-dump: decode: %s\n", err);
		return -EINVAL;
	}
	for (size_t i = 0; i < m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];
		long sid = -1;

		fprintf(out, "{\"t\":\"interval\",\"kind\":");
		json_str(out, S(m, iv->kind));
		fprintf(out, ",\"start_ns\":%llu,\"end_ns\":%llu,\"labels\":",
			(unsigned long long)iv->start_ns, (unsigned long long)iv->end_ns);
		pairs(out, m, m->label_sets[iv->label_set]->pairs,
		      m->label_sets[iv->label_set]->n_pairs);
		fputs(",\"attrs\":", out);
		pairs(out, m, iv->attrs, iv->n_attrs);
		if (iv->stack)
			sid = (long)iv->stack - 1;
		if (sid >= 0)
			frames(out, m, (uint32_t)sid);
		fputs("}\n", out);
		(*nrec)++;
	}
	for (size_t g = 0; g < m->n_samples; g++) {
		const Gpuscope__V1__SampleGroup *sg = m->samples[g];
		int64_t t = 0;

		for (size_t i = 0; i < sg->n_time_delta_ns; i++) {
			t += sg->time_delta_ns[i];
			fprintf(out, "{\"t\":\"sample\",\"kind\":\"%s\",\"time_ns\":%lld,\"value\":%lld,"
				"\"labels\":", sample_kind_name((enum sample_kind)sg->kind),
				(long long)t, (long long)(sg->n_value ? sg->value[i] : 1));
			pairs(out, m, m->label_sets[sg->label_set]->pairs,
			      m->label_sets[sg->label_set]->n_pairs);
			frames(out, m, sg->stack[i]);
			fputs("}\n", out);
			(*nrec)++;
		}
	}
	for (size_t s = 0; s < m->n_series; s++) {
		const Gpuscope__V1__MetricSeries *ms = m->series[s];
		int64_t t = 0;

		for (size_t i = 0; i < ms->n_time_delta_ns; i++) {
			t += ms->time_delta_ns[i];
			fprintf(out, "{\"t\":\"metric\",\"name\":");
			json_str(out, S(m, ms->name));
			fprintf(out, ",\"time_ns\":%lld,\"value\":%g,\"labels\":", (long long)t,
				ms->value[i]);
			pairs(out, m, m->label_sets[ms->label_set]->pairs,
			      m->label_sets[ms->label_set]->n_pairs);
			fputs("}\n", out);
			(*nrec)++;
		}
	}
	batch_decode_free(m);
	batch__reset(a->batch);
	return 0;
}

int main(int argc, char **argv)
{
	const struct agent_module *mods[3] = { &sched_module, &cuda_probe_module, NULL };
	bool started[3] = { 0 }, want_nvml = false;
	double duration = 0;
	uint64_t end = 0, nrec = 0, next_flush;
	struct agent a = { 0 };
	FILE *out;
	int rc = 1;

	if (argc < 2) {
		fprintf(stderr, "usage: %s OUT.jsonl [--pid PID]... [--all-processes] "
				"[--duration SECONDS] [--nvml]\n", argv[0]);
		return 2;
	}
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--pid") && i + 1 < argc && a.opts.npids < AGENT_MAX_PIDS)
			a.opts.pids[a.opts.npids++] = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--all-processes"))
			a.opts.all_processes = true;
		else if (!strcmp(argv[i], "--duration") && i + 1 < argc)
			duration = atof(argv[++i]);
		else if (!strcmp(argv[i], "--nvml"))
			want_nvml = true;
		else {
			fprintf(stderr, "strips-dump: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	if (want_nvml)
		mods[2] = &nvml_module;
	out = !strcmp(argv[1], "-") ? stdout : fopen(argv[1], "w");
	if (!out) {
		perror(argv[1]);
		return 1;
	}
	a.opts.node = "device";
	a.batch = batch__new("device");
	a.mono_to_wall_ns = mono_to_wall_offset_ns();
	a.sym = symbolizer__new();
	a.stacks = stack_cache__new(a.sym, 0);
	bpf_shared_maps__create(&a.shared);	/* as run.c: sched and cuda share in_sync */
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	for (int i = 0; i < 3; i++) {
		int err;

		if (!mods[i])
			continue;
		err = mods[i]->start(&a);
		if (err) {
			fprintf(stderr, "strips-dump: %s: %s\n", mods[i]->name, strerror(-err));
			if (i < 2)
				goto out;
			continue;
		}
		started[i] = true;
	}
	fprintf(stderr, "strips-dump: running\n");
	if (duration > 0)
		end = mono_ns() + (uint64_t)(duration * 1e9);
	next_flush = mono_ns() + NSEC_PER_SEC;
	while (!stop && (!end || mono_ns() < end)) {
		usleep(50000);
		for (int i = 0; i < 3; i++)
			if (started[i] && mods[i]->tick)
				mods[i]->tick(&a);
		if (mono_ns() >= next_flush) {
			flush(&a, out, &nrec);
			next_flush = mono_ns() + NSEC_PER_SEC;
		}
	}
	rc = 0;
out:
	for (int i = 0; i < 3; i++)	/* before stop: the counters live in the BPF maps */
		if (started[i] && mods[i]->metrics)
			mods[i]->metrics(&a, stderr);
	for (int i = 2; i >= 0; i--)
		if (started[i] && mods[i]->stop)
			mods[i]->stop(&a);
	flush(&a, out, &nrec);
	fprintf(stderr, "strips-dump: %llu records\n", (unsigned long long)nrec);
	if (out != stdout)
		fclose(out);
	stack_cache__free(a.stacks);
	symbolizer__free(a.sym);
	batch__free(a.batch);
	bpf_shared_maps__free(&a.shared);
	return rc;
}
