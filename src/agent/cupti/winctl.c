// SPDX-License-Identifier: Apache-2.0
/*
 * Trace windows of the CUPTI module (issue 14): each injected process's window opened by the
 * budget, the idle and sync triggers, a capture or continuous tracing; closed when its time or
 * budget is up; reported as gpu_trace_window intervals and the GPUs it observed. The window
 * switch is the pid-filtered attachment to the library's window probe (its semaphore).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <bpf/libbpf.h>
#include "agent/cupti/cupti_int.h"
#include "agent/labels.h"
#include "common/batch.h"
#include "common/log.h"
#include "cupti.skel.h"

/* ---- trace windows ------------------------------------------------------------------------ */

/*
 * Share of pid's time the always-on parts cost it: the driver probes over the last 10 s as
 * counted by cuda_probe, and the CPU sampler at its rate while it runs (one sample of a running
 * thread takes TRACE_SAMPLE_NS of it).
 */
static double always_on_share(struct cupti_state *c, pid_t pid, uint64_t now)
{
	const struct agent_shared *sh = &c->a->shared;
	double share = (double)sh->sampling_hz * TRACE_SAMPLE_NS / NSEC_PER_SEC;

	if (sh->cuda_probe_cost)	/* the driver probes (cuda_probe), when that module runs */
		share += sh->cuda_probe_cost(pid, now, 10 * NSEC_PER_SEC);
	if (share > c->st.always_on_max)
		c->st.always_on_max = share;
	return share;
}

static const char *win_status(const struct proc *p)
{
	return p->refused ? p->refused : p->yielded ? "yielded" : p->early ? "closed early" :
								      "traced";
}

/* The gpu_trace_window interval of a window that ended at end_mono, and what the GPUs saw. */
static void emit_window(struct cupti_state *c, struct proc *p, uint64_t start_mono,
			uint64_t end_mono)
{
	struct agent_labels L;
	struct label attrs[6], glab[4];
	char kern_s[24], launch_s[24], cost_s[24], dev_s[12];
	size_t na = 0;
	int64_t w = c->a->mono_to_wall_ns;
	bool kept;

	if (end_mono <= start_mono)
		end_mono = start_mono + 1;
	kept = agent__pid_labels(c->a, p->pid, 0, p->comm, &L) == LABELS_KEPT;
	snprintf(kern_s, sizeof(kern_s), "%" PRIu64, p->win_kernels);
	snprintf(launch_s, sizeof(launch_s), "%" PRIu64, p->win_launches);
	snprintf(cost_s, sizeof(cost_s), "%.0f", p->budget.cost_ns);
	attrs[na++] = (struct label){ "reason", trace_reason_names[p->reason] };
	attrs[na++] = (struct label){ "status", win_status(p) };
	attrs[na++] = (struct label){ "kernels", kern_s };
	attrs[na++] = (struct label){ "launches", launch_s };
	if (!p->refused)
		attrs[na++] = (struct label){ "cost_ns", cost_s };
	if (kept && batch__interval(c->a->batch, "gpu_trace_window", L.l, L.n, start_mono + w,
				    end_mono + w, -1, attrs, na))
		c->st.batch_errors++;
	if (p->refused)
		return;
	/* kernel tracing decided busy/idle on these GPUs for this range (for its process) */
	for (unsigned d = 0; d < 64; d++) {
		size_t ng = 0;

		if (!(p->all_devices >> d & 1))
			continue;
		snprintf(dev_s, sizeof(dev_s), "%u", d);
		glab[ng++] = (struct label){ "gpu", dev_s };
		glab[ng++] = (struct label){ "source", "kernels" };
		/* why the window opened: the server's estimator lets only windows placed regardless
		 * of the GPU's state (budget, continuous) stand for the time around them */
		glab[ng++] = (struct label){ "reason", trace_reason_names[p->reason] };
		if (c->a->opts.node)
			glab[ng++] = (struct label){ "node", c->a->opts.node };
		if (batch__interval(c->a->batch, "gpu_observed", glab, ng, start_mono + w,
				    end_mono + w, -1, NULL, 0))
			c->st.batch_errors++;
	}
}

/* Hands p's window link to the switch thread to destroy. */
static void release_link(struct cupti_state *c, struct proc *p)
{
	if (!p->win_link)
		return;
	/* a process holds a link only between its attach's reap and this: no job in flight */
	p->job = (struct winwork_job){ .op = WINWORK_DETACH, .pid = p->pid, .link = p->win_link };
	p->win_link = NULL;
	p->job_busy = true;
	winwork__post(c->work, &p->job);
}

/* Asks the switch thread to attach the window probe; the window's time starts once it is done. */
static void win_open(struct cupti_state *c, struct proc *p, enum trace_reason why, uint64_t now,
		     uint64_t len_ns)
{
	if (!p->lib_path || p->job_busy)
		return;
	p->job = (struct winwork_job){ .op = WINWORK_ATTACH, .pid = p->pid, .path = p->lib_path };
	p->job_busy = true;
	winwork__post(c->work, &p->job);
	p->win = WIN_ATTACHING;
	p->reason = why;
	p->asked_ns = now;
	p->close_at_ns = why == TRACE_CONTINUOUS ? UINT64_MAX : 0;
	p->len_ns = len_ns;
	p->win_kernels = p->win_launches = p->win_probe_ns = 0;
	p->devices = 0;
	p->early = false;
	p->yielded = false;
	p->win_opened = false;
	p->refused = NULL;
	log_debug("cupti: pid %d: window asked (%s)", p->pid, trace_reason_names[why]);
}

void cupti_win_detach(struct cupti_state *c, struct proc *p, uint64_t now)
{
	release_link(c, p);	/* none yet if OPENED came before the attach was reaped */
	p->win = WIN_CLOSING;
	p->asked_ns = now;	/* CLOSED must come within STATUS_WAIT_NS of this */
	log_debug("cupti: pid %d: window released (%s)", p->pid, trace_reason_names[p->reason]);
}

/* An attach is done: the window's time starts now, unless the process no longer wants it. */
static void attach_done(struct cupti_state *c, struct proc *p, struct winwork_job *j)
{
	if (!j->link) {
		if (j->err != -ECANCELED)	/* the agent stops: not an error */
			c->st.win_attach_errors++;	/* also a process that exited meanwhile */
		if (p->win == WIN_ATTACHING)
			p->win = WIN_IDLE;
		return;
	}
	/* OPEN: the library saw the semaphore and said OPENED before this reap */
	if (p->dead || c->stopping || (p->win != WIN_ATTACHING && p->win != WIN_OPEN)) {
		/* exited, stopping, or refused or closed meanwhile: undo it */
		if (p->win == WIN_ATTACHING)
			p->win = p->dead ? WIN_IDLE : WIN_CLOSING;	/* it may have seen it */
		j->op = WINWORK_DETACH;
		p->job_busy = true;
		winwork__post(c->work, j);
		return;
	}
	p->win_link = j->link;
	p->asked_ns = j->done_ns;
	if (p->win == WIN_ATTACHING) {
		p->win = WIN_ASKED;
		if (p->reason != TRACE_CONTINUOUS)
			p->close_at_ns = j->done_ns + p->len_ns;
	}
	c->st.windows_asked++;
}

void cupti_win_reap(struct cupti_state *c)
{
	struct winwork_job *j;

	while ((j = winwork__reap(c->work))) {
		struct proc *p = (struct proc *)((char *)j - offsetof(struct proc, job));

		p->job_busy = false;
		if (j->op == WINWORK_ATTACH)
			attach_done(c, p, j);
		else if (p->win == WIN_CLOSING)
			p->asked_ns = j->done_ns;	/* CLOSED comes after the semaphore drops */
	}
}

void cupti_win_shutdown(struct cupti_state *c)
{
	struct winwork_job *j;

	winwork__stop(c->work);
	while ((j = winwork__reap(c->work))) {
		struct proc *p = (struct proc *)((char *)j - offsetof(struct proc, job));

		p->job_busy = false;
		if (j->op == WINWORK_ATTACH)
			bpf_link__destroy(j->link);	/* the thread is gone: here */
	}
	winwork__free(c->work);
	c->work = NULL;
}

void cupti_on_status(struct cupti_state *c, struct proc *p, uint32_t what, uint64_t a, uint64_t b)
{
	uint64_t now = mono_ns();

	log_debug("cupti: pid %d: status %u (%" PRIu64 ", %" PRIu64 ") in state %d", p->pid, what, a,
		  b, p->win);
	if (what >= GPUSCOPE_CUPTI_ST_DEVICE &&
	    what < GPUSCOPE_CUPTI_ST_DEVICE + GPUSCOPE_CUPTI_MAX_ORDINALS) {
		cupti_on_device(p, what - GPUSCOPE_CUPTI_ST_DEVICE, a, b);
		return;
	}
	switch (what) {
	case GPUSCOPE_CUPTI_ST_HELLO:
		p->lib_hello = true;
		break;
	case GPUSCOPE_CUPTI_ST_OPENED:
		/* ATTACHING: the semaphore is up, the attach not reaped yet. CLOSING: released
		 * before the library saw the switch; it closes right after */
		if (p->win != WIN_ATTACHING && p->win != WIN_ASKED && p->win != WIN_CLOSING) {
			c->st.win_stray++;	/* opened for another agent, or after we gave up */
			break;
		}
		if (p->win == WIN_ATTACHING || p->win == WIN_ASKED) {
			p->win = WIN_OPEN;
			if (p->reason != TRACE_CONTINUOUS && now + p->len_ns > p->close_at_ns)
				p->close_at_ns = now + p->len_ns;	/* the length it was asked */
		}
		p->opened_ns = p->emitted_ns = a;
		p->open_cost_ns = b;
		p->win_opened = true;
		c->st.windows_opened[p->reason]++;
		break;
	case GPUSCOPE_CUPTI_ST_YIELDED:
		/* a user's CUPTI client started: the library closed the window for it. It ends as
		 * a close does, recorded as yielded; no window opens until the client lets go */
		if (p->win != WIN_CLOSING && p->win != WIN_OPEN) {
			c->st.win_stray++;
			break;
		}
		p->yielded = true;
		c->st.win_yielded++;
		if (b & GPUSCOPE_CUPTI_YIELD_LATE)
			c->st.win_yield_late++;
		b &= ~GPUSCOPE_CUPTI_YIELD_LATE;
		/* fall through */
	case GPUSCOPE_CUPTI_ST_CLOSED:
		if (p->win != WIN_CLOSING && p->win != WIN_OPEN) {
			c->st.win_stray++;
			break;
		}
		if (p->win == WIN_OPEN)	/* closed under us (the library exits) */
			cupti_win_detach(c, p, now);
		/* what the close flushed came through the ring before this event */
		{
			struct trace_cost w = { .open_ns = p->open_cost_ns, .close_ns = b,
						.kernels = p->win_kernels,
						.length_ns = a > p->opened_ns ? a - p->opened_ns : 0,
						.launches = p->win_launches,
						.probe_ns = p->win_probe_ns };

			p->budget.always_on = always_on_share(c, p->pid, now);
			if (p->reason != TRACE_CAPTURE && p->reason != TRACE_CONTINUOUS)
				trace_budget__closed(&p->budget, &c->cfg, p->opened_ns, &w);
			else
				p->budget.cost_ns = trace_cost_ns(&c->cfg, &w);
			c->st.win_cost_ns += (uint64_t)trace_cost_ns(&c->cfg, &w);
			c->st.win_traced_ns += w.length_ns;
		}
		emit_window(c, p, p->emitted_ns, a);
		c->st.windows_closed++;
		p->win = WIN_IDLE;
		if (p->yielded && p->budget.next_open_ns < now + c->cfg.min_period_ns)
			p->budget.next_open_ns = now + c->cfg.min_period_ns;
		break;
	case GPUSCOPE_CUPTI_ST_RELEASED:
		/* the user's client let go: continuous tracing resumes at once, the others at
		 * their next planned window */
		c->st.user_released++;
		if (c->cfg.budget >= 1)
			p->budget.next_open_ns = now;
		break;
	case GPUSCOPE_CUPTI_ST_BUSY:
	case GPUSCOPE_CUPTI_ST_FAILED:
	case GPUSCOPE_CUPTI_ST_USER:
		/* CLOSING: released before the library answered (a slow open); no CLOSED follows */
		if (p->win != WIN_ASKED && p->win != WIN_ATTACHING && p->win != WIN_CLOSING)
			break;
		p->refused = what == GPUSCOPE_CUPTI_ST_BUSY ? "cupti busy" :
			     what == GPUSCOPE_CUPTI_ST_USER ? "user profiler" : "cupti failed";
		if (what == GPUSCOPE_CUPTI_ST_BUSY)
			c->st.win_busy++;
		else if (what == GPUSCOPE_CUPTI_ST_USER)
			c->st.win_user++;
		else
			c->st.win_failed++;
		release_link(c, p);	/* ATTACHING: undone when reaped */
		emit_window(c, p, a, a + 1);
		p->win = WIN_IDLE;
		/* try again one minimum period later (another profiler may be done by then) */
		p->budget.next_open_ns = now + c->cfg.min_period_ns;
		break;
	default:
		c->st.bad_events++;
	}
}

/* How often an open continuous window reports the stretch it has covered. */
#define WINDOW_PIECE_NS (5 * NSEC_PER_SEC)

/* Within its budget so far, so a trigger may open a window (not more often than the cooldown). */
static bool trigger_allowed(const struct cupti_state *c, const struct trace_budget *b, uint64_t now)
{
	return now >= b->last_idle_ns + c->cfg.idle_cooldown_ns &&
	       (double)b->spent_ns + b->cost_ns <=
		       trace_budget__window_share(b, &c->cfg) * (double)(now - b->first_open_ns);
}

/* Did pid's share of time in synchronize calls jump (sync trigger)? */
static bool sync_jumped(const struct cupti_state *c, pid_t pid, uint64_t now)
{
	double before = -1, share;

	if (c->cfg.sync_trigger <= 0 || !c->a->shared.cuda_sync_share)	/* cuda_probe off */
		return false;
	share = c->a->shared.cuda_sync_share(pid, now, c->cfg.idle_span_ns, &before);
	return share >= c->cfg.sync_trigger && before >= 0 && share >= before + TRACE_SYNC_JUMP;
}

/* Opens and closes windows: captures first, then the idle trigger, then the duty cycle. */
void cupti_control_windows(struct cupti_state *c)
{
	uint64_t now = mono_ns();
	bool continuous = c->cfg.budget >= 1;
	double idle = -1;

	if (c->cfg.idle_trigger > 0 && c->a->shared.gpu_idle_share)	/* the gpu module's */
		idle = c->a->shared.gpu_idle_share(c->cfg.idle_span_ns);
	for (int i = 0; i < MAX_PROCS; i++) {
		struct proc *p = &c->procs[i];
		struct trace_budget *b = &p->budget;

		if (!p->pid || !p->lib_path)
			continue;
		if (p->dead) {
			release_link(c, p);	/* an attach in flight is undone when reaped */
			if (p->win == WIN_OPEN || p->win == WIN_CLOSING) {
				/* died without a CLOSED: the window ends where we noticed */
				c->st.win_no_status++;
				emit_window(c, p, p->emitted_ns, now);
			}
			p->win = WIN_IDLE;
			continue;
		}
		switch (p->win) {
		case WIN_IDLE:
			if (p->job_busy)	/* the last window's detach is still in flight */
				break;
			if (p->capture_ns) {
				win_open(c, p, TRACE_CAPTURE, now, p->capture_ns);
				p->capture_ns = 0;
			} else if (continuous) {
				/* later after a refusal or a hand-over (RELEASED: at once) */
				if (now >= b->next_open_ns)
					win_open(c, p, TRACE_CONTINUOUS, now, 0);
			} else if (idle >= c->cfg.idle_trigger && trigger_allowed(c, b, now)) {
				b->last_idle_ns = now;
				win_open(c, p, TRACE_IDLE, now, trace_budget__window_ns(b, &c->cfg));
			} else if (trigger_allowed(c, b, now) && sync_jumped(c, p->pid, now)) {
				b->last_idle_ns = now;
				win_open(c, p, TRACE_SYNC, now, trace_budget__window_ns(b, &c->cfg));
			} else if (now >= b->next_open_ns)
				win_open(c, p, TRACE_BUDGET, now, trace_budget__window_ns(b, &c->cfg));
			break;
		case WIN_ATTACHING:
			/* not begun yet: a capture asked meanwhile becomes this window */
			if (p->capture_ns && p->reason != TRACE_CONTINUOUS) {
				if (p->reason != TRACE_CAPTURE)
					p->len_ns = 0;
				p->reason = TRACE_CAPTURE;
				if (p->capture_ns > p->len_ns)
					p->len_ns = p->capture_ns;
			}
			p->capture_ns = 0;
			break;
		case WIN_ASKED:
		case WIN_OPEN:
			if (p->capture_ns && p->reason == TRACE_CAPTURE) {	/* a second capture */
				if (now + p->capture_ns > p->close_at_ns)
					p->close_at_ns = now + p->capture_ns;
				p->capture_ns = 0;
			} else if (p->capture_ns && p->reason == TRACE_CONTINUOUS) {
				p->capture_ns = 0;	/* traced anyway */
			} else if (p->capture_ns) {
				p->close_at_ns = now;	/* end this window: the capture is next */
			}
			if (p->win == WIN_ASKED && now - p->asked_ns > STATUS_WAIT_NS) {
				/* an old library without windows, or one that is stuck */
				c->st.win_no_status++;
				release_link(c, p);
				p->win = WIN_IDLE;
				p->budget.next_open_ns = now + c->cfg.max_period_ns;
				break;
			}
			if (p->win == WIN_OPEN && p->reason == TRACE_CONTINUOUS &&
			    now - p->emitted_ns >= WINDOW_PIECE_NS) {
				/* a window that stays open is reported in pieces, so the range it
				 * covered so far counts as traced (flame graphs' traced share) */
				emit_window(c, p, p->emitted_ns, now);
				p->emitted_ns = now;
			}
			if (p->reason != TRACE_CAPTURE && p->reason != TRACE_CONTINUOUS &&
			    trace_budget__overrun(b, &c->cfg, p->win_launches, p->win_probe_ns,
						  now - p->asked_ns)) {
				p->early = true;
				c->st.win_early++;
				cupti_win_detach(c, p, now);
			} else if (now >= p->close_at_ns) {
				cupti_win_detach(c, p, now);
			}
			break;
		case WIN_CLOSING:
			/* no CLOSED within STATUS_WAIT_NS of the detach's end: give up on it */
			if (!p->job_busy && now - p->asked_ns > STATUS_WAIT_NS) {
				c->st.win_no_status++;
				p->win = WIN_IDLE;
			}
			break;
		}
	}
}

int cupti_usdt__capture(pid_t pid, uint64_t duration_ns, char *why, size_t whylen)
{
	struct cupti_state *c = cupti_live;
	int n = 0, seen = 0;

	if (!c) {
		snprintf(why, whylen, "CUDA kernel tracing is not running on this node");
		return -ENOTSUP;
	}
	cupti_scan_procs(c);
	for (int i = 0; i < MAX_PROCS; i++) {
		struct proc *p = &c->procs[i];

		if (!p->pid || p->dead || (pid && p->pid != pid))
			continue;
		seen++;
		if (!p->lib_path)
			continue;
		if (p->capture_ns < duration_ns)
			p->capture_ns = duration_ns;
		n++;
	}
	if (!n) {
		snprintf(why, whylen, pid ? "process %d is not injected (no libgpuscope_cupti)" :
					    "no process on this node is injected (no libgpuscope_cupti)",
			 (int)pid);
		return -ENOENT;
	}
	cupti_control_windows(c);
	snprintf(why, whylen, "tracing %d process%s", n, n == 1 ? "" : "es");
	(void)seen;
	return n;
}

bool cupti_usdt__capturing(pid_t pid)
{
	struct cupti_state *c = cupti_live;

	for (int i = 0; c && i < MAX_PROCS; i++) {
		const struct proc *p = &c->procs[i];

		if (!p->pid || p->dead || !p->lib_path || (pid && p->pid != pid))
			continue;
		if (p->capture_ns || (p->win != WIN_IDLE && p->reason == TRACE_CAPTURE))
			return true;
	}
	return false;
}

