/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unwinder's user-space half (unwind.h): shared BPF maps and two threads. The worker drains
 * the walker's requests (unwind_want) and reads each process's executable mappings (through the
 * symbolizer's reader: /proc/PID/map_files, /proc/PID/root); a binary without a table yet is
 * queued for the builder and mapped for frame pointers meanwhile. The builder (below the
 * workloads' priority) builds tables by build-id, loads each into its own array behind the
 * unwind_tables hash-of-maps, and asks the worker to read again the processes that waited for
 * it. A new process on a busy node is known within one worker round, not after every table
 * build queued before it (one of libtorch_cpu's takes seconds).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "agent/agent.h"
#include "agent/bpfutil.h"
#include "agent/procs/elf.h"
#include "agent/procs/maps.h"
#include "agent/selfprof.h"
#include "agent/unwind/cache.h"
#include "agent/unwind/frames.h"
#include "agent/unwind/python.h"
#include "agent/unwind/table.h"
#include "agent/unwind/unwind.h"
#include "agent/unwind/unwind_int.h"
#include "common/abi.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/util.h"

#define REFRESH_MIN_NS	(200 * NSEC_PER_MSEC)	/* per process, between maps re-reads */
#define SWEEP_NS	(2 * NSEC_PER_SEC)	/* exited processes leave unwind_procs */
#define MAP_FLAGS	(BPF_F_INNER_MAP | BPF_F_MMAPABLE)
/* unwind_want value from the builder: a table this process waited for is in; read it again */
#define WANT_TABLE_READY UINT64_MAX

/* ---- tables ------------------------------------------------------------------------------- */

static void lru_del(struct bin *b)
{
	if (!b->lru_next)
		return;
	b->lru_prev->lru_next = b->lru_next;
	b->lru_next->lru_prev = b->lru_prev;
	b->lru_prev = b->lru_next = NULL;
}

static void lru_add(struct unwinder *u, struct bin *b)
{
	b->lru_next = u->lru.lru_next;
	b->lru_prev = &u->lru;
	u->lru.lru_next->lru_prev = b;
	u->lru.lru_next = b;
}

static void unload(struct unwinder *u, struct bin *b)
{
	bpf_map_delete_elem(u->tables_fd, &b->id);
	lru_del(b);
	u->st.tables--;
	u->st.table_bytes -= b->bytes;
	u->st.evicted++;
	b->state = BIN_EVICTED;
	b->id = 0;
}

#define PUBLISH_CHUNK (1u << 20)
#define BUILDER_NICE 10

/* Loads t into a new inner array and publishes it under a new id. 0 or -errno. */
static int publish(struct unwinder *u, struct bin *b, const struct uw_table *t)
{
	LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = MAP_FLAGS);
	size_t len = ((size_t)t->nwords * 8 + 4095) & ~(size_t)4095;
	uint32_t id = ++u->next_id;
	void *mem;
	int fd, err = 0;

	fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "unwind_table", 4, 8, t->nwords, &o);
	if (fd < 0)
		return -errno;
	/* Copied through a window of the map at a time: a mapping of the whole array counts all
	 * of it in the agent's RSS while mapped (22 MB more for libtorch_cpu's table). */
	for (size_t off = 0; off < len; off += PUBLISH_CHUNK) {
		size_t n = len - off < PUBLISH_CHUNK ? len - off : PUBLISH_CHUNK;
		size_t data = (size_t)t->nwords * 8 > off ? (size_t)t->nwords * 8 - off : 0;

		mem = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
		if (mem == MAP_FAILED) {
			err = -errno;
			goto out;
		}
		memcpy(mem, (const char *)t->words + off, data < n ? data : n);
		munmap(mem, n);
	}
	if (bpf_map_update_elem(u->tables_fd, &id, &fd, BPF_ANY)) {
		err = -errno;
		goto out;
	}
	b->id = id;
out:
	close(fd);
	return err;
}

/*
 * b's table from the on-disk cache, else built from fd (or memory: the vDSO, never cached) and
 * then written to the cache; *ret_cached says which. 0 or uw_table_build()'s -errno.
 */
static int get_table(struct unwinder *u, struct bin *b, int fd, const void *mem, size_t len,
		     struct uw_table *t, bool *ret_cached)
{
	uint64_t t0, budget = u->opts.budget_bytes;
	bool cached = u->cache && fd >= 0;
	int err;

	*ret_cached = cached && !uw_cache__load(u->cache, b->key, t);
	if (*ret_cached)
		return 0;
	t0 = mono_ns();
	err = uw_table_build(fd, mem, len, (uint32_t)(budget / 8 < UINT32_MAX ? budget / 8 : UINT32_MAX),
			     &u->stop, t);
	pthread_mutex_lock(&u->lock);
	u->st.build_ns += mono_ns() - t0;
	pthread_mutex_unlock(&u->lock);
	if (!err && cached && uw_table_bytes(t) <= budget) {
		int serr = uw_cache__store(u->cache, b->key, t);

		if (serr)
			log_debug("unwind cache: writing the table of %s: %s", b->key,
				  strerror(-serr));
	}
	return err;
}

/* Loads b's table (cached or built) into its map, evicting LRU tables to stay in budget. */
static void build_bin(struct unwinder *u, struct bin *b, int fd, const void *mem, size_t len)
{
	uint64_t t0 = mono_ns(), budget = u->opts.budget_bytes;
	struct uw_table t = { 0 };
	bool cached = false;
	int err;

	err = get_table(u, b, fd, mem, len, &t, &cached);
	pthread_mutex_lock(&u->lock);
	if (err == -ECANCELED)	/* stopping: not a failure, and no state to keep */
		goto out;
	if (err == -ENODATA || err == -ENOEXEC) {
		b->state = BIN_NO_CFI;
		u->st.no_cfi++;
		goto out;
	}
	if (!err && uw_table_bytes(&t) > budget)
		err = -E2BIG;
	if (err == -E2BIG) {
		b->state = BIN_TOO_BIG;
		u->st.over_budget++;
		log_warn("unwind: table of %s over the %" PRIu64 " MiB budget: frame pointers there",
			 b->key, budget >> 20);
		goto out;
	}
	if (err) {
		b->state = BIN_FAILED;
		u->st.build_errors++;
		goto out;
	}
	while (u->st.table_bytes + uw_table_bytes(&t) > budget && u->lru.lru_prev != &u->lru)
		unload(u, u->lru.lru_prev);
	err = publish(u, b, &t);
	if (err) {
		b->state = BIN_FAILED;
		u->st.build_errors++;
		log_debug("unwind: loading the table of %s: %s", b->key, strerror(-err));
		goto out;
	}
	b->state = BIN_READY;
	b->bytes = uw_table_bytes(&t);
	log_debug("unwind: table of %s %s in %.1f ms", b->key, cached ? "from the cache" : "built",
		  (mono_ns() - t0) / 1e6);
	lru_add(u, b);
	u->st.built += !cached;
	u->st.cached += cached;
	u->st.tables++;
	u->st.table_bytes += b->bytes;
out:
	pthread_mutex_unlock(&u->lock);
	uw_table_done(&t);
}

static struct bin *bin_get(struct unwinder *u, const char *key, struct elf_info *info)
{
	uint64_t h = hash64(key, strlen(key), 0);
	struct bin *b;

	for (b = u->bins[h % BIN_BUCKETS]; b; b = b->hnext)
		if (!strcmp(b->key, key))
			return b;
	b = calloc(1, sizeof(*b));
	if (!b || !(b->key = strdup(key))) {
		free(b);
		return NULL;
	}
	if (info) {
		b->segs = info->segs;
		b->nsegs = info->nsegs;
		info->segs = NULL;
	}
	b->hnext = u->bins[h % BIN_BUCKETS];
	u->bins[h % BIN_BUCKETS] = b;
	return b;
}

/*
 * Queues b's build from (a copy of) fd, once, and notes pid as waiting for it. Under u->lock.
 * Unqueued when fd cannot be copied or pid not noted (no memory): a later read asks again.
 */
static void queue_build_locked(struct unwinder *u, struct bin *b, int fd, uint32_t pid)
{
	if (b->nwait == b->capwait) {
		uint32_t cap = b->capwait ? 2 * b->capwait : 4;
		uint32_t *w = realloc(b->waiters, cap * sizeof(*w));

		if (!w)
			return;
		b->waiters = w;
		b->capwait = cap;
	}
	if (!b->queued) {
		b->build_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (b->build_fd < 0)
			return;
		b->load_bytes = 0;	/* loaded code and data, not debug sections */
		for (int i = 0; i < b->nsegs; i++)
			b->load_bytes += b->segs[i].filesz;
		b->queued = true;
		b->qnext = NULL;
		if (u->queue_tail)
			u->queue_tail->qnext = b;
		else
			u->queue_head = b;
		u->queue_tail = b;
		u->st.queued++;
		pthread_cond_signal(&u->queue_cond);
	}
	for (uint32_t i = 0; i < b->nwait; i++)
		if (b->waiters[i] == pid)
			return;
	b->waiters[b->nwait++] = pid;
}

/* The bin of the file behind a mapping (opened through the symbolizer's reader). */
static struct bin *file_bin(struct unwinder *u, pid_t pid, const struct maps_line *l)
{
	struct elf_info info = { 0 };
	struct file_ent *f, *tmp = NULL;
	struct bin *b = NULL;
	struct stat st;
	int64_t mtime;
	uint64_t h;
	int fd;

	fd = maps_open_file(pid, l->start, l->end, l->path, l->deleted, &st);
	if (fd < 0)
		return NULL;
	mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	h = (st.st_dev * 31 + st.st_ino) * 31 + (uint64_t)mtime;
	for (f = u->files[h % FILE_BUCKETS]; f; f = f->hnext)
		if (f->dev == st.st_dev && f->ino == st.st_ino && f->mtime_ns == mtime &&
		    f->size == (uint64_t)st.st_size)
			break;
	if (!f) {
		f = tmp = calloc(1, sizeof(*f));
		if (!f)
			goto out;
		f->dev = st.st_dev;
		f->ino = st.st_ino;
		f->mtime_ns = mtime;
		f->size = st.st_size;
		if (!elf_read_info(fd, &info)) {
			char key[sizeof(info.build_id) + 64];
			uint64_t fp = 0;

			if (!info.build_id[0])
				snprintf(info.build_id, sizeof(info.build_id),
					 "file:%" PRIx64 ":%" PRIu64 ":%" PRId64, f->dev, f->ino, mtime);
			/* the build-id and what the table is made of: a file replaced in place
			 * under the same build-id (patched, relinked with a fixed id) is another
			 * binary here and in the on-disk cache */
			uw_cfi_fingerprint(fd, info.segs, info.nsegs, &fp);
			snprintf(key, sizeof(key), "%s#%016" PRIx64, info.build_id, fp);
			f->bin = bin_get(u, key, &info);
			free(info.segs);
		}
		if (u->nfiles < 65536) {	/* bounded: beyond, identities are just re-read */
			f->hnext = u->files[h % FILE_BUCKETS];
			u->files[h % FILE_BUCKETS] = f;
			u->nfiles++;
			tmp = NULL;
		}
	}
	b = f->bin;
	if (b) {
		pthread_mutex_lock(&u->lock);
		if (b->state == BIN_NEW || b->state == BIN_EVICTED) {
			queue_build_locked(u, b, fd, (uint32_t)pid);
		} else if (b->state == BIN_READY) {
			lru_del(b);
			lru_add(u, b);
		}
		pthread_mutex_unlock(&u->lock);
	}
out:
	close(fd);
	free(tmp);
	return b;
}

/* Our own vDSO: the same code the kernel maps into every 64-bit process. */
static struct bin *vdso_bin(struct unwinder *u, uint64_t size)
{
	uint64_t base = getauxval(AT_SYSINFO_EHDR);
	struct elf_info info = { 0 };
	char key[64];

	if (!base)
		return NULL;
	snprintf(key, sizeof(key), "vdso:%" PRIx64, size);
	if (!u->vdso || strcmp(u->vdso->key, key)) {
		if (elf_read_mem((void *)(uintptr_t)base, size, &info, NULL))
			return NULL;
		u->vdso = bin_get(u, key, &info);
		free(info.segs);
	}
	if (u->vdso && (u->vdso->state == BIN_NEW || u->vdso->state == BIN_EVICTED))
		build_bin(u, u->vdso, -1, (void *)(uintptr_t)base, size);
	return u->vdso;
}

/* ---- processes ---------------------------------------------------------------------------- */

static struct proc_ent *proc_find(struct unwinder *u, uint32_t tgid, bool create)
{
	struct proc_ent *p;

	for (p = u->procs[tgid % PROC_BUCKETS]; p; p = p->hnext)
		if (p->tgid == tgid)
			return p;
	if (!create || !(p = calloc(1, sizeof(*p))))
		return NULL;
	p->tgid = tgid;
	p->hnext = u->procs[tgid % PROC_BUCKETS];
	u->procs[tgid % PROC_BUCKETS] = p;
	u->st.procs++;
	return p;
}

static void proc_forget(struct unwinder *u, struct proc_ent *p)
{
	struct proc_ent **pp;

	bpf_map_delete_elem(u->procs_fd, &p->tgid);
	python__pid_gone(u->py, (pid_t)p->tgid);
	for (pp = &u->procs[p->tgid % PROC_BUCKETS]; *pp; pp = &(*pp)->hnext) {
		if (*pp == p) {
			*pp = p->hnext;
			break;
		}
	}
	u->st.procs--;
	free(p);
}

struct refresh {
	struct unwinder *u;
	uint32_t tgid;
};

/* One executable mapping into u->scratch_proc (maps_each()); 1 (the walk ends) when full. */
static int map_one(const struct maps_line *l, void *ctx)
{
	struct unwinder *u = ((struct refresh *)ctx)->u;
	uint32_t tgid = ((struct refresh *)ctx)->tgid, id = 0;
	struct unwind_mapping *m = &u->scratch_proc->m[u->scratch_proc->n];
	struct bin *b = NULL;
	uint64_t vaddr;

	if (l->start >> 47)	/* not [vsyscall] */
		return 0;
	m->start = l->start;
	m->end = l->end;
	m->flags = UNWIND_MAP_FP;
	if (!strcmp(l->path, "[vdso]"))
		b = vdso_bin(u, l->end - l->start);
	else if (l->path[0] == '/')
		b = file_bin(u, tgid, l);
	if (b) {
		pthread_mutex_lock(&u->lock);
		id = b->state == BIN_READY ? b->id : 0;
		pthread_mutex_unlock(&u->lock);
	}
	if (id && elf_off_to_vaddr(b->segs, b->nsegs, l->pgoff, &vaddr)) {
		m->bias = l->start - vaddr;
		m->table = id;
		m->flags = UNWIND_MAP_TABLE;
	}
	log_debug("unwind: pid %u %" PRIx64 "-%" PRIx64 " %s: %s", tgid, l->start, l->end, l->path,
		  m->flags == UNWIND_MAP_TABLE ? "table" : "frame pointers");
	return ++u->scratch_proc->n >= UNWIND_MAX_MAPS;
}

/* Reads tgid's executable mappings and publishes its unwind_procs entry for mm. */
static int proc_refresh(struct unwinder *u, uint32_t tgid, uint64_t mm, bool force)
{
	struct unwind_proc *up = u->scratch_proc;
	struct proc_ent *p;
	uint64_t now = mono_ns();
	int err = 0;

	p = proc_find(u, tgid, true);
	if (!p)
		return -ENOMEM;
	if (!force && p->mm == mm && p->refreshed_ns) {	/* read before, the same image */
		if (!p->maps_moved && __atomic_load_n(&u->map_events_on, __ATOMIC_ACQUIRE)) {
			/* no mapping came since the read: a stray word, not a new library */
			u->st.refreshes_skipped++;
			return 0;
		}
		if (now - p->refreshed_ns < REFRESH_MIN_NS) {
			/* read again once the gap has passed, not never: a thread pool spinning up
			 * right after a dlopen spends seconds of CPU in the new library within it */
			bpf_map_update_elem(u->want_fd, &tgid, &mm, BPF_NOEXIST);
			return 0;
		}
	}
	if (p->mm && mm && p->mm != mm)	/* exec: another image, maybe another interpreter */
		python__pid_gone(u->py, (pid_t)tgid);
	p->mm = mm;
	p->refreshed_ns = now;
	p->maps_moved = false;
	/* A Python interpreter: its frames from now on, while the tables below are built. */
	python__pid_seen(u->py, (pid_t)tgid);
	memset(up, 0, sizeof(*up));
	up->mm = mm;
	err = maps_each((pid_t)tgid, 0, map_one, &(struct refresh){ u, tgid });
	if (err < 0 && err != -EIO) {	/* gone (a read cut short keeps what it got) */
		proc_forget(u, p);
		return -ESRCH;
	}
	u->st.refreshes++;
	err = 0;
	for (uint32_t i = up->n; i < UNWIND_MAX_MAPS; i++)	/* the walker searches every slot */
		up->m[i].start = up->m[i].end = UNWIND_MAP_PAD;
	/* /proc/PID/maps is sorted by address: the walker's binary search relies on it */
	if (bpf_map_update_elem(u->procs_fd, &tgid, up, BPF_ANY))
		err = -errno;
	return err;
}

static void sweep(struct unwinder *u)
{
	for (int i = 0; i < PROC_BUCKETS; i++) {
		struct proc_ent *p = u->procs[i], *next;

		for (; p; p = next) {
			next = p->hnext;
			if (kill((pid_t)p->tgid, 0) && errno == ESRCH)
				proc_forget(u, p);
		}
	}
}

/* The mapping records since the last drain onto the processes (worker thread). */
static void take_map_events(struct unwinder *u)
{
	pid_t pids[MAP_EVENTS_CAP];
	unsigned n;
	bool all;

	pthread_mutex_lock(&u->lock);
	n = u->n_map_events;
	all = u->map_events_all;
	memcpy(pids, u->map_events, n * sizeof(pids[0]));
	u->n_map_events = 0;
	u->map_events_all = false;
	pthread_mutex_unlock(&u->lock);
	for (unsigned i = 0; i < n; i++) {
		struct proc_ent *p = proc_find(u, (uint32_t)pids[i], false);

		if (p)
			p->maps_moved = true;
	}
	for (int b = 0; all && b < PROC_BUCKETS; b++)
		for (struct proc_ent *p = u->procs[b]; p; p = p->hnext)
			p->maps_moved = true;
}

void unwinder__map_events_on(struct unwinder *u)
{
	if (u)
		__atomic_store_n(&u->map_events_on, true, __ATOMIC_RELEASE);
}

void unwinder__map_event(struct unwinder *u, int pid)
{
	if (!u)
		return;
	pthread_mutex_lock(&u->lock);
	if (pid <= 0 || u->n_map_events >= MAP_EVENTS_CAP)
		u->map_events_all = true;
	else if (!u->n_map_events || u->map_events[u->n_map_events - 1] != pid)
		u->map_events[u->n_map_events++] = pid;	/* a library's segments come in a row */
	pthread_mutex_unlock(&u->lock);
}

static void drain(struct unwinder *u)
{
	uint32_t keys[256], key, next;
	uint64_t mms[256];
	int n = 0;
	bool first = true;

	take_map_events(u);

	while (n < 256 && !bpf_map_get_next_key(u->want_fd, first ? NULL : &key, &next)) {
		first = false;
		key = next;
		if (!bpf_map_lookup_elem(u->want_fd, &key, &mms[n]))
			keys[n++] = key;
	}
	u->pending = n;
	if (n)
		__atomic_add_fetch(&u->drains, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < n; i++) {
		bpf_map_delete_elem(u->want_fd, &keys[i]);
		u->st.requests++;
		if (mms[i] == WANT_TABLE_READY) {	/* from the builder: same mm, read again */
			struct proc_ent *p = proc_find(u, keys[i], false);

			if (p)
				proc_refresh(u, keys[i], p->mm, true);
		} else {
			proc_refresh(u, keys[i], mms[i], false);
		}
	}
	u->pending = 0;
}

/*
 * unwind_stacks only grows (an id stays while its stack may still be reported): clear it when
 * nearly full. Stacks of threads blocked right now are lost then (their producers count it).
 * Its size is the walker's count of stacks put in since the last clear (one read of a per-CPU
 * counter): walking its keys every second cost a syscall per stack kept, ~2 ms/s of the agent
 * on a training node. Stacks put in while a clear deletes count as kept: a clear comes early,
 * never late.
 */
static void check_stacks(struct unwinder *u)
{
	uint64_t made = bpf_percpu_sum(u->stats_fd, UNWIND_ST_STACK_NEW);
	uint32_t next;

	if (made - u->stacks_made_at_clear < UNWIND_MAX_STACKS * 3 / 4)
		return;
	u->stacks_made_at_clear = made;
	__atomic_add_fetch(&u->stacks_gen, 1, __ATOMIC_SEQ_CST);	/* odd while clearing */
	while (!bpf_map_get_next_key(u->stacks_fd, NULL, &next))
		bpf_map_delete_elem(u->stacks_fd, &next);
	__atomic_add_fetch(&u->stacks_gen, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&u->lock);
	u->st.stack_clears++;
	pthread_mutex_unlock(&u->lock);
}

/* Processes waiting per MiB loaded: the most waiting for the least build time first. */
static double queue_score(const struct bin *b)
{
	return b->nwait / (1.0 + b->load_bytes / 1048576.0);
}

/*
 * The queued bin with the most processes waiting per byte to build (a small library many
 * processes map before one large binary: libtorch_cpu's build takes seconds), oldest first
 * among equals. Under u->lock; the queue is not empty.
 */
static struct bin *queue_pop_locked(struct unwinder *u)
{
	struct bin *best = u->queue_head, *best_prev = NULL, *prev = u->queue_head;

	for (struct bin *b = u->queue_head->qnext; b; prev = b, b = b->qnext) {
		if (queue_score(b) > queue_score(best)) {
			best = b;
			best_prev = prev;
		}
	}
	if (best_prev)
		best_prev->qnext = best->qnext;
	else
		u->queue_head = best->qnext;
	if (u->queue_tail == best)
		u->queue_tail = best_prev;
	best->qnext = NULL;
	return best;
}

/*
 * Builds queued tables, the most wanted first, then asks the worker to read again the processes
 * that waited (their walks used frame pointers through that binary meanwhile).
 */
static void *builder(void *arg)
{
	struct unwinder *u = arg;

	/* Table builds are background work (a PyTorch process's take 7-10 s of a core): below
	 * the workloads on a busy node. Reading a process's mappings is not: the worker is not. */
	if (!u->opts.foreground)
		setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), BUILDER_NICE);
	selfprof_thread(SELF_UNWIND_TABLES);
	pthread_mutex_lock(&u->lock);
	while (!u->stop) {
		struct bin *b = u->queue_head;
		uint32_t *waiters, n;
		bool ready;

		if (!b || u->opts.hold_builds) {
			struct timespec until;

			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += 100 * NSEC_PER_MSEC;
			if (until.tv_nsec >= (long)NSEC_PER_SEC) {
				until.tv_sec++;
				until.tv_nsec -= NSEC_PER_SEC;
			}
			pthread_cond_timedwait(&u->queue_cond, &u->lock, &until);
			continue;
		}
		b = queue_pop_locked(u);
		u->st.queued--;
		u->building = true;
		pthread_mutex_unlock(&u->lock);
		build_bin(u, b, b->build_fd, NULL, 0);
		close(b->build_fd);
		selfprof_flush();
		pthread_mutex_lock(&u->lock);
		b->build_fd = -1;
		b->queued = false;
		ready = b->state == BIN_READY;
		waiters = b->waiters;
		n = b->nwait;
		b->waiters = NULL;
		b->nwait = b->capwait = 0;
		pthread_mutex_unlock(&u->lock);
		for (uint32_t i = 0; i < n && ready; i++) {
			uint64_t v = WANT_TABLE_READY;

			/* NOEXIST: a request already there reads the process anyway */
			bpf_map_update_elem(u->want_fd, &waiters[i], &v, BPF_NOEXIST);
		}
		free(waiters);
		pthread_mutex_lock(&u->lock);
		u->building = false;
	}
	pthread_mutex_unlock(&u->lock);
	return NULL;
}

/*
 * The worker drains requests every poll_ms while they come; the always-on agent's (not record's,
 * opts.foreground) backs off to IDLE_POLL_MS after IDLE_ROUNDS rounds with none: its 50
 * wakeups a second (each a drain of the want map, which scans the map's buckets) were most of
 * its ~1 ms/s on a quiet node. A request met while it sleeps waits at most IDLE_POLL_MS (the
 * process's walks use frame pointers meanwhile).
 */
#define IDLE_ROUNDS	10
#define IDLE_POLL_MS	100

static void *worker(void *arg)
{
	struct unwinder *u = arg;
	unsigned idle = 0;

	selfprof_thread(SELF_UNWIND_MAPS);
	while (!u->stop) {
		unsigned ms = u->opts.poll_ms;
		uint64_t before = u->st.requests - u->st.refreshes_skipped;

		drain(u);
		/* requests it skipped (a stray address, no mapping record since) are no work */
		idle = u->st.requests - u->st.refreshes_skipped == before ? idle + 1 : 0;
		if (idle >= IDLE_ROUNDS && ms < IDLE_POLL_MS && !u->opts.foreground)
			ms = IDLE_POLL_MS;
		if (mono_ns() - u->last_sweep_ns > SWEEP_NS) {
			sweep(u);
			u->last_sweep_ns = mono_ns();
		}
		if (mono_ns() - u->last_stacks_check_ns > NSEC_PER_SEC) {
			check_stacks(u);
			u->last_stacks_check_ns = mono_ns();
		}
		selfprof_flush();
		__atomic_add_fetch(&u->st.worker_rounds, 1, __ATOMIC_RELAXED);
		nanosleep(&(struct timespec){ 0, (long)ms * 1000000L }, NULL);
	}
	return NULL;
}

/* ---- public ------------------------------------------------------------------------------- */

struct unwinder *unwinder__new(const struct unwinder_opts *opts, const char **ret_why)
{
	LIBBPF_OPTS(bpf_map_create_opts, inner, .map_flags = MAP_FLAGS);
	LIBBPF_OPTS(bpf_map_create_opts, outer);
	LIBBPF_OPTS(bpf_map_create_opts, noprealloc, .map_flags = BPF_F_NO_PREALLOC);
	struct unwinder *u = calloc(1, sizeof(*u));
	int err;

	*ret_why = NULL;
	if (!u)
		return NULL;
	u->tables_fd = u->procs_fd = u->want_fd = u->stats_fd = u->scratch_fd = u->template_fd = -1;
	u->stacks_fd = -1;
	u->opts.budget_bytes = opts && opts->budget_bytes ? opts->budget_bytes : 256ULL << 20;
	u->opts.poll_ms = opts && opts->poll_ms ? opts->poll_ms : 20;
	u->opts.foreground = opts && opts->foreground;
	u->opts.hold_builds = opts && opts->hold_builds;
	u->st.budget_bytes = u->opts.budget_bytes;
	u->lru.lru_next = u->lru.lru_prev = &u->lru;
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->queue_cond, NULL);
	u->scratch_proc = calloc(1, sizeof(*u->scratch_proc));
	if (!u->scratch_proc || elf_lib_init()) {
		err = -ENOMEM;
		goto out_free;
	}
	/* the walker's helpers: bpf_loop (5.17), bpf_task_pt_regs (5.15) */
	if (libbpf_probe_bpf_helper(BPF_PROG_TYPE_PERF_EVENT, BPF_FUNC_loop, NULL) == 0 ||
	    libbpf_probe_bpf_helper(BPF_PROG_TYPE_PERF_EVENT, BPF_FUNC_task_pt_regs, NULL) == 0) {
		err = -ENOTSUP;
		*ret_why = "the kernel lacks bpf_loop or bpf_task_pt_regs (needs Linux >= 5.17)";
		goto out_free;
	}
	u->template_fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "unwind_inner", 4, 8, 1, &inner);
	if (u->template_fd < 0) {
		err = -errno;
		*ret_why = "the kernel refused an inner unwind-table map (needs Linux >= 5.10 for "
			   "BPF_F_INNER_MAP and mmapable arrays)";
		goto out_free;
	}
	outer.inner_map_fd = u->template_fd;
	u->tables_fd = bpf_map_create(BPF_MAP_TYPE_HASH_OF_MAPS, "unwind_tables", 4, 4,
				      UNWIND_MAX_TABLES, &outer);
	u->procs_fd = bpf_map_create(BPF_MAP_TYPE_HASH, "unwind_procs", 4,
				     sizeof(struct unwind_proc), UNWIND_MAX_PROCS, &noprealloc);
	u->want_fd = bpf_map_create(BPF_MAP_TYPE_HASH, "unwind_want", 4, 8, 1024, NULL);
	u->stats_fd = bpf_map_create(BPF_MAP_TYPE_PERCPU_ARRAY, "unwind_stats", 4, 8, UNWIND_ST_MAX,
				     NULL);
	u->scratch_fd = bpf_map_create(BPF_MAP_TYPE_PERCPU_ARRAY, "unwind_scratch", 4,
				       UNWIND_SCRATCH_BYTES(GPUSCOPE_MAX_STACK), 1, NULL);
	u->stacks_fd = bpf_map_create(BPF_MAP_TYPE_HASH, "unwind_stacks", 4,
				      sizeof(struct unwind_stack), UNWIND_MAX_STACKS, &noprealloc);
	if (u->tables_fd < 0 || u->procs_fd < 0 || u->want_fd < 0 || u->stats_fd < 0 ||
	    u->scratch_fd < 0 || u->stacks_fd < 0) {
		err = -errno;
		*ret_why = "the kernel refused the unwinder's maps (hash of maps, per-CPU arrays)";
		goto out_free;
	}
	if (opts && opts->cache_dir) {
		u->cache = uw_cache__open(opts->cache_dir, opts->cache_max_bytes);
		if (!u->cache)
			log_warn("unwind: table cache '%s': %s: tables built in every agent run",
				 opts->cache_dir, strerror(errno));
	}
	bpf_counters__set(GPUSCOPE_WALKER_UNWIND, u->stats_fd);	/* on /metrics, named */
	u->py = python__new();
	if (u->py)
		python__set_default(u->py);
	else
		log_warn("python: %s: Python processes keep native frames only", strerror(errno));
	err = pthread_create(&u->thread, NULL, worker, u);
	if (err) {
		err = -err;
		goto out_free;
	}
	u->thread_started = true;
	pthread_setname_np(u->thread, "gs-unwind");	/* its CPU apart in top -H, /proc */
	err = pthread_create(&u->builder, NULL, builder, u);
	if (err) {
		err = -err;
		goto out_free;
	}
	u->builder_started = true;
	pthread_setname_np(u->builder, "gs-unwind-build");
	return u;
out_free:
	unwinder__free(u);
	errno = -err;
	return NULL;
}

void unwinder__free(struct unwinder *u)
{
	if (!u)
		return;
	u->stop = true;
	if (u->thread_started)
		pthread_join(u->thread, NULL);
	if (u->builder_started) {
		pthread_mutex_lock(&u->lock);
		pthread_cond_broadcast(&u->queue_cond);
		pthread_mutex_unlock(&u->lock);
		pthread_join(u->builder, NULL);
	}
	for (int i = 0; i < BIN_BUCKETS; i++) {
		for (struct bin *b = u->bins[i], *n; b; b = n) {
			n = b->hnext;
			if (b->queued)
				close(b->build_fd);
			free(b->waiters);
			free(b->key);
			free(b->segs);
			free(b);
		}
	}
	for (int i = 0; i < FILE_BUCKETS; i++) {
		for (struct file_ent *f = u->files[i], *n; f; f = n) {
			n = f->hnext;
			free(f);
		}
	}
	for (int i = 0; i < PROC_BUCKETS; i++) {
		for (struct proc_ent *p = u->procs[i], *n; p; p = n) {
			n = p->hnext;
			free(p);
		}
	}
	int fds[] = { u->tables_fd, u->procs_fd, u->want_fd, u->stats_fd, u->scratch_fd,
		      u->template_fd, u->stacks_fd };
	bpf_counters__drop(GPUSCOPE_WALKER_UNWIND, u->stats_fd);
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	pthread_mutex_destroy(&u->lock);
	python__free(u->py);
	uw_cache__free(u->cache);
	free(u->scratch_proc);
	free(u);
}

int unwinder__prepare(struct unwinder *u, struct bpf_object *obj)
{
	static const char *names[] = { "unwind_tables", "unwind_procs", "unwind_want",
				       "unwind_stats", "unwind_scratch", "unwind_stacks" };
	int fds[] = { u->tables_fd, u->procs_fd, u->want_fd, u->stats_fd, u->scratch_fd,
		      u->stacks_fd };

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		struct bpf_map *m = bpf_object__find_map_by_name(obj, names[i]);
		int err;

		if (!m)
			continue;
		err = bpf_map__reuse_fd(m, fds[i]);
		if (err)
			return err;
	}
	return u->py ? python__share_maps(u->py, obj) : 0;
}

struct python *unwinder__python(struct unwinder *u)
{
	return u ? u->py : NULL;
}

int unwinder__add_pid(struct unwinder *u, int pid)
{
	uint32_t key = (uint32_t)pid;
	uint64_t mm = 0;

	return bpf_map_update_elem(u->want_fd, &key, &mm, BPF_ANY) ? -errno : 0;
}

void unwinder__release_builds(struct unwinder *u)
{
	pthread_mutex_lock(&u->lock);
	u->opts.hold_builds = false;
	pthread_cond_broadcast(&u->queue_cond);
	pthread_mutex_unlock(&u->lock);
}
