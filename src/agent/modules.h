/* SPDX-License-Identifier: Apache-2.0 */
/* The agent's data sources, in start order; each is defined in its feature folder. */
#ifndef GPUSCOPE_AGENT_MODULES_H
#define GPUSCOPE_AGENT_MODULES_H

#include "agent/agent.h"

extern const struct agent_module meta_module;	    /* meta/meta.c: k8s/cgroup labels */
extern const struct agent_module oncpu_module;	    /* cpu/oncpu.c: CPU samples */
extern const struct agent_module sched_module;	    /* sched/sched.c: thread states, off-CPU */
extern const struct agent_module cuda_probe_module; /* cuda/cudaprobe.c: libcuda uprobes */
extern const struct agent_module cupti_module;	    /* cupti/cupti_usdt.c: CUPTI USDT */
extern const struct agent_module nvml_module;	    /* gpu/nvml.c: NVML/GPM poller */

#define AGENT_MODULES                                                                              \
	{ &meta_module, &oncpu_module, &sched_module, &cuda_probe_module, &cupti_module,           \
	  &nvml_module }

#endif
