# SPDX-License-Identifier: Apache-2.0
# Sourced by the bench scripts (from the repository root): a scratch folder removed at exit,
# and a gpuscope-server on loopback keeping its data there.

# bench_tmp NAME: $tmp, a fresh /tmp/gpuscope-bench-NAME.XXXXXX; at exit the processes in
# $bench_pids are stopped and $tmp removed.
bench_tmp() {
	tmp=$(mktemp -d "/tmp/gpuscope-bench-$1.XXXXXX")
	bench_pids=""
	trap 'kill $bench_pids 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
}

# bench_server [ARGS...]: starts .output/gpuscope-server --data $tmp/data on a free loopback
# port with ARGS; sets $pid and $url once it listens.
bench_server() {
	.output/gpuscope-server --data "$tmp/data" --listen 127.0.0.1:0 "$@" >"$tmp/out" \
		2>"$tmp/err" &
	pid=$!
	bench_pids="$bench_pids $pid"
	for _ in $(seq 50); do grep -q listening "$tmp/out" && break; sleep 0.1; done
	url=$(sed -n 's/listening on //p' "$tmp/out")
}
