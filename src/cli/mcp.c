/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope mcp`: a Model Context Protocol server over stdio for AI assistants. JSON-RPC 2.0,
 * one message per line: the main thread reads stdin and answers initialize, ping and tools/list
 * itself; tools/call goes to a bounded pool of workers, so a slow query never holds up the
 * others, and notifications/cancelled abandons a call (its HTTP transfer ends, no answer).
 * stdout carries protocol messages only; diagnostics go to stderr.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/mcp.h"
#include "common/log.h"

static const char usage_text[] =
	"usage: gpuscope mcp --server URL [--token-file F] [--ca-file F] [--since 1h] [--workers 4]\n"
	"A Model Context Protocol server on stdin/stdout (JSON-RPC 2.0, one message per line) for\n"
	"AI assistants. Its tools are the read-only queries: nodes, processes, flamegraph (folded\n"
	"text), top, timeline_summary, efficiency, findings. --since is the range of a tool call\n"
	"that names none; --workers (1..16) the tool calls answered at once (more wait, up to 64).\n"
	"$GPUSCOPE_SERVER and $GPUSCOPE_TOKEN_FILE are the defaults of --server and --token-file.\n"
	"Example client configuration: {\"command\": \"gpuscope\", \"args\": [\"mcp\", \"--server\",\n"
	"\"http://host:7070\", \"--token-file\", \"/path/token\"]}\n";

#define MAX_WORKERS 16
#define MAX_PENDING 64			/* tool calls queued or running; past it: -32000 */
#define MAX_LINE    (16u << 20)		/* a longer message is a parse error */

/* JSON-RPC 2.0 error codes */
enum {
	E_PARSE = -32700,
	E_INVALID_REQUEST = -32600,
	E_METHOD = -32601,
	E_PARAMS = -32602,
	E_INTERNAL = -32603,
	E_BUSY = -32000,
};

static const char *const versions[] = { "2025-06-18", "2025-03-26", "2024-11-05" };

struct job {
	json_t *id;		/* the request's id (string or integer) */
	char *tool;
	json_t *args;		/* NULL: none */
	volatile int cancel;	/* set by notifications/cancelled; the transfer watches it */
	bool running;
	unsigned long seq;	/* arrival order */
};

struct mcp {
	struct query base;	/* --server, --token-file, --ca-file, --since */
	pthread_mutex_t mu;	/* jobs, njobs, stop */
	pthread_cond_t work;	/* a job queued, or stop */
	struct job *jobs[MAX_PENDING];
	int njobs;
	unsigned long seq;
	bool stop;		/* stdin ended: finish the queue, then exit */
	pthread_mutex_t out_mu;	/* one message at a time on stdout */
	char *in;		/* stdin buffer: [in_off, in_len) not yet handed out */
	size_t in_len, in_off, in_scan;
	bool in_skip;		/* discarding the rest of a line past MAX_LINE */
	bool in_eof;
};

/* Writes one message (compact JSON has no raw newline) and a newline; consumes msg. */
static void send_msg(struct mcp *m, json_t *msg)
{
	char *s = msg ? json_dumps(msg, JSON_COMPACT) : NULL;

	json_decref(msg);
	if (!s) {
		log_error("mcp: out of memory writing an answer");
		return;
	}
	pthread_mutex_lock(&m->out_mu);
	fputs(s, stdout);
	fputc('\n', stdout);
	fflush(stdout);
	pthread_mutex_unlock(&m->out_mu);
	free(s);
}

/* id NULL: the JSON-RPC null id (the request's id could not be read). */
static void send_error(struct mcp *m, json_t *id, int code, const char *msg)
{
	char text[512];

	snprintf(text, sizeof(text), "%s", msg);
	mcp_utf8_fix(text);	/* a user's bytes quoted back, cut anywhere */
	send_msg(m, json_pack("{s:s, s:O?, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
			      id ? id : json_null(), "error", "code", code, "message", text));
}

/* Consumes result. */
static void send_result(struct mcp *m, json_t *id, json_t *result)
{
	if (!result) {
		send_error(m, id, E_INTERNAL, "out of memory");
		return;
	}
	send_msg(m, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static void job_free(struct job *j)
{
	if (!j)
		return;
	json_decref(j->id);
	json_decref(j->args);
	free(j->tool);
	free(j);
}

/* Takes jobs[i] out of the list; m->mu held. */
static void job_remove(struct mcp *m, int i)
{
	m->jobs[i] = m->jobs[--m->njobs];
	m->jobs[m->njobs] = NULL;
}

static void *worker(void *arg)
{
	struct mcp *m = arg;

	for (;;) {
		struct job *j = NULL;
		json_t *res = NULL;
		bool cancelled;
		int at = -1;

		pthread_mutex_lock(&m->mu);
		for (;;) {
			for (int i = 0; i < m->njobs; i++)
				if (!m->jobs[i]->running && (!j || m->jobs[i]->seq < j->seq))
					j = m->jobs[i];
			if (j || m->stop)
				break;
			pthread_cond_wait(&m->work, &m->mu);
		}
		if (!j) {
			pthread_mutex_unlock(&m->mu);
			return NULL;
		}
		j->running = true;
		pthread_mutex_unlock(&m->mu);

		if (!j->cancel)
			res = mcp_tool_call(&m->base, &j->cancel, j->tool, j->args);

		pthread_mutex_lock(&m->mu);
		for (int i = 0; i < m->njobs; i++)
			if (m->jobs[i] == j)
				at = i;
		if (at >= 0)
			job_remove(m, at);
		cancelled = j->cancel;
		pthread_mutex_unlock(&m->mu);
		/* a cancelled request gets no answer (the MCP specification's cancellation rule) */
		if (cancelled)
			json_decref(res);
		else
			send_result(m, j->id, res);
		job_free(j);
	}
}

/* notifications/cancelled: marks the call; one still queued is dropped at once. */
static void cancel_request(struct mcp *m, json_t *params)
{
	json_t *rid = json_object_get(params, "requestId");

	if (!rid)
		return;
	pthread_mutex_lock(&m->mu);
	for (int i = 0; i < m->njobs; i++) {
		struct job *j = m->jobs[i];

		if (!json_equal(j->id, rid))
			continue;
		j->cancel = 1;
		if (!j->running) {
			job_remove(m, i);
			job_free(j);
		}
		log_debug("mcp: request cancelled");
		break;
	}
	pthread_mutex_unlock(&m->mu);
}

static json_t *initialize_result(json_t *params)
{
	const char *want = json_string_value(json_object_get(params, "protocolVersion"));
	const char *v = versions[0];

	for (size_t i = 0; want && i < sizeof(versions) / sizeof(versions[0]); i++)
		if (!strcmp(want, versions[i]))
			v = versions[i];
	return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", v,
			 "capabilities", "tools", "listChanged", 0,
			 "serverInfo", "name", "gpuscope", "title", "gpuscope profiler",
			 "version", "1",
			 "instructions",
			 "Read-only queries over a gpuscope server: GPU busy/idle, idle cost, CPU "
			 "stacks and thread states of GPU workloads. Start with findings (ranked "
			 "waste with causes and fixes) or efficiency; drill down with top, "
			 "flamegraph and timeline_summary using the selector a finding names. "
			 "Ranges: since (5m, 1h, 2d) or from/to (RFC 3339 or Unix seconds).");
}

/* tools/call: checked here (bad params answered at once), run by a worker. */
static void call_tool(struct mcp *m, json_t *id, json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments");
	char err[256], msg[300];
	struct job *j;
	int rc;

	if (!name) {
		send_error(m, id, E_PARAMS, "tools/call needs params.name, a string");
		return;
	}
	if (args && json_is_null(args))
		args = NULL;
	rc = mcp_tool_check(name, args, err, sizeof(err));
	if (rc) {
		snprintf(msg, sizeof(msg), "%s%s", rc == -ENOENT ? "Unknown tool: " : "", err);
		send_error(m, id, E_PARAMS, msg);
		return;
	}
	j = calloc(1, sizeof(*j));
	if (!j || !(j->tool = strdup(name))) {
		free(j);
		send_error(m, id, E_INTERNAL, "out of memory");
		return;
	}
	j->id = json_incref(id);
	j->args = json_incref(args);
	pthread_mutex_lock(&m->mu);
	if (m->njobs == MAX_PENDING) {
		pthread_mutex_unlock(&m->mu);
		job_free(j);
		snprintf(msg, sizeof(msg), "busy: %d tool calls in progress; try again later",
			 MAX_PENDING);
		send_error(m, id, E_BUSY, msg);
		return;
	}
	j->seq = m->seq++;
	m->jobs[m->njobs++] = j;
	pthread_cond_signal(&m->work);
	pthread_mutex_unlock(&m->mu);
}

static void handle_request(struct mcp *m, json_t *id, const char *method, json_t *params)
{
	char msg[300];

	if (!strcmp(method, "initialize")) {
		if (!json_is_string(json_object_get(params, "protocolVersion"))) {
			send_error(m, id, E_PARAMS, "initialize needs params.protocolVersion");
			return;
		}
		send_result(m, id, initialize_result(params));
	} else if (!strcmp(method, "ping")) {
		send_result(m, id, json_object());
	} else if (!strcmp(method, "tools/list")) {
		json_t *tools = mcp_tools_list();

		send_result(m, id, tools ? json_pack("{s:o}", "tools", tools) : NULL);
	} else if (!strcmp(method, "tools/call")) {
		call_tool(m, id, params);
	} else {
		snprintf(msg, sizeof(msg), "Method not found: %.200s", method);
		send_error(m, id, E_METHOD, msg);
	}
}

/* One line from stdin: a request, a notification, or (ignored) a response to us. */
static void handle_line(struct mcp *m, const char *line, size_t len)
{
	json_t *msg, *id, *params, *method_j;
	json_error_t jerr;
	const char *method;
	char text[300];

	msg = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!msg) {
		snprintf(text, sizeof(text), "Parse error: %s (column %d)", jerr.text, jerr.column);
		send_error(m, NULL, E_PARSE, text);
		return;
	}
	if (json_is_array(msg)) {
		send_error(m, NULL, E_INVALID_REQUEST, "Invalid Request: batches are not supported");
		goto out;
	}
	if (!json_is_object(msg)) {
		send_error(m, NULL, E_INVALID_REQUEST, "Invalid Request: not an object");
		goto out;
	}
	id = json_object_get(msg, "id");
	if (id && !json_is_string(id) && !json_is_integer(id)) {
		send_error(m, NULL, E_INVALID_REQUEST, "Invalid Request: id must be a string or "
			   "an integer");
		goto out;
	}
	if (!json_is_string(json_object_get(msg, "jsonrpc")) ||
	    strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0")) {
		send_error(m, id, E_INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\"");
		goto out;
	}
	method_j = json_object_get(msg, "method");
	if (!method_j && id && (json_object_get(msg, "result") || json_object_get(msg, "error")))
		goto out;	/* a response: we send no requests, nothing waits for it */
	method = json_string_value(method_j);
	if (!method) {
		send_error(m, id, E_INVALID_REQUEST, "Invalid Request: method must be a string");
		goto out;
	}
	params = json_object_get(msg, "params");
	if (params && !json_is_object(params)) {
		if (!id)
			goto out;
		send_error(m, id, json_is_array(params) ? E_PARAMS : E_INVALID_REQUEST,
			   "params must be an object");
		goto out;
	}
	if (!id) {	/* a notification: never answered */
		if (!strcmp(method, "notifications/cancelled"))
			cancel_request(m, params);
		goto out;
	}
	handle_request(m, id, method, params);
out:
	json_decref(msg);
}

/*
 * The next line of stdin (without its newline, a trailing CR dropped): 1 with *ret_line
 * pointing into m->in (valid until the next call), 0 at the end of input, -1 on a line past
 * MAX_LINE (its rest is skipped) or a read error.
 */
static int next_line(struct mcp *m, char **ret_line, size_t *ret_len)
{
	for (;;) {
		char *nl = memchr(m->in + m->in_scan, '\n', m->in_len - m->in_scan);
		ssize_t n;

		if (nl || (m->in_eof && m->in_len > m->in_off)) {
			size_t end = nl ? (size_t)(nl - m->in) : m->in_len;
			size_t start = m->in_off;
			bool skipped = m->in_skip;

			m->in_off = m->in_scan = nl ? end + 1 : end;
			m->in_skip = false;
			if (skipped)
				return -1;
			if (end > start && m->in[end - 1] == '\r')
				end--;
			*ret_line = m->in + start;
			*ret_len = end - start;
			return 1;
		}
		if (m->in_eof)
			return 0;
		/* keep only what is not handed out yet */
		memmove(m->in, m->in + m->in_off, m->in_len - m->in_off);
		m->in_len -= m->in_off;
		m->in_off = 0;
		m->in_scan = m->in_len;
		if (m->in_len == MAX_LINE) {	/* too long: drop it, remember to skip its rest */
			m->in_len = m->in_scan = 0;
			m->in_skip = true;
		}
		n = read(STDIN_FILENO, m->in + m->in_len, MAX_LINE - m->in_len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			log_error("mcp: reading stdin: %s", strerror(errno));
			return 0;
		}
		if (n == 0)
			m->in_eof = true;
		m->in_len += (size_t)n;
	}
}

/* Takes --workers out of argv; -1 on a bad value. */
static int take_workers(int *argc, char **argv, long *workers)
{
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		const char *v = NULL;
		char *end;

		if (!strcmp(argv[i], "--workers")) {
			if (i + 1 >= *argc) {
				fprintf(stderr, "gpuscope: --workers needs a value\n%s", usage_text);
				return -1;
			}
			v = argv[++i];
		} else if (!strncmp(argv[i], "--workers=", 10)) {
			v = argv[i] + 10;
		} else {
			argv[out++] = argv[i];
			continue;
		}
		*workers = strtol(v, &end, 10);
		if (!*v || *end || *workers < 1 || *workers > MAX_WORKERS) {
			fprintf(stderr, "gpuscope: --workers: '%s' is not 1..%d\n%s", v, MAX_WORKERS,
				usage_text);
			return -1;
		}
	}
	*argc = out;
	argv[out] = NULL;
	return 0;
}

int cmd_mcp(int argc, char **argv)
{
	static struct mcp m = {
		.mu = PTHREAD_MUTEX_INITIALIZER,
		.work = PTHREAD_COND_INITIALIZER,
		.out_mu = PTHREAD_MUTEX_INITIALIZER,
	};
	pthread_t th[MAX_WORKERS];
	long workers = 4;
	int nth = 0, rc;
	size_t len;
	char *line;

	signal(SIGPIPE, SIG_IGN);	/* a client gone: writes fail, the read sees the end */
	if (take_workers(&argc, argv, &workers))
		return 2;
	rc = query_parse(argc, argv, 0, usage_text, &m.base);
	if (rc)
		return rc == 1 ? 0 : rc;
	if (m.base.selector || m.base.kind || m.base.have_range) {
		fprintf(stderr, "gpuscope: mcp takes --since only; --selector, --kind and "
			"--from/--to are each tool call's arguments\n%s", usage_text);
		return 2;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		fprintf(stderr, "gpuscope: libcurl initialisation failed\n");
		return 1;
	}
	m.in = malloc(MAX_LINE);
	if (!m.in) {
		fprintf(stderr, "gpuscope: out of memory\n");
		return 1;
	}
	for (; nth < workers; nth++) {
		rc = pthread_create(&th[nth], NULL, worker, &m);
		if (rc) {
			log_error("mcp: starting worker %d: %s", nth, strerror(rc));
			break;
		}
	}
	rc = nth ? 0 : 1;
	log_debug("mcp: serving %s with %d workers", m.base.server, nth);
	while (nth) {
		int r = next_line(&m, &line, &len);

		if (r == 0)
			break;
		if (r < 0) {
			send_error(&m, NULL, E_PARSE, "Parse error: message longer than 16 MiB");
			continue;
		}
		if (len)
			handle_line(&m, line, len);
	}
	/* end of input: answer what was asked, then exit */
	pthread_mutex_lock(&m.mu);
	m.stop = true;
	pthread_cond_broadcast(&m.work);
	pthread_mutex_unlock(&m.mu);
	while (nth)
		pthread_join(th[--nth], NULL);
	free(m.in);
	curl_global_cleanup();
	return rc;
}
