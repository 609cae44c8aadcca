// SPDX-License-Identifier: Apache-2.0
/*
 * The kernel verifier's cost for each of the agent's BPF programs, as the agent loads them (the
 * stack walker on): the kernel's own statistics (BPF_LOG_STATS: verification time, instructions
 * processed, states) and the wall time of each object's load. Maps are the objects' own, not the
 * unwinder's shared ones: the verifier's work is the same. Run as root after `make`:
 *   .output/bench/start/verifier_stats [--no-unwinder]
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <bpf/libbpf.h>
#include "cudaprobe.skel.h"
#include "cupti.skel.h"
#include "oncpu.skel.h"
#include "sched.skel.h"

#define LOG_BYTES (1u << 20)	/* statistics only: a few lines per program */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Asks the kernel for its statistics of every program of obj; 0 or -ENOMEM. */
static int want_stats(struct bpf_object *obj)
{
	struct bpf_program *p;

	bpf_object__for_each_program(p, obj) {
		char *buf = calloc(1, LOG_BYTES);

		if (!buf)
			return -ENOMEM;
		bpf_program__set_log_level(p, 4);	/* BPF_LOG_STATS */
		bpf_program__set_log_buf(p, buf, LOG_BYTES);
	}
	return 0;
}

static void report(const char *name, struct bpf_object *obj, int err, double secs)
{
	struct bpf_program *p;

	printf("%s: %s in %.3f s\n", name, err ? "load FAILED" : "loaded", secs);
	bpf_object__for_each_program(p, obj) {
		size_t size;
		const char *log = bpf_program__log_buf(p, &size);
		const char *t = log ? strstr(log, "verification time ") : NULL;
		const char *n = log ? strstr(log, "processed ") : NULL;
		long us = -1, insns = -1, states = -1;

		if (t)
			sscanf(t, "verification time %ld", &us);
		if (n)
			sscanf(n, "processed %ld insns (limit %*d) max_states_per_insn %*d "
				  "total_states %ld", &insns, &states);
		if (bpf_program__autoload(p))
			printf("  %-16s %9.1f ms %9ld insns processed %7ld states\n",
			       bpf_program__name(p), us / 1e3, insns, states);
		free((void *)log);
	}
}

/* Loads obj (opened, its .rodata set) with the kernel's statistics asked for; prints them. */
static int load(const char *name, struct bpf_object *obj)
{
	double t0;
	int err;

	if (want_stats(obj))
		return -ENOMEM;
	t0 = now_s();
	err = bpf_object__load(obj);
	report(name, obj, err, now_s() - t0);
	return err;
}

int main(int argc, char **argv)
{
	bool unwinder = !(argc > 1 && !strcmp(argv[1], "--no-unwinder"));
	struct oncpu_bpf *o = oncpu_bpf__open();
	struct sched_bpf *s = sched_bpf__open();
	struct cudaprobe_bpf *c = cudaprobe_bpf__open();
	struct cupti_bpf *u = cupti_bpf__open();
	int err = 1;

	if (!o || !s || !c || !u) {
		fprintf(stderr, "cannot open the BPF objects: %s\n", strerror(errno));
		goto out;
	}
	/* as the agent loads them: the walker on */
	o->rodata->use_unwinder = s->rodata->use_unwinder = unwinder;
	c->rodata->use_unwinder = u->rodata->use_unwinder = unwinder;
	err = load("oncpu", o->obj);
	err |= load("sched", s->obj);
	err |= load("cudaprobe", c->obj);
	err |= load("cupti", u->obj);
out:
	oncpu_bpf__destroy(o);
	sched_bpf__destroy(s);
	cudaprobe_bpf__destroy(c);
	cupti_bpf__destroy(u);
	return err ? 1 : 0;
}
