/* SPDX-License-Identifier: Apache-2.0 */
/* The group value of a label set for store_query.group_by, shared by every backend (store.h). */
#include <errno.h>
#include <string.h>
#include "server/codec.h"
#include "server/store/store.h"

void store_group_name(const char *const *pairs, size_t n, const char *group_by, struct buf *b)
{
	b->len = 0;
	if (!strcmp(group_by, "*")) {
		for (size_t i = 0; i < n; i++)
			buf_printf(b, "%s%s=%s", i ? STORE_GROUP_SEP : "", pairs[2 * i],
				   pairs[2 * i + 1]);
	} else {
		const char *p = group_by;

		for (int k = 0; *p; k++) {
			size_t len = strcspn(p, ",");

			if (k)
				buf_puts(b, STORE_GROUP_SEP);
			for (size_t i = 0; i < n; i++)
				if (strlen(pairs[2 * i]) == len && !strncmp(pairs[2 * i], p, len))
					buf_puts(b, pairs[2 * i + 1]);
			p += len + (p[len] == ',');
		}
	}
	buf_put(b, "", 1);	/* NUL */
}

int store_group_index(struct strtab *groups, const char *const *pairs, size_t n,
		      const char *group_by, struct buf *tmp, uint32_t *ret)
{
	int64_t g;

	store_group_name(pairs, n, group_by, tmp);
	g = tmp->oom ? -ENOMEM : strtab_intern(groups, (const char *)tmp->p);
	if (g < 0)
		return (int)g;
	if (g >= UINT32_MAX - 1)
		return -EOVERFLOW;
	*ret = (uint32_t)g + 1;
	return 0;
}
