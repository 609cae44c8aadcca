/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuscope-server: receives agents' batches, stores them in SQLite under --data (or in
 * ClickHouse with --store clickhouse), answers the query API and serves the web UI. Prints
 * "listening on http[s]://ADDR:PORT" (the address really bound) once ready.
 */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "common/log.h"
#include "common/netaddr.h"
#include "common/util.h"
#include "server/capture.h"
#include "server/efficiency.h"
#include "server/insights.h"
#include "server/exporter.h"
#include "server/http.h"
#include "server/store/store.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: gpuscope-server --data DIR [options]\n"
		"       gpuscope-server --store clickhouse --clickhouse-url URL [options]\n"
		"  --data DIR               where the SQLite store lives (created if missing)\n"
		"  --store sqlite|clickhouse  the backend (default sqlite)\n"
		"  --clickhouse-url URL     ClickHouse HTTP interface (http://HOST:8123); with a\n"
		"                           cluster, repeat it (or comma-separate) once per shard\n"
		"  --clickhouse-cluster NAME  remote_servers cluster: Distributed tables by node\n"
		"  --clickhouse-database DB default gpuscope\n"
		"  --clickhouse-user USER   --clickhouse-password-file FILE  credentials\n"
		"  --clickhouse-commit-delay DUR\n"
		"                           a batch waits up to this long for others to share its\n"
		"                           INSERTs (fewer, larger ClickHouse parts; default 1s)\n"
		"  --clickhouse-timeout DUR each statement to a shard gets this long (default 10s);\n"
		"                           a slow or frozen shard answers 503 naming it\n"
		"  --listen ADDR:PORT       127.0.0.1:7070 by default, 0.0.0.0:7070 once a token\n"
		"                           is set; [::]:PORT for IPv6 and IPv4; port 0 picks one\n"
		"  --retention DUR          keep data this long (default 30d)\n"
		"  --raw-retention DUR      keep per-sample timestamps this long (default 24h;\n"
		"                           older samples live on in per-minute/hour rollups)\n"
		"  --retention-period DUR   how often retention runs (default 60s)\n"
		"  --recompress-level N     zstd level that settled blobs of the SQLite store are\n"
		"                           compressed again at, in the background (default 19;\n"
		"                           0: off)\n"
		"  --time-resolution us|ns  resolution the SQLite store keeps sample and interval\n"
		"                           times at (default us: times floored to microseconds,\n"
		"                           ~3 bytes less per sample; ns as they came)\n"
		"  --frame-addresses unnamed|all\n"
		"                           frames whose address is stored (default unnamed: a\n"
		"                           frame with a function name is stored at its function,\n"
		"                           file and line, without its address; all: every one's)\n"
		"  --ingest-token-file FILE POST /api/v1/ingest needs 'Authorization: Bearer <contents>'\n"
		"  --query-token-file FILE  every other /api/ path needs 'Authorization: Bearer ...'\n"
		"  --token-file FILE        the same token for both\n"
		"  --metrics-token-file FILE\n"
		"                           /metrics takes this token (or the query token); without\n"
		"                           it /metrics needs the query token when one is set\n"
		"  --allowed-hosts LIST     Host names this server answers to (comma-separated;\n"
		"                           localhost, IP literals and this machine's name always);\n"
		"                           default: on a loopback --listen only those, else any\n"
		"  --tls-cert-file FILE     serve HTTPS with this PEM certificate (chain) ...\n"
		"  --tls-key-file FILE      ... and this PEM private key\n"
		"  --max-body SIZE          largest request body, before and after decompression\n"
		"                           (default 64MiB; suffixes K, M, G, KiB, MiB, GiB)\n"
		"  --max-inflight-bodies SIZE\n"
		"                           ingest bodies held at once, with their decompressed\n"
		"                           form; past it 503 + Retry-After (default 4 x --max-body)\n"
		"  --sqlite-cache SIZE      SQLite's memory: every connection's page cache, in all\n"
		"                           (default 64MiB; docs/server.md, the memory budget)\n"
		"  --max-label-set-memory SIZE\n"
		"                           label sets held in memory (sqlite; default 1GiB):\n"
		"                           further new ones refused like --max-new-label-sets-...\n"
		"  --max-nodes N            nodes that ingested since start (sqlite; default 100000):\n"
		"                           a further node's batches answered 429\n"
		"  --max-connections N      open connections in all (default 8192)\n"
		"  --max-connections-per-address N\n"
		"                           open connections from one client address (default 256)\n"
		"  --idle-timeout DUR       close a connection silent this long (default 30s)\n"
		"  --header-timeout DUR     a request's headers must be in this long after its\n"
		"                           first byte (a new connection's: after accept); a body\n"
		"                           gets this long plus --min-body-rate (default 10s)\n"
		"  --min-body-rate SIZE     bytes per second a body keeps up (default 1KiB; 0: no\n"
		"                           limit); slower requests are cut and counted\n"
		"  --threads N              HTTP event-loop threads (default 8)\n"
		"  --max-new-label-sets-per-hour N\n"
		"                           per node; a batch past it is refused 429 (default\n"
		"                           10000; 0: no limit)\n"
		"  --max-new-stacks-per-hour N\n"
		"                           per node, likewise (default 200000; 0: no limit)\n"
		"  --gpu-hour-price P       dollars per GPU-hour: '3.50' for every GPU, or\n"
		"                           'MODEL=3.50' for GPUs whose gpu_model is MODEL\n"
		"                           (repeatable; without it dollars are unknown)\n"
		"  --export-queries FILE    profile queries to export as counters on /metrics\n"
		"                           (YAML, docs/efficiency.md)\n"
		"  --export-top N           workloads with GPU-time series of their own on\n"
		"                           /metrics (default 20; the rest count as 'other')\n"
		"  --export-timeout DUR     a scrape's time for the export queries (default 5s);\n"
		"                           a query cut there is counted later (docs/server.md)\n"
		"  --settle DUR             records arrive up to this late: efficiency hours and\n"
		"                           /metrics windows close this far behind now (default 30s)\n"
		"  --capture-timeout DUR    a capture request no agent took within this, or one\n"
		"                           not answered this long past its duration, expires\n"
		"                           (default 30s)\n"
		"  --no-efficiency-rollup   compute efficiency from records only (benchmarks)\n"
		"  -v, --verbose            debug logging\n");
}

/* A token file's contents, or exit status 2 with the reason logged. */
static char *token_from(const char *opt, const char *path)
{
	char buf[4096];
	int n = read_token_file(path, buf, sizeof(buf));

	if (n < 0) {
		log_error("--%s '%s': %s", opt, path,
			  n == -ENODATA ? "empty" :
			  n == -E2BIG	? "longer than 4095 bytes" : strerror(-n));
		return NULL;
	}
	return strdup(buf);
}

/* A whole (small) PEM file as a string, or NULL with the reason logged. */
static char *pem_from(const char *opt, const char *path)
{
	char *text = NULL;
	size_t cap = 0;
	FILE *f = fopen(path, "re");
	ssize_t n;

	if (!f) {
		log_error("--%s '%s': %s", opt, path, strerror(errno));
		return NULL;
	}
	{
		FILE *m = open_memstream(&text, &cap);
		char chunk[4096];

		while (m && (n = (ssize_t)fread(chunk, 1, sizeof(chunk), f)) > 0)
			fwrite(chunk, 1, (size_t)n, m);
		if (m)
			fclose(m);
	}
	fclose(f);
	if (!text || !strstr(text, "-----BEGIN ")) {
		log_error("--%s '%s': not a PEM file", opt, path);
		free(text);
		return NULL;
	}
	return text;
}

static unsigned parse_count(const char *opt, const char *s, unsigned max)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || !*s || *end || !v || v > max) {
		log_error("--%s: '%s' is not a count in 1..%u", opt, s, max);
		exit(2);
	}
	return (unsigned)v;
}

/* Lets the process hold as many sockets as the hard limit allows (fleets of kept-alive agents). */
static void raise_fd_limit(unsigned want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < (rlim_t)want + 64)
		log_warn("open-file limit %llu is below --max-connections %u: connections past it "
			 "are refused (raise 'ulimit -n')",
			 (unsigned long long)rl.rlim_cur, want);
}

int main(int argc, char **argv)
{
	enum {
		O_INGEST_TOKEN = 256, O_QUERY_TOKEN, O_METRICS_TOKEN, O_ALLOWED_HOSTS, O_TLS_CERT, O_TLS_KEY, O_MAX_CONN,
		O_MAX_PER_ADDR, O_MAX_INFLIGHT, O_MAX_LS_MEM, O_MAX_NODES, O_IDLE, O_HDR_TIMEOUT, O_MIN_BODY_RATE, O_THREADS, O_MAX_NEW_LS,
		O_MAX_NEW_STACKS, O_CAPTURE_TIMEOUT, O_RECOMPRESS, O_STORE, O_CH_URL, O_CH_CLUSTER, O_CH_DB,
		O_CH_USER, O_CH_PASSWORD, O_CH_COMMIT_DELAY, O_CH_TIMEOUT, O_TIME_RES, O_FRAME_ADDR,
		O_EXPORT_TIMEOUT, O_SQLITE_CACHE,
	};
	static const struct option opts[] = {
		{ "data", required_argument, NULL, 'd' },
		{ "listen", required_argument, NULL, 'l' },
		{ "retention", required_argument, NULL, 'r' },
		{ "raw-retention", required_argument, NULL, 'R' },
		{ "retention-period", required_argument, NULL, 'p' },
		{ "token-file", required_argument, NULL, 't' },
		{ "ingest-token-file", required_argument, NULL, O_INGEST_TOKEN },
		{ "query-token-file", required_argument, NULL, O_QUERY_TOKEN },
		{ "metrics-token-file", required_argument, NULL, O_METRICS_TOKEN },
		{ "allowed-hosts", required_argument, NULL, O_ALLOWED_HOSTS },
		{ "tls-cert-file", required_argument, NULL, O_TLS_CERT },
		{ "tls-key-file", required_argument, NULL, O_TLS_KEY },
		{ "max-body", required_argument, NULL, 'b' },
		{ "max-connections", required_argument, NULL, O_MAX_CONN },
		{ "max-inflight-bodies", required_argument, NULL, O_MAX_INFLIGHT },
		{ "max-label-set-memory", required_argument, NULL, O_MAX_LS_MEM },
		{ "sqlite-cache", required_argument, NULL, O_SQLITE_CACHE },
		{ "max-nodes", required_argument, NULL, O_MAX_NODES },
		{ "max-connections-per-address", required_argument, NULL, O_MAX_PER_ADDR },
		{ "idle-timeout", required_argument, NULL, O_IDLE },
		{ "header-timeout", required_argument, NULL, O_HDR_TIMEOUT },
		{ "min-body-rate", required_argument, NULL, O_MIN_BODY_RATE },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "max-new-label-sets-per-hour", required_argument, NULL, O_MAX_NEW_LS },
		{ "recompress-level", required_argument, NULL, O_RECOMPRESS },
		{ "time-resolution", required_argument, NULL, O_TIME_RES },
		{ "frame-addresses", required_argument, NULL, O_FRAME_ADDR },
		{ "max-new-stacks-per-hour", required_argument, NULL, O_MAX_NEW_STACKS },
		{ "gpu-hour-price", required_argument, NULL, 'P' },
		{ "export-queries", required_argument, NULL, 'Q' },
		{ "export-top", required_argument, NULL, 'N' },
		{ "settle", required_argument, NULL, 'S' },
		{ "export-timeout", required_argument, NULL, O_EXPORT_TIMEOUT },
		{ "capture-timeout", required_argument, NULL, O_CAPTURE_TIMEOUT },
		{ "no-efficiency-rollup", no_argument, NULL, 'U' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "store", required_argument, NULL, O_STORE },
		{ "clickhouse-url", required_argument, NULL, O_CH_URL },
		{ "clickhouse-cluster", required_argument, NULL, O_CH_CLUSTER },
		{ "clickhouse-database", required_argument, NULL, O_CH_DB },
		{ "clickhouse-user", required_argument, NULL, O_CH_USER },
		{ "clickhouse-password-file", required_argument, NULL, O_CH_PASSWORD },
		{ "clickhouse-commit-delay", required_argument, NULL, O_CH_COMMIT_DELAY },
		{ "clickhouse-timeout", required_argument, NULL, O_CH_TIMEOUT },
		{ 0 },
	};
	const char *urls[16];
	char *ch_password = NULL;
	size_t nurls = 0;
	struct store_opts so = {
		.retention_ns = 30 * 86400 * NSEC_PER_SEC,
		.raw_retention_ns = 86400 * NSEC_PER_SEC,
		.enforce_period_ns = 60 * NSEC_PER_SEC,
		.recompress_level = 19,
		.time_unit_ns = 1000,
		.max_new_label_sets_per_hour = 10000,
		.max_new_stacks_per_hour = 200000,
		.max_label_set_bytes = 1ULL << 30,
		.max_nodes = 100000,
		.ch_commit_delay_ns = NSEC_PER_SEC,
	};
	struct http_opts ho = {
		.max_body = 64 << 20,
		.max_connections = 8192,
		.max_per_address = 256,
		.idle_timeout_s = 30,
		.header_timeout_s = 10,
		.min_body_rate = 1024,
		.threads = 8,
	};
	uint64_t size, ns;
	size_t inflight = 0;
	const char *token_file = NULL, *ingest_file = NULL, *query_file = NULL;
	const char *metrics_file = NULL;
	const char *cert_file = NULL, *key_file = NULL;
	struct http_server *h = NULL;
	struct store *st = NULL;
	char *tok = NULL, *itok = NULL, *qtok = NULL, *mtok = NULL, *cert = NULL, *key = NULL, err[512] = "";
	struct eff_cfg ec = { .settle_ns = 30 * NSEC_PER_SEC };
	struct exporter_cfg xc = { .top = 20 };
	struct efficiency *eff = NULL;
	struct exporter *exp = NULL;
	struct insights *ins = NULL;
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
		case O_INGEST_TOKEN:
			ingest_file = optarg;
			break;
		case O_METRICS_TOKEN:
			metrics_file = optarg;
			break;
		case O_ALLOWED_HOSTS:
			ho.allowed_hosts = optarg;
			break;
		case O_QUERY_TOKEN:
			query_file = optarg;
			break;
		case O_TLS_CERT:
			cert_file = optarg;
			break;
		case O_TLS_KEY:
			key_file = optarg;
			break;
		case 'b':
			if (parse_size_bytes(optarg, &size) || !size || size > (1ULL << 40)) {
				log_error("--max-body: '%s' is not a size (64MiB)", optarg);
				return 2;
			}
			ho.max_body = (size_t)size;
			break;
		case O_MAX_INFLIGHT:
			if (parse_size_bytes(optarg, &size) || !size || size > (1ULL << 42)) {
				log_error("--max-inflight-bodies: '%s' is not a size (256MiB)", optarg);
				return 2;
			}
			inflight = (size_t)size;
			break;
		case O_MAX_LS_MEM:
			if (parse_size_bytes(optarg, &size) || size > (1ULL << 42)) {
				log_error("--max-label-set-memory: '%s' is not a size (1GiB; 0: none)",
					  optarg);
				return 2;
			}
			so.max_label_set_bytes = size;
			break;
		case O_SQLITE_CACHE:
			if (parse_size_bytes(optarg, &size) || size < (1ULL << 20) ||
			    size > (1ULL << 40)) {
				log_error("--sqlite-cache: '%s' is not a size of at least 1MiB (64MiB)",
					  optarg);
				return 2;
			}
			so.sqlite_cache_bytes = size;
			break;
		case O_MAX_NODES: {
			char *end;

			errno = 0;
			so.max_nodes = strtoull(optarg, &end, 10);
			if (errno || !*optarg || *end || *optarg == '-') {
				log_error("--max-nodes: '%s' is not a count (0: no limit)", optarg);
				return 2;
			}
			break;
		}
		case O_MAX_CONN:
			ho.max_connections = parse_count("max-connections", optarg, 1 << 20);
			break;
		case O_MAX_PER_ADDR:
			ho.max_per_address = parse_count("max-connections-per-address", optarg,
							 1 << 20);
			break;
		case O_IDLE:
			if (parse_duration_ns(optarg, &ns) || ns < NSEC_PER_SEC ||
			    ns > 3600 * NSEC_PER_SEC) {
				log_error("--idle-timeout: '%s' is not a duration in 1s..1h", optarg);
				return 2;
			}
			ho.idle_timeout_s = (unsigned)(ns / NSEC_PER_SEC);
			break;
		case O_HDR_TIMEOUT:
			if (parse_duration_ns(optarg, &ns) || ns < NSEC_PER_SEC ||
			    ns > 3600 * NSEC_PER_SEC) {
				log_error("--header-timeout: '%s' is not a duration in 1s..1h", optarg);
				return 2;
			}
			ho.header_timeout_s = (unsigned)(ns / NSEC_PER_SEC);
			break;
		case O_MIN_BODY_RATE:
			if (parse_size_bytes(optarg, &size) || size > (1ULL << 30)) {
				log_error("--min-body-rate: '%s' is not a size per second (1KiB)",
					  optarg);
				return 2;
			}
			ho.min_body_rate = (unsigned)size;
			break;
		case O_THREADS:
			ho.threads = parse_count("threads", optarg, 256);
			break;
		case O_RECOMPRESS: {
			char *end;
			long v;

			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || !*optarg || *end || v < 0 || v > 22) {
				log_error("--recompress-level: '%s' is not a zstd level in 0..22", optarg);
				return 2;
			}
			so.recompress_level = (int)v;
			break;
		}
		case O_TIME_RES:
			if (strcmp(optarg, "us") && strcmp(optarg, "ns")) {
				log_error("--time-resolution: '%s' is neither 'us' nor 'ns'", optarg);
				return 2;
			}
			so.time_unit_ns = optarg[0] == 'u' ? 1000 : 1;
			break;
		case O_FRAME_ADDR:
			if (strcmp(optarg, "unnamed") && strcmp(optarg, "all")) {
				log_error("--frame-addresses: '%s' is neither 'unnamed' nor 'all'",
					  optarg);
				return 2;
			}
			ho.all_addresses = optarg[0] == 'a';
			break;
		case O_MAX_NEW_LS:
		case O_MAX_NEW_STACKS: {
			uint64_t *dst = c == O_MAX_NEW_LS ? &so.max_new_label_sets_per_hour :
							    &so.max_new_stacks_per_hour;
			char *end;

			errno = 0;
			*dst = strtoull(optarg, &end, 10);
			if (errno || !*optarg || *end || *optarg == '-') {
				log_error("--%s: '%s' is not a count (0: no limit)",
					  c == O_MAX_NEW_LS ? "max-new-label-sets-per-hour" :
							      "max-new-stacks-per-hour", optarg);
				return 2;
			}
			break;
		}
		case 'P':
			if (eff_cfg_add_price(&ec, optarg, err, sizeof(err))) {
				log_error("%s", err);
				eff_cfg_done(&ec);
				return 2;
			}
			break;
		case 'Q':
			xc.queries_file = optarg;
			break;
		case 'N': {
			char *end;
			unsigned long n = strtoul(optarg, &end, 10);

			if (!*optarg || *end || n > 10000) {
				log_error("--export-top: '%s' is not a number 0..10000", optarg);
				return 2;
			}
			xc.top = n;
			break;
		}
		case 'U':
			ec.no_rollup = true;
			break;
		case 'S':
			if (parse_duration_ns(optarg, &ec.settle_ns)) {
				log_error("--settle: '%s' is not a duration (30s)", optarg);
				return 2;
			}
			break;
		case O_EXPORT_TIMEOUT:
			if (parse_duration_ns(optarg, &xc.budget_ns) ||
			    xc.budget_ns < 10 * NSEC_PER_MSEC || xc.budget_ns > 600 * NSEC_PER_SEC) {
				log_error("--export-timeout: '%s' is not a duration in 10ms..10m",
					  optarg);
				return 2;
			}
			break;
		case O_CAPTURE_TIMEOUT:
			if (parse_duration_ns(optarg, &ns) || ns < 100 * NSEC_PER_MSEC ||
			    ns > 3600 * NSEC_PER_SEC) {
				log_error("--capture-timeout: '%s' is not a duration in 100ms..1h",
					  optarg);
				return 2;
			}
			capture_set_timeout(ns);
			break;
		case 'v':
			gpuscope_log_level = LOG_DEBUG;
			break;
		case O_STORE:
			if (strcmp(optarg, "sqlite") && strcmp(optarg, "clickhouse")) {
				log_error("--store: '%s' is not sqlite or clickhouse", optarg);
				return 2;
			}
			so.backend = optarg;
			break;
		case O_CH_URL:
			for (char *save = NULL, *u = strtok_r(optarg, ",", &save); u;
			     u = strtok_r(NULL, ",", &save)) {
				if (nurls == sizeof(urls) / sizeof(urls[0])) {
					log_error("--clickhouse-url: at most %zu", nurls);
					return 2;
				}
				urls[nurls++] = u;
			}
			break;
		case O_CH_CLUSTER:
			so.ch_cluster = optarg;
			break;
		case O_CH_DB:
			so.ch_database = optarg;
			break;
		case O_CH_USER:
			so.ch_user = optarg;
			break;
		case O_CH_PASSWORD:
			free(ch_password);
			ch_password = token_from("clickhouse-password-file", optarg);
			if (!ch_password)
				return 2;
			so.ch_password = ch_password;
			break;
		case O_CH_COMMIT_DELAY:
			if (parse_duration_ns(optarg, &so.ch_commit_delay_ns) ||
			    so.ch_commit_delay_ns > 10 * NSEC_PER_SEC) {
				log_error("--clickhouse-commit-delay '%s': a duration up to 10s (0: none)",
					  optarg);
				return 2;
			}
			break;
		case O_CH_TIMEOUT:
			if (parse_duration_ns(optarg, &so.ch_timeout_ns) ||
			    so.ch_timeout_ns < NSEC_PER_SEC || so.ch_timeout_ns > 300 * NSEC_PER_SEC) {
				log_error("--clickhouse-timeout '%s': a duration from 1s to 300s", optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	so.ch_urls = urls;
	so.ch_nurls = nurls;
	ho.max_inflight = inflight ? inflight : 4 * ho.max_body;
	if (ho.max_inflight < ho.max_body) {
		log_error("--max-inflight-bodies (%zu bytes) is below --max-body (%zu): no body "
			  "would fit", ho.max_inflight, ho.max_body);
		return 2;
	}
	if (optind != argc || (so.backend && !strcmp(so.backend, "clickhouse") ? !nurls : !so.dir)) {
		usage(stderr);
		return 2;
	}
	if (!cert_file != !key_file) {
		log_error("--tls-cert-file and --tls-key-file go together");
		return 2;
	}
	/* --token-file sets both; a specific flag wins over it for its side. */
	if ((token_file && !(tok = token_from("token-file", token_file))) ||
	    (ingest_file && !(itok = token_from("ingest-token-file", ingest_file))) ||
	    (query_file && !(qtok = token_from("query-token-file", query_file))) ||
	    (metrics_file && !(mtok = token_from("metrics-token-file", metrics_file))) ||
	    (cert_file && !(cert = pem_from("tls-cert-file", cert_file))) ||
	    (key_file && !(key = pem_from("tls-key-file", key_file)))) {
		ret = 2;
		goto out;
	}
	ho.retention_ns = so.retention_ns;
	ho.ingest_token = itok ? itok : tok;
	ho.query_token = qtok ? qtok : tok;
	ho.metrics_token = mtok;
	ho.tls_cert_pem = cert;
	ho.tls_key_pem = key;
	if (!ho.listen)
		ho.listen = ho.ingest_token && ho.query_token ? "0.0.0.0:7070" : "127.0.0.1:7070";
	raise_fd_limit(ho.max_connections + ho.max_connections / 4 + 64);
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
	/* A fixed mmap threshold (glibc raises it up to 32 MiB after each large free otherwise):
	 * a large body or answer buffer is unmapped when freed instead of staying in a malloc
	 * arena, so RSS follows the budgets of docs/server.md ("Memory budget") down again. */
	mallopt(M_MMAP_THRESHOLD, 512 * 1024);
	/* Hundreds of ingest workers would each get an arena (up to 8 per core), every one keeping
	 * its freed pieces: four arenas are enough for the event loops and workers of 2-16 cores. */
	mallopt(M_ARENA_MAX, 4);
	st = store_open(&so, err, sizeof(err));
	if (!st) {
		log_error("store: %s", err);
		/* A ClickHouse that cannot be used (unreachable, credentials, version, schema) is a
		 * configuration error: exit 2, like a bad flag. */
		if (so.backend && !strcmp(so.backend, "clickhouse"))
			ret = 2;
		goto out;
	}
	ec.raw_retention_ns = so.raw_retention_ns < so.retention_ns ? so.raw_retention_ns :
								      so.retention_ns;
	xc.settle_ns = ec.settle_ns;
	eff = efficiency_new(st, &ec);
	if (!eff) {
		log_error("efficiency: %s", strerror(errno));
		goto out;
	}
	exp = exporter_new(st, eff, &xc, err, sizeof(err));
	if (!exp) {
		log_error("--export-queries: %s", err);
		ret = 2;
		goto out;
	}
	ins = insights_new(st, eff, &(struct insights_cfg){ xc.top, ec.settle_ns });
	if (!ins) {
		log_error("insights: %s", strerror(errno));
		goto out;
	}
	ho.eff = eff;
	ho.exp = exp;
	ho.ins = ins;
	h = http_start(st, &ho, err, sizeof(err));
	if (!h) {
		log_error("%s", err);
		goto out;
	}
	{
		struct sockaddr_storage sa;
		socklen_t salen;

		if (!parse_listen_addr(ho.listen, &sa, &salen) &&
		    !sockaddr_is_loopback((struct sockaddr *)&sa) &&
		    (!ho.ingest_token || !ho.query_token))
			log_warn("*** listening on %s, beyond this machine, and %s%s%s needs no "
				 "token: anyone who can reach the port can %s. Set --token-file "
				 "(or --ingest-token-file and --query-token-file), or listen on "
				 "127.0.0.1 ***",
				 http_address(h), !ho.ingest_token ? "uploading" : "",
				 !ho.ingest_token && !ho.query_token ? " and " : "",
				 !ho.query_token ? "reading" : "",
				 !ho.query_token ? "read every profile" : "upload data");
	}
	printf("listening on %s://%s\n", cert ? "https" : "http", http_address(h));
	fflush(stdout);
	while (sigwait(&stopset, &sig))
		;
	log_info("%s: stopping", strsignal(sig));
	ret = 0;
out:
	http_stop(h);
	insights_free(ins);
	exporter_free(exp);
	efficiency_free(eff);
	eff_cfg_done(&ec);
	if (st)
		st->ops->close(st);
	free(tok);
	free(itok);
	free(qtok);
	free(mtok);
	free(cert);
	free(key);
	free(ch_password);
	return ret;
}
