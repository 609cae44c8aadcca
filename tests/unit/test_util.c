/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/common/util.c: durations, times, clocks. */
#include <errno.h>
#include "test.h"
#include "common/util.h"

static bool test_util_duration(void)
{
	uint64_t ns = 0;

	CHECK(ASSERT_EQ(parse_duration_ns("500ms", &ns), 0, "500ms") && ASSERT_EQ(ns, 500000000, "ns"));
	CHECK(ASSERT_EQ(parse_duration_ns("5s", &ns), 0, "5s") && ASSERT_EQ(ns, 5000000000ULL, "ns"));
	CHECK(ASSERT_EQ(parse_duration_ns("10m", &ns), 0, "10m") && ASSERT_EQ(ns, 600000000000ULL, "ns"));
	CHECK(ASSERT_EQ(parse_duration_ns("1h", &ns), 0, "1h") && ASSERT_EQ(ns, 3600000000000ULL, "ns"));
	CHECK(ASSERT_EQ(parse_duration_ns("2", &ns), 0, "bare") && ASSERT_EQ(ns, 2000000000ULL, "ns"));
	CHECK(ASSERT_EQ(parse_duration_ns("1.5", &ns), 0, "frac") && ASSERT_EQ(ns, 1500000000ULL, "ns"));
	CHECK(ASSERT_EQ(parse_duration_ns("250us", &ns), 0, "us") && ASSERT_EQ(ns, 250000, "ns"));
	CHECK(ASSERT_EQ(parse_duration_ns("", &ns), -EINVAL, "empty"));
	CHECK(ASSERT_EQ(parse_duration_ns("-1s", &ns), -EINVAL, "negative"));
	CHECK(ASSERT_EQ(parse_duration_ns("5 s", &ns), -EINVAL, "space"));
	CHECK(ASSERT_EQ(parse_duration_ns("5x", &ns), -EINVAL, "unit"));
	CHECK(ASSERT_EQ(parse_duration_ns("abc", &ns), -EINVAL, "junk"));
	CHECK(ASSERT_EQ(parse_duration_ns("1e30h", &ns), -EINVAL, "overflow"));
	return true;
}

static bool test_util_size(void)
{
	uint64_t v = 0;

	CHECK(ASSERT_EQ(parse_size_bytes("4096", &v), 0, "bare") && ASSERT_EQ(v, 4096, "bytes"));
	CHECK(ASSERT_EQ(parse_size_bytes("64KiB", &v), 0, "KiB") && ASSERT_EQ(v, 65536, "bytes"));
	CHECK(ASSERT_EQ(parse_size_bytes("512MiB", &v), 0, "MiB") && ASSERT_EQ(v, 512ULL << 20, "bytes"));
	CHECK(ASSERT_EQ(parse_size_bytes("1G", &v), 0, "G") && ASSERT_EQ(v, 1ULL << 30, "bytes"));
	CHECK(ASSERT_EQ(parse_size_bytes("10MB", &v), 0, "MB") && ASSERT_EQ(v, 10000000, "bytes"));
	CHECK(ASSERT_EQ(parse_size_bytes("1.5KiB", &v), 0, "fraction") && ASSERT_EQ(v, 1536, "bytes"));
	CHECK(ASSERT_EQ(parse_size_bytes("-1", &v), -EINVAL, "negative"));
	CHECK(ASSERT_EQ(parse_size_bytes("12 MiB", &v), -EINVAL, "space"));
	CHECK(ASSERT_EQ(parse_size_bytes("12Mb", &v), -EINVAL, "unit"));
	CHECK(ASSERT_EQ(parse_size_bytes("", &v), -EINVAL, "empty"));
	return true;
}

static bool test_util_time(void)
{
	uint64_t ns = 0;

	CHECK(ASSERT_EQ(parse_time_ns("1764669720", &ns), 0, "unix") &&
	      ASSERT_EQ(ns, 1764669720ULL * NSEC_PER_SEC, "ns"));
	CHECK(ASSERT_EQ(parse_time_ns("1970-01-01T00:00:10Z", &ns), 0, "rfc") && ASSERT_EQ(ns, 10 * NSEC_PER_SEC, "ns"));
	CHECK(ASSERT_EQ(parse_time_ns("1970-01-01T01:00:10.25+01:00", &ns), 0, "offset") &&
	      ASSERT_EQ(ns, 10 * NSEC_PER_SEC + 250000000, "ns"));
	CHECK(ASSERT_EQ(parse_time_ns("2026-12-02T10:02:00Z", &ns), 0, "2026") &&
	      ASSERT_EQ(ns, 1796205720ULL * NSEC_PER_SEC, "ns"));
	CHECK(ASSERT_EQ(parse_time_ns("2026-13-02T10:02:00Z", &ns), -EINVAL, "month"));
	CHECK(ASSERT_EQ(parse_time_ns("2026-12-02T10:02:00", &ns), -EINVAL, "no zone"));
	CHECK(ASSERT_EQ(parse_time_ns("yesterday", &ns), -EINVAL, "junk"));
	return true;
}

static bool test_util_clock_offset(void)
{
	int64_t off = mono_to_wall_offset_ns();
	int64_t diff = (int64_t)wall_ns() - (int64_t)(mono_ns() + off);

	return ASSERT_TRUE(diff > -1000000 && diff < 1000000, "offset within 1 ms");
}

TEST_MAIN(T(test_util_duration), T(test_util_size), T(test_util_time), T(test_util_clock_offset))
