/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Python side of stack symbolization: a GPUSCOPE_FRAME_PY word and its offset word (frames.h)
 * become a location. Implemented by the CPython walker's user-space part (python.c).
 */
#ifndef GPUSCOPE_UNWIND_PYSYM_H
#define GPUSCOPE_UNWIND_PYSYM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct location;

/*
 * Fills *ret (function: qualified name, file, line; module e.g. "[python]") for the code object
 * at code_addr in process pid at instruction offset `offset` (as python.bpf.h emitted it).
 * 0, or -errno when unreadable (the caller then shows "[python]"). Strings stay valid as long
 * as the agent's symbolizer. Main-loop thread only.
 */
int pysym__frame(pid_t pid, uint64_t code_addr, uint64_t offset, struct location *ret);

/*
 * True when addr, an unnamed native frame of process pid (unresolved, or module+0xSTART), is
 * the Python interpreter's own, which the stack cache leaves out (python.h, python__internal()).
 */
bool pysym__elide(pid_t pid, uint64_t addr);

#endif
