/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the symbolizer against real processes: fixture binaries (PIE + shared library
 * + C++, a stripped copy with .dynsym only, a deleted copy) report their function addresses
 * through a pipe, and the test resolves them; plus a perf map and /proc/kallsyms.
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "test.h"
#include <elf.h>
#include <libelf.h>
#include "agent/sym/symbolize.h"
#include "agent/procs/elf.h"
#include "agent/procs/symtab.h"

#define MAX_ADDRS 16

struct child {
	pid_t pid;
	int in_fd;			/* child's stdin: closing it lets the child exit */
	char path[PATH_MAX];		/* the binary, canonical */
	struct {
		char name[64];
		uint64_t addr;
	} a[MAX_ADDRS];
	int n;
	FILE *out;			/* the child's stdout */
};

static char fixdir[PATH_MAX + 32];

static const char *fixture(const char *name)
{
	static char buf[PATH_MAX + 128];

	if (!fixdir[0]) {
		char exe[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

		exe[n > 0 ? n : 0] = 0;
		*strrchr(exe, '/') = 0;	/* .output/tests/unit */
		*strrchr(exe, '/') = 0;	/* .output/tests */
		snprintf(fixdir, sizeof(fixdir), "%s/fixtures/symbolize", exe);
	}
	snprintf(buf, sizeof(buf), "%s/%s", fixdir, name);
	return buf;
}

static uint64_t addr_of(const struct child *c, const char *name)
{
	for (int i = 0; i < c->n; i++)
		if (!strcmp(c->a[i].name, name))
			return c->a[i].addr;
	fprintf(stderr, "  fixture did not report '%s'\n", name);
	return 0;
}

/* Reads "name hexaddr" lines until "ready". */
static bool child_read(struct child *c, FILE *f)
{
	char line[256];

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long v;
		char name[64];

		if (!strncmp(line, "ready", 5))
			return true;
		if (sscanf(line, "%63s %llx", name, &v) == 2 && c->n < MAX_ADDRS) {
			snprintf(c->a[c->n].name, sizeof(c->a[c->n].name), "%s", name);
			c->a[c->n++].addr = v;
		}
	}
	return false;
}

/* Copies the file src to dst (mode 0755). 0 or -1. */
static int copy_file(const char *src, const char *dst)
{
	char buf[65536];
	int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0755), rc = -1;
	ssize_t n;

	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) >= 0) {
		if (!n) {
			rc = 0;
			break;
		}
		if (write(out, buf, n) != n)
			break;
	}
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out))
		rc = -1;
	return rc;
}

/*
 * Starts the fixture at path and reads its address report. With root, the fixture runs like
 * in a container: new mount and pid namespaces (it is pid 1), a tmpfs mounted on root that only
 * its namespace sees, the binary copied there as exec_path, pivot_root; the host pid is reported
 * as "hostpid". false on failure.
 */
static bool child_start_in(struct child *c, const char *path, const char *root,
			   const char *exec_path)
{
	int in[2], out[2];
	bool ok;

	memset(c, 0, sizeof(*c));
	if (!realpath(path, c->path) || pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		return false;
	c->pid = fork();
	if (c->pid < 0)
		return false;
	if (!c->pid) {
		close(in[1]);
		close(out[0]);
		dup2(in[0], 0);
		dup2(out[1], 1);
		if (root) {
			static char *const env[] = { "SYMFIX_PERFMAP=1", NULL };
			char dst[PATH_MAX + 64], go;
			int sync[2];
			pid_t inner;

			if (unshare(CLONE_NEWPID | CLONE_NEWNS) ||
			    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
			    mount("tmpfs", root, "tmpfs", 0, "size=16m") ||
			    mkdir(strcat(strcpy(dst, root), "/tmp"), 0777) ||
			    mkdir(strcat(strcpy(dst, root), "/bin"), 0755) ||
			    copy_file(c->path, strcat(strcpy(dst, root), exec_path)))
				_exit(126);
			if (pipe(sync))
				_exit(126);
			inner = fork();
			if (inner > 0) {
				/* hostpid first: the fixture waits for this byte before it starts */
				printf("hostpid %x\n", inner);
				fflush(stdout);
				if (write(sync[1], "g", 1) != 1)
					_exit(126);
				close(0);
				waitpid(inner, NULL, 0);
				_exit(0);
			}
			/* pivot_root, not chroot: /proc/PID/maps then shows container paths. */
			if (inner < 0 || read(sync[0], &go, 1) != 1 ||
			    mkdir(strcat(strcpy(dst, root), "/old"), 0700) ||
			    syscall(SYS_pivot_root, root, dst) || chdir("/") ||
			    umount2("/old", MNT_DETACH))
				_exit(126);
			execle(exec_path, exec_path, (char *)NULL, env);
			_exit(127);
		}
		execl(c->path, c->path, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	c->in_fd = in[1];
	c->out = fdopen(out[0], "r");
	ok = child_read(c, c->out);
	if (!ok)
		fprintf(stderr, "  fixture '%s' did not report\n", c->path);
	return ok;
}

static bool child_start(struct child *c, const char *path)
{
	return child_start_in(c, path, NULL, NULL);
}

static void child_stop(struct child *c)
{
	if (c->pid <= 0)
		return;
	close(c->in_fd);
	waitpid(c->pid, NULL, 0);
	if (c->out)
		fclose(c->out);
	c->pid = 0;
}

/* The GNU build-id as binutils' readelf prints it: an independent reading. */
static void readelf_build_id(const char *path, char *out, size_t len)
{
	char cmd[PATH_MAX + 64], line[512];
	FILE *p;

	out[0] = 0;
	snprintf(cmd, sizeof(cmd), "readelf -n '%s' 2>/dev/null", path);
	p = popen(cmd, "r");
	while (p && fgets(line, sizeof(line), p)) {
		char *b = strstr(line, "Build ID: ");

		if (b) {
			snprintf(out, len, "%s", b + 10);
			out[strcspn(out, "\n")] = 0;
		}
	}
	if (p)
		pclose(p);
}

static bool check_sym(struct symbolizer *s, pid_t pid, uint64_t addr, const char *func,
		      uint64_t off, const char *module, const char *build_id)
{
	struct sym_frame f;

	CHECK(ASSERT_EQ(symbolizer__user(s, pid, addr, &f), 0, func));
	CHECK(ASSERT_STREQ(f.function, func, "function"));
	CHECK(ASSERT_EQ(f.sym_offset, off, "sym_offset"));
	if (module)
		CHECK(ASSERT_STREQ(f.module, module, "module"));
	if (build_id)
		CHECK(ASSERT_STREQ(f.build_id, build_id, "build_id"));
	CHECK(ASSERT_TRUE(f.map_start <= addr && addr < f.map_limit, "addr in mapping"));
	CHECK(ASSERT_EQ(f.file_offset, addr - f.map_start + f.map_pgoff, "file_offset"));
	CHECK(ASSERT_TRUE(!f.kernel, "user frame"));
	return true;
}

static bool test_symbolize_pie_shlib_cxx(void)
{
	struct symbolizer *s = symbolizer__new();
	char bid[160], lib[PATH_MAX], lib_bid[160];
	struct symbolizer_stats st;
	struct child c;
	bool ok = false;

	CHECK(ASSERT_TRUE(s, "new"));
	if (!ASSERT_TRUE(child_start(&c, fixture("symfix_pie")), "start fixture"))
		goto out;
	readelf_build_id(c.path, bid, sizeof(bid));
	snprintf(lib, sizeof(lib), "%s", c.path);
	strcpy(strrchr(lib, '/') + 1, "libsymfix.so");
	readelf_build_id(lib, lib_bid, sizeof(lib_bid));
	if (!ASSERT_TRUE(strlen(bid) == 40 && strlen(lib_bid) == 40, "readelf build-ids"))
		goto out;
	if (!ASSERT_EQ(symbolizer__pid_seen(s, c.pid), 0, "pid_seen"))
		goto out;
	ok = check_sym(s, c.pid, addr_of(&c, "symfix_alpha"), "symfix_alpha", 5, c.path, bid) &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_beta"), "symfix_beta", 3, c.path, bid) &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_local"), "symfix_local", 2, c.path, bid) &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_lib_func"), "symfix_lib_func", 4, lib, lib_bid) &&
	     check_sym(s, c.pid, addr_of(&c, "cxx"), "fixture::Widget::compute(int, char const*)", 1,
		       c.path, bid);
	symbolizer__stats(s, &st);
	ok = ok && ASSERT_EQ(st.resolved, 5, "resolved") && ASSERT_EQ(st.unknown, 0, "unknown") &&
	     ASSERT_EQ(st.maps_reads, 1, "maps read once");
out:
	child_stop(&c);
	symbolizer__free(s);
	return ok;
}

/* A position-dependent executable (ET_EXEC, 64 KiB segment alignment): addresses are vaddrs. */
static bool test_symbolize_nopie(void)
{
	struct symbolizer *s = symbolizer__new();
	char bid[160];
	struct child c;
	bool ok = false;

	CHECK(ASSERT_TRUE(s, "new"));
	if (!ASSERT_TRUE(child_start(&c, fixture("symfix_nopie")), "start fixture"))
		goto out;
	readelf_build_id(c.path, bid, sizeof(bid));
	ok = ASSERT_TRUE(addr_of(&c, "symfix_alpha") < 0x10000000, "linked low, not PIE") &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_alpha"), "symfix_alpha", 5, c.path, bid) &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_local"), "symfix_local", 2, c.path, bid) &&
	     check_sym(s, c.pid, addr_of(&c, "cxx"), "fixture::Widget::compute(int, char const*)", 1,
		       c.path, bid) &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_lib_func"), "symfix_lib_func", 4, NULL, NULL);
out:
	child_stop(&c);
	symbolizer__free(s);
	return ok;
}

static bool test_symbolize_stripped_dynsym(void)
{
	struct symbolizer *s = symbolizer__new();
	char bid[160], cmd[PATH_MAX + 64];
	struct sym_frame f;
	struct child c;
	bool ok = false;

	CHECK(ASSERT_TRUE(s, "new"));
	if (!ASSERT_TRUE(child_start(&c, fixture("symfix_stripped")), "start fixture"))
		goto out;
	snprintf(cmd, sizeof(cmd), "readelf -S '%s' | grep -q '\\.symtab'", c.path);
	if (!ASSERT_TRUE(system(cmd) != 0, "fixture has no .symtab"))
		goto out;
	readelf_build_id(c.path, bid, sizeof(bid));
	ok = check_sym(s, c.pid, addr_of(&c, "symfix_alpha"), "symfix_alpha", 5, c.path, bid) &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_beta"), "symfix_beta", 3, c.path, bid);
	/* A static function is not in .dynsym: named after where its FDE starts (unnamed), the
	 * same name for every address inside it, with its mapping. */
	if (ok) {
		uint64_t a = addr_of(&c, "symfix_local");
		char want[128];
		const char *name;

		ok = ASSERT_EQ(symbolizer__user(s, c.pid, a, &f), 0, "local") &&
		     ASSERT_TRUE(f.function && f.unnamed, "unnamed function") &&
		     ASSERT_EQ(f.sym_offset, 2, "2 bytes in (the fixture reports that)") &&
		     ASSERT_STREQ(f.module, c.path, "module") &&
		     ASSERT_STREQ(f.build_id, bid, "build_id") &&
		     ASSERT_TRUE(f.map_limit > f.map_start, "map");
		if (ok) {
			/* text's file offsets are its ELF addresses in this PIE */
			snprintf(want, sizeof(want), "symfix_stripped+0x%" PRIx64, f.file_offset - 2);
			ok = ASSERT_STREQ(f.function, want, "module+0xSTART");
		}
		name = f.function;
		ok = ok && ASSERT_EQ(symbolizer__user(s, c.pid, a + 3, &f), 0, "inside") &&
		     ASSERT_TRUE(f.function == name, "same name") && ASSERT_EQ(f.sym_offset, 5, "offset");
		/* a global next to it keeps its own name */
		ok = ok && check_sym(s, c.pid, addr_of(&c, "symfix_alpha"), "symfix_alpha", 5, c.path,
				     bid);
	}
out:
	child_stop(&c);
	symbolizer__free(s);
	return ok;
}

/* No .symtab, no .dynsym entry: the separate debug file found by build-id has the symbols. */
static bool test_symbolize_debug_file(void)
{
	struct symbolizer *s = symbolizer__new();
	char bid[160], dir[PATH_MAX + 128];
	struct sym_frame f;
	struct child c;
	bool ok = false;

	CHECK(ASSERT_TRUE(s, "new"));
	snprintf(dir, sizeof(dir), "%s", fixture("debug"));
	if (!ASSERT_TRUE(child_start(&c, fixture("symfix_nodebug")), "start fixture"))
		goto out;
	readelf_build_id(c.path, bid, sizeof(bid));
	ok = ASSERT_EQ(symbolizer__set_debug_dir(s, NULL), 0, "no debug dir") &&
	     ASSERT_EQ(symbolizer__user(s, c.pid, addr_of(&c, "symfix_alpha"), &f), 0,
		       "without the debug file") &&
	     ASSERT_TRUE(f.unnamed && !strncmp(f.function, "symfix_nodebug+0x", 17),
			 "unnamed, after its CFI") &&
	     ASSERT_STREQ(f.module, c.path, "module") && ASSERT_STREQ(f.build_id, bid, "build_id");
	symbolizer__free(s);
	s = symbolizer__new();
	ok = ok && ASSERT_TRUE(s, "new") &&
	     ASSERT_EQ(symbolizer__set_debug_dir(s, dir), 0, "debug dir") &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_alpha"), "symfix_alpha", 5, c.path, bid) &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_local"), "symfix_local", 2, c.path, bid);
out:
	child_stop(&c);
	symbolizer__free(s);
	return ok;
}

/* The metrics lines carry the counters. */
static bool test_symbolize_metrics(void)
{
	struct symbolizer_limits slow = { .reread_interval_ns = 3600ULL * 1000000000 };
	struct symbolizer *s = symbolizer__new();
	char *buf = NULL;
	size_t len = 0;
	struct sym_frame f;
	bool ok;
	FILE *m;

	CHECK(ASSERT_TRUE(s, "new"));
	symbolizer__set_limits(s, &slow);	/* 0x10 is in no mapping: one re-read, then the budget */
	symbolizer__user(s, getpid(), 0x10, &f);
	m = open_memstream(&buf, &len);
	symbolizer__metrics(s, m);
	fclose(m);
	ok = ASSERT_TRUE(strstr(buf, "gpuscope_agent_symbolizer_frames_total{result=\"unknown\"} 1\n"),
			 "unknown frames") &&
	     ASSERT_TRUE(strstr(buf, "gpuscope_agent_symbolizer_maps_reads_total 2\n"), "maps reads") &&
	     ASSERT_TRUE(strstr(buf, "gpuscope_agent_symbolizer_pids 1\n"), "pids");
	free(buf);
	symbolizer__free(s);
	return ok;
}

static bool test_symbolize_perfmap(void)
{
	struct symbolizer *s = symbolizer__new();
	struct symbolizer_stats st;
	char path[64];
	struct sym_frame f;
	struct child c;
	uint64_t anon;
	bool ok = false;
	FILE *pm;

	CHECK(ASSERT_TRUE(s, "new"));
	if (!ASSERT_TRUE(child_start(&c, fixture("symfix_pie")), "start fixture"))
		goto out;
	anon = addr_of(&c, "anon");
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", c.pid);
	pm = fopen(path, "w");
	if (!ASSERT_TRUE(pm, "write perf map"))
		goto out;
	/* Python 3.12 -X perf style lines; the second entry of one address wins. */
	fprintf(pm, "%llx 40 py::old:/x.py\n", (unsigned long long)anon);
	fprintf(pm, "%llx 40 py::handle_request:/srv/app.py\n", (unsigned long long)anon);
	fprintf(pm, "%llx 100 jit_compiled_loop\n", (unsigned long long)anon + 0x40);
	fclose(pm);
	ok = ASSERT_EQ(symbolizer__user(s, c.pid, anon + 0x10, &f), 0, "first") &&
	     ASSERT_STREQ(f.function, "py::handle_request:/srv/app.py", "function") &&
	     ASSERT_STREQ(f.module, "[perf-map]", "module") && ASSERT_EQ(f.sym_offset, 0x10, "off") &&
	     ASSERT_EQ(symbolizer__user(s, c.pid, anon + 0x41, &f), 0, "second") &&
	     ASSERT_STREQ(f.function, "jit_compiled_loop", "function") &&
	     ASSERT_EQ(f.sym_offset, 1, "off") &&
	     /* Past every entry: the anonymous mapping, unresolved and counted. */
	     ASSERT_EQ(symbolizer__user(s, c.pid, anon + 0x200, &f), -ENOENT, "miss") &&
	     ASSERT_STREQ(f.module, "[anon]", "anon module") && ASSERT_TRUE(!f.function, "no func");
	symbolizer__stats(s, &st);
	ok = ok && ASSERT_EQ(st.perfmap_reads, 1, "perf map read once") &&
	     ASSERT_EQ(st.unknown, 1, "unknown counted");
	unlink(path);
out:
	child_stop(&c);
	symbolizer__free(s);
	return ok;
}

static bool test_symbolize_deleted(void)
{
	struct symbolizer *s = symbolizer__new();
	char dir[] = "/tmp/symfix.XXXXXX", exe[PATH_MAX], lib[PATH_MAX], cmd[3 * PATH_MAX], bid[160];
	struct child c = { 0 };
	bool ok = false;

	CHECK(ASSERT_TRUE(s, "new"));
	if (!ASSERT_TRUE(mkdtemp(dir), "mkdtemp"))
		goto out;
	snprintf(exe, sizeof(exe), "%s/symfix_pie", dir);
	snprintf(lib, sizeof(lib), "%s/libsymfix.so", dir);
	/* fixture() returns a static buffer: one call per statement. */
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", fixture("symfix_pie"), exe);
	if (!ASSERT_EQ(system(cmd), 0, "copy fixture"))
		goto out_rm;
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", fixture("libsymfix.so"), lib);
	if (!ASSERT_EQ(system(cmd), 0, "copy fixture"))
		goto out_rm;
	readelf_build_id(exe, bid, sizeof(bid));
	if (!ASSERT_TRUE(child_start(&c, exe), "start copy"))
		goto out_rm;
	unlink(exe);
	unlink(lib);
	rmdir(dir);
	/* The files exist only as the process's mappings now. */
	ok = ASSERT_EQ(symbolizer__pid_seen(s, c.pid), 0, "pid_seen") &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_alpha"), "symfix_alpha", 5, exe, bid) &&
	     check_sym(s, c.pid, addr_of(&c, "symfix_lib_func"), "symfix_lib_func", 4, lib, NULL);
out_rm:
	unlink(exe);
	unlink(lib);
	rmdir(dir);
out:
	child_stop(&c);
	symbolizer__free(s);
	return ok;
}

/* Two processes of one binary: parsed once; a 1-byte cache cap evicts and reloads. */
static bool test_symbolize_cache(void)
{
	struct symbolizer *s = symbolizer__new();
	struct symbolizer_limits lim = { .elf_cache_bytes = 1, .reread_interval_ns = 0 };
	struct symbolizer_stats a, b;
	struct child c1 = { 0 }, c2 = { 0 };
	bool ok = false;

	CHECK(ASSERT_TRUE(s, "new"));
	if (!ASSERT_TRUE(child_start(&c1, fixture("symfix_pie")) &&
			 child_start(&c2, fixture("symfix_pie")), "start fixtures"))
		goto out;
	ok = check_sym(s, c1.pid, addr_of(&c1, "symfix_alpha"), "symfix_alpha", 5, c1.path, NULL) &&
	     check_sym(s, c1.pid, addr_of(&c1, "symfix_lib_func"), "symfix_lib_func", 4,
		       fixture("libsymfix.so"), NULL);
	symbolizer__stats(s, &a);
	ok = ok && check_sym(s, c2.pid, addr_of(&c2, "symfix_beta"), "symfix_beta", 3, c2.path, NULL);
	symbolizer__stats(s, &b);
	ok = ok && ASSERT_EQ(b.elf_opened, a.elf_opened, "second process: no new parse") &&
	     ASSERT_TRUE(b.elf_cache_hits > a.elf_cache_hits, "cache hits");
	/* Evict everything but the most recent table, then resolve from the evicted one. */
	symbolizer__set_limits(s, &lim);
	ok = ok && check_sym(s, c1.pid, addr_of(&c1, "symfix_lib_func"), "symfix_lib_func", 4,
			     fixture("libsymfix.so"), NULL) &&
	     check_sym(s, c1.pid, addr_of(&c1, "symfix_alpha"), "symfix_alpha", 5, c1.path, NULL);
	symbolizer__stats(s, &a);
	ok = ok && ASSERT_TRUE(a.elf_opened > b.elf_opened, "evicted tables reloaded") &&
	     ASSERT_TRUE(symbolizer__cache_bytes(s) < 64 << 10, "one small table cached");
	/* Exec: maps are forgotten and read again on the next address. */
	symbolizer__pid_gone(s, c2.pid, true, 0);
	ok = ok && check_sym(s, c2.pid, addr_of(&c2, "symfix_beta"), "symfix_beta", 3, c2.path, NULL);
	symbolizer__stats(s, &b);
	ok = ok && ASSERT_EQ(b.maps_reads, a.maps_reads + 1, "maps re-read after an exec");
	/* Exit: a stack that comes after the exit event (another ring, another thread tearing
	 * down) still resolves with the maps read while it lived; /proc has nothing left. */
	{
		pid_t gone = c2.pid;
		uint64_t beta = addr_of(&c2, "symfix_beta");

		kill(gone, SIGKILL);
		child_stop(&c2);
		symbolizer__pid_gone(s, gone, false, 0);
		ok = ok && check_sym(s, gone, beta, "symfix_beta", 3, c2.path, NULL);
		symbolizer__stats(s, &a);
		ok = ok && ASSERT_EQ(a.maps_reads, b.maps_reads, "an exited process's maps not re-read");
	}
out:
	child_stop(&c1);
	child_stop(&c2);
	symbolizer__free(s);
	return ok;
}

/* dlopen() after the maps were read: found at once (a re-read on the miss); misses beyond a few
 * re-reads an interval wait for the next interval. */
static bool test_symbolize_maps_reread(void)
{
	struct symbolizer *s = symbolizer__new();
	struct symbolizer_limits slow = { .reread_interval_ns = 3600ULL * 1000000000 };
	struct symbolizer_limits fast = { .reread_interval_ns = 0 };
	struct symbolizer_stats a, b;
	struct sym_frame f;
	struct child c = { 0 };
	uint64_t late;
	bool ok = false;

	CHECK(ASSERT_TRUE(s, "new"));
	symbolizer__set_limits(s, &slow);
	if (!ASSERT_TRUE(child_start(&c, fixture("symfix_pie")), "start fixture") ||
	    !ASSERT_EQ(symbolizer__pid_seen(s, c.pid), 0, "pid_seen") ||
	    !ASSERT_EQ(write(c.in_fd, "dlopen\n", 7), 7, "ask for dlopen") ||
	    !ASSERT_TRUE(child_read(&c, c.out), "dlopen report"))
		goto out;
	late = addr_of(&c, "symfix_late_func");
	symbolizer__stats(s, &a);
	ok = ASSERT_TRUE(late > 2, "dlopen worked") &&
	     check_sym(s, c.pid, late, "symfix_late_func", 2, NULL, NULL);
	symbolizer__stats(s, &b);
	ok = ok && ASSERT_EQ(b.maps_reads, a.maps_reads + 1, "found at once: one re-read");
	for (int i = 0; i < 8; i++)	/* an address in no mapping, again and again */
		symbolizer__user(s, c.pid, 0x10, &f);
	symbolizer__stats(s, &a);
	ok = ok && ASSERT_EQ(a.maps_reads, b.maps_reads + 3, "then three more in the interval, no more");
	symbolizer__set_limits(s, &fast);
	ok = ok && check_sym(s, c.pid, late, "symfix_late_func", 2, NULL, NULL);
out:
	child_stop(&c);
	symbolizer__free(s);
	return ok;
}

/*
 * A container: the binary exists only inside the process's root (chroot + pid namespace), and
 * its perf map is /tmp/perf-<pid in its namespace>.map inside that root.
 */
static bool test_symbolize_container(void)
{
	struct symbolizer *s = symbolizer__new();
	char root[] = "/tmp/symfix-root.XXXXXX", bid[160];
	struct child c = { 0 };
	struct sym_frame f;
	pid_t pid;
	bool ok = false;

	CHECK(ASSERT_TRUE(s, "new"));
	if (!ASSERT_TRUE(mkdtemp(root), "mkdtemp"))
		goto out;
	if (!ASSERT_TRUE(child_start_in(&c, fixture("symfix_static"), root, "/bin/symfix_static"),
			 "start in container"))
		goto out_rm;
	readelf_build_id(c.path, bid, sizeof(bid));
	pid = (pid_t)addr_of(&c, "hostpid");
	ok = ASSERT_TRUE(pid > 0 && access("/bin/symfix_static", F_OK), "binary only in container") &&
	     check_sym(s, pid, addr_of(&c, "symfix_alpha"), "symfix_alpha", 5, "/bin/symfix_static",
		       bid) &&
	     check_sym(s, pid, addr_of(&c, "symfix_local"), "symfix_local", 2, "/bin/symfix_static",
		       bid) &&
	     /* The fixture wrote /tmp/perf-1.map in its own root, as pid 1 of its namespace. */
	     ASSERT_EQ(symbolizer__user(s, pid, addr_of(&c, "anon") + 3, &f), 0, "perf map") &&
	     ASSERT_STREQ(f.function, "symfix_jit_entry", "perf map name") &&
	     ASSERT_EQ(f.sym_offset, 3, "perf map offset");
out_rm:
	child_stop(&c);
	rmdir(root);
out:
	child_stop(&c);
	symbolizer__free(s);
	return ok;
}

/* [vdso] frames resolve from the agent's own vDSO; checked against readelf on a dump of it. */
static bool test_symbolize_vdso(void)
{
	struct symbolizer *s = symbolizer__new();
	char dump[] = "/tmp/symfix-vdso.XXXXXX", line[512], cmd[128], name[128] = "";
	uint64_t base = getauxval(AT_SYSINFO_EHDR), start, end, size = 0, value = 0;
	struct sym_frame f;
	bool ok = false;
	FILE *m, *p;
	int fd;

	CHECK(ASSERT_TRUE(s, "new"));
	m = fopen("/proc/self/maps", "r");
	while (m && fgets(line, sizeof(line), m))
		if (strstr(line, "[vdso]") && sscanf(line, "%lx-%lx", &start, &end) == 2)
			size = end - start;
	if (m)
		fclose(m);
	fd = mkstemp(dump);
	if (!ASSERT_TRUE(base && size && fd >= 0, "vdso and dump file") ||
	    !ASSERT_EQ(write(fd, (void *)(uintptr_t)base, size), (long long)size, "dump vdso"))
		goto out;
	close(fd);
	snprintf(cmd, sizeof(cmd), "readelf -W --dyn-syms '%s'", dump);
	p = popen(cmd, "r");
	while (p && fgets(line, sizeof(line), p)) {
		unsigned long long v;
		char n[128];

		if (sscanf(line, " %*d: %llx %*d FUNC %*s %*s %*s %127s", &v, n) == 2 &&
		    strstr(n, "clock_gettime") && !value) {
			value = v;
			snprintf(name, sizeof(name), "%s", n);
		}
	}
	if (p)
		pclose(p);
	/* x86-64 and arm64 vDSOs are linked at 0: the symbol value is the offset in the mapping. */
	ok = ASSERT_TRUE(value, "clock_gettime in the vdso") &&
	     ASSERT_EQ(symbolizer__user(s, getpid(), base + value + 1, &f), 0, "resolve") &&
	     ASSERT_TRUE(f.function && strstr(f.function, "clock_gettime"), "clock_gettime") &&
	     ASSERT_STREQ(f.module, "[vdso]", "module") && ASSERT_EQ(f.sym_offset, 1, "offset");
out:
	unlink(dump);
	symbolizer__free(s);
	return ok;
}

static bool test_symbolize_unknown(void)
{
	struct symbolizer *s = symbolizer__new();
	struct symbolizer_stats st;
	struct sym_frame f;
	bool ok;

	CHECK(ASSERT_TRUE(s, "new"));
	ok = ASSERT_EQ(symbolizer__user(s, getpid(), 0x10, &f), -ENOENT, "null page") &&
	     ASSERT_STREQ(f.module, "[unknown]", "module") && ASSERT_TRUE(!f.function, "func") &&
	     ASSERT_STREQ(f.build_id, "", "build_id") && ASSERT_EQ(f.file_offset, 0x10, "offset") &&
	     ASSERT_EQ(symbolizer__user(s, 0, 0x10, &f), -EINVAL, "pid 0") &&
	     ASSERT_EQ(symbolizer__user(NULL, 1, 0x10, &f), -EINVAL, "NULL") &&
	     ASSERT_EQ(symbolizer__pid_seen(s, -1), -EINVAL, "pid -1");
	/* Our own code resolves too (this test binary has .symtab). */
	ok = ok &&
	     ASSERT_EQ(symbolizer__user(s, getpid(), (uint64_t)(uintptr_t)&test_symbolize_unknown + 1,
					&f), 0, "self") &&
	     ASSERT_STREQ(f.function, "test_symbolize_unknown", "self name");
	symbolizer__stats(s, &st);
	ok = ok && ASSERT_EQ(st.unknown, 1, "unknown counted") && ASSERT_EQ(st.resolved, 1, "resolved");
	symbolizer__free(s);
	symbolizer__free(NULL);
	return ok;
}

/* A known kernel text symbol from /proc/kallsyms resolves to its own name. */
static bool test_symbolize_kallsyms(void)
{
	static const char *const want[] = { "do_sys_openat2", "vfs_read", "schedule" };
	struct symbolizer *s = symbolizer__new();
	char line[512], name[256], found[256] = "", type;
	unsigned long long addr, faddr = 0;
	struct sym_frame f;
	bool ok;
	FILE *k;

	CHECK(ASSERT_TRUE(s, "new"));
	k = fopen("/proc/kallsyms", "r");
	while (k && fgets(line, sizeof(line), k) && !found[0]) {
		if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || !addr)
			continue;
		for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
			if (!strcmp(name, want[i]) && (type == 't' || type == 'T')) {
				strcpy(found, name);
				faddr = addr;
			}
	}
	if (k)
		fclose(k);
	ok = ASSERT_TRUE(found[0], "a known symbol with an address in /proc/kallsyms") &&
	     ASSERT_EQ(symbolizer__kernel(s, faddr + 4, &f), 0, found) &&
	     ASSERT_STREQ(f.function, found, "name") && ASSERT_EQ(f.sym_offset, 4, "offset") &&
	     ASSERT_STREQ(f.module, "[kernel.kallsyms]", "module") && ASSERT_TRUE(f.kernel, "kernel") &&
	     ASSERT_EQ(f.file_offset, faddr + 4, "file_offset") &&
	     ASSERT_TRUE(f.map_start <= faddr && faddr < f.map_limit, "kernel mapping") &&
	     ASSERT_EQ(symbolizer__kernel(s, 0x1000, &f), -ENOENT, "user address") &&
	     ASSERT_STREQ(f.module, "[kernel.kallsyms]", "unknown module") &&
	     ASSERT_TRUE(!f.function, "no function");
	symbolizer__free(s);
	return ok;
}

/*
 * A kernel function longer than 4 KiB (bpf_check() is ~12 KiB): an address near its end is
 * still that function (kallsyms has no sizes; each symbol reaches to the next).
 */
static bool test_symbolize_kallsyms_long_function(void)
{
	struct symbolizer *s = symbolizer__new();
	char line[512], name[256], prev[256] = "", best[256] = "", type;
	unsigned long long addr, prev_addr = 0, best_addr = 0, best_len = 0;
	struct sym_frame f;
	bool ok;
	FILE *k;

	CHECK(ASSERT_TRUE(s, "new"));
	k = fopen("/proc/kallsyms", "r");
	while (k && fgets(line, sizeof(line), k)) {
		if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || !addr ||
		    strchr(line, '['))
			break;	/* the core kernel's symbols come first, then modules' */
		if (type != 't' && type != 'T' && type != 'w' && type != 'W')
			continue;	/* text symbols, as the symbolizer reads them */
		if (prev[0] && addr > prev_addr && addr - prev_addr > best_len &&
		    addr - prev_addr < (64u << 10) && strncmp(prev, "__pfx_", 6)) {
			best_len = addr - prev_addr;
			best_addr = prev_addr;
			strcpy(best, prev);
		}
		strcpy(prev, name);
		prev_addr = addr;
	}
	if (k)
		fclose(k);
	if (best_len <= 4096) {
		fprintf(stderr, "  no kernel function over 4 KiB found: skipped\n");
		symbolizer__free(s);
		return true;
	}
	ok = ASSERT_EQ(symbolizer__kernel(s, best_addr + best_len - 8, &f), 0, best) &&
	     ASSERT_STREQ(f.function, best, "the long function's name at its end") &&
	     ASSERT_EQ(f.sym_offset, best_len - 8, "offset");
	fprintf(stderr, "  %s: %llu bytes, resolved at +%llu\n", best, best_len, best_len - 8);
	symbolizer__free(s);
	return ok;
}

static long status_kb(const char *key)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "re");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			kb = atol(line + strlen(key) + 1);
	if (f)
		fclose(f);
	return kb;
}

/*
 * A symbol table the size of libtorch_cpu's (200 k functions with 200-character names: 41 MB of
 * names, 4.8 MB of symbols) is read without holding its pages: the agent's peak RSS on the H200
 * was 82.6 MB of libtorch_cpu.so's pages during this parse. Peak growth (VmHWM after
 * clear_refs) stays under 24 MB, the table and its build (~10 MB) included; 53 MB when the
 * pages were kept.
 */
static bool test_symbolize_big_symtab_rss(void)
{
	enum { NSYM = 200000, NAMELEN = 200 };
	char path[] = "/tmp/gpuscope-bigsym-XXXXXX";
	static const char shstr[] = "\0.text\0.symtab\0.strtab\0.shstrtab";
	size_t symsz = (NSYM + 1) * sizeof(Elf64_Sym), strsz = 1 + (size_t)NSYM * (NAMELEN + 1);
	size_t off_sym = sizeof(Elf64_Ehdr), off_str = off_sym + symsz;
	size_t off_shs = off_str + strsz, off_sh = (off_shs + sizeof(shstr) + 7) & ~7ul;
	Elf64_Ehdr eh = { .e_ident = { ELFMAG0, ELFMAG1, ELFMAG2, ELFMAG3, ELFCLASS64, ELFDATA2LSB,
				       EV_CURRENT },
			  .e_type = ET_DYN, .e_machine = EM_X86_64, .e_version = EV_CURRENT,
			  .e_shoff = off_sh, .e_ehsize = sizeof(Elf64_Ehdr),
			  .e_shentsize = sizeof(Elf64_Shdr), .e_shnum = 5, .e_shstrndx = 4 };
	Elf64_Shdr sh[5] = {
		{ 0 },
		{ .sh_name = 1, .sh_type = SHT_NOBITS, .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
		  .sh_addr = 0x1000, .sh_size = (uint64_t)NSYM * 16 },
		{ .sh_name = 7, .sh_type = SHT_SYMTAB, .sh_offset = off_sym, .sh_size = symsz,
		  .sh_link = 3, .sh_info = 1, .sh_addralign = 8, .sh_entsize = sizeof(Elf64_Sym) },
		{ .sh_name = 15, .sh_type = SHT_STRTAB, .sh_offset = off_str, .sh_size = strsz },
		{ .sh_name = 23, .sh_type = SHT_STRTAB, .sh_offset = off_shs, .sh_size = sizeof(shstr) },
	};
	char *img = calloc(1, off_sh + sizeof(sh));
	struct symt t;
	bool from_symtab = false, ok;
	long before, peak;
	int fd, cr, err;

	if (!img)
		return false;
	memcpy(img, &eh, sizeof(eh));
	for (size_t i = 0; i < NSYM; i++) {
		Elf64_Sym *sym = (Elf64_Sym *)(img + off_sym) + 1 + i;
		char *name = img + off_str + 1 + i * (NAMELEN + 1);

		memset(name, 'a' + i % 26, NAMELEN);
		snprintf(name, NAMELEN, "_ZN5torch4func%zu", i);
		name[strlen(name)] = 'x';	/* the rest of the 200 characters */
		sym->st_name = 1 + i * (NAMELEN + 1);
		sym->st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
		sym->st_shndx = 1;
		sym->st_value = 0x1000 + i * 16;
		sym->st_size = 16;
	}
	memcpy(img + off_shs, shstr, sizeof(shstr));
	memcpy(img + off_sh, sh, sizeof(sh));
	fd = mkstemp(path);
	if (fd < 0 || write(fd, img, off_sh + sizeof(sh)) != (ssize_t)(off_sh + sizeof(sh))) {
		free(img);
		return ASSERT_TRUE(false, "fixture written");
	}
	free(img);
	cr = open("/proc/self/clear_refs", O_WRONLY);	/* "5": the peak starts again from now */
	if (cr < 0 || write(cr, "5", 1) != 1) {
		fprintf(stderr, "  cannot reset VmHWM: skipped\n");
		close(fd);
		unlink(path);
		return true;
	}
	close(cr);
	elf_version(EV_CURRENT);	/* as symbolizer__new() does */
	before = status_kb("VmRSS:");
	err = elf_read_symbols(fd, &t, &from_symtab);
	peak = status_kb("VmHWM:");
	close(fd);
	unlink(path);
	ok = ASSERT_EQ(err, 0, "elf_read_symbols") && ASSERT_TRUE(from_symtab, "from .symtab");
	if (ok) {
		const char *n = symt_name(&t, 12345);

		ok = ASSERT_EQ(t.n, NSYM, "symbols") &&
		     ASSERT_TRUE(!strncmp(n, "_ZN5torch4func12345x", 20), "a name read back");
		fprintf(stderr, "  41 MB of names: peak RSS +%ld kB\n", peak - before);
		ok = ok && ASSERT_TRUE(peak - before < 24 * 1024, "peak RSS growth under 24 MB");
		symt_done(&t);
	}
	return ok;
}

/*
 * A process that exited before anyone read its /proc/PID/maps (a compile loop's `as`, a
 * shell's `mkdir`): its addresses resolve from the kernel's mmap records (mmapwatch.h), its
 * files opened by their host path; without the records they are unknown.
 */
static bool test_symbolize_gone_before_read(void)
{
	struct symbolizer *s = symbolizer__new(), *plain = symbolizer__new();
	uint64_t alpha, lib, records = 0, lost = 0;
	struct child c = { 0 };
	const char *why = NULL;
	struct sym_frame f;
	bool ok = false;
	pid_t pid;

	if (!ASSERT_TRUE(s && plain, "new") ||
	    !ASSERT_EQ(symbolizer__watch_mmaps(s, &why), 0, why ? why : "watch mmaps") ||
	    !ASSERT_TRUE(child_start(&c, fixture("symfix_pie")), "start fixture"))
		goto out;
	pid = c.pid;
	alpha = addr_of(&c, "symfix_alpha");
	lib = addr_of(&c, "symfix_lib_func");
	kill(pid, SIGKILL);
	child_stop(&c);		/* reaped: /proc/PID is gone */
	ok = ASSERT_EQ(symbolizer__user(plain, pid, alpha, &f), -ENOENT,
		       "without the records: unknown") &&
	     ASSERT_STREQ(f.module, "[unknown]", "no mapping") &&
	     check_sym(s, pid, alpha, "symfix_alpha", 5, c.path, NULL) &&
	     check_sym(s, pid, lib, "symfix_lib_func", 4, fixture("libsymfix.so"), NULL);
	symbolizer__mmap_stats(s, &records, &lost);
	fprintf(stderr, "  %lu mmap records read, %lu lost\n", (unsigned long)records,
		(unsigned long)lost);
	ok = ok && ASSERT_TRUE(records >= 3, "the fixture's exec and mappings read");
out:
	child_stop(&c);
	symbolizer__free(s);
	symbolizer__free(plain);
	return ok;
}

/*
 * With the kernel's mmap records, a dlopen's library resolves from the records and an address in
 * no mapping (a walk's stray word) re-reads nothing: every executable mapping since the last read
 * is in the records (each re-read of a PyTorch process's maps costs ~1 ms; without the records
 * test_symbolize_maps_reread's four in an interval).
 */
static bool test_symbolize_records_no_reread(void)
{
	struct symbolizer *s = symbolizer__new();
	struct symbolizer_stats a, b;
	struct sym_frame f;
	struct child c = { 0 };
	const char *why = NULL;
	uint64_t late;
	bool ok = false;

	if (!ASSERT_TRUE(s, "new") ||
	    !ASSERT_EQ(symbolizer__watch_mmaps(s, &why), 0, why ? why : "watch mmaps") ||
	    !ASSERT_TRUE(child_start(&c, fixture("symfix_pie")), "start fixture") ||
	    !ASSERT_EQ(symbolizer__pid_seen(s, c.pid), 0, "pid_seen") ||
	    !ASSERT_EQ(write(c.in_fd, "dlopen\n", 7), 7, "ask for dlopen") ||
	    !ASSERT_TRUE(child_read(&c, c.out), "dlopen report"))
		goto out;
	late = addr_of(&c, "symfix_late_func");
	ok = ASSERT_TRUE(late > 2, "dlopen worked") &&
	     check_sym(s, c.pid, late, "symfix_late_func", 2, NULL, NULL);
	/* the records' exec and fork may have the maps read once more at the next lookup */
	symbolizer__user(s, c.pid, 0x10, &f);
	symbolizer__stats(s, &a);
	for (int i = 0; i < 8; i++)
		symbolizer__user(s, c.pid, 0x10, &f);
	symbolizer__stats(s, &b);
	ok = ok && ASSERT_EQ(b.maps_reads, a.maps_reads, "no re-read: a stray address is in no "
			     "mapping while no record was lost");
out:
	child_stop(&c);
	symbolizer__free(s);
	return ok;
}

TEST_MAIN(T(test_symbolize_big_symtab_rss), T(test_symbolize_pie_shlib_cxx), T(test_symbolize_nopie), T(test_symbolize_stripped_dynsym),
	  T(test_symbolize_debug_file), T(test_symbolize_metrics), T(test_symbolize_perfmap), T(test_symbolize_deleted), T(test_symbolize_cache),
	  T(test_symbolize_maps_reread), T(test_symbolize_container), T(test_symbolize_vdso),
	  T(test_symbolize_unknown), T(test_symbolize_kallsyms),
	  T(test_symbolize_kallsyms_long_function), T(test_symbolize_gone_before_read),
	  T(test_symbolize_records_no_reread))
