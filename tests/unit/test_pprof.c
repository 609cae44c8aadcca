/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the pprof writer and the hash tables under it: encode, gunzip, decode, check. */
#include <stdlib.h>
#include <zlib.h>
#include "test.h"
#include "common/hmap.h"
#include "common/pprof.h"
#include "pprof/profile.pb-c.h"

static bool test_hmap_strtab(void)
{
	struct strtab t = { 0 };
	char buf[32];
	bool ok = true;

	for (int i = 0; i < 5000 && ok; i++) {
		snprintf(buf, sizeof(buf), "s%d", i);
		ok = ASSERT_EQ(strtab_intern(&t, buf), i, "new index");
	}
	for (int i = 0; i < 5000 && ok; i++) {
		snprintf(buf, sizeof(buf), "s%d", i);
		ok = ASSERT_EQ(strtab_intern(&t, buf), i, "same index");
	}
	ok = ok && ASSERT_EQ(t.len, 5000, "len");
	strtab_done(&t);
	return ok;
}

static bool test_hmap_u64(void)
{
	struct u64map m = { 0 };
	bool ok = true;

	for (uint64_t k = 0; k < 10000 && ok; k++)
		ok = ASSERT_TRUE(u64map_upsert(&m, k * 7919, k, NULL) != NULL, "insert");
	for (uint64_t k = 0; k < 10000 && ok; k++) {
		uint64_t *v = u64map_find(&m, k * 7919);

		ok = ASSERT_TRUE(v && *v == k, "find");
	}
	ok = ok && ASSERT_TRUE(!u64map_find(&m, 7), "absent");
	/* remove every third key (and key 0), then every key is found or absent as it should,
	 * also in runs of colliding slots (dense keys in a small table) */
	for (uint64_t k = 0; k < 10000 && ok; k += 3)
		ok = ASSERT_TRUE(u64map_remove(&m, k * 7919), "remove");
	ok = ok && ASSERT_TRUE(!u64map_remove(&m, 3 * 7919), "removed twice") &&
	     ASSERT_EQ(m.len, 10000 - 3334, "len after removes");
	for (uint64_t k = 0; k < 10000 && ok; k++) {
		uint64_t *v = u64map_find(&m, k * 7919);

		ok = k % 3 ? ASSERT_TRUE(v && *v == k, "kept") : ASSERT_TRUE(!v, "removed");
	}
	u64map_done(&m);
	for (uint64_t k = 1; k <= 40 && ok; k++)
		ok = ASSERT_TRUE(u64map_upsert(&m, k, k, NULL) != NULL, "insert small");
	for (uint64_t k = 1; k <= 40 && ok; k += 2)
		ok = ASSERT_TRUE(u64map_remove(&m, k), "remove small");
	for (uint64_t k = 1; k <= 40 && ok; k++) {
		uint64_t *v = u64map_find(&m, k);

		ok = k % 2 ? ASSERT_TRUE(!v, "small removed") : ASSERT_TRUE(v && *v == k, "small kept");
	}
	u64map_done(&m);
	return ok;
}

static Perftools__Profiles__Profile *decode(const uint8_t *gz, size_t len)
{
	uLongf out_len = 1 << 20;
	uint8_t *out = malloc(out_len);
	z_stream z = { 0 };
	Perftools__Profiles__Profile *p = NULL;

	inflateInit2(&z, 15 + 16);
	z.next_in = (Bytef *)gz;
	z.avail_in = len;
	z.next_out = out;
	z.avail_out = out_len;
	if (inflate(&z, Z_FINISH) == Z_STREAM_END)
		p = perftools__profiles__profile__unpack(NULL, z.total_out, out);
	inflateEnd(&z);
	free(out);
	return p;
}

static bool test_pprof_roundtrip(void)
{
	struct pprof_value_type types[] = { { "samples", "count" }, { "cpu", "nanoseconds" } };
	struct pprof *p = pprof__new(types, 2, (struct pprof_value_type){ "cpu", "nanoseconds" },
				     10101010, 1000, 5000);
	struct location leaf = { .function = "leaf", .module = "/bin/x", .build_id = "abcd", .address = 0x1234 };
	struct location root = { .function = "main", .module = "/bin/x", .build_id = "abcd", .address = 0x1000 };
	struct label labels[] = { { "comm", "x" } };
	struct pprof_num_label nums[] = { { "timestamp", 42, "nanoseconds" } };
	Perftools__Profiles__Profile *d = NULL;
	uint64_t locs[2];
	int64_t vals[2] = { 1, 10101010 };
	uint8_t *buf = NULL;
	size_t len;
	bool ok;

	locs[0] = pprof__location(p, &leaf);
	locs[1] = pprof__location(p, &root);
	ok = ASSERT_EQ(pprof__location(p, &leaf), locs[0], "dedup location");
	for (int i = 0; i < 3 && ok; i++)
		ok = ASSERT_EQ(pprof__sample(p, locs, 2, vals, labels, 1, nums, 1), 0, "sample");
	ok = ok && ASSERT_EQ(pprof__encode_gz(p, &buf, &len), 0, "encode");
	if (ok)
		d = decode(buf, len);
	ok = ok && ASSERT_TRUE(d != NULL, "decodes");
	ok = ok && ASSERT_EQ(d->n_sample, 3, "samples") && ASSERT_EQ(d->n_location, 2, "locations") &&
	     ASSERT_EQ(d->n_function, 2, "functions") && ASSERT_EQ(d->n_mapping, 1, "mappings");
	ok = ok && ASSERT_STREQ(d->string_table[0], "", "string 0 empty");
	ok = ok && ASSERT_STREQ(d->string_table[d->function[d->location[d->sample[0]->location_id[0] - 1]->line[0]->function_id - 1]->name], "leaf", "leaf name");
	ok = ok && ASSERT_EQ(d->sample[2]->label[1]->num, 42, "num label") &&
	     ASSERT_STREQ(d->string_table[d->mapping[0]->build_id], "abcd", "build id") &&
	     ASSERT_EQ(d->period, 10101010, "period");
	if (d)
		perftools__profiles__profile__free_unpacked(d, NULL);
	free(buf);
	pprof__free(p);
	return ok;
}

TEST_MAIN(T(test_hmap_strtab), T(test_hmap_u64), T(test_pprof_roundtrip))
