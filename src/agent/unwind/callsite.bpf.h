/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A thread's call site in a few cheap reads, for the programs that re-use a thread's last walked
 * stack while it calls from the same place again (cupti.bpf.c's backward calls, cudaprobe.bpf.c's
 * synchronizing CUDA calls): a walk costs 4-30 us, the signature 1-2 us. Include after
 * unwind.bpf.h.
 */
#ifndef GPUSCOPE_CALLSITE_BPF_H
#define GPUSCOPE_CALLSITE_BPF_H

/*
 * A call site as a few cheap reads see it (docs/cupti.md, "Repeated backward calls"), a struct
 * gpuscope_callsite (common/abi.h): the user sp and frame pointer at the probe, the return
 * address at [sp], and, folded into h, up to CALLSITE_FP_LEVELS (frame pointer, return address)
 * pairs of the frame-pointer chain and the innermost CALLSITE_PY_FRAMES Python frames' (address,
 * code object, instruction pointer).
 */

/* Whether two signatures name the same call site. */
static __always_inline bool callsite_same(const struct gpuscope_callsite *a,
					  const struct gpuscope_callsite *b)
{
	return a->sp == b->sp && a->bp == b->bp && a->ret == b->ret && a->h == b->h;
}

#define CALLSITE_FP_LEVELS	8
#define CALLSITE_PY_FRAMES	64

static __always_inline __u64 callsite_mix(__u64 h, __u64 v)
{
	h = (h ^ v) * 0x9e3779b97f4a7c15ULL;
	return h ^ (h >> 29);
}

/* bpf_loop state over a thread's Python frames, innermost first. */
struct callsite_py {
	__u64 frame, h;
	__u64 code_mask;
	__u16 fr_previous, fr_code, fr_instr;
	__u8 one_read;		/* the three fields lie in the frame's first 64 bytes */
};

static long callsite_py_step(__u64 i, void *ctx)
{
	struct callsite_py *w = ctx;
	__u64 buf[8] = {}, code, prev, ip;

	if (!w->frame)
		return 1;
	if (w->one_read) {
		if (bpf_probe_read_user(buf, sizeof(buf), (const void *)w->frame))
			goto unreadable;
		code = buf[(w->fr_code >> 3) & 7];
		prev = buf[(w->fr_previous >> 3) & 7];
		ip = buf[(w->fr_instr >> 3) & 7];
	} else if (bpf_probe_read_user(&code, 8, (const void *)(w->frame + w->fr_code)) ||
		   bpf_probe_read_user(&prev, 8, (const void *)(w->frame + w->fr_previous)) ||
		   bpf_probe_read_user(&ip, 8, (const void *)(w->frame + w->fr_instr))) {
		goto unreadable;
	}
	w->h = callsite_mix(callsite_mix(callsite_mix(w->h, w->frame), code & w->code_mask), ip);
	w->frame = prev;
	return 0;
unreadable:
	w->h = callsite_mix(w->h, 1);
	return 1;
}

/*
 * The call site of the current thread's call into *s; st: unwind_init()'s registers at the
 * probe (its Python state is set up here; a walk starts over with unwind_init()). A
 * global function: verified once.
 */
__noinline int callsite_sign(struct uwalk *st, struct gpuscope_callsite *s)
{
	struct callsite_py w = {};
	struct py_state *ps;
	__u64 fp, pair[2];

	if (!st || !s)
		return 0;
	s->sp = st->sp;
	s->bp = st->bp;
	s->ret = 0;
	s->h = 0;
	bpf_probe_read_user(&s->ret, 8, (const void *)st->sp);
	fp = st->bp;
	for (int i = 0; i < CALLSITE_FP_LEVELS; i++) {
		if (!fp || bpf_probe_read_user(pair, sizeof(pair), (const void *)fp))
			break;
		s->h = callsite_mix(s->h, pair[1]);
		if (pair[0] <= fp)
			break;
		fp = pair[0];
	}
	py_walk_init(st);
	ps = py_state(st);
	if (ps->state != PY_WALK_INIT)
		return 0;
	uwalk_py_start(st);
	if (ps->state != PY_WALK_ACTIVE)
		return 0;
	w.frame = ps->frame;
	w.h = s->h;
	w.code_mask = ~(__u64)ps->code_tag_mask;
	w.fr_previous = ps->fr_previous;
	w.fr_code = ps->fr_code;
	w.fr_instr = ps->fr_instr;
	w.one_read = !((w.fr_previous | w.fr_code | w.fr_instr) & 7) && w.fr_previous < 64 &&
		     w.fr_code < 64 && w.fr_instr < 64;
	bpf_loop(CALLSITE_PY_FRAMES, callsite_py_step, &w, 0);
	s->h = callsite_mix(w.h, 2);
	return 0;
}

#endif
