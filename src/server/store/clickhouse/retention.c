/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Retention of the ClickHouse store. ClickHouse 18.16 has no TTL, so the maintenance thread
 * lists each shard's active partitions (one per day) and drops the days past retention:
 * raw samples past min(--raw-retention, --retention), everything else past --retention. A
 * partition goes once its whole day is older (rows by their own time, intervals by their start;
 * a rollup row once its bucket is older, as in the SQLite store). Dictionaries are not collected.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "server/store/clickhouse/ch.h"

/* Tables partitioned by day (store.h STORE_PART_TABLES order: c->n_dropped[] counts each
 * table's partitions) and which retention applies: 1 raw, 0 full. */
static const struct {
	const char *name;
	bool raw;
} parted[] = {
	{ "samples_raw", true }, { "samples_rollup", false }, { "points", false },
	{ "intervals", false },
};
_Static_assert(sizeof(parted) / sizeof(parted[0]) == 4, "store_stats.partitions_dropped[]");

static int drop_old(struct ch *c, size_t ui, uint64_t raw_cut_day, uint64_t cut_day)
{
	const char *sfx = c->clustered ? "_local" : "";
	struct buf ans = { 0 };
	char *sql = NULL, *line, *save = NULL;
	int err, n = 0;

	if (asprintf(&sql, "SELECT DISTINCT table, partition FROM system.parts WHERE database = '%s'"
		     " AND active FORMAT TSV", c->db) < 0)
		return -ENOMEM;
	err = ch_exec(c, (int)ui, sql, NULL, 0, NULL, &ans);
	free(sql);
	buf_put(&ans, "", 1);
	for (line = err ? NULL : strtok_r((char *)ans.p, "\n", &save); line && !err;
	     line = strtok_r(NULL, "\n", &save)) {
		char *tab = strchr(line, '\t'), *end;
		unsigned long long day;

		if (!tab)
			continue;
		*tab = 0;
		day = strtoull(tab + 1, &end, 10);
		if (*end)
			continue;	/* not a day partition (dictionaries: tuple()) */
		for (size_t t = 0; t < sizeof(parted) / sizeof(parted[0]); t++) {
			char table[64];

			snprintf(table, sizeof(table), "%s%s", parted[t].name, sfx);
			if (strcmp(line, table) || day >= (parted[t].raw ? raw_cut_day : cut_day))
				continue;
			if (asprintf(&sql, "ALTER TABLE %s.%s DROP PARTITION %llu", c->db, table,
				     day) < 0) {
				err = -ENOMEM;
				break;
			}
			err = ch_exec_to(c, (int)ui, sql, NULL, 0, NULL, 300000, NULL);
			free(sql);
			if (err)
				break;
			n++;
			__atomic_add_fetch(&c->n_dropped[t], 1, __ATOMIC_RELAXED);
		}
	}
	if (n)
		log_info("retention: %s: dropped %d day partitions", c->urls[ui], n);
	buf_done(&ans);
	return err;
}

void ch_enforce_retention(struct ch *c)
{
	uint64_t now = wall_ns();
	uint64_t raw = c->o.raw_retention_ns < c->o.retention_ns ? c->o.raw_retention_ns :
								    c->o.retention_ns;
	/* Day d holds [d, d + 1) days: it goes when d + 1 <= cut. */
	uint64_t cut_day = now > c->o.retention_ns ? (now - c->o.retention_ns) / CH_DAY_NS : 0;
	uint64_t raw_cut_day = now > raw ? (now - raw) / CH_DAY_NS : 0;

	for (size_t i = 0; i < c->nurls; i++)
		if (drop_old(c, i, raw_cut_day, cut_day))
			log_warn("retention: %s", store_strerror());
}
