/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unwind tables' on-disk cache (src/agent/unwind/cache.c) on a real table (the fixture
 * library's): what is read back is word for word what was built; each kind of damage (a row,
 * the header, a short file, another version, an empty file) is found, counted and the entry
 * removed, never returned; the directory stays within its bound, the least recently used entry
 * going first; a temporary file left by a write that died is swept; the fingerprint is the same
 * for a copy of a file and differs for other code.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "test.h"
#include "agent/unwind/cache.h"
#include "common/util.h"

static char dir[PATH_MAX];

static const char *fixture(const char *name)
{
	static char buf[PATH_MAX + 128];
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	exe[n > 0 ? n : 0] = 0;
	*strrchr(exe, '/') = 0;	/* .output/tests/unit */
	*strrchr(exe, '/') = 0;	/* .output/tests */
	snprintf(buf, sizeof(buf), "%s/fixtures/unwind/%s", exe, name);
	return buf;
}

static bool build(const char *name, struct uw_table *t)
{
	int fd = open(fixture(name), O_RDONLY | O_CLOEXEC);
	int err;

	if (!ASSERT_TRUE(fd >= 0, fixture(name)))
		return false;
	err = uw_table_build(fd, NULL, 0, 0, NULL, t);
	close(fd);
	return ASSERT_EQ(err, 0, "table of the fixture library");
}

static bool fresh_dir(void)
{
	char cmd[PATH_MAX + 16];

	if (dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			return false;
	}
	snprintf(dir, sizeof(dir), "/tmp/gpuscope-ucache-XXXXXX");
	return mkdtemp(dir) != NULL;
}

/* The one entry file of the directory (the tests store one key at a time where they ask). */
static bool entry_file(char *buf, size_t len)
{
	char cmd[PATH_MAX + 64];
	FILE *p;
	bool ok;

	snprintf(cmd, sizeof(cmd), "ls '%s'/*.uwt 2>/dev/null", dir);
	p = popen(cmd, "r");
	ok = p && fgets(buf, (int)len, p);
	if (p)
		pclose(p);
	if (ok)
		buf[strcspn(buf, "\n")] = 0;
	return ok;
}

static bool same_table(const struct uw_table *a, const struct uw_table *b)
{
	return a->nwords == b->nwords && a->nrows == b->nrows && a->npages == b->npages &&
	       a->base == b->base && a->fdes == b->fdes && a->unsupported == b->unsupported &&
	       !strcmp(a->source, b->source) && !memcmp(a->words, b->words, a->nwords * 8ULL);
}

static bool test_unwind_cache_roundtrip(void)
{
	struct uw_table t = { 0 }, got = { 0 };
	struct uw_cache_stats st;
	struct uw_cache *c;
	bool ok = true;

	CHECK(build("libnofp.so", &t) && fresh_dir());
	c = uw_cache__open(dir, 0);
	CHECK(ASSERT_TRUE(c != NULL, "open"));
	ok &= ASSERT_EQ(uw_cache__load(c, "k1", &got), -ENOENT, "a miss before any store");
	ok &= ASSERT_EQ(uw_cache__store(c, "k1", &t), 0, "store");
	ok &= ASSERT_EQ(uw_cache__load(c, "k1", &got), 0, "a hit");
	ok &= ASSERT_TRUE(got.words && same_table(&t, &got), "read back word for word");
	ok &= ASSERT_EQ(uw_cache__load(c, "k2", &got), -ENOENT, "another key misses");
	uw_cache__stats(c, &st);
	ok &= ASSERT_EQ(st.hits, 1, "hits") && ASSERT_EQ(st.misses, 2, "misses");
	ok &= ASSERT_EQ(st.stores, 1, "stores") && ASSERT_EQ(st.files, 1, "files");
	ok &= ASSERT_TRUE(st.bytes > t.nwords * 8ULL, "bytes counted");
	uw_table_done(&got);
	uw_table_done(&t);
	uw_cache__free(c);
	return ok;
}

enum damage { D_ROW, D_HEADER, D_SHORT, D_VERSION, D_EMPTY, D_MAX };

static bool damage(const char *path, enum damage d)
{
	struct stat st;
	int fd = open(path, O_RDWR);
	unsigned char b;
	off_t at;
	bool ok = fd >= 0 && !fstat(fd, &st);

	switch (d) {
	case D_ROW:	/* one bit of a row near the end: only the checksum can tell */
	case D_HEADER:	/* nrows */
	case D_VERSION:
		at = d == D_ROW ? st.st_size - 40 : d == D_HEADER ? 44 : 8;
		ok = ok && pread(fd, &b, 1, at) == 1;
		b ^= d == D_ROW ? 0x10 : 0x01;
		ok = ok && pwrite(fd, &b, 1, at) == 1;
		break;
	case D_SHORT:
		ok = ok && !ftruncate(fd, st.st_size - 8);
		break;
	default:
		ok = ok && !ftruncate(fd, 0);
	}
	if (fd >= 0)
		close(fd);
	return ok;
}

static bool test_unwind_cache_corrupt_rebuilt(void)
{
	struct uw_table t = { 0 }, got = { 0 };
	struct uw_cache_stats st;
	struct uw_cache *c;
	char path[PATH_MAX + 64];
	bool ok = true;

	CHECK(build("libnofp.so", &t) && fresh_dir());
	c = uw_cache__open(dir, 0);
	CHECK(ASSERT_TRUE(c != NULL, "open"));
	for (int d = 0; d < D_MAX; d++) {
		ok &= ASSERT_EQ(uw_cache__store(c, "k", &t), 0, "store");
		ok &= ASSERT_TRUE(entry_file(path, sizeof(path)) && damage(path, d), "damage");
		got.words = NULL;
		ok &= ASSERT_EQ(uw_cache__load(c, "k", &got), -EBADMSG, "damaged entry not trusted");
		ok &= ASSERT_TRUE(got.words == NULL, "nothing returned");
		ok &= ASSERT_TRUE(access(path, F_OK) && errno == ENOENT, "damaged entry removed");
		ok &= ASSERT_EQ(uw_cache__load(c, "k", &got), -ENOENT, "then a miss: built anew");
		if (!ok)
			fprintf(stderr, "  damage %d\n", d);
	}
	uw_cache__stats(c, &st);
	ok &= ASSERT_EQ(st.corrupt, D_MAX, "each damage counted");
	ok &= ASSERT_EQ(st.hits, 0, "never a hit");
	/* the rebuilt table stored again is good */
	ok &= ASSERT_EQ(uw_cache__store(c, "k", &t), 0, "store again");
	ok &= ASSERT_EQ(uw_cache__load(c, "k", &got), 0, "hit after the rewrite");
	ok &= ASSERT_TRUE(same_table(&t, &got), "same table");
	uw_table_done(&got);
	uw_table_done(&t);
	uw_cache__free(c);
	return ok;
}

static void set_age(const char *key, time_t age_s)
{
	char path[PATH_MAX + 64];
	struct timespec ts[2];

	snprintf(path, sizeof(path), "%s/%016llx.uwt", dir,
		 (unsigned long long)hash64(key, strlen(key), 0));
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec -= age_s;
	ts[1] = ts[0];
	utimensat(AT_FDCWD, path, ts, 0);
}

static bool test_unwind_cache_bound_lru(void)
{
	struct uw_table t = { 0 }, got = { 0 };
	struct uw_cache_stats st;
	struct uw_cache *c;
	uint64_t one;
	bool ok = true;

	CHECK(build("libnofp.so", &t) && fresh_dir());
	/* room for three entries and a half */
	c = uw_cache__open(dir, 1 << 20);
	CHECK(ASSERT_TRUE(c != NULL, "open"));
	ok &= ASSERT_EQ(uw_cache__store(c, "a", &t), 0, "store a");
	uw_cache__stats(c, &st);
	one = st.bytes;
	uw_cache__free(c);
	c = uw_cache__open(dir, one * 7 / 2);
	CHECK(ASSERT_TRUE(c != NULL, "reopen"));
	ok &= ASSERT_EQ(uw_cache__store(c, "b", &t), 0, "store b");
	ok &= ASSERT_EQ(uw_cache__store(c, "c", &t), 0, "store c");
	set_age("a", 300);
	set_age("b", 200);
	set_age("c", 100);
	/* a used now: b is the least recently used */
	ok &= ASSERT_EQ(uw_cache__load(c, "a", &got), 0, "a hit");
	uw_table_done(&got);
	ok &= ASSERT_EQ(uw_cache__store(c, "d", &t), 0, "store d past the bound");
	uw_cache__stats(c, &st);
	ok &= ASSERT_TRUE(st.bytes <= one * 7 / 2, "within the bound");
	ok &= ASSERT_EQ(st.evicted, 1, "one evicted") && ASSERT_EQ(st.files, 3, "three left");
	ok &= ASSERT_EQ(uw_cache__load(c, "b", &got), -ENOENT, "b (least recently used) evicted");
	for (const char *k = "acd"; *k; k++) {
		char key[2] = { *k, 0 };

		ok &= ASSERT_EQ(uw_cache__load(c, key, &got), 0, key);
		uw_table_done(&got);
	}
	/* a table over the whole bound is not stored */
	uw_cache__free(c);
	c = uw_cache__open(dir, one / 2);
	CHECK(ASSERT_TRUE(c != NULL, "reopen small"));
	uw_cache__stats(c, &st);
	ok &= ASSERT_TRUE(st.bytes <= one / 2, "opening evicts down to a smaller bound");
	ok &= ASSERT_EQ(uw_cache__store(c, "e", &t), -E2BIG, "a table over the bound");
	uw_table_done(&t);
	uw_cache__free(c);
	return ok;
}

static bool test_unwind_cache_tmp_swept(void)
{
	char old[PATH_MAX + 32], young[PATH_MAX + 32];
	struct timespec ts[2] = { { 0, 0 }, { 0, 0 } };
	struct uw_cache *c;
	bool ok = true;
	int fd;

	CHECK(fresh_dir());
	snprintf(old, sizeof(old), "%s/.tmp.1.1", dir);
	snprintf(young, sizeof(young), "%s/.tmp.1.2", dir);
	fd = open(old, O_CREAT | O_WRONLY, 0600);
	close(fd);
	fd = open(young, O_CREAT | O_WRONLY, 0600);
	close(fd);
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec -= 3600;
	ts[1] = ts[0];
	utimensat(AT_FDCWD, old, ts, 0);
	c = uw_cache__open(dir, 0);
	CHECK(ASSERT_TRUE(c != NULL, "open"));
	ok &= ASSERT_TRUE(access(old, F_OK) != 0, "a write that died an hour ago: swept");
	ok &= ASSERT_TRUE(access(young, F_OK) == 0, "a write going on now (another agent): kept");
	uw_cache__free(c);
	return ok;
}

static bool fingerprint(const char *path, uint64_t *ret)
{
	struct elf_info info = { 0 };
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool ok = fd >= 0 && !elf_read_info(fd, &info) &&
		  !uw_cfi_fingerprint(fd, info.segs, info.nsegs, ret);

	free(info.segs);
	if (fd >= 0)
		close(fd);
	return ok;
}

static bool test_unwind_cache_fingerprint(void)
{
	char copy[PATH_MAX + 32], cmd[2 * PATH_MAX + 64];
	uint64_t a = 0, a2 = 0, b = 0;
	bool ok = true;

	CHECK(fresh_dir() && !elf_lib_init());
	snprintf(copy, sizeof(copy), "%s/copy.so", dir);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", fixture("libnofp.so"), copy);
	CHECK(ASSERT_EQ(system(cmd), 0, "copy"));
	ok &= ASSERT_TRUE(fingerprint(fixture("libnofp.so"), &a), "fingerprint");
	ok &= ASSERT_TRUE(fingerprint(copy, &a2), "fingerprint of the copy");
	ok &= ASSERT_TRUE(fingerprint(fixture("libnofp_late.so"), &b), "fingerprint of other code");
	ok &= ASSERT_TRUE(a == a2, "a copy elsewhere (another inode, path): the same table");
	ok &= ASSERT_TRUE(a != b, "other code: another fingerprint");
	return ok;
}

int main(int argc, char **argv)
{
	static const struct test_case tc[] = {
		T(test_unwind_cache_roundtrip),	     T(test_unwind_cache_corrupt_rebuilt),
		T(test_unwind_cache_bound_lru),	     T(test_unwind_cache_tmp_swept),
		T(test_unwind_cache_fingerprint),
	};
	int rc = test_main(tc, (int)(sizeof(tc) / sizeof(tc[0])), argc, argv);
	char cmd[PATH_MAX + 16];

	if (dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		rc |= system(cmd) != 0;
	}
	return rc;
}
