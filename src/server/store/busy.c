/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gpu_idle filter's busy intervals, shared by the backends: per node, the gpu_busy
 * intervals of the asked GPU, sorted and merged, and the test "is t inside one".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "common/util.h"
#include "server/store/store.h"

struct node_busy *busy_node(struct busy_set *bs, const char *node)
{
	struct node_busy *n;

	for (size_t i = 0; i < bs->n; i++)
		if (!strcmp(bs->nodes[i].node, node))
			return &bs->nodes[i];
	n = realloc(bs->nodes, (bs->n + 1) * sizeof(*n));
	if (!n)
		return NULL;
	bs->nodes = n;
	n = &bs->nodes[bs->n++];
	*n = (struct node_busy){ .node = node };
	return n;
}

int busy_add(struct busy_set *bs, const char *node, uint64_t start, uint64_t end)
{
	struct node_busy *nb = busy_node(bs, node);

	if (!nb)
		return -ENOMEM;
	if (array_reserve(&nb->v, &nb->cap, nb->n + 1, sizeof(*nb->v), 64))
		return -ENOMEM;
	nb->v[nb->n++] = (struct busy){ start, end };
	return 0;
}

static int cmp_busy(const void *a, const void *b)
{
	const struct busy *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

void busy_merge(struct busy_set *bs)
{
	for (size_t i = 0; i < bs->n; i++) {
		struct node_busy *nb = &bs->nodes[i];
		size_t k = 0;

		qsort(nb->v, nb->n, sizeof(*nb->v), cmp_busy);
		for (size_t j = 1; j < nb->n; j++) {
			if (nb->v[j].start <= nb->v[k].end) {
				if (nb->v[j].end > nb->v[k].end)
					nb->v[k].end = nb->v[j].end;
			} else {
				nb->v[++k] = nb->v[j];
			}
		}
		if (nb->n)
			nb->n = k + 1;
	}
}

const struct node_busy *busy_find(const struct busy_set *bs, const char *node)
{
	for (size_t i = 0; i < bs->n; i++)
		if (!strcmp(bs->nodes[i].node, node))
			return &bs->nodes[i];
	return NULL;
}

bool busy_in_list(const struct busy *v, size_t n, uint64_t t)
{
	size_t lo = 0, hi = n;

	/* Last interval starting at or before t. */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (v[mid].start <= t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo && t < v[lo - 1].end;
}

bool busy_in(const struct node_busy *nb, uint64_t t)
{
	return busy_in_list(nb->v, nb->n, t);
}

void busy_done(struct busy_set *bs)
{
	for (size_t i = 0; i < bs->n; i++)
		free(bs->nodes[i].v);
	free(bs->nodes);
	memset(bs, 0, sizeof(*bs));
}
