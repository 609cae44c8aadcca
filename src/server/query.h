/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Query answers built over the store interface: flame graph trees (and diffs of two), top
 * functions and pprof, metric series in buckets, rendered to JSON or profile.proto.
 * Independent of the backend.
 */
#ifndef GPUSCOPE_QUERY_H
#define GPUSCOPE_QUERY_H

#include <stddef.h>
#include <stdint.h>
#include "server/codec.h"
#include "server/store/store.h"

/*
 * Flame graph JSON of q (and, when q2 is not NULL, the diff: every node carries value and
 * value2) appended to out; with q->group_by the root's children are the groups (their label
 * values joined by spaces, "[no LABEL]" where absent). 0 or -errno.
 */
int query_flamegraph(struct store *s, const struct store_query *q, const struct store_query *q2,
		     struct buf *out);

/* {"functions":[{"name":..,"self":..,"total":..}]} sorted by self, at most limit. */
int query_top(struct store *s, const struct store_query *q, size_t limit, struct buf *out);

/* gzip'd profile.proto of q, typed and labelled like `gpuscope-agent record`'s (query.c);
 * *ret malloc'ed. 0 or -errno. */
int query_pprof(struct store *s, const struct store_query *q, uint8_t **ret, size_t *ret_len);

#define QUERY_SERIES_MAX_POINTS (20u << 20)	/* points one series query may read */

/*
 * {"series":[{"labels":{..},"points":[[ms,min,avg,max],..]},..]} of the series `name` matching
 * sel over [from, to): a series with more points than `buckets` gets one point per non-empty
 * bucket of width ceil((to - from) / buckets), others their raw points (min = avg = max).
 * Appended to out. 0, -E2BIG (over QUERY_SERIES_MAX_POINTS) or -errno.
 */
int query_series(struct store *s, const char *name, uint64_t from_ns, uint64_t to_ns,
		 const struct selector *sel, size_t buckets, struct buf *out);

/*
 * {"unit","total","count","processes":[{"pid","comm","pod"?,"program"?,"cmdline"?,"value"}]}:
 * the processes with the most samples of q (comm: the name with the most of the process's
 * samples; program and cmdline: the agent's labels of what it ran then), at most limit.
 */
int query_processes(struct store *s, const struct store_query *q, size_t limit, struct buf *out);

/*
 * Samples over time: {"unit","from_ms","step_ms","series":[{"group"?,"total","values":[..]}]},
 * one value per q->step_ns bucket from q->from_ns (q->step_ns > 0); one series per group
 * with q->group_by, else one. 0 or -errno.
 */
int query_samples(struct store *s, const struct store_query *q, struct buf *out);

/* One sentence on how a GPU-idle answer was estimated (its tally from aggregate()), into buf;
 * snprintf's return. */
int query_idle_summary(const struct idle_tally *t, int gpu, char *buf, size_t len);

/* ,"KEY":{"exact","traced","extrapolated","unknown","windows","max_weight","estimated_share",
 * "method","summary"}: how a GPU-idle answer was estimated (docs/estimator.md), appended. */
void query_estimate_json(struct buf *out, const char *key, const struct idle_tally *t, int gpu);

/* Display name of a frame: the function, else "module+0xaddress". Returns buf or a frame string. */
const char *frame_name(const struct frame *f, char *buf, size_t len);

#endif
