/* SPDX-License-Identifier: Apache-2.0 */
/* Unit-test helper: a child program on pipes (its stdin and stdout), waited for its "ready". */
#ifndef GPUSCOPE_TEST_SPAWN_H
#define GPUSCOPE_TEST_SPAWN_H

#include <fcntl.h>
#include <spawn.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/*
 * Starts argv[0] with its stdin and stdout on pipes and reads its stdout into buf (cap bytes,
 * NUL-terminated, *len updated) until it has printed "ready\n". Returns the child's pid with
 * *ret_in (write end of its stdin) and *ret_out (read end of its stdout), or -1.
 */
static inline pid_t spawn_ready(char *const argv[], int *ret_in, int *ret_out, char *buf,
				size_t cap, size_t *len)
{
	posix_spawn_file_actions_t fa;
	int in[2], out[2], err;
	pid_t pid;

	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		return -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	err = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	if (err) {
		close(in[1]);
		close(out[0]);
		return -1;
	}
	buf[*len] = 0;
	while (*len < cap - 1 && !strstr(buf, "ready\n")) {
		ssize_t n = read(out[0], buf + *len, cap - 1 - *len);

		if (n <= 0)
			break;
		*len += n;
		buf[*len] = 0;
	}
	*ret_in = in[1];
	*ret_out = out[0];
	return pid;
}

#endif
