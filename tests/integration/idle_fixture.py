# SPDX-License-Identifier: Apache-2.0
"""Synthetic recordings with a known truth for the GPU-idle estimator (test_gpu_idle_estimate.py,
bench/estimator): a training process whose steps alternate a CPU phase (GPU idle) with a GPU
phase, after a start-up at full idle, with aperiodic data-loading stalls and a change of the CPU
phase half-way; a second thread independent of the steps. What the default agent records of it
(GPM at 100 ms deciding only whole-idle or whole-busy pieces, 1 %-budget trace windows at
jittered spacing, an idle-triggered window) and what continuous tracing would have said (every
sample's true GPU state) come out of one seeded generator."""
import random

MS = 1_000_000
S = 1_000_000_000


def pick(rng, mix):
    """A function name drawn from [(name, weight), ...]."""
    x, acc = rng.random(), 0.0
    for name, w in mix:
        acc += w
        if x < acc:
            return name
    return mix[-1][0]


STARTUP = [("import_module", 0.5), ("load_weights", 0.3), ("compile_regex", 0.2)]
CPU_A = [("tokenize", 0.6), ("collate", 0.25), ("to_tensor", 0.15)]
CPU_B = [("tokenize", 0.4), ("augment", 0.45), ("collate", 0.15)]
GPU_PHASE = [("launch_kernels", 0.7), ("cuda_sync", 0.3)]
WORKER = [("decode_jpeg", 0.7), ("read_file", 0.3)]


class Recording:
    """One node's recording over [t0, t0 + dur_s): busy intervals (the truth), samples with
    their true idle state, and the default agent's observations."""

    def __init__(self, seed, t0, node, dur_s=240, startup_s=30, hz=99, window_s=0.5,
                 spacing_s=20.0):
        rng = random.Random(seed)
        self.node, self.t0, self.t1 = node, t0, t0 + dur_s * S
        busy = []  # true GPU busy intervals, sorted
        phases = []  # (start, end, mix) of the main thread
        phases.append((t0, t0 + startup_s * S, STARTUP))
        t = t0 + startup_s * S
        next_stall = t + int(rng.expovariate(1 / 20) * S)
        half = t0 + (startup_s + (dur_s - startup_s) // 2) * S
        while t < self.t1:
            if t >= next_stall:
                ln = int(rng.uniform(0.3, 1.0) * S)
                phases.append((t, t + ln, [("wait_for_batch", 1.0)]))
                t += ln
                next_stall = t + int(rng.expovariate(1 / 20) * S)
                continue
            cpu = int((3 if t < half else 5) * MS + rng.uniform(-0.5, 0.5) * MS)
            gpu = int(10 * MS + rng.uniform(-0.5, 0.5) * MS)
            phases.append((t, t + cpu, CPU_A if t < half else CPU_B))
            phases.append((t + cpu, t + cpu + gpu, GPU_PHASE))
            busy.append((t + cpu, t + cpu + gpu))
            t += cpu + gpu
        self.busy = busy
        # samples: each thread at hz with its own phase and a little jitter
        self.samples = []  # (t, tid, function, idle)
        bi = pi = 0
        period = S // hz
        ts = t0 + int(rng.random() * period)
        while ts < self.t1:
            while pi + 1 < len(phases) and phases[pi][1] <= ts:
                pi += 1
            while bi < len(busy) and busy[bi][1] <= ts:
                bi += 1
            idle = not (bi < len(busy) and busy[bi][0] <= ts)
            self.samples.append((ts, 1, pick(rng, phases[pi][2]), idle))
            ts += period + int(rng.uniform(-0.2, 0.2) * MS)
        ts = t0 + int(rng.random() * period)
        bi = 0
        while ts < self.t1:
            while bi < len(busy) and busy[bi][1] <= ts:
                bi += 1
            idle = not (bi < len(busy) and busy[bi][0] <= ts)
            self.samples.append((ts, 2, pick(rng, WORKER), idle))
            ts += period + int(rng.uniform(-0.2, 0.2) * MS)
        # GPM at 100 ms: a piece decides only when wholly idle or wholly busy
        self.observed, self.obs_busy = [], []  # (start, end, labels)
        bi = 0
        for k in range(dur_s * 10):
            a, b = t0 + k * 100 * MS, t0 + (k + 1) * 100 * MS
            while bi < len(busy) and busy[bi][1] <= a:
                bi += 1
            j, cov = bi, 0
            while j < len(busy) and busy[j][0] < b:
                cov += min(b, busy[j][1]) - max(a, busy[j][0])
                j += 1
            if cov == 0:
                self.observed.append((a, b, "source=gpm"))
            elif cov == b - a:
                self.observed.append((a, b, "source=gpm"))
                self.obs_busy.append((a, b, "source=gpm"))
        # budget windows: the agent's spacing x (0.5 + golden-ratio jitter), from a random phase
        self.windows = []
        phase = rng.random()
        w = t0 + int(rng.uniform(1, 5) * S)
        while w + window_s * S < self.t1:
            self.windows.append((w, w + int(window_s * S), "budget"))
            phase = (phase + 0.6180339887498949) % 1
            w += int(spacing_s * (0.5 + phase) * S)
        # an idle-triggered window at a stall (it decides only its own time)
        stalls = [p for p in phases if p[2][0][0] == "wait_for_batch"]
        if stalls:
            s0 = stalls[len(stalls) // 2][0] + 50 * MS
            self.windows.append((s0, s0 + int(window_s * S), "idle"))

    def truth(self):
        """Continuous tracing's answer: function -> idle samples."""
        out = {}
        for _, _, fn, idle in self.samples:
            if idle:
                out[fn] = out.get(fn, 0) + 1
        return out

    def script(self):
        """batchgen lines of the default agent's recording."""
        lines = [f"node {self.node}"]
        for t, tid, fn, _ in self.samples:
            lines.append(f"sample {t} cpu 1 pid=100,tid={tid},comm=train main;{fn}")
        for a, b, lab in self.observed:
            lines.append(f"interval gpu_observed gpu=0,{lab} {a} {b} -")
        for a, b, lab in self.obs_busy:
            lines.append(f"interval gpu_busy gpu=0,{lab} {a} {b} -")
        for a, b, reason in self.windows:
            lines.append(f"interval gpu_observed gpu=0,source=kernels,reason={reason} {a} {b} -")
            for x, y in self.busy:
                if y > a and x < b:
                    lines.append(f"interval gpu_busy gpu=0,source=kernels {max(a, x)} {min(b, y)} -")
        return "\n".join(lines) + "\n"
