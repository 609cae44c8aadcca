// SPDX-License-Identifier: Apache-2.0
/*
 * The injection library's GOT interposition against a dynamic loader at work (a crash seen on
 * the GPU machine: a Python process importing Rust and C++ extension modules died while our
 * control thread scanned). Loads the real libgpuscope_cupti.so (argv[1]) over the fake
 * libcupti.so.13 it is linked with and calls InitializeInjection; then dlopen()s and dlclose()s
 * argv[2] (tests/cupti/race_lib.c: full RELRO, thousands of bound relocations, dlsym among
 * them) CYCLES times (argv[3]). After each open it waits up to 60 ms for the library to have
 * interposed the object's dlsym slot. Prints "cycles N patched P"; a crash is the failure.
 * With a fourth argument "dlmopen" two threads instead each make a link-map namespace of their
 * own (dlmopen(LM_ID_NEWLM): a libc of its own) and load argv[2] there and close it, CYCLES
 * times each, while the library's control thread polls for new objects: glibc's dl_iterate_phdr walks
 * every other namespace's objects, and one still being loaded there crashed it (a GPT-2
 * process on the H100). Prints "dlmopen cycles N".
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* dlsym's address as this program's GOT holds it (not inlined: read at the call). */
static __attribute__((noinline)) void *main_dlsym(void)
{
	void *volatile p = (void *)dlsym;

	return p;
}

/* Maps path as data, gives the scans 300 ms, and compares the mapping with the file. */
static int data_mapping_intact(const char *path)
{
	int fd = open(path, O_RDONLY);
	off_t len = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
	unsigned char *m, buf[4096];
	int same = 1;

	if (len <= 0)
		return 0;
	m = mmap(NULL, (size_t)len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED)
		return 0;
	mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);	/* the size moves */
	usleep(300000);
	for (off_t off = 0; off < len && same; off += (off_t)sizeof(buf)) {
		ssize_t r = pread(fd, buf, sizeof(buf), off);

		same = r > 0 && !memcmp(m + off, buf, (size_t)r);
	}
	close(fd);
	return same;
}

static const char *mlib;
static int mcycles;

static void *dlmopen_loop(void *arg)
{
	void *base = dlmopen(LM_ID_NEWLM, "libm.so.6", RTLD_NOW | RTLD_LOCAL);
	Lmid_t ns;

	(void)arg;
	if (!base || dlinfo(base, RTLD_DI_LMID, &ns)) {
		fprintf(stderr, "dlopen_race: dlmopen(LM_ID_NEWLM): %s\n", dlerror());
		return (void *)1;
	}
	for (int i = 0; i < mcycles; i++) {
		void *h = dlmopen(ns, mlib, RTLD_NOW | RTLD_LOCAL);

		if (!h) {
			fprintf(stderr, "dlopen_race: dlmopen: %s\n", dlerror());
			return (void *)1;
		}
		dlclose(h);
	}
	return NULL;
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
	if (argc > 4 && !strcmp(argv[4], "dlmopen")) {
		pthread_t th[2];
		void *r0 = NULL, *r1 = NULL;

		mlib = argv[2];
		mcycles = cycles;
		pthread_create(&th[0], NULL, dlmopen_loop, NULL);
		pthread_create(&th[1], NULL, dlmopen_loop, NULL);
		pthread_join(th[0], &r0);
		pthread_join(th[1], &r1);
		printf("dlmopen cycles %d\n", cycles);
		return r0 || r1;
	}
	real = dlsym(RTLD_DEFAULT, "dlsym");	/* ours wraps it; this name goes to the real one */
	for (int i = 0; i < cycles; i++) {
		void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
		void *(*slot)(void);
		double until = mono_s() + 0.5;

		if (!h) {
			fprintf(stderr, "dlopen_race: %s\n", dlerror());
			return 1;
		}
		slot = (void *(*)(void))dlsym(h, "race_dlsym_slot");
		while (slot && slot() == real && mono_s() < until)
			;
		patched += slot && slot() != real;
		dlclose(h);
		/* a page more each cycle: the library polls the process's size for new mappings, and
		 * the same library loaded again at the same place leaves it as it was */
		mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	printf("cycles %d patched %d\n", cycles, patched);
	/* the main program's own dlsym slot (GLOB_DAT: its address taken) is interposed too */
	printf("main interposed %d\n", main_dlsym() != real);
	/* a copy of the library mapped as data (not loaded) is never written: it stays the file */
	printf("data mapping intact %d\n", data_mapping_intact(argv[2]));
	return 0;
}
