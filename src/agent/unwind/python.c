/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPython, user side: the symbolization of the Python frames the BPF walk emits (code objects
 * read from the process, line tables), and the walker's maps, lifetime and metrics. Detection
 * and per-version offsets: python_detect.c.
 */
#include "agent/bpfutil.h"
#include "agent/unwind/python_int.h"
#include "agent/selfprof.h"

static struct python *default_py;

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
	err = python_read_u64(pid, addr + 16, &length);
	if (!err)
		err = python_read_mem(pid, addr + 32, &state, 4);
	if (err)
		return err;
	width = str_width(state);
	if (!width)
		return -ENOTSUP;
	n = length < NAME_MAX_CHARS ? length : NAME_MAX_CHARS;
	err = python_read_mem(pid, addr + ((state >> 6) & 1 ? cl->ascii_size : cl->compact_size), raw32,
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
	if (python_read_mem(pp->pid, code + pp->cl.firstlineno, &fl, 4) ||
	    python_read_mem(pp->pid, code + pp->cl.filename, w, sizeof(w)))
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

	if (python_read_u64(pid, code + 8, &type) || (pp->code_type && type != pp->code_type))
		return NULL;	/* freed or not a code object */
	if (code_stamp(pp, code, &now, &firstline))	/* reads co_firstlineno where stamped */
		return NULL;
	if (now != stamp) {	/* another code object at that address now */
		py->st.code_replaced++;
		return NULL;
	}
	if (python_read_u64(pid, code + (cl->qualname ? cl->qualname : cl->name), &pname) ||
	    python_read_u64(pid, code + cl->filename, &pfile) ||
	    python_read_u64(pid, code + cl->linetable, &plt) ||
	    (firstline < 0 && python_read_mem(pid, code + cl->firstlineno, &firstline, 4)) ||
	    read_str(pid, cl, pname, name, sizeof(name)))
		return NULL;
	if (read_str(pid, cl, pfile, file, sizeof(file)))
		snprintf(file, sizeof(file), "?");
	if (!plt || python_read_u64(pid, plt + 16, &ltlen) || ltlen > LINETABLE_MAX)
		ltlen = 0;
	c = code_new(py, name, file, firstline, cl->location_table, ltlen);
	if (!c)
		return NULL;
	if (ltlen && python_read_mem(pid, plt + 32, c->lt, ltlen))
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
		unsigned act = selfprof_enter(SELF_PYTHON);

		pp = python_proc_find(py, pid);
		if (pp && pp->python)
			c = code_read(py, pp, code, stamp);
		if (!c)	/* gone (or the process is): what BPF copied while it ran */
			c = code_from_bpf(py, pid, code, stamp);
		selfprof_leave(act);
		if (c) {
			if (py->ncodes == MAX_CODES)
				python_codes_clear(py);
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
	pp = python_proc_find(py, pid);
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
	pp = python_proc_find(py, pid);
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
	bpf_counters__set(GPUSCOPE_WALKER_PYTHON, py->fd_stats);	/* on /metrics, named */
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
	python_codes_clear(py);
	free(py->code_list);
	strtab_done(&py->strs);
	if (py->fd_procs >= 0)
		close(py->fd_procs);
	if (py->fd_threads >= 0)
		close(py->fd_threads);
	if (py->fd_stats >= 0) {
		bpf_counters__drop(GPUSCOPE_WALKER_PYTHON, py->fd_stats);
		close(py->fd_stats);
	}
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
	/* the registry's names (abi.h) */
	for (unsigned i = 0; i < GPUSCOPE_PY_STAT_MAX; i++) {
		const char *name = bpf_set_counter_name(GPUSCOPE_WALKER_PYTHON, i, NULL);

		if (name)
			prom_sample1_u64(out, n, "event", name, st.bpf[i]);
	}
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
