#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""No room over 1000 lines (issue #32): every source file under src/ and every C file under
tests/ has at most 1000 lines. PENDING names the files still over, each with why it is not split
yet; the test also fails when one of them is back under the limit (drop it from the list).
Usage: test_layout_sizes.py [ROOT] (default: this checkout)."""
import os
import subprocess
import sys

LIMIT = 1000
SRC_EXT = (".c", ".h", ".cc", ".cpp", ".py", ".sh", ".js", ".mjs")
TEST_EXT = (".c", ".h", ".cc", ".cpp")

# Over the limit for a reason outside the file; each entry says what unblocks it.
PENDING = {
}


def tracked(root):
    """Files of the checkout: tracked plus untracked-not-ignored (a new file counts at once)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True, capture_output=True).stdout
        return [p for p in out.decode().split("\0") if p and os.path.isfile(os.path.join(root, p))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x != "node_modules"]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def lines(path):
    with open(path, "rb") as f:
        return f.read().count(b"\n")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    fail = 0
    checked = 0
    for p in sorted(tracked(root)):
        if not ((p.startswith("src/") and p.endswith(SRC_EXT)) or
                (p.startswith("tests/") and p.endswith(TEST_EXT))):
            continue
        checked += 1
        n = lines(os.path.join(root, p))
        if p in PENDING:
            if n <= LIMIT:
                print(f"FAIL {p}: {n} lines, no longer over {LIMIT}: drop it from PENDING")
                fail = 1
            else:
                print(f"pending {p}: {n} lines ({PENDING[p]})")
        elif n > LIMIT:
            print(f"FAIL {p}: {n} lines, over {LIMIT}: split it by concern")
            fail = 1
    for p in PENDING:
        if not os.path.exists(os.path.join(root, p)):
            print(f"FAIL {p} is in PENDING but does not exist")
            fail = 1
    if checked < 100:
        print(f"FAIL only {checked} files checked: wrong root?")
        fail = 1
    print(f"{checked} files checked, limit {LIMIT} lines")
    return fail


if __name__ == "__main__":
    sys.exit(main())
