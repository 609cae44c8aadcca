/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The findings engine's view of stacks: which code issues GPU work (CUDA, the framework) and
 * which is the program's own, and stacks ranked by the function that names them (a Python
 * function by file, at its busiest line).
 */
#include "server/insights/ins_int.h"

/* ---- names and what is framework code ---------------------------------------------- */

static const char *base(const char *p)
{
	const char *s = p ? strrchr(p, '/') : NULL;

	return s ? s + 1 : p ? p : "";
}

static bool is_python(const struct frame *f)
{
	return f->module && !strcmp(f->module, "[python]");
}

/* CUDA, the framework's dispatch and kernels' launch: GPU work being issued, not input work. */
static bool is_framework(const struct frame *f)
{
	static const char *const mods[] = { "libtorch", "libc10", "libcuda", "libcudart",
					    "libcublas", "libcudnn", "libnccl", "libnvrtc",
					    "libnvidia", "libgpuscope_cupti", "_C.", "libtriton" };
	static const char *const fns[] = { "cuLaunch", "cudaLaunch", "cuStream", "cudaStream",
					   "cuMemcpy", "cudaMemcpy", "at::", "c10::", "torch::" };
	const char *m = base(f->module), *fn = f->function ? f->function : "";

	if (is_python(f))
		return f->file && (strstr(f->file, "/torch/") || strstr(f->file, "/triton/"));
	for (size_t i = 0; i < ARRAY_SIZE(mods); i++)
		if (!strncmp(m, mods[i], strlen(mods[i])))
			return true;
	for (size_t i = 0; i < ARRAY_SIZE(fns); i++)
		if (!strncmp(fn, fns[i], strlen(fns[i])))
			return true;
	return false;
}

/* "fn (file" of the innermost Python frame (*ret_line its line: the caller adds ":line)"),
 * else the innermost user-space frame's name (*ret_line 0). */
static void stack_name(const struct frame *f, size_t nf, char *out, size_t n,
		       uint32_t *ret_line)
{
	char tmp[256];
	size_t leaf = 0;

	*ret_line = 0;
	for (size_t i = 0; i < nf; i++) {
		if (is_python(&f[i]) && f[i].function) {
			if (f[i].file && *f[i].file) {
				snprintf(out, n, "%s (%s", f[i].function, base(f[i].file));
				*ret_line = f[i].line ? f[i].line : UINT32_MAX;
			} else {
				snprintf(out, n, "%s", f[i].function);
			}
			return;
		}
	}
	while (leaf + 1 < nf && f[leaf].kernel)
		leaf++;
	snprintf(out, n, "%s", nf ? frame_name(&f[leaf], tmp, sizeof(tmp)) : "[unknown]");
}

/* Whether a sample's stack was issuing GPU work: the native code between its leaf and its
 * innermost Python frame (or the whole stack without one) has a CUDA or framework frame, or
 * that Python frame is the framework's own. */
static bool stack_framework(const struct frame *f, size_t nf)
{
	for (size_t i = 0; i < nf; i++) {
		if (is_python(&f[i]))
			return is_framework(&f[i]);
		if (!f[i].kernel && is_framework(&f[i]))
			return true;
	}
	return false;
}


static int rank_stack(void *ctx, uint64_t id, const struct frame *f, size_t nf)
{
	struct fn_rank *r = ctx;
	uint64_t *p = r->agg ? u64map_find(r->agg, id) : u64map_find(r->by_stack, id);
	char name[192];
	uint32_t line;
	double v;
	int64_t k;

	if (!p)
		return 0;
	if (r->agg)
		v = (double)*p;
	else
		memcpy(&v, p, sizeof(v));
	r->total += v;
	if (r->classify && stack_framework(f, nf)) {
		r->fw += v;
		return 0;
	}
	stack_name(f, nf, name, sizeof(name), &line);
	k = strtab_intern(&r->names, name);
	if (k < 0)
		return (int)k;
	if ((size_t)k >= r->cap) {
		size_t ncap = r->cap ? r->cap * 2 : 64;
		struct fn_lines *nl;
		double *nv;

		while (ncap <= (size_t)k)
			ncap *= 2;
		nv = realloc(r->v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		r->v = nv;
		nl = realloc(r->lines, ncap * sizeof(*nl));
		if (!nl)
			return -ENOMEM;
		r->lines = nl;
		memset(nv + r->cap, 0, (ncap - r->cap) * sizeof(*nv));
		memset(nl + r->cap, 0, (ncap - r->cap) * sizeof(*nl));
		r->cap = ncap;
	}
	r->v[k] += v;
	for (int i = 0; line && i < FN_LINES; i++) {
		if (!r->lines[k].line[i] || r->lines[k].line[i] == line) {
			r->lines[k].line[i] = line;
			r->lines[k].v[i] += v;
			break;
		}
	}
	return 0;
}

/* Ranks the stacks of agg (or by_stack) by name; the top n into out (shares of the total). */
int ins_rank(struct store *st, const struct u64map *agg, struct u64map *by_stack,
		struct fn_rank *r, struct ins_fn *out, size_t n, size_t *ret_n)
{
	const struct u64map *m = agg ? agg : by_stack;
	uint64_t *ids = malloc((m->len + 1) * sizeof(*ids));
	size_t nids = 0, got = 0;
	bool *used = NULL;
	int err;

	r->agg = agg;
	r->by_stack = by_stack;
	if (!ids)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++)
		if (m->keys[i])
			ids[nids++] = m->keys[i];
	err = nids ? st->ops->stacks(st, ids, nids, rank_stack, r) : 0;
	free(ids);
	if (err)
		return err;
	used = calloc(r->names.len + 1, 1);
	if (!used)
		return -ENOMEM;
	for (; got < n; got++) {
		size_t best = SIZE_MAX;

		for (size_t i = 0; i < r->names.len; i++)
			if (!used[i] && r->v[i] > 0 && (best == SIZE_MAX || r->v[i] > r->v[best]))
				best = i;
		if (best == SIZE_MAX)
			break;
		used[best] = true;
		if (r->lines[best].line[0]) {	/* "fn (file" + its busiest line */
			int b = 0;

			for (int i = 1; i < FN_LINES; i++)
				if (r->lines[best].v[i] > r->lines[best].v[b])
					b = i;
			if (r->lines[best].line[b] == UINT32_MAX)
				snprintf(out[got].name, sizeof(out[got].name), "%s)",
					 r->names.strs[best]);
			else
				snprintf(out[got].name, sizeof(out[got].name), "%s:%u)",
					 r->names.strs[best], r->lines[best].line[b]);
		} else {
			snprintf(out[got].name, sizeof(out[got].name), "%s", r->names.strs[best]);
		}
		out[got].value = r->v[best];
		out[got].share = r->total > 0 ? r->v[best] / r->total : 0;
	}
	free(used);
	if (ret_n)
		*ret_n = got;
	return 0;
}

void ins_rank_done(struct fn_rank *r)
{
	strtab_done(&r->names);
	free(r->v);
	free(r->lines);
}

