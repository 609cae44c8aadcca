/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Process metadata for labels: a per-pid label cache built from the process's cgroup, its pod and
 * the relabel rules; the start, stop and /metrics of the whole, and the agent module "meta".
 */
#include "agent/meta/meta_int.h"

/* ---- labels of a process ------------------------------------------------------------------------- */

struct pid_entry {
	pid_t pid;
	uint64_t read_ns;	/* when the cgroup file was read (mono) */
	uint64_t gen;		/* pod-cache generation the labels were built from */
	struct meta_cgroup cg;
	char comm[16];		/* the process's name when read, for relabel rules ("" unread) */
	char cmdline[PROCFS_CMDLINE_LEN], program[PROCFS_PROGRAM_LEN];	/* "" when none */
	char *packed;		/* "name\0value\0" * n, malloc'ed, at most PACKED_MAX */
	size_t packed_len;
	uint16_t n;
	bool gone;		/* the process had exited when read */
	bool dropped;		/* a keep/drop relabel rule dropped the process */
};

static struct {
	pthread_mutex_t mu;
	struct pid_entry *e;	/* PID_CACHE_SIZE, allocated on first use */
	struct relabel_rules *rules;
	char proc_root[128];
	atomic_uint_fast64_t hits, misses, rebuilds, evictions, read_errors, overflow, dropped, execs;
} pcache = { .mu = PTHREAD_MUTEX_INITIALIZER, .proc_root = "/proc" };

static void sanitize(char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_')
			*s = '_';
}

static const struct {
	const char *k8s_label, *label;
	bool needs_kubeflow_group;	/* the pre-"training.kubeflow.org/" form */
} promoted[] = {
	{ "training.kubeflow.org/job-name", "kubeflow_job", false },
	{ "training.kubeflow.org/replica-type", "kubeflow_replica_type", false },
	{ "training.kubeflow.org/replica-index", "kubeflow_replica_index", false },
	{ "training.kubeflow.org/job-role", "kubeflow_job_role", false },
	{ "job-name", "kubeflow_job", true },
	{ "replica-type", "kubeflow_replica_type", true },
	{ "replica-index", "kubeflow_replica_index", true },
	{ "job-role", "kubeflow_job_role", true },
	{ "ray.io/cluster", "ray_cluster", false },
	{ "ray.io/node-type", "ray_node_type", false },
	{ "ray.io/group", "ray_group", false },
};

/* The pod's labels into ls. pc.mu held. */
static int add_pod_labels(struct lset *ls, const struct pod *p, const struct meta_cgroup *cg)
{
	const char *cname = NULL, *kubeflow_group = NULL;
	char name[320];
	int err = 0;

	for (size_t i = 0; i < p->nctrs; i++)
		if (cg->container_id[0] && !strcmp(p->ctrs[i].id, cg->container_id)) {
			cname = p->ctrs[i].name;
			if (!cg->runtime[0])
				err = err ?: lset_set(ls, "container_runtime", p->ctrs[i].runtime);
		}
	err = err ?: lset_set(ls, "namespace", p->ns);
	err = err ?: lset_set(ls, "pod", p->name);
	if (cname)
		err = err ?: lset_set(ls, "container", cname);
	err = err ?: lset_set(ls, "owner_kind", p->owner_kind);
	err = err ?: lset_set(ls, "owner", p->owner_name);
	err = err ?: lset_set(ls, "__meta_kubernetes_namespace", p->ns);
	err = err ?: lset_set(ls, "__meta_kubernetes_pod_name", p->name);
	err = err ?: lset_set(ls, "__meta_kubernetes_pod_uid", p->uid);
	err = err ?: lset_set(ls, "__meta_kubernetes_pod_node_name", p->node);
	if (cname)
		err = err ?: lset_set(ls, "__meta_kubernetes_pod_container_name", cname);
	err = err ?: lset_set(ls, "__meta_kubernetes_pod_controller_kind", p->owner_kind);
	err = err ?: lset_set(ls, "__meta_kubernetes_pod_controller_name", p->owner_name);
	for (size_t i = 0; i < p->nlabels; i++)
		if (!strcmp(p->labels[i].name, "group-name"))
			kubeflow_group = p->labels[i].value;
	/* promoted (Kubeflow, Ray) before the pod's own: those survive a pod with too many labels */
	for (size_t k = 0; k < ARRAY_SIZE(promoted); k++) {
		if (promoted[k].needs_kubeflow_group &&
		    !(kubeflow_group && !strcmp(kubeflow_group, "kubeflow.org")))
			continue;
		for (size_t i = 0; i < p->nlabels; i++)
			if (!strcmp(p->labels[i].name, promoted[k].k8s_label) &&
			    !lset_get(ls, promoted[k].label))
				err = err ?: lset_set(ls, promoted[k].label, p->labels[i].value);
	}
	for (size_t i = 0; i < p->nlabels; i++) {
		snprintf(name, sizeof(name), "__meta_kubernetes_pod_label_%s", p->labels[i].name);
		sanitize(name);
		err = err ?: lset_set(ls, name, p->labels[i].value);
		snprintf(name, sizeof(name), "__meta_kubernetes_pod_labelpresent_%s", p->labels[i].name);
		sanitize(name);
		err = err ?: lset_set(ls, name, "true");
	}
	return err == -ENOSPC ? 0 : err;
}

/* Builds e's packed labels from e->cg and the pod cache. pcache.mu held. */
static void build_labels(struct pid_entry *e)
{
	static __thread struct lset ls;	/* 2 KiB of pointers: kept off the stack */
	const struct meta_cgroup *cg = &e->cg;
	uint64_t gen;
	size_t o = 0;
	int kept;

	lset_init(&ls);
	lset_set(&ls, "__meta_cgroup_path", cg->path);
	lset_set(&ls, "__meta_container_runtime", cg->runtime);
	lset_set(&ls, "__meta_container_id", cg->container_id);
	lset_set(&ls, "__meta_pod_uid", cg->pod_uid);
	lset_set(&ls, "__meta_systemd_unit", cg->unit);
	if (e->comm[0])
		lset_set(&ls, "__meta_process_comm", e->comm);
	/* what the process runs: labels the rules can drop (labeldrop cmdline) or decide on */
	if (e->program[0])
		lset_set(&ls, "program", e->program);
	if (e->cmdline[0])
		lset_set(&ls, "cmdline", e->cmdline);
	if (cg->container_id[0]) {
		lset_set(&ls, "container_id", cg->container_id);
		lset_set(&ls, "container_runtime", cg->runtime);
	}
	pthread_mutex_lock(&meta_pc.mu);
	gen = meta_pc.gen;
	if (cg->pod_uid[0]) {
		ssize_t i = meta_pod_index(cg->pod_uid);

		if (i >= 0)
			add_pod_labels(&ls, meta_pc.pods[i], cg);
		else
			lset_set(&ls, "pod_uid", cg->pod_uid);	/* unresolved: keep the identity */
	}
	pthread_mutex_unlock(&meta_pc.mu);
	if (!cg->container_id[0] && !cg->pod_uid[0]) {
		lset_set(&ls, "systemd_unit", cg->unit);
		if (strcmp(cg->path, "/"))
			lset_set(&ls, "cgroup", cg->path);
	}
	kept = relabel__apply(pcache.rules, &ls);
	e->n = 0;
	free(e->packed);
	e->packed = malloc(PACKED_MAX);
	if (!e->packed)
		pcache.overflow++;	/* no labels this time; the strings are freed below */
	e->dropped = kept == 0;
	if (e->dropped) {
		lset_done(&ls);
		pcache.dropped++;
	}
	for (size_t i = 0; i < ls.n; i++) {
		size_t nl = strlen(ls.l[i].name) + 1, vl = strlen(ls.l[i].value) + 1;

		if (ls.l[i].name[0] == '_' && ls.l[i].name[1] == '_')
			continue;
		if (!e->packed)
			break;
		if (o + nl + vl > PACKED_MAX) {
			pcache.overflow++;
			break;
		}
		memcpy(e->packed + o, ls.l[i].name, nl);
		memcpy(e->packed + o + nl, ls.l[i].value, vl);
		o += nl + vl;
		e->n++;
	}
	if (ls.overflow)
		pcache.overflow++;
	e->packed_len = o;
	if (e->packed) {
		char *shrunk = realloc(e->packed, o ? o : 1);

		if (shrunk)
			e->packed = shrunk;
	}
	e->gen = gen;
	lset_done(&ls);
	pcache.rebuilds++;
}

/* Forgets every pid (frees their labels). pcache.mu held. */
static void pid_cache_clear(void)
{
	if (!pcache.e)
		return;
	for (size_t i = 0; i < PID_CACHE_SIZE; i++)
		free(pcache.e[i].packed);
	memset(pcache.e, 0, PID_CACHE_SIZE * sizeof(*pcache.e));
}

/* The process's name (/proc/PID/comm, the main thread's) into ret[16]; "" when unreadable. */
static void read_comm(pid_t pid, char *ret)
{
	char path[192];
	ssize_t n;
	int fd;

	ret[0] = 0;
	snprintf(path, sizeof(path), "%s/%d/comm", pcache.proc_root, (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, ret, 15);
	close(fd);
	if (n <= 0) {
		ret[0] = 0;
		return;
	}
	ret[n] = 0;
	ret[strcspn(ret, "\n")] = 0;
}

static int read_cgroup(pid_t pid, struct meta_cgroup *ret)
{
	char path[192], text[8192];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%d/cgroup", pcache.proc_root, (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n < 0)
		return -errno;
	text[n] = 0;
	return meta__parse_cgroup_file(text, ret);
}

/* A process gone before /proc told its cgroup: the rules decide on its name alone. */
static bool gone_kept(const char *comm)
{
	struct lset ls;
	int kept;

	if (!pcache.rules)
		return true;
	lset_init(&ls);
	if (comm && comm[0])
		lset_set(&ls, "__meta_process_comm", comm);
	kept = relabel__apply(pcache.rules, &ls);
	lset_done(&ls);
	return kept != 0;
}

int meta__pid_labels(pid_t pid, const char *comm_hint, struct label *ret, size_t max,
		     size_t *ret_n)
{
	static __thread char tls[PACKED_MAX];
	struct meta_cgroup cg;
	char comm[16], cmdline[PROCFS_CMDLINE_LEN], program[PROCFS_PROGRAM_LEN];
	struct pid_entry *e;
	bool fresh = false, dropped;
	size_t n = 0;
	const char *s;
	int rc = 0;

	*ret_n = 0;
	if (pid <= 0)
		return LABELS_KEPT;
	pthread_mutex_lock(&pcache.mu);
	if (!pcache.e) {
		pcache.e = calloc(PID_CACHE_SIZE, sizeof(*pcache.e));
		if (!pcache.e) {
			pthread_mutex_unlock(&pcache.mu);
			return LABELS_KEPT;
		}
	}
	e = &pcache.e[(size_t)pid % PID_CACHE_SIZE];
	if (e->pid != pid || !e->read_ns || mono_ns() - e->read_ns > PID_REREAD_NS) {
		/* the kernel's /proc/PID/cgroup can take 100+ us: not under the lock */
		pthread_mutex_unlock(&pcache.mu);
		rc = read_cgroup(pid, &cg);
		comm[0] = 0;
		if (!rc && pcache.rules)	/* only rules read it: a read per new process else */
			read_comm(pid, comm);
		if (!comm[0] && comm_hint)
			snprintf(comm, sizeof(comm), "%s", comm_hint);
		if (rc || !procfs_cmdline(pid, cmdline, sizeof(cmdline), program, sizeof(program)))
			cmdline[0] = program[0] = 0;
		fresh = true;
		pthread_mutex_lock(&pcache.mu);
		if (!pcache.e) {	/* meta__stop() meanwhile */
			pthread_mutex_unlock(&pcache.mu);
			return LABELS_KEPT;
		}
		e = &pcache.e[(size_t)pid % PID_CACHE_SIZE];
	}
	if (fresh) {
		if (e->pid && e->pid != pid)
			pcache.evictions++;
		pcache.misses++;
		e->pid = pid;
		e->read_ns = mono_ns();
		e->gone = rc != 0;
		if (rc) {
			pcache.read_errors++;
			e->n = 0;
			e->packed_len = 0;
			e->dropped = !gone_kept(comm);
			if (e->dropped)
				pcache.dropped++;
		} else {
			e->cg = cg;
			memcpy(e->comm, comm, sizeof(e->comm));
			memcpy(e->cmdline, cmdline, sizeof(e->cmdline));
			memcpy(e->program, program, sizeof(e->program));
			build_labels(e);
		}
	} else if (!e->gone && e->gen != atomic_load(&meta_pc.gen)) {
		build_labels(e);
	} else {
		pcache.hits++;
	}
	if (e->packed_len)
		memcpy(tls, e->packed, e->packed_len);
	if (e->n > max)
		pcache.overflow++;	/* the caller's array is too small: counted, not silent */
	for (s = tls; n < e->n && n < max; n++) {
		ret[n].name = s;
		s += strlen(s) + 1;
		ret[n].value = s;
		s += strlen(s) + 1;
	}
	dropped = e->dropped;
	pthread_mutex_unlock(&pcache.mu);
	*ret_n = n;
	return dropped ? LABELS_DROPPED : LABELS_KEPT;
}

void meta__pid_exec(pid_t pid)
{
	struct pid_entry *e;

	if (pid <= 0)
		return;
	pthread_mutex_lock(&pcache.mu);
	e = pcache.e ? &pcache.e[(size_t)pid % PID_CACHE_SIZE] : NULL;
	if (e && e->pid == pid) {
		e->read_ns = 0;	/* read again (name, command line, cgroup) at its next use */
		e->comm[0] = 0;
		pcache.execs++;
	}
	pthread_mutex_unlock(&pcache.mu);
}

/* ---- start / stop / metrics ---------------------------------------------------------------------- */

static const char *env_or(const char *v, const char *env, const char *def)
{
	const char *e = env ? getenv(env) : NULL;

	return v ? v : (e && *e) ? e : def;
}

int meta__start(const struct meta_opts *o)
{
	static const struct meta_opts none;
	const char *relabel, *api, *node, *root;
	char err[512], host[256], url[512];
	struct relabel_rules *rules = NULL;
	int rc;

	if (!o)
		o = &none;
	root = env_or(o->proc_root, "GPUSCOPE_PROC_ROOT", "/proc");
	snprintf(pcache.proc_root, sizeof(pcache.proc_root), "%s", root);
	relabel = env_or(o->relabel_config, "GPUSCOPE_RELABEL_CONFIG", NULL);
	if (relabel) {
		rules = relabel__load(relabel, err, sizeof(err));
		if (!rules) {
			/* -EINVAL whatever the cause: the agent must not start without its rules */
			log_error("relabel config %s", err);
			return -EINVAL;
		}
		log_info("relabel config %s: %zu rules", relabel, relabel__count(rules));
	}
	pthread_mutex_lock(&pcache.mu);
	relabel__free(pcache.rules);
	pcache.rules = rules;
	pid_cache_clear();
	pthread_mutex_unlock(&pcache.mu);
	agent_labels__set_meta(meta__pid_labels);
	agent_labels__set_exec(meta__pid_exec);

	api = env_or(o->api_url, "GPUSCOPE_K8S_API", NULL);
	if (!api && getenv("KUBERNETES_SERVICE_HOST") && *getenv("KUBERNETES_SERVICE_HOST")) {
		const char *h = getenv("KUBERNETES_SERVICE_HOST");
		const char *p = env_or(NULL, "KUBERNETES_SERVICE_PORT", "443");

		snprintf(url, sizeof(url), strchr(h, ':') ? "https://[%s]:%s" : "https://%s:%s", h, p);
		api = url;
	}
	if (!api) {
		log_debug("meta: no Kubernetes API configured, labels from cgroups only");
		return 0;
	}
	if (meta_kw.running)
		return 0;
	if (gethostname(host, sizeof(host)))
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = 0;
	node = env_or(o->node, "GPUSCOPE_K8S_NODE", env_or(NULL, "NODE_NAME", host));
	meta_kw.api = strdup(api);
	meta_kw.node = strdup(node);
	meta_kw.token_file = strdup(env_or(o->token_file, "GPUSCOPE_K8S_TOKEN_FILE", SA_DIR "/token"));
	meta_kw.ca_file = strdup(env_or(o->ca_file, "GPUSCOPE_K8S_CA_FILE", SA_DIR "/ca.crt"));
	if (!meta_kw.api || !meta_kw.node || !meta_kw.token_file || !meta_kw.ca_file) {
		rc = -ENOMEM;
		goto out_free;
	}
	while (meta_kw.api[0] && meta_kw.api[strlen(meta_kw.api) - 1] == '/')
		meta_kw.api[strlen(meta_kw.api) - 1] = 0;
	meta_kw.link = http_link__new(&(struct http_link_opts){ .name = "kubernetes",
								.base_url = meta_kw.api,
								.ca_file = meta_kw.ca_file,
								.token_file = meta_kw.token_file });
	if (!meta_kw.link && errno == EINVAL) {
		log_warn("meta: Kubernetes API '%s' is not an http:// or https:// URL, labels from "
			 "cgroups only", meta_kw.api);
		rc = 0;
		goto out_free;
	}
	if (!meta_kw.link) {
		rc = -errno;
		goto out_free;
	}
	atomic_store(&meta_kw.stopping, false);
	meta_kw.rv[0] = 0;
	rc = -pthread_create(&meta_kw.thread, NULL, meta_k8s_thread, NULL);
	if (rc)
		goto out_free;
	meta_kw.running = true;
	log_info("meta: watching pods of node '%s' at %s", meta_kw.node, meta_kw.api);
	return 0;
out_free:
	http_link__free(meta_kw.link);
	meta_kw.link = NULL;
	free(meta_kw.api);
	free(meta_kw.node);
	free(meta_kw.token_file);
	free(meta_kw.ca_file);
	meta_kw.api = meta_kw.node = meta_kw.token_file = meta_kw.ca_file = NULL;
	return rc;
}

void meta__stop(void)
{
	agent_labels__set_meta(NULL);
	agent_labels__set_exec(NULL);
	if (meta_kw.running) {
		pthread_mutex_lock(&meta_kw.mu);
		atomic_store(&meta_kw.stopping, true);
		pthread_cond_broadcast(&meta_kw.cond);
		pthread_mutex_unlock(&meta_kw.mu);
		pthread_join(meta_kw.thread, NULL);
		meta_kw.running = false;
		http_link__free(meta_kw.link);
		meta_kw.link = NULL;
		free(meta_kw.api);
		free(meta_kw.node);
		free(meta_kw.token_file);
		free(meta_kw.ca_file);
		free(meta_kw.buf);
		meta_kw.api = meta_kw.node = meta_kw.token_file = meta_kw.ca_file = meta_kw.buf = NULL;
		meta_kw.len = meta_kw.cap = 0;
	}
	pthread_mutex_lock(&meta_pc.mu);
	for (size_t i = 0; i < meta_pc.n; i++)
		meta_pod_free(meta_pc.pods[i]);
	meta_pc.n = 0;
	meta_pc.gen++;
	pthread_mutex_unlock(&meta_pc.mu);
	pthread_mutex_lock(&pcache.mu);
	relabel__free(pcache.rules);
	pcache.rules = NULL;
	pid_cache_clear();
	free(pcache.e);
	pcache.e = NULL;
	pthread_mutex_unlock(&pcache.mu);
}

void meta__metrics(FILE *out)
{
	prom_gauge(out, "gpuscope_agent_meta_k8s_up", "1 while the pod watch is connected.",
		   meta_kw.running ? atomic_load(&meta_kw.up) : 0);
	prom_gauge(out, "gpuscope_agent_meta_k8s_pods", "Pods of this node in the cache.", meta__npods());
	prom_counter(out, "gpuscope_agent_meta_k8s_lists_total", "Pod lists from the API server.",
		     meta_kw.lists);
	prom_counter(out, "gpuscope_agent_meta_k8s_list_errors_total", "Pod lists that failed.",
		     meta_kw.list_errors);
	prom_counter(out, "gpuscope_agent_meta_k8s_watches_total", "Pod watches started.",
		     meta_kw.watches);
	prom_counter(out, "gpuscope_agent_meta_k8s_watch_events_total", "Pod watch events received.",
		     meta_kw.watch_events);
	prom_counter(out, "gpuscope_agent_meta_k8s_watch_gone_total",
		     "Watches that ended with 410 Gone (relisted).", meta_kw.watch_gone);
	prom_counter(out, "gpuscope_agent_meta_k8s_api_errors_total", "Failed API server requests.",
		     meta_kw.api_errors);
	prom_counter(out, "gpuscope_agent_meta_k8s_bad_events_total",
		     "Watch events or list items that could not be parsed.", meta_kw.bad_events);
	prom_counter(out, "gpuscope_agent_meta_k8s_pods_evicted_total",
		     "Pods evicted from the cache (deleted, past their grace period).", meta_pc.evicted);
	prom_counter(out, "gpuscope_agent_meta_pid_cache_hits_total", "Process label lookups cached.",
		     pcache.hits);
	prom_counter(out, "gpuscope_agent_meta_pid_cache_misses_total", "Process label lookups built.",
		     pcache.misses);
	prom_counter(out, "gpuscope_agent_meta_pid_cache_evictions_total",
		     "Process label entries evicted.", pcache.evictions);
	prom_counter(out, "gpuscope_agent_meta_pid_label_rebuilds_total",
		     "Process labels rebuilt because their pod changed.", pcache.rebuilds);
	prom_counter(out, "gpuscope_agent_meta_pid_execs_total",
		     "Process label entries read again because the process exec'd.", pcache.execs);
	prom_counter(out, "gpuscope_agent_meta_pid_read_errors_total",
		     "Reads of /proc/PID/cgroup that failed.", pcache.read_errors);
	prom_counter(out, "gpuscope_agent_meta_labels_truncated_total",
		     "Label sets cut at the label capacity.", pcache.overflow);
	prom_counter(out, "gpuscope_agent_meta_relabel_dropped_total",
		     "Processes a relabel rule dropped.", pcache.dropped);
}

/* ---- the agent module ---------------------------------------------------------------------------- */

static int module_start(struct agent *a)
{
	struct meta_opts o = { .node = a->opts.node, .relabel_config = a->opts.relabel_config };

	return meta__start(&o);
}

static void module_stop(struct agent *a)
{
	meta__stop();
}

static void module_metrics(struct agent *a, FILE *out)
{
	meta__metrics(out);
}

const struct agent_module meta_module = {
	.name = "meta",
	.start = module_start,
	.stop = module_stop,
	.metrics = module_metrics,
};
