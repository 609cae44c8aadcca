/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unwind tables' on-disk cache (cache.h). One file per table, named by a hash of its key:
 * a header (magic, version, lengths, the key, the table's fields, a checksum of the header and
 * one of the rows), then the table's words as the BPF map holds them. Nothing read is trusted
 * before every check passed; an entry that fails one is removed and built anew.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "agent/unwind/cache.h"
#include "common/log.h"
#include "common/util.h"

/* Bump when the file layout or what table.c builds from the same bytes changes. */
#define CACHE_VERSION	1
#define CACHE_SUFFIX	".uwt"
#define TMP_PREFIX	".tmp."
#define TMP_STALE_S	600	/* a temporary file this old was left by a write that died */
#define KEY_MAX		512
#define FP_CHUNK	(256u << 10)	/* the fingerprint reads a section this much at a time */

static const char cache_magic[8] = "GSUWTAB";	/* 7 characters and a NUL */

struct cache_hdr {
	char magic[8];
	__u32 version;
	__u32 key_len;			/* bytes of key after the header, then padding to 8 */
	__u64 payload_bytes;		/* nwords * 8 */
	__u64 payload_sum;		/* sum64() of the words */
	__u64 hdr_sum;			/* sum64() of this header (hdr_sum 0) and the key */
	__u32 nwords, nrows, npages, source;	/* source: 0 .eh_frame, 1 .debug_frame */
	__u64 base, fdes, unsupported;
};
_Static_assert(sizeof(struct cache_hdr) == 80, "cache file layout: bump CACHE_VERSION");

struct uw_cache {
	char *dir;
	uint64_t max_bytes;
	uint32_t tmp_seq;
	pthread_mutex_t lock;		/* st */
	struct uw_cache_stats st;
};

/*
 * A 64-bit hash of len bytes in four independent lanes (a few GB/s: the checksum of a 22-MB
 * table costs milliseconds), for catching a torn or damaged file, not an adversary: only root
 * writes the directory.
 */
static uint64_t sum64(const void *data, size_t len, uint64_t seed)
{
	const unsigned char *p = data;
	uint64_t h[4] = { seed ^ 0x9e3779b97f4a7c15ULL, seed ^ 0xc2b2ae3d27d4eb4fULL,
			  seed ^ 0x165667b19e3779f9ULL, seed ^ 0x27d4eb2f165667c5ULL };
	uint64_t w, r;

	for (; len >= 32; p += 32, len -= 32) {
		for (int i = 0; i < 4; i++) {
			memcpy(&w, p + 8 * i, 8);
			h[i] = (h[i] ^ w) * 0xff51afd7ed558ccdULL;
			h[i] ^= h[i] >> 31;
		}
	}
	r = h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7);
	return hash64(p, len, r);
}

/* ---- fingerprint ------------------------------------------------------------------------ */

static bool cfi_section(const char *name)
{
	return name && (!strcmp(name, ".eh_frame_hdr") || !strcmp(name, ".eh_frame") ||
			!strcmp(name, ".debug_frame"));
}

int uw_cfi_fingerprint(int fd, const struct elf_seg *segs, int nsegs, uint64_t *ret)
{
	uint64_t h = 0x5155434846505249ULL;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	char *buf;
	Elf *elf;
	int err = 0;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOTSUP;
	buf = malloc(FP_CHUNK);
	if (!buf)
		return -ENOMEM;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf) {
		free(buf);
		return -ENOEXEC;
	}
	if (elf_kind(elf) != ELF_K_ELF || elf_getshdrstrndx(elf, &shstrndx)) {
		err = -ENOEXEC;
		goto out;
	}
	for (int i = 0; i < nsegs; i++)
		h = sum64(&segs[i], sizeof(segs[i]), h);
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		const char *name;
		__u64 where[3];

		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
			continue;
		name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (!cfi_section(name))
			continue;
		where[0] = sh.sh_addr;
		where[1] = sh.sh_size;
		where[2] = sh.sh_flags;
		h = sum64(name, strlen(name), h);
		h = sum64(where, sizeof(where), h);
		/* read, not mapped: libtorch's 20 MB of CFI would count in the agent's RSS */
		for (uint64_t off = 0; off < sh.sh_size;) {
			size_t n = sh.sh_size - off < FP_CHUNK ? sh.sh_size - off : FP_CHUNK;
			ssize_t r = pread(fd, buf, n, (off_t)(sh.sh_offset + off));

			if (r <= 0) {
				err = r < 0 ? -errno : -ENOEXEC;
				goto out;
			}
			h = sum64(buf, (size_t)r, h);
			off += (uint64_t)r;
		}
	}
	*ret = h;
out:
	free(buf);
	elf_end(elf);
	return err;
}

/* ---- the directory ---------------------------------------------------------------------- */

struct entry {
	char name[64];
	int64_t mtime_ns;
	uint64_t bytes;
};

static int by_mtime(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

static bool has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);

	return n > m && !strcmp(s + n - m, suf);
}

/*
 * Counts the entries (and, with evict, past the bound removes the least recently used until
 * the rest take 90 % of it); removes temporary files left by writes that died. 0 or -errno.
 */
static int scan(struct uw_cache *c, bool evict)
{
	struct entry *es = NULL, *nes;
	size_t n = 0, cap = 0;
	uint64_t total = 0, evicted = 0;
	struct dirent *de;
	struct timespec now;
	DIR *d;

	d = opendir(c->dir);
	if (!d)
		return -errno;
	clock_gettime(CLOCK_REALTIME, &now);
	while ((de = readdir(d))) {
		struct stat st;

		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			continue;
		if (!strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX))) {
			if (now.tv_sec - st.st_mtim.tv_sec > TMP_STALE_S)
				unlinkat(dirfd(d), de->d_name, 0);
			continue;
		}
		if (!has_suffix(de->d_name, CACHE_SUFFIX) || strlen(de->d_name) >= sizeof(es->name))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			nes = realloc(es, cap * sizeof(*es));
			if (!nes) {
				free(es);
				closedir(d);
				return -ENOMEM;
			}
			es = nes;
		}
		snprintf(es[n].name, sizeof(es[n].name), "%s", de->d_name);
		es[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		es[n].bytes = (uint64_t)st.st_size;
		total += es[n].bytes;
		n++;
	}
	if (evict && total > c->max_bytes) {
		/* down to 90 %: the next stores do not each scan the directory again */
		uint64_t low = c->max_bytes - c->max_bytes / 10;

		qsort(es, n, sizeof(*es), by_mtime);
		for (size_t i = 0; i < n && total > low; i++) {
			if (unlinkat(dirfd(d), es[i].name, 0) && errno != ENOENT)
				continue;
			total -= es[i].bytes;
			es[i].bytes = 0;
			evicted++;
		}
	}
	closedir(d);
	pthread_mutex_lock(&c->lock);
	c->st.bytes = total;
	c->st.files = n - evicted;
	c->st.evicted += evicted;
	pthread_mutex_unlock(&c->lock);
	free(es);
	return 0;
}

static int mkdirs(const char *dir)
{
	char path[4096];
	size_t n = strlen(dir);

	if (n == 0 || n >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dir, n + 1);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(path, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, 0700) && errno != EEXIST)
		return -errno;
	return 0;
}

struct uw_cache *uw_cache__open(const char *dir, uint64_t max_bytes)
{
	struct uw_cache *c;
	int err;

	err = mkdirs(dir);
	if (err) {
		errno = -err;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c || !(c->dir = strdup(dir))) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	c->max_bytes = max_bytes ? max_bytes : UW_CACHE_MAX_DEFAULT;
	c->st.max_bytes = c->max_bytes;
	pthread_mutex_init(&c->lock, NULL);
	err = scan(c, true);
	if (err) {
		uw_cache__free(c);
		errno = -err;
		return NULL;
	}
	return c;
}

void uw_cache__free(struct uw_cache *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c->dir);
	free(c);
}

static void entry_path(const struct uw_cache *c, const char *key, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%016" PRIx64 CACHE_SUFFIX, c->dir, hash64(key, strlen(key), 0));
}

static uint64_t hdr_checksum(const struct cache_hdr *h, const char *key)
{
	struct cache_hdr tmp = *h;

	tmp.hdr_sum = 0;
	return sum64(key, tmp.key_len, sum64(&tmp, sizeof(tmp), 0));
}

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

static int read_full(int fd, void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t r = read(fd, (char *)buf + off, len - off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EBADMSG;
		off += (size_t)r;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	for (size_t off = 0; off < len;) {
		ssize_t r = write(fd, (const char *)buf + off, len - off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		off += (size_t)r;
	}
	return 0;
}

/* Reads and checks the entry open as fd against key; the table into *t. 0, -EBADMSG, -errno. */
static int read_entry(int fd, const char *key, struct uw_table *t)
{
	char kbuf[KEY_MAX + 8];
	struct cache_hdr h;
	struct stat st;
	size_t klen = strlen(key);
	__u64 *w = NULL;
	int err;

	if (fstat(fd, &st))
		return -errno;
	err = read_full(fd, &h, sizeof(h));
	if (err)
		return err == -EBADMSG ? -EBADMSG : err;
	if (memcmp(h.magic, cache_magic, sizeof(h.magic)) || h.version != CACHE_VERSION ||
	    h.key_len > KEY_MAX || h.payload_bytes != (__u64)h.nwords * 8 ||
	    (__u64)st.st_size != sizeof(h) + pad8(h.key_len) + h.payload_bytes)
		return -EBADMSG;
	err = read_full(fd, kbuf, pad8(h.key_len));
	if (err)
		return -EBADMSG;
	if (hdr_checksum(&h, kbuf) != h.hdr_sum)
		return -EBADMSG;
	/* another key of the same name hash: not ours, and not damaged */
	if (h.key_len != klen || memcmp(kbuf, key, klen))
		return -ENOENT;
	/* the layout table.c builds: header words, npages + 1 index words, the rows */
	if (h.source > 1 || h.nwords != UNWIND_HDR_WORDS + h.npages + 1 + h.nrows)
		return -EBADMSG;
	w = malloc(h.payload_bytes ? h.payload_bytes : 8);
	if (!w)
		return -ENOMEM;
	err = read_full(fd, w, h.payload_bytes);
	if (err || sum64(w, h.payload_bytes, 0) != h.payload_sum ||
	    w[0] != ((__u64)h.npages | (__u64)h.nrows << 32) || w[1] != h.base) {
		free(w);
		return err && err != -EBADMSG ? err : -EBADMSG;
	}
	memset(t, 0, sizeof(*t));
	t->words = w;
	t->nwords = h.nwords;
	t->nrows = h.nrows;
	t->npages = h.npages;
	t->base = h.base;
	t->fdes = h.fdes;
	t->unsupported = h.unsupported;
	t->source = h.source ? ".debug_frame" : ".eh_frame";
	return 0;
}

int uw_cache__load(struct uw_cache *c, const char *key, struct uw_table *ret)
{
	char path[4096];
	uint64_t t0 = mono_ns();
	int fd, err;

	entry_path(c, key, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = errno == ENOENT ? -ENOENT : -errno;
		goto out;
	}
	err = read_entry(fd, key, ret);
	if (!err)
		futimens(fd, NULL);	/* used now: the LRU's clock is the file's mtime */
	close(fd);
	if (err == -EBADMSG) {
		log_debug("unwind cache: '%s' failed its checks: removed, built anew", path);
		unlink(path);
	}
out:
	pthread_mutex_lock(&c->lock);
	if (!err) {
		c->st.hits++;
		c->st.load_ns += mono_ns() - t0;
	} else if (err == -EBADMSG) {
		c->st.corrupt++;
	} else {
		c->st.misses++;
	}
	pthread_mutex_unlock(&c->lock);
	return err == -EBADMSG || err == -ENOENT || !err ? err : -ENOENT;
}

int uw_cache__store(struct uw_cache *c, const char *key, const struct uw_table *t)
{
	static const char zeros[8];
	struct cache_hdr h = { 0 };
	char path[4096], tmp[4096];
	size_t klen = strlen(key);
	uint64_t bytes, total;
	uint32_t seq;
	int fd, err;

	bytes = sizeof(h) + pad8(klen) + (uint64_t)t->nwords * 8;
	if (klen > KEY_MAX || bytes > c->max_bytes) {
		err = -E2BIG;
		goto out;
	}
	memcpy(h.magic, cache_magic, sizeof(h.magic));
	h.version = CACHE_VERSION;
	h.key_len = (__u32)klen;
	h.payload_bytes = (__u64)t->nwords * 8;
	h.payload_sum = sum64(t->words, h.payload_bytes, 0);
	h.nwords = t->nwords;
	h.nrows = t->nrows;
	h.npages = t->npages;
	h.source = t->source && !strcmp(t->source, ".debug_frame");
	h.base = t->base;
	h.fdes = t->fdes;
	h.unsupported = t->unsupported;
	h.hdr_sum = hdr_checksum(&h, key);
	entry_path(c, key, path, sizeof(path));
	seq = __atomic_add_fetch(&c->tmp_seq, 1, __ATOMIC_RELAXED);
	snprintf(tmp, sizeof(tmp), "%s/" TMP_PREFIX "%d.%u", c->dir, (int)getpid(), seq);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		err = -errno;
		goto out;
	}
	err = write_full(fd, &h, sizeof(h));
	if (!err)
		err = write_full(fd, key, klen);
	if (!err)
		err = write_full(fd, zeros, pad8(klen) - klen);
	if (!err)
		err = write_full(fd, t->words, h.payload_bytes);
	if (close(fd) && !err)
		err = -errno;
	/* readers see the old entry or the whole new one, never a part */
	if (!err && rename(tmp, path))
		err = -errno;
	if (err)
		unlink(tmp);
out:
	pthread_mutex_lock(&c->lock);
	if (err) {
		c->st.store_errors++;
	} else {
		c->st.stores++;
		c->st.bytes += bytes;
		c->st.files++;
	}
	total = c->st.bytes;
	pthread_mutex_unlock(&c->lock);
	if (!err && total > c->max_bytes)
		scan(c, true);	/* the count may be off (entries replaced, other agents): recount */
	return err;
}

void uw_cache__stats(struct uw_cache *c, struct uw_cache_stats *ret)
{
	pthread_mutex_lock(&c->lock);
	*ret = c->st;
	pthread_mutex_unlock(&c->lock);
}
