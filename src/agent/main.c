/* SPDX-License-Identifier: Apache-2.0 */
/* gpuscope-agent: dispatches to the subcommands declared in commands.h. */
#include <malloc.h>
#include "agent/commands.h"
#include "common/subcmd.h"

static const struct subcmd commands[] = {
	{ "record", cmd_record, "profile for a while, write pprof and/or folded stacks" },
	{ "run", cmd_run, "profile continuously and push to a gpuscope-server" },
	{ "nvml-record", cmd_nvml_record, "record an NVML trace for the replay library" },
	{ "labels", cmd_labels, "print the container/pod labels of processes (cgroups, Kubernetes)" },
};

int main(int argc, char **argv)
{
	/*
	 * Big, short-lived buffers (an unwind table being built, a library's symbol table) go
	 * to their own mappings and back to the kernel when freed: a fixed threshold keeps glibc
	 * from raising it after the first big free and keeping the next ones on the heap, and two
	 * arenas keep the worker threads from each holding freed memory of their own.
	 */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);
	mallopt(M_ARENA_MAX, 2);
	return subcmd_main("gpuscope-agent", commands, sizeof(commands) / sizeof(commands[0]), argc,
			   argv);
}
