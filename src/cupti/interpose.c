// SPDX-License-Identifier: Apache-2.0
/*
 * GOT interposition inside the workload process: the callers of a few CUPTI entry points (and
 * of dlsym) in every other loaded object are sent to our wrappers, by rewriting the slots of
 * their PLT JUMP_SLOT and GLOB_DAT relocations, found through dl_iterate_phdr and each object's
 * dynamic section (a RELRO page is made writable for the write and read-only again). Our own
 * library and libcupti are left alone, so their calls go straight to CUPTI.
 */
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
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

struct scan_ctx {
	struct hook *hooks;
	size_t n;
	const void *skip_addr;
	int patched;
	int ncupti;	/* libcupti copies loaded (names "libcupti.so...") */
};

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
	if (nseen < SEEN_CAP)
		seen[nseen++] = (struct seen){ info->dlpi_addr, info->dlpi_phdr };
	if (in_loads(info, (uintptr_t)&each_object) ||
	    (ctx->skip_addr && in_loads(info, (uintptr_t)ctx->skip_addr)))
		return 0;	/* ours, libcupti: their calls are CUPTI's own */
	for (int i = 0; i < info->dlpi_phnum; i++) {
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = &info->dlpi_phdr[i];
		else if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO)
			relro = &info->dlpi_phdr[i];
	}
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

	dl_iterate_phdr(count_objects, c);
	return c[0] != __atomic_load_n(&seen_adds, __ATOMIC_RELAXED) ||
	       c[1] != __atomic_load_n(&seen_subs, __ATOMIC_RELAXED);
}

int interpose_scan(struct hook *hooks, size_t n, const void *skip_addr)
{
#if defined(R_JUMP_SLOT)
	struct scan_ctx ctx = { hooks, n, skip_addr, 0, 0 };
	unsigned long long c[2] = { 0, 0 };

	pthread_mutex_lock(&scan_mu);
	dl_iterate_phdr(count_objects, c);
	dl_iterate_phdr(count_cupti, &ctx.ncupti);
	if (c[1] != seen_subs)
		nseen = 0;	/* something was unloaded: an address may now hold another object */
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
