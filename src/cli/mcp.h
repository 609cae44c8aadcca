/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope mcp`'s two halves: the protocol (mcp.c: JSON-RPC over stdio, workers, cancellation)
 * and the tools (mcp_tools.c: the read-only queries, their input schemas, their answers;
 * mcp_timeline.c: timeline_summary).
 */
#ifndef GPUSCOPE_CLI_MCP_H
#define GPUSCOPE_CLI_MCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <jansson.h>
#include "cli/client.h"

/* The tools/list answer's "tools" array: a new reference (caller decrefs); NULL out of memory. */
json_t *mcp_tools_list(void);

/*
 * Checks a tools/call's name and arguments (NULL: none) against the tool's input schema and
 * the values' own rules (a duration, a time, a sample kind). 0 if the call may run; -ENOENT for
 * an unknown tool, -EINVAL for bad arguments, with one line of why in err (errlen bytes).
 */
int mcp_tool_check(const char *name, json_t *args, char *err, size_t errlen);

/*
 * Runs a checked tool call against the server of base (its token, CA and default --since),
 * abandoning it once *cancel turns nonzero. Returns a tools/call result (a new reference:
 * "content", "structuredContent" where the answer is JSON, "isError"); a server's refusal or an
 * unreachable server is a result with isError true. NULL only out of memory. Any thread.
 */
json_t *mcp_tool_call(const struct query *base, volatile int *cancel, const char *name,
		      json_t *args);

/* ---- between the tools' files ---- */

/* One tool call: the CLI's options with this call's range, selector and kind. */
struct mcp_call {
	struct query q;
	json_t *args;		/* the checked arguments (NULL: none) */
	long limit;		/* `limit`, or the tool's default */
	char err[QUERY_ERRLEN];	/* why mcp_get() failed */
};

/*
 * GETs /api/v1/<endpoint> with the call's query plus "name", "value" pairs (NULL-terminated; a
 * NULL value is left out). The answer as a JSON object (caller decrefs), or NULL with c->err
 * saying why: the server's error and status, an unreachable server, cancelled.
 */
json_t *mcp_get(struct mcp_call *c, const char *endpoint, ...);

/* A result with isError true and c->err as its text (a new reference; NULL out of memory). */
json_t *mcp_error_result(struct mcp_call *c);

/* A text answer being written (open_memstream). */
struct mcp_text {
	FILE *f;
	char *s;
	size_t n;
};

/* 0, or -ENOMEM. */
int mcp_text_open(struct mcp_text *t);

/* Closes t and returns the result: its text, structured (consumed; an object or NULL) as
 * structuredContent. NULL out of memory. */
json_t *mcp_text_result(struct mcp_text *t, json_t *structured);

/* Unix ms as "2026-12-07T10:00:00Z" in buf. */
const char *mcp_iso(double ms, char *buf, size_t len);

/* Replaces each byte of s that is not part of valid UTF-8 with '?' (a line cut by snprintf in
 * the middle of a character, a user's bytes quoted back), so jansson takes it. */
void mcp_utf8_fix(char *s);

/* The timeline_summary tool (mcp_timeline.c). */
json_t *mcp_timeline_summary(struct mcp_call *c);

#endif
