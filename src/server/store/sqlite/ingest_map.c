/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A batch's dictionaries mapped to the SQLite store's ids (ingest.c stores the rest): label sets
 * and locations found by content hash, new ones written; stacks likewise, a batch's new ones
 * numbered in the order its sample chunks list them (stack_order()).
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
#include "server/store/sqlite/ingest.h"

int ingest_dedup_id(struct sq *s, struct u64map *cache, int get, uint64_t hash, uint64_t *ret)
{
	uint64_t *v = u64map_find(cache, hash);
	int64_t id;
	int rc;

	if (v) {
		*ret = *v;
		return 1;
	}
	sqlite3_bind_int64(s->st[get], 1, (int64_t)hash);
	rc = sq_step_i64(s->st[get], &id);
	if (rc <= 0)
		return rc;
	if (cache->len > DEDUP_CACHE_MAX)
		u64map_done(cache);
	if (!u64map_upsert(cache, hash, (uint64_t)id, NULL))
		return -ENOMEM;
	*ret = (uint64_t)id;
	return 1;
}

int ingest_cache_new(struct sq *s, struct u64map *cache, uint64_t hash, uint64_t id)
{
	(void)s;
	if (cache->len > DEDUP_CACHE_MAX)
		u64map_done(cache);
	return u64map_upsert(cache, hash, id, NULL) ? 0 : -ENOMEM;
}

/*
 * The batch's label sets to ids: committed ones from the in-memory table, ones an earlier batch
 * of this transaction added from temp.ls_new, new ones added (a row each, their pairs together
 * in blocks).
 */
int ingest_map_label_sets(struct ingest *in)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct sq *s = in->s;
	const char *pairs[STORE_LABEL_PAIRS_MAX];
	size_t nnew = 0, cap = m->n_label_sets < LS_BLOCK_MAX ? m->n_label_sets : LS_BLOCK_MAX;
	uint64_t *ids = malloc((cap ? cap : 1) * sizeof(*ids));
	const uint8_t **blobs = malloc((cap ? cap : 1) * sizeof(*blobs));
	size_t *lens = malloc((cap ? cap : 1) * sizeof(*lens));
	int err = ids && blobs && lens ? 0 : -ENOMEM;

	for (size_t i = 0; i < m->n_label_sets && !err; i++) {
		struct ls_pending *p = &in->ls[i];
		uint64_t *v;
		int64_t id;
		int rc;

		p->blob.len = 0;
		p->hash = store_label_set(m, i, pairs, NULL, &p->blob);
		if (p->blob.oom) {
			err = -ENOMEM;
			break;
		}
		p->first = UINT64_MAX;
		p->id = 0;
		p->is_new = false;
		if (p->refused)
			continue;
		pthread_rwlock_rdlock(&s->lmu);
		v = u64map_find(&s->ls_ids, p->hash);
		if (v)
			p->id = *v;
		pthread_rwlock_unlock(&s->lmu);
		if (v)
			continue;
		sqlite3_bind_int64(s->st[ST_LS_GET], 1, (int64_t)p->hash);
		rc = sq_step_i64(s->st[ST_LS_GET], &id);
		if (rc < 0) {
			err = rc;
			break;
		}
		if (rc) {
			p->id = (uint64_t)id;
			continue;
		}
		/* its extent is stored once the records are known (finish_label_sets()) */
		p->id = ++s->ls_seq;
		sqlite3_bind_int64(s->st[ST_LS_NEW], 1, (int64_t)p->hash);
		sqlite3_bind_int64(s->st[ST_LS_NEW], 2, (int64_t)p->id);
		if (sq_step_done(s->st[ST_LS_NEW])) {
			err = -EIO;
			break;
		}
		p->is_new = true;
		in->new_ls++;
		/* ids grow: a batch's new ids ascend, as a block's must */
		ids[nnew] = p->id;
		blobs[nnew] = p->blob.p;
		lens[nnew++] = p->blob.len;
		if (nnew == cap) {
			err = sq_put_ls_block(s, ids, blobs, lens, nnew);
			nnew = 0;
		}
	}
	if (!err)
		err = sq_put_ls_block(s, ids, blobs, lens, nnew);
	if (!err && in->new_ls) {
		sqlite3_bind_int64(s->st[ST_LS_SEQ], 1, (int64_t)s->ls_seq);
		err = sq_step_done(s->st[ST_LS_SEQ]);
	}
	free(ids);
	free(blobs);
	free(lens);
	return err;
}

void ingest_ls_touch(struct ingest *in, uint32_t ls, uint64_t t0, uint64_t t1)
{
	struct ls_pending *p = &in->ls[ls];

	if (t0 < p->first)
		p->first = t0;
	if (t1 > p->last)
		p->last = t1;
}

/* The batch's locations by module name, then address (then as sent). */
static int cmp_loc_order(const void *a, const void *b, void *arg)
{
	const struct ingest *in = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	const Gpuscope__V1__Location *lx = in->m->locations[x], *ly = in->m->locations[y];
	int c = lx->module == ly->module ? 0 : strcmp(S(in, lx->module), S(in, ly->module));

	if (c)
		return c;
	if (lx->address != ly->address)
		return lx->address < ly->address ? -1 : 1;
	return x < y ? -1 : x > y;
}

/*
 * The batch's locations to global ids: known ones by content hash, new ones numbered after the
 * last in the order of their module and address, and stored as one block (a few if many). In
 * that order a block's addresses are near their module's last and a function's locations
 * follow each other (its name's string id repeats): on the churning recording's first 60
 * batches location blocks 5.38 -> 3.61 B/location, stack blocks (whose frames' ids no longer
 * follow the batch's order) 8.60 -> 9.13 B/stack, the two 11.8 % less (bench/README.md).
 */
int ingest_map_locations(struct ingest *in)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct sq *s = in->s;
	struct buf key = { 0 };
	struct lrow *r = NULL;
	uint32_t *order = NULL;
	size_t nr = 0;
	int err = 0;

	if (!m->n_locations)
		return 0;
	if (s->loc_index_stale && (err = sq_locs_load(s)))
		return err;
	r = malloc((m->n_locations < LOC_BLOCK_MAX ? m->n_locations : LOC_BLOCK_MAX) * sizeof(*r));
	order = malloc(m->n_locations * sizeof(*order));
	if (!r || !order) {
		free(r);
		free(order);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->n_locations; i++)
		order[i] = (uint32_t)i;
	qsort_r(order, m->n_locations, sizeof(*order), cmp_loc_order, (void *)in);
	for (size_t k = 0; k < m->n_locations && !err; k++) {
		size_t i = order[k];
		const Gpuscope__V1__Location *l = m->locations[i];
		uint64_t hash, id, *v;
		int added = 0;

		hash = store_location_hash(m, l, &key);
		if (key.oom) {
			err = -ENOMEM;
			break;
		}
		v = u64map_upsert(&s->loc_ids, hash, s->loc_seq + 1, &added);
		if (!v) {
			err = -ENOMEM;
			break;
		}
		id = *v;
		if (added) {
			id = ++s->loc_seq;
			r[nr++] = (struct lrow){ .id = id, .str = { S(in, l->function),
				S(in, l->module), S(in, l->build_id), S(in, l->file) },
				.line = l->line, .address = l->address,
				.flags = (l->kernel ? 1u : 0u) | (l->inlined ? 2u : 0u) };
			if (!err && nr == LOC_BLOCK_MAX) {
				err = sq_put_loc_block(s, r, nr);
				nr = 0;
			}
		}
		in->loc_gid[i] = id;
	}
	if (!err && nr)
		err = sq_put_loc_block(s, r, nr);
	if (!err && s->loc_seq != in->loc_seq0) {
		sqlite3_bind_int64(s->st[ST_LOC_SEQ], 1, (int64_t)s->loc_seq);
		err = sq_step_done(s->st[ST_LOC_SEQ]);
	}
	buf_done(&key);
	free(r);
	free(order);
	return err;
}

/* The batch's new stacks, gathered for their block; and every stack it uses first today. */
struct stack_pending {
	uint64_t *id;
	size_t *off, *len, n;
	struct buf locs;
	uint64_t *used;
	size_t nused;
};

/* The stacks the batch used first on its day (p->used, sorted here) as a stackdays row. */
static int stackdays_put(struct sq *s, uint64_t day, struct stack_pending *p)
{
	size_t n = 0;

	if (!p->nused)
		return 0;
	qsort(p->used, p->nused, sizeof(*p->used), cmp_u64);
	for (size_t i = 0; i < p->nused; i++)
		if (!n || p->used[i] != p->used[n - 1])
			p->used[n++] = p->used[i];
	return sq_put_stackdays(s, day, p->used, n);
}

static int stacks_flush(struct sq *s, struct stack_pending *p)
{
	const uint8_t **v;
	int err;

	if (!p->n)
		return 0;
	if (p->locs.oom)
		return -ENOMEM;
	v = malloc(p->n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < p->n; i++)
		v[i] = p->locs.p + p->off[i];
	err = sq_put_stack_block(s, p->id, v, p->len, p->n);
	free(v);
	p->n = 0;
	p->locs.len = 0;
	return err;
}

/*
 * The batch's stacks to global ids: known ones by content hash (the in-memory index of every
 * stored stack, schema 7), new ones numbered after the last and stored together as one block
 * (a few if many); those used first today listed in a `stackdays` row.
 */
/* A sample as the chunks list it: its kind's rank, label set id, time; the stack it uses. */
struct suse {
	uint64_t ls, t;
	uint32_t rank, stack;
};

static int cmp_suse(const void *a, const void *b)
{
	const struct suse *x = a, *y = b;

	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->ls != y->ls)
		return x->ls < y->ls ? -1 : 1;
	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

/*
 * The order in which the batch's stacks get their ids (order[0..n_stacks)): first those its
 * samples use, as the sample chunks list them (kind by kind in the order store_samples() meets
 * them, then by label set and time), then the others. A chunk codes a stack its label set has
 * not used lately as the difference to the literal before it (chunk.c), so new stacks numbered
 * in that order are mostly +1 there: a churning node's new stack is most of its samples'
 * literals. 0 or -ENOMEM.
 */
static int stack_order(const struct ingest *in, uint32_t *order)
{
	const Gpuscope__V1__Batch *m = in->m;
	size_t total = 0, n = 0, no = 0;
	uint8_t *seen = calloc(m->n_stacks ? m->n_stacks : 1, 1);
	struct suse *u;

	for (size_t g = 0; g < m->n_samples; g++)
		total += m->samples[g]->n_stack;
	u = malloc((total ? total : 1) * sizeof(*u));
	if (!u || !seen) {
		free(u);
		free(seen);
		return -ENOMEM;
	}
	for (size_t g = 0; g < m->n_samples; g++) {
		const Gpuscope__V1__SampleGroup *sg = m->samples[g];
		uint32_t rank = (uint32_t)g;
		uint64_t t = 0;

		for (size_t k = 0; k < g; k++) {	/* the kind's first group */
			if (m->samples[k]->kind == sg->kind) {
				rank = (uint32_t)k;
				break;
			}
		}
		if (sg->label_set >= m->n_label_sets || in->ls[sg->label_set].refused)
			continue;
		for (size_t i = 0; i < sg->n_stack; i++) {
			t += (uint64_t)sg->time_delta_ns[i];
			if (sg->stack[i] < m->n_stacks)
				u[n++] = (struct suse){ in->ls[sg->label_set].id, t, rank, sg->stack[i] };
		}
	}
	qsort(u, n, sizeof(*u), cmp_suse);
	for (size_t i = 0; i < n; i++) {
		if (!seen[u[i].stack]) {
			seen[u[i].stack] = 1;
			order[no++] = u[i].stack;
		}
	}
	for (size_t i = 0; i < m->n_stacks; i++)
		if (!seen[i])
			order[no++] = (uint32_t)i;
	free(u);
	free(seen);
	return 0;
}

int ingest_map_stacks(struct ingest *in)
{
	const Gpuscope__V1__Batch *m = in->m;
	struct sq *s = in->s;
	struct buf key = { 0 };
	struct stack_pending p = { 0 };
	uint64_t tmin, tmax, today, *ids = NULL;
	size_t maxn = m->n_stacks < STACK_BLOCK_MAX ? m->n_stacks : STACK_BLOCK_MAX;
	uint32_t *order = NULL;
	int err = 0;

	if (!m->n_stacks)
		return 0;
	if (s->stack_index_stale && (err = sq_stacks_load(s)))
		return err;
	ids = malloc(BATCH_MAX_DEPTH * sizeof(*ids));
	p.id = malloc(maxn * sizeof(*p.id));
	p.off = malloc(maxn * sizeof(*p.off));
	p.len = malloc(maxn * sizeof(*p.len));
	p.used = malloc(m->n_stacks * sizeof(*p.used));
	order = malloc(m->n_stacks * sizeof(*order));
	if (!ids || !p.id || !p.off || !p.len || !p.used || !order || stack_order(in, order)) {
		err = -ENOMEM;
		goto out;
	}
	/* The day a stack was last used: its batch's newest record (records are retained by
	 * their time, so the stack is needed as long as that day is). */
	batch_time_bounds(m, &tmin, &tmax);
	today = (tmin <= tmax ? tmax : wall_ns()) / DAY_NS;

	if (s->stack_day.len > DEDUP_CACHE_MAX)
		u64map_done(&s->stack_day);	/* bounded: forgetting costs an id listed again */
	for (size_t j = 0; j < m->n_stacks && !err; j++) {
		size_t i = order[j];
		const Gpuscope__V1__Stack *st = m->stacks[i];
		size_t nl = st->n_locations < BATCH_MAX_DEPTH ? st->n_locations : BATCH_MAX_DEPTH;
		uint64_t hash, id, *v;
		int added = 0;

		/* the content hash is over the plain varint ids, the stored list delta-coded */
		key.len = 0;
		for (size_t k = 0; k < nl; k++) {
			ids[k] = in->loc_gid[st->locations[k]];
			buf_uvarint(&key, ids[k]);
		}
		if (key.oom) {
			err = -ENOMEM;
			break;
		}
		hash = hash64(key.p, key.len, 13);
		v = u64map_upsert(&s->stack_ids, hash, 0, &added);
		if (!v) {
			err = -ENOMEM;
			break;
		}
		if (!added) {
			id = *v;
			/* in use today: dictionary GC keeps it while retained data may use it */
			uint64_t *d = u64map_upsert(&s->stack_day, id, 0, NULL);

			if (!d) {
				err = -ENOMEM;
				break;
			}
			if (*d < today + 1) {
				p.used[p.nused++] = id;
				*d = today + 1;
			}
		} else {
			id = *v = ++s->stack_seq;
			p.used[p.nused++] = id;
			p.id[p.n] = id;
			p.off[p.n] = p.locs.len;
			stack_locs_encode(ids, nl, &p.locs);
			p.len[p.n] = p.locs.len - p.off[p.n];
			p.n++;
			in->new_stacks++;
			if (!u64map_upsert(&s->stack_day, id, today + 1, NULL))
				err = -ENOMEM;
			if (!err && p.n == STACK_BLOCK_MAX)
				err = stacks_flush(s, &p);
		}
		in->stack_gid[i] = id;
	}
	if (!err)
		err = stacks_flush(s, &p);
	if (!err)
		err = stackdays_put(s, today, &p);
	if (!err && s->stack_seq != in->stack_seq0) {
		sqlite3_bind_int64(s->st[ST_STACK_SEQ], 1, (int64_t)s->stack_seq);
		err = sq_step_done(s->st[ST_STACK_SEQ]);
	}
out:
	buf_done(&key);
	buf_done(&p.locs);
	free(p.id);
	free(p.off);
	free(p.len);
	free(p.used);
	free(order);
	free(ids);
	return err;
}
