/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Symbolizer: turns raw user-space addresses of a process and kernel addresses into function,
 * module, build-id and offsets. ELF .symtab/.dynsym (libelf) cached by build-id, per-pid
 * /proc/PID/maps (read through /proc/PID/map_files and /proc/PID/root, so containers and deleted
 * binaries resolve), /tmp/perf-PID.map for JITs, /proc/kallsyms for the kernel.
 */
#ifndef GPUSCOPE_SYMBOLIZE_H
#define GPUSCOPE_SYMBOLIZE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct symbolizer;

struct sym_frame {
	const char *function;	/* demangled name; NULL if unresolved. Owned by the symbolizer, valid until symbolizer__free() */
	const char *module;	/* path of the mapping as the process saw it; "[kernel.kallsyms]", "[vdso]", "[anon]", "[perf-map]" ...; owned likewise */
	const char *build_id;	/* lowercase hex GNU build-id or "" */
	uint64_t file_offset;	/* addr translated to a file offset in module (pprof Location.address); kernel: the address itself */
	uint64_t map_start, map_limit, map_pgoff;	/* the mapping (for pprof Mapping) */
	uint64_t sym_offset;	/* addr - symbol start; 0 if unresolved */
	bool kernel;
	bool unnamed;		/* function is "module+0xSTART": stripped code, bounds from its CFI */
};

/* New symbolizer with default limits. Returns NULL with errno set; free with symbolizer__free(). */
struct symbolizer *symbolizer__new(void);
/* Frees everything, including every string handed out in a sym_frame. Accepts NULL. */
void symbolizer__free(struct symbolizer *s);

/*
 * Resolve a user-space address of process pid (host pid). 0: function resolved (in stripped
 * code, a function no symbol covers is named "module+0xSTART" after its CFI: ret->unnamed);
 * -ENOENT: not resolved but *ret filled (module and offsets when the mapping is known, function
 * NULL; module "[unknown]" when no mapping contains addr); other -errno: bad arguments. Callers
 * pass addr-1 for return addresses themselves. Main-loop thread only.
 */
int symbolizer__user(struct symbolizer *s, pid_t pid, uint64_t addr, struct sym_frame *ret);

/*
 * Resolve a kernel address through /proc/kallsyms (read on first use, ~120 ms of CPU; re-read
 * at most once a minute on a miss, for new modules and BPF programs). 0 or -ENOENT (module
 * "[kernel.kallsyms]" filled). Main-loop thread only.
 */
int symbolizer__kernel(struct symbolizer *s, uint64_t addr, struct sym_frame *ret);

/* Call when a pid is first seen, so its maps are read while it is alive (cheap when cached).
 * 0 or -errno (-ESRCH: gone). */
int symbolizer__pid_seen(struct symbolizer *s, pid_t pid);

/*
 * Exec at t_ns (CLOCK_MONOTONIC; 0: now): forget its maps older than that, and its perf map
 * (the ELF cache by build-id stays). Exit: keep them for 10 s, without reading /proc again,
 * for the stacks that come after the exit event.
 */
void symbolizer__pid_gone(struct symbolizer *s, pid_t pid, bool exec, uint64_t t_ns);

/*
 * Follows the kernel's records of executable mappings, execs and forks (mmapwatch.h), so that
 * the addresses of a process that exited before its maps were read still resolve (a compile
 * loop's `as`, a shell's `mkdir`): its mappings as the records list them, its files opened by
 * their host path where device and inode match. The records are read on a lookup that needs
 * them and by symbolizer__poll(). 0 or -errno (*ret_why, static, says why).
 */
int symbolizer__watch_mmaps(struct symbolizer *s, const char **ret_why);
/* Reads the mmap records that came since the last read (the ring holds ~2000 mappings per
 * CPU; call it every tick). Main-loop thread only. */
void symbolizer__poll(struct symbolizer *s);
/*
 * fn(ctx, pid, comm) for every exec the mmap records tell (comm: the new name), as the records
 * are read: run.c passes it on to the label builder. Main-loop thread only.
 */
void symbolizer__on_exec(struct symbolizer *s, void (*fn)(void *ctx, pid_t pid, const char *comm),
			 void *ctx);
/*
 * fn(ctx, pid, path) for every executable mapping the mmap records tell, as they are read: run.c
 * passes libcuda's on to the GPU process tracker. Main-loop thread only.
 */
void symbolizer__on_map(struct symbolizer *s, void (*fn)(void *ctx, pid_t pid, const char *path),
			void *ctx);
/* Records read and lost (a full ring) since symbolizer__watch_mmaps(). */
void symbolizer__mmap_stats(const struct symbolizer *s, uint64_t *ret_records, uint64_t *ret_lost);

struct symbolizer_stats {
	uint64_t resolved, unknown, unnamed, elf_opened, elf_cache_hits, maps_reads, perfmap_reads;
};
void symbolizer__stats(const struct symbolizer *s, struct symbolizer_stats *ret);

/* Tunables (defaults in parentheses). */
struct symbolizer_limits {
	uint64_t elf_cache_bytes;	/* symbol tables in memory, LRU-evicted beyond (128 MiB) */
	uint32_t max_pids;		/* per-pid maps caches, LRU-evicted beyond (4096) */
	uint32_t max_files;		/* file identities (dev, inode, mtime) remembered (8192) */
	uint64_t reread_interval_ns;	/* min gap between re-reads of a pid's maps, perf map (250 ms) */
};
void symbolizer__set_limits(struct symbolizer *s, const struct symbolizer_limits *l);

/* Bytes currently held by cached ELF symbol tables (for /metrics). */
uint64_t symbolizer__cache_bytes(const struct symbolizer *s);

/*
 * Where separate debug files are looked up for binaries without .symtab (Debian's -dbgsym
 * packages): DIR/.build-id/xx/yyyy.debug, first inside the process's root, then on the host.
 * Default "/usr/lib/debug"; NULL or "" turns it off. Copied. 0 or -ENOMEM.
 */
int symbolizer__set_debug_dir(struct symbolizer *s, const char *dir);

/*
 * Appends Prometheus text-format lines: gpuscope_agent_symbolizer_frames_total{result=
 * "resolved"|"unknown"}, _elf_opened_total, _elf_cache_hits_total, _maps_reads_total,
 * _perfmap_reads_total, _cache_bytes, _pids; with mmap records, _mmap_records_total and
 * _mmap_records_lost_total.
 */
void symbolizer__metrics(const struct symbolizer *s, FILE *out);

/*
 * Drops the resident pages of the symbol-name strings mapped from files (clean: read again
 * from the page cache if a name is needed again). Each name looked up touches its own page:
 * a C++ library's few thousand names held 10-20 MB of the agent's RSS. Call now and then.
 */
void symbolizer__trim(struct symbolizer *s);

#endif
