/* SPDX-License-Identifier: Apache-2.0 */
/* Subcommand dispatch with a usage listing. */
#include <stdio.h>
#include <string.h>
#include "common/log.h"
#include "common/subcmd.h"

static void usage(FILE *f, const char *prog, const struct subcmd *cmds, size_t n)
{
	fprintf(f, "usage: %s COMMAND [OPTIONS]\n\ncommands:\n", prog);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "  %-12s %s\n", cmds[i].name, cmds[i].help);
	fprintf(f, "\n'%s COMMAND --help' describes each command's options.\n", prog);
}

int subcmd_main(const char *prog, const struct subcmd *cmds, size_t n, int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr, prog, cmds, n);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout, prog, cmds, n);
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	log_error("unknown command '%s'", argv[1]);
	usage(stderr, prog, cmds, n);
	return 2;
}
