#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Unwind tables on the GPU machine (issue #13): build time, FDEs, rows and BPF bytes for libcuda,
# libtorch_cpu.so, libtorch_cuda.so, the Python executable and libc (bench/unwind/tablebench),
# then `gpuscope-agent record` on a PyTorch loop (tests/device/unwind_torch.py): its unwind
# summary (tables loaded, frames by tables / frame pointers, truncated walks) and the agent's peak
# RSS. Needs AGENT_DIR (default .devcarry/native) with bin/gpuscope-agent, bin/tablebench, lib/.
# Results in $OUT: tables.txt, record.txt, agent_rss.txt.
# Usage (repository root, as root): tests/device/unwind_tables.sh [SECONDS]
set -u
D=${AGENT_DIR:-$PWD/.devcarry/native}
RET=${OUT:-/tmp/unwind-device}
mkdir -p "$RET"
export LD_LIBRARY_PATH=$D/lib
nproc; uname -r
py=$(readlink -f "$(command -v python3)")
tl=$(python3 -c "import os, torch; d=os.path.join(os.path.dirname(torch.__file__), 'lib'); print(' '.join(os.path.join(d, f) for f in ('libtorch_cpu.so', 'libtorch_cuda.so') if os.path.exists(os.path.join(d, f))))")
cuda=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
libpy=$(ldd "$py" | awk '/libpython/{print $3}')
ls -la $tl $cuda 2>&1
"$D/bin/tablebench" -r 1 $cuda $tl $py $libpy /lib/x86_64-linux-gnu/libc.so.6 | tee "$RET/tables.txt"

python3 "$(dirname "$0")/unwind_torch.py" "${1:-30}" > "$RET/torch.out" 2>&1 &
wp=$!
sleep 12	# import torch, first kernels
"$D/bin/gpuscope-agent" record --duration 12s --frequency 99 --pid $wp --top 25 \
	--folded "$RET/torch.folded" > "$RET/record.txt" 2>&1 &
ap=$!
while kill -0 $ap 2>/dev/null; do
	grep -E 'VmHWM|VmRSS' /proc/$ap/status > "$RET/agent_rss.tmp" 2>/dev/null && mv "$RET/agent_rss.tmp" "$RET/agent_rss.txt"
	sleep 0.5
done
wait $ap
kill $wp 2>/dev/null; wait $wp 2>/dev/null
cat "$RET/agent_rss.txt"; tail -4 "$RET/record.txt"
python3 - "$RET/torch.folded" <<'PY' | tee -a "$RET/record.txt"
import sys
st = {}
for l in open(sys.argv[1]):
    s, n = l.rsplit(" ", 1); st[s] = st.get(s, 0) + int(n)
t = sum(st.values()) or 1
for frag in ("[truncated]", "[unknown]", "python_phase", "[python]"):
    print("%-14s %5.1f %% of %d samples" % (frag, 100.0 * sum(n for s, n in st.items() if frag in s) / t, t))
PY
