#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# DataLoader workers forked every epoch (tests/device/dataloader_fork.py) on the GPU machine:
# `gpuscope-agent record` of the whole machine for SECONDS while the loop runs, with two packed
# agents in turn (OLD_DIR and NEW_DIR from tests/device/pack-agent.sh), ROUNDS rounds
# alternating which goes first. Per agent and round: the workers' (comm dl_worker) samples, the
# share with a [truncated] frame, and the share under the Python transform.
# Usage (repository root, as root):
#   tests/device/fork_workers.sh OLD_DIR NEW_DIR [ROUNDS=2] [SECONDS=8]
set -u
old=${1:?usage: fork_workers.sh OLD_DIR NEW_DIR [ROUNDS] [SECONDS]}
new=${2:?usage: fork_workers.sh OLD_DIR NEW_DIR [ROUNDS] [SECONDS]}
rounds=${3:-2}
secs=${4:-8}
W=$(mktemp -d /tmp/forkw.XXXX)
python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
one() {	# agent dir -> "samples truncated% transform%"
	python3 tests/device/dataloader_fork.py $((secs + 8)) > "$W/work.out" 2> "$W/work.err" &
	local wp=$!
	sleep 4	# CUDA up, the first epochs' workers forked
	LD_LIBRARY_PATH=$1/lib "$1/bin/gpuscope-agent" record --duration "${secs}s" --frequency 499 \
		--folded "$W/f" --top 0 > "$W/rec.out" 2>&1
	wait $wp
	awk '{split($1, a, ";"); n = $NF; if (a[1] != "dl_worker") next; w += n
		if ($0 ~ /\[truncated\]/) t += n; if ($0 ~ /;transform;/) x += n }
		END { printf "%d %.1f %.1f\n", w, 100 * t / (w ? w : 1), 100 * x / (w ? w : 1) }' "$W/f"
}
printf '%-6s %-5s %8s %11s %11s\n' round agent samples truncated% transform%
for r in $(seq "$rounds"); do
	if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
	for which in $order; do
		if [ "$which" = old ]; then d=$old; else d=$new; fi
		read -r n t x < <(one "$d")
		printf '%-6s %-5s %8s %11s %11s\n' "$r" "$which" "$n" "$t" "$x"
	done
done
tail -1 "$W/work.out"
grep -m3 -E 'dl_worker' "$W/f" | sort -t' ' -k2 -nr | head -3 | cut -c1-400
rm -rf "$W"
