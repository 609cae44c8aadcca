#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The findings engine on the GPU machine (issue 34, docs/insights.md): six PyTorch workloads
# (tests/device/insights_workloads.py: per-step .item(), tokenizing on the training thread, a
# starved DataLoader, a launch-bound decode loop, pageable copies, a healthy large-matmul loop),
# one after another under one agent with its defaults (AGENT_ARGS adds flags), each RUN_S
# seconds; then /api/v1/insights over each workload's own range and process (by=pid), printing
# the expected finding against what came, the false findings and the healthy one's count; for a
# workload whose expected finding did not come, or that got another, the facts the rules
# compared (facts=1).
# Needs $D (default .dev/agent) from tests/device/pack-agent.sh with libgpuscope_cupti.so.
# Results in $OUT: summary.txt, insights.json (each answer whole, facts included). About 4
# minutes.
# MODES picks workloads (default: all six, in this order).
# Usage (repository root, as root): [MODES="item healthy"] tests/device/insights_workloads.sh [RUN_S=25]
set -u
D=${D:-$PWD/.dev/agent}
RET=${OUT:-/tmp/insights-workloads}
run_s=${1:-25}
W=$(mktemp -d /tmp/insights.XXXX)
mkdir -p "$RET"
. "$(dirname "$0")/lib.sh"
nvidia-smi -L
cupti_dir=$(cupti_lib_dir)
export GPUSCOPE_CUPTI_LIBRARY=$D/libgpuscope_cupti.so
ours "$D/bin/gpuscope-server" --data "$W/store" --listen 127.0.0.1:0 --settle 1s \
	--gpu-hour-price 3.00 > "$W/server.out" 2> "$W/server.log" &
spid=$!
for _ in $(seq 100); do grep -q listening "$W/server.out" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$W/server.out" | head -1)
echo "server $url"
ours "$D/bin/gpuscope-agent" run --server "$url" --node dev --push-interval 2s \
	--metrics-listen 127.0.0.1:9400 ${AGENT_ARGS:-} > "$W/agent.out" 2> "$W/agent.log" &
apid=$!
wait_agent_metrics $apid 9400 || { echo "agent did not start"; tail "$W/agent.log"; exit 1; }
sleep 2
: > "$W/runs"
for mode in ${MODES:-item tokenize starved decode pageable healthy}; do
	CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" RUN_S=$run_s \
		python3 tests/device/insights_workloads.py $mode 2> "$W/$mode.err"
	grep -E '^(started|ended)' "$W/$mode.err" | tr '\n' ' '; echo "($mode)"
	t0=$(awk '/^started/ {print $2}' "$W/$mode.err")
	pid=$(awk '/^started/ {print $3}' "$W/$mode.err")
	t1=$(awk '/^ended/ {print $2}' "$W/$mode.err")
	[ -n "$pid" ] || { echo "$mode failed:"; tail -5 "$W/$mode.err"; }
	echo "$mode ${pid:-0} ${t0:-0} ${t1:-0}" >> "$W/runs"
done
sleep 6	# the last push
kill -INT $apid; wait $apid
python3 - "$url" "$W/runs" "$RET" <<'PY' | tee "$RET/summary.txt"
import json, sys, urllib.error, urllib.parse, urllib.request
url, runs, ret = sys.argv[1], sys.argv[2], sys.argv[3]
EXPECT = {"item": "host_sync_per_step", "tokenize": "input_on_launch_thread",
          "starved": "starved_dataloader", "decode": "launch_bound",
          "pageable": "sync_copies", "healthy": None}
def get(path, **q):
    try:
        return json.load(urllib.request.urlopen(url + path + "?" + urllib.parse.urlencode(q),
                                                timeout=300))
    except urllib.error.HTTPError as e:
        return {"error": e.read().decode(errors="replace"), "findings": []}
FACTS_LINE = ("fired %(fired)s; checked %(checked)s, busy %(busy)s, idle %(seg_idle_s)s s "
              "in the span; launching tid %(launch_tid)s of %(launchers)s launching threads; "
              "on CPU %(on_cpu)s (side %(side_on_cpu)s), blocked %(blocked)s (raw "
              "%(blocked_raw)s, %(blocked_reason)s), helpers %(helpers)s, workers %(workers)s, "
              "node CPUs %(node_cpu)s (others %(node_others)s, read %(node_cpu_read)s), no CPU "
              "%(no_cpu)s; samples %(idle_samples)s, framework %(fw_share)s; syncs %(sync_steps)s "
              "(%(sync_rate)s/s, %(sync_s)s s at %(sync_at)s), seen %(sync_seen)s, drained "
              "%(sync_drained)s (%(drain)s), gaps %(gap_idle_s)s s, follow %(follow)s; copies "
              "%(copy_calls)s (%(copy_s)s s, idle share %(copy_idle)s); kernels %(kernels)s of "
              "%(mean_kernel_us)s us in %(traced_s)s s traced")
ans, hit, false = {}, 0, 0
print("%-9s %-24s %-40s %s" % ("workload", "expected", "got (GPU-s at stake, confidence)", ""))
for line in open(runs):
    mode, pid, t0, t1 = line.split()
    a = get("/api/v1/insights", **{"from": t0, "to": t1, "by": "pid",
                                   "selector": '{pid="%s"}' % pid, "facts": "1"})
    eff = get("/api/v1/efficiency", **{"from": t0, "to": t1, "by": "pid",
                                       "selector": '{pid="%s"}' % pid, "causes": "1"})
    ans[mode] = {"insights": a, "efficiency": eff}
    kinds = [f["kind"] for f in a.get("findings", [])]
    want = EXPECT[mode]
    ok = (want in kinds) if want else not kinds
    hit += ok
    false += len([k for k in kinds if k != want])
    got = ", ".join("%s (%.1f, %s)" % (f["kind"], f["gpu_seconds_at_stake"], f["confidence"])
                    for f in a.get("findings", [])) or a.get("error", "none")[:60]
    w = (eff.get("workloads") or [{}])[0]
    print("%-9s %-24s %-40s %s" % (mode, want or "(none)", got, "OK" if ok else "MISS"))
    print("          held %.4f GPU-h, utilization %s, source %s" % (
        w.get("held_gpu_hours") or 0, w.get("utilization"),
        (w.get("gpus") or [{}])[0].get("source")))
    for f in a.get("findings", []):
        print("          %s" % f["summary"][:300])
    for x in a.get("facts", []) if not ok or any(k != want for k in kinds) else []:
        # what the rules compared (docs/insights.md, facts=1): why the expected one did not
        # fire, or why another one did
        print("          facts (GPU %s): %s" % (x.get("gpu"), FACTS_LINE % {
            k: (v if not isinstance(v, float) else round(v, 3)) for k, v in x.items()}))
json.dump(ans, open(ret + "/insights.json", "w"), indent=1)
print("\nexpected finding found: %d of %d workloads; false findings: %d (the healthy one: %d)" % (
    hit, len(ans), false, len(ans.get("healthy", {}).get("insights", {}).get("findings", []))))
PY
cp "$W/agent.log" "$W/server.log" "$RET/" 2>/dev/null
kill $spid 2>/dev/null
