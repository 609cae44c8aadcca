#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Stacks cut short on a busy machine: `gpuscope-agent record` of the whole machine while two
# CPU spinners, a long-lived Python program (20 frames deep, no frame pointers in CPython), a
# stream of short-lived Python processes and a Python parent that forks a child every 20 ms (each
# child runs 50 ms and exits, as a pre-fork server's or a DataLoader's workers start) run, beside
# whatever else the machine runs. Two agent binaries interleaved, rounds alternating which goes
# first; per binary and round, the share of samples whose stack holds a [truncated] frame: the
# long-lived program's, the short-lived processes', the forked children's, everything's.
# Usage (repository root, as root): [PY=python3.x] bench/unwind/busy.sh OLD_AGENT NEW_AGENT [ROUNDS=3] [SECONDS=4]
set -u
cd "$(dirname "$0")/../.."
old=${1:?usage: busy.sh OLD_AGENT NEW_AGENT [ROUNDS] [SECONDS]}
new=${2:?usage: busy.sh OLD_AGENT NEW_AGENT [ROUNDS] [SECONDS]}
rounds=${3:-3}
secs=${4:-4}
tmp=$(mktemp -d /tmp/gpuscope-bench-busy.XXXXXX)
py=${PY:-/usr/bin/python3}	# (a pyenv shim is a script: give the interpreter itself)
ln -s "$(readlink -f "$py")" "$tmp/pylong"	# comm names the two kinds apart
ln -s "$(readlink -f "$py")" "$tmp/pyshort"
cat > "$tmp/long.py" <<'PY'
import time
def f(n):
    return f(n - 1) if n else sum(range(10**5))
while True:
    f(20)
PY
cat > "$tmp/fork.py" <<'PY'
import os, time
def f(n):
    return f(n - 1) if n else sum(range(10**5))
def burn(s):
    end = time.time() + s
    while time.time() < end:
        f(20)
open("/proc/self/comm", "w").write("pyparent")
while True:
    burn(0.02)
    pid = os.fork()
    if pid == 0:
        open("/proc/self/comm", "w").write("pychild")
        burn(0.05)
        os._exit(0)
    os.waitpid(pid, 0)
PY
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"; }
trap cleanup EXIT
one() {	# agent -> "long short all" truncated percentages
	local agent=$1
	pids=()
	for _ in 1 2; do sh -c 'while :; do :; done' & pids+=($!); done
	"$tmp/pylong" "$tmp/long.py" & pids+=($!)
	sh -c "while :; do '$tmp/pyshort' -c 'import json, email.parser; json.dumps(list(range(3000)))'; done" &
	pids+=($!)
	"$py" "$tmp/fork.py" & pids+=($!)
	sleep 1
	"$agent" record --duration "${secs}s" --frequency 499 --folded "$tmp/f" --top 0 \
		> "$tmp/out" 2>&1
	kill "${pids[@]}" 2>/dev/null
	wait 2>/dev/null
	awk '{split($1, a, ";"); c = a[1]; n = $NF; all += n; if ($0 ~ /\[truncated\]/) at += n
		if (c == "pylong") { l += n; if ($0 ~ /\[truncated\]/) lt += n }
		if (c == "pyshort") { s += n; if ($0 ~ /\[truncated\]/) st += n }
		if (c == "pychild") { k += n; if ($0 ~ /\[truncated\]/) kt += n } }
		END { printf "%.1f %.1f %.1f %.1f %d %d %d %d\n", 100 * lt / (l ? l : 1),
			100 * st / (s ? s : 1), 100 * kt / (k ? k : 1), 100 * at / (all ? all : 1),
			l, s, k, all }' "$tmp/f"
}
printf '%-6s %-5s %8s %8s %8s %8s  %s\n' round agent long% short% forked% all% \
	"samples (long short forked all)"
for r in $(seq "$rounds"); do
	if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
	for which in $order; do
		if [ "$which" = old ]; then a=$old; else a=$new; fi
		read -r l s k al nl ns nk na < <(one "$a")
		printf '%-6s %-5s %8s %8s %8s %8s  %s %s %s %s (load %s)\n' "$r" "$which" "$l" "$s" \
			"$k" "$al" "$nl" "$ns" "$nk" "$na" "$(cut -d' ' -f1 /proc/loadavg)"
	done
done
