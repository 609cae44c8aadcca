#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Docs name only what exists (issue #32): every repository path that README.md, docs/*.md and
bench/README.md write (src/..., tests/..., docs/..., bench/..., mk/..., scripts/..., deploy/...,
proto/..., ui/...) exists, and so does every upper-case page they name (STYLE.md, DESIGN.md),
at the top, in docs/ or beside the page. Accepted too: a program built from the path's source
(tests/tools/batchgen from batchgen.c) and what git ignores (build output such as
ui/node_modules). Patterns (test_*, <mod>, {a,b}) are not paths.
Usage: test_layout_doc_paths.py [ROOT] (default: this checkout)."""
import glob
import os
import re
import subprocess
import sys

PATH = re.compile(r"(?<![\w./$-])((?:src|tests|docs|bench|mk|scripts|deploy|proto|ui)/[\w./*<>{}\[\],+-]*)")
PAGE = re.compile(r"(?<![\w./-])([A-Z][A-Z_]+\.md)\b")
SOURCE_EXT = ("", ".c", ".py", ".sh", ".mjs", ".js")


def ignored(root, p):
    try:
        # with and without a slash: a folder pattern (/ui/node_modules/) matches only the latter
        # when the folder is absent
        return any(subprocess.run(["git", "-C", root, "check-ignore", "-q", q]).returncode == 0
                   for q in (p, p + "/"))
    except OSError:
        return False


def exists(root, p):
    return any(os.path.exists(os.path.join(root, p + e)) for e in SOURCE_EXT) or ignored(root, p)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    pages = ["README.md", "bench/README.md"] + sorted(
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    fail = 0
    seen = 0
    for page in pages:
        with open(os.path.join(root, page), encoding="utf-8") as f:
            text = f.readlines()
        for ln, line in enumerate(text, 1):
            for m in PATH.finditer(line):
                p = m.group(1).rstrip(".,:;)]'")
                if any(c in p for c in "*<>{}[]"):
                    continue
                seen += 1
                if not exists(root, p):
                    print(f"FAIL {page}:{ln}: '{p}' does not exist")
                    fail = 1
            for m in PAGE.finditer(line):
                p = m.group(1)
                seen += 1
                if not any(os.path.exists(os.path.join(root, d, p))
                           for d in ("", "docs", os.path.dirname(page))):
                    print(f"FAIL {page}:{ln}: page '{p}' does not exist")
                    fail = 1
    if seen < 50:
        print(f"FAIL only {seen} paths found: wrong root?")
        fail = 1
    print(f"{seen} paths named in {len(pages)} pages checked")
    return fail


if __name__ == "__main__":
    sys.exit(main())
