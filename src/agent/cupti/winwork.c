// SPDX-License-Identifier: Apache-2.0
/*
 * The CUPTI module's window-switch thread (winwork.h): attaches and detaches the pid-filtered
 * `window` probe off the agent's main loop. Two FIFO lists under one mutex: posted (the
 * thread takes from it) and done (the main loop reaps from it).
 */
#include <bpf/libbpf.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "agent/cupti/winwork.h"
#include "common/log.h"
#include "common/util.h"

uint64_t winwork_test_delay_ns;

struct fifo {
	struct winwork_job *head, *tail;
};

struct winwork {
	struct bpf_program *prog;
	const char *provider;
	pthread_t thread;
	pthread_mutex_t mu;		/* the lists and stop */
	pthread_cond_t cv;
	pthread_mutex_t usdt_mu;	/* libbpf's USDT state of prog's object */
	struct fifo posted, done;
	unsigned pending;		/* posted and not reaped; main loop only */
	bool stop, running;
	bool cancel;			/* attaches not begun are answered -ECANCELED */
	uint64_t attach_max_ns, detach_max_ns;	/* atomic */
};

static void fifo_push(struct fifo *f, struct winwork_job *j)
{
	j->next = NULL;
	if (f->tail)
		f->tail->next = j;
	else
		f->head = j;
	f->tail = j;
}

static struct winwork_job *fifo_pop(struct fifo *f)
{
	struct winwork_job *j = f->head;

	if (j) {
		f->head = j->next;
		if (!f->head)
			f->tail = NULL;
		j->next = NULL;
	}
	return j;
}

static void raise_max(uint64_t *max, uint64_t v)
{
	uint64_t cur = __atomic_load_n(max, __ATOMIC_RELAXED);

	while (v > cur && !__atomic_compare_exchange_n(max, &cur, v, false, __ATOMIC_RELAXED,
						       __ATOMIC_RELAXED))
		;
}

/* The slow part, without the lock. */
static void run_job(struct winwork *w, struct winwork_job *j)
{
	uint64_t t0;

	if (winwork_test_delay_ns) {
		struct timespec ts = { winwork_test_delay_ns / NSEC_PER_SEC,
				       winwork_test_delay_ns % NSEC_PER_SEC };

		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	if (j->op == WINWORK_ATTACH && __atomic_load_n(&w->cancel, __ATOMIC_RELAXED)) {
		j->link = NULL;
		j->err = -ECANCELED;
		j->done_ns = mono_ns();
		return;
	}
	pthread_mutex_lock(&w->usdt_mu);
	t0 = mono_ns();
	if (j->op == WINWORK_ATTACH) {
		j->link = bpf_program__attach_usdt(w->prog, j->pid, j->path, w->provider, "window",
						   NULL);
		j->err = j->link ? 0 : -errno;
		if (!j->link)
			log_debug("cupti: window probe of pid %d: %s", j->pid, strerror(-j->err));
	} else {
		bpf_link__destroy(j->link);
		j->link = NULL;
	}
	j->done_ns = mono_ns();
	pthread_mutex_unlock(&w->usdt_mu);
	raise_max(j->op == WINWORK_ATTACH ? &w->attach_max_ns : &w->detach_max_ns,
		  j->done_ns - t0);
	log_debug("cupti: pid %d: window %s took %.1f ms", j->pid,
		  j->op == WINWORK_ATTACH ? "attach" : "detach", (j->done_ns - t0) / 1e6);
}

static void *work_main(void *arg)
{
	struct winwork *w = arg;
	struct winwork_job *j;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		j = fifo_pop(&w->posted);
		if (!j) {
			if (w->stop)	/* only once every posted job is done */
				break;
			pthread_cond_wait(&w->cv, &w->mu);
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		run_job(w, j);
		pthread_mutex_lock(&w->mu);
		fifo_push(&w->done, j);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

struct winwork *winwork__start(struct bpf_program *prog, const char *provider)
{
	struct winwork *w = calloc(1, sizeof(*w));
	sigset_t all, old;
	int err;

	if (!w)
		return NULL;
	w->prog = prog;
	w->provider = provider;
	pthread_mutex_init(&w->mu, NULL);
	pthread_mutex_init(&w->usdt_mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	/* the agent's signals stay with its main thread */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&w->thread, NULL, work_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->usdt_mu);
		pthread_mutex_destroy(&w->mu);
		free(w);
		errno = err;
		return NULL;
	}
	w->running = true;
	return w;
}

void winwork__post(struct winwork *w, struct winwork_job *j)
{
	j->posted_ns = mono_ns();
	j->done_ns = 0;
	if (j->op == WINWORK_ATTACH) {
		j->link = NULL;
		j->err = 0;
	}
	pthread_mutex_lock(&w->mu);
	fifo_push(&w->posted, j);
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	w->pending++;
}

struct winwork_job *winwork__reap(struct winwork *w)
{
	struct winwork_job *j;

	if (!w->pending)	/* the common case: no lock */
		return NULL;
	pthread_mutex_lock(&w->mu);
	j = fifo_pop(&w->done);
	pthread_mutex_unlock(&w->mu);
	if (j)
		w->pending--;
	return j;
}

unsigned winwork__pending(const struct winwork *w)
{
	return w ? w->pending : 0;
}

void winwork__cancel_attaches(struct winwork *w)
{
	if (w)
		__atomic_store_n(&w->cancel, true, __ATOMIC_RELAXED);
}

void winwork__stop(struct winwork *w)
{
	if (!w || !w->running)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	w->running = false;
}

void winwork__free(struct winwork *w)
{
	if (!w)
		return;
	winwork__stop(w);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->usdt_mu);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

bool winwork__trylock(struct winwork *w)
{
	return !pthread_mutex_trylock(&w->usdt_mu);
}

void winwork__unlock(struct winwork *w)
{
	pthread_mutex_unlock(&w->usdt_mu);
}

void winwork__max_ns(const struct winwork *w, uint64_t *ret_attach, uint64_t *ret_detach)
{
	*ret_attach = w ? __atomic_load_n(&w->attach_max_ns, __ATOMIC_RELAXED) : 0;
	*ret_detach = w ? __atomic_load_n(&w->detach_max_ns, __ATOMIC_RELAXED) : 0;
}
