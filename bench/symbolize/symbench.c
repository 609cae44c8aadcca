/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Symbolizer micro-benchmark: resolves N random addresses inside the executable mappings of one
 * library of this process (libc, or a big one dlopen()ed), cold (fresh symbolizer: maps read,
 * ELF parse, first demangling) and warm (same addresses again), and prints CPU ns/address
 * (thread CPU time, so that other jobs on a shared machine do not count).
 * Usage: symbench LIBRARY [N]   (LIBRARY: path or soname substring as /proc/self/maps shows it)
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "agent/sym/symbolize.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);	/* CPU time: the machine is shared */
	return (uint64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long rss_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

int main(int argc, char **argv)
{
	uint64_t ranges[64][2], total = 0, x = 88172645463325252ULL, *addrs, t0, t1, t2, t3;
	size_t n = argc > 2 ? strtoull(argv[2], NULL, 0) : 1000000, nr = 0, resolved = 0;
	struct symbolizer_stats st;
	struct symbolizer *s;
	struct sym_frame f;
	pid_t pid = getpid();
	char line[4096];
	FILE *m;

	if (argc < 2) {
		fprintf(stderr, "usage: %s LIBRARY [N]\n", argv[0]);
		return 2;
	}
	if (argv[1][0] == '/' && !dlopen(argv[1], RTLD_NOW | RTLD_LOCAL)) {
		fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
		return 1;
	}
	m = fopen("/proc/self/maps", "r");
	while (m && fgets(line, sizeof(line), m) && nr < 64) {
		uint64_t a, b;
		char perms[8];

		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s", &a, &b, perms) == 3 && perms[2] == 'x' &&
		    strstr(line, argv[1])) {
			ranges[nr][0] = a;
			ranges[nr++][1] = b;
			total += b - a;
		}
	}
	if (m)
		fclose(m);
	if (!nr) {
		fprintf(stderr, "no executable mapping matches '%s'\n", argv[1]);
		return 1;
	}
	addrs = malloc(n * sizeof(*addrs));
	if (!addrs)
		return 1;
	for (size_t i = 0; i < n; i++) {	/* xorshift64: uniform over the text */
		uint64_t off;
		size_t r = 0;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		off = x % total;
		while (off >= ranges[r][1] - ranges[r][0]) {
			off -= ranges[r][1] - ranges[r][0];
			r++;
		}
		addrs[i] = ranges[r][0] + off;
	}
	s = symbolizer__new();
	if (!s)
		return 1;
	t0 = now_ns();
	symbolizer__user(s, pid, addrs[0], &f);
	t1 = now_ns();
	for (size_t i = 1; i < n; i++)
		resolved += !symbolizer__user(s, pid, addrs[i], &f);
	t2 = now_ns();
	for (size_t i = 0; i < n; i++)
		symbolizer__user(s, pid, addrs[i], &f);
	t3 = now_ns();
	symbolizer__stats(s, &st);
	printf("%s: %zu addresses over %.1f MB of text; first address %.2f ms (maps + ELF parse); "
	       "cold %.0f ns/address; warm %.0f ns/address; resolved %.1f%%; cache %.1f MB; "
	       "RSS %ld MB\n",
	       argv[1], n, total / 1e6, (t1 - t0) / 1e6, (double)(t2 - t0) / n,
	       (double)(t3 - t2) / n, 100.0 * resolved / (n - 1),
	       symbolizer__cache_bytes(s) / 1e6, rss_kb() / 1024);
	symbolizer__free(s);
	free(addrs);
	return 0;
}
