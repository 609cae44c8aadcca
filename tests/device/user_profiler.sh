#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# torch.profiler inside a process gpuscope traces (issue 31 item 3), on the GPU machine. A
# launch-bound loop profiled for STEPS steps (CPU + CUDA activities, user_profiler.py):
#   a) bare (no library, no agent), then with the library injected under an agent:
#   b) default options, torch.profiler started as soon as a budget window opened,
#   b2) default options, started inside an on-demand capture window (20 s, POST /api/v1/capture),
#   c) --gpu-trace-budget 100% (continuous), started inside the continuous window.
# Prints per run the CUDA events torch.profiler got, their ratio to (a), the statuses of our
# gpu_trace_window intervals of that process (expect one "yielded" in b-c, then "user profiler"
# refusals while the profiler held CUPTI) and the agent's hand-over counters.
# Needs $D (default .dev/cupti) from tests/device/pack-agent.sh: bin/ (agent, server) and
# libgpuscope_cupti.so. Results in $OUT: summary.txt, log.txt, raw.tar.gz.
# Usage (repository root, as root): tests/device/user_profiler.sh [RUNS]
set -u
runs=${1:-1}
D=${D:-$PWD/.dev/cupti}
RET=${OUT:-/tmp/user-profiler}
W=$(mktemp -d /tmp/userprof.XXXX)
PY=$PWD/tests/device/user_profiler.py
mkdir -p "$RET"
exec > >(tee "$RET/log.txt") 2>&1
. "$(dirname "$0")/lib.sh"
nvidia-smi -L; uname -r
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
cupti_dir=$(cupti_lib_dir)
echo "libcupti: ${cupti_dir:-none found in the nvidia wheels}"
export GPUSCOPE_CUPTI_LIBRARY=$D/libgpuscope_cupti.so	# the agent attaches at start
export STEPS=${STEPS:-150}
start_server
echo "server $url"
M=http://127.0.0.1:9401/metrics

apid=
agent_start() {	# name, agent options...
	local name=$1; shift
	ours "$D/bin/gpuscope-agent" run --server "$url" --node userprof --push-interval 1s \
		--metrics-listen 127.0.0.1:9401 "$@" > "$W/agent-$name.out" 2> "$W/agent-$name.log" &
	apid=$!
	wait_agent_metrics "$apid" 9401 || echo "agent $name: no /metrics"
}
agent_stop() {	# name
	sleep 3	# the last window closed, records pushed
	curl -s "$M" > "$W/metrics-$1.txt"
	kill -TERM "$apid"; wait "$apid"
}
run() {	# name, mode, injected (0/1)
	local name=$1 mode=$2 inj=$3
	if [ "$inj" = 1 ]; then
		CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" \
			GPUSCOPE_CUPTI_DEBUG=1 timeout 400 python3 "$PY" "$mode" "$M" "$url" userprof \
			> "$W/$name.json" 2> "$W/$name.err" || echo "$name failed: $?"
	else
		timeout 400 python3 "$PY" bare > "$W/$name.json" 2> "$W/$name.err" || echo "$name failed: $?"
	fi
	sed "s/^/$name /" "$W/$name.json"
}
windows() {	# name: our gpu_trace_window intervals of that run's process
	local pid
	pid=$(grep -o '"pid": [0-9]*' "$W/$1.json" | grep -o '[0-9]*$')
	[ -n "$pid" ] || return
	curl -s "$url/api/v1/intervals?since=30m&kind=gpu_trace_window&selector=%7Bpid%3D%22$pid%22%7D" \
		> "$W/windows-$1.json"
}

for r in $(seq "$runs"); do
	run "a-bare-$r" bare 0
	agent_start "b-default-$r"; run "b-default-$r" budget 1; agent_stop "b-default-$r"
	windows "b-default-$r"
	agent_start "b2-capture-$r"; run "b2-capture-$r" capture 1; agent_stop "b2-capture-$r"
	windows "b2-capture-$r"
	agent_start "c-cont-$r" --gpu-trace-budget 100%; run "c-cont-$r" continuous 1
	agent_stop "c-cont-$r"; windows "c-cont-$r"
done
kill -TERM "$spid"; wait "$spid"
grep -h "gpuscope-cupti\]" "$W"/*.err | grep -iE "hand|interpos|user|let go" | sort | uniq -c | head -20
python3 - "$W" <<'EOF' | tee "$RET/summary.txt"
import glob, json, os, re, sys
w = sys.argv[1]
runs = {}
for f in sorted(glob.glob(w + "/*.json")):
    name = os.path.basename(f)[:-5]
    if name.startswith(("windows-", "metrics-")):
        continue
    try:
        runs[name] = json.loads(open(f).read().strip().splitlines()[-1])
    except (ValueError, IndexError):
        runs[name] = None
bare = [r["events_cuda"] for n, r in runs.items() if n.startswith("a-") and r]
base = sum(bare) / len(bare) if bare else 0
print("%-16s %12s %8s %10s %8s %8s  %s" % ("run", "cuda_events", "ratio", "kernels", "wait_s",
                                           "prof_s", "our windows (status: count)"))
for n, r in runs.items():
    if not r:
        print("%-16s failed" % n)
        continue
    st = {}
    wf = "%s/windows-%s.json" % (w, n)
    if os.path.exists(wf):
        for s in re.findall(r'"status"\s*:\s*"([^"]*)"', open(wf).read()):
            st[s] = st.get(s, 0) + 1
    print("%-16s %12d %8.4f %10d %8.1f %8.2f  %s" % (
        n, r["events_cuda"], r["events_cuda"] / base if base else 0, r["kernels"], r["wait_s"],
        r["profile_s"], ", ".join("%s: %d" % kv for kv in sorted(st.items())) or "-"))
for f in sorted(glob.glob(w + "/metrics-*.txt")):
    keep = [l for l in open(f) if re.match(
        r"gpuscope_agent_cupti_(windows_yielded|windows_refused_total\{why=\"(user_profiler|cupti_busy)\"|user_profiler_released|windows_total)", l)]
    print(os.path.basename(f)[8:-4] + ": " + "; ".join(l.strip() for l in keep))
EOF
tar -C "$W" --exclude=store -czf "$RET/raw.tar.gz" .
ls -la "$RET"
