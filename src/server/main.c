/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuscope-server: receives agents' batches, stores them in SQLite under --data, answers the
 * query API and serves the web UI. Prints "listening on http://ADDR:PORT" once ready.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/log.h"
#include "common/util.h"
#include "server/http.h"
#include "server/store/store.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: gpuscope-server --data DIR [options]\n"
		"  --data DIR               where the SQLite store lives (created if missing)\n"
		"  --listen ADDR:PORT       default 0.0.0.0:7070; port 0 picks a free port\n"
		"  --retention DUR          keep data this long (default 30d)\n"
		"  --raw-retention DUR      keep per-sample timestamps this long (default 24h;\n"
		"                           older samples live on in per-minute/hour rollups)\n"
		"  --retention-period DUR   how often retention runs (default 60s)\n"
		"  --token-file FILE        require 'Authorization: Bearer <contents>' on /api/\n"
		"  --max-body SIZE          largest request body, before and after decompression\n"
		"                           (default 64MiB; suffixes K, M, G, KiB, MiB, GiB)\n"
		"  -v, --verbose            debug logging\n");
}

static char *read_token(const char *path)
{
	char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
		     buf[n - 1] == '\t'))
		buf[--n] = 0;
	if (!n) {
		errno = EINVAL;
		return NULL;
	}
	return strdup(buf);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "data", required_argument, NULL, 'd' },
		{ "listen", required_argument, NULL, 'l' },
		{ "retention", required_argument, NULL, 'r' },
		{ "raw-retention", required_argument, NULL, 'R' },
		{ "retention-period", required_argument, NULL, 'p' },
		{ "token-file", required_argument, NULL, 't' },
		{ "max-body", required_argument, NULL, 'b' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct store_opts so = {
		.retention_ns = 30 * 86400 * NSEC_PER_SEC,
		.raw_retention_ns = 86400 * NSEC_PER_SEC,
		.enforce_period_ns = 60 * NSEC_PER_SEC,
	};
	struct http_opts ho = { .listen = "0.0.0.0:7070", .max_body = 64 << 20 };
	uint64_t size;
	const char *token_file = NULL;
	struct http_server *h = NULL;
	struct store *st = NULL;
	char *token = NULL, err[512] = "";
	sigset_t stopset;
	int c, sig, ret = 1;

	while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			so.dir = optarg;
			break;
		case 'l':
			ho.listen = optarg;
			break;
		case 'r':
		case 'R':
		case 'p': {
			uint64_t *dst = c == 'r' ? &so.retention_ns :
					c == 'R' ? &so.raw_retention_ns : &so.enforce_period_ns;

			if (parse_duration_ns(optarg, dst) || !*dst) {
				log_error("'%s' is not a positive duration (30d, 24h, 500ms)", optarg);
				return 2;
			}
			break;
		}
		case 't':
			token_file = optarg;
			break;
		case 'b':
			if (parse_size_bytes(optarg, &size) || !size || size > (1ULL << 40)) {
				log_error("--max-body: '%s' is not a size (64MiB)", optarg);
				return 2;
			}
			ho.max_body = (size_t)size;
			break;
		case 'v':
			gpuscope_log_level = LOG_DEBUG;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!so.dir || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (token_file) {
		token = read_token(token_file);
		if (!token) {
			log_error("--token-file '%s': %s", token_file,
				  errno == EINVAL ? "empty" : strerror(errno));
			return 2;
		}
		ho.token = token;
	}
	/*
	 * Block SIGINT/SIGTERM before any thread starts (threads inherit the mask), so that only
	 * sigwait() below receives them: a handler could run on an HTTP thread and leave the main
	 * thread asleep.
	 */
	sigemptyset(&stopset);
	sigaddset(&stopset, SIGINT);
	sigaddset(&stopset, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stopset, NULL);
	signal(SIGPIPE, SIG_IGN);
	st = store_sqlite_open(&so, err, sizeof(err));
	if (!st) {
		log_error("store: %s", err);
		goto out;
	}
	h = http_start(st, &ho, err, sizeof(err));
	if (!h) {
		log_error("%s", err);
		goto out;
	}
	{
		const char *colon = strrchr(ho.listen, ':');
		char host[64];

		snprintf(host, sizeof(host), "%.*s", (int)(colon - ho.listen), ho.listen);
		if (!*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "*"))
			strcpy(host, "127.0.0.1");
		printf("listening on http://%s:%u\n", host, http_port(h));
		fflush(stdout);
	}
	while (sigwait(&stopset, &sig))
		;
	log_info("%s: stopping", strsignal(sig));
	ret = 0;
out:
	http_stop(h);
	if (st)
		st->ops->close(st);
	free(token);
	return ret;
}
