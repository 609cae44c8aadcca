/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pprof writer on protobuf-c: deduplicates strings, mappings, functions and locations, keeps
 * samples as built, and encodes + gzips the Profile message in one go.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "common/compress.h"
#include "common/hmap.h"
#include "common/pprof.h"
#include "common/util.h"
#include "pprof/profile.pb-c.h"

typedef Perftools__Profiles__Profile Profile;
typedef Perftools__Profiles__Sample Sample;
typedef Perftools__Profiles__Label Label;
typedef Perftools__Profiles__Mapping Mapping;
typedef Perftools__Profiles__Location Location;
typedef Perftools__Profiles__Function Function;
typedef Perftools__Profiles__Line Line;
typedef Perftools__Profiles__ValueType ValueType;

#define MAX_TYPES 4

struct vec {
	void **items;
	size_t len, cap;
};

struct pprof {
	struct strtab strings;
	struct u64map mapping_ids, function_ids, location_ids;	/* dedup key hash -> id */
	struct vec mappings, functions, locations, samples;
	ValueType types[MAX_TYPES], period_type;
	ValueType *type_ptrs[MAX_TYPES];
	size_t ntypes;
	int64_t period;
	uint64_t time_ns, duration_ns;
	int64_t comments[8];		/* string indexes of the profile's comments */
	size_t ncomments;
};

static int vec_push(struct vec *v, void *item)
{
	if (v->len == v->cap) {
		size_t ncap = v->cap ? v->cap * 2 : 256;
		void **n = realloc(v->items, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		v->items = n;
		v->cap = ncap;
	}
	v->items[v->len++] = item;
	return 0;
}

static int64_t str(struct pprof *p, const char *s)
{
	return strtab_intern(&p->strings, s ? s : "");
}

struct pprof *pprof__new(const struct pprof_value_type *types, size_t ntypes,
			 struct pprof_value_type period_type, int64_t period, uint64_t time_ns,
			 uint64_t duration_ns)
{
	struct pprof *p;

	if (!ntypes || ntypes > MAX_TYPES) {
		errno = EINVAL;
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	if (str(p, "") != 0)
		goto out_nomem;
	for (size_t i = 0; i < ntypes; i++) {
		perftools__profiles__value_type__init(&p->types[i]);
		p->types[i].type = str(p, types[i].type);
		p->types[i].unit = str(p, types[i].unit);
		if (p->types[i].type < 0 || p->types[i].unit < 0)
			goto out_nomem;
		p->type_ptrs[i] = &p->types[i];
	}
	perftools__profiles__value_type__init(&p->period_type);
	p->period_type.type = str(p, period_type.type);
	p->period_type.unit = str(p, period_type.unit);
	if (p->period_type.type < 0 || p->period_type.unit < 0)
		goto out_nomem;
	p->ntypes = ntypes;
	p->period = period;
	p->time_ns = time_ns;
	p->duration_ns = duration_ns;
	return p;
out_nomem:
	pprof__free(p);
	errno = ENOMEM;
	return NULL;
}

static void free_sample(Sample *s)
{
	for (size_t i = 0; i < s->n_label; i++)
		free(s->label[i]);
	free(s->label);
	free(s->location_id);
	free(s->value);
	free(s);
}

void pprof__free(struct pprof *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->mappings.len; i++)
		free(p->mappings.items[i]);
	for (size_t i = 0; i < p->functions.len; i++)
		free(p->functions.items[i]);
	for (size_t i = 0; i < p->locations.len; i++) {
		Location *l = p->locations.items[i];

		if (l->n_line)
			free(l->line[0]);
		free(l->line);
		free(l);
	}
	for (size_t i = 0; i < p->samples.len; i++)
		free_sample(p->samples.items[i]);
	free(p->mappings.items);
	free(p->functions.items);
	free(p->locations.items);
	free(p->samples.items);
	u64map_done(&p->mapping_ids);
	u64map_done(&p->function_ids);
	u64map_done(&p->location_ids);
	strtab_done(&p->strings);
	free(p);
}

static uint64_t mapping_id(struct pprof *p, const struct location *loc)
{
	const char *module = loc->module && *loc->module ? loc->module : "[unknown]";
	int64_t name = str(p, module), bid = str(p, loc->build_id);
	uint64_t key[2] = { (uint64_t)name, (uint64_t)bid }, *slot;
	int inserted;
	Mapping *m;

	if (name < 0 || bid < 0)
		return 0;
	slot = u64map_upsert(&p->mapping_ids, hash64(key, sizeof(key), 1), 0, &inserted);
	if (!slot)
		return 0;
	if (!inserted) {
		m = p->mappings.items[*slot - 1];
		if (loc->address >= m->memory_limit)
			m->memory_limit = loc->address + 1;
		return m->id;
	}
	m = malloc(sizeof(*m));
	if (!m || vec_push(&p->mappings, m)) {
		free(m);
		*slot = 0;	/* never matched again: ids start at 1 */
		return 0;
	}
	perftools__profiles__mapping__init(m);
	m->id = p->mappings.len;
	m->memory_start = 0;
	m->memory_limit = loc->address + 1;
	m->file_offset = 0;
	m->filename = name;
	m->build_id = bid;
	m->has_functions = 1;
	*slot = m->id;
	return m->id;
}

int pprof__main_mapping(struct pprof *p, const char *module, const char *build_id)
{
	struct location l = { .module = module, .build_id = build_id };

	return mapping_id(p, &l) ? 0 : -ENOMEM;
}

static uint64_t function_id(struct pprof *p, const struct location *loc)
{
	int64_t name = str(p, loc->function && *loc->function ? loc->function : "[unknown]");
	int64_t file = str(p, loc->file);
	uint64_t key[2] = { (uint64_t)name, (uint64_t)file }, *slot;
	int inserted;
	Function *f;

	if (name < 0 || file < 0)
		return 0;
	slot = u64map_upsert(&p->function_ids, hash64(key, sizeof(key), 2), 0, &inserted);
	if (!slot)
		return 0;
	if (!inserted)
		return *slot;
	f = malloc(sizeof(*f));
	if (!f || vec_push(&p->functions, f)) {
		free(f);
		return 0;
	}
	perftools__profiles__function__init(f);
	f->id = p->functions.len;
	f->name = name;
	f->system_name = name;
	f->filename = file;
	*slot = f->id;
	return f->id;
}

uint64_t pprof__location(struct pprof *p, const struct location *loc)
{
	uint64_t mid = mapping_id(p, loc), fid = function_id(p, loc), *slot;
	uint64_t key[4] = { mid, loc->address, fid, loc->line };
	int inserted;
	Location *l;
	Line *line;

	if (!mid || !fid)
		return 0;
	slot = u64map_upsert(&p->location_ids, hash64(key, sizeof(key), 3), 0, &inserted);
	if (!slot)
		return 0;
	if (!inserted)
		return *slot;
	l = malloc(sizeof(*l));
	line = malloc(sizeof(*line));
	if (!l || !line)
		goto out_free;
	perftools__profiles__location__init(l);
	perftools__profiles__line__init(line);
	l->line = malloc(sizeof(*l->line));
	if (!l->line || vec_push(&p->locations, l)) {
		free(l->line);
		goto out_free;
	}
	line->function_id = fid;
	line->line = loc->line;
	l->line[0] = line;
	l->n_line = 1;
	l->id = p->locations.len;
	l->mapping_id = mid;
	l->address = loc->address;
	*slot = l->id;
	return l->id;
out_free:
	free(l);
	free(line);
	/* The slot stays 0: a later call for the same key retries through a fresh slot lookup. */
	return 0;
}

int pprof__sample(struct pprof *p, const uint64_t *loc_ids, size_t nlocs, const int64_t *values,
		  const struct label *labels, size_t nlabels, const struct pprof_num_label *nums,
		  size_t nnums)
{
	Sample *s = calloc(1, sizeof(*s));
	size_t nl = nlabels + nnums;

	if (!s)
		return -ENOMEM;
	perftools__profiles__sample__init(s);
	s->location_id = malloc((nlocs ? nlocs : 1) * sizeof(*s->location_id));
	s->value = malloc(p->ntypes * sizeof(*s->value));
	s->label = calloc(nl ? nl : 1, sizeof(*s->label));
	if (!s->location_id || !s->value || !s->label)
		goto out_free;
	memcpy(s->location_id, loc_ids, nlocs * sizeof(*loc_ids));
	s->n_location_id = nlocs;
	memcpy(s->value, values, p->ntypes * sizeof(*values));
	s->n_value = p->ntypes;
	for (size_t i = 0; i < nl; i++) {
		Label *l = malloc(sizeof(*l));

		if (!l)
			goto out_free;
		perftools__profiles__label__init(l);
		s->label[s->n_label++] = l;
		if (i < nlabels) {
			l->key = str(p, labels[i].name);
			l->str = str(p, labels[i].value);
			if (l->key < 0 || l->str < 0)
				goto out_free;
		} else {
			const struct pprof_num_label *n = &nums[i - nlabels];

			l->key = str(p, n->key);
			l->num = n->num;
			l->num_unit = n->unit ? str(p, n->unit) : 0;
			if (l->key < 0 || l->num_unit < 0)
				goto out_free;
		}
	}
	if (vec_push(&p->samples, s))
		goto out_free;
	return 0;
out_free:
	free_sample(s);
	return -ENOMEM;
}

int pprof__comment(struct pprof *p, const char *text)
{
	int64_t i;

	if (p->ncomments == sizeof(p->comments) / sizeof(p->comments[0]))
		return -E2BIG;
	i = str(p, text);
	if (i < 0)
		return -ENOMEM;
	p->comments[p->ncomments++] = i;
	return 0;
}

int pprof__encode_gz(struct pprof *p, uint8_t **ret, size_t *ret_len)
{
	Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
	uint8_t *raw;
	size_t len;
	int err;

	prof.n_sample_type = p->ntypes;
	prof.sample_type = p->type_ptrs;
	prof.n_sample = p->samples.len;
	prof.sample = (Sample **)p->samples.items;
	prof.n_mapping = p->mappings.len;
	prof.mapping = (Mapping **)p->mappings.items;
	prof.n_location = p->locations.len;
	prof.location = (Location **)p->locations.items;
	prof.n_function = p->functions.len;
	prof.function = (Function **)p->functions.items;
	prof.n_string_table = p->strings.len;
	prof.string_table = p->strings.strs;
	prof.time_nanos = (int64_t)p->time_ns;
	prof.duration_nanos = (int64_t)p->duration_ns;
	prof.period_type = &p->period_type;
	prof.period = p->period;
	prof.n_comment = p->ncomments;
	prof.comment = p->comments;

	len = perftools__profiles__profile__get_packed_size(&prof);
	raw = malloc(len ? len : 1);
	if (!raw)
		return -ENOMEM;
	perftools__profiles__profile__pack(&prof, raw);
	err = compress_buf(COMPRESS_GZIP, raw, len, ret, ret_len);
	free(raw);
	return err;
}
