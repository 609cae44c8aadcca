#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The injection library never touches an object the dynamic loader is still relocating: a
# process that dlopen()s a library while our control thread scans for objects to interpose
# (every 10 ms) must not crash. tests/cupti/race_lib.c pauses its relocation (an IFUNC resolver
# that sleeps 40 ms, run by glibc after the other relocations and before RELRO is protected)
# with its dlsym slot already bound; before the fix the scan rewrote that slot, made the page
# read-only, and the loader died writing the next slot (every run: SIGSEGV). Also checked: the
# object is still interposed once its loader is done (the scan pins each object with
# dlopen(RTLD_NOLOAD), which waits for the loader), and a library loaded and closed again and
# again in link-map namespaces of their own (dlmopen) by two threads while the scan polls: the
# scan no longer calls dl_iterate_phdr, which crashed inside ld.so beside a loading thread on
# the GPU machine. The objects come from /proc/self/maps now: the main program's own slot is
# interposed, and a copy of the library mapped as data (not loaded) is never written.
# Skips (77) where the CUDA toolkit is absent.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -e /usr/local/cuda/include/cupti.h ] || { echo "skip: no CUDA toolkit"; exit 77; }
prog=.output/tests/cupti/dlopen_race
lib=$PWD/.output/tests/cupti/fakecupti/librace.so
for f in $prog $lib .output/libgpuscope_cupti.so; do
	[ -e $f ] || { echo "FAIL: $f not built"; exit 1; }
done
rc=0
out=$(timeout 60 $prog .output/libgpuscope_cupti.so "$lib" 40) || rc=$?
echo "$out"
[ $rc = 0 ] || { echo "FAIL: the process died (rc $rc) opening and closing a library 40 times"; exit 1; }
patched=$(echo "$out" | sed -n 's/^cycles 40 patched \([0-9]*\)$/\1/p')
[ -n "$patched" ] || { echo "FAIL: no 'cycles 40 patched N' line"; exit 1; }
# up to 500 ms after each open; polls every 50 ms: a loaded CI machine still gets most
[ "$patched" -ge 30 ] || { echo "FAIL: the object was interposed after only $patched of 40 loads"; exit 1; }
grep -x "main interposed 1" <<<"$out" >/dev/null || { echo "FAIL: the main program's dlsym slot was not interposed"; exit 1; }
grep -x "data mapping intact 1" <<<"$out" >/dev/null || { echo "FAIL: a library mapped as data (not loaded) was written"; exit 1; }
# Each load pausing 300 ms (longer than the scans' pacing gap): a scan falls inside every pause,
# reads the object's RELRO page as writable, and pins it, which waits for the loader to protect
# RELRO. Writing through that stale "writable" crashed here every run (one CI run in ~30 at 40
# ms); and a scan that waited was paced by its wall time (500 x 200 ms: no scan for minutes), so
# only the first of the loads was interposed.
rc=0
out2=$(RACE_SLEEP_MS=300 timeout 60 $prog .output/libgpuscope_cupti.so "$lib" 5) || rc=$?
echo "$out2"
[ $rc = 0 ] || { echo "FAIL: the process died (rc $rc) loading a library whose relocation pauses 300 ms"; exit 1; }
slow=$(echo "$out2" | sed -n 's/^cycles 5 patched \([0-9]*\)$/\1/p')
[ "${slow:-0}" -ge 4 ] || { echo "FAIL: slow loads interposed ${slow:-0} of 5 (scans paced by their waits?)"; exit 1; }
rc=0
out=$(timeout 120 $prog .output/libgpuscope_cupti.so "$lib" 100 dlmopen) || rc=$?
echo "$out"
[ $rc = 0 ] || { echo "FAIL: loads in other link-map namespaces beside the scan: rc $rc"; exit 1; }
echo "PASS: 40 loads during scans, no crash; interposed after $patched of them; 5 slow loads, $slow interposed; 2 x 100 loads in namespaces of their own"
