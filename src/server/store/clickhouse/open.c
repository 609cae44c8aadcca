/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ClickHouse store's lifetime: options, schema at start, the retention thread, stats and
 * close. The front-end keeps no state that another front-end needs: any number of
 * gpuscope-server processes may share one ClickHouse cluster.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/log.h"
#include "server/store/clickhouse/ch.h"

static void *maint_main(void *arg)
{
	struct ch *c = arg;

	pthread_mutex_lock(&c->mmu);
	while (!c->stopping) {
		uint64_t until = wall_ns() + c->o.enforce_period_ns;
		struct timespec ts;

		pthread_mutex_unlock(&c->mmu);
		ch_enforce_retention(c);
		pthread_mutex_lock(&c->mmu);
		if (c->stopping)
			break;
		ts.tv_sec = (time_t)(until / NSEC_PER_SEC);
		ts.tv_nsec = (long)(until % NSEC_PER_SEC);
		pthread_cond_timedwait(&c->mcond, &c->mmu, &ts);
	}
	pthread_mutex_unlock(&c->mmu);
	return NULL;
}

/*
 * Per URL, this database's active parts: bytes, and rows of the stacks, locations and label
 * sets tables. /metrics runs this on a thread that serves requests: one statement per URL with
 * a short deadline, and a URL that missed it is skipped (its last answer kept) for a while, so
 * a frozen shard costs a scrape at most STATS_TIMEOUT_MS every STATS_SKIP_NS.
 */
#define STATS_TIMEOUT_MS	1000
#define STATS_SKIP_NS		(30 * NSEC_PER_SEC)

static void parts_sums(struct ch *c, uint64_t *bytes, uint64_t rows[3])
{
	*bytes = 0;
	memset(rows, 0, 3 * sizeof(rows[0]));
	for (size_t i = 0; i < c->nurls && i < 16; i++) {
		uint64_t now = mono_ns(), failed;
		struct buf ans = { 0 };
		char *sql = NULL;

		failed = __atomic_load_n(&c->stats_fail_ns[i], __ATOMIC_RELAXED);
		if (!failed || now - failed >= STATS_SKIP_NS) {
			if (asprintf(&sql, "SELECT sum(bytes), sumIf(rows, table LIKE 'stacks%%'), "
				     "sumIf(rows, table LIKE 'locations%%'), sumIf(rows, table LIKE "
				     "'labelsets%%') FROM system.parts WHERE database = '%s' AND "
				     "active FORMAT TSV", c->db) < 0)
				continue;
			if (!ch_exec_to(c, (int)i, sql, NULL, 0, NULL, STATS_TIMEOUT_MS, &ans)) {
				unsigned long long v[4] = { 0 };

				buf_put(&ans, "", 1);
				if (sscanf((char *)ans.p, "%llu\t%llu\t%llu\t%llu", &v[0], &v[1], &v[2],
					   &v[3]) == 4) {
					__atomic_store_n(&c->stats_bytes[i], v[0], __ATOMIC_RELAXED);
					for (int k = 0; k < 3; k++)
						__atomic_store_n(&c->stats_rows[i][k], v[k + 1],
								 __ATOMIC_RELAXED);
				}
				__atomic_store_n(&c->stats_fail_ns[i], 0, __ATOMIC_RELAXED);
			} else {
				__atomic_store_n(&c->stats_fail_ns[i], now ? now : 1, __ATOMIC_RELAXED);
			}
			free(sql);
			buf_done(&ans);
		}
		*bytes += __atomic_load_n(&c->stats_bytes[i], __ATOMIC_RELAXED);
		for (int k = 0; k < 3; k++)
			rows[k] += __atomic_load_n(&c->stats_rows[i][k], __ATOMIC_RELAXED);
	}
}

static void ch_stats(struct store *st, struct store_stats *o)
{
	struct ch *c = (struct ch *)st;
	uint64_t rows[3];

	memset(o, 0, sizeof(*o));
	parts_sums(c, &o->bytes_on_disk, rows);
	o->samples = __atomic_load_n(&c->n_samples, __ATOMIC_RELAXED);
	o->points = __atomic_load_n(&c->n_points, __ATOMIC_RELAXED);
	o->intervals = __atomic_load_n(&c->n_intervals, __ATOMIC_RELAXED);
	o->batches = __atomic_load_n(&c->n_batches, __ATOMIC_RELAXED);
	o->duplicate_batches = __atomic_load_n(&c->n_dups, __ATOMIC_RELAXED);
	o->commits = __atomic_load_n(&c->commitq.commits, __ATOMIC_RELAXED);
	for (size_t t = 0; t < 4; t++)
		o->partitions_dropped[t] = __atomic_load_n(&c->n_dropped[t], __ATOMIC_RELAXED);
	/* Rows before background merges fold duplicates: an upper bound. */
	o->stacks = rows[0];
	o->locations = rows[1];
	o->label_sets = rows[2];
}

static void ch_close(struct store *st)
{
	struct ch *c = (struct ch *)st;

	if (!c)
		return;
	if (c->maint_started) {
		pthread_mutex_lock(&c->mmu);
		c->stopping = true;
		pthread_cond_signal(&c->mcond);
		pthread_mutex_unlock(&c->mmu);
		pthread_join(c->maint, NULL);
	}
	ch_conn_done(c);
	for (size_t i = 0; i < c->nurls; i++)
		free(c->urls[i]);
	free(c->urls);
	free(c->db);
	u64map_done(&c->seen);
	u64map_done(&c->ls_seen);
	u64map_done(&c->node_ls);
	u64map_done(&c->node_stacks);
	store_commitq_done(&c->commitq);
	pthread_mutex_destroy(&c->pmu);
	pthread_mutex_destroy(&c->dmu);
	pthread_mutex_destroy(&c->mmu);
	pthread_cond_destroy(&c->mcond);
	free(c);
}

static const struct store_ops clickhouse_ops = {
	.ingest = ch_ingest,
	.aggregate = ch_aggregate,
	.stacks = ch_stacks,
	.label_sets = ch_label_sets,
	.series = ch_series,
	.metric_names = ch_metric_names,
	.intervals = ch_intervals,
	.nodes = ch_nodes,
	.stats = ch_stats,
	.close = ch_close,
};

static bool valid_name(const char *s)
{
	if (!*s || strlen(s) > 64)
		return false;
	for (; *s; s++)
		if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9')))
			return false;
	return true;
}

struct store *store_clickhouse_open(const struct store_opts *opts, char *err, size_t errlen)
{
	struct ch *c;

	if (!opts->ch_nurls) {
		snprintf(err, errlen, "--store clickhouse needs --clickhouse-url");
		return NULL;
	}
	if ((opts->ch_database && !valid_name(opts->ch_database)) ||
	    (opts->ch_cluster && !valid_name(opts->ch_cluster))) {
		snprintf(err, errlen, "clickhouse database and cluster names are [A-Za-z0-9_]{1,64}");
		return NULL;
	}
	for (size_t i = 0; i < opts->ch_nurls; i++) {
		if (strncmp(opts->ch_urls[i], "http://", 7) && strncmp(opts->ch_urls[i], "https://", 8)) {
			snprintf(err, errlen, "--clickhouse-url '%s': not an http:// or https:// URL",
				 opts->ch_urls[i]);
			return NULL;
		}
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		snprintf(err, errlen, "libcurl initialisation failed");
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->base.ops = &clickhouse_ops;
	c->o = *opts;
	c->clustered = opts->ch_cluster != NULL;
	c->timeout_ms = opts->ch_timeout_ns ? (long)(opts->ch_timeout_ns / 1000000) : 10000;
	if (c->timeout_ms < 100)
		c->timeout_ms = 100;
	/* a second less than ours: ClickHouse names the silent shard before we give up, and a
	 * big insert or a slow read between shards is not cut much earlier than the whole */
	c->shard_timeout_s = c->timeout_ms / 1000 - 1 > 1 ? c->timeout_ms / 1000 - 1 : 1;
	c->opening = true;
	store_commitq_init(&c->commitq, opts->ch_commit_delay_ns);
	pthread_mutex_init(&c->pmu, NULL);
	pthread_mutex_init(&c->dmu, NULL);
	pthread_mutex_init(&c->cmu, NULL);
	pthread_mutex_init(&c->mmu, NULL);
	pthread_cond_init(&c->mcond, NULL);
	c->db = strdup(opts->ch_database ? opts->ch_database : "gpuscope");
	c->urls = calloc(opts->ch_nurls, sizeof(*c->urls));
	if (!c->db || !c->urls) {
		snprintf(err, errlen, "out of memory");
		goto out_close;
	}
	for (size_t i = 0; i < opts->ch_nurls; i++) {
		size_t n = strlen(opts->ch_urls[i]);

		while (n && opts->ch_urls[i][n - 1] == '/')
			n--;
		c->urls[i] = strndup(opts->ch_urls[i], n);
		if (!c->urls[i]) {
			snprintf(err, errlen, "out of memory");
			goto out_close;
		}
		c->nurls++;
	}
	if (ch_schema(c, err, errlen))
		goto out_close;
	if (pthread_create(&c->maint, NULL, maint_main, c)) {
		snprintf(err, errlen, "cannot start the retention thread");
		goto out_close;
	}
	c->maint_started = true;
	c->opening = false;
	log_info("clickhouse store: %zu URL(s), database '%s'%s%s", c->nurls, c->db,
		 c->clustered ? ", cluster " : "", c->clustered ? opts->ch_cluster : "");
	return &c->base;
out_close:
	ch_close(&c->base);
	return NULL;
}
