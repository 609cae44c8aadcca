// SPDX-License-Identifier: Apache-2.0
/*
 * gpuscope capture: asks a node's agent, through the server, for a deep-capture window (every
 * kernel, memcpy and memset of the window, with launch stacks), waits for it and its records,
 * and writes the window's range as a Perfetto-readable trace (Chrome trace-event JSON; open it
 * at ui.perfetto.dev): GPU lanes per stream, CUDA API calls, thread states, NVML counters.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <curl/curl.h>
#include "cli/client.h"
#include "cli/commands.h"
#include "common/util.h"

static const char usage_text[] =
	"usage: gpuscope capture --server URL --node NODE [--pid PID] [--duration DUR] [-o FILE]\n"
	"\n"
	"Asks NODE's agent for a capture window of DUR (default 5s) in PID (default: every\n"
	"process with the CUPTI library), then writes the window as a Perfetto trace (Chrome\n"
	"trace-event JSON, default capture.json; '-' for stdout). A process without the library\n"
	"gets the answer 'not injected'; the trace then holds CPU, thread-state and NVML data.\n"
	"A NODE the server has no data of is refused at once, with the nodes it knows.\n"
	"\n"
	"  --server URL        gpuscope-server (default $GPUSCOPE_SERVER)\n"
	"  --node NODE         the agent's node name\n"
	"  --pid PID           one process (default all)\n"
	"  --duration DUR      window length, 10ms..10m (default 5s)\n"
	"  --wait DUR          how long to wait for the agent to take the request, for its\n"
	"                      answer after the window, and for the window's records (each;\n"
	"                      default 30s)\n"
	"  --token-file FILE   bearer token\n"
	"  -o, --output FILE   where the trace goes (default capture.json)\n";

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Takes --node, --pid, --duration and --wait out of argv (query_parse takes the rest). */
static int take_opts(int *argc, char **argv, const char **node, long *pid, const char **dur,
		     uint64_t *wait_ns, const char **wait_text)
{
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		static const char *const names[] = { "--node", "--pid", "--duration", "--wait" };
		const char *a = argv[i], *v = NULL;
		int which = -1;

		for (int k = 0; k < 4; k++) {
			size_t n = strlen(names[k]);

			if (!strcmp(a, names[k])) {
				if (i + 1 >= *argc) {
					fprintf(stderr, "gpuscope: %s needs a value\n%s", a, usage_text);
					return -1;
				}
				v = argv[++i];
				which = k;
			} else if (!strncmp(a, names[k], n) && a[n] == '=') {
				v = a + n + 1;
				which = k;
			}
		}
		if (which < 0) {
			argv[out++] = argv[i];
			continue;
		}
		if (which == 0) {
			*node = v;
		} else if (which == 1) {
			char *end;

			errno = 0;
			*pid = strtol(v, &end, 10);
			if (errno || *end || !*v || *pid <= 0 || *pid > 0x3fffffff) {
				fprintf(stderr, "gpuscope: --pid: '%s' is not a process id\n", v);
				return -1;
			}
		} else if (which == 2) {
			uint64_t d;

			if (parse_duration_ns(v, &d) || d < 10 * NSEC_PER_MSEC || d > 600 * NSEC_PER_SEC) {
				fprintf(stderr, "gpuscope: --duration: '%s' is not in 10ms..10m\n", v);
				return -1;
			}
			*dur = v;
		} else if (parse_duration_ns(v, wait_ns)) {
			fprintf(stderr, "gpuscope: --wait: '%s' is not a duration\n", v);
			return -1;
		} else {
			*wait_text = v;
		}
	}
	*argc = out;
	argv[out] = NULL;
	return 0;
}

/*
 * Adds the nodes of a /api/v1/nodes-shaped answer of endpoint to known ("'a', 'b'"), counting
 * them in *n; sets *found when node is one. 0, or -1 when the server did not answer (printed).
 */
static int list_nodes(const struct query *q, const char *endpoint, const char *node,
		      char *known, size_t cap, size_t *n, bool *found)
{
	char url[2048];
	json_t *j, *it;
	size_t i, used = strlen(known);

	snprintf(url, sizeof(url), "%s/api/v1/%s", q->server, endpoint);
	j = http_get_json(q, url);
	if (!j)
		return -1;
	json_array_foreach(json_object_get(j, "nodes"), i, it) {
		const char *name = json_string_value(json_object_get(it, "node"));
		char quoted[160];

		if (!name)
			continue;
		*found |= !strcmp(name, node);
		snprintf(quoted, sizeof(quoted), "'%s'", name);
		if (strstr(known, quoted))
			continue;	/* in both lists */
		if (used < cap)
			used += (size_t)snprintf(known + used, cap - used, "%s%s", *n ? ", " : "",
						 quoted);
		(*n)++;
	}
	json_decref(j);
	return 0;
}

/*
 * Is node one whose agent asks this server for captures, or one the server has data of? 0 yes;
 * 2 no, after printing the nodes it knows; 1 when the server did not answer (printed). An
 * agent that just started may not have asked yet: asked again once after its poll interval.
 */
static int check_node(const struct query *q, const char *node)
{
	char known[1024];
	bool found = false;
	size_t n;

	for (int tries = 0; tries < 2 && !found; tries++) {
		if (tries)
			sleep_ms(1500);
		known[0] = 0;
		n = 0;
		if (list_nodes(q, "capture/nodes", node, known, sizeof(known), &n, &found) ||
		    list_nodes(q, "nodes", node, known, sizeof(known), &n, &found))
			return 1;
	}
	if (found)
		return 0;
	if (n)
		fprintf(stderr, "gpuscope: unknown node '%s': the server knows %zu node%s: %s\n", node,
			n, n == 1 ? "" : "s", known);
	else
		fprintf(stderr, "gpuscope: unknown node '%s': no agent asks this server for captures "
				"and it has no data of any node (is an agent running with --server "
				"%s?)\n", node, q->server);
	return 2;
}

static json_t *post_json(const struct query *q, const char *url)
{
	struct http_body b = { 0 };
	json_t *j;

	if (http_post(q, url, &b))
		return NULL;
	j = json_loads(b.data, 0, NULL);
	free(b.data);
	if (!j)
		fprintf(stderr, "gpuscope: the server's answer is not JSON\n");
	return j;
}

/* Has a capture window of pid (0: any) that ended after the request (from_ns) reached the
 * server? */
static bool window_arrived(const struct query *q, const char *enode, long pid, uint64_t from_ns,
			   uint64_t to_ns)
{
	char url[2048], sel[600];
	json_t *j, *ivs, *iv;
	bool found = false;
	size_t i;
	char *esel;

	if (pid)
		snprintf(sel, sizeof(sel), "{node=\"%s\",pid=\"%ld\"}", enode, pid);
	else
		snprintf(sel, sizeof(sel), "{node=\"%s\"}", enode);
	esel = curl_easy_escape(NULL, sel, 0);
	snprintf(url, sizeof(url),
		 "%s/api/v1/intervals?kind=gpu_trace_window&from=%.9f&to=%.9f&selector=%s",
		 q->server, from_ns / 1e9 - 2, to_ns / 1e9 + 60, esel ? esel : "");
	curl_free(esel);
	j = http_get_json(q, url);
	ivs = json_object_get(j, "intervals");
	json_array_foreach(ivs, i, iv) {
		const char *why = json_string_value(json_object_get(json_object_get(iv, "attrs"),
								     "reason"));
		double end_ms = json_number_value(json_object_get(iv, "end_ms"));

		if (why && !strcmp(why, "capture") && end_ms * 1e6 >= (double)from_ns)
			found = true;
	}
	json_decref(j);
	return found;
}

int cmd_capture(int argc, char **argv)
{
	const char *node = NULL, *dur = "5s", *state = NULL, *status = NULL, *msg = NULL;
	uint64_t wait_ns = 30 * NSEC_PER_SEC, t0, from_ns = 0, to_ns = 0, id = 0, dur_ns = 0;
	uint64_t taken_ns = 0;
	const char *wait_text = "30s";
	char url[2048], *enode = NULL;
	struct http_body trace = { 0 };
	json_t *j = NULL;
	struct query q;
	long pid = 0;
	int rc;

	if (take_opts(&argc, argv, &node, &pid, &dur, &wait_ns, &wait_text))
		return 2;
	rc = query_parse(argc, argv, Q_OUTPUT_OPT, usage_text, &q);
	if (rc)
		return rc == 1 ? 0 : rc;
	if (!node || !*node) {
		fprintf(stderr, "gpuscope: --node NODE is required\n%s", usage_text);
		return 2;
	}
	if (parse_duration_ns(dur, &dur_ns))
		dur_ns = 5 * NSEC_PER_SEC;
	rc = check_node(&q, node);
	if (rc)
		return rc;
	enode = curl_easy_escape(NULL, node, 0);
	if (!enode)
		return 1;
	snprintf(url, sizeof(url), "%s/api/v1/capture?node=%s&duration=%s", q.server, enode, dur);
	if (pid)
		snprintf(url + strlen(url), sizeof(url) - strlen(url), "&pid=%ld", pid);
	j = post_json(&q, url);
	if (!j)
		goto fail;
	id = json_integer_value(json_object_get(j, "id"));
	json_decref(j);
	j = NULL;
	fprintf(stderr, "gpuscope: capture %" PRIu64 " asked of node '%s' (%s)\n", id, node, dur);

	/* the agent takes it within a second or two, answers once the window is over */
	t0 = mono_ns();
	for (;;) {
		snprintf(url, sizeof(url), "%s/api/v1/capture/status?id=%" PRIu64, q.server, id);
		json_decref(j);
		j = http_get_json(&q, url);
		if (!j)
			goto fail;
		state = json_string_value(json_object_get(j, "state"));
		if (!state)
			state = "?";
		if (!strcmp(state, "done") || !strcmp(state, "expired"))
			break;
		if (strcmp(state, "pending") && !taken_ns)
			taken_ns = mono_ns();	/* the agent has it: the window, then its answer */
		if (!taken_ns && mono_ns() - t0 > wait_ns) {
			fprintf(stderr, "gpuscope: capture %" PRIu64 ": node '%s' did not take it "
					"within --wait %s (is its agent running, with --server "
					"pointing here?)\n", id, node, wait_text);
			goto fail;
		}
		if (taken_ns && mono_ns() - taken_ns > dur_ns + wait_ns) {
			fprintf(stderr, "gpuscope: capture %" PRIu64 ": node '%s' took it but did not "
					"answer within the window and --wait %s\n", id, node,
				wait_text);
			goto fail;
		}
		sleep_ms(100);
	}
	status = json_string_value(json_object_get(j, "status"));
	msg = json_string_value(json_object_get(j, "message"));
	if (!strcmp(state, "expired")) {
		fprintf(stderr, "gpuscope: capture %" PRIu64 " expired: %s\n", id, msg ? msg : "");
		goto fail;
	}
	fprintf(stderr, "gpuscope: agent: %s%s%s\n", status ? status : "?", msg ? ": " : "",
		msg ? msg : "");
	from_ns = (uint64_t)(json_number_value(json_object_get(j, "from_ms")) * 1e6);
	to_ns = (uint64_t)(json_number_value(json_object_get(j, "to_ms")) * 1e6);
	if (!to_ns || to_ns <= from_ns) {	/* not injected: the asked range, no GPU window */
		to_ns = wall_ns();
		from_ns = to_ns - 5 * NSEC_PER_SEC;
	}
	if (status && !strcmp(status, "ok")) {
		/* the agent pushes the window's records right after it; wait for them */
		t0 = mono_ns();
		while (!window_arrived(&q, node, pid, from_ns, to_ns)) {
			if (mono_ns() - t0 > wait_ns) {
				fprintf(stderr, "gpuscope: the window's records did not reach the server "
						"within --wait; writing what is there\n");
				break;
			}
			sleep_ms(500);
		}
	}
	snprintf(url, sizeof(url), "%s/api/v1/trace?node=%s&from=%.9f&to=%.9f", q.server, enode,
		 from_ns / 1e9, to_ns / 1e9);
	if (pid)
		snprintf(url + strlen(url), sizeof(url) - strlen(url), "&pid=%ld", pid);
	if (http_get(&q, url, &trace))
		goto fail;
	rc = write_output(q.output ? q.output : "capture.json", trace.data, trace.len);
	if (!rc)
		fprintf(stderr, "gpuscope: wrote %s (%zu bytes; open it at ui.perfetto.dev)\n",
			q.output ? q.output : "capture.json", trace.len);
	rc = rc ? 1 : (status && !strcmp(status, "ok") ? 0 : 3);
	free(trace.data);
	json_decref(j);
	curl_free(enode);
	return rc;
fail:
	json_decref(j);
	curl_free(enode);
	return 1;
}
