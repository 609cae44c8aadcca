#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Default mode against continuous tracing on more workloads (issue 31): each workload of
# tests/device/idle_workloads.py (jax, dataloader, gpt2, graph) runs twice in a row, under the
# agent's defaults and under --gpu-trace-budget 100%; idle_compare.py compares each run's
# GPU-idle answer over the process's life (start-up included) and the share of kernel time under
# the Python function that dispatched it. For jax it also prints what the kernels' launching
# threads are (names, stacks) and what jaxlib's libraries hold (symbols), for the runtime-thread
# join. Needs $D (default .dev/agent) from tests/device/pack-agent.sh with libgpuscope_cupti.so.
# Results in $OUT: summary.txt, answers.json, jaxlib.txt.
# Usage (repository root, as root): tests/device/idle_compare.sh [WORKLOADS="jax dataloader gpt2 graph"]
#   (MODES="default continuous": which runs; one mode alone gives only that run's figures)
set -u
D=${D:-$PWD/.dev/agent}
RET=${OUT:-/tmp/idle-compare}
workloads=${1:-"jax dataloader gpt2 graph"}
export RUN_S=${RUN_S:-25}
W=$(mktemp -d /tmp/idlecmp.XXXX)
mkdir -p "$RET"
. "$(dirname "$0")/lib.sh"
nvidia-smi -L
cupti_dir=$(cupti_lib_dir)
export GPUSCOPE_CUPTI_LIBRARY=$D/libgpuscope_cupti.so
start_server
echo "server $url"
: > "$W/runs"
if [[ " $workloads " == *" jax "* ]]; then	# what jaxlib's libraries hold, for the thread join
	python3 - > "$RET/jaxlib.txt" 2>&1 <<'PY'
import glob, os, subprocess, jax, jaxlib
print("jax", jax.__version__, "jaxlib", jaxlib.__version__)
dirs = [os.path.dirname(jaxlib.__file__)] + glob.glob(os.path.join(os.path.dirname(os.path.dirname(jaxlib.__file__)), "jax_plugins", "*"))
for d in dirs:
    for f in sorted(glob.glob(d + "/**/*.so*", recursive=True)):
        if os.path.getsize(f) < 5 << 20:
            continue
        secs = subprocess.run(["readelf", "-SW", f], capture_output=True, text=True).stdout
        dyn = subprocess.run(["nm", "-DC", "--defined-only", f], capture_output=True, text=True).stdout.splitlines()
        print("== %s %d MB symtab=%s debuglink=%s eh_frame=%s dynsym=%d" % (f, os.path.getsize(f) >> 20,
              ".symtab" in secs, ".gnu_debuglink" in secs, ".eh_frame " in secs, len(dyn)))
        for pat in ("Execute", "Launch", "ThunkExecutor", "ThreadPool", "WorkerLoop", "Dispatch"):
            hits = [l for l in dyn if pat in l]
            print("  %s: %d" % (pat, len(hits)))
            for l in hits[:12]:
                print("    " + l[:200])
PY
fi
for w in $workloads; do
	for mode in ${MODES:-default continuous}; do
		extra=
		[ $mode = continuous ] && extra="--gpu-trace-budget 100%"
		node=$w-$mode
		ours "$D/bin/gpuscope-agent" run --server "$url" --node "$node" --push-interval 2s \
			--metrics-listen 127.0.0.1:9400 $extra > "$W/agent-$node.out" 2> "$W/agent-$node.log" &
		apid=$!
		wait_agent_metrics $apid 9400 || { echo "agent $node did not start"; tail "$W/agent-$node.log"; continue; }
		sleep 1
		t_launch=$(date +%s.%N)
		CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" \
			timeout 150 python3 tests/device/idle_workloads.py $w 2> "$W/$node.err" &
		wpid=$!
		if [ $w = jax ] && [ $mode = continuous ]; then	# the threads JAX runs
			sleep $(( RUN_S / 2 + 8 ))
			ppid=$(pgrep -P $wpid | head -1)
			for t in /proc/$ppid/task/*; do echo "$(basename $t) $(cat $t/comm 2>/dev/null)"; done \
				> "$RET/jax_threads.txt"
		fi
		wait $wpid || { echo "$node failed"; tail -5 "$W/$node.err"; }
		t_end=$(date +%s.%N)
		grep -E '^(started|ended)' "$W/$node.err"
		pid=$(awk '/^started/ {print $3}' "$W/$node.err")
		echo "$w $mode ${pid:-0} $t_launch $t_end" >> "$W/runs"
		sleep 5	# the last push
		curl -s http://127.0.0.1:9400/metrics | grep -E 'cupti_(window|kernels|backward|join)|windows_(total|refused)' > "$W/metrics-$node.txt"
		kill -INT $apid; wait $apid
	done
done
python3 tests/device/idle_compare.py "$url" "$W/runs" "$RET" | tee "$RET/summary.txt"
for f in "$W"/metrics-*.txt; do echo "== $f"; cat "$f"; done >> "$RET/summary.txt"
tar czf "$RET/logs.tar.gz" -C "$W" --exclude store . 2>/dev/null
kill $spid 2>/dev/null
