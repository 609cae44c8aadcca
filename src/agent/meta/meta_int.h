/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of process metadata (meta.h) shared by its files only: the pod cache the Kubernetes
 * client (kube.c) fills and the label cache (meta.c) reads, and the client's settings.
 */
#ifndef GPUSCOPE_META_INT_H
#define GPUSCOPE_META_INT_H

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include "agent/http_client.h"
#include "agent/meta/meta.h"
#include "agent/meta/relabel.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/prom.h"
#include "common/util.h"

#define MAX_PODS	   4096		/* pods cached (a node runs at most a few hundred) */
#define MAX_POD_LABELS	   64		/* labels kept per pod */
#define MAX_POD_CONTAINERS 32
#define DELETED_GRACE_NS   (600 * NSEC_PER_SEC)	/* deleted pods still label late samples */
#define PID_CACHE_SIZE	   4096		/* direct-mapped by pid */
#define PID_REREAD_NS	   (10 * NSEC_PER_SEC)
#define MAX_LIST_BYTES	   (256u << 20)	/* one list page */
#define MAX_EVENT_BYTES	   (16u << 20)	/* one watch event line */
#define PACKED_MAX	   4096		/* a process's labels, packed "name\0value\0..." */
#define WATCH_TIMEOUT_S	   300
#define BACKOFF_MAX_S	   30

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct pod_container {
	char id[80];
	char runtime[16];
	char *name;
};

struct pod {
	char uid[40];
	char mirror[40];	/* kubernetes.io/config.mirror: the static pod's cgroup hash */
	char *name, *ns, *node, *owner_kind, *owner_name;
	struct label labels[MAX_POD_LABELS];	/* owned strings */
	size_t nlabels;
	struct pod_container ctrs[MAX_POD_CONTAINERS];
	size_t nctrs;
	uint64_t deleted_ns;	/* mono time of deletion, 0 while alive */
};

/* cgroup.c */
void meta_copy_str(char *dst, size_t cap, const char *src, size_t n);

/* kube.c */
void meta_pod_free(struct pod *p);
/* Caller holds meta_pc.mu. */
ssize_t meta_pod_index(const char *uid);
void *meta_k8s_thread(void *arg);

/* This node's pods (kube.c fills it, the label cache reads it). */
struct meta_pod_cache {
	pthread_mutex_t mu;
	struct pod *pods[MAX_PODS];
	size_t n;
	atomic_uint_fast64_t gen;	/* bumped on every change; pid entries rebuild on change */
	atomic_uint_fast64_t evicted;	/* pods dropped because the cache was full */
};
extern struct meta_pod_cache meta_pc;

/* The Kubernetes client: its settings (meta__start), its thread and its counters. */
struct meta_kube_watch {
	pthread_t thread;
	bool running;
	atomic_bool stopping;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	char *api, *token_file, *ca_file, *node;
	struct http_link *link;		/* the API server's: api, ca_file, token_file */
	char rv[64];			/* resourceVersion to watch from; "" forces a list */
	char *buf;			/* partial watch line */
	size_t len, cap;
	bool gone;			/* the watch said 410 Gone */
	bool overflow;
	/* counters for /metrics */
	atomic_uint_fast64_t lists, list_errors, watches, watch_events, watch_gone, api_errors,
		bad_events;
	atomic_int up;			/* 1 after a successful list, 0 after an error */
};
extern struct meta_kube_watch meta_kw;

#endif /* GPUSCOPE_META_INT_H */
