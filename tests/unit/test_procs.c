/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the process layer (src/agent/procs/): the /proc/PID/maps parser and walk,
 * library discovery, and the .dynsym offsets the CUDA probes attach at, checked against where
 * the dynamic linker put the functions in this very process.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include "test.h"
#include "agent/procs/elf.h"
#include "agent/procs/maps.h"

static bool test_procs_parse_line(void)
{
	char exec[] = "7f0000001000-7f0000003000 r-xp 00002000 fe:01 1234   "
		      "/usr/lib/libx.so (deleted)\n";
	char data[] = "7f0000003000-7f0000004000 rw-p 00000000 00:00 0 \n";
	char bad[] = "not a maps line\n";
	struct maps_line l;

	CHECK(ASSERT_EQ(maps_parse_line(exec, &l), 1, "executable mapping"));
	CHECK(ASSERT_EQ(l.start, 0x7f0000001000ull, "start") &&
	      ASSERT_EQ(l.end, 0x7f0000003000ull, "end") && ASSERT_EQ(l.pgoff, 0x2000, "offset") &&
	      ASSERT_EQ(l.ino, 1234, "inode") && ASSERT_EQ(l.dev, (0xfeull << 32) | 1, "device"));
	CHECK(ASSERT_STREQ(l.path, "/usr/lib/libx.so", "path without ' (deleted)'") &&
	      ASSERT_TRUE(l.deleted && l.exec, "deleted, executable"));
	CHECK(ASSERT_EQ(maps_parse_line(data, &l), 0, "not executable: skipped"));
	CHECK(ASSERT_EQ(maps_parse_line(bad, &l), 0, "malformed: skipped"));
	CHECK(ASSERT_TRUE(maps_lib_named("/a/b/libcuda.so.1", "libcuda.so") &&
			  !maps_lib_named("/a/libcuda.so/libfoo.so", "libcuda.so") &&
			  !maps_lib_named("[vdso]", "libcuda.so"), "file names"));
	return true;
}

struct count {
	int all, exec, stop_at;
};

static int count_one(const struct maps_line *l, void *ctx)
{
	struct count *c = ctx;

	c->all++;
	c->exec += l->exec;
	return c->all == c->stop_at ? 42 : 0;
}

/* Every mapping or only executable ones, the walk's end at the callback's word, a gone pid. */
static bool test_procs_maps_each(void)
{
	struct count all = { 0 }, exec = { 0 }, stop = { .stop_at = 2 };

	CHECK(ASSERT_EQ(maps_each(getpid(), MAPS_ALL, count_one, &all), 0, "whole walk"));
	CHECK(ASSERT_EQ(maps_each(getpid(), 0, count_one, &exec), 0, "executable walk"));
	CHECK(ASSERT_TRUE(exec.all >= 2 && exec.all == exec.exec && all.all > exec.all &&
			  all.exec == exec.all, "executable mappings are a part of all"));
	CHECK(ASSERT_EQ(maps_each(getpid(), 0, count_one, &stop), 42, "stopped by the callback"));
	CHECK(ASSERT_EQ(stop.all, 2, "no call after the stop"));
	CHECK(ASSERT_EQ(maps_each(0x3fffffff, 0, count_one, &all), -ESRCH, "no such process"));
	return true;
}

/*
 * libc found by name, its file opened through the mapping, and the .dynsym file offset of
 * getpid where the loader mapped it: address - mapping start + mapping offset.
 */
static bool test_procs_find_lib_offsets(void)
{
	static const char *const names[] = { "getpid", "gpuscope_no_such_function" };
	uint64_t off[2] = { 0, 0 }, addr = (uintptr_t)dlsym(RTLD_DEFAULT, "getpid");
	struct maps_lib lib;
	int fd, n;
	bool ok;

	CHECK(ASSERT_EQ(maps_find_lib(getpid(), "libc.so", &lib), 1, "this process maps libc"));
	CHECK(ASSERT_EQ(maps_find_lib(getpid(), "libgpuscope_none", &lib), 0,
			"nor a library it does not map"));
	CHECK(ASSERT_EQ(maps_find_lib(getpid(), "libc.so", &lib), 1, "libc again"));
	fd = maps_open_file(getpid(), lib.start, lib.end, lib.path, lib.deleted, NULL);
	CHECK(ASSERT_TRUE(fd >= 0, "libc opened through its mapping"));
	n = elf_dynsym_offsets(fd, names, 2, off);
	close(fd);
	ok = ASSERT_EQ(n, 1, "one of two names found") && ASSERT_EQ(off[1], 0, "absent: 0") &&
	     ASSERT_TRUE(addr >= lib.start && addr < lib.end, "getpid in libc's text mapping");
	if (ok) {	/* read here, not through the layer under test */
		char line[512], perms[8];
		unsigned long long start, end, pgoff;
		FILE *f = fopen("/proc/self/maps", "re");
		uint64_t want = 0;

		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "%llx-%llx %7s %llx", &start, &end, perms, &pgoff) == 4 &&
			    addr >= start && addr < end)
				want = addr - start + pgoff;
		if (f)
			fclose(f);
		ok = ASSERT_EQ(off[0], want, "getpid's file offset, as the loader mapped it");
	}
	return ok;
}

TEST_MAIN(T(test_procs_parse_line), T(test_procs_maps_each), T(test_procs_find_lib_offsets))
