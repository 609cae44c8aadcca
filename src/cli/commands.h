/* SPDX-License-Identifier: Apache-2.0 */
/* The CLI's subcommands; each returns the exit code (0 ok, 1 failure, 2 usage). */
#ifndef GPUSCOPE_CLI_COMMANDS_H
#define GPUSCOPE_CLI_COMMANDS_H

int cmd_flamegraph(int argc, char **argv);	/* flamegraph.c */
int cmd_top(int argc, char **argv);		/* top.c */
int cmd_pprof(int argc, char **argv);		/* pprof.c */
int cmd_timeline(int argc, char **argv);	/* timeline.c */
int cmd_doctor(int argc, char **argv);		/* doctor.c */
int cmd_report(int argc, char **argv);		/* report.c */
int cmd_capture(int argc, char **argv);		/* capture.c */
int cmd_diff(int argc, char **argv);		/* diff.c */
int cmd_explain(int argc, char **argv);		/* explain.c */
int cmd_mcp(int argc, char **argv);		/* mcp.c */

#endif
