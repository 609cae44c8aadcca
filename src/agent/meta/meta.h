/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Process metadata: /proc/PID/cgroup -> container runtime, container id, pod UID, systemd unit;
 * pod name, namespace, labels and owner from a Kubernetes list+watch of this node's pods;
 * Kubeflow/KubeRay labels promoted; then the user's relabel rules (docs/kubernetes.md).
 */
#ifndef GPUSCOPE_AGENT_META_H
#define GPUSCOPE_AGENT_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>
#include "agent/agent.h"
#include "agent/labels.h"
#include "common/batch.h"

/* What a process's cgroup path tells, without asking anyone. */
struct meta_cgroup {
	char path[256];		/* the chosen cgroup path (v2, else name=systemd, else memory...) */
	char runtime[16];	/* "containerd", "cri-o", "docker", "podman" or "" */
	char container_id[80];	/* hex id of the container, "" if none */
	char pod_uid[40];	/* "0f3c5e2a-1b2c-4d5e-8f90-123456789abc", "" if none */
	char unit[128];		/* systemd unit (ssh.service, session-3.scope), "" if none */
	int version;		/* 2 if path came from the unified hierarchy, 1 otherwise */
};

/*
 * Parses one cgroup path (from either hierarchy) into ret (zeroed first). Returns 1 if a
 * container or pod was recognised, 0 if not (ret->unit may still be set), -EINVAL on NULL.
 */
int meta__parse_cgroup_path(const char *path, struct meta_cgroup *ret);

/*
 * Parses the text of a /proc/PID/cgroup file: picks the unified (0::) path when it tells
 * something, else the v1 hierarchies (name=systemd, memory, cpu, pids, others). 0 or -EINVAL.
 */
int meta__parse_cgroup_file(const char *text, struct meta_cgroup *ret);

/*
 * The metadata labels of a process (container, pod, namespace, owner, Kubeflow and KubeRay
 * labels, systemd_unit or cgroup, then relabeled), at most max of them (more are counted in
 * gpuscope_meta_labels_truncated_total); *ret_n says how many were written (0 for a process that
 * is gone). The strings live in a thread-local buffer: valid until the next call on the same
 * thread. Returns LABELS_KEPT, or LABELS_DROPPED when a keep/drop relabel rule drops the
 * process (no labels; the caller sends nothing for it and counts it). comm: the process's name
 * as the caller saw it (NULL if none), for __meta_process_comm when /proc no longer has the
 * process: the rules still decide for a process gone before its first labels (a keep rule on
 * a label only /proc gives drops it). Any thread; cached per pid (re-read every 10 s).
 * Producers call agent__pid_labels() (labels.h), which calls this.
 */
int meta__pid_labels(pid_t pid, const char *comm, struct label *ret, size_t max, size_t *ret_n);

/*
 * Process pid exec'd: its cached labels are built again (name, command line, cgroup) at their
 * next use. Any thread; plugged into agent__pid_exec() (labels.h) by meta__start().
 */
void meta__pid_exec(pid_t pid);

/* Where the Kubernetes API is; every field NULL/0 takes the in-cluster default. */
struct meta_opts {
	const char *api_url;	/* GPUSCOPE_K8S_API; default https://$KUBERNETES_SERVICE_HOST:PORT */
	const char *token_file;	/* GPUSCOPE_K8S_TOKEN_FILE; default the service-account token */
	const char *ca_file;	/* GPUSCOPE_K8S_CA_FILE; default the service-account ca.crt */
	const char *node;	/* GPUSCOPE_K8S_NODE, NODE_NAME, the agent's node, else hostname */
	const char *relabel_config; /* --relabel-config / GPUSCOPE_RELABEL_CONFIG */
	const char *proc_root;	/* GPUSCOPE_PROC_ROOT; default "/proc" (tests) */
};

/*
 * Loads the relabel config and starts the Kubernetes watcher thread if an API is configured.
 * Returns 0, -EINVAL for a malformed relabel config (logged with line and reason), or -errno.
 * An unreachable API server is not an error: labels come from cgroups until it answers.
 */
int meta__start(const struct meta_opts *opts);
void meta__stop(void);
/* Prometheus text lines: pods cached, watch restarts, relists, API errors, cache evictions. */
void meta__metrics(FILE *out);
/* Number of pods in the cache (deleted ones kept for a while included); for tests. */
size_t meta__npods(void);

extern const struct agent_module meta_module;

#endif
