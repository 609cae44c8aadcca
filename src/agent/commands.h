/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's subcommands. Each lives in its own file and is called from main.c with argv
 * starting at the subcommand name (getopt-ready). A command returns the process exit code:
 * 0 success, 1 runtime failure, 2 usage error or missing privilege/kernel feature.
 */
#ifndef GPUSCOPE_AGENT_COMMANDS_H
#define GPUSCOPE_AGENT_COMMANDS_H

int cmd_record(int argc, char **argv);		/* record.c: one-shot profile to pprof/folded */
int cmd_run(int argc, char **argv);		/* run.c: long-running, pushes to a server */
int cmd_nvml_record(int argc, char **argv);	/* gpu/: record an NVML trace for replay */
int cmd_labels(int argc, char **argv);		/* labels_cmd.c: metadata labels of processes */

#endif
