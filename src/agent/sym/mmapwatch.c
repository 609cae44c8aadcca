/* SPDX-License-Identifier: Apache-2.0 */
/* Executable mappings from perf's mmap2 / comm / fork records (mmapwatch.h). */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "agent/sym/mmapwatch.h"
#include "common/util.h"

#define RING_PAGES 64		/* per CPU, a power of two: 256 KiB, ~2000 exec mappings */

struct ring {
	int fd;
	void *base;		/* the control page, then RING_PAGES of data */
};

struct mmapwatch {
	struct ring *rings;
	int nrings;
	size_t page, data_size;
	struct mmapwatch_rec *recs;	/* one drain's records, sorted */
	size_t nrecs, caprecs;
	char *paths;			/* their paths, copied */
	size_t npaths, cappaths;
	struct mmapwatch_stats st;
};

/* The trailer every record carries (sample_id_all): pid, tid, then time. */
struct trailer {
	uint32_t pid, tid;
	uint64_t time;
};

static int open_cpu(int cpu)
{
	struct perf_event_attr attr = {
		.size = sizeof(attr),
		.type = PERF_TYPE_SOFTWARE,
		.config = PERF_COUNT_SW_DUMMY,
		.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME,
		.mmap = 1,
		.mmap2 = 1,
		.comm = 1,
		.comm_exec = 1,
		.task = 1,
		.sample_id_all = 1,
		.use_clockid = 1,
		.clockid = CLOCK_MONOTONIC,
	};

	return (int)syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

struct mmapwatch *mmapwatch__new(const char **ret_why)
{
	long ncpus = sysconf(_SC_NPROCESSORS_CONF);
	struct mmapwatch *w = calloc(1, sizeof(*w));
	int err = 0;

	*ret_why = "out of memory";
	if (!w)
		return NULL;
	w->page = (size_t)sysconf(_SC_PAGESIZE);
	w->data_size = RING_PAGES * w->page;
	w->rings = calloc(ncpus > 0 ? (size_t)ncpus : 1, sizeof(*w->rings));
	if (!w->rings) {
		err = -ENOMEM;
		goto out_err;
	}
	for (long cpu = 0; cpu < ncpus; cpu++) {
		struct ring *r = &w->rings[w->nrings];

		r->fd = open_cpu((int)cpu);
		if (r->fd < 0) {
			if (errno == ENODEV || errno == EINVAL)
				continue;	/* an offline CPU */
			err = -errno;
			*ret_why = "perf_event_open refused the mmap-record event";
			goto out_err;
		}
		r->base = mmap(NULL, w->page + w->data_size, PROT_READ | PROT_WRITE, MAP_SHARED,
			       r->fd, 0);
		if (r->base == MAP_FAILED) {
			err = -errno;
			close(r->fd);
			*ret_why = "cannot map the mmap-record ring";
			goto out_err;
		}
		w->nrings++;
	}
	if (!w->nrings) {
		err = -ENODEV;
		*ret_why = "no CPU took the mmap-record event";
		goto out_err;
	}
	return w;
out_err:
	mmapwatch__free(w);
	errno = -err;
	return NULL;
}

void mmapwatch__free(struct mmapwatch *w)
{
	if (!w)
		return;
	for (int i = 0; i < w->nrings; i++) {
		munmap(w->rings[i].base, w->page + w->data_size);
		close(w->rings[i].fd);
	}
	free(w->rings);
	free(w->recs);
	free(w->paths);
	free(w);
}

/* By time; at the same ns an exec or fork before a mapping (which it would otherwise undo) */
static int cmp_rec(const void *a, const void *b)
{
	const struct mmapwatch_rec *x = a, *y = b;

	if (x->t_ns != y->t_ns)
		return x->t_ns < y->t_ns ? -1 : 1;
	return (x->type == MMAPWATCH_MMAP) - (y->type == MMAPWATCH_MMAP);
}

/* Copies len bytes at ring offset off (it may wrap) into dst. */
static void ring_copy(const struct mmapwatch *w, const struct ring *r, uint64_t off, void *dst,
		      size_t len)
{
	const char *data = (const char *)r->base + w->page;
	size_t at = off & (w->data_size - 1), first = w->data_size - at;

	if (first >= len) {
		memcpy(dst, data + at, len);
	} else {
		memcpy(dst, data + at, first);
		memcpy((char *)dst + first, data, len - first);
	}
}

static struct mmapwatch_rec *rec_add(struct mmapwatch *w)
{
	if (array_reserve(&w->recs, &w->caprecs, w->nrecs + 1, sizeof(*w->recs), 256))
		return NULL;
	return memset(&w->recs[w->nrecs++], 0, sizeof(*w->recs));
}

/* Keeps a path for this drain; its offset in w->paths, or -1. */
static ssize_t path_add(struct mmapwatch *w, const char *p, size_t max)
{
	size_t len = strnlen(p, max), at = w->npaths;

	if (array_reserve(&w->paths, &w->cappaths, w->npaths + len + 1, 1, 4096))
		return -1;
	memcpy(w->paths + at, p, len);
	w->paths[at + len] = 0;
	w->npaths += len + 1;
	return (ssize_t)at;
}

/* One record (copied out of the ring) into w->recs, if it is one we keep. 0 or -ENOMEM. */
static int parse(struct mmapwatch *w, const struct perf_event_header *h)
{
	const char *p = (const char *)h;
	struct mmapwatch_rec *r;
	struct trailer t;

	if (h->size < sizeof(*h) + sizeof(t))
		return 0;
	memcpy(&t, p + h->size - sizeof(t), sizeof(t));
	switch (h->type) {
	case PERF_RECORD_MMAP2: {
		struct {
			uint32_t pid, tid;
			uint64_t addr, len, pgoff;
			uint32_t maj, min;
			uint64_t ino, ino_generation;
			uint32_t prot, flags;
		} m;
		size_t fixed = sizeof(*h) + sizeof(m);
		ssize_t path;

		if (h->size < fixed + sizeof(t))
			return 0;
		memcpy(&m, p + sizeof(*h), sizeof(m));
		if (!(m.prot & PROT_EXEC) || (h->misc & PERF_RECORD_MISC_MMAP_BUILD_ID))
			return 0;
		path = path_add(w, p + fixed, h->size - fixed - sizeof(t));
		if (path < 0 || !(r = rec_add(w)))
			return -ENOMEM;
		*r = (struct mmapwatch_rec){ .type = MMAPWATCH_MMAP, .pid = (pid_t)m.pid,
			.t_ns = t.time, .start = m.addr, .len = m.len, .pgoff = m.pgoff,
			.dev = (uint64_t)m.maj << 32 | m.min, .ino = m.ino };
		r->path = (const char *)(uintptr_t)path;	/* an offset until the drain ends */
		return 0;
	}
	case PERF_RECORD_COMM:
		if (!(h->misc & PERF_RECORD_MISC_COMM_EXEC))
			return 0;
		if (!(r = rec_add(w)))
			return -ENOMEM;
		r->type = MMAPWATCH_EXEC;
		r->pid = (pid_t)t.pid;
		r->t_ns = t.time;
		return 0;
	case PERF_RECORD_FORK: {
		uint32_t f[4];	/* pid, ppid, tid, ptid */

		if (h->size < sizeof(*h) + sizeof(f) + sizeof(t))
			return 0;
		memcpy(f, p + sizeof(*h), sizeof(f));
		if (f[0] != f[2] || f[0] == f[1])	/* a new thread, not a new process */
			return 0;
		if (!(r = rec_add(w)))
			return -ENOMEM;
		r->type = MMAPWATCH_FORK;
		r->pid = (pid_t)f[0];
		r->ppid = (pid_t)f[1];
		r->t_ns = t.time;
		return 0;
	}
	case PERF_RECORD_LOST: {
		uint64_t v[2];	/* id, lost */

		memcpy(v, p + sizeof(*h), sizeof(v));
		w->st.lost += v[1];
		return 0;
	}
	default:
		return 0;
	}
}

int mmapwatch__drain(struct mmapwatch *w, mmapwatch_cb cb, void *ctx)
{
	union {
		struct perf_event_header h;
		char b[65536];
	} buf;
	int err = 0;
	size_t n;

	w->nrecs = 0;
	w->npaths = 0;
	for (int i = 0; i < w->nrings; i++) {
		struct perf_event_mmap_page *pg = w->rings[i].base;
		uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE);
		uint64_t tail = pg->data_tail;

		while (tail + sizeof(buf.h) <= head) {
			ring_copy(w, &w->rings[i], tail, &buf.h, sizeof(buf.h));
			if (buf.h.size < sizeof(buf.h) || tail + buf.h.size > head)
				break;
			ring_copy(w, &w->rings[i], tail, buf.b, buf.h.size);
			if (!err)
				err = parse(w, &buf.h);
			tail += buf.h.size;
		}
		__atomic_store_n(&pg->data_tail, tail, __ATOMIC_RELEASE);
	}
	for (size_t i = 0; i < w->nrecs; i++)
		if (w->recs[i].type == MMAPWATCH_MMAP)
			w->recs[i].path = w->paths + (uintptr_t)w->recs[i].path;
	/* the CPUs' rings merged by time */
	qsort(w->recs, w->nrecs, sizeof(*w->recs), cmp_rec);
	for (size_t i = 0; i < w->nrecs; i++)
		cb(ctx, &w->recs[i]);
	n = w->nrecs;
	w->st.records += n;
	return err ? err : (int)n;
}

void mmapwatch__stats(const struct mmapwatch *w, struct mmapwatch_stats *ret)
{
	*ret = w ? w->st : (struct mmapwatch_stats){ 0 };
}
