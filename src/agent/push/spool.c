/* SPDX-License-Identifier: Apache-2.0 */
/* Bounded FIFO of compressed batches, on disk (crash-safe files) or in memory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "agent/push/spool.h"
#include "common/log.h"
#include "common/util.h"

struct entry {
	uint64_t seq;
	uint64_t bytes;
	uint64_t nsamples;
	enum compression enc;
	uint8_t *data;		/* memory spool only */
};

struct spool {
	pthread_mutex_t lock;
	char *dir;		/* NULL: memory */
	int dirfd;
	uint64_t max_bytes;
	uint64_t next_seq;
	struct entry *ents;	/* ents[head..len) queued, oldest first */
	size_t head, len, cap;
	struct spool_stats st;
};

static const char *const exts[] = { [COMPRESS_ZSTD] = "zst", [COMPRESS_GZIP] = "gz",
				     [COMPRESS_NONE] = "pb" };

static void entry_path(const struct spool *s, const struct entry *e, char *buf, size_t len)
{
	snprintf(buf, len, "%016" PRIx64 "-%" PRIu64 ".%s", e->seq, e->nsamples, exts[e->enc]);
}

static int push_entry(struct spool *s, const struct entry *e)
{
	if (s->head > 0 && s->head * 2 >= s->len) {
		memmove(s->ents, s->ents + s->head, (s->len - s->head) * sizeof(*s->ents));
		s->len -= s->head;
		s->head = 0;
	}
	if (array_reserve(&s->ents, &s->cap, s->len + 1, sizeof(*s->ents), 64))
		return -ENOMEM;
	s->ents[s->len++] = *e;
	s->st.files++;
	s->st.bytes += e->bytes;
	return 0;
}

/* Removes the oldest entry; the caller holds the lock. */
static void pop_locked(struct spool *s)
{
	struct entry *e;
	char name[64];

	if (s->head == s->len)
		return;
	e = &s->ents[s->head++];
	if (s->dir) {
		entry_path(s, e, name, sizeof(name));
		if (unlinkat(s->dirfd, name, 0) && errno != ENOENT)
			log_warn("spool: remove '%s/%s': %s", s->dir, name, strerror(errno));
	}
	free(e->data);
	s->st.files--;
	s->st.bytes -= e->bytes;
}

static void drop_oldest_locked(struct spool *s)
{
	struct entry *e = &s->ents[s->head];

	s->st.dropped_batches++;
	s->st.dropped_samples += e->nsamples;
	s->st.dropped_bytes += e->bytes;
	pop_locked(s);
}

static int cmp_entry(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Queues the files an earlier run left behind, removes temporary leftovers. */
static int scan_dir(struct spool *s)
{
	DIR *d = fdopendir(dup(s->dirfd));
	struct dirent *de;
	int err = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		struct entry e = { 0 };
		char ext[8];
		struct stat st;
		int n = 0;

		if (!strncmp(de->d_name, ".tmp-", 5)) {
			unlinkat(s->dirfd, de->d_name, 0);
			continue;
		}
		if (sscanf(de->d_name, "%16" SCNx64 "-%" SCNu64 ".%7[a-z]%n", &e.seq, &e.nsamples,
			   ext, &n) != 3 || de->d_name[n])
			continue;
		if (!strcmp(ext, "zst"))
			e.enc = COMPRESS_ZSTD;
		else if (!strcmp(ext, "gz"))
			e.enc = COMPRESS_GZIP;
		else if (!strcmp(ext, "pb"))
			e.enc = COMPRESS_NONE;
		else
			continue;
		if (fstatat(s->dirfd, de->d_name, &st, 0) || !S_ISREG(st.st_mode))
			continue;
		e.bytes = st.st_size;
		err = push_entry(s, &e);
		if (err)
			break;
		if (e.seq >= s->next_seq)
			s->next_seq = e.seq + 1;
	}
	closedir(d);
	if (err)
		return err;
	qsort(s->ents + s->head, s->len - s->head, sizeof(*s->ents), cmp_entry);
	while (s->st.bytes > s->max_bytes && s->head < s->len)
		drop_oldest_locked(s);
	return 0;
}

struct spool *spool__open(const char *dir, uint64_t max_bytes)
{
	struct spool *s = calloc(1, sizeof(*s));
	int err;

	if (!s)
		return NULL;
	pthread_mutex_init(&s->lock, NULL);
	s->dirfd = -1;
	s->max_bytes = max_bytes;
	s->next_seq = 1;
	if (!dir)
		return s;
	s->dir = strdup(dir);
	if (!s->dir) {
		err = -ENOMEM;
		goto out_free;
	}
	if (mkdir(dir, 0700) && errno != EEXIST) {
		err = -errno;
		goto out_free;
	}
	s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0) {
		err = -errno;
		goto out_free;
	}
	err = scan_dir(s);
	if (err)
		goto out_free;
	if (s->st.files)
		log_info("spool: %" PRIu64 " batches (%" PRIu64 " bytes) left in '%s' by an earlier "
			 "run, will deliver them", s->st.files, s->st.bytes, dir);
	return s;
out_free:
	spool__free(s);
	errno = -err;
	return NULL;
}

void spool__free(struct spool *s)
{
	if (!s)
		return;
	for (size_t i = s->head; i < s->len; i++)
		free(s->ents[i].data);
	free(s->ents);
	if (s->dirfd >= 0)
		close(s->dirfd);
	free(s->dir);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static int write_file(struct spool *s, const struct entry *e, const uint8_t *data, size_t len)
{
	char tmp[80], name[64];
	size_t off = 0;
	int fd, err = 0;

	entry_path(s, e, name, sizeof(name));
	snprintf(tmp, sizeof(tmp), ".tmp-%s", name);
	fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	while (off < len) {
		ssize_t n = write(fd, data + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			goto out_unlink;
		}
		off += n;
	}
	if (fsync(fd)) {
		err = -errno;
		goto out_unlink;
	}
	close(fd);
	fd = -1;
	if (renameat(s->dirfd, tmp, s->dirfd, name)) {
		err = -errno;
		goto out_unlink;
	}
	fsync(s->dirfd);	/* make the rename durable */
	return 0;
out_unlink:
	if (fd >= 0)
		close(fd);
	unlinkat(s->dirfd, tmp, 0);
	return err;
}

int spool__put(struct spool *s, const uint8_t *data, size_t len, enum compression enc,
	       uint64_t nsamples)
{
	struct entry e = { .bytes = len, .nsamples = nsamples, .enc = enc };
	int err;

	pthread_mutex_lock(&s->lock);
	if (len > s->max_bytes) {
		s->st.dropped_batches++;
		s->st.dropped_samples += nsamples;
		s->st.dropped_bytes += len;
		err = -E2BIG;
		goto out_unlock;
	}
	while (s->st.bytes + len > s->max_bytes && s->head < s->len)
		drop_oldest_locked(s);
	e.seq = s->next_seq++;
	if (s->dir) {
		/* A full disk drops the oldest batches too, as the byte bound does: one policy,
		 * the newest data is what an operator wants after an outage. */
		while ((err = write_file(s, &e, data, len)) == -ENOSPC || err == -EDQUOT) {
			if (s->head == s->len)
				break;
			s->st.disk_full_drops++;
			drop_oldest_locked(s);
		}
	} else {
		e.data = malloc(len ? len : 1);
		err = e.data ? 0 : -ENOMEM;
		if (e.data)
			memcpy(e.data, data, len);
	}
	if (!err) {
		err = push_entry(s, &e);
		if (err && s->dir) {
			char name[64];

			entry_path(s, &e, name, sizeof(name));
			unlinkat(s->dirfd, name, 0);
		}
		if (err)
			free(e.data);
	}
	if (err) {
		s->st.write_errors++;
		s->st.dropped_batches++;
		s->st.dropped_samples += nsamples;
		s->st.dropped_bytes += len;
	}
out_unlock:
	pthread_mutex_unlock(&s->lock);
	return err;
}

static int read_file(struct spool *s, const struct entry *e, uint8_t **ret, size_t *ret_len)
{
	char name[64];
	struct stat st;
	uint8_t *buf = NULL;
	size_t off = 0;
	int fd, err;

	entry_path(s, e, name, sizeof(name));
	fd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		err = -errno;
		goto out_close;
	}
	buf = malloc(st.st_size ? st.st_size : 1);
	if (!buf) {
		err = -ENOMEM;
		goto out_close;
	}
	while (off < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + off, st.st_size - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? -errno : -EIO;
			goto out_free;
		}
		off += n;
	}
	close(fd);
	*ret = buf;
	*ret_len = off;
	return 0;
out_free:
	free(buf);
out_close:
	close(fd);
	return err;
}

int spool__peek(struct spool *s, uint8_t **ret_data, size_t *ret_len, enum compression *ret_enc,
		uint64_t *ret_nsamples)
{
	int err = -ENOENT;

	pthread_mutex_lock(&s->lock);
	while (s->head < s->len) {
		struct entry *e = &s->ents[s->head];

		if (!s->dir) {
			*ret_data = malloc(e->bytes ? e->bytes : 1);
			if (!*ret_data) {
				err = -ENOMEM;
				break;
			}
			memcpy(*ret_data, e->data, e->bytes);
			*ret_len = e->bytes;
			err = 0;
		} else {
			err = read_file(s, e, ret_data, ret_len);
		}
		if (!err) {
			*ret_enc = e->enc;
			*ret_nsamples = e->nsamples;
			break;
		}
		if (err == -ENOMEM)
			break;
		log_warn("spool: cannot read batch %" PRIu64 ": %s, dropping it", e->seq,
			 strerror(-err));
		drop_oldest_locked(s);
		err = -ENOENT;
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

void spool__pop(struct spool *s)
{
	pthread_mutex_lock(&s->lock);
	pop_locked(s);
	pthread_mutex_unlock(&s->lock);
}

size_t spool__count(struct spool *s)
{
	size_t n;

	pthread_mutex_lock(&s->lock);
	n = s->len - s->head;
	pthread_mutex_unlock(&s->lock);
	return n;
}

void spool__stats(struct spool *s, struct spool_stats *ret)
{
	pthread_mutex_lock(&s->lock);
	*ret = s->st;
	pthread_mutex_unlock(&s->lock);
}
