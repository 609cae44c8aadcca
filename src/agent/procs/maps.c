// SPDX-License-Identifier: Apache-2.0
/* /proc/PID/maps for every feature of the agent: parsing, walking, library discovery (maps.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "agent/procs/maps.h"

/* Parses any mapping's line: 1, or 0 when malformed. */
static int parse_line(char *line, struct maps_line *m)
{
	char *p = line, *end, perms[5];
	unsigned maj, min;
	size_t len;
	int f;

	memset(m, 0, sizeof(*m));
	m->start = strtoull(p, &end, 16);
	if (*end != '-')
		return 0;
	m->end = strtoull(end + 1, &p, 16);
	if (*p != ' ' || sscanf(p, " %4s %" SCNx64 " %x:%x %" SCNu64, perms, &m->pgoff, &maj, &min,
				&m->ino) != 5)
		return 0;
	if (strlen(perms) < 3 || m->end <= m->start)
		return 0;
	m->exec = perms[2] == 'x';
	m->dev = ((uint64_t)maj << 32) | min;
	/* The path follows perms, offset, dev and inode. */
	for (f = 0; f < 4 && *p; f++) {
		while (*p == ' ')
			p++;
		while (*p && *p != ' ')
			p++;
	}
	while (*p == ' ')
		p++;
	len = strlen(p);
	while (len && (p[len - 1] == '\n' || p[len - 1] == ' '))
		p[--len] = 0;
	if (len > 10 && !strcmp(p + len - 10, " (deleted)")) {
		p[len - 10] = 0;
		m->deleted = true;
	}
	m->path = p;
	return 1;
}

int maps_parse_line(char *line, struct maps_line *m)
{
	return parse_line(line, m) > 0 && m->exec;
}

int maps_each(pid_t pid, unsigned flags, int (*fn)(const struct maps_line *l, void *ctx),
	      void *ctx)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	struct maps_line l;
	int ret = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	while (!ret && getline(&line, &cap, f) > 0) {
		if (parse_line(line, &l) <= 0 || (!l.exec && !(flags & MAPS_ALL)))
			continue;
		ret = fn(&l, ctx);
	}
	if (!ret && ferror(f))
		ret = -EIO;
	free(line);
	fclose(f);
	return ret;
}

bool maps_lib_named(const char *path, const char *prefix)
{
	const char *base = strrchr(path, '/');

	return base && !strncmp(base + 1, prefix, strlen(prefix));
}

struct find_lib {
	const char *prefix;
	struct maps_lib *ret;
};

static int find_lib_one(const struct maps_line *l, void *ctx)
{
	struct find_lib *q = ctx;

	if (l->path[0] != '/' || !maps_lib_named(l->path, q->prefix))
		return 0;
	q->ret->start = l->start;
	q->ret->end = l->end;
	q->ret->deleted = l->deleted;
	snprintf(q->ret->path, sizeof(q->ret->path), "%s", l->path);
	return 1;
}

int maps_find_lib(pid_t pid, const char *prefix, struct maps_lib *ret)
{
	struct find_lib q = { prefix, ret };

	return maps_each(pid, 0, find_lib_one, &q);
}

int maps_open_file(pid_t pid, uint64_t start, uint64_t end, const char *mpath, bool deleted,
		   struct stat *ret_st)
{
	char path[PATH_MAX + 64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, start, end);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && !deleted) {
		snprintf(path, sizeof(path), "/proc/%d/root%s", pid, mpath);
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0)
		return -errno;
	if (ret_st && fstat(fd, ret_st)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}
