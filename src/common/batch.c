/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The batch producers write into (batch.h): interned strings, locations, stacks and label sets
 * deduplicated by content hash, samples and metric points kept in columnar groups, encoded to
 * proto/gpuscope/v1/batch.proto. The server's validating decoder is batch_decode.c.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "common/batch.h"
#include "common/batch_int.h"
#include "common/hmap.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"

static const char *const kind_names[SAMPLE_KIND_MAX] = {
	[SAMPLE_CPU] = "cpu",
	[SAMPLE_OFFCPU_NS] = "offcpu_ns",
	[SAMPLE_GPU_KERNEL_NS] = "gpu_kernel_ns",
	[SAMPLE_CUDA_SYNC_NS] = "cuda_sync_ns",
};

const char *sample_kind_name(enum sample_kind k)
{
	return (unsigned)k < SAMPLE_KIND_MAX ? kind_names[k] : "unknown";
}

int sample_kind_parse(const char *s)
{
	for (int i = 0; s && i < SAMPLE_KIND_MAX; i++)
		if (!strcmp(s, kind_names[i]))
			return i;
	return -EINVAL;
}


static int vec_push(struct vec *v, const void *elem, size_t size)
{
	if (v->len == v->cap) {
		size_t ncap = v->cap ? v->cap * 2 : 16;
		void *n = realloc(v->v, ncap * size);

		if (!n)
			return -ENOMEM;
		v->v = n;
		v->cap = ncap;
	}
	memcpy((char *)v->v + v->len * size, elem, size);
	v->len++;
	return 0;
}


static void vec_done(struct vec *v)
{
	free(v->v);
	memset(v, 0, sizeof(*v));
}

static int64_t intern(struct batch *b, const char *s)
{
	size_t n, had = b->strs.len;
	int64_t i;

	if (!s)
		s = "";
	n = strlen(s);
	if (n > BATCH_MAX_STRLEN)
		return -E2BIG;
	if (b->strs.len >= BATCH_MAX_STRINGS)
		return -ENOSPC;
	i = strtab_intern(&b->strs, s);
	if (i >= 0 && (size_t)i == b->strs.len - 1)
		b->est += n + 3;
	if (b->strs.len > had)
		b->str_bytes += n;	/* exact: a string added, not the last one found again */
	return i;
}

static void new_batch_id(struct batch *b)
{
	uint64_t id = 0;

	if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id))
		id = wall_ns() ^ (uint64_t)(uintptr_t)b;
	b->batch_id = id ? id : 1;
}

static int init_contents(struct batch *b, const char *node)
{
	int64_t i;

	i = intern(b, "");
	if (i < 0)
		return (int)i;
	i = intern(b, node);
	if (i < 0)
		return (int)i;
	b->node = (uint32_t)i;
	new_batch_id(b);
	return 0;
}

struct batch *batch__new(const char *node)
{
	struct batch *b = calloc(1, sizeof(*b));
	int err;

	if (!b)
		return NULL;
	pthread_mutex_init(&b->mu, NULL);
	err = init_contents(b, node);
	if (err) {
		batch__free(b);
		errno = -err;
		return NULL;
	}
	return b;
}

static void free_contents(struct batch *b)
{
	for (size_t i = 0; i < b->groups.len; i++) {
		struct sgroup *g = &VEC_AT(b->groups, struct sgroup, i);

		vec_done(&g->time);
		vec_done(&g->stack);
		vec_done(&g->value);
	}
	for (size_t i = 0; i < b->series.len; i++) {
		struct mseries *s = &VEC_AT(b->series, struct mseries, i);

		vec_done(&s->time);
		vec_done(&s->value);
	}
	strtab_done(&b->strs);
	vec_done(&b->locs);
	u64map_done(&b->loc_idx);
	vec_done(&b->stack_data);
	vec_done(&b->stack_off);
	u64map_done(&b->stack_idx);
	vec_done(&b->ls_data);
	vec_done(&b->ls_off);
	u64map_done(&b->ls_idx);
	vec_done(&b->groups);
	u64map_done(&b->group_idx);
	vec_done(&b->series);
	u64map_done(&b->series_idx);
	vec_done(&b->ivls);
	vec_done(&b->attrs);
	b->nsamples = b->nrecords = b->est = 0;
	b->str_bytes = b->npoints = b->label_bytes = b->ls_bytes_max = b->attr_bytes_max = 0;
}

void batch__free(struct batch *b)
{
	if (!b)
		return;
	free_contents(b);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

void batch__reset(struct batch *b)
{
	char *node;

	pthread_mutex_lock(&b->mu);
	node = strdup(b->strs.strs[b->node]);
	free_contents(b);
	/* On ENOMEM the batch is left empty without a node name: "" keeps it usable. */
	if (init_contents(b, node ? node : ""))
		b->node = 0;
	free(node);
	pthread_mutex_unlock(&b->mu);
}

uint64_t batch__id(const struct batch *b)
{
	return b->batch_id;
}

void batch__set_id(struct batch *b, uint64_t id)
{
	pthread_mutex_lock(&b->mu);
	b->batch_id = id | 1;
	pthread_mutex_unlock(&b->mu);
}

void batch__set_period(struct batch *b, uint64_t period_ns)
{
	pthread_mutex_lock(&b->mu);
	b->period_ns = period_ns;
	pthread_mutex_unlock(&b->mu);
}

/* Finds an equal record by hash, probing h, h+1, ...; returns its slot or the free key. */
typedef bool (*eq_fn)(struct batch *b, uint64_t idx, const void *key);

static uint64_t *dedup_find(struct batch *b, struct u64map *m, uint64_t h, eq_fn eq,
			    const void *key, uint64_t *ret_free_key)
{
	uint64_t *v;

	for (; (v = u64map_find(m, h)); h++)
		if (eq(b, *v, key))
			return v;
	*ret_free_key = h;
	return NULL;
}

static bool loc_eq(struct batch *b, uint64_t idx, const void *key)
{
	return !memcmp(&VEC_AT(b->locs, struct loc_rec, idx), key, sizeof(struct loc_rec));
}

static int64_t add_location(struct batch *b, const struct location *l)
{
	struct loc_rec r = { 0 };
	uint64_t h, fk, *v;
	int64_t i;

	if ((i = intern(b, l->function)) < 0)
		return i;
	r.function = (uint32_t)i;
	if ((i = intern(b, l->module)) < 0)
		return i;
	r.module = (uint32_t)i;
	if ((i = intern(b, l->build_id)) < 0)
		return i;
	r.build_id = (uint32_t)i;
	if ((i = intern(b, l->file)) < 0)
		return i;
	r.file = (uint32_t)i;
	r.line = l->line;
	r.address = l->address;
	r.flags = (l->kernel ? 1 : 0) | (l->inlined ? 2 : 0);
	h = hash64(&r, sizeof(r), 1);
	v = dedup_find(b, &b->loc_idx, h, loc_eq, &r, &fk);
	if (v)
		return (int64_t)*v;
	if (vec_push(&b->locs, &r, sizeof(r)))
		return -ENOMEM;
	if (!u64map_upsert(&b->loc_idx, fk, b->locs.len - 1, NULL)) {
		b->locs.len--;
		return -ENOMEM;
	}
	b->est += 20;
	return (int64_t)b->locs.len - 1;
}

struct u32s {
	const uint32_t *v;
	size_t n;
};

static bool u32s_eq(const struct vec *data, const struct vec *off, uint64_t idx,
		    const struct u32s *k)
{
	size_t s = VEC_AT(*off, size_t, idx), e = VEC_AT(*off, size_t, idx + 1);

	return e - s == k->n && !memcmp(&VEC_AT(*data, uint32_t, s), k->v, k->n * sizeof(uint32_t));
}

static bool stack_eq(struct batch *b, uint64_t idx, const void *key)
{
	return u32s_eq(&b->stack_data, &b->stack_off, idx, key);
}

static bool ls_eq(struct batch *b, uint64_t idx, const void *key)
{
	return u32s_eq(&b->ls_data, &b->ls_off, idx, key);
}

/* Adds a u32 list to data/off deduplicated through m; returns its index or -errno. */
static int64_t add_u32s(struct batch *b, struct vec *data, struct vec *off, struct u64map *m,
			eq_fn eq, const uint32_t *v, size_t n, uint64_t seed)
{
	struct u32s k = { v, n };
	uint64_t fk, *slot, h = hash64(v, n * sizeof(*v), seed);
	size_t old_len = data->len, idx, end;

	slot = dedup_find(b, m, h, eq, &k, &fk);
	if (slot)
		return (int64_t)*slot;
	if (!off->len) {
		size_t zero = 0;

		if (vec_push(off, &zero, sizeof(zero)))
			return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		if (vec_push(data, &v[i], sizeof(v[i])))
			goto out_undo;
	end = data->len;
	if (vec_push(off, &end, sizeof(end)))
		goto out_undo;
	idx = off->len - 2;
	if (!u64map_upsert(m, fk, idx, NULL)) {
		off->len--;
		goto out_undo;
	}
	b->est += n * 2 + 4;
	return (int64_t)idx;
out_undo:
	data->len = old_len;
	return -ENOMEM;
}

int64_t batch__stack(struct batch *b, const struct location *frames, size_t n)
{
	uint32_t *ids;
	int64_t ret = 0;

	if (n > BATCH_MAX_DEPTH)
		return -E2BIG;
	ids = malloc((n ? n : 1) * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	pthread_mutex_lock(&b->mu);
	for (size_t i = 0; i < n; i++) {
		ret = add_location(b, &frames[i]);
		if (ret < 0)
			goto out_unlock;
		ids[i] = (uint32_t)ret;
	}
	ret = add_u32s(b, &b->stack_data, &b->stack_off, &b->stack_idx, stack_eq, ids, n, 2);
out_unlock:
	pthread_mutex_unlock(&b->mu);
	free(ids);
	return ret;
}

static int cmp_pair(const void *a, const void *b, void *ctx)
{
	const uint32_t *x = a, *y = b;
	const struct strtab *t = ctx;

	return strcmp(t->strs[x[0]], t->strs[y[0]]);
}

/* Interns labels as sorted (name, value) pairs into out (2 * n); *ret_bytes: what they resolve
 * to on the server (each string + 1). Caller holds b->mu. */
static int label_pairs(struct batch *b, const struct label *labels, size_t n, uint32_t *out,
		       uint64_t *ret_bytes)
{
	uint64_t bytes = 2 * n;
	int64_t i;

	if (n > BATCH_MAX_LABELS)
		return -E2BIG;
	for (size_t k = 0; k < n; k++) {
		if (!labels[k].name || !*labels[k].name)
			return -EINVAL;
		bytes += strlen(labels[k].name) + (labels[k].value ? strlen(labels[k].value) : 0);
		if ((i = intern(b, labels[k].name)) < 0)
			return (int)i;
		out[2 * k] = (uint32_t)i;
		if ((i = intern(b, labels[k].value)) < 0)
			return (int)i;
		out[2 * k + 1] = (uint32_t)i;
	}
	qsort_r(out, n, 2 * sizeof(uint32_t), cmp_pair, &b->strs);
	for (size_t k = 1; k < n; k++)
		if (out[2 * k] == out[2 * k - 2])
			return -EINVAL;	/* the same name twice */
	*ret_bytes = bytes;
	return 0;
}

static int64_t label_set(struct batch *b, const struct label *labels, size_t n)
{
	uint32_t pairs[2 * BATCH_MAX_LABELS];
	int64_t nls = b->ls_off.len ? (int64_t)b->ls_off.len - 1 : 0, ls;
	uint64_t bytes = 0;
	int err = label_pairs(b, labels, n, pairs, &bytes);

	if (err)
		return err;
	ls = add_u32s(b, &b->ls_data, &b->ls_off, &b->ls_idx, ls_eq, pairs, 2 * n, 3);
	if (ls == nls) {	/* a new one: the server resolves each label set once */
		b->label_bytes += bytes;
		b->ls_bytes_max = bytes > b->ls_bytes_max ? bytes : b->ls_bytes_max;
	}
	return ls;
}


/* Caller holds mu: the label set `given` (a batch__label_set() index) if >= 0, else labels'. */
static int64_t label_set_or(struct batch *b, int64_t given, const struct label *labels,
			    size_t nlabels)
{
	if (given < 0)
		return label_set(b, labels, nlabels);
	return b->ls_off.len && (size_t)given < b->ls_off.len - 1 ? given : -EINVAL;
}

int64_t batch__label_set(struct batch *b, const struct label *labels, size_t nlabels)
{
	int64_t ls;

	pthread_mutex_lock(&b->mu);
	ls = label_set(b, labels, nlabels);
	pthread_mutex_unlock(&b->mu);
	return ls;
}

static int sample(struct batch *b, uint64_t time_ns, int64_t given_ls, const struct label *labels,
		  size_t nlabels, int64_t stack_id, enum sample_kind kind, int64_t value);

int batch__sample(struct batch *b, uint64_t time_ns, const struct label *labels, size_t nlabels,
		  int64_t stack_id, enum sample_kind kind, int64_t value)
{
	return sample(b, time_ns, -1, labels, nlabels, stack_id, kind, value);
}

int batch__sample_ls(struct batch *b, uint64_t time_ns, int64_t ls, int64_t stack_id,
		     enum sample_kind kind, int64_t value)
{
	return ls < 0 ? -EINVAL : sample(b, time_ns, ls, NULL, 0, stack_id, kind, value);
}

static int sample(struct batch *b, uint64_t time_ns, int64_t given_ls, const struct label *labels,
		  size_t nlabels, int64_t stack_id, enum sample_kind kind, int64_t value)
{
	struct sgroup *g;
	uint64_t *slot;
	uint32_t st = (uint32_t)stack_id;
	int64_t ls;
	int err = 0;

	if ((unsigned)kind >= SAMPLE_KIND_MAX)
		return -EINVAL;
	if ((int64_t)time_ns <= 0 && !b->any_time)
		return -ERANGE;	/* the server refuses the whole batch for one such time */
	pthread_mutex_lock(&b->mu);
	if (stack_id < 0 || (size_t)stack_id >= nstacks(b)) {
		err = -EINVAL;
		goto out_unlock;
	}
	if (b->nrecords >= BATCH_MAX_RECORDS) {
		err = -ENOSPC;
		goto out_unlock;
	}
	ls = label_set_or(b, given_ls, labels, nlabels);
	if (ls < 0) {
		err = (int)ls;
		goto out_unlock;
	}
	slot = u64map_upsert(&b->group_idx, (uint64_t)ls << 8 | kind, UINT64_MAX, NULL);
	if (!slot) {
		err = -ENOMEM;
		goto out_unlock;
	}
	if (*slot == UINT64_MAX) {
		struct sgroup ng = { .ls = (uint32_t)ls, .kind = kind, .all_one = true };

		if (vec_push(&b->groups, &ng, sizeof(ng))) {
			err = -ENOMEM;
			goto out_unlock;
		}
		*slot = b->groups.len - 1;
	}
	g = &VEC_AT(b->groups, struct sgroup, *slot);
	/* Keep the three columns the same length: undo on partial failure. */
	if (vec_push(&g->time, &time_ns, sizeof(time_ns)))
		goto out_nomem;
	if (vec_push(&g->stack, &st, sizeof(st))) {
		g->time.len--;
		goto out_nomem;
	}
	if (vec_push(&g->value, &value, sizeof(value))) {
		g->time.len--;
		g->stack.len--;
		goto out_nomem;
	}
	if (value != 1)
		g->all_one = false;
	b->nsamples++;
	b->nrecords++;
	b->est += 5;
	goto out_unlock;
out_nomem:
	err = -ENOMEM;
out_unlock:
	pthread_mutex_unlock(&b->mu);
	return err;
}

int batch__metric(struct batch *b, const char *name, const struct label *labels, size_t nlabels,
		  uint64_t time_ns, double value)
{
	struct mseries *s;
	uint64_t *slot;
	int64_t ls, nm;
	int err = 0;

	if (!name || !*name)
		return -EINVAL;
	if ((int64_t)time_ns <= 0 && !b->any_time)
		return -ERANGE;
	pthread_mutex_lock(&b->mu);
	if (b->nrecords >= BATCH_MAX_RECORDS) {
		err = -ENOSPC;
		goto out_unlock;
	}
	nm = intern(b, name);
	if (nm < 0) {
		err = (int)nm;
		goto out_unlock;
	}
	ls = label_set(b, labels, nlabels);
	if (ls < 0) {
		err = (int)ls;
		goto out_unlock;
	}
	slot = u64map_upsert(&b->series_idx, (uint64_t)nm << 32 | (uint64_t)ls, UINT64_MAX, NULL);
	if (!slot) {
		err = -ENOMEM;
		goto out_unlock;
	}
	if (*slot == UINT64_MAX) {
		struct mseries ns = { .name = (uint32_t)nm, .ls = (uint32_t)ls };

		if (vec_push(&b->series, &ns, sizeof(ns))) {
			err = -ENOMEM;
			goto out_unlock;
		}
		*slot = b->series.len - 1;
	}
	s = &VEC_AT(b->series, struct mseries, *slot);
	if (vec_push(&s->time, &time_ns, sizeof(time_ns))) {
		err = -ENOMEM;
		goto out_unlock;
	}
	if (vec_push(&s->value, &value, sizeof(value))) {
		s->time.len--;
		err = -ENOMEM;
		goto out_unlock;
	}
	b->nrecords++;
	b->npoints++;
	b->est += 10;
out_unlock:
	pthread_mutex_unlock(&b->mu);
	return err;
}

static int interval(struct batch *b, const char *kind, int64_t given_ls,
		    const struct label *labels, size_t nlabels, uint64_t start_ns, uint64_t end_ns,
		    int64_t stack_id, const struct label *attrs, size_t nattrs,
		    int64_t given_kind, const uint32_t *given_pairs);

int batch__interval(struct batch *b, const char *kind, const struct label *labels, size_t nlabels,
		    uint64_t start_ns, uint64_t end_ns, int64_t stack_id, const struct label *attrs,
		    size_t nattrs)
{
	return interval(b, kind, -1, labels, nlabels, start_ns, end_ns, stack_id, attrs, nattrs,
			-1, NULL);
}

int batch__interval_ls(struct batch *b, const char *kind, int64_t ls, uint64_t start_ns,
		       uint64_t end_ns, int64_t stack_id, const struct label *attrs, size_t nattrs)
{
	return ls < 0 ? -EINVAL :
			interval(b, kind, ls, NULL, 0, start_ns, end_ns, stack_id, attrs, nattrs,
				 -1, NULL);
}

int64_t batch__string(struct batch *b, const char *s)
{
	int64_t i;

	pthread_mutex_lock(&b->mu);
	i = intern(b, s);
	pthread_mutex_unlock(&b->mu);
	return i;
}

int batch__interval_idx(struct batch *b, uint32_t kind, int64_t ls, uint64_t start_ns,
			uint64_t end_ns, int64_t stack_id, const uint32_t *attrs, size_t nattrs)
{
	if (ls < 0 || !attrs)
		return -EINVAL;
	return interval(b, NULL, ls, NULL, 0, start_ns, end_ns, stack_id, NULL, nattrs, kind,
			attrs);
}

/* Given (name, value) index pairs: in b, names not empty and in label_pairs()'s order. */
/* Checks pairs of interned indices as label_pairs() would make them; *ret_bytes as it counts. */
static int given_pairs_ok(const struct batch *b, const uint32_t *p, size_t n,
			  uint64_t *ret_bytes)
{
	uint64_t bytes = 2 * n;

	for (size_t k = 0; k < n; k++) {
		if (p[2 * k] >= b->strs.len || p[2 * k + 1] >= b->strs.len ||
		    !b->strs.strs[p[2 * k]][0])
			return -EINVAL;
		if (k && strcmp(b->strs.strs[p[2 * k - 2]], b->strs.strs[p[2 * k]]) >= 0)
			return -EINVAL;
		bytes += strlen(b->strs.strs[p[2 * k]]) + strlen(b->strs.strs[p[2 * k + 1]]);
	}
	*ret_bytes = bytes;
	return 0;
}

static int interval(struct batch *b, const char *kind, int64_t given_ls,
		    const struct label *labels, size_t nlabels, uint64_t start_ns, uint64_t end_ns,
		    int64_t stack_id, const struct label *attrs, size_t nattrs,
		    int64_t given_kind, const uint32_t *given_pairs)
{
	uint32_t pairs[2 * BATCH_MAX_LABELS];
	struct ivl iv = { .start = start_ns, .end = end_ns };
	uint64_t bytes = 0;
	size_t old_attrs;
	int64_t i;
	int err = 0;

	if ((given_kind < 0 && (!kind || !*kind)) || end_ns < start_ns)
		return -EINVAL;
	if (((int64_t)start_ns <= 0 || (int64_t)end_ns <= 0) && !b->any_time)
		return -ERANGE;
	if (nattrs > BATCH_MAX_LABELS)
		return -E2BIG;
	pthread_mutex_lock(&b->mu);
	old_attrs = b->attrs.len;
	if (b->nrecords >= BATCH_MAX_RECORDS) {
		err = -ENOSPC;
		goto out_unlock;
	}
	if (stack_id >= (int64_t)nstacks(b) || stack_id < -1) {
		err = -EINVAL;
		goto out_unlock;
	}
	iv.stack = stack_id >= 0 ? (uint32_t)stack_id + 1 : 0;
	if (given_ls >= 0 && label_set_or(b, given_ls, NULL, 0) < 0) {
		err = -EINVAL;	/* before the kind is interned: a refused record leaves nothing */
		goto out_unlock;
	}
	if (given_kind >= 0) {	/* a batch__string() index: an interned kind, not empty */
		if ((size_t)given_kind >= b->strs.len || !b->strs.strs[given_kind][0]) {
			err = -EINVAL;
			goto out_unlock;
		}
		i = given_kind;
	} else if ((i = intern(b, kind)) < 0) {
		err = (int)i;
		goto out_unlock;
	}
	iv.kind = (uint32_t)i;
	if ((i = label_set_or(b, given_ls, labels, nlabels)) < 0) {
		err = (int)i;
		goto out_unlock;
	}
	iv.ls = (uint32_t)i;
	if (given_pairs) {
		err = given_pairs_ok(b, given_pairs, nattrs, &bytes);
		if (!err)
			memcpy(pairs, given_pairs, 2 * nattrs * sizeof(*pairs));
	} else {
		err = label_pairs(b, attrs, nattrs, pairs, &bytes);
	}
	if (err)
		goto out_unlock;
	iv.attr_off = b->attrs.len;
	iv.nattrs = (uint32_t)nattrs;
	for (size_t k = 0; k < 2 * nattrs; k++)
		if (vec_push(&b->attrs, &pairs[k], sizeof(pairs[k])))
			goto out_nomem;
	if (vec_push(&b->ivls, &iv, sizeof(iv)))
		goto out_nomem;
	b->nrecords++;
	b->est += 16 + 4 * nattrs;
	b->label_bytes += bytes;
	b->attr_bytes_max = bytes > b->attr_bytes_max ? bytes : b->attr_bytes_max;
	goto out_unlock;
out_nomem:
	b->attrs.len = old_attrs;
	err = -ENOMEM;
out_unlock:
	pthread_mutex_unlock(&b->mu);
	return err;
}

size_t batch__nsamples(const struct batch *b)
{
	struct batch *m = (struct batch *)b;
	size_t n;

	pthread_mutex_lock(&m->mu);
	n = m->nsamples;
	pthread_mutex_unlock(&m->mu);
	return n;
}

size_t batch__size_estimate(const struct batch *b)
{
	struct batch *m = (struct batch *)b;
	size_t n;

	pthread_mutex_lock(&m->mu);
	n = m->est + 32;
	pthread_mutex_unlock(&m->mu);
	return n;
}

void batch__counts(const struct batch *b, struct batch_counts *ret)
{
	struct batch *m = (struct batch *)b;

	pthread_mutex_lock(&m->mu);
	*ret = (struct batch_counts){
		.strings = m->strs.len,
		.string_bytes = m->str_bytes,
		.locations = m->locs.len,
		.stacks = nstacks(m),
		.frames = m->stack_data.len,
		.label_sets = m->ls_off.len ? m->ls_off.len - 1 : 0,
		.label_entries = m->ls_data.len,
		.groups = m->groups.len,
		.samples = m->nsamples,
		.series = m->series.len,
		.points = m->npoints,
		.intervals = m->ivls.len,
		.attr_entries = m->attrs.len,
		.label_bytes = m->label_bytes,
		.label_set_bytes_max = m->ls_bytes_max,
		.attr_bytes_max = m->attr_bytes_max,
		.checked = !m->any_time && m->node && *m->strs.strs[m->node],
	};
	pthread_mutex_unlock(&m->mu);
}

void batch__allow_any_time(struct batch *b)
{
	b->any_time = true;
}
