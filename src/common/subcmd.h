/* SPDX-License-Identifier: Apache-2.0 */
/* Subcommand dispatch shared by gpuscope-agent and gpuscope: `prog COMMAND [OPTIONS]`. */
#ifndef GPUSCOPE_SUBCMD_H
#define GPUSCOPE_SUBCMD_H

#include <stddef.h>

struct subcmd {
	const char *name;
	int (*fn)(int argc, char **argv);	/* argv[0] is the command name; returns the exit code */
	const char *help;
};

/*
 * Runs the command named by argv[1] with argv shifted by one. No command, or an unknown one:
 * usage on stderr, exit code 2; -h/--help/help: usage on stdout, 0.
 */
int subcmd_main(const char *prog, const struct subcmd *cmds, size_t n, int argc, char **argv);

#endif
