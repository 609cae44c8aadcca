/* SPDX-License-Identifier: Apache-2.0 */
/* Storing an accepted batch, a large one in parts (see ingest.c). */
#ifndef GPUSCOPE_SERVER_INGEST_H
#define GPUSCOPE_SERVER_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "server/store/store.h"

/* Records (samples + points + intervals) per part: a normal agent batch is one part. */
#define INGEST_PART_RECORDS 100000

struct ingest_result {
	unsigned parts;			/* group commits it took */
	unsigned duplicate_parts;	/* parts already stored (a retry) */
};

/*
 * Stores a decoded, validated batch m whose encoding is raw[0..len): whole when it holds at
 * most max_records records, else in halves (recursively), each committed on its own with an id
 * derived from m's. Unless all_addresses, m's named frames lose their addresses first (they are
 * stored at function, file and line; see ingest.c). 0 when every part is stored (res says how many were duplicates), or the
 * store's -errno with a reason in err; then parts before the failing one may be stored, and a
 * retry of the same batch completes it without duplicates. Any thread.
 */
int ingest_store(struct store *st, struct Gpuscope__V1__Batch *m, const uint8_t *raw,
		 size_t len, size_t max_records, bool all_addresses, struct ingest_result *res,
		 char *err, size_t errlen);

#endif
