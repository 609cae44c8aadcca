/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The user-stack frame words every stack producer emits (on-CPU, off-CPU, CUDA uprobes, CUPTI
 * launches) and the symbolizer reads: an array of __u64, innermost first. A native frame is its
 * address (< 2^47); a special word has its top byte set. Includes nothing: the includer supplies
 * __u64 (vmlinux.h in BPF, <linux/types.h> in user space).
 *
 * Contract between the native walker (unwind.bpf.h) and the CPython walker (python.bpf.h):
 *   GPUSCOPE_FRAME_PY(code_addr), then ONE more word: the instruction offset in that code
 *     object (unit chosen by the Python side). Symbolized by pysym__frame().
 *   GPUSCOPE_FRAME_TRUNCATED | reason: the walk stopped early; the last word of a stack.
 *   GPUSCOPE_FRAME_PY_UNKNOWN: a Python frame that could not be read ("[python]").
 */
#ifndef GPUSCOPE_UNWIND_FRAMES_H
#define GPUSCOPE_UNWIND_FRAMES_H

#define GPUSCOPE_FRAME_TAG_SHIFT	56
#define GPUSCOPE_FRAME_TAG(w)		((w) >> GPUSCOPE_FRAME_TAG_SHIFT)
#define GPUSCOPE_FRAME_PAYLOAD(w)	((w) & ((1ULL << GPUSCOPE_FRAME_TAG_SHIFT) - 1))
#define GPUSCOPE_FRAME_TAG_PY		0xf1
#define GPUSCOPE_FRAME_TAG_TRUNCATED	0xf2
#define GPUSCOPE_FRAME_TAG_PY_UNKNOWN	0xf3
#define GPUSCOPE_FRAME_TAG_NOT_WALKED	0xf4	/* a stack not walked; payload: why */

#define GPUSCOPE_FRAME_PY(code_addr)	((0xf1ULL << 56) | (code_addr))
#define GPUSCOPE_FRAME_TRUNCATED	(0xf2ULL << 56)
#define GPUSCOPE_FRAME_PY_UNKNOWN	(0xf3ULL << 56)
#define GPUSCOPE_FRAME_NOT_WALKED	(0xf4ULL << 56)	/* a short CUDA call, not in the sample */
#define GPUSCOPE_FRAME_NOT_WALKED_BUSY	(GPUSCOPE_FRAME_NOT_WALKED | 1)	/* past the thread's walks */

/* True for a word that is not a native address. */
#define GPUSCOPE_FRAME_IS_SPECIAL(w)	(GPUSCOPE_FRAME_TAG(w) >= 0xf0)

/* Why a walk stopped early: the low bits of GPUSCOPE_FRAME_TRUNCATED. Counted per reason. */
enum gpuscope_trunc {
	GPUSCOPE_TRUNC_DEPTH = 1,	/* GPUSCOPE_MAX_STACK frames reached */
	GPUSCOPE_TRUNC_UNMAPPED,	/* next PC outside every executable mapping the agent knows */
	GPUSCOPE_TRUNC_READ,		/* reading the user stack faulted (paged out, freed, exited) */
	GPUSCOPE_TRUNC_NO_PROC,		/* process not (yet) known to the unwinder: frame pointers */
	GPUSCOPE_TRUNC_BAD_FRAME,	/* CFA or frame pointer went the wrong way (corrupt stack) */
	GPUSCOPE_TRUNC_UNSUPPORTED,	/* CFI rule the walker cannot follow */
	GPUSCOPE_TRUNC_PYTHON,		/* the Python walk gave up (python.bpf.h counts why) */
	GPUSCOPE_TRUNC_MAX,
};

#endif
