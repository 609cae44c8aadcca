/* SPDX-License-Identifier: Apache-2.0 */
/* Small libbpf helpers shared by the agent's BPF modules; the BPF counter name table. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "agent/agent.h"
#include "agent/bpfutil.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"

static const char *const prog_names[GPUSCOPE_COUNTER_SETS] = {
	[GPUSCOPE_PROG_CPU] = "cpu",
	[GPUSCOPE_PROG_SCHED] = "sched",
	[GPUSCOPE_PROG_CUDA] = "cuda",
	[GPUSCOPE_PROG_CUPTI] = "cupti",
	[GPUSCOPE_WALKER_UNWIND] = "unwind",
	[GPUSCOPE_WALKER_PYTHON] = "python",
};

struct counter {
	const char *name;
	bool event;	/* normal work, not an error */
};

/* The name tables, made from the registry's lists (common/abi.h) as the enums are. */
#define GPUSCOPE_ERROR 0
#define GPUSCOPE_EVENT 1
#define NAME(code, num, label, kind) [num] = { label, GPUSCOPE_##kind },
static const struct counter counters[GPUSCOPE_ERR_MAX] = { GPUSCOPE_ERRORS(NAME) };
static const struct counter unwind_counters[UNWIND_ST_MAX] = { GPUSCOPE_UNWIND_STATS(NAME) };
static const struct counter py_counters[GPUSCOPE_PY_STAT_MAX] = { GPUSCOPE_PY_STATS(NAME) };
#undef NAME

/* Each set's keys in its map: a program's range of the `errors` map, a walker's whole map. */
static const struct {
	const struct counter *c;	/* indexed by key */
	unsigned first, end;
} sets[GPUSCOPE_COUNTER_SETS] = {
#define RANGE(p) [p] = { counters, (p) * GPUSCOPE_PROG_RANGE, ((p) + 1) * GPUSCOPE_PROG_RANGE }
	RANGE(GPUSCOPE_PROG_CPU), RANGE(GPUSCOPE_PROG_SCHED), RANGE(GPUSCOPE_PROG_CUDA),
	RANGE(GPUSCOPE_PROG_CUPTI),
#undef RANGE
	[GPUSCOPE_WALKER_UNWIND] = { unwind_counters, 0, UNWIND_ST_MAX },
	[GPUSCOPE_WALKER_PYTHON] = { py_counters, 0, GPUSCOPE_PY_STAT_MAX },
};

static int counter_fds[GPUSCOPE_COUNTER_SETS] = { -1, -1, -1, -1, -1, -1 };

uint64_t bpf_percpu_sum(int map_fd, uint32_t key)
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t sum = 0, *vals;

	if (ncpu <= 0)
		return 0;
	vals = calloc(ncpu, sizeof(*vals));
	if (vals && !bpf_map_lookup_elem(map_fd, &key, vals))
		for (int i = 0; i < ncpu; i++)
			sum += vals[i];
	free(vals);
	return sum;
}

const char *bpf_prog_name(unsigned prog)
{
	return prog < GPUSCOPE_COUNTER_SETS ? prog_names[prog] : NULL;
}

const char *bpf_set_counter_name(unsigned set, unsigned key, bool *ret_is_error)
{
	const struct counter *c;

	if (set >= GPUSCOPE_COUNTER_SETS || key < sets[set].first || key >= sets[set].end)
		return NULL;
	c = &sets[set].c[key];
	if (c->name && ret_is_error)
		*ret_is_error = !c->event;
	return c->name;
}

const char *bpf_counter_name(unsigned code, bool *ret_is_error)
{
	return bpf_set_counter_name(code / GPUSCOPE_PROG_RANGE, code, ret_is_error);
}

void bpf_counters__set(unsigned set, int map_fd)
{
	if (set < GPUSCOPE_COUNTER_SETS)
		counter_fds[set] = map_fd;
}

void bpf_counters__drop(unsigned set, int map_fd)
{
	if (set < GPUSCOPE_COUNTER_SETS && counter_fds[set] == map_fd)
		counter_fds[set] = -1;
}

static void family(FILE *out, bool errors)
{
	const char *name = errors ? "gpuscope_agent_bpf_errors_total" :
				    "gpuscope_agent_bpf_events_total";

	prom_family(out, name, "counter",
		    errors ? "Failures inside the BPF programs (events or stacks lost), by program." :
			     "Work counted inside the BPF programs, by program.");
	for (unsigned p = 0; p < GPUSCOPE_COUNTER_SETS; p++) {
		if (counter_fds[p] < 0)
			continue;
		for (unsigned k = sets[p].first; k < sets[p].end; k++) {
			bool is_error;
			const char *n = bpf_set_counter_name(p, k, &is_error);

			if (!n || is_error != errors)
				continue;
			prom_sample_u64(out, name,
					(struct prom_label[]){ { "program", prog_names[p] },
							       { errors ? "error" : "event", n } },
					2, bpf_percpu_sum(counter_fds[p], k));
		}
	}
}

void bpf_counters__metrics(FILE *out)
{
	family(out, true);
	family(out, false);
}

/* The in_sync map: as sched.bpf.c and cudaprobe.bpf.c declare it (tid -> 1). */
#define IN_SYNC_MAX 16384

int bpf_shared_maps__create(struct agent_shared *sh)
{
	int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "in_sync", sizeof(__u32), sizeof(__u8),
				IN_SYNC_MAX, NULL);

	if (fd < 0)
		return -errno;
	sh->in_sync_map_fd = fd;
	return 0;
}

void bpf_shared_maps__free(struct agent_shared *sh)
{
	if (!sh)
		return;
	if (sh->in_sync_map_fd > 0)
		close(sh->in_sync_map_fd);
	sh->in_sync_map_fd = 0;
}

int bpf_load_error(const char *module, int err)
{
	if (err == -EPERM)
		return err;
	log_error("%s: the kernel refused its BPF programs (%s); running without this module "
		  "(-v prints the kernel's reasons)", module, strerror(-err));
	return -ENOEXEC;
}

/*
 * What the kernel accounts for every BPF program this process holds, found by the process's own
 * fds (every module's programs, without a registry): the runs it skipped because another BPF
 * program was running on that CPU (always kept: each is an event lost, e.g. a switch-in the
 * sched programs never saw, which they then count as switch_in_unseen), and the run time and runs
 * (bpf_prog_info.run_time_ns / run_cnt, kept only while kernel.bpf_stats_enabled is 1): what
 * the agent costs the profiled threads, in whose context most of the programs run.
 */
void bpf_prog_stats__metrics(FILE *out)
{
	static const char *const help[] = {
		"Seconds the agent's BPF programs ran (kernel.bpf_stats_enabled=1; else absent).",
		"Runs of the agent's BPF programs (kernel.bpf_stats_enabled=1; else absent).",
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
	prom_gauge(out, "gpuscope_agent_bpf_stats_enabled",
		   "1 if the kernel accounts BPF run time (kernel.bpf_stats_enabled).", enabled);
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
