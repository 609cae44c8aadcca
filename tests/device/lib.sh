# SPDX-License-Identifier: Apache-2.0
# Sourced by the GPU machine's scripts: $D is the packed agent (tests/device/pack-agent.sh), $W
# the script's scratch folder.

# Runs one of our binaries with the packed libraries; in the background $! is then our binary.
# (it execs: run it in the background or in a subshell, never in the script's own shell)
ours() { LD_LIBRARY_PATH=$D/lib exec "$@"; }

# The folder of the CUPTI library of the Python environment's nvidia wheels ('' if none).
cupti_lib_dir() {
	python3 -c "import glob,os,nvidia; p=[q for d in nvidia.__path__ for q in glob.glob(d+'/**/libcupti.so*', recursive=True)]; print(os.path.dirname(sorted(p)[0]) if p else '')" 2>/dev/null
}

# gpuscope-server on a free loopback port with its store in $W/store: sets spid and url.
start_server() {
	ours "$D/bin/gpuscope-server" --data "$W/store" --listen 127.0.0.1:0 > "$W/server.out" 2> "$W/server.log" &
	spid=$!
	for _ in $(seq 100); do grep -q listening "$W/server.out" && break; sleep 0.1; done
	url=$(grep -o 'http://[0-9.:]*' "$W/server.out" | head -1)
}

# Waits up to 30 s for the agent APID's /metrics on 127.0.0.1:PORT; returns early if it exits.
wait_agent_metrics() {
	for _ in $(seq 300); do
		curl -sf -o /dev/null -m 1 "http://127.0.0.1:$2/metrics" && return 0
		kill -0 "$1" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
