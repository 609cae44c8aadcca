/* SPDX-License-Identifier: Apache-2.0 */
/*
 * This node's pods for process metadata: a bounded pod cache kept by a Kubernetes list+watch
 * thread on the API server (agent/http_client.h, jansson).
 */
#include "agent/meta/meta_int.h"

/* ---- pod cache --------------------------------------------------------------------------------- */

struct meta_pod_cache meta_pc = { .mu = PTHREAD_MUTEX_INITIALIZER };

void meta_pod_free(struct pod *p)
{
	if (!p)
		return;
	free(p->name);
	free(p->ns);
	free(p->node);
	free(p->owner_kind);
	free(p->owner_name);
	for (size_t i = 0; i < p->nlabels; i++) {
		free((char *)p->labels[i].name);
		free((char *)p->labels[i].value);
	}
	for (size_t i = 0; i < p->nctrs; i++)
		free(p->ctrs[i].name);
	free(p);
}

static char *jstrdup(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return strdup(s ? s : "");
}

static void add_statuses(struct pod *p, json_t *arr)
{
	size_t i;
	json_t *cs;

	json_array_foreach(arr, i, cs) {
		const char *id = json_string_value(json_object_get(cs, "containerID"));
		const char *name = json_string_value(json_object_get(cs, "name"));
		const char *sep = id ? strstr(id, "://") : NULL;
		struct pod_container *c;

		if (!sep || !name || p->nctrs >= MAX_POD_CONTAINERS)
			continue;
		c = &p->ctrs[p->nctrs];
		meta_copy_str(c->id, sizeof(c->id), sep + 3, strlen(sep + 3));
		meta_copy_str(c->runtime, sizeof(c->runtime), id, (size_t)(sep - id));
		if (!strcmp(c->runtime, "cri-o"))
			strcpy(c->runtime, "cri-o");
		c->name = strdup(name);
		if (c->name)
			p->nctrs++;
	}
}

/* A Pod object (JSON) into a struct pod; NULL with errno (EINVAL: no metadata.uid). */
static struct pod *pod_from_json(json_t *obj)
{
	json_t *md = json_object_get(obj, "metadata"), *st = json_object_get(obj, "status");
	json_t *labels = json_object_get(md, "labels"), *owners = json_object_get(md, "ownerReferences");
	json_t *ann = json_object_get(md, "annotations"), *v, *owner = NULL;
	const char *uid = json_string_value(json_object_get(md, "uid")), *k, *mirror;
	struct pod *p;
	size_t i;

	if (!uid) {
		errno = EINVAL;
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	meta_copy_str(p->uid, sizeof(p->uid), uid, strlen(uid));
	mirror = json_string_value(json_object_get(ann, "kubernetes.io/config.mirror"));
	if (mirror)
		meta_copy_str(p->mirror, sizeof(p->mirror), mirror, strlen(mirror));
	p->name = jstrdup(md, "name");
	p->ns = jstrdup(md, "namespace");
	p->node = jstrdup(json_object_get(obj, "spec"), "nodeName");
	json_array_foreach(owners, i, v) {
		if (!owner || json_is_true(json_object_get(v, "controller")))
			owner = v;
		if (json_is_true(json_object_get(v, "controller")))
			break;
	}
	p->owner_kind = owner ? jstrdup(owner, "kind") : strdup("");
	p->owner_name = owner ? jstrdup(owner, "name") : strdup("");
	if (!p->name || !p->ns || !p->node || !p->owner_kind || !p->owner_name)
		goto out_nomem;
	json_object_foreach(labels, k, v) {
		if (!json_is_string(v) || p->nlabels >= MAX_POD_LABELS)
			continue;
		p->labels[p->nlabels].name = strdup(k);
		p->labels[p->nlabels].value = strdup(json_string_value(v));
		p->nlabels++;
		if (!p->labels[p->nlabels - 1].name || !p->labels[p->nlabels - 1].value)
			goto out_nomem;
	}
	/* A Deployment's pods are owned by ReplicaSet <deployment>-<pod-template-hash>. */
	if (!strcmp(p->owner_kind, "ReplicaSet")) {
		const char *h = json_string_value(json_object_get(labels, "pod-template-hash"));
		size_t ol = strlen(p->owner_name), hl = h ? strlen(h) : 0;

		if (h && ol > hl + 1 && p->owner_name[ol - hl - 1] == '-' &&
		    !strcmp(p->owner_name + ol - hl, h)) {
			p->owner_name[ol - hl - 1] = 0;
			free(p->owner_kind);
			p->owner_kind = strdup("Deployment");
			if (!p->owner_kind)
				goto out_nomem;
		}
	}
	add_statuses(p, json_object_get(st, "initContainerStatuses"));
	add_statuses(p, json_object_get(st, "containerStatuses"));
	add_statuses(p, json_object_get(st, "ephemeralContainerStatuses"));
	return p;
out_nomem:
	meta_pod_free(p);
	errno = ENOMEM;
	return NULL;
}

/* Caller holds pc.mu. */
ssize_t meta_pod_index(const char *uid)
{
	for (size_t i = 0; i < meta_pc.n; i++)
		if (!strcmp(meta_pc.pods[i]->uid, uid) || !strcmp(meta_pc.pods[i]->mirror, uid))
			return (ssize_t)i;
	return -1;
}

/* Drops deleted pods past their grace; if still full, the oldest deleted one. pc.mu held. */
static void pods_gc(bool need_room)
{
	uint64_t now = mono_ns();
	ssize_t oldest = -1;

	for (size_t i = 0; i < meta_pc.n;) {
		struct pod *p = meta_pc.pods[i];

		if (p->deleted_ns && now - p->deleted_ns > DELETED_GRACE_NS) {
			meta_pod_free(p);
			meta_pc.pods[i] = meta_pc.pods[--meta_pc.n];
			continue;
		}
		if (p->deleted_ns && (oldest < 0 || p->deleted_ns < meta_pc.pods[oldest]->deleted_ns))
			oldest = (ssize_t)i;
		i++;
	}
	if (need_room && meta_pc.n >= MAX_PODS && oldest >= 0) {
		meta_pod_free(meta_pc.pods[oldest]);
		meta_pc.pods[oldest] = meta_pc.pods[--meta_pc.n];
		meta_pc.evicted++;
	}
}

/* Takes ownership of p. */
static void pod_upsert(struct pod *p)
{
	ssize_t i;

	pthread_mutex_lock(&meta_pc.mu);
	i = meta_pod_index(p->uid);
	if (i >= 0) {
		meta_pod_free(meta_pc.pods[i]);
		meta_pc.pods[i] = p;
	} else {
		pods_gc(meta_pc.n >= MAX_PODS);
		if (meta_pc.n < MAX_PODS) {
			meta_pc.pods[meta_pc.n++] = p;
		} else {
			meta_pc.evicted++;
			meta_pod_free(p);
		}
	}
	meta_pc.gen++;
	pthread_mutex_unlock(&meta_pc.mu);
}

static void pod_mark_deleted(const char *uid)
{
	ssize_t i;

	pthread_mutex_lock(&meta_pc.mu);
	i = meta_pod_index(uid);
	if (i >= 0 && !meta_pc.pods[i]->deleted_ns)
		meta_pc.pods[i]->deleted_ns = mono_ns();
	meta_pc.gen++;
	pthread_mutex_unlock(&meta_pc.mu);
}

/*
 * Replaces the cache by a full list (takes ownership of pods[0..n)): pods absent from the list
 * are kept as deleted for the grace period, so late samples keep their labels.
 */
static void pods_replace(struct pod **pods, size_t n)
{
	uint64_t now = mono_ns();

	pthread_mutex_lock(&meta_pc.mu);
	for (size_t i = 0; i < meta_pc.n; i++) {
		struct pod *old = meta_pc.pods[i];
		bool listed = false;

		for (size_t j = 0; j < n && !listed; j++)
			listed = !strcmp(pods[j]->uid, old->uid);
		if (listed) {
			meta_pod_free(old);
			meta_pc.pods[i] = NULL;
		} else if (!old->deleted_ns) {
			old->deleted_ns = now;
		}
	}
	{
		size_t k = 0;	/* compact the survivors */

		for (size_t i = 0; i < meta_pc.n; i++)
			if (meta_pc.pods[i])
				meta_pc.pods[k++] = meta_pc.pods[i];
		meta_pc.n = k;
	}
	for (size_t j = 0; j < n; j++) {
		pods_gc(meta_pc.n >= MAX_PODS);
		if (meta_pc.n < MAX_PODS) {
			meta_pc.pods[meta_pc.n++] = pods[j];
		} else {
			meta_pc.evicted++;
			meta_pod_free(pods[j]);
		}
	}
	meta_pc.gen++;
	pthread_mutex_unlock(&meta_pc.mu);
}

size_t meta__npods(void)
{
	size_t n;

	pthread_mutex_lock(&meta_pc.mu);
	n = meta_pc.n;
	pthread_mutex_unlock(&meta_pc.mu);
	return n;
}

/* ---- Kubernetes list + watch --------------------------------------------------------------------- */

struct meta_kube_watch meta_kw = { .mu = PTHREAD_MUTEX_INITIALIZER,
				   .cond = PTHREAD_COND_INITIALIZER };

static bool stopping(void *arg)
{
	(void)arg;
	return atomic_load(&meta_kw.stopping);
}

/* A request on the API server's link: JSON, compressed, cut when the agent stops. */
static struct http_req k8s_req(const char *path, uint64_t timeout_s, size_t max_body)
{
	return (struct http_req){ .path = path, .accept = "application/json", .decompress = true,
				  .timeout_ns = timeout_s * NSEC_PER_SEC, .max_body = max_body,
				  .cancel = stopping };
}

/* The path of this node's pods, then extra ("&limit=500"); NULL (ENOMEM) or free(). */
static char *pods_path(const char *extra)
{
	char *node = http_escape(meta_kw.node), *path;

	if (!node)
		return NULL;
	if (asprintf(&path, "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s%s", node, extra) < 0)
		path = NULL;
	free(node);
	return path;
}

/*
 * Logs an API failure once per call; the message says what to fix for 401/403. transport: the
 * client's reason when no answer came (NULL: status and body say it).
 */
static void api_warn(const char *what, long status, const char *body, const char *transport)
{
	char msg[256] = "";

	meta_kw.api_errors++;
	atomic_store(&meta_kw.up, 0);
	if (transport) {
		log_warn("kubernetes %s: %s; pods labelled from cgroups only until it answers, "
			 "retrying", what, transport);
		return;
	}
	if (body) {
		json_t *j = json_loads(body, 0, NULL);
		const char *m = json_string_value(json_object_get(j, "message"));

		if (m)
			snprintf(msg, sizeof(msg), ": %s", m);
		json_decref(j);
	}
	log_warn("kubernetes %s: HTTP %ld%s%s; pods labelled from cgroups only, retrying", what,
		 status, msg,
		 status == 401 ? " (service-account token rejected)" :
		 status == 403 ? " (RBAC: the agent's service account needs get/list/watch on pods)" :
				 "");
}

/* Lists the node's pods (paginated), replaces the cache, sets kw.rv. 0 or -errno. */
static int k8s_list(struct http_conn *conn)
{
	struct pod **pods = NULL;
	size_t npods = 0, cap = 0;
	char cont[4096] = "", rv[64] = "";
	int err = 0;

	meta_kw.lists++;
	do {
		struct http_answer b;
		struct http_req req;
		char extra[4200], *path, *esc = NULL;
		json_t *j = NULL, *items, *it;
		int rc;
		size_t i;

		if (cont[0]) {
			esc = http_escape(cont);
			snprintf(extra, sizeof(extra), "&limit=500&continue=%s", esc ? esc : "");
			free(esc);
		} else {
			snprintf(extra, sizeof(extra), "&limit=500");
		}
		path = pods_path(extra);
		if (!path) {
			err = -ENOMEM;
			goto out;
		}
		req = k8s_req(path, 60, MAX_LIST_BYTES);
		rc = http_conn__request(conn, &req, &b);
		free(path);
		if (atomic_load(&meta_kw.stopping)) {
			http_answer__done(&b);
			err = -ECANCELED;
			goto out;
		}
		if (rc || b.status != 200) {
			if (!rc && b.status == 410 && cont[0]) {
				/* the continue token expired: start the list again */
				cont[0] = 0;
				http_answer__done(&b);
				continue;
			}
			api_warn("list pods", b.status, b.body, rc ? b.why : NULL);
			http_answer__done(&b);
			err = -EIO;
			goto out;
		}
		j = b.body ? json_loadb(b.body, b.len, 0, NULL) : NULL;
		http_answer__done(&b);
		items = json_object_get(j, "items");
		if (!json_is_array(items)) {
			log_warn("kubernetes list pods: answer is not a PodList");
			meta_kw.api_errors++;
			json_decref(j);
			err = -EPROTO;
			goto out;
		}
		json_array_foreach(items, i, it) {
			struct pod *p = pod_from_json(it);

			if (!p) {
				meta_kw.bad_events++;
				continue;
			}
			if (npods == cap) {
				size_t nc = cap ? cap * 2 : 64;
				struct pod **np = realloc(pods, nc * sizeof(*np));

				if (!np) {
					meta_pod_free(p);
					json_decref(j);
					err = -ENOMEM;
					goto out;
				}
				pods = np;
				cap = nc;
			}
			pods[npods++] = p;
		}
		it = json_object_get(j, "metadata");
		meta_copy_str(rv, sizeof(rv), json_string_value(json_object_get(it, "resourceVersion")) ?: "",
			      strlen(json_string_value(json_object_get(it, "resourceVersion")) ?: ""));
		{
			const char *cs = json_string_value(json_object_get(it, "continue"));

			meta_copy_str(cont, sizeof(cont), cs ? cs : "", cs ? strlen(cs) : 0);
		}
		json_decref(j);
	} while (cont[0]);
	pods_replace(pods, npods);
	npods = 0;
	snprintf(meta_kw.rv, sizeof(meta_kw.rv), "%s", rv);
	atomic_store(&meta_kw.up, 1);
	log_debug("kubernetes: listed %zu pods on node '%s' at resourceVersion %s", meta__npods(),
		  meta_kw.node, rv);
out:
	for (size_t i = 0; i < npods; i++)
		meta_pod_free(pods[i]);
	free(pods);
	if (err && err != -ECANCELED)
		meta_kw.list_errors++;
	return err;
}

/* One watch event line. Returns false to abort the stream (410 Gone). */
static bool handle_event(const char *line, size_t len)
{
	json_t *j = json_loadb(line, len, 0, NULL), *obj;
	const char *type, *rv;
	bool ok = true;

	if (!j) {
		meta_kw.bad_events++;
		return true;
	}
	type = json_string_value(json_object_get(j, "type"));
	obj = json_object_get(j, "object");
	meta_kw.watch_events++;
	if (!type || !json_is_object(obj)) {
		meta_kw.bad_events++;
		goto out;
	}
	if (!strcmp(type, "ERROR")) {
		json_int_t code = json_integer_value(json_object_get(obj, "code"));
		const char *msg = json_string_value(json_object_get(obj, "message"));

		if (code == 410) {
			meta_kw.watch_gone++;
			meta_kw.gone = true;
			log_info("kubernetes watch: %s (410 Gone), listing again", msg ? msg : "expired");
		} else {
			api_warn("watch pods", (long)code, NULL, NULL);
			meta_kw.rv[0] = 0;	/* unknown state: list again */
		}
		ok = false;
		goto out;
	}
	rv = json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
	if (!strcmp(type, "ADDED") || !strcmp(type, "MODIFIED")) {
		struct pod *p = pod_from_json(obj);

		if (p)
			pod_upsert(p);
		else
			meta_kw.bad_events++;
	} else if (!strcmp(type, "DELETED")) {
		const char *uid = json_string_value(
			json_object_get(json_object_get(obj, "metadata"), "uid"));

		if (uid)
			pod_mark_deleted(uid);
	} else if (strcmp(type, "BOOKMARK")) {
		meta_kw.bad_events++;
	}
	if (rv)
		snprintf(meta_kw.rv, sizeof(meta_kw.rv), "%s", rv);
out:
	json_decref(j);
	return ok;
}

/* A piece of the watch stream (a 2xx answer's): its complete lines handled. false: stop. */
static bool watch_cb(void *arg, const char *data, size_t n)
{
	size_t start = 0;

	(void)arg;
	if (meta_kw.len + n > MAX_EVENT_BYTES) {
		meta_kw.overflow = true;
		return false;
	}
	if (meta_kw.len + n > meta_kw.cap) {
		size_t cap = meta_kw.cap ? meta_kw.cap : 65536;
		char *p;

		while (cap < meta_kw.len + n)
			cap *= 2;
		p = realloc(meta_kw.buf, cap);
		if (!p)
			return false;
		meta_kw.buf = p;
		meta_kw.cap = cap;
	}
	memcpy(meta_kw.buf + meta_kw.len, data, n);
	meta_kw.len += n;
	for (size_t i = 0; i < meta_kw.len; i++) {
		if (meta_kw.buf[i] != '\n')
			continue;
		if (i > start && !handle_event(meta_kw.buf + start, i - start))
			return false;
		start = i + 1;
	}
	memmove(meta_kw.buf, meta_kw.buf + start, meta_kw.len - start);
	meta_kw.len -= start;
	return true;
}

/* Watches from kw.rv until the stream ends. 0 (ended, watch again), -ESTALE (relist), -errno. */
static int k8s_watch(struct http_conn *conn)
{
	char extra[256], *path, *rv;
	struct http_answer errb;	/* a Status body (not a stream) for the message */
	struct http_req req;
	long status;
	int rc, err = 0;

	rv = http_escape(meta_kw.rv);
	if (!rv)
		return -ENOMEM;
	snprintf(extra, sizeof(extra),
		 "&watch=true&resourceVersion=%s&allowWatchBookmarks=true&timeoutSeconds=%d", rv,
		 WATCH_TIMEOUT_S);
	free(rv);
	path = pods_path(extra);
	if (!path)
		return -ENOMEM;
	meta_kw.watches++;
	meta_kw.len = 0;
	meta_kw.gone = meta_kw.overflow = false;
	req = k8s_req(path, WATCH_TIMEOUT_S + 30, 65536);
	req.on_data = watch_cb;
	rc = http_conn__request(conn, &req, &errb);
	status = errb.status;
	free(path);
	if (atomic_load(&meta_kw.stopping)) {
		http_answer__done(&errb);
		return -ECANCELED;
	}
	if (meta_kw.gone || status == 410) {
		if (status == 410)
			meta_kw.watch_gone++;
		err = -ESTALE;
	} else if (status != 200 && status != 0) {
		api_warn("watch pods", status, errb.body, NULL);
		err = -EIO;
	} else if (meta_kw.overflow) {
		log_warn("kubernetes watch: an event larger than %u bytes, listing again",
			 MAX_EVENT_BYTES);
		meta_kw.bad_events++;
		err = -ESTALE;
	} else if (!meta_kw.rv[0]) {
		err = -ESTALE;		/* an ERROR event: list again */
	} else if (rc && rc != -ETIMEDOUT && rc != -ECONNRESET) {
		api_warn("watch pods", 0, NULL, errb.why);
		err = -EIO;
	}
	/* a closed or timed-out stream is normal: the caller watches again from kw.rv */
	http_answer__done(&errb);
	return err;
}

/* Sleeps before retry number `attempt` (backoff_ns()) or until stop; false if stopping. */
static bool backoff_sleep(unsigned attempt)
{
	static unsigned seed;
	uint64_t d = backoff_ns(NSEC_PER_SEC, BACKOFF_MAX_S * NSEC_PER_SEC, attempt, &seed);
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	d += (uint64_t)ts.tv_nsec;
	ts.tv_sec += d / NSEC_PER_SEC;
	ts.tv_nsec = d % NSEC_PER_SEC;
	pthread_mutex_lock(&meta_kw.mu);
	while (!atomic_load(&meta_kw.stopping)) {
		if (pthread_cond_timedwait(&meta_kw.cond, &meta_kw.mu, &ts) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&meta_kw.mu);
	return !atomic_load(&meta_kw.stopping);
}

void *meta_k8s_thread(void *arg)
{
	unsigned attempt = 1;	/* retries in a row */
	struct http_conn *conn = http_conn__new(meta_kw.link);

	(void)arg;
	if (!conn) {
		log_warn("kubernetes: %s: pods labelled from cgroups only", strerror(errno));
		return NULL;
	}
	while (!atomic_load(&meta_kw.stopping)) {
		uint64_t t0, events;
		int err;

		if (!meta_kw.rv[0]) {
			err = k8s_list(conn);
			if (err == -ECANCELED)
				break;
			if (err) {
				if (!backoff_sleep(attempt++))
					break;
				continue;
			}
			attempt = 1;
		}
		t0 = mono_ns();
		events = meta_kw.watch_events;
		err = k8s_watch(conn);
		if (err == -ECANCELED)
			break;
		/* a stream closed at once with nothing in it must not become a busy loop */
		if (!err && meta_kw.watch_events == events && mono_ns() - t0 < NSEC_PER_SEC)
			err = -EAGAIN;
		if (err == -ESTALE) {
			meta_kw.rv[0] = 0;
			continue;
		}
		if (err) {
			if (!backoff_sleep(attempt++))
				break;
			continue;
		}
		attempt = 1;
	}
	http_conn__free(conn);
	return NULL;
}
