/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the CLI's query commands share: the common options (--server, --since/--from/--to,
 * --selector, --kind, --token-file, -o), building the API URL, and one GET over libcurl with
 * the server's JSON error turned into one line.
 */
#ifndef GPUSCOPE_CLI_CLIENT_H
#define GPUSCOPE_CLI_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <jansson.h>

struct query {
	const char *server;
	const char *since;		/* duration text, validated */
	uint64_t from_ns, to_ns;	/* when from/to given (to defaults to now) */
	bool have_range;
	const char *selector;
	const char *kind;		/* validated sample kind name; NULL: server default (cpu) */
	const char *token_file;
	const char *ca_file;		/* PEM CA bundle for an https:// server; NULL: the system's */
	const char *output;		/* -o */
	const char *gpu_idle;		/* flamegraph only */
	bool python_only;		/* flamegraph only: --python-only (view=python) */
	const char *title;		/* flamegraph only */
	long limit;			/* top only */
	const char *sort;		/* top only: self|total */
	const char *by;			/* report only: workload label */
	const char *format;		/* report only: table|json|markdown */
	bool folded;			/* diff only: --folded */
	bool processes;			/* top only: --processes */
	/* mcp only (NULL elsewhere): a transfer ends at once when *cancel turns nonzero, and a
	 * failure's line goes to errbuf (QUERY_ERRLEN bytes) instead of stderr */
	volatile int *cancel;
	char *errbuf;
};

#define QUERY_ERRLEN 512

/* Which extra options a command takes. */
enum {
	Q_OUTPUT = 1 << 0,
	Q_GPU_IDLE = 1 << 1,
	Q_TITLE = 1 << 2,
	Q_LIMIT = 1 << 3,
	Q_SORT = 1 << 4,
	Q_REPORT = 1 << 5,	/* --by (namespace), --format (table), --limit; --since 24h */
	Q_OUTPUT_OPT = 1 << 6,	/* -o FILE allowed, not required (the command has a default) */
	Q_FOLDED = 1 << 7,	/* --folded: folded stacks instead of a table */
	Q_PROCESSES = 1 << 8,	/* --processes: top lists processes instead of functions */
};

/*
 * Parses the common options plus the extras in `extra`; $GPUSCOPE_SERVER and
 * $GPUSCOPE_TOKEN_FILE are the defaults of --server and --token-file. On a usage error prints one line and
 * the command's usage to stderr and returns 2; returns 1 after printing help for -h; 0 on
 * success (q filled).
 */
int query_parse(int argc, char **argv, unsigned extra, const char *usage_text, struct query *q);

/* Builds SERVER/api/v1/<endpoint>?from=..&to=..&selector=.. (escaped). Caller frees. */
char *query_url(const struct query *q, const char *endpoint);

/* Appends name=value (value escaped) to *url with '?' or '&'; 0, or -ENOMEM (*url kept). */
int query_url_add(char **url, const char *name, const char *value);

/*
 * The opening of a command that asks one endpoint: query_parse() then query_url(). Returns the
 * URL (caller frees), or NULL with the command's exit status in *ret_rc: 0 after -h, 2 on a usage
 * error, 1 out of memory (printed).
 */
char *query_open(int argc, char **argv, unsigned extra, const char *usage_text,
		 const char *endpoint, struct query *q, int *ret_rc);

struct http_body {
	char *data;	/* NUL-terminated, malloc'ed */
	size_t len;
};

/*
 * GETs url with the bearer token from q->token_file. On any failure prints one line
 * ("gpuscope: ...": unreachable server, HTTP status with the server's JSON "error") and
 * returns -1; on a 2xx returns 0 with *ret filled (caller frees ret->data).
 */
int http_get(const struct query *q, const char *url, struct http_body *ret);
/*
 * http_get() that hands a non-2xx answer back instead of printing it: 0 on a 2xx, 1 on another
 * status (*ret filled with the answer, *ret_status the status), -1 when there was no answer
 * (printed). The caller frees ret->data in both first cases.
 */
int http_get_status(const struct query *q, const char *url, struct http_body *ret,
		    long *ret_status);
/* The same as a POST with an empty body (the arguments are in the URL's query). */
int http_post(const struct query *q, const char *url, struct http_body *ret);

/*
 * http_get() and parse the answer as a JSON object. On any failure prints one line and returns
 * NULL; the caller json_decref()s the answer.
 */
json_t *http_get_json(const struct query *q, const char *url);

/*
 * A report command's answer b in q->format: json as the server sent it, else parsed and given
 * to print (markdown or a table). The command's exit status: print's, or 1 (said) when the
 * answer is not a JSON object or cannot be written.
 */
int print_answer(const struct query *q, const struct http_body *b,
		 int (*print)(const struct query *q, json_t *j, bool markdown));

/* o's member k as a number (NAN when absent or not a number), as a string ("" when not one). */
double json_num(json_t *o, const char *k);
const char *json_str(json_t *o, const char *k);

/* Writes data to path atomically (temporary file then rename); "-" is stdout. 0 or -1 (printed). */
int write_output(const char *path, const void *data, size_t len);

#endif
