/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unwind-table builder against binutils: every row `readelf --debug-dump=frames-interp` prints
 * for a fixture library built without frame pointers (and for the system's libc) is what the
 * table gives at that address; PLT stubs, the signal trampoline and the outermost frame get
 * their markers; the vDSO (from memory) has a table.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <unistd.h>
#include "test.h"
#include "agent/unwind/table.c"
#include "agent/procs/elf.h"
#include "agent/procs/symtab.h"

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
		snprintf(fixdir, sizeof(fixdir), "%s/fixtures/unwind", exe);
	}
	snprintf(buf, sizeof(buf), "%s/%s", fixdir, name);
	return buf;
}

/* Compares t with readelf's interpretation of path; returns rows checked, or -1 on mismatch. */
static long check_against_readelf(const char *path, const struct uw_table *t)
{
	char cmd[PATH_MAX + 64], line[1024], cols[32][16];
	char sig_cies[256][16];
	int ncols = 0, nsig = 0, bad = 0;
	bool in_sig = false, in_cie = false;
	long checked = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "readelf --debug-dump=frames-interp '%s' 2>/dev/null", path);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char id[16], kindw[8], aug[32];
		unsigned long long loc;
		char *tok, *save;
		int n = 0;

		if (strstr(line, " CIE "))
			in_cie = true;
		if (sscanf(line, "%15s %*s %*s CIE \"%31[^\"]\"", id, aug) == 2) {
			if (strchr(aug, 'S') && nsig < 256)
				snprintf(sig_cies[nsig++], 16, "%s", id);
			continue;
		}
		if (strstr(line, "ZERO terminator") || strstr(line, " CIE ")) {
			ncols = 0;
			continue;
		}
		if (sscanf(line, "%*s %*s %*s FDE cie=%15s", id) == 1) {
			in_sig = in_cie = false;
			for (int i = 0; i < nsig; i++)
				in_sig |= !strcmp(sig_cies[i], id);
			ncols = 0;
			continue;
		}
		if (strstr(line, "   LOC ")) {
			ncols = 0;
			for (tok = strtok_r(line, " \n", &save); tok && ncols < 32;
			     tok = strtok_r(NULL, " \n", &save))
				snprintf(cols[ncols++], 16, "%s", tok);
			continue;
		}
		if (!ncols || in_cie || sscanf(line, "%llx %7s", &loc, kindw) != 2)
			continue;
		{
			char vals[32][24];
			long long cfa_off = -1, rbp_off = 0;
			int want_kind = -1;
			bool ra_undef = false;
			__u64 row = uw_table_lookup(t, loc);

			bool ra_other = false, rbp_other = false;

			for (tok = strtok_r(line, " \n", &save); tok && n < 32;
			     tok = strtok_r(NULL, " \n", &save)) {
				if (tok[0] == '(' && n)	/* "r10 (r10)": one column */
					continue;
				snprintf(vals[n++], 24, "%s", tok);
			}
			for (int c = 1; c < n && c < ncols; c++) {
				if (!strcmp(cols[c], "CFA")) {
					if (!strncmp(vals[c], "rsp+", 4))
						want_kind = UNWIND_ROW_RSP, cfa_off = atoll(vals[c] + 4);
					else if (!strncmp(vals[c], "rbp+", 4))
						want_kind = UNWIND_ROW_RBP, cfa_off = atoll(vals[c] + 4);
				} else if (!strcmp(cols[c], "rbp") && vals[c][0] == 'c') {
					rbp_off = atoll(vals[c] + 1);
				} else if (!strcmp(cols[c], "rbp") && strcmp(vals[c], "u")) {
					rbp_other = true;
				} else if (!strcmp(cols[c], "ra") && !strcmp(vals[c], "u")) {
					ra_undef = true;
				} else if (!strcmp(cols[c], "ra") && strcmp(vals[c], "c-8")) {
					ra_other = true;
				}
			}
			checked++;
			if (in_sig) {
				if (UNWIND_ROW_KIND(row) != UNWIND_ROW_SIGNAL)
					bad++, fprintf(stderr, "  %llx: want signal, got %016llx\n", loc, (unsigned long long)row);
			} else if (ra_undef) {
				if (UNWIND_ROW_KIND(row) != UNWIND_ROW_END)
					bad++, fprintf(stderr, "  %llx: want end, got %016llx\n", loc, (unsigned long long)row);
			} else if (want_kind < 0 || ra_other || rbp_other) {
				/* an expression or a register rule: PLT or the frame-pointer fallback */
				if (UNWIND_ROW_KIND(row) != UNWIND_ROW_PLT && UNWIND_ROW_KIND(row) != UNWIND_ROW_FP)
					bad++, fprintf(stderr, "  %llx: want plt/fp, got %016llx\n", loc, (unsigned long long)row);
			} else if (UNWIND_ROW_KIND(row) != want_kind || UNWIND_ROW_CFA(row) != cfa_off ||
				   UNWIND_ROW_RBP8(row) * 8 != rbp_off) {
				bad++;
				fprintf(stderr, "  %llx: readelf %s rbp %lld, table kind %d cfa %d rbp %d\n", loc,
					vals[1], rbp_off, UNWIND_ROW_KIND(row), UNWIND_ROW_CFA(row), UNWIND_ROW_RBP8(row) * 8);
			}
			if (bad > 20)
				break;
		}
	}
	pclose(f);
	return bad ? -1 : checked;
}

static bool check_file(const char *path, long min_rows)
{
	struct uw_table t;
	long checked;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool ok;

	if (!ASSERT_TRUE(fd >= 0, path))
		return false;
	ok = ASSERT_EQ(uw_table_build(fd, NULL, 0, 0, NULL, &t), 0, "build");
	close(fd);
	if (!ok)
		return false;
	checked = check_against_readelf(path, &t);
	printf("  %s: %u rows, %u pages, %llu FDEs, %llu unsupported, %ld readelf rows checked\n",
	       path, t.nrows, t.npages, (unsigned long long)t.fdes,
	       (unsigned long long)t.unsupported, checked);
	ok = ASSERT_TRUE(checked >= min_rows, "every readelf row matches");
	uw_table_done(&t);
	return ok;
}

static bool test_unwind_table_fixture_lib(void)
{
	return check_file(fixture("libnofp.so"), 10);
}

static bool test_unwind_table_fixture_prog(void)
{
	return check_file(fixture("nofp_burn"), 10);
}

static bool test_unwind_table_libc(void)
{
	char path[PATH_MAX];
	FILE *f = popen("gcc -print-file-name=libc.so.6", "r");
	bool ok;

	if (!f || !fgets(path, sizeof(path), f)) {
		if (f)
			pclose(f);
		return ASSERT_TRUE(false, "find libc");
	}
	pclose(f);
	path[strcspn(path, "\n")] = 0;
	ok = check_file(path, 1000);
	return ok;
}

static bool test_unwind_table_markers(void)
{
	struct uw_table t;
	bool ok = true;
	int fd = open(fixture("libnofp.so"), O_RDONLY | O_CLOEXEC);
	__u64 row;
	FILE *f;
	unsigned long long plt = 0;
	char line[512];

	CHECK(ASSERT_TRUE(fd >= 0, "open"));
	CHECK(ASSERT_EQ(uw_table_build(fd, NULL, 0, 0, NULL, &t), 0, "build"));
	close(fd);
	snprintf(line, sizeof(line), "readelf -SW '%s'", fixture("libnofp.so"));
	f = popen(line, "r");
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, " .plt ") && sscanf(strstr(line, " .plt ") + 6, " PROGBITS %llx", &plt) == 1)
			break;
	if (f)
		pclose(f);
	if (ASSERT_TRUE(plt != 0, "fixture has a .plt")) {
		struct symt syms;
		bool from_symtab;
		long i;

		row = uw_table_lookup(&t, plt + 16 + 4);	/* inside the first PLT entry */
		ok &= ASSERT_EQ(UNWIND_ROW_KIND(row), UNWIND_ROW_PLT, "PLT entry marked");
		/* and the symbolizer names it [plt], not the symbol before it (_init) */
		fd = open(fixture("libnofp.so"), O_RDONLY | O_CLOEXEC);
		if (ASSERT_EQ(elf_lib_init(), 0, "libelf") &&
		    ASSERT_EQ(elf_read_symbols(fd, &syms, &from_symtab), 0, "symbols")) {
			i = symt_find(&syms, plt + 16 + 4);
			ok &= ASSERT_STREQ(i >= 0 ? symt_name(&syms, i) : NULL, "[plt]", "PLT name");
			symt_done(&syms);
		}
		close(fd);
	}
	ok &= ASSERT_EQ(uw_table_build(-1, "not elf", 7, 0, NULL, &(struct uw_table){ 0 }), -ENOEXEC,
			"not ELF: -ENOEXEC");
	fd = open(fixture("libnofp.so"), O_RDONLY | O_CLOEXEC);
	ok &= ASSERT_EQ(uw_table_build(fd, NULL, 0, 5, NULL, &(struct uw_table){ 0 }), -E2BIG,
			"over the row budget: -E2BIG");
	/* an agent stopping mid-build: cancelled at the first check, nothing kept */
	ok &= ASSERT_EQ(uw_table_build(fd, NULL, 0, 0, &(volatile bool){ true },
				       &(struct uw_table){ 0 }), -ECANCELED, "cancelled: -ECANCELED");
	close(fd);
	uw_table_done(&t);
	return ok;
}

static bool test_unwind_table_vdso(void)
{
	unsigned long base = getauxval(AT_SYSINFO_EHDR), start, end, size = 0;
	char line[256];
	FILE *maps = fopen("/proc/self/maps", "r");
	struct uw_table t;
	bool ok;

	while (maps && fgets(line, sizeof(line), maps))
		if (strstr(line, "[vdso]") && sscanf(line, "%lx-%lx", &start, &end) == 2)
			size = end - start;
	if (maps)
		fclose(maps);
	if (!base || !size)
		return ASSERT_TRUE(false, "this process has a vDSO");
	ok = ASSERT_EQ(uw_table_build(-1, (void *)base, size, 0, NULL, &t), 0, "vDSO table from memory");
	if (ok) {
		ok = ASSERT_TRUE(t.nrows > 3, "vDSO rows");
		uw_table_done(&t);
	}
	return ok;
}

int main(int argc, char **argv)
{
	static const struct test_case tc[] = {
		T(test_unwind_table_fixture_lib), T(test_unwind_table_fixture_prog),
		T(test_unwind_table_libc), T(test_unwind_table_markers), T(test_unwind_table_vdso),
	};

	return test_main(tc, sizeof(tc) / sizeof(tc[0]), argc, argv);
}
