/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Storing an accepted batch: a large one goes to the store in parts, each its own group commit,
 * so that other agents' pushes are committed between the parts instead of waiting for the whole
 * of it; every part has an id derived from the batch's, so a retry after a crash skips the parts
 * already stored (no duplicates) and stores the rest.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/ingest.h"

static size_t records(const Gpuscope__V1__Batch *m)
{
	size_t n = m->n_intervals;

	for (size_t i = 0; i < m->n_samples; i++)
		n += m->samples[i]->n_stack;
	for (size_t i = 0; i < m->n_series; i++)
		n += m->series[i]->n_value;
	return n;
}

/*
 * A frame with a function name is stored at its function, file and line, without its address
 * (unless --frame-addresses all): the address is where a sample or call returned inside the
 * function, which no answer but pprof's address field shows (flame graphs, top and diffs name a
 * frame by its function), yet it made a new location, and a new stack, of every instruction a
 * sample landed on. On the recorded compile-loop hour addresses made 6 of every 7 locations and
 * almost half the stacks: 343 556 -> 47 563 and 370 217 -> 196 572 without them, the store
 * 10.89 -> 7.98 B/sample (bench/README.md). A frame without a name keeps its address: that is
 * all there is to know of it. Equal frames then share one location.
 */
static void drop_named_addresses(Gpuscope__V1__Batch *m)
{
	for (size_t i = 0; i < m->n_locations; i++) {
		Gpuscope__V1__Location *l = m->locations[i];

		if (l->function < m->n_strings && m->strings[l->function][0])
			l->address = 0;
	}
}

/* Stores m (encoded as raw) whole, or its two halves in turn. */
static int store_parts(struct store *st, Gpuscope__V1__Batch *m, const uint8_t *raw,
		       size_t len, size_t max_records, bool all_addresses, unsigned depth,
		       struct ingest_result *res, char *err, size_t errlen)
{
	struct batch *half[2] = { NULL, NULL };
	int rc;

	if (records(m) <= max_records || depth >= 16) {
		if (!all_addresses)
			drop_named_addresses(m);
		rc = st->ops->ingest(st, m, err, errlen);
		if (rc < 0)
			return rc;
		res->parts++;
		res->duplicate_parts += rc > 0;
		return 0;
	}
	rc = batch_split(raw, len, &half[0], &half[1]);
	if (rc) {
		snprintf(err, errlen, "store: splitting a large batch: %s", strerror(-rc));
		return rc;
	}
	for (int h = 0; h < 2 && !rc; h++) {
		Gpuscope__V1__Batch *pm = NULL;
		uint8_t *pbuf = NULL;
		size_t plen = 0;

		/* Deterministic: the same batch splits the same way under the same ids. */
		batch__set_id(half[h], hash64(&m->batch_id, sizeof(m->batch_id), 0x9a27 + (uint64_t)h));
		rc = batch__encode(half[h], &pbuf, &plen);
		if (!rc) {
			pm = batch_decode(pbuf, plen, err, errlen);
			rc = pm ? 0 : -(errno ? errno : EINVAL);
		}
		if (!rc)
			rc = store_parts(st, pm, pbuf, plen, max_records, all_addresses, depth + 1,
					 res, err, errlen);
		batch_decode_free(pm);
		free(pbuf);
	}
	batch__free(half[0]);
	batch__free(half[1]);
	return rc;
}

int ingest_store(struct store *st, Gpuscope__V1__Batch *m, const uint8_t *raw, size_t len,
		 size_t max_records, bool all_addresses, struct ingest_result *res, char *err,
		 size_t errlen)
{
	*res = (struct ingest_result){ 0 };
	return store_parts(st, m, raw, len, max_records, all_addresses, 0, res, err, errlen);
}
