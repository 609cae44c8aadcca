// SPDX-License-Identifier: Apache-2.0
/*
 * For tests/cupti/dlopen_race.c: a library (full RELRO) whose load-time relocation pauses
 * after its dlsym slot is bound and before the loader is done with the page it shares with
 * another slot: glibc runs IRELATIVE relocations (here race_slow's, an IFUNC whose resolver
 * sleeps 40 ms, or RACE_SLEEP_MS) after the others, and protects RELRO only after that. A GOT interposer that
 * scans the object during the pause and makes the page read-only crashes the loader.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static int slow_impl(int x)
{
	return x + 1;
}

static void *resolve_slow(void)
{
	/* RACE_SLEEP_MS: a pause longer than the scans' pacing gap puts a scan inside every one */
	const char *ms = getenv("RACE_SLEEP_MS");
	long v = ms ? atol(ms) : 40;
	struct timespec ts = { v / 1000, (v % 1000) * 1000 * 1000 };

	nanosleep(&ts, NULL);
	return (void *)slow_impl;
}

static int race_slow(int x) __attribute__((ifunc("resolve_slow")));

__attribute__((visibility("default"))) void *race_dlsym_slot(void)
{
	return (void *)&dlsym;
}

__attribute__((visibility("default"))) void *race_slow_addr(void)
{
	return (void *)&race_slow;
}
