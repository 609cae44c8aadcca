#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Each binary links only what it uses: the server needs no libbpf/libelf/libdw (nor clang,
# bpftool or BTF to build: a dry run of its build from an empty output directory never calls
# them), the CLI no server libraries, and the agent no SQLite.
set -uo pipefail
cd "$(dirname "$0")/../.."
fail=0
check() {	# condition-exit-status, what
	if [ "$1" -eq 0 ]; then echo "ok   $2"; else echo "FAIL $2"; fail=1; fi
}
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
for b in .output/gpuscope-server .output/gpuscope .output/gpuscope-agent; do
	[ -x "$b" ] || { echo "skip: $b is not built"; exit 77; }
done
srv=$(needed .output/gpuscope-server)
! grep -qE '^lib(bpf|elf|dw|jansson)\.' <<<"$srv"
check $? "gpuscope-server links no libbpf/libelf/libdw/libjansson ($(echo $srv))"
cli=$(needed .output/gpuscope)
! grep -qE '^lib(sqlite3|pcre2|microhttpd|yaml|dw)' <<<"$cli"
check $? "gpuscope (CLI) links no server libraries ($(echo $cli))"
agent=$(needed .output/gpuscope-agent)
! grep -qE '^lib(sqlite3|pcre2|yaml)' <<<"$agent"
check $? "gpuscope-agent links no SQLite/PCRE2/libyaml ($(echo $agent))"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# -B: as if nothing were built; -n: print the commands only
make -nB OUT="$tmp/out" "$tmp/out/gpuscope-server" >"$tmp/plan" 2>&1
check $? "make -n of the server from an empty output directory"
! grep -qE 'bpftool|-target bpf|/sys/kernel/btf' "$tmp/plan"
check $? "building the server needs no clang -target bpf, bpftool or BTF"
[ $fail -eq 0 ]
