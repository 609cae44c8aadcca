#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Agent modules keep their internals (issue #32): no file of src/agent/<mod>/ includes another
module's private header (src/agent/<other>/*_int.h or *_state.h). What modules share goes
through their public headers, run.c and struct agent.
Usage: test_layout_module_headers.py [ROOT] (default: this checkout)."""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
PRIVATE = re.compile(r"_(int|state)\.h$")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    agent = os.path.join(root, "src", "agent")
    fail = 0
    files = 0
    for mod in sorted(os.listdir(agent)):
        mdir = os.path.join(agent, mod)
        if not os.path.isdir(mdir):
            continue
        for dirpath, _, names in os.walk(mdir):
            for n in sorted(names):
                if not n.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, n)
                files += 1
                text = open(path, encoding="utf-8", errors="replace").read()
                for inc in INCLUDE.findall(text):
                    full = os.path.normpath(os.path.join(dirpath, inc)) if inc.startswith(".") \
                        else os.path.normpath(os.path.join(root, "src", inc))
                    rel = os.path.relpath(full, agent).split(os.sep)
                    if len(rel) < 2 or rel[0] in (mod, "..") or not PRIVATE.search(rel[-1]):
                        continue
                    print(f"FAIL {os.path.relpath(path, root)} includes {inc}, a private header "
                          f"of module {rel[0]}/")
                    fail = 1
    if files < 20:
        print(f"FAIL only {files} files under src/agent/: wrong root?")
        fail = 1
    print(f"{files} files of the agent's modules checked")
    return fail


if __name__ == "__main__":
    sys.exit(main())
