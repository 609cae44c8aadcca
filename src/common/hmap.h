/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two small open-addressing hash tables used for deduplication: u64 key -> u64 value, and a
 * string interner (string -> dense index, strings owned by the table).
 */
#ifndef GPUSCOPE_HMAP_H
#define GPUSCOPE_HMAP_H

#include <stddef.h>
#include <stdint.h>

struct u64map {
	uint64_t *keys;		/* key 0 is stored out of line (has_zero) */
	uint64_t *vals;
	size_t cap, len;	/* cap is a power of two */
	int has_zero;
	uint64_t zero_val;
};

/* Zero-initialized struct u64map is a valid empty map. */
void u64map_done(struct u64map *m);
/* Returns a pointer to the value slot of key, inserting it with *val = dflt; NULL on ENOMEM. */
uint64_t *u64map_upsert(struct u64map *m, uint64_t key, uint64_t dflt, int *ret_inserted);
/* Returns the value slot or NULL if absent. */
uint64_t *u64map_find(const struct u64map *m, uint64_t key);
/* Removes key (backward-shift deletion: no tombstones); whether it was there. Value slots
 * returned before may move. */
int u64map_remove(struct u64map *m, uint64_t key);

struct strtab {
	char **strs;		/* index -> string (owned) */
	size_t len, cap;
	struct u64map index;	/* hash -> index+1 chain head; collisions resolved by linear probe on hash+i */
};

/* Zero-initialized is empty. Returns the dense index of s (adding a copy), or -ENOMEM. */
int64_t strtab_intern(struct strtab *t, const char *s);
void strtab_done(struct strtab *t);

#endif
