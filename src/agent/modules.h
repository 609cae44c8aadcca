/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's data sources, in start order. Each is defined in its own file; the declarations
 * are weak so the agent links while a module is not written yet (run.c skips NULL ones).
 */
#ifndef GPUSCOPE_AGENT_MODULES_H
#define GPUSCOPE_AGENT_MODULES_H

#include "agent/agent.h"

extern const struct agent_module meta_module __attribute__((weak));	  /* meta.c: k8s/cgroup labels */
extern const struct agent_module oncpu_module __attribute__((weak));	  /* oncpu.c: CPU samples */
extern const struct agent_module sched_module __attribute__((weak));	  /* sched.c: thread states, off-CPU */
extern const struct agent_module cuda_probe_module __attribute__((weak)); /* cudaprobe.c: libcuda uprobes */
extern const struct agent_module cupti_module __attribute__((weak));	  /* cupti_usdt.c: CUPTI USDT */
extern const struct agent_module nvml_module __attribute__((weak));	  /* gpu/nvml.c: NVML/GPM poller */

#define AGENT_MODULES                                                                              \
	{ &meta_module, &oncpu_module, &sched_module, &cuda_probe_module, &cupti_module,           \
	  &nvml_module }

#endif
