#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Ingest benchmark: N simulated agents (tests/tools/batchgen load: 16 CPUs at 99 Hz, 3000
# distinct stacks, one label set per thread, a 10 s batch per request, zstd) POST to a real
# gpuscope-server on loopback for S seconds. Reports sustained samples/s (wall clock), the
# server's CPU time per sample, and bytes on disk per sample after a clean shutdown.
# Usage: bench/ingest/run.sh [AGENTS=4] [SECONDS=20]
set -eu
cd "$(dirname "$0")/../.."
agents=${1:-4} secs=${2:-20}
make -s -j2 .output/gpuscope-server .output/tests/tools/batchgen
. bench/lib.sh
bench_tmp ingest
bench_server
cpu0=$(awk '{print $14 + $15}' /proc/$pid/stat)
load0=$(cut -d' ' -f1 /proc/loadavg)
res=$(.output/tests/tools/batchgen load --url "$url/api/v1/ingest" --agents "$agents" \
	--seconds "$secs" --encoding zstd)
cpu1=$(awk '{print $14 + $15}' /proc/$pid/stat)
# Let the rollups catch up (their cost belongs to ingest), then stop cleanly (WAL checkpointed).
for _ in $(seq 100); do
	lag=$(curl -s "$url/metrics" | awk '/^gpuscope_server_rollup_lag_chunks/ {print $2}')
	[ "$lag" = 0 ] && break; sleep 0.2
done
cpu2=$(awk '{print $14 + $15}' /proc/$pid/stat)
kill -TERM $pid; wait $pid || true
bytes=$(du -cb "$tmp/data"/gpuscope.db* | tail -1 | cut -f1)
hz=$(getconf CLK_TCK)
echo "$res" | awk -v c0="$cpu0" -v c1="$cpu1" -v c2="$cpu2" -v hz="$hz" -v bytes="$bytes" \
	-v load="$load0" -v nproc="$(nproc)" '{
	for (i = 1; i < NF; i += 2) v[$i] = $(i + 1)
	cpu = (c2 - c0) / hz
	printf "agents %d, %.1f s: %d samples, %.0f samples/s wall (load average %s on %d cores)\n",
		v["agents"], v["seconds"], v["samples"], v["samples_per_s"], load, nproc
	printf "server CPU %.2f s incl. rollups (%.2f s during ingest): %.0f samples per CPU-second, %.2f us/sample\n",
		cpu, (c1 - c0) / hz, v["samples"] / cpu, cpu * 1e6 / v["samples"]
	printf "wire %.2f bytes/sample (zstd), disk %.2f bytes/sample (%d bytes)\n",
		v["wire_bytes"] / v["samples"], bytes / v["samples"], bytes
}'
