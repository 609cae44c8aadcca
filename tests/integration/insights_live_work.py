# SPDX-License-Identifier: Apache-2.0
"""Live workloads for test_insights_live.py, run by Debian's /usr/bin/python3, each holding a
GPU in the NVML replay while it runs:

usage: insights_live_work.py MODE SECONDS
  consumer  the main thread (the one that would launch kernels) burns the CPU in tokenize():
            input work on the launching thread
  reader    the main thread blocks reading a pipe that a producer thread fills after a burst of
            CPU work (make_batch): a consumer starved by its data pipeline
Prints "ready" once running."""
import os
import sys
import threading
import time


def tokenize(n):
    s = 0
    for i in range(n):
        s = (s * 31 + i) % 50021
    return s


def make_batch(n):
    s = 0
    for i in range(n):
        s += (i * 7) % 13
    return s


def consumer(secs):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        tokenize(20000)


def reader(secs):
    r, w = os.pipe()

    def produce():
        while True:
            make_batch(200000)
            os.write(w, b"x" * 64)

    threading.Thread(target=produce, daemon=True).start()
    end = time.monotonic() + secs
    while time.monotonic() < end:
        os.read(r, 64)	# waits for the producer


if __name__ == "__main__":
    mode, secs = sys.argv[1], float(sys.argv[2])
    print("ready", flush=True)
    {"consumer": consumer, "reader": reader}[mode](secs)
