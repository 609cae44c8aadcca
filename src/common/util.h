/* SPDX-License-Identifier: Apache-2.0 */
/* Small shared helpers: duration and time parsing, clocks, hashing. */
#ifndef GPUSCOPE_UTIL_H
#define GPUSCOPE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
/* The version of every gpuscope binary (the _info metrics, --version). */
#define GPUSCOPE_VERSION "0.1.0"

#define NSEC_PER_SEC  1000000000ULL
#define NSEC_PER_MSEC 1000000ULL

/*
 * Parse a duration: "500ms", "5s", "10m", "1h", "2d", "250us", "100ns", or a bare number of
 * seconds ("1.5"). Returns 0 and sets *ret_ns, or -EINVAL for anything else (negative, empty,
 * trailing junk, overflow).
 */
int parse_duration_ns(const char *s, uint64_t *ret_ns);

/* A share: "1%", "0.5%", "100%" or a plain fraction "0.01", in [0, 1]. 0 or -EINVAL. */
int parse_share(const char *s, double *ret);

/*
 * Parse a size in bytes: "4096", "64KiB", "512MiB", "1G" (K, M, G, T and KiB.. are powers of
 * 1024; KB, MB, GB, TB powers of 1000; fractions allowed). 0 and sets *ret, or -EINVAL.
 */
int parse_size_bytes(const char *s, uint64_t *ret);

/*
 * Parse a point in time: RFC 3339 ("2026-12-02T10:02:00Z", "...+01:00", fractional seconds)
 * or Unix seconds ("1764669720", "1764669720.5"). Returns 0 and sets *ret_ns (Unix ns),
 * or -EINVAL.
 */
int parse_time_ns(const char *s, uint64_t *ret_ns);

/*
 * Room for at least need elements of elem bytes in the array *p of capacity *cap: the
 * capacity doubles (from first, or from need where that is more). 0, or -ENOMEM with *p and
 * *cap unchanged. The one owner of "grow an array by doubling".
 */
int array_reserve(void *p, size_t *cap, size_t need, size_t elem, size_t first);

/* CLOCK_MONOTONIC (the clock of bpf_ktime_get_ns()) and CLOCK_REALTIME, in ns. */
uint64_t mono_ns(void);
uint64_t wall_ns(void);

/*
 * Offset that turns a CLOCK_MONOTONIC time into Unix ns: wall = mono + offset. Measured as the
 * tightest of a few bracketing reads, so its error is well under a microsecond.
 */
int64_t mono_to_wall_offset_ns(void);

/* qsort() order of uint64_t values, ascending. */
int cmp_u64(const void *a, const void *b);

/* 64-bit FNV-1a, for dedup keys; not for security. */
uint64_t hash64(const void *data, size_t len, uint64_t seed);

/*
 * The one exponential backoff: the delay before retry number `attempt` (1 for the first retry)
 * is base_ns doubled per attempt, capped at max_ns; with seed non-NULL, "equal jitter" (half
 * fixed, half random from rand_r(seed)) so that many clients do not retry in step.
 */
uint64_t backoff_ns(uint64_t base_ns, uint64_t max_ns, unsigned attempt, unsigned *seed);

/* Format ns as "1.234s"/"12.3ms"/"45us" into buf; returns buf. */
char *fmt_duration(uint64_t ns, char *buf, size_t len);

#endif
