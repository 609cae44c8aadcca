// SPDX-License-Identifier: GPL-2.0
/*
 * CUDA driver API calls from uprobes/uretprobes on libcuda.so.1: one entry and one return
 * program, attached once per probed function with the API index (and a sync flag) as cookie.
 * Calls at least min_call_ns long and every synchronizing call become ring-buffer events with
 * the caller's user stack; shorter ones are counted per (thread, API, stack) in `calls`. Stacks
 * of calls shorter than walk_all_ns are walked for a random 1 in walk_one_in.
 * While a thread is inside a synchronizing call, `in_sync` (shared with sched.bpf.c) says so.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "agent/gpuscope.bpf.h"
#include "common/abi_strips.h"
#include "agent/unwind/unwind.bpf.h"
#include "agent/unwind/callsite.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u64 min_call_ns = 100000;
/*
 * The stack walk (12-28 us with Python frames on an H200) is most of a probed call's cost: a
 * call at least walk_all_ns long is always walked, a shorter one with chance 1/walk_one_in
 * (a power of two), so that the stacks of short calls are a fair sample at a bounded cost.
 */
const volatile __u64 walk_all_ns = 1000000;
const volatile __u32 walk_one_in = 16;
const volatile bool use_unwinder = false;	/* user stacks by unwind.bpf.h (unwind_stacks ids) */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

struct inflight {
	__u64 start_ns;
	__u64 entry_ip;
	__u64 cookie;
	__u64 sp;		/* stack pointer at entry: tells nested calls from stale entries */
	__u32 depth;		/* probed calls nested inside this one */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);	/* a return never seen (longjmp) ages out */
	__uint(max_entries, 16384);
	__type(key, __u32);	/* tid */
	__type(value, struct inflight);
} inflight SEC(".maps");

/* Same definition as in sched.bpf.c: user space makes both programs use one map. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} in_sync SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct gpuscope_cuda_agg_key);
	__type(value, struct gpuscope_cuda_agg_val);
} calls SEC(".maps");
/* the keys added to `calls`, for user space to drain it by (gpuscope.bpf.h) */
GPUSCOPE_KEYQ(calls_new, struct gpuscope_cuda_agg_key, 8192);
__u32 calls_keys_lost = 0;

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 8192);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, GPUSCOPE_MAX_STACK * sizeof(__u64));
} stacks SEC(".maps");

SEC("uprobe")
int cu_entry(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct inflight *f = bpf_map_lookup_elem(&inflight, &tid);
	struct inflight nf = {};
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u8 one = 1;

	/* deeper on the stack than the open call: nested; else the open one lost its return */
	if (f && PT_REGS_SP(ctx) < f->sp) {
		f->depth++;
		count_err(GPUSCOPE_CERR_NEST);
		return 0;
	}
	nf.start_ns = bpf_ktime_get_ns();
	nf.entry_ip = PT_REGS_IP(ctx);
	nf.cookie = cookie;
	nf.sp = PT_REGS_SP(ctx);
	if (bpf_map_update_elem(&inflight, &tid, &nf, BPF_ANY)) {
		count_err(GPUSCOPE_CERR_AGG_FULL);
		return 0;
	}
	if (cookie & GPUSCOPE_CUDA_SYNC)
		bpf_map_update_elem(&in_sync, &tid, &one, BPF_ANY);
	return 0;
}

/*
 * A short call counted per (thread, API, stack). Its own frame: the keys stay off the stack of
 * cu_return(), whose walk needs the room.
 */
static __noinline void count_call(struct inflight *f, __u64 id, __s32 ustack, __u64 now)
{
	__u64 dur = now - f->start_ns;
	struct gpuscope_cuda_agg_key k = {
		.tgid = id >> 32, .tid = (__u32)id, .api = f->cookie, .ustack_id = ustack,
		.entry_ip = f->entry_ip,
	};
	struct gpuscope_cuda_agg_val nv = {
		.count = 1, .ns = dur, .first_ns = f->start_ns, .last_ns = now,
	};
	struct gpuscope_cuda_agg_val *v = bpf_map_lookup_elem(&calls, &k);

	if (v) {
		/* one thread updates its own keys: no atomics needed */
		v->count++;
		v->ns += dur;
		v->last_ns = now;
	} else if (bpf_map_update_elem(&calls, &k, &nv, BPF_NOEXIST)) {
		count_err(GPUSCOPE_CERR_AGG_FULL);
	} else {
		keyq_push(&calls_new, &k, &calls_keys_lost);
	}
}

/*
 * A thread's last walked call: its call site (at the return: the caller's) and stack id. A call
 * to be walked from the same call site less than reuse_ns after that walk gets that stack
 * (GPUSCOPE_CERR_STACK_SAME): a training loop synchronizes from one place every step, and the
 * walk of its deep Python stack cost ~17 us a call on the dev VM. 0: every such call walked.
 */
const volatile __u64 reuse_ns = 1000000000ULL;

struct cu_last {
	struct gpuscope_callsite sig;
	__u64 walked_ns;
	__s32 ustack;
	__u32 tgid;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);	/* tid */
	__type(value, struct cu_last);
} cu_last SEC(".maps");

/* The caller's stack id at a return (the unwinder's), re-used from the thread's last walk when
 * it returns to the same call site. */
static __noinline __s32 caller_stack(struct pt_regs *ctx, __u32 tid, __u32 tgid, __u64 now)
{
	struct cu_last cur = { .tgid = tgid }, *last;
	struct uwalk st;
	__s32 ustack;

	unwind_init(&st, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx));
	st.first = 0;	/* a return address: its call is what the tables describe */
	if (reuse_ns) {
		callsite_sign(&st, &cur.sig);
		last = bpf_map_lookup_elem(&cu_last, &tid);
		if (last && last->tgid == tgid && callsite_same(&last->sig, &cur.sig) &&
		    now - last->walked_ns < reuse_ns) {
			count_err(GPUSCOPE_CERR_STACK_SAME);
			return last->ustack;
		}
		unwind_init(&st, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx));
		st.first = 0;
	}
	ustack = unwind_stackid(&st);
	/* a walk cut short (the process's tables not read yet: frame pointers only) is not one
	 * to stand for the next calls */
	if (reuse_ns && ustack >= 0 && !st.reason) {
		cur.walked_ns = now;
		cur.ustack = ustack;
		bpf_map_update_elem(&cu_last, &tid, &cur, BPF_ANY);
	}
	return ustack;
}

SEC("uretprobe")
int cu_return(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns(), dur;
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct inflight *f = bpf_map_lookup_elem(&inflight, &tid);
	__u64 cookie;
	__s32 ustack;

	if (!f)
		return 0;
	/* the outer call returns above its entry stack pointer; inner ones below it */
	if (f->depth && PT_REGS_SP(ctx) <= f->sp) {
		f->depth--;
		return 0;
	}
	dur = now - f->start_ns;
	cookie = f->cookie;
	/* at the return the stack is exactly the caller's: ip is the return address */
	if (dur < walk_all_ns && (bpf_get_prandom_u32() & (walk_one_in - 1))) {
		ustack = GPUSCOPE_USTACK_NOT_WALKED;
	} else if (use_unwinder) {
		ustack = caller_stack(ctx, tid, tgid, now);
	} else {
		ustack = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	}
	if (ustack < 0 && ustack != GPUSCOPE_USTACK_NOT_WALKED)
		count_err(GPUSCOPE_CERR_USTACK);
	if ((f->cookie & GPUSCOPE_CUDA_SYNC) || dur >= min_call_ns) {
		/* reserved, not built on the stack: the walker needs the room */
		struct gpuscope_ev_cuda_call *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);

		if (!ev) {
			count_err(GPUSCOPE_CERR_RINGBUF_FULL);
		} else {
			ev->hdr.type = GPUSCOPE_EV_CUDA_CALL;
			ev->hdr.size = sizeof(*ev);
			ev->start_ns = f->start_ns;
			ev->end_ns = now;
			ev->entry_ip = f->entry_ip;
			ev->tgid = tgid;
			ev->tid = tid;
			ev->api = f->cookie;
			ev->ustack_id = ustack;
			bpf_get_current_comm(ev->comm, sizeof(ev->comm));
			bpf_ringbuf_submit(ev, 0);
		}
	} else {
		count_call(f, id, ustack, now);
	}
	bpf_map_delete_elem(&inflight, &tid);
	if (cookie & GPUSCOPE_CUDA_SYNC)
		bpf_map_delete_elem(&in_sync, &tid);
	return 0;
}
