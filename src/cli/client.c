/* SPDX-License-Identifier: Apache-2.0 */
/* Shared option parsing and HTTP GET for the CLI's query commands (libcurl, jansson). */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/client.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/util.h"

#define BODY_MAX (1ull << 30)	/* answers past 1 GiB are refused */

static int usage_error(const char *usage_text, const char *fmt, const char *arg)
{
	fprintf(stderr, "gpuscope: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n%s", usage_text);
	return 2;
}

int query_parse(int argc, char **argv, unsigned extra, const char *usage_text, struct query *q)
{
	enum {
		O_SERVER = 256, O_SINCE, O_FROM, O_TO, O_SELECTOR, O_KIND, O_TOKEN, O_GPU_IDLE,
		O_TITLE, O_LIMIT, O_SORT, O_CA_FILE, O_BY, O_FORMAT, O_FOLDED, O_PROCESSES,
		O_PYTHON_ONLY,
	};
	static const struct option lopts[] = {
		{ "server", required_argument, NULL, O_SERVER },
		{ "since", required_argument, NULL, O_SINCE },
		{ "from", required_argument, NULL, O_FROM },
		{ "to", required_argument, NULL, O_TO },
		{ "selector", required_argument, NULL, O_SELECTOR },
		{ "kind", required_argument, NULL, O_KIND },
		{ "token-file", required_argument, NULL, O_TOKEN },
		{ "ca-file", required_argument, NULL, O_CA_FILE },
		{ "output", required_argument, NULL, 'o' },
		{ "gpu-idle", required_argument, NULL, O_GPU_IDLE },
		{ "python-only", no_argument, NULL, O_PYTHON_ONLY },
		{ "title", required_argument, NULL, O_TITLE },
		{ "limit", required_argument, NULL, O_LIMIT },
		{ "sort", required_argument, NULL, O_SORT },
		{ "by", required_argument, NULL, O_BY },
		{ "format", required_argument, NULL, O_FORMAT },
		{ "folded", no_argument, NULL, O_FOLDED },
		{ "processes", no_argument, NULL, O_PROCESSES },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	const char *from = NULL, *to = NULL;
	uint64_t ns;
	char *end;
	int opt;

	memset(q, 0, sizeof(*q));
	/* The environment gives defaults; the command line wins. */
	q->server = getenv("GPUSCOPE_SERVER");
	q->token_file = getenv("GPUSCOPE_TOKEN_FILE");
	if (q->server && !*q->server)
		q->server = NULL;
	if (q->token_file && !*q->token_file)
		q->token_file = NULL;
	q->limit = 25;
	q->sort = "self";
	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":o:vh", lopts, NULL)) != -1) {
		switch (opt) {
		case O_SERVER:
			q->server = optarg;
			break;
		case O_SINCE:
			if (parse_duration_ns(optarg, &ns) || !ns)
				return usage_error(usage_text, "--since: '%s' is not a duration "
					"(5m, 1h, 2d)", optarg);
			q->since = optarg;
			break;
		case O_FROM:
			from = optarg;
			break;
		case O_TO:
			to = optarg;
			break;
		case O_SELECTOR:
			q->selector = optarg;
			break;
		case O_KIND:
			if (sample_kind_parse(optarg) < 0)
				return usage_error(usage_text, "--kind: '%s': want cpu, offcpu_ns, "
					"gpu_kernel_ns or cuda_sync_ns", optarg);
			q->kind = optarg;
			break;
		case O_TOKEN:
			q->token_file = optarg;
			break;
		case O_CA_FILE:
			q->ca_file = optarg;
			break;
		case 'o':
			if (!(extra & (Q_OUTPUT | Q_OUTPUT_OPT)))
				goto unknown;
			q->output = optarg;
			break;
		case O_GPU_IDLE:
			if (!(extra & Q_GPU_IDLE))
				goto unknown;
			q->gpu_idle = optarg;
			break;
		case O_PYTHON_ONLY:
			if (!(extra & Q_GPU_IDLE))
				goto unknown;
			q->python_only = true;
			break;
		case O_TITLE:
			if (!(extra & Q_TITLE))
				goto unknown;
			q->title = optarg;
			break;
		case O_LIMIT:
			if (!(extra & (Q_LIMIT | Q_REPORT)))
				goto unknown;
			errno = 0;
			q->limit = strtol(optarg, &end, 10);
			if (errno || *end || q->limit < 1)
				return usage_error(usage_text, "--limit: '%s' is not a positive count",
						   optarg);
			break;
		case O_SORT:
			if (!(extra & Q_SORT))
				goto unknown;
			if (strcmp(optarg, "self") && strcmp(optarg, "total"))
				return usage_error(usage_text, "--sort: '%s': want self or total",
						   optarg);
			q->sort = optarg;
			break;
		case O_BY:
			if (!(extra & Q_REPORT))
				goto unknown;
			q->by = optarg;
			break;
		case O_FORMAT:
			if (!(extra & Q_REPORT))
				goto unknown;
			if (strcmp(optarg, "table") && strcmp(optarg, "json") &&
			    strcmp(optarg, "markdown"))
				return usage_error(usage_text, "--format: '%s': want table, json or "
						   "markdown", optarg);
			q->format = optarg;
			break;
		case O_PROCESSES:
			if (!(extra & Q_PROCESSES))
				goto unknown;
			q->processes = true;
			break;
		case O_FOLDED:
			if (!(extra & Q_FOLDED))
				goto unknown;
			q->folded = true;
			break;
		case 'v':
			gpuscope_log_level = LOG_DEBUG;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 1;
		case ':':
			return usage_error(usage_text, "option '%s' needs a value", argv[optind - 1]);
		default:
		unknown:
			return usage_error(usage_text, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error(usage_text, "unexpected argument '%s'", argv[optind]);
	if (!q->server)
		return usage_error(usage_text, "%s", "--server URL (or $GPUSCOPE_SERVER) is required");
	if (strncmp(q->server, "http://", 7) && strncmp(q->server, "https://", 8))
		return usage_error(usage_text, "--server: '%s' is not an http(s):// URL", q->server);
	if ((from || to) && q->since)
		return usage_error(usage_text, "%s", "--since and --from/--to exclude each other");
	if (to && !from)
		return usage_error(usage_text, "%s", "--to needs --from");
	if (from) {
		if (parse_time_ns(from, &q->from_ns))
			return usage_error(usage_text, "--from: '%s' is not an RFC 3339 time or "
				"Unix seconds", from);
		q->to_ns = wall_ns();
		if (to && parse_time_ns(to, &q->to_ns))
			return usage_error(usage_text, "--to: '%s' is not an RFC 3339 time or "
				"Unix seconds", to);
		if (q->from_ns > q->to_ns)
			return usage_error(usage_text, "%s", "--from is after --to");
		q->have_range = true;
	} else if (!q->since) {
		q->since = extra & Q_REPORT ? "24h" : "1h";	/* a report's usual range */
	}
	if (extra & Q_REPORT) {
		if (!q->format)
			q->format = "table";
		if (!q->by)
			q->by = "namespace";
	}
	if ((extra & Q_OUTPUT) && !q->output)
		return usage_error(usage_text, "%s", "-o FILE is required");
	if (q->token_file && access(q->token_file, R_OK))
		return usage_error(usage_text, "--token-file: '%s' is not readable", q->token_file);
	if (q->ca_file && access(q->ca_file, R_OK))
		return usage_error(usage_text, "--ca-file: '%s' is not readable", q->ca_file);
	return 0;
}

int query_url_add(char **url, const char *name, const char *value)
{
	char *esc = curl_easy_escape(NULL, value, 0), *n;
	int r;

	if (!esc)
		return -ENOMEM;
	r = asprintf(&n, "%s%s%s=%s", *url, strchr(*url, '?') ? "&" : "?", name, esc);
	curl_free(esc);
	if (r < 0)
		return -ENOMEM;
	free(*url);
	*url = n;
	return 0;
}

char *query_url(const struct query *q, const char *endpoint)
{
	size_t n = strlen(q->server);
	char buf[64], *url;
	int err = 0;

	while (n && q->server[n - 1] == '/')
		n--;
	if (asprintf(&url, "%.*s/api/v1/%s", (int)n, q->server, endpoint) < 0)
		return NULL;
	if (q->have_range) {
		snprintf(buf, sizeof(buf), "%llu.%09llu",
			 (unsigned long long)(q->from_ns / NSEC_PER_SEC),
			 (unsigned long long)(q->from_ns % NSEC_PER_SEC));
		err = err ?: query_url_add(&url, "from", buf);
		snprintf(buf, sizeof(buf), "%llu.%09llu", (unsigned long long)(q->to_ns / NSEC_PER_SEC),
			 (unsigned long long)(q->to_ns % NSEC_PER_SEC));
		err = err ?: query_url_add(&url, "to", buf);
	} else if (q->since) {
		err = err ?: query_url_add(&url, "since", q->since);
	}
	if (q->selector)
		err = err ?: query_url_add(&url, "selector", q->selector);
	if (q->kind)
		err = err ?: query_url_add(&url, "kind", q->kind);
	if (q->gpu_idle)
		err = err ?: query_url_add(&url, "gpu_idle", q->gpu_idle);
	if (q->python_only)
		err = err ?: query_url_add(&url, "view", "python");
	if (q->by)
		err = err ?: query_url_add(&url, "by", q->by);
	if (err) {
		free(url);
		return NULL;
	}
	return url;
}

char *query_open(int argc, char **argv, unsigned extra, const char *usage_text,
		 const char *endpoint, struct query *q, int *ret_rc)
{
	char *url;
	int rc = query_parse(argc, argv, extra, usage_text, q);

	if (rc) {
		*ret_rc = rc == 1 ? 0 : rc;
		return NULL;
	}
	url = query_url(q, endpoint);
	if (!url) {
		fprintf(stderr, "gpuscope: out of memory\n");
		*ret_rc = 1;
	}
	return url;
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct http_body *b = arg;
	size_t n = size * nmemb;
	char *d;

	if (b->len + n + 1 > BODY_MAX)
		return 0;
	d = realloc(b->data, b->len + n + 1);
	if (!d)
		return 0;
	memcpy(d + b->len, ptr, n);
	b->data = d;
	b->len += n;
	b->data[b->len] = 0;
	return n;
}

/* The server's error for a non-2xx answer: its JSON "error", else the body's first line. */
static void print_server_error(long status, const struct http_body *b)
{
	json_t *j = b->data ? json_loadb(b->data, b->len, 0, NULL) : NULL;
	const char *msg = NULL;
	char line[512];

	if (j && json_is_object(j))
		msg = json_string_value(json_object_get(j, "error"));
	if (!msg) {
		snprintf(line, sizeof(line), "%s", b->data && b->len ? b->data : "(empty answer)");
		line[strcspn(line, "\r\n")] = 0;
		msg = line;
	}
	fprintf(stderr, "gpuscope: server: %s (HTTP %ld)\n", msg, status);
	json_decref(j);
}

/* A failure's line: on stderr, or in q->errbuf for a caller that reports it itself (mcp). */
static void __attribute__((format(printf, 2, 3))) fail(const struct query *q, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (q->errbuf) {
		vsnprintf(q->errbuf, QUERY_ERRLEN, fmt, ap);
	} else {
		fprintf(stderr, "gpuscope: ");
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	const struct query *q = arg;

	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	return *q->cancel != 0;	/* nonzero aborts the transfer */
}

/* ret_status NULL: a non-2xx answer is printed and -1; else it is returned as 1 (body, status). */
static int http_do(const struct query *q, const char *url, bool post, struct http_body *ret,
		   long *ret_status)
{
	struct http_body b = { 0 };
	struct curl_slist *hdrs = NULL;
	char token[4096], auth[4200];
	long status = 0;
	CURLcode rc;
	CURL *c;
	int r = -1;

	c = curl_easy_init();
	if (!c) {
		fail(q, "libcurl initialisation failed");
		return -1;
	}
	if (q->token_file) {
		int n = read_token_file(q->token_file, token, sizeof(token));

		if (n < 0) {
			fail(q, "--token-file '%s': %s", q->token_file,
			     n == -ENODATA ? "empty" : strerror(-n));
			goto out;
		}
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
		hdrs = curl_slist_append(NULL, auth);
		if (!hdrs)
			goto out;
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	}
	log_debug("%s %s", post ? "POST" : "GET", url);
	curl_easy_setopt(c, CURLOPT_URL, url);
	if (post)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "gpuscope-cli");
	if (q->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, q->ca_file);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 120000L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	if (q->cancel) {
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, q);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	}
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		fail(q, "%s: %s", q->server, rc == CURLE_ABORTED_BY_CALLBACK ? "cancelled" :
		     curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if ((status < 200 || status >= 300) && !ret_status) {
		print_server_error(status, &b);
		goto out;
	}
	if (ret_status)
		*ret_status = status;
	if (!b.data) {
		b.data = calloc(1, 1);
		if (!b.data)
			goto out;
	}
	*ret = b;
	b.data = NULL;
	r = status < 200 || status >= 300 ? 1 : 0;
out:
	free(b.data);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(c);
	return r;
}

int http_get(const struct query *q, const char *url, struct http_body *ret)
{
	return http_do(q, url, false, ret, NULL);
}

int http_get_status(const struct query *q, const char *url, struct http_body *ret,
		    long *ret_status)
{
	return http_do(q, url, false, ret, ret_status);
}

int http_post(const struct query *q, const char *url, struct http_body *ret)
{
	return http_do(q, url, true, ret, NULL);
}

int write_output(const char *path, const void *data, size_t len)
{
	char *tmp = NULL;
	bool ok;
	FILE *f;

	if (!strcmp(path, "-")) {
		if (fwrite(data, 1, len, stdout) != len || fflush(stdout)) {
			fprintf(stderr, "gpuscope: writing to stdout: %s\n", strerror(errno));
			return -1;
		}
		return 0;
	}
	if (asprintf(&tmp, "%s.tmp%d", path, (int)getpid()) < 0)
		return -1;
	f = fopen(tmp, "we");
	if (!f) {
		fprintf(stderr, "gpuscope: %s: %s\n", path, strerror(errno));
		free(tmp);
		return -1;
	}
	ok = fwrite(data, 1, len, f) == len;
	if (fclose(f))
		ok = false;
	if (!ok) {
		fprintf(stderr, "gpuscope: writing %s: %s\n", path, strerror(errno));
		unlink(tmp);
		free(tmp);
		return -1;
	}
	if (rename(tmp, path)) {
		fprintf(stderr, "gpuscope: %s: %s\n", path, strerror(errno));
		unlink(tmp);
		free(tmp);
		return -1;
	}
	free(tmp);
	return 0;
}

/* The body as a JSON object; NULL (said in one line) when it is not one. */
static json_t *body_json(const struct http_body *b)
{
	json_error_t jerr;
	json_t *j = json_loadb(b->data, b->len, 0, &jerr);

	if (!j || !json_is_object(j)) {
		fprintf(stderr, "gpuscope: server: answer is not a JSON object: %s\n",
			j ? "wrong type" : jerr.text);
		json_decref(j);
		return NULL;
	}
	return j;
}

json_t *http_get_json(const struct query *q, const char *url)
{
	struct http_body b = { 0 };
	json_t *j;

	if (http_get(q, url, &b))
		return NULL;
	j = body_json(&b);
	free(b.data);
	return j;
}

int print_answer(const struct query *q, const struct http_body *b,
		 int (*print)(const struct query *q, json_t *j, bool markdown))
{
	json_t *j;
	int rc;

	if (!strcmp(q->format, "json"))
		return write_output("-", b->data, b->len) ? 1 : 0;
	j = body_json(b);
	if (!j)
		return 1;
	rc = print(q, j, !strcmp(q->format, "markdown"));
	json_decref(j);
	return rc;
}

double json_num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

const char *json_str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : "";
}
