/* SPDX-License-Identifier: Apache-2.0 */
/* Listen-address parsing and formatting, and the token-file reader; see netaddr.h. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/netaddr.h"

int parse_listen_addr(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len)
{
	const char *colon, *host_start = s;
	char host[INET6_ADDRSTRLEN + 1];
	unsigned long port;
	size_t hl;
	char *end;

	memset(ret, 0, sizeof(*ret));
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -EINVAL;
		host_start = s + 1;
		hl = (size_t)(rb - host_start);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || memchr(s, ':', (size_t)(colon - s)))
			return -EINVAL;	/* bare IPv6 needs brackets */
		hl = (size_t)(colon - s);
	}
	if (hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, host_start, hl);
	host[hl] = 0;
	if (!colon[1] || !isdigit((unsigned char)colon[1]))
		return -EINVAL;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || port > 65535)
		return -EINVAL;
	if (s[0] == '[') {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ret;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			return -EINVAL;
		*ret_len = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)ret;

		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (!*host || !strcmp(host, "*"))
			a->sin_addr.s_addr = htonl(INADDR_ANY);
		else if (!strcmp(host, "localhost"))
			a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		else if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			return -EINVAL;
		*ret_len = sizeof(*a);
	}
	return 0;
}

char *format_sockaddr(const struct sockaddr *sa, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%u", host, ntohs(a->sin6_port));
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ntohs(a->sin_port));
	} else {
		snprintf(buf, len, "(address family %d)", sa->sa_family);
	}
	return buf;
}

bool sockaddr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

int read_token_file(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd, err;
	char extra;

	if (len < 2)
		return -E2BIG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	err = n < 0 ? -errno : 0;
	/* A file longer than the buffer would be cut silently; say so instead. */
	if (!err && (size_t)n == len - 1 && read(fd, &extra, 1) == 1)
		err = -E2BIG;
	close(fd);
	if (err)
		return err;
	while (n > 0 && isspace((unsigned char)buf[n - 1]))
		n--;
	buf[n] = 0;
	return n ? (int)n : -ENODATA;
}
