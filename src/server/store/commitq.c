/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Group commit for the backends (store.h): concurrent ingests queue their prepared batches; one
 * of the callers (the leader) takes every batch queued so far and stores them together, the
 * others wait, and each caller returns only once the commit holding its batch is done. With a
 * delay, the leader first waits until the oldest queued batch has waited that long (or the
 * group is full), so that batches arriving one after another, not only concurrently, share a
 * commit -- but only while batches of more than one source (node) arrive: one agent sending
 * its spool batch after batch has nobody to wait for.
 */
#include <pthread.h>
#include <time.h>
#include "common/util.h"
#include "server/store/store.h"

void store_commitq_init(struct store_commitq *q, uint64_t delay_ns)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&q->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cond, &ca);
	pthread_condattr_destroy(&ca);
	q->head = NULL;
	q->tail = &q->head;
	q->queued = 0;
	q->leader = false;
	q->delay_ns = delay_ns;
	q->last_source = q->mixed_ns = q->nsources = 0;
	q->commits = 0;
}

void store_commitq_done(struct store_commitq *q)
{
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cond);
}

/* Sources mixed this recently: the leader waits for others. */
#define MIXED_WINDOW(delay_ns) (10 * (delay_ns))

/* The leader waits (mu held) until the oldest queued item is delay_ns old or max are queued. */
static void gather(struct store_commitq *q, size_t max)
{
	if (!q->delay_ns || mono_ns() - q->mixed_ns > MIXED_WINDOW(q->delay_ns))
		return;
	while (q->queued < max) {
		uint64_t due = q->head->queued_ns + q->delay_ns, now = mono_ns();
		struct timespec ts = { (time_t)(due / NSEC_PER_SEC), (long)(due % NSEC_PER_SEC) };

		if (now >= due)
			break;
		pthread_cond_timedwait(&q->cond, &q->mu, &ts);
	}
}

void store_commitq_run(struct store_commitq *q, struct store_commitq_item *it, size_t max,
		       void (*run)(void *ctx, struct store_commitq_item *list, size_t n),
		       void *ctx)
{
	it->next = NULL;
	it->done = false;
	it->queued_ns = q->delay_ns ? mono_ns() : 0;
	pthread_mutex_lock(&q->mu);
	if (it->source != q->last_source && q->nsources++)
		q->mixed_ns = it->queued_ns;
	q->last_source = it->source;
	*q->tail = it;
	q->tail = &it->next;
	if (++q->queued >= max && q->leader)
		pthread_cond_broadcast(&q->cond);	/* a gathering leader: the group is full */
	while (!it->done) {
		struct store_commitq_item *list, **cut;
		size_t n = 0;

		if (q->leader) {
			pthread_cond_wait(&q->cond, &q->mu);
			continue;
		}
		q->leader = true;
		gather(q, max);
		list = q->head;
		for (cut = &q->head; *cut && n < max; cut = &(*cut)->next)
			n++;
		q->head = *cut;
		*cut = NULL;
		if (!q->head)
			q->tail = &q->head;
		q->queued -= n;
		pthread_mutex_unlock(&q->mu);
		run(ctx, list, n);
		pthread_mutex_lock(&q->mu);
		for (struct store_commitq_item *x = list, *next; x; x = next) {
			next = x->next;
			x->done = true;
		}
		q->leader = false;
		q->commits++;
		pthread_cond_broadcast(&q->cond);
	}
	pthread_mutex_unlock(&q->mu);
}
