/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small libbpf helpers shared by the agent's BPF modules, and the user-space side of the BPF
 * counter registry (common/abi.h, agent/gpuscope.bpf.h): the name tables of enum gpuscope_err and
 * of the stack walkers' counters (made from the registry's lists) and the families
 * gpuscope_agent_bpf_errors_total{program,error} and
 * gpuscope_agent_bpf_events_total{program,event}.
 */
#ifndef GPUSCOPE_BPFUTIL_H
#define GPUSCOPE_BPFUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <linux/types.h>
#include "common/abi.h"

/*
 * Sum over CPUs of the u64 at `key` of a BPF_MAP_TYPE_PERCPU_ARRAY (the modules' error and
 * event counters). 0 when the map cannot be read.
 */
uint64_t bpf_percpu_sum(int map_fd, uint32_t key);

/*
 * A program setting in ns overridden, for benchmarks and triage, by environment variable name
 * (in ms) when it is set: *ns is left as it is otherwise.
 */
void bpf_env_ms(const char *name, __u64 *ns);

/*
 * Drains an aggregation hash map whose BPF program pushes every key it adds into a queue map
 * (gpuscope.bpf.h, GPUSCOPE_KEYQ): pops keys and takes each one's value out of the map (lookup
 * and delete: each addition of a key is drained once), calling fn for it; at most max keys a
 * call (the rest wait in the queue). When *lost is set (the program could not push a key) it
 * clears it and walks the whole map once instead (*walked = true). key_size and val_size at most
 * 64. Returns the keys drained.
 */
typedef void (*bpf_keyq_fn)(void *ctx, const void *key, const void *val);
size_t bpf_keyq_drain(int map_fd, int queue_fd, uint32_t *lost, size_t key_size, size_t val_size,
		      size_t max, bpf_keyq_fn fn, void *ctx, bool *walked);

/*
 * "cpu", "sched", "cuda", "cupti", "unwind", "python": the program label of a counter set (enum
 * gpuscope_prog, GPUSCOPE_WALKER_*); NULL if out of range.
 */
const char *bpf_prog_name(unsigned prog);

/*
 * Name of key in counter set `set` (enum gpuscope_prog: codes of enum gpuscope_err in its
 * range; GPUSCOPE_WALKER_UNWIND/_PYTHON: enum unwind_stat / gpuscope_py_stat), NULL for an
 * unused key; *ret_is_error as below.
 */
const char *bpf_set_counter_name(unsigned set, unsigned key, bool *ret_is_error);

/*
 * Name of counter code (enum gpuscope_err), NULL for an unused code; *ret_is_error says whether
 * it counts a failure (bpf_errors_total) or normal work (bpf_events_total).
 */
const char *bpf_counter_name(unsigned code, bool *ret_is_error);

/*
 * Exports counter set `set`: program prog's `errors` map (a module's start, after load), or a
 * stack walker's counter map (GPUSCOPE_WALKER_*: the unwinder's); map_fd < 0 stops (its stop,
 * before the map is closed). Caller serializes with bpf_counters__metrics() (run.c's lock).
 */
void bpf_counters__set(unsigned set, int map_fd);
/* Stops exporting set if map_fd is what it exports (an owner's free, before the close). */
void bpf_counters__drop(unsigned set, int map_fd);

/* Both families over every exported program, each family with HELP and TYPE. */
void bpf_counters__metrics(FILE *out);

/*
 * What a module's start returns when its skeleton did not load (err from *_bpf__load()): -EPERM
 * as it is (the agent lacks the privileges: the agent stops), else -ENOEXEC, logged with the
 * module's name: the kernel refused its programs (the verifier's -EACCES, or -EINVAL/-E2BIG/
 * -ENOTSUP for a helper, attach type or size it lacks), and the agent runs without that module
 * (gpuscope_agent_module_up 0) rather than losing every other one.
 */
int bpf_load_error(const char *module, int err);

struct agent_shared;

/*
 * Creates the BPF maps several modules share (agent.h, struct agent_shared: in_sync_map_fd),
 * before any module starts: each module's skeleton reuses them (bpf_map__reuse_fd()) between its
 * open and load. 0 or -errno (nothing created). run.c.
 */
int bpf_shared_maps__create(struct agent_shared *sh);
/* Closes them (after every module stopped) and zeroes their slots. NULL-safe. */
void bpf_shared_maps__free(struct agent_shared *sh);

#endif
