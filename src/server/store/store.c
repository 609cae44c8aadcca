/* SPDX-License-Identifier: Apache-2.0 */
/* The backend factory (store_open): the one place that calls down into a backend's open; the
 * helpers the backends call are in helpers.c, which calls nothing of theirs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/store/store.h"

struct store *store_open(const struct store_opts *opts, char *err, size_t errlen)
{
	if (!opts->backend || !strcmp(opts->backend, "sqlite"))
		return store_sqlite_open(opts, err, errlen);
	if (!strcmp(opts->backend, "clickhouse"))
		return store_clickhouse_open(opts, err, errlen);
	snprintf(err, errlen, "unknown store '%s' (sqlite or clickhouse)", opts->backend);
	return NULL;
}
