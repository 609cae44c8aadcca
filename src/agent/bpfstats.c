/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the kernel accounts for the agent's BPF programs (bpfstats.h): run time and runs while
 * BPF statistics are on, recursion misses always; the statistics held on by the agent itself.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <linux/bpf.h>
#include "agent/bpfstats.h"
#include "common/prom.h"
#include "common/util.h"

static int stats_fd = -1;

int bpf_stats__hold(void)
{
	int fd;

	if (stats_fd >= 0)
		return 0;
	fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (fd < 0)
		return fd < -1 ? fd : -errno;
	stats_fd = fd;
	return 0;
}

void bpf_stats__release(void)
{
	if (stats_fd >= 0)
		close(stats_fd);
	stats_fd = -1;
}

/*
 * What the kernel accounts for every BPF program this process holds, found by the process's own
 * fds (every module's programs, without a registry): the runs it skipped because another BPF
 * program was running on that CPU (always kept: each is an event lost, e.g. a switch-in the
 * sched programs never saw, which they then count as switch_in_unseen), and the run time and runs
 * (bpf_prog_info.run_time_ns / run_cnt, kept only while kernel.bpf_stats_enabled is 1 or some process, this one with --bpf-stats,
 * holds a BPF_ENABLE_STATS fd): what
 * the agent costs the profiled threads, in whose context most of the programs run.
 */
void bpf_prog_stats__metrics(FILE *out)
{
	static const char *const help[] = {
		"Seconds the agent's BPF programs ran (kernel.bpf_stats_enabled=1 or --bpf-stats; "
		"else absent).",
		"Runs of the agent's BPF programs (kernel.bpf_stats_enabled=1 or --bpf-stats; else "
		"absent).",
		"Runs of the agent's BPF programs the kernel skipped because another BPF program was "
		"running on that CPU (the events they would have handled are lost).",
	};
	struct { uint32_t id; char name[BPF_OBJ_NAME_LEN]; uint64_t ns, runs, missed; } p[64];
	size_t n = 0;
	FILE *f = fopen("/proc/sys/kernel/bpf_stats_enabled", "re");
	int enabled = 0;
	DIR *d;
	struct dirent *de;

	if (f) {
		if (fscanf(f, "%d", &enabled) != 1)
			enabled = 0;
		fclose(f);
	}
	/* the sysctl reads 0 while only a BPF_ENABLE_STATS fd holds the accounting on */
	enabled = enabled || stats_fd >= 0;
	prom_gauge(out, "gpuscope_agent_bpf_stats_enabled",
		   "1 if the kernel accounts BPF run time (kernel.bpf_stats_enabled, or the "
		   "agent's --bpf-stats).", enabled);
	if (!(d = opendir("/proc/self/fd")))
		return;
	while ((de = readdir(d)) && n < ARRAY_SIZE(p)) {
		char path[300], link[64];
		struct bpf_prog_info info = { 0 };
		uint32_t len = sizeof(info);
		ssize_t k;
		size_t i;
		int fd = atoi(de->d_name);

		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		k = readlink(path, link, sizeof(link) - 1);
		if (k <= 0)
			continue;
		link[k] = 0;
		if (strcmp(link, "anon_inode:bpf-prog") || bpf_obj_get_info_by_fd(fd, &info, &len))
			continue;
		for (i = 0; i < n && p[i].id != info.id; i++)
			;
		if (i < n)
			continue;	/* one program, several fds */
		p[n].id = info.id;
		snprintf(p[n].name, sizeof(p[n].name), "%s", info.name);
		p[n].ns = info.run_time_ns;
		p[n].runs = info.run_cnt;
		p[n].missed = info.recursion_misses;
		n++;
	}
	closedir(d);
	for (int fam = enabled ? 0 : 2; fam < 3; fam++) {
		static const char *const names[] = { "gpuscope_agent_bpf_run_seconds_total",
						     "gpuscope_agent_bpf_runs_total",
						     "gpuscope_agent_bpf_recursion_misses_total" };

		prom_family(out, names[fam], "counter", help[fam]);
		for (size_t i = 0; i < n; i++) {
			char id[16];
			struct prom_label l[] = { { "program", p[i].name }, { "id", id } };

			snprintf(id, sizeof(id), "%u", p[i].id);
			if (fam == 0)
				prom_sample(out, names[fam], l, 2, p[i].ns / 1e9);
			else
				prom_sample_u64(out, names[fam], l, 2, fam == 1 ? p[i].runs : p[i].missed);
		}
	}
}
