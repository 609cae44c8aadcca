// SPDX-License-Identifier: GPL-2.0
/*
 * CUPTI hand-off: attached to the USDT probes of libgpuscope_cupti.so (src/common/abi_cupti.h).
 * At a launch it takes the launching thread's user stack; at a completed buffer it copies the
 * library's compact activity records into the ring buffer in bounded chunks. User space joins.
 * No ring-buffer wakeup per event (BPF_RB_NO_WAKEUP): the agent drains on its tick, and a
 * wakeup per launch would cost the launching thread an irq_work. Only the event that takes the
 * ring past WAKE_BYTES wakes the agent (rb_flags()), so a small ring holds a launch-bound burst.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include "agent/gpuscope.bpf.h"
#include "common/abi_cupti.h"
#include "agent/unwind/unwind.bpf.h"
#include "agent/unwind/callsite.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile bool use_unwinder = false;	/* user stacks by unwind.bpf.h */

#define RING_BYTES (4u << 20)
#define WAKE_BYTES (1u << 20)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	/*
	 * ~1.1 KiB per launch: the 145 k launches/s of a launch-bound loop on the H200 fill 1 MiB
	 * in 6.5 ms; past WAKE_BYTES the agent is woken to drain, leaving 3 MiB (~20 ms) for it to
	 * get there. The consumer maps the ring twice, so it counts twice in the agent's RSS.
	 */
	__uint(max_entries, RING_BYTES);
} events SEC(".maps");

/*
 * Submit flags for an event of `size` bytes just reserved: a wakeup for the one whose record
 * (with its 8-byte header, 8-aligned) took the unread data past WAKE_BYTES, and for every one
 * past 3/4 of the ring (a crossing missed between another CPU's reserve and this query, or an
 * agent slow to come).
 */
static __always_inline __u64 rb_flags(__u64 size)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 rec = (size + 8 + 7) & ~7ULL;

	if (avail >= RING_BYTES / 4 * 3 || (avail >= WAKE_BYTES && avail - rec < WAKE_BYTES))
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* A launch event with room for the deepest stack; only ustack_len frames are meaningful. */
struct launch_ev {
	struct gpuscope_ev_cupti_launch ev;
	__u64 frames[GPUSCOPE_MAX_STACK];
};

/*
 * A launch-like event of `type` with the current thread's user stack from the probe's pc (st:
 * room for the walk). *ret_ktime_ns (may be NULL): the event's ktime_ns, set when it holds a
 * stack.
 * Uprobe programs are preemptible (migrate_disable only), so a per-CPU scratch buffer could be
 * overwritten by another launching thread on the same CPU: the stack goes straight into a
 * ring-buffer reservation instead.
 */
static __always_inline int emit_stack(struct pt_regs *ctx, struct uwalk *st, __u32 type,
				      __u32 cid, __u32 cid2, __u64 *ret_ktime_ns)
{
	__u64 id = bpf_get_current_pid_tgid(), t0 = bpf_ktime_get_ns(), dt;
	struct launch_ev *e;
	long n;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_err(GPUSCOPE_CUPTI_ERR_RINGBUF);
		return 0;
	}
	e->ev.type = type;
	e->ev.ktime_ns = bpf_ktime_get_ns();
	e->ev.tgid = id >> 32;
	e->ev.tid = (__u32)id;
	e->ev.cid = cid;
	e->ev.cid2 = cid2;
	if (use_unwinder) {
		/* at the probe: the exact pc inside the injection library's callback */
		unwind_init(st, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx));
		n = unwind_walk(st, e->frames);
		n = n < 0 ? -1 : n * 8;
	} else {
		n = bpf_get_stack(ctx, e->frames, sizeof(e->frames), BPF_F_USER_STACK);
	}
	if (n < 0) {
		count_err(GPUSCOPE_CUPTI_ERR_USTACK);
		n = 0;
	}
	else if (ret_ktime_ns && !(use_unwinder && st->reason))
		*ret_ktime_ns = e->ev.ktime_ns;	/* a whole stack was taken: the event stands for it */
	e->ev.ustack_len = n / 8;
	e->ev.size = sizeof(e->ev) + (n / 8) * 8;
	dt = bpf_ktime_get_ns() - t0;
	e->ev.probe_ns = dt > 0xffffffffULL ? 0xffffffffU : (__u32)dt;
	bpf_ringbuf_submit(e, rb_flags(sizeof(*e)));
	return 0;
}

SEC("usdt")
int BPF_USDT(on_launch, __u32 cid, __u32 cid2)
{
	struct uwalk st;

	count_err(GPUSCOPE_CUPTI_ERR_LAUNCHES);
	return emit_stack(ctx, &st, GPUSCOPE_EV_CUPTI_LAUNCH, cid, cid2, NULL);
}

static __always_inline int emit_pair(__u32 type, __u32 what, __u64 a, __u64 b)
{
	struct gpuscope_ev_cupti_pair ev = {
		.type = type,
		.size = sizeof(ev),
		.tgid = bpf_get_current_pid_tgid() >> 32,
		.what = what,
		.a = a,
		.b = b,
	};

	if (bpf_ringbuf_output(&events, &ev, sizeof(ev), BPF_RB_NO_WAKEUP))
		count_err(GPUSCOPE_CUPTI_ERR_RINGBUF);
	return 0;
}

/* A thread's last walked backward call: its call site and the walked event's ktime_ns. */
struct bw_last {
	struct gpuscope_callsite sig;
	__u64 walked_ns;
	__u32 tgid, _pad;
};

#define BW_THREADS	4096

/* How long a thread's last walked stack may stand for its repeated calls; 0: walk every call.
 * A wrong reuse (docs/cupti.md) lives at most this long. */
const volatile __u64 bw_reuse_ns = 1000000000ULL;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, BW_THREADS);
	__type(key, __u32);	/* tid */
	__type(value, struct bw_last);
} bw_last SEC(".maps");

/*
 * Entry of torch::autograd::Engine::execute in libtorch_cpu (a backward pass or autograd.grad):
 * the calling thread's stack, which records.c puts above the kernels that autograd's device
 * threads launch for it. Once per backward call, in every process mapping that library; a
 * thread's call from the call site of its last walked one, walked less than bw_reuse_ns ago,
 * sends a BACKWARD_SAME event naming that walk instead of walking again.
 */
SEC("uprobe")
int on_backward(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), walked_ns = 0, now;
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct bw_last cur = { .tgid = tgid }, *last;
	struct uwalk st;

	count_err(GPUSCOPE_CUPTI_ERR_BACKWARDS);
	if (!bw_reuse_ns)
		return emit_stack(ctx, &st, GPUSCOPE_EV_CUPTI_BACKWARD, 0, 0, NULL);
	unwind_init(&st, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx));
	callsite_sign(&st, &cur.sig);
	last = bpf_map_lookup_elem(&bw_last, &tid);
	now = bpf_ktime_get_ns();
	if (last && last->tgid == tgid && callsite_same(&last->sig, &cur.sig) &&
	    now - last->walked_ns < bw_reuse_ns) {
		count_err(GPUSCOPE_CUPTI_ERR_BACKWARDS_SAME);
		return emit_pair(GPUSCOPE_EV_CUPTI_BACKWARD_SAME, tid, last->walked_ns, now);
	}
	emit_stack(ctx, &st, GPUSCOPE_EV_CUPTI_BACKWARD, 0, 0, &walked_ns);
	if (walked_ns) {
		cur.walked_ns = walked_ns;
		bpf_map_update_elem(&bw_last, &tid, &cur, BPF_ANY);
	} else if (last) {
		bpf_map_delete_elem(&bw_last, &tid);
	}
	return 0;
}

struct copy_ctx {
	__u64 recs;	/* user address of the array */
	__u32 n;	/* records in it */
	__u32 tgid;
};

static long copy_chunk(__u32 i, struct copy_ctx *c)
{
	struct gpuscope_ev_cupti_recs *ev;
	__u32 off = i * GPUSCOPE_CUPTI_RECS_PER_EV, cnt;
	__u64 bytes;

	if (off >= c->n)
		return 1;
	cnt = c->n - off;
	if (cnt > GPUSCOPE_CUPTI_RECS_PER_EV)
		cnt = GPUSCOPE_CUPTI_RECS_PER_EV;
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count_err_n(GPUSCOPE_CUPTI_ERR_RECS_LOST, cnt);
		return 0;
	}
	ev->type = GPUSCOPE_EV_CUPTI_RECS;
	ev->size = sizeof(*ev);
	ev->tgid = c->tgid;
	ev->seq = i;
	ev->n = cnt;
	ev->err = 0;
	bytes = (__u64)cnt * sizeof(struct gpuscope_cupti_rec);
	asm volatile("" : "+r"(bytes));	/* keep the clamp below where the verifier sees it */
	if (bytes > sizeof(ev->recs))
		bytes = sizeof(ev->recs);
	if (bpf_probe_read_user(ev->recs, bytes,
				(const void *)(c->recs + (__u64)off * sizeof(struct gpuscope_cupti_rec)))) {
		count_err(GPUSCOPE_CUPTI_ERR_READ);
		count_err_n(GPUSCOPE_CUPTI_ERR_RECS_LOST, cnt);
		ev->err = cnt;
		ev->n = 0;
	}
	bpf_ringbuf_submit(ev, rb_flags(sizeof(*ev)));
	return 0;
}

SEC("usdt")
int BPF_USDT(on_buffer, __u64 recs, __u32 n)
{
	struct copy_ctx c = { .recs = recs, .n = n, .tgid = bpf_get_current_pid_tgid() >> 32 };

	if (c.n > GPUSCOPE_CUPTI_MAX_RECS) {
		count_err(GPUSCOPE_CUPTI_ERR_TRUNC);
		count_err_n(GPUSCOPE_CUPTI_ERR_RECS_LOST, c.n - GPUSCOPE_CUPTI_MAX_RECS);
		c.n = GPUSCOPE_CUPTI_MAX_RECS;
	}
	bpf_loop((c.n + GPUSCOPE_CUPTI_RECS_PER_EV - 1) / GPUSCOPE_CUPTI_RECS_PER_EV, copy_chunk,
		 &c, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_name, __u32 idx, __u64 str)
{
	struct gpuscope_ev_cupti_name *ev;

	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count_err(GPUSCOPE_CUPTI_ERR_RINGBUF);
		return 0;
	}
	ev->type = GPUSCOPE_EV_CUPTI_NAME;
	ev->size = sizeof(*ev);
	ev->tgid = bpf_get_current_pid_tgid() >> 32;
	ev->idx = idx;
	if (bpf_probe_read_user_str(ev->name, sizeof(ev->name), (const void *)str) < 0) {
		count_err(GPUSCOPE_CUPTI_ERR_READ);
		ev->name[0] = 0;
	}
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_clock, __u64 cupti_ns, __u64 mono_ns)
{
	return emit_pair(GPUSCOPE_EV_CUPTI_CLOCK, 0, cupti_ns, mono_ns);
}

SEC("usdt")
int BPF_USDT(on_drops, __u64 cupti, __u64 lib)
{
	return emit_pair(GPUSCOPE_EV_CUPTI_DROPS, 0, cupti, lib);
}

SEC("usdt")
int BPF_USDT(on_status, __u32 what, __u64 a, __u64 b)
{
	return emit_pair(GPUSCOPE_EV_CUPTI_STATUS, what, a, b);
}

/* Attached for one process at a time: the attachment itself (the semaphore) opens its window. */
SEC("usdt")
int BPF_USDT(on_window, __u32 open)
{
	return 0;
}
