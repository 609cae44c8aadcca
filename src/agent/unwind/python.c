/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPython, user side: interpreter detection and per-version offsets for the BPF walk, and the
 * symbolization of the Python frames it emits. Offsets: from _Py_DebugOffsets at the start of
 * _PyRuntime where the runtime carries it (3.13+), else tables for 3.10, 3.11 and 3.12
 * written from CPython's public headers (Include/internal/pycore_frame.h, pycore_code.h,
 * pycore_interp.h, pycore_runtime.h, cpython/pystate.h of each release).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/types.h>
#include "agent/meta/procfs.h"
#include "agent/sym/symbolize_int.h"
#include "agent/unwind/python.h"
#include "agent/unwind/python_abi.h"
#include "common/batch.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"

#define MAX_CODES	(1u << 16)	/* cached code objects, all processes; cleared when full */
#define MAX_PIDS	GPUSCOPE_PY_MAX_PROCS
#define MAX_FILES	4096		/* binaries whose verdict (Python or not) is remembered */
#define LINETABLE_MAX	(64u << 10)
#define NAME_MAX_CHARS	512
#define RECHECK_NS	(2 * NSEC_PER_SEC)	/* a "not Python" verdict's age before a new look:
						 * libpython mapped late (loader, dlopen), an
						 * interpreter caught mid-start */

/* Where a code object keeps what symbolization needs, per version. */
struct code_layout {
	uint16_t filename, name, qualname;	/* qualname 0: none (3.10: co_name) */
	uint16_t linetable, firstlineno;
	uint16_t ascii_size, compact_size;	/* sizeof(PyASCIIObject), PyCompactUnicodeObject */
	bool location_table;			/* 3.11+ co_linetable format (locations.md) */
};

struct py_proc {
	pid_t pid;
	bool python;				/* false: looked at, not (walkable) Python */
	uint64_t checked_ns;			/* when; a "no" is looked at again later */
	uint64_t code_type;			/* &PyCode_Type in the process; 0 if unknown */
	uint64_t interp_lo, interp_hi;		/* the interpreter binary's mappings */
	bool stamped;				/* BPF stamps its code objects (python_abi.h) */
	struct code_layout cl;
};

struct py_code {
	const char *name, *file;		/* interned */
	uint32_t firstline;
	bool location_table;
	uint32_t nlt;
	uint8_t lt[];				/* co_linetable bytes */
};

struct python {
	pthread_mutex_t lock;			/* the unwinder's thread finds processes, the main
						 * loop symbolizes */
	int fd_procs, fd_threads, fd_stats, fd_names;
	struct u64map procs;			/* pid -> struct py_proc * */
	struct u64map files;			/* hash(dev, ino, mtime) -> 1 + verdict (1: Python) */
	struct u64map codes;			/* hash(pid, code) -> struct py_code * */
	struct py_code **code_list;
	size_t ncodes;
	struct strtab strs;
	uint64_t logged_versions[8];		/* unsupported versions already logged */
	struct python_stats st;
	const char *s_python;
};

static struct python *default_py;

/* ---- process memory ------------------------------------------------------------------ */

static int read_mem(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };
	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

static int read_u64(pid_t pid, uint64_t addr, uint64_t *ret)
{
	return read_mem(pid, addr, ret, sizeof(*ret));
}

/* ---- versions ------------------------------------------------------------------------- */

/* 3.10, 3.11, 3.12 from the headers; 3.13+ from _Py_DebugOffsets (parse_debug_offsets()). */
static int table_offsets(uint32_t minor, struct gpuscope_py_proc *p, struct code_layout *cl)
{
	switch (minor) {
	case 10:
		*p = (struct gpuscope_py_proc){
			.layout = GPUSCOPE_PY_LAYOUT_310, .tid_is_fsbase = 1,
			.rt_interp_head = 32, .is_next = 0, .is_threads_head = 8,
			.ts_next = 8, .ts_thread_id = 176, .ts_frame = 24,
			.cf_current = GPUSCOPE_PY_NO_OFFSET, .fr_previous = 24, .fr_code = 32,
			.fr_instr = 96, .fr_owner = GPUSCOPE_PY_NO_OFFSET,
			.fr_is_entry = GPUSCOPE_PY_NO_OFFSET, .co_code = 0,
		};
		*cl = (struct code_layout){ .filename = 104, .name = 112, .qualname = 0,
					    .linetable = 120, .firstlineno = 40, .ascii_size = 48,
					    .compact_size = 72, .location_table = false };
		return 0;
	case 11:
		*p = (struct gpuscope_py_proc){
			.layout = GPUSCOPE_PY_LAYOUT_311,
			.rt_interp_head = 40, .is_next = 0, .is_threads_head = 16,
			.ts_next = 8, .ts_thread_id = 160, .ts_frame = 56, .cf_current = 8,
			.fr_previous = 48, .fr_code = 32, .fr_instr = 56,
			.fr_owner = GPUSCOPE_PY_NO_OFFSET, .fr_is_entry = 68, .co_code = 184,
		};
		*cl = (struct code_layout){ .filename = 112, .name = 120, .qualname = 128,
					    .linetable = 136, .firstlineno = 72, .ascii_size = 48,
					    .compact_size = 72, .location_table = true };
		return 0;
	case 12:
		*p = (struct gpuscope_py_proc){
			.layout = GPUSCOPE_PY_LAYOUT_312,
			.rt_interp_head = 40, .is_next = 0, .is_threads_head = 72,
			.ts_next = 8, .ts_thread_id = 144, .ts_frame = 56, .cf_current = 0,
			.fr_previous = 8, .fr_code = 0, .fr_instr = 56, .fr_owner = 70,
			.fr_is_entry = GPUSCOPE_PY_NO_OFFSET, .co_code = 192,
		};
		*cl = (struct code_layout){ .filename = 112, .name = 120, .qualname = 128,
					    .linetable = 136, .firstlineno = 68, .ascii_size = 40,
					    .compact_size = 56, .location_table = true };
		return 0;
	}
	return -ENOTSUP;
}

#define DO_WORDS 128	/* _Py_DebugOffsets is 73 words in 3.13; room for growth */

static bool fits16(uint64_t v)
{
	return v < GPUSCOPE_PY_NO_OFFSET;
}

/*
 * _Py_DebugOffsets (3.13+): cookie, version, free_threaded, then sections that each start
 * with the size of the struct they describe. Sections can grow between releases, so the
 * thread-state, frame and code sections are found by what their first fields must be
 * (PyThreadState starts with prev, next, interp; _PyInterpreterFrame with f_executable,
 * previous; a code object's filename, name, qualname are consecutive pointers).
 */
static int parse_debug_offsets(const uint64_t *d, uint32_t version, struct gpuscope_py_proc *p,
			       struct code_layout *cl)
{
	int t = -1, f = -1, c = -1;

	if (memcmp(d, "xdebugpy", 8) || (d[1] >> 16) != (version >> 16) || d[2] != 0)
		return -ENOTSUP;	/* free-threaded builds keep bytecode per thread */
	/* runtime_state at 3..5 (size, finalizing, interpreters_head), interpreter_state at
	 * 6.. (size, id, next, threads_head, ...). */
	for (int i = 6 + 4; i + 9 < DO_WORDS && t < 0; i++)
		if (d[i] >= 64 && d[i] < 65536 && d[i + 1] == 0 && d[i + 2] == 8 &&
		    d[i + 3] == 16)
			t = i;
	for (int i = t + 9; t >= 0 && i + 6 < DO_WORDS && f < 0; i++)
		if (d[i] >= 40 && d[i] < 512 && d[i + 1] == 8 && d[i + 2] == 0)
			f = i;
	for (int i = f + 6; f >= 0 && i + 10 < DO_WORDS && c < 0; i++)
		if (d[i] >= 100 && d[i] < 4096 && d[i + 2] == d[i + 1] + 8 &&
		    d[i + 3] == d[i + 2] + 8 && d[i + 1] >= 16)
			c = i;
	if (t < 0 || f < 0 || c < 0)
		return -ENOTSUP;
	/* thread_state: size prev next interp current_frame thread_id native_thread_id;
	 * interpreter_frame: size previous executable instr_ptr localsplus owner;
	 * code_object: size filename name qualname linetable firstlineno argcount
	 * localsplusnames localspluskinds co_code_adaptive */
	if (d[4] > UINT32_MAX || d[5] > UINT32_MAX || d[8] > UINT32_MAX || d[9] > UINT32_MAX ||
	    !fits16(d[t + 2]) || !fits16(d[t + 4]) || !fits16(d[t + 6]) || !fits16(d[f + 1]) ||
	    !fits16(d[f + 2]) || !fits16(d[f + 3]) || !fits16(d[f + 5]) || !fits16(d[c + 9]) ||
	    !fits16(d[c + 5]))
		return -ENOTSUP;
	*p = (struct gpuscope_py_proc){
		.layout = GPUSCOPE_PY_LAYOUT_312,
		.rt_interp_head = (uint32_t)d[5], .is_next = (uint32_t)d[8],
		.is_threads_head = (uint32_t)d[9], .ts_next = d[t + 2],
		.ts_thread_id = d[t + 6], .ts_frame = d[t + 4], .cf_current = GPUSCOPE_PY_NO_OFFSET,
		.fr_previous = d[f + 1], .fr_code = d[f + 2], .fr_instr = d[f + 3],
		.fr_owner = d[f + 5], .fr_is_entry = GPUSCOPE_PY_NO_OFFSET, .co_code = d[c + 9],
		/* 3.14: f_executable is a _PyStackRef, tagged in its low bits */
		.code_tag_mask = (version >> 16) >= 0x030e ? 7 : 0,
	};
	*cl = (struct code_layout){ .filename = d[c + 1], .name = d[c + 2], .qualname = d[c + 3],
				    .linetable = d[c + 4], .firstlineno = d[c + 5],
				    .ascii_size = 40, .compact_size = 56, .location_table = true };
	return 0;
}

/* "3.11" out of a basename like python3.11, libpython3.11.so.1.0, python3.12d; 0 if none. */
static uint32_t minor_from_name(const char *base)
{
	const char *p = strstr(base, "python3.");
	char *end;
	long minor;

	if (!p)
		return 0;
	minor = strtol(p + 8, &end, 10);
	return end != p + 8 && minor > 0 && minor < 100 ? (uint32_t)minor : 0;
}

/* ---- detection ------------------------------------------------------------------------ */

struct candidate {
	uint64_t start, end, pgoff;	/* the file's first executable mapping */
	uint64_t lo, hi;		/* its executable mappings, first to last */
	bool deleted;
	char path[PATH_MAX];
};

/* The executable mappings of each file named python* or libpython*, and of the main
 * executable (through the symbolizer's maps parser). */
static int find_candidates(pid_t pid, struct candidate *ret, int max)
{
	char path[64], exe[PATH_MAX] = "", *line = NULL;
	struct sym_maps_line l;
	size_t cap = 0;
	int n = 0;
	ssize_t len;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	len = readlink(path, exe, sizeof(exe) - 1);
	exe[len > 0 ? len : 0] = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	while (getline(&line, &cap, f) > 0 && n < max) {
		const char *base;
		bool dup = false;

		if (sym_parse_maps_line(line, &l) <= 0 || l.path[0] != '/')
			continue;
		base = strrchr(l.path, '/') + 1;
		/* python3.12, libpython3.12.so.1.0; not extension modules
		 * (_asyncio.cpython-312-x86_64-linux-gnu.so) */
		if (strncmp(base, "python", 6) && strncmp(base, "libpython", 9) &&
		    strcmp(l.path, exe))
			continue;
		for (int i = 0; i < n && !dup; i++) {
			if (strcmp(ret[i].path, l.path))
				continue;
			dup = true;
			if (l.end > ret[i].hi)
				ret[i].hi = l.end;
		}
		if (dup)
			continue;
		ret[n] = (struct candidate){ .start = l.start, .end = l.end, .pgoff = l.pgoff,
					     .lo = l.start, .hi = l.end, .deleted = l.deleted };
		snprintf(ret[n].path, sizeof(ret[n].path), "%s", l.path);
		n++;
	}
	free(line);
	fclose(f);
	return n;
}

enum { SYM_RUNTIME, SYM_EVAL, SYM_CODE_TYPE, SYM_VERSION, SYM_N };
static const char *const sym_names[SYM_N] = { "_PyRuntime", "_PyEval_EvalFrameDefault",
					      "PyCode_Type", "Py_Version" };

static void log_unsupported(struct python *py, pid_t pid, uint32_t version, const char *why)
{
	uint64_t key = version ? version : 1;
	size_t i;

	py->st.unsupported++;
	for (i = 0; i < 8 && py->logged_versions[i]; i++)
		if (py->logged_versions[i] == key)
			return;
	if (i < 8)
		py->logged_versions[i] = key;
	log_warn("python: pid %d runs CPython %u.%u (0x%08x): %s; its stacks keep native frames "
		 "only", pid, version >> 24, (version >> 16) & 0xff, version, why);
}

/*
 * Checks the offsets against the running interpreter, where it runs already: the main thread
 * (3.11+: native_thread_id == pid) is on the thread list and its current frame's code object
 * is a code object. 0 (consistent, or nothing to check yet) or -EPROTO.
 */
static int validate(pid_t pid, const struct gpuscope_py_proc *p, uint64_t code_type)
{
	uint64_t interp = 0, ts = 0, id, f, code, type;
	pid_t ppid = procfs_ppid(pid);
	uint8_t owner = 0;

	if (read_u64(pid, p->runtime + p->rt_interp_head, &interp) || !interp)
		return 0;	/* not initialised yet */
	if (read_u64(pid, interp + p->is_threads_head, &ts))
		return -EPROTO;
	for (int i = 0; ts && i < 256; i++) {
		if (read_u64(pid, ts + p->ts_thread_id, &id))
			return -EPROTO;
		/* a fork child's main thread state still holds its parent's id until the
		 * interpreter's after-fork code renames it; its first samples come then */
		if (p->tid_is_fsbase || id == (uint64_t)pid || (id && id == (uint64_t)ppid))
			break;
		if (read_u64(pid, ts + p->ts_next, &ts))
			return -EPROTO;
	}
	if (!ts)
		return p->tid_is_fsbase ? 0 : -EPROTO;
	if (read_u64(pid, ts + p->ts_frame, &f))
		return -EPROTO;
	if (f && p->cf_current != GPUSCOPE_PY_NO_OFFSET && read_u64(pid, f + p->cf_current, &f))
		return -EPROTO;
	for (int i = 0; f && i < 16; i++) {	/* the first frame with a code object */
		if (p->fr_owner != GPUSCOPE_PY_NO_OFFSET && read_mem(pid, f + p->fr_owner, &owner, 1))
			return -EPROTO;
		if (owner < 3) {
			if (read_u64(pid, f + p->fr_code, &code))
				return -EPROTO;
			code &= ~(uint64_t)p->code_tag_mask;
			if (code_type && (read_u64(pid, code + 8, &type) || type != code_type))
				return -EPROTO;
			return 0;
		}
		if (read_u64(pid, f + p->fr_previous, &f))
			return -EPROTO;
	}
	return 0;
}

/* Examines one candidate binary of pid. 1: filled *ret; 0: not Python; -errno. */
static int examine(struct python *py, pid_t pid, const struct candidate *c,
		   struct gpuscope_py_proc *ret, struct py_proc *pp)
{
	uint64_t addr[SYM_N], size[SYM_N], bias, vaddr, fkey, *verdict;
	struct elf_info info = { 0 };
	uint32_t version = 0, minor;
	struct stat st;
	int fd, n, err;

	fd = sym_open_mapping(pid, c->start, c->end, c->path, c->deleted, &st);
	if (fd < 0)
		return fd == -ENOENT ? -ESRCH : 0;
	{
		uint64_t k[3] = { st.st_dev, st.st_ino,
				  (uint64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec };

		fkey = hash64(k, sizeof(k), 0x5079);
	}
	verdict = u64map_find(&py->files, fkey);
	if (verdict && *verdict == 1) {	/* known: not an interpreter */
		close(fd);
		return 0;
	}
	n = elf_find_symbols(fd, sym_names, SYM_N, addr, size);
	err = n < 0 ? 0 : elf_read_info(fd, &info);
	close(fd);
	if (n < 0 || err || !addr[SYM_RUNTIME] || !addr[SYM_EVAL] || !size[SYM_EVAL]) {
		free(info.segs);
		if (py->files.len < MAX_FILES)
			u64map_upsert(&py->files, fkey, 1, NULL);
		return 0;
	}
	/* Load bias: the mapping's file offset and the segment holding it. */
	if (!elf_off_to_vaddr(info.segs, info.nsegs, c->pgoff, &vaddr)) {
		free(info.segs);
		return 0;
	}
	free(info.segs);
	bias = c->start - vaddr;
	if (addr[SYM_VERSION] && read_mem(pid, addr[SYM_VERSION] + bias, &version, 4))
		version = 0;
	minor = version ? (version >> 16) & 0xff : minor_from_name(strrchr(c->path, '/') + 1);
	if (!version)
		version = 0x03000000 | minor << 16;
	if ((version >> 24) != 3 || minor < 10) {
		log_unsupported(py, pid, version, "versions 3.10 to 3.14 are supported");
		return 0;
	}
	if (minor >= 13) {
		uint64_t d[DO_WORDS];

		err = read_mem(pid, addr[SYM_RUNTIME] + bias, d, sizeof(d));
		if (err)
			return err == -ESRCH ? err : 0;
		err = parse_debug_offsets(d, version, ret, &pp->cl);
		if (err) {
			log_unsupported(py, pid, version,
					d[2] ? "free-threaded builds are not supported"
					     : "its _Py_DebugOffsets were not understood");
			return 0;
		}
		if (minor > 14)
			log_debug("python: pid %d: CPython 3.%u, newer than 3.14, walked with its "
				  "_Py_DebugOffsets", pid, minor);
	} else if (table_offsets(minor, ret, &pp->cl)) {
		log_unsupported(py, pid, version, "versions 3.10 to 3.14 are supported");
		return 0;
	}
#if !defined(__x86_64__)
	if (ret->tid_is_fsbase) {
		log_unsupported(py, pid, version, "3.10 threads are matched on x86-64 only");
		return 0;
	}
#endif
	/* what the BPF walker reads to stamp and name code objects (python_abi.h) */
	ret->co_firstlineno = pp->cl.firstlineno;
	ret->co_filename = pp->cl.filename;
	ret->str_ascii = pp->cl.ascii_size;
	ret->str_compact = pp->cl.compact_size;
	ret->co_name_word = pp->cl.qualname ? 2 : 1;
	if (pp->cl.name != pp->cl.filename + 8 ||
	    (pp->cl.qualname && pp->cl.qualname != pp->cl.filename + 16) ||
	    !fits16(pp->cl.firstlineno) || !fits16(pp->cl.filename))
		ret->co_filename = GPUSCOPE_PY_NO_OFFSET;	/* no stamps, no names in BPF */
	pp->stamped = ret->co_filename != GPUSCOPE_PY_NO_OFFSET;
	pp->interp_lo = c->lo;
	pp->interp_hi = c->hi;
	ret->runtime = addr[SYM_RUNTIME] + bias;
	ret->eval_start = addr[SYM_EVAL] + bias;
	ret->eval_end = ret->eval_start + size[SYM_EVAL];
	ret->version = version;
	pp->code_type = addr[SYM_CODE_TYPE] ? addr[SYM_CODE_TYPE] + bias : 0;
	pp->cl.location_table = minor >= 11;
	if (validate(pid, ret, pp->code_type)) {
		log_unsupported(py, pid, version, "its structures did not match the offsets of this "
				"version when read (a modified build, or state changing under the "
				"read: looked at again every 2 s)");
		return 0;
	}
	log_debug("python: pid %d: CPython %u.%u in %s, _PyRuntime 0x%" PRIx64 ", eval loop "
		  "0x%" PRIx64 "-0x%" PRIx64, pid, version >> 24, minor, c->path, (uint64_t)ret->runtime,
		  (uint64_t)ret->eval_start, (uint64_t)ret->eval_end);
	return 1;
}

static struct py_proc *proc_find(struct python *py, pid_t pid)
{
	uint64_t *v = u64map_find(&py->procs, (uint64_t)pid);

	return v ? (struct py_proc *)(uintptr_t)*v : NULL;
}

/*
 * u64map has no delete: a process forgotten leaves a zero value behind. Rebuilds the map
 * with the live entries only; returns how many there are.
 */
static size_t procs_compact(struct python *py)
{
	struct u64map live = { 0 };

	for (size_t i = 0; i < py->procs.cap; i++) {
		uint64_t *slot;

		if (!py->procs.keys[i] || !py->procs.vals[i])
			continue;
		slot = u64map_upsert(&live, py->procs.keys[i], py->procs.vals[i], NULL);
		if (!slot) {	/* ENOMEM: keep the old map */
			u64map_done(&live);
			return py->procs.len;
		}
	}
	u64map_done(&py->procs);
	py->procs = live;
	return live.len;
}

static int pid_seen(struct python *py, pid_t pid)
{
	struct candidate cands[8];
	struct gpuscope_py_proc bp;
	struct py_proc *pp;
	uint64_t *slot;
	int n, err = 0;
	__u32 key = (__u32)pid;

	pp = proc_find(py, pid);
	if (pp && (pp->python || mono_ns() - pp->checked_ns < RECHECK_NS))
		return pp->python;
	if (!pp && py->procs.len >= MAX_PIDS && procs_compact(py) >= MAX_PIDS)
		return -ENOSPC;
	if (!pp) {
		pp = calloc(1, sizeof(*pp));
		if (!pp)
			return -ENOMEM;
		pp->pid = pid;
	} else {
		/* looked at again: still in the map, so forget it there first */
		uint64_t *v = u64map_find(&py->procs, (uint64_t)pid);

		if (v)
			*v = 0;
	}
	pp->checked_ns = mono_ns();
	n = find_candidates(pid, cands, 8);
	if (n < 0) {
		free(pp);
		return n;
	}
	for (int i = 0; i < n && !pp->python; i++) {
		memset(&bp, 0, sizeof(bp));
		err = examine(py, pid, &cands[i], &bp, pp);
		if (err == -ESRCH) {
			free(pp);
			return err;
		}
		if (err == 1) {
			if (bpf_map_update_elem(py->fd_procs, &key, &bp, BPF_ANY)) {
				err = -errno;
				log_warn("python: pid %d: BPF map update: %s", pid, strerror(-err));
				free(pp);
				return err;
			}
			pp->python = true;
			py->st.procs++;
		}
	}
	slot = u64map_upsert(&py->procs, (uint64_t)pid, 0, NULL);
	if (slot)
		*slot = (uint64_t)(uintptr_t)pp;
	if (!slot) {
		if (pp->python) {
			bpf_map_delete_elem(py->fd_procs, &key);
			py->st.procs--;
		}
		free(pp);
		return -ENOMEM;
	}
	return pp->python;
}

int python__pid_seen(struct python *py, pid_t pid)
{
	int ret;

	if (!py || pid <= 0)
		return -EINVAL;
	pthread_mutex_lock(&py->lock);
	ret = pid_seen(py, pid);
	pthread_mutex_unlock(&py->lock);
	return ret;
}

/* Drops every cached code object (cheap to read again). */
static void codes_clear(struct python *py)
{
	for (size_t i = 0; i < py->ncodes; i++)
		free(py->code_list[i]);
	py->ncodes = 0;
	u64map_done(&py->codes);
	memset(&py->codes, 0, sizeof(py->codes));
}

void python__pid_gone(struct python *py, pid_t pid)
{
	struct py_proc *pp;
	uint64_t *v;
	__u32 key = (__u32)pid;

	if (!py)
		return;
	pthread_mutex_lock(&py->lock);
	v = u64map_find(&py->procs, (uint64_t)pid);
	if (!v || !*v) {
		pthread_mutex_unlock(&py->lock);
		return;
	}
	pp = (struct py_proc *)(uintptr_t)*v;
	*v = 0;	/* u64map has no delete: a zero slot reads as "not seen" */
	if (pp->python) {
		bpf_map_delete_elem(py->fd_procs, &key);
		py->st.procs--;
		/* Code objects are keyed by (pid, address): a new process under this pid must
		 * not inherit them. Rare enough (a Python process ending) to drop them all. */
		codes_clear(py);
	}
	pthread_mutex_unlock(&py->lock);
	free(pp);
}

/* ---- symbolization -------------------------------------------------------------------- */

static size_t put_utf8(char *out, uint32_t c)
{
	if ((c >= 0xd800 && c < 0xe000) || c > 0x10ffff)
		c = 0xfffd;	/* a lone surrogate (surrogateescape'd bytes of a file name) */
	if (c < 0x80) {
		out[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		out[0] = (char)(0xc0 | c >> 6);
		out[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		out[0] = (char)(0xe0 | c >> 12);
		out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		out[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | c >> 18);
	out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	out[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

/* Bytes per character of a str object from its state word; 0 if not a compact str (a legacy
 * string, not used for names). */
static uint32_t str_width(uint32_t state)
{
	uint32_t kind = (state >> 2) & 7;

	return (state >> 5) & 1 && (kind == 1 || kind == 2 || kind == 4) ? kind : 0;
}

/*
 * Characters of a compact str object (state: its state word; raw: nbytes of its characters,
 * 1, 2 or 4 bytes each) as UTF-8 into buf, at most NAME_MAX_CHARS; a lone surrogate becomes
 * U+FFFD, so what comes out is always valid UTF-8. 0, -ENOTSUP, or -EILSEQ for a character
 * past U+10FFFF (no str holds one: the bytes were not the str, and the frame stays unknown
 * rather than named in garbage; a whole-machine record once wrote such a name, bytes 0xfd...).
 */
static int str_decode(uint32_t state, const void *raw, size_t nbytes, char *buf, size_t cap)
{
	uint32_t width = str_width(state);
	size_t n, o = 0;

	if (!width)
		return -ENOTSUP;
	n = nbytes / width;
	if (n > NAME_MAX_CHARS)
		n = NAME_MAX_CHARS;
	for (size_t i = 0; i < n && o + 5 < cap; i++) {
		uint32_t c;

		if (width == 1)
			c = ((const uint8_t *)raw)[i];
		else if (width == 2)
			c = ((const uint16_t *)raw)[i];
		else
			c = ((const uint32_t *)raw)[i];
		if (c > 0x10ffff)	/* no str holds it: these bytes are not the str we read */
			return -EILSEQ;
		o += put_utf8(buf + o, c ? c : '?');
	}
	buf[o] = 0;
	return 0;
}

/* A str object of the process as UTF-8 into buf (truncated to NAME_MAX_CHARS). 0 or -errno. */
static int read_str(pid_t pid, const struct code_layout *cl, uint64_t addr, char *buf,
		    size_t cap)
{
	uint32_t raw32[NAME_MAX_CHARS];
	uint64_t length;
	uint32_t state, width;
	size_t n;
	int err;

	if (!addr)
		return -ENOENT;
	err = read_u64(pid, addr + 16, &length);
	if (!err)
		err = read_mem(pid, addr + 32, &state, 4);
	if (err)
		return err;
	width = str_width(state);
	if (!width)
		return -ENOTSUP;
	n = length < NAME_MAX_CHARS ? length : NAME_MAX_CHARS;
	err = read_mem(pid, addr + ((state >> 6) & 1 ? cl->ascii_size : cl->compact_size), raw32,
		       n * width);
	return err ? err : str_decode(state, raw32, n * width, buf, cap);
}

/*
 * The stamp of the code object at code as it is now (python_abi.h); -errno if unreadable.
 * A process whose layout gives no stamps: 0, as BPF writes then. *ret_firstline (if given) gets
 * the co_firstlineno the stamp was made of, or stays as it was when the layout has no stamps.
 */
static int code_stamp(const struct py_proc *pp, uint64_t code, uint32_t *ret,
		      int32_t *ret_firstline)
{
	uint64_t w[3];
	uint32_t fl;

	*ret = 0;
	if (!pp->stamped)
		return 0;
	if (read_mem(pp->pid, code + pp->cl.firstlineno, &fl, 4) ||
	    read_mem(pp->pid, code + pp->cl.filename, w, sizeof(w)))
		return -EFAULT;
	*ret = gpuscope_py_stamp(fl, w[0], w[1], w[2]);
	if (ret_firstline)
		*ret_firstline = (int32_t)fl;
	return 0;
}

static struct py_code *code_new(struct python *py, const char *name, const char *file,
				int32_t firstline, bool location_table, size_t ltlen)
{
	struct py_code *c = calloc(1, sizeof(*c) + ltlen);
	int64_t iname, ifile;

	if (!c)
		return NULL;
	iname = strtab_intern(&py->strs, name);
	ifile = strtab_intern(&py->strs, file);
	if (iname < 0 || ifile < 0) {
		free(c);
		return NULL;
	}
	c->name = py->strs.strs[iname];
	c->file = py->strs.strs[ifile];
	c->firstline = firstline > 0 ? (uint32_t)firstline : 0;
	c->location_table = location_table;
	c->nlt = (uint32_t)ltlen;
	return c;
}

/* The code object at code, read from the process; NULL if gone or no longer that object. */
static struct py_code *code_read(struct python *py, const struct py_proc *pp, uint64_t code,
				 uint32_t stamp)
{
	const struct code_layout *cl = &pp->cl;
	char name[NAME_MAX_CHARS * 4 + 8], file[NAME_MAX_CHARS * 4 + 8];
	uint64_t type = 0, pname = 0, pfile = 0, plt = 0, ltlen = 0;
	int32_t firstline = -1;
	struct py_code *c;
	uint32_t now;
	pid_t pid = pp->pid;

	if (read_u64(pid, code + 8, &type) || (pp->code_type && type != pp->code_type))
		return NULL;	/* freed or not a code object */
	if (code_stamp(pp, code, &now, &firstline))	/* reads co_firstlineno where stamped */
		return NULL;
	if (now != stamp) {	/* another code object at that address now */
		py->st.code_replaced++;
		return NULL;
	}
	if (read_u64(pid, code + (cl->qualname ? cl->qualname : cl->name), &pname) ||
	    read_u64(pid, code + cl->filename, &pfile) ||
	    read_u64(pid, code + cl->linetable, &plt) ||
	    (firstline < 0 && read_mem(pid, code + cl->firstlineno, &firstline, 4)) ||
	    read_str(pid, cl, pname, name, sizeof(name)))
		return NULL;
	if (read_str(pid, cl, pfile, file, sizeof(file)))
		snprintf(file, sizeof(file), "?");
	if (!plt || read_u64(pid, plt + 16, &ltlen) || ltlen > LINETABLE_MAX)
		ltlen = 0;
	c = code_new(py, name, file, firstline, cl->location_table, ltlen);
	if (!c)
		return NULL;
	if (ltlen && read_mem(pid, plt + 32, c->lt, ltlen))
		c->nlt = 0;
	py->st.code_reads++;
	return c;
}

/*
 * The names BPF copied while a frame of the code object ran (py_names): for code objects gone
 * before user space looked. No line table there: lines of such frames are unknown (0).
 */
static struct py_code *code_from_bpf(struct python *py, pid_t pid, uint64_t code, uint32_t stamp)
{
	struct gpuscope_py_code_key k = { .tgid = (__u32)pid, .stamp = stamp, .code = code };
	struct gpuscope_py_name v;
	char name[NAME_MAX_CHARS * 4 + 8], file[NAME_MAX_CHARS * 4 + 16];
	uint32_t fkind;
	struct py_code *c;
	size_t o = 0;

	if (py->fd_names < 0 || bpf_map_lookup_elem(py->fd_names, &k, &v))
		return NULL;
	fkind = (v.file_state >> 2) & 7;
	if (v.name_bytes > sizeof(v.name) || v.file_bytes > sizeof(v.file) ||
	    str_decode(v.name_state, v.name, v.name_bytes, name, sizeof(name)))
		return NULL;
	if (fkind && v.file_bytes < v.file_len * fkind)
		o = (size_t)snprintf(file, sizeof(file), "...");	/* its start was cut */
	if (!v.file_bytes || str_decode(v.file_state, v.file, v.file_bytes, file + o,
					 sizeof(file) - o))
		snprintf(file, sizeof(file), "?");
	c = code_new(py, name, file, (int32_t)v.firstlineno, false, 0);
	if (c)
		py->st.code_bpf_names++;
	return c;
}

/* 3.11+ location table: unsigned varint of 6-bit chunks, bit 6 = more. */
static uint32_t lt_varint(const uint8_t **p, const uint8_t *end)
{
	uint32_t v = 0, shift = 0;

	while (*p < end && shift < 32) {
		uint8_t b = *(*p)++;

		v |= (uint32_t)(b & 63) << shift;
		shift += 6;
		if (!(b & 64))
			break;
	}
	return v;
}

static int32_t lt_svarint(const uint8_t **p, const uint8_t *end)
{
	uint32_t v = lt_varint(p, end);

	return v & 1 ? -(int32_t)(v >> 1) : (int32_t)(v >> 1);
}

/*
 * Line of the instruction at byte offset off, 0 if unknown. 3.10 (PEP 626): pairs of
 * (byte-offset delta, signed line delta; -128: no line). 3.11+ (Objects/locations.md):
 * entries of a first byte 1CCCCLLL (code, length-1 in code units) and the code's varints;
 * codes 13 and 14 start with a signed line delta, 10-12 mean delta 0-2, 15 no location.
 */
uint32_t python__line(const uint8_t *lt, size_t n, uint32_t firstline, bool location_table,
		      uint64_t off)
{
	const uint8_t *p = lt, *end = lt + n;
	int64_t line = firstline;
	uint64_t addr = 0;

	if (!location_table) {
		for (; p + 1 < end; p += 2) {
			int8_t ld = (int8_t)p[1];
			uint64_t next = addr + p[0];

			if (ld != -128)
				line += ld;
			if (off >= addr && off < next)
				return ld == -128 || line <= 0 ? 0 : (uint32_t)line;
			addr = next;
		}
		return 0;
	}
	off /= 2;	/* code units */
	while (p < end) {
		uint8_t first = *p++;
		uint32_t code = (first >> 3) & 15, len = (first & 7) + 1;
		int32_t delta = 0;
		const uint8_t *q = p;

		if (!(first & 0x80))
			break;	/* out of step: give up rather than guess */
		if (code == 13 || code == 14)
			delta = lt_svarint(&q, end);
		else if (code >= 10 && code <= 12)
			delta = (int32_t)code - 10;
		line += delta;
		if (off >= addr && off < addr + len)
			return code == 15 || line <= 0 ? 0 : (uint32_t)line;
		addr += len;
		while (p < end && !(*p & 0x80))
			p++;
	}
	return 0;
}

void python__unknown_frame(struct python *py, struct location *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->function = "[python]";
	ret->module = "[python]";
	ret->build_id = "";
}

int python__frame(struct python *py, pid_t pid, uint64_t code, uint64_t word,
		  struct location *ret)
{
	uint64_t offset = word & 0xffffffffULL;
	uint32_t stamp = (uint32_t)(word >> 32);
	uint64_t key[3] = { (uint64_t)pid, code, stamp }, h, *slot;
	struct py_proc *pp;
	struct py_code *c = NULL;

	python__unknown_frame(py, ret);
	if (!py)
		return -ENOENT;
	h = hash64(key, sizeof(key), 0x7079);
	pthread_mutex_lock(&py->lock);
	slot = u64map_find(&py->codes, h);
	if (slot) {
		c = (struct py_code *)(uintptr_t)*slot;
		py->st.code_cache_hits++;
	} else {
		pp = proc_find(py, pid);
		if (pp && pp->python)
			c = code_read(py, pp, code, stamp);
		if (!c)	/* gone (or the process is): what BPF copied while it ran */
			c = code_from_bpf(py, pid, code, stamp);
		if (c) {
			if (py->ncodes == MAX_CODES)
				codes_clear(py);
			slot = u64map_upsert(&py->codes, h, (uint64_t)(uintptr_t)c, NULL);
			if (!slot) {
				free(c);
				c = NULL;
			} else {
				py->code_list[py->ncodes++] = c;
			}
		}
	}
	if (!c) {
		py->st.code_failed++;
		pthread_mutex_unlock(&py->lock);
		return -ENOENT;
	}
	ret->function = c->name;
	ret->file = c->file;
	ret->line = c->nlt ? python__line(c->lt, c->nlt, c->firstline, c->location_table, offset)
			   : 0;
	ret->address = offset;
	pthread_mutex_unlock(&py->lock);
	return 0;
}

int python__code_stamp(struct python *py, pid_t pid, uint64_t code, uint32_t *ret)
{
	struct py_proc *pp;
	int err = -ENOENT;

	*ret = 0;
	pthread_mutex_lock(&py->lock);
	pp = proc_find(py, pid);
	if (pp && pp->python)
		err = code_stamp(pp, code, ret, NULL);
	pthread_mutex_unlock(&py->lock);
	return err;
}

bool python__internal(struct python *py, pid_t pid, uint64_t addr)
{
	struct py_proc *pp;
	bool in = false;

	if (!py)
		return false;
	pthread_mutex_lock(&py->lock);
	pp = proc_find(py, pid);
	if (pp && pp->python && addr >= pp->interp_lo && addr < pp->interp_hi) {
		in = true;
		py->st.elided++;
	}
	pthread_mutex_unlock(&py->lock);
	return in;
}

bool pysym__elide(pid_t pid, uint64_t addr)
{
	return python__internal(default_py, pid, addr);
}

int pysym__frame(pid_t pid, uint64_t code_addr, uint64_t offset, struct location *ret)
{
	if (!default_py) {
		python__unknown_frame(NULL, ret);
		return -ENOENT;
	}
	return python__frame(default_py, pid, code_addr, offset, ret);
}

void python__set_default(struct python *py)
{
	default_py = py;
}

/* ---- maps, lifetime, metrics ---------------------------------------------------------- */

struct python *python__new(void)
{
	struct python *py;
	int err = elf_lib_init();

	if (err) {
		errno = -err;
		return NULL;
	}
	py = calloc(1, sizeof(*py));
	if (!py)
		return NULL;
	pthread_mutex_init(&py->lock, NULL);
	py->fd_procs = py->fd_threads = py->fd_stats = py->fd_names = -1;
	py->code_list = calloc(MAX_CODES, sizeof(*py->code_list));
	if (!py->code_list) {
		err = -ENOMEM;
		goto out_free;
	}
	py->fd_procs = bpf_map_create(BPF_MAP_TYPE_HASH, "py_procs", sizeof(__u32),
				      sizeof(struct gpuscope_py_proc), GPUSCOPE_PY_MAX_PROCS, NULL);
	py->fd_threads = bpf_map_create(BPF_MAP_TYPE_LRU_HASH, "py_threads", sizeof(__u32),
					sizeof(__u64), GPUSCOPE_PY_MAX_THREADS, NULL);
	py->fd_stats = bpf_map_create(BPF_MAP_TYPE_PERCPU_ARRAY, "py_stats", sizeof(__u32),
				      sizeof(__u64), GPUSCOPE_PY_STAT_MAX, NULL);
	py->fd_names = bpf_map_create(BPF_MAP_TYPE_LRU_HASH, "py_names",
				      sizeof(struct gpuscope_py_code_key),
				      sizeof(struct gpuscope_py_name), GPUSCOPE_PY_MAX_NAMES, NULL);
	if (py->fd_procs < 0 || py->fd_threads < 0 || py->fd_stats < 0 || py->fd_names < 0) {
		err = -errno;
		goto out_free;
	}
	return py;
out_free:
	python__free(py);
	errno = -err;
	return NULL;
}

void python__free(struct python *py)
{
	if (!py)
		return;
	if (default_py == py)
		default_py = NULL;
	for (size_t i = 0; i < py->procs.cap; i++)
		if (py->procs.keys && py->procs.keys[i])
			free((void *)(uintptr_t)py->procs.vals[i]);
	u64map_done(&py->procs);
	u64map_done(&py->files);
	codes_clear(py);
	free(py->code_list);
	strtab_done(&py->strs);
	if (py->fd_procs >= 0)
		close(py->fd_procs);
	if (py->fd_threads >= 0)
		close(py->fd_threads);
	if (py->fd_stats >= 0)
		close(py->fd_stats);
	if (py->fd_names >= 0)
		close(py->fd_names);
	pthread_mutex_destroy(&py->lock);
	free(py);
}

int python__share_maps(struct python *py, struct bpf_object *obj)
{
	static const char *const names[4] = { "py_procs", "py_threads", "py_stats", "py_names" };
	int fds[4] = { py->fd_procs, py->fd_threads, py->fd_stats, py->fd_names };

	for (int i = 0; i < 4; i++) {
		struct bpf_map *m = bpf_object__find_map_by_name(obj, names[i]);
		int err;

		if (!m)
			continue;
		err = bpf_map__reuse_fd(m, fds[i]);
		if (err)
			return err;
	}
	return 0;
}

void python__stats(const struct python *py, struct python_stats *ret)
{
	int ncpu = libbpf_num_possible_cpus();

	pthread_mutex_lock((pthread_mutex_t *)&py->lock);
	*ret = py->st;
	pthread_mutex_unlock((pthread_mutex_t *)&py->lock);
	memset(ret->bpf, 0, sizeof(ret->bpf));
	if (ncpu <= 0)
		return;
	{
		__u64 vals[ncpu];

		for (__u32 k = 0; k < GPUSCOPE_PY_STAT_MAX; k++) {
			if (bpf_map_lookup_elem(py->fd_stats, &k, vals))
				continue;
			for (int c = 0; c < ncpu; c++)
				ret->bpf[k] += vals[c];
		}
	}
}

void python__metrics(const struct python *py, FILE *out)
{
	static const char *const walk[GPUSCOPE_PY_STAT_MAX] = {
		[GPUSCOPE_PY_STAT_WALKS] = "walks",
		[GPUSCOPE_PY_STAT_FRAMES] = "frames",
		[GPUSCOPE_PY_STAT_NO_THREAD] = "no_thread_state",
		[GPUSCOPE_PY_STAT_THREAD_SCANS] = "thread_scans",
		[GPUSCOPE_PY_STAT_SCAN_LIMIT] = "thread_scan_limit",
		[GPUSCOPE_PY_STAT_READ_FAILED] = "read_failed",
		[GPUSCOPE_PY_STAT_TRUNCATED] = "truncated",
		[GPUSCOPE_PY_STAT_UNREACHED] = "unreached",
		[GPUSCOPE_PY_STAT_EVAL_EMPTY] = "eval_without_frames",
		[GPUSCOPE_PY_STAT_NAMED] = "code_named",
		[GPUSCOPE_PY_STAT_NAME_FAILED] = "code_name_failed",
	};
	struct python_stats st;
	const char *n;

	python__stats(py, &st);
	n = "gpuscope_agent_python_walk_total";
	prom_family(out, n, "counter",
		    "CPython walk in BPF: stacks with Python frames (walks), frames written, threads "
		    "without a thread state, thread-list walks and their bound, unreadable frames "
		    "([python]), stacks out of room, frames after a [truncated] gap (unreached), "
		    "eval-loop activations without a frame left, code objects whose names BPF "
		    "copied (code_named) or could not copy.");
	for (int i = 0; i < GPUSCOPE_PY_STAT_MAX; i++)
		if (walk[i])
			prom_sample1_u64(out, n, "event", walk[i], st.bpf[i]);
	prom_gauge(out, "gpuscope_agent_python_processes",
		   "Processes whose CPython interpreter the BPF walker follows.", (double)st.procs);
	prom_counter(out, "gpuscope_agent_python_unsupported_total",
		     "Processes with a CPython the walker cannot follow (version, build): native "
		     "frames only.", st.unsupported);
	n = "gpuscope_agent_python_code_objects_total";
	prom_family(out, n, "counter", "Code objects symbolized: read from the process, named from "
				       "what BPF copied while they ran (gone before user space "
				       "looked: no line), failed (shown as [python]), answered from "
				       "the cache; replaced: another object at the address by then.");
	prom_sample1_u64(out, n, "result", "read", st.code_reads);
	prom_sample1_u64(out, n, "result", "bpf_copy", st.code_bpf_names);
	prom_sample1_u64(out, n, "result", "replaced", st.code_replaced);
	prom_sample1_u64(out, n, "result", "failed", st.code_failed);
	prom_sample1_u64(out, n, "result", "cached", st.code_cache_hits);
	prom_counter(out, "gpuscope_agent_python_internal_frames_elided_total",
		     "Unnamed native frames of the interpreter itself (static functions of a "
		     "stripped python or libpython) left out of the distinct stacks symbolized.",
		     st.elided);
}
