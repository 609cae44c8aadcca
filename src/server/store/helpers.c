/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers every store backend calls (store.h): the per-thread reason of the last store failure,
 * the canonical label set and location hash of a batch's entries, and an interval's attrs as
 * stored. Calls nothing of the backends or the factory (store.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/store/store.h"

static __thread char last_error[512];

const char *store_strerror(void)
{
	return last_error;
}

void store_set_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

static int cmp_names(const void *a, const void *b)
{
	const char *const *x = a, *const *y = b;

	return strcmp(x[0], y[0]);
}

uint64_t store_label_set(const struct Gpuscope__V1__Batch *m, size_t i, const char **pairs,
			 size_t *ret_n, struct buf *blob)
{
	const Gpuscope__V1__LabelSet *ls = m->label_sets[i];
	size_t n = 0;

	pairs[n++] = "node";
	pairs[n++] = m->strings[m->node];
	for (size_t k = 0; k < ls->n_pairs; k += 2) {
		const char *name = m->strings[ls->pairs[k]];
		bool dup = !strcmp(name, "node");

		for (size_t j = 2; j < n && !dup; j += 2)
			dup = !strcmp(pairs[j], name);
		if (dup)
			continue;	/* the batch's node wins; first of duplicates wins */
		pairs[n++] = name;
		pairs[n++] = m->strings[ls->pairs[k + 1]];
	}
	qsort(pairs, n / 2, 2 * sizeof(char *), cmp_names);
	blob->len = 0;
	for (size_t k = 0; k < n; k++)
		buf_put(blob, pairs[k], strlen(pairs[k]) + 1);
	if (ret_n)
		*ret_n = n / 2;
	return blob->oom ? 0 : hash64(blob->p, blob->len, 11);
}

uint64_t store_location_hash_of(const char *const strs[4], uint32_t line, uint64_t address,
				uint32_t flags, struct buf *key)
{
	key->len = 0;
	for (int k = 0; k < 4; k++)
		buf_put(key, strs[k], strlen(strs[k]) + 1);
	buf_put(key, &line, sizeof(line));
	buf_put(key, &address, sizeof(address));
	buf_put(key, &flags, sizeof(flags));
	return key->oom ? 0 : hash64(key->p, key->len, 12);
}

uint64_t store_location_hash(const struct Gpuscope__V1__Batch *m,
			     const struct Gpuscope__V1__Location *l, struct buf *key)
{
	const char *const strs[4] = { m->strings[l->function], m->strings[l->module],
				      m->strings[l->build_id], m->strings[l->file] };

	return store_location_hash_of(strs, l->line, l->address,
				      (l->kernel ? 1u : 0u) | (l->inlined ? 2u : 0u), key);
}

enum store_iv_attr store_interval_attr(const struct Gpuscope__V1__Batch *m,
				       const struct Gpuscope__V1__Interval *iv, const char *name,
				       const char *val, const uint64_t *stack_gid,
				       uint64_t *ret_stack)
{
	unsigned long long sid;
	char *end;

	if (strcmp(name, "stack_id"))
		return STORE_IV_KEEP;
	/* version 1: the stack as an attr, a batch-local index -> the store's id; an invalid one
	 * (or one that Interval.stack gives too) is dropped */
	sid = strtoull(val, &end, 10);
	if (!*val || *end || sid >= m->n_stacks || iv->stack)
		return STORE_IV_DROP;
	*ret_stack = stack_gid[sid];
	return STORE_IV_STACK;
}

uint64_t store_interval_stack(const struct Gpuscope__V1__Interval *iv, const uint64_t *stack_gid)
{
	/* version 2; batch_decode() checked the range */
	return iv->stack ? stack_gid[iv->stack - 1] : 0;
}
