/* SPDX-License-Identifier: Apache-2.0 */
/* Open-addressing u64 map (linear probing, power-of-two capacity) and a string interner on it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "common/hmap.h"
#include "common/util.h"

static inline size_t slot_of(uint64_t key, size_t cap)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdULL;
	key ^= key >> 33;
	return key & (cap - 1);
}

static int grow(struct u64map *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 64;
	uint64_t *nk = calloc(ncap, sizeof(*nk)), *nv = malloc(ncap * sizeof(*nv));

	if (!nk || !nv) {
		free(nk);
		free(nv);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->keys[i])
			continue;
		size_t s = slot_of(m->keys[i], ncap);

		while (nk[s])
			s = (s + 1) & (ncap - 1);
		nk[s] = m->keys[i];
		nv[s] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = nk;
	m->vals = nv;
	m->cap = ncap;
	return 0;
}

uint64_t *u64map_find(const struct u64map *m, uint64_t key)
{
	if (!key)
		return m->has_zero ? (uint64_t *)&m->zero_val : NULL;
	if (!m->cap)
		return NULL;
	for (size_t s = slot_of(key, m->cap);; s = (s + 1) & (m->cap - 1)) {
		if (m->keys[s] == key)
			return &m->vals[s];
		if (!m->keys[s])
			return NULL;
	}
}

uint64_t *u64map_upsert(struct u64map *m, uint64_t key, uint64_t dflt, int *ret_inserted)
{
	uint64_t *v = u64map_find(m, key);

	if (ret_inserted)
		*ret_inserted = !v;
	if (v)
		return v;
	if (!key) {
		m->has_zero = 1;
		m->zero_val = dflt;
		return &m->zero_val;
	}
	if ((m->len + 1) * 4 > m->cap * 3 && grow(m))
		return NULL;
	size_t s = slot_of(key, m->cap);

	while (m->keys[s])
		s = (s + 1) & (m->cap - 1);
	m->keys[s] = key;
	m->vals[s] = dflt;
	m->len++;
	return &m->vals[s];
}

int u64map_remove(struct u64map *m, uint64_t key)
{
	size_t mask = m->cap - 1, i, j;

	if (!key) {
		if (!m->has_zero)
			return 0;
		m->has_zero = 0;
		return 1;
	}
	if (!m->cap)
		return 0;
	for (i = slot_of(key, m->cap); m->keys[i] != key; i = (i + 1) & mask)
		if (!m->keys[i])
			return 0;
	/* Shift back each later entry of the run whose home slot is not in (i, j]. */
	for (j = i;;) {
		size_t k;

		j = (j + 1) & mask;
		if (!m->keys[j])
			break;
		k = slot_of(m->keys[j], m->cap);
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		m->keys[i] = m->keys[j];
		m->vals[i] = m->vals[j];
		i = j;
	}
	m->keys[i] = 0;
	m->len--;
	return 1;
}

void u64map_done(struct u64map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

int64_t strtab_intern(struct strtab *t, const char *s)
{
	uint64_t h = hash64(s, strlen(s), 0), k = h;
	uint64_t *v;
	char *copy;

	/* Probe h, h+1, ... in the index until the string or a free key is found. */
	for (; (v = u64map_find(&t->index, k)); k++)
		if (!strcmp(t->strs[*v], s))
			return (int64_t)*v;
	if (t->len == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 64;
		char **n = realloc(t->strs, ncap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		t->strs = n;
		t->cap = ncap;
	}
	copy = strdup(s);
	if (!copy)
		return -ENOMEM;
	v = u64map_upsert(&t->index, k, t->len, NULL);
	if (!v) {
		free(copy);
		return -ENOMEM;
	}
	t->strs[t->len] = copy;
	return (int64_t)t->len++;
}

void strtab_done(struct strtab *t)
{
	for (size_t i = 0; i < t->len; i++)
		free(t->strs[i]);
	free(t->strs);
	u64map_done(&t->index);
	memset(t, 0, sizeof(*t));
}
