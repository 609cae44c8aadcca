// SPDX-License-Identifier: Apache-2.0
/*
 * The CUPTI module's ring events (cupti.bpf.c): launch stacks kept by (pid, correlation id) and
 * joined with the activity records into gpu_kernel_ns samples and gpu_kernel / memcpy / memset /
 * cuda_sync intervals, per-GPU gpu_busy intervals (the union of kernel executions), kernel names,
 * clock pairs, drop counts and the library's status (handed to winctl.c). Main-loop thread.
 */
#include <bpf/libbpf.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/types.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "agent/agent.h"
#include "agent/cupti/cupti_int.h"
#include "agent/labels.h"
#include "agent/sym/stacks.h"
#include "agent/sym/symbolize.h"
#include "common/abi.h"
#include "common/abi_cupti.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/util.h"

extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* ---- launches and stacks ------------------------------------------------------------------ */

#define LAUNCH_WAYS 4

static uint64_t launch_bucket(uint32_t pid, uint32_t cid)
{
	uint64_t h = ((uint64_t)pid << 32 | cid) * 0x9e3779b97f4a7c15ull;

	/* nested launch ids need not be dense, so mix; a bucket holds LAUNCH_WAYS launches */
	return h >> (64 - (LAUNCH_BITS - 2));	/* top bits; LAUNCH_WAYS == 1 << 2 */
}

/* Into a free way of its bucket, else over the oldest one (counted). */
static void put_launch(struct cupti_state *c, uint32_t pid, uint32_t cid, uint32_t tid,
		       uint32_t stack_slot, uint64_t stack_hash, uint32_t parent_slot,
		       uint32_t parent_check)
{
	struct launch *b = &c->launches[launch_bucket(pid, cid) * LAUNCH_WAYS], *l = &b[0];

	for (int i = 0; i < LAUNCH_WAYS; i++) {
		if (!b[i].pid || (b[i].pid == pid && b[i].cid == cid)) {
			l = &b[i];
			break;
		}
		if (b[i].seq < l->seq)
			l = &b[i];
	}
	if (l->pid && (l->pid != pid || l->cid != cid))
		c->st.launches_evicted++;
	l->pid = pid;
	l->cid = cid;
	l->tid = tid;
	l->stack_slot = stack_slot;
	l->stack_hash = stack_hash;
	l->parent_slot = parent_slot;
	l->parent_check = parent_check;
	l->seq = ++c->launch_seq;
}

static const struct launch *find_launch(struct cupti_state *c, uint32_t pid, uint32_t cid)
{
	const struct launch *b = &c->launches[launch_bucket(pid, cid) * LAUNCH_WAYS];

	for (int i = 0; i < LAUNCH_WAYS; i++)
		if (b[i].pid == pid && b[i].cid == cid)
			return &b[i];
	return NULL;
}

/*
 * The slot of this stack (hash h), taken in its set when new: an empty way, else the least
 * recently launched one. A direct-mapped cache lost every launch of a stack whose slot another
 * stack launched before its record came (all of forward()'s kernels in one test run).
 */
static uint32_t put_stack(struct cupti_state *c, uint32_t pid, const __u64 *frames, uint32_t n,
			  uint64_t h)
{
	uint32_t set = (uint32_t)(h >> (64 - (STACK_BITS - 3))), base = set * STACK_WAYS;
	uint32_t slot = base;
	struct raw_stack *rs;

	_Static_assert(STACK_WAYS == 1 << 3, "the set index assumes 8 ways");
	for (uint32_t i = base; i < base + STACK_WAYS; i++) {
		if (c->stacks[i].hash == h) {
			slot = i;
			goto found;
		}
		if (c->stacks[i].used < c->stacks[slot].used)
			slot = i;	/* an empty way has used 0 */
	}
	rs = &c->stacks[slot];
	rs->hash = h;
	rs->pid = pid;
	rs->n = n;
	memcpy(rs->frames, frames, 8ull * n);
found:
	c->stacks[slot].used = c->launch_seq + 1;	/* the seq put_launch gives next */
	return slot;
}

/*
 * The stack of the backward call under way in process p that thread tid works for (not its
 * caller's own thread), NULL when none was seen or the cache has replaced it since (then
 * forgotten: what is launched under it counts in backward_lost).
 */
static struct raw_stack *backward_stack(struct cupti_state *c, struct proc *p, uint32_t tid)
{
	struct raw_stack *ps;

	if (!p || !p->bw_hash || p->bw_tid == tid)
		return NULL;
	ps = &c->stacks[p->bw_slot];
	if (ps->hash == p->bw_hash)
		return ps;
	p->bw_hash = 0;
	return NULL;
}

void cupti_launch_put(struct cupti_state *c, struct proc *p, uint32_t pid, uint32_t tid,
		      uint32_t cid, uint32_t cid2, const __u64 *frames, uint32_t n)
{
	uint64_t h = hash64(frames, 8ull * n, pid) | 1;
	uint32_t slot = put_stack(c, pid, frames, n, h), pslot = 0, pcheck = 0;
	struct raw_stack *ps = backward_stack(c, p, tid);

	if (ps) {
		ps->used = c->launch_seq + 1;	/* in use while it is launched under */
		pslot = p->bw_slot;
		pcheck = (uint32_t)p->bw_hash | 1;
	}
	put_launch(c, pid, cid, tid, slot, h, pslot, pcheck);
	if (cid2)
		put_launch(c, pid, cid2, tid, slot, h, pslot, pcheck);
}

/* Thread t's walked backward stack becomes the parent of what p's other threads launch. */
static void backward_parent(struct proc *p, const struct bw_thread *t)
{
	p->bw_slot = t->slot;
	p->bw_hash = t->hash;
	p->bw_tid = t->tid;
}

void cupti_backward_put(struct cupti_state *c, struct proc *p, uint32_t tid, uint64_t walked_ns,
			bool nested, const __u64 *frames, uint32_t n)
{
	struct bw_thread *t = &p->bw_threads[0];

	for (int i = 0; i < BW_THREADS; i++) {
		if (p->bw_threads[i].tid == tid || !p->bw_threads[i].tid) {
			t = &p->bw_threads[i];
			break;
		}
		if (p->bw_threads[i].walked_ns < t->walked_ns)
			t = &p->bw_threads[i];
	}
	t->tid = tid;
	t->walked_ns = walked_ns;
	t->hash = 0;
	if (nested)
		return;
	t->hash = hash64(frames, 8ull * n, p->pid) | 1;
	t->slot = put_stack(c, p->pid, frames, n, t->hash);
	backward_parent(p, t);
}

bool cupti_backward_same(struct cupti_state *c, struct proc *p, uint32_t tid, uint64_t walked_ns)
{
	for (int i = 0; i < BW_THREADS; i++) {
		struct bw_thread *t = &p->bw_threads[i];

		if (t->tid != tid)
			continue;
		if (t->walked_ns != walked_ns)
			break;	/* a walk of tid this side never got (the queue lost it) */
		if (!t->hash) {
			c->st.backward_reused++;	/* nested: the outer call's caller stays */
			return true;
		}
		if (c->stacks[t->slot].hash != t->hash)
			break;	/* replaced in the cache */
		c->stacks[t->slot].used = c->launch_seq + 1;
		backward_parent(p, t);
		c->st.backward_reused++;
		return true;
	}
	c->st.backward_reuse_lost++;
	p->bw_hash = 0;		/* the call under way is someone's we do not know: no parent */
	return false;
}

const struct raw_stack *cupti_launch_stack(struct cupti_state *c, uint32_t pid, uint32_t cid,
					   const struct raw_stack **parent)
{
	const struct launch *l = find_launch(c, pid, cid);
	const struct raw_stack *ps;

	if (parent)
		*parent = NULL;
	if (!l)
		return NULL;
	if (c->stacks[l->stack_slot].hash != l->stack_hash) {	/* replaced by other stacks */
		c->st.stacks_evicted++;
		return NULL;
	}
	ps = &c->stacks[l->parent_slot];
	if (parent && l->parent_check && ((uint32_t)ps->hash | 1) == l->parent_check &&
	    ps->pid == pid)
		*parent = ps;
	return &c->stacks[l->stack_slot];
}

/* A launch event whose frames were checked against its size (cupti_handle_event()). */
static void on_launch(struct cupti_state *c, const struct gpuscope_ev_cupti_launch *ev)
{
	uint32_t n = ev->ustack_len;
	const __u64 *frames = (const void *)(ev + 1);

	c->st.launches++;
	struct proc *p = cupti_proc_get(c, ev->tgid);

	if (p) {
		p->win_launches++;
		/* uprobe programs are preemptible: a probe preempted on a loaded machine measures
		 * the wait too; the walk itself takes well under TRACE_PROBE_MAX_NS */
		p->win_probe_ns += ev->probe_ns < TRACE_PROBE_MAX_NS ? ev->probe_ns
								      : TRACE_PROBE_MAX_NS;
	}
	cupti_launch_put(c, p, ev->tgid, ev->tid, ev->cid, ev->cid2, frames, n);
}

/*
 * A backward call's entry: the caller's stack becomes the parent of what the process's other
 * threads launch from now on, unless the caller is one of autograd's own threads (a backward
 * nested in another: the outer one's caller stays).
 */
static void on_backward(struct cupti_state *c, const struct gpuscope_ev_cupti_launch *ev)
{
	uint32_t n = ev->ustack_len;
	const __u64 *frames = (const void *)(ev + 1);
	const struct sym_stack *st;
	struct proc *p;

	c->st.backwards++;
	c->st.backward_walks++;
	p = cupti_proc_find(c, ev->tgid);
	if (!p || !c->a->stacks)
		return;	/* a process the module does not trace (yet) */
	st = stack_cache__get(c->a->stacks, ev->tgid, NULL, 0, frames, n);
	cupti_backward_put(c, p, ev->tid, ev->ktime_ns, st && st->engine_at >= 0, frames, n);
}

/*
 * A backward call sent as "same stack as this thread's walk at a" (cupti.bpf.c): that stack
 * again, or, when it is not kept, none, and BPF walks the thread's next call.
 */
static void on_backward_same(struct cupti_state *c, const struct gpuscope_ev_cupti_pair *ev)
{
	struct proc *p;
	uint32_t tid = ev->what;

	c->st.backwards++;
	p = cupti_proc_find(c, ev->tgid);
	if (!p || !c->a->stacks)
		return;
	if (!cupti_backward_same(c, p, tid, ev->a))
		cupti_backward_rewalk(c, tid);
}

/*
 * Counts a kernel whose launch stack holds a Python frame, or, in a process whose launches have
 * shown one before, one whose stack holds none (a framework's own thread: an executor, a
 * runtime, a plain thread), which stays under that thread's own stack: not joined to the Python
 * call that dispatched the work. docs/cupti.md.
 */
static void python_caller(struct cupti_state *c, struct proc *p, bool has_python)
{
	if (has_python) {
		c->st.python_kernels++;
		p->python_seen = true;
	} else if (p->python_seen) {
		c->st.no_python_kernels++;
	}
}

/* The profiler's own frames on top of a launch stack: our callback and CUPTI's dispatch. */
static bool instrumentation_frame(const struct location *l)
{
	const char *m = l->module, *base;

	if (!m || l->kernel)
		return false;
	base = strrchr(m, '/');
	base = base ? base + 1 : m;
	return !strncmp(base, "libgpuscope_cupti", 17) || !strncmp(base, "libcupti.so", 11);
}

/*
 * The batch stack of a kernel: its name as the leaf over the launching stack, symbolized by the
 * agent's one stack cache (Python frames, [truncated] and unnamed code as in every other stack
 * kind), without the instrumentation's own innermost frames. rs NULL: the leaf alone. p: the
 * record's process (its Python-caller counts).
 */
static int64_t build_stack(struct cupti_state *c, struct proc *p, const struct raw_stack *rs,
			   const struct raw_stack *parent, const char *leaf)
{
	struct location only = { .function = leaf, .module = "[gpu]" };
	struct location locs[GPUSCOPE_MAX_STACK + 1];
	const struct sym_stack *st;
	uint32_t skip = 0, n;

	if (!rs || !c->a->stacks)
		return batch__stack(c->a->batch, &only, 1);
	st = stack_cache__get(c->a->stacks, rs->pid, NULL, 0, rs->frames, rs->n);
	if (!st)
		return -ENOMEM;
	while (skip < st->n && instrumentation_frame(&st->locs[skip]))
		skip++;
	if (skip == st->n)
		skip = 0;	/* nothing but our frames: keep them rather than nothing */
	n = st->n - skip;
	if (n > GPUSCOPE_MAX_STACK)
		n = GPUSCOPE_MAX_STACK;
	locs[0] = only;
	memcpy(&locs[1], &st->locs[skip], n * sizeof(*locs));
	c->st.stacks_symbolized++;
	/* an autograd thread's launch: its stack up to the worker loop, under the backward call's */
	if (st->engine_at < (int32_t)skip || (uint32_t)st->engine_at >= skip + n) {
		python_caller(c, p, st->has_python);
		return batch__stack(c->a->batch, locs, n + 1);
	}
	if (!parent) {
		c->st.backward_lost++;
		return batch__stack(c->a->batch, locs, n + 1);
	}
	c->st.backward_kernels++;
	python_caller(c, p, true);	/* the backward call's stack: a Python caller's */
	return agent__under_caller(c->a, locs, (uint32_t)st->engine_at - skip + 2, parent->pid,
				   parent->frames, parent->n);
}

/* a->shared.backward_caller (agent.h): the backward call pid's thread tid works for. */
static bool backward_caller(struct agent *a, pid_t pid, uint32_t tid, const __u64 **frames,
			    uint32_t *n)
{
	struct cupti_state *c = cupti_live;
	const struct raw_stack *ps = c ? backward_stack(c, cupti_proc_find(c, pid), tid) : NULL;

	if (!ps)
		return false;
	*frames = ps->frames;
	*n = ps->n;
	return true;
}

void cupti_backward_hook(struct agent *a, bool on)
{
	a->shared.backward_caller = on ? backward_caller : NULL;
}

/* ---- records ------------------------------------------------------------------------------ */

static struct busy *busy_get(struct cupti_state *c, uint32_t dev)
{
	struct busy *b = &c->busy[dev % MAX_DEVICES];

	if (b->used)
		return b->device == dev ? b : NULL;
	b->pend = malloc(BUSY_CAP * sizeof(*b->pend));
	if (!b->pend)
		return NULL;
	b->used = true;
	b->device = dev;
	snprintf(b->gpu_s, sizeof(b->gpu_s), "%u", dev);
	return b;
}

static int span_cmp(const void *x, const void *y)
{
	const struct span *a = x, *b = y;

	return a->start < b->start ? -1 : a->start > b->start;
}

/* Emits the union of pending kernel spans that can no longer grow; all of them when force. */
static void busy_flush(struct cupti_state *c, struct busy *b, bool force)
{
	struct label lab[3] = { { "gpu", b->gpu_s }, { "source", "kernels" } };
	size_t nlab = 2;
	uint64_t horizon = force ? UINT64_MAX : (b->max_end > BUSY_GRACE_NS ? b->max_end - BUSY_GRACE_NS : 0);
	size_t i = 0, keep = 0;

	if (!b->n)
		return;
	if (c->a->opts.node)
		lab[nlab++] = (struct label){ "node", c->a->opts.node };
	/* records mostly come in order: the kept spans and the new ones are sorted already */
	if (b->unsorted)
		qsort(b->pend, b->n, sizeof(*b->pend), span_cmp);
	b->unsorted = false;
	while (i < b->n) {
		uint64_t s = b->pend[i].start, e = b->pend[i].end;
		size_t j = i + 1;

		while (j < b->n && b->pend[j].start <= e) {
			if (b->pend[j].end > e)
				e = b->pend[j].end;
			j++;
		}
		if (e > horizon) {	/* may still merge with late records: keep */
			for (size_t k = i; k < j; k++)
				b->pend[keep++] = b->pend[k];
		} else {
			if (s < b->emitted_end) {	/* overlaps what we already sent */
				c->st.busy_late++;
				s = b->emitted_end;
			}
			if (e > s) {
				if (batch__interval(c->a->batch, "gpu_busy", lab, nlab, s, e, -1, NULL, 0))
					c->st.batch_errors++;
				else
					c->st.busy_intervals++;
				b->emitted_end = e;
			}
		}
		i = j;
	}
	b->n = keep;
}

static void busy_add(struct cupti_state *c, uint32_t dev, uint64_t s, uint64_t e)
{
	struct busy *b = busy_get(c, dev);

	if (!b) {
		c->st.busy_dropped++;
		return;
	}
	if (b->n == BUSY_CAP)
		busy_flush(c, b, true);
	if (b->n && s < b->pend[b->n - 1].start)
		b->unsorted = true;
	b->pend[b->n++] = (struct span){ s, e };
	if (e > b->max_end)
		b->max_end = e;
}

static const char *memcpy_kind(unsigned k)
{
	/* CUpti_ActivityMemcpyKind */
	static const char *const names[] = { "unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
					     "AtoD", "DtoA", "DtoD", "HtoH", "PtoP" };

	return k < ARRAY_SIZE(names) ? names[k] : "unknown";
}

#define GPU_UNKNOWN 0xffff

/*
 * The GPU a record of this process ran on, as the node numbers it: NVML's index of the device
 * with the UUID the library reported for that CUDA ordinal (CUDA_VISIBLE_DEVICES and a
 * container's device list renumber ordinals); the ordinal itself until then (one GPU, or no
 * NVML: the two agree or nothing else numbers the GPUs).
 */
static uint32_t gpu_of(struct cupti_state *c, struct proc *p, uint32_t ordinal)
{
	const unsigned char *u;
	char uuid[40];
	int idx;

	if (ordinal >= MAX_DEVICES || !(p->uuid_known >> ordinal & 1))
		return ordinal;
	if (p->nvml_gpu[ordinal])
		return p->nvml_gpu[ordinal] == GPU_UNKNOWN ? ordinal : p->nvml_gpu[ordinal] - 1u;
	if (!c->a->shared.gpu_index)	/* NVML not (yet) running: ask at the next record */
		return ordinal;
	u = p->dev_uuid[ordinal];
	snprintf(uuid, sizeof(uuid),
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
		 u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
		 u[15]);
	idx = c->a->shared.gpu_index(uuid);
	if (idx < 0 || idx >= GPU_UNKNOWN - 1) {
		p->nvml_gpu[ordinal] = GPU_UNKNOWN;
		c->st.devices_unmapped++;
		log_info("cupti: pid %d: CUDA device %u (%s) is not among NVML's GPUs: kernels stay "
			 "on gpu %u", p->pid, ordinal, uuid, ordinal);
		return ordinal;
	}
	p->nvml_gpu[ordinal] = (uint16_t)(idx + 1);
	c->st.devices_mapped++;
	if (idx != (int)ordinal)
		log_info("cupti: pid %d: CUDA device %u is NVML's gpu %d (%s)", p->pid, ordinal, idx,
			 uuid);
	return (uint32_t)idx;
}

/* Status DEVICE: the ordinal's UUID (16 bytes in a, b); resolved against NVML at first use. */
void cupti_on_device(struct proc *p, uint32_t ordinal, uint64_t a, uint64_t b)
{
	unsigned char u[16];

	if (ordinal >= MAX_DEVICES)
		return;
	memcpy(u, &a, 8);
	memcpy(u + 8, &b, 8);
	if ((p->uuid_known >> ordinal & 1) && !memcmp(u, p->dev_uuid[ordinal], 16))
		return;
	memcpy(p->dev_uuid[ordinal], u, 16);
	p->uuid_known |= 1ull << ordinal;
	p->nvml_gpu[ordinal] = 0;
}

static void emit_rec(struct cupti_state *c, struct proc *p, const struct gpuscope_cupti_rec *r);

/*
 * A kernel record that came before its launch: the flush at a window's close can hand the
 * record over before the launch's API exit fires the launch probe. Parked until the next
 * drain's end (true) rather than emitted unjoined; false when it has its launch, is no kernel,
 * or the park is full.
 */
static bool park(struct cupti_state *c, struct proc *p, const struct gpuscope_cupti_rec *r)
{
	if (r->kind != GPUSCOPE_CUPTI_KERNEL || find_launch(c, p->pid, r->correlation_id) ||
	    !c->parked || c->nparked >= PARK_CAP)
		return false;
	c->parked[c->nparked++] = (struct parked){ .pid = p->pid, .r = *r };
	return true;
}

void cupti_parked_retry(struct cupti_state *c, bool final)
{
	size_t keep = 0;

	for (size_t i = 0; i < c->nparked; i++) {
		struct parked *k = &c->parked[i];
		struct proc *p;

		if (!final && !find_launch(c, k->pid, k->r.correlation_id) && k->drains++ < 1) {
			c->parked[keep++] = *k;
			continue;
		}
		p = cupti_proc_get(c, k->pid);
		if (!p) {
			c->st.agent_drops++;
			continue;
		}
		if (find_launch(c, k->pid, k->r.correlation_id))
			c->st.joined_late++;
		emit_rec(c, p, &k->r);
	}
	c->nparked = keep;
}

static void on_rec(struct cupti_state *c, struct proc *p, const struct gpuscope_cupti_rec *r)
{
	if (!park(c, p, r))
		emit_rec(c, p, r);
}

static void emit_rec(struct cupti_state *c, struct proc *p, const struct gpuscope_cupti_rec *r)
{
	char gpu_s[12];
	uint32_t gpu;
	char dev_s[12], stream_s[12], cid_s[12], gid_s[12], nid_s[24], bytes_s[24];
	char grid_s[40], block_s[40], sub_s[12];
	struct agent_labels L;
	struct label attrs[12];
	uint64_t s, e;
	size_t na = 0;
	int64_t sid = -1;
	int err = 0;

	c->st.records++;
	if (!p->have_clock) {
		c->st.no_clock++;
		return;
	}
	if (!r->start_ns || r->end_ns < r->start_ns) {
		/* CUPTI leaves 0 where it has no timestamp (records flushed at a window's
		 * close): as a time it would land before 1970 and cost the whole batch */
		c->st.bad_records++;
		return;
	}
	s = r->start_ns + p->cupti_to_mono + c->a->mono_to_wall_ns;
	e = r->end_ns + p->cupti_to_mono + c->a->mono_to_wall_ns;
	gpu = gpu_of(c, p, r->device);
	snprintf(dev_s, sizeof(dev_s), "%u", r->device);
	snprintf(gpu_s, sizeof(gpu_s), "%u", gpu);
	/* node, pid, comm, container labels (valid until the next call), then gpu */
	if (agent__pid_labels(c->a, p->pid, 0, p->comm, &L) == LABELS_DROPPED) {
		/* a relabel rule dropped the process; the GPU was busy all the same */
		c->st.filtered++;
		if (r->kind == GPUSCOPE_CUPTI_KERNEL)
			busy_add(c, gpu, s, e);
		return;
	}
	if (r->kind != GPUSCOPE_CUPTI_SYNC)
		agent_labels__add(&L, "gpu", gpu_s);	/* the capacity keeps room for it */
	snprintf(stream_s, sizeof(stream_s), "%u", r->stream);

	switch (r->kind) {
	case GPUSCOPE_CUPTI_KERNEL: {
		const struct raw_stack *parent;
		const struct raw_stack *rs = cupti_launch_stack(c, p->pid, r->correlation_id, &parent);
		const char *name =
			r->name_idx < GPUSCOPE_CUPTI_NAMES_CAP ? p->names[r->name_idx] : NULL;
		char unk[40];

		c->st.kernels++;
		p->win_kernels++;
		if (gpu < 64) {
			p->devices |= 1ull << gpu;
			p->all_devices |= 1ull << gpu;
		}
		if (!name) {
			c->st.unknown_names++;
			snprintf(unk, sizeof(unk), "[unknown kernel #%u]", r->name_idx);
			name = unk;
		}
		if (rs)
			c->st.joined++;
		else
			c->st.unjoined++;
		sid = build_stack(c, p, rs, parent, name);
		if (sid < 0)
			c->st.batch_errors++;
		else if (batch__sample(c->a->batch, s, L.l, L.n, sid, SAMPLE_GPU_KERNEL_NS,
				       (int64_t)(e - s)))
			c->st.batch_errors++;
		snprintf(cid_s, sizeof(cid_s), "%u", r->correlation_id);
		snprintf(grid_s, sizeof(grid_s), "%u,%u,%u", r->grid[0], r->grid[1], r->grid[2]);
		snprintf(block_s, sizeof(block_s), "%u,%u,%u", r->block[0], r->block[1], r->block[2]);
		attrs[na++] = (struct label){ "name", name };
		attrs[na++] = (struct label){ "stream", stream_s };
		attrs[na++] = (struct label){ "device", dev_s };
		attrs[na++] = (struct label){ "correlation_id", cid_s };
		attrs[na++] = (struct label){ "grid", grid_s };
		attrs[na++] = (struct label){ "block", block_s };
		if (r->graph_id) {
			snprintf(gid_s, sizeof(gid_s), "%u", r->graph_id);
			snprintf(nid_s, sizeof(nid_s), "%" PRIu64, (uint64_t)r->graph_node_id);
			attrs[na++] = (struct label){ "graph_id", gid_s };
			attrs[na++] = (struct label){ "graph_node_id", nid_s };
			c->st.graph_kernels++;
		}
		/* the launch stack only when joined (else sid is the kernel name alone) */
		err = batch__interval(c->a->batch, "gpu_kernel", L.l, L.n, s, e,
				      sid >= 0 && rs ? sid : -1, attrs, na);
		busy_add(c, gpu, s, e);
		break;
	}
	case GPUSCOPE_CUPTI_MEMCPY:
	case GPUSCOPE_CUPTI_MEMSET:
		if (r->kind == GPUSCOPE_CUPTI_MEMCPY)
			c->st.memcpys++;
		else
			c->st.memsets++;
		snprintf(bytes_s, sizeof(bytes_s), "%" PRIu64, (uint64_t)r->bytes);
		snprintf(sub_s, sizeof(sub_s), "%u", r->subkind);
		attrs[na++] = (struct label){ "bytes", bytes_s };
		attrs[na++] = (struct label){ "kind", r->kind == GPUSCOPE_CUPTI_MEMCPY ?
							      memcpy_kind(r->subkind) : sub_s };
		attrs[na++] = (struct label){ "stream", stream_s };
		err = batch__interval(c->a->batch, r->kind == GPUSCOPE_CUPTI_MEMCPY ? "memcpy" : "memset",
				      L.l, L.n, s, e, -1, attrs, na);
		break;
	case GPUSCOPE_CUPTI_SYNC: {
		/* CUpti_ActivitySynchronizationType */
		static const char *const types[] = { "unknown", "event_synchronize",
						     "stream_wait_event", "stream_synchronize",
						     "context_synchronize" };
		c->st.syncs++;
		attrs[na++] = (struct label){ "type", r->subkind < ARRAY_SIZE(types) ?
							      types[r->subkind] : "unknown" };
		attrs[na++] = (struct label){ "stream", stream_s };
		err = batch__interval(c->a->batch, "cuda_sync", L.l, L.n, s, e, -1, attrs, na);
		break;
	}
	default:
		c->st.bad_records++;
		return;
	}
	if (err)
		c->st.batch_errors++;
}

static void on_name(struct cupti_state *c, struct proc *p, const struct gpuscope_ev_cupti_name *ev)
{
	char raw[GPUSCOPE_CUPTI_NAME_MAX + 1], *dem;
	int status = -1;

	if (ev->idx >= GPUSCOPE_CUPTI_NAMES_CAP || !ev->name[0]) {
		c->st.bad_events++;
		return;
	}
	memcpy(raw, ev->name, GPUSCOPE_CUPTI_NAME_MAX);
	raw[GPUSCOPE_CUPTI_NAME_MAX] = 0;
	dem = __cxa_demangle(raw, NULL, NULL, &status);
	if (!dem || status)
		dem = strdup(raw);
	free(p->names[ev->idx]);
	p->names[ev->idx] = dem;
	c->st.names++;
}

static void on_clock(struct cupti_state *c, struct proc *p, uint64_t cupti_ns, uint64_t mono)
{
	int64_t off = (int64_t)(mono - cupti_ns);

	if (p->have_clock) {
		int64_t d = off - p->cupti_to_mono;

		if (d < 0)
			d = -d;
		if ((uint64_t)d > c->st.clock_max_step_ns)
			c->st.clock_max_step_ns = d;
	}
	p->cupti_to_mono = off;
	p->have_clock = true;
	c->st.clock_pairs++;
}

int cupti_handle_event(void *ctx, void *data, size_t size)
{
	struct cupti_state *c = ctx;
	const struct gpuscope_ev_cupti_pair *hdr = data;	/* type, size, tgid: common prefix */
	const struct gpuscope_ev_cupti_launch *launch = data;	/* ...except for launches */
	struct proc *p;

	if (size < sizeof(*hdr) || hdr->size > size) {
		c->st.bad_events++;
		return 0;
	}
	if (hdr->type == GPUSCOPE_EV_CUPTI_LAUNCH || hdr->type == GPUSCOPE_EV_CUPTI_BACKWARD) {
		/* both carry ustack_len frames after the event */
		if (size < sizeof(*launch) || launch->ustack_len > GPUSCOPE_MAX_STACK ||
		    size < sizeof(*launch) + 8ull * launch->ustack_len)
			c->st.bad_events++;
		else if (!cupti_pid_wanted(c->a, launch->tgid))
			c->st.filtered++;
		else if (hdr->type == GPUSCOPE_EV_CUPTI_LAUNCH)
			on_launch(c, launch);
		else
			on_backward(c, launch);
		return 0;
	}
	if (!cupti_pid_wanted(c->a, hdr->tgid)) {
		c->st.filtered++;
		return 0;
	}
	if (hdr->type == GPUSCOPE_EV_CUPTI_BACKWARD_SAME) {	/* of a process already traced */
		on_backward_same(c, hdr);
		return 0;
	}
	p = cupti_proc_get(c, hdr->tgid);
	switch (hdr->type) {
	case GPUSCOPE_EV_CUPTI_RECS: {
		const struct gpuscope_ev_cupti_recs *ev = data;

		if (size < sizeof(*ev) || ev->n > GPUSCOPE_CUPTI_RECS_PER_EV) {
			c->st.bad_events++;
			break;
		}
		if (!p) {
			c->st.agent_drops += ev->n;
			break;
		}
		for (uint32_t i = 0; i < ev->n; i++)
			on_rec(c, p, &ev->recs[i]);
		break;
	}
	case GPUSCOPE_EV_CUPTI_NAME:
		if (size >= sizeof(struct gpuscope_ev_cupti_name) && p)
			on_name(c, p, data);
		break;
	case GPUSCOPE_EV_CUPTI_CLOCK:
		if (size >= sizeof(*hdr) && p)
			on_clock(c, p, hdr->a, hdr->b);
		break;
	case GPUSCOPE_EV_CUPTI_DROPS:
		if (size >= sizeof(*hdr) && p) {
			p->cupti_drops = hdr->a;
			p->lib_drops = hdr->b;
		}
		break;
	case GPUSCOPE_EV_CUPTI_STATUS:
		if (size >= sizeof(*hdr) && p)
			cupti_on_status(c, p, hdr->what, hdr->a, hdr->b);
		break;
	default:
		c->st.bad_events++;
	}
	return 0;
}

void cupti_busy_flush(struct cupti_state *c, bool force)
{
	for (int i = 0; i < MAX_DEVICES; i++)
		if (c->busy[i].used)
			busy_flush(c, &c->busy[i], force);
}
