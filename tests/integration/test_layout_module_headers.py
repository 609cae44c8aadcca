#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Agent modules never reach into each other (issue #32). The agent's parts (src/agent/):

- wiring: run.c, record.c, main.c: may use every part (they connect the modules);
- common code: the other files directly under src/agent/ (labels.c, bpfutil.c, ringdrain.c,
  agent.h, modules.h ...): may use the process layer;
- layers, each using only the layers named for it: procs/ (/proc/PID/maps, ELF, GPU processes),
  unwind/ (stack walkers: procs/), sym/ (symbolizer, stack cache: procs/, unwind/);
- modules: every other folder (cpu/, sched/, cuda/, cupti/, gpu/, meta/, push/, a new nccl/):
  may use their own folder, common code and the layers, never another module.

Checked three ways: (1) the objects' symbols: every undefined symbol of a part's object that
another agent object defines must be defined by a part it may use (nm of the built objects;
run `make` first); (2) includes: a file includes only headers of parts it may use, and never
another folder's private header (*_int.h, *_state.h), and only procs/ names /proc/PID/maps;
(3) struct agent_shared (agent.h), the modules' hand-offs: a slot is assigned only by the writer
its comment names first.
Usage: test_layout_module_headers.py [ROOT] (default: this checkout)."""
import os
import re
import subprocess
import sys

WIRING = {"run.c", "record.c", "main.c"}
LAYERS = {"procs": set(), "unwind": {"procs"}, "sym": {"procs", "unwind"}}
COMMON_USES = {"procs"}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
MAPS = re.compile(r'"/proc/[^"]*/maps"')	# "/proc/%d/maps", "/proc/self/maps"
PRIVATE = re.compile(r"_(int|state)\.h$")


def part_of(rel):
    """The part of a path relative to src/agent/: a folder name, 'common' or 'wiring'."""
    p = rel.split(os.sep)
    if len(p) > 1:
        return p[0]
    return "wiring" if p[0] in WIRING else "common"


def may_use(user, used):
    if user == used or user == "wiring" or used == "common":
        return True
    if user == "common":
        return used in COMMON_USES
    if user in LAYERS:
        return used in LAYERS[user]
    return used in LAYERS	# a module: the layers, never another module (nor the wiring)


def sources(agent):
    for dirpath, _, names in os.walk(agent):
        for n in sorted(names):
            if n.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(dirpath, n), agent)


def check_includes(root, agent):
    fail = files = 0
    for rel in sources(agent):
        files += 1
        user = part_of(rel)
        path = os.path.join(agent, rel)
        text = open(path, encoding="utf-8", errors="replace").read()
        if user != "procs" and MAPS.search(text):
            print(f"FAIL src/agent/{rel} reads /proc/PID/maps itself: ask procs/maps.h")
            fail = 1
        for inc in INCLUDE.findall(text):
            full = os.path.normpath(os.path.join(os.path.dirname(path), inc)) \
                if inc.startswith(".") else os.path.normpath(os.path.join(root, "src", inc))
            irel = os.path.relpath(full, agent)
            if irel.startswith(".."):
                continue	# common/, generated skeletons, system headers
            used = part_of(irel)
            if used != user and PRIVATE.search(irel):
                print(f"FAIL src/agent/{rel} includes {inc}, a private header of {used}/")
                fail = 1
            elif not may_use(user, used):
                print(f"FAIL src/agent/{rel} ({user}) includes {inc}: {used} is another "
                      "module; what modules share goes through struct agent_shared (agent.h)")
                fail = 1
    return fail, files


def nm(objs, args):
    """{object: [fields of each line]} from one nm run over every object"""
    out = subprocess.run(["nm", "-A", *args, *objs], check=True, capture_output=True,
                         text=True).stdout
    res = {o: [] for o in objs}
    for line in out.splitlines():
        obj, _, rest = line.partition(":")
        if rest.strip():
            res.setdefault(obj, []).append(rest.split())
    return res


def check_symbols(root, agent):
    """(failures, cross-part references checked)"""
    objs = {}
    for rel in sources(agent):
        if not rel.endswith(".c") or rel.endswith(".bpf.c"):
            continue
        obj = os.path.join(root, ".output", "obj", "src", "agent", rel[:-2] + ".o")
        if not os.path.exists(obj):
            print(f"FAIL {os.path.relpath(obj, root)} missing: run make first")
            return 1, 0
        objs[rel] = obj
    defined = {}
    files = list(objs.values())
    defs, undefs = nm(files, ["-g", "--defined-only"]), nm(files, ["-u"])
    for rel, obj in objs.items():
        for f in defs[obj]:
            if len(f) == 3 and f[1] in "TDBRVWCG":
                defined.setdefault(f[2], rel)
    fail = checked = 0
    for rel, obj in sorted(objs.items()):
        user = part_of(rel)
        for f in undefs[obj]:
            sym = f[-1]
            if sym not in defined:
                continue	# src/common, libraries
            used = part_of(defined[sym])
            if used == user:
                continue
            checked += 1
            if not may_use(user, used):
                print(f"FAIL src/agent/{rel} ({user}) calls {sym}() of src/agent/"
                      f"{defined[sym]} ({used}): modules never call each other; publish it "
                      "through struct agent_shared (agent.h), wired by run.c")
                fail = 1
    return fail, checked


SLOT = re.compile(r"\bshared\s*\.\s*(\w+)\s*=[^=]")


def check_shared_writers(root, agent):
    """Each struct agent_shared slot is assigned only by the writer its comment names first."""
    text = open(os.path.join(agent, "agent.h"), encoding="utf-8").read()
    m = re.search(r"struct agent_shared \{(.*?)\n\};", text, re.S)
    if not m:
        print("FAIL agent.h has no struct agent_shared")
        return 1
    writers, writer = {}, None
    for comment, decl in re.findall(r"(/\*.*?\*/)|([^;/]+;)", m.group(1), re.S):
        if comment:
            w = re.match(r"/\*[\s*]*([\w.]+):", comment)
            if w and writer is None:
                writer = w.group(1)
            continue
        name = (re.search(r"\(\s*\*\s*(\w+)\s*\)", decl) or
                re.search(r"(\w+)\s*(?:\[[^]]*\])?;", decl))
        if writer is None:
            print(f"FAIL agent.h: slot '{name.group(1)}' names no writer")
            return 1
        writers[name.group(1)] = writer
        writer = None
    if len(writers) < 5:
        print(f"FAIL agent.h: only {len(writers)} slots of struct agent_shared parsed")
        return 1
    fail = 0
    for rel in sources(agent):
        src = open(os.path.join(agent, rel), encoding="utf-8", errors="replace").read()
        for slot in SLOT.findall(src):
            want = writers.get(slot)
            who = rel.split(os.sep)[0]
            if want is None:
                print(f"FAIL src/agent/{rel} assigns shared.{slot}, not a slot of agent.h")
                fail = 1
            elif who != want:
                print(f"FAIL src/agent/{rel} assigns shared.{slot}, whose writer is {want}")
                fail = 1
    return fail


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    root = os.path.abspath(root)
    agent = os.path.join(root, "src", "agent")
    fail, files = check_includes(root, agent)
    if files < 20:
        print(f"FAIL only {files} files under src/agent/: wrong root?")
        fail = 1
    f, checked = check_symbols(root, agent)
    fail |= f
    # the layers alone make dozens of references: none seen means nm read nothing
    if checked < 20:
        print(f"FAIL only {checked} references between the agent's parts: objects not read?")
        fail = 1
    fail |= check_shared_writers(root, agent)
    print(f"{files} files of the agent checked, {checked} calls between its parts")
    return fail


if __name__ == "__main__":
    sys.exit(main())
