#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Derives the hand-made NVML traces from the one recorded on the H200, so the N-GPU, MIG,
# fault, Xid and shared-GPU paths run on CI (trace format: docs/nvml.md):
#   h200x8.trace.gz  8 GPUs, each a copy of GPU 0 with its own UUID, values offset by the
#                    index (power +k W, utilization +k %, timestamps +k ms, memory +k GiB, pids
#                    +1000k); GPU 3 reports Xid 79 at 5 s; GPU 5 answers GPU_IS_LOST for 1.5 s
#                    from 8 s; GPU 7 has MIG on with two MIG devices (no util samples, as on MIG).
#   shared.trace.gz  1 GPU, two processes (pids 1111 and 2222) with a utilization sample each
#                    per driver period, at the same timestamps, with different values.
# Usage: derive.py tests/data/nvml/h200.trace.gz tests/data/nvml/
import gzip
import os
import sys

src, outdir = sys.argv[1:3]
lines = gzip.open(src, "rt").read().splitlines()
header, body = lines[0], lines[1:]
NGPU = 8
NOT_SUPPORTED, GPU_IS_LOST = 3, 15
# calls whose third token is the device; the rest of the line follows
DEV_CALLS = {"uuid", "name", "samples", "meminfo", "meminfo2", "fields", "clock", "temp",
             "throttle", "procutil", "procs", "mig_mode", "mig_max", "gpm_support",
             "gpm_sample", "gpm_metrics", "event_types", "event_register"}


def uuid_for(orig, k):
    return orig if k == 0 else orig[:-2] + "%02x" % (0xa0 + k)


def shift_samples(tok, k):
    # tok: dev type lastSeen ret [vt n ts:val ...]
    typ = int(tok[3])
    out = tok[:4] + [str(int(tok[4]) + k * 1000 if int(tok[4]) else 0)] + tok[5:]
    if tok[5] != "0" or len(tok) < 8:
        return out
    if k == 7 and typ != 0:
        return out[:5] + [str(NOT_SUPPORTED)]	# util samples are not supported with MIG on
    pairs = []
    for p in tok[8:]:
        ts, v = p.split(":")
        v = int(v)
        v = v + 1000 * k if typ == 0 else min(100, v + k)
        pairs.append(f"{int(ts) + 1000 * k}:{v}")
    return out[:8] + pairs


def x8():
    out = [header.replace("host=", "host=derived-x8-from-")]
    for line in body:
        if line.startswith("#"):
            continue
        tok = line.split(" ")
        t, call = tok[0], tok[1]
        if call == "count":
            out.append(f"{t} count 0 {NGPU}")
            continue
        if call == "handle":
            out += [f"{t} handle {k} 0" for k in range(NGPU)]
            continue
        if call not in DEV_CALLS or tok[2] != "0":
            out.append(line)
            continue
        for k in range(NGPU):
            nt = tok[:2] + [str(k)] + tok[3:]
            if call == "uuid" and tok[3] == "0":
                nt = nt[:4] + [uuid_for(tok[4], k)]
            elif call == "samples":
                nt = shift_samples(nt, k)
            elif call == "meminfo2" and tok[3] == "0":
                total, res, free, used = map(int, tok[4:8])
                nt = nt[:4] + [str(total), str(res), str(free - k * 2**30), str(used + k * 2**30)]
            elif call == "procutil":
                if k == 7:
                    nt = nt[:4] + [str(NOT_SUPPORTED), "0"]
                elif tok[4] == "0":
                    nt = nt[:6] + [":".join([str(int(f.split(":")[0]) + 1000 * k),
                                             str(int(f.split(":")[1]) + 1000 * k)] +
                                            f.split(":")[2:]) for f in tok[6:]]
                else:
                    nt = nt[:4] + [tok[4], "0"]
            elif call == "procs" and tok[3] == "0":
                nt = nt[:5] + [":".join([str(int(f.split(":")[0]) + 1000 * k)] + f.split(":")[1:])
                               for f in tok[5:]]
            elif call == "mig_mode" and k == 7:
                nt = nt[:3] + ["0", "1", "1"]
            out.append(" ".join(nt))
            if call == "mig_mode" and k == 7:
                uuid7 = uuid_for(next(l.split(" ")[4] for l in body
                                      if l.split(" ")[1:4] == ["uuid", "0", "0"]), 7)
                out += [f"{t} mig_max 7 0 2", f"{t} mig_handle 7 0 0", f"{t} mig_handle 7 1 0",
                        f"{t} uuid 7m0 0 MIG-{uuid7[4:]}-0", f"{t} uuid 7m1 0 MIG-{uuid7[4:]}-1"]
            if call == "meminfo2" and k == 7:
                total, res, free, used = map(int, tok[4:8])
                for m in range(2):
                    out.append(f"{t} meminfo2 7m{m} 0 {total // 2} 0 {total // 2 - used // 2} "
                               f"{used // 2}")
    out.append("5000000 event 0 3 8 79 4294967295 4294967295")
    out.append("8000000 fault 5 15 1500000")
    return out


def shared():
    out = [header.replace("host=", "host=derived-shared-from-")]
    for line in body:
        tok = line.split(" ")
        if len(tok) > 1 and tok[1] == "procutil" and tok[4] == "0":
            # the driver returns the latest sample of each process: one period per line
            ts = [max(int(f.split(":")[1]) for f in tok[6:])]
            samples = []
            for x in ts:
                a = (x // 1000) % 61 + 20		# any two different, known values
                samples += [f"1111:{x}:{a}:{a // 4}:0:0", f"2222:{x}:{97 - a}:{(97 - a) // 4}:0:0"]
            out.append(" ".join(tok[:5] + [str(len(samples))] + samples))
        elif len(tok) > 1 and tok[1] == "procs" and tok[3] == "0":
            out.append(" ".join(tok[:4] + ["2", "1111:1073741824:4294967295:4294967295",
                                           "2222:536870912:4294967295:4294967295"]))
        else:
            out.append(line)
    return out


for name, content in (("h200x8.trace.gz", x8()), ("shared.trace.gz", shared())):
    with gzip.GzipFile(os.path.join(outdir, name), "wb", mtime=0) as f:
        f.write(("\n".join(content) + "\n").encode())
