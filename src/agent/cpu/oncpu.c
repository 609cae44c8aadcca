/* SPDX-License-Identifier: Apache-2.0 */
/*
 * On-CPU sampler loader: one sampling perf event per online CPU running oncpu.bpf.c, a ring
 * buffer of samples, diagnostics that name what is missing when loading fails, and the agent
 * module that turns samples into batch records in `run` mode.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <linux/perf_event.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "agent/agent.h"
#include "agent/bpfutil.h"
#include "agent/cpu/oncpu.h"
#include "agent/labels.h"
#include "agent/sym/stacks.h"
#include "agent/sym/symbolize.h"
#include "agent/unwind/unwind.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"
#include "oncpu.skel.h"

struct oncpu {
	struct oncpu_bpf *skel;
	struct ring_buffer *rb;
	int *pfds;			/* perf event fds, one per online CPU */
	struct bpf_link **links;
	int nfds;
	oncpu_cb cb;
	oncpu_proc_cb proc_cb;
	void *ctx;
	struct bpf_link *exec_link, *exit_link;
	bool filtering;
	struct unwinder *unwinder;
	uint64_t delivered;
	const char *event;
};

static int online_cpus(int **ret, int *ret_n)
{
	FILE *f = fopen("/sys/devices/system/cpu/online", "r");
	int a, b, n = 0, cap = libbpf_num_possible_cpus();
	int *cpus;
	char c;

	if (!f)
		return -errno;
	if (cap <= 0) {
		fclose(f);
		return cap ? cap : -EINVAL;
	}
	cpus = calloc(cap, sizeof(*cpus));
	if (!cpus) {
		fclose(f);
		return -ENOMEM;
	}
	while (fscanf(f, "%d", &a) == 1) {
		b = a;
		if (fscanf(f, "%c", &c) == 1 && c == '-') {
			if (fscanf(f, "%d", &b) != 1)
				break;
			if (fscanf(f, "%c", &c) != 1)
				c = '\n';
		}
		for (int i = a; i <= b && n < cap; i++)
			cpus[n++] = i;
		if (c != ',')
			break;
	}
	fclose(f);
	*ret = cpus;
	*ret_n = n;
	return 0;
}

static bool has_cap(int cap)
{
	FILE *f = fopen("/proc/self/status", "r");
	unsigned long long eff = 0;
	char line[256];

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	fclose(f);
	return eff & (1ULL << cap);
}

static int read_int_file(const char *path, int dflt)
{
	FILE *f = fopen(path, "r");
	int v = dflt;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = dflt;
		fclose(f);
	}
	return v;
}

static int handle_event(void *ctx, void *data, size_t size)
{
	struct oncpu *o = ctx;
	const struct gpuscope_ev_cpu_sample *ev = data;

	if (size >= sizeof(struct gpuscope_ev_proc) && (ev->hdr.type == GPUSCOPE_EV_PROC_EXEC ||
							 ev->hdr.type == GPUSCOPE_EV_PROC_EXIT)) {
		const struct gpuscope_ev_proc *p = data;

		if (o->proc_cb)
			o->proc_cb(o->ctx, p->tgid, p->hdr.type == GPUSCOPE_EV_PROC_EXEC,
				   p->ktime_ns);
		return 0;
	}
	if (size < sizeof(*ev) || ev->hdr.type != GPUSCOPE_EV_CPU_SAMPLE ||
	    size < sizeof(*ev) + 8ULL * (ev->kstack_len + ev->ustack_len))
		return 0;
	o->delivered++;
	o->cb(o->ctx, ev, (const __u64 *)(ev + 1));
	return 0;
}

static int open_event(int cpu, enum oncpu_event which, unsigned freq)
{
	struct perf_event_attr attr = {
		.size = sizeof(attr),
		.sample_freq = freq,
		.freq = 1,
	};

	if (which == ONCPU_EVENT_CYCLES) {
		attr.type = PERF_TYPE_HARDWARE;
		attr.config = PERF_COUNT_HW_CPU_CYCLES;
	} else {
		attr.type = PERF_TYPE_SOFTWARE;
		attr.config = PERF_COUNT_SW_CPU_CLOCK;
		/* an idle CPU's ticks run no program (it would return at once: the idle task): on a
		 * 16-CPU GPU node mostly idle, most of the 1 584 runs a second */
		attr.exclude_idle = 1;
	}
	return syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

static int silent_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG && gpuscope_log_level < LOG_DEBUG)
		return 0;
	if (level != LIBBPF_WARN && gpuscope_log_level < LOG_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

struct oncpu *oncpu__new(const struct oncpu_opts *opts, oncpu_cb cb, oncpu_proc_cb proc_cb,
			 void *ctx, const char **ret_why)
{
	struct oncpu *o = calloc(1, sizeof(*o));
	unsigned rb_mb = opts->ringbuf_mb;
	uint64_t rb_bytes;
	int *cpus = NULL, ncpus = 0, err;
	enum oncpu_event ev = opts->event;

	*ret_why = NULL;
	if (!o)
		return NULL;
	o->cb = cb;
	o->proc_cb = proc_cb;
	o->ctx = ctx;
	libbpf_set_print(silent_print);
	if (geteuid() != 0 && !(has_cap(39 /* CAP_BPF */) && has_cap(38 /* CAP_PERFMON */)) &&
	    !has_cap(21 /* CAP_SYS_ADMIN */)) {
		*ret_why = "needs root, or the capabilities CAP_BPF and CAP_PERFMON: run it with sudo";
		err = -EPERM;
		goto out_free;
	}
	if (access("/sys/kernel/btf/vmlinux", R_OK)) {
		*ret_why = "the kernel has no BTF (/sys/kernel/btf/vmlinux missing): "
			   "use a kernel built with CONFIG_DEBUG_INFO_BTF=y";
		err = -ENOENT;
		goto out_free;
	}
	err = online_cpus(&cpus, &ncpus);
	if (err) {
		*ret_why = "cannot read /sys/devices/system/cpu/online";
		goto out_free;
	}
	o->skel = oncpu_bpf__open();
	if (!o->skel) {
		err = -errno;
		*ret_why = "cannot open the BPF object";
		goto out_free;
	}
	o->skel->rodata->filter_pids = opts->npids > 0;
	o->skel->rodata->want_kernel = !opts->no_kernel;
	if (opts->unwinder) {
		err = unwinder__prepare(opts->unwinder, o->skel->obj);
		if (err) {
			*ret_why = "cannot share the unwinder's maps with the sampler";
			goto out_destroy;
		}
		o->skel->rodata->use_unwinder = true;
		o->unwinder = opts->unwinder;
	}
	/*
	 * Ring buffer: room for half a second of samples at ~1.5 KiB each (both stacks), so a
	 * consumer that polls every 100 ms never fills it; at least 1 MiB, a power of two. It
	 * is mapped twice by the consumer, so it counts twice in RSS: don't oversize it.
	 */
	rb_bytes = rb_mb ? (uint64_t)rb_mb << 20 : (uint64_t)ncpus * opts->frequency_hz * 1536 / 2;
	if (rb_bytes < (1 << 20))
		rb_bytes = 1 << 20;
	if (rb_bytes > (256ULL << 20))
		rb_bytes = 256ULL << 20;
	while (rb_bytes & (rb_bytes - 1))	/* round up to a power of two */
		rb_bytes = (rb_bytes | (rb_bytes - 1)) + 1;
	bpf_map__set_max_entries(o->skel->maps.events, rb_bytes);
	err = oncpu_bpf__load(o->skel);
	if (err) {
		*ret_why = err == -EPERM ? "bpf() refused: needs root or CAP_BPF + CAP_PERFMON "
					   "(and kernel.unprivileged_bpf_disabled does not matter for root)"
					 : "the kernel refused the BPF program: needs Linux >= 5.8 with "
					   "BPF ring buffers and perf_event programs";
		goto out_destroy;
	}
	o->filtering = opts->npids > 0;
	for (int i = 0; i < opts->npids; i++) {
		err = oncpu__add_pid(o, opts->pids[i]);
		if (err) {
			*ret_why = "cannot fill the pid filter map";
			goto out_destroy;
		}
	}
	o->pfds = calloc(ncpus, sizeof(*o->pfds));
	o->links = calloc(ncpus, sizeof(*o->links));
	if (!o->pfds || !o->links) {
		err = -ENOMEM;
		goto out_destroy;
	}
	if (ev == ONCPU_EVENT_AUTO) {
		int fd = open_event(cpus[0], ONCPU_EVENT_CYCLES, opts->frequency_hz);

		ev = fd >= 0 ? ONCPU_EVENT_CYCLES : ONCPU_EVENT_CPU_CLOCK;
		if (fd >= 0)
			close(fd);
	}
	o->event = ev == ONCPU_EVENT_CYCLES ? "cycles" : "cpu-clock";
	for (int i = 0; i < ncpus; i++) {
		int fd = open_event(cpus[i], ev, opts->frequency_hz);

		if (fd < 0) {
			err = -errno;
			if (err == -ENODEV)	/* CPU went offline meanwhile */
				continue;
			if (err == -EACCES || err == -EPERM) {
				static char why[192];

				snprintf(why, sizeof(why),
					 "perf_event_open refused: kernel.perf_event_paranoid is %d; run "
					 "as root or `sysctl kernel.perf_event_paranoid=-1`",
					 read_int_file("/proc/sys/kernel/perf_event_paranoid", 2));
				*ret_why = why;
			} else {
				*ret_why = "perf_event_open failed for the sampling event";
			}
			goto out_destroy;
		}
		o->pfds[o->nfds] = fd;
		o->links[o->nfds] = bpf_program__attach_perf_event(o->skel->progs.on_sample, fd);
		o->nfds++;
		if (!o->links[o->nfds - 1]) {
			err = -errno;
			*ret_why = "cannot attach the BPF program to the perf event";
			goto out_destroy;
		}
	}
	o->exec_link = bpf_program__attach(o->skel->progs.on_exec);
	o->exit_link = bpf_program__attach(o->skel->progs.on_exit);
	if (!o->exec_link || !o->exit_link) {
		err = -errno;
		*ret_why = "cannot attach to the sched_process_exec/exit BTF tracepoints";
		goto out_destroy;
	}
	o->rb = ring_buffer__new(bpf_map__fd(o->skel->maps.events), handle_event, o, NULL);
	if (!o->rb) {
		err = -errno;
		*ret_why = "cannot map the BPF ring buffer";
		goto out_destroy;
	}
	free(cpus);
	return o;
out_destroy:
	oncpu__free(o);
	free(cpus);
	errno = -err;
	return NULL;
out_free:
	free(cpus);
	free(o);
	errno = -err;
	return NULL;
}

int oncpu__add_pid(struct oncpu *o, pid_t pid)
{
	__u32 key = pid;
	__u8 one = 1;

	if (!o->filtering)
		return 0;
	if (o->unwinder)
		unwinder__add_pid(o->unwinder, pid);
	return bpf_map__update_elem(o->skel->maps.pids, &key, sizeof(key), &one, sizeof(one), BPF_ANY);
}

int oncpu__poll(struct oncpu *o, int timeout_ms)
{
	uint64_t before = o->delivered;
	int err = ring_buffer__poll(o->rb, timeout_ms);

	if (err < 0 && err != -EINTR)
		return err;
	return (int)(o->delivered - before);
}

void oncpu__free(struct oncpu *o)
{
	if (!o)
		return;
	for (int i = 0; i < o->nfds; i++) {
		bpf_link__destroy(o->links[i]);
		close(o->pfds[i]);
	}
	bpf_link__destroy(o->exec_link);
	bpf_link__destroy(o->exit_link);
	ring_buffer__free(o->rb);
	oncpu_bpf__destroy(o->skel);
	free(o->links);
	free(o->pfds);
	free(o);
}

void oncpu__stats(const struct oncpu *o, struct oncpu_stats *ret)
{
	ret->taken = bpf_percpu_sum(bpf_map__fd(o->skel->maps.errors), GPUSCOPE_ERR_SAMPLES);
	ret->lost = bpf_percpu_sum(bpf_map__fd(o->skel->maps.errors), GPUSCOPE_ERR_RINGBUF_FULL);
	ret->ustack_err = bpf_percpu_sum(bpf_map__fd(o->skel->maps.errors), GPUSCOPE_ERR_USTACK);
	ret->kstack_err = bpf_percpu_sum(bpf_map__fd(o->skel->maps.errors), GPUSCOPE_ERR_KSTACK);
	ret->delivered = o->delivered;
	ret->ncpus = o->nfds;
	ret->event = o->event;
}

/* ---- the agent module (run mode) ---------------------------------------------------------- */

static struct {
	struct oncpu *o;
	struct agent *a;
	uint64_t batch_errors, stack_errors, relabel_dropped;
	uint64_t first_sample_ns;	/* CLOCK_MONOTONIC of the first sample batched; 0: none */
} mod;

static void module_sample(void *ctx, const struct gpuscope_ev_cpu_sample *ev, const __u64 *frames)
{
	struct agent *a = ctx;
	char comm[GPUSCOPE_COMM_LEN + 1];
	struct agent_labels L;
	int64_t stack;

	memcpy(comm, ev->comm, GPUSCOPE_COMM_LEN);
	comm[GPUSCOPE_COMM_LEN] = 0;
	if (agent__pid_labels(a, ev->tgid, ev->tid, comm, &L) == LABELS_DROPPED) {
		mod.relabel_dropped++;
		return;
	}
	/* an autograd thread's samples go under the backward call it works for */
	stack = agent__thread_stack(a, ev->tgid, ev->tid, frames, ev->kstack_len,
				    frames + ev->kstack_len, ev->ustack_len);
	if (stack < 0) {
		mod.stack_errors++;
		return;
	}
	if (batch__sample(a->batch, ev->ktime_ns + a->mono_to_wall_ns, L.l, L.n, stack, SAMPLE_CPU,
			  1))
		mod.batch_errors++;
	else if (!mod.first_sample_ns)
		mod.first_sample_ns = ev->ktime_ns;
}

static void module_proc(void *ctx, pid_t tgid, bool exec, uint64_t ktime_ns)
{
	struct agent *a = ctx;

	symbolizer__pid_gone(a->sym, tgid, exec, ktime_ns);
}

static int module_start(struct agent *a)
{
	struct oncpu_opts opts = {
		.frequency_hz = a->opts.frequency_hz ? a->opts.frequency_hz : 99,
		.pids = a->opts.pids,
		.npids = a->opts.npids,
		.unwinder = agent__unwinder(a),
	};
	const char *why;
	int err;

	mod.a = a;
	mod.first_sample_ns = 0;
	mod.o = oncpu__new(&opts, module_sample, module_proc, a, &why);
	if (!mod.o) {
		err = -errno;
		log_error("CPU sampler: %s", why ? why : strerror(errno));
		return err;
	}
	bpf_counters__set(GPUSCOPE_PROG_CPU, bpf_map__fd(mod.o->skel->maps.errors));
	a->shared.sampling_hz = opts.frequency_hz;	/* trace windows' budget counts it */
	return 0;
}

static int module_tick(struct agent *a)
{
	return mod.o ? oncpu__poll(mod.o, 0) : 0;
}

static void module_stop(struct agent *a)
{
	if (mod.o)
		oncpu__poll(mod.o, 0);
	bpf_counters__set(GPUSCOPE_PROG_CPU, -1);
	oncpu__free(mod.o);
	mod.o = NULL;
	a->shared.sampling_hz = 0;
}

static void module_metrics(struct agent *a, FILE *out)
{
	struct oncpu_stats s;

	if (!mod.o)
		return;
	oncpu__stats(mod.o, &s);
	prom_counter(out, "gpuscope_agent_cpu_samples_total", "CPU samples taken by the BPF sampler.",
		     s.taken);
	prom_family(out, "gpuscope_agent_cpu_samples_dropped_total", "counter",
		    "CPU samples lost, by reason.");
	prom_sample1_u64(out, "gpuscope_agent_cpu_samples_dropped_total", "reason", "ringbuf_full",
			 s.lost);
	prom_sample1_u64(out, "gpuscope_agent_cpu_samples_dropped_total", "reason", "stack_error",
			 mod.stack_errors);
	prom_sample1_u64(out, "gpuscope_agent_cpu_samples_dropped_total", "reason", "batch_error",
			 mod.batch_errors);
	prom_sample1_u64(out, "gpuscope_agent_cpu_samples_dropped_total", "reason", "relabel_drop",
			 mod.relabel_dropped);
	/* when it was taken, not read: the main loop reads it after every module started */
	if (mod.first_sample_ns && a->start_ns && mod.first_sample_ns >= a->start_ns)
		prom_gauge(out, "gpuscope_agent_first_sample_seconds",
			   "Seconds from the agent's start to its first CPU sample (when taken).",
			   (mod.first_sample_ns - a->start_ns) / 1e9);
}

const struct agent_module oncpu_module = {
	.name = "cpu-sampler",
	.start = module_start,
	.tick = module_tick,
	.stop = module_stop,
	.metrics = module_metrics,
};
