/* SPDX-License-Identifier: Apache-2.0 */
/* gpuscope-agent: dispatches to the subcommands declared in commands.h. */
#include <stdio.h>
#include <string.h>
#include "agent/commands.h"
#include "common/log.h"

/* Weak so that the agent links while a subcommand's file is not written yet. */
#pragma weak cmd_run
#pragma weak cmd_nvml_record
#pragma weak cmd_labels

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *help;
} commands[] = {
	{ "record", cmd_record, "profile for a while, write pprof and/or folded stacks" },
	{ "run", cmd_run, "profile continuously and push to a gpuscope-server" },
	{ "nvml-record", cmd_nvml_record, "record an NVML trace for the replay library" },
	{ "labels", cmd_labels, "print the container/pod labels of processes (cgroups, Kubernetes)" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: gpuscope-agent COMMAND [OPTIONS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (commands[i].fn)
			fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
	fprintf(f, "\n'gpuscope-agent COMMAND --help' describes each command's options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (commands[i].fn && !strcmp(argv[1], commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	log_error("unknown command '%s'", argv[1]);
	usage(stderr);
	return 2;
}
