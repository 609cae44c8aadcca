// SPDX-License-Identifier: GPL-2.0
/*
 * On-CPU sampler: attached to a perf event per CPU; emits one event per sample with its own
 * timestamp, the kernel stack and the user stack, into a ring buffer. Filtering by pid is a map.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "agent/gpuscope.bpf.h"
#include "agent/unwind/unwind.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile bool filter_pids = false;	/* only sample tgids present in `pids` */
const volatile bool want_kernel = true;
const volatile bool use_unwinder = false;	/* unwind.bpf.h's walker; else frame pointers */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);	/* resized by the loader */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

#define SAMPLE_MAX (sizeof(struct gpuscope_ev_cpu_sample) + 2 * GPUSCOPE_MAX_STACK * 8)
struct scratch {
	struct gpuscope_ev_cpu_sample ev;
	__u64 frames[2 * GPUSCOPE_MAX_STACK];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch_map SEC(".maps");

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id, zero = 0;
	struct scratch *s;
	long kbytes = 0, ubytes = 0;
	__u64 size;

	if (tid == 0)	/* the idle task */
		return 0;
	if (filter_pids && !bpf_map_lookup_elem(&pids, &tgid)) {
		count_err(GPUSCOPE_ERR_FILTERED);
		return 0;
	}
	count_err(GPUSCOPE_ERR_SAMPLES);
	s = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!s)
		return 0;
	s->ev.hdr.type = GPUSCOPE_EV_CPU_SAMPLE;
	s->ev.ktime_ns = bpf_ktime_get_ns();
	s->ev.tgid = tgid;
	s->ev.tid = tid;
	s->ev.cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(s->ev.comm, sizeof(s->ev.comm));

	if (want_kernel) {
		kbytes = bpf_get_stack(ctx, s->frames, GPUSCOPE_MAX_STACK * 8, 0);
		if (kbytes < 0) {
			count_err(GPUSCOPE_ERR_KSTACK);
			kbytes = 0;
		}
	}
	kbytes &= 0xfff8;
	if (kbytes > GPUSCOPE_MAX_STACK * 8)
		kbytes = GPUSCOPE_MAX_STACK * 8;
	if (use_unwinder) {
		struct uwalk st;
		bool have = true;
		int n;

		/* a sample in user mode has the user registers; in the kernel, the saved ones */
		if (!(ctx->regs.ip >> 63))
			unwind_init(&st, ctx->regs.ip, ctx->regs.sp, ctx->regs.bp);
		else
			have = unwind_init_task(&st);
		n = have ? unwind_walk(&st, (void *)s->frames + kbytes) : 0;
		ubytes = n > 0 ? n * 8 : 0;
		if (n < 0)
			ubytes = -1;
	} else {
		ubytes = bpf_get_stack(ctx, (void *)s->frames + kbytes, GPUSCOPE_MAX_STACK * 8,
				       BPF_F_USER_STACK);
	}
	if (ubytes < 0) {
		count_err(GPUSCOPE_ERR_USTACK);
		ubytes = 0;
	}
	ubytes &= 0xfff8;
	if (ubytes > GPUSCOPE_MAX_STACK * 8)
		ubytes = GPUSCOPE_MAX_STACK * 8;
	s->ev.kstack_len = kbytes / 8;
	s->ev.ustack_len = ubytes / 8;
	size = sizeof(s->ev) + kbytes + ubytes;
	if (size > SAMPLE_MAX)
		size = SAMPLE_MAX;
	s->ev.hdr.size = size;
	if (bpf_ringbuf_output(&events, s, size, 0))
		count_err(GPUSCOPE_ERR_RINGBUF_FULL);
	return 0;
}

static __always_inline int emit_proc(__u32 type)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct gpuscope_ev_proc *ev;

	if (type == GPUSCOPE_EV_PROC_EXIT && (__u32)id != tgid)	/* a thread, not the process */
		return 0;
	if (filter_pids && !bpf_map_lookup_elem(&pids, &tgid))
		return 0;
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count_err(GPUSCOPE_ERR_RINGBUF_FULL);
		return 0;
	}
	ev->hdr.type = type;
	ev->hdr.size = sizeof(*ev);
	ev->ktime_ns = bpf_ktime_get_ns();
	ev->tgid = tgid;
	ev->_pad = 0;
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int on_exec(void *ctx)
{
	return emit_proc(GPUSCOPE_EV_PROC_EXEC);
}

SEC("tp_btf/sched_process_exit")
int on_exit(void *ctx)
{
	return emit_proc(GPUSCOPE_EV_PROC_EXIT);
}
