/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ingest into ClickHouse. Every id is a content hash (label sets, locations, stacks, series),
 * so any front-end computes the same ids with no shared state. A batch is: its dictionaries
 * (idempotent: AggregatingMergeTree min/max extents, ReplacingMergeTree rows), then one RowBinary
 * INSERT per fact table and day (one part each, whole or nothing, on the node's shard), then its
 * row in `batches`. A retry (a lost answer, a front-end killed mid-batch) finds what already
 * landed -- the batch row, or each part's first row by primary key -- and inserts only the
 * rest, so a batch is never stored twice. 2xx only after every INSERT returned, with
 * insert_distributed_sync=1 (the shard has it, not a spool on the way).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/log.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/store/clickhouse/ch.h"

#define INSERT_SETTINGS "insert_distributed_sync=1&max_insert_block_size=100000000"

struct cing {
	struct ch *c;
	const Gpuscope__V1__Batch *m;
	uint64_t node_id, day, batch;
	uint64_t *ls_id, *loc_id, *stack_id;
	uint64_t *ls_first, *ls_last;
};

static const char *S(const struct cing *in, uint32_t i)
{
	return in->m->strings[i];
}

static uint64_t ch_id(uint64_t h)
{
	h &= CH_IDS_MASK;
	return h ? h : 1;
}

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

static void touch(struct cing *in, uint32_t ls, uint64_t t0, uint64_t t1)
{
	if (t0 < in->ls_first[ls])
		in->ls_first[ls] = t0;
	if (t1 > in->ls_last[ls])
		in->ls_last[ls] = t1;
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
struct part {
	uint64_t day;
	struct buf rows, probe;		/* probe: primary-key condition finding its first row */
	bool stored;			/* found by a retry: an earlier attempt stored it */
};

struct parts {
	struct part *v;
	size_t n;
	bool oom;
};

static struct part *part_of(struct parts *p, uint64_t day)
{
	struct part *n;

	for (size_t i = 0; i < p->n; i++)
		if (p->v[i].day == day)
			return &p->v[i];
	n = realloc(p->v, (p->n + 1) * sizeof(*n));
	if (!n) {
		p->oom = true;
		return NULL;
	}
	p->v = n;
	n = &p->v[p->n++];
	memset(n, 0, sizeof(*n));
	n->day = day;
	return n;
}

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

static void fact_head(const struct cing *in, struct part *pt)
{
	rb_u32(&pt->rows, (uint32_t)pt->day);
	rb_u64(&pt->rows, in->node_id);
	rb_u64(&pt->rows, in->batch);
}

/* Sample rows, by day. */
static void sample_rows(struct cing *in, struct parts *ps, uint64_t *ret_n)
{
	const Gpuscope__V1__Batch *m = in->m;

	for (size_t g = 0; g < m->n_samples; g++) {
		const Gpuscope__V1__SampleGroup *sg = m->samples[g];
		uint64_t t = 0, lo = UINT64_MAX, hi = 0, ls = in->ls_id[sg->label_set];

		for (size_t i = 0; i < sg->n_stack; i++) {
			struct part *pt;

			t += (uint64_t)sg->time_delta_ns[i];
			pt = part_of(ps, t / CH_DAY_NS);
			if (!pt)
				return;
			fact_head(in, pt);
			rb_u8(&pt->rows, (uint8_t)sg->kind);
			rb_u64(&pt->rows, ls);
			rb_u64(&pt->rows, t);
			rb_u64(&pt->rows, in->stack_id[sg->stack[i]]);
			rb_u64(&pt->rows, (uint64_t)(sg->n_value ? sg->value[i] : 1));
			lo = t < lo ? t : lo;
			hi = t > hi ? t : hi;
			if (!pt->probe.len)
				buf_printf(&pt->probe, "kind = %u AND labelset = %llu AND t = %llu",
					   (unsigned)sg->kind, (unsigned long long)ls,
					   (unsigned long long)t);
		}
		if (sg->n_stack)
			touch(in, sg->label_set, lo, hi);
		*ret_n += sg->n_stack;
	}
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
			if (!pt->probe.len)
				buf_printf(&pt->probe, "series = %llu AND t = %llu",
					   (unsigned long long)id, (unsigned long long)t);
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
		char nums[BATCH_MAX_LABELS + 1][24];	/* + Interval.stack */
		struct part *pt = part_of(ps, iv->start_ns / CH_DAY_NS);
		struct buf *b = pt ? &pt->rows : NULL;
		size_t na = 0;

		if (!pt)
			return;
		for (size_t k = 0; k + 1 < iv->n_attrs && na < BATCH_MAX_LABELS; k += 2) {
			const char *name = S(in, iv->attrs[k]), *val = S(in, iv->attrs[k + 1]);
			char *end;

			if (!strcmp(name, "stack_id")) {	/* version 1: the stack as an attr */
				unsigned long long sid = strtoull(val, &end, 10);

				/* Batch-local index -> global id; an invalid one (or one that
				 * Interval.stack gives too) is dropped. */
				if (!*val || *end || sid >= m->n_stacks || iv->stack)
					continue;
				snprintf(nums[na], sizeof(nums[na]), "%llu",
					 (unsigned long long)in->stack_id[sid]);
				val = nums[na];
			}
			names[na] = name;
			vals[na++] = val;
		}
		if (iv->stack) {	/* version 2; batch_decode() checked the range */
			snprintf(nums[na], sizeof(nums[na]), "%llu",
				 (unsigned long long)in->stack_id[iv->stack - 1]);
			names[na] = "stack_id";
			vals[na] = nums[na];
			na++;
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
		for (size_t k = 0; k < na; k++)
			rb_str(b, vals[k]);
		touch(in, iv->label_set, iv->start_ns, iv->end_ns);
		if (!pt->probe.len) {
			buf_puts(&pt->probe, "kind = ");
			sql_str(&pt->probe, S(in, iv->kind));
			buf_printf(&pt->probe, " AND start_ns = %llu",
				   (unsigned long long)iv->start_ns);
		}
	}
}

/* Label set rows (with this batch's extents), for the sets that have records. */
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
		rb_u64(b, in->node_id);
		rb_u64(b, in->ls_id[i]);
		rb_str(b, S(in, m->node));
		buf_uvarint(b, n);
		for (size_t k = 0; k < n; k++)
			rb_str(b, pairs[2 * k]);
		buf_uvarint(b, n);
		for (size_t k = 0; k < n; k++)
			rb_str(b, pairs[2 * k + 1]);
		rb_u64(b, in->ls_first[i]);
		rb_u64(b, in->ls_last[i]);
	}
	buf_done(&blob);
	return b->oom ? -ENOMEM : 0;
}

static const char *const fact_tables[3] = { "samples", "points", "intervals" };

/*
 * What of this batch is already stored: 1 if its batch row is (all of it is), else 0 with each
 * part's `stored` set if its first row is there (one part is all or nothing). -errno if
 * ClickHouse cannot say.
 */
static int landed(struct cing *in, struct parts *ps)
{
	struct buf q = { 0 }, ans = { 0 };
	char *p, *end;
	int rc;

	buf_printf(&q, "SELECT (SELECT count() FROM %s.batches WHERE day = %llu AND id = %llu)",
		   in->c->db, (unsigned long long)in->day, (unsigned long long)in->batch);
	for (int t = 0; t < 3; t++) {
		for (size_t i = 0; i < ps[t].n; i++) {
			const struct part *pt = &ps[t].v[i];

			buf_printf(&q, ", (SELECT count() FROM %s.%s WHERE day = %llu AND batch = %llu"
				   " AND ", in->c->db, fact_tables[t], (unsigned long long)pt->day,
				   (unsigned long long)in->batch);
			buf_put(&q, pt->probe.p, pt->probe.len);
			buf_puts(&q, ")");
		}
	}
	buf_puts(&q, " FORMAT TSV");
	buf_put(&q, "", 1);
	rc = q.oom ? -ENOMEM : ch_exec(in->c, -1, (char *)q.p, NULL, 0, NULL, &ans);
	buf_put(&ans, "", 1);
	p = (char *)ans.p;
	if (!rc) {
		bool whole = strtoull(p, &end, 10) > 0;

		rc = end == p ? -EIO : whole;
		for (int t = 0; t < 3 && rc == 0; t++) {
			for (size_t i = 0; i < ps[t].n && rc == 0; i++) {
				p = end;
				ps[t].v[i].stored = strtoull(p, &end, 10) > 0;
				if (end == p)
					rc = -EIO;
			}
		}
		if (rc == -EIO)
			store_set_error("clickhouse: unexpected answer '%.60s'", (char *)ans.p);
	}
	buf_done(&q);
	buf_done(&ans);
	return rc;
}

int ch_ingest(struct store *st, const Gpuscope__V1__Batch *m, char *err, size_t errlen)
{
	struct ch *c = (struct ch *)st;
	struct cing in = { .c = c, .m = m };
	struct buf lsets = { 0 }, locs = { 0 }, stacks = { 0 }, series = { 0 };
	struct parts facts[3] = { { 0 } };
	struct u64map added = { 0 };
	uint64_t t0 = batch_t0(m), nsamples = 0, npoints = 0;
	int rc = 0, have = 0;

	in.node_id = ch_id(hash64(S(&in, m->node), strlen(S(&in, m->node)), 16));
	in.day = (t0 == UINT64_MAX ? wall_ns() : t0) / CH_DAY_NS;
	in.batch = m->batch_id;
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
	rc = labelset_rows(&in, &lsets);
	lsets.len = 0;
	if (!rc)
		rc = dictionaries(&in, &locs, &stacks, &series, &added);
	if (rc)
		goto out;
	sample_rows(&in, &facts[0], &nsamples);
	point_rows(&in, &facts[1], &npoints);
	interval_rows(&in, &facts[2]);
	rc = labelset_rows(&in, &lsets);
	for (int t = 0; t < 3 && !rc; t++)
		if (parts_oom(&facts[t]))
			rc = -ENOMEM;
	if (rc)
		goto out;
	if (in.batch) {
		rc = landed(&in, facts);
		if (rc < 0)
			goto out;
		if (rc) {
			__atomic_add_fetch(&c->n_dups, 1, __ATOMIC_RELAXED);
			goto out;
		}
		for (int t = 0; t < 3; t++)
			for (size_t i = 0; i < facts[t].n; i++)
				have += facts[t].v[i].stored;
		if (have)
			log_info("batch %llu: %d parts of an earlier attempt are stored, adding the rest",
				 (unsigned long long)in.batch, have);
	}
	if ((rc = insert(c, "labelsets_in", &lsets)) || (rc = insert(c, "locations", &locs)) ||
	    (rc = insert(c, "stacks", &stacks)) || (rc = insert(c, "series", &series)))
		goto out;
	for (int t = 0; t < 3 && !rc; t++)
		for (size_t i = 0; i < facts[t].n && !rc; i++)
			if (!facts[t].v[i].stored)
				rc = insert(c, fact_tables[t], &facts[t].v[i].rows);
	if (rc)
		goto out;
	if (in.batch) {
		struct buf b = { 0 };

		rb_u32(&b, (uint32_t)in.day);
		rb_u64(&b, in.node_id);
		rb_u64(&b, in.batch);
		rb_str(&b, S(&in, m->node));
		rb_u64(&b, wall_ns());
		rc = insert(c, "batches", &b);
		buf_done(&b);
		if (rc)
			goto out;
	}
	/* Remember the dictionary rows now stored, so later batches skip them. */
	pthread_mutex_lock(&c->dmu);
	for (size_t i = 0; i < added.cap; i++)
		if (added.keys[i] && !u64map_upsert(&c->seen, added.keys[i], 0, NULL))
			break;
	pthread_mutex_unlock(&c->dmu);
	__atomic_add_fetch(&c->n_samples, nsamples, __ATOMIC_RELAXED);
	__atomic_add_fetch(&c->n_points, npoints, __ATOMIC_RELAXED);
	__atomic_add_fetch(&c->n_intervals, m->n_intervals, __ATOMIC_RELAXED);
	__atomic_add_fetch(&c->n_batches, 1, __ATOMIC_RELAXED);
out:
	if (rc < 0)
		snprintf(err, errlen, "%s", rc == -ENOMEM ? "store: out of memory" : store_strerror());
	buf_done(&lsets);
	buf_done(&locs);
	buf_done(&stacks);
	buf_done(&series);
	for (int t = 0; t < 3; t++)
		parts_done(&facts[t]);
	u64map_done(&added);
	free(in.ls_id);
	free(in.ls_first);
	free(in.ls_last);
	free(in.loc_id);
	free(in.stack_id);
	return rc;
}
