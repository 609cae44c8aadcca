/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading ClickHouse's RowBinary answers (fixed-width little-endian numbers, strings as a
 * varint length and bytes) and writing SQL string literals. Writers are inline in ch.h.
 */
#include "server/store/clickhouse/ch.h"

static const uint8_t *take(struct rbr *r, size_t n)
{
	const uint8_t *p = r->p;

	if (r->bad || (size_t)(r->end - r->p) < n) {
		r->bad = true;
		return NULL;
	}
	r->p += n;
	return p;
}

uint8_t rbr_u8(struct rbr *r)
{
	const uint8_t *p = take(r, 1);

	return p ? *p : 0;
}

uint32_t rbr_u32(struct rbr *r)
{
	const uint8_t *p = take(r, 4);
	uint32_t v = 0;

	if (p)
		memcpy(&v, p, 4);
	return v;
}

uint64_t rbr_u64(struct rbr *r)
{
	const uint8_t *p = take(r, 8);
	uint64_t v = 0;

	if (p)
		memcpy(&v, p, 8);
	return v;
}

double rbr_f64(struct rbr *r)
{
	const uint8_t *p = take(r, 8);
	double v = 0;

	if (p)
		memcpy(&v, p, 8);
	return v;
}

uint64_t rbr_uvarint_count(struct rbr *r)
{
	struct rd v = { r->p, r->end, r->bad };
	uint64_t n = rd_uvarint(&v);

	r->p = v.p;
	r->bad = v.bad;
	/* Every element takes a byte at least: a count beyond the answer is corrupt. */
	if (n > (uint64_t)(r->end - r->p)) {
		r->bad = true;
		return 0;
	}
	return n;
}

const char *rbr_str(struct rbr *r, size_t *ret_len)
{
	struct rd v = { r->p, r->end, r->bad };
	uint64_t n = rd_uvarint(&v);
	const uint8_t *p;

	r->p = v.p;
	r->bad = v.bad;
	p = n <= (uint64_t)(r->end - r->p) ? take(r, (size_t)n) : (r->bad = true, NULL);
	*ret_len = p ? (size_t)n : 0;
	return p ? (const char *)p : "";
}

size_t rbr_str_to(struct rbr *r, struct buf *b)
{
	size_t off = b->len, n;
	const char *s = rbr_str(r, &n);

	buf_put(b, s, n);
	buf_put(b, "", 1);
	return off;
}

void sql_str(struct buf *b, const char *s)
{
	buf_put(b, "'", 1);
	for (; *s; s++) {
		if (*s == '\'' || *s == '\\')
			buf_put(b, "\\", 1);
		buf_put(b, s, 1);
	}
	buf_put(b, "'", 1);
}
