/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The storage interface behind the HTTP API: ingest a validated batch, answer aggregations
 * (stack id -> value), stacks, series, intervals and label lookups. sqlite/ is the default
 * backend; every backend implements the same ops. Every function is thread-safe.
 */
#ifndef GPUSCOPE_STORE_H
#define GPUSCOPE_STORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/batch.h"
#include "common/hmap.h"
#include "server/codec.h"

struct Gpuscope__V1__Batch;
struct selector;

struct store_opts {
	const char *backend;		/* "sqlite" (NULL: the default) or "clickhouse" */
	const char *dir;		/* sqlite: data directory, created if missing */
	uint64_t retention_ns;		/* everything (rollups, series, intervals) */
	uint64_t raw_retention_ns;	/* per-sample chunks; effective min(this, retention) */
	uint64_t enforce_period_ns;	/* how often retention and rollups run */
	int recompress_level;		/* sqlite: zstd level of settled blobs; 0: off */
	uint64_t time_unit_ns;		/* sqlite: resolution of stored sample and interval times
					 * (and *_ns interval attrs), floored: 1000 µs; 0 or 1 ns */
	/* Cardinality per node and clock hour: label sets and stacks seen for the first time.
	 * sqlite: past the stack limit a batch is refused whole (ingest returns -EDQUOT); past the
	 * label-set limit only its further new label sets are, their records dropped and counted
	 * (-EDQUOT when nothing of the batch is left). clickhouse: counted per front-end, a batch
	 * past either limit refused whole (-EDQUOT). 0: no limit. */
	uint64_t max_new_label_sets_per_hour, max_new_stacks_per_hour;
	/* Held in memory (sqlite): label sets' bytes (a batch's new label sets past it are refused
	 * as past the per-node limit), and nodes that ingested since start (a new node's batches
	 * past it are refused, -EDQUOT). 0: no limit. */
	uint64_t max_label_set_bytes, max_nodes;
	/* sqlite: SQLite's heap (the page caches of every connection, statements, schema): a soft
	 * limit past which caches recycle their pages instead of growing, and a connection put back
	 * in the pool frees its cache. Each connection's cache at most a quarter of it (and 32 MiB).
	 * 0: SQ_CACHE_DEFAULT. */
	uint64_t sqlite_cache_bytes;

	/* clickhouse: HTTP interface URLs (http://HOST:8123), one per shard when clustered (the
	 * schema is created on each; any of them answers), the remote_servers cluster whose
	 * Distributed tables to use (NULL: one server, plain tables), database and credentials. */
	const char *const *ch_urls;
	size_t ch_nurls;
	const char *ch_cluster, *ch_database, *ch_user, *ch_password;
	/* clickhouse: how long a batch may wait for others to share its INSERTs (group commit) */
	uint64_t ch_commit_delay_ns;
	/* clickhouse: deadline of one statement to one URL (0: 10s); a slow shard answers 503 */
	uint64_t ch_timeout_ns;
};

/* Coverage of one answer, summed over the nodes seen: ns of the range (range x nodes). */
struct idle_est_cover {
	uint64_t range_ns;		/* the query's range times the nodes with any interval */
	uint64_t exact_ns;		/* decided by a source for its own time */
	uint64_t traced_ns;		/* inside representative windows (and not exact) */
	uint64_t extrapolated_ns;	/* undecided, stood for by the nearest window */
	uint64_t unknown_ns;		/* undecided, no window within IDLE_EST_REACH_NS */
	uint64_t windows;		/* representative windows that stand for some time */
	double max_weight;		/* largest weight a window's idle sample got */
	unsigned nodes;
};

/* What a GPU-idle answer estimated (aggregate() adds to it where gpu_idle >= 0; idle_est.h). */
struct idle_tally {
	double exact_value;		/* of the answer's total: decided idle where it was taken */
	double estimated_value;		/* what windows' samples stand for in undecided time */
	struct idle_est_cover cover;
	bool set;			/* aggregate() filled it */
};

/* What a query asks for; from < to, Unix ns, [from, to). */
struct store_query {
	uint64_t from_ns, to_ns;
	const struct selector *sel;	/* NULL: everything */
	enum sample_kind kind;
	int gpu_idle;			/* >= 0: keep samples where that GPU was idle: inside its
					 * gpu_observed intervals (some source decided) and outside
					 * its gpu_busy ones; not observed is unknown, not idle;
					 * trace windows' samples weighted to stand for the
					 * undecided time around them (idle_est.h) */
	struct idle_tally *idle;	/* gpu_idle: the estimate's parts (may be NULL) */
	bool python_only;		/* query.c's trees only (view=python): the interpreter's
					 * own frames between Python and native frames folded
					 * away, those at the leaf kept */
	/*
	 * Finer answers from aggregate(), when emit is set: every matching sample's (group, key,
	 * value) goes to emit (a nonzero return stops and is returned) instead of into agg; key
	 * is the stack id, or with step_ns > 0 the time bucket (t - from_ns) / step_ns (samples
	 * older than the raw retention count at the start of their minute). group is 0 without
	 * group_by, else the index + 1 in *groups of the label set's value of group_by:
	 * comma-separated label names, their values joined by STORE_GROUP_SEP ("" where absent),
	 * or "*": every label as name=value, joined by STORE_GROUP_SEP.
	 */
	const char *group_by;
	struct strtab *groups;
	uint64_t step_ns;
	int (*emit)(void *ctx, uint32_t group, uint64_t key, uint64_t value);
	void *emit_ctx;
};

#define STORE_GROUP_SEP "\x1f"

struct buf;

/* Writes the group value (NUL-terminated) of a label set (n name/value pairs) into b. */
void store_group_name(const char *const *pairs, size_t n, const char *group_by, struct buf *b);
/* Interns that value into groups; *ret = its index + 1. tmp: scratch. 0 or -errno. */
int store_group_index(struct strtab *groups, const char *const *pairs, size_t n,
		      const char *group_by, struct buf *tmp, uint32_t *ret);

/* The ClickHouse tables whose day partitions retention drops, in store_stats order. */
#define STORE_PART_TABLES "samples_raw", "samples_rollup", "points", "intervals"

struct store_stats {
	uint64_t bytes_on_disk;		/* database + WAL */
	uint64_t bytes_free;		/* of them, free pages of the database (sqlite) */
	uint64_t samples, points, intervals;	/* stored since start */
	uint64_t batches, duplicate_batches;
	uint64_t commits;		/* group commits: each stored one or more batches */
	uint64_t raw_chunks_deleted, rollups_deleted;	/* rows (sqlite) */
	/* day partitions dropped by retention (clickhouse), by table: STORE_PART_TABLES order */
	uint64_t partitions_dropped[4];
	uint64_t rollup_lag_chunks;	/* chunks not yet rolled up */
	/* hour and day rows built: kept, or deferred to the level below (sqlite) */
	uint64_t rollups_kept[2], rollups_deferred[2];
	uint64_t rollups_waiting;	/* ...and those late samples left to build again */
	uint64_t stacks, locations, label_sets;	/* known */
	uint64_t samples_held;			/* raw samples in the store now */
	/* off-CPU samples kept as the blocked intervals they repeat, and blocked intervals with a
	 * stack that had no sample to pair with (sqlite) */
	uint64_t offcpu_paired, offcpu_unpaired;
	uint64_t gc_stacks, gc_locations, gc_label_sets, gc_series;	/* dictionary GC, deleted */
	/* new label sets refused past the cardinality limit, and their records dropped */
	uint64_t cardinality_dropped_label_sets, cardinality_dropped_records;
	uint64_t label_set_bytes;	/* held in memory now (sqlite) */
	uint64_t nodes_held, nodes_refused;	/* nodes known since start; batches of new nodes
						 * refused at the node limit */
	uint64_t wal_truncations;	/* idle checkpoints that emptied the WAL */
	/* sqlite: SQLite's heap now and its soft limit; the in-memory dictionaries (location,
	 * stack, series and string indexes and the strings) */
	uint64_t sqlite_heap_bytes, sqlite_heap_limit, dict_bytes;
	/* background recompression: rows waiting, CPU spent, bytes looked at and after */
	uint64_t recompress_lag_rows, recompress_cpu_ns, recompress_in, recompress_out;
	/* ...and its merges of dictionary blocks: blocks merged, bytes before and after */
	uint64_t merged_blocks, merge_in, merge_out;
};

struct frame {
	const char *function, *module, *build_id, *file;	/* owned by the store's cache */
	uint32_t line;
	uint64_t address;
	bool kernel, inlined;
};

/* Callbacks for streaming answers; a nonzero return stops the iteration and is returned. */
typedef int (*store_labels_cb)(void *ctx, const char *const *pairs, size_t npairs);
typedef int (*store_point_cb)(void *ctx, uint64_t series_id, uint64_t t_ns, double v);
typedef int (*store_interval_cb)(void *ctx, const char *kind, const char *const *labels,
				 size_t nlabels, uint64_t start_ns, uint64_t end_ns,
				 const char *const *attrs, size_t nattrs);
typedef int (*store_name_cb)(void *ctx, const char *name);

struct store;

struct store_ops {
	/* Stores the batch whole or not at all, durably. 0, 1 (duplicate batch id), -errno. */
	int (*ingest)(struct store *s, const struct Gpuscope__V1__Batch *m, char *err,
		      size_t errlen);
	/* Adds stack id -> summed value over the query into agg (u64map). 0 or -errno. */
	int (*aggregate)(struct store *s, const struct store_query *q, struct u64map *agg);
	/* Frames of each stack in ids, innermost first, passed to cb (valid during the call);
	 * unknown ids get nframes 0. 0, -errno or cb's nonzero return. */
	int (*stacks)(struct store *s, const uint64_t *ids, size_t n,
		      int (*cb)(void *ctx, uint64_t id, const struct frame *frames, size_t nframes),
		      void *ctx);
	/* Every label set seen in [from, to) matching sel, as name/value pairs. */
	int (*label_sets)(struct store *s, uint64_t from_ns, uint64_t to_ns,
			  const struct selector *sel, store_labels_cb cb, void *ctx);
	/* Series named `name` matching sel: labels_cb once per series (its id in ctx order), then
	 * points in [from, to) in time order per series. */
	int (*series)(struct store *s, const char *name, uint64_t from_ns, uint64_t to_ns,
		      const struct selector *sel,
		      int (*series_cb)(void *ctx, uint64_t id, const char *const *pairs, size_t n),
		      store_point_cb point_cb, void *ctx);
	int (*metric_names)(struct store *s, store_name_cb cb, void *ctx);
	/* Intervals overlapping [from, to) of kind (NULL: all), sorted by start, at most limit. */
	int (*intervals)(struct store *s, const char *kind, uint64_t from_ns, uint64_t to_ns,
			 const struct selector *sel, size_t limit, store_interval_cb cb, void *ctx,
			 bool *ret_truncated);
	/* Every node with its first and last record time. */
	int (*nodes)(struct store *s,
		     int (*cb)(void *ctx, const char *node, uint64_t first_ns, uint64_t last_ns),
		     void *ctx);
	/* The CPU sampling period the node's agent last reported. 0 (*ret_ns set), -ENOENT
	 * (never reported), -errno. */
	int (*cpu_period)(struct store *s, const char *node, uint64_t *ret_ns);
	void (*stats)(struct store *s, struct store_stats *out);
	void (*close)(struct store *s);
};

struct store {
	const struct store_ops *ops;
};

/* Opens the backend opts->backend names; NULL with a one-line reason in err. Close with
 * s->ops->close(s). */
struct store *store_open(const struct store_opts *opts, char *err, size_t errlen);

/* Opens (creating) the SQLite store under opts->dir and starts its maintenance thread. NULL
 * with a reason in err. Close with s->ops->close(s). */
struct store *store_sqlite_open(const struct store_opts *opts, char *err, size_t errlen);

/* Connects to ClickHouse (opts->ch_*), creates or checks the schema and starts the retention
 * thread. NULL with a one-line reason in err (unreachable, refused credentials, server too old,
 * schema from a newer gpuscope). */
struct store *store_clickhouse_open(const struct store_opts *opts, char *err, size_t errlen);

/* Ingest helpers every backend shares (helpers.c), so that the same batch means the same label
 * sets, locations and interval attrs everywhere. */
#define STORE_LABEL_PAIRS_MAX (2 * (BATCH_MAX_LABELS + 1))

/*
 * The canonical label set i of batch m: "node" = the batch's node first (a label "node" in the
 * set is ignored), the first of duplicate names wins, sorted by name; 2n strings into pairs
 * (STORE_LABEL_PAIRS_MAX capacity, pointing into m). blob (reset, then "n\0v\0...") is its
 * serialized form. Returns its content hash (64-bit); *ret_n (may be NULL) gets n.
 */
uint64_t store_label_set(const struct Gpuscope__V1__Batch *m, size_t i, const char **pairs,
			 size_t *ret_n, struct buf *blob);
/* Content hash of a location: function, module, build-id and file names, line, address,
 * flags (1 kernel, 2 inlined); key is scratch. */
uint64_t store_location_hash_of(const char *const strs[4], uint32_t line, uint64_t address,
				uint32_t flags, struct buf *key);
/* Content hash of location l of batch m, store_location_hash_of() its fields. */
struct Gpuscope__V1__Location;
uint64_t store_location_hash(const struct Gpuscope__V1__Batch *m,
			     const struct Gpuscope__V1__Location *l, struct buf *key);
/*
 * What the store does with attr name=val of interval iv of batch m: keeps it as it is, drops
 * it, or takes it as the interval's stack: a version 1 batch names the stack in attr
 * "stack_id", a batch index in that wire version's text, read here once: *ret_stack its store
 * id (stack_gid: batch stack index -> store id), which the backends keep typed, at the attr's
 * place. Dropped: an invalid one, or one that Interval.stack gives too.
 */
enum store_iv_attr { STORE_IV_KEEP, STORE_IV_DROP, STORE_IV_STACK };
struct Gpuscope__V1__Interval;
enum store_iv_attr store_interval_attr(const struct Gpuscope__V1__Batch *m,
				       const struct Gpuscope__V1__Interval *iv, const char *name,
				       const char *val, const uint64_t *stack_gid,
				       uint64_t *ret_stack);
/* A version 2 interval's stack (Interval.stack) as the store's id (the value of its attr
 * "stack_id", after the other attrs); 0 when it has none. */
uint64_t store_interval_stack(const struct Gpuscope__V1__Interval *iv, const uint64_t *stack_gid);

/* gpu_idle: per node, the gpu_busy intervals of one GPU, merged (busy.c). */
struct busy {
	uint64_t start, end;
};

struct node_busy {
	const char *node;	/* not owned */
	struct busy *v;
	size_t n, cap;
};

struct busy_set {
	struct node_busy *nodes;
	size_t n;
};

/* The node's list (added empty if new); NULL on ENOMEM. */
struct node_busy *busy_node(struct busy_set *bs, const char *node);
/* Appends [start, end) to node's list. 0 or -ENOMEM. */
int busy_add(struct busy_set *bs, const char *node, uint64_t start, uint64_t end);
/* Sorts each node's intervals and merges overlapping ones (after the last busy_add). */
void busy_merge(struct busy_set *bs);
/* The node's merged list, NULL if it has none. */
const struct node_busy *busy_find(const struct busy_set *bs, const char *node);
/* Whether t lies inside one of nb's merged intervals. */
bool busy_in(const struct node_busy *nb, uint64_t t);
/* The same over a sorted, merged list of n intervals (v may be NULL when n is 0). */
bool busy_in_list(const struct busy *v, size_t n, uint64_t t);
void busy_done(struct busy_set *bs);

/*
 * Group commit (commitq.c): concurrent ingests queue up; one of them (the leader) takes every
 * queued item (at most max) and runs them together; the others wait. With delay_ns, the leader
 * first waits until the oldest queued item has waited delay_ns (or max are queued), as long as
 * items of more than one `source` arrived lately (one source alone waits for nobody).
 * store_commitq_run() returns once the run holding `it` returned (it->next is the leader's to
 * use until then). `run` gets the items as a list of n; it may not keep them. Items are
 * embedded first in the caller's own struct. Any thread.
 */
struct store_commitq_item {
	struct store_commitq_item *next;
	uint64_t queued_ns;		/* monotonic, when queued */
	uint64_t source;		/* who sent it (a node): set by the caller */
	bool done;
};

struct store_commitq {
	pthread_mutex_t mu;
	pthread_cond_t cond;		/* CLOCK_MONOTONIC */
	struct store_commitq_item *head, **tail;
	size_t queued;
	bool leader;
	uint64_t delay_ns;
	uint64_t last_source, mixed_ns;	/* the latest item's source; when a different one came */
	uint64_t nsources;		/* source changes seen (the first is not a mix) */
	uint64_t commits;		/* runs so far (mu) */
};

void store_commitq_init(struct store_commitq *q, uint64_t delay_ns);
void store_commitq_done(struct store_commitq *q);
void store_commitq_run(struct store_commitq *q, struct store_commitq_item *it, size_t max,
		       void (*run)(void *ctx, struct store_commitq_item *list, size_t n),
		       void *ctx);

/*
 * Why the last failed store call on this thread failed, for the HTTP answer ("" if the backend
 * gave no reason). Backends set it with store_set_error() before returning -errno; a backend
 * unavailable (a ClickHouse shard down) returns -EHOSTDOWN and names it here.
 */
const char *store_strerror(void);
void store_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
