/* SPDX-License-Identifier: Apache-2.0 */
/* The one listen-address parser (IPv4, IPv6) and the one token-file reader of both binaries. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <unistd.h>
#include "common/netaddr.h"
#include "test.h"

static bool roundtrip(const char *in, const char *want, bool loopback)
{
	struct sockaddr_storage sa;
	socklen_t len = 0;
	char out[80];

	if (!ASSERT_EQ(parse_listen_addr(in, &sa, &len), 0, in))
		return false;
	return ASSERT_STREQ(format_sockaddr((struct sockaddr *)&sa, out, sizeof(out)), want, in) &&
	       ASSERT_EQ(sockaddr_is_loopback((struct sockaddr *)&sa), loopback, in) &&
	       ASSERT_EQ(len, sa.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) :
							 sizeof(struct sockaddr_in), in);
}

static bool test_netaddr_listen(void)
{
	struct sockaddr_storage sa;
	socklen_t len;
	static const char *const bad[] = {
		"7070", "127.0.0.1", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:65536", "::1:7070",
		"[::1]7070", "[::1", "[nonsense]:1", "host.example:80", "1.2.3.4:-1", "1.2.3:5",
	};

	CHECK(roundtrip("127.0.0.1:7070", "127.0.0.1:7070", true));
	CHECK(roundtrip("localhost:0", "127.0.0.1:0", true));
	CHECK(roundtrip(":7070", "0.0.0.0:7070", false));
	CHECK(roundtrip("*:80", "0.0.0.0:80", false));
	CHECK(roundtrip("10.1.2.3:65535", "10.1.2.3:65535", false));
	CHECK(roundtrip("[::1]:9400", "[::1]:9400", true));
	CHECK(roundtrip("[::]:7070", "[::]:7070", false));
	CHECK(roundtrip("[::ffff:127.0.0.2]:1", "[::ffff:127.0.0.2]:1", true));
	CHECK(roundtrip("[fd00::5]:443", "[fd00::5]:443", false));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(ASSERT_EQ(parse_listen_addr(bad[i], &sa, &len), -EINVAL, bad[i]));
	return true;
}

static bool write_file(const char *path, const char *s, size_t n)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return false;
	fwrite(s, 1, n, f);
	fclose(f);
	return true;
}

static bool test_netaddr_token_file(void)
{
	char path[] = "/tmp/gpuscope-token-XXXXXX", buf[16];
	int fd = mkstemp(path);
	bool ok = false;

	if (!ASSERT_TRUE(fd >= 0, "mkstemp"))
		return false;
	close(fd);
	if (!write_file(path, "s3cret \r\n\n", 10) ||
	    !ASSERT_EQ(read_token_file(path, buf, sizeof(buf)), 6, "trailing space, CRLF trimmed") ||
	    !ASSERT_STREQ(buf, "s3cret", "token"))
		goto out;
	if (!write_file(path, " \n", 2) ||
	    !ASSERT_EQ(read_token_file(path, buf, sizeof(buf)), -ENODATA, "blank file"))
		goto out;
	if (!write_file(path, "0123456789abcdef", 16) ||
	    !ASSERT_EQ(read_token_file(path, buf, sizeof(buf)), -E2BIG, "too long, not cut"))
		goto out;
	if (!write_file(path, "0123456789abcde", 15) ||
	    !ASSERT_EQ(read_token_file(path, buf, sizeof(buf)), 15, "exactly fits"))
		goto out;
	ok = ASSERT_EQ(read_token_file("/nonexistent/token", buf, sizeof(buf)), -ENOENT, "missing");
out:
	unlink(path);
	return ok;
}

TEST_MAIN(T(test_netaddr_listen), T(test_netaddr_token_file))
