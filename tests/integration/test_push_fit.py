#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An agent under continuous-tracing-sized batches never sees a 413: the real push code
(src/agent/push, through tests/tools/pushload) submits batches of 108 000 to 231 000 samples with
60 000 kernel intervals each (2 KiB template names: their attrs resolve to ~30x the compressed
body, the 413 "labels resolve to more bytes than the decoding budget" seen on the GPU machine)
to a real server with small limits (--max-body 1MiB). The agent learns the limits the server
advertises (Gpuscope-Ingest-Limits, asked with an empty upload before the first batch) and
splits each batch before sending: no 413 (server: nothing refused; agent: no 413-split), every
sample delivered and stored, and the batches were split beforehand. The same batch sent as it
is gets 413, so the limits were real."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpuscope_server import ROOT, Server, check, run_test, skip_if_unbuilt  # noqa: E402

PUSHLOAD = os.path.join(ROOT, ".output", "tests", "tools", "pushload")
skip_if_unbuilt()
if not os.access(PUSHLOAD, os.X_OK):
    print(f"SKIP: {PUSHLOAD} not built")
    sys.exit(77)
srv = Server(args=["--max-body", "1MiB"])


def refused(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("gpuscope_server_rejected_total{"):
            k, _, v = line.rpartition(" ")
            out[k.split('"')[1]] = float(v)
    return out


def main():
    srv.start()
    tmp = tempfile.mkdtemp(prefix="gpuscope-fit-")
    r = subprocess.run([PUSHLOAD, "--url", srv.url, "--batches", "3", "--samples",
                        "108000-231000", "--intervals", "60000", "--name-bytes", "2048",
                        "--spool", os.path.join(tmp, "spool")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240)
    check(r.returncode == 0, f"pushload exit {r.returncode}: {r.stderr.decode()[-2000:]}")
    out = r.stdout.decode().splitlines()
    s = json.loads(out[0])
    m = {ln.split()[0]: float(ln.split()[1]) for ln in out[1:] if ln and not ln.startswith("#")}
    code, body, _ = srv.request("/metrics")
    rej = refused(body.decode())
    stored = srv.metric("gpuscope_server_ingest_samples_total")
    print(f"pushload: {s}; pushed {m['gpuscope_agent_batches_pushed_total']:.0f} pieces, "
          f"split beforehand {m['gpuscope_agent_batches_fitted_total']:.0f} times, encode+fit "
          f"CPU {m['gpuscope_agent_encode_cpu_seconds_total']:.2f} s; server refused {rej}, "
          f"stored {stored}")
    check(s["submitted"] == 108000 + 169500 + 231000, f"submitted {s['submitted']}")
    check(s["split_after_413"] == 0 and m["gpuscope_agent_batches_split_total"] == 0,
          f"the agent saw no 413: {s}")
    check(all(v == 0 for v in rej.values()), f"the server refused nothing: {rej}")
    check(s["delivered"] == s["submitted"] and s["rejected"] == 0 and s["dropped"] == 0 and
          s["spooled"] == 0, f"every sample delivered: {s}")
    check(stored == s["delivered"], f"stored {stored} of {s['delivered']} delivered")
    check(m["gpuscope_agent_batches_fitted_total"] >= 3,
          f"batches split before sending: {m['gpuscope_agent_batches_fitted_total']}")
    # Near the limits the bound cannot tell: those pieces were decoded; the pieces well
    # within them were decided by the bound alone.
    bound = m.get('gpuscope_agent_push_fit_checks_total{how="bound"}', -1)
    decoded = m.get('gpuscope_agent_push_fit_checks_total{how="decoded"}', -1)
    print(f"fit checks: {bound:.0f} by the bound, {decoded:.0f} decoded")
    check(decoded >= 3 and bound >= 1, f"fit checks: bound {bound}, decoded {decoded}")
    # The limits were real: the smallest batch sent as it is, with no sizing, is refused.
    r = subprocess.run([PUSHLOAD, "--url", srv.url, "--raw", "--samples", "108000",
                        "--intervals", "60000", "--name-bytes", "2048"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    raw = json.loads(r.stdout.decode())
    print(f"unsized batch: HTTP {raw['raw_code']} ({r.stderr.decode().strip()})")
    check(raw["raw_code"] == 413, f"an unsized batch is refused 413: {raw}")
    print("PASS")


run_test(main, srv)
