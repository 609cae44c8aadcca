/* SPDX-License-Identifier: Apache-2.0 */
/*
 * This node's pods for process metadata: a bounded pod cache kept by a Kubernetes list+watch
 * thread (libcurl, jansson) on the API server.
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

static int progress_cb(void *u, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	return atomic_load(&meta_kw.stopping) ? 1 : 0;
}

struct body {
	char *p;
	size_t len, cap, max;
};

static size_t body_cb(char *data, size_t size, size_t nmemb, void *u)
{
	struct body *b = u;
	size_t n = size * nmemb;

	if (b->len + n + 1 > b->max)
		return 0;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 65536;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return 0;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = 0;
	return n;
}

static char *read_token(void)
{
	char buf[16384];

	if (!meta_kw.token_file || read_token_file(meta_kw.token_file, buf, sizeof(buf)) < 0)
		return NULL;
	return strdup(buf);
}

/* A curl handle set up for the API server; *ret_hdrs to be freed with curl_slist_free_all. */
static CURL *k8s_handle(const char *url, struct curl_slist **ret_hdrs, long timeout_s)
{
	struct curl_slist *h = NULL;
	char *tok = read_token();
	CURL *c = curl_easy_init();

	if (!c) {
		free(tok);
		return NULL;
	}
	h = curl_slist_append(h, "Accept: application/json");
	if (tok) {
		size_t n = strlen(tok) + 32;
		char *hdr = malloc(n);

		if (hdr) {
			snprintf(hdr, n, "Authorization: Bearer %s", tok);
			h = curl_slist_append(h, hdr);
			free(hdr);
		}
		free(tok);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress_cb);
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
	curl_easy_setopt(c, CURLOPT_USERAGENT, "gpuscope-agent");
	if (meta_kw.ca_file && !access(meta_kw.ca_file, R_OK))
		curl_easy_setopt(c, CURLOPT_CAINFO, meta_kw.ca_file);
	*ret_hdrs = h;
	return c;
}

static char *pods_url(const char *extra)
{
	char *node = curl_easy_escape(NULL, meta_kw.node, 0), *url;
	size_t n;

	if (!node)
		return NULL;
	n = strlen(meta_kw.api) + strlen(node) + strlen(extra) + 96;
	url = malloc(n);
	if (url)
		snprintf(url, n, "%s/api/v1/pods?fieldSelector=spec.nodeName%%3D%s%s", meta_kw.api, node,
			 extra);
	curl_free(node);
	return url;
}

/* Logs an API failure once per call; the message says what to fix for 401/403. */
static void api_warn(const char *what, long status, const char *body, CURLcode cc, const char *cerr)
{
	char msg[256] = "";

	meta_kw.api_errors++;
	atomic_store(&meta_kw.up, 0);
	if (cc != CURLE_OK) {
		log_warn("kubernetes %s: %s; pods labelled from cgroups only until it answers, "
			 "retrying", what, cerr[0] ? cerr : curl_easy_strerror(cc));
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
static int k8s_list(void)
{
	struct pod **pods = NULL;
	size_t npods = 0, cap = 0;
	char cont[4096] = "", rv[64] = "";
	int err = 0;

	meta_kw.lists++;
	do {
		struct body b = { .max = MAX_LIST_BYTES };
		struct curl_slist *hdrs = NULL;
		char extra[4200], cerr[CURL_ERROR_SIZE] = "", *url, *esc = NULL;
		json_t *j = NULL, *items, *it;
		long status = 0;
		CURLcode cc;
		CURL *c;
		size_t i;

		if (cont[0]) {
			esc = curl_easy_escape(NULL, cont, 0);
			snprintf(extra, sizeof(extra), "&limit=500&continue=%s", esc ? esc : "");
			curl_free(esc);
		} else {
			snprintf(extra, sizeof(extra), "&limit=500");
		}
		url = pods_url(extra);
		c = url ? k8s_handle(url, &hdrs, 60) : NULL;
		if (!c) {
			free(url);
			err = -ENOMEM;
			goto out;
		}
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_cb);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
		cc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		curl_easy_cleanup(c);
		curl_slist_free_all(hdrs);
		free(url);
		if (atomic_load(&meta_kw.stopping)) {
			free(b.p);
			err = -ECANCELED;
			goto out;
		}
		if (cc != CURLE_OK || status != 200) {
			if (status == 410 && cont[0]) {
				/* the continue token expired: start the list again */
				cont[0] = 0;
				free(b.p);
				continue;
			}
			api_warn("list pods", status, b.p, cc, cerr);
			free(b.p);
			err = -EIO;
			goto out;
		}
		j = b.p ? json_loadb(b.p, b.len, 0, NULL) : NULL;
		free(b.p);
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
			api_warn("watch pods", (long)code, NULL, CURLE_OK, "");
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

static size_t watch_cb(char *data, size_t size, size_t nmemb, void *u)
{
	struct body *errb = u;
	size_t n = size * nmemb, start = 0;
	long status = 0;

	if (!errb->p)
		curl_easy_getinfo(meta_kw.curl, CURLINFO_RESPONSE_CODE, &status);
	if (errb->p || status != 200)	/* not a stream: keep the Status body for the message */
		return body_cb(data, size, nmemb, errb);

	if (meta_kw.len + n > MAX_EVENT_BYTES) {
		meta_kw.overflow = true;
		return 0;
	}
	if (meta_kw.len + n > meta_kw.cap) {
		size_t cap = meta_kw.cap ? meta_kw.cap : 65536;
		char *p;

		while (cap < meta_kw.len + n)
			cap *= 2;
		p = realloc(meta_kw.buf, cap);
		if (!p)
			return 0;
		meta_kw.buf = p;
		meta_kw.cap = cap;
	}
	memcpy(meta_kw.buf + meta_kw.len, data, n);
	meta_kw.len += n;
	for (size_t i = 0; i < meta_kw.len; i++) {
		if (meta_kw.buf[i] != '\n')
			continue;
		if (i > start && !handle_event(meta_kw.buf + start, i - start))
			return 0;
		start = i + 1;
	}
	memmove(meta_kw.buf, meta_kw.buf + start, meta_kw.len - start);
	meta_kw.len -= start;
	return n;
}

/* Watches from kw.rv until the stream ends. 0 (ended, watch again), -ESTALE (relist), -errno. */
static int k8s_watch(void)
{
	char extra[256], cerr[CURL_ERROR_SIZE] = "", *url, *rv;
	struct curl_slist *hdrs = NULL;
	struct body errb = { .max = 65536 };
	long status = 0;
	CURLcode cc;
	CURL *c;
	int err = 0;

	rv = curl_easy_escape(NULL, meta_kw.rv, 0);
	if (!rv)
		return -ENOMEM;
	snprintf(extra, sizeof(extra),
		 "&watch=true&resourceVersion=%s&allowWatchBookmarks=true&timeoutSeconds=%d", rv,
		 WATCH_TIMEOUT_S);
	curl_free(rv);
	url = pods_url(extra);
	c = url ? k8s_handle(url, &hdrs, WATCH_TIMEOUT_S + 30) : NULL;
	if (!c) {
		free(url);
		return -ENOMEM;
	}
	meta_kw.watches++;
	meta_kw.len = 0;
	meta_kw.gone = meta_kw.overflow = false;
	meta_kw.curl = c;
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, watch_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &errb);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
	cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	meta_kw.curl = NULL;
	curl_easy_cleanup(c);
	curl_slist_free_all(hdrs);
	free(url);
	if (atomic_load(&meta_kw.stopping)) {
		free(errb.p);
		return -ECANCELED;
	}
	if (meta_kw.gone || status == 410) {
		if (status == 410)
			meta_kw.watch_gone++;
		err = -ESTALE;
	} else if (status != 200 && status != 0) {
		api_warn("watch pods", status, errb.p, CURLE_OK, "");
		err = -EIO;
	} else if (meta_kw.overflow) {
		log_warn("kubernetes watch: an event larger than %u bytes, listing again",
			 MAX_EVENT_BYTES);
		meta_kw.bad_events++;
		err = -ESTALE;
	} else if (!meta_kw.rv[0]) {
		err = -ESTALE;		/* an ERROR event: list again */
	} else if (cc != CURLE_OK && cc != CURLE_OPERATION_TIMEDOUT && cc != CURLE_PARTIAL_FILE &&
		   cc != CURLE_RECV_ERROR && cc != CURLE_GOT_NOTHING) {
		api_warn("watch pods", 0, NULL, cc, cerr);
		err = -EIO;
	}
	/* a closed or timed-out stream is normal: the caller watches again from kw.rv */
	free(errb.p);
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

	while (!atomic_load(&meta_kw.stopping)) {
		uint64_t t0, events;
		int err;

		if (!meta_kw.rv[0]) {
			err = k8s_list();
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
		err = k8s_watch();
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
	return NULL;
}
