#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Why did 50 ms busy / 50 ms idle stretches read right only 51-58 % under CUPTI PM sampling at
# every interval, when 10 ms / 10 ms ones read right 83-97 % (issue 31)? In tests/device/
# pm_sampling.sh's default pattern the 50 ms group is the FIRST, i.e. the first 400 ms after
# cuptiPmSamplingStart. Here the same stretch lengths run first, in the middle and last in one
# pattern (50:50x4, 10:10x10, 50:50x4, 10:10x10) at 1 ms and 100 us: if the second 50 ms group
# reads right and the first does not, the loss is the sampler's start, not the stretch length.
# Uses .output/tests/device/pm_sampling (carry .output/tests/device). Results in $OUT/pm_order.txt.
set -u
cd "$(dirname "$0")/../.."
RET=${OUT:-/tmp/pm-order}
mkdir -p "$RET"
wheel=$(python3 -c "import glob,nvidia; p=sorted(q for d in nvidia.__path__ for q in glob.glob(d+'/**/libcupti.so.13', recursive=True)); print(p[0] if p else '')" 2>/dev/null)
export LD_LIBRARY_PATH="$(dirname "${wheel:-/x/x}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout -k 5 150 .output/tests/device/pm_sampling --timeout 140 ${wheel:+--libcupti "$wheel"} \
	--intervals 1ms,100us --rounds 1 --cross-interval 0 \
	--pattern 50:50x4,10:10x10,50:50x4,10:10x10 2>&1 | tee "$RET/pm_order.txt" |
	grep -E 'samples over|clock:|busy above|busy [0-9.]+ ?m?s / idle'
