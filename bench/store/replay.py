#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Posts a spool of recorded batches (bench/store/record.sh) to a server in order, as the
agent would have: each file's bytes with its Content-Encoding. Prints batches and samples
sent and any refusal. Usage: replay.py URL SPOOL_DIR"""
import os
import sys
import urllib.error
import urllib.request

ENC = {".zst": "zstd", ".gz": "gzip", ".pb": None}


def main():
    url, spool = sys.argv[1], sys.argv[2]
    files = sorted(f for f in os.listdir(spool) if not f.startswith("."))
    sent = samples = refused = 0
    for name in files:
        ext = os.path.splitext(name)[1]
        with open(os.path.join(spool, name), "rb") as f:
            body = f.read()
        req = urllib.request.Request(url + "/api/v1/ingest", data=body, method="POST")
        req.add_header("Content-Type", "application/x-protobuf")
        if ENC.get(ext):
            req.add_header("Content-Encoding", ENC[ext])
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()
            sent += 1
            samples += int(name.split("-")[1].split(".")[0])
        except urllib.error.HTTPError as e:
            refused += 1
            print(f"{name}: {e.code} {e.read()[:200]!r}", file=sys.stderr)
    print(f"replayed {sent} batches ({samples} samples), {refused} refused")


main()
