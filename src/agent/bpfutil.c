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

void bpf_env_ms(const char *name, __u64 *ns)
{
	const char *v = getenv(name);

	if (v)
		*ns = strtoull(v, NULL, 10) * NSEC_PER_MSEC;
}

static size_t keyq_walk(int map_fd, uint32_t *lost, size_t key_size, size_t max, bpf_keyq_fn fn,
			void *ctx)
{
	uint8_t *keys = malloc(max * key_size), key[64], val[64];
	size_t n = 0, done = 0;

	if (!keys)
		return 0;
	/* collect first: deleting while walking restarts the walk */
	while (n < max && !bpf_map_get_next_key(map_fd, n ? keys + (n - 1) * key_size : NULL, key))
		memcpy(keys + n++ * key_size, key, key_size);
	if (n == max)	/* more may be left, in no queue: walk again next time */
		__atomic_store_n(lost, 1, __ATOMIC_RELEASE);
	for (size_t i = 0; i < n; i++)
		if (!bpf_map_lookup_and_delete_elem(map_fd, keys + i * key_size, val)) {
			fn(ctx, keys + i * key_size, val);
			done++;
		}
	free(keys);
	return done;
}

size_t bpf_keyq_drain(int map_fd, int queue_fd, uint32_t *lost, size_t key_size, size_t val_size,
		      size_t max, bpf_keyq_fn fn, void *ctx, bool *walked)
{
	uint8_t key[64], val[64];
	size_t done = 0;

	*walked = false;
	if (key_size > sizeof(key) || val_size > sizeof(val))
		return 0;
	if (lost && __atomic_exchange_n(lost, 0, __ATOMIC_ACQ_REL)) {
		/* the queue missed a key: drop what it holds (the walk takes those keys too) */
		while (!bpf_map_lookup_and_delete_elem(queue_fd, NULL, key))
			;
		*walked = true;
		return keyq_walk(map_fd, lost, key_size, max, fn, ctx);
	}
	for (size_t i = 0; i < max; i++) {
		if (bpf_map_lookup_and_delete_elem(queue_fd, NULL, key))
			break;	/* empty */
		/* absent: drained already (a walk, or the key's earlier addition) */
		if (!bpf_map_lookup_and_delete_elem(map_fd, key, val)) {
			fn(ctx, key, val);
			done++;
		}
	}
	return done;
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
