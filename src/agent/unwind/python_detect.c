/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPython detection for the BPF walk: which processes run an interpreter, and its per-version
 * offsets: from _Py_DebugOffsets at the start of _PyRuntime where the runtime carries it (3.13+),
 * else tables for 3.10, 3.11 and 3.12 written from CPython's public headers
 * (Include/internal/pycore_frame.h, pycore_code.h, pycore_interp.h, pycore_runtime.h,
 * cpython/pystate.h of each release).
 */
#include "agent/unwind/python_int.h"
#include "agent/selfprof.h"

/* ---- process memory ------------------------------------------------------------------ */

int python_read_mem(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };
	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

int python_read_u64(pid_t pid, uint64_t addr, uint64_t *ret)
{
	return python_read_mem(pid, addr, ret, sizeof(*ret));
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

struct find {
	const char *exe;
	struct candidate *ret;
	int n, max;
};

static int candidate_of(const struct maps_line *l, void *ctx)
{
	struct find *q = ctx;
	const char *base;

	if (l->path[0] != '/')
		return 0;
	base = strrchr(l->path, '/') + 1;
	/* python3.12, libpython3.12.so.1.0; not extension modules
	 * (_asyncio.cpython-312-x86_64-linux-gnu.so) */
	if (strncmp(base, "python", 6) && strncmp(base, "libpython", 9) && strcmp(l->path, q->exe))
		return 0;
	for (int i = 0; i < q->n; i++) {
		if (strcmp(q->ret[i].path, l->path))
			continue;
		if (l->end > q->ret[i].hi)
			q->ret[i].hi = l->end;
		return 0;
	}
	q->ret[q->n] = (struct candidate){ .start = l->start, .end = l->end, .pgoff = l->pgoff,
					   .lo = l->start, .hi = l->end, .deleted = l->deleted };
	snprintf(q->ret[q->n].path, sizeof(q->ret[q->n].path), "%s", l->path);
	return ++q->n >= q->max;	/* full: the walk ends */
}

/* The executable mappings of each file named python* or libpython*, and of the main
 * executable (the process layer's maps walk). */
static int find_candidates(pid_t pid, struct candidate *ret, int max)
{
	char path[64], exe[PATH_MAX] = "";
	struct find q = { .exe = exe, .ret = ret, .max = max };
	ssize_t len;
	int err;

	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	len = readlink(path, exe, sizeof(exe) - 1);
	exe[len > 0 ? len : 0] = 0;
	if (max <= 0)
		return 0;
	err = maps_each(pid, 0, candidate_of, &q);
	return err < 0 ? err : q.n;
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

	if (python_read_u64(pid, p->runtime + p->rt_interp_head, &interp) || !interp)
		return 0;	/* not initialised yet */
	if (python_read_u64(pid, interp + p->is_threads_head, &ts))
		return -EPROTO;
	for (int i = 0; ts && i < 256; i++) {
		if (python_read_u64(pid, ts + p->ts_thread_id, &id))
			return -EPROTO;
		/* a fork child's main thread state still holds its parent's id until the
		 * interpreter's after-fork code renames it; its first samples come then */
		if (p->tid_is_fsbase || id == (uint64_t)pid || (id && id == (uint64_t)ppid))
			break;
		if (python_read_u64(pid, ts + p->ts_next, &ts))
			return -EPROTO;
	}
	if (!ts)
		return p->tid_is_fsbase ? 0 : -EPROTO;
	if (python_read_u64(pid, ts + p->ts_frame, &f))
		return -EPROTO;
	if (f && p->cf_current != GPUSCOPE_PY_NO_OFFSET && python_read_u64(pid, f + p->cf_current, &f))
		return -EPROTO;
	for (int i = 0; f && i < 16; i++) {	/* the first frame with a code object */
		if (p->fr_owner != GPUSCOPE_PY_NO_OFFSET && python_read_mem(pid, f + p->fr_owner, &owner, 1))
			return -EPROTO;
		if (owner < 3) {
			if (python_read_u64(pid, f + p->fr_code, &code))
				return -EPROTO;
			code &= ~(uint64_t)p->code_tag_mask;
			if (code_type && (python_read_u64(pid, code + 8, &type) || type != code_type))
				return -EPROTO;
			return 0;
		}
		if (python_read_u64(pid, f + p->fr_previous, &f))
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

	fd = maps_open_file(pid, c->start, c->end, c->path, c->deleted, &st);
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
	if (addr[SYM_VERSION] && python_read_mem(pid, addr[SYM_VERSION] + bias, &version, 4))
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

		err = python_read_mem(pid, addr[SYM_RUNTIME] + bias, d, sizeof(d));
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

struct py_proc *python_proc_find(struct python *py, pid_t pid)
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

	pp = python_proc_find(py, pid);
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
	unsigned act;
	int ret;

	if (!py || pid <= 0)
		return -EINVAL;
	act = selfprof_enter(SELF_PYTHON);
	pthread_mutex_lock(&py->lock);
	ret = pid_seen(py, pid);
	pthread_mutex_unlock(&py->lock);
	selfprof_leave(act);
	return ret;
}

/* Drops every cached code object (cheap to read again). */
void python_codes_clear(struct python *py)
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
		python_codes_clear(py);
	}
	pthread_mutex_unlock(&py->lock);
	free(pp);
}
