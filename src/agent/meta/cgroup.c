/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cgroup path parsing for process metadata: container runtime and id, pod UID and systemd unit
 * from containerd, CRI-O, Docker and Podman paths (systemd and cgroupfs drivers; v1 and v2).
 */
#include "agent/meta/meta_int.h"

/* ---- cgroup paths ------------------------------------------------------------------------------ */

static bool all_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

void meta_copy_str(char *dst, size_t cap, const char *src, size_t n)
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
		meta_copy_str(uid, cap, buf, 36);
		return true;
	}
	if (n == 32 && all_hex(p, 32)) {
		meta_copy_str(uid, cap, p, 32);
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
	meta_copy_str(ret->path, sizeof(ret->path), path, strlen(path));
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
					meta_copy_str(ret->container_id, sizeof(ret->container_id), seg + pl,
						      base - pl);
					meta_copy_str(ret->runtime, sizeof(ret->runtime),
						      scope_prefixes[i].runtime,
						      strlen(scope_prefixes[i].runtime));
					goto next;
				}
			}
		}
		/* cgroupfs driver: /kubepods/burstable/pod<uid>/<id>, /docker/<id>, /crio/<id> */
		if (!ret->container_id[0] && n == 64 && all_hex(seg, 64)) {
			meta_copy_str(ret->container_id, sizeof(ret->container_id), seg, 64);
			if (prev && prevlen == 6 && !memcmp(prev, "docker", 6))
				strcpy(ret->runtime, "docker");
			else if (prev && prevlen == 4 && !memcmp(prev, "crio", 4))
				strcpy(ret->runtime, "cri-o");
			goto next;
		}
		if (ends_with(seg, n, ".service") || ends_with(seg, n, ".scope"))
			meta_copy_str(ret->unit, sizeof(ret->unit), seg, n);
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

		meta_copy_str(line, sizeof(line), s, len);
		s = nl ? nl + 1 : s + len;
		c1 = strchr(line, ':');
		c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		ctrls = (char *)c1 + 1;
		*(char *)c2 = 0;
		path = (char *)c2 + 1;
		if (!strncmp(line, "0:", 2) && !*ctrls) {
			meta_copy_str(v2, sizeof(v2), path, strlen(path));
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
				meta_copy_str(v1[i], sizeof(v1[i]), path, strlen(path));
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
