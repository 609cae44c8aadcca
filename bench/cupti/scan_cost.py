#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/cupti/scan_cost.py: what the injection library's control thread costs a process that
keeps mapping and unmapping memory (its poll for newly loaded objects reads the process's size
and, when it moved, /proc/self/maps), and how long InitializeInjection's first scan takes.

A Python process imports a dozen stdlib extension modules, loads LIB (a libgpuscope_cupti.so;
run it over the CUPTI stand-in: LD_LIBRARY_PATH=.output/tests/cupti/fakecupti), calls
InitializeInjection, then allocates a 4-MiB bytearray every 10 ms (the size moves all the time)
for SECONDS; prints the init time, the mappings, and the control thread's CPU in % of a core
(/proc/self/task/TID/stat, clock-tick resolution). Compare two builds by running it on each,
interleaved. Usage: bench/cupti/scan_cost.py LIB [SECONDS=20]
"""
import ctypes
import os
import sys
import time

import asyncio, bz2, csv, decimal, hashlib, json, lzma, multiprocessing, sqlite3, ssl, zlib  # noqa: E401,F401
import xml.etree.ElementTree  # noqa: F401


def thread_cpu(tid):
    f = open("/proc/self/task/%s/stat" % tid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def main():
    path, secs = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    lib = ctypes.CDLL(path)
    t0 = time.monotonic()
    lib.InitializeInjection()
    init = time.monotonic() - t0
    time.sleep(0.5)
    tid = next((t for t in os.listdir("/proc/self/task")
                if open("/proc/self/task/%s/comm" % t).read().strip() == "gpuscope-cupti"), None)
    if not tid:
        sys.exit("no gpuscope-cupti thread")
    c0, w0 = thread_cpu(tid), time.monotonic()
    keep = []
    while time.monotonic() < w0 + secs:
        keep.append(bytearray(4 << 20))
        keep = keep[-3:]
        time.sleep(0.01)
    c1, w1 = thread_cpu(tid), time.monotonic()
    maps = sum(1 for _ in open("/proc/self/maps"))
    print("init %.1f ms; %d mappings; control thread CPU %.3f %% of a core over %.0f s" % (
        init * 1e3, maps, 100 * (c1 - c0) / (w1 - w0), w1 - w0))


main()
