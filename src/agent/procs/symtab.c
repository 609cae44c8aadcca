/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sorted symbol table shared by the ELF, perf-map and kallsyms readers: candidates are added in
 * any order, then sorted once; lookups are a binary search over 16-byte entries.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "agent/procs/symtab.h"

/* Room for one more candidate. 0 or -ENOMEM. */
static int build_room(struct symt *t)
{
	size_t ncap;
	struct symt_build *n;

	if (t->nb < t->bcap)
		return 0;
	ncap = t->bcap ? t->bcap * 2 : 256;
	n = realloc(t->b, ncap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	t->b = n;
	t->bcap = ncap;
	return 0;
}

int symt_add(struct symt *t, uint64_t addr, uint64_t size, const char *name, size_t name_len,
	     int32_t prio, uint32_t aux)
{
	if (build_room(t))
		return -ENOMEM;
	if (t->slen + name_len + 1 > t->scap) {
		size_t ncap = t->scap ? t->scap : 4096;
		char *n;

		while (ncap < t->slen + name_len + 1)
			ncap *= 2;
		if (ncap >= SYMT_EXT)
			return -ENOMEM;
		n = realloc(t->strs, ncap);
		if (!n)
			return -ENOMEM;
		t->strs = n;
		t->scap = ncap;
	}
	memcpy(t->strs + t->slen, name, name_len);
	t->strs[t->slen + name_len] = 0;
	t->b[t->nb] = (struct symt_build){ .addr = addr, .size = size, .name = (uint32_t)t->slen,
					   .aux = aux, .prio = prio, .seq = (uint32_t)t->nb };
	t->nb++;
	t->slen += name_len + 1;
	return 0;
}

int symt_add_ext(struct symt *t, uint64_t addr, uint64_t size, size_t ext_off, int32_t prio)
{
	if (ext_off >= t->ext_len || ext_off >= SYMT_EXT)
		return -E2BIG;
	if (build_room(t))
		return -ENOMEM;
	t->b[t->nb] = (struct symt_build){ .addr = addr, .size = size,
					   .name = (uint32_t)ext_off | SYMT_EXT, .prio = prio,
					   .seq = (uint32_t)t->nb };
	t->nb++;
	return 0;
}

static int cmp_build(const void *a, const void *b)
{
	const struct symt_build *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->prio != y->prio)
		return x->prio > y->prio ? -1 : 1;	/* best first */
	return x->seq > y->seq ? -1 : (x->seq < y->seq);	/* latest first */
}

int symt_finish(struct symt *t, uint64_t max_derived)
{
	bool want_aux = false;
	size_t n = 0;

	qsort(t->b, t->nb, sizeof(*t->b), cmp_build);
	for (size_t i = 0; i < t->nb; i++)
		want_aux |= t->b[i].aux != 0;
	free(t->e);
	free(t->aux);
	t->aux = NULL;
	t->e = malloc((t->nb ? t->nb : 1) * sizeof(*t->e));
	if (want_aux)
		t->aux = malloc((t->nb ? t->nb : 1) * sizeof(*t->aux));
	if (!t->e || (want_aux && !t->aux)) {
		free(t->e);
		free(t->aux);
		t->e = NULL;
		t->aux = NULL;
		return -ENOMEM;
	}
	for (size_t i = 0; i < t->nb; i++) {
		const struct symt_build *c = &t->b[i];
		uint64_t size = c->size;

		if (n && t->e[n - 1].addr == c->addr)
			continue;	/* an alias that lost */
		if (!size) {
			size_t j = i + 1;

			while (j < t->nb && t->b[j].addr == c->addr)
				j++;
			size = j < t->nb ? t->b[j].addr - c->addr : max_derived;
			if (size > max_derived)
				size = max_derived;
		}
		if (size > UINT32_MAX)
			size = UINT32_MAX;
		t->e[n] = (struct symt_ent){ .addr = c->addr, .size = (uint32_t)size,
					     .name = c->name };
		if (t->aux)
			t->aux[n] = c->aux;
		n++;
	}
	t->n = n;
	free(t->b);
	t->b = NULL;
	t->nb = t->bcap = 0;
	/* Give back the slack of the doubling buffers: tables live long. */
	if (n) {
		struct symt_ent *e = realloc(t->e, n * sizeof(*e));
		char *s = realloc(t->strs, t->slen ? t->slen : 1);

		if (e)
			t->e = e;
		if (s) {
			t->strs = s;
			t->scap = t->slen ? t->slen : 1;
		}
	}
	return 0;
}

long symt_find(const struct symt *t, uint64_t addr)
{
	const struct symt_ent *base = t->e;
	size_t n = t->n, i;

	if (!n)
		return -1;
	/* Branchless search for the last entry with e.addr <= addr (cmov, no mispredictions). */
	while (n > 1) {
		size_t half = n / 2;

		base = base[half].addr <= addr ? base + half : base;
		n -= half;
	}
	if (base->addr > addr)
		return -1;
	/* A few steps back for symbols nested in a larger one (a function with a cold part). */
	for (i = (size_t)(base - t->e) + 1; i > 0 && (size_t)(base - t->e) + 1 - i < 4; i--) {
		const struct symt_ent *e = &t->e[i - 1];

		if (addr - e->addr < e->size)
			return (long)(i - 1);
	}
	return -1;
}

size_t symt_bytes(const struct symt *t)
{
	return t->n * (sizeof(*t->e) + (t->aux ? sizeof(*t->aux) : 0)) + t->scap;
}

void symt_done(struct symt *t)
{
	if (t->ext_map)
		munmap(t->ext_map, t->ext_map_len);
	free(t->e);
	free(t->aux);
	free(t->strs);
	free(t->b);
	memset(t, 0, sizeof(*t));
}
