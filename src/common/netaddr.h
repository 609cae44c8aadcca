/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What both binaries need to listen and to authenticate: one listen-address parser (IPv4 and
 * IPv6) with its formatter, and one reader of bearer-token files.
 */
#ifndef GPUSCOPE_NETADDR_H
#define GPUSCOPE_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/*
 * Parses a listen address: "127.0.0.1:7070", "[::1]:7070", "[::]:7070" (all addresses, IPv6 and
 * IPv4), "localhost:7070" (127.0.0.1), ":7070" or "*:7070" (every IPv4 address). Port 0 asks the
 * kernel for a free port. 0 with *ret and *ret_len set, or -EINVAL.
 */
int parse_listen_addr(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len);

/* "127.0.0.1:7070" or "[::1]:7070" into buf (46 + 8 bytes suffice); returns buf. */
char *format_sockaddr(const struct sockaddr *sa, char *buf, size_t len);

/* Whether the address only reaches this machine (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104). */
bool sockaddr_is_loopback(const struct sockaddr *sa);

/*
 * Reads a bearer token from a file: the whole file, trailing whitespace (newline) trimmed, into
 * buf (NUL-terminated). Returns the token's length, -errno when the file cannot be read,
 * -ENODATA when it is empty, -E2BIG when the token does not fit in len - 1 bytes.
 */
int read_token_file(const char *path, char *buf, size_t len);

#endif
