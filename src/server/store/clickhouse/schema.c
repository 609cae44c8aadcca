/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ClickHouse schema (docs/clickhouse.md), created on every URL at start. ClickHouse 18.16:
 * no TTL (retention drops day partitions), no column codecs (so times are stored as deltas in
 * arrays, by us), no ON CLUSTER without ZooKeeper
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
	/* Raw samples: one row per (batch, kind, label set, day) run, times as deltas. */
	{ "samples_raw", FACT_COLS "kind UInt8, labelset UInt64, t0 UInt64, t1 UInt64,"
	  " dt_hi Array(UInt16), dt_lo Array(UInt16), stacks Array(UInt64), vals Array(Int64)",
	  "MergeTree() PARTITION BY day ORDER BY (kind, labelset, t0)", "node_id" },
	/* Rollups of every level, written by the front-end from the batch it holds: one row per
	 * (level, kind, label set, bucket) whose sMap sums by stack when parts merge. n (samples)
	 * is the plain column that SummingMergeTree needs to sum the map at all; node_id shards. */
	{ "samples_rollup", "level UInt8, kind UInt8, labelset UInt64, bucket UInt64,"
	  " node_id UInt64, n UInt64, sMap Nested(stack UInt64, value Int64)",
	  "SummingMergeTree() PARTITION BY intDiv(bucket, 86400000000000)"
	  " ORDER BY (level, kind, labelset, bucket, node_id)", "node_id" },
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
	/* DDL (and a migration's INSERT ... SELECT) may take long on a big database */
	rc = ch_exec_to(c, (int)i, sql, NULL, 0, NULL, 300000, NULL);
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

/* Label set extents: a Null table's inserts folded into min/max states. */
static int labelsets_view(struct ch *c, size_t i, const char *sfx, char *err, size_t errlen)
{
	return ddl(c, i, err, errlen,
		   "CREATE MATERIALIZED VIEW IF NOT EXISTS %s.labelsets_mv TO %s.labelsets%s AS"
		   " SELECT id, any(node) AS node, any(names) AS names, any(values) AS values,"
		   " minState(first_ns) AS first_ns, maxState(last_ns) AS last_ns"
		   " FROM %s.labelsets_in%s GROUP BY id", c->db, c->db, sfx, c->db, sfx);
}

static void dur(uint64_t ns, char *out, size_t len)
{
	uint64_t sec = ns / NSEC_PER_SEC;

	if (sec && !(sec % 86400))
		snprintf(out, len, "%llud", (unsigned long long)(sec / 86400));
	else if (sec && !(sec % 3600))
		snprintf(out, len, "%lluh", (unsigned long long)(sec / 3600));
	else
		snprintf(out, len, "%llus", (unsigned long long)sec);
}

/*
 * Retention is the cluster's, not a front-end's: the first front-end writes its --retention and
 * --raw-retention into meta (keys retention_ns, raw_retention_ns; the last row written wins,
 * FINAL), and a front-end whose flags disagree is refused, so that none drops day partitions
 * another still keeps. 0 or -EINVAL with the reason in err.
 */
static int agree_retention(struct ch *c, size_t i, const char *sfx, char *err, size_t errlen)
{
	unsigned long long ret = 0, raw = 0;
	struct buf b = { 0 };
	char *sql = NULL, have[32], have_raw[32], want[32], want_raw[32];
	int rc;

	if (asprintf(&sql, "SELECT key, value FROM %s.meta%s FINAL WHERE key IN ('retention_ns',"
		     " 'raw_retention_ns') FORMAT TSV", c->db, sfx) < 0) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = ch_exec(c, (int)i, sql, NULL, 0, NULL, &b);
	free(sql);
	buf_put(&b, "", 1);
	if (rc) {
		snprintf(err, errlen, "%s", store_strerror());
		buf_done(&b);
		return rc;
	}
	for (char *line = (char *)b.p, *nl; line && *line; line = nl) {
		unsigned long long val = 0;

		nl = strchr(line, '\n');
		if (nl)
			*nl++ = 0;
		if (sscanf(line, "retention_ns\t%llu", &val) == 1)
			ret = val;
		else if (sscanf(line, "raw_retention_ns\t%llu", &val) == 1)
			raw = val;
	}
	buf_done(&b);
	if (!ret && !raw)
		return ddl(c, i, err, errlen, "INSERT INTO %s.meta%s VALUES ('retention_ns', %llu),"
			   " ('raw_retention_ns', %llu)", c->db, sfx,
			   (unsigned long long)c->o.retention_ns,
			   (unsigned long long)c->o.raw_retention_ns);
	if (ret == c->o.retention_ns && raw == c->o.raw_retention_ns)
		return 0;
	dur(ret, have, sizeof(have));
	dur(raw, have_raw, sizeof(have_raw));
	dur(c->o.retention_ns, want, sizeof(want));
	dur(c->o.raw_retention_ns, want_raw, sizeof(want_raw));
	snprintf(err, errlen, "clickhouse database '%s' keeps --retention %s --raw-retention %s "
		 "(the cluster's, written by the first front-end); this one has --retention %s "
		 "--raw-retention %s: start every front-end with the cluster's (docs/clickhouse.md "
		 "says how to change it)", c->db, have, have_raw, want, want_raw);
	return -EINVAL;
}

/* The schema version URL i holds (0: a new database) in *ret. */
static int schema_version(struct ch *c, size_t i, unsigned long long *ret, char *err,
			  size_t errlen)
{
	const char *meta = c->clustered ? "meta_local" : "meta";
	struct buf b = { 0 };
	char *sql = NULL;
	int rc;

	if (asprintf(&sql, "SELECT max(value) FROM %s.%s WHERE key = 'schema'", c->db, meta) < 0) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = ch_exec(c, (int)i, sql, NULL, 0, NULL, &b);	/* URL i's own table */
	free(sql);
	buf_put(&b, "", 1);
	if (rc)
		snprintf(err, errlen, "%s", store_strerror());
	else
		*ret = strtoull((char *)b.p, NULL, 10);
	buf_done(&b);
	return rc;
}

/* Whether URL i's table (local name) holds no rows; -errno if it cannot say. */
static int table_empty(struct ch *c, size_t i, const char *table, const char *sfx, char *err,
		       size_t errlen)
{
	struct buf b = { 0 };
	char *sql = NULL;
	int rc;

	if (asprintf(&sql, "SELECT count() FROM %s.%s%s", c->db, table, sfx) < 0) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = ch_exec(c, (int)i, sql, NULL, 0, NULL, &b);
	free(sql);
	buf_put(&b, "", 1);
	if (rc)
		snprintf(err, errlen, "%s", store_strerror());
	else
		rc = strtoull((char *)b.p, NULL, 10) == 0;
	buf_done(&b);
	return rc;
}

/*
 * Schema 1 (one row per sample in `samples`, three materialized views re-grouping every insert
 * into samples_1m/1h/1d) to 2, on URL i's own tables: raw rows copied as runs of one sample,
 * rollup rows folded into one map per bucket, then the old views and tables dropped. Old
 * front-ends must be stopped first (their inserts would go to the dropped tables). A copy
 * that an interrupted migration finished is not repeated (its table is not empty).
 */
static int migrate_v1(struct ch *c, size_t i, const char *sfx, char *err, size_t errlen)
{
	static const char *const old[] = { "samples", "samples_1m", "samples_1h", "samples_1d",
					   "batches" };
	int rc;

	log_info("clickhouse %s: database '%s' has gpuscope schema 1: migrating to %d", c->urls[i],
		 c->db, CH_SCHEMA_VERSION);
	rc = table_empty(c, i, "samples_raw", sfx, err, errlen);
	if (rc == 1)
		rc = ddl(c, i, err, errlen,
			 "INSERT INTO %s.samples_raw%s SELECT day, node_id, batch, kind, labelset, t,"
			 " t, [toUInt16(0)], [toUInt16(0)], [stack], if(value = 1, emptyArrayInt64(),"
			 " [value]) FROM %s.samples%s", c->db, sfx, c->db, sfx);
	if (rc >= 0)
		rc = table_empty(c, i, "samples_rollup", sfx, err, errlen);
	for (int lv = 0; lv < CH_LEVELS && rc == 1; lv++)
		rc = ddl(c, i, err, errlen,
			 "INSERT INTO %s.samples_rollup%s (level, kind, labelset, bucket, node_id, n,"
			 " sMap.stack, sMap.value) SELECT %d, kind, labelset, bucket, 0, sum(n),"
			 " groupArray(stack), groupArray(value) FROM (SELECT kind, labelset, bucket,"
			 " stack, sum(value) AS value, sum(n) AS n FROM %s.%s%s GROUP BY kind,"
			 " labelset, bucket, stack) GROUP BY kind, labelset, bucket", c->db, sfx, lv,
			 c->db, old[1 + lv], sfx) ?: 1;
	for (int lv = 0; lv < CH_LEVELS && rc >= 0; lv++)
		rc = ddl(c, i, err, errlen, "DROP TABLE IF EXISTS %s.%s_mv", c->db, old[1 + lv]);
	for (size_t t = 0; t < sizeof(old) / sizeof(old[0]) && rc >= 0; t++) {
		rc = ddl(c, i, err, errlen, "DROP TABLE IF EXISTS %s.%s%s", c->db, old[t], sfx);
		if (rc >= 0 && c->clustered)
			rc = ddl(c, i, err, errlen, "DROP TABLE IF EXISTS %s.%s", c->db, old[t]);
	}
	return rc < 0 ? rc : 0;
}

int ch_schema(struct ch *c, char *err, size_t errlen)
{
	const char *sfx = c->clustered ? "_local" : "";
	unsigned long long v = 0;
	int rc = 0;

	for (size_t i = 0; i < c->nurls && !rc; i++) {
		rc = check_server(c, i, err, errlen);
		if (!rc)
			rc = ddl(c, i, err, errlen, "CREATE DATABASE IF NOT EXISTS %s", c->db);
		/* meta first: a database from a newer gpuscope is refused before anything else */
		if (!rc)
			rc = ddl(c, i, err, errlen, "CREATE TABLE IF NOT EXISTS %s.meta%s (%s) ENGINE = %s",
				 c->db, sfx, tables[0].columns, tables[0].engine);
		if (!rc)
			rc = schema_version(c, i, &v, err, errlen);
		if (!rc && v > CH_SCHEMA_VERSION) {
			snprintf(err, errlen, "clickhouse %s: database '%s' has gpuscope schema %llu,"
				 " newer than this gpuscope-server (%d): upgrade the server",
				 c->urls[i], c->db, v, CH_SCHEMA_VERSION);
			rc = -EPROTONOSUPPORT;
		}
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
			rc = labelsets_view(c, i, sfx, err, errlen);
		if (!rc && v == 1)
			rc = migrate_v1(c, i, sfx, err, errlen);
		if (!rc && v < CH_SCHEMA_VERSION)
			rc = ddl(c, i, err, errlen, "INSERT INTO %s.meta%s VALUES ('schema', %d)", c->db,
				 sfx, CH_SCHEMA_VERSION);
		if (!rc)
			rc = agree_retention(c, i, sfx, err, errlen);
	}
	return rc;
}
