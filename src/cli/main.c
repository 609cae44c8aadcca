/* SPDX-License-Identifier: Apache-2.0 */
/* gpuscope: the command-line client over the server's HTTP API and local files. */
#include <stdio.h>
#include <string.h>
#include "cli/commands.h"
#include "common/log.h"

/* Weak so that the CLI links while a subcommand's file is not written yet. */
#pragma weak cmd_flamegraph
#pragma weak cmd_top
#pragma weak cmd_pprof
#pragma weak cmd_timeline
#pragma weak cmd_doctor

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *help;
} commands[] = {
	{ "flamegraph", cmd_flamegraph, "write an interactive flame graph SVG for a range and selector" },
	{ "top", cmd_top, "print the top functions, self and total" },
	{ "pprof", cmd_pprof, "download the merged pprof profile for a range and selector" },
	{ "timeline", cmd_timeline, "print per-thread CPU strips of a process in the terminal" },
	{ "doctor", cmd_doctor, "check this node for everything the agent needs" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: gpuscope COMMAND [OPTIONS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (commands[i].fn)
			fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
	fprintf(f, "\n'gpuscope COMMAND --help' describes each command's options.\n");
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
