#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Trace-window benchmark of issue 14, on the GPU machine. Needs $D (default .dev/cupti) from
# tests/device/pack-agent.sh plus libgpuscope_cupti.so, trace_workload.py, trace_analyze.py.
# Part 1 (what removes CUPTI's cost): one process per close mode (GPUSCOPE_CUPTI_CLOSE=finalize,
#   unsubscribe, disable) under an agent with a fixed duty cycle (1 s window every 3 s); steps
#   inside and well outside windows are compared with a bare process and with an injected process
#   that never gets a window.
# Part 2 (the table): launch / gpt2 / train phases, ROUNDS interleaved rounds in rotating order of
#   bare, gpuscope default (agent with every module, --gpu-trace-budget 1%), continuous tracing
#   (--gpu-trace-budget 100%), torch.profiler (in-process, post-processing apart).
# Results in $OUT: summary.txt, results.json, log.txt, raw.tar.gz.
# Usage (repository root, as root): tests/device/trace_budget.sh [ROUNDS] [PART...]
set -u
rounds=${1:-2}
parts=${2:-"1 2"}
D=${D:-$PWD/.dev/cupti}
RET=${OUT:-/tmp/trace-budget}
W=$(mktemp -d /tmp/trace.XXXX)
mkdir -p "$RET"
exec > >(tee "$RET/log.txt") 2>&1
. "$(dirname "$0")/lib.sh"
nvidia-smi -L; uname -r
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
cupti_dir=$(cupti_lib_dir)
echo "libcupti: $cupti_dir"
WL="python3 $D/trace_workload.py"
export GPUSCOPE_CUPTI_LIBRARY=$D/libgpuscope_cupti.so	# the agent attaches at start
start_server
echo "server $url"

apid=
agent_start() {	# name, agent options...
	local name=$1; shift
	ours "$D/bin/gpuscope-agent" run --server "$url" --push-interval 1s \
		--metrics-listen 127.0.0.1:9400 "$@" > "$W/agent-$name.out" 2> "$W/agent-$name.log" &
	apid=$!
	for _ in $(seq 100); do curl -sf http://127.0.0.1:9400/metrics > /dev/null && break; sleep 0.1; done
	read -r AUT AST < <(awk '{print $14, $15}' /proc/$apid/stat)
	AT0=$(date +%s.%N)
}
agent_stop() {	# name
	read -r BUT BST < <(awk '{print $14, $15}' /proc/$apid/stat)
	echo "agent_cpu $1 $(( BUT - AUT + BST - AST )) ticks over $(awk -v a="$AT0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}') s" \
		>> "$W/agent_cpu.txt"
	sleep 2.5	# last windows closed, records pushed
	curl -s http://127.0.0.1:9400/metrics > "$W/metrics-$1.txt"
	kill -TERM $apid; wait $apid
}
inj() {	# name, phases...: the workload with the library injected
	local name=$1; shift
	CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" GPUSCOPE_CUPTI_DEBUG=1 \
		timeout 200 $WL "$@" > "$W/$name.jsonl" 2> "$W/$name.err" || echo "$name failed: $?"
	grep -h '"summary"' "$W/$name.jsonl" | sed "s/^/$name /"
}
bare() {	# name, phases...
	local name=$1; shift
	timeout 200 $WL "$@" > "$W/$name.jsonl" 2> "$W/$name.err" || echo "$name failed: $?"
	grep -h '"summary"' "$W/$name.jsonl" | sed "s/^/$name /"
}
top() {	# name: GPU time by kernel of that run's process, from the server
	local pid
	pid=$(grep -ho '"pid": [0-9]*' "$W/$1.jsonl" | head -1 | grep -o '[0-9]*$')
	curl -s "$url/api/v1/top?since=30m&kind=gpu_kernel_ns&limit=200&selector=%7Bpid%3D%22$pid%22%7D" \
		> "$W/top-$1.json"
	curl -s "$url/api/v1/intervals?since=30m&kind=gpu_trace_window&selector=%7Bpid%3D%22$pid%22%7D" \
		> "$W/windows-$1.json"
}

if [[ " $parts " == *" 1 "* ]]; then
	echo "== part 1: close modes"
	export PHASE_S=5
	bare c-bare launch gpt2
	inj c-noagent launch gpt2
	for m in finalize unsubscribe disable; do
		agent_start "c-$m" --gpu-trace-period 3s --gpu-trace-window 1s
		GPUSCOPE_CUPTI_CLOSE=$m inj "c-$m" launch gpt2
		agent_stop "c-$m"
	done
fi

if [[ " $parts " == *" 2 "* ]]; then
	echo "== part 2: table"
	export PHASE_S=6
	for r in $(seq "$rounds"); do
		for k in 0 1 2 3; do
			case $(( (k + r) % 4 )) in
			0) bare "t-bare-$r" launch gpt2 train ;;
			1) agent_start "t-default-$r"; inj "t-default-$r" launch gpt2 train
			   agent_stop "t-default-$r"; top "t-default-$r" ;;
			2) agent_start "t-cont-$r" --gpu-trace-budget 100%
			   inj "t-cont-$r" launch gpt2 train; agent_stop "t-cont-$r"; top "t-cont-$r" ;;
			3) PHASE_S=3 bare "t-prof-$r" prof:launch prof:gpt2 prof:train ;;
			esac
		done
	done
fi
kill -TERM $spid; wait $spid
tail -n 3 "$W"/*.err | head -60
cat "$W/agent_cpu.txt"
grep -h "windows_total\|closed_early\|window_seconds\|window_cost\|refused" "$W"/metrics-*.txt | sort | uniq -c | head -30
python3 "$D/trace_analyze.py" "$W" | tee "$RET/summary.txt"
cp "$W/results.json" "$RET/" 2>/dev/null
tar -C "$W" --exclude=store -czf "$RET/raw.tar.gz" .
ls -la "$RET"
