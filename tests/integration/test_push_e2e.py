#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End to end on loopback: a real agent pushes real eBPF samples of tests/progs/burn (50 % leaf_alpha,
30 % leaf_beta, 20 % burnlib_leaf) to a real gpuscope-server with --token-file; the flame graph has
those shares and exactly the samples the agent delivered (SIGTERM flushes the last partial batch);
an agent with a wrong token is refused and spools; the CLI writes a valid interactive SVG (checked
with xml.etree and, when Chromium is installed, by running its script in a headless browser), a top
table and a pprof file, and reports server errors on one line."""
import gzip
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import xml.etree.ElementTree as ET
from pushlib import (Agent, CLI, PROGS, Scratch, Server, check, cpu_sampler_up, finish, http,
                     leaf_shares, need_root_and_binaries, skip, start_workload, wait_until)

need_root_and_binaries()
tmp = Scratch("push-e2e")
with open(tmp.path("token"), "w") as f:
    f.write("s3cret-token\n")
with open(tmp.path("bad-token"), "w") as f:
    f.write("wrong\n")
server = Server(tmp.path("data"), token_file=tmp.path("token"), log=tmp.path("server.log"))
server.start()
work = start_workload(os.path.join(PROGS, "burn"), "600")  # killed at the end
node = "e2e-%d" % os.getpid()
sel = '{node="%s",pid="%d"}' % (node, work.pid)
agents = []


def presence(node, name):
    """Samples whose stack contains name: the value of its outermost frames."""
    if node["name"] == name:
        return node["value"]
    return sum(presence(k, name) for k in node.get("children") or [])


def cli(*args, env=None):
    return subprocess.run([CLI] + list(args), capture_output=True, text=True, timeout=60,
                          env=None if env is None else {**os.environ, **env})


try:
    # both agents start together, burn stopped meanwhile (their BPF verification takes seconds
    # on a loaded machine, which a spinning thread only slows down)
    work.send_signal(signal.SIGSTOP)
    good = Agent(server.url, ["--modules", "cpu-sampler", "--pid", str(work.pid), "--push-interval", "1s",
                              "--frequency", "999", "--node", node,
                              "--token-file", tmp.path("token"), "--spool-dir", tmp.path("spool-good")],
                 tmp.path("agent-good.log"), wait=False)
    agents.append(good)
    bad = Agent(server.url, ["--modules", "cpu-sampler", "--pid", str(work.pid), "--push-interval", "500ms", "--node", node + "-bad",
                             "--token-file", tmp.path("bad-token"), "--retry-max", "1s",
                             "--spool-dir", tmp.path("spool-bad")], tmp.path("agent-bad.log"), wait=False)
    agents.append(bad)
    good.wait_up()
    bad.wait_up()
    work.send_signal(signal.SIGCONT)
    if not cpu_sampler_up(good):
        skip("the agent has no CPU sampler module (oncpu) here")

    # --- push, then SIGTERM mid-interval: the last partial batch is delivered too.
    # Enough samples for the shares even on a loaded machine (burn may get a fraction of a CPU).
    check(wait_until(lambda: good.metric("gpuscope_agent_batches_pushed_total") >= 3 and
                     good.metric("gpuscope_agent_samples_sent_total") >= 1000, 30),
          "the agent pushed batches (%d samples)" % good.metric("gpuscope_agent_samples_sent_total"))
    time.sleep(0.5)
    sent_before = good.metric("gpuscope_agent_samples_sent_total")
    # ordinary batches are sized by the bound on their counts, never decoded (docs/push.md)
    fit = {h: good.metric('gpuscope_agent_push_fit_checks_total{how="%s"}' % h, -1)
           for h in ("bound", "decoded")}
    check(fit["bound"] >= 3 and fit["decoded"] == 0,
          "ordinary batches: the fit check's bound, no decoding (%s)" % fit)
    act = {a: good.metric('gpuscope_agent_cpu_seconds_total{activity="%s"}' % a, 0)
           for a in ("encode", "compress")}
    check(all(v > 0 for v in act.values()), "encode and compress charged to their own "
          "activities, not to push (%s)" % act)
    rc = good.stop()
    s = good.summary()
    check(rc == 0, "agent exits 0 on SIGTERM (rc %s)" % rc)
    check(s is not None and s["delivered"] == s["submitted"] and s["dropped"] == 0 and
          s["spooled"] == 0, "everything delivered at exit: %s" % s)
    check(s is not None and s["delivered"] > sent_before,
          "SIGTERM flushed the partial batch (%s samples before, %s after)" %
          (sent_before, s and s["delivered"]))

    # --- the stored flame graph: exactly the delivered samples, with the workload's shares.
    fg = server.query("flamegraph", token="s3cret-token", since="10m", selector='{node="%s"}' % node)
    check(s is not None and fg["total"] == s["delivered"],
          "server holds exactly the delivered samples (%s vs %s)" % (fg["total"], s and s["delivered"]))
    fg = server.query("flamegraph", token="s3cret-token", since="10m", selector=sel)
    shares = leaf_shares(fg)
    print("leaf shares: %s" % sorted(shares.items(), key=lambda kv: -kv[1])[:6])
    # Shares by presence on the stack, of the samples inside burn_loop: interrupts and page
    # faults that land on top of a leaf still count for that leaf.
    loop = presence(fg["root"], "burn_loop")
    for leaf, want in (("leaf_alpha", 0.5), ("leaf_beta", 0.3), ("burnlib_leaf", 0.2)):
        got = presence(fg["root"], leaf) / loop if loop else 0
        check(abs(got - want) <= 0.07, "%s share %.3f ~ %.2f" % (leaf, got, want))
    check(loop >= 1000, "enough samples for shares (%d in burn_loop)" % loop)

    # --- auth: a wrong token is refused (401), counted, and what it had is kept in its spool.
    check(wait_until(lambda: bad.metric("gpuscope_agent_push_failures_total") >= 2, 10),
          "wrong token: push failures counted")
    m = bad.metrics()
    check(m.get("gpuscope_agent_batches_pushed_total") == 0, "wrong token: nothing accepted")
    check(m.get("gpuscope_agent_spool_files", 0) >= 1, "wrong token: batches kept in the spool")
    check("HTTP 401" in bad.read_log(), "wrong token: the 401 is logged")
    bad.stop()
    work.send_signal(signal.SIGSTOP)	# what follows reads the stored samples only
    fg_bad = server.query("flamegraph", token="s3cret-token", since="10m",
                          selector='{node="%s-bad"}' % node)
    check(fg_bad["total"] == 0, "wrong token: nothing stored (%d)" % fg_bad["total"])
    st, _ = http(server.url + "/api/v1/labels")
    check(st == 401, "query without a token: 401 (%d)" % st)

    # --- CLI: flame graph SVG.
    svg = tmp.path("cpu.svg")
    r = cli("flamegraph", "--server", server.url, "--since", "10m", "--selector", sel,
            "--token-file", tmp.path("token"), "-o", svg)
    check(r.returncode == 0, "gpuscope flamegraph exits 0 (%s)" % r.stderr.strip())
    ns = {"s": "http://www.w3.org/2000/svg"}
    root = ET.parse(svg).getroot()
    frames = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "f"]
    names = {g.get("data-n") for g in frames}
    check(root.tag == "{http://www.w3.org/2000/svg}svg", "SVG root element")
    check({"all", "leaf_alpha", "leaf_beta", "burnlib_leaf", "burn_loop"} <= names,
          "SVG frames carry the workload's functions")
    allf = [g for g in frames if g.get("data-d") == "0"]
    check(len(allf) == 1 and float(allf[0].get("data-w")) == fg["total"],
          "root frame spans the total (%s)" % (allf and allf[0].get("data-w")))
    check(all(g.find("s:title", ns) is not None and g.find("s:rect", ns) is not None
              for g in frames), "every frame has a tooltip and a rect")
    check(root.find("s:script", ns) is not None and "function zoom" in root.find("s:script", ns).text,
          "zoom/search script embedded")

    # Run the script in a real browser: zoom into phase_beta, search leaf_.
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        url = "file://%s?%s" % (svg, urllib.parse.urlencode({"z": "phase_beta", "s": "^leaf_"}))
        d = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                            "--user-data-dir=" + tmp.path("chromium"), "--dump-dom", url],
                           capture_output=True, text=True, timeout=60).stdout
        dom = ET.fromstring(d) if d.strip().startswith("<svg") else None
        if check(dom is not None, "browser loaded the SVG"):
            matched = [t for t in dom.iter("{http://www.w3.org/2000/svg}text") if t.get("id") == "matched"]
            def under(n):	# value of the outermost frames matching ^leaf_
                if n["name"].startswith("leaf_"):
                    return n["value"]
                return sum(under(k) for k in n.get("children") or [])
            want = 100.0 * under(fg["root"]) / fg["total"]
            text = matched[0].text if matched else ""
            check(text.startswith("Matched: "), "search shows the matched share (%r)" % text)
            got = float(text.split()[1].rstrip("%")) if text.startswith("Matched: ") else -1
            check(abs(got - want) < 0.11, "matched share %.1f%% ~ leaf_alpha+leaf_beta %.1f%%" %
                  (got, want))
            # leaf_beta sits under both threads' phase_beta (main's and the worker's chains
            # differ below burn_loop now that libc's frames unwind): the zoomed one is wide.
            beta = [g for g in dom.iter("{http://www.w3.org/2000/svg}g") if g.get("data-n") == "leaf_beta"]
            rects = [g.find("s:rect", ns) for g in beta]
            check(any(r is not None and float(r.get("width")) > 1000 and r.get("fill") == "rgb(230,0,230)"
                      for r in rects),
                  "zoom widened leaf_beta to the full width and search highlighted it")
    else:
        print("chromium not installed: script not run in a browser")

    # --- CLI: top, pprof, ranges, errors.
    r = cli("top", "--server", server.url, "--since", "10m", "--selector", sel,
            "--token-file", tmp.path("token"), "--limit", "8")
    lines = r.stdout.splitlines()
    hdr = next((i for i, l in enumerate(lines) if l.split()[:1] == ["SELF"]), len(lines))
    rows = [l.split() for l in lines[hdr + 1:]]
    check(r.returncode == 0 and len(rows) >= 3, "gpuscope top prints rows")
    print(r.stdout)
    check(hdr == 1 and re.search(r" UTC \(\S+\), total [1-9]\d* samples$", lines[0]) is not None,
          "gpuscope top prints the range and the total first (%r)" % lines[:1])
    # $GPUSCOPE_SERVER and $GPUSCOPE_TOKEN_FILE stand in for --server and --token-file.
    r2 = cli("top", "--since", "10m", "--selector", sel, "--limit", "8",
             env={"GPUSCOPE_SERVER": server.url, "GPUSCOPE_TOKEN_FILE": tmp.path("token")})
    check(r2.returncode == 0 and "leaf_alpha" in r2.stdout,
          "GPUSCOPE_SERVER and GPUSCOPE_TOKEN_FILE are the defaults (%r)" % r2.stderr.strip())
    check([row[-1] for row in rows[:1]] == ["leaf_alpha"] and
          {"leaf_alpha", "leaf_beta", "burnlib_leaf"} <= {row[-1] for row in rows},
          "top self functions: leaf_alpha first, the workload's three leaves listed")
    pp = tmp.path("cpu.pb.gz")
    r = cli("pprof", "--server", server.url, "--since", "10m", "--selector", sel,
            "--token-file", tmp.path("token"), "-o", pp)
    check(r.returncode == 0 and len(gzip.decompress(open(pp, "rb").read())) > 100,
          "gpuscope pprof writes a gzip'd profile")
    now = time.time()
    frm = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - 600))
    r = cli("top", "--server", server.url, "--from", frm, "--to", "%.3f" % (now + 5), "--selector", sel,
            "--token-file", tmp.path("token"), "--limit", "1")
    check(r.returncode == 0 and "leaf_alpha" in r.stdout, "--from RFC 3339 --to Unix seconds")
    r = cli("top", "--server", server.url, "--since", "10m")
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "401" in r.stderr,
          "missing token: one line, exit 1 (%r)" % r.stderr.strip())
    r = cli("top", "--server", server.url, "--since", "10m", "--selector", "{pod=",
            "--token-file", tmp.path("token"))
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "HTTP 400" in r.stderr,
          "bad selector: the server's error on one line, exit 1 (%r)" % r.stderr.strip())
    r = cli("flamegraph", "--server", server.url, "--since", "yesterday", "-o", tmp.path("x.svg"))
    check(r.returncode == 2, "usage error: exit 2")
    r = cli("top", "--server", "http://127.0.0.1:1", "--since", "1m")
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1,
          "unreachable server: one line, exit 1 (%r)" % r.stderr.strip())
finally:
    for a in agents:
        a.stop()
    work.kill()
    work.wait()
    server.stop()
    tmp.cleanup()
finish()
