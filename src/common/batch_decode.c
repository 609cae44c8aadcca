/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server's side of the batch wire format (batch.h): a pre-scan that bounds what unpacking
 * an upload will allocate before protobuf-c allocates anything, the validating decoder, and a
 * decoded batch's time bounds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"

/* ---- wire pre-scan (server side) --------------------------------------------------------- */

/*
 * What unpacking costs, per the protobuf-c implementation: every field occurrence takes a
 * scan slot while its message is parsed; a submessage is a malloc'ed struct plus a pointer in
 * its parent's array; a repeated scalar is an element in a malloc'ed array; an unknown field
 * is kept (a descriptor plus a copy of its bytes). MALLOC_OVERHEAD covers the allocator.
 */
#define SCAN_SLOT	 32
#define MALLOC_OVERHEAD	 16
#define UNKNOWN_FIELD	 (24 + MALLOC_OVERHEAD)

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* Reads a varint at *p (< end). 1 and advances *p; 0 if incomplete; -1 if longer than 10. */
static int scan_varint(const uint8_t **p, const uint8_t *end, uint64_t *ret)
{
	uint64_t v = 0;

	for (int i = 0; i < 10; i++) {
		if (*p + i >= end)
			return 0;
		v |= (uint64_t)((*p)[i] & 0x7f) << (7 * i);
		if (!((*p)[i] & 0x80)) {
			*p += i + 1;
			*ret = v;
			return 1;
		}
	}
	return -1;
}

/* Repeated scalar fields of the messages inside a Batch: element size, 0 when not repeated. */
static unsigned repeated_elem_size(unsigned msg, unsigned field, bool *ret_fixed64)
{
	*ret_fixed64 = false;
	switch (msg) {
	case 7:	/* Stack.locations */
	case 8:	/* LabelSet.pairs */
		return field == 1 ? 4 : 0;
	case 9:	/* SampleGroup: time_delta_ns, stack, value */
		return field == 3 || field == 5 ? 8 : field == 4 ? 4 : 0;
	case 10: /* MetricSeries: time_delta_ns, value (double) */
		*ret_fixed64 = field == 4;
		return field == 3 || field == 4 ? 8 : 0;
	case 11: /* Interval.attrs */
		return field == 5 ? 4 : 0;
	}
	return 0;
}

/* The highest field number each message of batch.proto defines. */
static unsigned last_field(unsigned msg)
{
	static const unsigned last[12] = { [6] = 8, [7] = 1, [8] = 1, [9] = 5, [10] = 4, [11] = 5 };

	return msg < 12 ? last[msg] : 0;
}

static size_t msg_struct_size(unsigned field)
{
	switch (field) {
	case 6: return sizeof(Gpuscope__V1__Location);
	case 7: return sizeof(Gpuscope__V1__Stack);
	case 8: return sizeof(Gpuscope__V1__LabelSet);
	case 9: return sizeof(Gpuscope__V1__SampleGroup);
	case 10: return sizeof(Gpuscope__V1__MetricSeries);
	case 11: return sizeof(Gpuscope__V1__Interval);
	}
	return 0;
}

#define SCAN_FAIL(rc, ...)                                                                         \
	do {                                                                                       \
		snprintf(s->why, sizeof(s->why), __VA_ARGS__);                                     \
		return (rc);                                                                       \
	} while (0)

/* One submessage of Batch field `msg` (locations, stacks, ...): its repeated elements. */
static int scan_message(struct batch_scan *s, unsigned msg, const uint8_t *p, const uint8_t *end)
{
	uint64_t elems[16] = { 0 };

	s->est += 8 + msg_struct_size(msg) + MALLOC_OVERHEAD;
	while (p < end) {
		uint64_t tag, v, n = 0;
		unsigned field;
		bool fixed64;
		unsigned esz;

		if (scan_varint(&p, end, &tag) != 1)
			SCAN_FAIL(-EINVAL, "malformed field in message %u", msg);
		field = (unsigned)(tag >> 3);
		s->est += SCAN_SLOT;
		esz = field < 16 ? repeated_elem_size(msg, field, &fixed64) : 0;
		switch (tag & 7) {
		case WT_VARINT:
			if (scan_varint(&p, end, &v) != 1)
				SCAN_FAIL(-EINVAL, "malformed varint in message %u", msg);
			n = 1;
			break;
		case WT_I64:
		case WT_I32: {
			size_t w = (tag & 7) == WT_I64 ? 8 : 4;

			if ((size_t)(end - p) < w)
				SCAN_FAIL(-EINVAL, "truncated field in message %u", msg);
			p += w;
			n = 1;
			break;
		}
		case WT_LEN:
			if (scan_varint(&p, end, &v) != 1 || v > (uint64_t)(end - p))
				SCAN_FAIL(-EINVAL, "truncated field in message %u", msg);
			if (!esz) {
				s->est += UNKNOWN_FIELD + v;	/* unknown (or a string we lack) */
			} else if (fixed64) {
				n = v / 8;
			} else {
				for (uint64_t i = 0; i < v; i++)
					n += !(p[i] & 0x80);
			}
			p += v;
			break;
		default:
			SCAN_FAIL(-EINVAL, "unsupported wire type %u in message %u",
				  (unsigned)(tag & 7), msg);
		}
		if (esz)
			elems[field] += n;
		else if ((tag & 7) != WT_LEN && (!field || field > last_field(msg)))
			s->est += UNKNOWN_FIELD + 8;
	}
	for (unsigned f = 0; f < 16; f++)
		if (elems[f])
			s->est += elems[f] * 8 + MALLOC_OVERHEAD;	/* elements are <= 8 bytes */
	switch (msg) {
	case 7:
		if (elems[1] > BATCH_MAX_DEPTH)
			SCAN_FAIL(-E2BIG, "a stack deeper than %d frames", BATCH_MAX_DEPTH);
		break;
	case 8:
		if (elems[1] > 2 * BATCH_MAX_LABELS)
			SCAN_FAIL(-E2BIG, "a label set with more than %d labels", BATCH_MAX_LABELS);
		break;
	case 9:
		s->records += elems[4] > elems[3] ? elems[4] : elems[3];
		break;
	case 10:
		s->records += elems[3];
		break;
	case 11:
		s->records++;
		if (elems[5] > 2 * BATCH_MAX_LABELS)
			SCAN_FAIL(-E2BIG, "an interval with more than %d attrs", BATCH_MAX_LABELS);
		break;
	}
	return 0;
}

void batch_scan_init(struct batch_scan *s, uint64_t budget)
{
	memset(s, 0, sizeof(*s));
	s->budget = budget;
	s->est = sizeof(Gpuscope__V1__Batch) + MALLOC_OVERHEAD;
}

int batch_scan(struct batch_scan *s, const uint8_t *buf, size_t len)
{
	static const struct {
		unsigned field;
		uint64_t max;
		const char *what;
	} limits[] = {
		{ 2, BATCH_MAX_STRINGS, "strings" },	  { 6, BATCH_MAX_LOCATIONS, "locations" },
		{ 7, BATCH_MAX_STACKS, "stacks" },	  { 8, BATCH_MAX_LABEL_SETS, "label sets" },
		{ 11, BATCH_MAX_RECORDS, "intervals" },
	};
	const uint8_t *end = buf + len;

	while (s->off < len) {
		const uint8_t *p = buf + s->off, *payload;
		uint64_t tag, v = 0;
		unsigned field;
		int r;

		r = scan_varint(&p, end, &tag);
		if (r == 0)
			return 0;	/* the rest comes with the next chunk */
		if (r < 0)
			SCAN_FAIL(-EINVAL, "malformed field tag at byte %zu", s->off);
		field = (unsigned)(tag >> 3);
		switch (tag & 7) {
		case WT_VARINT:
			r = scan_varint(&p, end, &v);
			if (r <= 0) {
				if (r < 0)
					SCAN_FAIL(-EINVAL, "malformed varint at byte %zu", s->off);
				return 0;
			}
			break;
		case WT_I64:
		case WT_I32: {
			size_t w = (tag & 7) == WT_I64 ? 8 : 4;

			if ((size_t)(end - p) < w)
				return 0;
			p += w;
			break;
		}
		case WT_LEN:
			r = scan_varint(&p, end, &v);
			if (r < 0)
				SCAN_FAIL(-EINVAL, "malformed length at byte %zu", s->off);
			if (r == 0 || v > (uint64_t)(end - p))
				return 0;
			payload = p;
			p += v;
			if (field == 2)
				s->est += 8 + v + 1 + MALLOC_OVERHEAD;
			else if (field >= 6 && field <= 11)
				r = scan_message(s, field, payload, p);
			else
				s->est += UNKNOWN_FIELD + v;
			if (r < 0)
				return r;
			break;
		default:
			SCAN_FAIL(-EINVAL, "unsupported wire type %u at byte %zu",
				  (unsigned)(tag & 7), s->off);
		}
		s->est += SCAN_SLOT;
		if (field < ARRAY_SIZE(s->count))
			s->count[field]++;
		else
			s->est += UNKNOWN_FIELD;
		for (size_t i = 0; i < ARRAY_SIZE(limits); i++)
			if (field == limits[i].field && s->count[field] > limits[i].max)
				SCAN_FAIL(-E2BIG, "more than %llu %s in one batch",
					  (unsigned long long)limits[i].max, limits[i].what);
		if (s->count[9] + s->count[10] > BATCH_MAX_GROUPS)
			SCAN_FAIL(-E2BIG, "more than %u sample groups and metric series in one batch",
				  BATCH_MAX_GROUPS);
		if (s->records > BATCH_MAX_RECORDS)
			SCAN_FAIL(-E2BIG, "more than %u records in one batch", BATCH_MAX_RECORDS);
		if (s->est > s->budget)
			SCAN_FAIL(-E2BIG,
				  "decoding would take more than %llu MiB (%d x the body + %d MiB); "
				  "send smaller batches",
				  (unsigned long long)(s->budget >> 20), BATCH_DECODE_RATIO,
				  BATCH_DECODE_BASE >> 20);
		s->off = (size_t)(p - buf);
	}
	return 0;
}

/*
 * What the scan adds for one message of Batch field msg (descriptor d) as protobuf-c packs it,
 * less its repeated elements (8 bytes each, the caller's): the top-level slot, the struct and
 * its pointer, and for each field it defines, present or not, a slot (plus what an unknown
 * field keeps where last_field() does not know it) and a repeated field's array. UINT64_MAX
 * for a field whose cost is not a function of the counts (bytes, or repeated other than
 * `repeated` packed scalars the scan knows), or more repeated fields than the counts cover.
 */
static uint64_t message_bound(unsigned msg, const ProtobufCMessageDescriptor *d, unsigned nrep)
{
	uint64_t est = SCAN_SLOT + 8 + msg_struct_size(msg) + MALLOC_OVERHEAD;
	unsigned rep = 0;

	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		bool len = f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_BYTES ||
			   f->type == PROTOBUF_C_TYPE_MESSAGE;
		bool fixed64;

		est += SCAN_SLOT;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			if (len || !(f->flags & PROTOBUF_C_FIELD_FLAG_PACKED) || f->id >= 16 ||
			    !repeated_elem_size(msg, f->id, &fixed64))
				return UINT64_MAX;
			est += MALLOC_OVERHEAD;
			rep++;
		} else if (len) {
			return UINT64_MAX;
		} else if (!f->id || f->id > last_field(msg)) {
			est += UNKNOWN_FIELD + 8;
		}
	}
	return rep <= nrep ? est : UINT64_MAX;
}

uint64_t batch_scan_bound(const struct batch_counts *c)
{
	static const struct {
		unsigned field, nrep;	/* Batch field, repeated fields the counts cover */
		const ProtobufCMessageDescriptor *d;
	} msgs[] = {
		{ 6, 0, &gpuscope__v1__location__descriptor },
		{ 7, 1, &gpuscope__v1__stack__descriptor },
		{ 8, 1, &gpuscope__v1__label_set__descriptor },
		{ 9, 3, &gpuscope__v1__sample_group__descriptor },
		{ 10, 2, &gpuscope__v1__metric_series__descriptor },
		{ 11, 1, &gpuscope__v1__interval__descriptor },
	};
	const ProtobufCMessageDescriptor *bd = &gpuscope__v1__batch__descriptor;
	const uint64_t n[12] = { [6] = c->locations, [7] = c->stacks, [8] = c->label_sets,
				 [9] = c->groups,    [10] = c->series, [11] = c->intervals };
	uint64_t est = sizeof(Gpuscope__V1__Batch) + MALLOC_OVERHEAD;

	_Static_assert(ARRAY_SIZE(n) == ARRAY_SIZE(((struct batch_scan *)0)->count), "count[]");
	for (unsigned i = 0; i < bd->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &bd->fields[i];

		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			if (f->id != 2 && (f->id < 6 || f->id > 11))
				return UINT64_MAX;
		} else if (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_BYTES ||
			   f->type == PROTOBUF_C_TYPE_MESSAGE) {
			return UINT64_MAX;
		} else {
			est += SCAN_SLOT + (f->id < ARRAY_SIZE(n) ? 0 : UNKNOWN_FIELD);	/* s->count[] */
		}
	}
	est += c->strings * (SCAN_SLOT + 8 + 1 + MALLOC_OVERHEAD) + c->string_bytes;
	for (size_t i = 0; i < ARRAY_SIZE(msgs); i++) {
		uint64_t m = message_bound(msgs[i].field, msgs[i].d, msgs[i].nrep);

		if (m == UINT64_MAX)
			return UINT64_MAX;
		est += n[msgs[i].field] * m;
	}
	return est + 8 * (c->frames + c->label_entries + 3 * c->samples + 2 * c->points +
			  c->attr_entries);
}

/* ---- decoding (server side) ------------------------------------------------------------- */

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		snprintf(err, errlen, __VA_ARGS__);                                                \
		return -EINVAL;                                                                    \
	} while (0)

static int check_pairs(const Gpuscope__V1__Batch *m, const uint32_t *p, size_t n,
		       const char *what, size_t idx, size_t max_bytes, uint64_t *budget,
		       char *err, size_t errlen)
{
	uint64_t bytes = 0;

	if (n % 2)
		FAIL("%s %zu: odd number of name/value entries", what, idx);
	if (n / 2 > BATCH_MAX_LABELS)
		FAIL("%s %zu: more than %d labels", what, idx, BATCH_MAX_LABELS);
	for (size_t k = 0; k < n; k++)
		if (p[k] >= m->n_strings)
			FAIL("%s %zu: string index %u out of range", what, idx, p[k]);
	for (size_t k = 0; k < n; k += 2)
		if (!*m->strings[p[k]])
			FAIL("%s %zu: empty label name", what, idx);
	/* What the store will write out and keep in memory once indexes resolve. */
	for (size_t k = 0; k < n; k++)
		bytes += strlen(m->strings[p[k]]) + 1;
	if (bytes > max_bytes) {
		errno = E2BIG;
		FAIL("%s %zu: %llu bytes of names and values, more than %zu", what, idx,
		     (unsigned long long)bytes, max_bytes);
	}
	if (bytes > *budget) {
		errno = E2BIG;
		FAIL("labels resolve to more bytes than the decoding budget; send smaller batches");
	}
	*budget -= bytes;
	return 0;
}

/* errno is EINVAL on entry; a limit sets E2BIG. budget: bytes labels may resolve to. */
static int validate(const Gpuscope__V1__Batch *m, uint64_t *budget, char *err, size_t errlen)
{
	size_t nrec = 0;

	if (m->n_strings > BATCH_MAX_STRINGS)
		FAIL("more than %u strings", BATCH_MAX_STRINGS);
	for (size_t i = 0; i < m->n_strings; i++)
		if (strlen(m->strings[i]) > BATCH_MAX_STRLEN)
			FAIL("string %zu longer than %d bytes", i, BATCH_MAX_STRLEN);
	if (m->node >= m->n_strings || !*m->strings[m->node])
		FAIL("missing node name");
	for (size_t i = 0; i < m->n_locations; i++) {
		const Gpuscope__V1__Location *l = m->locations[i];

		if (l->function >= m->n_strings || l->module >= m->n_strings ||
		    l->build_id >= m->n_strings || l->file >= m->n_strings)
			FAIL("location %zu: string index out of range", i);
	}
	for (size_t i = 0; i < m->n_stacks; i++) {
		const Gpuscope__V1__Stack *s = m->stacks[i];

		if (s->n_locations > BATCH_MAX_DEPTH)
			FAIL("stack %zu: deeper than %d frames", i, BATCH_MAX_DEPTH);
		for (size_t k = 0; k < s->n_locations; k++)
			if (s->locations[k] >= m->n_locations)
				FAIL("stack %zu: location %u out of range", i, s->locations[k]);
	}
	for (size_t i = 0; i < m->n_label_sets; i++) {
		const Gpuscope__V1__LabelSet *ls = m->label_sets[i];

		if (check_pairs(m, ls->pairs, ls->n_pairs, "label set", i, BATCH_MAX_LABEL_BYTES,
				budget, err, errlen))
			return -EINVAL;
	}
	for (size_t i = 0; i < m->n_samples; i++) {
		const Gpuscope__V1__SampleGroup *g = m->samples[i];
		uint64_t t = 0;

		if (g->label_set >= m->n_label_sets)
			FAIL("sample group %zu: label set %u out of range", i, g->label_set);
		if ((unsigned)g->kind >= SAMPLE_KIND_MAX)
			FAIL("sample group %zu: unknown kind %d", i, (int)g->kind);
		if (g->n_stack != g->n_time_delta_ns || (g->n_value && g->n_value != g->n_stack))
			FAIL("sample group %zu: column lengths differ", i);
		for (size_t k = 0; k < g->n_stack; k++) {
			if (g->stack[k] >= m->n_stacks)
				FAIL("sample group %zu: stack %u out of range", i, g->stack[k]);
			t += (uint64_t)g->time_delta_ns[k];
			if ((int64_t)t < 0)
				FAIL("sample group %zu: time out of range", i);
		}
		nrec += g->n_stack;
	}
	for (size_t i = 0; i < m->n_series; i++) {
		const Gpuscope__V1__MetricSeries *s = m->series[i];
		uint64_t t = 0;

		if (s->name >= m->n_strings || !*m->strings[s->name])
			FAIL("series %zu: bad name", i);
		if (s->label_set >= m->n_label_sets)
			FAIL("series %zu: label set %u out of range", i, s->label_set);
		if (s->n_value != s->n_time_delta_ns)
			FAIL("series %zu: column lengths differ", i);
		for (size_t k = 0; k < s->n_value; k++) {
			t += (uint64_t)s->time_delta_ns[k];
			if ((int64_t)t < 0)
				FAIL("series %zu: time out of range", i);
		}
		nrec += s->n_value;
	}
	for (size_t i = 0; i < m->n_intervals; i++) {
		const Gpuscope__V1__Interval *iv = m->intervals[i];

		if (iv->kind >= m->n_strings || !*m->strings[iv->kind])
			FAIL("interval %zu: bad kind", i);
		if (iv->label_set >= m->n_label_sets)
			FAIL("interval %zu: label set %u out of range", i, iv->label_set);
		if (iv->end_ns < iv->start_ns || (int64_t)iv->end_ns < 0)
			FAIL("interval %zu: end before start", i);
		if (iv->stack > m->n_stacks)
			FAIL("interval %zu: stack %u out of range", i, iv->stack);
		if (check_pairs(m, iv->attrs, iv->n_attrs, "interval", i, BATCH_MAX_ATTR_BYTES,
				budget, err, errlen))
			return -EINVAL;
	}
	nrec += m->n_intervals;
	if (nrec > BATCH_MAX_RECORDS)
		FAIL("more than %u records", BATCH_MAX_RECORDS);
	return 0;
}

struct Gpuscope__V1__Batch *batch_decode_scanned(struct batch_scan *s, const uint8_t *buf,
						 size_t len, char *err, size_t errlen)
{
	Gpuscope__V1__Batch *m;
	uint64_t left = s->budget > s->est ? s->budget - s->est : 0;

	if (s->off != len) {
		snprintf(err, errlen, "malformed protobuf Batch (%zu bytes): %s", len,
			 s->why[0] ? s->why : "last field cut short");
		errno = EINVAL;
		return NULL;
	}
	m = gpuscope__v1__batch__unpack(NULL, len, buf);
	if (!m) {
		snprintf(err, errlen, "malformed protobuf Batch (%zu bytes)", len);
		errno = EINVAL;
		return NULL;
	}
	if (m->version < BATCH_VERSION_MIN || m->version > BATCH_VERSION) {
		snprintf(err, errlen, "unsupported batch version %u (this server reads %d to %d)",
			 m->version, BATCH_VERSION_MIN, BATCH_VERSION);
		gpuscope__v1__batch__free_unpacked(m, NULL);
		errno = EPROTONOSUPPORT;
		return NULL;
	}
	errno = EINVAL;
	if (validate(m, &left, err, errlen)) {
		gpuscope__v1__batch__free_unpacked(m, NULL);
		return NULL;
	}
	return m;
}

struct Gpuscope__V1__Batch *batch_decode(const uint8_t *buf, size_t len, char *err,
					 size_t errlen)
{
	struct batch_scan s;
	int rc;

	batch_scan_init(&s, BATCH_DECODE_BASE + (uint64_t)BATCH_DECODE_RATIO * len);
	rc = batch_scan(&s, buf, len);
	if (rc) {
		snprintf(err, errlen, "%s", s.why);
		errno = -rc;
		return NULL;
	}
	return batch_decode_scanned(&s, buf, len, err, errlen);
}

void batch_decode_free(struct Gpuscope__V1__Batch *m)
{
	if (m)
		gpuscope__v1__batch__free_unpacked(m, NULL);
}

/* Widens [*lo, *hi] by the times of a column of n deltas (from 0). */
static void delta_bounds(const int64_t *d, size_t n, uint64_t *lo, uint64_t *hi)
{
	uint64_t t = 0;

	for (size_t k = 0; k < n; k++) {
		t += (uint64_t)d[k];
		*lo = t < *lo ? t : *lo;
		*hi = t > *hi ? t : *hi;
	}
}

void batch_time_bounds(const struct Gpuscope__V1__Batch *m, uint64_t *ret_min, uint64_t *ret_max)
{
	uint64_t lo = UINT64_MAX, hi = 0;

	for (size_t i = 0; i < m->n_samples; i++)
		delta_bounds(m->samples[i]->time_delta_ns, m->samples[i]->n_time_delta_ns, &lo, &hi);
	for (size_t i = 0; i < m->n_series; i++)
		delta_bounds(m->series[i]->time_delta_ns, m->series[i]->n_time_delta_ns, &lo, &hi);
	for (size_t i = 0; i < m->n_intervals; i++) {
		lo = m->intervals[i]->start_ns < lo ? m->intervals[i]->start_ns : lo;
		hi = m->intervals[i]->end_ns > hi ? m->intervals[i]->end_ns : hi;
	}
	*ret_min = lo;
	*ret_max = hi;
}
