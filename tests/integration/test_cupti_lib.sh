#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# libgpuscope_cupti.so as built against the CUDA toolkit: exports InitializeInjection only, carries
# the five gpuscope_cupti USDT notes with semaphores and register-only arguments (what libbpf
# parses), finds libcupti through its RUNPATH, and without a GPU steps aside: InitializeInjection
# returns 1, silent unless GPUSCOPE_CUPTI_DEBUG is set. Skips (77) where the toolkit is absent.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=.output/libgpuscope_cupti.so
[ -e /usr/local/cuda/include/cupti.h ] || { echo "skip: no CUDA toolkit"; exit 77; }
[ -e $lib ] || { echo "FAIL: $lib not built"; exit 1; }
# grep without -q: with pipefail, -q exits at the first match and the writer's SIGPIPE fails the pipeline.
fail() { echo "FAIL: $*"; exit 1; }

exports=$(nm -D --defined-only $lib | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exports" = "InitializeInjection " ] || fail "exports are '$exports'"

notes=$(readelf -n $lib)
for p in launch buffer name clock drops window status; do
	block=$(echo "$notes" | grep -A3 -x "    Provider: gpuscope_cupti" | grep -A2 "Name: $p$") ||
		fail "no USDT note gpuscope_cupti:$p"
	echo "$block" | grep "Semaphore: 0x0*[1-9a-f]" >/dev/null || fail "$p: no semaphore"
	args=$(echo "$block" | sed -n 's/.*Arguments: //p')
	for a in $args; do
		[[ $a =~ ^-?[0-9]+@(%[a-z0-9]+|\$-?[0-9]+)$ ]] || fail "$p: argument '$a' is not a register"
	done
done

readelf -d $lib | grep 'NEEDED.*libcupti' >/dev/null || fail "does not link libcupti"
readelf -d $lib | grep 'RUNPATH.*\$ORIGIN' >/dev/null || fail "no \$ORIGIN runpath"
ldd $lib | grep 'libcupti.* => /' >/dev/null || fail "libcupti not found at run time: $(ldd $lib)"

# CUPTI is not touched before the agent opens a window: initialising never fails.
out=$(python3 -c "import ctypes; print(ctypes.CDLL('$lib').InitializeInjection())" 2>&1)
[ "$out" = "1" ] || fail "InitializeInjection without debug printed '$out'"
out=$(GPUSCOPE_CUPTI_DEBUG=1 python3 -c "import ctypes; print(ctypes.CDLL('$lib').InitializeInjection())" 2>&1)
echo "$out" | grep '^\[gpuscope-cupti\] ready: windows close by unsubscribe' >/dev/null || fail "no debug line: '$out'"
echo "$out" | grep -x 1 >/dev/null || fail "InitializeInjection did not return 1: '$out'"
echo "ok"
