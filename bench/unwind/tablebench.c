/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unwind-table build cost: for each ELF file given, the time to build its table (best of
 * ROUNDS), its FDEs, rows, BPF bytes (8-byte rows + page index), the bytes per row, and the
 * process's peak RSS so far (the build's transient memory: give one file per run to read it).
 * Usage: tablebench [-r ROUNDS] FILE...
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "agent/unwind/table.h"
#include "common/util.h"

int main(int argc, char **argv)
{
	int rounds = 3, i = 1;

	if (argc > 2 && !strcmp(argv[1], "-r")) {
		rounds = atoi(argv[2]);
		i = 3;
	}
	printf("%-28s %10s %9s %9s %12s %10s %8s %8s %s\n", "file", "size_MB", "FDEs", "rows",
	       "bpf_bytes", "build_ms", "B/row", "peak_MB", "source");
	for (; i < argc; i++) {
		uint64_t best = UINT64_MAX;
		struct uw_table t = { 0 };
		struct rusage ru;
		struct stat st;
		int err = 0;

		for (int r = 0; r < rounds; r++) {
			int fd = open(argv[i], O_RDONLY | O_CLOEXEC);
			uint64_t t0;

			if (fd < 0 || fstat(fd, &st)) {
				perror(argv[i]);
				return 1;
			}
			uw_table_done(&t);
			t0 = mono_ns();
			err = uw_table_build(fd, NULL, 0, 0, NULL, &t);
			if (mono_ns() - t0 < best)
				best = mono_ns() - t0;
			close(fd);
			if (err)
				break;
		}
		if (err) {
			printf("%-28s build failed: %s\n", strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i],
			       strerror(-err));
			continue;
		}
		getrusage(RUSAGE_SELF, &ru);
		printf("%-28s %10.1f %9llu %9u %12llu %10.1f %8.2f %8.1f %s\n",
		       strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i], st.st_size / 1e6,
		       (unsigned long long)t.fdes, t.nrows, (unsigned long long)uw_table_bytes(&t),
		       best / 1e6, (double)uw_table_bytes(&t) / t.nrows, ru.ru_maxrss / 1024.0,
		       t.source);
		uw_table_done(&t);
	}
	return 0;
}
