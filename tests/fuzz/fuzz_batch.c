/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the server's batch decoder (batch_scan + batch_decode_scanned) on arbitrary
 * bytes. The scan must give the same answer fed in two pieces as in one (it runs while a body
 * is decompressed); what decoding keeps allocated must stay within the scan's budget of 64 bytes
 * per input byte (a ratio check: an input that expands further is a failure, as is any single
 * allocation past -malloc_limit_mb). Whatever is accepted is walked through every index it
 * promises to be valid, so ASan catches an index the validation let through. Built by
 * mk/server.mk, run by tests/integration/test_server_fuzz.sh.
 */
#include <sanitizer/allocator_interface.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "gpuscope/v1/batch.pb-c.h"

static volatile size_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Gpuscope__V1__Batch *m;
	struct batch_scan s, s2;
	size_t before, used;
	char err[256];
	int rc, rc2;

	batch_scan_init(&s, 64 * (uint64_t)size + 4096);
	rc = batch_scan(&s, data, size);
	batch_scan_init(&s2, 64 * (uint64_t)size + 4096);
	rc2 = batch_scan(&s2, data, size / 2);
	if (!rc2)
		rc2 = batch_scan(&s2, data, size);
	if (rc != rc2 || (!rc && (s.off != s2.off || s.est != s2.est))) {
		fprintf(stderr, "scan in two pieces differs: rc %d/%d off %zu/%zu est %llu/%llu\n",
			rc, rc2, s.off, s2.off, (unsigned long long)s.est,
			(unsigned long long)s2.est);
		abort();
	}
	if (rc)
		return 0;
	before = __sanitizer_get_current_allocated_bytes();
	m = batch_decode_scanned(&s, data, size, err, sizeof(err));
	if (!m)
		return 0;
	used = __sanitizer_get_current_allocated_bytes() - before;
	if (used > s.est) {
		fprintf(stderr, "decoding %zu bytes keeps %zu bytes allocated, scan estimated %llu\n",
			size, used, (unsigned long long)s.est);
		abort();
	}
	sink += strlen(m->strings[m->node]);
	for (size_t i = 0; i < m->n_stacks; i++)
		for (size_t k = 0; k < m->stacks[i]->n_locations; k++)
			sink += strlen(m->strings[m->locations[m->stacks[i]->locations[k]]->function]);
	for (size_t i = 0; i < m->n_label_sets; i++)
		for (size_t k = 0; k < m->label_sets[i]->n_pairs; k++)
			sink += strlen(m->strings[m->label_sets[i]->pairs[k]]);
	for (size_t i = 0; i < m->n_samples; i++) {
		const Gpuscope__V1__SampleGroup *g = m->samples[i];

		sink += m->label_sets[g->label_set]->n_pairs;
		for (size_t k = 0; k < g->n_stack; k++)
			sink += m->stacks[g->stack[k]]->n_locations + (size_t)g->time_delta_ns[k] +
				(g->n_value ? (size_t)g->value[k] : 1);
	}
	for (size_t i = 0; i < m->n_series; i++)
		for (size_t k = 0; k < m->series[i]->n_value; k++)
			sink += (size_t)m->series[i]->time_delta_ns[k] +
				strlen(m->strings[m->series[i]->name]) +
				m->label_sets[m->series[i]->label_set]->n_pairs;
	for (size_t i = 0; i < m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];

		sink += strlen(m->strings[iv->kind]) + m->label_sets[iv->label_set]->n_pairs;
		for (size_t k = 0; k < iv->n_attrs; k++)
			sink += strlen(m->strings[iv->attrs[k]]);
	}
	batch_decode_free(m);
	return 0;
}
