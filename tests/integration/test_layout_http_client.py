#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One HTTP client in the agent (issue #32, item 4): only src/agent/http_client.c talks to
libcurl. Two checks, each of which fails on a second client:
- source: no other file under src/agent/ includes <curl/curl.h> or names a libcurl call or type
  (curl_*, CURL, CURLOPT_*, ...);
- objects: in the built agent library (.output/libgpuscope_agent.a), only http_client.o has
  undefined libcurl symbols (nm), so a handle made through a macro or another header is caught.
The checks run first on a made-up tree with a second client, which they must reject.
Usage: test_layout_http_client.py [ROOT] (default: this checkout)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

OWNER = {"http_client.c", "http_client.h"}
OWNER_OBJ = "http_client.o"
CURL = re.compile(r"#\s*include\s*<curl/|\bcurl_\w+\s*\(|\bCURL(?:OPT|INFO|E|M)?_?\w*\b")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def source_offenders(root):
    agent = os.path.join(root, "src", "agent")
    bad = []
    for d, _, names in os.walk(agent):
        for n in sorted(names):
            if not n.endswith((".c", ".h")) or (d == agent and n in OWNER):
                continue
            path = os.path.join(d, n)
            text = COMMENT.sub("", open(path, encoding="utf-8", errors="replace").read())
            m = CURL.search(text)
            if m:
                bad.append(f"{os.path.relpath(path, root)}: '{m.group(0).strip()}'")
    return bad


def object_offenders(lib):
    """Members of the archive, other than the client's, with undefined curl_* symbols."""
    out = subprocess.run(["nm", "-A", "-u", lib], check=True, capture_output=True,
                         text=True).stdout
    bad = set()
    for line in out.splitlines():
        # "lib.a:member.o:                 U curl_easy_init"
        parts = line.split()
        if len(parts) < 2 or not parts[-1].startswith("curl_"):
            continue
        member = parts[0].split(":")[-2] if parts[0].count(":") >= 2 else parts[0]
        if member != OWNER_OBJ:
            bad.add(f"{member}: {parts[-1]}")
    return sorted(bad)


def self_check():
    """The source check must catch a second client in a made-up tree."""
    tmp = tempfile.mkdtemp(prefix="gpuscope-httpc-")
    try:
        os.makedirs(os.path.join(tmp, "src", "agent", "newmod"))
        with open(os.path.join(tmp, "src", "agent", "http_client.c"), "w") as f:
            f.write("#include <curl/curl.h>\nvoid *x(void) { return curl_easy_init(); }\n")
        with open(os.path.join(tmp, "src", "agent", "newmod", "poll.c"), "w") as f:
            f.write("/* curl_easy_init() in a comment is fine */\n"
                    "void *y(void) { return curl_easy_init(); }\n")
        got = source_offenders(tmp)
        return len(got) == 1 and "newmod/poll.c" in got[0] and "curl_easy_init" in got[0]
    finally:
        shutil.rmtree(tmp)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    fail = 0
    if not self_check():
        print("FAIL the source check misses a second client in a made-up tree")
        fail = 1
    if not os.path.exists(os.path.join(root, "src", "agent", "http_client.c")):
        print("FAIL src/agent/http_client.c is missing")
        return 1
    for b in source_offenders(root):
        print(f"FAIL {b}: libcurl outside src/agent/http_client.c (use agent/http_client.h)")
        fail = 1
    lib = os.path.join(root, ".output", "libgpuscope_agent.a")
    if not shutil.which("nm") or not os.path.exists(lib):
        print(f"FAIL {lib} or nm missing: build first (make)")
        return 1
    try:
        owner_syms = subprocess.run(["nm", "-u", os.path.join(root, ".output", "obj", "src",
                                                               "agent", OWNER_OBJ)],
                                    capture_output=True, text=True).stdout
    except OSError:
        owner_syms = ""
    if "curl_easy_init" not in owner_syms:
        print("FAIL http_client.o does not call curl_easy_init: is the nm check looking at "
              "the right objects?")
        fail = 1
    for b in object_offenders(lib):
        print(f"FAIL {b}: a libcurl call outside http_client.o")
        fail = 1
    print("agent sources and objects checked: libcurl only in http_client")
    return fail


if __name__ == "__main__":
    sys.exit(main())
