#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CUPTI PM sampling on the GPU machine (issue 14, item 4): how fine it tells GPU busy from idle,
# in-process and from a second process, and what it costs (tests/device/pm_sampling.c prints it
# all). Four runs, each under its own time limit, each exit status recorded (77: no PM sampling
# there, with the reason on one line): the default intervals (10 ms .. 10 us, time trigger, the
# chip's metric list and raw samples), finer ones (5/2/1 us), the sysclk trigger, and a 100 ms
# decode period. Uses the binary built here (`make`: .output/tests/device/pm_sampling, carried),
# else $PM_SAMPLING, else builds one there. libcupti.so.13 from the Python wheels (else the toolkit's).
# Results in $OUT (default /tmp/pm-sampling): summary.txt (every run's output), metrics.tsv,
# raw.tar.gz (samples and stretches as CSV), log.txt.
# Usage (repository root): tests/device/pm_sampling.sh
set -u
cd "$(dirname "$0")/../.."
RET=${OUT:-/tmp/pm-sampling}
W=$(mktemp -d /tmp/pm-sampling.XXXX)
mkdir -p "$RET" "$W/raw"
exec > >(tee "$RET/log.txt") 2>&1

echo "== machine"
nvidia-smi -L 2>&1 | head -2
nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1
uname -r
# CUPTI 13 (the program is built against its headers): the wheels' first, else the toolkit's.
wheel=$(python3 -c "import glob,nvidia; p=sorted(q for d in nvidia.__path__ for q in glob.glob(d+'/**/libcupti.so.13', recursive=True)); print(p[0] if p else '')" 2>/dev/null)
cupti=
for f in "$wheel" /usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13 /usr/local/cuda/lib64/libcupti.so.13; do
	[ -n "$f" ] && [ -e "$f" ] && { cupti=$f; break; }
done
cdir=$(dirname "${cupti:-/nonexistent/x}")
echo "libcupti: ${cupti:-none found (pm_sampling will say so)}"
ls "$cdir" 2>/dev/null | grep -E 'cupti|nvperf' | tr '\n' ' '
echo
export LD_LIBRARY_PATH="${cdir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

bin=
for b in "${PM_SAMPLING:-}" .devcarry/pmsample/pm_sampling .output/tests/device/pm_sampling; do
	[ -n "$b" ] && [ -x "$b" ] && "$b" --help >/dev/null 2>&1 && { bin=$b; break; }
done
if [ -z "$bin" ]; then
	echo "== no carried binary runs here: building one"
	inc=
	for d in /usr/local/cuda/include /usr/local/cuda/extras/CUPTI/include "$cdir/../include"; do
		[ -e "$d/cupti_pmsampling.h" ] && [ -e "$d/cuda.h" ] && { inc=$d; break; }
	done
	mkdir -p "$W/shim" && : > "$W/shim/string" # cupti_profiler_host.h includes C++'s <string>
	cc=$(command -v cc || command -v gcc) || true
	[ -n "$inc" ] && [ -n "$cc" ] && "$cc" -std=gnu11 -O2 -D_GNU_SOURCE -I"$W/shim" -I"$inc" \
		-o "$W/pm_sampling" tests/device/pm_sampling.c -ldl -lpthread -lm && bin=$W/pm_sampling
	[ -n "$bin" ] || { echo "FAIL: no pm_sampling binary (carry .output/tests/device/pm_sampling)"; exit 1; }
fi
echo "binary: $bin"

# run NAME LIMIT ARGS...: one run, its output into summary.txt, its exit status recorded.
run() {
	local name=$1 limit=$2 rc=0
	shift 2
	echo "== $name: pm_sampling $*" | tee -a "$RET/summary.txt"
	timeout -k 10 "$limit" "$bin" --timeout $((limit - 10)) ${cupti:+--libcupti "$cupti"} "$@" \
		> "$W/$name.out" 2>&1 || rc=$?
	cat "$W/$name.out" >> "$RET/summary.txt"
	cat "$W/$name.out"
	echo "== $name: exit $rc" | tee -a "$RET/summary.txt"
	return 0
}
: > "$RET/summary.txt"
run default 240 --list-metrics "$RET/metrics.tsv" --raw-dir "$W/raw"
run fine 100 --intervals 5us,2us,1us --rounds 3 --cross-interval 0 \
	--pattern 2:2x25,0.5:0.5x50,0.1:0.1x100
run sysclk 90 --trigger sysclk --intervals 2000000,200000,20000 --rounds 3 --cross-interval 0 \
	--pattern 50:50x4,10:10x10,2:2x25
run decode100ms 80 --intervals 1ms,100us --decode-period-us 100000 --rounds 3 --cross-interval 0 \
	--pattern 50:50x4,10:10x10
tar -C "$W/raw" -czf "$RET/raw.tar.gz" . 2>/dev/null
rm -rf "$W"
echo "== done: $RET"
