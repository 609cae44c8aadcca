/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Minimal test harness for unit tests: each test is `static bool test_<module>_<case>(void)`,
 * listed in a TESTS(...) table; main() runs them all and prints "N passed, N failed".
 */
#ifndef GPUSCOPE_TEST_H
#define GPUSCOPE_TEST_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define ASSERT_TRUE(cond, what)                                                                   \
	({                                                                                         \
		bool ok_ = !!(cond);                                                               \
		if (!ok_)                                                                          \
			fprintf(stderr, "  %s:%d: %s: '%s' is false\n", __FILE__, __LINE__, what,  \
				#cond);                                                            \
		ok_;                                                                               \
	})
#define ASSERT_EQ(act, exp, what)                                                                 \
	({                                                                                         \
		long long a_ = (long long)(act), e_ = (long long)(exp);                           \
		if (a_ != e_)                                                                      \
			fprintf(stderr, "  %s:%d: %s: got %lld, want %lld\n", __FILE__, __LINE__,  \
				what, a_, e_);                                                     \
		a_ == e_;                                                                          \
	})
#define ASSERT_STREQ(act, exp, what)                                                              \
	({                                                                                         \
		const char *a_ = (act), *e_ = (exp);                                               \
		bool ok_ = a_ && e_ && !strcmp(a_, e_);                                            \
		if (!ok_)                                                                          \
			fprintf(stderr, "  %s:%d: %s: got '%s', want '%s'\n", __FILE__, __LINE__,  \
				what, a_ ? a_ : "(null)", e_ ? e_ : "(null)");                     \
		ok_;                                                                               \
	})
#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			return false;                                                              \
	} while (0)

struct test_case {
	const char *name;
	bool (*fn)(void);
};
#define T(fn) { #fn, fn }

static inline int test_main(const struct test_case *tc, int n, int argc, char **argv)
{
	int passed = 0, failed = 0;

	for (int i = 0; i < n; i++) {
		if (argc > 1 && !strstr(tc[i].name, argv[1]))
			continue;
		bool ok = tc[i].fn();

		printf("%s %s\n", ok ? "ok  " : "FAIL", tc[i].name);
		fflush(stdout);
		ok ? passed++ : failed++;
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
#define TEST_MAIN(...)                                                                             \
	int main(int argc, char **argv)                                                            \
	{                                                                                          \
		static const struct test_case tc_[] = { __VA_ARGS__ };                             \
		return test_main(tc_, (int)(sizeof(tc_) / sizeof(tc_[0])), argc, argv);           \
	}

#endif
