/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUPTI module's window-switch thread. Opening a trace window attaches a pid-filtered
 * uprobe to the library's `window` probe and closing it detaches it; each takes 0.1 s on the
 * GPU host and up to 2 s on a loaded machine (uprobe registration, an RCU grace period at
 * unregistration). They run here, so the agent's main loop, which drains every module's ring
 * buffer, never waits for them: it posts jobs and reaps the done ones.
 *
 * Ownership: a posted job (and the link in a detach job, and the path it names) belongs to the
 * thread until winwork__reap() returns it; then it is the caller's again, with the attached
 * link in an attach job. Jobs are done in the order posted.
 */
#ifndef GPUSCOPE_AGENT_CUPTI_WINWORK_H
#define GPUSCOPE_AGENT_CUPTI_WINWORK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct bpf_link;
struct bpf_program;
struct winwork;

enum winwork_op { WINWORK_ATTACH = 1, WINWORK_DETACH };

struct winwork_job {
	enum winwork_op op;
	pid_t pid;			/* ATTACH: the process whose window probe it is */
	const char *path;		/* ATTACH: its library (/proc/PID/root/...) */
	struct bpf_link *link;		/* DETACH: the link to destroy; ATTACH: the result */
	int err;			/* ATTACH: -errno when link is NULL */
	uint64_t posted_ns, done_ns;	/* CLOCK_MONOTONIC */
	struct winwork_job *next;	/* the thread's queues */
};

/*
 * Starts the thread that attaches prog to the `window` USDT probe of provider (pid-filtered)
 * and destroys links. Returns NULL with errno set. Free with winwork__free().
 */
struct winwork *winwork__start(struct bpf_program *prog, const char *provider);

/* Hands j to the thread (sets posted_ns). Main-loop thread. */
void winwork__post(struct winwork *w, struct winwork_job *j);

/* A done job, oldest first, or NULL; ownership returns to the caller. Main-loop thread. */
struct winwork_job *winwork__reap(struct winwork *w);

/* Jobs posted and not reaped yet. Main-loop thread. */
unsigned winwork__pending(const struct winwork *w);

/*
 * From now on attaches that have not begun are not made: they come back with err -ECANCELED
 * (the agent is stopping; a window opened now would only be closed again). Main-loop thread.
 */
void winwork__cancel_attaches(struct winwork *w);

/*
 * Lets the thread finish every posted job and joins it; done jobs stay to be reaped (the
 * caller destroys the links of their attaches). Accepts NULL; a second call does nothing.
 */
void winwork__stop(struct winwork *w);

/* Stops (as winwork__stop), then frees w; jobs not reaped are the caller's to free. */
void winwork__free(struct winwork *w);

/*
 * libbpf's USDT bookkeeping of one BPF object (spec ids) is not thread-safe: the thread holds
 * this lock around each attach and detach, and the module's own USDT attaches (its libraries)
 * take it without waiting. Returns false while the thread holds it (try again later).
 */
bool winwork__trylock(struct winwork *w);
void winwork__unlock(struct winwork *w);

/* The longest attach and detach so far, in ns (/metrics). Any thread. */
void winwork__max_ns(const struct winwork *w, uint64_t *ret_attach, uint64_t *ret_detach);

/*
 * Tests only (tests/unit/test_cupti_winworker.c): the thread sleeps this long before each
 * attach and detach, standing in for a slow uprobe (un)registration on a loaded machine. 0 in
 * the agent, which never sets it.
 */
extern uint64_t winwork_test_delay_ns;

#endif
