// SPDX-License-Identifier: Apache-2.0
/*
 * GOT interposition inside the workload process: the callers of a few CUPTI entry points (and
 * of dlsym) in every other loaded object are sent to our wrappers, by rewriting the slots of
 * their PLT JUMP_SLOT and GLOB_DAT relocations, found through dl_iterate_phdr and each object's
 * dynamic section (a RELRO page is made writable for the write and read-only again). Our own
 * library and libcupti are left alone, so their calls go straight to CUPTI.
 *
 * An object that another thread is loading at that moment is left for a later scan: glibc
 * lists an object for dl_iterate_phdr before it relocates it, and protects its RELRO only once
 * relocation is done, so a RELRO page made read-only (or written) under the loader's feet
 * would crash the dlopen. An object with a RELRO page is scanned only once /proc/self/maps
 * shows that page read-only: the loader is done with it.
 */
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "cupti/interpose.h"

#if defined(__x86_64__)
#define R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB_DAT  R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB_DAT  R_AARCH64_GLOB_DAT
#endif

#define SEEN_CAP 4096	/* objects remembered as scanned (more: scanned again, harmlessly) */

static pthread_mutex_t scan_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long seen_adds = ~0ull, seen_subs = ~0ull;
static struct seen {
	ElfW(Addr) base;
	const void *phdr;
} seen[SEEN_CAP];
static size_t nseen;
#define DEFER_CAP   64	/* objects waiting for their loader, remembered with their tries */
#define DEFER_TRIES 100	/* scans (one per 10-ms tick) an object may wait; then left alone */
static struct waiting {
	ElfW(Addr) base;
	const void *phdr;
	unsigned tries;
} waiting[DEFER_CAP];
static size_t nwaiting;	/* > 0: an object was left for the next scan */

/* The process's mappings at the start of a scan: [start, end) and whether writable. */
struct map_range {
	uintptr_t start, end;
	bool writable;
};
static struct map_range *maps;
static size_t nmaps, maps_cap;

struct scan_ctx {
	struct hook *hooks;
	size_t n;
	const void *skip_addr;
	int patched;
	int ncupti;	/* libcupti copies loaded (names "libcupti.so...") */
	bool have_maps;	/* maps[] holds this scan's snapshot */
};

/* Parses one "start-end perms ..." line of /proc/self/maps into maps[]. */
static void add_map_line(const char *l)
{
	char *end;
	uintptr_t s = strtoull(l, &end, 16), e;

	if (*end != '-')
		return;
	e = strtoull(end + 1, &end, 16);
	if (*end != ' ' || end[1] == 0 || end[2] == 0)
		return;
	if (nmaps == maps_cap) {
		size_t cap = maps_cap ? 2 * maps_cap : 1024;
		struct map_range *m = realloc(maps, cap * sizeof(*m));

		if (!m)
			return;
		maps = m;
		maps_cap = cap;
	}
	maps[nmaps++] = (struct map_range){ s, e, end[2] == 'w' };
}

/* Snapshot of /proc/self/maps into maps[] (sorted as the kernel lists them). */
static bool read_maps(void)
{
	char buf[8192], line[512];
	size_t ll = 0;
	ssize_t r;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	nmaps = 0;
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
			add_map_line(line);
			ll = 0;
		}
	}
	close(fd);
	return r == 0 && nmaps > 0;
}

/* Is address a mapped and not writable in the snapshot (false also when not found)? */
static bool read_only_now(uintptr_t a)
{
	size_t lo = 0, hi = nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (a < maps[mid].start)
			hi = mid;
		else if (a >= maps[mid].end)
			lo = mid + 1;
		else
			return !maps[mid].writable;
	}
	return false;
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

		ro = a >= s && a < e;
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
			    write_slot(info, relro, slot, ctx->hooks[h].fn))
				ctx->patched++;
			break;
		}
	}
}

/*
 * An object whose RELRO is not read-only yet waits for the next scan, at most DEFER_TRIES
 * times (a RELRO page something else made writable again would otherwise be re-read forever);
 * then it is left alone for good: true. While DEFER_CAP objects wait, another one is retried
 * without being counted.
 */
static bool waited_enough(const struct dl_phdr_info *info)
{
	size_t i;

	for (i = 0; i < nwaiting; i++)
		if (waiting[i].base == info->dlpi_addr && waiting[i].phdr == info->dlpi_phdr)
			break;
	if (i == nwaiting) {
		if (nwaiting == DEFER_CAP)
			return false;
		waiting[nwaiting++] = (struct waiting){ info->dlpi_addr, info->dlpi_phdr, 0 };
	}
	if (++waiting[i].tries <= DEFER_TRIES)
		return false;
	inject_dbg("interpose: %s: RELRO still writable after %u scans; its slots left alone",
		   info->dlpi_name && *info->dlpi_name ? info->dlpi_name : "(main)", DEFER_TRIES);
	waiting[i] = waiting[--nwaiting];
	return true;
}

static int each_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct scan_ctx *ctx = arg;
	const ElfW(Phdr) *dyn = NULL, *relro = NULL;
	const ElfW(Dyn) *d;
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const ElfW(Rela) *jmprel = NULL, *rela = NULL;
	size_t jmprel_sz = 0, rela_sz = 0;
	long pltrel = DT_RELA;

	(void)size;
	if (info->dlpi_name && !strncmp(info->dlpi_name, "linux-vdso", 10))
		return 0;
	for (size_t i = 0; i < nseen; i++)
		if (seen[i].base == info->dlpi_addr && seen[i].phdr == info->dlpi_phdr)
			return 0;
	if (in_loads(info, (uintptr_t)&each_object) ||
	    (ctx->skip_addr && in_loads(info, (uintptr_t)ctx->skip_addr)))
		return 0;	/* ours, libcupti: their calls are CUPTI's own (scanned again, cheaply) */
	for (int i = 0; i < info->dlpi_phnum; i++) {
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = &info->dlpi_phdr[i];
		else if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO)
			relro = &info->dlpi_phdr[i];
	}
	if (relro) {
		uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
		uintptr_t rs = (info->dlpi_addr + relro->p_vaddr) & ~(page - 1);
		uintptr_t re = (info->dlpi_addr + relro->p_vaddr + relro->p_memsz) & ~(page - 1);

		if (rs < re && (!ctx->have_maps || !read_only_now(rs))) {
			if (!waited_enough(info))
				return 0;	/* the loader is not done with it: next scan */
			if (nseen < SEEN_CAP)	/* given up: seen, its slots never touched */
				seen[nseen++] = (struct seen){ info->dlpi_addr, info->dlpi_phdr };
			return 0;
		}
	}
	for (size_t i = 0; i < nwaiting; i++)
		if (waiting[i].base == info->dlpi_addr && waiting[i].phdr == info->dlpi_phdr)
			waiting[i--] = waiting[--nwaiting];
	if (nseen < SEEN_CAP)	/* past the cap: scanned again next time, harmlessly */
		seen[nseen++] = (struct seen){ info->dlpi_addr, info->dlpi_phdr };
	if (!dyn)
		return 0;
	for (d = (const void *)(info->dlpi_addr + dyn->p_vaddr); d->d_tag != DT_NULL; d++) {
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
		return 0;
	if (jmprel && pltrel == DT_RELA)
		scan_relocs(info, relro, jmprel, jmprel_sz, symtab, strtab, ctx);
	if (rela)
		scan_relocs(info, relro, rela, rela_sz, symtab, strtab, ctx);
	return 0;
}

static int count_cupti(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	if (info->dlpi_name && strstr(info->dlpi_name, "libcupti.so"))
		(*(int *)arg)++;
	return 0;
}

static int count_objects(struct dl_phdr_info *info, size_t size, void *arg)
{
	unsigned long long *c = arg;

	(void)size;
	c[0] = info->dlpi_adds;
	c[1] = info->dlpi_subs;
	return 1;	/* the counters are the same in every entry */
}

bool interpose_changed(void)
{
	unsigned long long c[2] = { 0, 0 };

	if (__atomic_load_n(&nwaiting, __ATOMIC_RELAXED))
		return true;	/* an object was left for this scan */
	dl_iterate_phdr(count_objects, c);
	return c[0] != __atomic_load_n(&seen_adds, __ATOMIC_RELAXED) ||
	       c[1] != __atomic_load_n(&seen_subs, __ATOMIC_RELAXED);
}

int interpose_scan(struct hook *hooks, size_t n, const void *skip_addr)
{
#if defined(R_JUMP_SLOT)
	struct scan_ctx ctx = { hooks, n, skip_addr, 0, 0, false };
	unsigned long long c[2] = { 0, 0 };

	pthread_mutex_lock(&scan_mu);
	/* before the objects: one listed after this snapshot is not in it, so it waits */
	ctx.have_maps = read_maps();
	dl_iterate_phdr(count_objects, c);
	dl_iterate_phdr(count_cupti, &ctx.ncupti);
	if (c[1] != seen_subs)
		nseen = nwaiting = 0;	/* something was unloaded: an address may now hold another object */
	dl_iterate_phdr(each_object, &ctx);
	__atomic_store_n(&seen_adds, c[0], __ATOMIC_RELAXED);
	__atomic_store_n(&seen_subs, c[1], __ATOMIC_RELAXED);
	pthread_mutex_unlock(&scan_mu);
	return ctx.patched;
#else
	(void)hooks, (void)n, (void)skip_addr;
	return 0;
#endif
}
