#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Asks two or more servers holding the same data (bench/store/compare.sh: one recording stored by
two server versions, and a store migrated from the older one) the same questions and compares
the answers byte for byte: flame graphs (both sample kinds, selectors on process and thread
labels, group_by), diff, top, samples over time, processes, pprof, labels and their values,
intervals (with and without kind, selector, limit) and stacks, over the whole recording and over
ranges that start and end inside minutes (raw chunks and rollups mixed). Prints how many
answers matched and every one that did not. Usage: compare.py URL URL [URL...]"""
import json
import sys
import urllib.error
import urllib.parse
import urllib.request


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=300) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def main():
    urls = sys.argv[1:]
    if len(urls) < 2:
        sys.exit(__doc__)
    nodes = json.loads(get(urls[0] + "/api/v1/nodes")[1])["nodes"]
    t0 = nodes[0]["first_ms"] / 1e3
    t1 = nodes[0]["last_ms"] / 1e3
    ranges = [(t0 - 1, t1 + 1), (t0 + 7.3, t0 + 1234.567), (t0 + 1023.21, t0 + 3160.5),
              (t0 + 1800.001, t0 + 1980.999)]
    full = "from=%.3f&to=%.3f" % ranges[0]
    procs = json.loads(get(urls[0] + "/api/v1/processes?" + full + "&limit=5")[1])["processes"]
    tids = json.loads(get(urls[0] + "/api/v1/label/tid/values?" + full)[1])
    threads = json.loads(get(urls[0] + "/api/v1/label/thread/values?" + full)[1])
    tids = tids.get("values", tids if isinstance(tids, list) else [])
    threads = threads.get("values", threads if isinstance(threads, list) else [])
    sels = ["", '{pid="%s"}' % procs[0]["pid"], '{comm=~"b.*"}',
            '{tid="%s"}' % tids[len(tids) // 2], '{thread="%s"}' % threads[len(threads) // 3],
            '{pid="%s",tid="%s"}' % (procs[1]["pid"], procs[1]["pid"]), '{thread=~"gpuscope.*"}']
    qs = ["/api/v1/nodes", "/api/v1/labels?" + full, "/api/v1/metric_names"]
    for name in ("pid", "tid", "thread", "comm", "cgroup"):
        qs.append("/api/v1/label/%s/values?%s" % (name, full))
    for a, b in ranges:
        r = "from=%.3f&to=%.3f" % (a, b)
        for kind in ("cpu", "offcpu_ns"):
            for sel in sels:
                s = "&selector=" + urllib.parse.quote(sel) if sel else ""
                base = "%s&kind=%s%s" % (r, kind, s)
                qs += ["/api/v1/flamegraph?" + base, "/api/v1/top?" + base + "&limit=40",
                       "/api/v1/samples?" + base + "&buckets=97", "/api/v1/processes?" + base]
                if (a, b) in (ranges[0], ranges[3]):
                    qs.append("/api/v1/pprof?" + base)
            for gb in ("pid", "thread", "tid", "comm", "*", "pid,comm,pod", "tid,thread"):
                base = "%s&kind=%s&group_by=%s" % (r, kind, urllib.parse.quote(gb))
                qs += ["/api/v1/flamegraph?" + base, "/api/v1/samples?" + base + "&buckets=31"]
            qs.append("/api/v1/diff?%s&kind=%s&from2=%.3f&to2=%.3f" % (r, kind, a + 60, b - 60))
            qs.append("/api/v1/diff?%s&kind=%s&selector=%s&selector2=%s" % (
                r, kind, urllib.parse.quote(sels[1]), urllib.parse.quote(sels[3])))
        for sel in sels[:4]:
            s = "&selector=" + urllib.parse.quote(sel) if sel else ""
            qs += ["/api/v1/intervals?%s%s&limit=2000" % (r, s),
                   "/api/v1/intervals?%s%s&kind=thread_state&limit=20000" % (r, s)]
    # stacks named by intervals
    ivl = json.loads(get(urls[0] + "/api/v1/intervals?%s&kind=thread_state&limit=20000" % full)[1])
    ids = sorted({int(i["attrs"]["stack_id"]) for i in ivl["intervals"] if "stack_id" in i["attrs"]})
    qs += ["/api/v1/stack/%d" % i for i in ids[:: max(1, len(ids) // 200)]]
    qs += ["/api/v1/stack/0", "/api/v1/stack/999999999"]
    same = 0
    for q in qs:
        answers = [get(u + q) for u in urls]
        if all(a == answers[0] for a in answers[1:]):
            same += 1
            continue
        print("DIFFERENT: %s: %s" % (q, ", ".join("%d %d bytes" % (s, len(b)) for s, b in answers)))
    print("%d of %d answers the same on %d servers (%s)" % (same, len(qs), len(urls),
                                                          ", ".join(urls)))
    sys.exit(0 if same == len(qs) else 1)


main()
