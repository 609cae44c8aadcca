// SPDX-License-Identifier: Apache-2.0
/*
 * Why did a thread block? Classifies the kernel stack at the switch-out by the names of the
 * wait functions in it (a small table of kernel address ranges read once from /proc/kallsyms),
 * falling back on the syscall the thread was in.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "agent/sched/strips.h"
#include "common/log.h"
#include "common/util.h"

struct krange {
	uint64_t start, end;
	enum blocked_reason reason;
};

static struct krange *ranges;
static size_t nranges;
static int refs;

static const char *const reason_names[BLOCKED_MAX] = {
	[BLOCKED_OTHER] = "other", [BLOCKED_FUTEX] = "futex", [BLOCKED_LOCK] = "lock",
	[BLOCKED_IO] = "io",	   [BLOCKED_SLEEP] = "sleep", [BLOCKED_POLL] = "poll",
	[BLOCKED_CUDA_SYNC] = "cuda_sync",
};

const char *blocked_reason_name(enum blocked_reason r)
{
	return r < BLOCKED_MAX ? reason_names[r] : "other";
}

static bool has_prefix(const char *s, const char *p)
{
	return !strncmp(s, p, strlen(p));
}

enum blocked_reason blocked__classify_name(const char *fn)
{
	static const struct {
		const char *prefix;
		enum blocked_reason r;
	} rules[] = {
		{ "futex_", BLOCKED_FUTEX },	   { "__futex_", BLOCKED_FUTEX },
		{ "do_futex", BLOCKED_FUTEX },	   { "do_nanosleep", BLOCKED_SLEEP },
		{ "hrtimer_nanosleep", BLOCKED_SLEEP }, { "common_nsleep", BLOCKED_SLEEP },
		{ "msleep", BLOCKED_SLEEP },	   { "do_sys_poll", BLOCKED_POLL },
		{ "do_select", BLOCKED_POLL },	   { "core_sys_select", BLOCKED_POLL },
		{ "ep_poll", BLOCKED_POLL },	   { "do_epoll_wait", BLOCKED_POLL },
		{ "io_schedule", BLOCKED_IO },	   { "folio_wait", BLOCKED_IO },
		{ "__folio_lock", BLOCKED_IO },	   { "wait_on_page", BLOCKED_IO },
		{ "blk_", BLOCKED_IO },		   { "pipe_read", BLOCKED_IO },
		{ "pipe_write", BLOCKED_IO },	   { "unix_stream_read", BLOCKED_IO },
		{ "sk_wait_data", BLOCKED_IO },	   { "tcp_recvmsg", BLOCKED_IO },
		{ "wait_woken", BLOCKED_IO },	   { "n_tty_read", BLOCKED_IO },
		{ "filemap_fault", BLOCKED_IO },   { "jbd2_", BLOCKED_IO },
		{ "mutex_lock", BLOCKED_LOCK },	   { "__mutex_lock", BLOCKED_LOCK },
		{ "rwsem_down", BLOCKED_LOCK },	   { "down_read", BLOCKED_LOCK },
		{ "down_write", BLOCKED_LOCK },	   { "__down", BLOCKED_LOCK },
		{ "rt_mutex", BLOCKED_LOCK },	   { "percpu_rwsem", BLOCKED_LOCK },
	};

	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		if (has_prefix(fn, rules[i].prefix))
			return rules[i].r;
	return BLOCKED_MAX;
}

static int cmp_range(const void *a, const void *b)
{
	const struct krange *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

int blocked__init(void)
{
	FILE *f;
	char line[512];
	size_t cap = 0;
	size_t pending = (size_t)-1;	/* last matched symbol, waiting for its end */
	int err = 0;

	if (refs++)
		return 0;
	f = fopen("/proc/kallsyms", "re");
	if (!f) {
		err = -errno;
		goto out;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long addr;
		char type, *name, *end;
		enum blocked_reason r;

		/* "ffffffff8226d280 t do_nanosleep\t[module]" */
		addr = strtoull(line, &end, 16);
		if (end[0] != ' ' || !end[1] || end[2] != ' ')
			continue;
		type = end[1];
		if (type != 't' && type != 'T')
			continue;
		name = end + 3;
		name[strcspn(name, " \t\n")] = 0;
		if (pending != (size_t)-1 && addr > ranges[pending].start) {
			ranges[pending].end = addr;
			pending = (size_t)-1;
		}
		/* kallsyms is sorted by address for text symbols; a range ends at the next one */
		r = blocked__classify_name(name);
		if (r == BLOCKED_MAX || !addr)
			continue;
		if (array_reserve(&ranges, &cap, nranges + 1, sizeof(*ranges), 256)) {
			err = -ENOMEM;
			goto out_close;
		}
		ranges[nranges] = (struct krange){ .start = addr, .end = 0, .reason = r };
		pending = nranges++;
	}
	for (size_t i = 0; i < nranges; i++)	/* a last symbol without a successor: 4 KiB */
		if (!ranges[i].end || ranges[i].end - ranges[i].start > 65536)
			ranges[i].end = ranges[i].start + 4096;
	qsort(ranges, nranges, sizeof(*ranges), cmp_range);
	if (nranges && ranges[0].start == 0)
		log_warn("kallsyms addresses are hidden (kptr_restrict): blocked reasons by syscall only");
	log_debug("blocked: %zu kernel wait functions", nranges);
out_close:
	fclose(f);
out:
	if (err) {
		refs--;
		free(ranges);
		ranges = NULL;
		nranges = 0;
	}
	return err;
}

uint64_t blocked__some_kernel_address(void)
{
	return nranges ? ranges[0].start : 0;
}

void blocked__done(void)
{
	if (!refs || --refs)
		return;
	free(ranges);
	ranges = NULL;
	nranges = 0;
}

static enum blocked_reason lookup(uint64_t ip)
{
	size_t lo = 0, hi = nranges;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (ip < ranges[mid].start)
			hi = mid;
		else if (ip >= ranges[mid].end)
			lo = mid + 1;
		else
			return ranges[mid].reason;
	}
	return BLOCKED_MAX;
}

static enum blocked_reason by_syscall(int nr)
{
#if defined(__x86_64__)
	switch (nr) {
	case 202: case 449:					/* futex, futex_waitv */
		return BLOCKED_FUTEX;
	case 35: case 230:					/* nanosleep, clock_nanosleep */
		return BLOCKED_SLEEP;
	case 7: case 23: case 232: case 270: case 271: case 281: case 441:	/* poll .. epoll_pwait2 */
		return BLOCKED_POLL;
	case 0: case 1: case 17: case 18: case 19: case 20: case 295: case 296:	/* read .. pwritev */
	case 42: case 43: case 44: case 45: case 46: case 47: case 288:	/* sockets */
	case 74: case 75: case 257: case 426:			/* fsync, fdatasync, openat, io_uring */
		return BLOCKED_IO;
	}
#else
	(void)nr;
#endif
	return BLOCKED_OTHER;
}

enum blocked_reason blocked__classify(const unsigned long long *kframes, int nk, int syscall_nr,
				      bool in_cuda_sync)
{
	if (in_cuda_sync)
		return BLOCKED_CUDA_SYNC;
	for (int i = 0; i < nk; i++) {
		enum blocked_reason r = lookup(kframes[i]);

		if (r != BLOCKED_MAX)
			return r;
	}
	return by_syscall(syscall_nr);
}
