/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The symbolizer's processes kept from the kernel's mmap records (mmapwatch.h): mappings a
 * record adds, an exec's and a fork's, so that a process gone before /proc was read still
 * resolves.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "agent/sym/mmapwatch.h"
#include "agent/sym/symbolize.h"
#include "agent/sym/sym_state.h"
#include "agent/procs/elf.h"
#include "agent/procs/symtab.h"

/*
 * Drops p's mappings older than t: 0 left or more. An exec's (exec) become p->prev: a sample
 * taken in the exec call, before its point of no return, is of the old image and may be
 * resolved after the exec's record was read; the first fork of a reused pid drops them.
 */
size_t sym_maps_drop_before(struct symbolizer *s, struct proc *p, uint64_t t, bool exec)
{
	struct mapping *old = exec ? malloc((p->nmaps ? p->nmaps : 1) * sizeof(*old)) : NULL;
	size_t n = 0, nold = 0;

	for (size_t i = 0; i < p->nmaps; i++) {
		if (p->maps[i].t_ns >= t)
			p->maps[n++] = p->maps[i];
		else if (old)
			old[nold++] = p->maps[i];
		else
			sym_image_put(s, p->maps[i].img);
	}
	p->nmaps = n;
	sym_maps_free(s, p->prev, p->nprev);
	p->prev = old;
	p->nprev = nold;
	return n;
}

/* Adds m to p's mappings (sorted by start), replacing those it overlaps. 0 or -ENOMEM. */
static int maps_insert(struct symbolizer *s, struct proc *p, const struct mapping *m)
{
	struct mapping *nm = realloc(p->maps, (p->nmaps + 1) * sizeof(*nm));
	size_t n = 0, at;

	if (!nm)
		return -ENOMEM;
	p->maps = nm;
	for (size_t i = 0; i < p->nmaps; i++) {
		if (nm[i].start < m->end && m->start < nm[i].end)
			sym_image_put(s, nm[i].img);
		else
			nm[n++] = nm[i];
	}
	for (at = n; at > 0 && nm[at - 1].start > m->start; at--)
		;
	memmove(nm + at + 1, nm + at, (n - at) * sizeof(*nm));
	nm[at] = *m;
	p->nmaps = n + 1;
	return 0;
}

static void record_apply(void *ctx, const struct mmapwatch_rec *r)
{
	struct symbolizer *s = ctx;
	struct proc *p = sym_proc_find(s, r->pid), *parent;
	struct mapping m = { 0 };

	switch (r->type) {
	case MMAPWATCH_EXEC:
		if (s->on_exec)
			s->on_exec(s->on_exec_ctx, r->pid, r->comm);
		if (p && !sym_maps_drop_before(s, p, r->t_ns, true))
			p->from_records = true;
		if (p) {
			symt_done(&p->pm);	/* another image: its own perf map */
			p->pm_read = false;
			p->pm_check_ns = 0;
		}
		return;
	case MMAPWATCH_FORK:
		/* a new process: an entry under its pid is an older process's */
		if (p) {
			if (!sym_maps_drop_before(s, p, r->t_ns, false))
				p->from_records = true;
			p->gone_ns = 0;
		}
		parent = sym_proc_find(s, r->ppid);
		if (!p && !(p = sym_proc_new(s, r->pid)))
			return;
		if (!parent || !parent->nmaps) {
			/* a parent not seen yet is read only on a miss (sym_proc_of_parent()): a
			 * fork-heavy node (shell scripts) would pay a maps read per fork */
			p->fork_parent = r->ppid;
			if (!p->nmaps)
				p->from_records = true;
			return;
		}
		if (!p->nmaps)
			p->from_records = true;
		for (size_t i = 0; i < parent->nmaps; i++) {	/* what it had at the fork */
			m = parent->maps[i];
			if (maps_insert(s, p, &m))
				return;
			if (m.img)
				m.img->refs++;
		}
		return;
	case MMAPWATCH_MMAP:
		if (!r->len || r->start + r->len < r->start)
			return;
		if (s->on_map && r->path)
			s->on_map(s->on_map_ctx, r->pid, r->path);
		if (!p) {
			if (!(p = sym_proc_new(s, r->pid)))
				return;
			p->from_records = true;
		} else if (p->gone_ns) {
			return;
		}
		m.start = r->start;
		m.end = r->start + r->len;
		m.pgoff = r->pgoff;
		m.dev = r->dev;
		m.ino = r->ino;
		m.t_ns = r->t_ns;
		if (r->path[0] == '/' && r->path[1] != '/') {
			char path[PATH_MAX];
			size_t len = strlen(r->path);

			snprintf(path, sizeof(path), "%s", r->path);
			if (len > 10 && len < sizeof(path) &&
			    !strcmp(path + len - 10, " (deleted)")) {
				path[len - 10] = 0;
				m.deleted = true;
			}
			m.path = sym_intern(s, path);
		} else {
			m.path = !strcmp(r->path, "[vdso]") ? s->s_vdso : s->s_anon;
		}
		if (m.path)
			maps_insert(s, p, &m);
		return;
	}
}

/* The entry of p's fork parent, read from /proc now if it has none (it mostly lives on: a
 * shell); NULL when there is none to read. No drain, no eviction: p stays valid. */
struct proc *sym_proc_of_parent(struct symbolizer *s, struct proc *p)
{
	struct proc *parent = sym_proc_find(s, p->fork_parent);

	if (!parent && (parent = sym_proc_new(s, p->fork_parent)) && sym_proc_read_maps(s, parent))
		parent->from_records = true;	/* not readable: read again on its own use */
	p->fork_parent = parent && parent->nmaps ? p->fork_parent : 0;	/* tried once */
	return p->fork_parent ? parent : NULL;
}

void sym_records_drain(struct symbolizer *s)
{
	if (s->mw)
		mmapwatch__drain(s->mw, record_apply, s);
}

int symbolizer__watch_mmaps(struct symbolizer *s, const char **ret_why)
{
	if (!s)
		return -EINVAL;
	if (s->mw)
		return 0;
	s->mw = mmapwatch__new(ret_why);
	return s->mw ? 0 : -errno;
}

void symbolizer__on_exec(struct symbolizer *s, void (*fn)(void *ctx, pid_t pid, const char *comm),
			 void *ctx)
{
	if (!s)
		return;
	s->on_exec = fn;
	s->on_exec_ctx = ctx;
}

void symbolizer__on_map(struct symbolizer *s, void (*fn)(void *ctx, pid_t pid, const char *path),
			void *ctx)
{
	if (!s)
		return;
	s->on_map = fn;
	s->on_map_ctx = ctx;
}

void symbolizer__poll(struct symbolizer *s)
{
	if (s)
		sym_records_drain(s);
}

void symbolizer__mmap_stats(const struct symbolizer *s, uint64_t *ret_records, uint64_t *ret_lost)
{
	struct mmapwatch_stats st;

	mmapwatch__stats(s ? s->mw : NULL, &st);
	*ret_records = st.records;
	*ret_lost = st.lost;
}
