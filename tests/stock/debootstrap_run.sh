#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's `make run` on a stock Debian 12 (`make stock-check`): a fresh
# `debootstrap --variant=minbase bookworm` root, only make, git and ca-certificates added, this
# working tree's files (tracked and new, not ignored) copied in, `make run` started inside
# (chroot, with /proc, /sys and /dev; the host's own CAs in /usr/local/share/ca-certificates
# too, for a TLS-inspecting proxy), the URL it prints must answer HTTP 200 and the agent's
# samples reach the server (recorded; the agent may be limited by the host); then Ctrl-C
# (SIGINT), and the root is unmounted and removed. Appends its result, with the hash of the run
# lists and mk/ (tests/stock/deps_hash), to tests/stock/results.txt, which
# tests/integration/test_stock_record checks. Takes 10-30 minutes (packages, a full build).
# Root only. MIRROR (default http://deb.debian.org/debian), KEEP=1 keeps the root for a look,
# URL_TIMEOUT (default 3600 s) bounds install + build + start.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
[ "$(id -u)" = 0 ] || { echo "debootstrap_run: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null || {
	echo "debootstrap_run: installing debootstrap" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
}
mirror=${MIRROR:-http://deb.debian.org/debian}
hash=$(tests/stock/deps_hash)
work=$(mktemp -d /var/tmp/gpuscope-stock.XXXXXX)
root=$work/root
log=$work/make-run.log
run_pid= result=fail note=
t0=$SECONDS

in_root() {	# pids of processes whose root directory is the stock root
	local p
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
	done
	return 0
}
cleanup() {
	trap - EXIT INT TERM
	if [ -n "$run_pid" ]; then
		kill -KILL -- -"$run_pid" 2>/dev/null || true
	fi
	# anything left inside (make run's server and agent run in their own sessions)
	local pids
	pids=$(in_root)
	[ -z "$pids" ] || { kill -KILL $pids 2>/dev/null || true; sleep 1; }
	for m in dev/pts dev sys proc; do
		mountpoint -q "$root/$m" 2>/dev/null && umount -R "$root/$m" 2>/dev/null ||
			umount -R -l "$root/$m" 2>/dev/null || true
	done
	if [ -n "${KEEP:-}" ]; then
		echo "debootstrap_run: root kept in $root" >&2
	elif findmnt -rn -o TARGET | grep -q "^$root/"; then
		echo "debootstrap_run: $root still has mounts; not removed" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

record() {	# result, note: one line in tests/stock/results.txt
	printf '%s deps=%s %s %ds %s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$hash" "$1" \
		$((SECONDS - t0)) "$2" >>"$repo/tests/stock/results.txt"
	echo "debootstrap_run: $1 after $((SECONDS - t0)) s: $2"
}

echo "debootstrap_run: debootstrap --variant=minbase bookworm into $root ($mirror)"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
	{ tail -20 "$work/debootstrap.log"; record fail "debootstrap failed"; exit 1; }
t_boot=$((SECONDS - t0))
cp /etc/resolv.conf "$root/etc/resolv.conf"
# CAs this host added itself (a site's TLS-inspecting proxy) go in as on any machine of that
# network; ca-certificates' install puts them into the root's store. Nothing else is copied.
mkdir -p "$root/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
mount -t proc proc "$root/proc"
for m in sys dev; do
	mount --rbind "/$m" "$root/$m"
	mount --make-rslave "$root/$m"	# unmounting it must not reach the host's
done
chr() { chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

echo "debootstrap_run: apt-get install make git ca-certificates (the README's first step)"
chr sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	--no-install-recommends make git ca-certificates' >"$work/apt.log" 2>&1 ||
	{ tail -20 "$work/apt.log"; record fail "apt-get install make git ca-certificates failed"; exit 1; }
npkgs_before=$(chr dpkg-query -W -f '.\n' | wc -l)

mkdir -p "$root/src/gpuscope"
git ls-files -z -c -o --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$root/src/gpuscope"

echo "debootstrap_run: make run (log: $log)"
t_make=$SECONDS
# (a background job of a script starts with SIGINT ignored, and a shell cannot trap what it
# started ignoring: env gives make run the default back, as a terminal's Ctrl-C finds it)
setsid env --default-signal=INT chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	sh -c 'cd /src/gpuscope && exec make run' >"$log" 2>&1 </dev/null &
run_pid=$!
url=
limit=$((SECONDS + ${URL_TIMEOUT:-3600}))
while [ $SECONDS -lt $limit ]; do
	url=$(sed -n 's|^  web UI: *\(http://[0-9.:]*\)/$|\1|p' "$log" | head -1)
	[ -n "$url" ] && break
	kill -0 "$run_pid" 2>/dev/null || break
	sleep 5
done
t_url=$((SECONDS - t_make))
if [ -z "$url" ]; then
	tail -30 "$log"
	record fail "make run ended or timed out before its URL after ${t_url}s: $(grep -m1 -iE 'error|not found' "$log" | cut -c1-160)"
	exit 1
fi
code=
for _ in $(seq 30); do
	code=$(curl -s -o "$work/index.html" -w '%{http_code}' "$url/" || true)
	[ "$code" = 200 ] && break
	sleep 1
done
# the agent's first pushes: CPU samples of this machine's processes in the server
samples=0
for _ in $(seq 60); do
	samples=$(curl -s "$url/api/v1/processes?since=5m&limit=1" |
		sed -n 's/.*"total": *\([0-9]*\).*/\1/p' | head -1)
	[ "${samples:-0}" -gt 0 ] && break
	sleep 1
done
npkgs_after=$(chr dpkg-query -W -f '.\n' | wc -l)
agent=running
if grep -q '^stopping' "$log" || ! kill -0 "$run_pid" 2>/dev/null; then
	agent="exited: $(tail -3 "$root/src/gpuscope/run-data/agent.log" 2>/dev/null | tr '\n' ' ' | cut -c1-200)"
fi
# Ctrl-C as a user would: SIGINT to make run's process group; scripts/run stops agent and server
kill -INT -- -"$run_pid" 2>/dev/null || true
for _ in $(seq 60); do
	[ -z "$(in_root)" ] && break
	sleep 0.5
done
left=$(in_root | wc -l)
grep -q '^stopped; data kept' "$log" && stopped=yes || stopped=no
echo "--- the end of make run's output"
tail -25 "$log"
note="debootstrap ${t_boot}s, make run to its URL ${t_url}s ($((npkgs_after - npkgs_before)) packages installed), GET $url/ -> $code, agent $agent (${samples:-0} samples pushed), Ctrl-C stopped both: $stopped ($left processes left)"
if [ "$code" = 200 ] && [ "$stopped" = yes ] && [ "$left" = 0 ]; then
	record pass "$note"
else
	record fail "$note"
	exit 1
fi
