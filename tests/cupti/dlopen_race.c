// SPDX-License-Identifier: Apache-2.0
/*
 * The injection library's GOT interposition against a dynamic loader at work (a crash seen on
 * the GPU machine: a Python process importing Rust and C++ extension modules died while our
 * control thread scanned). Loads the real libgpuscope_cupti.so (argv[1]) over the fake
 * libcupti.so.13 it is linked with and calls InitializeInjection; then dlopen()s and dlclose()s
 * argv[2] (tests/cupti/race_lib.c: full RELRO, thousands of bound relocations, dlsym among
 * them) CYCLES times (argv[3]). After each open it waits up to 60 ms for the library to have
 * interposed the object's dlsym slot. Prints "cycles N patched P"; a crash is the failure.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	int (*init)(void);
	void *lib, *real;
	int cycles, patched = 0;

	if (argc < 4) {
		fprintf(stderr, "usage: dlopen_race LIBGPUSCOPE_CUPTI RACE_LIB CYCLES\n");
		return 2;
	}
	cycles = atoi(argv[3]);
	lib = dlopen(argv[1], RTLD_NOW);
	init = lib ? (int (*)(void))dlsym(lib, "InitializeInjection") : NULL;
	if (!init) {
		fprintf(stderr, "dlopen_race: %s\n", dlerror());
		return 1;
	}
	init();
	real = dlsym(RTLD_DEFAULT, "dlsym");	/* ours wraps it; this name goes to the real one */
	for (int i = 0; i < cycles; i++) {
		void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
		void *(*slot)(void);
		double until = mono_s() + 0.06;

		if (!h) {
			fprintf(stderr, "dlopen_race: %s\n", dlerror());
			return 1;
		}
		slot = (void *(*)(void))dlsym(h, "race_dlsym_slot");
		while (slot && slot() == real && mono_s() < until)
			;
		patched += slot && slot() != real;
		dlclose(h);
	}
	printf("cycles %d patched %d\n", cycles, patched);
	return 0;
}
