/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ingest into ClickHouse. Every id is a content hash (label sets, locations, stacks, series),
 * so any front-end computes the same ids with no shared state. A batch is: its dictionaries
 * (idempotent: AggregatingMergeTree min/max extents, ReplacingMergeTree rows), then one RowBinary
 * INSERT per fact table and day (one part each, whole or nothing, on the node's shard): raw
 * sample runs, their rollups (every level, summed here from the batch), points, intervals. A
 * retry (a lost answer, a front-end killed mid-batch) finds what already landed -- each part's
 * first row by primary key, a rollup part's marker row -- and inserts only the rest, so a batch
 * is never stored twice; all of it found is a duplicate. 2xx only after every INSERT returned, with
 * insert_distributed_sync=1 (the shard has it, not a spool on the way).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/log.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/store/clickhouse/ing.h"

#define INSERT_SETTINGS "insert_distributed_sync=1&max_insert_block_size=100000000"
#define PROBE_SETTINGS \
	"max_query_size=268435456&max_ast_elements=100000000&max_expanded_ast_elements=100000000"

/* First record time of the batch (samples, points, interval starts); UINT64_MAX if none. */
static uint64_t batch_t0(const Gpuscope__V1__Batch *m)
{
	uint64_t t0 = UINT64_MAX;

	for (size_t g = 0; g < m->n_samples; g++) {
		uint64_t t = 0;

		for (size_t i = 0; i < m->samples[g]->n_time_delta_ns; i++) {
			t += (uint64_t)m->samples[g]->time_delta_ns[i];
			t0 = t < t0 ? t : t0;
		}
	}
	for (size_t s = 0; s < m->n_series; s++) {
		uint64_t t = 0;

		for (size_t i = 0; i < m->series[s]->n_time_delta_ns; i++) {
			t += (uint64_t)m->series[s]->time_delta_ns[i];
			t0 = t < t0 ? t : t0;
		}
	}
	for (size_t i = 0; i < m->n_intervals; i++)
		t0 = m->intervals[i]->start_ns < t0 ? m->intervals[i]->start_ns : t0;
	return t0;
}

static int insert(struct ch *c, const char *table, struct buf *rows)
{
	char sql[128];

	if (rows->oom)
		return -ENOMEM;
	if (!rows->len)
		return 0;
	snprintf(sql, sizeof(sql), "INSERT INTO %s.%s FORMAT RowBinary", c->db, table);
	return ch_exec(c, -1, sql, rows->p, rows->len, INSERT_SETTINGS, NULL);
}

/* Whether id is new to this front-end's cache of inserted dictionary rows (dmu held). */
static bool unseen(struct ch *c, struct u64map *seen, uint64_t id)
{
	if (u64map_find(seen, id))
		return false;
	if (seen->len > CH_DEDUP_MAX)
		u64map_done(seen);
	return true;
}

static uint64_t series_id(const struct cing *in, const Gpuscope__V1__MetricSeries *ms)
{
	uint64_t ls = in->ls_id[ms->label_set];
	struct buf key = { 0 };
	uint64_t id;

	buf_puts(&key, S(in, ms->name));
	buf_put(&key, &ls, sizeof(ls));
	id = key.oom ? 0 : ch_id(hash64(key.p, key.len, 14) ^ 3);
	buf_done(&key);
	return id;
}

/* Computes the ids and writes locations, stacks and series rows not inserted before. */
static int dictionaries(struct cing *in, struct buf *locs, struct buf *stacks, struct buf *series,
			struct u64map *added)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct ch *c = in->c;
	struct buf key = { 0 };
	int err = 0;

	pthread_mutex_lock(&c->dmu);
	for (size_t i = 0; i < m->n_locations; i++) {
		const Gpuscope__V1__Location *l = m->locations[i];
		uint64_t id = ch_id(store_location_hash(m, l, &key) ^ 1);

		in->loc_id[i] = id;
		if (!unseen(c, &c->seen, id) || u64map_find(added, id))
			continue;
		rb_u64(locs, in->node_id);
		rb_u64(locs, id);
		rb_str(locs, S(in, l->function));
		rb_str(locs, S(in, l->module));
		rb_str(locs, S(in, l->build_id));
		rb_str(locs, S(in, l->file));
		rb_u32(locs, l->line);
		rb_u64(locs, l->address);
		rb_u8(locs, (uint8_t)((l->kernel ? 1 : 0) | (l->inlined ? 2 : 0)));
		if (!u64map_upsert(added, id, 0, NULL))
			err = -ENOMEM;
	}
	for (size_t i = 0; i < m->n_stacks && !err; i++) {
		const Gpuscope__V1__Stack *st = m->stacks[i];
		uint64_t id;

		key.len = 0;
		for (size_t k = 0; k < st->n_locations; k++)
			buf_uvarint(&key, in->loc_id[st->locations[k]]);
		id = ch_id(hash64(key.p ? key.p : (uint8_t *)"", key.len, 13) ^ 2);
		in->stack_id[i] = id;
		if (!unseen(c, &c->seen, id) || u64map_find(added, id))
			continue;
		in->new_stacks++;
		rb_u64(stacks, in->node_id);
		rb_u64(stacks, id);
		buf_uvarint(stacks, st->n_locations);
		for (size_t k = 0; k < st->n_locations; k++)
			rb_u64(stacks, in->loc_id[st->locations[k]]);
		if (!u64map_upsert(added, id, 0, NULL))
			err = -ENOMEM;
	}
	for (size_t i = 0; i < m->n_series && !err; i++) {
		const Gpuscope__V1__MetricSeries *ms = m->series[i];
		uint64_t ls = in->ls_id[ms->label_set], id = series_id(in, ms);

		if (!unseen(c, &c->seen, id) || u64map_find(added, id))
			continue;
		rb_u64(series, in->node_id);
		rb_u64(series, id);
		rb_str(series, S(in, ms->name));
		rb_u64(series, ls);
		if (!u64map_upsert(added, id, 0, NULL))
			err = -ENOMEM;
	}
	pthread_mutex_unlock(&c->dmu);
	buf_done(&key);
	return err || key.oom || locs->oom || stacks->oom || series->oom ? -ENOMEM : 0;
}

/* The rows of one fact table that fall on one day: one INSERT, one part. */
static void parts_done(struct parts *p)
{
	for (size_t i = 0; i < p->n; i++) {
		buf_done(&p->v[i].rows);
		buf_done(&p->v[i].probe);
	}
	free(p->v);
	memset(p, 0, sizeof(*p));
}

static bool parts_oom(const struct parts *p)
{
	for (size_t i = 0; i < p->n; i++)
		if (p->v[i].rows.oom || p->v[i].probe.oom)
			return true;
	return p->oom;
}

static void point_rows(struct cing *in, struct parts *ps, uint64_t *ret_n)
{
	const Gpuscope__V1__Batch *m = in->m;

	for (size_t s = 0; s < m->n_series; s++) {
		const Gpuscope__V1__MetricSeries *ms = m->series[s];
		uint64_t t = 0, lo = UINT64_MAX, hi = 0, id = series_id(in, ms);

		for (size_t i = 0; i < ms->n_value; i++) {
			struct part *pt;

			t += (uint64_t)ms->time_delta_ns[i];
			pt = part_of(ps, t / CH_DAY_NS);
			if (!pt)
				return;
			fact_head(in, pt);
			rb_u64(&pt->rows, id);
			rb_u64(&pt->rows, t);
			rb_f64(&pt->rows, ms->value[i]);
			lo = t < lo ? t : lo;
			hi = t > hi ? t : hi;
			if (!pt->probe.len) {
				probe_head(in, pt);
				buf_printf(&pt->probe, "%llu, %llu)",
					   (unsigned long long)id, (unsigned long long)t);
			}
		}
		if (ms->n_value)
			touch(in, ms->label_set, lo, hi);
		*ret_n += ms->n_value;
	}
}

/* Interval rows, by the day they start. */
static void interval_rows(struct cing *in, struct parts *ps)
{
	const Gpuscope__V1__Batch *m = in->m;

	for (size_t i = 0; i < m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];
		const char *names[BATCH_MAX_LABELS + 1], *vals[BATCH_MAX_LABELS + 1];
		struct part *pt = part_of(ps, iv->start_ns / CH_DAY_NS);
		struct buf *b = pt ? &pt->rows : NULL;
		uint64_t stack = 0;	/* the store's id, at names[stack_at] (vals[] NULL there) */
		size_t na = 0, stack_at = SIZE_MAX;

		if (!pt)
			return;
		for (size_t k = 0; k + 1 < iv->n_attrs && na < BATCH_MAX_LABELS; k += 2) {
			const char *name = S(in, iv->attrs[k]), *val = S(in, iv->attrs[k + 1]);
			uint64_t id = 0;
			enum store_iv_attr what = store_interval_attr(m, iv, name, val,
								      in->stack_id, &id);

			if (what == STORE_IV_DROP || (what == STORE_IV_STACK && stack_at != SIZE_MAX))
				continue;
			if (what == STORE_IV_STACK) {	/* version 1's, kept at its place */
				stack = id;
				stack_at = na;
			}
			names[na] = name;
			vals[na++] = what == STORE_IV_STACK ? NULL : val;
		}
		if (iv->stack) {
			stack = store_interval_stack(iv, in->stack_id);
			stack_at = na;
			vals[na] = NULL;
			names[na++] = "stack_id";
		}
		fact_head(in, pt);
		rb_str(b, S(in, iv->kind));
		rb_u64(b, in->ls_id[iv->label_set]);
		rb_u64(b, iv->start_ns);
		rb_u64(b, iv->end_ns);
		rb_u32(b, (uint32_t)i);
		buf_uvarint(b, na);
		for (size_t k = 0; k < na; k++)
			rb_str(b, names[k]);
		buf_uvarint(b, na);
		for (size_t k = 0; k < na; k++) {
			if (k == stack_at)
				rb_dec(b, stack);
			else
				rb_str(b, vals[k]);
		}
		touch(in, iv->label_set, iv->start_ns, iv->end_ns);
		if (!pt->probe.len) {
			probe_head(in, pt);
			sql_str(&pt->probe, S(in, iv->kind));
			buf_printf(&pt->probe, ", %llu)",
				   (unsigned long long)iv->start_ns);
		}
	}
}

/*
 * Label set rows (with this batch's extents), for the sets that have records, straight into the
 * AggregatingMergeTree: the extents as min/max states (a `has` byte, then the value), no view
 * re-grouping each insert (labelsets_in and its view stay for older front-ends).
 */
static int labelset_rows(struct cing *in, struct buf *b)
{
	const Gpuscope__V1__Batch *m = in->m;
	const char *pairs[STORE_LABEL_PAIRS_MAX];
	struct buf blob = { 0 };

	for (size_t i = 0; i < m->n_label_sets; i++) {
		size_t n;

		in->ls_id[i] = ch_id(store_label_set(m, i, pairs, &n, &blob));
		if (in->ls_first[i] == UINT64_MAX)
			continue;
		rb_u64(b, in->ls_id[i]);
		rb_str(b, S(in, m->node));
		buf_uvarint(b, n);
		for (size_t k = 0; k < n; k++)
			rb_str(b, pairs[2 * k]);
		buf_uvarint(b, n);
		for (size_t k = 0; k < n; k++)
			rb_str(b, pairs[2 * k + 1]);
		rb_u8(b, 1);
		rb_u64(b, in->ls_first[i]);
		rb_u8(b, 1);
		rb_u64(b, in->ls_last[i]);
	}
	buf_done(&blob);
	return b->oom ? -ENOMEM : 0;
}

#define NFACT 4
static const char *const fact_tables[NFACT] = { "samples_raw", "samples_rollup", "points",
						"intervals" };
#define NDICT 4
static const char *const dict_tables[NDICT] = { "labelsets", "locations", "stacks", "series" };
#define GROUP_MAX 64	/* batches in one group commit */

/* One batch prepared for a group commit: its rows, ready to be joined with other batches'. */
struct chb {
	struct store_commitq_item q;	/* first: the queue's list is a list of chbs */
	uint64_t batch;			/* id; 0: none (no probe, no dedup) */
	struct buf dict[NDICT];		/* dictionary rows, in dict_tables order */
	struct parts facts[NFACT];	/* fact rows by table and day */
	struct u64map added;		/* dictionary ids these rows add */
	uint64_t new_stacks;		/* cardinality (admit()) */
	uint64_t hash;			/* content (raw samples, points, intervals), in markers */
	bool reused;			/* its id's marker holds another content: a duplicate */
	uint64_t *ls_ids;		/* the batch's label set ids (n_label_sets) */
	uint64_t nsamples, npoints, nintervals;
	bool dicts_stored;		/* its dictionary rows' INSERTs returned */
	int rc;				/* set by the commit: 0, 1 (duplicate), -errno */
	char *err;
	size_t errlen;
};

static int nparts(const struct chb *b)
{
	int n = 0;

	for (int t = 0; t < NFACT; t++)
		n += (int)b->facts[t].n;
	return n;
}

static bool all_stored(const struct chb *b)
{
	for (int t = 0; t < NFACT; t++)
		for (size_t i = 0; i < b->facts[t].n; i++)
			if (!b->facts[t].v[i].stored)
				return false;
	return true;
}

static void fail(struct chb *b, int rc)
{
	b->rc = rc;
	snprintf(b->err, b->errlen, "%s", rc == -ENOMEM ? "store: out of memory" : store_strerror());
}

/*
 * How a fact table's probe finds a part's first row: the key columns of its probe tuples, and
 * (batch, day) of each row found. A rollup part's first row is its marker (level 255, the batch
 * id as label set, the day's first bucket).
 */
static const char *const probe_cols[NFACT] = {
	"(day, batch, kind, labelset, t0)",
	"level = 255 AND kind = 0 AND (labelset, bucket)",
	"(day, batch, series, t)",
	"(day, batch, kind, start_ns)",
};
static const char *const probe_found[NFACT] = {
	"batch, toUInt64(day), toUInt64(0)",
	"labelset, intDiv(bucket, 86400000000000), toUInt64(arraySum(sMap.value))",
	"batch, toUInt64(day), toUInt64(0)", "batch, toUInt64(day), toUInt64(0)",
};

static struct part *part_find(struct chb *b, int t, uint64_t day)
{
	for (size_t i = 0; i < b->facts[t].n; i++)
		if (b->facts[t].v[i].day == day)
			return &b->facts[t].v[i];
	return NULL;
}

/*
 * What of the group's batches is already stored, in one query (a SELECT per fact table, their
 * first rows' keys IN a set): each part's `stored` set if its first row is there (one part is
 * all or nothing). A batch all of whose parts are there is a duplicate (rc 1). 0, or -errno if
 * ClickHouse cannot say.
 */
static int landed(struct ch *c, struct chb **v, size_t n)
{
	struct buf q = { 0 }, ans = { 0 };
	int rc = 0, nsel = 0;

	for (int t = 0; t < NFACT; t++) {
		const struct part *first = NULL;

		for (size_t b = 0; b < n; b++) {
			if (!v[b]->batch || v[b]->rc)
				continue;
			for (size_t i = 0; i < v[b]->facts[t].n; i++) {
				const struct part *pt = &v[b]->facts[t].v[i];

				if (!first) {
					buf_printf(&q, "%sSELECT toUInt8(%d), %s FROM %s.%s WHERE %s IN (",
						   nsel++ ? " UNION ALL " : "", t, probe_found[t],
						   c->db, fact_tables[t], probe_cols[t]);
					/* twice: one tuple alone in parentheses would be the set */
					buf_put(&q, pt->probe.p, pt->probe.len);
					first = pt;
				}
				buf_puts(&q, ", ");
				buf_put(&q, pt->probe.p, pt->probe.len);
			}
		}
		if (first)
			buf_puts(&q, ")");
	}
	if (!nsel) {
		buf_done(&q);
		return 0;
	}
	buf_puts(&q, " FORMAT TSV");
	buf_put(&q, "", 1);
	/* the probe quotes each part's first key (an interval's kind may be long): the reads'
	 * raised statement size, or one client's long kind fails everyone's commit */
	rc = q.oom ? -ENOMEM : ch_exec(c, -1, (char *)q.p, NULL, 0, PROBE_SETTINGS, &ans);
	buf_put(&ans, "", 1);
	for (char *p = (char *)ans.p, *end; !rc && ans.p && *p; p = end) {
		unsigned long t;
		unsigned long long bid, day, hash;
		int used = 0;

		if (sscanf(p, "%lu\t%llu\t%llu\t%llu\n%n", &t, &bid, &day, &hash, &used) != 4 ||
		    !used ||
		    t >= NFACT) {
			store_set_error("clickhouse: unexpected answer '%.60s'", p);
			rc = -EIO;
			break;
		}
		end = p + used;
		for (size_t b = 0; b < n; b++) {
			struct part *pt = v[b]->batch == bid && !v[b]->rc ?
					  part_find(v[b], (int)t, day) : NULL;

			if (pt)
				pt->stored = true;
			/* a marker of other content (0: written before markers had one): the id
			 * was used for another batch; its first content stays, as on SQLite */
			if (pt && hash && hash != v[b]->hash && !v[b]->reused) {
				log_warn("batch %llu: id reused with other content: refused as a "
					 "duplicate", bid);
				v[b]->reused = true;
			}
		}
	}
	for (size_t b = 0; b < n && !rc; b++) {
		int have = 0;

		if (!v[b]->batch || v[b]->rc)
			continue;
		for (int t = 0; t < NFACT; t++)
			for (size_t i = 0; i < v[b]->facts[t].n; i++)
				have += v[b]->facts[t].v[i].stored;
		if ((have && have == nparts(v[b])) || v[b]->reused)
			v[b]->rc = 1;
		else if (have)
			log_info("batch %llu: %d parts of an earlier attempt are stored, adding the rest",
				 (unsigned long long)v[b]->batch, have);
	}
	buf_done(&q);
	buf_done(&ans);
	return rc;
}

/* Inserts the rows of n buffers as one INSERT (one part per day partition). */
static int insert_joint(struct ch *c, const char *table, struct buf **rows, size_t n,
			struct buf *tmp)
{
	if (n == 1)
		return insert(c, table, rows[0]);
	tmp->len = 0;
	for (size_t i = 0; i < n; i++)
		buf_put(tmp, rows[i]->p, rows[i]->len);
	return insert(c, table, tmp);
}

/*
 * The leader's part of a group commit: every batch of the group that is not a duplicate is
 * stored with one INSERT per dictionary table and one per (fact table, day), so that a
 * ClickHouse part (the unit of its cost: 20-40 files, merges) holds many batches. A fact part
 * lives in one day partition, so each batch's rows of a (table, day) land in one part, whole
 * or not at all, and a retry's probe finds them. The first failed INSERT stops the commit:
 * each batch not yet wholly stored gets that error (a retry probes and adds what is missing),
 * one wholly stored gets 0. Two batches with one id in the group: the later one answers as a
 * duplicate of the first (never stored twice).
 */
static void commit_group(void *ctx, struct store_commitq_item *list, size_t n)
{
	struct ch *c = ctx;
	struct chb **v = calloc(n, sizeof(*v));
	struct buf **rows = calloc(n, sizeof(*rows));
	struct part **pts = calloc(n, sizeof(*pts));
	struct buf tmp = { 0 };
	size_t k = 0;
	int rc = 0;

	for (struct store_commitq_item *it = list; it && k < n; it = it->next)
		if (v)
			v[k++] = (struct chb *)it;
	if (!v || !rows || !pts) {
		for (struct store_commitq_item *it = list; it; it = it->next)
			fail((struct chb *)it, -ENOMEM);
		goto out;
	}
	for (size_t b = 0; b < n; b++)
		v[b]->rc = 0;
	/* A later batch with the id of an earlier one waits for that one's outcome. */
	for (size_t b = 1; b < n; b++)
		for (size_t a = 0; a < b && v[b]->batch; a++)
			if (v[a]->batch == v[b]->batch && v[a]->rc != 2) {
				v[b]->rc = 2;
				break;
			}
	rc = landed(c, v, n);
	if (rc == -EIO && n > 1) {
		/* ClickHouse refused the joint probe (a statement too big, say): one batch's content
		 * must not fail the others, so each is probed alone and only those refused fail. */
		rc = 0;
		for (size_t b = 0; b < n; b++) {
			int r;

			if (!v[b]->batch || v[b]->rc)
				continue;
			r = landed(c, &v[b], 1);
			if (r == -EIO)
				fail(v[b], r);
			else if (r)
				rc = r;
		}
	}
	/* Dictionaries first: no stored fact names a stack or label set that is not there. */
	for (int d = 0; d < NDICT && !rc; d++) {
		size_t m = 0;

		for (size_t b = 0; b < n; b++)
			if (!v[b]->rc && v[b]->dict[d].len)
				rows[m++] = &v[b]->dict[d];
		if (m)
			rc = insert_joint(c, dict_tables[d], rows, m, &tmp);
	}
	for (size_t b = 0; b < n && !rc; b++)
		v[b]->dicts_stored = true;
	for (int t = 0; t < NFACT && !rc; t++) {
		for (;;) {
			uint64_t day = UINT64_MAX;
			size_t m = 0;

			/* The next day with unstored parts of this table. */
			for (size_t b = 0; b < n; b++)
				for (size_t i = 0; !v[b]->rc && i < v[b]->facts[t].n; i++)
					if (!v[b]->facts[t].v[i].stored && v[b]->facts[t].v[i].day < day)
						day = v[b]->facts[t].v[i].day;
			if (day == UINT64_MAX)
				break;
			for (size_t b = 0; b < n; b++) {
				for (size_t i = 0; !v[b]->rc && i < v[b]->facts[t].n; i++) {
					struct part *pt = &v[b]->facts[t].v[i];

					if (!pt->stored && pt->day == day) {
						pts[m] = pt;
						rows[m++] = &pt->rows;
					}
				}
			}
			rc = insert_joint(c, fact_tables[t], rows, m, &tmp);
			if (rc)
				break;
			for (size_t i = 0; i < m; i++)
				pts[i]->stored = true;
		}
	}
	for (size_t b = 0; b < n; b++) {
		struct chb *x = v[b];

		if (x->rc == 2) {	/* the outcome of the first batch with its id */
			for (size_t a = 0; a < b; a++) {
				if (v[a]->batch == x->batch && v[a]->rc != 2) {
					x->rc = v[a]->rc < 0 ? v[a]->rc : 1;
					if (x->rc < 0)
						snprintf(x->err, x->errlen, "%s", v[a]->err);
					break;
				}
			}
		} else if (!x->rc && rc && (!x->dicts_stored || !all_stored(x))) {
			fail(x, rc);
		}
		if (x->rc == 1) {
			__atomic_add_fetch(&c->n_dups, 1, __ATOMIC_RELAXED);
			continue;
		}
		if (x->rc)
			continue;
		/* Remember the dictionary rows now stored, so later batches skip them. */
		pthread_mutex_lock(&c->dmu);
		for (size_t i = 0; i < x->added.cap; i++)
			if (x->added.keys[i] && !u64map_upsert(&c->seen, x->added.keys[i], 0, NULL))
				break;
		pthread_mutex_unlock(&c->dmu);
		__atomic_add_fetch(&c->n_samples, x->nsamples, __ATOMIC_RELAXED);
		__atomic_add_fetch(&c->n_points, x->npoints, __ATOMIC_RELAXED);
		__atomic_add_fetch(&c->n_intervals, x->nintervals, __ATOMIC_RELAXED);
		__atomic_add_fetch(&c->n_batches, 1, __ATOMIC_RELAXED);
	}
out:
	buf_done(&tmp);
	free(v);
	free(rows);
	free(pts);
}

/*
 * The batch's content: a hash of its raw sample, point and interval rows (deterministic, the
 * same on every front-end), written into each rollup marker (its one map entry's value) so that
 * a probe tells a retry of this batch from another batch reusing its id.
 */
static void content_hash(struct chb *b)
{
	static const int tables[] = { 0, 2, 3 };
	uint64_t h = 0x9e3779b97f4a7c15ULL;

	for (size_t k = 0; k < sizeof(tables) / sizeof(tables[0]); k++)
		for (size_t i = 0; i < b->facts[tables[k]].n; i++) {
			const struct buf *r = &b->facts[tables[k]].v[i].rows;

			h = h * 31 + hash64(r->p ? r->p : (const uint8_t *)"", r->len, 17);
		}
	b->hash = ch_id(h);
	/* level, kind, labelset, bucket, node_id, n, uvarint 1, stack, uvarint 1, then value */
	for (size_t i = 0; i < b->facts[1].n; i++) {
		struct buf *r = &b->facts[1].v[i].rows;

		if (r->len >= 44 + 8)
			memcpy(r->p + 44, &b->hash, 8);
	}
}

/* Prepares the rows of batch m into b (ids, dictionaries, facts by table and day). 0 or -errno. */
static int prepare(struct ch *c, const Gpuscope__V1__Batch *m, struct chb *b)
{
	struct cing in = { .c = c, .m = m };
	uint64_t t0 = batch_t0(m);
	int rc = 0;

	in.node_id = ch_id(hash64(S(&in, m->node), strlen(S(&in, m->node)), 16));
	in.day = (t0 == UINT64_MAX ? wall_ns() : t0) / CH_DAY_NS;
	in.batch = b->batch = m->batch_id;
	b->q.source = in.node_id;	/* group commit waits while several nodes send */
	in.ls_id = calloc(m->n_label_sets + 1, sizeof(*in.ls_id));
	in.ls_first = malloc((m->n_label_sets + 1) * sizeof(*in.ls_first));
	in.ls_last = calloc(m->n_label_sets + 1, sizeof(*in.ls_last));
	in.loc_id = calloc(m->n_locations + 1, sizeof(*in.loc_id));
	in.stack_id = calloc(m->n_stacks + 1, sizeof(*in.stack_id));
	if (!in.ls_id || !in.ls_first || !in.ls_last || !in.loc_id || !in.stack_id) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i <= m->n_label_sets; i++)
		in.ls_first[i] = UINT64_MAX;
	/* Label set ids first (series ids hash them); their extents after the facts. */
	rc = labelset_rows(&in, &b->dict[0]);
	b->dict[0].len = 0;
	if (!rc)
		rc = dictionaries(&in, &b->dict[1], &b->dict[2], &b->dict[3], &b->added);
	if (!rc)
		rc = ch_sample_rows(&in, &b->facts[0], &b->facts[1], &b->nsamples);
	if (rc)
		goto out;
	point_rows(&in, &b->facts[2], &b->npoints);
	interval_rows(&in, &b->facts[3]);
	b->nintervals = m->n_intervals;
	rc = labelset_rows(&in, &b->dict[0]);
	for (int t = 0; t < NFACT && !rc; t++)
		if (parts_oom(&b->facts[t]))
			rc = -ENOMEM;
	b->new_stacks = in.new_stacks;
	if (!rc)
		content_hash(b);
	b->ls_ids = in.ls_id;
	in.ls_id = NULL;
out:
	free(in.ls_id);
	free(in.ls_first);
	free(in.ls_last);
	free(in.loc_id);
	free(in.stack_id);
	return rc;
}

#define HOUR_NS		(3600 * NSEC_PER_SEC)
#define NODES_MAX	100000	/* node counters kept; past it, those of past hours go */

/* The node's count this hour in map (hour << 32 | count), with add counted in (if add). */
static uint64_t *node_count(struct u64map *map, uint64_t node, uint64_t hour)
{
	uint64_t *v;

	if (map->len > NODES_MAX) {
		struct u64map keep = { 0 };

		for (size_t i = 0; i < map->cap; i++)
			if (map->keys[i] && map->vals[i] >> 32 == hour)
				u64map_upsert(&keep, map->keys[i], map->vals[i], NULL);
		u64map_done(map);
		*map = keep;
	}
	v = u64map_upsert(map, node, hour << 32, NULL);
	if (v && *v >> 32 != hour)
		*v = hour << 32;
	return v;
}

/*
 * --max-new-label-sets-per-hour and --max-new-stacks-per-hour, per node and clock hour as this
 * front-end counts them (docs/clickhouse.md): a label set id it has not seen, a stack it has not
 * stored. Past either limit the batch is refused whole (-EDQUOT, 429: the agent retries later);
 * else its new ones are counted. 0 or -EDQUOT (reason in err), -ENOMEM.
 */
static int admit(struct ch *c, const Gpuscope__V1__Batch *m, struct chb *b, char *err,
		 size_t errlen)
{
	uint64_t max_ls = c->o.max_new_label_sets_per_hour, max_st = c->o.max_new_stacks_per_hour;
	uint64_t hour = wall_ns() / HOUR_NS, node, new_ls = 0, *nl, *ns;
	struct u64map fresh = { 0 };
	const char *name = m->strings[m->node];
	int rc = 0;

	if (!max_ls && !max_st)
		return 0;
	node = ch_id(hash64(name, strlen(name), 16));
	pthread_mutex_lock(&c->cmu);
	for (size_t i = 0; i < m->n_label_sets && !rc; i++) {
		int inserted = 0;

		if (u64map_find(&c->ls_seen, b->ls_ids[i]))
			continue;
		if (!u64map_upsert(&fresh, b->ls_ids[i], 0, &inserted))
			rc = -ENOMEM;
		new_ls += inserted != 0;
	}
	nl = node_count(&c->node_ls, node, hour);
	ns = node_count(&c->node_stacks, node, hour);
	if (rc || !nl || !ns) {
		rc = -ENOMEM;
		snprintf(err, errlen, "store: out of memory");
	} else if (max_st && (*ns & 0xffffffffu) + b->new_stacks > max_st) {
		snprintf(err, errlen, "cardinality limit: node '%.100s' would add %llu new stacks this "
			 "hour, past the limit of %llu (--max-new-stacks-per-hour)", name,
			 (unsigned long long)((*ns & 0xffffffffu) + b->new_stacks),
			 (unsigned long long)max_st);
		rc = -EDQUOT;
	} else if (max_ls && (*nl & 0xffffffffu) + new_ls > max_ls) {
		snprintf(err, errlen, "cardinality limit: node '%.100s' would add %llu new label sets "
			 "this hour, past the limit of %llu (--max-new-label-sets-per-hour)", name,
			 (unsigned long long)((*nl & 0xffffffffu) + new_ls),
			 (unsigned long long)max_ls);
		rc = -EDQUOT;
	} else {
		*nl += new_ls;
		*ns += b->new_stacks;
		if (c->ls_seen.len > CH_DEDUP_MAX)
			u64map_done(&c->ls_seen);
		for (size_t i = 0; i < fresh.cap; i++)
			if (fresh.keys[i] && !u64map_upsert(&c->ls_seen, fresh.keys[i], 0, NULL))
				break;
	}
	pthread_mutex_unlock(&c->cmu);
	u64map_done(&fresh);
	return rc;
}

int ch_ingest(struct store *st, const Gpuscope__V1__Batch *m, char *err, size_t errlen)
{
	struct ch *c = (struct ch *)st;
	struct chb b = { .err = err, .errlen = errlen };
	int rc;

	rc = prepare(c, m, &b);
	if (rc)
		snprintf(err, errlen, "store: out of memory");
	else
		rc = admit(c, m, &b, err, errlen);
	if (!rc)
		store_commitq_run(&c->commitq, &b.q, GROUP_MAX, commit_group, c);
	if (!rc)
		rc = b.rc;
	for (int d = 0; d < NDICT; d++)
		buf_done(&b.dict[d]);
	for (int t = 0; t < NFACT; t++)
		parts_done(&b.facts[t]);
	u64map_done(&b.added);
	free(b.ls_ids);
	return rc;
}
