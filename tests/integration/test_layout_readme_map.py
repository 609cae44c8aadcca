#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The README's tree map ("## Layout") agrees with the tree (issue #32), both ways:
- complete: every folder at the top, under src/, src/agent/, src/server/, src/server/store/ and
  tests/ is named in the map (as `name/`, or as the start of a path the map names);
- true: every folder (`name/`) and file (`name.c`, `bench/README.md`) the map names exists: from
  the top, or under the folder its line is about (the line's first word, the line above's when
  the line is indented, or the folder named before it on the line).
Folders and files are the checkout's (tracked, or untracked and not ignored).
Usage: test_layout_readme_map.py [ROOT] (default: this checkout)."""
import os
import re
import subprocess
import sys

# Folders whose every subfolder the map must name.
COMPLETE = ["", "src", "src/agent", "src/server", "src/server/store", "tests"]

TOKEN = re.compile(r"(?<![\w./-])([\w.-]+(?:/[\w.-]+)*(?:/|\.(?:c|h|md|py|sh|mk|js|mjs)))(?![\w/])")


def checkout_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True, capture_output=True).stdout
        return [p for p in out.decode().split("\0") if p and os.path.exists(os.path.join(root, p))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "node_modules"]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def the_map(root):
    text = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    m = re.search(r"^## Layout\n```[^\n]*\n(.*?)^```", text, re.S | re.M)
    if not m:
        return None
    return m.group(1).splitlines()


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    files = checkout_files(root)
    dirs = set()
    for p in files:
        parts = p.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    fileset = set(files)
    lines = the_map(root)
    if not lines:
        print("FAIL README.md has no '## Layout' section with a code block")
        return 1
    fail = 0
    named = set()		# base names the map gives as folders ("cpu", "store", "src/agent")
    scope = ""
    for ln, line in enumerate(lines, 1):
        if line and not line[0].isspace():
            first = line.split()[0]
            scope = first.rstrip("/") if first.endswith("/") and first.rstrip("/") in dirs else ""
        for m in TOKEN.finditer(line):
            tok = m.group(1)
            is_dir = tok.endswith("/")
            name = tok.rstrip("/")
            named.add(name)
            if is_dir and name in dirs and m.start() > 0:
                scope = name	# a second column: "bench/ ...   docs/ design.md"
            pool = dirs if is_dir else fileset
            ok = name in pool or any(
                p == f"{scope}/{name}" or (scope and p.startswith(scope + "/") and
                                          p.endswith("/" + name))
                for p in pool)
            if not ok:
                print(f"FAIL README.md map line {ln}: '{tok}' does not exist"
                      f"{' under ' + scope + '/' if scope else ''}")
                fail = 1
    for parent in COMPLETE:
        kids = sorted(d for d in dirs if os.path.dirname(d) == parent and
                      not os.path.basename(d).startswith("."))
        for d in kids:
            base = os.path.basename(d)
            if d not in named and base not in named and \
                    not any(n.startswith(d + "/") for n in named):
                print(f"FAIL {d}/ is not in README.md's map")
                fail = 1
    if not fail:
        print(f"README.md's map names every folder of {', '.join(p or '/' for p in COMPLETE)}"
              f" and only what exists ({len(named)} names)")
    return fail


if __name__ == "__main__":
    sys.exit(main())
