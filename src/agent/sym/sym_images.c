/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The symbolizer's ELF images, keyed by build-id and shared by every file and mapping that has
 * it (symbol tables LRU-evicted under a byte cap; debug files, .eh_frame starts, the vDSO), and
 * the file identities (dev, inode, mtime, size) that lead a mapping to its image.
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

/* ---- images --------------------------------------------------------------------------- */

static void image_unload(struct symbolizer *s, struct image *img)
{
	if (!img->loaded || (img->pinned && img->refs > 0))
		return;
	list_del(&img->lru);
	s->cache_bytes -= img->bytes;
	symt_done(&img->tab);
	free(img->fde);
	img->fde = NULL;
	img->nfde = 0;
	u64map_done(&img->names);
	memset(&img->names, 0, sizeof(img->names));
	img->bytes = 0;
	img->loaded = false;
}

void sym_image_put(struct symbolizer *s, struct image *img)
{
	struct image **pp;

	if (!img || --img->refs > 0)
		return;
	image_unload(s, img);
	for (pp = &s->images[img->key_hash % IMAGE_BUCKETS]; *pp; pp = &(*pp)->hnext) {
		if (*pp == img) {
			*pp = img->hnext;
			break;
		}
	}
	free(img->key);
	free(img->segs);
	free(img);
}

/* Finds or creates the image for info (key: build-id, else file identity); returns it with a
 * new reference, or NULL on ENOMEM. Takes ownership of info->segs either way. */
static struct image *image_get(struct symbolizer *s, struct elf_info *info, const char *file_key)
{
	const char *key = info->build_id[0] ? info->build_id : file_key;
	uint64_t h = hash64(key, strlen(key), 0);
	struct image *img;

	for (img = s->images[h % IMAGE_BUCKETS]; img; img = img->hnext) {
		if (img->key_hash == h && !strcmp(img->key, key)) {
			s->st.elf_cache_hits++;
			img->refs++;
			free(info->segs);
			info->segs = NULL;
			return img;
		}
	}
	img = calloc(1, sizeof(*img));
	if (!img)
		goto out_nomem;
	img->key = strdup(key);
	img->build_id = sym_intern(s, info->build_id);
	if (!img->key || !img->build_id)
		goto out_nomem;
	img->key_hash = h;
	img->segs = info->segs;
	img->nsegs = info->nsegs;
	info->segs = NULL;
	img->refs = 1;
	list_init(&img->lru);
	img->hnext = s->images[h % IMAGE_BUCKETS];
	s->images[h % IMAGE_BUCKETS] = img;
	return img;
out_nomem:
	if (img)
		free(img->key);
	free(img);
	free(info->segs);
	info->segs = NULL;
	return NULL;
}

void sym_evict_images(struct symbolizer *s, struct image *keep)
{
	while (s->cache_bytes > s->lim.elf_cache_bytes && s->loaded.prev != &s->loaded) {
		struct image *victim = container_of(s->loaded.prev, struct image, lru);

		if (victim == keep)
			break;
		image_unload(s, victim);
	}
}

static int open_mapping(pid_t pid, const struct mapping *m, struct stat *ret_st)
{
	return maps_open_file(pid, m->start, m->end, m->path, m->deleted, ret_st);
}

/*
 * A binary without .symtab: try its separate debug file by build-id, in the process's root,
 * then on the host. Replaces img->tab when the debug file has a .symtab; err (the result so
 * far) is returned unchanged otherwise.
 */
static int load_debug_file(struct symbolizer *s, struct image *img, pid_t pid, int err)
{
	char path[PATH_MAX + 64];
	bool from_symtab;
	struct symt t;

	for (int pass = 0; pass < 2; pass++) {
		int fd;

		if (pass == 0)
			snprintf(path, sizeof(path), "/proc/%d/root%s/.build-id/%.2s/%s.debug", pid,
				 s->debug_dir, img->build_id, img->build_id + 2);
		else
			snprintf(path, sizeof(path), "%s/.build-id/%.2s/%s.debug", s->debug_dir,
				 img->build_id, img->build_id + 2);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		s->st.elf_opened++;
		if (!elf_read_symbols(fd, &t, &from_symtab)) {
			if (from_symtab) {
				close(fd);
				symt_done(&img->tab);
				img->tab = t;
				return 0;
			}
			symt_done(&t);
		}
		close(fd);
	}
	return err;
}

/*
 * Function starts of a binary without .symtab, from its FDEs (one per function, also for the
 * static functions .dynsym leaves out). Nothing kept when it has no CFI or text over 4 GiB.
 */
static void load_fde_starts(struct image *img, int fd)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	const char *source;
	uint64_t *starts;
	size_t n, k = 0;

	if (!elf)
		return;
	if (!uw_fde_starts(elf, &starts, &n, &source)) {
		if (n && starts[n - 1] - starts[0] <= UINT32_MAX &&
		    (img->fde = malloc(n * sizeof(*img->fde)))) {
			img->fde_base = starts[0];
			for (size_t i = 0; i < n; i++)
				if (!k || starts[i] - img->fde_base != img->fde[k - 1])
					img->fde[k++] = (uint32_t)(starts[i] - img->fde_base);
			img->nfde = k;
		}
		free(starts);
	}
	elf_end(elf);
}

/* "module+0xSTART" for vaddr in an FDE of img's stripped code, with *ret_start; NULL if none. */
const char *sym_fde_name(struct symbolizer *s, struct image *img, const char *module,
			 uint64_t vaddr, uint64_t *ret_start)
{
	const char *base = strrchr(module, '/');
	size_t lo = 0, hi = img->nfde;
	uint64_t rel, start;
	char buf[300];

	if (!img->nfde || vaddr < img->fde_base || vaddr - img->fde_base > UINT32_MAX)
		return NULL;
	rel = vaddr - img->fde_base;
	while (hi - lo > 1) {	/* the last start <= rel */
		size_t mid = lo + (hi - lo) / 2;

		if (img->fde[mid] <= rel)
			lo = mid;
		else
			hi = mid;
	}
	/* past the last FDE: only as far as a function reaches (as symt_finish's 64 KiB) */
	if (lo + 1 == img->nfde && rel - img->fde[lo] >= (64 << 10))
		return NULL;
	start = img->fde_base + img->fde[lo];
	*ret_start = start;
	snprintf(buf, sizeof(buf), "%s+0x%" PRIx64, base ? base + 1 : module, start);
	return sym_intern(s, buf);
}

static int open_gone_mapping(const struct mapping *m, struct stat *ret_st);

/* Loads img's symbols, reopening the file through pid's mapping m. 0 or -errno. */
int sym_image_load(struct symbolizer *s, struct image *img, pid_t pid, const struct mapping *m)
{
	bool from_symtab = false;
	struct elf_info info;
	int fd, err;

	if (img->loaded)
		return 0;
	if (img->no_symbols)
		return -ENODATA;
	if (img->load_failed_ns && mono_ns() - img->load_failed_ns < s->lim.reread_interval_ns)
		return -ENOENT;
	fd = open_mapping(pid, m, NULL);
	if (fd < 0 && img->build_id[0]) {
		struct stat st;

		/* The process is gone: the host's file, if it still has the same build-id (by
		 * device and inode first; overlayfs shows other ones in /proc maps than stat) */
		fd = open_gone_mapping(m, &st);
		if (fd < 0)
			fd = open(m->path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			bool same = !elf_read_info(fd, &info) &&
				    !strcmp(info.build_id, img->build_id);

			free(info.segs);
			if (!same) {
				close(fd);
				fd = -ENOENT;
			}
		}
	}
	if (fd < 0) {
		img->load_failed_ns = mono_ns();
		return fd < 0 ? -ENOENT : fd;
	}
	s->st.elf_opened++;
	err = elf_read_symbols(fd, &img->tab, &from_symtab);
	if (err == -ENODATA || (!err && !from_symtab))
		load_fde_starts(img, fd);
	close(fd);
	if ((err == -ENODATA || (!err && !from_symtab)) && img->build_id[0] && s->debug_dir) {
		const struct symt_ent *before = img->tab.e;

		err = load_debug_file(s, img, pid, err);
		if (!err && img->tab.e != before && img->fde) {
			/* a .symtab from the debug file: it names them all */
			free(img->fde);
			img->fde = NULL;
			img->nfde = 0;
		}
	}
	if (err == -ENODATA && img->nfde)
		err = 0;	/* no symbols at all, but function bounds from the CFI */
	if (err == -ENODATA || err == -ENOEXEC) {
		img->no_symbols = true;
		return err;
	}
	if (err) {
		free(img->fde);
		img->fde = NULL;
		img->nfde = 0;
		return err;
	}
	img->loaded = true;
	img->load_failed_ns = 0;
	img->bytes = symt_bytes(&img->tab) + img->nfde * sizeof(*img->fde);
	s->cache_bytes += img->bytes;
	list_add_head(&s->loaded, &img->lru);
	sym_evict_images(s, img);
	return 0;
}

/* This process's vDSO mapping (maps_each()): its size into s->vdso_size. */
static int vdso_mapping(const struct maps_line *l, void *ctx)
{
	struct symbolizer *s = ctx;

	if (strcmp(l->path, "[vdso]") || l->start != getauxval(AT_SYSINFO_EHDR))
		return 0;
	s->vdso_size = l->end - l->start;
	return 1;
}

/* Builds the vDSO image from this process's own copy (once). NULL if unavailable. */
static struct image *vdso_image(struct symbolizer *s)
{
	uint64_t base = getauxval(AT_SYSINFO_EHDR);
	char key[32];
	struct elf_info info;
	struct image *img;
	void *copy = NULL;

	if (s->vdso_tried)
		return s->vdso;
	s->vdso_tried = true;
	if (base)
		maps_each(getpid(), 0, vdso_mapping, s);
	if (!s->vdso_size || !(copy = malloc(s->vdso_size)))
		goto out;
	memcpy(copy, (const void *)(uintptr_t)base, s->vdso_size);
	snprintf(key, sizeof(key), "vdso:%" PRIx64, s->vdso_size);
	img = calloc(1, sizeof(*img));
	if (!img)
		goto out;
	if (elf_read_mem(copy, s->vdso_size, &info, &img->tab)) {
		free(img);
		goto out;
	}
	img->key = strdup(key);
	img->build_id = sym_intern(s, info.build_id);
	if (!img->key || !img->build_id) {
		symt_done(&img->tab);
		free(info.segs);
		free(img->key);
		free(img);
		goto out;
	}
	img->segs = info.segs;
	img->nsegs = info.nsegs;
	img->refs = 1;			/* s's own reference */
	img->loaded = img->pinned = true;
	list_init(&img->lru);
	img->key_hash = hash64(key, strlen(key), 0);
	img->hnext = s->images[img->key_hash % IMAGE_BUCKETS];
	s->images[img->key_hash % IMAGE_BUCKETS] = img;
	s->vdso = img;
out:
	free(copy);
	return s->vdso;
}

/* Mapping m's image when it is the vDSO (the agent's own copy, the same code in every native
 * process; a 32-bit process's has another size), with a new reference; else NULL. */
struct image *sym_vdso_of(struct symbolizer *s, const struct mapping *m)
{
	if (m->path != s->s_vdso || !vdso_image(s) || m->end - m->start != s->vdso_size)
		return NULL;
	s->vdso->refs++;
	return s->vdso;
}

/* ---- file identities ------------------------------------------------------------------ */

static uint64_t file_hash(uint64_t dev, uint64_t ino, int64_t mtime_ns, uint64_t size)
{
	uint64_t k[4] = { dev, ino, (uint64_t)mtime_ns, size };

	return hash64(k, sizeof(k), 0);
}

void sym_file_free(struct symbolizer *s, struct file_id *f)
{
	uint64_t h = file_hash(f->dev, f->ino, f->mtime_ns, f->size);
	struct file_id **pp = &s->files[h % FILE_BUCKETS];

	for (; *pp; pp = &(*pp)->hnext) {
		if (*pp == f) {
			*pp = f->hnext;
			break;
		}
	}
	list_del(&f->lru);
	sym_image_put(s, f->img);
	s->nfiles--;
	free(f);
}

/*
 * A mapping of a process that is gone, by its path on the host (through /proc/1/root: the
 * agent in a container with the host's pid namespace sees the host's files there), else in
 * the agent's own root: the file the process mapped only when it has the same device and
 * inode (not a container's file of that path, not a binary replaced since). An fd, or -errno.
 */
static int open_gone_mapping(const struct mapping *m, struct stat *ret_st)
{
	char path[PATH_MAX + 16];

	if (m->deleted || !m->ino || m->path[0] != '/')
		return -ENOENT;
	for (int pass = 0; pass < 2; pass++) {
		int fd;

		snprintf(path, sizeof(path), "%s%s", pass ? "" : "/proc/1/root", m->path);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (!fstat(fd, ret_st) && ret_st->st_ino == m->ino &&
		    ret_st->st_dev == makedev((unsigned)(m->dev >> 32), (unsigned)m->dev))
			return fd;
		close(fd);
	}
	return -ENOENT;
}

/*
 * The image of mapping m of pid, with a new reference, or NULL (not ELF, unreadable, ENOMEM).
 * A file seen before costs one stat(); a new file is opened once to read its build-id. (A file
 * swapped between the stat and the open is caught by the next maps read.)
 */
struct image *sym_mapping_image(struct symbolizer *s, pid_t pid, const struct mapping *m)
{
	struct elf_info info;
	struct file_id *f;
	struct stat st;
	char key[128];
	uint64_t h;
	char path[PATH_MAX + 64];
	int64_t mtime;
	int fd = -1;

	/* A known file costs one stat(); only a new one is opened. */
	snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, m->start,
		 m->end);
	if (stat(path, &st)) {
		fd = open_mapping(pid, m, &st);
		if (fd < 0)
			fd = open_gone_mapping(m, &st);
		if (fd < 0)
			return NULL;
	}
	mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	h = file_hash(st.st_dev, st.st_ino, mtime, st.st_size);
	for (f = s->files[h % FILE_BUCKETS]; f; f = f->hnext) {
		if (f->dev == st.st_dev && f->ino == st.st_ino && f->mtime_ns == mtime &&
		    f->size == (uint64_t)st.st_size) {
			if (fd >= 0)
				close(fd);
			list_move_head(&s->file_lru, &f->lru);
			if (!f->img)
				return NULL;
			s->st.elf_cache_hits++;
			f->img->refs++;
			return f->img;
		}
	}
	if (fd < 0)
		fd = open_mapping(pid, m, NULL);
	f = fd >= 0 ? calloc(1, sizeof(*f)) : NULL;
	if (!f) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->mtime_ns = mtime;
	f->size = st.st_size;
	s->st.elf_opened++;
	if (!elf_read_info(fd, &info)) {
		snprintf(key, sizeof(key), "file:%" PRIx64 ":%" PRIu64 ":%" PRId64 ":%" PRIu64,
			 f->dev, f->ino, f->mtime_ns, f->size);
		f->img = image_get(s, &info, key);
	}
	close(fd);
	f->hnext = s->files[h % FILE_BUCKETS];
	s->files[h % FILE_BUCKETS] = f;
	list_add_head(&s->file_lru, &f->lru);
	s->nfiles++;
	while (s->nfiles > s->lim.max_files && s->file_lru.prev != &f->lru)
		sym_file_free(s, container_of(s->file_lru.prev, struct file_id, lru));
	if (!f->img)
		return NULL;
	f->img->refs++;
	return f->img;
}
