/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit-test helpers of the trace-window tests (test_cupti_window.c, test_cupti_winworker.c):
 * where the built workloads are, and reading a decoded batch's intervals.
 */
#ifndef GPUSCOPE_TEST_CUPTI_TEST_H
#define GPUSCOPE_TEST_CUPTI_TEST_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "gpuscope/v1/batch.pb-c.h"

/*
 * .output/tests (this binary's folder's parent) into dir. Returns 0 when the window tests can
 * run, 1 with *ret_why set when they cannot here (no root, no CUDA toolkit), -1 on error.
 */
static inline int cupti_test_dir(char *dir, size_t cap, const char **ret_why)
{
	char self[512], lib[700];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return -1;
	self[n] = 0;
	*strrchr(self, '/') = 0;	/* .output/tests/unit */
	*strrchr(self, '/') = 0;	/* .output/tests */
	snprintf(dir, cap, "%s", self);
	snprintf(lib, sizeof(lib), "%s/../libgpuscope_cupti.so", dir);
	if (geteuid() != 0 || access(lib, R_OK)) {
		*ret_why = geteuid() ? "needs root for eBPF" : "no CUDA toolkit (no library)";
		return 1;
	}
	return 0;
}

/*
 * Closes the workload's stdin (in; it exits then), reads its stdout (out) to the end and copies
 * what follows its "final " into final (empty when it printed none). Closes both.
 */
static inline void cupti_test_final(int in, int out, char *final, size_t cap)
{
	char buf[4096];
	size_t len = 0;

	close(in);
	buf[0] = final[0] = 0;
	for (;;) {
		ssize_t n = read(out, buf + len, sizeof(buf) - 1 - len);

		if (n <= 0)
			break;
		len += n;
		buf[len] = 0;
	}
	if (strstr(buf, "final "))
		snprintf(final, cap, "%s", strstr(buf, "final ") + 5);
	close(out);
}

static inline const char *S(const Gpuscope__V1__Batch *m, uint32_t i)
{
	return i < m->n_strings ? m->strings[i] : "(bad)";
}

/* An interval's attr; "stack_id" is its Interval.stack (batch version 2) as a decimal index. */
static inline const char *attr(const Gpuscope__V1__Batch *m, const Gpuscope__V1__Interval *iv,
			       const char *name)
{
	static char sid[24];

	if (!strcmp(name, "stack_id")) {
		if (!iv->stack)
			return NULL;
		snprintf(sid, sizeof(sid), "%u", iv->stack - 1);
		return sid;
	}
	for (size_t i = 0; i + 1 < iv->n_attrs; i += 2)
		if (!strcmp(S(m, iv->attrs[i]), name))
			return S(m, iv->attrs[i + 1]);
	return NULL;
}

#endif
