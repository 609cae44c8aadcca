/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The SQLite backend's blob formats, each encoder beside its decoder: sample chunks, metric
 * point chunks and rollup rows (chunk.c), interval chunks (ivchunk.c), location and stack
 * blocks (blocks.c). Pure functions over bytes (no database, no store state), so a
 * fuzzer reaches every decoder (tests/fuzz/fuzz_chunk.c). Every blob is a zstd frame, or (schema
 * 2, when zstd would not make it smaller) a 0 byte and the bytes themselves; a decoder never
 * reads past its input and answers -EINVAL for anything it cannot parse.
 */
#ifndef GPUSCOPE_STORE_SQLITE_CHUNK_H
#define GPUSCOPE_STORE_SQLITE_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "server/codec.h"

#define CHUNK_MAX	65536		/* samples or points per chunk (decoders refuse more) */
#define CHUNK_ZLEVEL	3
#define CHUNK_MAX_BLOB	(256u << 20)	/* decompressed blob bound */
#define UNIT_MAX	1000000000ull	/* format 3's time unit, ns: at most a second */
#define CHUNK_MAX_ATTRS	128		/* attrs per interval, format 4 (ingest: 65) */

/*
 * Any blob of this file's formats again at zstd `level` through zctx (a ZSTD_CCtx): the same
 * bytes once decompressed, so every decoder reads it as before. 1 and *ret (malloc'ed, caller
 * frees) when shorter than len, 0 when not (or stored uncompressed), -errno when blob is not
 * a zstd frame of at most CHUNK_MAX_BLOB bytes. tmp: scratch.
 */
int blob_recompress(const void *blob, size_t len, void *zctx, int level, struct buf *tmp,
		    uint8_t **ret, size_t *ret_len);

/* One sample before encoding. */
struct srow {
	uint64_t t;
	uint64_t stack;
	int64_t value;
	uint64_t labelset;	/* schema 2: a chunk may hold several (the kind's of a batch) */
};

/* One metric point before encoding. */
struct prow {
	uint64_t t;
	double v;
};

/*
 * Sample chunk (before zstd), format 2: uvarint 0 and 2 (format 1 began with n >= 1), uvarint
 * n, flags (bit 0: every value is 1; bit 1: several label sets; bit 2: values as gaps), the
 * sampling period P in ns (0: none). The samples are in (label set, time) order, in groups of
 * one label set: with several, uvarint count g and g x (label set id delta from the group before,
 * ascending, the first from 0; size); with one it is the chunk row's. Then columns: each group's
 * first time less t_min (uvarint); for the other samples d, the time less the one before in the
 * group, as q = d / P rounded to the nearest (uvarint) in one column and d - q P (svarint) in
 * the next (without P: d in the first, the second empty); n stack codes (uvarint: 0 a literal,
 * k the k-th most recent distinct stack of the group, at most 32 kept); the literals (svarint
 * difference to the literal before); unless every value is 1, n values (svarint), or with bit 2
 * a group's first value and then d less the value (off-CPU samples: the time the thread ran
 * between two blocks; the encoder picks the shorter). Format 1: uvarint n, flags (bits 0-1),
 * then n time deltas from t_min (uvarint, time order), n label set ids (uvarint) if several, n
 * stack ids (uvarint), n values (svarint) unless all are 1 (still read; written for r in time
 * order whose ties of time are not in label-set order, so that decoding gives r's order back).
 * r sorted by time (else decoding gives it by time, ties by label set), n >= 1; t_min is the
 * least r[i].t.
 * Format 3 (schema 8, unit_ns > 1): uvarint 0, 3, the unit u (ns), then format 2 with every
 * time in whole units, t / u (decoded as (t / u) u: times floored to the unit), the period
 * too (P / u); values stay in ns (off-CPU gaps are d u less the value); the remainders (when
 * P) and the values (unless all are 1) as byte-plane columns: uvarint w (the bytes the
 * largest zigzagged value needs, 0-8), then w planes of one byte per value, lowest first.
 * Flag 16 (schema 9; written when every value is a whole number of units and not all are 1:
 * off-CPU values, which ingest rounds to the unit): the values in units too, v / u, decoded as
 * v u (as gaps, d less v / u in units). Flag 32 (schema 16; formats 2 and 3, written unless
 * two stack ids lie 2^63 or more apart): each literal (uvarint) 0 for the largest literal so
 * far plus one (a batch's new stacks are numbered as its chunks list them), else 1 + the
 * zigzagged difference to the last literal not so coded. unit_ns 0 or 1: format 2, times as
 * they are. *ret malloc'ed (caller frees). 0/-errno.
 */
int chunk_samples_encode(const struct srow *r, size_t n, uint64_t period_ns, uint64_t unit_ns,
			 uint8_t **ret, size_t *ret_len);

/* A decoded sample chunk in struct-of-arrays form; zero-initialized is empty and reusable. */
struct chunk {
	struct buf raw;
	size_t n;
	bool all_one, mixed;	/* mixed: labelset[] holds each sample's label set */
	uint64_t *t, *stack, *labelset;
	int64_t *value;
	size_t cap;
	bool any_order;		/* set by the caller: format 2's samples may stay by label set
				 * (rollups sum them), no time order restored */
	uint32_t *perm;		/* scratch of format 2's reordering */
	uint64_t *tmp;
	size_t capscratch;
};

/* Decodes a sample chunk whose least time is t_min into c (reusing its arrays), in time order
 * (ties: format 2 by label set, then as given to the encoder; format 1 as written). 0/-errno. */
int chunk_samples_decode(struct chunk *c, const void *blob, size_t len, uint64_t t_min);
void chunk_done(struct chunk *c);

/*
 * Points chunk (before zstd): uvarint n, n time deltas from t_min = r[0].t, n doubles (8 bytes
 * each, host order). r sorted by t, n >= 1. *ret malloc'ed (caller frees). 0/-errno.
 */
int chunk_points_encode(const struct prow *r, size_t n, uint8_t **ret, size_t *ret_len);

/*
 * Decodes a points chunk whose first time is t_min, calling cb for each point in order once
 * the whole chunk validated. tmp is scratch (reused). 0, -EINVAL/-E2BIG/-ENOMEM, or cb's
 * nonzero return.
 */
int chunk_points_decode(const void *blob, size_t len, uint64_t t_min, struct buf *tmp,
			int (*cb)(void *ctx, uint64_t t, double v), void *ctx);

/*
 * Rollup row of schema 11 (before zstd): the entries of one (level, kind, bucket, node), every
 * label set of the node in it, in ascending (label set, stack) order:
 *   uvarint 0, 0, 3 (format 3; formats 1 and 2 below start otherwise), uvarint flags
 *   (ROLLUP_COUNTS: a column of counts follows, else every count is its sum: CPU samples),
 *   uvarint nls, then columns: nls label-set deltas (uvarint, the first from 0), nls entry
 *   counts (uvarint >= 1), n stack deltas (uvarint, from 0 at each label set's first), n sums
 *   (svarint), [n counts (uvarint)].
 * order[] lists the indexes of ls/stack/sum/count in that order (distinct pairs). *ret
 * malloc'ed (caller frees). 0/-errno.
 */
#define ROLLUP_COUNTS	1
int rollup_encode(const uint64_t *ls, const uint64_t *stack, const int64_t *sum,
		  const uint64_t *count, const size_t *order, size_t n, uint8_t **ret,
		  size_t *ret_len);

/*
 * Decodes a rollup row of schema 11, calling cb per entry in (label set, stack) order once
 * the whole row validated. tmp is scratch (reused). 0, -EINVAL/-E2BIG/-ENOMEM or cb's nonzero
 * return.
 */
int rollup_decode(const void *blob, size_t len, struct buf *tmp,
		  int (*cb)(void *ctx, uint64_t ls, uint64_t stack, int64_t sum, uint64_t count),
		  void *ctx);

/*
 * Decodes a rollup row of schemas 1-10 (one label set's, read only by the migration to 11):
 * format 2 (schema 4) where every count is its sum: uvarint 0, n, then n stack deltas
 * (uvarint), n sums (svarint); else format 1: uvarint n >= 1, then n x (stack delta, sum,
 * count). cb per entry in stack order; tmp is scratch. 0, -EINVAL/-E2BIG/-ENOMEM or cb's
 * nonzero return; entries before a corrupt one were passed.
 */
int rollup_decode_v10(const void *blob, size_t len, struct buf *tmp,
		      int (*cb)(void *ctx, uint64_t stack, int64_t sum, uint64_t count), void *ctx);

/*
 * A stack's location ids, ids[0] the leaf (schema 2): the first as a uvarint, each next one as
 * the svarint difference to the one before (a stack's new locations get consecutive ids).
 * Schema 12 writes them root first, after a uvarint 0 (no location id is 0): the frames a
 * stack shares with earlier ones (its root side) are then the same bytes at the start of every
 * entry, which zstd finds (the churning hour's stack blocks 3.93 -> 3.34 B/sample measured);
 * decoding gives ids[0] the leaf either way. Appends to b; nothing for n == 0.
 */
void stack_locs_encode(const uint64_t *ids, size_t n, struct buf *b);
/*
 * Decodes a stack's location ids into ids (at most max; more is -E2BIG). 0 or -EINVAL (a
 * truncated or out-of-range varint); *ret_n is set either way, to the ids decoded before any
 * fault.
 */
int stack_locs_decode(const void *blob, size_t len, uint64_t *ids, size_t max, size_t *ret_n);

/*
 * Stack block (before compression): a batch's new stacks, ids ascending: uvarint n, n id deltas
 * (uvarint, the first from 0), n lengths (uvarint), then each stack's location list
 * (stack_locs_encode(), the stacks of one program share long runs) back to back. ids, locs
 * and lens are n entries; locs[i] points at lens[i] bytes. *ret malloc'ed (caller frees).
 * 0/-errno.
 */
int stack_block_encode(const uint64_t *ids, const uint8_t *const *locs, const size_t *lens,
		       size_t n, uint8_t **ret, size_t *ret_len);

/* A decoded stack block; zero-initialized is empty and reusable. locs point into raw. */
struct sblock {
	struct buf raw;
	size_t n, cap;
	uint64_t *id;
	const uint8_t **locs;
	size_t *len;
};

/* Decodes a stack block into b (reusing its arrays). 0/-errno. */
int stack_block_decode(struct sblock *b, const void *blob, size_t len);
/* The index of stack id in b (ids ascending), -1 if absent. */
ptrdiff_t stack_block_find(const struct sblock *b, uint64_t id);
void sblock_done(struct sblock *b);

/* One location before encoding; the strings are not owned. */
struct lrow {
	uint64_t id;
	const char *str[4];	/* function, module, build-id, file */
	uint64_t sid[4];	/* format 2: their ids in the store's string dictionary (0: "") */
	uint64_t line, address, flags;
};

/*
 * Location block (before compression): a batch's new locations, ids ascending. Format 1:
 * uvarint n >= 1, n id deltas (uvarint, the first from 0), then the strings column by column (n
 * functions, n modules, n build-ids, n files, each NUL-terminated: names of one program side by
 * side compress well), then n lines, n addresses, n flags (uvarint). Format 2 (dict, schema
 * 10): uvarint 0, 2, then format 1 with each string column as the strings' ids in the store's
 * dictionary (sid; 0 is ""), each the svarint difference to the one above it (a batch's new
 * strings get consecutive ids). Format 3 (dict, schema 14; what dict writes now): uvarint 0, 3,
 * n, the ids, the functions as in format 2, then the modules as move-to-front codes over the
 * block's 64 most recent ones (0: not among them, then the svarint difference to the module of
 * the location above), the build ids and files as svarint differences to their module's last in
 * the block (0 before), the lines, the addresses as svarint differences to their module's last
 * address in the block, the flags: a module's build id and file repeat, and its addresses are
 * near each other (on the churning recording 6.3 -> 5.3 bytes a location). *ret malloc'ed
 * (caller frees). 0/-errno.
 */
int loc_block_encode(const struct lrow *r, size_t n, bool dict, uint8_t **ret, size_t *ret_len);

/* A decoded location block; zero-initialized is empty and reusable. Strings point into raw
 * (format 1) or strs (formats 2 and 3: copies of the dictionary's). */
struct lblock {
	struct buf raw, strs;
	size_t n, cap;
	struct lrow *r;
	bool dict;		/* format 2 or 3 */
};

/* Decodes a location block into b (reusing its arrays). Format 2's string ids through str(ctx,
 * sid): the string (copied before the call returns), NULL if unknown (then -EINVAL: str may
 * be NULL for a caller without a dictionary). 0/-errno. */
int loc_block_decode(struct lblock *b, const void *blob, size_t len,
		     const char *(*str)(void *ctx, uint64_t sid), void *ctx);
/* The row of location id in b (ids ascending), NULL if absent. */
const struct lrow *loc_block_find(const struct lblock *b, uint64_t id);
void lblock_done(struct lblock *b);

/* The attr an interval's stack is kept as: its number, the store's stack id. */
#define CHUNK_STACK_ATTR "stack_id"

/* One interval before encoding; attrs are 2 * nattrs name/value strings (not owned). */
struct irow {
	uint64_t seq;		/* store-wide order of arrival: ties of start are answered in it */
	uint64_t labelset, start, end;
	const char *const *attrs;
	size_t nattrs;
	bool seq_free;		/* every other interval of its batch that starts at its stored
				 * start (none, mostly) is in this chunk: format 4 keeps only
				 * their order of arrival, not its seq */
	uint64_t stack;		/* the store's stack id, 0: none; written as attr
				 * CHUNK_STACK_ATTR (a number), as the text "<id>" there would
				 * be: the same bytes, without the text */
	size_t stack_at;	/* its place among the attrs (0..nattrs: before attrs[2 *
				 * stack_at]) */
};

/*
 * Interval chunk (before compression), format 2: uvarint 0, uvarint 2, uvarint n, uvarint seq
 * of the first row; the chunk's strings: uvarint count, each NUL-terminated (attr names, and values that are not decimal
 * numbers); its shapes (the distinct lists of attr names): uvarint count, each a uvarint k
 * and k name indexes. Then the rows, in (label set, start, seq) order, as columns of n:
 * lengths end - start (uvarint); label set (uvarint delta from the row before) each followed
 * by its start: after a row of the same label set the svarint difference to that row's end
 * (a thread's next state starts where the last ended: 0), else the uvarint delta from t_min
 * (the least start); seq deltas from the previous row's (svarint); shape indexes (uvarint);
 * then the attr values, a column per attr name (names in the order the shapes first list
 * them), each row's values of that name in row order: uvarint 4 x string index, 4 x number + 1
 * for a canonical decimal below 2^62 ("0", "17"; answered as the same text), or 2 for the
 * decimal that is the row's length (end - start) less the numbers of the row's columns before
 * (a thread-state summary's running_ns). Format 2 starts with uvarint 0 and 2; format 1 (still
 * read) has no such prefix and its values row by row, 2 x string index or 2 x number + 1.
 * n >= 1, end >= start.
 * Format 3 (schema 8; written when unit_ns > 1 or a row is seq_free): uvarint 0, 3, the unit
 * u (ns, >= 1), then format 2 with starts and ends floored to whole units (lengths and start
 * deltas in units: end / u - start / u), the lengths as a byte-plane column (samples' format
 * 3); the header's seq is the least of the rows', which
 * every row has but those listed in place of format 2's seq column: uvarint count, then each
 * listed row's index (uvarint delta from the one listed before; the first from 0) and seq
 * less the least (uvarint); the rows not seq_free are listed. The numbers of attrs named *_ns
 * (durations) as v / u, decoded as (v / u) u; only they take part in tag 2, which is then the
 * row's length in units less theirs before (a summary's running_ns stays its length less
 * runnable_ns and blocked_ns, all floored: 0 to 3 u above its own floor); other numbers as
 * they are. (Formats 2 and 3 are no longer written; still read.)
 * Format 4 (schema 13, written for every chunk): uvarint 0, 4, the unit u (ns, >= 1; 1 keeps
 * ns), n, the least seq, the strings and shapes as format 2 (a shape of at most CHUNK_MAX_ATTRS
 * names). Rows in (label set, start, seq) order: uvarint g and g x (label set id delta from the
 * group before, the first from 0; its rows), n shape indexes (uvarint); per shape, in shape
 * order, a byte-plane column of its rows' lengths in units (end / u - start / u); each group's
 * first start in units from t_min / u (uvarint), then for every other row its start less the
 * row before's end, in units (svarint). Arrival numbers: uvarint k and k x (row index delta
 * from the one before, the first from 0; seq less the least) for the rows not seq_free, which
 * keep their seq; every other row has the least, but for the tie groups of the rows not
 * listed (two or more sharing a start in units), each, in the order of its first row: uvarint
 * 0 when its rows arrived in the order of their ends (ties of end by row order), else 1 and
 * each row's rank of arrival (uvarint, row order; a permutation); a row of rank x has seq the
 * least + x. Values: a column per attr name (names in the order the shapes first list them),
 * within it a run per shape that names it (shape order): uvarint c + 1 when every value of the
 * run has code c, else 0 and the run's codes (each row of the shape in row order, its values
 * of that name in attr order); codes as format 3's (with u 1, every number takes part in tag
 * 2, as format 2). So a row of a tie group decodes with another seq than it had, but ties of
 * start keep their order, within the chunk and against other chunks (whose seqs lie outside
 * the batch's, or are kept). n may be 0; end >= start.
 * *ret malloc'ed (caller frees). 0/-errno (-EINVAL: a row of more than CHUNK_MAX_ATTRS attrs).
 */
int chunk_intervals_encode(const struct irow *r, size_t n, uint64_t unit_ns, uint8_t **ret,
			   size_t *ret_len);

/* A decoded interval chunk; zero-initialized is empty and reusable. Strings point into raw
 * and num. */
struct ichunk {
	struct buf raw, num;		/* num: the text of numeric values */
	uint64_t unit;			/* its times' unit, ns (1 before format 3) */
	size_t n, cap, nstr, capstr, nattr, capattr, capshape, capshapes;
	uint64_t *seq, *labelset, *start, *end;
	uint64_t *stack;		/* row i's attr CHUNK_STACK_ATTR as a number (0: none) */
	const char *stack_name;		/* that attr's name in strs (NULL: no row has it) */
	size_t *attr0, *nattrs;		/* row i's attrs: attrs[2 * attr0[i]], nattrs[i] pairs */
	size_t *shape0, *shapen;	/* shape k's names: shapes[shape0[k]], shapen[k] of them */
	const char **strs, **attrs, **shapes;
	uint64_t *acc;			/* format 2: each row's numbers so far */
	size_t capacc;
};

/* Decodes an interval chunk whose least start is t_min into c (reusing its arrays); rows come
 * in the chunk's order (label set, start). 0/-errno. */
int chunk_intervals_decode(struct ichunk *c, const void *blob, size_t len, uint64_t t_min);
void ichunk_done(struct ichunk *c);

#endif
