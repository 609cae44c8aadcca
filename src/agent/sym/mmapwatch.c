/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Executable mappings from perf's mmap2 / comm / fork records (mmapwatch.h). libbpf's raw perf
 * buffer opens the events and reads their rings (it keeps the fds in a perf-event array map);
 * the records' layouts are linux/perf_event.h's.
 */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "agent/sym/mmapwatch.h"
#include "common/util.h"

#define RING_PAGES 64		/* per CPU, a power of two: 256 KiB, ~2000 exec mappings */

struct mmapwatch {
	int map_fd;			/* the perf-event array that holds the events' fds */
	struct perf_buffer *pb;		/* libbpf's reader of the per-CPU rings */
	struct mmapwatch_rec *recs;	/* one drain's records, sorted */
	size_t nrecs, caprecs;
	char *paths;			/* their paths, copied */
	size_t npaths, cappaths;
	int err;			/* of this drain's parsing */
	struct mmapwatch_stats st;
};

/* The trailer every record carries (sample_id_all): pid, tid, then time. */
struct trailer {
	uint32_t pid, tid;
	uint64_t time;
};

static int parse(struct mmapwatch *w, const struct perf_event_header *h);

static enum bpf_perf_event_ret on_record(void *ctx, int cpu, struct perf_event_header *h)
{
	struct mmapwatch *w = ctx;

	(void)cpu;
	if (!w->err)
		w->err = parse(w, h);
	return LIBBPF_PERF_EVENT_CONT;
}

struct mmapwatch *mmapwatch__new(const char **ret_why)
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
	struct mmapwatch *w = calloc(1, sizeof(*w));
	int ncpus = libbpf_num_possible_cpus(), err;

	*ret_why = "out of memory";
	if (!w)
		return NULL;
	w->map_fd = -1;
	if (ncpus <= 0) {
		err = ncpus ? ncpus : -ENODEV;
		*ret_why = "cannot count the CPUs";
		goto out_err;
	}
	w->map_fd = bpf_map_create(BPF_MAP_TYPE_PERF_EVENT_ARRAY, "mmapwatch", sizeof(int),
				   sizeof(int), (uint32_t)ncpus, NULL);
	if (w->map_fd < 0) {
		err = -errno;
		*ret_why = "cannot create the perf-event array for the mmap records";
		goto out_err;
	}
	/* one dummy event per CPU (perf_event_open(attr, -1, cpu)), its ring mapped */
	w->pb = perf_buffer__new_raw(w->map_fd, RING_PAGES, &attr, on_record, w, NULL);
	if (!w->pb) {
		err = -errno;
		*ret_why = "perf_event_open refused the mmap-record event";
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
	perf_buffer__free(w->pb);
	if (w->map_fd >= 0)
		close(w->map_fd);
	free(w->recs);
	free(w->paths);
	free(w);
}

static int cmp_rec(const void *a, const void *b)
{
	const struct mmapwatch_rec *x = a, *y = b;

	if (x->t_ns != y->t_ns)
		return x->t_ns < y->t_ns ? -1 : 1;
	return (x->type == MMAPWATCH_MMAP) - (y->type == MMAPWATCH_MMAP);
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

/* One record (libbpf copies a record that wraps) into w->recs, if it is one we keep. 0 or
 * -ENOMEM. */
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
		if (h->size >= sizeof(*h) + 8 + sizeof(t)) {	/* pid, tid, then the name */
			size_t n = h->size - sizeof(*h) - 8 - sizeof(t);

			memcpy(r->comm, p + sizeof(*h) + 8, n < sizeof(r->comm) ? n : sizeof(r->comm));
		}
		r->comm[sizeof(r->comm) - 1] = 0;
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
	size_t n;
	int err;

	w->nrecs = 0;
	w->npaths = 0;
	w->err = 0;
	err = perf_buffer__consume(w->pb);
	for (size_t i = 0; i < w->nrecs; i++)
		if (w->recs[i].type == MMAPWATCH_MMAP)
			w->recs[i].path = w->paths + (uintptr_t)w->recs[i].path;
	/* the CPUs' rings merged by time */
	qsort(w->recs, w->nrecs, sizeof(*w->recs), cmp_rec);
	for (size_t i = 0; i < w->nrecs; i++)
		cb(ctx, &w->recs[i]);
	n = w->nrecs;
	w->st.records += n;
	return w->err ? w->err : err < 0 ? err : (int)n;
}

void mmapwatch__stats(const struct mmapwatch *w, struct mmapwatch_stats *ret)
{
	*ret = w ? w->st : (struct mmapwatch_stats){ 0 };
}
