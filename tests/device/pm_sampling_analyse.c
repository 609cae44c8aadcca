// SPDX-License-Identifier: Apache-2.0
/* pm_sampling (see pm_sampling.h): samples against the known pattern, raw dumps. */
#include "pm_sampling.h"

/* ---- analysis ------------------------------------------------------------------------------------ */
static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double median(double *v, size_t n)
{
	if (!n)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double value_of(const struct sample *s, size_t m)
{
	double ns = (double)(s->t1 - s->t0);

	if (!prof.counter[m])
		return s->v[m];
	return ns > 0 ? s->v[m] / ns : NAN;
}

const char *fmt_ns(uint64_t ns, char *buf, size_t len)
{
	if (ns >= 1000000 && ns % 1000000 == 0)
		snprintf(buf, len, "%llums", (unsigned long long)(ns / 1000000));
	else if (ns >= 1000 && ns % 1000 == 0)
		snprintf(buf, len, "%lluus", (unsigned long long)(ns / 1000));
	else if (ns >= 1000000)
		snprintf(buf, len, "%.3gms", (double)ns / 1e6);
	else
		snprintf(buf, len, "%lluns", (unsigned long long)ns);
	return buf;
}

/* Which clock the sample timestamps are on: 1 GPU (%globaltimer), 2 host CLOCK_REALTIME, 0 neither
 * (the samples fall outside both pattern spans, give or take a second: the caller then aligns
 * the first sample with the host's time of cuptiPmSamplingStart). */
static int pick_clock(const struct sampler *sp, const struct run *r)
{
	uint64_t ga = r->st[0].g0, gb = r->st[r->n - 1].g1, ha = r->st[0].h0,
		 hb = r->st[r->n - 1].h1, slack = 1000000000u;
	size_t i, ing = 0, inh = 0;

	for (i = 0; i < sp->n; i++) {
		ing += sp->s[i].t0 + slack >= ga && sp->s[i].t0 <= gb + slack;
		inh += sp->s[i].t0 + slack >= ha && sp->s[i].t0 <= hb + slack;
	}
	if (ing >= inh && ing * 2 >= sp->n && ing)
		return 1;
	if (inh * 2 >= sp->n && inh)
		return 2;
	return 0;
}

/* A busy stretch's start (end = 0) or end (1) on the samples' clock (pick_clock). */
static uint64_t stretch_at(const struct stretch *s, int clock, int64_t off, int end)
{
	if (clock == 1)
		return end ? s->g1 : s->g0;
	return (uint64_t)((int64_t)(end ? s->h1 : s->h0) + (clock ? 0 : off));
}

static void write_raw(const char *label, const struct sampler *sp, const struct run *r)
{
	char path[512];
	FILE *f;
	size_t i, m;

	if (!opt.raw_dir)
		return;
	snprintf(path, sizeof(path), "%s/samples-%s.csv", opt.raw_dir, label);
	f = fopen(path, "w");
	if (!f)
		die("%s: %s", path, strerror(errno));
	fprintf(f, "t0_ns,t1_ns");
	for (m = 0; m < prof.n_metrics; m++)
		fprintf(f, ",%s", prof.metrics[m]);
	fputc('\n', f);
	for (i = 0; i < sp->n; i++) {
		fprintf(f, "%llu,%llu", (unsigned long long)sp->s[i].t0,
			(unsigned long long)sp->s[i].t1);
		for (m = 0; m < prof.n_metrics; m++)
			fprintf(f, ",%.6g", sp->s[i].v[m]);
		fputc('\n', f);
	}
	fclose(f);
	snprintf(path, sizeof(path), "%s/stretches-%s.csv", opt.raw_dir, label);
	f = fopen(path, "w");
	if (!f)
		die("%s: %s", path, strerror(errno));
	fprintf(f, "group,busy_ns,idle_ns,gpu_start_ns,gpu_end_ns,host_start_ns,host_end_ns\n");
	for (i = 0; i < (size_t)r->n; i++) {
		const struct stretch *s = &r->st[i];

		fprintf(f, "%d,%llu,%llu,%llu,%llu,%llu,%llu\n", s->group,
			(unsigned long long)opt.groups[s->group].busy_ns,
			(unsigned long long)opt.groups[s->group].idle_ns,
			(unsigned long long)s->g0, (unsigned long long)s->g1,
			(unsigned long long)s->h0, (unsigned long long)s->h1);
	}
	fclose(f);
}

void analyse(const char *label, uint64_t interval_ns, const struct sampler *sp,
		    const struct run *r, uint64_t host_ns)
{
	char b1[32], b2[32], asked[64];
	double *d, span_s, thr, med;
	int64_t off;
	size_t i, m, gaps = 0, nd = 0;
	uint64_t gap_ns = 0;
	int clock, gi;

	write_raw(label, sp, r);
	printf("%s: %zu samples", label, sp->n);
	if (sp->n < 2) {
		printf(" (too few to analyse); overflows %llu, decode error %s, samples not "
		       "evaluated %llu%s%s\n",
		       (unsigned long long)sp->overflows,
		       sp->decode_err ? cupti_err(sp->decode_err) : "none",
		       (unsigned long long)sp->eval_errors, sp->eval_errors ? ": " : "",
		       sp->eval_errors ? cupti_err(sp->eval_err) : "");
		return;
	}
	d = malloc(sp->n * sizeof(*d));
	if (!d)
		die("out of memory");
	span_s = (double)(sp->s[sp->n - 1].t1 - sp->s[0].t0) / 1e9;
	for (i = 0; i < sp->n; i++)
		d[nd++] = (double)(sp->s[i].t1 - sp->s[i].t0);
	med = median(d, nd);
	for (i = 0; i + 1 < sp->n; i++) {
		/* a gap: more than half a (median) sample between one sample's end and the next */
		if ((double)sp->s[i + 1].t0 > (double)sp->s[i].t1 + med / 2) {
			gaps++;
			gap_ns += sp->s[i + 1].t0 - sp->s[i].t1;
		}
	}
	if (opt.trigger == CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL)
		snprintf(asked, sizeof(asked), "%.0f/s", 1e9 / (double)interval_ns);
	else
		snprintf(asked, sizeof(asked), "every %llu sysclk cycles",
			 (unsigned long long)interval_ns);
	printf(" over %.3f s of samples (%.3f s sampled on the host) = %.0f/s (asked %s); "
	       "median sample %s; gaps %zu (%s); overflows %llu; image resets %llu; decodes %llu; "
	       "decode error %s; samples not evaluated %llu%s%s; decode thread CPU %.1f ms = "
	       "%.2f ms/s\n",
	       span_s, (double)host_ns / 1e9, (double)sp->n / span_s, asked,
	       fmt_ns((uint64_t)med, b1, sizeof(b1)), gaps,
	       fmt_ns(gap_ns, b2, sizeof(b2)), (unsigned long long)sp->overflows,
	       (unsigned long long)sp->full_resets, (unsigned long long)sp->decodes,
	       sp->decode_err ? cupti_err(sp->decode_err) : "none",
	       (unsigned long long)sp->eval_errors, sp->eval_errors ? ": " : "",
	       sp->eval_errors ? cupti_err(sp->eval_err) : "", sp->cpu_ms,
	       sp->cpu_ms / ((double)host_ns / 1e9));
	clock = pick_clock(sp, r);
	off = clock ? 0 : (int64_t)(sp->s[0].t0 - sp->start_host_ns);
	printf("  clock: sample timestamps %s (first sample %llu, first stretch gpu %llu host "
	       "%llu)\n",
	       clock == 1   ? "are on the GPU's %globaltimer"
	       : clock == 2 ? "are on the host's CLOCK_REALTIME"
			    : "match neither clock: host stretches shifted so that the first sample "
			      "starts at cuptiPmSamplingStart (+- the call's time)",
	       (unsigned long long)sp->s[0].t0, (unsigned long long)r->st[0].g0,
	       (unsigned long long)r->st[0].h0);
	for (m = 0; m < prof.n_metrics; m++) {
		for (i = 0, nd = 0; i < sp->n; i++) {
			double v = value_of(&sp->s[i], m);

			if (!isnan(v))
				d[nd++] = v;
		}
		qsort(d, nd, sizeof(*d), cmp_double);
		thr = nd ? d[(size_t)((double)(nd - 1) * 0.95)] / 2 : 0;
		printf("  %s%s: busy above %.4g (half the 95th percentile)\n", prof.metrics[m],
		       prof.counter[m] ? " per ns" : "", thr);
		for (gi = 0; gi < opt.n_groups; gi++) {
			size_t bn = 0, bb = 0, in = 0, ii = 0;
			double bsum = 0, isum = 0;
			int k;

			for (k = 0; k < r->n; k++) {
				const struct stretch *s = &r->st[k];
				uint64_t a = stretch_at(s, clock, off, 0), b = stretch_at(s, clock, off, 1);
				uint64_t ia = b,
					 ib = k + 1 < r->n ? stretch_at(&r->st[k + 1], clock, off, 0) : 0;

				if (s->group != gi)
					continue;
				for (i = 0; i < sp->n; i++) {
					double v = value_of(&sp->s[i], m);

					if (isnan(v))
						continue;
					if (sp->s[i].t0 >= a && sp->s[i].t1 <= b) {
						bn++;
						bb += v > thr;
						bsum += v;
					} else if (ib && sp->s[i].t0 >= ia && sp->s[i].t1 <= ib) {
						in++;
						ii += v <= thr;
						isum += v;
					}
				}
			}
			printf("    busy %s / idle %s x%d: samples inside busy stretches read busy "
			       "%zu/%zu",
			       fmt_ns(opt.groups[gi].busy_ns, b1, sizeof(b1)),
			       fmt_ns(opt.groups[gi].idle_ns, b2, sizeof(b2)), opt.groups[gi].count,
			       bb, bn);
			if (bn)
				printf(" (%.1f%%, mean %.4g)", 100.0 * (double)bb / (double)bn,
				       bsum / (double)bn);
			printf(", inside idle stretches read idle %zu/%zu", ii, in);
			if (in)
				printf(" (%.1f%%, mean %.4g)", 100.0 * (double)ii / (double)in,
				       isum / (double)in);
			printf("\n");
		}
	}
	free(d);
	fflush(stdout);
}

