// SPDX-License-Identifier: Apache-2.0
/*
 * The NVML replay library's insides, shared by its files: the loaded trace (timelines of
 * recorded answers, buffered samples per device, events), its clock and lookups. replay_load.c
 * reads the trace; replay.c answers discovery and state-like calls; replay_buffers.c the
 * buffered samples, per-process data, GPM and events, and the tests' view of the trace.
 */
#ifndef GPUSCOPE_NVML_REPLAY_INT_H
#define GPUSCOPE_NVML_REPLAY_INT_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>
#include "agent/gpu/nvml_api.h"

#define API __attribute__((visibility("default")))
#define MAX_DEVS 128
#define NBUCKETS 1024
#define LINE_MAX_LEN (4 << 20)

struct entry {		/* one recorded call in a timeline */
	uint64_t t_us;
	int ret;
	char *rest;	/* the outputs, unparsed; NULL when not kept */
};

struct timeline {
	char *key;
	struct entry *e;
	size_t n, cap;
	struct timeline *next;	/* hash chain */
};

struct sample {		/* a buffered driver sample (or per-process sample) */
	uint64_t avail_us;	/* trace time when the recording first read it */
	unsigned long long ts;	/* recorded timestamp, us since 1970 */
	nvmlValue_t v;
	unsigned pid, sm, mem, enc, dec;
};

struct stream {
	struct sample *s;
	size_t n, cap;
	int vt;
};

struct fault {
	uint64_t from_us, to_us;
	int ret;
};

struct nvmlDevice_st {
	char id[16];
	struct stream samples[3];
	struct stream proc;
	struct fault faults[16];
	int nfaults;
};

struct nvmlGpmSample_st {
	struct nvmlDevice_st *dev;
	uint64_t v_us;
};

struct event {
	uint64_t t_us;
	struct nvmlDevice_st *dev;
	unsigned long long type, data;
	unsigned gi, ci;
};

struct replay_state {
	pthread_mutex_t mu;
	bool loaded, started;
	int load_err;
	uint64_t rec_start_wall_us, dur_us;
	uint64_t start_mono_ns, start_wall_us;
	long long shift_us;
	double speed;
	bool loop;
	struct timeline *buckets[NBUCKETS];
	struct nvmlDevice_st devs[MAX_DEVS];
	int ndevs;
	struct event *ev;
	size_t nev, evcap;
	uint64_t ev_next;	/* events delivered so far, over all loop cycles */
	int inits;
};
extern struct replay_state S;

/* Common prologue of a per-device call: initialised, valid handle, no fault. */
#define DEV_PROLOGUE(d, v)                                                                         \
	uint64_t v;                                                                                \
	int fr_;                                                                                   \
	if (!S.started)                                                                            \
		return NVML_ERROR_UNINITIALIZED;                                                   \
	if (!(d) || (d) < S.devs || (d) >= S.devs + S.ndevs)                                       \
		return NVML_ERROR_INVALID_ARGUMENT;                                                \
	v = vnow(NULL);                                                                            \
	fr_ = fault_of((d), v);                                                                    \
	if (fr_)                                                                                   \
		return fr_;

/* replay_load.c: the trace, read once at the first nvmlInit */
void *xrealloc(void *p, size_t n);
struct timeline *tl_get(const char *key, bool create);
struct nvmlDevice_st *dev_get(const char *id, bool create);
/* The next space-separated token of *s (NULL at the end); *s moves past it. */
char *tok(char **s);
nvmlValue_t parse_value(int vt, const char *s);
int load(void);

/* replay.c: the replay's clock and the recorded answers */
uint64_t now_mono_ns(void);
uint64_t now_wall_us(void);
/* The replay clock: us of trace time since the first nvmlInit, and the loop cycle. */
uint64_t vnow(uint64_t *cycle);
/* The latest entry at or before v, else the first; NULL if the call was never recorded. */
const struct entry *lookup(const char *key, uint64_t v);
int fault_of(struct nvmlDevice_st *d, uint64_t v);
const struct entry *dev_lookup(const char *call, struct nvmlDevice_st *d, uint64_t v);
nvmlReturn_t get_uint_keyed(const char *call, nvmlDevice_t d, int sub, unsigned long long *ret);

#endif
