/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope mcp`'s tools: each a read-only query of the server's HTTP API (client.c: the CLI's
 * auth and TLS), its input schema written from one table of arguments, its answer as text for
 * the assistant plus the server's JSON as structuredContent.
 */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/client.h"
#include "cli/mcp.h"
#include "common/batch.h"
#include "common/util.h"

#define LIMIT_MAX       1000
#define FOLDED_DEFAULT  32768	/* bytes of folded stacks when max_bytes is not given */
#define FOLDED_MAX      (1 << 20)

/* Arguments, as flags of a tool's `args`. */
enum {
	A_RANGE = 1 << 0,	/* since, from, to */
	A_SELECTOR = 1 << 1,
	A_KIND = 1 << 2,
	A_GPU_IDLE = 1 << 3,
	A_PYTHON = 1 << 4,
	A_LIMIT = 1 << 5,
	A_BY = 1 << 6,
	A_CAUSES = 1 << 7,
	A_MAX_BYTES = 1 << 8,
};

enum ptype { P_STR, P_INT, P_BOOL };

static const char *const kinds[] = { "cpu", "offcpu_ns", "gpu_kernel_ns", "cuda_sync_ns", NULL };

struct param {
	const char *name;
	unsigned flag;
	enum ptype type;
	long min, max;			/* P_INT */
	const char *const *enumv;	/* P_STR: the allowed values, NULL-terminated */
	const char *desc;
};

static const struct param params[] = {
	{ "since", A_RANGE, P_STR, 0, 0, NULL,
	  "how far back from now: 30s, 5m, 1h, 2d (default: the server's --since, 1h)" },
	{ "from", A_RANGE, P_STR, 0, 0, NULL,
	  "range start, RFC 3339 (2026-12-07T10:00:00Z) or Unix seconds; excludes since" },
	{ "to", A_RANGE, P_STR, 0, 0, NULL, "range end (default now); needs from" },
	{ "selector", A_SELECTOR, P_STR, 0, 0, NULL,
	  "label selector, e.g. {namespace=\"team-a\",pod=~\"train-.*\"}; labels: node, pid, "
	  "comm, tid, thread, pod, namespace, container, gpu, program, ..." },
	{ "kind", A_KIND, P_STR, 0, 0, kinds,
	  "sample kind: cpu (on-CPU samples, default), offcpu_ns (time blocked), "
	  "gpu_kernel_ns (GPU time by launching stack), cuda_sync_ns (CPU time waiting for the "
	  "GPU)" },
	{ "gpu_idle", A_GPU_IDLE, P_STR, 0, 0, NULL,
	  "GPU index: keep only samples taken while that GPU (on the selector's node) was idle" },
	{ "python_only", A_PYTHON, P_BOOL, 0, 0, NULL,
	  "fold the interpreter's own frames away so Python functions sit adjacent" },
	{ "limit", A_LIMIT, P_INT, 1, LIMIT_MAX, NULL, "at most this many rows" },
	{ "by", A_BY, P_STR, 0, 0, NULL,
	  "workload label to group GPU time by: namespace (default), pod, container, owner, "
	  "kubeflow_job, ray_cluster, comm, pid, node, program, or any label" },
	{ "causes", A_CAUSES, P_INT, 0, 1000, NULL,
	  "idle causes (top CPU functions, blocked reasons) for this many costliest workloads "
	  "(default 3)" },
	{ "max_bytes", A_MAX_BYTES, P_INT, 1024, FOLDED_MAX, NULL,
	  "size bound of the folded text (default 32768): the heaviest stacks are kept" },
};

struct tool {
	const char *name, *title, *desc;
	unsigned args;
	long limit;		/* default of `limit` */
	json_t *(*run)(struct mcp_call *c);
};

static json_t *run_nodes(struct mcp_call *c);
static json_t *run_processes(struct mcp_call *c);
static json_t *run_flamegraph(struct mcp_call *c);
static json_t *run_top(struct mcp_call *c);
static json_t *run_efficiency(struct mcp_call *c);
static json_t *run_findings(struct mcp_call *c);

static const struct tool tools[] = {
	{ "nodes", "Nodes", "The nodes that sent data, each with the time extent of its data. "
	  "Start here to learn node names and when data exists.", 0, 0, run_nodes },
	{ "processes", "Processes", "The processes with the most samples in a range: pid, name, "
	  "program (the script a Python runs), pod, command line, share.",
	  A_RANGE | A_SELECTOR | A_KIND | A_LIMIT, 20, run_processes },
	{ "flamegraph", "Flame graph (folded)", "The merged stacks of a range as folded text, "
	  "one 'root;...;leaf VALUE' line per stack, heaviest first, bounded by max_bytes; the "
	  "first line says the unit, total and how much was left out. With gpu_idle: only what "
	  "ran while that GPU was idle.",
	  A_RANGE | A_SELECTOR | A_KIND | A_GPU_IDLE | A_PYTHON | A_MAX_BYTES, 0, run_flamegraph },
	{ "top", "Top functions", "The functions with the most self samples (leaf) and their "
	  "total (anywhere on the stack), with shares; with gpu_idle only while that GPU was "
	  "idle (what the CPUs did instead).",
	  A_RANGE | A_SELECTOR | A_KIND | A_GPU_IDLE | A_LIMIT, 25, run_top },
	{ "timeline_summary", "Timeline summary", "Over a range: each GPU's busy, idle and "
	  "unknown seconds (the best source that observed it: kernels, GPM, NVML), and the "
	  "threads' time running, runnable and blocked by reason (io, futex, cuda_sync, ...), "
	  "in total and for the busiest threads.", A_RANGE | A_SELECTOR, 0, mcp_timeline_summary },
	{ "efficiency", "GPU efficiency", "GPU-hours held, busy, idle and unknown per workload "
	  "with idle dollars and idle causes (top CPU functions while the GPU was idle, blocked "
	  "reasons), costliest first.", A_RANGE | A_SELECTOR | A_BY | A_CAUSES | A_LIMIT, 20,
	  run_efficiency },
	{ "findings", "Findings", "Ranked findings: what wastes GPU time per workload, its "
	  "cause (functions, lines, figures), GPU-seconds and dollars at stake, confidence, a "
	  "recommendation and the evidence (API calls to check it).",
	  A_RANGE | A_SELECTOR | A_BY | A_LIMIT, 20, run_findings },
};

#define NTOOLS (sizeof(tools) / sizeof(tools[0]))
#define NPARAMS (sizeof(params) / sizeof(params[0]))

static const struct tool *tool_find(const char *name)
{
	for (size_t i = 0; i < NTOOLS; i++)
		if (!strcmp(tools[i].name, name))
			return &tools[i];
	return NULL;
}

static json_t *param_schema(const struct param *p, const struct tool *t)
{
	json_t *s = json_pack("{s:s, s:s}", "type", p->type == P_STR ? "string" :
			      p->type == P_INT ? "integer" : "boolean", "description", p->desc);

	if (!s)
		return NULL;
	if (p->type == P_INT) {
		json_object_set_new(s, "minimum", json_integer(p->min));
		json_object_set_new(s, "maximum", json_integer(p->max));
		if (p->flag == A_LIMIT)
			json_object_set_new(s, "default", json_integer(t->limit));
	}
	if (p->enumv) {
		json_t *e = json_array();

		for (int i = 0; p->enumv[i]; i++)
			json_array_append_new(e, json_string(p->enumv[i]));
		json_object_set_new(s, "enum", e);
	}
	if (p->flag == A_GPU_IDLE)
		json_object_set_new(s, "pattern", json_string("^[0-9]+$"));
	return s;
}

json_t *mcp_tools_list(void)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && i < NTOOLS; i++) {
		const struct tool *t = &tools[i];
		json_t *props = json_object(), *tool;

		for (size_t k = 0; props && k < NPARAMS; k++)
			if (t->args & params[k].flag)
				json_object_set_new(props, params[k].name, param_schema(&params[k], t));
		tool = json_pack("{s:s, s:s, s:s, s:{s:s, s:o, s:b}, s:{s:b, s:b, s:b}}",
				 "name", t->name, "title", t->title, "description", t->desc,
				 "inputSchema", "type", "object", "properties", props,
				 "additionalProperties", 0, "annotations", "readOnlyHint", 1,
				 "destructiveHint", 0, "openWorldHint", 0);
		if (!tool || json_array_append_new(arr, tool)) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

static const struct param *param_find(const struct tool *t, const char *name)
{
	for (size_t k = 0; k < NPARAMS; k++)
		if ((t->args & params[k].flag) && !strcmp(params[k].name, name))
			return &params[k];
	return NULL;
}

/* The names a tool takes, for an error line. */
static void param_names(const struct tool *t, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = 0;
	for (size_t k = 0; k < NPARAMS && n < len; k++)
		if (t->args & params[k].flag)
			n += snprintf(buf + n, len - n, "%s%s", n ? ", " : "", params[k].name);
	if (!n)
		snprintf(buf, len, "none");
}

static int check_value(const struct param *p, json_t *v, char *err, size_t errlen)
{
	const char *s = json_string_value(v);
	uint64_t ns;

	switch (p->type) {
	case P_BOOL:
		if (!json_is_boolean(v))
			goto type;
		return 0;
	case P_INT:
		if (!json_is_integer(v))
			goto type;
		if (json_integer_value(v) < p->min || json_integer_value(v) > p->max) {
			snprintf(err, errlen, "%s: %lld is not %ld..%ld", p->name,
				 (long long)json_integer_value(v), p->min, p->max);
			return -EINVAL;
		}
		return 0;
	case P_STR:
		if (!s)
			goto type;
		break;
	}
	for (int i = 0; p->enumv && p->enumv[i]; i++)
		if (!strcmp(s, p->enumv[i]))
			return 0;
	if (p->enumv) {
		snprintf(err, errlen, "%s: '%.100s' is not one of cpu, offcpu_ns, gpu_kernel_ns, "
			 "cuda_sync_ns", p->name, s);
		return -EINVAL;
	}
	if (!strcmp(p->name, "since") && (parse_duration_ns(s, &ns) || !ns)) {
		snprintf(err, errlen, "since: '%.100s' is not a duration (5m, 1h, 2d)", s);
		return -EINVAL;
	}
	if ((!strcmp(p->name, "from") || !strcmp(p->name, "to")) && parse_time_ns(s, &ns)) {
		snprintf(err, errlen, "%s: '%.100s' is not an RFC 3339 time or Unix seconds",
			 p->name, s);
		return -EINVAL;
	}
	if (p->flag == A_GPU_IDLE && (!*s || strspn(s, "0123456789") != strlen(s))) {
		snprintf(err, errlen, "gpu_idle: '%.100s' is not a GPU index", s);
		return -EINVAL;
	}
	if (p->flag == A_BY && !*s) {
		snprintf(err, errlen, "by: empty; a label name, e.g. namespace or pod");
		return -EINVAL;
	}
	return 0;
type:
	snprintf(err, errlen, "%s must be %s", p->name, p->type == P_STR ? "a string" :
		 p->type == P_INT ? "an integer" : "a boolean");
	return -EINVAL;
}

int mcp_tool_check(const char *name, json_t *args, char *err, size_t errlen)
{
	const struct tool *t = tool_find(name);
	uint64_t from = 0, to = 0;
	const char *key;
	char names[200];
	json_t *v;
	int rc;

	if (!t) {
		snprintf(err, errlen, "%.100s", name);
		return -ENOENT;
	}
	if (args && !json_is_object(args)) {
		snprintf(err, errlen, "arguments must be an object");
		return -EINVAL;
	}
	json_object_foreach(args, key, v) {
		const struct param *p = param_find(t, key);

		if (!p) {
			param_names(t, names, sizeof(names));
			snprintf(err, errlen, "%s: unknown argument '%.60s' (it takes: %s)", name, key,
				 names);
			return -EINVAL;
		}
		rc = check_value(p, v, err, errlen);
		if (rc)
			return rc;
	}
	if (json_object_get(args, "to") && !json_object_get(args, "from")) {
		snprintf(err, errlen, "to needs from");
		return -EINVAL;
	}
	if (json_object_get(args, "from") && json_object_get(args, "since")) {
		snprintf(err, errlen, "since and from/to exclude each other");
		return -EINVAL;
	}
	if (json_object_get(args, "to")) {
		parse_time_ns(json_string_value(json_object_get(args, "from")), &from);
		parse_time_ns(json_string_value(json_object_get(args, "to")), &to);
		if (from > to) {
			snprintf(err, errlen, "from is after to");
			return -EINVAL;
		}
	}
	return 0;
}

/* ---- answers ---- */

void mcp_utf8_fix(char *s)
{
	unsigned char *p = (unsigned char *)s;

	while (*p) {
		int n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 :
			(*p & 0xf8) == 0xf0 ? 4 : 0;
		int k = 1;

		while (n && k < n && (p[k] & 0xc0) == 0x80)
			k++;
		/* overlong, surrogate and out-of-range forms are left to jansson's check below */
		if (!n || k < n) {
			*p++ = '?';
			continue;
		}
		p += n;
	}
}

/* A result with one text block; structured (consumed, may be NULL) goes in structuredContent. */
static json_t *result(const char *text, json_t *structured, bool is_error)
{
	json_t *r = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text",
			      text ? text : "", "isError", is_error);

	if (!r && text) {	/* not UTF-8 after all: say so rather than answer nothing */
		json_decref(structured);
		return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text",
				 "the answer held text that is not UTF-8", "isError", 1);
	}

	if (r && json_is_object(structured))
		json_object_set(r, "structuredContent", structured);
	json_decref(structured);
	return r;
}

json_t *mcp_error_result(struct mcp_call *c)
{
	mcp_utf8_fix(c->err);
	return result(c->err[0] ? c->err : "the query failed", NULL, true);
}

/* A result whose text is the JSON itself (compact); consumes j. */
static json_t *json_result(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_t *r = s ? result(s, json_incref(j), false) : NULL;

	free(s);
	json_decref(j);
	return r;
}

/*
 * GETs endpoint with the call's query and extra "name", "value" pairs (NULL-terminated). The
 * answer as a JSON object, or NULL with c->err saying why (the server's error and status, an
 * unreachable server, cancelled).
 */
json_t *mcp_get(struct mcp_call *c, const char *endpoint, ...)
{
	struct http_body b = { 0 };
	char *url = query_url(&c->q, endpoint);
	json_error_t jerr;
	const char *name;
	json_t *j = NULL;
	long status = 0;
	va_list ap;
	int rc;

	va_start(ap, endpoint);
	while (url && (name = va_arg(ap, const char *))) {
		const char *value = va_arg(ap, const char *);

		if (value && query_url_add(&url, name, value)) {
			free(url);
			url = NULL;
		}
	}
	va_end(ap);
	if (!url) {
		snprintf(c->err, sizeof(c->err), "out of memory");
		return NULL;
	}
	c->err[0] = 0;
	rc = http_get_status(&c->q, url, &b, &status);
	free(url);
	if (rc < 0)
		return NULL;	/* c->err has the line */
	j = json_loadb(b.data, b.len, 0, &jerr);
	if (rc == 1) {
		const char *msg = json_string_value(json_object_get(j, "error"));

		snprintf(c->err, sizeof(c->err), "server: %s (HTTP %ld)",
			 msg ? msg : b.len ? b.data : "(empty answer)", status);
		c->err[strcspn(c->err, "\r\n")] = 0;
		json_decref(j);
		j = NULL;
	} else if (!json_is_object(j)) {
		snprintf(c->err, sizeof(c->err), "server: answer is not a JSON object: %s",
			 j ? "wrong type" : jerr.text);
		json_decref(j);
		j = NULL;
	}
	free(b.data);
	return j;
}

static const char *str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static double num(json_t *o, const char *k)
{
	return json_number_value(json_object_get(o, k));
}

/* Unix ms as "2026-12-07T10:00:00Z". */
const char *mcp_iso(double ms, char *buf, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return buf;
}

int mcp_text_open(struct mcp_text *t)
{
	t->s = NULL;
	t->f = open_memstream(&t->s, &t->n);
	return t->f ? 0 : -ENOMEM;
}

/* Closes t and makes the result (consumes structured); NULL out of memory. */
json_t *mcp_text_result(struct mcp_text *t, json_t *structured)
{
	json_t *r = NULL;

	if (!fclose(t->f))
		r = result(t->s, structured, false);
	else
		json_decref(structured);
	free(t->s);
	return r;
}

static bool ns_unit(json_t *j)
{
	const char *u = str(j, "unit");

	return u && !strcmp(u, "ns");
}

/* The value of a sample count or a time in ns, for the text. */
static void fmt_val(double v, bool ns, char *buf, size_t len)
{
	if (ns)
		fmt_duration((uint64_t)v, buf, len);
	else
		snprintf(buf, len, "%.0f", v);
}

/* The estimator's sentence of a GPU-idle answer, and the traced share of kernel time. */
static void print_notes(FILE *f, json_t *j)
{
	const char *s = str(json_object_get(json_object_get(j, "gpu_sources"), "estimate"),
			    "summary");
	json_t *tr = json_object_get(j, "traced");

	if (s)
		fprintf(f, "%s\n", s);
	if (json_is_object(tr))
		fprintf(f, "kernels traced in %.1f%% of the range; the rest is not in these "
			"figures\n", 100 * num(tr, "fraction"));
}

/*
 * The answer of endpoint (with the call's limit when `limited`) and a text opened for it. NULL
 * with *ret the result to give instead: the error result, or NULL out of memory.
 */
static json_t *get_with_text(struct mcp_call *c, const char *endpoint, bool limited,
			     struct mcp_text *t, json_t **ret)
{
	char lim[24];
	json_t *j;

	snprintf(lim, sizeof(lim), "%ld", c->limit);
	j = limited ? mcp_get(c, endpoint, "limit", lim, NULL) : mcp_get(c, endpoint, NULL);
	*ret = NULL;
	if (!j) {
		*ret = mcp_error_result(c);
		return NULL;
	}
	if (mcp_text_open(t)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

static json_t *run_nodes(struct mcp_call *c)
{
	json_t *j, *n, *r;
	char a[32], b[32];
	struct mcp_text t;
	size_t i;

	j = get_with_text(c, "nodes", false, &t, &r);
	if (!j)
		return r;
	fprintf(t.f, "%zu node(s) sent data (now %s):\n", json_array_size(json_object_get(j, "nodes")),
		mcp_iso(wall_ns() / 1e6, a, sizeof(a)));
	json_array_foreach(json_object_get(j, "nodes"), i, n)
		fprintf(t.f, "%s: data from %s to %s\n", str(n, "node") ?: "?",
			mcp_iso(num(n, "first_ms"), a, sizeof(a)), mcp_iso(num(n, "last_ms"), b, sizeof(b)));
	return mcp_text_result(&t, j);
}

static json_t *run_processes(struct mcp_call *c)
{
	json_t *j, *p, *r;
	struct mcp_text t;
	double total;
	char v[32];
	size_t i;

	j = get_with_text(c, "processes", true, &t, &r);
	if (!j)
		return r;
	total = num(j, "total");
	fmt_val(total, ns_unit(j), v, sizeof(v));
	fprintf(t.f, "total %s%s over %lld process(es); the first %zu:\n", v,
		ns_unit(j) ? "" : " samples", (long long)json_integer_value(json_object_get(j, "count")),
		json_array_size(json_object_get(j, "processes")));
	json_array_foreach(json_object_get(j, "processes"), i, p) {
		fmt_val(num(p, "value"), ns_unit(j), v, sizeof(v));
		fprintf(t.f, "pid %s comm %s program %s pod %s: %s (%.1f%%) cmdline: %s\n",
			str(p, "pid") ?: "?", str(p, "comm") ?: "?", str(p, "program") ?: "-",
			str(p, "pod") ?: "-", v, total > 0 ? 100 * num(p, "value") / total : 0.0,
			str(p, "cmdline") ?: "-");
	}
	return mcp_text_result(&t, j);
}

static json_t *run_top(struct mcp_call *c)
{
	char from[32], s[32], to[32];
	json_t *j, *fn, *r;
	struct mcp_text t;
	double total;
	size_t i;

	j = get_with_text(c, "top", true, &t, &r);
	if (!j)
		return r;
	total = num(j, "total");
	fmt_val(total, ns_unit(j), s, sizeof(s));
	fprintf(t.f, "%s to %s, total %s%s\n", mcp_iso(num(j, "from_ms"), from, sizeof(from)),
		mcp_iso(num(j, "to_ms"), to, sizeof(to)), s, ns_unit(j) ? "" : " samples");
	print_notes(t.f, j);
	fprintf(t.f, "SELF%% TOTAL%% SELF TOTAL FUNCTION\n");
	json_array_foreach(json_object_get(j, "functions"), i, fn) {
		fmt_val(num(fn, "self"), ns_unit(j), s, sizeof(s));
		fmt_val(num(fn, "total"), ns_unit(j), to, sizeof(to));
		fprintf(t.f, "%.2f %.2f %s %s %s\n", total > 0 ? 100 * num(fn, "self") / total : 0.0,
			total > 0 ? 100 * num(fn, "total") / total : 0.0, s, to,
			str(fn, "name") ?: "?");
	}
	if (!json_array_size(json_object_get(j, "functions")))
		fprintf(t.f, "(no samples in this range)\n");
	return mcp_text_result(&t, j);
}

struct stack {
	char *path;
	double self;
};

struct stacks {
	struct stack *v;
	size_t n, cap;
	char path[65536];	/* the frames above the node being walked */
	bool too_deep;
};

/* Collects every node with self time as a folded line; frames' ';' become ':'. */
static int walk(struct stacks *s, json_t *node, size_t plen, int depth)
{
	const char *name = str(node, "name") ?: "?";
	size_t n = strlen(name), i;
	json_t *ch;
	int rc;

	if (depth > 0) {
		if (plen + n + 2 >= sizeof(s->path) || depth > 4096) {
			s->too_deep = true;
			return 0;
		}
		if (plen)
			s->path[plen++] = ';';
		for (i = 0; i < n; i++)
			s->path[plen + i] = name[i] == ';' ? ':' : name[i];
		plen += n;
		s->path[plen] = 0;
		if (num(node, "self") > 0) {
			if (array_reserve(&s->v, &s->cap, s->n + 1, sizeof(*s->v), 256))
				return -ENOMEM;
			s->v[s->n].path = strndup(s->path, plen);
			if (!s->v[s->n].path)
				return -ENOMEM;
			s->v[s->n++].self = num(node, "self");
		}
	}
	json_array_foreach(json_object_get(node, "children"), i, ch) {
		rc = walk(s, ch, plen, depth + 1);
		if (rc)
			return rc;
	}
	return 0;
}

static int by_self_desc(const void *a, const void *b)
{
	const struct stack *x = a, *y = b;

	if (x->self != y->self)
		return x->self < y->self ? 1 : -1;
	return strcmp(x->path, y->path);
}

static json_t *run_flamegraph(struct mcp_call *c)
{
	json_t *max = json_object_get(c->args, "max_bytes"), *j, *meta = NULL, *r = NULL;
	size_t limit = max ? (size_t)json_integer_value(max) : FOLDED_DEFAULT, used = 0, shown = 0;
	struct stacks *s = calloc(1, sizeof(*s));
	double total, kept = 0;
	struct mcp_text t;
	char v[32];

	if (!s)
		return NULL;
	j = mcp_get(c, "flamegraph", NULL);
	if (!j) {
		free(s);
		return mcp_error_result(c);
	}
	if (walk(s, json_object_get(j, "root"), 0, 0) || mcp_text_open(&t))
		goto out;
	qsort(s->v, s->n, sizeof(*s->v), by_self_desc);
	total = num(j, "total");
	fmt_val(total, ns_unit(j), v, sizeof(v));
	/* the stacks first (to know what fits), the header in front of them after */
	for (; shown < s->n; shown++) {
		char line[64];
		int n = snprintf(line, sizeof(line), " %.0f\n", s->v[shown].self);
		size_t need = strlen(s->v[shown].path) + (size_t)n;

		if (used + need > limit)
			break;
		used += need;
		kept += s->v[shown].self;
	}
	fprintf(t.f, "# unit %s, total %s, %zu stack(s); shown %zu (%.1f%% of the total)%s%s\n",
		ns_unit(j) ? "ns" : "samples", v, s->n, shown, total > 0 ? 100 * kept / total : 100.0,
		shown < s->n ? "; raise max_bytes or narrow the selector for the rest" : "",
		s->too_deep ? "; stacks past 64 KiB of frames left out" : "");
	if (str(json_object_get(json_object_get(j, "gpu_sources"), "estimate"), "summary"))
		fprintf(t.f, "# %s\n", str(json_object_get(json_object_get(j, "gpu_sources"),
							    "estimate"), "summary"));
	for (size_t i = 0; i < shown; i++)
		fprintf(t.f, "%s %.0f\n", s->v[i].path, s->v[i].self);
	meta = json_pack("{s:s, s:f, s:I, s:I, s:f, s:O*}", "unit", ns_unit(j) ? "ns" : "samples",
			 "total", total, "stacks", (json_int_t)s->n, "shown", (json_int_t)shown,
			 "shown_value", kept, "gpu_sources", json_object_get(j, "gpu_sources"));
	r = mcp_text_result(&t, meta);
out:
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].path);
	free(s->v);
	free(s);
	json_decref(j);
	return r;
}

static json_t *run_efficiency(struct mcp_call *c)
{
	json_t *causes = json_object_get(c->args, "causes"), *j, *w;
	char n[24];

	snprintf(n, sizeof(n), "%lld", causes ? (long long)json_integer_value(causes) : 3LL);
	j = mcp_get(c, "efficiency", "causes", n, NULL);
	if (!j)
		return mcp_error_result(c);
	w = json_object_get(j, "workloads");
	if (json_array_size(w) > (size_t)c->limit) {
		json_object_set_new(j, "workloads_left_out",
				    json_integer((json_int_t)(json_array_size(w) - c->limit)));
		while (json_array_size(w) > (size_t)c->limit)
			json_array_remove(w, json_array_size(w) - 1);
	}
	return json_result(j);
}

static json_t *run_findings(struct mcp_call *c)
{
	json_t *j, *f, *e, *r;
	struct mcp_text t;
	size_t i, k;

	j = get_with_text(c, "insights", true, &t, &r);
	if (!j)
		return r;
	fprintf(t.f, "%zu finding(s) over %lld workload(s) by %s, costliest first\n",
		json_array_size(json_object_get(j, "findings")),
		(long long)json_integer_value(json_object_get(j, "workloads_checked")),
		str(j, "by") ?: "?");
	if (str(json_object_get(j, "estimate"), "summary"))
		fprintf(t.f, "%s\n", str(json_object_get(j, "estimate"), "summary"));
	json_array_foreach(json_object_get(j, "findings"), i, f) {
		json_t *d = json_object_get(f, "dollars_at_stake");

		fprintf(t.f, "\n%zu. [%s] %s\n   workload %s (selector %s), node %s GPU %s\n", i + 1,
			str(f, "kind") ?: "?", str(f, "title") ?: "?", str(f, "workload") ?: "?",
			str(f, "selector") ?: "?", str(f, "node") ?: "?", str(f, "gpu") ?: "-");
		fprintf(t.f, "   at stake: %.1f GPU-seconds (%.1f%% of held)", num(f,
			"gpu_seconds_at_stake"), 100 * num(f, "share_of_held"));
		if (json_is_number(d))
			fprintf(t.f, ", $%.2f", json_number_value(d));
		fprintf(t.f, "; confidence %s", str(f, "confidence") ?: "?");
		if (num(f, "estimated_share") > 0)
			fprintf(t.f, " (%.0f%% estimated)", 100 * num(f, "estimated_share"));
		fprintf(t.f, "\n   %s\n   fix: %s\n", str(f, "summary") ?: "",
			str(f, "recommendation") ?: "");
		json_array_foreach(json_object_get(f, "evidence"), k, e)
			fprintf(t.f, "   evidence: %s -> %s\n", str(e, "label") ?: "?",
				str(e, "api") ?: "-");
	}
	if (!json_array_size(json_object_get(j, "findings")))
		fprintf(t.f, "no finding: nothing wasted GPU time enough to name a cause\n");
	return mcp_text_result(&t, j);
}

json_t *mcp_tool_call(const struct query *base, volatile int *cancel, const char *name,
		      json_t *args)
{
	const struct tool *t = tool_find(name);
	struct mcp_call *c;
	json_t *v, *r;

	if (!t)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->q = *base;
	c->q.cancel = cancel;
	c->q.errbuf = c->err;
	c->args = args;
	c->limit = t->limit;
	if ((v = json_object_get(args, "since")))
		c->q.since = json_string_value(v);
	if ((v = json_object_get(args, "from"))) {
		parse_time_ns(json_string_value(v), &c->q.from_ns);
		c->q.to_ns = wall_ns();
		if ((v = json_object_get(args, "to")))
			parse_time_ns(json_string_value(v), &c->q.to_ns);
		c->q.have_range = true;
	}
	c->q.selector = str(args, "selector");
	c->q.kind = str(args, "kind");
	c->q.gpu_idle = str(args, "gpu_idle");
	c->q.python_only = json_is_true(json_object_get(args, "python_only"));
	if ((t->args & A_BY))
		c->q.by = str(args, "by") ?: "namespace";
	if ((v = json_object_get(args, "limit")))
		c->limit = (long)json_integer_value(v);
	r = t->run(c);
	free(c);
	return r;
}
