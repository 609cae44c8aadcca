/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus text exposition format writer (prom.h). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include "common/prom.h"

/* HELP text escapes backslash and newline; label values also the double quote. */
static void escape(FILE *out, const char *s, int quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", out);
		else if (*s == '\n')
			fputs("\\n", out);
		else if (quote && *s == '"')
			fputs("\\\"", out);
		else
			fputc(*s, out);
	}
}

void prom_escape_value(FILE *out, const char *s)
{
	escape(out, s, 1);
}

void prom_family(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s ", name);
	escape(out, help, 0);
	fprintf(out, "\n# TYPE %s %s\n", name, type);
}

static void put_name(FILE *out, const char *name, const struct prom_label *labels, size_t n)
{
	fputs(name, out);
	if (!n)
		return;
	fputc('{', out);
	for (size_t i = 0; i < n; i++) {
		fprintf(out, "%s%s=\"", i ? "," : "", labels[i].name);
		escape(out, labels[i].value ? labels[i].value : "", 1);
		fputc('"', out);
	}
	fputc('}', out);
}

/* The shortest of %.15g and %.17g that reads back as v. */
static const char *fmt_double(double v, char *buf, size_t len)
{
	snprintf(buf, len, "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, len, "%.17g", v);
	return buf;
}

void prom_sample(FILE *out, const char *name, const struct prom_label *labels, size_t nlabels,
		 double v)
{
	char buf[40];

	put_name(out, name, labels, nlabels);
	if (isnan(v))
		fputs(" NaN\n", out);
	else if (isinf(v))
		fputs(v > 0 ? " +Inf\n" : " -Inf\n", out);
	else
		fprintf(out, " %s\n", fmt_double(v, buf, sizeof(buf)));
}

void prom_sample_u64(FILE *out, const char *name, const struct prom_label *labels,
		     size_t nlabels, uint64_t v)
{
	put_name(out, name, labels, nlabels);
	fprintf(out, " %" PRIu64 "\n", v);
}

void prom_counter(FILE *out, const char *name, const char *help, uint64_t v)
{
	prom_family(out, name, "counter", help);
	prom_sample_u64(out, name, NULL, 0, v);
}

void prom_gauge(FILE *out, const char *name, const char *help, double v)
{
	prom_family(out, name, "gauge", help);
	prom_sample(out, name, NULL, 0, v);
}

void prom_sample1(FILE *out, const char *name, const char *label, const char *value, double v)
{
	prom_sample(out, name, &(struct prom_label){ label, value }, 1, v);
}

void prom_sample1_u64(FILE *out, const char *name, const char *label, const char *value,
		      uint64_t v)
{
	prom_sample_u64(out, name, &(struct prom_label){ label, value }, 1, v);
}
