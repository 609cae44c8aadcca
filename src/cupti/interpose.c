// SPDX-License-Identifier: Apache-2.0
/*
 * GOT interposition inside the workload process: the callers of a few CUPTI entry points (and
 * of dlsym) in every other loaded object are sent to our wrappers, by rewriting the slots of
 * their PLT JUMP_SLOT and GLOB_DAT relocations, found through each object's dynamic section (a
 * RELRO page is made writable for the write and read-only again). Our own library and libcupti
 * are left alone, so their calls go straight to CUPTI.
 *
 * Which objects are loaded comes from /proc/self/maps, never from dl_iterate_phdr: called every
 * 10 ms from our control thread while the application's threads loaded libraries, glibc's
 * dl_iterate_phdr crashed a GPT-2 process on the H100 inside ld.so (a NULL read, in the
 * loader's own bookkeeping of an object another thread was loading). Each file mapped at offset
 * 0 is pinned with dlopen(path, RTLD_NOLOAD) before it is read, which
 *  - answers only for an object the loader has loaded into our namespace (a file mapped as data,
 *    or a library of another dlmopen namespace, is left alone),
 *  - waits while another thread's dlopen is in progress, so the object is relocated and its
 *    RELRO protected before we touch it (glibc lists an object before it relocates it: a scan
 *    beside the loader once crashed the dlopen, tests/integration/test_cupti_dlopen_race.sh),
 *  - keeps it from being unloaded while we read and write it.
 *
 * When to look again (interpose_due): the process's virtual size (/proc/self/stat, one read per
 * POLL_NS) moves whenever mappings come or go; a scan follows, paced so that scans take at
 * most 1/SCAN_PACE of the time (a large PyTorch process's maps take milliseconds to read).
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#include "cupti/interpose.h"

#if defined(__x86_64__)
#define R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB_DAT  R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB_DAT  R_AARCH64_GLOB_DAT
#endif

#define SEEN_CAP     4096			/* objects remembered as scanned */
#define POLL_NS	     (50 * 1000000ull)		/* how often the virtual size is read */
#define SCAN_GAP_NS  (50 * 1000000ull)		/* scans at least this far apart */
#define SCAN_PACE    500			/* ... and 500 times their own CPU time apart */

static pthread_mutex_t scan_mu = PTHREAD_MUTEX_INITIALIZER;
/*
 * Objects scanned (their first mapping and file), skipped until their mapping goes; where a
 * slot was rewritten, one of them, so that an object unloaded and loaded again at the same
 * place between two scans (its slots fresh again) is noticed and scanned again.
 */
static struct seen {
	uintptr_t base;
	uint64_t inode;
	void **slot;
	void *fn;
} seen[SEEN_CAP];
static size_t nseen;
static unsigned long long last_vsize, scans;
static uint64_t next_poll_ns, next_scan_ns;

/* The process's mappings at the start of a scan, sorted as the kernel lists them. */
struct map_range {
	uintptr_t start, end;
	uint64_t inode;
	uint32_t path;	/* offset in paths[] (offset-0 file mappings only; 0: none) */
	bool readable, writable, off0;
};
static struct map_range *maps;
static size_t nmaps, maps_cap;
static char *paths;
static size_t paths_len, paths_cap;

struct scan_ctx {
	struct hook *hooks;
	size_t n;
	int patched;
	int ncupti;	/* libcupti copies loaded (files named "libcupti.so...") */
	void **slot;	/* the current object's first slot rewritten, and what it now holds */
	void *fn;
};

static uint32_t add_path(const char *p)
{
	size_t len = strlen(p) + 1;
	uint32_t at;

	if (paths_len + len > paths_cap) {
		size_t cap = paths_cap ? 2 * paths_cap : 65536;
		char *np;

		while (cap < paths_len + len)
			cap *= 2;
		np = realloc(paths, cap);
		if (!np)
			return 0;
		paths = np;
		paths_cap = cap;
	}
	if (!paths_len)
		paths[paths_len++] = 0;	/* offset 0 stands for "no path" */
	at = (uint32_t)paths_len;
	memcpy(paths + paths_len, p, len);
	paths_len += len;
	return at;
}

/* Parses one "start-end perms offset dev inode path" line of /proc/self/maps into maps[]. */
static void add_map_line(const char *l)
{
	struct map_range m = { 0 };
	unsigned long long off, ino;
	char *end;
	const char *p;

	m.start = strtoull(l, &end, 16);
	if (*end != '-')
		return;
	m.end = strtoull(end + 1, &end, 16);
	if (*end != ' ' || !end[1] || !end[2] || !end[3] || (end[4] != 'p' && end[4] != 's'))
		return;
	m.readable = end[1] == 'r';
	m.writable = end[2] == 'w';
	off = strtoull(end + 5, &end, 16);
	if (*end != ' ')
		return;
	end = strchr(end + 1, ' ');	/* past "dev" */
	if (!end)
		return;
	ino = strtoull(end + 1, &end, 10);
	m.inode = ino;
	m.off0 = off == 0 && ino != 0;
	for (p = end; *p == ' '; p++)
		;
	if (m.off0 && *p == '/')
		m.path = add_path(p);
	if (nmaps == maps_cap) {
		size_t cap = maps_cap ? 2 * maps_cap : 1024;
		struct map_range *nm = realloc(maps, cap * sizeof(*nm));

		if (!nm)
			return;
		maps = nm;
		maps_cap = cap;
	}
	maps[nmaps++] = m;
}

/*
 * Calls fn on each line of /proc/self/maps (without its newline; cut at 4 KiB) until it returns
 * false. true when the file was read to its end.
 */
static bool maps_lines(bool (*fn)(const char *line, void *ctx), void *ctx)
{
	char buf[8192], line[4200];
	size_t ll = 0;
	ssize_t r;
	bool eof = false;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	while ((r = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < r; i++) {
			if (buf[i] != '\n') {
				if (ll < sizeof(line) - 1)
					line[ll++] = buf[i];
				continue;
			}
			line[ll] = 0;
			ll = 0;
			if (!fn(line, ctx))
				goto out;	/* the caller has what it wanted */
		}
	}
	eof = r == 0;
out:
	close(fd);
	return eof;
}

static bool add_map_cb(const char *line, void *ctx)
{
	(void)ctx;
	add_map_line(line);
	return true;
}

/* Snapshot of /proc/self/maps into maps[]. */
static bool read_maps(void)
{
	nmaps = 0;
	paths_len = 0;
	return maps_lines(add_map_cb, NULL) && nmaps > 0;
}

struct prot_query {
	uintptr_t a;
	int writable;	/* -1: no mapping holds a */
};

static bool prot_cb(const char *line, void *ctx)
{
	struct prot_query *q = ctx;
	char *end;
	unsigned long long s = strtoull(line, &end, 16), e;

	if (*end != '-')
		return true;
	e = strtoull(end + 1, &end, 16);
	if (*end != ' ' || !end[1] || q->a < s || q->a >= e)
		return true;
	q->writable = end[2] == 'w';	/* "rw-p": the second letter */
	return false;
}

/* Whether the page holding a is writable now (a fresh read, not the scan's snapshot); -1: none. */
static int writable_now(uintptr_t a)
{
	struct prot_query q = { a, -1 };

	maps_lines(prot_cb, &q);
	return q.writable;
}

/* The snapshot's mapping that holds a (NULL: none). */
static const struct map_range *map_of(uintptr_t a)
{
	size_t lo = 0, hi = nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (a < maps[mid].start)
			hi = mid;
		else if (a >= maps[mid].end)
			lo = mid + 1;
		else
			return &maps[mid];
	}
	return NULL;
}

/* The process's virtual size (field 23 of /proc/self/stat); 0 if unreadable. */
static unsigned long long read_vsize(void)
{
	static int fd = -1;
	char buf[1024], *p;
	ssize_t r;
	unsigned long long v = 0;

	if (fd < 0)
		fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	r = pread(fd, buf, sizeof(buf) - 1, 0);
	if (r <= 0)
		return 0;
	buf[r] = 0;
	p = strrchr(buf, ')');	/* the name may hold spaces and parentheses */
	for (int field = 2; p && field < 23; field++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoull(p + 1, NULL, 10);
	return v;
}

static bool in_loads(const struct dl_phdr_info *info, uintptr_t a)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t s = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && a >= s && a < s + ph->p_memsz)
			return true;
	}
	return false;
}

/* Is the slot's page writable as loaded (a PT_LOAD with PF_W)? */
static bool writable_load(const struct dl_phdr_info *info, uintptr_t a)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t s = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && a >= s && a + sizeof(void *) <= s + ph->p_memsz)
			return ph->p_flags & PF_W;
	}
	return false;
}

/* Writes fn into slot; pages the loader made read-only (RELRO) are opened for the write. */
static bool write_slot(const struct dl_phdr_info *info, const ElfW(Phdr) *relro, void **slot,
		       void *fn)
{
	uintptr_t a = (uintptr_t)slot, page = (uintptr_t)sysconf(_SC_PAGESIZE);
	bool ro = false;

	if (!writable_load(info, a))
		return false;
	if (relro) {
		/* the loader protects whole pages only: the tail page of RELRO stays writable */
		uintptr_t s = (info->dlpi_addr + relro->p_vaddr) & ~(page - 1);
		uintptr_t e = (info->dlpi_addr + relro->p_vaddr + relro->p_memsz) & ~(page - 1);
		const struct map_range *m = map_of(a);

		/* and where something made it writable again, it is left as it was found */
		ro = a >= s && a < e && !(m && m->writable);
		/*
		 * The snapshot was read before the object was pinned: a loader still relocating it
		 * then (its RELRO writable) has protected it since (the pin waited for it). Writing
		 * through the stale "writable" crashed (test_cupti_dlopen_race.sh, one run in ~30
		 * on a loaded machine); a fresh look decides.
		 */
		if (a >= s && a < e && !ro && writable_now(a) == 0)
			ro = true;
	}
	if (ro && mprotect((void *)(a & ~(page - 1)), page, PROT_READ | PROT_WRITE))
		return false;
	__atomic_store_n(slot, fn, __ATOMIC_RELEASE);	/* aligned: callers see old or new */
	if (ro)
		mprotect((void *)(a & ~(page - 1)), page, PROT_READ);
	return true;
}

/* A d_ptr of the dynamic section: glibc relocates them in place on most targets, not all. */
static uintptr_t dptr(const struct dl_phdr_info *info, ElfW(Addr) v)
{
	return v < info->dlpi_addr ? info->dlpi_addr + v : v;
}

static void scan_relocs(const struct dl_phdr_info *info, const ElfW(Phdr) *relro,
			const ElfW(Rela) *rel, size_t bytes, const ElfW(Sym) *symtab,
			const char *strtab, struct scan_ctx *ctx)
{
	for (size_t i = 0; i < bytes / sizeof(*rel); i++) {
		unsigned long type = ELF64_R_TYPE(rel[i].r_info), sym = ELF64_R_SYM(rel[i].r_info);
		const char *name;
		void **slot, *cur;

		if ((type != R_JUMP_SLOT && type != R_GLOB_DAT) || !sym)
			continue;
		name = strtab + symtab[sym].st_name;
		if (!((name[0] == 'c' && name[1] == 'u') || (name[0] == 'd' && name[1] == 'l')))
			continue;
		for (size_t h = 0; h < ctx->n; h++) {
			if (!ctx->hooks[h].real || strcmp(name, ctx->hooks[h].name))
				continue;
			slot = (void **)(info->dlpi_addr + rel[i].r_offset);
			cur = *slot;
			/*
			 * Bound to the libcupti whose functions we wrap, or not bound yet (a lazy
			 * PLT slot points into its own object) where only one copy is loaded. A
			 * slot bound elsewhere (a second libcupti, another tool's hook) is left.
			 */
			if (cur != ctx->hooks[h].fn &&
			    (cur == ctx->hooks[h].real ||
			     (ctx->ncupti <= 1 && in_loads(info, (uintptr_t)cur))) &&
			    write_slot(info, relro, slot, ctx->hooks[h].fn)) {
				ctx->patched++;
				if (!ctx->slot) {
					ctx->slot = slot;
					ctx->fn = ctx->hooks[h].fn;
				}
			}
			break;
		}
	}
}

/* Reads one loaded object's dynamic section and rewrites the slots of hooked names. */
static void scan_dynamic(const struct dl_phdr_info *info, const ElfW(Dyn) *dynv,
			 struct scan_ctx *ctx)
{
	const ElfW(Phdr) *relro = NULL;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const ElfW(Rela) *jmprel = NULL, *rela = NULL;
	size_t jmprel_sz = 0, rela_sz = 0;
	long pltrel = DT_RELA;

	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO)
			relro = &info->dlpi_phdr[i];
	for (const ElfW(Dyn) *d = dynv; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB: symtab = (const void *)dptr(info, d->d_un.d_ptr); break;
		case DT_STRTAB: strtab = (const void *)dptr(info, d->d_un.d_ptr); break;
		case DT_JMPREL: jmprel = (const void *)dptr(info, d->d_un.d_ptr); break;
		case DT_PLTRELSZ: jmprel_sz = d->d_un.d_val; break;
		case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
		case DT_RELA: rela = (const void *)dptr(info, d->d_un.d_ptr); break;
		case DT_RELASZ: rela_sz = d->d_un.d_val; break;
		default: break;
		}
	}
	if (!symtab || !strtab)
		return;
	if (jmprel && pltrel == DT_RELA)
		scan_relocs(info, relro, jmprel, jmprel_sz, symtab, strtab, ctx);
	if (rela)
		scan_relocs(info, relro, rela, rela_sz, symtab, strtab, ctx);
}

/* n bytes of our own memory that may be unmapped meanwhile: false where they are gone. */
static bool read_own(const void *p, void *out, size_t n)
{
	struct iovec local = { out, n }, remote = { (void *)p, n };

	return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n;
}

/*
 * One file mapped at offset 0 (m): pinned through the loader, checked to be the object the
 * loader mapped there, scanned, let go. `exe`: the main program (never unloaded; the loader
 * knows it by no path).
 */
static void scan_object(const struct map_range *m, bool exe, struct scan_ctx *ctx)
{
	const char *path = paths + m->path;
	void *h = exe ? dlopen(NULL, RTLD_LAZY) : dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), low = UINTPTR_MAX;
	ElfW(Phdr) ph[64];	/* copies: the mapping read may be another one of the file */
	struct link_map *lm = NULL;
	struct dl_phdr_info info;
	ElfW(Ehdr) eh;

	if (!h) {
		dlerror();	/* not loaded in our namespace: a data mapping, another namespace */
		return;
	}
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) || !lm || !lm->l_ld || !m->readable ||
	    !read_own((const void *)m->start, &eh, sizeof(eh)) ||
	    memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
	    eh.e_phentsize != sizeof(ElfW(Phdr)) || !eh.e_phnum || eh.e_phnum > 64 ||
	    eh.e_phoff + (uintptr_t)eh.e_phnum * sizeof(ElfW(Phdr)) > m->end - m->start ||
	    !read_own((const void *)(m->start + eh.e_phoff), ph, eh.e_phnum * sizeof(ph[0])))
		goto out;
	info = (struct dl_phdr_info){ .dlpi_addr = lm->l_addr, .dlpi_name = path,
				      .dlpi_phdr = ph, .dlpi_phnum = eh.e_phnum };
	for (int i = 0; i < info.dlpi_phnum; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr < low)
			low = ph[i].p_vaddr;
	/* the loader's object is the one mapped here (not a second mapping of the same file):
	 * from here on its memory is read in place, pinned */
	if (low != UINTPTR_MAX && lm->l_addr + (low & ~(page - 1)) == m->start)
		scan_dynamic(&info, lm->l_ld, ctx);
out:
	if (!exe)
		dlclose(h);
}

/* Seen and unchanged (its rewritten slot still ours)? One that changed is forgotten. */
static bool was_seen(uintptr_t base, uint64_t inode)
{
	for (size_t i = 0; i < nseen; i++) {
		void *cur;

		if (seen[i].base != base || seen[i].inode != inode)
			continue;
		if (!seen[i].slot || (read_own(seen[i].slot, &cur, sizeof(cur)) && cur == seen[i].fn))
			return true;
		seen[i] = seen[--nseen];	/* loaded again since: its slots are fresh */
		return false;
	}
	return false;
}

/* Forgets objects whose first mapping is gone (unloaded: the address may hold another). */
static void prune_seen(void)
{
	for (size_t i = 0; i < nseen; i++) {
		const struct map_range *m = map_of(seen[i].base);

		if (!m || m->start != seen[i].base || m->inode != seen[i].inode || !m->off0)
			seen[i--] = seen[--nseen];
	}
}

/* The calling thread's CPU time in ns (0 if unreadable). */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

bool interpose_due(void)
{
	uint64_t now = inject_mono_now();
	unsigned long long v;

	if (now < __atomic_load_n(&next_poll_ns, __ATOMIC_RELAXED) ||
	    now < __atomic_load_n(&next_scan_ns, __ATOMIC_RELAXED))
		return false;
	__atomic_store_n(&next_poll_ns, now + POLL_NS, __ATOMIC_RELAXED);
	v = read_vsize();
	return !v || v != __atomic_load_n(&last_vsize, __ATOMIC_RELAXED);
}

int interpose_scan(struct hook *hooks, size_t n, const void *skip_addr)
{
#if defined(R_JUMP_SLOT)
	static char exe[4096];
	static bool exe_known;
	struct scan_ctx ctx = { .hooks = hooks, .n = n };
	const struct map_range *self, *skip;
	uint64_t t0 = inject_mono_now(), c0 = thread_cpu_ns(), self_ino, skip_ino = 0;
	unsigned long long vsize;

	pthread_mutex_lock(&scan_mu);
	if (!exe_known) {
		ssize_t r = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

		exe[r > 0 ? r : 0] = 0;
		exe_known = true;
	}
	/* the size first: a mapping made during the scan moves it again, and the next poll sees it */
	vsize = read_vsize();
	if (!read_maps())
		goto out;
	self = map_of((uintptr_t)&scan_object);
	skip = skip_addr ? map_of((uintptr_t)skip_addr) : NULL;
	self_ino = self ? self->inode : 0;
	skip_ino = skip ? skip->inode : 0;
	for (size_t i = 0; i < nmaps; i++)
		if (maps[i].path && strstr(paths + maps[i].path, "/libcupti.so"))
			ctx.ncupti++;
	prune_seen();
	for (size_t i = 0; i < nmaps; i++) {
		const struct map_range *m = &maps[i];

		if (!m->path || was_seen(m->start, m->inode))
			continue;
		ctx.slot = NULL;
		ctx.fn = NULL;
		if (m->inode != self_ino && m->inode != skip_ino)	/* ours, libcupti: CUPTI's own */
			scan_object(m, exe[0] && !strcmp(paths + m->path, exe), &ctx);
		if (nseen < SEEN_CAP)	/* past the cap: looked at again next time, harmlessly */
			seen[nseen++] = (struct seen){ m->start, m->inode, ctx.slot, ctx.fn };
	}
	__atomic_store_n(&last_vsize, vsize, __ATOMIC_RELAXED);
	scans++;
out:
	{
		/* paced by its CPU time: a pin's wait for another thread's loader (hundreds of ms
		 * beside a slow load) costs none, and put the next scans minutes away */
		uint64_t t1 = inject_mono_now(), gap = (thread_cpu_ns() - c0) * SCAN_PACE;

		inject_dbg("interpose: scan %llu: %zu mappings, %d slots, %llu us (%llu us of CPU)",
			   scans, nmaps, ctx.patched, (unsigned long long)(t1 - t0) / 1000,
			   (unsigned long long)(gap / SCAN_PACE) / 1000);

		__atomic_store_n(&next_scan_ns, t1 + (gap > SCAN_GAP_NS ? gap : SCAN_GAP_NS),
				 __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&scan_mu);
	return ctx.patched;
#else
	(void)hooks, (void)n, (void)skip_addr;
	return 0;
#endif
}
