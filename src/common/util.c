/* SPDX-License-Identifier: Apache-2.0 */
/* Duration/time parsing, clocks and hashing shared by every binary. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/util.h"

struct unit {
	const char *suffix;
	double mult;
};

/* A non-negative decimal number followed by exactly one of the units' suffixes. */
static int parse_scaled(const char *s, const struct unit *units, size_t n, uint64_t *ret)
{
	char *end;
	double v;

	if (!s || !*s || isspace((unsigned char)*s) || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(end, units[i].suffix))
			continue;
		v *= units[i].mult;
		if (v >= 1.8e19)
			return -EINVAL;
		*ret = (uint64_t)(v + 0.5);
		return 0;
	}
	return -EINVAL;
}

int parse_duration_ns(const char *s, uint64_t *ret_ns)
{
	static const struct unit units[] = {
		{ "ns", 1 }, { "us", 1e3 }, { "µs", 1e3 }, { "ms", 1e6 }, { "s", 1e9 },
		{ "m", 60e9 }, { "h", 3600e9 }, { "d", 86400e9 }, { "", 1e9 },
	};

	return parse_scaled(s, units, ARRAY_SIZE(units), ret_ns);
}

int parse_share(const char *s, double *ret)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -EINVAL;
	if (*end == '%') {
		v /= 100;
		end++;
	}
	if (*end || v > 1)
		return -EINVAL;
	*ret = v;
	return 0;
}

int parse_size_bytes(const char *s, uint64_t *ret)
{
	static const struct unit units[] = {
		{ "", 1 },	    { "B", 1 },		  { "K", 1024.0 },	 { "KiB", 1024.0 },
		{ "KB", 1e3 },	    { "M", 1048576.0 },	  { "MiB", 1048576.0 },	 { "MB", 1e6 },
		{ "G", 1073741824.0 }, { "GiB", 1073741824.0 }, { "GB", 1e9 },
		{ "T", 1099511627776.0 }, { "TiB", 1099511627776.0 }, { "TB", 1e12 },
	};

	return parse_scaled(s, units, ARRAY_SIZE(units), ret);
}

static int parse_digits(const char **p, int n, int *ret)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return -EINVAL;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*ret = v;
	return 0;
}

int parse_time_ns(const char *s, uint64_t *ret_ns)
{
	struct tm tm = { 0 };
	int y, mo, d, h, mi, sec, oh = 0, om = 0, sign = 0;
	uint64_t frac_ns = 0, scale = 100000000;
	const char *p = s;
	char *end;
	time_t t;

	if (!s || !*s)
		return -EINVAL;
	if (!strchr(s, '-') || s[0] == '-') {
		/* Unix seconds, possibly fractional. */
		double v;

		errno = 0;
		v = strtod(s, &end);
		if (errno || *end || end == s || v < 0 || !isfinite(v) || v > 1e11)
			return -EINVAL;
		*ret_ns = (uint64_t)(v * 1e9 + 0.5);
		return 0;
	}
	if (parse_digits(&p, 4, &y) || *p++ != '-' || parse_digits(&p, 2, &mo) || *p++ != '-' ||
	    parse_digits(&p, 2, &d) || (*p != 'T' && *p != 't' && *p != ' '))
		return -EINVAL;
	p++;
	if (parse_digits(&p, 2, &h) || *p++ != ':' || parse_digits(&p, 2, &mi) || *p++ != ':' ||
	    parse_digits(&p, 2, &sec))
		return -EINVAL;
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		for (; isdigit((unsigned char)*p); p++) {
			frac_ns += (uint64_t)(*p - '0') * scale;
			scale /= 10;
		}
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		sign = *p++ == '-' ? -1 : 1;
		if (parse_digits(&p, 2, &oh) || *p++ != ':' || parse_digits(&p, 2, &om))
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	if (*p || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || y < 1970)
		return -EINVAL;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -EINVAL;
	t -= sign * (oh * 3600 + om * 60);
	if (t < 0)
		return -EINVAL;
	*ret_ns = (uint64_t)t * NSEC_PER_SEC + frac_ns;
	return 0;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

uint64_t mono_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

uint64_t wall_ns(void)
{
	return clock_ns(CLOCK_REALTIME);
}

int64_t mono_to_wall_offset_ns(void)
{
	uint64_t best_gap = UINT64_MAX;
	int64_t best = 0;

	for (int i = 0; i < 16; i++) {
		uint64_t m0 = mono_ns(), w = wall_ns(), m1 = mono_ns();

		if (m1 - m0 < best_gap) {
			best_gap = m1 - m0;
			best = (int64_t)w - (int64_t)(m0 + (m1 - m0) / 2);
		}
	}
	return best;
}

uint64_t hash64(const void *data, size_t len, uint64_t seed)
{
	const unsigned char *p = data;
	uint64_t h = 0xcbf29ce484222325ULL ^ seed ^ (len * 0x9e3779b97f4a7c15ULL);
	uint64_t w;

	/* Word at a time (stacks are arrays of u64), then the tail bytes; a final avalanche. */
	for (; len >= 8; p += 8, len -= 8) {
		memcpy(&w, p, 8);
		h = (h ^ w) * 0x100000001b3ULL;
		h ^= h >> 29;
	}
	for (; len; p++, len--)
		h = (h ^ *p) * 0x100000001b3ULL;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

char *fmt_duration(uint64_t ns, char *buf, size_t len)
{
	if (ns >= NSEC_PER_SEC)
		snprintf(buf, len, "%.3fs", ns / 1e9);
	else if (ns >= NSEC_PER_MSEC)
		snprintf(buf, len, "%.1fms", ns / 1e6);
	else
		snprintf(buf, len, "%.0fus", ns / 1e3);
	return buf;
}

uint64_t backoff_ns(uint64_t base_ns, uint64_t max_ns, unsigned attempt, unsigned *seed)
{
	uint64_t d = base_ns;

	for (unsigned i = 1; i < attempt && d < max_ns; i++)
		d *= 2;
	if (d > max_ns)
		d = max_ns;
	if (seed)
		d = d / 2 + (uint64_t)((double)(d / 2) * (rand_r(seed) / (RAND_MAX + 1.0)));
	return d;
}

int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int array_reserve(void *p, size_t *cap, size_t need, size_t elem, size_t first)
{
	void **arr = p, *n;
	size_t ncap = *cap ? *cap : first ? first : 1;

	if (need <= *cap)
		return 0;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return -ENOMEM;
		ncap *= 2;
	}
	if (!elem || ncap > SIZE_MAX / elem || !(n = realloc(*arr, ncap * elem)))
		return -ENOMEM;
	*arr = n;
	*cap = ncap;
	return 0;
}
