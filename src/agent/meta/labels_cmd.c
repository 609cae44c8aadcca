/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope-agent labels PID...`: prints the metadata labels the agent would attach to each
 * process (cgroup, Kubernetes, relabel config); --follow keeps watching and prints changes.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "agent/commands.h"
#include "agent/meta/meta.h"
#include "common/log.h"
#include "common/util.h"

#define MAX_PIDS 64

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: gpuscope-agent labels [OPTIONS] PID...\n"
		   "  --relabel-config FILE  Prometheus-style relabel rules (docs/kubernetes.md)\n"
		   "  --node NAME            Kubernetes node whose pods are watched (default: NODE_NAME,\n"
		   "                         then the hostname)\n"
		   "  --follow DURATION      keep watching for DURATION (or until SIGTERM/SIGINT), print a\n"
		   "                         line when labels change\n"
		   "  --interval DURATION    how often --follow looks (default 100ms)\n"
		   "  --metrics              print the metadata counters at the end\n"
		   "  -v                     debug logging\n"
		   "The Kubernetes API is used inside a pod (KUBERNETES_SERVICE_HOST) or with\n"
		   "GPUSCOPE_K8S_API / GPUSCOPE_K8S_TOKEN_FILE / GPUSCOPE_K8S_CA_FILE.\n");
}

static void format(pid_t pid, char *buf, size_t len)
{
	struct label l[AGENT_LABELS_CAP];
	size_t n, o;

	o = (size_t)snprintf(buf, len, "%d", (int)pid);
	if (meta__pid_labels(pid, NULL, l, AGENT_LABELS_CAP, &n) == LABELS_DROPPED) {
		snprintf(buf + o, len - o, " (dropped by a relabel rule)");
		return;
	}
	for (size_t i = 0; i < n && o < len; i++) {
		const char *v = l[i].value;

		if (!v[strcspn(v, " \t\"\\")]) {
			o += (size_t)snprintf(buf + o, len - o, " %s=%s", l[i].name, v);
			continue;
		}
		/* a value with blanks (cmdline): double-quoted, \" and \\ escaped (sh reads it) */
		o += (size_t)snprintf(buf + o, len - o, " %s=\"", l[i].name);
		for (; *v && o + 3 < len; v++) {
			if (*v == '"' || *v == '\\')
				buf[o++] = '\\';
			buf[o++] = *v;
		}
		if (o + 1 < len)
			buf[o++] = '"';
		buf[o < len ? o : len - 1] = 0;
	}
}

int cmd_labels(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "relabel-config", required_argument, NULL, 'r' },
		{ "node", required_argument, NULL, 'n' },
		{ "follow", required_argument, NULL, 'f' },
		{ "interval", required_argument, NULL, 'i' },
		{ "metrics", no_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	struct meta_opts mo = { 0 };
	uint64_t follow_ns = 0, interval_ns = 100 * NSEC_PER_MSEC, end;
	char *last[MAX_PIDS] = { 0 }, line[8192];
	pid_t pids[MAX_PIDS];
	bool metrics = false;
	int npids = 0, c, rc = 0;

	while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
		switch (c) {
		case 'r': mo.relabel_config = optarg; break;
		case 'n': mo.node = optarg; break;
		case 'f':
		case 'i':
			if (parse_duration_ns(optarg, c == 'f' ? &follow_ns : &interval_ns)) {
				log_error("--%s: bad duration '%s'", c == 'f' ? "follow" : "interval", optarg);
				return 2;
			}
			break;
		case 'm': metrics = true; break;
		case 'v': gpuscope_log_level = LOG_DEBUG; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	for (; optind < argc; optind++) {
		char *end_p;
		long v = strtol(argv[optind], &end_p, 10);

		if (*end_p || v <= 0 || npids >= MAX_PIDS) {
			log_error("'%s': want up to %d process ids", argv[optind], MAX_PIDS);
			return 2;
		}
		pids[npids++] = (pid_t)v;
	}
	if (!npids) {
		usage(stderr);
		return 2;
	}
	if (meta__start(&mo))
		return 2;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	end = mono_ns() + follow_ns;
	do {
		for (int i = 0; i < npids; i++) {
			format(pids[i], line, sizeof(line));
			if (last[i] && !strcmp(last[i], line))
				continue;
			free(last[i]);
			last[i] = strdup(line);
			printf("%s\n", line);
		}
		fflush(stdout);
		if (mono_ns() < end) {
			struct timespec ts = { .tv_sec = (time_t)(interval_ns / NSEC_PER_SEC),
					       .tv_nsec = (long)(interval_ns % NSEC_PER_SEC) };

			nanosleep(&ts, NULL);
		}
	} while (mono_ns() < end && !stop);
	if (metrics)
		meta__metrics(stdout);
	meta__stop();
	for (int i = 0; i < npids; i++)
		free(last[i]);
	return rc;
}
