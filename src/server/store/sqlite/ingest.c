/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ingest into the SQLite store: a batch's dictionary entries (label sets, locations, stacks:
 * ingest_map.c; series here) mapped to the store's ids by content hash (dict.c keeps the
 * dictionaries), samples, points and intervals cut into chunks, all of a batch under one
 * savepoint, and concurrent batches group-committed.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/log.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"
#include "server/store/sqlite/ingest.h"
#include "server/store/sqlite/sqlite.h"

static int cmp_srow(const void *a, const void *b)
{
	const struct srow *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

static int put_sample_chunk(struct ingest *in, int kind, const struct srow *r, size_t n)
{
	sqlite3_stmt *st = in->s->st[ST_CHUNK_ADD];
	uint64_t ls = r[0].labelset;
	uint8_t *z = NULL;
	size_t zlen = 0;
	int err;

	for (size_t i = 1; i < n && ls; i++)
		if (r[i].labelset != ls)
			ls = 0;	/* several: each sample carries its own */
	err = chunk_samples_encode(r, n, in->m->period_ns, in->s->o.time_unit_ns, &z, &zlen);
	if (err)
		return err;
	sqlite3_bind_int64(st, 1, (int64_t)ls);
	sqlite3_bind_int(st, 2, kind);
	sqlite3_bind_int64(st, 3, (int64_t)r[0].t);
	sqlite3_bind_int64(st, 4, (int64_t)r[n - 1].t);
	sqlite3_bind_int64(st, 5, (int64_t)n);
	sqlite3_bind_blob(st, 6, z, (int)zlen, SQLITE_STATIC);
	err = sq_step_done(st);
	free(z);
	return err;
}

/*
 * A batch's samples go into chunks per kind, every label set's together (a node of short-lived
 * threads sends a few samples per label set and push: one chunk each cost more in row and
 * compression overhead than the samples), sorted by time, at most CHUNK_MAX and CHUNK_SPAN_NS
 * each; a chunk of one label set names it in its row, else 0 and each sample has its own.
 * Off-CPU samples whose skip[] is set (their ordinal over the batch's samples) are kept as
 * the intervals they paired with (offcpu.c): counted, not written here.
 */
static int store_samples(struct ingest *in, const uint8_t *skip, uint64_t *ret_n)
{
	const Gpuscope__V1__Batch *m = in->m;
	uint64_t u = in->s->o.time_unit_ns;
	size_t total = 0, *base;
	struct srow *r;
	uint8_t *done;
	int err = 0;

	for (size_t g = 0; g < m->n_samples; g++)
		total += m->samples[g]->n_stack;
	if (!total)
		return 0;
	r = malloc(total * sizeof(*r));
	done = calloc(m->n_samples, 1);
	base = malloc(m->n_samples * sizeof(*base));
	if (!r || !done || !base) {
		free(r);
		free(done);
		free(base);
		return -ENOMEM;
	}
	for (size_t g = 0, o = 0; g < m->n_samples; o += m->samples[g++]->n_stack)
		base[g] = o;
	for (size_t k = 0; k < m->n_samples && !err; k++) {
		Gpuscope__V1__SampleKind kind = m->samples[k]->kind;
		size_t n = 0, start = 0;

		if (done[k])
			continue;
		/* every group of this kind */
		for (size_t g = k; g < m->n_samples; g++) {
			const Gpuscope__V1__SampleGroup *sg = m->samples[g];
			uint64_t t = 0, t0 = UINT64_MAX, t1 = 0;

			if (done[g] || sg->kind != kind)
				continue;
			done[g] = 1;
			if (!sg->n_stack)
				continue;
			if (in->ls[sg->label_set].refused) {
				in->dropped_records += sg->n_stack;
				continue;
			}
			for (size_t i = 0; i < sg->n_stack; i++) {
				int64_t v = sg->n_value ? sg->value[i] : 1;

				t += (uint64_t)sg->time_delta_ns[i];
				t0 = t < t0 ? t : t0;
				t1 = t > t1 ? t : t1;
				*ret_n += 1;
				if (skip && skip[base[g] + i])
					continue;
				if ((int)kind == SAMPLE_OFFCPU_NS)
					v = offcpu_value_unit(t, v, u);
				r[n++] = (struct srow){ t, in->stack_gid[sg->stack[i]], v,
							in->ls[sg->label_set].id };
			}
			ingest_ls_touch(in, sg->label_set, t0, t1);
		}
		if (!n)
			continue;
		qsort(r, n, sizeof(*r), cmp_srow);
		if (u > 1)	/* floored after the sort: ties keep ns order */
			for (size_t i = 0; i < n; i++)
				r[i].t -= r[i].t % u;
		for (size_t i = 1; i <= n && !err; i++) {
			if (i < n && i - start < CHUNK_MAX && r[i].t - r[start].t < CHUNK_SPAN_NS)
				continue;
			err = put_sample_chunk(in, (int)kind, r + start, i - start);
			start = i;
		}
	}
	free(r);
	free(done);
	free(base);
	return err;
}

/*
 * The batch's off-CPU samples of label sets not refused, as stored (offcpu.c pairs blocked
 * intervals with them), sorted; ref: a sample's ordinal over the batch's samples. *ret NULL
 * when there are none. 0 or -ENOMEM.
 */
static int offcpu_samples(const struct ingest *in, struct offcpu_key **ret, size_t *ret_n,
			  size_t *ret_total)
{
	const Gpuscope__V1__Batch *m = in->m;
	uint64_t u = in->s->o.time_unit_ns > 1 ? in->s->o.time_unit_ns : 1;
	struct offcpu_key *k = NULL;
	size_t n = 0, total = 0, o = 0;

	*ret = NULL;
	for (size_t g = 0; g < m->n_samples; g++) {
		total += m->samples[g]->n_stack;
		if ((int)m->samples[g]->kind == SAMPLE_OFFCPU_NS)
			n += m->samples[g]->n_stack;
	}
	*ret_total = total;
	*ret_n = 0;
	if (!n)
		return 0;
	k = malloc(n * sizeof(*k));
	if (!k)
		return -ENOMEM;
	n = 0;
	for (size_t g = 0; g < m->n_samples; o += m->samples[g++]->n_stack) {
		const Gpuscope__V1__SampleGroup *sg = m->samples[g];
		uint64_t t = 0;

		if ((int)sg->kind != SAMPLE_OFFCPU_NS || in->ls[sg->label_set].refused)
			continue;
		for (size_t i = 0; i < sg->n_stack; i++) {
			int64_t v = sg->n_value ? sg->value[i] : 1;

			t += (uint64_t)sg->time_delta_ns[i];
			k[n++] = (struct offcpu_key){ in->ls[sg->label_set].id,
				in->stack_gid[sg->stack[i]], t - t % u,
				(uint64_t)offcpu_value_unit(t, v, u), o + i };
		}
	}
	offcpu_sort(k, n);
	*ret = k;
	*ret_n = n;
	return 0;
}

static int cmp_prow(const void *a, const void *b)
{
	const struct prow *x = a, *y = b;

	return x->t < y->t ? -1 : x->t > y->t;
}

static int put_points_chunk(struct sq *s, uint64_t series, const struct prow *r, size_t n)
{
	sqlite3_stmt *st = s->st[ST_POINTS_ADD];
	uint8_t *z = NULL;
	size_t zlen = 0;
	int err;

	err = chunk_points_encode(r, n, &z, &zlen);
	if (err)
		return err;
	sqlite3_bind_int64(st, 1, (int64_t)series);
	sqlite3_bind_int64(st, 2, (int64_t)r[0].t);
	sqlite3_bind_int64(st, 3, (int64_t)r[n - 1].t);
	sqlite3_bind_int64(st, 4, (int64_t)n);
	sqlite3_bind_blob(st, 5, z, (int)zlen, SQLITE_STATIC);
	err = sq_step_done(st);
	free(z);
	return err;
}

static int store_series(struct ingest *in, uint64_t *ret_n)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct sq *s = in->s;
	int err = 0;

	for (size_t i = 0; i < m->n_series && !err; i++) {
		const Gpuscope__V1__MetricSeries *ms = m->series[i];
		const char *name = S(in, ms->name);
		uint64_t ls = in->ls[ms->label_set].id, hash, id, t = 0;
		size_t n = ms->n_value, start = 0;
		struct buf key = { 0 };
		struct prow *r;
		int rc;

		if (!n)
			continue;
		if (in->ls[ms->label_set].refused) {
			in->dropped_records += n;
			continue;
		}
		buf_puts(&key, name);
		buf_put(&key, &ls, sizeof(ls));
		hash = key.oom ? 0 : hash64(key.p, key.len, 14);
		buf_done(&key);
		rc = ingest_dedup_id(s, &s->series_ids, ST_SERIES_GET, hash, &id);
		if (rc < 0)
			return rc;
		if (!rc) {
			sqlite3_bind_int64(s->st[ST_SERIES_ADD], 1, (int64_t)hash);
			sqlite3_bind_text(s->st[ST_SERIES_ADD], 2, name, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s->st[ST_SERIES_ADD], 3, (int64_t)ls);
			if (sq_step_done(s->st[ST_SERIES_ADD]))
				return -EIO;
			id = (uint64_t)sqlite3_last_insert_rowid(s->w);
			if ((err = ingest_cache_new(s, &s->series_ids, hash, id)))
				return err;
		}
		r = malloc(n * sizeof(*r));
		if (!r)
			return -ENOMEM;
		for (size_t k = 0; k < n; k++) {
			t += (uint64_t)ms->time_delta_ns[k];
			r[k].t = t;
			r[k].v = ms->value[k];
		}
		qsort(r, n, sizeof(*r), cmp_prow);
		ingest_ls_touch(in, ms->label_set, r[0].t, r[n - 1].t);
		for (size_t k = 1; k <= n && !err; k++) {
			if (k < n && k - start < CHUNK_MAX && r[k].t - r[start].t < CHUNK_SPAN_NS)
				continue;
			err = put_points_chunk(s, id, r + start, k - start);
			start = k;
		}
		free(r);
		*ret_n += n;
	}
	return err;
}

/* Sort order of a batch's intervals before chunking: kind, then start, then arrival. */
struct iv_sort {
	const char *kind;
	struct irow r;
	size_t nties;		/* the batch's intervals starting at its stored start */
	bool sample;		/* stands for an off-CPU sample of the batch (offcpu.c) */
};

static int cmp_iv(const void *a, const void *b)
{
	const struct iv_sort *x = a, *y = b;
	int c = strcmp(x->kind, y->kind);

	if (c)
		return c;
	if (x->r.start != y->r.start)
		return x->r.start < y->r.start ? -1 : 1;
	return x->r.seq < y->r.seq ? -1 : x->r.seq > y->r.seq;
}

int sq_put_interval_chunk(struct sq *s, const char *kind, const struct irow *r, size_t n,
			  uint64_t unit_ns, uint64_t nsamples)
{
	sqlite3_stmt *st = s->st[ST_IVL_ADD];
	uint64_t t_max = 0, u = unit_ns > 1 ? unit_ns : 1;
	uint8_t *z = NULL;
	size_t zlen = 0;
	int err;

	for (size_t i = 0; i < n; i++)
		if (r[i].end > t_max)
			t_max = r[i].end;
	err = chunk_intervals_encode(r, n, u, &z, &zlen);
	if (err)
		return err;
	sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, (int64_t)(r[0].start - r[0].start % u));
	sqlite3_bind_int64(st, 3, (int64_t)(t_max - t_max % u));
	sqlite3_bind_int64(st, 4, (int64_t)n);
	sqlite3_bind_blob(st, 5, z, (int)zlen, SQLITE_STATIC);
	err = sq_step_done(st);
	free(z);
	if (!err && nsamples) {
		st = s->st[ST_OFFCPU_IV_ADD];
		sqlite3_bind_int64(st, 1, (int64_t)(t_max - t_max % u));
		sqlite3_bind_int64(st, 2, (int64_t)nsamples);
		err = sq_step_done(st);
	}
	return err;
}

/*
 * How many intervals of the batch, of any kind, start at each one's stored start (floored to
 * unit_ns): into v[i].nties. A query orders ties of start by seq, and every seq of the batch lies
 * between those of the batches before and after, so an interval that no other shares its start
 * with needs no seq of its own, and a tie group held whole by one chunk only its order (format
 * 4, chunk.h). 0 or -ENOMEM.
 */
static int count_ties(struct iv_sort *v, size_t n, uint64_t unit_ns)
{
	uint64_t u = unit_ns > 1 ? unit_ns : 1, *t = malloc((n ? n : 1) * sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		t[i] = v[i].r.start / u;
	qsort(t, n, sizeof(*t), cmp_u64);
	for (size_t i = 0; i < n; i++) {
		uint64_t x = v[i].r.start / u;
		size_t lo = 0, hi = n, end;

		while (lo < hi) {	/* the first of t not below x */
			size_t mid = lo + (hi - lo) / 2;

			if (t[mid] < x)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (end = lo; end < n && t[end] == x; end++)
			;
		v[i].nties = end - lo;
	}
	free(t);
	return 0;
}

/* The rows of one chunk, v[a..b) (sorted by start), into r: seq_free where the chunk holds
 * every interval of the batch that starts at the row's stored start. */
static void chunk_rows(const struct iv_sort *v, size_t a, size_t b, uint64_t unit_ns,
		       struct irow *r)
{
	uint64_t u = unit_ns > 1 ? unit_ns : 1;

	for (size_t k = a, j; k < b; k = j) {
		for (j = k; j < b && v[j].r.start / u == v[k].r.start / u; j++)
			;
		for (size_t x = k; x < j; x++) {
			r[x - a] = v[x].r;
			r[x - a].seq_free = j - k == v[x].nties;
		}
	}
}

/*
 * Intervals go into chunks per kind, sorted by start, at most CHUNK_MAX and CHUNK_SPAN_NS of
 * starts each; each keeps its order of arrival (seq) for the answer's ties. A blocked interval
 * with a stack takes the batch's off-CPU sample it repeats (offcpu.c): *ret_skip (malloc'ed,
 * NULL if the batch has no off-CPU sample) marks the samples taken, by ordinal; one with none
 * to take is marked OFFCPU_NO_SAMPLE.
 */
static int store_intervals(struct ingest *in, uint8_t **ret_skip, uint64_t *ret_paired,
			   uint64_t *ret_unpaired)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct sq *s = in->s;
	uint64_t u = s->o.time_unit_ns > 1 ? s->o.time_unit_ns : 1;
	size_t n = m->n_intervals, nattr = 0, start = 0, nsmp = 0, total = 0;
	struct offcpu_key *smp = NULL;
	struct iv_sort *v = NULL;
	struct irow *r = NULL;
	const char **attrs = NULL;
	uint8_t *skip = NULL;
	int err = 0;

	*ret_skip = NULL;
	if (!n)
		return 0;
	err = offcpu_samples(in, &smp, &nsmp, &total);
	if (err)
		return err;
	for (size_t i = 0; i < n; i++)
		nattr += m->intervals[i]->n_attrs + 2;	/* the no-sample mark */
	v = malloc(n * sizeof(*v));
	attrs = malloc(nattr * sizeof(*attrs));
	r = malloc(n * sizeof(*r));
	skip = nsmp ? calloc(total, 1) : NULL;
	if (!v || !attrs || !r || (nsmp && !skip)) {
		err = -ENOMEM;
		goto out;
	}
	nattr = 0;
	for (size_t i = 0, j = 0; i < m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];
		const char **a = attrs + nattr;
		size_t na = 0, stack_at = 0;
		uint64_t stack = 0;

		if (in->ls[iv->label_set].refused) {
			in->dropped_records++;
			n--;
			continue;
		}
		for (size_t k = 0; k + 1 < iv->n_attrs; k += 2) {
			const char *name = S(in, iv->attrs[k]), *val = S(in, iv->attrs[k + 1]);
			uint64_t id = 0;

			switch (store_interval_attr(m, iv, name, val, in->stack_gid, &id)) {
			case STORE_IV_STACK:	/* version 1's, kept at its place */
				if (!stack) {
					stack = id;
					stack_at = na / 2;
				}
				break;
			case STORE_IV_KEEP:
				a[na++] = name;
				a[na++] = val;
				break;
			case STORE_IV_DROP:
				break;
			}
		}
		if (iv->stack) {
			stack = store_interval_stack(iv, in->stack_gid);
			stack_at = na / 2;
		}
		ingest_ls_touch(in, iv->label_set, iv->start_ns, iv->end_ns);
		v[j] = (struct iv_sort){ S(in, iv->kind), { .seq = s->ivl_seq + i,
			.labelset = in->ls[iv->label_set].id, .start = iv->start_ns,
			.end = iv->end_ns < iv->start_ns ? iv->start_ns : iv->end_ns, .attrs = a,
			.nattrs = na / 2, .stack = stack, .stack_at = stack_at } };
		{
			struct offcpu_key k = { .ls = v[j].r.labelset };
			uint64_t s0 = v[j].r.start - v[j].r.start % u;
			uint64_t e0 = v[j].r.end - v[j].r.end % u;

			if (offcpu_iv_sample(v[j].kind, a, na / 2, stack, s0, e0, u, &k)) {
				v[j].sample = smp && offcpu_take(smp, nsmp, &k, skip);
				*(v[j].sample ? ret_paired : ret_unpaired) += 1;
				if (!v[j].sample) {
					a[na++] = OFFCPU_NO_SAMPLE;
					a[na++] = "1";
					v[j].r.nattrs++;
				}
			}
		}
		nattr += na;
		j++;
	}
	qsort(v, n, sizeof(*v), cmp_iv);
	err = count_ties(v, n, s->o.time_unit_ns);
	for (size_t i = 1; n && i <= n && !err; i++) {
		if (i < n && !strcmp(v[i].kind, v[start].kind) && i - start < CHUNK_MAX &&
		    v[i].r.start - v[start].r.start < CHUNK_SPAN_NS)
			continue;
		uint64_t ns = 0;

		for (size_t x = start; x < i; x++)
			ns += v[x].sample;
		chunk_rows(v, start, i, s->o.time_unit_ns, r);
		err = sq_put_interval_chunk(s, v[start].kind, r, i - start, s->o.time_unit_ns, ns);
		start = i;
	}
	if (!err) {
		s->ivl_seq += m->n_intervals;
		sqlite3_bind_int64(s->st[ST_IVL_SEQ], 1, (int64_t)s->ivl_seq);
		err = sq_step_done(s->st[ST_IVL_SEQ]);
	}
out:
	free(v);
	free(r);
	free(attrs);
	free(smp);
	if (err)
		free(skip);
	else
		*ret_skip = skip;
	return err;
}

static int finish_label_sets(struct ingest *in, uint64_t *ret_first, uint64_t *ret_last)
{
	struct lsext_ent *e = malloc((in->m->n_label_sets ? in->m->n_label_sets : 1) * sizeof(*e));
	size_t n = 0;
	int err;

	*ret_first = UINT64_MAX;
	*ret_last = 0;
	if (!e)
		return -ENOMEM;
	for (size_t i = 0; i < in->m->n_label_sets; i++) {
		struct ls_pending *p = &in->ls[i];

		if (p->first == UINT64_MAX) {
			if (!p->is_new)
				continue;
			p->first = p->last = 0;	/* a set without records: keep it valid */
		}
		if (p->first < *ret_first)
			*ret_first = p->first;
		if (p->last > *ret_last)
			*ret_last = p->last;
		e[n++] = (struct lsext_ent){ p->id, p->first, p->last };
	}
	err = sq_lsext_widen(in->s, e, n);
	free(e);
	return err;
}

/* After COMMIT: publish new label sets and time extents to queries. */
static void publish_label_sets(struct ingest *in)
{
	struct sq *s = in->s;

	pthread_rwlock_wrlock(&s->lmu);
	for (size_t i = 0; i < in->m->n_label_sets; i++) {
		struct ls_pending *p = &in->ls[i];
		struct lset *l;

		if (p->refused)
			continue;
		if (p->is_new || p->id >= s->nlsets || !s->lsets[p->id].pairs) {
			if (sq_lset_put(s, p->id, p->hash, p->blob.p, p->blob.len, p->first, p->last))
				log_warn("label set %llu: out of memory, not queryable until restart",
					 (unsigned long long)p->id);
			continue;
		}
		if (p->first == UINT64_MAX)
			continue;
		l = &s->lsets[p->id];
		if (p->first < l->first_ns)
			l->first_ns = p->first;
		if (p->last > l->last_ns)
			l->last_ns = p->last;
	}
	pthread_rwlock_unlock(&s->lmu);
}

/* One batch waiting for (or in) a group commit. */
struct gitem {
	struct store_commitq_item q;	/* first: the queue's list is a list of gitems */
	struct ingest in;
	int rc;
	uint64_t nsamples, npoints;
	uint64_t npaired, nunpaired;	/* off-CPU samples kept as intervals; intervals marked */
};

/*
 * Whether the batch's new label sets would take the label sets held past max_ls_bytes; then
 * *ret_room is how many of them (in order) fit.
 */
static bool ls_memory_over(struct ingest *in, uint64_t *ret_room)
{
	struct sq *s = in->s;
	uint64_t held = __atomic_load_n(&s->lset_bytes, __ATOMIC_RELAXED), add = 0, k = 0;

	for (size_t i = 0; i < in->m->n_label_sets; i++) {
		const struct ls_pending *p = &in->ls[i];

		if (!p->is_new || p->refused)
			continue;
		add += sq_lset_mem(p->blob.p, p->blob.len);
		if (held + add > s->max_ls_bytes) {
			*ret_room = k;
			return true;
		}
		k++;
	}
	return false;
}

/*
 * The node's new label sets and stacks this clock hour, with what the batch adds: -EDQUOT and
 * a reason when past a limit, *ret_room then the new label sets the node may still add when
 * only the label-set limit is passed (else UINT64_MAX); the counts are taken when add is true.
 * wmu held.
 */
static int cardinality(struct ingest *in, bool add, uint64_t *ret_room)
{
	struct sq *s = in->s;
	const char *node = S(in, in->m->node);
	uint64_t h = hash64(node, strlen(node), 29), hour = wall_ns() / (3600 * NSEC_PER_SEC);
	struct node_card *c = NULL;
	bool over_ls;

	*ret_room = UINT64_MAX;
	for (size_t i = 0; i < s->ncard && !c; i++)
		if (s->card[i].node_hash == h)
			c = &s->card[i];
	if (!c && s->max_nodes && s->ncard >= s->max_nodes) {
		snprintf(in->err, in->errlen, "node limit: %llu nodes known already, '%.100s' would "
			 "be one more (--max-nodes)", (unsigned long long)s->ncard, node);
		__atomic_add_fetch(&s->n_node_refused, 1, __ATOMIC_RELAXED);
		return -EDQUOT;
	}
	if (!c) {
		if (array_reserve(&s->card, &s->capcard, s->ncard + 1, sizeof(*s->card), 64))
			return -ENOMEM;
		c = &s->card[s->ncard++];
		*c = (struct node_card){ .node_hash = h, .hour = hour };
	}
	if (c->hour != hour)
		*c = (struct node_card){ .node_hash = h, .hour = hour };
	if (s->max_new_stacks && c->new_stacks + in->new_stacks > s->max_new_stacks) {
		snprintf(in->err, in->errlen, "cardinality limit: node '%.100s' would add %llu new "
			 "stacks this hour, past the limit of %llu (--max-new-stacks-per-hour)", node,
			 (unsigned long long)(c->new_stacks + in->new_stacks),
			 (unsigned long long)s->max_new_stacks);
		return -EDQUOT;
	}
	over_ls = s->max_new_ls && c->new_ls + in->new_ls > s->max_new_ls;
	if (over_ls) {
		snprintf(in->err, in->errlen, "cardinality limit: node '%.100s' would add %llu new "
			 "label sets this hour, past the limit of %llu (--max-new-label-sets-per-hour)",
			 node, (unsigned long long)(c->new_ls + in->new_ls),
			 (unsigned long long)s->max_new_ls);
		*ret_room = c->new_ls < s->max_new_ls ? s->max_new_ls - c->new_ls : 0;
		return -EDQUOT;
	}
	if (s->max_ls_bytes && ls_memory_over(in, ret_room)) {
		snprintf(in->err, in->errlen, "label-set memory limit: %llu bytes of label sets held, "
			 "node '%.100s' would add more than the %llu of --max-label-set-memory",
			 (unsigned long long)__atomic_load_n(&s->lset_bytes, __ATOMIC_RELAXED), node,
			 (unsigned long long)s->max_ls_bytes);
		return -EDQUOT;
	}
	if (add) {
		c->new_ls += in->new_ls;
		c->new_stacks += in->new_stacks;
		if (in->dropped_ls && !c->warned) {
			log_warn("cardinality: node '%.100s' passed --max-new-label-sets-per-hour (%llu):"
				 " the records of its further new label sets are dropped until the hour"
				 " turns (gpuscope_server_cardinality_dropped_total)", node,
				 (unsigned long long)s->max_new_ls);
			c->warned = true;
		}
	}
	return 0;
}

/* Records of the batch whose label set is not refused. */
static size_t kept_records(const struct ingest *in)
{
	const Gpuscope__V1__Batch *m = in->m;
	size_t n = 0;

	for (size_t i = 0; i < m->n_samples; i++)
		n += in->ls[m->samples[i]->label_set].refused ? 0 : m->samples[i]->n_stack;
	for (size_t i = 0; i < m->n_series; i++)
		n += in->ls[m->series[i]->label_set].refused ? 0 : m->series[i]->n_value;
	for (size_t i = 0; i < m->n_intervals; i++)
		n += !in->ls[m->intervals[i]->label_set].refused;
	return n;
}

/*
 * Past the node's label-set limit: the records of known label sets, and of the first new ones
 * up to the limit, are kept; the other new label sets are refused and their records dropped
 * (counted). The dictionaries are mapped again without them, under the same savepoint. 0,
 * -EDQUOT (nothing of the batch would be kept: the agent retries it later), -errno.
 */
static int refuse_new_label_sets(struct sq *s, struct ingest *in, uint64_t room)
{
	uint64_t dummy;
	int rc;

	if (sqlite3_exec(s->w, "ROLLBACK TO b", NULL, NULL, NULL))
		return -EIO;
	s->loc_seq = in->loc_seq0;
	s->stack_seq = in->stack_seq0;
	s->ls_seq = in->ls_seq0;
	sq_dedup_reset(s);	/* the caches may name rows the rollback removed */
	for (size_t i = 0; i < in->m->n_label_sets; i++) {
		struct ls_pending *p = &in->ls[i];

		if (!p->is_new)
			continue;
		if (room) {
			room--;
			continue;
		}
		p->refused = true;
		in->dropped_ls++;
	}
	if (!kept_records(in))
		return -EDQUOT;
	in->new_ls = in->new_stacks = 0;
	if ((rc = ingest_map_label_sets(in)) || (rc = ingest_map_locations(in)) ||
	    (rc = ingest_map_stacks(in)))
		return rc;
	return cardinality(in, false, &dummy);
}

/* Stores one batch inside the open transaction, under a savepoint: whole or not at all. */
static int ingest_one(struct sq *s, struct gitem *g)
{
	struct ingest *in = &g->in;
	const Gpuscope__V1__Batch *m = in->m;
	uint64_t first, last, room;
	int64_t seen;
	int rc;

	in->loc_seq0 = s->loc_seq;
	in->stack_seq0 = s->stack_seq;
	in->ivl_seq0 = s->ivl_seq;
	in->ls_seq0 = s->ls_seq;
	if (sqlite3_exec(s->w, "SAVEPOINT b", NULL, NULL, NULL)) {
		snprintf(in->err, in->errlen, "store: %s", sqlite3_errmsg(s->w));
		return -EIO;
	}
	sqlite3_bind_int64(s->st[ST_BATCH_SEEN], 1, (int64_t)m->batch_id);
	rc = m->batch_id ? sq_step_i64(s->st[ST_BATCH_SEEN], &seen) : 0;
	if (rc < 0)
		goto out_rollback;
	if (rc > 0) {
		__atomic_add_fetch(&s->n_dups, 1, __ATOMIC_RELAXED);
		sqlite3_exec(s->w, "RELEASE b", NULL, NULL, NULL);
		return 1;
	}
	if ((rc = ingest_map_label_sets(in)) || (rc = ingest_map_locations(in)) || (rc = ingest_map_stacks(in)))
		goto out_rollback;
	rc = cardinality(in, false, &room);
	if (rc == -EDQUOT && room != UINT64_MAX)
		rc = refuse_new_label_sets(s, in, room);
	if (rc == -EDQUOT) {
		sqlite3_exec(s->w, "ROLLBACK TO b; RELEASE b", NULL, NULL, NULL);
		s->loc_seq = in->loc_seq0;
		s->stack_seq = in->stack_seq0;
		s->ls_seq = in->ls_seq0;
		sq_dedup_reset(s);
		return rc;
	}
	if (!rc) {	/* intervals first: they take the off-CPU samples they repeat */
		uint8_t *skip = NULL;

		if (!(rc = store_intervals(in, &skip, &g->npaired, &g->nunpaired)))
			rc = store_samples(in, skip, &g->nsamples);
		free(skip);
	}
	if (rc || (rc = store_series(in, &g->npoints)) ||
	    (rc = finish_label_sets(in, &first, &last)))
		goto out_rollback;
	if (first != UINT64_MAX) {
		sqlite3_bind_text(s->st[ST_NODE_UP], 1, S(in, m->node), -1, SQLITE_STATIC);
		sqlite3_bind_int64(s->st[ST_NODE_UP], 2, (int64_t)first);
		sqlite3_bind_int64(s->st[ST_NODE_UP], 3, (int64_t)last);
		if ((rc = sq_step_done(s->st[ST_NODE_UP])))
			goto out_rollback;
	}
	if (m->period_ns) {	/* the node's CPU sampling period, for pprof's Period */
		sqlite3_bind_text(s->st[ST_PERIOD_SET], 1, S(in, m->node), -1, SQLITE_STATIC);
		sqlite3_bind_int64(s->st[ST_PERIOD_SET], 2, (int64_t)m->period_ns);
		if ((rc = sq_step_done(s->st[ST_PERIOD_SET])))
			goto out_rollback;
	}
	if (m->batch_id) {
		sqlite3_bind_int64(s->st[ST_BATCH_ADD], 1, (int64_t)m->batch_id);
		sqlite3_bind_text(s->st[ST_BATCH_ADD], 2, S(in, m->node), -1, SQLITE_STATIC);
		sqlite3_bind_int64(s->st[ST_BATCH_ADD], 3, (int64_t)wall_ns());
		if ((rc = sq_step_done(s->st[ST_BATCH_ADD])))
			goto out_rollback;
	}
	if (sqlite3_exec(s->w, "RELEASE b", NULL, NULL, NULL)) {
		rc = -EIO;
		goto out_rollback;
	}
	cardinality(in, true, &room);
	return 0;
out_rollback:
	snprintf(in->err, in->errlen, "store: %s",
		 rc == -ENOMEM ? "out of memory" : sqlite3_errmsg(s->w));
	sqlite3_exec(s->w, "ROLLBACK TO b; RELEASE b", NULL, NULL, NULL);
	s->ivl_seq = in->ivl_seq0;
	s->loc_seq = in->loc_seq0;
	s->stack_seq = in->stack_seq0;
	s->ls_seq = in->ls_seq0;
	/* The dedup caches may name rows that the rollback removed. */
	sq_dedup_reset(s);
	return rc < 0 ? rc : -EIO;
}

#define GROUP_MAX 64

/*
 * Group commit: concurrent ingests queue up; one of them (the leader) stores every queued
 * batch in one transaction, each under its own savepoint, and commits once, so that one fsync
 * covers many batches. Every caller returns only after the COMMIT that holds its batch.
 */
static void run_group(void *ctx, struct store_commitq_item *items, size_t n)
{
	struct gitem *list = (struct gitem *)items;
	struct sq *s = ctx;
	int rc;

	(void)n;
	pthread_mutex_lock(&s->wmu);
	rc = sq_step_done(s->st[ST_BEGIN]);
	if (!rc)
		rc = sq_step_done(s->st[ST_LS_NEW_CLEAR]);
	for (struct gitem *g = list; g; g = (struct gitem *)g->q.next) {
		if (rc) {
			g->rc = -EIO;
			snprintf(g->in.err, g->in.errlen, "store: %s", sqlite3_errmsg(s->w));
			continue;
		}
		g->rc = ingest_one(s, g);
	}
	if (!rc && sq_step_done(s->st[ST_COMMIT])) {
		rc = -EIO;
		for (struct gitem *g = list; g; g = (struct gitem *)g->q.next) {
			if (g->rc >= 0) {
				g->rc = -EIO;
				snprintf(g->in.err, g->in.errlen, "store: commit: %s",
					 sqlite3_errmsg(s->w));
			}
		}
		sq_step_done(s->st[ST_ROLLBACK]);
		sq_dedup_reset(s);
	}
	for (struct gitem *g = list; g; g = (struct gitem *)g->q.next) {
		if (g->rc)
			continue;
		publish_label_sets(&g->in);
		__atomic_add_fetch(&s->n_samples, g->nsamples, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_points, g->npoints, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_offcpu_paired, g->npaired, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_offcpu_unpaired, g->nunpaired, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_intervals, g->in.m->n_intervals, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_card_dropped_ls, g->in.dropped_ls, __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_card_dropped_records, g->in.dropped_records,
				   __ATOMIC_RELAXED);
		__atomic_add_fetch(&s->n_batches, 1, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&s->last_commit_ns, mono_ns(), __ATOMIC_RELAXED);
	pthread_mutex_unlock(&s->wmu);
}

int sq_ingest(struct store *st, const Gpuscope__V1__Batch *m, char *err, size_t errlen)
{
	struct sq *s = (struct sq *)st;
	struct gitem g = { .in = { .s = s, .m = m, .err = err, .errlen = errlen } };
	struct ingest *in = &g.in;

	in->ls = calloc(m->n_label_sets + 1, sizeof(*in->ls));
	in->loc_gid = calloc(m->n_locations + 1, sizeof(*in->loc_gid));
	in->stack_gid = calloc(m->n_stacks + 1, sizeof(*in->stack_gid));
	if (!in->ls || !in->loc_gid || !in->stack_gid) {
		snprintf(err, errlen, "store: out of memory");
		g.rc = -ENOMEM;
		goto out_free;
	}
	store_commitq_run(&s->commitq, &g.q, GROUP_MAX, run_group, s);
out_free:
	for (size_t i = 0; in->ls && i < m->n_label_sets; i++)
		buf_done(&in->ls[i].blob);
	free(in->ls);
	free(in->loc_gid);
	free(in->stack_gid);

	return g.rc;
}

