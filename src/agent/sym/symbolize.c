/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The symbolizer's lookups: per-pid executable mappings, perf maps, the public user-space
 * entry points and the lifetime; images and file identities in sym_images.c, the kernel's
 * symbols in sym_kernel.c, the mmap records' mappings in sym_records.c (state: sym_state.h).
 * Not thread-safe: the agent calls it from its main loop only.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "agent/procs/procfs.h"
#include "agent/sym/mmapwatch.h"
#include "agent/sym/symbolize.h"
#include "agent/sym/sym_state.h"
#include "agent/procs/elf.h"
#include "agent/procs/maps.h"
#include "agent/procs/symtab.h"
#include "agent/unwind/table.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"

#define PERFMAP_MAX_LINES (1u << 21)

/* libstdc++'s demangler (C ABI); linked through -lstdc++. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

const char *sym_intern(struct symbolizer *s, const char *str)
{
	int64_t i = strtab_intern(&s->strs, str);

	return i < 0 ? NULL : s->strs.strs[i];
}

const char *sym_display_name(struct symbolizer *s, struct u64map *names, const struct symt *tab,
			     long i)
{
	const char *raw = symt_name(tab, i);
	uint64_t *v = u64map_find(names, (uint64_t)i);
	char *dem = NULL;
	int status = -1;
	int64_t idx;

	if (v)
		return s->strs.strs[*v];
	if (raw[0] == '_' && raw[1] == 'Z')
		dem = __cxa_demangle(raw, NULL, NULL, &status);
	idx = strtab_intern(&s->strs, dem && !status ? dem : raw);
	free(dem);
	if (idx < 0)
		return NULL;
	u64map_upsert(names, (uint64_t)i, (uint64_t)idx, NULL);	/* ENOMEM: just not cached */
	return s->strs.strs[idx];
}

/* ---- processes ------------------------------------------------------------------------ */

void sym_maps_free(struct symbolizer *s, struct mapping *maps, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sym_image_put(s, maps[i].img);
	free(maps);
}

static struct mapping *find_in(struct mapping *maps, size_t n, uint64_t addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (maps[mid].end <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && maps[lo].start <= addr ? &maps[lo] : NULL;
}

static struct mapping *find_mapping(struct proc *p, uint64_t addr)
{
	return find_in(p->maps, p->nmaps, addr);
}

/* A read of a process's mappings in progress (sym_proc_read_maps()). */
struct maps_read {
	struct symbolizer *s;
	struct proc *p;
	struct mapping *maps;
	size_t n, cap;
};

/*
 * One executable mapping of the process (maps_each(), procs/maps.h): its path interned, its
 * image kept from the last read when the mapping did not change. 0, or -ENOMEM (ends the walk).
 */
static int read_mapping(const struct maps_line *l, void *ctx)
{
	struct maps_read *q = ctx;
	struct symbolizer *s = q->s;
	struct proc *p = q->p;
	struct mapping m = { .start = l->start, .end = l->end, .pgoff = l->pgoff, .dev = l->dev,
			     .ino = l->ino, .deleted = l->deleted }, *old;

	m.path = *l->path ? sym_intern(s, l->path) : s->s_anon;
	if (!m.path || array_reserve(&q->maps, &q->cap, q->n + 1, sizeof(*q->maps), 32))
		return -ENOMEM;
	m.t_ns = p->maps_read_ns;
	m.img_tried = true;
	m.img = sym_vdso_of(s, &m);
	if (!m.img && m.path[0] == '/' && m.ino) {
		old = find_mapping(p, m.start);
		if (old && old->start == m.start && old->end == m.end && old->pgoff == m.pgoff &&
		    old->ino == m.ino && old->dev == m.dev && old->path == m.path && old->img) {
			m.img = old->img;
			m.img->refs++;
		} else {
			m.img = sym_mapping_image(s, p->pid, &m);
			/* A deleted file is readable only while its process lives. */
			if (m.img && m.deleted)
				sym_image_load(s, m.img, p->pid, &m);
		}
	}
	q->maps[q->n++] = m;
	return 0;
}

/* The mmap records the kernel dropped so far (0 without the watch). */
static uint64_t records_lost(const struct symbolizer *s)
{
	uint64_t records, lost;

	symbolizer__mmap_stats(s, &records, &lost);
	return lost;
}

/* (Re-)reads pid's executable mappings, keeping the images of unchanged ones. 0 or -errno. */
int sym_proc_read_maps(struct symbolizer *s, struct proc *p)
{
	struct maps_read q = { .s = s, .p = p };
	int err;

	p->maps_read_ns = mono_ns();
	p->lost_at_read = records_lost(s);
	s->st.maps_reads++;
	err = maps_each(p->pid, 0, read_mapping, &q);
	if (err) {
		sym_maps_free(s, q.maps, q.n);
		return err;
	}
	sym_maps_free(s, p->maps, p->nmaps);
	p->maps = q.maps;
	p->nmaps = q.n;
	p->from_records = false;
	return 0;
}

static void proc_free(struct symbolizer *s, struct proc *p)
{
	struct proc **pp = &s->procs[(uint32_t)p->pid % PROC_BUCKETS];

	for (; *pp; pp = &(*pp)->hnext) {
		if (*pp == p) {
			*pp = p->hnext;
			break;
		}
	}
	list_del(&p->lru);
	if (s->last == p)
		s->last = NULL;
	sym_maps_free(s, p->maps, p->nmaps);
	sym_maps_free(s, p->prev, p->nprev);
	symt_done(&p->pm);
	s->nprocs--;
	free(p);
}

struct proc *sym_proc_find(struct symbolizer *s, pid_t pid)
{
	for (struct proc *p = s->procs[(uint32_t)pid % PROC_BUCKETS]; p; p = p->hnext)
		if (p->pid == pid)
			return p;
	return NULL;
}

/* A new entry for pid, without maps; NULL on ENOMEM. (proc_get() evicts beyond max_pids.) */
struct proc *sym_proc_new(struct symbolizer *s, pid_t pid)
{
	struct proc *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->pid = pid;
	p->hnext = s->procs[(uint32_t)pid % PROC_BUCKETS];
	s->procs[(uint32_t)pid % PROC_BUCKETS] = p;
	list_add_head(&s->proc_lru, &p->lru);
	s->nprocs++;
	return p;
}


/*
 * Finds pid's entry, or creates it and reads its maps (*ret_err: result of that read). An
 * entry the mmap records made is read from /proc at its first use, where the process still
 * lives (the records lack what was mapped before the agent started); else its records' maps
 * stand.
 */
static struct proc *proc_get(struct symbolizer *s, pid_t pid, int *ret_err)
{
	struct proc *p = s->last;

	*ret_err = 0;
	if (p && p->pid == pid)
		return p;
	p = sym_proc_find(s, pid);
	if (!p && s->mw) {
		sym_records_drain(s);	/* a process gone since: its maps are in the records */
		p = sym_proc_find(s, pid);
	}
	if (p) {
		list_move_head(&s->proc_lru, &p->lru);
		s->last = p;
		if (p->from_records && !p->gone_ns && sym_proc_read_maps(s, p))
			p->from_records = false;	/* gone: the records' maps stand */
		return p;
	}
	p = sym_proc_new(s, pid);
	if (!p) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	while (s->nprocs > s->lim.max_pids && s->proc_lru.prev != &p->lru)
		proc_free(s, container_of(s->proc_lru.prev, struct proc, lru));
	*ret_err = sym_proc_read_maps(s, p);
	s->last = p;
	return p;
}

/* ---- perf maps ------------------------------------------------------------------------ */

/* Parses a perf map ("START SIZE name", hex, later lines win) into p->pm. 0 or -errno. */
static int perfmap_read(struct symbolizer *s, struct proc *p, const char *path)
{
	struct symt t = { 0 };
	size_t cap = 0, lines = 0;
	char *line = NULL;
	ssize_t len;
	int err = 0;
	FILE *f;

	f = fopen(path, "re");
	if (!f)
		return -errno;
	s->st.perfmap_reads++;
	while ((len = getline(&line, &cap, f)) > 0 && lines++ < PERFMAP_MAX_LINES) {
		char *q = line, *end;
		uint64_t start, size;

		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		start = strtoull(q, &end, 16);
		if (end == q || *end != ' ')
			continue;
		size = strtoull(end + 1, &q, 16);
		if (q == end + 1 || *q != ' ' || !q[1])
			continue;
		q++;
		err = symt_add(&t, start, size ? size : 1, q, strlen(q), 0, 0);
		if (err)
			goto out_free;
	}
	err = symt_finish(&t, 1);
	if (err)
		goto out_free;
	symt_done(&p->pm);
	p->pm = t;
	t = (struct symt){ 0 };
out_free:
	symt_done(&t);
	free(line);
	fclose(f);
	return err;
}

/* Looks addr up in pid's perf map, reading it on first use and again (rate-limited) when it
 * changed and addr is not in it. Symbol index or -1. */
static long perfmap_lookup(struct symbolizer *s, struct proc *p, uint64_t addr)
{
	char path[96];
	struct stat st;
	uint64_t now;
	long i;

	if (p->pm_read && (i = symt_find(&p->pm, addr)) >= 0)
		return i;
	now = mono_ns();
	if (p->pm_check_ns && now - p->pm_check_ns < s->lim.reread_interval_ns)
		return -1;
	p->pm_check_ns = now;
	if (!p->nspid)
		p->nspid = procfs_nspid(p->pid);
	snprintf(path, sizeof(path), "/proc/%d/root/tmp/perf-%d.map", p->pid, p->nspid);
	if (stat(path, &st))
		return -1;
	if (p->pm_read && st.st_size == p->pm_size &&
	    (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec == p->pm_mtime_ns)
		return -1;
	if (perfmap_read(s, p, path))
		return -1;
	p->pm_read = true;
	p->pm_size = st.st_size;
	p->pm_mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	return symt_find(&p->pm, addr);
}

/* ---- public: user space --------------------------------------------------------------- */

int symbolizer__pid_seen(struct symbolizer *s, pid_t pid)
{
	int err;

	if (!s || pid <= 0)
		return -EINVAL;
	proc_get(s, pid, &err);
	return err;
}

/* Forgets the exited processes kept past GONE_KEEP_NS (all of them when the FIFO is full). */
static void gone_sweep(struct symbolizer *s, uint64_t now, bool full)
{
	while (s->gone_len) {
		pid_t pid = s->gone[s->gone_head].pid;
		uint64_t ns = s->gone[s->gone_head].ns;
		struct proc *p;

		if (!full && now - ns < GONE_KEEP_NS)
			break;
		full = false;
		s->gone_head = (s->gone_head + 1) % GONE_CAP;
		s->gone_len--;
		p = sym_proc_find(s, pid);
		if (p && p->gone_ns == ns)	/* not read again for a new process since */
			proc_free(s, p);
	}
}

void symbolizer__pid_gone(struct symbolizer *s, pid_t pid, bool exec, uint64_t t_ns)
{
	uint64_t now = mono_ns();
	struct proc *p;

	if (!s)
		return;
	gone_sweep(s, now, s->gone_len == GONE_CAP);
	if (!(p = sym_proc_find(s, pid)))
		return;
	if (exec && s->mw) {
		/* the records' own exec comes before the new image's first mappings, which this
		 * event (at the end of the exec) follows: the records decide */
		sym_records_drain(s);
		return;
	}
	if (exec) {	/* another image: its maps from then on */
		if (!sym_maps_drop_before(s, p, t_ns ? t_ns : now, false))
			proc_free(s, p);
		return;
	}
	p->gone_ns = now;
	s->gone[(s->gone_head + s->gone_len) % GONE_CAP].pid = pid;
	s->gone[(s->gone_head + s->gone_len) % GONE_CAP].ns = now;
	s->gone_len++;
}

/* Re-reads of a pid's maps per reread_interval: a process loading libraries (`import torch`: a
 * few hundred in seconds) misses on each new one, and a thread pool spinning up right after a
 * dlopen (numpy's OpenBLAS: 1.6 s of CPU in 0.1 s on 16 cores) must not all fall in the window
 * one re-read closed. A read costs about a millisecond. */
#define MAPS_REREADS_PER_INTERVAL 4

static bool reread_allowed(struct symbolizer *s, struct proc *p)
{
	uint64_t now = mono_ns();

	if (now - p->burst_ns >= s->lim.reread_interval_ns) {
		p->burst_ns = now;
		p->burst_reads = 0;
	}
	if (p->burst_reads >= MAPS_REREADS_PER_INTERVAL)
		return false;
	p->burst_reads++;
	return true;
}

int symbolizer__user(struct symbolizer *s, pid_t pid, uint64_t addr, struct sym_frame *ret)
{
	struct proc *p, *owner = NULL;	/* owner: the entry whose mapping m is */
	struct mapping *m;
	long i;
	int err;

	if (!s || !ret || pid <= 0)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	ret->module = s->s_unknown;
	ret->build_id = s->s_empty;
	ret->file_offset = addr;
	p = proc_get(s, pid, &err);
	if (!p) {
		s->st.unknown++;
		return -ENOENT;
	}
	m = find_mapping(p, addr);
	if (!m && s->mw) {
		sym_records_drain(s);	/* mapped since the last drain */
		m = find_mapping(p, addr);
	}
	/*
	 * dlopen, JIT: maps changed since the last read. With the kernel's mmap records every
	 * executable mapping since that read is in the records just drained, so the address is
	 * in none (a walk's stray word): no re-read (each ~1 ms for a PyTorch process's maps, up
	 * to 16 a second) unless records were lost since.
	 */
	if (!m && !p->gone_ns && (!s->mw || records_lost(s) != p->lost_at_read) &&
	    reread_allowed(s, p)) {
		sym_proc_read_maps(s, p);
		m = find_mapping(p, addr);
	}
	if (!m)
		m = find_in(p->prev, p->nprev, addr);	/* a sample from before an exec */
	if (!m && p->fork_parent && (owner = sym_proc_of_parent(s, p)))
		m = find_mapping(owner, addr);	/* a fork child, before its exec */
	if (!m || !owner)
		owner = p;
	if (m && !m->img_tried) {	/* a mapping the records brought: its image now */
		m->img_tried = true;
		m->img = sym_vdso_of(s, m);
		if (!m->img && m->path[0] == '/' && m->ino)
			m->img = sym_mapping_image(s, owner->pid, m);
	}
	if (m) {
		ret->module = m->path;
		ret->map_start = m->start;
		ret->map_limit = m->end;
		ret->map_pgoff = m->pgoff;
		ret->file_offset = addr - m->start + m->pgoff;
	}
	if (m && m->img) {
		struct image *img = m->img;
		uint64_t vaddr, start;

		ret->build_id = img->build_id;
		if (!sym_image_load(s, img, owner->pid, m) &&
		    elf_off_to_vaddr(img->segs, img->nsegs, ret->file_offset, &vaddr)) {
			if ((i = symt_find(&img->tab, vaddr)) >= 0) {
				ret->function = sym_display_name(s, &img->names, &img->tab, i);
				ret->sym_offset = vaddr - img->tab.e[i].addr;
			} else if ((ret->function = sym_fde_name(s, img, m->path, vaddr, &start))) {
				ret->sym_offset = vaddr - start;
				ret->unnamed = true;
				s->st.unnamed++;
			}
			if (ret->function && !img->pinned)
				list_move_head(&s->loaded, &img->lru);
		}
	} else if ((i = perfmap_lookup(s, p, addr)) >= 0) {
		ret->function = sym_intern(s, symt_name(&p->pm, i));
		ret->sym_offset = addr - p->pm.e[i].addr;
		ret->module = s->s_perfmap;
		if (!m) {
			ret->map_start = p->pm.e[i].addr;
			ret->map_limit = p->pm.e[i].addr + p->pm.e[i].size;
			ret->file_offset = addr;
		}
	}
	if (!ret->function) {
		ret->sym_offset = 0;
		s->st.unknown++;
		return -ENOENT;
	}
	s->st.resolved += !ret->unnamed;
	return 0;
}

/* ---- lifetime ------------------------------------------------------------------------- */

struct symbolizer *symbolizer__new(void)
{
	struct symbolizer *s;
	int err;

	err = elf_lib_init();
	if (err) {
		errno = -err;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->lim = (struct symbolizer_limits){ .elf_cache_bytes = 128ULL << 20,
					     .max_pids = 4096,
					     .max_files = 8192,
					     .reread_interval_ns = 250 * NSEC_PER_MSEC };
	list_init(&s->proc_lru);
	list_init(&s->file_lru);
	list_init(&s->loaded);
	s->s_anon = sym_intern(s, "[anon]");
	s->s_unknown = sym_intern(s, "[unknown]");
	s->s_kernel = sym_intern(s, "[kernel.kallsyms]");
	s->s_perfmap = sym_intern(s, "[perf-map]");
	s->s_empty = sym_intern(s, "");
	s->s_vdso = sym_intern(s, "[vdso]");
	s->debug_dir = strdup("/usr/lib/debug");
	if (!s->s_anon || !s->s_unknown || !s->s_kernel || !s->s_perfmap || !s->s_empty ||
	    !s->s_vdso || !s->debug_dir) {
		symbolizer__free(s);
		errno = ENOMEM;
		return NULL;
	}
	return s;
}

void symbolizer__free(struct symbolizer *s)
{
	if (!s)
		return;
	mmapwatch__free(s->mw);
	while (s->proc_lru.next != &s->proc_lru)
		proc_free(s, container_of(s->proc_lru.next, struct proc, lru));
	while (s->file_lru.next != &s->file_lru)
		sym_file_free(s, container_of(s->file_lru.next, struct file_id, lru));
	sym_image_put(s, s->vdso);
	/* Every other image is referenced by a file or a mapping, so none is left here. */
	symt_done(&s->ksyms);
	u64map_done(&s->knames);
	free(s->kmods);
	strtab_done(&s->strs);
	free(s->debug_dir);
	free(s);
}

void symbolizer__stats(const struct symbolizer *s, struct symbolizer_stats *ret)
{
	*ret = s->st;
}

void symbolizer__set_limits(struct symbolizer *s, const struct symbolizer_limits *l)
{
	if (l->elf_cache_bytes)
		s->lim.elf_cache_bytes = l->elf_cache_bytes;
	if (l->max_pids)
		s->lim.max_pids = l->max_pids;
	if (l->max_files)
		s->lim.max_files = l->max_files;
	s->lim.reread_interval_ns = l->reread_interval_ns;
	sym_evict_images(s, NULL);
}

uint64_t symbolizer__cache_bytes(const struct symbolizer *s)
{
	return s->cache_bytes;
}

int symbolizer__set_debug_dir(struct symbolizer *s, const char *dir)
{
	char *d = NULL;

	if (dir && *dir && !(d = strdup(dir)))
		return -ENOMEM;
	free(s->debug_dir);
	s->debug_dir = d;
	return 0;
}

void symbolizer__trim(struct symbolizer *s)
{
	for (size_t b = 0; s && b < IMAGE_BUCKETS; b++)
		for (struct image *img = s->images[b]; img; img = img->hnext)
			if (img->loaded && img->tab.ext_map)
				madvise(img->tab.ext_map, img->tab.ext_map_len, MADV_DONTNEED);
}

void symbolizer__metrics(const struct symbolizer *s, FILE *out)
{
	prom_family(out, "gpuscope_agent_symbolizer_frames_total", "counter",
		    "Frames symbolized, by result (unnamed: stripped code, named module+0xSTART "
		    "after the function's start in its call-frame information).");
	prom_sample1_u64(out, "gpuscope_agent_symbolizer_frames_total", "result", "resolved",
			 s->st.resolved);
	prom_sample1_u64(out, "gpuscope_agent_symbolizer_frames_total", "result", "unknown",
			 s->st.unknown);
	prom_sample1_u64(out, "gpuscope_agent_symbolizer_frames_total", "result", "unnamed",
			 s->st.unnamed);
	prom_counter(out, "gpuscope_agent_symbolizer_elf_opened_total", "ELF files opened.",
		     s->st.elf_opened);
	prom_counter(out, "gpuscope_agent_symbolizer_elf_cache_hits_total",
		     "ELF lookups served from the cache.", s->st.elf_cache_hits);
	prom_counter(out, "gpuscope_agent_symbolizer_maps_reads_total", "/proc/PID/maps reads.",
		     s->st.maps_reads);
	prom_counter(out, "gpuscope_agent_symbolizer_perfmap_reads_total",
		     "/tmp/perf-PID.map reads.", s->st.perfmap_reads);
	prom_gauge(out, "gpuscope_agent_symbolizer_cache_bytes", "Bytes of cached symbol tables.",
		   s->cache_bytes);
	prom_gauge(out, "gpuscope_agent_symbolizer_pids", "Processes with cached memory maps.",
		   s->nprocs);
	if (s->mw) {
		struct mmapwatch_stats st;

		mmapwatch__stats(s->mw, &st);
		prom_counter(out, "gpuscope_agent_symbolizer_mmap_records_total",
			     "The kernel's mmap, exec and fork records read (processes gone before "
			     "their maps were read resolve from them).", st.records);
		prom_counter(out, "gpuscope_agent_symbolizer_mmap_records_lost_total",
			     "mmap records the kernel dropped on a full ring.", st.lost);
	}
}
