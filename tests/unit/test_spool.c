/* SPDX-License-Identifier: Apache-2.0 */
/* Spool: FIFO order, byte bound with oldest-first drops counted, crash-safe reopen, memory mode. */
#include <dirent.h>
#include <errno.h>
#include <sys/mount.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "agent/push/spool.h"
#include "test.h"

static char *tmpdir(void)
{
	char *d = strdup("/tmp/gpuscope-spool-XXXXXX");

	return d && mkdtemp(d) ? d : NULL;
}

static void rmrf(const char *dir)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "  cannot remove %s\n", dir);
}

static size_t count_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0;

	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static bool put_n(struct spool *s, int first, int n, size_t len)
{
	uint8_t buf[4096];

	for (int i = first; i < first + n; i++) {
		memset(buf, i, len);
		if (!ASSERT_EQ(spool__put(s, buf, len, COMPRESS_ZSTD, i), 0, "put"))
			return false;
	}
	return true;
}

/* Pops everything, checking that batches come back oldest first with their sample counts. */
static bool expect_fifo(struct spool *s, int first, int n, size_t len)
{
	for (int i = first; i < first + n; i++) {
		uint8_t *data;
		size_t got;
		enum compression enc;
		uint64_t ns;

		if (!ASSERT_EQ(spool__peek(s, &data, &got, &enc, &ns), 0, "peek"))
			return false;
		bool ok = ASSERT_EQ(got, len, "length") && ASSERT_EQ(ns, i, "order (nsamples tag)") &&
			  ASSERT_EQ(data[0], (uint8_t)i, "content") && ASSERT_EQ(enc, COMPRESS_ZSTD, "enc");
		free(data);
		if (!ok)
			return false;
		spool__pop(s);
	}
	uint8_t *d;
	size_t l;
	enum compression e;
	uint64_t ns;
	return ASSERT_EQ(spool__peek(s, &d, &l, &e, &ns), -ENOENT, "empty at the end");
}

static bool test_spool_disk_fifo_and_reopen(void)
{
	char *dir = tmpdir();
	struct spool *s = NULL;
	struct spool_stats st;
	bool ok = false;

	if (!ASSERT_TRUE(dir, "mkdtemp"))
		return false;
	s = spool__open(dir, 1 << 20);
	if (!ASSERT_TRUE(s, "open") || !put_n(s, 1, 5, 100))
		goto out;
	if (!ASSERT_EQ(count_files(dir), 5, "one file per batch"))
		goto out;
	spool__free(s);
	/* A crash mid-write leaves a temporary file: it must not be delivered. */
	char tmp[600];
	snprintf(tmp, sizeof(tmp), "%s/.tmp-00000000000000ff-9.zst", dir);
	FILE *f = fopen(tmp, "w");
	if (f) {
		fputs("half", f);
		fclose(f);
	}
	s = spool__open(dir, 1 << 20);
	if (!ASSERT_TRUE(s, "reopen"))
		goto out;
	spool__stats(s, &st);
	if (!ASSERT_EQ(st.files, 5, "files after reopen") || !ASSERT_EQ(st.bytes, 500, "bytes") ||
	    !ASSERT_TRUE(access(tmp, F_OK) != 0, "temporary leftover removed"))
		goto out;
	/* New batches go after the old ones. */
	if (!put_n(s, 6, 2, 100) || !expect_fifo(s, 1, 7, 100))
		goto out;
	ok = ASSERT_EQ(count_files(dir), 0, "popped files removed");
out:
	spool__free(s);
	rmrf(dir);
	free(dir);
	return ok;
}

static bool test_spool_bound_drops_oldest(void)
{
	char *dir = tmpdir();
	struct spool *s = NULL;
	struct spool_stats st;
	uint8_t big[2000] = { 0 };
	bool ok = false;

	if (!ASSERT_TRUE(dir, "mkdtemp"))
		return false;
	s = spool__open(dir, 1000);	/* room for 3 batches of 300 bytes */
	if (!ASSERT_TRUE(s, "open") || !put_n(s, 1, 5, 300))
		goto out;
	spool__stats(s, &st);
	if (!ASSERT_EQ(st.files, 3, "files kept") || !ASSERT_EQ(st.bytes, 900, "bytes kept") ||
	    !ASSERT_EQ(st.dropped_batches, 2, "dropped batches") ||
	    !ASSERT_EQ(st.dropped_samples, 1 + 2, "dropped samples (batches 1 and 2)") ||
	    !ASSERT_EQ(count_files(dir), 3, "files on disk"))
		goto out;
	if (!ASSERT_EQ(spool__put(s, big, sizeof(big), COMPRESS_GZIP, 7), -E2BIG, "too big"))
		goto out;
	spool__stats(s, &st);
	if (!ASSERT_EQ(st.dropped_batches, 3, "too big counted") || !ASSERT_EQ(st.files, 3, "kept"))
		goto out;
	ok = expect_fifo(s, 3, 3, 300);
out:
	spool__free(s);
	rmrf(dir);
	free(dir);
	return ok;
}

static bool test_spool_memory(void)
{
	struct spool *s = spool__open(NULL, 1000);
	struct spool_stats st;
	bool ok = false;

	if (!ASSERT_TRUE(s, "open") || !put_n(s, 1, 4, 300))
		goto out;
	spool__stats(s, &st);
	if (!ASSERT_EQ(st.files, 3, "kept") || !ASSERT_EQ(st.dropped_batches, 1, "dropped"))
		goto out;
	ok = expect_fifo(s, 2, 3, 300);
out:
	spool__free(s);
	return ok;
}

static bool test_spool_unwritable_dir(void)
{
	errno = 0;
	struct spool *s = spool__open("/proc/nonexistent/spool", 1000);

	return ASSERT_TRUE(!s, "open fails") && ASSERT_TRUE(errno != 0, "errno set");
}

/* A full disk drops the oldest batches, as the byte bound does (a small tmpfs; root only). */
static bool test_spool_disk_full_drops_oldest(void)
{
	char *dir = tmpdir();
	struct spool *s = NULL;
	struct spool_stats st;
	uint8_t buf[40000];
	bool ok = false, mounted = false;
	int err = 0, n = 0;

	if (!ASSERT_TRUE(dir, "mkdtemp"))
		return false;
	if (geteuid() || mount("tmpfs", dir, "tmpfs", 0, "size=256k")) {
		printf("  (skipped: needs root to mount a small tmpfs)\n");
		ok = true;
		goto out;
	}
	mounted = true;
	s = spool__open(dir, 1 << 30);	/* the bound is far: only the disk limits */
	if (!ASSERT_TRUE(s, "open"))
		goto out;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7);
	for (n = 1; n <= 20 && !err; n++) {
		buf[0] = (uint8_t)n;
		err = spool__put(s, buf, sizeof(buf), COMPRESS_ZSTD, (uint64_t)n);
	}
	spool__stats(s, &st);
	if (!ASSERT_EQ(err, 0, "every put queued (the oldest made room)") ||
	    !ASSERT_TRUE(st.disk_full_drops > 0, "some dropped for the full disk") ||
	    !ASSERT_EQ(st.dropped_batches, st.disk_full_drops, "all drops were full-disk drops") ||
	    !ASSERT_EQ(st.files + st.dropped_batches, 20, "kept + dropped = put"))
		goto out;
	/* The newest survive: the queue holds exactly the last st.files batches. */
	ok = expect_fifo(s, (int)(20 - st.files + 1), (int)st.files, sizeof(buf));
out:
	spool__free(s);
	if (mounted)
		umount2(dir, MNT_DETACH);
	rmrf(dir);
	free(dir);
	return ok;
}

TEST_MAIN(T(test_spool_disk_full_drops_oldest), T(test_spool_disk_fifo_and_reopen), T(test_spool_bound_drops_oldest),
	  T(test_spool_memory), T(test_spool_unwritable_dir))
