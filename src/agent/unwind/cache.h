/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unwind tables' on-disk cache: a table built once per node, kept in a directory across
 * processes and agent restarts, keyed by build-id and a fingerprint of the bytes the table is
 * built from (so a file replaced in place, same build-id or not, never gets a stale table),
 * written atomically, checked on every read, bounded in bytes (least recently used first out).
 */
#ifndef GPUSCOPE_UNWIND_CACHE_H
#define GPUSCOPE_UNWIND_CACHE_H

#include <stdint.h>
#include "agent/procs/elf.h"
#include "agent/unwind/table.h"

#define UW_CACHE_DIR_DEFAULT	"/var/lib/gpuscope/unwind-cache"
#define UW_CACHE_MAX_DEFAULT	(512ULL << 20)

struct uw_cache;

/*
 * Opens (creates, mode 0700) the cache in dir, bounded to max_bytes (0: the default), and
 * removes what an interrupted write left. NULL with errno set. Free with uw_cache__free().
 */
struct uw_cache *uw_cache__open(const char *dir, uint64_t max_bytes);
void uw_cache__free(struct uw_cache *c);

/*
 * What the table of the ELF file open as fd is a function of: its call-frame sections
 * (.eh_frame_hdr, .eh_frame, .debug_frame: names, addresses, sizes and bytes) and its PT_LOAD
 * segments (the mapping's bias comes from them), hashed. Two files with the same fingerprint
 * get the same table. 0, -ENOEXEC (not ELF), -ENOMEM. Any thread; reads the sections (a few
 * ms for libtorch's 20 MB of CFI).
 */
int uw_cfi_fingerprint(int fd, const struct elf_seg *segs, int nsegs, uint64_t *ret);

/*
 * The table cached under key into *ret (free with uw_table_done()). 0: a hit (the file is
 * marked used now); -ENOENT: none; -EBADMSG: the file was there but failed a check (magic,
 * version, length, key, checksum, layout): removed and counted, the caller builds anew.
 * Builder thread.
 */
int uw_cache__load(struct uw_cache *c, const char *key, struct uw_table *ret);

/*
 * Writes t under key (a temporary file renamed over the entry) and evicts the least recently
 * used entries past the bound. 0 or -errno (counted; the table is still good to use).
 */
int uw_cache__store(struct uw_cache *c, const char *key, const struct uw_table *t);

struct uw_cache_stats {
	uint64_t hits, misses, corrupt, stores, store_errors, evicted;
	uint64_t bytes, files, max_bytes;	/* on disk now (as this agent last counted) */
	uint64_t load_ns;			/* reading and checking hits */
};
/* Any thread. */
void uw_cache__stats(struct uw_cache *c, struct uw_cache_stats *ret);

#endif
