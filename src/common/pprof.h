/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pprof writer: builds a profile.proto Profile (mappings, locations, functions, string table,
 * samples with labels) and encodes it gzip-compressed. Schema: proto/pprof/profile.proto,
 * written from the public spec. Used by `gpuscope-agent record` and the server's /api/v1/pprof.
 */
#ifndef GPUSCOPE_PPROF_H
#define GPUSCOPE_PPROF_H

#include <stddef.h>
#include <stdint.h>
#include "common/batch.h"

struct pprof;

struct pprof_value_type {
	const char *type, *unit;	/* e.g. {"samples","count"}, {"cpu","nanoseconds"} */
};

struct pprof_num_label {
	const char *key;
	int64_t num;
	const char *unit;		/* may be NULL */
};

/*
 * New empty profile with the given sample types (at most 4), period type and period, and the
 * profile's start time and duration (Unix ns). Returns NULL with errno set; free with
 * pprof__free().
 */
struct pprof *pprof__new(const struct pprof_value_type *types, size_t ntypes,
			 struct pprof_value_type period_type, int64_t period, uint64_t time_ns,
			 uint64_t duration_ns);
void pprof__free(struct pprof *p);

/*
 * Creates the mapping of (module, build_id) now, before any location: pprof tools name a
 * profile after its first mapping (the main binary). 0 or -ENOMEM.
 */
int pprof__main_mapping(struct pprof *p, const char *module, const char *build_id);

/* Location id (>= 1) for a frame, deduplicated; creates its Function and Mapping. 0 on ENOMEM. */
uint64_t pprof__location(struct pprof *p, const struct location *loc);

/*
 * Adds a sample: loc_ids innermost first, one value per sample type, string and numeric labels
 * (copied). 0 or -errno.
 */
int pprof__sample(struct pprof *p, const uint64_t *loc_ids, size_t nlocs, const int64_t *values,
		  const struct label *labels, size_t nlabels, const struct pprof_num_label *nums,
		  size_t nnums);

/* Adds a comment (profile.proto's `comment`: shown by `pprof -comments`), at most 8. 0 or
 * -errno. */
int pprof__comment(struct pprof *p, const char *text);

/* Encodes and gzips. *ret is malloc'ed; the caller frees. 0 or -errno. */
int pprof__encode_gz(struct pprof *p, uint8_t **ret, size_t *ret_len);

#endif
