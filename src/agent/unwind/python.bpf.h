/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPython frames in BPF (3.10 to 3.14), spliced into the native walk (unwind.bpf.h, which
 * includes this file after defining struct uwalk and unwind_push()):
 *   py_walk_init(st): once per walk; st->eval_start/eval_end from the process's entry in
 *     py_procs (left 0 for a process that runs no known interpreter).
 *   py_emit(st): the native frame at st->pc is in _PyEval_EvalFrameDefault: push the Python
 *     frames that this C activation of the eval loop runs -- one frame in 3.10; in 3.11+ every
 *     frame down to the activation's entry frame (is_entry in 3.11, a frame owned by the C
 *     stack / the interpreter, owner >= 3, in 3.12-3.14).
 *   py_walk_end(st): the native walk is over. Python frames no activation claimed (the native
 *     walk stopped above the interpreter, or never reached it) follow one [truncated] word with
 *     the native walk's reason (GPUSCOPE_TRUNC_PYTHON when it ended normally), so the Python
 *     callers are kept and the gap is shown, never papered over.
 * A Python frame is GPUSCOPE_FRAME_PY(code object) then the byte offset of its current (3.13+)
 * or last executed (3.10-3.12) instruction from the start of the bytecode, with the code
 * object's stamp in the high half (python_abi.h); an unreadable frame is one
 * GPUSCOPE_FRAME_PY_UNKNOWN and ends the Python walk. Counted in py_stats. The first time a
 * code object is walked, its names are copied into py_names, so user space can name it after
 * the object is freed.
 *
 * The thread's PyThreadState is found without guessing: the interpreters' thread lists from
 * _PyRuntime are walked (bounded) for the entry whose native_thread_id is the tid (3.10: whose
 * thread_id, pthread_self(), is the thread's fs base); the answer is cached per tid and checked
 * again on every use. Offsets per process come from python_detect.c (struct gpuscope_py_proc).
 */
#ifndef GPUSCOPE_UNWIND_PYTHON_BPF_H
#define GPUSCOPE_UNWIND_PYTHON_BPF_H

#include "agent/unwind/python_abi.h"

#define PY_FRAMES_PER_CALL (GPUSCOPE_MAX_STACK / 2 + 1)	/* enough to fill a stack */
#define PY_THREAD_SCAN 256	/* thread-list steps per cache miss, all interpreters */
/* py_threads value of a thread without a PyThreadState, with the time it was looked for: it is
 * looked for again after PY_NO_TSTATE_NS (a C thread may call into Python later). */
#define PY_NO_TSTATE (1ULL << 63)
#define PY_NO_TSTATE_NS 1000000000ULL

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GPUSCOPE_PY_MAX_PROCS);
	__type(key, __u32);	/* tgid */
	__type(value, struct gpuscope_py_proc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, GPUSCOPE_PY_MAX_THREADS);
	__type(key, __u32);	/* tid */
	__type(value, __u64);	/* its PyThreadState, checked on every use; or PY_NO_TSTATE */
} py_threads SEC(".maps");

/* Names of code objects, copied while their frames run (python_abi.h); read by python.c. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, GPUSCOPE_PY_MAX_NAMES);
	__type(key, struct gpuscope_py_code_key);
	__type(value, struct gpuscope_py_name);
} py_names SEC(".maps");

/* Room to stamp a code object and build its py_names value (the BPF stack has no room left
 * under the native walk's frames: 512 bytes for the whole chain of calls). */
struct py_room {
	struct gpuscope_py_code_key k;
	__u64 w[3];		/* co_filename, co_name, co_qualname (3.10: co_linetable) */
	__u64 hdr[3];		/* a str object's length, hash, state */
	__u32 firstlineno;
	__u32 _pad;
	struct gpuscope_py_name v;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_room);
} py_room SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GPUSCOPE_PY_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} py_stats SEC(".maps");

enum py_walk_state {
	PY_WALK_OFF = 0,	/* not a Python process */
	PY_WALK_INIT,		/* Python process; thread state not looked up yet */
	PY_WALK_ACTIVE,		/* frame is the next frame to push */
	PY_WALK_DONE,		/* no Python frame left (or none at all) */
};

/* The Python walker's state inside struct uwalk (its py[] words). */
struct py_state {
	__u64 frame;		/* next frame to push (address in the process); 0: none */
	__u32 tid;
	__u8 state;		/* enum py_walk_state */
	__u8 layout;		/* enum gpuscope_py_layout */
	__u8 code_tag_mask;
	__u8 all;		/* push every frame left, not one activation's (py_walk_end()) */
	__u16 fr_previous, fr_code, fr_instr, fr_owner, fr_is_entry, co_code;
	__u16 co_firstlineno, co_filename;	/* co_filename GPUSCOPE_PY_NO_OFFSET: no stamps */
};
_Static_assert(sizeof(struct py_state) <= sizeof(((struct uwalk *)0)->py),
	       "struct py_state must fit in struct uwalk's py[]");

static __always_inline struct py_state *py_state(struct uwalk *st)
{
	return (struct py_state *)st->py;
}

static __always_inline void py_count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&py_stats, &which);

	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline __u64 py_read_u64(__u64 addr, int *err)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (const void *)addr))
		*err = 1;
	return v;
}

static __always_inline void py_walk_init(struct uwalk *st)
{
	struct gpuscope_py_proc *p = bpf_map_lookup_elem(&py_procs, &st->ktgid);
	struct py_state *ps = py_state(st);

	__builtin_memset(ps, 0, sizeof(*ps));
	st->eval_start = st->eval_end = 0;
	if (!p)
		return;
	st->eval_start = p->eval_start;
	st->eval_end = p->eval_end;
	ps->tid = (__u32)bpf_get_current_pid_tgid();
	ps->state = PY_WALK_INIT;
	ps->layout = p->layout;
	ps->code_tag_mask = p->code_tag_mask;
	ps->fr_previous = p->fr_previous;
	ps->fr_code = p->fr_code;
	ps->fr_instr = p->fr_instr;
	ps->fr_owner = p->fr_owner;
	ps->fr_is_entry = p->fr_is_entry;
	ps->co_code = p->co_code;
	ps->co_firstlineno = p->co_firstlineno;
	ps->co_filename = p->co_filename;
}

struct py_scan {
	__u64 key, interp, ts, found;
	__u64 head;		/* &_PyRuntime.interpreters.head */
	__u32 is_next, is_threads_head;
	__u16 ts_next, ts_thread_id;
};

/* One step of the thread-list walk (a bpf_loop callback): 1 ends the loop. */
static long py_scan_step(__u64 i, void *ctx)
{
	struct py_scan *c = ctx;
	int err = 0;

	if (!c->ts) {	/* next interpreter */
		c->interp = py_read_u64(c->interp ? c->interp + c->is_next : c->head, &err);
		if (!c->interp || err)
			return 1;
		c->ts = py_read_u64(c->interp + c->is_threads_head, &err);
		return err;
	}
	if (py_read_u64(c->ts + c->ts_thread_id, &err) == c->key && !err) {
		c->found = c->ts;
		return 1;
	}
	c->ts = py_read_u64(c->ts + c->ts_next, &err);
	return err;
}

/* The current thread's PyThreadState: cached and re-checked, else found on the thread list. */
static __always_inline __u64 py_find_tstate(struct py_state *ps, const struct gpuscope_py_proc *p)
{
	struct py_scan c = {
		.head = p->runtime + p->rt_interp_head, .is_next = p->is_next,
		.is_threads_head = p->is_threads_head, .ts_next = p->ts_next,
		.ts_thread_id = p->ts_thread_id, .key = ps->tid,
	};
	__u64 *cached, now = bpf_ktime_get_ns();
	__u32 tid = ps->tid;
	int err = 0;

	if (p->tid_is_fsbase) {		/* 3.10: thread_id is pthread_self(), the fs base */
#if defined(__TARGET_ARCH_x86)
		struct task_struct *task = bpf_get_current_task_btf();

		c.key = BPF_CORE_READ(task, thread.fsbase);
#else
		return 0;		/* python_detect.c does not enable 3.10 elsewhere */
#endif
	}
	cached = bpf_map_lookup_elem(&py_threads, &tid);
	if (cached) {
		__u64 ts = *cached;

		if (ts & PY_NO_TSTATE) {	/* a native thread, looked at recently */
			if (now - (ts & ~PY_NO_TSTATE) < PY_NO_TSTATE_NS)
				return 0;
		} else if (ts && py_read_u64(ts + c.ts_thread_id, &err) == c.key && !err) {
			return ts;
		}
		bpf_map_delete_elem(&py_threads, &tid);
	}
	py_count(GPUSCOPE_PY_STAT_THREAD_SCANS);
	if (bpf_loop(PY_THREAD_SCAN, py_scan_step, &c, 0) == PY_THREAD_SCAN && !c.found)
		py_count(GPUSCOPE_PY_STAT_SCAN_LIMIT);
	if (c.found) {
		bpf_map_update_elem(&py_threads, &tid, &c.found, BPF_ANY);
	} else {
		__u64 neg = PY_NO_TSTATE | now;

		bpf_map_update_elem(&py_threads, &tid, &neg, BPF_ANY);
	}
	return c.found;
}

/*
 * First need of the Python frames in a walk: the thread's current frame. A global function:
 * the thread-list loop is checked once, not once per state of the walk calling it.
 */
__noinline int uwalk_py_start(struct uwalk *st)
{
	struct gpuscope_py_proc *p;
	struct py_state *ps;
	__u64 ts, f;
	int err = 0;

	if (!st)
		return 0;
	ps = py_state(st);
	p = bpf_map_lookup_elem(&py_procs, &st->ktgid);
	ps->state = PY_WALK_DONE;
	if (!p)
		return 0;
	ts = py_find_tstate(ps, p);
	if (!ts) {
		py_count(GPUSCOPE_PY_STAT_NO_THREAD);
		return 0;
	}
	f = py_read_u64(ts + p->ts_frame, &err);
	if (f && p->cf_current != GPUSCOPE_PY_NO_OFFSET)
		f = py_read_u64(f + p->cf_current, &err);
	if (err || !f)
		return 0;
	py_count(GPUSCOPE_PY_STAT_WALKS);
	ps->frame = f;
	ps->state = PY_WALK_ACTIVE;
	return 0;
}

/*
 * Copies part of a str object's characters into dst: the first cap bytes (tail 0) or the last
 * ones (tail 1). Returns the bytes copied; *len and *state from the object.
 */
static __always_inline __u32 py_copy_str(struct py_room *r, __u64 obj,
					 const struct gpuscope_py_proc *p, __u8 *dst, __u32 cap,
					 int tail, __u64 *len, __u32 *state)
{
	__u64 bytes, from;
	__u32 kind;

	if (!obj || bpf_probe_read_user(r->hdr, sizeof(r->hdr), (const void *)(obj + 16)))
		return 0;
	*len = r->hdr[0];
	*state = (__u32)r->hdr[2];
	kind = (*state >> 2) & 7;
	if (!((*state >> 5) & 1) || (kind != 1 && kind != 2 && kind != 4) || r->hdr[0] > (1 << 20))
		return 0;	/* not a compact str: python.c says so */
	bytes = r->hdr[0] * kind;
	from = obj + ((*state >> 6) & 1 ? p->str_ascii : p->str_compact);
	if (bytes > cap) {
		if (tail)
			from += bytes - cap;	/* cap is a multiple of 4: on a character */
		bytes = cap;
	}
	bytes &= 0x3ff;
	if (bytes > cap || bpf_probe_read_user(dst, bytes, (const void *)from))
		return 0;
	return (__u32)bytes;
}

/* A code object not in py_names (r->k): its names copied there while its frame runs; ktgid:
 * the process whose Python entry describes the walked one (uwalk.ktgid). */
static __always_inline void py_name_code(struct py_room *r, __u32 ktgid)
{
	struct gpuscope_py_proc *p = bpf_map_lookup_elem(&py_procs, &ktgid);
	struct gpuscope_py_name *v = &r->v;
	__u64 name;

	if (!p)
		return;
	name = p->co_name_word == 2 ? r->w[2] : r->w[1];
	v->firstlineno = r->firstlineno;
	v->name_len = v->file_len = 0;
	v->name_state = v->file_state = 0;
	v->name_bytes = py_copy_str(r, name, p, v->name, GPUSCOPE_PY_NAME_BYTES, 0, &v->name_len,
				    &v->name_state);
	v->file_bytes = py_copy_str(r, r->w[0], p, v->file, GPUSCOPE_PY_FILE_BYTES, 1,
				    &v->file_len, &v->file_state);
	if (!v->name_bytes || bpf_map_update_elem(&py_names, &r->k, v, BPF_NOEXIST)) {
		py_count(GPUSCOPE_PY_STAT_NAME_FAILED);
		return;
	}
	py_count(GPUSCOPE_PY_STAT_NAMED);
}

/*
 * Pushes one frame: 1 ends the Python walk. A global function: the verifier checks it once,
 * not once per caller state of the loops that run it (as a static callback it took ~90 % of
 * the 250k-740k instructions the verifier processed for each walking program).
 */
__noinline int uwalk_py_frame(struct uwalk *st)
{
	struct py_state *ps;
	__u64 f, code, off = 0, prev;
	int err = 0;

	if (!st)
		return 1;
	ps = py_state(st);
	f = ps->frame;
	if (!f) {
		ps->state = PY_WALK_DONE;
		return 1;
	}
	if (ps->layout == GPUSCOPE_PY_LAYOUT_312) {
		__u8 owner = 0;

		if (bpf_probe_read_user(&owner, 1, (const void *)(f + ps->fr_owner)))
			goto read_failed;
		if (owner >= 3) {	/* the activation's entry frame: skip it; it ends one */
			ps->frame = py_read_u64(f + ps->fr_previous, &err);
			if (err)
				goto read_failed;
			return ps->all ? 0 : 1;
		}
	}
	if (st->n + 2 >= GPUSCOPE_MAX_STACK) {	/* both words, and the [truncated] slot */
		unwind_stop(st, GPUSCOPE_TRUNC_DEPTH);
		ps->state = PY_WALK_DONE;
		py_count(GPUSCOPE_PY_STAT_TRUNCATED);
		return 1;
	}
	code = py_read_u64(f + ps->fr_code, &err) & ~(__u64)ps->code_tag_mask;
	prev = py_read_u64(f + ps->fr_previous, &err);
	if (ps->layout == GPUSCOPE_PY_LAYOUT_310) {
		__s32 lasti = 0;

		if (bpf_probe_read_user(&lasti, 4, (const void *)(f + ps->fr_instr)))
			err = 1;
		off = lasti > 0 ? 2 * (__u64)lasti : 0;
	} else {
		__u64 ip = py_read_u64(f + ps->fr_instr, &err), start = code + ps->co_code;

		off = ip > start && ip - start < (1ULL << 31) ? ip - start : 0;
	}
	if (err || !code || code >= (1ULL << 56))
		goto read_failed;
	if (ps->co_filename != GPUSCOPE_PY_NO_OFFSET) {
		__u32 zero = 0;
		struct py_room *r = bpf_map_lookup_elem(&py_room, &zero);

		if (!r)
			goto read_failed;
		if (bpf_probe_read_user(&r->firstlineno, 4,
					(const void *)(code + ps->co_firstlineno)) ||
		    bpf_probe_read_user(r->w, sizeof(r->w), (const void *)(code + ps->co_filename)))
			goto read_failed;
		r->k.tgid = st->tgid;
		r->k.code = code;
		r->k.stamp = gpuscope_py_stamp(r->firstlineno, r->w[0], r->w[1], r->w[2]);
		off = (off & 0xffffffffULL) | (__u64)r->k.stamp << 32;
		if (!bpf_map_lookup_elem(&py_names, &r->k))
			py_name_code(r, st->ktgid);
	}
	if (!unwind_push(st, GPUSCOPE_FRAME_PY(code)) || !unwind_push(st, off))
		return 1;
	py_count(GPUSCOPE_PY_STAT_FRAMES);
	ps->frame = prev;
	if (ps->all)
		return 0;
	if (ps->layout == GPUSCOPE_PY_LAYOUT_310)
		return 1;
	if (ps->layout == GPUSCOPE_PY_LAYOUT_311) {
		__u8 entry = 0;

		if (bpf_probe_read_user(&entry, 1, (const void *)(f + ps->fr_is_entry)) || entry)
			return 1;
	}
	return 0;
read_failed:
	/* Unreadable (freed, paged out, torn by a concurrent change): one honest word. */
	unwind_push(st, GPUSCOPE_FRAME_PY_UNKNOWN);
	ps->state = PY_WALK_DONE;
	py_count(GPUSCOPE_PY_STAT_READ_FAILED);
	return 1;
}

/* A bpf_loop callback over st: one frame per step. */
static long py_step(__u64 i, void *ctx)
{
	return uwalk_py_frame(ctx) ? 1 : 0;
}

static __always_inline void py_emit(struct uwalk *st)
{
	struct py_state *ps = py_state(st);

	if (ps->state == PY_WALK_INIT)
		uwalk_py_start(st);
	if (ps->state != PY_WALK_ACTIVE) {
		if (ps->state == PY_WALK_DONE)
			py_count(GPUSCOPE_PY_STAT_EVAL_EMPTY);
		return;
	}
	ps->all = 0;
	bpf_loop(PY_FRAMES_PER_CALL, py_step, st, 0);
}

static __always_inline void py_walk_end(struct uwalk *st)
{
	struct py_state *ps = py_state(st);
	__u32 reason = st->reason ? st->reason : GPUSCOPE_TRUNC_PYTHON;

	if (ps->state == PY_WALK_INIT)
		uwalk_py_start(st);
	if (ps->state != PY_WALK_ACTIVE || !ps->frame)
		return;
	py_count(GPUSCOPE_PY_STAT_UNREACHED);
	if (reason == GPUSCOPE_TRUNC_DEPTH)
		return;		/* no room: the stack already ends in [truncated] */
	/* The gap, with the native walk's reason (counted as unwind.bpf.h counts the last one);
	 * then the Python callers. A full stack ends in a [truncated] word of its own. */
	unwind_count(UNWIND_ST_TRUNC_BASE + (reason & 15));
	st->reason = 0;
	st->done = 1;
	if (!unwind_push(st, GPUSCOPE_FRAME_TRUNCATED | reason))
		return;
	ps->all = 1;
	bpf_loop(PY_FRAMES_PER_CALL, py_step, st, 0);
}

#endif
