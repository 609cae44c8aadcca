#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An ML-node-like load for bench/store/record.sh (issue #16): one long-running multi-threaded
Python "trainer" (main loop, a pin-memory thread, a logger thread, a checkpoint thread) that
restarts its 4 forked dataloader-like worker processes every EPOCH seconds, and a cron-like
short-lived process every CRON seconds. The trainer maps a file named libcuda.so.1 for its life, as
a CUDA process maps the driver, so the agent follows its threads' states (and its workers'
through fork) as it follows a GPU process's. Runs for SECONDS, then exits. Its processes are
named ml-main, ml-trainer, ml-loader-N and ml-cron (a python3 run through a link of that name),
as a node's own programs have names of their own, so that an agent's relabel rule can keep this
load alone on a machine doing other work (`comm` matching `ml-.*`).
Usage: mlnode.py SECONDS [EPOCH=60] [CRON=5]"""
import ctypes
import mmap
import multiprocessing as mp
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
import zlib


def set_name(name):
    """The calling thread's name (the process's comm when it is the main thread)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, name.encode()[:15], 0, 0, 0)	# PR_SET_NAME


def work(ms):
    """Burns about ms milliseconds of CPU in Python frames a profiler can tell apart."""
    end = time.perf_counter() + ms / 1000
    acc = 0
    while time.perf_counter() < end:
        acc += sum(i * i for i in range(200))
    return acc


def worker(wid, q, stop):
    """A dataloader worker: reads, decodes (zlib) and batches samples, then waits for room."""
    set_name(f"ml-loader-{wid}")
    rng = random.Random(wid)
    raw = zlib.compress(bytes(rng.getrandbits(8) for _ in range(1 << 14)) * 4)
    while not stop.is_set():
        for _ in range(4):
            zlib.decompress(raw)
        work(3)
        try:
            q.put(wid, timeout=0.5)
        except queue.Full:
            pass


def trainer(seconds, epoch):
    set_name("ml-trainer")
    # mapped for the trainer's life, as a CUDA process maps the driver: the agent finds GPU
    # processes by their maps (an open alone, closed again, is only a hint it checks)
    open_cuda = os.path.join(tempfile.gettempdir(), "libcuda.so.1")
    with open(open_cuda, "ab") as f:
        if f.tell() < mmap.PAGESIZE:
            f.write(b"\0" * mmap.PAGESIZE)
    with open(open_cuda, "rb") as f:
        driver = mmap.mmap(f.fileno(), mmap.PAGESIZE, prot=mmap.PROT_READ)
    done = threading.Event()
    lock = threading.Lock()
    steps = [0]

    def pin_memory():
        while not done.is_set():
            work(1)
            time.sleep(0.02)

    def logger():
        while not done.is_set():
            time.sleep(1)
            with lock:
                s = steps[0]
            sys.stdout.write(f"step {s}\n")
            sys.stdout.flush()

    def checkpoint():
        while not done.is_set():
            time.sleep(30)
            blob = zlib.compress(os.urandom(1 << 20))
            with tempfile.TemporaryFile() as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())

    threads = [threading.Thread(target=t, daemon=True) for t in (pin_memory, logger, checkpoint)]
    for t in threads:
        t.start()
    ctx = mp.get_context("fork")
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        with open(open_cuda):	# each epoch, so an agent started later follows it too
            pass
        q, stop = ctx.Queue(8), ctx.Event()
        procs = [ctx.Process(target=worker, args=(i, q, stop), daemon=True) for i in range(4)]
        for p in procs:
            p.start()
        e_end = min(time.monotonic() + epoch, t_end)
        while time.monotonic() < e_end:
            try:
                q.get(timeout=0.5)
            except queue.Empty:
                continue
            work(4)		# forward + backward, on the "GPU"'s behalf
            time.sleep(0.01)	# waiting for the GPU
            with lock:
                steps[0] += 1
        stop.set()
        for p in procs:
            p.join(2)
            if p.is_alive():
                p.kill()
    done.set()
    driver.close()


def main():
    seconds = float(sys.argv[1])
    epoch = float(sys.argv[2]) if len(sys.argv) > 2 else 60
    cron = float(sys.argv[3]) if len(sys.argv) > 3 else 5
    set_name("ml-main")
    bindir = tempfile.mkdtemp(prefix="mlnode-")
    os.symlink(os.path.realpath(sys.executable), os.path.join(bindir, "ml-cron"))
    tr = mp.get_context("fork").Process(target=trainer, args=(seconds, epoch))
    tr.start()
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:	# the cron job: a health check, as nvidia-smi polls are
        subprocess.run([os.path.join(bindir, "ml-cron"), "-c",
                        "import json, os; open('/proc/loadavg').read(); len(os.listdir('/proc'));"
                        " json.dumps(list(range(1000)))"], check=False)
        time.sleep(cron)
    tr.join()
    os.unlink(os.path.join(bindir, "ml-cron"))
    os.rmdir(bindir)


main()
