/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The user-stack walker every stack-taking BPF program uses (on-CPU, off-CPU, CUDA uprobes,
 * CUPTI launches): .eh_frame-derived tables where a binary has them (unwind_maps.h), frame
 * pointers where it has none, CPython frames spliced in by python.bpf.h. Its maps are created
 * once by user space (unwind.c) and shared by every program through bpf_map__reuse_fd().
 *
 * Use:  struct uwalk st;  unwind_init(&st, pc, sp, bp) or unwind_init_task(&st, regs);
 *       n = unwind_walk(&st, frames)   -- frames: room for GPUSCOPE_MAX_STACK words.
 */
#ifndef GPUSCOPE_UNWIND_BPF_H
#define GPUSCOPE_UNWIND_BPF_H

#include <bpf/bpf_core_read.h>
#include "common/abi.h"
#include "agent/unwind/frames.h"
#include "agent/unwind/unwind_maps.h"

#define UNWIND_EEXIST		17
#define UNWIND_ENOSPC		28
#define UNWIND_PY_ACTIVATIONS	16	/* interpreter activations spliced per stack */
#define UNWIND_PF_KTHREAD	0x00200000

/*
 * Only a shape: user space creates the real maps (unwind.c) and every program reuses them. No
 * BPF_F_INNER_MAP here, so a program that runs without the unwinder (use_unwinder false, maps
 * created by libbpf) still loads on kernels older than 5.10.
 */
struct unwind_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, UNWIND_MAX_TABLES);
	__type(key, __u32);
	__array(values, struct unwind_inner);
} unwind_tables SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, UNWIND_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} unwind_want SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UNWIND_ST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} unwind_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, UNWIND_MAX_STACKS);
	__type(key, __u32);
	__type(value, struct unwind_stack);
} unwind_stacks SEC(".maps");

struct unwind_scratch {
	__u32 depth, _pad;
	__u64 frames[UNWIND_SLOTS][1 + GPUSCOPE_MAX_STACK];	/* [0]: unwind_stacks header */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_scratch);
} unwind_scratch SEC(".maps");

/* One walk, on the BPF stack of the program taking the stack. */
struct uwalk {
	__u64 pc, sp, bp;		/* user registers of the frame being unwound */
	__u64 mm;			/* task->mm */
	__u64 eval_start, eval_end;	/* _PyEval_EvalFrameDefault in this process; 0: none
					 * (filled by py_walk_init()) */
	__u64 py[4];			/* the Python walker's own state (python.bpf.h); sized
					 * to struct py_state: this struct is on the stack of
					 * every walking program, under the 512-byte limit */
	__u32 tgid;
	__u32 ktgid;			/* the process whose entries (mappings, Python) describe
					 * this address space: tgid, or a fork child's parent's
					 * until the child's own are read (its mm checked then) */
	__u32 n;			/* words written */
	__u32 slot;			/* scratch slot holding the words */
	__u32 reason;			/* enum gpuscope_trunc once the walk ended early */
	__u8 done;			/* walk finished (end of stack or reason set) */
	__u8 py_pending;		/* the next native frame is in the interpreter loop */
	__u8 py_done_pc;		/* py_emit() ran for the frame at pc: push it natively */
	__u8 first;			/* pc is the interrupted pc, not a return address */
};

static __always_inline void unwind_count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&unwind_stats, &which);

	if (v)
		__sync_fetch_and_add(v, 1);
}

/* Ends the walk early for reason (enum gpuscope_trunc). */
static __always_inline void unwind_stop(struct uwalk *st, __u32 reason)
{
	st->reason = reason;
	st->done = 1;
}

/*
 * Appends one word (a native address or a special word from frames.h) to the walk's frames.
 * False when full (the walk then ends with GPUSCOPE_TRUNC_DEPTH); the last slot is kept for the
 * [truncated] word. For python.bpf.h too.
 */
static __always_inline bool unwind_push(struct uwalk *st, __u64 word)
{
	__u32 zero = 0, n = st->n, slot = st->slot;
	struct unwind_scratch *s;

	if (n >= GPUSCOPE_MAX_STACK - 1) {
		unwind_stop(st, GPUSCOPE_TRUNC_DEPTH);
		return false;
	}
	s = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!s || slot >= UNWIND_SLOTS)
		return false;
	s->frames[slot][1 + n] = word;
	st->n = n + 1;
	return true;
}

/* Reads a user word; false (and the walk stopped) when it faults. */
static __always_inline bool unwind_read(struct uwalk *st, __u64 addr, __u64 *ret)
{
	if (bpf_probe_read_user(ret, sizeof(*ret), (void *)addr)) {
		unwind_stop(st, GPUSCOPE_TRUNC_READ);
		return false;
	}
	return true;
}

#include "agent/unwind/python.bpf.h"

/*
 * Index of the mapping of p holding pc, or -1. A branch-free lower bound over all
 * UNWIND_MAX_MAPS slots (unused ones end at UNWIND_MAP_PAD): one verifier path, no state
 * explosion. Global: verified once.
 */
__noinline int uwalk_find_mapping(struct unwind_proc *p, __u64 pc)
{
	__u32 base = 0, i;

	if (!p)
		return -1;
#pragma unroll
	for (__u32 half = UNWIND_MAX_MAPS / 2; half > 0; half >>= 1) {
		/* end <= pc: the mapping is below pc (both < 2^63) */
		__u64 below = ((pc - p->m[(base + half - 1) & (UNWIND_MAX_MAPS - 1)].end) >> 63) ^ 1;

		base += half & -(__u32)below;
	}
	i = base & (UNWIND_MAX_MAPS - 1);
	if (i >= p->n || pc < p->m[i].start || pc >= p->m[i].end)
		return -1;
	return i;
}

/* The row in effect at vaddr in table `id`, or 0 (UNWIND_ROW_NONE) when none covers it or
 * the table is gone. Global: verified once. */
__noinline __u64 uwalk_find_row(__u32 id, __u64 vaddr)
{
	__u32 k = 0, npages, nrows, lo, hi, mid;
	__u64 *v, base, rel;
	void *table;

	table = bpf_map_lookup_elem(&unwind_tables, &id);
	if (!table) {
		unwind_count(UNWIND_ST_NO_TABLE);
		return 0;
	}
	v = bpf_map_lookup_elem(table, &k);
	if (!v)
		return 0;
	npages = (__u32)*v;
	nrows = *v >> 32;
	k = 1;
	v = bpf_map_lookup_elem(table, &k);
	if (!v)
		return 0;
	base = *v;
	if (vaddr < base || !nrows)
		return 0;
	rel = vaddr - base;
	if ((rel >> UNWIND_PAGE_SHIFT) >= npages)
		return 0;
	k = UNWIND_HDR_WORDS + (rel >> UNWIND_PAGE_SHIFT);
	v = bpf_map_lookup_elem(table, &k);
	if (!v)
		return 0;
	lo = *v;
	k++;
	v = bpf_map_lookup_elem(table, &k);
	if (!v)
		return 0;
	hi = *v;
	if (hi >= nrows)
		hi = nrows - 1;
	/* the last row with address <= rel in [lo, hi]; a page holds at most 4096 rows */
	for (int i = 0; i < 14 && lo < hi; i++) {	/* branch-free steps, as above */
		__u64 left, mask;

		mid = (lo + hi + 1) / 2;
		k = UNWIND_HDR_WORDS + npages + 1 + mid;
		v = bpf_map_lookup_elem(table, &k);
		if (!v)
			return 0;
		left = (rel - (__u64)UNWIND_ROW_ADDR(*v)) >> 63;	/* row starts after rel */
		mask = -left;
		hi = ((mid - 1) & mask) | (hi & ~mask);
		lo = (lo & mask) | (mid & ~mask);
	}
	k = UNWIND_HDR_WORDS + npages + 1 + lo;
	v = bpf_map_lookup_elem(table, &k);
	if (!v || UNWIND_ROW_ADDR(*v) > rel)
		return 0;
	return *v;
}

/* Frame-pointer step: the caller's pc, sp and bp from the rbp chain. */
static __always_inline void fp_step(struct uwalk *st)
{
	__u64 ra, bp;

	if (st->bp == 0) {	/* the outermost frame clears rbp */
		st->done = 1;
		return;
	}
	if (st->bp < st->sp || st->bp - st->sp > (8 << 20)) {
		unwind_stop(st, GPUSCOPE_TRUNC_BAD_FRAME);
		return;
	}
	if (!unwind_read(st, st->bp + 8, &ra) || !unwind_read(st, st->bp, &bp))
		return;
	st->sp = st->bp + 16;
	st->bp = bp;
	st->pc = ra;
	unwind_count(UNWIND_ST_FP_FRAMES);
}

/* Signal trampoline (__restore_rt): rsp points at the rt_sigframe's ucontext minus its
 * return address; registers come from its sigcontext. */
static __always_inline void signal_step(struct uwalk *st)
{
	__u64 mc = st->sp + 40;	/* uc_flags, uc_link, uc_stack: then the sigcontext */

	if (!unwind_read(st, mc + 10 * 8, &st->bp) || !unwind_read(st, mc + 16 * 8, &st->pc) ||
	    !unwind_read(st, mc + 15 * 8, &st->sp))
		return;
	st->first = 1;	/* an interrupted pc, not a return address */
}

static __always_inline void table_step(struct uwalk *st, __u64 row)
{
	__u64 cfa, ra, bp = st->bp;
	__s32 rbp8 = UNWIND_ROW_RBP8(row);

	switch (UNWIND_ROW_KIND(row)) {
	case UNWIND_ROW_RSP:
		cfa = st->sp + UNWIND_ROW_CFA(row);
		break;
	case UNWIND_ROW_RBP:
		cfa = st->bp + UNWIND_ROW_CFA(row);
		break;
	case UNWIND_ROW_PLT:
		cfa = st->sp + 8 + ((st->pc & 15) >= 11 ? 8 : 0);
		break;
	case UNWIND_ROW_END:
		st->done = 1;
		return;
	case UNWIND_ROW_SIGNAL:
		signal_step(st);
		return;
	default:
		fp_step(st);
		return;
	}
	if (cfa <= st->sp && UNWIND_ROW_KIND(row) != UNWIND_ROW_RSP) {
		unwind_stop(st, GPUSCOPE_TRUNC_BAD_FRAME);
		return;
	}
	if (!unwind_read(st, cfa - 8, &ra))
		return;
	if (rbp8 && !unwind_read(st, cfa + rbp8 * 8, &bp))
		return;
	st->pc = ra;
	st->sp = cfa;
	st->bp = bp;
	unwind_count(UNWIND_ST_TABLE_FRAMES);
}

/*
 * One native frame: push st->pc, then step to the caller. 1 when the walk is over (or paused
 * for py_emit()). A global function: the verifier checks it once, not per call site and loop
 * state, which keeps the walker within its budget.
 */
__noinline int uwalk_step(struct uwalk *st)
{
	struct unwind_mapping *m;
	struct unwind_proc *p;
	__u32 tgid;
	__u64 pc;
	int mi;

	if (!st || st->done)
		return 1;
	tgid = st->ktgid;
	pc = st->pc;
	if (pc == 0 || (pc >> 47)) {
		if (st->first)
			unwind_stop(st, GPUSCOPE_TRUNC_UNMAPPED);
		else
			st->done = 1;	/* a zero return address ends a stack */
		return 1;
	}
	p = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (!p || (tgid == st->tgid && p->mm != st->mm)) {
		/* not known (yet): frame pointers, and ask user space for the mappings */
		if (!unwind_push(st, pc))
			return 1;
		fp_step(st);
		st->first = 0;
		if (st->done && !st->reason)	/* unchecked frames: say so */
			unwind_stop(st, GPUSCOPE_TRUNC_NO_PROC);
		return st->done ? 1 : 0;
	}
	mi = uwalk_find_mapping(p, pc);
	if (mi < 0 || mi >= UNWIND_MAX_MAPS) {
		unwind_stop(st, GPUSCOPE_TRUNC_UNMAPPED);
		bpf_map_update_elem(&unwind_want, &st->tgid, &st->mm, BPF_ANY);
		if (st->first)	/* the interrupted pc itself is real: keep it */
			unwind_push(st, pc);
		return 1;
	}
	m = &p->m[mi & (UNWIND_MAX_MAPS - 1)];
	if (st->eval_start && pc >= st->eval_start && pc < st->eval_end && !st->py_done_pc) {
		st->py_pending = 1;	/* the driver runs py_emit(), then calls us again */
		return 1;
	}
	st->py_done_pc = 0;
	if (!unwind_push(st, pc))
		return 1;
	unwind_count(UNWIND_ST_FRAMES);
	/* a return address points after the call: look up the call itself */
	if (!st->first)
		pc -= 1;
	st->first = 0;
	if (m->flags & UNWIND_MAP_TABLE) {
		__u64 prev_sp = st->sp;

		table_step(st, uwalk_find_row(m->table, pc - m->bias));
		if (!st->done && st->sp <= prev_sp && !st->first) {
			unwind_stop(st, GPUSCOPE_TRUNC_BAD_FRAME);
			return 1;
		}
		return st->done ? 1 : 0;
	}
	fp_step(st);
	return st->done ? 1 : 0;
}

static long native_step(__u64 i, void *ctx)
{
	return uwalk_step(ctx) ? 1 : 0;
}

/* One interpreter activation: native frames up to the next eval-loop frame, then py_emit(). */
static long activation_step(__u64 i, void *ctx)
{
	struct uwalk *st = ctx;

	bpf_loop(GPUSCOPE_MAX_STACK, native_step, st, 0);
	if (!st->py_pending)
		return 1;
	st->py_pending = 0;
	py_emit(st);
	st->py_done_pc = 1;
	return 0;
}

/*
 * The walk proper: native frames in a bpf_loop, paused at each interpreter activation for
 * py_emit(); the activations themselves in an outer bpf_loop, so the verifier checks one
 * activation, not UNWIND_PY_ACTIVATIONS unrolled copies. A static subprogram: st stays a
 * pointer to the caller's stack, as bpf_loop wants.
 */
static __noinline int uwalk_run(struct uwalk *st)
{
	py_walk_init(st);
	bpf_loop(UNWIND_PY_ACTIVATIONS, activation_step, st, 0);
	py_walk_end(st);	/* Python frames no activation claimed: after a [truncated] word */
	return 0;
}

/* Starts a walk from user registers. */
static __always_inline void unwind_init(struct uwalk *st, __u64 pc, __u64 sp, __u64 bp)
{
	__builtin_memset(st, 0, sizeof(*st));
	st->pc = pc;
	st->sp = sp;
	st->bp = bp;
	st->first = 1;
	st->tgid = st->ktgid = bpf_get_current_pid_tgid() >> 32;
}

/*
 * Starts a walk from the current task's saved user registers (sched_switch, or a sample that
 * interrupted the kernel). False for kernel threads (no user stack).
 */
static __always_inline bool unwind_init_task(struct uwalk *st)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs;

	if (task->flags & UNWIND_PF_KTHREAD || !task->mm)
		return false;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return false;
	unwind_init(st, regs->ip, regs->sp, regs->bp);
	return true;
}

/*
 * A process not known yet that a fork made and that has not exec'd since (its executable is
 * the very file object its parent's is: an exec opens its own) has its parent's layout, so
 * the parent's mappings and Python entry walk it until its own are read. Its first samples
 * (a DataLoader worker's, a pre-fork server's) are then whole instead of frame pointers only.
 */
static __noinline void unwind_parent_maps(struct uwalk *st, struct task_struct *task)
{
	struct task_struct *parent = BPF_CORE_READ(task, real_parent);
	struct mm_struct *pmm = BPF_CORE_READ(parent, mm);
	struct unwind_proc *pp;
	__u32 ptgid;

	if (!pmm || BPF_CORE_READ(pmm, exe_file) != BPF_CORE_READ(task, mm, exe_file))
		return;
	ptgid = BPF_CORE_READ(parent, tgid);
	pp = bpf_map_lookup_elem(&unwind_procs, &ptgid);
	if (!pp || pp->mm != (__u64)pmm)
		return;
	st->ktgid = ptgid;
	unwind_count(UNWIND_ST_PARENT);
}

/*
 * After a fork child's walk with its parent's entry: its thread-state lookup, found or not, is
 * not kept. Right after the fork the state still bears the parent's id, and a second of "no
 * thread state" (py_find_tstate()) would be the whole life of a short worker.
 */
static __noinline void unwind_forget_tstate(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&py_threads, &tid);
}

/*
 * Walks the user stack from st's registers into a scratch slot: native frames innermost first,
 * Python frames spliced in, one GPUSCOPE_FRAME_TRUNCATED word last when cut short. Returns
 * the scratch (words at frames[st->slot][1 .. st->n]; release with unwind_release()), or NULL
 * when no slot was free (counted).
 */
static __always_inline struct unwind_scratch *unwind_take(struct uwalk *st)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct unwind_scratch *s;
	__u32 zero = 0, slot, n;
	struct unwind_proc *p;

	s = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!s)
		return NULL;
	slot = __sync_fetch_and_add(&s->depth, 1);
	if (slot >= UNWIND_SLOTS) {
		__sync_fetch_and_add(&s->depth, -1);
		unwind_count(UNWIND_ST_NESTED);
		return NULL;
	}
	st->slot = slot;
	st->mm = (__u64)task->mm;
	unwind_count(UNWIND_ST_WALKS);
	p = bpf_map_lookup_elem(&unwind_procs, &st->tgid);
	if (p && !p->mm)	/* registered by pid before its first walk: adopt this mm */
		p->mm = st->mm;
	if (!p || p->mm != st->mm) {
		unwind_count(UNWIND_ST_NO_PROC);
		bpf_map_update_elem(&unwind_want, &st->tgid, &st->mm, BPF_NOEXIST);
		unwind_parent_maps(st, task);
	}
	uwalk_run(st);
	if (st->ktgid != st->tgid)
		unwind_forget_tstate();
	if (!st->done && !st->reason)
		unwind_stop(st, GPUSCOPE_TRUNC_DEPTH);
	n = st->n;
	if (st->reason) {
		unwind_count(UNWIND_ST_TRUNC_BASE + (st->reason & 15));
		if (n < GPUSCOPE_MAX_STACK && slot < UNWIND_SLOTS)
			s->frames[slot][1 + n] = GPUSCOPE_FRAME_TRUNCATED | st->reason;
		n++;
	}
	st->n = n > GPUSCOPE_MAX_STACK ? GPUSCOPE_MAX_STACK : n;
	return s;
}

static __always_inline void unwind_release(struct unwind_scratch *s)
{
	__sync_fetch_and_add(&s->depth, -1);
}

/*
 * Walks into frames (room for GPUSCOPE_MAX_STACK words). Returns the number of words, or -1
 * when no scratch slot was free (counted).
 */
static __always_inline int unwind_walk(struct uwalk *st, __u64 *frames)
{
	struct unwind_scratch *s = unwind_take(st);
	__u32 n, slot;

	if (!s)
		return -1;
	n = st->n;
	slot = st->slot;
	if (n > GPUSCOPE_MAX_STACK)
		n = GPUSCOPE_MAX_STACK;
	if (slot < UNWIND_SLOTS)
		bpf_probe_read_kernel(frames, n * sizeof(__u64), &s->frames[slot][1]);
	unwind_release(s);
	return n;
}

/*
 * Walks and keeps the stack in unwind_stacks under an id derived from its words (the same
 * stack always gets the same id), for programs that aggregate by stack or report it later
 * (off-CPU, CUDA calls). Returns the id (>= 0) or -errno: -ENOSPC no scratch slot or the map
 * is full, -EEXIST another stack holds the id (counted). Read with unwinder__read_stack().
 */
static __always_inline __s32 unwind_stackid(struct uwalk *st)
{
	struct unwind_scratch *s = unwind_take(st);
	__u64 h = 0xcbf29ce484222325ULL, *old;
	__u32 n, slot, id;
	__s32 ret;

	if (!s)
		return -UNWIND_ENOSPC;
	n = st->n;
	slot = st->slot;
	if (slot >= UNWIND_SLOTS) {
		unwind_release(s);
		return -UNWIND_ENOSPC;
	}
	for (__u32 i = 0; i < GPUSCOPE_MAX_STACK; i++) {
		if (i >= n)
			break;
		h = (h ^ s->frames[slot][1 + i]) * 0x100000001b3ULL;
	}
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 32;
	s->frames[slot][0] = (h & ~0xffULL) | n;	/* header: hash and word count */
	id = (__u32)(h >> 33) & 0x7fffffff;
	old = bpf_map_lookup_elem(&unwind_stacks, &id);
	if (old) {
		ret = *old == s->frames[slot][0] ? (__s32)id : -UNWIND_EEXIST;
	} else {
		ret = bpf_map_update_elem(&unwind_stacks, &id, s->frames[slot], BPF_NOEXIST);
		if (!ret)
			unwind_count(UNWIND_ST_STACK_NEW);
		ret = ret && ret != -UNWIND_EEXIST ? -UNWIND_ENOSPC : (__s32)id;
	}
	if (ret < 0)
		unwind_count(ret == -UNWIND_EEXIST ? UNWIND_ST_STACK_COLLISION : UNWIND_ST_STACK_FULL);
	unwind_release(s);
	return ret;
}

#endif
