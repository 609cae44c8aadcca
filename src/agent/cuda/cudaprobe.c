// SPDX-License-Identifier: Apache-2.0
/*
 * CUDA driver API probes: attaches cudaprobe.bpf.c to every probed function of each distinct
 * libcuda.so file that a tracked process maps (found through /proc/PID/root, or
 * /proc/PID/map_files when the path no longer exists), lazily as processes load it, and turns
 * the calls into `cuda_api` intervals and cuda_sync_ns samples.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "agent/agent.h"
#include "agent/bpfutil.h"
#include "agent/modules.h"
#include "agent/labels.h"
#include "agent/procs/elf.h"
#include "agent/procs/maps.h"
#include "agent/procs/procfs.h"
#include "agent/procs/tracker.h"
#include "common/abi.h"
#include "common/abi_strips.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"
#include "cudaprobe.skel.h"

#include "agent/sym/stacks.h"
#include "agent/unwind/frames.h"
#include "agent/unwind/unwind.h"

#define LIBS_MAX	  16			/* distinct libcuda files probed */
#define WATCH_MAX	  PROCS_MAX
#define RECHECK_NS	  (2 * NSEC_PER_SEC)	/* maps re-read of a tracked pid without libcuda */

/*
 * The probed functions; a name absent from a library is skipped (older/newer drivers). ASYNC:
 * stream-ordered work that never waits on the host (device-to-device copies, memsets, event
 * waits): as frequent as launches on some loops and as cheap, so probed only with
 * --cuda-launch-probes, like the launches; inside trace windows CUPTI records them.
 */
#define SYNC GPUSCOPE_CUDA_SYNC
#define ASYNC 0x20000u
static const struct {
	const char *name;
	unsigned flags;
} apis[] = {
	{ "cuLaunchKernel" }, { "cuLaunchKernel_ptsz" }, { "cuLaunchKernelEx" },
	{ "cuLaunchKernelEx_ptsz" }, { "cuLaunchCooperativeKernel" },
	{ "cuLaunchCooperativeKernel_ptsz" },
	{ "cuMemcpy" }, { "cuMemcpy_ptds" }, { "cuMemcpyAsync" }, { "cuMemcpyAsync_ptsz" },
	{ "cuMemcpyHtoD_v2" }, { "cuMemcpyHtoD_v2_ptds" }, { "cuMemcpyDtoH_v2" },
	{ "cuMemcpyDtoH_v2_ptds" }, { "cuMemcpyDtoD_v2" }, { "cuMemcpyDtoD_v2_ptds" },
	{ "cuMemcpyHtoDAsync_v2" }, { "cuMemcpyHtoDAsync_v2_ptsz" }, { "cuMemcpyDtoHAsync_v2" },
	{ "cuMemcpyDtoHAsync_v2_ptsz" }, { "cuMemcpyDtoDAsync_v2", ASYNC },
	{ "cuMemcpyDtoDAsync_v2_ptsz", ASYNC },
	{ "cuMemcpy2D_v2" }, { "cuMemcpy2DAsync_v2" }, { "cuMemcpy3D_v2" }, { "cuMemcpy3DAsync_v2" },
	{ "cuMemcpyPeer" }, { "cuMemcpyPeerAsync", ASYNC }, { "cuMemcpyBatchAsync" },
	{ "cuMemsetD8_v2" }, { "cuMemsetD16_v2" }, { "cuMemsetD32_v2" },
	{ "cuMemsetD8Async", ASYNC }, { "cuMemsetD16Async", ASYNC }, { "cuMemsetD32Async", ASYNC },
	{ "cuMemsetD8Async_ptsz", ASYNC }, { "cuMemsetD32Async_ptsz", ASYNC },
	{ "cuMemsetD2D8_v2" }, { "cuMemsetD2D32_v2" },
	{ "cuStreamSynchronize", SYNC }, { "cuStreamSynchronize_ptsz", SYNC },
	{ "cuCtxSynchronize", SYNC }, { "cuEventSynchronize", SYNC },
	{ "cuStreamWaitEvent", ASYNC }, { "cuStreamWaitEvent_ptsz", ASYNC },
	{ "cuMemAlloc_v2" }, { "cuMemAllocAsync" }, { "cuMemAllocAsync_ptsz" },
	{ "cuMemAllocHost_v2" }, { "cuMemAllocManaged" }, { "cuMemAllocPitch_v2" },
	{ "cuMemAllocFromPoolAsync" }, { "cuMemHostAlloc" }, { "cuMemFree_v2" },
	{ "cuMemFreeAsync" }, { "cuMemFreeAsync_ptsz" }, { "cuMemFreeHost" },
};
#undef SYNC

struct lib {
	dev_t dev;
	ino_t ino;
	char path[256];		/* as opened by the agent */
	struct bpf_link *links[2 * ARRAY_SIZE(apis)];	/* one uprobe each (no uprobe_multi) */
	int multi_fd[2];	/* uprobe_multi links: return probes, entry probes; -1: none */
	int nlinks, absent, failed;	/* nlinks: uprobes attached, by either way */
};

struct watch {
	pid_t pid;
	uint64_t next_check_ns;	/* 0: found (or given up) */
};

struct cuda_state {
	struct unwinder *uw;		/* user stacks from unwind_stacks; NULL: from `stacks` */
	struct cudaprobe_bpf *skel;
	struct ring_buffer *rb;
	struct agent *a;
	struct lib libs[LIBS_MAX];
	int nlibs;
	struct watch watch[WATCH_MAX];
	int nwatch;
	bool multi;		/* uprobe_multi links (one per library and direction) */
	uint64_t calls[ARRAY_SIZE(apis)], call_ns[ARRAY_SIZE(apis)];
	uint64_t calls_walks;	/* drains of the calls map by a walk (its key queue missed one) */
	uint64_t events, agg, attach_failures, libs_deleted, libs_overflow, stack_lost, not_walked,
		batch_errors, relabel_dropped;
};

static struct cuda_state C;

static struct watch *watch_find(pid_t pid)
{
	for (int i = 0; i < C.nwatch; i++)
		if (C.watch[i].pid == pid)
			return &C.watch[i];
	return NULL;
}

static void on_tracked(pid_t pid, bool tracked, void *ctx)
{
	struct watch *w = watch_find(pid);

	if (!tracked) {
		if (w)
			*w = C.watch[--C.nwatch];
		return;
	}
	if (w || C.nwatch == WATCH_MAX)
		return;
	C.watch[C.nwatch++] = (struct watch){ pid, 1 };
}

/*
 * Path through which the agent can open the libcuda that pid maps: /proc/PID/root/PATH, or
 * /proc/PID/map_files/START-END when the file was deleted or replaced. 1 found, 0 not mapped,
 * -errno.
 */
static int find_libcuda(pid_t pid, char *out, size_t len, bool *ret_deleted)
{
	struct maps_lib lib;
	int found = maps_find_lib(pid, "libcuda.so", &lib);

	if (found <= 0)
		return found;
	*ret_deleted = lib.deleted;
	if (lib.deleted)
		snprintf(out, len, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, lib.start,
			 lib.end);
	else if (snprintf(out, len, "/proc/%d/root%.*s", pid, (int)(len - 32), lib.path) >=
		 (int)len)
		return 0;
	return 1;
}

/* File offsets of the probed functions in the library open at fd, from .dynsym (0: absent). */
static int resolve_offsets(int fd, uint64_t *off)
{
	static const char *names[ARRAY_SIZE(apis)];
	int n;

	for (size_t k = 0; k < ARRAY_SIZE(apis); k++)
		names[k] = apis[k].name;
	n = elf_dynsym_offsets(fd, names, ARRAY_SIZE(apis), off);
	return n < 0 ? n : 0;
}

/*
 * Whether api i is probed: launches are frequent, and a uprobe on each cost 6-25 % on
 * launch-bound work (H200, issue 14). Inside trace windows the CUPTI library reports every
 * launch with its stack, so the driver's launch calls are probed only with
 * --cuda-launch-probes.
 */
static bool api_probed(size_t i)
{
	return (strncmp(apis[i].name, "cuLaunch", 8) && !(apis[i].flags & ASYNC)) ||
	       C.a->opts.cuda_launch_probes;
}

/*
 * uprobe_multi (Linux >= 6.6) through bpf(2) itself: libbpf learnt it in 1.3, Debian 12 has 1.1.
 * The attach type's number and the link_create layout are the kernel's UAPI (linux/bpf.h).
 */
#define UPROBE_MULTI_ATTACH	48	/* BPF_TRACE_UPROBE_MULTI */
#define UPROBE_MULTI_RETURN	1u	/* BPF_F_UPROBE_MULTI_RETURN */

struct uprobe_multi_attr {		/* union bpf_attr's link_create, uprobe_multi member */
	__u32 prog_fd, target_fd, attach_type, flags;
	__u64 path, offsets, ref_ctr_offsets, cookies;
	__u32 cnt, multi_flags, pid, _pad;
};
_Static_assert(sizeof(struct uprobe_multi_attr) == 64, "link_create.uprobe_multi layout");

/* A uprobe_multi link of prog_fd on n offsets of path, any process. Its fd, or -errno. */
static int uprobe_multi_attach(int prog_fd, const char *path, const uint64_t *offs,
			       const uint64_t *cookies, unsigned n, bool ret)
{
	struct uprobe_multi_attr at = {
		.prog_fd = prog_fd,
		.attach_type = UPROBE_MULTI_ATTACH,
		.path = (uintptr_t)path,
		.offsets = (uintptr_t)offs,
		.cookies = (uintptr_t)cookies,
		.cnt = n,
		.multi_flags = ret ? UPROBE_MULTI_RETURN : 0,
	};
	int fd = (int)syscall(__NR_bpf, BPF_LINK_CREATE, &at, sizeof(at));

	return fd < 0 ? -errno : fd;
}

/*
 * Whether the kernel makes uprobe_multi links, asked as libbpf asks: a program loaded for one,
 * linked to a directory, gets EBADF where the kernel knows the link type (EINVAL where not).
 */
static bool uprobe_multi_supported(void)
{
	const struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, o, .expected_attach_type = UPROBE_MULTI_ATTACH);
	uint64_t off = 0;
	int prog, fd;

	prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, NULL, "GPL", insns, ARRAY_SIZE(insns), &o);
	if (prog < 0)
		return false;
	fd = uprobe_multi_attach(prog, "/", &off, NULL, 1, false);
	close(prog);
	if (fd >= 0) {
		close(fd);
		return false;	/* not what a kernel that checks the path does */
	}
	return fd == -EBADF;
}

static void attach_one(struct lib *l, const char *path, size_t i, uint64_t off)
{
	if (!api_probed(i))
		return;
	if (!off) {
		l->absent++;
		return;
	}
	/*
	 * Stopping: no more attaches. On a loaded machine each one can wait seconds for the
	 * kernel's uprobe locks, and the agent's last batch waits behind them.
	 */
	if (C.a->stopping)
		return;
	/* return probe first: a call entered between the two attaches has no lost return */
	for (int ret = 1; ret >= 0; ret--) {
		LIBBPF_OPTS(bpf_uprobe_opts, o, .retprobe = ret,
			    .bpf_cookie = i | (apis[i].flags & GPUSCOPE_CUDA_SYNC));
		struct bpf_program *prog = ret ? C.skel->progs.cu_return : C.skel->progs.cu_entry;
		struct bpf_link *link = bpf_program__attach_uprobe_opts(prog, -1, path, off, &o);

		if (!link) {
			l->failed++;
			C.attach_failures++;
			continue;
		}
		l->links[l->nlinks++] = link;
	}
}

/*
 * Every probed function of the library as two uprobe_multi links (return probes first: a call
 * entered between the two has no lost return), synchronizing calls first in each. Detaching a
 * link waits for one grace period for all its probes, where single uprobes wait for one each:
 * a hundred of them took 5-11 s to stop on a loaded 2-core VM.
 */
static void attach_lib_multi(struct lib *l, const char *path, const uint64_t *off)
{
	uint64_t offs[ARRAY_SIZE(apis)], cookies[ARRAY_SIZE(apis)];
	unsigned n = 0;

	for (int sync = 1; sync >= 0; sync--)
		for (size_t i = 0; i < ARRAY_SIZE(apis); i++) {
			if (!(apis[i].flags & GPUSCOPE_CUDA_SYNC) != !sync || !api_probed(i))
				continue;
			if (!off[i]) {
				l->absent++;
				continue;
			}
			offs[n] = off[i];
			cookies[n++] = i | (apis[i].flags & GPUSCOPE_CUDA_SYNC);
		}
	for (int ret = 1; ret >= 0 && n; ret--) {
		struct bpf_program *prog = ret ? C.skel->progs.cu_return : C.skel->progs.cu_entry;
		int fd;

		if (C.a->stopping)	/* as attach_one() */
			return;
		fd = uprobe_multi_attach(bpf_program__fd(prog), path, offs, cookies, n, ret);
		if (fd < 0) {
			l->failed += n;
			C.attach_failures += n;
			log_debug("cuda: '%s': uprobe_multi link (%s): %s", l->path,
				  ret ? "returns" : "entries", strerror(-fd));
			continue;
		}
		l->multi_fd[ret] = fd;
		l->nlinks += n;
	}
}

static void attach_lib(struct lib *l, int fd)
{
	uint64_t off[ARRAY_SIZE(apis)] = { 0 };
	char path[64];
	int err;

	/* through our own fd: the inode stays reachable even if the process exits meanwhile */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	err = resolve_offsets(fd, off);
	if (err) {
		l->failed++;
		C.attach_failures++;
		log_warn("cuda: '%s': no driver API symbols (%s)", l->path, strerror(-err));
		return;
	}
	if (C.multi) {
		attach_lib_multi(l, path, off);
		return;
	}
	/* synchronizing calls first, then the rest: each attach takes milliseconds */
	for (size_t i = 0; i < ARRAY_SIZE(apis); i++)
		if (apis[i].flags & GPUSCOPE_CUDA_SYNC)
			attach_one(l, path, i, off[i]);
	for (size_t i = 0; i < ARRAY_SIZE(apis); i++)
		if (!(apis[i].flags & GPUSCOPE_CUDA_SYNC))
			attach_one(l, path, i, off[i]);
}

static void check_pid(struct watch *w, uint64_t now)
{
	char path[256];
	bool deleted = false;
	struct stat st;
	struct lib *l;
	int fd, ret = find_libcuda(w->pid, path, sizeof(path), &deleted);
	uint64_t t0;

	if (ret <= 0) {
		w->next_check_ns = ret < 0 ? 0 : now + RECHECK_NS;
		return;
	}
	w->next_check_ns = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		C.attach_failures++;
		log_warn("cuda: pid %d maps libcuda but '%s' cannot be opened: %s", w->pid, path,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	for (int i = 0; i < C.nlibs; i++)
		if (C.libs[i].dev == st.st_dev && C.libs[i].ino == st.st_ino) {
			close(fd);
			return;	/* uprobes are per file: this one is probed already */
		}
	if (C.nlibs == LIBS_MAX) {
		if (!C.libs_overflow++)
			log_warn("cuda: more than %d distinct libcuda files: '%s' not probed",
				 LIBS_MAX, path);
		close(fd);
		return;
	}
	l = &C.libs[C.nlibs++];
	memset(l, 0, sizeof(*l));
	l->multi_fd[0] = l->multi_fd[1] = -1;
	l->dev = st.st_dev;
	l->ino = st.st_ino;
	snprintf(l->path, sizeof(l->path), "%s", path);
	if (deleted)
		C.libs_deleted++;
	t0 = mono_ns();
	attach_lib(l, fd);
	close(fd);
	t0 = (mono_ns() - t0) / NSEC_PER_MSEC;
	if (l->failed)
		log_warn("cuda: '%s' (pid %d): %d probes attached in %" PRIu64 " ms, %d failed, "
			 "%d functions absent", path, w->pid, l->nlinks, t0, l->failed, l->absent);
	else
		log_info("cuda: '%s' (pid %d%s): %d probes attached in %" PRIu64 " ms, %d functions "
			 "absent", path, w->pid, deleted ? ", deleted file" : "", l->nlinks, t0,
			 l->absent);
}

static int64_t call_stack(pid_t pid, __u64 entry_ip, __s32 ustack_id, uint64_t calls)
{
	static __u64 uf[GPUSCOPE_MAX_STACK + 1];
	int n = 0;
	int64_t id = -1;

	uf[n++] = entry_ip;	/* the API function itself: the leaf */
	if (ustack_id == GPUSCOPE_USTACK_NOT_WALKED) {
		uf[n++] = GPUSCOPE_FRAME_NOT_WALKED;
		C.not_walked += calls;
	} else if (ustack_id >= 0 && C.uw) {
		n += unwinder__read_stack(C.uw, ustack_id, uf + 1);
	} else if (ustack_id >= 0) {
		__u32 key = ustack_id;

		if (!bpf_map_lookup_elem(bpf_map__fd(C.skel->maps.stacks), &key, uf + 1))
			while (n < GPUSCOPE_MAX_STACK + 1 && uf[n])
				n++;
	}
	if (n == 1)
		C.stack_lost++;
	id = agent__stack(C.a, pid, NULL, 0, uf, n);
	return id;
}

/*
 * Per process and second (CLOCK_MONOTONIC): the time it spent in synchronize calls, for the
 * trace windows' sync trigger (a->shared.cuda_sync_share), and what the probes cost it, for
 * the windows' budget (a->shared.cuda_probe_cost). A call counts in the second it
 * ended.
 */
#define ACC_PROCS 256
#define ACC_SECS 32
/*
 * What one probed call costs the calling thread (H200, bench/cupti/README.md): two uprobe traps
 * (~1.5 us each), the entry and return programs (~1 us), and a 1-in-16 share of a stack walk
 * (12-28 us with Python frames); a call of 1 ms or more is always walked.
 */
#define PROBE_CALL_NS	5000
#define PROBE_WALK_NS	20000
static struct proc_acc {
	pid_t pid;
	uint64_t sec[ACC_SECS], sync_ns[ACC_SECS], probe_ns[ACC_SECS];
} proc_acc[ACC_PROCS];

static void account(pid_t pid, uint64_t end_ns, uint64_t sync_ns, uint64_t probe_ns)
{
	struct proc_acc *s = &proc_acc[(uint32_t)pid % ACC_PROCS];
	uint64_t sec = end_ns / NSEC_PER_SEC;
	unsigned i = sec % ACC_SECS;

	if (s->pid != pid) {	/* a new process in that slot: the old one's seconds go */
		memset(s, 0, sizeof(*s));
		s->pid = pid;
	}
	if (s->sec[i] != sec) {
		s->sec[i] = sec;
		s->sync_ns[i] = s->probe_ns[i] = 0;
	}
	s->sync_ns[i] += sync_ns;
	s->probe_ns[i] += probe_ns;
}

static double acc_sum(const struct proc_acc *s, bool sync, uint64_t from_sec, uint64_t to_sec)
{
	uint64_t ns = 0;

	for (unsigned i = 0; i < ACC_SECS; i++)
		if (s->sec[i] >= from_sec && s->sec[i] < to_sec)
			ns += sync ? s->sync_ns[i] : s->probe_ns[i];
	return (double)ns / ((double)(to_sec - from_sec) * NSEC_PER_SEC);
}

/* Share of the span (whole seconds, the current one left out) pid spent in sync calls. */
static double sync_share(pid_t pid, uint64_t now_ns, uint64_t span_ns, double *ret_before)
{
	const struct proc_acc *s = &proc_acc[(uint32_t)pid % ACC_PROCS];
	uint64_t now = now_ns / NSEC_PER_SEC, span = span_ns / NSEC_PER_SEC;

	*ret_before = -1;
	if (!span || span * 2 > ACC_SECS || now < 2 * span)
		return -1;
	if (s->pid != pid)
		return 0;	/* no sync call seen */
	*ret_before = acc_sum(s, true, now - 2 * span, now - span);
	return acc_sum(s, true, now - span, now);
}

/* Share of the last span (whole seconds, the current one left out) the probes cost pid. */
static double probe_share(pid_t pid, uint64_t now_ns, uint64_t span_ns)
{
	const struct proc_acc *s = &proc_acc[(uint32_t)pid % ACC_PROCS];
	uint64_t now = now_ns / NSEC_PER_SEC, span = span_ns / NSEC_PER_SEC;

	if (!span || span > ACC_SECS || now < span || s->pid != pid)
		return 0;
	return acc_sum(s, false, now - span, now);
}

static void api_interval(pid_t pid, pid_t tid, const char *thread, unsigned api, uint64_t start,
			 uint64_t end, uint64_t calls, uint64_t ns, int64_t stack_id, bool sample)
{
	struct agent *a = C.a;
	struct agent_labels L;
	struct label attrs[5];
	char ncalls[24], total[24];
	size_t na = 0;
	uint64_t wstart = start + a->mono_to_wall_ns, wend = end + a->mono_to_wall_ns;

	if (agent__tracked_labels(a, pid, tid, thread, &L) == LABELS_DROPPED) {
		C.relabel_dropped++;
		return;
	}
	account(pid, end, sample ? ns : 0,
		calls * PROBE_CALL_NS +
		(calls == 1 && ns >= C.skel->rodata->walk_all_ns ? PROBE_WALK_NS : 0));
	snprintf(ncalls, sizeof(ncalls), "%" PRIu64, calls);
	snprintf(total, sizeof(total), "%" PRIu64, ns);
	attrs[na++] = (struct label){ "api", apis[api].name };
	attrs[na++] = (struct label){ "calls", ncalls };
	attrs[na++] = (struct label){ "total_ns", total };
	if (batch__interval(a->batch, "cuda_api", L.l, L.n, wstart, wend, stack_id, attrs, na))
		C.batch_errors++;
	if (sample && stack_id >= 0 &&
	    batch__sample(a->batch, wend, L.l, L.n, stack_id, SAMPLE_CUDA_SYNC_NS, (int64_t)ns))
		C.batch_errors++;
}

static int on_event(void *ctx, void *data, size_t len)
{
	const struct gpuscope_ev_cuda_call *ev = data;
	char thread[GPUSCOPE_COMM_LEN + 1];
	unsigned api;
	int64_t id;

	if (len < sizeof(*ev) || ev->hdr.type != GPUSCOPE_EV_CUDA_CALL)
		return 0;
	api = ev->api & GPUSCOPE_CUDA_API_MASK;
	if (api >= ARRAY_SIZE(apis))
		return 0;
	memcpy(thread, ev->comm, GPUSCOPE_COMM_LEN);
	thread[GPUSCOPE_COMM_LEN] = 0;
	procfs_comm_seen(ev->tid, thread);
	C.events++;
	C.calls[api]++;
	C.call_ns[api] += ev->end_ns - ev->start_ns;
	id = call_stack(ev->tgid, ev->entry_ip, ev->ustack_id, 1);
	api_interval(ev->tgid, ev->tid, thread, api, ev->start_ns, ev->end_ns, 1,
		     ev->end_ns - ev->start_ns, id, apis[api].flags & GPUSCOPE_CUDA_SYNC);
	return 0;
}

/*
 * Short calls counted in the kernel: one interval per (thread, API, stack) and tick. Every key
 * of the map each tick, 256 at a time: taking only the first 256 of the hash order starved the
 * keys behind them until the module stopped (their interval then began before the reader's
 * range and a test missed all but 5 of 690 calls).
 */
#define CALLS_MAX 8192	/* the map's max_entries */

/* One key of the calls map with its sums: one cuda_api interval (bpf_keyq_drain()). */
static void call_one(void *ctx, const void *key, const void *val)
{
	const struct gpuscope_cuda_agg_key *k = key;
	const struct gpuscope_cuda_agg_val *v = val;
	unsigned api = k->api & GPUSCOPE_CUDA_API_MASK;
	int64_t id;

	(void)ctx;
	if (api >= ARRAY_SIZE(apis))
		return;
	C.agg++;
	C.calls[api] += v->count;
	C.call_ns[api] += v->ns;
	id = call_stack(k->tgid, k->entry_ip, k->ustack_id, v->count);
	api_interval(k->tgid, k->tid, NULL, api, v->first_ns, v->last_ns, v->count, v->ns, id,
		     apis[api].flags & GPUSCOPE_CUDA_SYNC);
}

/* The short calls counted in the kernel, from the keys the program queued as it added them
 * (no walk over the map's buckets but when the queue missed a key); CALLS_MAX a tick. */
static void drain_calls(void)
{
	bool walked;

	bpf_keyq_drain(bpf_map__fd(C.skel->maps.calls), bpf_map__fd(C.skel->maps.calls_new),
		       &C.skel->bss->calls_keys_lost, sizeof(struct gpuscope_cuda_agg_key),
		       sizeof(struct gpuscope_cuda_agg_val), CALLS_MAX, call_one, NULL, &walked);
	C.calls_walks += walked;
}

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	/* absent functions are normal (driver versions differ): libbpf's warnings stay debug */
	if (gpuscope_log_level < LOG_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

static int cuda_start(struct agent *a)
{
	struct cudaprobe_bpf *skel;
	int err;

	memset(&C, 0, sizeof(C));
	C.a = a;
	libbpf_set_print(libbpf_quiet);
	skel = cudaprobe_bpf__open();
	if (!skel)
		return -errno;
	/* read by sched's programs (blocked reason cuda_sync); run.c made it */
	if (a->shared.in_sync_map_fd > 0) {
		err = bpf_map__reuse_fd(skel->maps.in_sync, a->shared.in_sync_map_fd);
		if (err)
			goto out_destroy;
	}
	C.uw = agent__unwinder(a);
	if (C.uw) {
		err = unwinder__prepare(C.uw, skel->obj);
		if (err)
			goto out_destroy;
		skel->rodata->use_unwinder = true;
	}
	/* for benchmarks: 0 walks every walked call's stack (as before the re-use) */
	bpf_env_ms("GPUSCOPE_CUDA_STACK_REUSE_MS", &skel->rodata->reuse_ns);
	/* a program of a uprobe_multi link is loaded for it (and then only attaches that way) */
	if (getenv("GPUSCOPE_CUDA_SINGLE_UPROBES"))	/* tests and triage */
		log_info("cuda: single uprobes (GPUSCOPE_CUDA_SINGLE_UPROBES)");
	else if (!(C.multi = uprobe_multi_supported()))
		log_info("cuda: single uprobes (the kernel makes no uprobe_multi links: Linux < "
			 "6.6): each takes a grace period to detach");
	if (C.multi) {
		bpf_program__set_expected_attach_type(skel->progs.cu_entry, UPROBE_MULTI_ATTACH);
		bpf_program__set_expected_attach_type(skel->progs.cu_return, UPROBE_MULTI_ATTACH);
	}
	err = cudaprobe_bpf__load(skel);
	if (err) {
		err = bpf_load_error("cuda_probe", err);
		goto out_destroy;
	}
	C.rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_event, &C, NULL);
	if (!C.rb) {
		err = -errno;
		goto out_destroy;
	}
	C.skel = skel;
	bpf_counters__set(GPUSCOPE_PROG_CUDA, bpf_map__fd(skel->maps.errors));
	err = procs__acquire(a, on_tracked, &C);
	if (err)
		goto out_rb;
	memset(proc_acc, 0, sizeof(proc_acc));
	a->shared.cuda_sync_share = sync_share;		/* the trace windows' sync trigger */
	a->shared.cuda_probe_cost = probe_share;	/* and their budget */
	return 0;
out_rb:
	bpf_counters__set(GPUSCOPE_PROG_CUDA, -1);
	ring_buffer__free(C.rb);
	C.rb = NULL;
	C.skel = NULL;
out_destroy:
	cudaprobe_bpf__destroy(skel);
	return err;
}

static int cuda_tick(struct agent *a)
{
	uint64_t now = mono_ns();
	int err;

	if (!C.skel)
		return 0;
	procs__tick();	/* cheap when nothing is due (sched ticks it too) */
	for (int i = 0; i < C.nwatch && !a->stopping; i++)	/* stopping: only drain */
		if (C.watch[i].next_check_ns && C.watch[i].next_check_ns <= now)
			check_pid(&C.watch[i], now);
	err = ring_buffer__consume(C.rb);
	if (err < 0)
		return err;
	drain_calls();
	return 0;
}

#define DETACH_THREADS 16

static void *detach_some(void *arg)
{
	long k = (long)arg;

	for (int i = 0; i < C.nlibs; i++) {
		struct lib *l = &C.libs[i];

		if (l->multi_fd[0] >= 0 || l->multi_fd[1] >= 0) {
			/* a link's probes go together; its two links on two threads */
			if (k < 2 && l->multi_fd[k] >= 0)
				close(l->multi_fd[k]);
			continue;
		}
		for (int j = (int)k; j < l->nlinks; j += DETACH_THREADS)
			bpf_link__destroy(l->links[j]);
	}
	return NULL;
}

/*
 * Each single uprobe's detach waits for a grace period (~60 ms here); a hundred of them one
 * after the other take seconds, so they run in parallel and share the grace periods. A
 * uprobe_multi link waits once for all of its probes.
 */
static void detach_all(void)
{
	pthread_t th[DETACH_THREADS];
	bool started[DETACH_THREADS] = { 0 };

	for (long k = 0; k < DETACH_THREADS; k++)
		started[k] = !pthread_create(&th[k], NULL, detach_some, (void *)k);
	for (long k = 0; k < DETACH_THREADS; k++)
		if (started[k])
			pthread_join(th[k], NULL);
		else
			detach_some((void *)k);
}

static void cuda_stop(struct agent *a)
{
	if (!C.skel)
		return;
	a->shared.cuda_sync_share = NULL;
	a->shared.cuda_probe_cost = NULL;
	ring_buffer__consume(C.rb);
	drain_calls();
	procs__release(on_tracked, &C);
	detach_all();
	bpf_counters__set(GPUSCOPE_PROG_CUDA, -1);
	ring_buffer__free(C.rb);
	cudaprobe_bpf__destroy(C.skel);
	C.rb = NULL;
	C.skel = NULL;
	C.nlibs = 0;
}

static void cuda_metrics(struct agent *a, FILE *out)
{
	int probes = 0, absent = 0, multi = 0, single = 0;

	if (!C.skel)
		return;
	for (int i = 0; i < C.nlibs; i++) {
		const struct lib *l = &C.libs[i];

		probes += l->nlinks;
		absent += l->absent;
		multi += (l->multi_fd[0] >= 0) + (l->multi_fd[1] >= 0);
		if (l->multi_fd[0] < 0 && l->multi_fd[1] < 0)
			single += l->nlinks;
	}
	prom_family(out, "gpuscope_agent_cuda_probe_links", "gauge",
		    "Links holding the uprobes, by kind: uprobe_multi (one per library and "
		    "direction, Linux >= 6.6; detached in one grace period) or uprobe (one each).");
	prom_sample1_u64(out, "gpuscope_agent_cuda_probe_links", "kind", "uprobe_multi", multi);
	prom_sample1_u64(out, "gpuscope_agent_cuda_probe_links", "kind", "uprobe", single);
	prom_gauge(out, "gpuscope_agent_cuda_libs_probed", "CUDA driver libraries probed.",
		   C.nlibs);
	prom_counter(out, "gpuscope_agent_cuda_libs_deleted_total",
		     "Probed libraries deleted or replaced on disk.", C.libs_deleted);
	prom_gauge(out, "gpuscope_agent_cuda_probes_attached", "Uprobes attached.", probes);
	prom_gauge(out, "gpuscope_agent_cuda_functions_absent",
		   "Probed functions a library does not export.", absent);
	prom_counter(out, "gpuscope_agent_cuda_attach_failures_total", "Uprobes that failed to attach.",
		     C.attach_failures);
	prom_counter(out, "gpuscope_agent_cuda_stack_lost_total",
		     "Calls whose stack was gone from the stack map.", C.stack_lost);
	prom_counter(out, "gpuscope_agent_cuda_calls_not_walked_total",
		     "Calls under 1 ms outside the 1-in-16 sample whose stack was not walked "
		     "(shown as [stack not walked: short call]).", C.not_walked);
	prom_counter(out, "gpuscope_agent_cuda_batch_errors_total",
		     "Records that could not be added to the batch.", C.batch_errors);
	prom_counter(out, "gpuscope_agent_cuda_relabel_dropped_total",
		     "Records not sent because a relabel rule dropped the process.",
		     C.relabel_dropped);
	prom_counter(out, "gpuscope_agent_cuda_calls_map_walks_total",
		     "Drains of the short-call map by a walk of it (its key queue missed a key; "
		     "else the queue of the keys the BPF program added is drained).", C.calls_walks);
	prom_family(out, "gpuscope_agent_cuda_calls_total", "counter", "CUDA driver calls, by API.");
	for (size_t i = 0; i < ARRAY_SIZE(apis); i++)
		if (C.calls[i])
			prom_sample1_u64(out, "gpuscope_agent_cuda_calls_total", "api", apis[i].name,
					 C.calls[i]);
	prom_family(out, "gpuscope_agent_cuda_call_seconds_total", "counter",
		    "Time inside CUDA driver calls, by API.");
	for (size_t i = 0; i < ARRAY_SIZE(apis); i++)
		if (C.calls[i])
			prom_sample1(out, "gpuscope_agent_cuda_call_seconds_total", "api",
				     apis[i].name, C.call_ns[i] / 1e9);
}

const struct agent_module cuda_probe_module = {
	.name = "cuda_probe",
	.start = cuda_start,
	.tick = cuda_tick,
	.stop = cuda_stop,
	.metrics = cuda_metrics,
};
