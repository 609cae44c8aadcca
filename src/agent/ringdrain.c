// SPDX-License-Identifier: Apache-2.0
/* A BPF ring buffer drained by its own thread into a bounded queue: see ringdrain.h. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "agent/ringdrain.h"
#include "agent/selfprof.h"

#define CHUNK_BYTES (1u << 20)

/* One mapping of CHUNK_BYTES: this header, then events, each a u32 size and its bytes, 8-aligned. */
struct chunk {
	struct chunk *next;
	size_t used;		/* bytes of data[] in use */
	char data[];
};
#define CHUNK_DATA (CHUNK_BYTES - sizeof(struct chunk))

/* Bytes an event of `size` takes in a chunk: its u32 size, its bytes, 8-aligned. */
static size_t entry_bytes(size_t size)
{
	return (sizeof(uint32_t) + size + 7) & ~(size_t)7;
}

struct ring_drain {
	pthread_mutex_t lock;	/* the ring's consumption, the queue, the stats */
	struct ring_buffer *rb;
	struct chunk *head, *tail, *spare;
	size_t bytes, cap;	/* event bytes queued or being handed over, at most */
	size_t mapped;		/* chunk bytes mapped now */
	ring_drain_size_fn used;
	ring_drain_lost_fn lost;
	void *ctx;
	struct ring_drain_stats st;
	int epfd, stopfd;
	pthread_t thread;
	bool running;
};

static struct chunk *chunk_new(struct ring_drain *d)
{
	struct chunk *c = d->spare;

	if (c) {
		d->spare = NULL;
	} else {
		c = mmap(NULL, CHUNK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (c == MAP_FAILED)
			return NULL;
		d->mapped += CHUNK_BYTES;
		if (d->mapped > d->st.peak_bytes)
			d->st.peak_bytes = d->mapped;
	}
	c->next = NULL;
	c->used = 0;
	return c;
}

static void chunk_free(struct ring_drain *d, struct chunk *c)
{
	if (!d->spare) {	/* one kept for the next tick: its touched pages stay */
		d->spare = c;
		return;
	}
	munmap(c, CHUNK_BYTES);
	d->mapped -= CHUNK_BYTES;
}

/* The ring's callback, under d->lock: the event into the queue, or counted lost. */
static int enqueue(void *ctx, void *data, size_t size)
{
	struct ring_drain *d = ctx;
	struct chunk *c = d->tail;
	size_t need;

	if (d->used) {
		size_t u = d->used(data, size);

		size = u < size ? u : size;
	}
	need = entry_bytes(size);
	if (need > CHUNK_DATA || d->bytes + need > d->cap)
		goto lost;
	if (!c || c->used + need > CHUNK_DATA) {
		c = chunk_new(d);
		if (!c)
			goto lost;
		if (d->tail)
			d->tail->next = c;
		else
			d->head = c;
		d->tail = c;
	}
	*(uint32_t *)(c->data + c->used) = (uint32_t)size;
	memcpy(c->data + c->used + sizeof(uint32_t), data, size);
	c->used += need;
	d->bytes += need;
	d->st.queued++;
	return 0;
lost:
	d->st.lost++;
	if (d->lost)
		d->lost(d->ctx, data, size);
	return 0;
}

static void *drain_main(void *arg)
{
	struct ring_drain *d = arg;

	selfprof_thread(selfprof_activity("ring_drain"));
	for (;;) {
		struct epoll_event ev[2];
		bool woken = false;
		int n = epoll_wait(d->epfd, ev, 2, -1);

		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; i < n; i++) {
			if (ev[i].data.fd == d->stopfd)
				return NULL;
			woken = true;
		}
		if (!woken)
			continue;
		pthread_mutex_lock(&d->lock);
		d->st.wakeups++;
		ring_buffer__consume(d->rb);
		pthread_mutex_unlock(&d->lock);
		selfprof_flush();
	}
	return NULL;
}

struct ring_drain *ring_drain__start(int map_fd, size_t cap_bytes, ring_drain_size_fn used,
				     ring_drain_lost_fn lost, void *ctx)
{
	struct ring_drain *d = calloc(1, sizeof(*d));
	/* edge-triggered: the ring fd is readable whenever it holds data; only its wakeups count */
	struct epoll_event ring_ev = { .events = EPOLLIN | EPOLLET, .data.fd = map_fd };
	struct epoll_event stop_ev = { .events = EPOLLIN };
	int err;

	if (!d)
		return NULL;
	pthread_mutex_init(&d->lock, NULL);
	d->cap = cap_bytes;
	d->used = used;
	d->lost = lost;
	d->ctx = ctx;
	d->epfd = d->stopfd = -1;
	d->rb = ring_buffer__new(map_fd, enqueue, d, NULL);
	if (!d->rb)
		goto fail;
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	d->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	stop_ev.data.fd = d->stopfd;
	if (d->epfd < 0 || d->stopfd < 0 || epoll_ctl(d->epfd, EPOLL_CTL_ADD, map_fd, &ring_ev) ||
	    epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->stopfd, &stop_ev))
		goto fail;
	err = pthread_create(&d->thread, NULL, drain_main, d);
	if (err) {
		errno = err;
		goto fail;
	}
	d->running = true;
	return d;
fail:
	err = errno;
	ring_drain__free(d);
	errno = err;
	return NULL;
}

long ring_drain__take(struct ring_drain *d, int (*fn)(void *ctx, void *data, size_t size),
		      void *ctx)
{
	struct chunk *list, *next;
	long n = 0;

	pthread_mutex_lock(&d->lock);
	ring_buffer__consume(d->rb);
	list = d->head;
	d->head = d->tail = NULL;
	pthread_mutex_unlock(&d->lock);
	for (struct chunk *c = list; c; c = c->next)
		for (size_t off = 0; off < c->used;) {
			uint32_t size = *(uint32_t *)(c->data + off);

			fn(ctx, c->data + off + sizeof(uint32_t), size);
			off += entry_bytes(size);
			n++;
		}
	pthread_mutex_lock(&d->lock);
	for (struct chunk *c = list; c; c = next) {
		next = c->next;
		d->bytes -= c->used;	/* room for the thread only now: memory is bounded by cap */
		chunk_free(d, c);
	}
	pthread_mutex_unlock(&d->lock);
	return n;
}

void ring_drain__stats(struct ring_drain *d, struct ring_drain_stats *ret)
{
	pthread_mutex_lock(&d->lock);
	*ret = d->st;
	pthread_mutex_unlock(&d->lock);
}

void ring_drain__free(struct ring_drain *d)
{
	struct chunk *next;

	if (!d)
		return;
	if (d->running) {
		uint64_t one = 1;

		if (write(d->stopfd, &one, sizeof(one)) != sizeof(one))
			pthread_cancel(d->thread);	/* cannot happen with a fresh eventfd */
		pthread_join(d->thread, NULL);
	}
	for (struct chunk *c = d->head; c; c = next) {
		next = c->next;
		munmap(c, CHUNK_BYTES);
	}
	if (d->spare)
		munmap(d->spare, CHUNK_BYTES);
	ring_buffer__free(d->rb);
	if (d->epfd >= 0)
		close(d->epfd);
	if (d->stopfd >= 0)
		close(d->stopfd);
	pthread_mutex_destroy(&d->lock);
	free(d);
}
