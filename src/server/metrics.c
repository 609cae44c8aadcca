/* SPDX-License-Identifier: Apache-2.0 */
/* The server's own /metrics exposition (Prometheus text format, common/prom.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "common/prom.h"
#include "common/util.h"
#include "server/efficiency.h"
#include "server/exporter.h"
#include "server/metrics.h"

static const char *const reject_names[REJ_MAX] = {
	"too_large", "bad_encoding", "unknown_encoding", "malformed", "unsupported_version",
	"store_error", "unauthorized", "bad_query", "not_found", "over_limit", "time_out_of_range",
	"selector_limit", "cardinality", "foreign_host", "cross_origin", "busy",
};

static const char *const part_tables[4] = { STORE_PART_TABLES };

int server_metrics(struct store *st, const struct http_counters *hc, double samples_per_second,
		   struct efficiency *eff, struct exporter *ex, struct buf *ret)
{
	struct store_stats s;
	char *text = NULL;
	size_t len = 0;
	FILE *out;

	st->ops->stats(st, &s);
	out = open_memstream(&text, &len);
	if (!out)
		return -ENOMEM;
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
	prom_family(out, "gpuscope_server_info", "gauge", "The server's version.");
	prom_sample1(out, "gpuscope_server_info", "version", GPUSCOPE_VERSION, 1);
	prom_counter(out, "gpuscope_server_ingest_batches_total",
		     "Batches accepted (duplicates included).", LOAD(hc->ingest_batches));
	prom_counter(out, "gpuscope_server_ingest_parts_total",
		     "Group commits the accepted batches took (a large batch is stored in parts).",
		     LOAD(hc->ingest_parts));
	prom_counter(out, "gpuscope_server_ingest_bytes_total",
		     "Request body bytes of accepted batches, as sent.", LOAD(hc->ingest_bytes));
	prom_counter(out, "gpuscope_server_ingest_samples_total", "Stack samples stored.",
		     s.samples);
	prom_counter(out, "gpuscope_server_ingest_points_total", "Metric points stored.", s.points);
	prom_counter(out, "gpuscope_server_ingest_intervals_total", "Intervals stored.",
		     s.intervals);
	prom_gauge(out, "gpuscope_server_ingest_samples_per_second",
		   "Stack samples stored per second, last 10 s.", samples_per_second);
	prom_counter(out, "gpuscope_server_duplicate_batches_total",
		     "Batches ignored because their id was stored.", s.duplicate_batches);
	prom_counter(out, "gpuscope_server_store_commits_total",
		     "Group commits of the store: each stored every batch (part) queued while the"
		     " one before it ran.", s.commits);
	prom_family(out, "gpuscope_server_rejected_total", "counter",
		    "Requests refused, by reason; nothing of them was stored.");
	for (int i = 0; i < REJ_MAX; i++)
		prom_sample1_u64(out, "gpuscope_server_rejected_total", "reason", reject_names[i],
				 LOAD(hc->rejects[i]));
	prom_gauge(out, "gpuscope_server_inflight_body_bytes",
		   "Bytes of ingest bodies held now (buffers and their decompressed form).",
		   LOAD(hc->inflight_bytes));
	prom_gauge(out, "gpuscope_server_inflight_body_bytes_limit",
		   "--max-inflight-bodies: past it an ingest is answered 503 (reason busy).",
		   (double)hc->inflight_max);
	prom_gauge(out, "gpuscope_server_connections", "HTTP connections open now.",
		   LOAD(hc->connections));
	prom_counter(out, "gpuscope_server_connections_total", "HTTP connections accepted.",
		     LOAD(hc->connections_total));
	prom_family(out, "gpuscope_server_connections_refused_total", "counter",
		    "Connections refused at accept: a client address at "
		    "--max-connections-per-address, or --max-connections in all, with none of "
		    "their connections still sending headers to close instead.");
	prom_sample1_u64(out, "gpuscope_server_connections_refused_total", "limit", "per_address",
			 LOAD(hc->refused[REFUSE_PER_ADDRESS]));
	prom_sample1_u64(out, "gpuscope_server_connections_refused_total", "limit", "global",
			 LOAD(hc->refused[REFUSE_GLOBAL]));
	prom_family(out, "gpuscope_server_connections_cut_total", "counter",
		    "Connections the server closed mid-request: headers not complete within "
		    "--header-timeout, a body slower than --min-body-rate, or the oldest still "
		    "sending headers closed to make room at a connection limit.");
	prom_sample1_u64(out, "gpuscope_server_connections_cut_total", "reason", "header_timeout",
			 LOAD(hc->cut[CUT_HEADERS]));
	prom_sample1_u64(out, "gpuscope_server_connections_cut_total", "reason", "slow_body",
			 LOAD(hc->cut[CUT_BODY]));
	prom_sample1_u64(out, "gpuscope_server_connections_cut_total", "reason", "evicted",
			 LOAD(hc->cut[CUT_EVICTED]));
	prom_counter(out, "gpuscope_server_http_errors_total",
		     "Connection-level refusals and failures (connection limits, TLS handshakes, "
		     "resets).",
		     LOAD(hc->mhd_errors));
	prom_counter(out, "gpuscope_server_http_cancelled_total",
		     "Requests whose client closed the connection before the answer was sent "
		     "(not errors).",
		     LOAD(hc->cancelled));
#undef LOAD
	prom_gauge(out, "gpuscope_server_store_bytes", "Database and WAL size on disk.",
		   s.bytes_on_disk);
	prom_gauge(out, "gpuscope_server_rollup_lag_chunks",
		   "Sample chunks not yet folded into rollups.", s.rollup_lag_chunks);
	prom_family(out, "gpuscope_server_rollup_rows_built_total", "counter",
		    "Hour and day rollup rows built since start, by level and whether the row was "
		    "kept or deferred to the rows below it (it would have taken more than half "
		    "their bytes).");
	for (int lv = 0; lv < 2; lv++) {
		const char *level = lv ? "day" : "hour";

		prom_sample_u64(out, "gpuscope_server_rollup_rows_built_total",
				(struct prom_label[]){ { "level", level }, { "row", "kept" } }, 2,
				s.rollups_kept[lv]);
		prom_sample_u64(out, "gpuscope_server_rollup_rows_built_total",
				(struct prom_label[]){ { "level", level }, { "row", "deferred" } },
				2, s.rollups_deferred[lv]);
	}
	prom_gauge(out, "gpuscope_server_rollup_rows_waiting",
		   "Hour and day rollup rows that samples coming late into a built bucket left to be "
		   "built again (30 s after the last of them; read from the rows below meanwhile).",
		   (double)s.rollups_waiting);
	prom_family(out, "gpuscope_server_retention_deleted_total", "counter",
		    "Rows deleted by retention, by table.");
	prom_sample1_u64(out, "gpuscope_server_retention_deleted_total", "table", "chunks",
			 s.raw_chunks_deleted);
	prom_sample1_u64(out, "gpuscope_server_retention_deleted_total", "table", "rollups",
			 s.rollups_deleted);
	prom_family(out, "gpuscope_server_retention_partitions_dropped_total", "counter",
		    "Day partitions dropped by retention, by table (ClickHouse store).");
	for (size_t t = 0; t < 4; t++)
		prom_sample1_u64(out, "gpuscope_server_retention_partitions_dropped_total", "table",
				 part_tables[t], s.partitions_dropped[t]);
	prom_gauge(out, "gpuscope_server_stacks", "Distinct stacks stored.", s.stacks);
	prom_gauge(out, "gpuscope_server_locations", "Distinct locations stored.", s.locations);
	prom_gauge(out, "gpuscope_server_label_sets", "Distinct label sets stored.", s.label_sets);
	prom_gauge(out, "gpuscope_server_store_samples_held", "Raw samples in the store now.",
		   (double)s.samples_held);
	prom_counter(out, "gpuscope_server_store_offcpu_samples_as_intervals_total",
		     "Off-CPU samples kept only as the blocked thread state they repeat.",
		     s.offcpu_paired);
	prom_counter(out, "gpuscope_server_store_offcpu_unpaired_intervals_total",
		     "Blocked thread states with a stack that had no off-CPU sample of their batch to "
		     "stand for.", s.offcpu_unpaired);
	prom_gauge(out, "gpuscope_server_store_free_bytes",
		   "Of the store's bytes on disk, free pages that the next writes reuse (left by "
		   "retention, dictionary GC and block merges).", s.bytes_free);
	if (s.samples_held)
		prom_gauge(out, "gpuscope_server_store_bytes_per_sample",
			   "Store bytes on disk less free pages (dictionaries, rollups, series and "
			   "intervals included) per raw sample held.",
			   (double)(s.bytes_on_disk - s.bytes_free) / (double)s.samples_held);
	prom_family(out, "gpuscope_server_dictionary_deleted_total", "counter",
		    "Dictionary rows no retained record could use, deleted after retention.");
	prom_sample1_u64(out, "gpuscope_server_dictionary_deleted_total", "table", "stacks",
			 s.gc_stacks);
	prom_sample1_u64(out, "gpuscope_server_dictionary_deleted_total", "table", "locations",
			 s.gc_locations);
	prom_sample1_u64(out, "gpuscope_server_dictionary_deleted_total", "table", "label_sets",
			 s.gc_label_sets);
	prom_sample1_u64(out, "gpuscope_server_dictionary_deleted_total", "table", "series",
			 s.gc_series);
	prom_gauge(out, "gpuscope_server_label_set_memory_bytes",
		   "Bytes of label sets held in memory (--max-label-set-memory).",
		   (double)s.label_set_bytes);
	if (s.sqlite_heap_limit) {
		prom_gauge(out, "gpuscope_server_sqlite_memory_bytes",
			   "SQLite's heap: page caches, statements, schema (--sqlite-cache).",
			   (double)s.sqlite_heap_bytes);
		prom_gauge(out, "gpuscope_server_sqlite_memory_limit_bytes",
			   "--sqlite-cache: past it page caches recycle instead of growing.",
			   (double)s.sqlite_heap_limit);
		prom_gauge(out, "gpuscope_server_dictionary_memory_bytes",
			   "The in-memory indexes of locations, stacks, series and strings, and the "
			   "strings.", (double)s.dict_bytes);
	}
	prom_gauge(out, "gpuscope_server_nodes_held", "Nodes that ingested since start (--max-nodes).",
		   (double)s.nodes_held);
	prom_counter(out, "gpuscope_server_nodes_refused_total",
		     "Batches of a new node refused 429 at --max-nodes.", s.nodes_refused);
	prom_family(out, "gpuscope_server_cardinality_dropped_total", "counter",
		    "New label sets refused past --max-new-label-sets-per-hour, and their records "
		    "(samples, points, intervals) dropped; the rest of their batches was stored.");
	prom_sample1_u64(out, "gpuscope_server_cardinality_dropped_total", "what", "label_sets",
			 s.cardinality_dropped_label_sets);
	prom_sample1_u64(out, "gpuscope_server_cardinality_dropped_total", "what", "records",
			 s.cardinality_dropped_records);
	prom_gauge(out, "gpuscope_server_store_recompress_lag_rows",
		   "Settled store rows (chunks, blocks) not yet compressed again at "
		   "--recompress-level.", s.recompress_lag_rows);
	prom_family(out, "gpuscope_server_store_recompress_cpu_seconds_total", "counter",
		    "CPU time the background recompression spent.");
	prom_sample(out, "gpuscope_server_store_recompress_cpu_seconds_total", NULL, 0,
		    (double)s.recompress_cpu_ns / 1e9);
	prom_family(out, "gpuscope_server_store_recompress_bytes_total", "counter",
		    "Stored bytes the background recompression looked at, before and after.");
	prom_sample1_u64(out, "gpuscope_server_store_recompress_bytes_total", "when", "before",
			 s.recompress_in);
	prom_sample1_u64(out, "gpuscope_server_store_recompress_bytes_total", "when", "after",
			 s.recompress_out);
	prom_counter(out, "gpuscope_server_store_blocks_merged_total",
		     "Dictionary blocks (stacks, label sets, strings) the background recompression "
		     "merged into larger ones.", s.merged_blocks);
	prom_family(out, "gpuscope_server_store_block_merge_bytes_total", "counter",
		    "Stored bytes of the dictionary blocks merged, before and after.");
	prom_sample1_u64(out, "gpuscope_server_store_block_merge_bytes_total", "when", "before",
			 s.merge_in);
	prom_sample1_u64(out, "gpuscope_server_store_block_merge_bytes_total", "when", "after",
			 s.merge_out);
	prom_counter(out, "gpuscope_server_store_wal_truncations_total",
		     "Checkpoints that emptied the store's write-ahead log while ingest paused.",
		     s.wal_truncations);
	if (eff) {
		uint64_t hours, dirty, lag;

		efficiency_stats(eff, &hours, &dirty, &lag);
		prom_family(out, "gpuscope_server_efficiency_hourly_rollups", "gauge",
			    "Hourly buckets of the efficiency rollup, by state.");
		prom_sample1_u64(out, "gpuscope_server_efficiency_hourly_rollups", "state", "done",
				 hours);
		prom_sample1_u64(out, "gpuscope_server_efficiency_hourly_rollups", "state", "redo",
				 dirty);
		prom_sample1_u64(out, "gpuscope_server_efficiency_hourly_rollups", "state", "waiting",
				 lag);
	}
	if (ex)
		exporter_metrics(ex, out);
	if (fclose(out)) {
		free(text);
		return -ENOMEM;
	}
	*ret = (struct buf){ .p = (uint8_t *)text, .len = len, .cap = len };
	return 0;
}
