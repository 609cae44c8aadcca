/* SPDX-License-Identifier: GPL-2.0 */
/*
 * CPython hook of the native walker (unwind.bpf.h): placeholder until the CPython walker lands;
 * it finds no interpreter, so stacks stay native. Contract (see frames.h):
 *   py_walk_init(st): once per walk; set st->eval_start/eval_end to the process's
 *     _PyEval_EvalFrameDefault range (0: no Python) and st->py[] to the walker's own state.
 *   py_emit(st): the native frame at st->pc lies in [eval_start, eval_end); push that
 *     interpreter activation's Python frames with unwind_push() (GPUSCOPE_FRAME_PY(code) then
 *     the offset word, or GPUSCOPE_FRAME_PY_UNKNOWN). The walker pushes the native frame after.
 *     Runs outside the native bpf_loop callback, so it may run its own bpf_loop.
 */
#ifndef GPUSCOPE_UNWIND_PYTHON_BPF_H
#define GPUSCOPE_UNWIND_PYTHON_BPF_H

static __always_inline void py_walk_init(struct uwalk *st)
{
}

static __always_inline void py_emit(struct uwalk *st)
{
}

#endif
