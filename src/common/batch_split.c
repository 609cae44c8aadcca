/* SPDX-License-Identifier: Apache-2.0 */
/*
 * batch_split(): a batch in two halves, each self-contained (the agent's answer to a 413, the
 * server's parts of a batch over 100 000 records); batch.c has the producer, encoder and
 * decoder it builds on.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"

/* Labels of a pairs array (string indexes) as struct label; n pairs. */
static size_t split_labels(const Gpuscope__V1__Batch *m, const uint32_t *p, size_t n,
			   struct label *out)
{
	for (size_t k = 0; k + 1 < n && k / 2 < BATCH_MAX_LABELS; k += 2)
		out[k / 2] = (struct label){ m->strings[p[k]], m->strings[p[k + 1]] };
	return (n / 2) < BATCH_MAX_LABELS ? n / 2 : BATCH_MAX_LABELS;
}

/* Stack `idx` of m added to b (cached per half in ids[], -1 until added). */
static int64_t split_stack(const Gpuscope__V1__Batch *m, struct batch *b, int64_t *ids,
			   uint32_t idx)
{
	const Gpuscope__V1__Stack *st = m->stacks[idx];
	struct location fr[BATCH_MAX_DEPTH];

	if (ids[idx] >= 0)
		return ids[idx];
	for (size_t k = 0; k < st->n_locations; k++) {
		const Gpuscope__V1__Location *l = m->locations[st->locations[k]];

		fr[k] = (struct location){ .function = m->strings[l->function],
					   .module = m->strings[l->module],
					   .build_id = m->strings[l->build_id],
					   .file = m->strings[l->file],
					   .line = l->line,
					   .address = l->address,
					   .kernel = l->kernel,
					   .inlined = l->inlined };
	}
	ids[idx] = batch__stack(b, fr, st->n_locations);
	return ids[idx];
}

/*
 * The half each label set's records go to: whole label sets in index order to the first half
 * until it holds half the records (or, where the label set that crosses the middle would leave
 * more than 3/4 there, up to the one before it), so that a thread's samples and intervals stay
 * together: the server keeps an off-CPU sample as the blocked interval it repeats only within
 * one batch. NULL (then records in wire order) when no such cut leaves each half at least a
 * quarter, or out of memory.
 */
static uint8_t *split_sides(const Gpuscope__V1__Batch *m, size_t total)
{
	size_t n = m->n_label_sets, *cnt = calloc(n ? n : 1, sizeof(*cnt)), acc = 0, cut = n;
	uint8_t *side = NULL;

	if (!cnt)
		return NULL;
	for (size_t i = 0; i < m->n_samples; i++)
		cnt[m->samples[i]->label_set] += m->samples[i]->n_stack;
	for (size_t i = 0; i < m->n_series; i++)
		cnt[m->series[i]->label_set] += m->series[i]->n_value;
	for (size_t i = 0; i < m->n_intervals; i++)
		cnt[m->intervals[i]->label_set]++;
	for (size_t i = 0; i < n; i++) {
		if (acc + cnt[i] >= (total + 1) / 2) {	/* label set i crosses the middle */
			cut = acc + cnt[i] <= total - total / 4 ? i + 1 : i;
			acc = cut > i ? acc + cnt[i] : acc;
			break;
		}
		acc += cnt[i];
	}
	if (acc >= total / 4 && total - acc >= total / 4 && acc && acc < total)
		side = malloc(n ? n : 1);
	for (size_t i = 0; side && i < n; i++)
		side[i] = i >= cut;
	free(cnt);
	return side;
}

int batch_split(const uint8_t *raw, size_t len, struct batch **ret_a, struct batch **ret_b)
{
	struct label labels[BATCH_MAX_LABELS], attrs[BATCH_MAX_LABELS];
	struct batch *half[2] = { NULL, NULL };
	int64_t *ids[2] = { NULL, NULL };
	uint8_t *side = NULL;	/* label set -> half; NULL: by record order */
	Gpuscope__V1__Batch *m;
	size_t total = 0, r = 0;
	char err[256];
	int rc = 0;

	m = batch_decode(raw, len, err, sizeof(err));
	if (!m)
		return errno == ENOMEM ? -ENOMEM : -EINVAL;
	for (size_t i = 0; i < m->n_samples; i++)
		total += m->samples[i]->n_stack;
	for (size_t i = 0; i < m->n_series; i++)
		total += m->series[i]->n_value;
	total += m->n_intervals;
	if (total < 2) {
		rc = -E2BIG;
		goto out;
	}
	side = split_sides(m, total);
	for (int h = 0; h < 2; h++) {
		half[h] = batch__new(m->strings[m->node]);
		ids[h] = malloc((m->n_stacks ? m->n_stacks : 1) * sizeof(int64_t));
		if (!half[h] || !ids[h]) {
			rc = -ENOMEM;
			goto out;
		}
		memset(ids[h], 0xff, (m->n_stacks ? m->n_stacks : 1) * sizeof(int64_t));
		batch__set_period(half[h], m->period_ns);
	}
	/* Whole label sets to each half (split_sides()); else records in wire order: the first
	 * half of them to half[0], the rest to half[1]. */
	for (size_t i = 0; i < m->n_samples && !rc; i++) {
		const Gpuscope__V1__SampleGroup *g = m->samples[i];
		const Gpuscope__V1__LabelSet *ls = m->label_sets[g->label_set];
		size_t nl = split_labels(m, ls->pairs, ls->n_pairs, labels);
		uint64_t t = 0;

		for (size_t k = 0; k < g->n_stack && !rc; k++, r++) {
			int h = side ? side[g->label_set] : r >= total / 2;
			int64_t sid = split_stack(m, half[h], ids[h], g->stack[k]);

			t += (uint64_t)g->time_delta_ns[k];
			rc = sid < 0 ? (int)sid :
			     batch__sample(half[h], t, labels, nl, sid, (enum sample_kind)g->kind,
					   g->n_value ? g->value[k] : 1);
		}
	}
	for (size_t i = 0; i < m->n_series && !rc; i++) {
		const Gpuscope__V1__MetricSeries *ms = m->series[i];
		const Gpuscope__V1__LabelSet *ls = m->label_sets[ms->label_set];
		size_t nl = split_labels(m, ls->pairs, ls->n_pairs, labels);
		uint64_t t = 0;

		for (size_t k = 0; k < ms->n_value && !rc; k++, r++) {
			t += (uint64_t)ms->time_delta_ns[k];
			rc = batch__metric(half[side ? side[ms->label_set] : r >= total / 2],
					   m->strings[ms->name], labels, nl, t, ms->value[k]);
		}
	}
	for (size_t i = 0; i < m->n_intervals && !rc; i++, r++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];
		const Gpuscope__V1__LabelSet *ls = m->label_sets[iv->label_set];
		size_t nl = split_labels(m, ls->pairs, ls->n_pairs, labels);
		size_t na = split_labels(m, iv->attrs, iv->n_attrs, attrs);
		int h = side ? side[iv->label_set] : r >= total / 2;
		int64_t sid = iv->stack ? split_stack(m, half[h], ids[h], iv->stack - 1) : -1;

		rc = iv->stack && sid < 0 ? (int)sid :
		     batch__interval(half[h], m->strings[iv->kind], labels, nl, iv->start_ns,
				     iv->end_ns, sid, attrs, na);
	}
	if (!rc) {
		*ret_a = half[0];
		*ret_b = half[1];
		half[0] = half[1] = NULL;
	}
out:
	batch__free(half[0]);
	batch__free(half[1]);
	free(ids[0]);
	free(ids[1]);
	free(side);
	batch_decode_free(m);
	return rc;
}
