#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A fault inside CUPTI on the library's control thread is never a silent death, and CUPTI has a
# full-size stack there (src/cupti/thread.c). The real libgpuscope_cupti.so runs in a Python
# process with faulthandler on, over the fake libcupti.so.13, whose cuptiSubscribe misbehaves
# on request (FAKE_CUPTI_SUBSCRIBE); the test opens a window by setting the library's window
# semaphore itself, as the agent's USDT attach would. Checked: a SIGSEGV in cuptiSubscribe
# reaches Python's faulthandler (before: the control thread blocked every signal and the process
# died with no word, as a GPT-2 process on the H100 did) and, under GPUSCOPE_CUPTI_DEBUG, the
# library's own report names the thread and the object; 1 MiB of stack used inside
# cuptiSubscribe is fine and reported, and with the old 256-KiB stack it is an overflow that
# the report names. Skips (77) where the CUDA toolkit is absent.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -e /usr/local/cuda/include/cupti.h ] || { echo "skip: no CUDA toolkit"; exit 77; }
lib=$PWD/.output/libgpuscope_cupti.so
fake=$PWD/.output/tests/cupti/fakecupti
for f in $lib $fake/libcupti.so.13; do
	[ -e $f ] || { echo "FAIL: $f not built"; exit 1; }
done
sema=$(readelf -n $lib | grep -A1 -x "    Name: window" | sed -n 's/.*Semaphore: 0x\([0-9a-f]*\).*/\1/p')
[ -n "$sema" ] || { echo "FAIL: no window semaphore in $lib"; exit 1; }
fails=0
check() {	# check WHAT PATTERN: PATTERN (grep -E) must be in the output
	if grep -E -- "$2" <<<"$out" >/dev/null; then echo "ok: $1"; else
		echo "FAIL: $1 (no '$2')"; echo "$out" | head -30 | sed 's/^/    /'; fails=$((fails + 1)); fi
}
run() {	# run ENV...: the process's stderr+stdout in $out, its status in $rc
	out=$(env "$@" LD_LIBRARY_PATH=$fake timeout 30 python3 -X faulthandler - "$lib" "$sema" 2>&1 <<'PY'
import ctypes, sys, time
path, sema = sys.argv[1], int(sys.argv[2], 16)
lib = ctypes.CDLL(path)
base = min(int(l.split("-")[0], 16) for l in open("/proc/self/maps") if l.rstrip().endswith(path))
assert lib.InitializeInjection() == 1
ctypes.c_ushort.from_address(base + sema).value = 1	# the agent's "open a window"
time.sleep(1.5)
print("survived", flush=True)
PY
)
	rc=$?
}

run FAKE_CUPTI_SUBSCRIBE=fault
[ $rc = 139 ] || { echo "FAIL: a fault in cuptiSubscribe: exit $rc, want 139 (SIGSEGV)"; fails=$((fails + 1)); }
check "the fault reached Python's faulthandler" '^Fatal Python error: Segmentation fault'

run FAKE_CUPTI_SUBSCRIBE=fault GPUSCOPE_CUPTI_DEBUG=1
check "debug: the library's report names the thread" "^\[gpuscope-cupti\] fatal signal SIGSEGV in thread 'gpuscope-cupti', address 0x8,"
check "debug: the report names the object of the instruction" '^\[gpuscope-cupti\]   [0-9a-f]+-[0-9a-f]+ r-xp .*libcupti\.so\.13'
check "debug: faulthandler ran after the report" '^Fatal Python error: Segmentation fault'

run FAKE_CUPTI_SUBSCRIBE=stack:1024 GPUSCOPE_CUPTI_DEBUG=1
[ $rc = 0 ] || { echo "FAIL: 1 MiB of stack in cuptiSubscribe: exit $rc"; echo "$out" | head; fails=$((fails + 1)); }
check "1 MiB of stack in cuptiSubscribe: the window opened" '^\[gpuscope-cupti\] window open at .*stack used (10[2-9][0-9]|1[1-9][0-9][0-9]|[2-9][0-9]{3}) KiB'
check "... and the process went on" '^survived'

run FAKE_CUPTI_SUBSCRIBE=stack:1024 GPUSCOPE_CUPTI_DEBUG=1 GPUSCOPE_CUPTI_STACK_KB=256
[ $rc = 139 ] || { echo "FAIL: the old 256-KiB stack survived 1 MiB (exit $rc): the test proves nothing"; fails=$((fails + 1)); }
check "the old 256-KiB stack: an overflow, reported as one" "the stack pointer is below the control thread's stack: a stack overflow"
check "... and faulthandler ran on the alternate stack" '^Fatal Python error: Segmentation fault'

[ $fails = 0 ] || exit 1
echo "PASS: faults in CUPTI on the control thread are reported, never silent; its stack holds 1 MiB"
