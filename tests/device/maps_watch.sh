#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Diagnosis on the GPU machine: every 0.5 s, the executable mappings of the newest process whose
# command line matches $PAT (an environment variable, and anchor it: the caller's own command
# line holds it too), each new one once with the time it was first seen; appends to DEST. Runs
# until no such process has existed for 30 s.
# Usage: PAT=REGEX tests/device/maps_watch.sh DEST
dest=${1:?usage: PAT=REGEX maps_watch.sh DEST}
: "${PAT:?set PAT}"
last=$(date +%s)
: > "$dest"
while [ $(( $(date +%s) - last )) -lt 30 ]; do
	p=$(pgrep -n -f "$PAT") || { sleep 0.5; continue; }
	last=$(date +%s)
	awk -v t="$(date +%T.%N | cut -c1-12)" -v p="$p" '$2 ~ /x/ {print t, p, $0}' "/proc/$p/maps" 2>/dev/null
	sleep 0.5
done | awk '{k = $3 " " $4 " " $8 " " $9; if (!(k in seen)) {seen[k] = 1; print; fflush()}}' >> "$dest"
