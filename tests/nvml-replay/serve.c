// SPDX-License-Identifier: Apache-2.0
/*
 * nvml-serve: the agent's NVML module (nvml_module, unchanged) behind a Prometheus /metrics
 * endpoint on loopback, for the tests until the agent's `run` command serves /metrics itself.
 * Usage: nvml-serve [--port N] [NVML options]; prints "port N" once listening, stops on SIGTERM.
 */
#include <errno.h>
#include <getopt.h>
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "agent/agent.h"
#include "agent/gpu/nvml.h"
#include "agent/modules.h"
#include "common/log.h"
#include "common/util.h"

static struct agent agent;
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *data,
			      size_t *size, void **state)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char *body = NULL;
	size_t len = 0;
	FILE *f;

	if (strcmp(method, "GET") || strcmp(url, "/metrics")) {
		static const char nf[] = "not found\n";

		resp = MHD_create_response_from_buffer(sizeof(nf) - 1, (void *)nf,
						       MHD_RESPMEM_PERSISTENT);
		ret = MHD_queue_response(c, MHD_HTTP_NOT_FOUND, resp);
		MHD_destroy_response(resp);
		return ret;
	}
	f = open_memstream(&body, &len);
	if (!f)
		return MHD_NO;
	nvml_module.metrics(&agent, f);
	fclose(f);
	resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "nvml-library", required_argument, NULL, 0 },
		{ "nvml-samples-interval", required_argument, NULL, 0 },
		{ "nvml-memory-interval", required_argument, NULL, 0 },
		{ "nvml-gpm-interval", required_argument, NULL, 0 },
		{ "nvml-slow-interval", required_argument, NULL, 0 },
		{ "nvml-process-interval", required_argument, NULL, 0 },
		{ "nvml-fields-interval", required_argument, NULL, 0 },
		{ 0 },
	};
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct MHD_Daemon *d;
	const union MHD_DaemonInfo *info;
	int c, li, port = 0, err;

	while ((c = getopt_long(argc, argv, "v", lo, &li)) != -1) {
		if (c == 0) {
			if (nvml_parse_opt(&agent.opts, lo[li].name, optarg) <= 0)
				return 2;
		} else if (c == 'p') {
			port = atoi(optarg);
		} else if (c == 'v') {
			gpuscope_log_level = LOG_DEBUG;
		} else {
			return 2;
		}
	}
	agent.mono_to_wall_ns = mono_to_wall_offset_ns();
	err = nvml_module.start(&agent);
	if (err) {
		log_error("nvml-serve: nvml module: %s", strerror(-err));
		return 1;
	}
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handle, NULL,
			     MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_END);
	if (!d) {
		log_error("nvml-serve: cannot listen on 127.0.0.1:%d", port);
		nvml_module.stop(&agent);
		return 1;
	}
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	printf("port %u\n", info ? info->port : (unsigned)port);
	fflush(stdout);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	while (!stop)
		pause();
	MHD_stop_daemon(d);
	nvml_module.stop(&agent);
	return 0;
}
