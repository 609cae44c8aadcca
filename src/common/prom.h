/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one writer of the Prometheus text exposition format (version 0.0.4) for both binaries:
 * every family gets its HELP and TYPE line, label values and help text are escaped. Family
 * names carry the binary's prefix: gpuscope_agent_* in the agent, gpuscope_server_* in the
 * server. Writes to a stdio stream (the agent's /metrics callback, or an open_memstream()).
 */
#ifndef GPUSCOPE_PROM_H
#define GPUSCOPE_PROM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct prom_label {
	const char *name;	/* [a-zA-Z_][a-zA-Z0-9_]* */
	const char *value;	/* any bytes; escaped on output */
};

/*
 * Starts a family: "# HELP name help" and "# TYPE name type" (type: "counter", "gauge",
 * "untyped"). Its samples follow with prom_sample*(); a family is started once per exposition.
 */
void prom_family(FILE *out, const char *name, const char *type, const char *help);

/* One sample of the family just started: name{labels} value. nlabels may be 0. */
void prom_sample(FILE *out, const char *name, const struct prom_label *labels, size_t nlabels,
		 double v);
void prom_sample_u64(FILE *out, const char *name, const struct prom_label *labels,
		     size_t nlabels, uint64_t v);

/* A family of one unlabelled sample. */
void prom_counter(FILE *out, const char *name, const char *help, uint64_t v);
void prom_gauge(FILE *out, const char *name, const char *help, double v);

/* One sample with one label (the common "by reason" family member). */
void prom_sample1(FILE *out, const char *name, const char *label, const char *value, double v);
void prom_sample1_u64(FILE *out, const char *name, const char *label, const char *value,
		      uint64_t v);

/* Writes s as a label value: backslash, double quote and newline escaped. */
void prom_escape_value(FILE *out, const char *s);

#endif
