/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The in-memory batch every producer writes into and the agent pushes to the server: string
 * table, deduplicated locations and stacks, stack samples, metric points and intervals
 * (shared/DESIGN.md, "The data"). Encodes to / decodes from proto/gpuscope/v1/batch.proto.
 * Thread-safe: every call takes the batch's mutex, so producer threads may share one batch.
 */
#ifndef GPUSCOPE_BATCH_H
#define GPUSCOPE_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Stack sample kinds (DESIGN.md): the strings are the names used in the API and CLI. */
enum sample_kind {
	SAMPLE_CPU = 0,		/* value: samples (1 each); the period is in the batch */
	SAMPLE_OFFCPU_NS,	/* value: ns blocked */
	SAMPLE_GPU_KERNEL_NS,	/* value: ns of GPU time */
	SAMPLE_CUDA_SYNC_NS,	/* value: ns waiting in a CUDA synchronize */
	SAMPLE_KIND_MAX,
};
const char *sample_kind_name(enum sample_kind k);
int sample_kind_parse(const char *s);	/* -EINVAL if unknown */

struct label {
	const char *name, *value;
};

/* One frame. Strings are copied (interned) by the batch. */
struct location {
	const char *function;	/* demangled; NULL or "" when unresolved */
	const char *module;	/* mapping path, "[kernel.kallsyms]" for the kernel */
	const char *build_id;	/* hex, may be NULL */
	const char *file;	/* source file, may be NULL */
	uint32_t line;		/* 0 if unknown */
	uint64_t address;	/* file offset in module (pprof Location.address), or kernel address */
	bool kernel;
	bool inlined;
};

struct batch;

/* Creates an empty batch for this node. Returns NULL with errno set. Free with batch__free(). */
struct batch *batch__new(const char *node);
void batch__free(struct batch *b);
/* Drops every record but keeps the node name (and may keep interned strings). */
void batch__reset(struct batch *b);

/*
 * The batch's random 64-bit id (sent on the wire for the server's dedup); batch__reset()
 * draws a new one, so callers may cache stack ids per (batch id).
 */
uint64_t batch__id(const struct batch *b);
/* Sets the id (made odd, never 0): the server derives its parts' ids from a batch's. */
void batch__set_id(struct batch *b, uint64_t id);

/* Deduplicated: the same frame list returns the same stack id within one batch. >= 0 or -errno. */
int64_t batch__stack(struct batch *b, const struct location *frames, size_t n);

/*
 * A stack sample at time_ns (Unix ns). Labels are copied. 0 or -errno (-ERANGE: a time at or
 * before 1970, i.e. <= 0 as the wire's int64, which the server refuses with the whole batch;
 * likewise for metric points and intervals).
 */
int batch__sample(struct batch *b, uint64_t time_ns, const struct label *labels, size_t nlabels,
		  int64_t stack_id, enum sample_kind kind, int64_t value);

/* One metric point (Unix ns). Series are identified by name + labels. 0 or -errno. */
int batch__metric(struct batch *b, const char *name, const struct label *labels, size_t nlabels,
		  uint64_t time_ns, double value);

/*
 * One interval [start_ns, end_ns) of `kind` ("thread_state", "gpu_kernel", "gpu_busy",
 * "cuda_api", "memcpy", ...) with its stack (a batch__stack() id; -1: none; Interval.stack on
 * the wire); attrs are free-form name/value pairs (state, cpu, kernel name, stream, ...).
 * 0 or -errno (-EINVAL for a stack id this batch does not have).
 */
int batch__interval(struct batch *b, const char *kind, const struct label *labels, size_t nlabels,
		    uint64_t start_ns, uint64_t end_ns, int64_t stack_id, const struct label *attrs,
		    size_t nattrs);

/*
 * The index of this label set in b, added if new, for the records of one thread or process
 * that repeat it: batch__sample_ls() and batch__interval_ls() then skip interning the labels
 * again (the agent's thread-state events). Valid in b only: batch__id() tells batches apart
 * (a new or reset batch has a new one). >= 0, or -errno.
 */
int64_t batch__label_set(struct batch *b, const struct label *labels, size_t nlabels);
/* batch__sample() and batch__interval() with a batch__label_set() index (-EINVAL if unknown). */
int batch__sample_ls(struct batch *b, uint64_t time_ns, int64_t ls, int64_t stack_id,
		     enum sample_kind kind, int64_t value);
int batch__interval_ls(struct batch *b, const char *kind, int64_t ls, uint64_t start_ns,
		       uint64_t end_ns, int64_t stack_id, const struct label *attrs, size_t nattrs);
/*
 * The index of string s in b's string table, added if new, for batch__interval_idx(): a
 * producer that repeats the same kind and attrs interns them once per batch (batch__id()).
 * >= 0, or -errno.
 */
int64_t batch__string(struct batch *b, const char *s);
/*
 * batch__interval_ls() with the kind and the attrs as batch__string() indices: attrs holds
 * nattrs (name, value) pairs, ordered by name as batch__interval() orders them (strcmp), names
 * distinct and not empty. The same record as batch__interval_ls() with those strings.
 * -EINVAL for an index b does not have or pairs out of order.
 */
int batch__interval_idx(struct batch *b, uint32_t kind, int64_t ls, uint64_t start_ns,
			uint64_t end_ns, int64_t stack_id, const uint32_t *attrs, size_t nattrs);

/* Lets times <= 0 through (test tools that send what a broken agent would, to the server). */
void batch__allow_any_time(struct batch *b);

/* Record counts, for logs and flush decisions. */
size_t batch__nsamples(const struct batch *b);
size_t batch__size_estimate(const struct batch *b);	/* bytes once encoded, roughly */

/*
 * What a batch holds, as its encoding will carry it: what the agent bounds the server's decoding
 * checks with (batch_scan_bound(), src/agent/push/fit.c) without decoding the batch.
 */
struct batch_counts {
	uint64_t strings, string_bytes;	/* string table; bytes: NULs excluded */
	uint64_t locations, stacks, frames;	/* frames: every stack's location entries */
	uint64_t label_sets, label_entries;	/* entries: 2 per label (name, value) */
	uint64_t groups, samples;		/* sample groups (>= those encoded), samples */
	uint64_t series, points, intervals, attr_entries;
	/* Bytes the label pairs resolve to (each name and value + 1, as batch_decode() counts
	 * them): every label set once, every interval's attrs; and the largest of each. */
	uint64_t label_bytes, label_set_bytes_max, attr_bytes_max;
	bool checked;	/* times > 0 and a node name: batch__allow_any_time() or node "" clear it */
};
void batch__counts(const struct batch *b, struct batch_counts *ret);

/* Encodes to a protobuf Batch, uncompressed. *ret is malloc'ed; the caller frees. 0 or -errno. */
int batch__encode(struct batch *b, uint8_t **ret, size_t *ret_len);

/* CPU sampling period written into the batch (Batch.period_ns); 0 = unknown. */
void batch__set_period(struct batch *b, uint64_t period_ns);

/*
 * Limits, checked by the batch (-E2BIG / -ENOSPC) and by batch_decode() on the server side.
 * A producer that gets -ENOSPC should flush the batch and retry.
 */
#define BATCH_VERSION		2		/* 2: Interval.stack; 1 (stack in attrs) is read too */
#define BATCH_VERSION_MIN	1
#define BATCH_MAX_DEPTH		1024		/* frames per stack */
#define BATCH_MAX_LABELS	64		/* labels per label set, attrs per interval */
#define BATCH_MAX_STRLEN	65536		/* bytes per string, NUL excluded */
#define BATCH_MAX_RECORDS	(4u << 20)	/* samples + metric points + intervals */
#define BATCH_MAX_STRINGS	(1u << 20)
#define BATCH_MAX_LOCATIONS	(1u << 20)
#define BATCH_MAX_STACKS	(1u << 20)
#define BATCH_MAX_LABEL_SETS	(1u << 16)
#define BATCH_MAX_GROUPS	(1u << 18)	/* sample groups + metric series */
#define BATCH_MAX_LABEL_BYTES	16384		/* a label set's names + values, resolved */
#define BATCH_MAX_ATTR_BYTES	65536		/* an interval's attrs, resolved */
/* Bytes decoding may allocate (protobuf-c's structures, resolved labels) per compressed byte,
 * on top of a fixed allowance: memory stays proportional to what was sent. */
#define BATCH_DECODE_RATIO	64
#define BATCH_DECODE_BASE	(16u << 20)

/*
 * Server side: unpacks an uncompressed protobuf Batch and validates it completely (version,
 * every index in range, column lengths, kinds, interval order, string lengths), so that the
 * caller may index without checks. Returns the protobuf-c message, to be freed with
 * batch_decode_free(), or NULL with a human-readable reason in err (and errno set: EINVAL for
 * malformed input, EPROTONOSUPPORT for an unknown version, E2BIG past a limit, ENOMEM).
 * Runs batch_scan() first with the budget of an uncompressed body of len bytes.
 */
struct Gpuscope__V1__Batch;
struct Gpuscope__V1__Batch *batch_decode(const uint8_t *buf, size_t len, char *err,
					 size_t errlen);

/*
 * Wire pre-scan of a Batch, before protobuf-c unpacks it: counts every repeated field (top
 * level and inside each message) against the limits above and estimates the bytes unpacking
 * will allocate, so that a small body that would expand into gigabytes is refused after a
 * bounded amount of work. Feed it the growing buffer as decompression produces it.
 */
struct batch_scan {
	size_t off;			/* bytes of complete top-level fields scanned */
	uint64_t budget;		/* bytes unpacking and label resolution may allocate */
	uint64_t est;			/* estimated bytes unpacking allocates */
	uint64_t count[12];		/* occurrences of each top-level field number */
	uint64_t records;		/* samples + points + intervals */
	char why[200];			/* the limit or the defect, once batch_scan() failed */
};

/* budget: bytes; BATCH_DECODE_BASE + BATCH_DECODE_RATIO * compressed length on the server. */
void batch_scan_init(struct batch_scan *s, uint64_t budget);
/*
 * Scans the complete top-level fields of buf[0..len) not scanned yet (buf may be the same
 * growing buffer each time). 0; -E2BIG when a limit or the budget is exceeded, -EINVAL when
 * malformed; s->why says which.
 */
int batch_scan(struct batch_scan *s, const uint8_t *buf, size_t len);
/*
 * batch_decode() of a buffer that batch_scan() accepted in full (a field cut short is
 * malformed); the resolved label bytes count against what is left of the scan's budget.
 */
struct Gpuscope__V1__Batch *batch_decode_scanned(struct batch_scan *s, const uint8_t *buf,
						 size_t len, char *err, size_t errlen);
void batch_decode_free(struct Gpuscope__V1__Batch *m);
/*
 * An upper bound of batch_scan()'s estimate (s->est once it accepted the whole buffer) for
 * batch__encode()'s encoding of a batch with these counts: from the same cost model, every
 * field of every message counted as present. UINT64_MAX when the schema has a field whose cost
 * depends on its bytes rather than on the counts (then the caller decodes).
 */
uint64_t batch_scan_bound(const struct batch_counts *c);

/*
 * The agent's answer to a 413: splits an encoded (uncompressed) batch into two halves by
 * record count (samples, then metric points, then intervals, in wire order), each rebuilt with
 * only the strings, stacks and label sets it uses. 0 with *ret_a and *ret_b (free with
 * batch__free()); -E2BIG when it holds fewer than 2 records; -EINVAL when it does not decode;
 * -ENOMEM.
 */
int batch_split(const uint8_t *raw, size_t len, struct batch **ret_a, struct batch **ret_b);

/* Earliest and latest time (Unix ns) of a decoded batch's samples, points and intervals;
 * *ret_min > *ret_max when it holds none. */
void batch_time_bounds(const struct Gpuscope__V1__Batch *m, uint64_t *ret_min,
		       uint64_t *ret_max);

#endif
