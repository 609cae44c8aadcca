#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Python frames on the GPU machine (issue #13): gpuscope-server + gpuscope-agent run (every
# module) around tests/device/pystacks_torch.py with the CUPTI library injected, then the checks
# of tests/device/pystacks_check.py against the server's API, the agent's Python/unwind counters,
# its peak RSS and CPU. Needs .dev/agent from tests/device/pack-agent.sh (bin/, lib/,
# libgpuscope_cupti.so). Results in $OUT: summary.txt, agent-metrics.txt, logs.
# Usage (repository root, as root): tests/device/pystacks_device.sh [SECONDS]
set -u
D=${AGENT_DIR:-$PWD/.dev/agent}
RET=${OUT:-/tmp/pystacks-device}
W=$(mktemp -d /tmp/pystacks.XXXX)
mkdir -p "$RET"
. "$(dirname "$0")/lib.sh"
uname -r; nvidia-smi -L 2>&1 | head -2
python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
cupti_dir=$(cupti_lib_dir)

start_server
# BPF run time per program (fdinfo's run_time_ns / run_cnt) while the loop runs
sysctl -qw kernel.bpf_stats_enabled=1 2>/dev/null || echo 1 > /proc/sys/kernel/bpf_stats_enabled
# AGENT_ARGS: more agent options (e.g. --gpu-trace-budget 100% for kernels in every step)
ours "$D/bin/gpuscope-agent" run --server "$url" --push-interval 2s --metrics-listen 127.0.0.1:9400 \
	${AGENT_ARGS:-} > "$W/agent.out" 2> "$W/agent.log" &
apid=$!
smaps_by_name() {	# pid: resident MB by mapping (heap and anonymous, BPF maps, files)
	awk '/^[0-9a-f]+-[0-9a-f]+ /{n = NF >= 6 ? $6 : "[anon]"; if (n ~ /^anon_inode:bpf/) n = "bpf:" $NF}
		/^Rss:/{r[n] += $2} END{for (k in r) if (r[k] >= 1024) printf "%8.1f MB  %s\n", r[k] / 1024, k}' \
		/proc/$1/smaps | sort -rn | head -25
}
( peak=0; while kill -0 $apid 2>/dev/null; do	# the agent's memory at its peak, 4 times a second
	r=$(awk '/^VmRSS/{print $2}' /proc/$apid/status 2>/dev/null)
	if [ "${r:-0}" -gt "$peak" ]; then
		peak=$r; { echo "VmRSS $r kB at $(date +%T)"; grep -E '^(RssAnon|RssFile|RssShmem)' \
			/proc/$apid/status; smaps_by_name $apid; } > "$RET/agent-peak.txt.tmp" &&
			mv "$RET/agent-peak.txt.tmp" "$RET/agent-peak.txt"
	fi
	sleep 0.25
done ) &
sleep 4
read -r a_ut a_st < <(awk '{print $14, $15}' /proc/$apid/stat)
t0=$(date +%s.%N)
CUDA_INJECTION64_PATH=$D/libgpuscope_cupti.so LD_LIBRARY_PATH="$cupti_dir" \
	timeout 200 python3 tests/device/pystacks_torch.py "${1:-25}" > "$W/work.out" 2> "$W/work.err"
t1=$(date +%s.%N)
read -r b_ut b_st < <(awk '{print $14, $15}' /proc/$apid/stat)
wpid=$(awk '/^pid /{print $2; exit}' "$W/work.out")
tail -2 "$W/work.out"; tail -3 "$W/work.err"
sleep 4	# the last push
python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9400/metrics', timeout=30).read().decode())" > "$RET/agent-metrics.txt"
grep VmHWM /proc/$apid/status | tee "$W/agent-rss.txt"
smaps_by_name $apid > "$RET/agent-smaps.txt"	# and at the end of the loop
for f in /proc/$apid/fdinfo/*; do
	grep -q '^prog_tag' "$f" 2>/dev/null || continue
	awk -v fd="${f##*/}" '/^prog_type|^prog_id|^run_time_ns|^run_cnt/{printf "%s=%s ", $1, $2} END{print "fd=" fd}' "$f"
done | tee "$RET/bpf-progs.txt" | awk '{delete v; for(i=1;i<=NF;i++){split($i,a,"=");v[a[1]]=a[2]} if (v["run_cnt:"]>0) printf "bpf prog %s type %s: %d runs, %.0f ns/run\n", v["prog_id:"], v["prog_type:"], v["run_cnt:"], v["run_time_ns:"]/v["run_cnt:"]}' | tee "$W/bpf-stats.txt"
kill -TERM $apid
for _ in $(seq 300); do kill -0 $apid 2>/dev/null || break; sleep 0.1; done
kill -KILL $apid 2>/dev/null; wait $apid
python3 - "$a_ut" "$a_st" "$b_ut" "$b_st" "$t0" "$t1" <<'PY' | tee -a "$W/agent-rss.txt"
import os, sys
a_ut, a_st, b_ut, b_st, t0, t1 = map(float, sys.argv[1:7])
cpu = ((b_ut + b_st) - (a_ut + a_st)) / os.sysconf("SC_CLK_TCK")
print("agent CPU during the loop: %.2f s over %.1f s = %.2f %% of one core" % (cpu, t1 - t0, 100 * cpu / (t1 - t0)))
PY
grep -E '^gpuscope_agent_(python|unwind|symbolizer_frames)_|^gpuscope_agent_(resident|malloc|stack_cache|symbolizer_cache|cupti_queue|cupti_ring|cupti_backward|cupti_torch)' "$RET/agent-metrics.txt" | grep -v ' 0$'
{
	echo "python pid $wpid"
	python3 tests/device/pystacks_check.py "$url" "$wpid" $(python3 -c '
import json, sys
ph = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{\"cpu\"")]
print("%.3f %.3f" % (ph[0]["cpu"][0] / 1e9, ph[-1]["gpu"][1] / 1e9) if ph else "")' "$W/work.out")
	echo "rc $?"
	cat "$W/agent-rss.txt"
	cat "$W/bpf-stats.txt"
} 2>&1 | tee "$RET/summary.txt"
tail -20 "$W/agent.log" > "$RET/agent-log-tail.txt"
cp "$W/work.err" "$RET/" 2>/dev/null
# the process's CPU profile as pprof, for a look with go tool pprof where this machine has none
(ours "$D/bin/gpuscope" pprof --server "$url" --since 30m --selector "{pid=\"$wpid\"}" \
	-o "$RET/cpu.pb.gz" > /dev/null 2>&1) || true
kill -TERM $spid; wait $spid
grep -q "^rc 0" "$RET/summary.txt"
