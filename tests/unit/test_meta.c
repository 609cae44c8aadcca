/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for src/agent/meta/ (cgroup.c, kube.c, meta.c): cgroup paths of containerd, CRI-O, Docker and Podman (systemd
 * and cgroupfs drivers, v1 and v2), this machine's real cgroups (and a real cgroup made for the
 * test when root), pod labels and Kubeflow/KubeRay promotion from a Pod object, relabel drop.
 */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "test.h"
#include "../../src/agent/meta/cgroup.c"
#include "../../src/agent/meta/kube.c"
#include "../../src/agent/meta/meta.c"

#define ID64 "4a5b6c7d8e9f00112233445566778899aabbccddeeff00112233445566778899"
#define UID_ "7c1f9d3e_5b2a_4c8e_9f10_2d3e4f5a6b7c"
#define UID  "7c1f9d3e-5b2a-4c8e-9f10-2d3e4f5a6b7c"

static bool check_path(const char *path, int want_rc, const char *runtime, const char *id,
		       const char *uid, const char *unit)
{
	struct meta_cgroup cg;
	int rc = meta__parse_cgroup_path(path, &cg);
	bool ok = ASSERT_EQ(rc, want_rc, path) && ASSERT_STREQ(cg.runtime, runtime, "runtime") &&
		  ASSERT_STREQ(cg.container_id, id, "container id") &&
		  ASSERT_STREQ(cg.pod_uid, uid, "pod uid") && ASSERT_STREQ(cg.unit, unit, "unit");

	if (!ok)
		fprintf(stderr, "  path: %s\n", path);
	return ok;
}

static bool test_meta_cgroup_fixtures(void)
{
	/* containerd, systemd driver, cgroup v2 */
	CHECK(check_path("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
			 ".slice/cri-containerd-" ID64 ".scope", 1, "containerd", ID64, UID, ""));
	/* guaranteed QoS has no QoS slice */
	CHECK(check_path("/kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" ID64 ".scope",
			 1, "containerd", ID64, UID, ""));
	/* CRI-O, and its conmon monitor */
	CHECK(check_path("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_
			 ".slice/crio-" ID64 ".scope", 1, "cri-o", ID64, UID, ""));
	CHECK(check_path("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_
			 ".slice/crio-conmon-" ID64 ".scope", 1, "cri-o", ID64, UID, ""));
	/* cri-dockerd under systemd */
	CHECK(check_path("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
			 ".slice/docker-" ID64 ".scope", 1, "docker", ID64, UID, ""));
	/* cgroupfs driver (v1 or v2): no runtime in the path */
	CHECK(check_path("/kubepods/burstable/pod" UID "/" ID64, 1, "", ID64, UID, ""));
	CHECK(check_path("/kubepods/pod" UID "/" ID64, 1, "", ID64, UID, ""));
	CHECK(check_path("/kubepods/besteffort/pod" UID, 1, "", "", UID, ""));
	/* seen from inside another cgroup namespace */
	CHECK(check_path("/../../kubepods-burstable-pod" UID_ ".slice/cri-containerd-" ID64 ".scope",
			 1, "containerd", ID64, UID, ""));
	/* kind / kubelet-in-a-slice nesting, systemd inside the container */
	CHECK(check_path("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
			 "kubelet-kubepods-besteffort-pod" UID_ ".slice/cri-containerd-" ID64
			 ".scope/init.scope", 1, "containerd", ID64, UID, ""));
	/* static pod: the UID is the 32-hex config hash */
	CHECK(check_path("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
			 "pod5f2d4fc5c3b8a9ac2b8b4f1e5d7a3c1e.slice/cri-containerd-" ID64 ".scope", 1,
			 "containerd", ID64, "5f2d4fc5c3b8a9ac2b8b4f1e5d7a3c1e", ""));
	/* plain Docker (systemd and cgroupfs), Podman */
	CHECK(check_path("/system.slice/docker-" ID64 ".scope", 1, "docker", ID64, "", ""));
	CHECK(check_path("/docker/" ID64, 1, "docker", ID64, "", ""));
	CHECK(check_path("/machine.slice/libpod-" ID64 ".scope/container", 1, "podman", ID64, "", ""));
	/* no container */
	CHECK(check_path("/system.slice/ssh.service", 0, "", "", "", "ssh.service"));
	CHECK(check_path("/user.slice/user-1000.slice/session-3.scope", 0, "", "", "", "session-3.scope"));
	CHECK(check_path("/", 0, "", "", "", ""));
	CHECK(check_path("/process_api/027af77912192c483b6471f3eb6928e7", 0, "", "", "", ""));
	/* near misses */
	CHECK(check_path("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c1f9d3e.slice",
			 0, "", "", "", ""));
	CHECK(check_path("/system.slice/docker-xyz.scope", 0, "", "", "", "docker-xyz.scope"));
	return true;
}

static bool check_file(const char *text, int version, const char *path, const char *id,
		       const char *uid)
{
	struct meta_cgroup cg;

	return ASSERT_EQ(meta__parse_cgroup_file(text, &cg), 0, "parse") &&
	       ASSERT_EQ(cg.version, version, "version") && ASSERT_STREQ(cg.path, path, "path") &&
	       ASSERT_STREQ(cg.container_id, id, "container id") &&
	       ASSERT_STREQ(cg.pod_uid, uid, "pod uid");
}

static bool test_meta_cgroup_files(void)
{
	/* pure v2 */
	CHECK(check_file("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
			 ".slice/cri-containerd-" ID64 ".scope\n", 2,
			 "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
			 ".slice/cri-containerd-" ID64 ".scope", ID64, UID));
	/* v1 with the cgroupfs driver (Docker-era kubelet), hybrid "0::/" */
	CHECK(check_file("12:pids:/kubepods/burstable/pod" UID "/" ID64 "\n"
			 "11:memory:/kubepods/burstable/pod" UID "/" ID64 "\n"
			 "4:cpu,cpuacct:/kubepods/burstable/pod" UID "/" ID64 "\n"
			 "1:name=systemd:/kubepods/burstable/pod" UID "/" ID64 "\n0::/\n", 1,
			 "/kubepods/burstable/pod" UID "/" ID64, ID64, UID));
	/* v1 Docker, no Kubernetes */
	CHECK(check_file("5:memory:/docker/" ID64 "\n1:name=systemd:/docker/" ID64 "\n", 1,
			 "/docker/" ID64, ID64, ""));
	/* v1 with the systemd driver and CRI-O */
	CHECK(check_file("9:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_
			 ".slice/crio-" ID64 ".scope\n1:name=systemd:/\n", 1,
			 "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_
			 ".slice/crio-" ID64 ".scope", ID64, UID));
	/* a service */
	CHECK(check_file("0::/system.slice/containerd.service\n", 2, "/system.slice/containerd.service",
			 "", ""));
	/* this machine's shape: hybrid, only memory placed */
	CHECK(check_file("9:name=systemd:/\n4:memory:/process_api/027af779\n0::/\n", 1,
			 "/process_api/027af779", "", ""));
	CHECK(check_file("0::/\n", 2, "/", "", ""));
	return true;
}

static char *slurp(const char *path)
{
	static char buf[8192];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	return buf;
}

/* This machine's own cgroup file: the chosen path is one of its paths, no container invented. */
static bool test_meta_cgroup_self(void)
{
	char *text = slurp("/proc/self/cgroup"), needle[300];
	struct meta_cgroup cg;
	struct label l[32];
	size_t n;
	bool has_cgroup = false;

	CHECK(ASSERT_TRUE(text != NULL, "read /proc/self/cgroup"));
	CHECK(ASSERT_EQ(meta__parse_cgroup_file(text, &cg), 0, "parse"));
	snprintf(needle, sizeof(needle), ":%s\n", cg.path);
	CHECK(ASSERT_TRUE(strstr(text, needle) != NULL, "path is one of the file's"));
	printf("  /proc/self/cgroup -> v%d path '%s' container '%s' pod '%s' unit '%s'\n",
	       cg.version, cg.path, cg.container_id, cg.pod_uid, cg.unit);
	if (!strstr(text, "kubepods") && !strstr(text, "docker") && !strstr(text, "crio") &&
	    !strstr(text, "containerd") && !strstr(text, "libpod"))
		CHECK(ASSERT_STREQ(cg.container_id, "", "no container invented"));
	meta__pid_labels(getpid(), NULL, l, 32, &n);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(l[i].name, "cgroup"))
			has_cgroup = ASSERT_STREQ(l[i].value, cg.path, "cgroup label");
	if (strcmp(cg.path, "/"))
		CHECK(ASSERT_TRUE(has_cgroup, "cgroup label present"));
	return true;
}

/* The mount point of a hierarchy: "cgroup2" or a v1 controller such as "memory". */
static bool cgroup_mount(const char *what, char *ret, size_t len)
{
	FILE *f = fopen("/proc/self/mounts", "r");
	char dev[256], dir[256], type[64], opts[512];
	bool found = false;

	if (!f)
		return false;
	while (!found && fscanf(f, "%255s %255s %63s %511s %*d %*d", dev, dir, type, opts) == 4) {
		if (!strcmp(what, "cgroup2") ? !strcmp(type, "cgroup2")
					     : (!strcmp(type, "cgroup") && strstr(opts, what))) {
			snprintf(ret, len, "%s", dir);
			found = true;
		}
	}
	fclose(f);
	return found;
}

/*
 * A real cgroup: a child process moved into kubepods-...-pod<uid>.slice/cri-containerd-<id>.scope
 * (v2) or kubepods/burstable/pod<uid>/<id> (v1 memory); its labels come from its real
 * /proc/PID/cgroup.
 */
static bool real_cgroup(const char *hier, bool v2)
{
	char root[256], dir[768], top[512], procs[800], id[65], uid[37];
	struct label l[32];
	const char *got_id = NULL, *got_uid = NULL;
	bool ok = false;
	pid_t child;
	size_t n;
	FILE *f;

	if (!cgroup_mount(hier, root, sizeof(root))) {
		printf("  skip %s: not mounted\n", hier);
		return true;
	}
	snprintf(id, sizeof(id), "%016llx%048d", (unsigned long long)mono_ns(), getpid());
	snprintf(uid, sizeof(uid), "%08x-1b2c-4d5e-8f90-123456789abc", (unsigned)getpid());
	if (v2) {
		snprintf(top, sizeof(top), "%s/gpuscope-test-%d.slice", root, getpid());
		snprintf(dir, sizeof(dir), "%s/kubepods-besteffort-pod%08x_1b2c_4d5e_8f90_123456789abc.slice"
			 "/cri-containerd-%s.scope", top, (unsigned)getpid(), id);
	} else {
		snprintf(top, sizeof(top), "%s/gpuscope-test-%d", root, getpid());
		snprintf(dir, sizeof(dir), "%s/kubepods/burstable/pod%s/%s", top, uid, id);
	}
	{
		char mk[1024];

		snprintf(mk, sizeof(mk), "mkdir -p '%s' 2>/dev/null", dir);
		if (system(mk)) {
			printf("  skip %s: cannot create a cgroup here (not root?)\n", hier);
			return true;
		}
	}
	child = fork();
	if (child == 0) {
		pause();
		_exit(0);
	}
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
	f = fopen(procs, "w");
	if (!f || fprintf(f, "%d\n", child) < 0 || fclose(f)) {
		printf("  skip %s: cannot move a process into a cgroup\n", hier);
		ok = true;
		goto out;
	}
	meta__pid_labels(child, NULL, l, 32, &n);
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(l[i].name, "container_id"))
			got_id = l[i].value;
		if (!strcmp(l[i].name, "pod_uid"))
			got_uid = l[i].value;
	}
	ok = ASSERT_STREQ(got_id, id, "container_id from a real cgroup") &&
	     ASSERT_STREQ(got_uid, uid, "pod_uid (unresolved pod keeps its uid)");
	printf("  %s: pid %d in %s -> %zu labels\n", hier, child, dir + strlen(root), n);
out:
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	{
		char rm[1024];

		snprintf(rm, sizeof(rm), "find '%s' -depth -type d -exec rmdir {} + 2>/dev/null", top);
		if (system(rm))
			fprintf(stderr, "  could not remove %s\n", top);
	}
	return ok;
}

static bool test_meta_real_cgroups(void)
{
	bool ok = real_cgroup("cgroup2", true);

	return real_cgroup("memory", false) && ok;
}

static const char pod_json[] =
	"{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"bert-worker-1\","
	"\"namespace\":\"ml\",\"uid\":\"" UID "\",\"resourceVersion\":\"812\","
	"\"labels\":{\"training.kubeflow.org/job-name\":\"bert\","
	"\"training.kubeflow.org/replica-type\":\"worker\",\"training.kubeflow.org/replica-index\":\"1\","
	"\"team\":\"nlp\"},"
	"\"ownerReferences\":[{\"apiVersion\":\"kubeflow.org/v1\",\"kind\":\"PyTorchJob\",\"name\":\"bert\","
	"\"uid\":\"aaaa\",\"controller\":true,\"blockOwnerDeletion\":true}]},"
	"\"spec\":{\"nodeName\":\"gpu-node-7\",\"containers\":[{\"name\":\"pytorch\",\"image\":\"x\"}]},"
	"\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"pytorch\",\"ready\":true,"
	"\"restartCount\":0,\"image\":\"x\",\"imageID\":\"y\",\"containerID\":\"containerd://" ID64 "\"}]}}";

static const char *get(const struct label *l, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(l[i].name, name))
			return l[i].value;
	return NULL;
}

/*
 * A fake /proc in root (mkdtemp template, char[26]) for GPUSCOPE_PROC_ROOT: pid 4242 in a
 * containerd container of pod UID; the relabel config written to cfg (char[300]). path
 * (char[256]) gets the cgroup file's name. false if the directory cannot be made.
 */
static bool fake_proc(char *root, char *path, char *cfg, const char *relabel)
{
	FILE *f;

	if (!mkdtemp(root))
		return false;
	snprintf(path, 256, "%s/4242", root);
	mkdir(path, 0755);
	snprintf(path, 256, "%s/4242/cgroup", root);
	f = fopen(path, "w");
	fprintf(f, "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
		   ".slice/cri-containerd-" ID64 ".scope\n");
	fclose(f);
	snprintf(cfg, 300, "%s/relabel.yaml", root);
	f = fopen(cfg, "w");
	fputs(relabel, f);
	fclose(f);
	return true;
}

static void fake_proc_rm(const char *root, char *path, const char *cfg)
{
	unlink(cfg);
	unlink(path);
	snprintf(path, 256, "%s/4242", root);
	rmdir(path);
	rmdir(root);
}

/* Pod labels via a fake /proc (GPUSCOPE_PROC_ROOT), the pod cache and a relabel config. */
static bool test_meta_pod_labels(void)
{
	char root[] = "/tmp/gpuscope-meta-XXXXXX", path[256], cfg[300];
	struct meta_opts o = { 0 };
	struct label l[64];
	json_t *j;
	size_t n;
	bool ok;
	FILE *f;

	CHECK(fake_proc(root, path, cfg,
			"- action: labelmap\n  regex: __meta_kubernetes_pod_label_(team)\n"
			"- source_labels: [__meta_kubernetes_pod_node_name]\n"
			"  target_label: k8s_node\n"));
	o.proc_root = root;
	o.relabel_config = cfg;
	CHECK(ASSERT_EQ(meta__start(&o), 0, "start without Kubernetes"));

	meta__pid_labels(4242, NULL, l, 64, &n);
	ok = ASSERT_STREQ(get(l, n, "pod_uid"), UID, "unresolved pod: uid kept") &&
	     ASSERT_STREQ(get(l, n, "container_id"), ID64, "container id") &&
	     ASSERT_TRUE(!get(l, n, "pod"), "no pod name yet");

	j = json_loads(pod_json, 0, NULL);
	pod_upsert(pod_from_json(j));
	json_decref(j);
	meta__pid_labels(4242, NULL, l, 64, &n);
	ok = ok && ASSERT_STREQ(get(l, n, "pod"), "bert-worker-1", "pod") &&
	     ASSERT_STREQ(get(l, n, "namespace"), "ml", "namespace") &&
	     ASSERT_STREQ(get(l, n, "container"), "pytorch", "container name via containerID") &&
	     ASSERT_STREQ(get(l, n, "owner_kind"), "PyTorchJob", "owner kind") &&
	     ASSERT_STREQ(get(l, n, "owner"), "bert", "owner") &&
	     ASSERT_STREQ(get(l, n, "kubeflow_job"), "bert", "kubeflow job") &&
	     ASSERT_STREQ(get(l, n, "kubeflow_replica_type"), "worker", "replica type") &&
	     ASSERT_STREQ(get(l, n, "kubeflow_replica_index"), "1", "replica index") &&
	     ASSERT_STREQ(get(l, n, "team"), "nlp", "labelmap from the relabel config") &&
	     ASSERT_STREQ(get(l, n, "k8s_node"), "gpu-node-7", "replace from a meta label") &&
	     ASSERT_TRUE(!get(l, n, "pod_uid"), "resolved: no uid label") &&
	     ASSERT_TRUE(!get(l, n, "__meta_kubernetes_pod_name"), "__ labels removed");
	/* deleted pods keep labelling late samples */
	pod_mark_deleted(UID);
	meta__pid_labels(4242, NULL, l, 64, &n);
	ok = ok && ASSERT_STREQ(get(l, n, "pod"), "bert-worker-1", "deleted pod within grace");
	meta__stop();

	/* a keep rule that does not match drops the process */
	f = fopen(cfg, "w");
	fprintf(f, "- source_labels: [namespace]\n  regex: prod\n  action: keep\n");
	fclose(f);
	CHECK(ASSERT_EQ(meta__start(&o), 0, "start"));
	ok = ok && ASSERT_EQ(meta__pid_labels(4242, NULL, l, 64, &n), LABELS_DROPPED, "dropped") &&
	     ASSERT_EQ(n, 0, "no labels");
	meta__pid_labels(999999999, NULL, l, 64, &n);
	ok = ok && ASSERT_EQ(n, 0, "missing process: no labels");
	meta__stop();

	/* malformed config refused at start */
	f = fopen(cfg, "w");
	fprintf(f, "- source_labels: [namespace]\n  action: keeep\n");
	fclose(f);
	ok = ok && ASSERT_EQ(meta__start(&o), -EINVAL, "malformed config refused");
	fake_proc_rm(root, path, cfg);
	return ok;
}

/* __meta_process_comm: relabel rules keep or drop processes by name (from /proc/PID/comm). */
static bool test_meta_comm_relabel(void)
{
	char root[] = "/tmp/gpuscope-meta-XXXXXX", path[256], cfg[300], p2[300];
	struct meta_opts o = { 0 };
	struct label l[64];
	size_t n;
	bool ok;
	FILE *f;

	CHECK(fake_proc(root, path, cfg,
			"- source_labels: [__meta_process_comm]\n  target_label: name_seen\n"
			"- source_labels: [__meta_process_comm]\n  regex: ml-.*\n  action: keep\n"));
	snprintf(p2, sizeof(p2), "%s/4242/comm", root);
	f = fopen(p2, "w");
	fputs("ml-trainer\n", f);
	fclose(f);
	snprintf(p2, sizeof(p2), "%s/4343", root);
	mkdir(p2, 0755);
	snprintf(p2, sizeof(p2), "%s/4343/cgroup", root);
	f = fopen(p2, "w");
	fputs("0::/user.slice\n", f);
	fclose(f);
	snprintf(p2, sizeof(p2), "%s/4343/comm", root);
	f = fopen(p2, "w");
	fputs("cc1\n", f);
	fclose(f);
	o.proc_root = root;
	o.relabel_config = cfg;
	CHECK(ASSERT_EQ(meta__start(&o), 0, "start"));
	ok = ASSERT_EQ(meta__pid_labels(4242, NULL, l, 64, &n), LABELS_KEPT, "ml-trainer kept") &&
	     ASSERT_STREQ(get(l, n, "name_seen"), "ml-trainer", "the name, without its newline") &&
	     ASSERT_TRUE(!get(l, n, "__meta_process_comm"), "__ label removed") &&
	     ASSERT_EQ(meta__pid_labels(4343, NULL, l, 64, &n), LABELS_DROPPED, "cc1 dropped") &&
	     ASSERT_EQ(n, 0, "no labels") &&
	     /* gone before /proc was read: the name the caller saw decides */
	     ASSERT_EQ(meta__pid_labels(999999901, "ml-cron", l, 64, &n), LABELS_KEPT,
		       "a gone ml-cron kept") &&
	     ASSERT_EQ(meta__pid_labels(999999902, "grep", l, 64, &n), LABELS_DROPPED,
		       "a gone grep dropped") &&
	     ASSERT_EQ(meta__pid_labels(999999903, NULL, l, 64, &n), LABELS_DROPPED,
		       "a gone process without a name dropped by the keep rule");
	meta__stop();
	unlink(p2);
	snprintf(p2, sizeof(p2), "%s/4343/cgroup", root);
	unlink(p2);
	snprintf(p2, sizeof(p2), "%s/4343", root);
	rmdir(p2);
	snprintf(p2, sizeof(p2), "%s/4242/comm", root);
	unlink(p2);
	fake_proc_rm(root, path, cfg);
	return ok;
}

/* Old (pre training.kubeflow.org) labels need group-name=kubeflow.org; KubeRay labels. */
static bool test_meta_promoted_forms(void)
{
	static const char ray[] =
		"{\"metadata\":{\"name\":\"rc-head-x\",\"namespace\":\"ray\",\"uid\":\"u1\","
		"\"labels\":{\"ray.io/cluster\":\"rc\",\"ray.io/node-type\":\"head\",\"ray.io/group\":\"headgroup\"},"
		"\"ownerReferences\":[{\"kind\":\"RayCluster\",\"name\":\"rc\",\"controller\":true}]}}";
	static const char old[] =
		"{\"metadata\":{\"name\":\"j-master-0\",\"namespace\":\"a\",\"uid\":\"u2\","
		"\"labels\":{\"group-name\":\"kubeflow.org\",\"job-name\":\"j\",\"replica-type\":\"master\","
		"\"replica-index\":\"0\",\"job-role\":\"master\"}}}";
	static const char batch[] =
		"{\"metadata\":{\"name\":\"b-x\",\"namespace\":\"a\",\"uid\":\"u3\","
		"\"labels\":{\"job-name\":\"b\",\"pod-template-hash\":\"5d8f\"},"
		"\"ownerReferences\":[{\"kind\":\"ReplicaSet\",\"name\":\"web-5d8f\",\"controller\":true}]}}";
	struct meta_cgroup cg = { 0 };
	struct lset ls;
	struct pod *p;
	json_t *j;
	bool ok;

	lset_init(&ls);
	j = json_loads(ray, 0, NULL);
	p = pod_from_json(j);
	json_decref(j);
	add_pod_labels(&ls, p, &cg);
	meta_pod_free(p);
	ok = ASSERT_STREQ(lset_get(&ls, "ray_cluster"), "rc", "ray cluster") &&
	     ASSERT_STREQ(lset_get(&ls, "ray_node_type"), "head", "ray node type") &&
	     ASSERT_STREQ(lset_get(&ls, "ray_group"), "headgroup", "ray group") &&
	     ASSERT_STREQ(lset_get(&ls, "owner_kind"), "RayCluster", "owner");
	lset_done(&ls);
	j = json_loads(old, 0, NULL);
	p = pod_from_json(j);
	json_decref(j);
	add_pod_labels(&ls, p, &cg);
	meta_pod_free(p);
	ok = ok && ASSERT_STREQ(lset_get(&ls, "kubeflow_job"), "j", "old job-name") &&
	     ASSERT_STREQ(lset_get(&ls, "kubeflow_replica_type"), "master", "old replica-type") &&
	     ASSERT_STREQ(lset_get(&ls, "kubeflow_job_role"), "master", "old job-role");
	lset_done(&ls);
	j = json_loads(batch, 0, NULL);
	p = pod_from_json(j);
	json_decref(j);
	add_pod_labels(&ls, p, &cg);
	meta_pod_free(p);
	ok = ok && ASSERT_TRUE(!lset_get(&ls, "kubeflow_job"), "a batch Job's job-name is not Kubeflow") &&
	     ASSERT_STREQ(lset_get(&ls, "owner_kind"), "Deployment", "ReplicaSet -> Deployment") &&
	     ASSERT_STREQ(lset_get(&ls, "owner"), "web", "deployment name");
	lset_done(&ls);
	return ok;
}

/*
 * The label builder's capacity: a Kubeflow pod with 20 more pod labels, all promoted by a
 * labelmap rule and two replace rules, then what every producer adds (CUPTI: gpu; thread
 * states and CUDA calls: ns_pid; NVML per-process series: the GPU's four labels). Nothing is
 * cut and nothing is counted as truncated; a pod past the capacity is cut in meta's share only
 * (counted), and the producers' labels still fit.
 */
static bool label_capacity(int extra, bool want_truncated)
{
	char root[] = "/tmp/gpuscope-meta-XXXXXX", path[256], cfg[300];
	char pod[16384], extra_labels[8192] = "";
	static const char *const producer[][2] = {
		{ "gpu", "0" }, { "ns_pid", "17" }, { "gpu_uuid", "GPU-x" }, { "gpu_model", "H200" },
		{ "mig_uuid", "MIG-y" },
	};
	struct agent a = { .opts.node = "gpu-node-7" };
	struct meta_opts o = { 0 };
	struct agent_labels L;
	uint64_t truncated;
	size_t off = 0;
	bool ok = true;
	json_t *j;

	for (int i = 0; i < extra; i++)
		off += snprintf(extra_labels + off, sizeof(extra_labels) - off,
				",\"app.example.com/feature-%02d\":\"value-%02d\"", i, i);
	snprintf(pod, sizeof(pod),
		 "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"bert-worker-1\",\"namespace\":\"ml\","
		 "\"uid\":\"" UID "\",\"labels\":{\"training.kubeflow.org/job-name\":\"bert\","
		 "\"training.kubeflow.org/replica-type\":\"worker\","
		 "\"training.kubeflow.org/replica-index\":\"1\",\"team\":\"nlp\"%s},"
		 "\"ownerReferences\":[{\"kind\":\"PyTorchJob\",\"name\":\"bert\",\"controller\":true}]},"
		 "\"spec\":{\"nodeName\":\"gpu-node-7\"},\"status\":{\"containerStatuses\":[{\"name\":"
		 "\"pytorch\",\"containerID\":\"containerd://" ID64 "\"}]}}",
		 extra_labels);
	CHECK(fake_proc(root, path, cfg,
			"- action: labelmap\n  regex: __meta_kubernetes_pod_label_(.+)\n"
			"- source_labels: [__meta_kubernetes_pod_node_name]\n"
			"  target_label: k8s_node\n"
			"- source_labels: [namespace, pod]\n  separator: /\n"
			"  target_label: workload\n"));
	o.proc_root = root;
	o.relabel_config = cfg;
	CHECK(ASSERT_EQ(meta__start(&o), 0, "start without Kubernetes"));
	j = json_loads(pod, 0, NULL);
	pod_upsert(pod_from_json(j));
	json_decref(j);
	truncated = pcache.overflow;
	ok = ASSERT_EQ(agent__pid_labels(&a, 4242, 4243, "worker", &L), LABELS_KEPT, "kept") &&
	     ASSERT_STREQ(get(L.l, L.n, "kubeflow_job"), "bert", "kubeflow job") &&
	     ASSERT_STREQ(get(L.l, L.n, "pod"), "bert-worker-1", "pod");
	if (!want_truncated) {
		char want[64];

		snprintf(want, sizeof(want), "value-%02d", extra - 1);
		ok = ok &&
		     ASSERT_STREQ(get(L.l, L.n, "workload"), "ml/bert-worker-1", "relabel replace") &&
		     ASSERT_STREQ(get(L.l, L.n, "k8s_node"), "gpu-node-7", "relabel from meta") &&
		     ASSERT_STREQ(get(L.l, L.n, "training_kubeflow_org_replica_index"), "1",
					"labelmap of a Kubeflow label") &&
		     ASSERT_STREQ(get(L.l, L.n, "app_example_com_feature_00"), "value-00",
				  "first promoted pod label") &&
		     ASSERT_TRUE(extra == 0 || !strcmp(get(L.l, L.n, "app_example_com_feature_19") ?:
						       "", want), "last promoted pod label") &&
		     ASSERT_EQ(pcache.overflow, truncated, "nothing truncated");
	} else {
		ok = ok && ASSERT_TRUE(pcache.overflow > truncated, "truncation counted");
	}
	printf("  %d extra pod labels: %zu labels before the producers' own\n", extra, L.n);
	for (size_t i = 0; i < ARRAY_SIZE(producer); i++)
		ok = ok && ASSERT_EQ(agent_labels__add(&L, producer[i][0], producer[i][1]), 0,
				     "a producer's label fits");
	ok = ok && ASSERT_TRUE(ARRAY_SIZE(producer) <= AGENT_LABELS_RESERVE, "reserve covers them");
	meta__stop();
	fake_proc_rm(root, path, cfg);
	return ok;
}

static bool test_meta_label_capacity(void)
{
	return label_capacity(20, false) && label_capacity(60, true);
}

TEST_MAIN(T(test_meta_cgroup_fixtures), T(test_meta_cgroup_files), T(test_meta_cgroup_self),
	  T(test_meta_real_cgroups), T(test_meta_pod_labels), T(test_meta_promoted_forms),
	  T(test_meta_label_capacity), T(test_meta_comm_relabel))
