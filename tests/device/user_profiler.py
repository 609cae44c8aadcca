# SPDX-License-Identifier: Apache-2.0
"""torch.profiler inside a process that gpuscope traces (issue 31 item 3; user_profiler.sh).

A launch-bound loop (t.add_(1) x 2000, then a synchronize) runs; once gpuscope's window of the
kind asked is open in this process (the agent's /metrics says it opened one), torch.profiler
(activities CPU + CUDA) records exactly STEPS steps, and the CUDA events it got are counted.
Usage: user_profiler.py MODE [METRICS_URL [SERVER_URL NODE]]
  MODE bare: no window to wait for; budget | continuous: wait for a window of that reason;
  capture: ask the server for a 20 s capture of this pid, then wait for it.
Prints one JSON line: mode, pid, events_cuda (torch.profiler's CUDA-side events), kernels (the
kernel events of its exported trace), launches asked, the wait and the profiled time.
"""
import json
import os
import re
import sys
import tempfile
import time
import urllib.request

import torch
from torch.profiler import ProfilerActivity, profile

STEPS = int(os.environ.get("STEPS", "150"))
WAIT_S = float(os.environ.get("WAIT_S", "120"))
mode = sys.argv[1]
metrics = sys.argv[2] if len(sys.argv) > 2 else None


def windows(reason):
    """gpuscope_agent_cupti_windows_total{reason=...} on the agent's /metrics (-1: unreadable)."""
    try:
        body = urllib.request.urlopen(metrics, timeout=1).read().decode()
    except OSError:
        return -1
    m = re.search(r'gpuscope_agent_cupti_windows_total\{reason="%s"\} (\d+)' % reason, body)
    return int(m.group(1)) if m else -1


t = torch.zeros(16, device="cuda")


def step():
    for _ in range(2000):
        t.add_(1)
    torch.cuda.synchronize()


for _ in range(3):
    step()
waited = 0.0
if mode != "bare":
    reason = mode
    w0 = windows(reason)
    if mode == "continuous":
        w0 = 0	# its one window may be open already
    if mode == "capture":
        url = "%s/api/v1/capture?node=%s&duration=20s&pid=%d" % (sys.argv[3], sys.argv[4],
                                                                 os.getpid())
        print("capture:", urllib.request.urlopen(urllib.request.Request(url, method="POST"),
                                                 timeout=5).read().decode(),
              file=sys.stderr, flush=True)
    t0 = time.monotonic()
    # keep launching meanwhile: the window controller sees a launch-bound process
    while windows(reason) <= w0 and time.monotonic() - t0 < WAIT_S:
        step()
    waited = time.monotonic() - t0
    if windows(reason) <= w0:
        print("no %s window opened in %.0f s: profiling anyway" % (reason, WAIT_S),
              file=sys.stderr, flush=True)
print("profiling %s %.6f %d" % (mode, time.monotonic(), os.getpid()), file=sys.stderr, flush=True)
p0 = time.monotonic()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(STEPS):
        step()
p1 = time.monotonic()
events_cuda = sum(1 for e in prof.events()
                  if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
kernels = -1
with tempfile.NamedTemporaryFile(suffix=".json") as f:
    try:
        prof.export_chrome_trace(f.name)
        with open(f.name) as g:
            trace = json.load(g)
        kernels = sum(1 for e in trace.get("traceEvents", []) if e.get("cat") == "kernel")
    except (OSError, ValueError) as e:
        print("trace export: %s" % e, file=sys.stderr, flush=True)
print(json.dumps({"mode": mode, "pid": os.getpid(), "events_cuda": events_cuda,
                  "kernels": kernels, "launches": STEPS * 2000, "wait_s": round(waited, 2),
                  "profile_s": round(p1 - p0, 3), "t0": p0, "t1": p1}), flush=True)
