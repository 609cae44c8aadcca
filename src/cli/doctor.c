/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope doctor`: checks this node for what the agent needs, by trying each thing for real
 * (load a BPF program, attach a uprobe to a function of this process and see it fire, open a
 * system-wide perf event, dlopen NVML, GET the server) and prints ok / missing / warn with a fix.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <curl/curl.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <linux/perf_event.h>
#include "cli/commands.h"
#include "common/netaddr.h"

#ifndef TRACEFS_MAGIC
#define TRACEFS_MAGIC 0x74726163
#endif
#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

enum verdict { OK, MISSING, WARN };

struct doctor {
	bool require_gpu;
	const char *server, *token_file, *ca_file, *nvml_library, *cupti_lib;
	int failed_required;
};

/* One result line; `required` failures make the exit code 1. fix may be NULL. */
static void report(struct doctor *d, enum verdict v, bool required, const char *what,
		   const char *fix, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void report(struct doctor *d, enum verdict v, bool required, const char *what,
		   const char *fix, const char *fmt, ...)
{
	static const char *const words[] = { "ok", "missing", "warn" };
	va_list ap;

	printf("%-8s %-16s ", words[v], what);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	if (v == MISSING && !required)
		printf(" (optional)");
	printf("\n");
	if (v != OK && fix)
		printf("%-8s %-16s fix: %s\n", "", "", fix);
	if (v == MISSING && required)
		d->failed_required++;
}

static int read_file(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return -errno;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = 0;
	return (int)n;
}

static void check_kernel(struct doctor *d)
{
	struct utsname u;
	int major = 0, minor = 0;

	uname(&u);
	sscanf(u.release, "%d.%d", &major, &minor);
	if (major > 5 || (major == 5 && minor >= 8))
		report(d, OK, true, "kernel", NULL, "%s (>= 5.8: CAP_BPF, BPF ring buffer)", u.release);
	else
		report(d, MISSING, true, "kernel",
		       "run a kernel >= 5.8 (any current distribution kernel)",
		       "%s is older than 5.8 (no BPF ring buffer, no CAP_BPF)", u.release);
}

static void check_btf(struct doctor *d)
{
	FILE *f = fopen("/sys/kernel/btf/vmlinux", "re");
	long size = -1;

	if (f) {
		fseek(f, 0, SEEK_END);
		size = ftell(f);
		fclose(f);
		report(d, OK, true, "btf", NULL, "/sys/kernel/btf/vmlinux (%ld KiB)", size / 1024);
	} else {
		report(d, MISSING, true, "btf",
		       "use a kernel built with CONFIG_DEBUG_INFO_BTF=y (the default of current "
		       "Debian, Ubuntu, RHEL, COS and Bottlerocket kernels); in a container mount "
		       "/sys/kernel/btf from the host",
		       "/sys/kernel/btf/vmlinux: %s", strerror(errno));
	}
}

static const struct {
	int bit;
	const char *name;
} caps[] = {
	{ 39, "CAP_BPF" }, { 38, "CAP_PERFMON" }, { 21, "CAP_SYS_ADMIN" },
	{ 19, "CAP_SYS_PTRACE" }, { 24, "CAP_SYS_RESOURCE" },
};

static uint64_t cap_eff(void)
{
	char buf[4096], *p;

	if (read_file("/proc/self/status", buf, sizeof(buf)) < 0)
		return 0;
	p = strstr(buf, "CapEff:");
	return p ? strtoull(p + 7, NULL, 16) : 0;
}

static void check_caps(struct doctor *d)
{
	uint64_t eff = cap_eff();
	char have[160] = "", lack[160] = "";
	bool bpf = eff & (1ULL << 39), perfmon = eff & (1ULL << 38), admin = eff & (1ULL << 21);
	bool ptrace = eff & (1ULL << 19);

	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		char *dst = (eff & (1ULL << caps[i].bit)) ? have : lack;

		snprintf(dst + strlen(dst), 160 - strlen(dst), "%s%s", *dst ? " " : "", caps[i].name);
	}
	if (admin || (bpf && perfmon))
		report(d, OK, true, "capabilities", NULL, "CapEff %016llx: %s", (unsigned long long)eff,
		       have);
	else
		report(d, MISSING, true, "capabilities",
		       "run as root, or grant CAP_BPF and CAP_PERFMON (Kubernetes: securityContext."
		       "capabilities.add, see deploy/kubernetes/gpuscope.yaml)",
		       "CapEff %016llx: have '%s', lack '%s'", (unsigned long long)eff, have, lack);
	if ((admin || (bpf && perfmon)) && !ptrace && !admin)
		report(d, WARN, false, "cap_sys_ptrace",
		       "add CAP_SYS_PTRACE to read other processes' memory maps for symbols",
		       "missing: stacks of other users' processes stay unsymbolized");
}

/* A trivial perf-event BPF program: what the CPU sampler loads, so the privilege is the same. */
static void check_bpf(struct doctor *d)
{
	struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	char log[256] = "";
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .log_buf = log, .log_size = sizeof(log));
	int fd, rb;

	fd = bpf_prog_load(BPF_PROG_TYPE_PERF_EVENT, "gpuscope_doctor", "GPL", insns, 2, &opts);
	if (fd < 0) {
		report(d, MISSING, true, "bpf",
		       fd == -EPERM ? "run as root or add CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN)"
				    : "check the kernel's CONFIG_BPF_SYSCALL and lockdown mode",
		       "loading a perf-event BPF program: %s", strerror(-fd));
		return;
	}
	close(fd);
	rb = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "gpuscope_doctor", 0, 0, 64 * 1024, NULL);
	if (rb < 0) {
		report(d, MISSING, true, "bpf", "use a kernel >= 5.8 with BPF ring buffers",
		       "program loads, but creating a BPF ring buffer failed: %s", strerror(-rb));
		return;
	}
	close(rb);
	report(d, OK, true, "bpf", NULL, "perf-event program loaded, ring buffer created");
}

static void check_perf(struct doctor *d)
{
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof(attr),
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.sample_freq = 99,
		.freq = 1,
	};
	char buf[32] = "?";
	int fd;

	read_file("/proc/sys/kernel/perf_event_paranoid", buf, sizeof(buf));
	buf[strcspn(buf, "\n")] = 0;
	fd = (int)syscall(SYS_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		report(d, OK, true, "perf_event", NULL,
		       "system-wide cpu-clock sampling opens (perf_event_paranoid %s)", buf);
	} else {
		int err = errno;

		report(d, MISSING, true, "perf_event",
		       err == EACCES || err == EPERM
			       ? "add CAP_PERFMON (or CAP_SYS_ADMIN), or sysctl kernel.perf_event_paranoid=-1"
			       : "the kernel needs CONFIG_PERF_EVENTS",
		       "system-wide cpu-clock sampling: %s (perf_event_paranoid %s)", strerror(err),
		       buf);
	}
}

static void check_tracefs(struct doctor *d)
{
	static const char *const dirs[] = { "/sys/kernel/tracing", "/sys/kernel/debug/tracing" };
	struct statfs st;

	for (size_t i = 0; i < 2; i++) {
		if (!statfs(dirs[i], &st) && (uint32_t)st.f_type == TRACEFS_MAGIC) {
			report(d, OK, false, "tracefs", NULL, "%s", dirs[i]);
			return;
		}
	}
	report(d, WARN, false, "tracefs",
	       "mount -t tracefs nodev /sys/kernel/tracing (Kubernetes: hostPath /sys/kernel/tracing)",
	       "not mounted at /sys/kernel/tracing or /sys/kernel/debug/tracing: tracepoints attach "
	       "by BTF only");
}

/* The function the uprobe check attaches to; noinline and with a side effect so it stays. */
__attribute__((noinline)) int doctor_uprobe_target(int x)
{
	__asm__ volatile("" : "+r"(x));
	return x + 1;
}

/* File offset of addr in the mapping of this process that holds it; path of that file. */
static int addr_to_offset(uintptr_t addr, char *path, size_t len, uint64_t *ret_off)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[PATH_MAX + 128];
	int err = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end, off;
		char perms[8], file[PATH_MAX] = "";

		if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095s", &start, &end, perms, &off, file) < 4)
			continue;
		if (addr < start || addr >= end)
			continue;
		if (file[0] != '/')
			break;
		snprintf(path, len, "%s", file);
		*ret_off = addr - start + off;
		err = 0;
		break;
	}
	fclose(f);
	return err;
}

static void check_uprobe(struct doctor *d)
{
	char path[PATH_MAX], buf[32], log[512] = "";
	uint64_t off = 0, hits = 0;
	int map = -1, prog = -1, pfd = -1, type, err;
	uint32_t key = 0;
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .log_buf = log, .log_size = sizeof(log));

	if (read_file("/sys/bus/event_source/devices/uprobe/type", buf, sizeof(buf)) <= 0) {
		report(d, MISSING, true, "uprobes", "the kernel needs CONFIG_UPROBE_EVENTS=y",
		       "no uprobe PMU in /sys/bus/event_source/devices");
		return;
	}
	type = atoi(buf);
	err = addr_to_offset((uintptr_t)doctor_uprobe_target, path, sizeof(path), &off);
	if (err) {
		report(d, WARN, true, "uprobes", NULL, "cannot locate this program's code: %s",
		       strerror(-err));
		return;
	}
	map = bpf_map_create(BPF_MAP_TYPE_ARRAY, "doctor_hits", 4, 8, 1, NULL);
	if (map < 0) {
		report(d, MISSING, true, "uprobes", "see the bpf line", "BPF map: %s", strerror(-map));
		return;
	}
	{
		/* hits[0] += 1 */
		struct bpf_insn insns[] = {
			{ .code = BPF_ST | BPF_MEM | BPF_W, .dst_reg = BPF_REG_10, .off = -4, .imm = 0 },
			{ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_2, .src_reg = BPF_REG_10 },
			{ .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_2, .imm = -4 },
			{ .code = BPF_LD | BPF_DW | BPF_IMM, .dst_reg = BPF_REG_1,
			  .src_reg = BPF_PSEUDO_MAP_FD, .imm = map },
			{ 0 },
			{ .code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_map_lookup_elem },
			{ .code = BPF_JMP | BPF_JEQ | BPF_K, .dst_reg = BPF_REG_0, .off = 2, .imm = 0 },
			{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_1, .imm = 1 },
			{ .code = BPF_STX | BPF_DW | BPF_ATOMIC, .dst_reg = BPF_REG_0,
			  .src_reg = BPF_REG_1, .imm = BPF_ADD },
			{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
			{ .code = BPF_JMP | BPF_EXIT },
		};

		prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "doctor_uprobe", "GPL", insns,
				     sizeof(insns) / sizeof(insns[0]), &opts);
	}
	if (prog < 0) {
		report(d, MISSING, true, "uprobes", "see the bpf line", "loading a uprobe program: %s",
		       strerror(-prog));
		goto out;
	}
	{
		struct perf_event_attr attr = {
			.type = (uint32_t)type,
			.size = sizeof(attr),
			.config1 = (uint64_t)(uintptr_t)path,	/* uprobe_path */
			.config2 = off,				/* probe_offset */
			.sample_period = 1,
			.wakeup_events = 1,
		};

		pfd = (int)syscall(SYS_perf_event_open, &attr, getpid(), -1, -1, PERF_FLAG_FD_CLOEXEC);
	}
	if (pfd < 0 || ioctl(pfd, PERF_EVENT_IOC_SET_BPF, prog) || ioctl(pfd, PERF_EVENT_IOC_ENABLE, 0)) {
		report(d, MISSING, true, "uprobes",
		       "the kernel needs CONFIG_UPROBE_EVENTS=y; add CAP_SYS_ADMIN or CAP_PERFMON",
		       "attaching to %s+0x%llx: %s", path, (unsigned long long)off, strerror(errno));
		goto out;
	}
	for (int i = 0; i < 3; i++)
		doctor_uprobe_target(i);
	bpf_map_lookup_elem(map, &key, &hits);
	if (hits >= 3)
		report(d, OK, true, "uprobes", NULL, "attached to doctor_uprobe_target in %s, %llu hits",
		       path, (unsigned long long)hits);
	else
		report(d, MISSING, true, "uprobes", "check the kernel's uprobe support",
		       "attached but the probe fired %llu times of 3", (unsigned long long)hits);
out:
	if (pfd >= 0)
		close(pfd);
	if (prog >= 0)
		close(prog);
	close(map);
}

static void check_nvml(struct doctor *d)
{
	const char *lib = d->nvml_library ? d->nvml_library : "libnvidia-ml.so.1";
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	int (*init)(void), (*count)(unsigned *), (*shutdown)(void);
	unsigned n = 0;
	int rc;

	if (!h) {
		report(d, MISSING, d->require_gpu, "nvml",
		       "install the NVIDIA driver; in Kubernetes run the agent with runtimeClassName "
		       "nvidia and NVIDIA_DRIVER_CAPABILITIES=utility (GPU metrics need it; CPU "
		       "profiling does not)",
		       "%s: %s", lib, dlerror());
		return;
	}
	init = (int (*)(void))dlsym(h, "nvmlInit_v2");
	count = (int (*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2");
	shutdown = (int (*)(void))dlsym(h, "nvmlShutdown");
	if (!init || !count || !shutdown) {
		report(d, MISSING, d->require_gpu, "nvml", "the library is not NVML",
		       "%s lacks nvmlInit_v2/nvmlDeviceGetCount_v2", lib);
	} else if ((rc = init()) != 0) {
		report(d, MISSING, d->require_gpu, "nvml",
		       "check that the driver is loaded (nvidia-smi) and /dev/nvidia* are visible",
		       "%s loaded, nvmlInit_v2 returned %d", lib, rc);
	} else {
		count(&n);
		shutdown();
		report(d, OK, d->require_gpu, "nvml", NULL, "%s: %u GPU%s", lib, n, n == 1 ? "" : "s");
	}
	dlclose(h);
}

static bool exists(const char *p)
{
	return p && *p && !access(p, R_OK);
}

static void check_cupti(struct doctor *d)
{
	char exe[PATH_MAX], c1[PATH_MAX + 64], c2[PATH_MAX + 64], *dir;
	const char *env = getenv("GPUSCOPE_CUPTI_LIB"), *found = NULL;
	static const char *const cupti_dirs[] = {
		"/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so",
		"/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so",
		"/usr/lib/x86_64-linux-gnu/libcupti.so",
	};
	const char *cupti = NULL;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	exe[n > 0 ? n : 0] = 0;
	dir = dirname(exe);
	snprintf(c1, sizeof(c1), "%s/libgpuscope_cupti.so", dir);
	snprintf(c2, sizeof(c2), "%s/../lib/libgpuscope_cupti.so", dir);
	{
		const char *cands[] = { d->cupti_lib, env, "/var/lib/gpuscope/lib/libgpuscope_cupti.so",
					c1, c2 };

		for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]) && !found; i++)
			if (exists(cands[i]))
				found = cands[i];
	}
	for (size_t i = 0; i < sizeof(cupti_dirs) / sizeof(cupti_dirs[0]) && !cupti; i++)
		if (exists(cupti_dirs[i]))
			cupti = cupti_dirs[i];
	if (!cupti) {
		void *h = dlopen("libcupti.so", RTLD_LAZY | RTLD_LOCAL);

		if (h) {
			cupti = "libcupti.so (library path)";
			dlclose(h);
		}
	}
	if (found)
		report(d, OK, d->require_gpu, "cupti", NULL,
		       "%s; libcupti: %s; workloads set CUDA_INJECTION64_PATH=%s", found,
		       cupti ? cupti : "not found here (the workload's own CUDA provides it)", found);
	else
		report(d, MISSING, d->require_gpu, "cupti",
		       "build it (make, needs cupti.h) or pass --cupti-lib; in Kubernetes the agent's "
		       "init container copies it to /var/lib/gpuscope/lib (docs/kubernetes.md)",
		       "libgpuscope_cupti.so not found (looked in --cupti-lib, $GPUSCOPE_CUPTI_LIB, "
		       "/var/lib/gpuscope/lib, next to this binary); libcupti: %s",
		       cupti ? cupti : "not found");
}

static void check_cgroup(struct doctor *d)
{
	struct statfs st;

	if (statfs("/sys/fs/cgroup", &st)) {
		report(d, WARN, false, "cgroup", "mount /sys/fs/cgroup (hostPath in Kubernetes)",
		       "/sys/fs/cgroup: %s: no container labels", strerror(errno));
		return;
	}
	if ((uint32_t)st.f_type == CGROUP2_SUPER_MAGIC) {
		report(d, OK, false, "cgroup", NULL, "v2 (unified) at /sys/fs/cgroup");
		return;
	}
	if (!statfs("/sys/fs/cgroup/unified", &st) && (uint32_t)st.f_type == CGROUP2_SUPER_MAGIC)
		report(d, OK, false, "cgroup", NULL,
		       "hybrid: v1 controllers and v2 at /sys/fs/cgroup/unified");
	else
		report(d, OK, false, "cgroup", NULL, "v1 at /sys/fs/cgroup");
}

static size_t sink(char *p, size_t s, size_t n, void *u)
{
	size_t *len = u;

	*len += s * n;
	return *len > (1u << 20) ? 0 : s * n;
}

static void check_server(struct doctor *d)
{
	char url[1024], err[CURL_ERROR_SIZE] = "", tok[4096] = "", hdr[4200];
	struct curl_slist *h = NULL;
	size_t len = 0;
	long status = 0;
	CURLcode cc;
	CURL *c;

	if (!d->server) {
		report(d, WARN, false, "server", "pass --server URL (or set GPUSCOPE_SERVER)",
		       "not checked");
		return;
	}
	/* An empty upload: what the agent does, with its token, and nothing is stored. */
	snprintf(url, sizeof(url), "%s%sapi/v1/ingest", d->server,
		 d->server[strlen(d->server) - 1] == '/' ? "" : "/");
	c = curl_easy_init();
	if (!c)
		return;
	if (d->token_file && read_token_file(d->token_file, tok, sizeof(tok)) > 0) {
		snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s", tok);
		h = curl_slist_append(h, hdr);
	}
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
	if (d->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, d->ca_file);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 5L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 3L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &len);
	cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	if (cc == CURLE_OK && status >= 200 && status < 300)
		report(d, OK, true, "server", NULL, "POST %s (empty batch): %ld", url, status);
	else if (cc == CURLE_OK)
		report(d, MISSING, true, "server",
		       status == 401 ? "pass the ingest token with --token-file"
				     : "check the URL: it is the gpuscope-server's base URL",
		       "POST %s: HTTP %ld", url, status);
	else
		report(d, MISSING, true, "server",
		       "start gpuscope-server or fix --server (Kubernetes: "
		       "http://gpuscope-server.gpuscope.svc:8080)",
		       "POST %s: %s", url, err[0] ? err : curl_easy_strerror(cc));
}

static void usage(FILE *f)
{
	fprintf(f, "usage: gpuscope doctor [OPTIONS]\n"
		   "Checks this node for what gpuscope-agent needs; prints ok/missing/warn and a fix.\n"
		   "Exit status 0 when every required check passes, 1 otherwise.\n"
		   "  --server URL        also check that the server takes an (empty) upload\n"
		   "                      (default $GPUSCOPE_SERVER)\n"
		   "  --token-file FILE   the agent's bearer token for the server\n"
		   "  --ca-file FILE      PEM CA of an https:// server\n"
		   "  --require-gpu       NVML and CUPTI are required (a GPU node)\n"
		   "  --nvml-library LIB  NVML to dlopen (default libnvidia-ml.so.1)\n"
		   "  --cupti-lib PATH    libgpuscope_cupti.so to look for first\n");
}

int cmd_doctor(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "token-file", required_argument, NULL, 't' },
		{ "ca-file", required_argument, NULL, 'a' },
		{ "require-gpu", no_argument, NULL, 'g' },
		{ "nvml-library", required_argument, NULL, 'n' },
		{ "cupti-lib", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	struct doctor d = { .server = getenv("GPUSCOPE_SERVER") };
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': d.server = optarg; break;
		case 't': d.token_file = optarg; break;
		case 'a': d.ca_file = optarg; break;
		case 'g': d.require_gpu = true; break;
		case 'n': d.nvml_library = optarg; break;
		case 'c': d.cupti_lib = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (d.server && !*d.server)
		d.server = NULL;
	libbpf_set_print(NULL);
	check_kernel(&d);
	check_btf(&d);
	check_caps(&d);
	check_bpf(&d);
	check_perf(&d);
	check_tracefs(&d);
	check_uprobe(&d);
	check_nvml(&d);
	check_cupti(&d);
	check_cgroup(&d);
	check_server(&d);
	printf("%s: %d required check%s failed\n", d.failed_required ? "not ready" : "ready",
	       d.failed_required, d.failed_required == 1 ? "" : "s");
	return d.failed_required ? 1 : 0;
}
