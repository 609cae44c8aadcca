/* SPDX-License-Identifier: Apache-2.0 */
/* Backend choice (store_open), ingest helpers shared by the backends, and the per-thread
 * reason of the last store failure. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/store/store.h"

static __thread char last_error[512];

struct store *store_open(const struct store_opts *opts, char *err, size_t errlen)
{
	if (!opts->backend || !strcmp(opts->backend, "sqlite"))
		return store_sqlite_open(opts, err, errlen);
	if (!strcmp(opts->backend, "clickhouse"))
		return store_clickhouse_open(opts, err, errlen);
	snprintf(err, errlen, "unknown store '%s' (sqlite or clickhouse)", opts->backend);
	return NULL;
}

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
