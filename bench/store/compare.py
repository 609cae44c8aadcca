#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Asks two or more servers holding the same data (bench/store/compare.sh: one recording stored by
two server versions, and a store migrated from the older one) the same questions and compares
the answers byte for byte: flame graphs (both sample kinds, selectors on process and thread
labels, group_by), diff, top, samples over time, processes, pprof, labels and their values,
intervals (with and without kind, selector, limit) and stacks, over the whole recording and over
ranges that start and end inside minutes (raw chunks and rollups mixed). Prints how many
answers matched and every one that did not.
--rounded (the first URL a store of ns times, the others perhaps of µs times: schema 8's
--time-resolution us): answers must still be the same byte for byte, except that intervals are
compared with their times and *_ns attrs floored to µs (a derived one, such as a summary's
running_ns, its length less the others, 0 to 3 µs above), ties of start in any order, those
ending less than 1 µs after `from` left out (a floored end no longer overlaps), and at a
truncated answer's last start either way; and
samples over time with each series' total the same and a sample lying within 1 µs before a
bucket edge in either bucket (every bucket within 2 samples, or for off-CPU time within the
largest sample's value, of the other answer's). Answers of off-CPU time (kind=offcpu_ns: flame
graphs, diff, top, processes, samples over time, pprof; schema 9 rounds each off-CPU sample's
value to the nearest µs, one under 0.5 µs to 1 µs; schema 15 keeps the whole µs between the
floors of its start and its time, at least one) must be the same but for their numbers of
ns: the same JSON keys, strings and list lengths (top's functions and processes matched by name
and pid, in any order), pprof's the same Profile but for its samples' values, and each number
of ns within 1000 x N of the other answer's, N the off-CPU samples the ns store holds (the
bound of any one number's samples: compare.py cannot count a node's), samples over time's
buckets within that and the largest bucket. The largest difference seen, absolute and
relative, is printed. Prints how many answers were the same byte for byte, how many only so
rounded, and each that differs.
--stack-ids (stores whose stacks were numbered in another order: schema 14 numbers a batch's
new stacks as its sample chunks list them): an intervals answer is compared with each
`stack_id` attr replaced by that stack as its own server answers it (/api/v1/stack/ID), so the
stacks every interval names are compared by content, and a pprof answer with its ids resolved
(pprof_canonical()), and a top answer with its ties of value by name (the order schema 14's
server gives them; before, the order the stacks came in), the names of the functions tied at
its last place left out (each server may list other ones of that tie at a limit's cut); the
questions of single stacks by id are left out (but for the unknown ids
0 and 999999999).
--no-named-addresses (with --stack-ids; a store of a server that keeps named frames without
their addresses, `--frame-addresses unnamed`, against one that kept them): stacks by content
without their frames' "address" (an unnamed frame's name holds its address), and pprof answers
with named locations' addresses as 0, their samples of equal locations and labels summed and
mappings compared by file and build id; every other answer byte for byte as before.
Usage: compare.py [--rounded] [--stack-ids [--no-named-addresses]] URL URL..."""
import gzip
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "integration"))
import pbwire  # noqa: E402  (protobuf wire reading, shared with the store tests)


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=300) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def jl(body):
    """JSON of an answer whose strings may hold bytes that are not UTF-8 (a function name as
    the binary has it): kept as they are (surrogate escapes), so they compare byte for byte."""
    return json.loads(body.decode("utf-8", "surrogateescape"))


def floor_us(v):
    return int(v) // 1000


def intervals_rounded(q, body):
    """An intervals answer as rounded mode compares it: (kept intervals, truncated)."""
    a = json.loads(body)
    frm = float(urllib.parse.parse_qs(urllib.parse.urlsplit(q).query)["from"][0]) * 1e3
    ivs = [i for i in a["intervals"] if round(i["end_ms"] * 1e3) > round(frm * 1e3)]
    if a.get("truncated") and ivs:  # at the cut, either of a tie of start may be in
        last = ivs[-1]["start_ms"]
        ivs = [i for i in ivs if i["start_ms"] != last]
    out = []
    for i in ivs:
        attrs = {k: (floor_us(v) if k.endswith("_ns") and v.isdigit() else v)
                 for k, v in i.get("attrs", {}).items()}
        out.append((i["start_ms"], i["end_ms"], json.dumps({k: v for k, v in i.items()
                                                            if k != "attrs"}, sort_keys=True),
                    attrs))
    out.sort(key=lambda x: (x[0], x[1], x[2], json.dumps(x[3], sort_keys=True)))
    return out


OFFCPU_TOL = [0]  # ns: 1000 x the off-CPU samples the ns store holds (main() sets it)
WORST = [0, 0.0]  # the largest absolute (ns) and relative difference of an off-CPU number


def near(x, y, tol):
    """JSON values x and y the same but for numbers, each within tol (off-CPU answers)."""
    if isinstance(x, bool) or isinstance(y, bool) or isinstance(x, str) or x is None:
        return x == y
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        d = abs(x - y)
        WORST[0] = max(WORST[0], d)
        if d:
            WORST[1] = max(WORST[1], d / max(abs(x), 1))
        return d <= tol
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(near(x[k], y[k], tol) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            return False
        for key in ("name", "pid"):  # top's functions, processes: ordered by value
            if x and all(isinstance(e, dict) and key in e for e in x + y):
                kx = {e[key]: e for e in x}
                ky = {e[key]: e for e in y}
                return kx.keys() == ky.keys() and all(near(kx[k], ky[k], tol) for k in kx) \
                    if len(kx) == len(x) and len(ky) == len(y) else False
        return all(near(u, v, tol) for u, v in zip(x, y))
    return False


pb_fields, pb_varints = pbwire.fields, pbwire.varints


def pprof_near(a, b, tol):
    """Two pprof answers (gzip'ed Profile) the same but for their samples' values (field 2 of
    each Sample, field 2 of the Profile), each within tol."""
    x, y = pb_fields(gzip.decompress(a)), pb_fields(gzip.decompress(b))
    if len(x) != len(y):
        return False
    for (f, w, u), (g, w2, v) in zip(x, y):
        if (f, w) != (g, w2):
            return False
        if f != 2 or w != 2:
            if u != v:
                return False
            continue
        su, sv = pb_fields(u), pb_fields(v)
        if [e for e in su if e[0] != 2] != [e for e in sv if e[0] != 2]:
            return False
        vu = [n for e in su if e[0] == 2 for n in (pb_varints(e[2]) if e[1] == 2 else [e[2]])]
        vv = [n for e in sv if e[0] == 2 for n in (pb_varints(e[2]) if e[1] == 2 else [e[2]])]
        if len(vu) != len(vv) or not all(near(p, q, tol) for p, q in zip(vu, vv)):
            return False
    return True


def top_canonical(a, q):
    """A top answer with its ties of (self, total) by name (schema 14's server orders them so;
    before, in the order the stacks came, which their ids decided); of the functions tied at
    the last place of a full list (limit reached) only their values, since either server may
    list other ones of the tie there."""
    x = jl(a)
    fs = sorted(x.get("functions", []), key=lambda f: (-f["self"], -f["total"], f["name"]))
    limit = urllib.parse.parse_qs(urllib.parse.urlsplit(q).query).get("limit", [None])[0]
    if fs and limit and len(fs) == int(limit):
        last = (fs[-1]["self"], fs[-1]["total"])
        fs = [f if (f["self"], f["total"]) != last else dict(f, name="(tied at the cut)")
              for f in fs]
    x["functions"] = fs
    return json.dumps(x, sort_keys=True)


NO_NAMED_ADDR = [False]


def pprof_canonical(a):
    """A pprof answer (gzip'ed Profile) with its ids resolved, as a digest: the sorted hashes of
    its samples (each its locations' mapping, address and lines by name, its values, its labels
    by name), the sorted mappings by content, every other field as it is (types by name). Two
    profiles of the same stacks numbered in another order (--stack-ids) are equal so; hashes,
    not the samples themselves, so that an hour's profile fits in memory."""
    f = pb_fields(gzip.decompress(a))
    strs = [bytes(v) for n, w, v in f if n == 6]
    fns, maps, locs, samples, rest = {}, {}, {}, [], []

    def ints(e, n):
        return [x for k, w, v in e if k == n for x in (pb_varints(v) if w == 2 else [v])]

    def one(e, n, d=0):
        v = [v for k, _, v in e if k == n]
        return v[0] if v else d
    for n, w, v in f:
        e = pb_fields(v) if w == 2 and n in (3, 4, 5) else None
        if n == 5:
            fns[one(e, 1)] = tuple(strs[one(e, k)] for k in (2, 3, 4)) + (one(e, 5),)
        elif n == 3:
            maps[one(e, 1)] = (one(e, 2), one(e, 3), one(e, 4), strs[one(e, 5)],
                               strs[one(e, 6)]) + tuple(one(e, k) for k in (7, 8, 9, 10))
        elif n == 4:
            lines = tuple((one(pb_fields(l), 1), one(pb_fields(l), 2)) for k, _, l in e if k == 4)
            locs[one(e, 1)] = (one(e, 2), one(e, 3), lines, one(e, 5))
        elif n == 2:
            samples.append(v)
        elif n in (1, 11):	# sample and period types: (type, unit) by name
            rest.append((n, tuple(strs[one(pb_fields(v), k)] for k in (1, 2))))
        elif n in (7, 8, 13, 14):	# string indexes
            rest.append((n, strs[v]))
        elif n != 6:
            rest.append((n, w, v if w != 2 else bytes(v)))
    canon = {}	# location id -> hash of its content
    noaddr = NO_NAMED_ADDR[0]
    if noaddr:	# a mapping by file and build id (its range follows the addresses stored)
        maps = {k: (v[3], v[4]) for k, v in maps.items()}

    def loc(i):
        if i not in canon:
            m, addr, lines, folded = locs[i]
            named = tuple((fns.get(fid), ln) for fid, ln in lines)
            if noaddr and any(f and f[0] not in (b"", b"[unknown]") for f, _ in named):
                addr = 0
            canon[i] = hash((maps.get(m), addr, named, folded))
        return canon[i]
    out = []
    summed = {}
    for v in samples:
        e = pb_fields(v)
        labels = sorted((strs[one(pb_fields(l), 1)], strs[one(pb_fields(l), 2)],
                         one(pb_fields(l), 3), strs[one(pb_fields(l), 4)])
                        for k, _, l in e if k == 3)
        key = (tuple(loc(i) for i in ints(e, 1)), tuple(labels))
        if noaddr:
            vals = ints(e, 2)
            old = summed.get(key)
            summed[key] = vals if old is None else [x + y for x, y in zip(old, vals)]
        else:
            out.append(hash((key[0], tuple(ints(e, 2)), key[1])))
    if noaddr:
        out = [hash((k[0], tuple(v), k[1])) for k, v in summed.items()]
    return (sorted(out), sorted(set(maps.values()), key=repr), rest)


def same_rounded(q, a, b):
    """Rounded mode (see above): answer a (ns store) and b the same up to µs times?"""
    if a[0] != b[0]:
        return False
    if "kind=offcpu_ns" in q and a[0] == 200:
        tol = OFFCPU_TOL[0]
        if q.startswith("/api/v1/pprof"):
            return pprof_near(a[1], b[1], tol)
        x, y = jl(a[1]), jl(b[1])
        if q.startswith("/api/v1/samples"):  # and a sample within 1 µs of a bucket edge
            return all(near(s["total"], t["total"], tol) and len(s["values"]) == len(t["values"])
                       and all(near(u, v, tol + max(s["values"] + [0]))
                               for u, v in zip(s["values"], t["values"]))
                       for s, t in zip(x["series"], y["series"])) and \
                len(x["series"]) == len(y["series"]) and \
                [s.get("group") for s in x["series"]] == [t.get("group") for t in y["series"]] and \
                {k: v for k, v in x.items() if k != "series"} == \
                {k: v for k, v in y.items() if k != "series"}
        return near(x, y, tol)
    if q.startswith("/api/v1/intervals"):
        x, y = intervals_rounded(q, a[1]), intervals_rounded(q, b[1])
        if len(x) != len(y):
            return False
        for i, j in zip(x, y):
            if i[:3] != j[:3] or i[3].keys() != j[3].keys():
                return False
            for k, v in i[3].items():
                w = j[3][k]
                if v != w and not (k.endswith("_ns") and isinstance(v, int) and
                                   isinstance(w, int) and 0 <= w - v <= 3):
                    return False
        return True
    if q.startswith("/api/v1/samples"):
        x, y = json.loads(a[1]), json.loads(b[1])
        if {k: v for k, v in x.items() if k != "series"} != \
                {k: v for k, v in y.items() if k != "series"} or len(x["series"]) != len(y["series"]):
            return False
        for s, t in zip(x["series"], y["series"]):
            if s.get("group") != t.get("group") or s["total"] != t["total"]:
                return False
            tol = 2 if x.get("unit") == "samples" else max(s["values"] + [0])
            if any(abs(u - v) > tol for u, v in zip(s["values"], t["values"])):
                return False
        return True
    return False


STACKS = {}


def stacks_by_content(url, body):
    """An intervals answer with every stack_id attr replaced by the stack url answers for it."""
    a = jl(body)
    for i in a.get("intervals", []):
        sid = i.get("attrs", {}).get("stack_id")
        if sid is not None:
            key = (url, sid)
            if key not in STACKS:
                STACKS[key] = jl(get(url + "/api/v1/stack/" + sid)[1])
                if NO_NAMED_ADDR[0]:
                    for f in STACKS[key].get("frames", []):
                        f.pop("address", None)
            i["attrs"]["stack_id"] = STACKS[key]
    return json.dumps(a, sort_keys=True)


def main():
    args = sys.argv[1:]
    rounded = "--rounded" in args
    stack_ids = "--stack-ids" in args
    NO_NAMED_ADDR[0] = "--no-named-addresses" in args
    urls = [a for a in args if not a.startswith("--")]
    if len(urls) < 2:
        sys.exit(__doc__)
    nodes = json.loads(get(urls[0] + "/api/v1/nodes")[1])["nodes"]
    t0 = nodes[0]["first_ms"] / 1e3
    t1 = nodes[0]["last_ms"] / 1e3
    ranges = [(t0 - 1, t1 + 1), (t0 + 7.3, t0 + 1234.567), (t0 + 1023.21, t0 + 3160.5),
              (t0 + 1800.001, t0 + 1980.999)]
    full = "from=%.3f&to=%.3f" % ranges[0]
    if rounded:  # the off-CPU samples the ns store holds: all less CPU ones (a value of 1 each)
        cpu = jl(get(urls[0] + "/api/v1/flamegraph?" + full + "&kind=cpu")[1])["total"]
        held = [float(ln.split()[1]) for ln in get(urls[0] + "/metrics")[1].decode().splitlines()
                if ln.startswith("gpuscope_server_store_samples_held ")]
        OFFCPU_TOL[0] = 1000 * (int(held[0]) - cpu)
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
    if not stack_ids:
        qs += ["/api/v1/stack/%d" % i for i in ids[:: max(1, len(ids) // 200)]]
    qs += ["/api/v1/stack/0", "/api/v1/stack/999999999"]
    same = near = 0
    for q in qs:
        answers = [get(u + q) for u in urls]
        if all(a == answers[0] for a in answers[1:]):
            same += 1
            continue
        if stack_ids and all(a[0] == answers[0][0] for a in answers[1:]) and \
                q.startswith(("/api/v1/intervals", "/api/v1/pprof", "/api/v1/top")):
            byc = [stacks_by_content(u, a[1]) if q.startswith("/api/v1/intervals")
                   else pprof_canonical(a[1]) if q.startswith("/api/v1/pprof")
                   else top_canonical(a[1], q) for u, a in zip(urls, answers)]
            if all(b == byc[0] for b in byc[1:]):
                same += 1
                continue
        if rounded and all(a == answers[0] or same_rounded(q, answers[0], a)
                           for a in answers[1:]):
            near += 1
            print("same rounded to us: %s: %s" % (q, ", ".join("%d %d bytes" % (s, len(b))
                                                             for s, b in answers)), flush=True)
            continue
        print("DIFFERENT: %s: %s" % (q, ", ".join("%d %d bytes" % (s, len(b)) for s, b in answers)),
              flush=True)
    if rounded:
        print("off-CPU numbers: tolerance %d ns; largest difference %d ns, relative %.2g" % (
            OFFCPU_TOL[0], WORST[0], WORST[1]))
    print("%d of %d answers the same on %d servers (%s)%s" % (
        same + near, len(qs), len(urls), ", ".join(urls),
        ": %d byte for byte, %d only rounded to us" % (same, near) if rounded else ""))
    sys.exit(0 if same + near == len(qs) else 1)


main()
