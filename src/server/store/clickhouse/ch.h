/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the ClickHouse backend (docs/clickhouse.md): the store object, the HTTP client,
 * RowBinary writing and reading, and the entry points each file gives the others. Nothing
 * outside src/server/store/clickhouse/ includes this header.
 */
#ifndef GPUSCOPE_STORE_CH_H
#define GPUSCOPE_STORE_CH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "common/hmap.h"
#include "common/util.h"
#include "server/codec.h"
#include "server/store/store.h"

#define CH_SCHEMA_VERSION	2
#define CH_POOL_MAX		16		/* idle curl handles kept (keep-alive connections) */
#define CH_DEDUP_MAX		(1u << 20)	/* dictionary ids remembered as inserted */
#define CH_DAY_NS		(86400 * NSEC_PER_SEC)
#define CH_LEVELS		3		/* rollups: minute, hour, day */
#define CH_IDS_MASK		0x7fffffffffffffffULL	/* ids fit Int64 (SQL) and stay positive */

extern const uint64_t ch_level_ns[CH_LEVELS];

struct ch {
	struct store base;
	struct store_opts o;
	char **urls;			/* owned copies of o.ch_urls */
	size_t nurls;
	char *db;			/* database name */
	bool clustered;

	pthread_mutex_t pmu;		/* idle curl handles */
	void *pool[CH_POOL_MAX];
	int npool;
	unsigned next_url;		/* round robin start (atomic) */
	long timeout_ms;		/* deadline of one statement on one URL */
	long shard_timeout_s;		/* shard-to-shard socket timeouts (ClickHouse settings) */
	bool opening;			/* store_open running: a pending SIGTERM aborts requests */
	uint64_t stats_fail_ns[16];	/* per URL: last /metrics query that failed (skip a while) */
	uint64_t stats_bytes[16], stats_rows[16][3];	/* per URL: last answer */

	struct store_commitq commitq;	/* group commit of concurrent batches (ingest.c) */

	pthread_mutex_t dmu;		/* dictionary ids already inserted (content hash ids) */
	struct u64map seen;

	/* Cardinality per node and clock hour, as this front-end sees it (ingest.c): label set ids
	 * seen, and per node id (hour << 32 | count) of new label sets and of new stacks. */
	pthread_mutex_t cmu;
	struct u64map ls_seen, node_ls, node_stacks;

	pthread_t maint;
	pthread_mutex_t mmu;
	pthread_cond_t mcond;
	bool stopping, maint_started;

	/* Counters (updated with __atomic builtins). */
	uint64_t n_samples, n_points, n_intervals, n_batches, n_dups;
	uint64_t n_dropped[4];		/* day partitions, by table (store.h STORE_PART_TABLES) */
};

/* ---- conn.c: HTTP interface ---- */

/*
 * Runs one statement. With body (an INSERT's data), sql goes in the URL and body is sent as
 * the request body; without, sql is the request body. settings: extra URL parameters
 * ("a=1&b=2") or NULL. The answer is appended to out (may be NULL). url_index: which URL (-1:
 * any that answers, trying the next on a connection failure). 0, or -EHOSTDOWN (unreachable,
 * a shard down), -EACCES (credentials), -EIO (an error from ClickHouse) with the reason in
 * store_strerror(); -ENOMEM.
 */
int ch_exec(struct ch *c, int url_index, const char *sql, const void *body, size_t len,
	    const char *settings, struct buf *out);
/* ch_exec with its own deadline (ms) instead of --clickhouse-timeout: DDL, retention, stats. */
int ch_exec_to(struct ch *c, int url_index, const char *sql, const void *body, size_t len,
	       const char *settings, long timeout_ms, struct buf *out);
/* ch_exec with printf-formatted SQL and no body. */
int ch_execf(struct ch *c, struct buf *out, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void ch_conn_done(struct ch *c);

/* ---- RowBinary (rowbinary.c) ---- */

static inline void rb_u8(struct buf *b, uint8_t v)
{
	buf_put(b, &v, 1);
}

static inline void rb_u32(struct buf *b, uint32_t v)
{
	buf_put(b, &v, 4);	/* little-endian hosts only (x86-64, arm64) */
}

static inline void rb_u64(struct buf *b, uint64_t v)
{
	buf_put(b, &v, 8);
}

static inline void rb_f64(struct buf *b, double v)
{
	buf_put(b, &v, 8);
}

static inline void rb_str(struct buf *b, const char *s)
{
	size_t n = strlen(s);

	buf_uvarint(b, n);
	buf_put(b, s, n);
}

/* A String holding v's decimal digits: a typed number (a stack id) where the table keeps text. */
static inline void rb_dec(struct buf *b, uint64_t v)
{
	char d[20];
	size_t n = 0;

	do
		d[sizeof(d) - ++n] = (char)('0' + v % 10);
	while ((v /= 10));
	buf_uvarint(b, n);
	buf_put(b, d + sizeof(d) - n, n);
}

/* Reader over a RowBinary answer; `bad` set on overrun (reads return 0/"" from then on). */
struct rbr {
	const uint8_t *p, *end;
	bool bad;
};

uint8_t rbr_u8(struct rbr *r);
uint32_t rbr_u32(struct rbr *r);
uint64_t rbr_u64(struct rbr *r);
double rbr_f64(struct rbr *r);
/* An Array's element count (a varint). */
uint64_t rbr_uvarint_count(struct rbr *r);
/* A String: pointer into the answer (not NUL-terminated) and its length. */
const char *rbr_str(struct rbr *r, size_t *ret_len);
/* A String copied into b, NUL-terminated; returns its offset in b. */
size_t rbr_str_to(struct rbr *r, struct buf *b);
static inline bool rbr_more(const struct rbr *r)
{
	return !r->bad && r->p < r->end;
}

/* Appends s as a ClickHouse string literal ('...', escaped). */
void sql_str(struct buf *b, const char *s);

/* ---- schema.c ---- */
/* Creates (or checks) the database, tables and views on every URL. 0 or -errno, reason in err. */
int ch_schema(struct ch *c, char *err, size_t errlen);

/* ---- ingest.c ---- */
int ch_ingest(struct store *st, const struct Gpuscope__V1__Batch *m, char *err, size_t errlen);

/* ---- read.c ---- */

/* One label set as the reads see it. */
struct ch_lset {
	uint64_t id, first_ns, last_ns;
	const char **pairs;	/* 2n strings, pointing into the owning ch_lsets' strs */
	size_t n;
	const char *node;
	int64_t gpu;		/* value of the "gpu" label, -1 if none */
};

struct ch_lsets {
	struct ch_lset *v;
	size_t n;
	struct buf strs;
	const char **ptrs;
};

/* Label sets whose extent overlaps [from, to) and that match sel (NULL: all). 0 or -errno. */
int ch_lsets_load(struct ch *c, uint64_t from, uint64_t to, const struct selector *sel,
		  struct ch_lsets *ret);
void ch_lsets_done(struct ch_lsets *l);
/* Appends "a,b,c" (the ids of l), or "0" when empty. */
void ch_lsets_ids(const struct ch_lsets *l, struct buf *b);

int ch_aggregate(struct store *st, const struct store_query *q, struct u64map *agg);
int ch_stacks(struct store *st, const uint64_t *ids, size_t n,
	      int (*cb)(void *ctx, uint64_t id, const struct frame *frames, size_t nframes),
	      void *ctx);
int ch_label_sets(struct store *st, uint64_t from, uint64_t to, const struct selector *sel,
		  store_labels_cb cb, void *ctx);
int ch_series(struct store *st, const char *name, uint64_t from, uint64_t to,
	      const struct selector *sel,
	      int (*series_cb)(void *ctx, uint64_t id, const char *const *pairs, size_t n),
	      store_point_cb point_cb, void *ctx);
int ch_metric_names(struct store *st, store_name_cb cb, void *ctx);
int ch_intervals(struct store *st, const char *kind, uint64_t from, uint64_t to,
		 const struct selector *sel, size_t limit, store_interval_cb cb, void *ctx,
		 bool *ret_truncated);
int ch_nodes(struct store *st,
	     int (*cb)(void *ctx, const char *node, uint64_t first_ns, uint64_t last_ns),
	     void *ctx);

/* ---- retention.c ---- */
/* Drops the day partitions past retention on every URL. Maintenance thread. */
void ch_enforce_retention(struct ch *c);

#endif
