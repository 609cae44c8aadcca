#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python-only flame graph (issue 35, item 5) through a real server: view=python folds the
interpreter's own frames (libpython's, the python executable's) that have any other frame below
them, so the user's Python functions sit adjacent and native code a Python function calls
(BLAS) right under it; the interpreter's frames at the leaf, where the time went
(PyObject_Malloc), stay; a stack without
Python frames is untouched; view=raw (the default) keeps every frame; a bad view is 400. Also
`gpuscope flamegraph --python-only` asks for it."""
import os
import subprocess
import urllib.parse

from gpuscope_server import ROOT, Server, check, encode, now_ns, run_test, running, \
    skip_if_unbuilt

skip_if_unbuilt()
CLI = os.path.join(ROOT, ".output", "gpuscope")
LP, PY = "!libpython3.12.so.1.0", "![python]"
STACK = ";".join(["_start!/usr/bin/python3.12", "__libc_start_main!libc.so.6",
                  "Py_RunMain!/usr/bin/python3.12", "_PyEval_EvalFrameDefault" + LP,
                  "<module>" + PY, "_PyEval_EvalFrameDefault" + LP, "PyObject_Call" + LP,
                  "cfunction_call" + LP, "train_step" + PY, "_PyEval_EvalFrameDefault" + LP,
                  "_PyObject_VectorcallTstate" + LP, "tokenize" + PY, "PyObject_Malloc" + LP])
NUMPY = ";".join(["<module>" + PY, "_PyEval_EvalFrameDefault" + LP, "matmul_step" + PY,
                  "_PyEval_EvalFrameDefault" + LP, "cblas_sgemm!libopenblas.so.0"])
NATIVE = "main;work;leaf"


def path(node, names):
    """The node at root;names[0];names[1];... (direct children), or {} if absent."""
    for n in names:
        node = next((c for c in node.get("children", []) if c["name"] == n), {})
    return node


def main():
    s = Server()
    t = (now_ns() // 10**9 - 600) * 10**9
    with running(s):
        lines = ["node n1"]
        for i, st in enumerate([STACK] * 30 + [NUMPY] * 20 + [NATIVE] * 10):
            lines.append(f"sample {t + i * 10**7} cpu 1 pid=1,comm=python3 {st}")
        code, body = s.ingest(encode("\n".join(lines) + "\n"))
        check(code == 204, f"ingest {code} {body}")
        rng = f"from={(t - 10**9) / 1e9:.3f}&to={(t + 10 * 10**9) / 1e9:.3f}"
        py = s.get_json(f"/api/v1/flamegraph?{rng}&view=python")
        leaf = path(py["root"], ["__libc_start_main", "<module>", "train_step", "tokenize",
                                 "PyObject_Malloc"])
        check(leaf.get("value") == 30, f"Python frames adjacent, libc kept (the python executable's "
              f"_start folded), the leaf's allocation kept: {leaf}")
        check(path(py["root"], ["<module>", "matmul_step", "cblas_sgemm"]).get("value") == 20,
              "native code a Python function calls stays under it")
        check(path(py["root"], ["main", "work", "leaf"]).get("value") == 10, "native stacks untouched")
        check(py["total"] == 60, f"no sample lost: {py['total']}")
        raw = s.get_json(f"/api/v1/flamegraph?{rng}")
        check(path(raw["root"], ["_start", "__libc_start_main", "Py_RunMain",
                                 "_PyEval_EvalFrameDefault", "<module>"]).get("value") == 30,
              "the raw view keeps the interpreter's frames")
        check(s.get_json(f"/api/v1/flamegraph?{rng}&view=raw") == raw, "view=raw is the default")
        code, body, _ = s.request(f"/api/v1/flamegraph?{rng}&view=pyhton")
        check(code == 400 and b"view" in body, f"a bad view: {code} {body}")
        out = os.path.join(s.tmp, "py.svg")
        r = subprocess.run([CLI, "flamegraph", "--server", s.url, "--from", f"{(t - 10**9) / 1e9:.3f}",
                            "--to", f"{(t + 10 * 10**9) / 1e9:.3f}", "--python-only", "-o", out],
                           capture_output=True, text=True, timeout=30)
        svg = open(out).read() if r.returncode == 0 else ""
        check(r.returncode == 0 and "train_step" in svg and "PyObject_Call" not in svg,
              f"gpuscope flamegraph --python-only: rc {r.returncode} {r.stderr[-300:]}")


if __name__ == "__main__":
    run_test(main)
