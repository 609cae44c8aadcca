/* SPDX-License-Identifier: Apache-2.0 */
/* Symbolized-stack cache: (pid, raw frames) -> location list, bounded, cleared when full. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "agent/agent.h"
#include "agent/sym/stacks.h"
#include "agent/selfprof.h"
#include "agent/sym/symbolize.h"
#include "agent/unwind/frames.h"
#include "common/abi.h"
#include "agent/unwind/pysym.h"
#include "common/hmap.h"
#include "common/util.h"

struct stack_cache {
	struct symbolizer *sym;
	struct u64map index;		/* key -> (struct sym_stack *) */
	struct sym_stack **stacks;	/* owned, for freeing */
	size_t len, max;
	size_t bytes, max_bytes;	/* of the stacks held; cleared past max_bytes */
	struct strtab names;		/* "[unknown] module" names, kept across clears */
	struct stack_cache_stats stats;
};

struct stack_cache *stack_cache__new(struct symbolizer *s, size_t max_stacks)
{
	struct stack_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->sym = s;
	c->max = max_stacks ? max_stacks : 65536;
	c->max_bytes = STACK_CACHE_MAX_BYTES;
	c->stacks = calloc(c->max, sizeof(*c->stacks));
	if (!c->stacks) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	return c;
}

static void clear(struct stack_cache *c)
{
	for (size_t i = 0; i < c->len; i++)
		free(c->stacks[i]);
	c->len = 0;
	c->bytes = 0;
	u64map_done(&c->index);
}

void stack_cache__free(struct stack_cache *c)
{
	if (!c)
		return;
	clear(c);
	free(c->stacks);
	strtab_done(&c->names);
	free(c);
}

static const char *unknown_name(struct stack_cache *c, const char *module)
{
	const char *base = module ? strrchr(module, '/') : NULL;
	char buf[512];
	int64_t idx;

	snprintf(buf, sizeof(buf), "[unknown] %s", base ? base + 1 : module ? module : "[anon]");
	idx = strtab_intern(&c->names, buf);
	return idx < 0 ? "[unknown]" : c->names.strs[idx];
}

static void fill(struct stack_cache *c, struct location *loc, const struct sym_frame *f, int err)
{
	memset(loc, 0, sizeof(*loc));
	loc->module = f->module;
	loc->build_id = f->build_id;
	loc->address = f->file_offset;
	loc->kernel = f->kernel;
	loc->function = err ? unknown_name(c, f->module) : f->function;
}

/* The agent's own BPF frames (tracepoint and perf-event trampolines) on top of a kernel stack. */
static bool bpf_frame(const char *fn)
{
	return fn && (!strncmp(fn, "bpf_prog_", 9) || !strncmp(fn, "bpf_trace_run", 13) ||
		      !strncmp(fn, "__bpf_trace_", 12) || !strncmp(fn, "__traceiter_", 12) ||
		      !strncmp(fn, "bpf_overflow_handler", 20));
}

static void special(struct stack_cache *c, struct location *loc, const char *name)
{
	memset(loc, 0, sizeof(*loc));
	loc->function = name;
	loc->module = name;
	loc->build_id = "";
}

/* autograd's worker loop: its threads run the backward calls of other threads (docs/cupti.md) */
static bool engine_frame(const struct location *l)
{
	const char *f = l->function;

	return f && (!strncmp(f, "torch::autograd::Engine::thread_main(", 37) ||
		     strstr(f, "6Engine11thread_main"));
}

/* The worker loop waiting for its next task: working for no backward call. */
static bool engine_idle_frame(const struct location *l)
{
	const char *f = l->function;

	return f && (!strncmp(f, "torch::autograd::ReadyQueue::pop(", 33) ||
		     strstr(f, "10ReadyQueue3pop"));
}

/*
 * Symbolizes the frames into st (sized for nk + nu locations). Special words (frames.h) become
 * [truncated], [python] or the Python frame; the walk's honesty is re-checked here: a return
 * address outside every mapping of a process whose other frames are mapped ends the stack.
 */
static void symbolize(struct stack_cache *c, struct sym_stack *st, pid_t pid, const __u64 *kframes,
		      int nk, const __u64 *uframes, int nu)
{
	unsigned act = selfprof_enter(SELF_SYMBOLIZE);
	bool mapped = false, inner = true;

	st->n = st->nunknown = 0;
	for (int i = 0; i < nk; i++) {
		struct sym_frame f = { 0 };
		/* Frames past the first are return addresses: look up the call instruction. */
		int err = symbolizer__kernel(c->sym, kframes[i] - (i > 0), &f);

		if (inner && !err && bpf_frame(f.function)) {
			c->stats.bpf_frames++;
			continue;
		}
		inner = false;
		fill(c, &st->locs[st->n++], &f, err);
		st->nunknown += !!err;
	}
	st->nkernel = st->n;
	for (int i = 0; i < nu; i++) {
		struct sym_frame f = { 0 };
		__u64 w = uframes[i];
		int err;

		if (GPUSCOPE_FRAME_IS_SPECIAL(w)) {
			struct location *loc = &st->locs[st->n++];

			switch (GPUSCOPE_FRAME_TAG(w)) {
			case GPUSCOPE_FRAME_TAG_PY:
				special(c, loc, "[python]");
				if (!(i + 1 < nu &&
				      !pysym__frame(pid, GPUSCOPE_FRAME_PAYLOAD(w), uframes[i + 1], loc)))
					st->nunknown++;
				i++;
				break;
			case GPUSCOPE_FRAME_TAG_TRUNCATED:
				special(c, loc, "[truncated]");
				c->stats.truncated++;
				break;
			case GPUSCOPE_FRAME_TAG_PY_UNKNOWN:
				special(c, loc, "[python]");
				st->nunknown++;
				break;
			case GPUSCOPE_FRAME_TAG_NOT_WALKED:	/* a choice, not an unknown */
				special(c, loc, GPUSCOPE_FRAME_PAYLOAD(w) ?
						"[stack not walked: thread blocks often]" :
						"[stack not walked: short call]");
				break;
			default:
				special(c, loc, "[unknown]");
				st->nunknown++;
			}
			continue;
		}
		err = symbolizer__user(c->sym, pid, w - (i > 0), &f);
		if ((err || f.unnamed) && pysym__elide(pid, w - (i > 0))) {
			mapped = true;	/* the interpreter's own plumbing (python.h) */
			continue;
		}
		if (i > 0 && mapped && err && f.module && !strcmp(f.module, "[unknown]")) {
			/* outside every mapping: a garbage return address, not a frame. The walk
			 * goes on after a [truncated] word of its own (Python frames no native
			 * frame led to, python.bpf.h): that one stands for this gap too. */
			special(c, &st->locs[st->n++], "[truncated]");
			c->stats.truncated++;
			c->stats.cut_unmapped++;
			while (++i < nu && GPUSCOPE_FRAME_TAG(uframes[i]) != GPUSCOPE_FRAME_TAG_TRUNCATED)
				;
			continue;
		}
		mapped |= !(err && f.module && !strcmp(f.module, "[unknown]"));
		fill(c, &st->locs[st->n++], &f, err);
		st->nunknown += !!err;
	}
	st->engine_at = -1;
	st->has_python = false;
	for (uint32_t i = st->nkernel; i < st->n && !st->has_python; i++)
		st->has_python = st->locs[i].module && !strcmp(st->locs[i].module, "[python]");
	for (uint32_t i = st->nkernel; i < st->n; i++) {
		if (engine_idle_frame(&st->locs[i]))
			break;	/* waiting for work: not spliced */
		if (engine_frame(&st->locs[i])) {
			st->engine_at = (int32_t)i;
			break;
		}
	}
	st->resolved_ns = mono_ns();
	st->batch_id = 0;	/* new locations: a new batch stack */
	selfprof_leave(act);
}

const struct sym_stack *stack_cache__get(struct stack_cache *c, pid_t pid, const __u64 *kframes,
					 int nk, const __u64 *uframes, int nu)
{
	uint64_t key = hash64(&pid, sizeof(pid), nk);
	struct sym_stack *st;
	size_t need;
	uint64_t *slot;
	int inserted;

	key = hash64(kframes, nk * sizeof(*kframes), key);
	key = hash64(uframes, nu * sizeof(*uframes), key ^ 0x9e3779b97f4a7c15ULL);
	c->stats.lookups++;
	slot = u64map_find(&c->index, key);
	if (slot) {
		st = (struct sym_stack *)(uintptr_t)*slot;
		if (st->nunknown && mono_ns() - st->resolved_ns >= STACK_RETRY_NS &&
		    st->cap == (uint32_t)(nk + nu)) {
			c->stats.retries++;
			symbolize(c, st, pid, kframes, nk, uframes, nu);
		}
		return st;
	}
	c->stats.misses++;
	need = sizeof(*st) + (size_t)(nk + nu) * sizeof(struct location);
	if (c->len == c->max || c->bytes + need > c->max_bytes) {
		clear(c);
		c->stats.clears++;
	}
	st = calloc(1, need);
	if (!st)
		return NULL;
	c->bytes += need;
	st->key = key;
	st->cap = nk + nu;
	symbolize(c, st, pid, kframes, nk, uframes, nu);
	c->stats.unknown_frames += st->nunknown;
	slot = u64map_upsert(&c->index, key, (uint64_t)(uintptr_t)st, &inserted);
	if (!slot) {
		c->bytes -= need;
		free(st);
		return NULL;
	}
	c->stacks[c->len++] = st;
	return st;
}

void stack_cache__stats(const struct stack_cache *c, struct stack_cache_stats *ret)
{
	*ret = c->stats;
	ret->bytes = c->bytes;
	ret->stacks = c->len;
}

/* st's id in the current batch: hashing the location list costs more than the sample, so once
 * per batch. */
static int64_t batch_stack(struct agent *a, struct sym_stack *st)
{
	uint64_t id = batch__id(a->batch);
	int64_t sid;

	if (st->batch_id == id && st->batch_stack >= 0 && st->resolved_ns)
		return st->batch_stack;
	sid = batch__stack(a->batch, st->locs, st->n);
	if (sid >= 0) {
		st->batch_id = id;
		st->batch_stack = sid;
	}
	return sid;
}

int64_t agent__stack(struct agent *a, pid_t pid, const __u64 *kframes, int nk, const __u64 *uframes,
		     int nu)
{
	struct sym_stack *st = (struct sym_stack *)stack_cache__get(a->stacks, pid, kframes, nk,
								    uframes, nu);

	return st ? batch_stack(a, st) : -ENOMEM;
}

int64_t agent__under_caller(struct agent *a, const struct location *head, uint32_t nhead, pid_t pid,
			    const __u64 *frames, uint32_t n)
{
	static const struct location marker = { .function = "[autograd thread]",
						.module = "[autograd thread]", .build_id = "" };
	struct location locs[3 * GPUSCOPE_MAX_STACK + 2];
	const struct sym_stack *st;

	if (nhead > 2 * GPUSCOPE_MAX_STACK + 1 || n > GPUSCOPE_MAX_STACK)
		return -E2BIG;
	memcpy(locs, head, nhead * sizeof(*locs));
	locs[nhead++] = marker;
	st = stack_cache__get(a->stacks, pid, NULL, 0, frames, (int)n);
	if (!st)
		return -ENOMEM;
	memcpy(&locs[nhead], st->locs, st->n * sizeof(*locs));
	return batch__stack(a->batch, locs, nhead + st->n);
}

int64_t agent__thread_stack(struct agent *a, pid_t pid, uint32_t tid, const __u64 *kframes, int nk,
			    const __u64 *uframes, int nu)
{
	struct sym_stack *st = (struct sym_stack *)stack_cache__get(a->stacks, pid, kframes, nk,
								    uframes, nu);
	const __u64 *pf;
	uint32_t pn;

	if (!st)
		return -ENOMEM;
	if (st->engine_at < 0 || !a->shared.backward_caller ||
	    !a->shared.backward_caller(a, pid, tid, &pf, &pn))
		return batch_stack(a, st);
	return agent__under_caller(a, st->locs, (uint32_t)st->engine_at + 1, pid, pf, pn);
}
