/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for src/agent/unwind/python.c against live interpreters: detection, offsets and
 * the code-object reader (qualified names, files, non-ASCII names, both co_linetable formats)
 * must agree, for every instruction, with what the interpreter itself reports (co_lines()).
 * Runs Debian's /usr/bin/python3; more interpreters (3.10, 3.12, 3.13, ...) through
 * GPUSCOPE_TEST_PYTHONS=/path/python3.10:/path/python3.12. Needs root (BPF maps).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>
#include "test.h"
#include "agent/unwind/python.h"
#include "common/batch.h"

/* Prints its pid, then per code object "C addr qualname|file" and "L addr offset line" for
 * every instruction, then waits to be killed. */
static const char script[] =
	"import os, sys, asyncio\n"
	"def plain(a):\n"
	"    b = a + 1\n"
	"\n"
	"\n"
	"\n"
	"    c = b * 2\n"
	"    return c\n"
	"class K:\n"
	"    def method(self):\n"
	"        return [x for x in range(3)]\n"
	"def outer():\n"
	"    def inner():\n"
	"        return 1\n"
	"    return inner\n"
	"def gen():\n"
	"    yield 1\n"
	"    yield 2\n"
	"async def coro():\n"
	"    await asyncio.sleep(0)\n"
	"def \xc3\xbc" "n\xc3\xaf" "code_stage():\n"
	"    return 3\n"
	"def \xce\xa9" "_stage():\n"
	"    return 4\n"
	"def far():\n"
	"    x = 1\n"
	/* 300 blank lines: long-form line deltas */
	"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
	"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
	"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
	"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
	"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
	"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
	"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
	"\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"
	"    return x + 1\n"
	"codes = [plain.__code__, K.method.__code__, outer.__code__, outer().__code__,\n"
	"         gen.__code__, coro.__code__, globals()['\\u00fcn\\u00efcode_stage'].__code__,\n"
	"         globals()['\\u03a9_stage'].__code__, far.__code__]\n"
	"codes.append(K.method.__code__.co_consts[1]) if sys.version_info < (3, 12) else None\n"
	"print(os.getpid())\n"
	"for c in codes:\n"
	"    print('C', id(c), getattr(c, 'co_qualname', c.co_name) + '|' + c.co_filename)\n"
	"    for start, end, line in c.co_lines():\n"
	"        for off in range(start, end, 2):\n"
	"            print('L', id(c), off, line or 0)\n"
	"print('END', flush=True)\n"
	"import time; time.sleep(60)\n";

/* Checks every line the script printed against python__frame(). */
static bool check_interpreter(const char *python)
{
	char path[] = "/tmp/gpuscope-test-python-XXXXXX", cmd[512], line[1024];
	uint64_t code = 0, checked_lines = 0, codes = 0;
	struct python *py = NULL;
	uint32_t stamp = 0;
	bool ok = false, saw_end = false;
	pid_t pid = 0;
	FILE *f = NULL;
	int fd;

	if (access(python, X_OK)) {
		fprintf(stderr, "  %s: not found, skipped\n", python);
		return true;
	}
	fd = mkstemp(path);
	if (!ASSERT_TRUE(fd >= 0, "temp script"))
		return false;
	if (!ASSERT_EQ(write(fd, script, sizeof(script) - 1), sizeof(script) - 1, "write script"))
		goto out;
	close(fd);
	fd = -1;
	snprintf(cmd, sizeof(cmd), "exec %s %s", python, path);
	f = popen(cmd, "r");
	if (!ASSERT_TRUE(f != NULL, "popen"))
		goto out;
	if (!ASSERT_TRUE(fgets(line, sizeof(line), f) != NULL, "pid line"))
		goto out;
	pid = atoi(line);
	py = python__new();
	if (!ASSERT_TRUE(py != NULL, "python__new (BPF maps)"))
		goto out;
	if (!ASSERT_EQ(python__pid_seen(py, pid), 1, python))
		goto out;
	while (fgets(line, sizeof(line), f)) {
		char want[512], *bar;
		struct location loc;
		uint64_t addr, off;
		unsigned want_line;

		line[strcspn(line, "\n")] = 0;
		if (!strcmp(line, "END")) {
			saw_end = true;
			break;
		}
		if (sscanf(line, "C %" SCNu64 " %511[^\n]", &addr, want) == 2) {
			bar = strchr(want, '|');
			if (!ASSERT_TRUE(bar != NULL, "C line"))
				goto out;
			*bar = 0;
			code = addr;
			codes++;
			if (!ASSERT_EQ(python__code_stamp(py, pid, code, &stamp), 0, "stamp"))
				goto out;
			/* another stamp: another object than the one at that address now */
			if (!ASSERT_EQ(python__frame(py, pid, code, (uint64_t)(stamp ^ 1) << 32, &loc),
				       -ENOENT, "replaced code object") ||
			    !ASSERT_STREQ(loc.function, "[python]", "replaced code object's name"))
				goto out;
			if (!ASSERT_EQ(python__frame(py, pid, code, (uint64_t)stamp << 32, &loc), 0,
				       want) ||
			    !ASSERT_STREQ(loc.function, want, "qualified name") ||
			    !ASSERT_STREQ(loc.file, bar + 1, "file"))
				goto out;
			continue;
		}
		if (sscanf(line, "L %" SCNu64 " %" SCNu64 " %u", &addr, &off, &want_line) != 3 ||
		    addr != code)
			continue;
		if (!ASSERT_EQ(python__frame(py, pid, code, off | (uint64_t)stamp << 32, &loc), 0,
			       "frame") ||
		    !ASSERT_EQ(loc.line, want_line, line))
			goto out;
		checked_lines++;
	}
	fprintf(stderr, "  %s: %" PRIu64 " code objects, %" PRIu64 " instructions checked\n",
		python, codes, checked_lines);
	ok = ASSERT_TRUE(saw_end, "script finished") && ASSERT_TRUE(codes >= 9, "code objects") &&
	     ASSERT_TRUE(checked_lines > 50, "instructions");
	{
		struct location loc;

		ok = ok && ASSERT_EQ(python__frame(py, pid, 16, 0, &loc), -ENOENT, "bad address") &&
		     ASSERT_STREQ(loc.function, "[python]", "unreadable frame name");
	}
out:
	if (pid > 0)
		kill(pid, SIGKILL);
	if (f)
		pclose(f);
	if (fd >= 0)
		close(fd);
	python__free(py);
	unlink(path);
	return ok;
}

static bool test_python_debian_interpreter(void)
{
	return check_interpreter("/usr/bin/python3");
}

static bool test_python_more_interpreters(void)
{
	const char *env = getenv("GPUSCOPE_TEST_PYTHONS");
	char *list, *tok, *save = NULL;
	bool ok = true;

	if (!env || !*env)
		return true;
	list = strdup(env);
	for (char *p = list; list && (tok = strtok_r(p, ":", &save)); p = NULL)
		ok &= check_interpreter(tok);
	free(list);
	return ok;
}

static bool test_python_not_python(void)
{
	struct python *py = python__new();
	bool ok;

	if (!ASSERT_TRUE(py != NULL, "python__new"))
		return false;
	ok = ASSERT_EQ(python__pid_seen(py, getpid()), 0, "this test binary is no Python") &&
	     ASSERT_EQ(python__pid_seen(py, 0x7ffffff0), -ESRCH, "no such process");
	python__free(py);
	return ok;
}

static bool test_python_line_tables(void)
{
	/* 3.10 (PEP 626 pairs): +2 lines over 6 bytes, no line over 4 bytes, -1 over 2 */
	static const uint8_t t310[] = { 6, 2, 4, (uint8_t)-128, 2, (uint8_t)-1 };
	/* 3.11+: short form (code 0, 2 units), one-line form delta 1 (code 11, 1 unit),
	 * no-column form with svarint -3 (code 13, 3 units), no location (code 15, 1 unit) */
	static const uint8_t t311[] = { 0x80 | 0 << 3 | 1, 0x05,
					0x80 | 11 << 3 | 0, 0x04, 0x09,
					0x80 | 13 << 3 | 2, 0x07,
					0x80 | 15 << 3 | 0 };
#define L310(off) python__line(t310, sizeof(t310), 10, false, off)
#define L311(off) python__line(t311, sizeof(t311), 10, true, off)
	return ASSERT_EQ(L310(0), 12, "310 first") && ASSERT_EQ(L310(4), 12, "310") &&
	       ASSERT_EQ(L310(6), 0, "310 no line") && ASSERT_EQ(L310(10), 11, "310 back") &&
	       ASSERT_EQ(L310(12), 0, "310 end") && ASSERT_EQ(L311(0), 10, "311 short") &&
	       ASSERT_EQ(L311(2), 10, "311 short 2nd unit") &&
	       ASSERT_EQ(L311(4), 11, "311 one-line") &&
	       ASSERT_EQ(L311(6), 8, "311 no-column -3") &&
	       ASSERT_EQ(L311(10), 8, "311 no-column 3rd unit") &&
	       ASSERT_EQ(L311(12), 0, "311 no location") &&
	       ASSERT_EQ(L311(14), 0, "311 past the end");
}

int main(int argc, char **argv)
{
	static const struct test_case tc[] = {
		T(test_python_line_tables),
		T(test_python_not_python),
		T(test_python_debian_interpreter),
		T(test_python_more_interpreters),
	};

	if (geteuid() != 0) {
		printf("SKIP: needs root (BPF maps)\n");
		return 77;
	}
	return test_main(tc, sizeof(tc) / sizeof(tc[0]), argc, argv);
}
