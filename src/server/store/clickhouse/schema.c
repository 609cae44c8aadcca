/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ClickHouse schema (docs/clickhouse.md), created on every URL at start. ClickHouse 18.16:
 * no TTL (retention drops day partitions), no column codecs, no ON CLUSTER without ZooKeeper
 * (so each shard's URL gets the DDL). Fact rows are partitioned by their own day (intervals by
 * their start); a batch is one INSERT, hence one part, per (table, day): whole or not at all.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/log.h"
#include "server/store/clickhouse/ch.h"

/* One table: its columns, engine clause (MergeTree family) and sharding key. Rollups name the
 * columns to sum: a SummingMergeTree sums every other numeric column outside the sort key too,
 * the partition column `day` included (merged rows would move to day 2d). */
struct table {
	const char *name, *columns, *engine, *shard_key;
};

#define FACT_COLS "day UInt32, node_id UInt64, batch UInt64, "

static const struct table tables[] = {
	{ "meta", "key String, value UInt64", "ReplacingMergeTree() ORDER BY key", NULL },
	{ "batches", "day UInt32, node_id UInt64, id UInt64, node String, t UInt64",
	  "MergeTree() PARTITION BY day ORDER BY id", "node_id" },
	{ "samples", FACT_COLS "kind UInt8, labelset UInt64, t UInt64, stack UInt64, value Int64",
	  "MergeTree() PARTITION BY day ORDER BY (kind, labelset, t)", "node_id" },
	{ "samples_1m", "day UInt32, kind UInt8, labelset UInt64, bucket UInt64, stack UInt64,"
	  " value Int64, n UInt64",
	  "SummingMergeTree((value, n)) PARTITION BY day ORDER BY (kind, labelset, bucket, stack)", "rand()" },
	{ "samples_1h", "day UInt32, kind UInt8, labelset UInt64, bucket UInt64, stack UInt64,"
	  " value Int64, n UInt64",
	  "SummingMergeTree((value, n)) PARTITION BY day ORDER BY (kind, labelset, bucket, stack)", "rand()" },
	{ "samples_1d", "day UInt32, kind UInt8, labelset UInt64, bucket UInt64, stack UInt64,"
	  " value Int64, n UInt64",
	  "SummingMergeTree((value, n)) PARTITION BY day ORDER BY (kind, labelset, bucket, stack)", "rand()" },
	{ "points", FACT_COLS "series UInt64, t UInt64, v Float64",
	  "MergeTree() PARTITION BY day ORDER BY (series, t)", "node_id" },
	{ "intervals", FACT_COLS "kind String, labelset UInt64, start_ns UInt64, end_ns UInt64,"
	  " seq UInt32, attr_names Array(String), attr_values Array(String)",
	  "MergeTree() PARTITION BY day ORDER BY (kind, start_ns)", "node_id" },
	{ "labelsets_in", "node_id UInt64, id UInt64, node String, names Array(String),"
	  " values Array(String), first_ns UInt64, last_ns UInt64", "Null", "node_id" },
	{ "labelsets", "id UInt64, node String, names Array(String), values Array(String),"
	  " first_ns AggregateFunction(min, UInt64), last_ns AggregateFunction(max, UInt64)",
	  "AggregatingMergeTree() ORDER BY id", "rand()" },
	{ "locations", "node_id UInt64, id UInt64, function String, module String, build_id String,"
	  " file String, line UInt32, address UInt64, flags UInt8",
	  "ReplacingMergeTree() ORDER BY id", "node_id" },
	{ "stacks", "node_id UInt64, id UInt64, locs Array(UInt64)",
	  "ReplacingMergeTree() ORDER BY id", "node_id" },
	{ "series", "node_id UInt64, id UInt64, name String, labelset UInt64",
	  "ReplacingMergeTree() ORDER BY (name, id)", "node_id" },
};

const uint64_t ch_level_ns[CH_LEVELS] = { 60 * NSEC_PER_SEC, 3600 * NSEC_PER_SEC, CH_DAY_NS };
const char *const ch_level_table[CH_LEVELS] = { "samples_1m", "samples_1h", "samples_1d" };

/* Runs one DDL statement on URL i; the reason goes to err. */
static int ddl(struct ch *c, size_t i, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int ddl(struct ch *c, size_t i, char *err, size_t errlen, const char *fmt, ...)
{
	char *sql = NULL;
	va_list ap;
	int n, rc;

	va_start(ap, fmt);
	n = vasprintf(&sql, fmt, ap);
	va_end(ap);
	if (n < 0) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = ch_exec(c, (int)i, sql, NULL, 0, NULL, NULL);
	if (rc)
		snprintf(err, errlen, "%s", store_strerror());
	free(sql);
	return rc;
}

/* "18.16.1" -> 1816; 0 if unparsable. */
static int version_num(const char *v)
{
	int major = 0, minor = 0;

	if (sscanf(v, "%d.%d", &major, &minor) != 2)
		return 0;
	return major * 100 + minor;
}

static int check_server(struct ch *c, size_t i, char *err, size_t errlen)
{
	struct buf b = { 0 };
	int rc;

	rc = ch_exec(c, (int)i, "SELECT version()", NULL, 0, NULL, &b);
	buf_put(&b, "", 1);
	if (rc) {
		snprintf(err, errlen, "%s", store_strerror());
	} else if (version_num((char *)b.p) < 1816) {
		snprintf(err, errlen, "clickhouse %s is version %.20s; the ClickHouse store needs 18.16"
			 " or newer", c->urls[i], (char *)b.p);
		rc = -EPROTONOSUPPORT;
	}
	b.len = 0;
	if (!rc && c->clustered) {
		struct buf q = { 0 };

		buf_puts(&q, "SELECT count() FROM system.clusters WHERE cluster = ");
		sql_str(&q, c->o.ch_cluster);
		buf_put(&q, "", 1);
		rc = q.oom ? -ENOMEM : ch_exec(c, (int)i, (char *)q.p, NULL, 0, NULL, &b);
		buf_put(&b, "", 1);
		if (rc)
			snprintf(err, errlen, "%s", store_strerror());
		else if (!strtoull((char *)b.p, NULL, 10))
			rc = -ENOENT, snprintf(err, errlen, "clickhouse %s: cluster '%s' is not in its"
					       " remote_servers", c->urls[i], c->o.ch_cluster);
		buf_done(&q);
	}
	buf_done(&b);
	return rc;
}

/* Materialized views folding raw samples into each rollup level. */
static int rollup_views(struct ch *c, size_t i, const char *sfx, char *err, size_t errlen)
{
	static const char *const mv[CH_LEVELS] = { "samples_1m_mv", "samples_1h_mv",
						   "samples_1d_mv" };
	int rc = 0;

	for (int lv = 0; lv < CH_LEVELS && !rc; lv++)
		rc = ddl(c, i, err, errlen,
			 "CREATE MATERIALIZED VIEW IF NOT EXISTS %s.%s TO %s.%s%s AS SELECT"
			 " toUInt32(intDiv(t, %llu)) AS day, kind, labelset,"
			 " intDiv(t, %llu) * %llu AS bucket, stack, sum(value) AS value,"
			 " count() AS n FROM %s.samples%s GROUP BY day, kind, labelset, bucket, stack",
			 c->db, mv[lv], c->db, ch_level_table[lv], sfx,
			 (unsigned long long)CH_DAY_NS, (unsigned long long)ch_level_ns[lv],
			 (unsigned long long)ch_level_ns[lv], c->db, sfx);
	if (!rc)
		rc = ddl(c, i, err, errlen,
			 "CREATE MATERIALIZED VIEW IF NOT EXISTS %s.labelsets_mv TO %s.labelsets%s AS"
			 " SELECT id, any(node) AS node, any(names) AS names, any(values) AS values,"
			 " minState(first_ns) AS first_ns, maxState(last_ns) AS last_ns"
			 " FROM %s.labelsets_in%s GROUP BY id", c->db, c->db, sfx, c->db, sfx);
	return rc;
}

static int schema_version(struct ch *c, size_t i, char *err, size_t errlen)
{
	const char *meta = c->clustered ? "meta_local" : "meta";
	struct buf b = { 0 };
	unsigned long long v;
	int rc;

	char *sql = NULL;

	if (asprintf(&sql, "SELECT max(value) FROM %s.%s WHERE key = 'schema'", c->db, meta) < 0) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = ch_exec(c, (int)i, sql, NULL, 0, NULL, &b);	/* URL i's own table */
	free(sql);
	buf_put(&b, "", 1);
	if (rc) {
		snprintf(err, errlen, "%s", store_strerror());
		goto out;
	}
	v = strtoull((char *)b.p, NULL, 10);
	if (v > CH_SCHEMA_VERSION) {
		snprintf(err, errlen, "clickhouse %s: database '%s' has gpuscope schema %llu, newer"
			 " than this gpuscope-server (%d): upgrade the server", c->urls[i], c->db, v,
			 CH_SCHEMA_VERSION);
		rc = -EPROTONOSUPPORT;
	} else if (v < CH_SCHEMA_VERSION) {
		rc = ddl(c, i, err, errlen, "INSERT INTO %s.%s VALUES ('schema', %d)", c->db, meta,
			 CH_SCHEMA_VERSION);
	}
out:
	buf_done(&b);
	return rc;
}

int ch_schema(struct ch *c, char *err, size_t errlen)
{
	const char *sfx = c->clustered ? "_local" : "";
	int rc = 0;

	for (size_t i = 0; i < c->nurls && !rc; i++) {
		rc = check_server(c, i, err, errlen);
		if (!rc)
			rc = ddl(c, i, err, errlen, "CREATE DATABASE IF NOT EXISTS %s", c->db);
		for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]) && !rc; t++) {
			rc = ddl(c, i, err, errlen, "CREATE TABLE IF NOT EXISTS %s.%s%s (%s) ENGINE = %s",
				 c->db, tables[t].name, sfx, tables[t].columns, tables[t].engine);
			if (!rc && c->clustered && tables[t].shard_key)
				rc = ddl(c, i, err, errlen,
					 "CREATE TABLE IF NOT EXISTS %s.%s AS %s.%s_local ENGINE ="
					 " Distributed(%s, %s, %s_local, %s)", c->db, tables[t].name,
					 c->db, tables[t].name, c->o.ch_cluster, c->db, tables[t].name,
					 tables[t].shard_key);
		}
		if (!rc)
			rc = schema_version(c, i, err, errlen);
		if (!rc)
			rc = rollup_views(c, i, sfx, err, errlen);
	}
	return rc;
}
