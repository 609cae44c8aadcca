/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Process metadata for labels: cgroup path parsing (containerd, CRI-O, Docker, Podman; systemd
 * and cgroupfs drivers; v1 and v2), a bounded cache of this node's pods kept by a Kubernetes
 * list+watch thread (libcurl, jansson), a per-pid label cache, and the agent module "meta".
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>
#include <jansson.h>
#include "agent/meta/meta.h"
#include "agent/meta/relabel.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/prom.h"
#include "common/util.h"

#define MAX_PODS	   4096		/* pods cached (a node runs at most a few hundred) */
#define MAX_POD_LABELS	   64		/* labels kept per pod */
#define MAX_POD_CONTAINERS 32
#define DELETED_GRACE_NS   (600 * NSEC_PER_SEC)	/* deleted pods still label late samples */
#define PID_CACHE_SIZE	   4096		/* direct-mapped by pid */
#define PID_REREAD_NS	   (10 * NSEC_PER_SEC)
#define MAX_LIST_BYTES	   (256u << 20)	/* one list page */
#define MAX_EVENT_BYTES	   (16u << 20)	/* one watch event line */
#define PACKED_MAX	   4096		/* a process's labels, packed "name\0value\0..." */
#define WATCH_TIMEOUT_S	   300
#define BACKOFF_MAX_S	   30

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* ---- cgroup paths ------------------------------------------------------------------------------ */

static bool all_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

static void copy_str(char *dst, size_t cap, const char *src, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, src, n);
	dst[n] = 0;
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
	size_t m = strlen(suffix);

	return n >= m && !memcmp(s + n - m, suffix, m);
}

/*
 * "pod<uid>" at the end of seg (after "kubepods-burstable-" etc. and with ".slice" stripped):
 * a UID with '-' (cgroupfs) or '_' (systemd escapes '-') separators, or the 32-hex config hash
 * of a static pod.
 */
static bool parse_pod_segment(const char *seg, size_t n, char *uid, size_t cap)
{
	const char *p = NULL;

	for (size_t i = 0; i + 3 <= n; i++)
		if (!memcmp(seg + i, "pod", 3) && (i == 0 || seg[i - 1] == '-'))
			p = seg + i + 3;
	if (!p)
		return false;
	n -= (size_t)(p - seg);
	if (n == 36) {
		char buf[37];

		for (size_t i = 0; i < 36; i++) {
			bool dash = i == 8 || i == 13 || i == 18 || i == 23;

			if (dash ? (p[i] != '-' && p[i] != '_') : !isxdigit((unsigned char)p[i]))
				return false;
			buf[i] = dash ? '-' : (char)tolower((unsigned char)p[i]);
		}
		copy_str(uid, cap, buf, 36);
		return true;
	}
	if (n == 32 && all_hex(p, 32)) {
		copy_str(uid, cap, p, 32);
		return true;
	}
	return false;
}

static const struct {
	const char *prefix, *runtime;
} scope_prefixes[] = {
	{ "cri-containerd-", "containerd" }, { "crio-conmon-", "cri-o" }, { "crio-", "cri-o" },
	{ "docker-", "docker" },	     { "libpod-conmon-", "podman" }, { "libpod-", "podman" },
	{ "containerd-", "containerd" },
};

int meta__parse_cgroup_path(const char *path, struct meta_cgroup *ret)
{
	const char *s, *prev = NULL;
	size_t prevlen = 0;

	if (!path || !ret)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	copy_str(ret->path, sizeof(ret->path), path, strlen(path));
	for (s = path; *s;) {
		const char *seg, *end = strchr(s, '/');
		size_t n, base;

		if (!end)
			end = s + strlen(s);
		seg = s;
		n = (size_t)(end - s);
		s = *end ? end + 1 : end;
		if (!n)
			continue;
		base = n;
		if (ends_with(seg, n, ".slice") || ends_with(seg, n, ".scope"))
			base = n - 6;
		if (!ret->pod_uid[0] && ends_with(seg, n, ".slice") &&
		    parse_pod_segment(seg, base, ret->pod_uid, sizeof(ret->pod_uid)))
			goto next;
		if (!ret->pod_uid[0] && !ends_with(seg, n, ".scope") && prev &&
		    parse_pod_segment(seg, n, ret->pod_uid, sizeof(ret->pod_uid)))
			goto next;
		if (!ret->container_id[0] && ends_with(seg, n, ".scope")) {
			for (size_t i = 0; i < ARRAY_SIZE(scope_prefixes); i++) {
				size_t pl = strlen(scope_prefixes[i].prefix);

				if (base > pl && !strncmp(seg, scope_prefixes[i].prefix, pl) &&
				    base - pl >= 12 && base - pl < sizeof(ret->container_id) &&
				    all_hex(seg + pl, base - pl)) {
					copy_str(ret->container_id, sizeof(ret->container_id), seg + pl,
						 base - pl);
					copy_str(ret->runtime, sizeof(ret->runtime),
						 scope_prefixes[i].runtime,
						 strlen(scope_prefixes[i].runtime));
					goto next;
				}
			}
		}
		/* cgroupfs driver: /kubepods/burstable/pod<uid>/<id>, /docker/<id>, /crio/<id> */
		if (!ret->container_id[0] && n == 64 && all_hex(seg, 64)) {
			copy_str(ret->container_id, sizeof(ret->container_id), seg, 64);
			if (prev && prevlen == 6 && !memcmp(prev, "docker", 6))
				strcpy(ret->runtime, "docker");
			else if (prev && prevlen == 4 && !memcmp(prev, "crio", 4))
				strcpy(ret->runtime, "cri-o");
			goto next;
		}
		if (ends_with(seg, n, ".service") || ends_with(seg, n, ".scope"))
			copy_str(ret->unit, sizeof(ret->unit), seg, n);
next:
		prev = seg;
		prevlen = n;
	}
	if (ret->container_id[0] || ret->pod_uid[0]) {
		ret->unit[0] = 0;
		return 1;
	}
	return 0;
}

int meta__parse_cgroup_file(const char *text, struct meta_cgroup *ret)
{
	/* v1 hierarchies in order of preference */
	static const char *const v1_order[] = { "name=systemd", "memory", "cpu", "pids", "" };
	char v2[256] = "", v1[ARRAY_SIZE(v1_order)][256];
	const char *s;
	int found;

	if (!text || !ret)
		return -EINVAL;
	memset(v1, 0, sizeof(v1));
	for (s = text; *s;) {
		const char *nl = strchr(s, '\n'), *c1, *c2;
		size_t len = nl ? (size_t)(nl - s) : strlen(s);
		char line[512], *ctrls, *path;

		copy_str(line, sizeof(line), s, len);
		s = nl ? nl + 1 : s + len;
		c1 = strchr(line, ':');
		c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		ctrls = (char *)c1 + 1;
		*(char *)c2 = 0;
		path = (char *)c2 + 1;
		if (!strncmp(line, "0:", 2) && !*ctrls) {
			copy_str(v2, sizeof(v2), path, strlen(path));
			continue;
		}
		for (size_t i = 0; i < ARRAY_SIZE(v1_order); i++) {
			bool hit = !*v1_order[i];

			/* controllers are a comma list: "cpu,cpuacct" */
			for (char *tok = ctrls; *v1_order[i] && tok && *tok;) {
				size_t tl = strcspn(tok, ",");

				if (tl == strlen(v1_order[i]) && !strncmp(tok, v1_order[i], tl))
					hit = true;
				tok = tok[tl] ? tok + tl + 1 : NULL;
			}
			if (hit && !v1[i][0] && strcmp(path, "/")) {
				copy_str(v1[i], sizeof(v1[i]), path, strlen(path));
				break;
			}
		}
	}
	if (v2[0] && strcmp(v2, "/")) {
		found = meta__parse_cgroup_path(v2, ret);
		ret->version = 2;
		if (found)
			return 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(v1_order); i++) {
		struct meta_cgroup tmp;

		if (!v1[i][0])
			continue;
		if (meta__parse_cgroup_path(v1[i], &tmp) == 1) {
			*ret = tmp;
			ret->version = 1;
			return 0;
		}
	}
	if (v2[0] && strcmp(v2, "/"))
		return 0;	/* already parsed above */
	for (size_t i = 0; i < ARRAY_SIZE(v1_order); i++) {
		if (v1[i][0]) {
			meta__parse_cgroup_path(v1[i], ret);
			ret->version = 1;
			return 0;
		}
	}
	meta__parse_cgroup_path(v2[0] ? v2 : "/", ret);
	ret->version = v2[0] ? 2 : 1;
	return 0;
}

/* ---- pod cache --------------------------------------------------------------------------------- */

struct pod_container {
	char id[80];
	char runtime[16];
	char *name;
};

struct pod {
	char uid[40];
	char mirror[40];	/* kubernetes.io/config.mirror: the static pod's cgroup hash */
	char *name, *ns, *node, *owner_kind, *owner_name;
	struct label labels[MAX_POD_LABELS];	/* owned strings */
	size_t nlabels;
	struct pod_container ctrs[MAX_POD_CONTAINERS];
	size_t nctrs;
	uint64_t deleted_ns;	/* mono time of deletion, 0 while alive */
};

static struct {
	pthread_mutex_t mu;
	struct pod *pods[MAX_PODS];
	size_t n;
	atomic_uint_fast64_t gen;	/* bumped on every change; pid entries rebuild on change */
	atomic_uint_fast64_t evicted;	/* pods dropped because the cache was full */
} pc = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void pod_free(struct pod *p)
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
		copy_str(c->id, sizeof(c->id), sep + 3, strlen(sep + 3));
		copy_str(c->runtime, sizeof(c->runtime), id, (size_t)(sep - id));
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
	copy_str(p->uid, sizeof(p->uid), uid, strlen(uid));
	mirror = json_string_value(json_object_get(ann, "kubernetes.io/config.mirror"));
	if (mirror)
		copy_str(p->mirror, sizeof(p->mirror), mirror, strlen(mirror));
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
	pod_free(p);
	errno = ENOMEM;
	return NULL;
}

/* Caller holds pc.mu. */
static ssize_t pod_index(const char *uid)
{
	for (size_t i = 0; i < pc.n; i++)
		if (!strcmp(pc.pods[i]->uid, uid) || !strcmp(pc.pods[i]->mirror, uid))
			return (ssize_t)i;
	return -1;
}

/* Drops deleted pods past their grace; if still full, the oldest deleted one. pc.mu held. */
static void pods_gc(bool need_room)
{
	uint64_t now = mono_ns();
	ssize_t oldest = -1;

	for (size_t i = 0; i < pc.n;) {
		struct pod *p = pc.pods[i];

		if (p->deleted_ns && now - p->deleted_ns > DELETED_GRACE_NS) {
			pod_free(p);
			pc.pods[i] = pc.pods[--pc.n];
			continue;
		}
		if (p->deleted_ns && (oldest < 0 || p->deleted_ns < pc.pods[oldest]->deleted_ns))
			oldest = (ssize_t)i;
		i++;
	}
	if (need_room && pc.n >= MAX_PODS && oldest >= 0) {
		pod_free(pc.pods[oldest]);
		pc.pods[oldest] = pc.pods[--pc.n];
		pc.evicted++;
	}
}

/* Takes ownership of p. */
static void pod_upsert(struct pod *p)
{
	ssize_t i;

	pthread_mutex_lock(&pc.mu);
	i = pod_index(p->uid);
	if (i >= 0) {
		pod_free(pc.pods[i]);
		pc.pods[i] = p;
	} else {
		pods_gc(pc.n >= MAX_PODS);
		if (pc.n < MAX_PODS) {
			pc.pods[pc.n++] = p;
		} else {
			pc.evicted++;
			pod_free(p);
		}
	}
	pc.gen++;
	pthread_mutex_unlock(&pc.mu);
}

static void pod_mark_deleted(const char *uid)
{
	ssize_t i;

	pthread_mutex_lock(&pc.mu);
	i = pod_index(uid);
	if (i >= 0 && !pc.pods[i]->deleted_ns)
		pc.pods[i]->deleted_ns = mono_ns();
	pc.gen++;
	pthread_mutex_unlock(&pc.mu);
}

/*
 * Replaces the cache by a full list (takes ownership of pods[0..n)): pods absent from the list
 * are kept as deleted for the grace period, so late samples keep their labels.
 */
static void pods_replace(struct pod **pods, size_t n)
{
	uint64_t now = mono_ns();

	pthread_mutex_lock(&pc.mu);
	for (size_t i = 0; i < pc.n; i++) {
		struct pod *old = pc.pods[i];
		bool listed = false;

		for (size_t j = 0; j < n && !listed; j++)
			listed = !strcmp(pods[j]->uid, old->uid);
		if (listed) {
			pod_free(old);
			pc.pods[i] = NULL;
		} else if (!old->deleted_ns) {
			old->deleted_ns = now;
		}
	}
	{
		size_t k = 0;	/* compact the survivors */

		for (size_t i = 0; i < pc.n; i++)
			if (pc.pods[i])
				pc.pods[k++] = pc.pods[i];
		pc.n = k;
	}
	for (size_t j = 0; j < n; j++) {
		pods_gc(pc.n >= MAX_PODS);
		if (pc.n < MAX_PODS) {
			pc.pods[pc.n++] = pods[j];
		} else {
			pc.evicted++;
			pod_free(pods[j]);
		}
	}
	pc.gen++;
	pthread_mutex_unlock(&pc.mu);
}

size_t meta__npods(void)
{
	size_t n;

	pthread_mutex_lock(&pc.mu);
	n = pc.n;
	pthread_mutex_unlock(&pc.mu);
	return n;
}

/* ---- Kubernetes list + watch --------------------------------------------------------------------- */

static struct {
	pthread_t thread;
	bool running;
	atomic_bool stopping;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	char *api, *token_file, *ca_file, *node;
	char rv[64];			/* resourceVersion to watch from; "" forces a list */
	CURL *curl;			/* the watch in progress (watch thread only) */
	char *buf;			/* partial watch line */
	size_t len, cap;
	bool gone;			/* the watch said 410 Gone */
	bool overflow;
	/* counters for /metrics */
	atomic_uint_fast64_t lists, list_errors, watches, watch_events, watch_gone, api_errors,
		bad_events;
	atomic_int up;			/* 1 after a successful list, 0 after an error */
} kw = { .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static int progress_cb(void *u, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	return atomic_load(&kw.stopping) ? 1 : 0;
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

	if (!kw.token_file || read_token_file(kw.token_file, buf, sizeof(buf)) < 0)
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
	if (kw.ca_file && !access(kw.ca_file, R_OK))
		curl_easy_setopt(c, CURLOPT_CAINFO, kw.ca_file);
	*ret_hdrs = h;
	return c;
}

static char *pods_url(const char *extra)
{
	char *node = curl_easy_escape(NULL, kw.node, 0), *url;
	size_t n;

	if (!node)
		return NULL;
	n = strlen(kw.api) + strlen(node) + strlen(extra) + 96;
	url = malloc(n);
	if (url)
		snprintf(url, n, "%s/api/v1/pods?fieldSelector=spec.nodeName%%3D%s%s", kw.api, node,
			 extra);
	curl_free(node);
	return url;
}

/* Logs an API failure once per call; the message says what to fix for 401/403. */
static void api_warn(const char *what, long status, const char *body, CURLcode cc, const char *cerr)
{
	char msg[256] = "";

	kw.api_errors++;
	atomic_store(&kw.up, 0);
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

	kw.lists++;
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
		if (atomic_load(&kw.stopping)) {
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
			kw.api_errors++;
			json_decref(j);
			err = -EPROTO;
			goto out;
		}
		json_array_foreach(items, i, it) {
			struct pod *p = pod_from_json(it);

			if (!p) {
				kw.bad_events++;
				continue;
			}
			if (npods == cap) {
				size_t nc = cap ? cap * 2 : 64;
				struct pod **np = realloc(pods, nc * sizeof(*np));

				if (!np) {
					pod_free(p);
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
		copy_str(rv, sizeof(rv), json_string_value(json_object_get(it, "resourceVersion")) ?: "",
			 strlen(json_string_value(json_object_get(it, "resourceVersion")) ?: ""));
		{
			const char *cs = json_string_value(json_object_get(it, "continue"));

			copy_str(cont, sizeof(cont), cs ? cs : "", cs ? strlen(cs) : 0);
		}
		json_decref(j);
	} while (cont[0]);
	pods_replace(pods, npods);
	npods = 0;
	snprintf(kw.rv, sizeof(kw.rv), "%s", rv);
	atomic_store(&kw.up, 1);
	log_debug("kubernetes: listed %zu pods on node '%s' at resourceVersion %s", meta__npods(),
		  kw.node, rv);
out:
	for (size_t i = 0; i < npods; i++)
		pod_free(pods[i]);
	free(pods);
	if (err && err != -ECANCELED)
		kw.list_errors++;
	return err;
}

/* One watch event line. Returns false to abort the stream (410 Gone). */
static bool handle_event(const char *line, size_t len)
{
	json_t *j = json_loadb(line, len, 0, NULL), *obj;
	const char *type, *rv;
	bool ok = true;

	if (!j) {
		kw.bad_events++;
		return true;
	}
	type = json_string_value(json_object_get(j, "type"));
	obj = json_object_get(j, "object");
	kw.watch_events++;
	if (!type || !json_is_object(obj)) {
		kw.bad_events++;
		goto out;
	}
	if (!strcmp(type, "ERROR")) {
		json_int_t code = json_integer_value(json_object_get(obj, "code"));
		const char *msg = json_string_value(json_object_get(obj, "message"));

		if (code == 410) {
			kw.watch_gone++;
			kw.gone = true;
			log_info("kubernetes watch: %s (410 Gone), listing again", msg ? msg : "expired");
		} else {
			api_warn("watch pods", (long)code, NULL, CURLE_OK, "");
			kw.rv[0] = 0;	/* unknown state: list again */
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
			kw.bad_events++;
	} else if (!strcmp(type, "DELETED")) {
		const char *uid = json_string_value(
			json_object_get(json_object_get(obj, "metadata"), "uid"));

		if (uid)
			pod_mark_deleted(uid);
	} else if (strcmp(type, "BOOKMARK")) {
		kw.bad_events++;
	}
	if (rv)
		snprintf(kw.rv, sizeof(kw.rv), "%s", rv);
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
		curl_easy_getinfo(kw.curl, CURLINFO_RESPONSE_CODE, &status);
	if (errb->p || status != 200)	/* not a stream: keep the Status body for the message */
		return body_cb(data, size, nmemb, errb);

	if (kw.len + n > MAX_EVENT_BYTES) {
		kw.overflow = true;
		return 0;
	}
	if (kw.len + n > kw.cap) {
		size_t cap = kw.cap ? kw.cap : 65536;
		char *p;

		while (cap < kw.len + n)
			cap *= 2;
		p = realloc(kw.buf, cap);
		if (!p)
			return 0;
		kw.buf = p;
		kw.cap = cap;
	}
	memcpy(kw.buf + kw.len, data, n);
	kw.len += n;
	for (size_t i = 0; i < kw.len; i++) {
		if (kw.buf[i] != '\n')
			continue;
		if (i > start && !handle_event(kw.buf + start, i - start))
			return 0;
		start = i + 1;
	}
	memmove(kw.buf, kw.buf + start, kw.len - start);
	kw.len -= start;
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

	rv = curl_easy_escape(NULL, kw.rv, 0);
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
	kw.watches++;
	kw.len = 0;
	kw.gone = kw.overflow = false;
	kw.curl = c;
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, watch_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &errb);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
	cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	kw.curl = NULL;
	curl_easy_cleanup(c);
	curl_slist_free_all(hdrs);
	free(url);
	if (atomic_load(&kw.stopping)) {
		free(errb.p);
		return -ECANCELED;
	}
	if (kw.gone || status == 410) {
		if (status == 410)
			kw.watch_gone++;
		err = -ESTALE;
	} else if (status != 200 && status != 0) {
		api_warn("watch pods", status, errb.p, CURLE_OK, "");
		err = -EIO;
	} else if (kw.overflow) {
		log_warn("kubernetes watch: an event larger than %u bytes, listing again",
			 MAX_EVENT_BYTES);
		kw.bad_events++;
		err = -ESTALE;
	} else if (!kw.rv[0]) {
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
	pthread_mutex_lock(&kw.mu);
	while (!atomic_load(&kw.stopping)) {
		if (pthread_cond_timedwait(&kw.cond, &kw.mu, &ts) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&kw.mu);
	return !atomic_load(&kw.stopping);
}

static void *k8s_thread(void *arg)
{
	unsigned attempt = 1;	/* retries in a row */

	while (!atomic_load(&kw.stopping)) {
		uint64_t t0, events;
		int err;

		if (!kw.rv[0]) {
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
		events = kw.watch_events;
		err = k8s_watch();
		if (err == -ECANCELED)
			break;
		/* a stream closed at once with nothing in it must not become a busy loop */
		if (!err && kw.watch_events == events && mono_ns() - t0 < NSEC_PER_SEC)
			err = -EAGAIN;
		if (err == -ESTALE) {
			kw.rv[0] = 0;
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

/* ---- labels of a process ------------------------------------------------------------------------- */

struct pid_entry {
	pid_t pid;
	uint64_t read_ns;	/* when the cgroup file was read (mono) */
	uint64_t gen;		/* pod-cache generation the labels were built from */
	struct meta_cgroup cg;
	char comm[16];		/* the process's name when read, for relabel rules ("" unread) */
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
	atomic_uint_fast64_t hits, misses, rebuilds, evictions, read_errors, overflow, dropped;
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
	if (cg->container_id[0]) {
		lset_set(&ls, "container_id", cg->container_id);
		lset_set(&ls, "container_runtime", cg->runtime);
	}
	pthread_mutex_lock(&pc.mu);
	gen = pc.gen;
	if (cg->pod_uid[0]) {
		ssize_t i = pod_index(cg->pod_uid);

		if (i >= 0)
			add_pod_labels(&ls, pc.pods[i], cg);
		else
			lset_set(&ls, "pod_uid", cg->pod_uid);	/* unresolved: keep the identity */
	}
	pthread_mutex_unlock(&pc.mu);
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
	char comm[16];
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
	if (e->pid != pid || mono_ns() - e->read_ns > PID_REREAD_NS) {
		/* the kernel's /proc/PID/cgroup can take 100+ us: not under the lock */
		pthread_mutex_unlock(&pcache.mu);
		rc = read_cgroup(pid, &cg);
		comm[0] = 0;
		if (!rc && pcache.rules)	/* only rules read it: a read per new process else */
			read_comm(pid, comm);
		if (!comm[0] && comm_hint)
			snprintf(comm, sizeof(comm), "%s", comm_hint);
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
			build_labels(e);
		}
	} else if (!e->gone && e->gen != atomic_load(&pc.gen)) {
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
	if (kw.running)
		return 0;
	if (gethostname(host, sizeof(host)))
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = 0;
	node = env_or(o->node, "GPUSCOPE_K8S_NODE", env_or(NULL, "NODE_NAME", host));
	kw.api = strdup(api);
	kw.node = strdup(node);
	kw.token_file = strdup(env_or(o->token_file, "GPUSCOPE_K8S_TOKEN_FILE", SA_DIR "/token"));
	kw.ca_file = strdup(env_or(o->ca_file, "GPUSCOPE_K8S_CA_FILE", SA_DIR "/ca.crt"));
	if (!kw.api || !kw.node || !kw.token_file || !kw.ca_file) {
		rc = -ENOMEM;
		goto out_free;
	}
	while (kw.api[0] && kw.api[strlen(kw.api) - 1] == '/')
		kw.api[strlen(kw.api) - 1] = 0;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	atomic_store(&kw.stopping, false);
	kw.rv[0] = 0;
	rc = -pthread_create(&kw.thread, NULL, k8s_thread, NULL);
	if (rc)
		goto out_free;
	kw.running = true;
	log_info("meta: watching pods of node '%s' at %s", kw.node, kw.api);
	return 0;
out_free:
	free(kw.api);
	free(kw.node);
	free(kw.token_file);
	free(kw.ca_file);
	kw.api = kw.node = kw.token_file = kw.ca_file = NULL;
	return rc;
}

void meta__stop(void)
{
	agent_labels__set_meta(NULL);
	if (kw.running) {
		pthread_mutex_lock(&kw.mu);
		atomic_store(&kw.stopping, true);
		pthread_cond_broadcast(&kw.cond);
		pthread_mutex_unlock(&kw.mu);
		pthread_join(kw.thread, NULL);
		kw.running = false;
		free(kw.api);
		free(kw.node);
		free(kw.token_file);
		free(kw.ca_file);
		free(kw.buf);
		kw.api = kw.node = kw.token_file = kw.ca_file = kw.buf = NULL;
		kw.len = kw.cap = 0;
	}
	pthread_mutex_lock(&pc.mu);
	for (size_t i = 0; i < pc.n; i++)
		pod_free(pc.pods[i]);
	pc.n = 0;
	pc.gen++;
	pthread_mutex_unlock(&pc.mu);
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
		   kw.running ? atomic_load(&kw.up) : 0);
	prom_gauge(out, "gpuscope_agent_meta_k8s_pods", "Pods of this node in the cache.", meta__npods());
	prom_counter(out, "gpuscope_agent_meta_k8s_lists_total", "Pod lists from the API server.", kw.lists);
	prom_counter(out, "gpuscope_agent_meta_k8s_list_errors_total", "Pod lists that failed.",
		     kw.list_errors);
	prom_counter(out, "gpuscope_agent_meta_k8s_watches_total", "Pod watches started.", kw.watches);
	prom_counter(out, "gpuscope_agent_meta_k8s_watch_events_total", "Pod watch events received.",
		     kw.watch_events);
	prom_counter(out, "gpuscope_agent_meta_k8s_watch_gone_total",
		     "Watches that ended with 410 Gone (relisted).", kw.watch_gone);
	prom_counter(out, "gpuscope_agent_meta_k8s_api_errors_total", "Failed API server requests.",
		     kw.api_errors);
	prom_counter(out, "gpuscope_agent_meta_k8s_bad_events_total",
		     "Watch events or list items that could not be parsed.", kw.bad_events);
	prom_counter(out, "gpuscope_agent_meta_k8s_pods_evicted_total",
		     "Pods evicted from the cache (deleted, past their grace period).", pc.evicted);
	prom_counter(out, "gpuscope_agent_meta_pid_cache_hits_total", "Process label lookups cached.",
		     pcache.hits);
	prom_counter(out, "gpuscope_agent_meta_pid_cache_misses_total", "Process label lookups built.",
		     pcache.misses);
	prom_counter(out, "gpuscope_agent_meta_pid_cache_evictions_total",
		     "Process label entries evicted.", pcache.evictions);
	prom_counter(out, "gpuscope_agent_meta_pid_label_rebuilds_total",
		     "Process labels rebuilt because their pod changed.", pcache.rebuilds);
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
