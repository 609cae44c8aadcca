#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The packages `make run` installs (scripts/deps/*.txt without -test) cover what its build and
its hints use: every library the run binaries link (`make -n bins`'s -lX, resolved by the
compiler and `dpkg -S`) comes from a package named in a run list; every tool the build, the
run script and its printed hints invoke, and every system header the run sources include, from
a run package, a package those depend on, or Debian's base (Essential, apt). A package listed
only in a -test list fails here: `make run` on a stock Debian would not have it."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from lib import ROOT, check, finish, skip  # noqa: E402

CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")
# shell words that are not programs
BUILTINS = {"cd", "echo", "printf", "command", "exit", ":", "true", "false", "test", "[", "set",
            "export", "if", "then", "else", "elif", "fi", "for", "do", "done", "while", "trap",
            "read", "local", "wait", "kill", "return", "case", "esac", "exec", "shift", "type",
            "mapfile", "break", "continue", "!"}

if not shutil.which("dpkg") or not shutil.which("make"):
    skip("no dpkg or make here: the package lists are Debian's")


def sh(*argv):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          cwd=ROOT).stdout


# --- the lists: run (what `make run` installs) and test ------------------------------------------
def read_lists(test):
    pkgs = {}
    for f in sorted(glob.glob(os.path.join(ROOT, "scripts/deps/*.txt"))):
        if f.endswith("-test.txt") != test:
            continue
        for line in open(f):
            for w in line.split("#")[0].split():
                pkgs[w.lstrip("?")] = os.path.relpath(f, ROOT)
    return pkgs


run_pkgs, test_pkgs = read_lists(False), read_lists(True)
check(len(run_pkgs) > 10, "%d packages in the run lists, %d in the test lists" %
      (len(run_pkgs), len(test_pkgs)))

# --- installed packages: dependencies (the first installed alternative, as apt resolved it here),
# virtual packages, Debian's base
deps, provides, base = {}, {}, {"apt"}
fmt = "${Package}\t${Pre-Depends}, ${Depends}\t${Provides}\t${Essential}\t${db:Status-Abbrev}\n"
for line in sh("dpkg-query", "-W", "-f", fmt).splitlines():
    name, dep, prov, ess, status = line.split("\t")
    if not status.startswith("ii"):
        continue
    deps[name] = dep
    for p in prov.split(","):
        if p.strip():
            provides.setdefault(p.split()[0].split(":")[0], name)
    if ess == "yes":
        base.add(name)


def real(name):
    name = name.split(":")[0]
    return name if name in deps else provides.get(name)


def closure(roots):
    seen, todo = set(), [r for r in map(real, roots) if r]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for group in deps.get(p, "").split(","):
            for alt in group.split("|"):
                r = real(alt.split("(")[0].strip()) if alt.strip() else None
                if r:
                    todo.append(r)
                    break
    return seen


run_closure = closure(run_pkgs)
base_closure = closure(base)


def owner(path):
    """The package that installed PATH (as dpkg knows it: /usr/lib or /lib), else None."""
    cands = [path, os.path.realpath(path)]
    for c in list(cands):
        if c.startswith("/usr/"):
            cands.append(c[4:])
        elif c.startswith(("/lib", "/bin", "/sbin")):
            cands.append("/usr" + c)
    for c in cands:
        out = sh("dpkg", "-S", c)
        if out:
            return out.split(":")[0].split(",")[0].strip()
    return None


def where(pkg):
    if pkg in test_pkgs:
        return "listed only in %s" % test_pkgs[pkg]
    return "in no list"


# --- the plan: every command `make bins` runs, from an empty output directory --------------------
tmp = tempfile.mkdtemp(prefix="test-deps-")
plan = subprocess.run(["make", "--no-print-directory", "-nB", "OUT=" + tmp + "/out", "bins"],
                      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
shutil.rmtree(tmp)
check(plan.returncode == 0, "make -nB bins plans the run binaries' build")
cmds = plan.stdout.replace("\\\n", " ").splitlines()
links = [c for c in cmds if re.search(r"(^|\s)-o \S*/(gpuscope-agent|gpuscope-server|gpuscope|"
                                      r"libgpuscope_cupti\.so)(\s|$)", c)]
check(len(links) >= 3, "the plan links the agent, server and CLI (%d link commands)" % len(links))

# --- libraries: each -lX of a run binary from a package named in a run list
libs = {}
for c in links:
    ldirs = re.findall(r"(?:^|\s)-L\s*(\S+)", c)
    for lib in re.findall(r"(?:^|\s)-l(\S+)", c):
        libs.setdefault(lib, set()).update(ldirs)
check({"bpf", "sqlite3", "curl", "protobuf-c"} <= set(libs),
      "libraries of the run binaries found in the plan: %s" % " ".join(sorted(libs)))
for lib, ldirs in sorted(libs.items()):
    path = None
    for d in ldirs:
        for ext in ("so", "a"):
            if os.path.exists(os.path.join(d, "lib%s.%s" % (lib, ext))):
                path = os.path.join(d, "lib%s.%s" % (lib, ext))
                break
        if path:
            break
    if path and os.path.realpath(path).startswith(os.path.realpath(CUDA_HOME)):
        print("ok   -l%s: %s (the CUDA toolkit, built only where it is installed)" % (lib, path))
        continue
    for ext in ("so", "a"):
        if path:
            break
        p = sh("gcc", "-print-file-name=lib%s.%s" % (lib, ext)).strip()
        if os.path.isabs(p) and os.path.exists(p):
            path = os.path.normpath(p)
    if not check(path is not None, "-l%s resolves to a file (gcc -print-file-name)" % lib):
        continue
    pkg = owner(path)
    check(pkg in run_pkgs, "-l%s: %s from %s, %s" % (
        lib, path, pkg, "listed in " + run_pkgs[pkg] if pkg in run_pkgs else where(pkg)))


# --- tools: the build's, the run script's and its hints'
def first_words(line):
    """The program of each simple command of a shell line (quotes and redirections dropped)."""
    line = re.sub(r"'[^']*'", "''", line)
    line = re.sub(r'"(\\.|[^"\\])*"', lambda m: m.group(0) if "$(" in m.group(0) else '""', line)
    line = re.sub(r"^\s*\w+\(\)\s*\{", "", line)
    line = re.sub(r"\$\(\(.*?\)\)", "0", line)
    line = re.sub(r"^\s*[\w|*-]+\)", "", line)
    words = []
    for part in re.split(r"&&|\|\||[;|{}()`]|\$\(|\bthen\b|\bdo\b|\belse\b|\bif\b|\b!", line):
        toks = [t for t in part.split() if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", t)]
        toks = [t for t in toks if not re.match(r"^\d*[<>]", t)]
        if toks:
            words.append(toks[0])
    return words


def check_tool(word, what):
    if word in BUILTINS or word.startswith(("$", "\\$", '"')) or "/.output/" in word:
        return
    path = shutil.which(word, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if not check(path is not None, "%s: %s is installed here (to find its package)" % (what, word)):
        return
    pkg = owner(path)
    ok = pkg in run_closure or pkg in base_closure
    check(ok, "%s: %s (%s) from %s, %s" % (what, word, path, pkg,
              "a run package or one they depend on" if pkg in run_closure
              else "Debian's base" if ok else where(pkg)))


tools = {}
for c in cmds:
    for w in first_words(c.strip()):
        tools.setdefault(w, "build")
# what the Makefiles run while they are read ($(shell ...))
for mk in ["Makefile"] + sorted(glob.glob(os.path.join(ROOT, "mk", "*.mk"))):
    for w in re.findall(r"\$\(shell\s+([^\s)]+)", open(os.path.join(ROOT, mk)).read()):
        tools.setdefault(w, os.path.relpath(os.path.join(ROOT, mk), ROOT) + " $(shell)")
# the scripts `make run` runs: their code, not their strings or comments
for script in ("scripts/run", "scripts/install-deps"):
    body = open(os.path.join(ROOT, script)).read()
    body = re.sub(r"<<(\w+)\n.*?\n\1\n", "\n", body, flags=re.S)
    for line in body.splitlines():
        line = line.split(" #")[0]
        if line.strip().startswith("#"):
            continue
        for w in first_words(line.strip()):
            if re.match(r"^[a-z][a-z0-9_.+-]*$", w) and w not in ("in", "case", "esac"):
                tools.setdefault(w, script)
# the hints scripts/run prints: the lines under "try"
msg = re.search(r"<<MSG\n(.*?)\nMSG", open(os.path.join(ROOT, "scripts/run")).read(), re.S)
hints = msg.group(1).split("try", 1)[1].splitlines()[1:] if msg else []
hints = [h for h in hints if h.startswith("    ")]
check(len(hints) >= 3, "scripts/run prints %d commands to try" % len(hints))
for h in hints:
    for w in first_words(h.split(" #")[0].strip()):
        if w.startswith("$OUT/"):
            check(w[5:] in ("gpuscope", "gpuscope-agent", "gpuscope-server"),
                  "hint runs %s, which make bins builds" % w)
            continue
        tools[w] = "the run hints"
# functions the scripts define, shell words and what is left of strings are not programs
tools = {w: s for w, s in tools.items() if w not in BUILTINS and re.match(r"^[\w./+-]+$", w) and
         w not in ("port_free", "cleanup", "installed", "install")}
for w, what in sorted(tools.items(), key=lambda t: (t[1], t[0])):
    check_tool(w, what)
check({"npm", "node", "bpftool", "clang", "protoc-c", "pgrep", "dpkg-query", "setsid"} <=
      set(os.path.basename(w) for w in tools),
      "tools found: %s" % " ".join(sorted(tools)))

# --- headers the run sources include (<...>), resolved along the compilers' search paths
def search_dirs(cmd):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL).stderr
    m = re.search(r"#include <\.\.\.> search starts here:\n(.*?)End of search list", out, re.S)
    return [d.strip() for d in m.group(1).splitlines()] if m else []


dirs = search_dirs(["gcc", "-xc", "-E", "-v", "/dev/null"])
bpf_dirs = search_dirs(["clang", "-target", "bpf", "-xc", "-E", "-v", "/dev/null"])
arch = sh("gcc", "-dumpmachine").strip()
srcs = [f for d in ("src/agent", "src/server", "src/cli", "src/common", "src/cupti")
        for f in glob.glob(os.path.join(ROOT, d, "**", "*.[ch]"), recursive=True)]
headers = {}
for f in srcs:
    bpf = ".bpf." in f or f.endswith("gpuscope.bpf.h")
    for h in re.findall(r'^\s*#\s*include\s*<([^>]+)>', open(f).read(), re.M):
        headers.setdefault((h, bpf or "/cupti/" in f and f.endswith(".bpf.c")), f)
missing = []
hpkgs = {}
for (h, bpf), f in sorted(headers.items()):
    if h == "vmlinux.h" or os.path.exists(os.path.join(ROOT, "src", h)) or h.endswith(".pb-c.h") \
            or h.endswith(".skel.h"):
        continue
    path = None
    for d in (bpf_dirs + ["/usr/include/" + arch] if bpf else dirs) + [CUDA_HOME + "/include"]:
        if os.path.exists(os.path.join(d, h)):
            path = os.path.join(d, h)
            break
    if path is None:
        missing.append("%s (%s)" % (h, os.path.relpath(f, ROOT)))
        continue
    if path.startswith(CUDA_HOME):
        continue
    pkg = owner(path)
    hpkgs.setdefault(pkg, []).append(h)
check(not missing, "every <header> of the run sources is found (%s)" % ", ".join(missing))
check(len(hpkgs) >= 5, "%d headers of the run sources, from %d packages" %
      (sum(map(len, hpkgs.values())), len(hpkgs)))
for pkg, hs in sorted(hpkgs.items(), key=lambda t: str(t[0])):
    ok = pkg in run_closure or pkg in base_closure
    check(ok, "<%s>%s from %s, %s" % (hs[0], " and %d more" % (len(hs) - 1) if len(hs) > 1 else "",
              pkg, "a run package or one they depend on" if ok else where(pkg)))
finish()
