/* SPDX-License-Identifier: Apache-2.0 */
/* Small libbpf helpers shared by the agent's BPF modules; the BPF counter name table. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "agent/bpfutil.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"

static const char *const prog_names[GPUSCOPE_PROG_MAX] = {
	[GPUSCOPE_PROG_CPU] = "cpu",
	[GPUSCOPE_PROG_SCHED] = "sched",
	[GPUSCOPE_PROG_CUDA] = "cuda",
	[GPUSCOPE_PROG_CUPTI] = "cupti",
};

/* The one name table of enum gpuscope_err; .event: normal work, not an error. */
static const struct {
	const char *name;
	bool event;
} counters[GPUSCOPE_ERR_MAX] = {
	[GPUSCOPE_ERR_RINGBUF_FULL] = { "ringbuf_full" },
	[GPUSCOPE_ERR_USTACK] = { "ustack" },
	[GPUSCOPE_ERR_KSTACK] = { "kstack" },
	[GPUSCOPE_ERR_FILTERED] = { "filtered", true },
	[GPUSCOPE_ERR_SAMPLES] = { "samples", true },

	[GPUSCOPE_SERR_RINGBUF_FULL] = { "ringbuf_full" },
	[GPUSCOPE_SERR_KSTACK] = { "kstack" },
	[GPUSCOPE_SERR_USTACK] = { "ustack" },
	[GPUSCOPE_SERR_THREADS_FULL] = { "threads_full" },
	[GPUSCOPE_SERR_AGG_FULL] = { "offcpu_map_full" },
	[GPUSCOPE_SERR_SUMMARY] = { "folded", true },
	[GPUSCOPE_SERR_RACE] = { "woken_on_cpu", true },
	[GPUSCOPE_SERR_SWITCH_IN_UNSEEN] = { "switch_in_unseen" },

	[GPUSCOPE_CERR_RINGBUF_FULL] = { "ringbuf_full" },
	[GPUSCOPE_CERR_USTACK] = { "ustack" },
	[GPUSCOPE_CERR_AGG_FULL] = { "map_full" },
	[GPUSCOPE_CERR_NEST] = { "nested", true },

	[GPUSCOPE_CUPTI_ERR_RINGBUF] = { "ringbuf_full" },
	[GPUSCOPE_CUPTI_ERR_RECS_LOST] = { "records_lost" },
	[GPUSCOPE_CUPTI_ERR_USTACK] = { "ustack" },
	[GPUSCOPE_CUPTI_ERR_READ] = { "read" },
	[GPUSCOPE_CUPTI_ERR_TRUNC] = { "truncated" },
	[GPUSCOPE_CUPTI_ERR_LAUNCHES] = { "launches", true },
	[GPUSCOPE_CUPTI_ERR_BACKWARDS] = { "backwards", true },
};

static int counter_fds[GPUSCOPE_PROG_MAX] = { -1, -1, -1, -1 };

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
	return prog < GPUSCOPE_PROG_MAX ? prog_names[prog] : NULL;
}

const char *bpf_counter_name(unsigned code, bool *ret_is_error)
{
	if (code >= GPUSCOPE_ERR_MAX || !counters[code].name)
		return NULL;
	if (ret_is_error)
		*ret_is_error = !counters[code].event;
	return counters[code].name;
}

void bpf_counters__set(enum gpuscope_prog prog, int map_fd)
{
	if ((unsigned)prog < GPUSCOPE_PROG_MAX)
		counter_fds[prog] = map_fd;
}

static void family(FILE *out, bool errors)
{
	const char *name = errors ? "gpuscope_agent_bpf_errors_total" :
				    "gpuscope_agent_bpf_events_total";

	prom_family(out, name, "counter",
		    errors ? "Failures inside the BPF programs (events or stacks lost), by program." :
			     "Work counted inside the BPF programs, by program.");
	for (unsigned p = 0; p < GPUSCOPE_PROG_MAX; p++) {
		if (counter_fds[p] < 0)
			continue;
		for (unsigned k = p * GPUSCOPE_PROG_RANGE; k < (p + 1) * GPUSCOPE_PROG_RANGE; k++) {
			bool is_error;
			const char *n = bpf_counter_name(k, &is_error);

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

int bpf_load_error(const char *module, int err)
{
	if (err == -EPERM)
		return err;
	log_error("%s: the kernel refused its BPF programs (%s); running without this module "
		  "(-v prints the kernel's reasons)", module, strerror(-err));
	return -ENOEXEC;
}
