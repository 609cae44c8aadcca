/* SPDX-License-Identifier: Apache-2.0 */
/* Batches sized to the server's advertised limits before sending (fit.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "agent/push/fit.h"
#include "common/batch.h"

void ingest_limits_default(struct ingest_limits *l)
{
	*l = (struct ingest_limits){ INGEST_MAX_BODY_DEFAULT, BATCH_DECODE_BASE, BATCH_DECODE_RATIO,
				     false };
}

bool ingest_limits_parse(struct ingest_limits *l, const char *v)
{
	struct ingest_limits n = *l;
	bool body = false;

	while (v && *v) {
		const char *eq = strchr(v, '='), *end = strchr(v, ',');
		unsigned long long x;
		char *num_end;

		while (*v == ' ')
			v++;
		eq = strchr(v, '=');
		if (!eq || (end && eq > end))
			break;
		errno = 0;
		x = strtoull(eq + 1, &num_end, 10);
		if (!errno && num_end > eq + 1) {
			if (!strncmp(v, "max-body=", 9) && x >= 1024) {
				n.max_body = x;
				body = true;
			} else if (!strncmp(v, "decode-base=", 12)) {
				n.decode_base = x;
			} else if (!strncmp(v, "decode-ratio=", 13) && x) {
				n.decode_ratio = x;
			}
		}
		v = end ? end + 1 : NULL;
	}
	if (!body)
		return false;
	n.known = true;
	*l = n;
	return true;
}

bool batch_fits(const struct ingest_limits *l, const uint8_t *raw, size_t raw_len,
		size_t body_len)
{
	struct batch_scan s;
	struct Gpuscope__V1__Batch *m;
	char why[256];

	if (raw_len > l->max_body || body_len > l->max_body)
		return false;
	batch_scan_init(&s, l->decode_base + l->decode_ratio * (uint64_t)body_len);
	if (batch_scan(&s, raw, raw_len))
		return false;
	m = batch_decode_scanned(&s, raw, raw_len, why, sizeof(why));
	if (!m)
		return false;
	batch_decode_free(m);
	return true;
}

bool batch_fits_bound(const struct ingest_limits *l, const struct batch_counts *c,
		      size_t raw_len, size_t body_len)
{
	uint64_t budget, est;

	if (raw_len > l->max_body || body_len > l->max_body || !c->checked)
		return false;
	/* batch_scan()'s counts, and what the batch's own checks leave to validate() */
	if (c->strings > BATCH_MAX_STRINGS || c->locations > BATCH_MAX_LOCATIONS ||
	    c->stacks > BATCH_MAX_STACKS || c->label_sets > BATCH_MAX_LABEL_SETS ||
	    c->groups + c->series > BATCH_MAX_GROUPS ||
	    c->samples + c->points + c->intervals > BATCH_MAX_RECORDS ||
	    c->label_set_bytes_max > BATCH_MAX_LABEL_BYTES ||
	    c->attr_bytes_max > BATCH_MAX_ATTR_BYTES)
		return false;
	if (l->decode_ratio > (UINT64_MAX - l->decode_base) / ((uint64_t)body_len + 1))
		return false;
	budget = l->decode_base + l->decode_ratio * (uint64_t)body_len;
	/* the scan's estimate, then the label bytes validate() takes from what it leaves */
	est = batch_scan_bound(c);
	return est <= budget && c->label_bytes <= budget - est;
}
