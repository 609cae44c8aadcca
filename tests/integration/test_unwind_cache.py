#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The on-disk unwind-table cache (src/agent/unwind/cache.c) on real eBPF: a program and its
library without frame pointers, both with a fixed build-id, recorded three times with one cache
directory. Cold: every table built and stored. Warm, with the program's entry damaged on disk:
that entry is found corrupt and built anew (the new file byte for byte the first one), the
library's table comes from the cache, and the stacks are the same as cold. The library then
rebuilt in place (same path, same inode, same build-id; every function moved, every frame
resized, so the old table would walk it wrong): its table is built anew, not read from the
cache, and the stacks are whole again."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from lib import AGENT, Recording, check, finish, skip, start_workload  # noqa: E402

if os.geteuid() != 0:
    skip("needs root for eBPF")
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
FIX = os.path.join(ROOT, "tests", "fixtures", "unwind")
tmp = tempfile.mkdtemp(prefix="gpuscope-ucache-")
cache = os.path.join(tmp, "cache")
folded = os.path.join(tmp, "cpu.folded")
lib = os.path.join(tmp, "libuc.so")
prog = os.path.join(tmp, "uc_main")
MAIN_ID, LIB_ID = "a1" * 20, "b2" * 20
CFLAGS = ["cc", "-O2", "-fomit-frame-pointer"]
CHAIN = ";main;spin_loop;lib_outer;lib_mid;lib_leaf"


def build_lib(out, *defs):
    subprocess.run(CFLAGS + list(defs) + ["-fPIC", "-shared", "-Wl,--build-id=0x" + LIB_ID, "-o", out,
                                          os.path.join(FIX, "cache_lib.c")], check=True)


build_lib(lib)
subprocess.run(CFLAGS + ["-Wl,--build-id=0x" + MAIN_ID, "-o", prog, os.path.join(FIX, "cache_main.c"),
                         "-L" + tmp, "-luc", "-Wl,-rpath," + tmp], check=True)


def record():
    """Records the program for 2 s: (returncode, stdout, {folded stack: samples})."""
    w = start_workload(prog, "120")
    rec = Recording([AGENT, "record", "--duration", "2s", "--frequency", "999", "--pid", str(w.pid),
                     "--folded", folded, "--top", "0", "--no-kernel", "--unwind-cache-dir", cache], hold=[w])
    r = rec.wait()
    w.kill()
    w.wait()
    print(r.stdout[-1200:], r.stderr[-600:])
    stacks = {}
    if os.path.exists(folded):
        for line in open(folded, errors="replace"):
            s, n = line.rsplit(" ", 1)
            stacks[s] = stacks.get(s, 0) + int(n)
        os.unlink(folded)
    return r, stacks


def counts(r):
    m = re.search(r"unwind cache: (\d+) hits, (\d+) misses, (\d+) corrupt, (\d+) stored", r.stdout)
    return dict(zip(("hits", "misses", "corrupt", "stored"), map(int, m.groups()))) if m else {}


def top(stacks):
    """The most frequent stack and its share of the samples."""
    total = sum(stacks.values())
    s = max(stacks, key=stacks.get) if stacks else ""
    return s, 100.0 * stacks.get(s, 0) / max(total, 1), total


def entries(build_id):
    """The cache files whose key starts with build_id (the key follows the 80-byte header)."""
    out = []
    for n in sorted(os.listdir(cache)):
        data = open(os.path.join(cache, n), "rb").read()
        if data[80:80 + len(build_id)] == build_id.encode():
            out.append(os.path.join(cache, n))
    return out


# --- cold: built and stored --------------------------------------------------------------------------
r, stacks = record()
c = counts(r)
s1, pct, total = top(stacks)
check(r.returncode == 0 and total > 200, "record exits 0 with samples (%d)" % total)
check(c.get("hits") == 0 and c.get("misses", 0) >= 3 and c.get("stored", 0) >= 3,
      "cold cache: nothing hit, the program's, library's and libc's tables stored (%s)" % c)
check(CHAIN in s1 and pct >= 90, "cold: %.1f%% of samples in the whole chain %s" % (pct, s1))
main_e, lib_e = entries(MAIN_ID), entries(LIB_ID)
check(len(main_e) == 1 and len(lib_e) == 1, "one entry each for the program and the library")
first = open(main_e[0], "rb").read()

# --- warm, the program's entry damaged: rebuilt, not trusted; the rest read ------------------------
bad = bytearray(first)
bad[len(bad) // 2 + 5] ^= 0x5a	# a row in the middle: only the checksum can tell
open(main_e[0], "wb").write(bytes(bad))
r, stacks = record()
c = counts(r)
s2, pct2, total = top(stacks)
check(c.get("corrupt") == 1 and c.get("hits", 0) >= 2,
      "warm: the damaged entry found corrupt, the library's and libc's read (%s)" % c)
check(s2 == s1 and pct2 >= 90, "stacks the same cold and warm: %.1f%% in %s" % (pct2, s2))
check(open(main_e[0], "rb").read() == first, "the damaged entry written anew, byte for byte the first")

# --- the library rebuilt in place: same path, inode and build-id, other code -------------------------
ino = os.stat(lib).st_ino
build_lib(os.path.join(tmp, "v2.so"), "-DV2")
shutil.copyfile(os.path.join(tmp, "v2.so"), lib)	# (truncates and writes the same file)
check(os.stat(lib).st_ino == ino, "the library replaced in place (same inode)")
r, stacks = record()
c = counts(r)
s3, pct3, total = top(stacks)
check(c.get("misses", 0) >= 1 and c.get("hits", 0) >= 2 and c.get("corrupt") == 0,
      "rebuilt library: its table built anew, the program's and libc's read (%s)" % c)
check(len(entries(LIB_ID)) == 2, "two entries under the library's build-id (old and new bytes)")
check(CHAIN in s3 and pct3 >= 90, "rebuilt library: %.1f%% of samples in the whole chain %s" % (pct3, s3))
shutil.rmtree(tmp, ignore_errors=True)
finish()
