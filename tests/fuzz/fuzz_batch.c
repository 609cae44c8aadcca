/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the server's batch decoder (batch_decode) on arbitrary bytes. Whatever it
 * accepts is walked through every index it promises to be valid, so ASan catches an index the
 * validation let through. Built by mk/server.mk, run by tests/integration/test_server_fuzz.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "common/batch.h"
#include "gpuscope/v1/batch.pb-c.h"

static volatile size_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Gpuscope__V1__Batch *m;
	char err[256];

	m = batch_decode(data, size, err, sizeof(err));
	if (!m)
		return 0;
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
