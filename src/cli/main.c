/* SPDX-License-Identifier: Apache-2.0 */
/* gpuscope: the command-line client over the server's HTTP API and local files. */
#include "cli/commands.h"
#include "common/subcmd.h"

static const struct subcmd commands[] = {
	{ "flamegraph", cmd_flamegraph, "write an interactive flame graph SVG for a range and selector" },
	{ "top", cmd_top, "print the top functions, self and total" },
	{ "diff", cmd_diff, "compare two ranges or two selectors: functions whose share changed" },
	{ "pprof", cmd_pprof, "download the merged pprof profile for a range and selector" },
	{ "timeline", cmd_timeline, "print per-thread CPU strips of a process in the terminal" },
	{ "report", cmd_report, "GPU-hours, idle dollars and idle causes per workload" },
	{ "explain", cmd_explain, "findings: what wastes GPU time per workload, its cost and the fix" },
	{ "doctor", cmd_doctor, "check this node for everything the agent needs" },
	{ "capture", cmd_capture, "deep-capture a node's GPU work into a Perfetto trace" },
	{ "mcp", cmd_mcp, "serve the read-only queries to AI assistants (Model Context Protocol, stdio)" },
};

int main(int argc, char **argv)
{
	return subcmd_main("gpuscope", commands, sizeof(commands) / sizeof(commands[0]), argc, argv);
}
