/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The symbolizer's state, shared by its files only (sym_images.c: images, files; symbolize.c:
 * processes, perf maps, lookups; sym_records.c: the mmap records; sym_kernel.c: kallsyms). Not
 * for other modules: its names (struct proc, struct image) are the symbolizer's own.
 */
#ifndef GPUSCOPE_SYM_STATE_H
#define GPUSCOPE_SYM_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "agent/sym/symbolize.h"
#include "agent/procs/elf.h"
#include "agent/procs/symtab.h"
#include "common/hmap.h"
#include "common/util.h"


#define PROC_BUCKETS  4096
#define FILE_BUCKETS  8192
#define IMAGE_BUCKETS 8192
/*
 * An exited process's maps are kept this long: its last stacks come after its exit event from
 * other rings (off-CPU at the exit, CUDA and CUPTI records flushed at exit, CPU samples of its
 * other threads tearing down), and /proc has nothing left to read by then. A pid reused within
 * it would be read with the old maps; reuse that fast needs the pid space to wrap in seconds.
 */
#define GONE_KEEP_NS (10 * NSEC_PER_SEC)
#define GONE_CAP 4096			/* exited processes waiting to be forgotten */

struct list {
	struct list *prev, *next;
};

static inline void list_init(struct list *h)
{
	h->prev = h->next = h;
}

static inline void list_del(struct list *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->prev = e->next = e;
}

static inline void list_add_head(struct list *h, struct list *e)
{
	e->next = h->next;
	e->prev = h;
	h->next->prev = e;
	h->next = e;
}

static inline void list_move_head(struct list *h, struct list *e)
{
	list_del(e);
	list_add_head(h, e);
}

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* One binary's contents, shared by every file and mapping with its build-id. */
struct image {
	struct image *hnext;
	struct list lru;		/* in symbolizer.loaded while tab is loaded */
	char *key;			/* build-id hex, or "file:dev:ino:mtime:size" without one */
	uint64_t key_hash;
	const char *build_id;		/* interned; "" if none */
	int refs;			/* file identities + mappings */
	struct elf_seg *segs;
	int nsegs;
	bool loaded, no_symbols;
	bool pinned;			/* the vDSO: built from memory, never evicted */
	uint64_t load_failed_ns;	/* last failed open (file gone): retried later */
	struct symt tab;
	/* Stripped code (no .symtab): where its functions start, from the CFI's FDEs, as
	 * offsets from fde_base; names "module+0xSTART" where no symbol covers an address. */
	uint32_t *fde;
	size_t nfde;
	uint64_t fde_base;
	size_t bytes;
	struct u64map names;		/* symbol index -> interned display (demangled) name */
};

/* One (dev, inode, mtime, size) seen through some process; remembers its image (or none). */
struct file_id {
	struct file_id *hnext;
	struct list lru;
	uint64_t dev, ino, size;
	int64_t mtime_ns;
	struct image *img;		/* ref held; NULL: not an ELF file */
};

struct mapping {
	uint64_t start, end, pgoff;
	uint64_t dev, ino;		/* as /proc/PID/maps shows them */
	const char *path;		/* interned; "[anon]" for anonymous */
	struct image *img;		/* ref held; NULL for anonymous, special or non-ELF */
	uint64_t t_ns;			/* mapped (mmap record) or read (/proc) at, mono */
	bool deleted;
	bool img_tried;			/* img looked for (a record's: at its first use) */
};

struct proc {
	struct proc *hnext;
	struct list lru;
	pid_t pid, nspid;		/* nspid: pid inside its own namespace, 0 until read */
	struct mapping *maps;		/* executable mappings sorted by start */
	size_t nmaps;
	struct mapping *prev;		/* the image before the last exec (its late samples) */
	size_t nprev;
	uint64_t maps_read_ns;
	uint64_t lost_at_read;		/* mmap records lost (the watch's count) at that read */
	uint64_t burst_ns;		/* start of the current run of quick re-reads */
	uint32_t burst_reads;		/* re-reads in it */
	struct symt pm;			/* perf map, once read */
	bool pm_read;
	int64_t pm_size, pm_mtime_ns;
	uint64_t pm_check_ns;
	uint64_t gone_ns;		/* exited at (mono): maps kept for late stacks, not re-read */
	bool from_records;		/* maps from mmap records only: /proc not read yet */
	pid_t fork_parent;		/* forked from a process not seen then: its maps on a miss */
};

struct kmodule {
	const char *name;		/* interned "[kernel.kallsyms]", "[ext4]", "[bpf]" */
	uint64_t start, limit;
};

struct symbolizer {
	struct symbolizer_limits lim;
	struct symbolizer_stats st;
	struct strtab strs;		/* every string handed out; until symbolizer__free() */
	struct proc *procs[PROC_BUCKETS];
	struct file_id *files[FILE_BUCKETS];
	struct image *images[IMAGE_BUCKETS];
	struct list proc_lru, file_lru, loaded;	/* most recently used first */
	uint32_t nprocs, nfiles;
	struct proc *last;		/* the previous call's: a stack's frames come together */
	uint64_t cache_bytes;
	const char *s_anon, *s_unknown, *s_kernel, *s_perfmap, *s_empty, *s_vdso;
	struct image *vdso;		/* our own [vdso]: the same code in every native process */
	uint64_t vdso_size;
	bool vdso_tried;
	char *debug_dir;		/* NULL: no separate debug files */
	/* kernel */
	struct symt ksyms;		/* aux: index into kmods + 1 */
	unsigned k_unknown_logged;	/* unknown kernel addresses logged */
	struct kmodule *kmods;
	size_t nkmods;
	struct u64map knames;
	bool k_read;
	uint64_t k_read_ns;
	const char *k_build_id;
	struct { pid_t pid; uint64_t ns; } gone[GONE_CAP];	/* FIFO of exits */
	size_t gone_head, gone_len;
	void (*on_exec)(void *ctx, pid_t pid, const char *comm);	/* symbolizer__on_exec() */
	void *on_exec_ctx;
	void (*on_map)(void *ctx, pid_t pid, const char *path);	/* symbolizer__on_map() */
	void *on_map_ctx;
	struct mmapwatch *mw;		/* the kernel's mmap records; NULL: /proc only */
};

/* str interned for s's lifetime; NULL on ENOMEM. */
const char *sym_intern(struct symbolizer *s, const char *str);
/* Display name of symbol i of tab, demangled and interned, cached in *names. NULL on ENOMEM. */
const char *sym_display_name(struct symbolizer *s, struct u64map *names, const struct symt *tab,
			     long i);
/* Drops a reference to img (NULL: none); the last one frees it. */
void sym_image_put(struct symbolizer *s, struct image *img);
/* Drops maps[0..n)'s image references and frees maps. */
void sym_maps_free(struct symbolizer *s, struct mapping *maps, size_t n);
/* pid's entry, or NULL; sym_proc_new() adds one without maps (NULL on ENOMEM; the callers of
 * symbolize.c's proc_get() evict beyond max_pids). */
struct proc *sym_proc_find(struct symbolizer *s, pid_t pid);
struct proc *sym_proc_new(struct symbolizer *s, pid_t pid);
/* Reads p's executable mappings from /proc/PID/maps. 0 or -errno. */
int sym_proc_read_maps(struct symbolizer *s, struct proc *p);
/* Drops p's mappings older than t (mono); how many are left. An exec's (exec) are kept as
 * p->prev, the image its late samples are of. */
size_t sym_maps_drop_before(struct symbolizer *s, struct proc *p, uint64_t t, bool exec);
/* Applies the mmap records read so far (sym_records.c); nothing without a watch. */
void sym_records_drain(struct symbolizer *s);
/* The entry of p's fork parent, read from /proc now if it has none; NULL when there is none
 * to read. No drain, no eviction: p stays valid. */
struct proc *sym_proc_of_parent(struct symbolizer *s, struct proc *p);

/* sym_images.c */
void sym_evict_images(struct symbolizer *s, struct image *keep);
/* "module+0xSTART" for vaddr in an FDE of img's stripped code, with *ret_start; NULL if none. */
const char *sym_fde_name(struct symbolizer *s, struct image *img, const char *module,
			 uint64_t vaddr, uint64_t *ret_start);
/* Loads img's symbols, reopening the file through pid's mapping m. 0 or -errno. */
int sym_image_load(struct symbolizer *s, struct image *img, pid_t pid, const struct mapping *m);
/* Mapping m's image when it is the vDSO (the agent's own copy, the same code in every native
 * process; a 32-bit process's has another size), with a new reference; else NULL. */
struct image *sym_vdso_of(struct symbolizer *s, const struct mapping *m);
void sym_file_free(struct symbolizer *s, struct file_id *f);
/*
 * The image of mapping m of pid, with a new reference, or NULL (not ELF, unreadable, ENOMEM).
 * A file seen before costs one stat(); a new file is opened once to read its build-id. (A file
 * swapped between the stat and the open is caught by the next maps read.)
 */
struct image *sym_mapping_image(struct symbolizer *s, pid_t pid, const struct mapping *m);

#endif
